"""What goloop serve logs and the errors it reports, as an operator sees them beside uvicorn:
a client that hangs up is no application error, uvicorn's error texts for responses an
application gets wrong (and the connection closed after them), one-line start failures with
exit code 1, --help, the process lines and the access line."""
import logging
import os
import re
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import goloop
from goloop.serve import config as _serve_config
from nethelpers import free_port, interrupt, wait_listening
from test_serve_http import PYSHIM, read_response, serving
from test_serve_runner import _Records

STREAM_APP = textwrap.dedent("""
    import asyncio
    live = 0

    async def plain(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:  # until send() raises: the client went away
            await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})

    try:
        from starlette.responses import StreamingResponse
    except ImportError:
        StreamingResponse = None

    async def chunks():
        while True:
            yield b"y" * 65536
            await asyncio.sleep(0)

    async def app(scope, receive, send):
        global live
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path in ("/plain", "/starlette"):
            live += 1
            try:
                if path == "/plain":
                    await plain(scope, receive, send)
                else:
                    await StreamingResponse(chunks())(scope, receive, send)
            finally:
                live -= 1
            return
        body = str(live).encode() if path == "/live" else b"ok"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
""")


def _start(tmp_path, *args):
    (tmp_path / "streamapp.py").write_text(STREAM_APP)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    p = subprocess.Popen([sys.executable, "-P", "-m", "goloop", "serve", "streamapp:app", "--port", str(port),
                          "--app-dir", str(tmp_path), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env)
    wait_listening(p, port, "goloop serve")
    return p, port


def _reset_mid_response(port, path):
    """A client that reads the start of the response and resets the connection (SO_LINGER 0)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    assert s.recv(1024).startswith(b"HTTP/1.1 200")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _get(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
        return read_response(s.makefile("rb"))
    finally:
        s.close()


@pytest.mark.parametrize("access_log", [True, False], ids=["access-log", "no-access-log"])
def test_clients_that_reset_mid_response_are_no_errors(tmp_path, access_log):
    """Clients reset mid-response, with a plain ASGI app (goloop.ClientDisconnected out of
    send()) and with Starlette's StreamingResponse: no ERROR, no traceback (uvicorn logs
    nothing either), and the process lines and access lines an operator greps for."""
    paths = ["/plain"] + (["/starlette"] if _has_starlette() else [])
    p, port = _start(tmp_path, *([] if access_log else ["--no-access-log"]))
    try:
        for path in paths:
            for _ in range(10):
                _reset_mid_response(port, path)
        deadline = time.monotonic() + 60
        while _get(port, "/live")[2] != b"0":  # every streaming application has ended
            assert time.monotonic() < deadline, "the applications did not end"
            time.sleep(0.05)
    finally:
        out = interrupt(p)
    assert p.returncode == 0, out
    assert "ERROR" not in out and "Traceback" not in out, out
    pid = p.pid
    lines = [line for line in out.splitlines() if "process [" in line or "application startup" in line
             or "Application startup" in line]
    assert lines == [f"INFO:     Started server process [{pid}]", "INFO:     Waiting for application startup.",
                     "INFO:     Application startup complete.", f"INFO:     Finished server process [{pid}]"], out
    access = [line for line in out.splitlines() if '"GET ' in line]
    if not access_log:
        assert access == [], out
        return
    assert re.fullmatch(r'INFO:     127\.0\.0\.1:\d+ - "GET /plain HTTP/1\.1" 200 OK', access[0]), access
    assert re.fullmatch(r'INFO:     127\.0\.0\.1:\d+ - "GET /live HTTP/1\.1" 200 OK', access[-1]), access


def _has_starlette():
    try:
        import starlette  # noqa: F401
    except ImportError:
        return False
    return True


def test_client_disconnected_is_goloops_exported_oserror():
    """goloop.ClientDisconnected is the class send() raises once the client went away, an
    OSError (ASGI 2.4), and naming it does not load the Go engine (fork safety)."""
    code = ("import sys, goloop; c = goloop.ClientDisconnected; assert issubclass(c, OSError); "
            "assert 'goloop._goloop' not in sys.modules")
    subprocess.run([sys.executable, "-P", "-c", code], check=True, env=dict(os.environ, PYTHONPATH=PYSHIM),
                   timeout=60)
    from goloop import _goloop

    assert _goloop.ClientDisconnected is goloop.ClientDisconnected
    assert "ClientDisconnected" in goloop.__all__


async def _wrong_app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/none":
        return
    if path == "/raise":
        raise ValueError("boom")
    if path == "/incomplete":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        return
    if path == "/raise-after":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        raise ValueError("boom after")
    clen = {"/short": b"10", "/long": b"2"}.get(path)
    if clen is None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"fine"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", clen)]})
    await send({"type": "http.response.body", "body": b"abc"})


def _exchange(port, path):
    """GET path on a keep-alive connection: (status, headers, body, closed after it)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        f = s.makefile("rb")
        line = f.readline()
        status = int(line.split()[1])
        headers = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            k, v = line.decode("latin-1").split(":", 1)
            headers[k.strip().lower()] = v.strip()
        rest = f.read()  # to the end: the server must close the connection
        return status, headers, rest
    finally:
        s.close()


@pytest.mark.parametrize("access_log", [True, False], ids=["access-log", "no-access-log"])
def test_uvicorns_error_texts_and_the_connection_closed(access_log):
    """The responses an application gets wrong are logged at ERROR with uvicorn's texts and
    their connection closes (its framing is broken, or the application's state for it is
    unknown): returned without starting a response (500), without completing it, a body
    shorter or longer than its Content-Length, an exception (500, connection: close), and an
    exception after a complete response (the connection closes after it)."""
    h = _Records()
    log = logging.getLogger("goloop.error")
    log.addHandler(h)
    try:
        # (a keep-alive timeout longer than the socket's: only the server's close ends a read)
        with serving(_wrong_app, access_log=access_log, timeout_keep_alive=300) as server:
            got = {path: _exchange(server.port, path) for path in
                   ("/none", "/raise", "/incomplete", "/short", "/long", "/raise-after")}
    finally:
        log.removeHandler(h)
    for path in ("/none", "/raise"):
        st, hdrs, rest = got[path]
        assert (st, hdrs.get("connection"), rest) == (500, "close", b"Internal Server Error"), path
    assert got["/incomplete"][2] == b"3\r\nabc\r\n"  # cut: no last chunk, then the end of the connection
    assert got["/short"][2] == b"abc"
    assert got["/long"][2] == b""
    # raised after a complete response: the connection closes after it (uvicorn's close)
    assert got["/raise-after"][:3:2] == (200, b"done")
    msgs = [(r.levelno, r.getMessage(), r.exc_info[1] if r.exc_info else None) for r in h.records
            if r.levelno >= logging.WARNING]
    texts = [m for _, m, _ in msgs]
    assert all(level == logging.ERROR for level, _, _ in msgs), msgs
    assert "ASGI callable returned without starting response." in texts
    assert "ASGI callable returned without completing response." in texts
    excs = [str(e) for _, m, e in msgs if m.startswith("Exception in ASGI application")]
    assert sorted(excs) == sorted(["boom", "boom after", "Response content shorter than Content-Length",
                                   "Response content longer than Content-Length"]), msgs
    assert len(msgs) == 6, msgs


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    return subprocess.run([sys.executable, "-P", "-m", "goloop", "serve", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


@pytest.mark.parametrize("target,text", [
    ("nosuchmod:app", 'Error loading ASGI app. Could not import module "nosuchmod".'),
    ("streamapp:nope", 'Error loading ASGI app. Attribute "nope" not found in module "streamapp".'),
    ("streamapp:live", "Error loading ASGI app. 'streamapp:live' is not callable"),
    ("streamapp", 'Error loading ASGI app. Import string "streamapp" must be in format "<module>:<attribute>".'),
])
def test_app_load_failure_is_one_line(tmp_path, target, text):
    (tmp_path / "streamapp.py").write_text(STREAM_APP)
    r = _cli(target, "--port", str(free_port()), "--app-dir", str(tmp_path))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("ERROR:    " + text) and r.stderr.count("\n") == 1, r.stderr


def test_port_in_use_and_bad_tls_files_are_one_line(tmp_path):
    (tmp_path / "streamapp.py").write_text(STREAM_APP)
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:  # one process, and a master of workers
        runs = [_cli("streamapp:app", "--port", str(port), "--app-dir", str(tmp_path), *workers)
                for workers in ([], ["--workers", "2"])]
    finally:
        held.close()
    for r in runs:
        assert r.returncode == 1, r.stderr
        errors = [line for line in r.stderr.splitlines() if not line.startswith("INFO:")]
        assert errors == [f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
                          "address already in use"], r.stderr
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    for cert in ("bad.pem", "missing.pem"):
        r = _cli("streamapp:app", "--port", str(free_port()), "--app-dir", str(tmp_path),
                 "--ssl-certfile", str(tmp_path / cert))
        assert r.returncode == 1, r.stderr
        errors = [line for line in r.stderr.splitlines() if not line.startswith("INFO:")]
        assert len(errors) == 1 and errors[0].startswith("ERROR:    Error loading TLS files.") \
            and cert in errors[0], r.stderr


def test_help_gives_every_option_a_text_and_its_default():
    p = _serve_config.parser()
    opts = [a for a in p._actions if a.option_strings and a.dest != "help"]
    assert len(opts) > 40
    for a in opts:
        assert a.help and "default" in a.help and "\n" not in a.help, a.option_strings
    text = p.format_help()  # every %(default)s formats
    assert "bind the socket to this host (default: 127.0.0.1)" in " ".join(text.split())


def test_an_application_call_that_fails_at_once_is_logged_as_such():
    """An application whose call itself raises (a plain function, not a coroutine function)
    is logged as any application exception, not as an "Exception ignored" unraisable, and
    answered 500 with connection: close."""
    def app(scope, receive, send):
        raise ValueError("sync boom")

    h = _Records()
    log = logging.getLogger("goloop.error")
    log.addHandler(h)
    try:
        with serving(app, lifespan="off") as server:
            st, hdrs, rest = _exchange(server.port, "/")
    finally:
        log.removeHandler(h)
    assert (st, hdrs.get("connection"), rest) == (500, "close", b"Internal Server Error")
    errs = [r for r in h.records if r.getMessage().startswith("Exception in ASGI application")]
    assert len(errs) == 1 and str(errs[0].exc_info[1]) == "sync boom", [r.getMessage() for r in h.records]


class _CountedWrites:
    """A text stream that counts its write calls."""

    def __init__(self):
        import io

        self.out, self.writes = io.StringIO(), 0

    def write(self, s):
        self.writes += 1
        return self.out.write(s)

    def flush(self):
        pass

    def getvalue(self):
        return self.out.getvalue()


def own_logging(monkeypatch, stream=None):
    """goloop's own logging (configure_logging, undone after the test) writing to stream
    (default: a _CountedWrites), which it returns."""
    from goloop.serve import accesslog

    root = logging.getLogger("goloop")
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "propagate", root.propagate)
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr(accesslog, "default_logging", None)
    _serve_config.configure_logging("info")
    out = _CountedWrites() if stream is None else stream
    root.handlers[0].setStream(out)
    return out


def test_access_lines_written_straight_match_logging(monkeypatch):
    """With goloop's own logging, an access line is written to its handler's stream without a
    LogRecord, the same bytes logging would write; anything of the operator's or the
    application's (a filter, a handler's level, logging.disable) sends it through logging."""
    from goloop.serve import accesslog

    out = own_logging(monkeypatch)
    h = logging.getLogger("goloop").handlers[0]
    access = logging.getLogger("goloop.access")
    records = []
    make = access.makeRecord
    monkeypatch.setattr(access, "makeRecord", lambda *a, **k: records.append(a) or make(*a, **k))
    args = ('%s - "%s %s HTTP/%s" %d %s', "10.0.0.1:5000", "GET", "/a?b=1", "1.1", 404, "Not Found")

    accesslog.info(access, *args)
    straight = out.getvalue()
    assert straight == 'INFO:     10.0.0.1:5000 - "GET /a?b=1 HTTP/1.1" 404 Not Found\n' and records == []

    seen = []
    h.addFilter(lambda r: seen.append(r.getMessage()) or True)  # the operator's filter sees it
    accesslog.info(access, *args)
    assert out.getvalue() == straight * 2 and len(records) == 1 and seen == [straight[10:-1]]
    h.filters.clear()

    h.setLevel(logging.WARNING)
    accesslog.info(access, *args)
    h.setLevel(logging.NOTSET)
    logging.disable(logging.INFO)
    try:
        accesslog.info(access, *args)
    finally:
        logging.disable(logging.NOTSET)
    assert out.getvalue() == straight * 2
    accesslog.info(access, "%s", "plain")
    assert out.getvalue().endswith("\nINFO:     plain\n") and len(records) == 2


def test_wsgi_pool_threads_access_lines_are_written_by_the_loop(monkeypatch):
    """A WSGI server's pool threads leave their access lines to the server's loop, which
    writes those ended before it runs at once: every line once, fewer writes than half the
    lines for 64 pipelined requests, none left at the end."""
    out = own_logging(monkeypatch)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    n = 64
    with serving(app, interface="wsgi", access_log=True, lifespan="off") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
            c.sendall(b"".join(b"GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n)))
            got = b""
            while got.count(b"\r\n\r\nok") < n:
                chunk = c.recv(65536)
                assert chunk, got[-200:]
                got += chunk
    lines = [ln for ln in out.getvalue().splitlines() if '"GET /p' in ln]
    # (each once; in the order the threads ended them, which a free-threaded build runs at once)
    assert sorted(ln.split('"GET /p', 1)[1].split(" ", 1)[0] for ln in lines) == sorted(map(str, range(n))), lines
    assert all(ln.startswith("INFO:     127.0.0.1:") and ln.endswith(' HTTP/1.1" 200 OK') for ln in lines), lines
    assert out.writes < len(lines) // 2, out.writes  # (one a line before; the server's own lines too)


def test_access_lines_on_a_loop_are_written_once_per_iteration(monkeypatch):
    """On a thread running a loop, goloop's own access lines wait for the loop's next
    iteration and go out in one write; a record of goloop's handler in between writes them
    first (the stream keeps the records' order), and flush() writes what still waits."""
    import asyncio

    from goloop.serve import accesslog

    out = own_logging(monkeypatch)
    access = logging.getLogger("goloop.access")
    line = 'INFO:     10.0.0.1:5000 - "GET / HTTP/1.1" 200 OK\n'

    async def main():
        for _ in range(3):
            accesslog.info(access, '%s - "%s %s HTTP/%s" %d %s', "10.0.0.1:5000", "GET", "/", "1.1", 200, "OK")
        held = out.getvalue()
        await asyncio.sleep(0)  # the next iteration
        await asyncio.sleep(0)
        batched = (held, out.getvalue(), out.writes)
        accesslog.info(access, "%s", "before")
        logging.getLogger("goloop.error").warning("after")
        ordered = out.getvalue()[len(batched[1]):]
        accesslog.info(access, "%s", "last")
        return batched, ordered

    (held, written, writes), ordered = goloop.run(main())
    assert (held, written, writes) == ("", line * 3, 1)
    assert ordered == "INFO:     before\nWARNING:  after\n"
    accesslog.flush()  # (the loop ended before its next iteration)
    assert out.getvalue().endswith("WARNING:  after\nINFO:     last\n")
    accesslog.info(access, "%s", "no loop")  # no loop running: written at once
    assert out.getvalue().endswith("INFO:     last\nINFO:     no loop\n")


# Scope changes an application may make before its call ends (the access line reads the
# scope then, as uvicorn's does), each with the line uvicorn would write for it.
_SCOPE_LINES = [
    ({}, '127.0.0.1:{port} - "GET /p HTTP/1.1" 200 OK'),
    ({"path": "/a b/é", "query_string": b"x=1&y=%20"}, '127.0.0.1:{port} - "GET /a%20b/%C3%A9?x=1&y=%20 HTTP/1.1" 200 OK'),
    ({"path": "/~a_b-c.d/"}, '127.0.0.1:{port} - "GET /~a_b-c.d/ HTTP/1.1" 200 OK'),
    ({"query_string": b"x=\xff"}, '127.0.0.1:{port} - "GET /p?x=\ufffd HTTP/1.1" 200 OK'),
    ({"root_path": "/root"}, '127.0.0.1:{port} - "GET /root/p HTTP/1.1" 200 OK'),
    ({"root_path": "/r%"}, '127.0.0.1:{port} - "GET /r%25/p HTTP/1.1" 200 OK'),
    ({"client": None}, ' - "GET /p HTTP/1.1" 200 OK'),
    ({"client": ()}, ' - "GET /p HTTP/1.1" 200 OK'),
    ({"client": ("::1", 8000)}, '::1:8000 - "GET /p HTTP/1.1" 200 OK'),
    ({"client": ("hôte", 2**70)}, 'hôte:1180591620717411303424 - "GET /p HTTP/1.1" 200 OK'),
    ({"client": ["10.0.0.1", 1]}, None),  # ("%s:%d" % a list: an error, reported)
    ({"method": "PATCH", "http_version": "2"}, '127.0.0.1:{port} - "PATCH /p HTTP/2" 200 OK'),
    ({"method": "GÉT"}, '127.0.0.1:{port} - "GÉT /p HTTP/1.1" 200 OK'),
    ({"path": "/" + "a" * 5000}, '127.0.0.1:{port} - "GET /' + "a" * 5000 + ' HTTP/1.1" 200 OK'),
    ({"status": 599}, '127.0.0.1:{port} - "GET /p HTTP/1.1" 599 '),
    ({"status": 204}, '127.0.0.1:{port} - "GET /p HTTP/1.1" 204 No Content'),
]


def test_access_line_of_any_scope_matches_uvicorns(monkeypatch):
    """The C wrapper makes the common line's head itself (asgi_run.c's access_head) and
    leaves any other scope to server.py: with goloop's own logging, each line is uvicorn's
    for the scope as the application left it, whichever made it."""
    import asyncio

    out = own_logging(monkeypatch)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_type))

    async def app(scope, receive, send):
        change = {"query_string": b"", **_SCOPE_LINES[int(scope["query_string"])][0]}
        status = change.pop("status", 200)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        scope.update(change)
        await asyncio.sleep(0)

    with serving(app, access_log=True, lifespan="off") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
            port, f = c.getsockname()[1], c.makefile("rb")
            for i in range(len(_SCOPE_LINES)):
                c.sendall(b"GET /p?%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
                assert read_response(f)[0] == _SCOPE_LINES[i][0].get("status", 200)
    lines = [ln[len("INFO:     "):] for ln in out.getvalue().splitlines() if ln.startswith("INFO:") and '"' in ln]
    want = [w.format(port=port) for _, w in _SCOPE_LINES if w is not None]
    assert lines == want
    assert unraisable == [TypeError]
