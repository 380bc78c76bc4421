"""goloop serve: the HTTP side of the ASGI spec beyond the plain exchange (goloop/httpserver/spec.go):
Expect: 100-continue, response trailers (HTTP/1.1 and HTTP/2), http.response.pathsend (and
Starlette's FileResponse over it), the lingering close after an error answer, the bound on
output held behind a pipelined response, 426 for an unknown WebSocket version."""
import asyncio
import hashlib
import os
import socket
import threading
import time

import pytest

from test_serve_http import connect, get, read_response, serving

h2 = pytest.importorskip("h2")
httpx = pytest.importorskip("httpx")
import h2.events  # noqa: E402

from test_serve_h2_tls import RawH2, tls_options  # noqa: E402 (certs: conftest's fixture)

# every test with both connection drivers (conftest.py)
pytestmark = pytest.mark.usefixtures("serve_readers")

ERRORS: list = []


def recv_until(sock, marker, limit=1 << 20):
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        assert len(data) < limit
    return data


# ---------- Expect: 100-continue ----------

async def echo_app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/noread":
        await send({"type": "http.response.start", "status": 403, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})
        return
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"got " + body})


def test_expect_100_continue_sent_when_the_app_reads():
    with serving(echo_app) as server:
        s = connect(server)
        s.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        first = recv_until(s, b"\r\n\r\n")
        assert first == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(b"hello")
        status, headers, body = read_response(s.makefile("rb"))
        assert status == 200 and body == b"got hello"
        # the connection stays usable (no 100 for a request without Expect)
        s.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
        assert read_response(s.makefile("rb"))[2] == b"got ok"
        s.close()


def test_expect_100_continue_not_sent_if_the_app_answers_without_reading():
    with serving(echo_app) as server:
        s = connect(server)
        s.sendall(b"POST /noread HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        f = s.makefile("rb")
        status, headers, body = read_response(f)
        assert status == 403 and body == b"no"
        assert headers.get("connection") == "close"  # the unsent body cannot be skipped
        assert f.read() == b""  # closed cleanly
        s.close()


def test_expect_100_continue_ignored_for_http10_and_sent_body():
    with serving(echo_app) as server:
        s = connect(server)
        s.sendall(b"POST /e HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab")
        data = s.makefile("rb").read()
        assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"got ab")
        s.close()
        # a client that sends the body at once gets no 100
        s = connect(server)
        s.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\ncd")
        status, _, body = read_response(s.makefile("rb"))
        assert status == 200 and body == b"got cd"
        s.close()


@pytest.mark.serve_one_driver  # HTTP/2: the goroutine driver's
def test_h2_expect_100_continue():
    with serving(echo_app) as server:  # /noread answers without reading
        c = RawH2(server.port)
        for sid, path in ((1, "/read"), (3, "/noread")):
            c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                      (":authority", "x"), ("expect", "100-continue")])
            c.flush()
            info, status, body, ended = [], None, b"", False
            while not ended:
                for ev in c.events():
                    if getattr(ev, "stream_id", None) != sid:
                        continue
                    if isinstance(ev, h2.events.InformationalResponseReceived):
                        info.append(dict(ev.headers)[b":status"])
                        c.conn.send_data(sid, b"abc", end_stream=True)  # the client waited for it
                        c.flush()
                    elif isinstance(ev, h2.events.ResponseReceived):
                        status = dict(ev.headers)[b":status"]
                    elif isinstance(ev, h2.events.DataReceived):
                        body += ev.data
                        c.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                    elif isinstance(ev, h2.events.StreamEnded):
                        ended = True
            if path == "/read":
                assert info == [b"100"] and status == b"200" and body == b"got abc"
            else:  # answered without reading: no 100
                assert info == [] and status == b"403" and body == b"no"
        c.close()


# ---------- trailers ----------

async def trailers_app(scope, receive, send):
    if scope["type"] != "http":
        return
    try:
        assert "http.response.trailers" in scope["extensions"]
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/bad":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            try:
                await send({"type": "http.response.trailers", "headers": []})
            except RuntimeError as exc:
                ERRORS.append(str(exc))
            await send({"type": "http.response.body", "body": b"x"})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"trailer", b"x-checksum, x-more")],
                    "trailers": True})
        await send({"type": "http.response.body", "body": b"part1-", "more_body": True})
        await send({"type": "http.response.body", "body": b"part2"})
        try:
            await send({"type": "http.response.body", "body": b"late"})
        except RuntimeError as exc:
            ERRORS.append(str(exc))
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", b"abc")],
                    "more_trailers": True})
        await send({"type": "http.response.trailers", "headers": [(b"x-more", b"1")]})
    except BaseException as exc:
        ERRORS.append(repr(exc))
        raise


def read_chunked_with_trailers(f):
    line = f.readline()
    status = int(line.split()[1])
    headers = {}
    while (line := f.readline()) != b"\r\n":
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    assert headers["transfer-encoding"] == "chunked"
    body = b""
    while True:
        size = int(f.readline().strip(), 16)
        if size == 0:
            break
        body += f.read(size)
        assert f.read(2) == b"\r\n"
    trailers = {}
    while (line := f.readline()) != b"\r\n":
        k, v = line.decode().split(":", 1)
        trailers[k.strip().lower()] = v.strip()
    return status, headers, body, trailers


def test_trailers_http11_with_te_trailers():
    ERRORS.clear()
    with serving(trailers_app) as server:
        s = connect(server)
        f = s.makefile("rb")
        for _ in range(2):  # keep-alive: the second request on the same connection
            s.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n")
            status, headers, body, trailers = read_chunked_with_trailers(f)
            assert status == 200 and body == b"part1-part2"
            assert trailers == {"x-checksum": "abc", "x-more": "1"}
        s.close()
    assert len(ERRORS) == 2 and "after response already completed" in ERRORS[0], ERRORS


def test_trailers_dropped_without_te_trailers():
    ERRORS.clear()
    with serving(trailers_app) as server:
        s = connect(server)
        f = s.makefile("rb")
        for _ in range(2):
            s.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body = read_response(f)
            assert status == 200 and body == b"part1-part2"
        # the chunked body ended without a trailer section: the next response follows at once
        s.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(f)[2] == b"part1-part2"
        s.close()
        status, _, body = get(server, "/bad")
        assert status == 200 and body == b"x"
    assert any("without 'trailers': True" in e for e in ERRORS), ERRORS


@pytest.mark.serve_one_driver  # HTTP/2: the goroutine driver's
def test_trailers_http2():
    with serving(trailers_app) as server:
        c = RawH2(server.port)
        c.headers(1, "/t", method="GET")
        c.flush()
        body, trailers, ended = b"", None, False
        while not ended:
            for ev in c.events():
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    c.conn.acknowledge_received_data(ev.flow_controlled_length, 1)
                elif isinstance(ev, h2.events.TrailersReceived):
                    trailers = dict(ev.headers)
                    assert ev.stream_ended is not None
                elif isinstance(ev, h2.events.StreamEnded):
                    ended = True
        c.close()
    assert body == b"part1-part2"
    assert trailers == {b"x-checksum": b"abc", b"x-more": b"1"}


# ---------- http.response.pathsend ----------

@pytest.fixture(scope="module")
def bigfile(tmp_path_factory):
    p = tmp_path_factory.mktemp("pathsend") / "big.bin"
    data = os.urandom(5 * 1024 * 1024 + 123)
    p.write_bytes(data)
    return str(p), hashlib.sha256(data).hexdigest(), len(data)


def starlette_file_app(path, sent_types):
    starlette = pytest.importorskip("starlette")  # noqa: F841
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, PlainTextResponse
    from starlette.routing import Route

    async def file(request):
        return FileResponse(path)

    async def hello(request):
        return PlainTextResponse("hello")

    inner = Starlette(routes=[Route("/file", file, methods=["GET", "HEAD"]), Route("/hello", hello)])

    async def app(scope, receive, send):
        if scope["type"] == "http":
            assert "http.response.pathsend" in scope["extensions"]

        async def recording_send(m):
            sent_types.append(m["type"])
            await send(m)

        await inner(scope, receive, recording_send)
    return app


def test_pathsend_starlette_file_response(bigfile):
    path, sha, size = bigfile
    sent = []
    with serving(starlette_file_app(path, sent)) as server:
        with httpx.Client(timeout=30) as c:
            r = c.get(f"http://127.0.0.1:{server.port}/file")
            assert r.status_code == 200 and int(r.headers["content-length"]) == size
            assert hashlib.sha256(r.content).hexdigest() == sha
            r = c.head(f"http://127.0.0.1:{server.port}/file")
            assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) == size
            assert c.get(f"http://127.0.0.1:{server.port}/hello").text == "hello"  # same connection
        # pipelined: the file, then a small response, in order on one connection
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(b"GET /file HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /file HTTP/1.1\r\nHost: x\r\n\r\n")
        f = s.makefile("rb")
        st1, _, b1 = read_response(f)
        st2, _, b2 = read_response(f)
        st3, _, b3 = read_response(f)
        s.close()
        assert (st1, st2, st3) == (200, 200, 200) and b2 == b"hello"
        assert hashlib.sha256(b1).hexdigest() == sha and hashlib.sha256(b3).hexdigest() == sha
    assert "http.response.pathsend" in sent  # Starlette used the extension: Python read no file


@pytest.mark.serve_one_driver  # TLS: the goroutine driver's
def test_pathsend_tls_and_h2(bigfile, certs):  # noqa: F811
    path, sha, size = bigfile
    sent = []
    app = starlette_file_app(path, sent)

    async def main(port):
        async with httpx.AsyncClient(http2=True, verify=certs.client_context(), timeout=30) as c:
            r = await c.get(f"https://localhost:{port}/file")
            assert r.http_version == "HTTP/2" and hashlib.sha256(r.content).hexdigest() == sha
        async with httpx.AsyncClient(verify=certs.client_context(), timeout=30) as c:
            r = await c.get(f"https://localhost:{port}/file")
            assert r.http_version == "HTTP/1.1" and hashlib.sha256(r.content).hexdigest() == sha

    with serving(app, **tls_options(certs)) as server:
        asyncio.run(asyncio.wait_for(main(server.port), 60))
    assert sent.count("http.response.pathsend") == 2


def test_pathsend_errors(tmp_path):
    results = []
    small = tmp_path / "s.txt"
    small.write_bytes(b"0123456789")

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/missing":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            try:
                await send({"type": "http.response.pathsend", "path": str(tmp_path / "nope")})
            except OSError as exc:
                results.append(type(exc).__name__)
            await send({"type": "http.response.body", "body": b"fallback"})
            return
        # chunked framing (several parts), then the file as the rest of the body
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"head-", "more_body": True})
        await send({"type": "http.response.pathsend", "path": str(small)})
        try:
            await send({"type": "http.response.body", "body": b"late"})
        except RuntimeError:
            results.append("late refused")

    with serving(app) as server:
        assert get(server, "/missing")[2] == b"fallback"
        status, headers, body = get(server, "/chunked")
        assert headers.get("transfer-encoding") == "chunked" and body == b"head-0123456789"
    assert results == ["FileNotFoundError", "late refused"]


# ---------- http.response.zerocopysend ----------

SMALL = b"0123456789abcdef"


def zerocopy_app(small, big, record):
    """Each path sends files with zerocopysend in one way; record gets what the app saw
    (file positions, errors)."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        record.setdefault("extensions", scope["extensions"])
        if path == "/early":  # before http.response.start: refused; no response is a 500
            with open(small, "rb") as f:
                try:
                    await send({"type": "http.response.zerocopysend", "file": f})
                except RuntimeError as exc:
                    record["early"] = str(exc)
            return
        if path == "/pipe":
            r, w = os.pipe()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            try:
                await send({"type": "http.response.zerocopysend", "file": r})
            except Exception as exc:
                record["pipe"] = type(exc).__name__
            finally:
                os.close(r)
                os.close(w)
            await send({"type": "http.response.body", "body": b"fallback"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if path == "/offset":  # explicit offset: the descriptor's position stays
            fd = os.open(small, os.O_RDONLY)
            os.lseek(fd, 9, os.SEEK_SET)
            await send({"type": "http.response.zerocopysend", "file": fd, "offset": 2, "count": 5})
            record["offset"] = os.lseek(fd, 0, os.SEEK_CUR)
            os.close(fd)  # at once: the server sends from its own duplicate
        elif path == "/position":  # no offset: from the position, which moves past the part
            fd = os.open(small, os.O_RDONLY)
            os.lseek(fd, 3, os.SEEK_SET)
            await send({"type": "http.response.zerocopysend", "file": fd, "count": 4, "more_body": True})
            record["position"] = [os.lseek(fd, 0, os.SEEK_CUR)]
            await send({"type": "http.response.zerocopysend", "file": fd, "more_body": True})
            record["position"].append(os.lseek(fd, 0, os.SEEK_CUR))
            os.close(fd)
            await send({"type": "http.response.body", "body": b"-end"})
        elif path == "/fileobj":  # a buffered file object: its own position (tell/seek)
            with open(small, "rb") as f:
                f.read(2)
                await send({"type": "http.response.zerocopysend", "file": f, "count": 3})
                record["fileobj"] = [f.tell(), f.read(1)]
        else:  # /big, HEAD /big: the whole file, content-length framing
            with open(big, "rb") as f:
                await send({"type": "http.response.zerocopysend", "file": f})

    return app


def test_zerocopysend_framing_offsets_and_positions(tmp_path, bigfile):
    big, sha, size = bigfile
    small = tmp_path / "small.bin"
    small.write_bytes(SMALL)
    record = {}
    with serving(zerocopy_app(str(small), big, record)) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(b"".join(b"%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (m, p) for m, p in (
            (b"GET", b"/offset"), (b"GET", b"/position"), (b"GET", b"/fileobj"), (b"GET", b"/big"),
            (b"HEAD", b"/big"), (b"GET", b"/pipe"))))
        f = s.makefile("rb")
        st, h, body = read_response(f)
        assert (st, h["content-length"], body) == (200, "5", b"23456")
        st, h, body = read_response(f)
        assert h["transfer-encoding"] == "chunked" and body == SMALL[3:7] + SMALL[7:] + b"-end"
        st, h, body = read_response(f)
        assert (h["content-length"], body) == ("3", b"234")
        st, h, body = read_response(f)
        assert int(h["content-length"]) == size and hashlib.sha256(body).hexdigest() == sha
        assert f.readline().startswith(b"HTTP/1.1 200")  # HEAD: no body (the next response follows)
        while f.readline() not in (b"\r\n", b""):
            pass
        st, h, body = read_response(f)
        assert body == b"fallback"
        s.close()
        assert get(server, "/early")[0] == 500
    assert "http.response.zerocopysend" in record["extensions"]
    assert record["offset"] == 9
    assert record["position"] == [7, len(SMALL)]
    assert record["fileobj"] == [5, b"5"]
    assert record["pipe"] == "RuntimeError"
    assert "'http.response.zerocopysend'" in record["early"]


def test_zerocopysend_h2c_and_not_offered_on_tls(tmp_path, certs):  # noqa: F811
    """HTTP/2 (h2c prior knowledge) reads the file and sends it as DATA; TLS does not offer
    the extension (it could not be zero-copy)."""
    small = tmp_path / "small.bin"
    small.write_bytes(SMALL)
    record = {}
    with serving(zerocopy_app(str(small), str(small), record)) as server:
        with httpx.Client(http1=False, http2=True, timeout=30) as c:
            r = c.get(f"http://127.0.0.1:{server.port}/position")
            assert r.http_version == "HTTP/2" and r.content == SMALL[3:] + b"-end"
            r = c.get(f"http://127.0.0.1:{server.port}/offset")
            assert r.content == b"23456"
    assert record["position"] == [7, len(SMALL)] and record["offset"] == 9
    record.clear()
    with serving(zerocopy_app(str(small), str(small), record), **tls_options(certs)) as server:
        with httpx.Client(verify=certs.client_context(), timeout=30) as c:
            assert c.get(f"https://localhost:{server.port}/big").content == SMALL
    assert "http.response.zerocopysend" not in record["extensions"]


# ---------- the engine's own HTTP/1.1 behaviours ----------

def test_lingering_close_after_400():
    """A client still sending when the server answers 400 reads the 400, not a reset."""
    with serving(echo_app) as server:
        for _ in range(3):
            s = connect(server)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n")
            time.sleep(0.1)  # the server answered and closed (or lingers)
            junk = b"x" * (1 << 16)
            for _ in range(32):  # 2 MiB more: the server must read and drop it, not reset
                s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            data = s.makefile("rb").read()
            s.close()
            assert data.startswith(b"HTTP/1.1 400 "), data[:100]


def test_pipelined_output_held_is_bounded():
    calls = []
    release = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        calls.append(scope["path"])
        if scope["path"] == "/slow":
            while not release.is_set():
                await asyncio.sleep(0.01)
        body = b"b" * (512 * 1024) if scope["path"] == "/big" else b"slow"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    with serving(app) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(12):
            time.sleep(0.05)
            s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)
        held = len(calls)
        release.set()
        f = s.makefile("rb")
        bodies = [read_response(f)[2] for _ in range(13)]
        s.close()
    # 1 MiB of output behind /slow stops the reading: a few requests, not all 13
    assert held <= 6, calls
    assert bodies[0] == b"slow" and all(len(b) == 512 * 1024 for b in bodies[1:])
    assert len(calls) == 13


def test_websocket_other_version_426():
    with serving(echo_app) as server:
        s = connect(server)
        s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n")
        status, headers, _ = read_response(s.makefile("rb"))
        s.close()
    assert status == 426 and headers["sec-websocket-version"] == "13"
