"""goloop serve and slow clients (goloop/httpserver/deadline.go; README, goloop serve, "Slow
clients"): a request head trickled a byte at a time is answered 408 once
timeout_request_head has passed since its first byte; a request body slower than
min_request_body_rate (after a grace of timeout_request_head) is answered 408 and its
application sees http.disconnect; both are counted in serve_metrics()["timeouts"]; an
honest slow upload still completes. `http="h2"`: a plain port speaks HTTP/2 only."""
import json
import socket
import threading
import time

import pytest

import goloop
from goloop.serve.config import ConfigError, check_options
from test_serve_http import connect, read_response, serving

# every test with both connection drivers (conftest.py)
pytestmark = pytest.mark.usefixtures("serve_readers")

EVENTS: list = []


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/metrics":
        body = json.dumps(goloop.serve_metrics()["timeouts"]).encode()
    else:
        n = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                EVENTS.append("disconnect")
                return
            n += len(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"got %d" % n
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def trickle(s, data, step, gap):
    """Sends data step bytes every gap seconds in a thread, until done or the server closes."""
    def run():
        try:
            for i in range(0, len(data), step):
                s.sendall(data[i:i + step])
                time.sleep(gap)
        except OSError:  # the server closed the connection: what the test wants
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def timeouts(server):
    s = connect(server)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = read_response(s.makefile("rb"))
    s.close()
    assert status == 200
    return json.loads(body)


def expect_408_and_close(s):
    f = s.makefile("rb")
    status, headers, body = read_response(f)
    assert (status, headers.get("connection"), body) == (408, "close", b"Request Timeout")
    assert f.read() == b""  # closed


def expect_body_timeout_and_disconnect(server):
    """One body timeout counted, and the application saw http.disconnect."""
    assert timeouts(server) == {"head": 0, "body": 1, "response": 0}
    deadline = time.monotonic() + 10
    while not EVENTS and time.monotonic() < deadline:
        time.sleep(0.02)
    assert EVENTS == ["disconnect"]


def test_trickled_head_is_408_after_the_head_timeout():
    EVENTS.clear()
    with serving(app, timeout_request_head=1.5) as server:
        s = connect(server)
        # a byte every 0.3 s: each within the keep-alive timeout (5 s), which it used to reset
        head = b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
        trickle(s, head, 1, 0.3)
        expect_408_and_close(s)
        s.close()
        assert timeouts(server) == {"head": 1, "body": 0, "response": 0}
    assert EVENTS == []  # the application never saw it


@pytest.mark.serve_one_driver  # TLS connections have the goroutine driver under both
def test_trickled_head_over_tls_is_408(tmp_path):
    import ssl
    from test_tls import make_certs
    try:
        certs = make_certs(str(tmp_path))
    except RuntimeError as exc:  # no cryptography and no openssl
        pytest.skip(str(exc))
    with serving(app, timeout_request_head=1.5, ssl_certfile=certs.server_cert,
                 ssl_keyfile=certs.server_key) as server:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        s = ctx.wrap_socket(connect(server))
        # trickled from this thread, not trickle()'s: an SSLSocket read and written by two
        # threads at once corrupts its records (seen: SSLV3_ALERT_BAD_RECORD_MAC). 10 bytes
        # 0.3 s apart outlast the 1.5 s bound; the server reads and drops what follows its 408
        for b in b"GET /slow ":
            try:
                s.sendall(bytes([b]))
            except OSError:
                break
            time.sleep(0.3)
        f = s.makefile("rb")
        status, headers, body = read_response(f)
        assert (status, headers.get("connection"), body) == (408, "close", b"Request Timeout")
        f.close()
        s.close()


def test_trickled_body_is_408_and_a_disconnect_for_the_app():
    EVENTS.clear()
    with serving(app, timeout_request_head=1, min_request_body_rate=100) as server:
        s = connect(server)
        s.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        trickle(s, b"b" * 1000, 1, 0.3)  # ~3 bytes/s, the server wants 100 after 1 s
        expect_408_and_close(s)
        s.close()
        expect_body_timeout_and_disconnect(server)


def test_slow_honest_upload_longer_than_the_limits_completes():
    # ~500 bytes/s for ~3 s: longer than the head timeout (the body's grace), above the rate
    EVENTS.clear()
    with serving(app, timeout_request_head=1, min_request_body_rate=100) as server:
        s = connect(server)
        s.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1500\r\n\r\n")
        trickle(s, b"b" * 1500, 100, 0.2)
        status, _, body = read_response(s.makefile("rb"))
        s.close()
        assert (status, body) == (200, b"got 1500")
        assert timeouts(server) == {"head": 0, "body": 0, "response": 0}


def test_limits_can_be_turned_off_and_are_checked():
    cfg = check_options({"timeout_request_head": 0, "min_request_body_rate": None})
    assert (cfg["timeout_request_head"], cfg["min_request_body_rate"]) == (0, 0)
    for bad in ({"timeout_request_head": -1}, {"min_request_body_rate": "fast"}, {"http": "h3"}):
        with pytest.raises(ConfigError):
            check_options(bad)


def test_http_h2_serves_prior_knowledge_only():
    h2 = pytest.importorskip("h2")
    import h2.events
    from test_serve_h2_tls import RawH2
    with serving(app, http="h2") as server:
        s = connect(server)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100) == b""  # closed, nothing written (RFC 9113 3.4)
        s.close()
        c = RawH2(server.port)
        c.conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                (":authority", "x")], end_stream=True)
        c.flush()
        body = b""
        done = False
        while not done:
            for ev in c.events():
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done = True
        c.close()
        assert body == b"got 0"


@pytest.mark.parametrize("frames", ["whole", "partial"])
def test_trickled_h2_body_fails_the_connection(frames):
    """An HTTP/2 request body slower than min_request_body_rate (per stream, after the
    grace, plus one maximal frame's time: a DATA frame counts once whole) ends the
    connection with GOAWAY ENHANCE_YOUR_CALM; the application sees a disconnect. Whole: a
    byte per DATA frame; partial: one DATA frame's payload a byte at a time."""
    h2 = pytest.importorskip("h2")
    import h2.events
    from test_serve_h2_tls import RawH2
    EVENTS.clear()
    with serving(app, timeout_request_head=1, min_request_body_rate=100000) as server:
        c = RawH2(server.port)
        c.headers(1, "/up", end=False)
        c.flush()
        got = c.events()  # the server's SETTINGS, acknowledged: the trickle's thread is then the only writer
        # raw frames, each sent whole (the h2 connection object is this thread's)
        if frames == "whole":  # DATA frames of 1 byte, on stream 1
            trickle(c.sock, b"\x00\x00\x01\x00\x00\x00\x00\x00\x01b" * 300, 10, 0.3)
        else:  # a DATA frame of 1000 bytes on stream 1, its payload a byte at a time
            c.sock.sendall(b"\x00\x03\xe8\x00\x00\x00\x00\x00\x01")
            trickle(c.sock, b"b" * 1000, 1, 0.3)
        try:
            while True:  # (a reader's timeout of 10 s: the test fails with socket.timeout)
                got += c.events()
        except (EOFError, ConnectionResetError):
            pass
        goaways = [ev for ev in got if isinstance(ev, h2.events.ConnectionTerminated)]
        assert [g.error_code for g in goaways] == [h2.errors.ErrorCodes.ENHANCE_YOUR_CALM], got
        c.close()
        expect_body_timeout_and_disconnect(server)


@pytest.mark.serve_one_driver  # (HTTP/2 connections are served by their goroutine under both)
def test_slow_honest_h2_upload_longer_than_the_limits_completes():
    # ~16 KB/s for ~4 s: longer than the grace and one maximal frame's time (1 + 2 s),
    # twice the rate
    h2 = pytest.importorskip("h2")
    import h2.events
    from test_serve_h2_tls import RawH2
    with serving(app, timeout_request_head=1, min_request_body_rate=8192) as server:
        c = RawH2(server.port)
        c.headers(1, "/up", end=False)
        c.flush()
        for i in range(40):
            c.conn.send_data(1, b"b" * 1600, end_stream=i == 39)
            c.flush()
            time.sleep(0.1)
        body, done = b"", False
        while not done:
            for ev in c.events():
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    done = True
        c.close()
        assert body == b"got 64000"
        assert timeouts(server) == {"head": 0, "body": 0, "response": 0}
