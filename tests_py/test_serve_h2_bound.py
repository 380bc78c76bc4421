"""The output's bound of an HTTP/2 connection is the connection's (goloop/httpserver/h2.go,
"The output's bound on an HTTP/2 connection"): one client that opens many streams and never
lets their DATA go (zero flow-control window) costs the server its connection's bound
(WriteBuffer, 256 KiB) and one part, not a bound per stream, on h2c and h2 over TLS, for
ASGI and WSGI. Measured with serve_metrics()'s queued_bytes (response bytes this process'
connections hold in Go's memory, not yet written).

No test here times anything: they wait for a state (every sender paused) with a generous
bound that only ends a test that would otherwise hang."""
import json
import socket
import threading
import time

import pytest

from test_serve_http import serving

pytest.importorskip("h2")

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.settings  # noqa: E402

KiB = 1024
STREAMS = 40
BOUND = 256 * KiB  # WriteBuffer, the default

paused = {"n": 0}
lock = threading.Lock()


def count(d):
    with lock:
        paused["n"] += d


def parts(path):
    """/N: 2 MiB in parts of N KiB (one bytes object, as an application's constant)."""
    size = int(path.strip("/")) * KiB
    return PARTS.setdefault(size, b"p" * size), 2048 * KiB // size


PARTS = {}


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    part, n = parts(scope["path"])
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for _ in range(n):
        count(1)  # inside send: paused there once every stream is (the loop runs one at a time)
        await send({"type": "http.response.body", "body": part, "more_body": True})
        count(-1)
    await send({"type": "http.response.body", "body": b""})


def wsgi_app(environ, start_response):
    part, n = parts(environ["PATH_INFO"])
    start_response("200 OK", [("Content-Type", "application/octet-stream")])

    def gen():
        for _ in range(n):
            count(1)  # yielded: its pool thread sends it, and waits while paused
            yield part
            count(-1)
    return gen()


def stall(server, path, streams, tls=None):
    """One HTTP/2 connection opening streams GETs of path with a zero window; never reads."""
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    for i in range(streams):
        c.send_headers(1 + 2 * i, [(":method", "GET"), (":path", path), (":scheme", "http"),
                                   (":authority", "x")], end_stream=True)
    s = socket.create_connection(("127.0.0.1", server.port))
    if tls is not None:
        s = tls.wrap_socket(s, server_hostname="localhost")
        assert s.selected_alpn_protocol() == "h2"
    s.sendall(c.data_to_send())
    return s


def queued(server):
    return json.loads(server._srv.metrics("json"))["Queued"]


def released(server):
    """Waits until the server's connections hold no output (they closed)."""
    end = time.monotonic() + 60
    while queued(server):
        assert time.monotonic() < end, "the connection's output not released"
        time.sleep(0.01)


def check_bound(server, path, streams, part, tls=None):
    paused["n"] = 0
    s = stall(server, path, streams, tls)
    try:
        end = time.monotonic() + 60
        while paused["n"] < streams:
            assert time.monotonic() < end, f"{paused['n']} of {streams} senders paused"
            time.sleep(0.01)
        q = queued(server)
        # the bound, one part past it, the frames' heads (HEADERS, SETTINGS)
        assert q <= BOUND + part + 16 * KiB, (q, streams)
    finally:
        s.close()
    released(server)


@pytest.mark.parametrize("part_kib", [64, 4])
def test_asgi_h2c_streams_share_the_connection_bound(part_kib):
    """40 streams x 2 MiB in 64 KiB parts (held by reference when over the bound) and in
    4 KiB parts (small parts, held too while the connection is over its bound)."""
    with serving(asgi_app, min_response_rate=0) as server:
        check_bound(server, f"/{part_kib}", STREAMS, part_kib * KiB)


def test_asgi_h2_over_tls_streams_share_the_connection_bound(certs):
    ctx = certs.client_context()
    ctx.set_alpn_protocols(["h2"])
    with serving(asgi_app, min_response_rate=0, ssl_certfile=certs.server_cert,
                 ssl_keyfile=certs.server_key) as server:
        check_bound(server, "/64", STREAMS, 64 * KiB, tls=ctx)


def test_wsgi_h2c_streams_share_the_connection_bound():
    """8 streams on 8 pool threads, a generator of 64 KiB parts each: the threads wait (GIL
    released) while the connection is over its bound."""
    with serving(wsgi_app, interface="wsgi", threads=8, min_response_rate=0) as server:
        check_bound(server, "/64", 8, 64 * KiB)


def test_wsgi_h2_shut_window_frees_the_thread():
    """One pool thread, one HTTP/2 stream whose client keeps its window shut (the socket
    takes everything: only the flow-control clock sees it): after the grace the connection
    is dropped, the iterable's close() is called, the thread answers the next client, and the
    timeout is counted."""
    from test_serve_http import get
    from test_serve_slow_readers import CLOSED, stream_app
    CLOSED.clear()
    with serving(stream_app, interface="wsgi", threads=1, min_response_rate=100_000,
                 min_response_grace=0.3) as server:
        s = stall(server, "/stream", 1)
        try:
            assert CLOSED.wait(30), "the iterable was not closed"
            assert get(server, "/small")[2] == b"ok"
            assert json.loads(server._srv.metrics("json"))["RespTimeouts"] >= 1
        finally:
            s.close()


BIG = b"b" * (64 * KiB)


def big_wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return [BIG]


async def big_asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": BIG})


def check_pipeline_bound(app, interface, writes):
    """One HTTP/1.1 connection that writes each of writes (b"": none), a few ms apart, and
    reads nothing: what the server holds for it, looked at after each, stays within the
    output's bound and MaxPipeline (32) answers of 64 KiB; it is let go once the client goes."""
    with serving(app, interface=interface, threads=2, min_response_rate=0) as server:
        s = socket.create_connection(("127.0.0.1", server.port))
        try:
            high = 0
            for w in writes:
                if w:
                    s.sendall(w)
                time.sleep(0.003)
                high = max(high, queued(server))
            assert high <= BOUND + 33 * 64 * KiB, high
        finally:
            s.close()
        released(server)


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_http1_pipelined_burst_without_reading_is_bounded(interface):
    """HTTP/1.1: 3,000 requests in one write (parsed together, ~80 KiB), none of their answers
    read: the application gets MaxPipeline (32) of them at a time and no more while the output
    is over its bound, so the connection holds at most the first 32 answers (made before any
    is written: WSGI's one-part answers do not wait for the output) and the bound, not 3,000 x
    64 KiB (190 MiB)."""
    app = big_wsgi if interface == "wsgi" else big_asgi
    check_pipeline_bound(app, interface, [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 3000] + [b""] * 99)


def test_http1_pipeline_without_reading_is_bounded():
    """HTTP/1.1: a client that sends request after request and reads no answer. Each answered
    request leaves the pipeline with its answer queued; between requests the connection stops
    reading while its output is over its bound, so what it holds stays near the bound instead
    of every answer (400 x 64 KiB here, 25 MiB; the kernel's socket buffers take a few MiB of
    it). Each request is its own write, a few ms apart; on a loaded machine several may still
    be read at once, and the application answers up to MaxPipeline (32) of one read before
    the output is looked at (as in the burst test above)."""
    check_pipeline_bound(big_wsgi, "wsgi", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"] * 400)
