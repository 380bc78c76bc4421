"""goloop serve's HTTP/3 (--http3: QUIC by quic-go, goloop/httpserver/h3.go) with a client
that is not goloop's: aioquic's H3Connection, as its examples/http3_client.py uses it.

The Go tests (goloop/httpserver/h3_test.go) drive the engine with quic-go's own client,
including the stream limit, tiny windows and a client that stops reading."""
import asyncio
import hashlib
import http.client
import json
import threading
import time

import pytest

from test_serve_http import scope_app, serving

aioquic = pytest.importorskip("aioquic")
from aioquic.asyncio.client import connect  # noqa: E402
from aioquic.asyncio.protocol import QuicConnectionProtocol  # noqa: E402
from aioquic.h3.connection import H3_ALPN, H3Connection  # noqa: E402
from aioquic.h3.events import DataReceived, HeadersReceived  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.quic.events import StreamReset  # noqa: E402


def h3_options(certs, **kw):
    return dict(ssl_certfile=certs.server_cert, ssl_keyfile=certs.server_key, http3=True, **kw)


class Response:
    def __init__(self, fut):
        self.fut = fut
        self.headers = None
        self.trailers = None
        self.data = bytearray()
        self.reset = None

    @property
    def status(self):
        return int(dict(self.headers)[b":status"])

    def header(self, name):
        return dict(self.headers).get(name)


class H3Client(QuicConnectionProtocol):
    """An HTTP/3 client over aioquic's QUIC and H3Connection."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            r = self.streams[event.stream_id]
            r.reset = event.error_code
            if not r.fut.done():
                r.fut.set_result(r)
        for ev in self.h3.handle_event(event):
            r = self.streams.get(ev.stream_id)
            if r is None:
                continue
            if isinstance(ev, HeadersReceived):
                if r.headers is None:
                    r.headers = ev.headers
                else:
                    r.trailers = ev.headers
            elif isinstance(ev, DataReceived):
                r.data += ev.data
            if getattr(ev, "stream_ended", False) and not r.fut.done():
                r.fut.set_result(r)

    def start(self, method, path, body=b"", headers=(), end=True):
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", method.encode()), (b":scheme", b"https"),
                                   (b":authority", b"localhost"), (b":path", path.encode())] + list(headers),
                             end_stream=end and not body)
        if body or not end:
            self.h3.send_data(sid, body, end_stream=end)
        r = self.streams[sid] = Response(asyncio.get_running_loop().create_future())
        self.transmit()
        return sid, r

    async def request(self, method, path, body=b"", headers=()):
        _, r = self.start(method, path, body, headers)
        return await asyncio.wait_for(r.fut, 60)


def client(certs, port):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
    cfg.load_verify_locations(certs.ca_cert)
    return connect("127.0.0.1", port, configuration=cfg, create_protocol=H3Client)


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# ---------- the application ----------

EVENTS: list = []
SERVER: list = []  # the server of the test whose app starts its shutdown
STARTED = threading.Event()
RELEASE = threading.Event()
SENT = [0]  # /big's parts sent
HOLD = [0, 0]  # /hold's streams in flight, and their peak


async def h3_app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/scope":
        await scope_app(scope, receive, send)
        return
    if path == "/wait":  # receives until the client goes away
        while True:
            msg = await receive()
            EVENTS.append(msg["type"])
            STARTED.set()  # after the first part: a reset the client sends then comes after it
            if msg["type"] == "http.disconnect":
                return
    if path == "/slow":  # a part, then the rest once released
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first ", "more_body": True})
        STARTED.set()
        SERVER[0].request_exit()  # a graceful shutdown starts while this stream is in flight
        while not RELEASE.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"last"})
        EVENTS.append("sent")
        return
    if path == "/big":  # 64 MiB in 64 KiB parts, to a client that stops reading
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for _ in range(1024):
                await send({"type": "http.response.body", "body": b"b" * 65536, "more_body": True})
                SENT[0] += 1
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            EVENTS.append("disconnected")
            return
        EVENTS.append("complete")
        return
    if path == "/hold":  # counts the streams in flight at once
        HOLD[0] += 1
        HOLD[1] = max(HOLD[1], HOLD[0])
        await asyncio.sleep(0.05)  # (keeps streams overlapping; nothing depends on it)
        HOLD[0] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"held"})
        return
    if path == "/trailers":
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": True})
        await send({"type": "http.response.body", "body": b"body"})
        await send({"type": "http.response.trailers", "headers": [(b"x-sum", b"42")]})
        return
    h = hashlib.sha256()
    n = 0
    while True:
        msg = await receive()
        h.update(msg.get("body", b""))
        n += len(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    if path == "/stream":  # 4 MiB in 64 parts
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"x/y")]})
        for _ in range(64):
            await send({"type": "http.response.body", "body": b"z" * 65536, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body",
                "body": f"{scope['method']} {scope['http_version']} {n} {h.hexdigest()}".encode()})


# ---------- tests ----------

def test_h3_get_post_stream_scope(certs):
    body = bytes(range(256)) * (5 * 4096)  # 5 MiB

    async def main(port):
        async with client(certs, port) as c:
            r = await c.request("GET", "/x")
            assert r.status == 200 and r.data.startswith(b"GET 3 0 ")
            r = await c.request("POST", "/up", body, [(b"content-type", b"application/octet-stream")])
            assert r.data.decode() == f"POST 3 {len(body)} {hashlib.sha256(body).hexdigest()}"
            r = await c.request("GET", "/stream")
            assert r.status == 200 and len(r.data) == 64 * 65536 and r.header(b"content-type") == b"x/y"
            r = await c.request("GET", "/scope?q=1", headers=[(b"x-one", b"1")])
            return json.loads(r.data)

    with serving(h3_app, **h3_options(certs)) as server:
        sc = run(main(server.http3_ports[0]))
    assert sc["http_version"] == "3" and sc["scheme"] == "https" and sc["path"] == "/scope"
    assert sc["query_string"] == "q=1"
    hdrs = {k: v for k, v in sc["headers"]}
    assert hdrs["host"] == "localhost" and hdrs["x-one"] == "1"
    assert "tls" in sc.get("extensions", {})


def test_h3_trailers(certs):
    async def main(port):
        async with client(certs, port) as c:
            return await c.request("GET", "/trailers", headers=[(b"te", b"trailers")])

    with serving(h3_app, **h3_options(certs)) as server:
        r = run(main(server.http3_ports[0]))
    assert bytes(r.data) == b"body" and r.trailers is not None and dict(r.trailers).get(b"x-sum") == b"42"


def test_h3_many_concurrent_streams(certs):
    async def main(port):
        async with client(certs, port) as c:
            bodies = [bytes([i]) * (1000 + i) for i in range(100)]
            rs = await asyncio.gather(*(c.request("POST", "/s", b) for b in bodies))
            return bodies, rs

    with serving(h3_app, **h3_options(certs)) as server:
        bodies, rs = run(main(server.http3_ports[0]))
    for b, r in zip(bodies, rs):
        assert r.data.decode() == f"POST 3 {len(b)} {hashlib.sha256(b).hexdigest()}"


def test_h3_alt_svc_on_tcp(certs):
    with serving(h3_app, **h3_options(certs)) as server:
        conn = http.client.HTTPSConnection("localhost", server.port, context=certs.client_context(), timeout=10)
        conn.request("GET", "/x")
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.getheader("alt-svc") == f'h3=":{server.http3_ports[0]}"; ma=86400'
    with serving(h3_app, **dict(h3_options(certs), http3=False)) as server:
        conn = http.client.HTTPSConnection("localhost", server.port, context=certs.client_context(), timeout=10)
        conn.request("GET", "/x")
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.getheader("alt-svc") is None and server.http3_ports == []


def test_h3_client_reset_is_disconnect(certs):
    EVENTS.clear()
    STARTED.clear()

    async def main(port):
        async with client(certs, port) as c:
            sid, _ = c.start("POST", "/wait", b"x" * 1000, end=False)
            while not STARTED.is_set():
                await asyncio.sleep(0.01)
            c._quic.reset_stream(sid, 0x10C)  # H3_REQUEST_CANCELLED
            c._quic.stop_stream(sid, 0x10C)
            c.transmit()
            deadline = time.monotonic() + 20
            while "http.disconnect" not in EVENTS and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

    with serving(h3_app, **h3_options(certs)) as server:
        run(main(server.http3_ports[0]))
    assert EVENTS[-1] == "http.disconnect" and EVENTS[0] == "http.request"


def test_h3_slow_body_is_reset(certs):
    """A body that stops after its first bytes, slower than min_request_body_rate once
    the grace (timeout_request_head) passed: the stream is reset (H3_REQUEST_CANCELLED)
    and the application sees http.disconnect."""
    EVENTS.clear()
    STARTED.clear()

    async def main(port):
        async with client(certs, port) as c:
            _, r = c.start("POST", "/wait", b"x" * 1000, end=False)  # then nothing
            await asyncio.wait_for(r.fut, 60)
            deadline = time.monotonic() + 20
            while "http.disconnect" not in EVENTS and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return r.reset

    with serving(h3_app, timeout_request_head=0.2, min_request_body_rate=1 << 20,
                 **h3_options(certs)) as server:
        reset = run(main(server.http3_ports[0]))
    assert reset == 0x10C  # H3_REQUEST_CANCELLED
    assert EVENTS[-1] == "http.disconnect"


def test_h3_shutdown_finishes_stream_in_flight(certs):
    EVENTS.clear()
    STARTED.clear()
    RELEASE.clear()

    async def main(port, server):
        async with client(certs, port) as c:
            _, r = c.start("GET", "/slow")
            while not STARTED.is_set():
                await asyncio.sleep(0.01)
            while not server.should_exit:
                await asyncio.sleep(0.01)
            RELEASE.set()
            await asyncio.wait_for(r.fut, 30)
            return r

    with serving(h3_app, **h3_options(certs)) as server:
        SERVER[:] = [server]
        port = server.http3_ports[0]
        r = run(main(port, server))
        assert r.reset is None and bytes(r.data) == b"first last"
    SERVER.clear()
    assert EVENTS == ["sent"]

    async def again():  # the server is gone: no new connection
        cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost",
                                idle_timeout=2)
        cfg.load_verify_locations(certs.ca_cert)
        try:
            async with connect("127.0.0.1", port, configuration=cfg, create_protocol=H3Client) as c:
                await c.request("GET", "/x")
        except (ConnectionError, asyncio.TimeoutError):
            return True
        return False

    assert run(again(), timeout=30)


def wsgi_app(environ, start_response):
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{environ['REQUEST_METHOD']} {environ['SERVER_PROTOCOL']} {len(body)} "
            f"{hashlib.sha256(body).hexdigest()}".encode()]


def test_h3_wsgi(certs):
    body = b"w" * (1 << 20)

    async def main(port):
        async with client(certs, port) as c:
            r1 = await c.request("GET", "/")
            r2 = await c.request("POST", "/", body)
            return r1, r2

    with serving(wsgi_app, interface="wsgi", **h3_options(certs)) as server:
        r1, r2 = run(main(server.http3_ports[0]))
    assert r1.data.startswith(b"GET HTTP/3 0 ")
    assert r2.data.decode() == f"POST HTTP/3 {len(body)} {hashlib.sha256(body).hexdigest()}"


def test_h3_options_checked(certs):
    from goloop.serve.config import ConfigError
    from goloop.serve import server as _serve
    with pytest.raises(ConfigError, match="http3 needs ssl_certfile"):
        _serve.Server(h3_app, http3=True)
    with pytest.raises(ConfigError, match="http3_port"):
        _serve.Server(h3_app, http3_port=70000, **h3_options(certs))


def test_h3_access_log_and_proxy_headers(certs):
    import logging
    from test_serve_runner import _Records
    h = _Records()
    log = logging.getLogger("goloop.access")
    log.addHandler(h)
    old = log.level
    log.setLevel(logging.INFO)

    async def main(port):
        async with client(certs, port) as c:
            r = await c.request("GET", "/scope", headers=[(b"x-forwarded-for", b"203.0.113.9"),
                                                          (b"x-forwarded-proto", b"http")])
            return json.loads(r.data)

    try:
        with serving(h3_app, access_log=True, proxy_headers=True, forwarded_allow_ips="127.0.0.1",
                     **h3_options(certs)) as server:
            sc = run(main(server.http3_ports[0]))
    finally:
        log.removeHandler(h)
        log.setLevel(old)
    lines = [r.getMessage() for r in h.records]
    assert any('"GET /scope HTTP/3" 200' in x for x in lines), lines
    assert sc["client"][0] == "203.0.113.9" and sc["scheme"] == "http"


def test_h3_client_stops_reading_is_bounded(certs):
    """A client that stops reading (its loop blocked: no datagram read, no credit granted):
    the application's send waits; what it sent is bounded by the windows and the write
    buffer, not by the response's 64 MiB; closing the connection is its disconnect."""
    EVENTS.clear()
    SENT[0] = 0

    async def main(port):
        async with client(certs, port) as c:
            c.start("GET", "/big")
            while SENT[0] == 0:
                await asyncio.sleep(0.01)
            time.sleep(1)  # the client's loop does not run: nothing is read, no credit granted
            sent = SENT[0]
            assert "complete" not in EVENTS and sent * 65536 < 16 << 20, sent
        deadline = time.monotonic() + 30  # (closed: the server's next send fails)
        while "disconnected" not in EVENTS and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    with serving(h3_app, **h3_options(certs)) as server:
        run(main(server.http3_ports[0]))
    assert EVENTS == ["disconnected"]


def test_h3_stream_flood_beyond_the_limit(certs):
    """A client that opens more streams than the server's limit allows (aioquic made to
    ignore it): the connection is closed (QUIC's STREAM_LIMIT_ERROR), the application never
    has more than the limit in flight, and the server goes on serving other clients."""
    HOLD[:] = [0, 0]

    async def flood(port):
        async with client(certs, port) as c:
            c._quic._remote_max_streams_bidi = 1000  # past what the server announced
            for _ in range(60):
                c.start("GET", "/hold")
            await asyncio.wait_for(c.wait_closed(), 30)

    async def after(port):
        async with client(certs, port) as c:
            return await c.request("GET", "/hold")

    with serving(h3_app, http3_max_streams=10, **h3_options(certs)) as server:
        run(flood(server.http3_ports[0]))
        r = run(after(server.http3_ports[0]))
    assert bytes(r.data) == b"held"
    assert 1 <= HOLD[1] <= 10, HOLD
