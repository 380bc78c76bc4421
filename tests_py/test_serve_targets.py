"""goloop serve: requests that must not reach the application as they came (README, goloop
serve, "Request targets"): CONNECT, an absolute-form target, a fragment in the target, a
WebSocket upgrade that is not a valid handshake; over HTTP/1.1 and HTTP/2."""
import json

import pytest

from test_serve_http import connect, read_response, serving

h2 = pytest.importorskip("h2")
import h2.events  # noqa: E402

from test_serve_h2_tls import RawH2  # noqa: E402

# every test with both connection drivers (conftest.py)
pytestmark = pytest.mark.usefixtures("serve_readers")

CALLS: list = []


async def scope_app(scope, receive, send):
    if scope["type"] != "http":
        return
    CALLS.append(scope["path"])
    host = dict(scope["headers"]).get(b"host", b"").decode()
    hosts = [v.decode() for k, v in scope["headers"] if k == b"host"]
    body = json.dumps({"method": scope["method"], "path": scope["path"], "scheme": scope["scheme"],
                       "raw_path": scope["raw_path"].decode(), "query": scope["query_string"].decode(),
                       "host": host, "hosts": hosts}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def exchange(raw):
    CALLS.clear()
    with serving(scope_app) as server:
        s = connect(server)
        s.sendall(raw)
        status, headers, body = read_response(s.makefile("rb"))
        s.close()
    return status, headers, body


@pytest.mark.parametrize("target", [b"host:443", b"/x", b"http://host:443/"])
def test_connect_is_400_and_not_served(target):
    status, headers, body = exchange(b"CONNECT " + target + b" HTTP/1.1\r\nHost: host:443\r\n\r\n")
    assert status == 400 and body == b"Invalid HTTP request received."
    assert headers.get("connection") == "close"
    assert CALLS == []


def test_absolute_form_takes_the_host_from_the_target():
    status, _, body = exchange(b"GET http://other.example:8080/p?q=1 HTTP/1.1\r\nHost: me\r\n"
                               b"X-A: 1\r\n\r\n")
    got = json.loads(body)
    assert status == 200
    assert (got["path"], got["raw_path"], got["query"]) == ("/p", "/p", "q=1")
    assert got["hosts"] == ["other.example:8080"]  # RFC 9112 3.2.2: Host is ignored


def test_absolute_form_without_path_or_host_header():
    status, _, body = exchange(b"GET http://user@other.example HTTP/1.0\r\n\r\n")
    got = json.loads(body)
    assert status == 200 and got["path"] == "/" and got["hosts"] == ["other.example"]


@pytest.mark.parametrize("target,path,query", [
    (b"/a#frag", "/a", ""),
    (b"/a%20b?x=1#frag?y#z", "/a b", "x=1"),
    (b"/a#", "/a", ""),
])
def test_fragment_is_stripped(target, path, query):
    status, _, body = exchange(b"GET " + target + b" HTTP/1.1\r\nHost: me\r\n\r\n")
    got = json.loads(body)
    assert status == 200 and (got["path"], got["query"]) == (path, query)
    assert "#" not in got["raw_path"]


KEY = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
VERSION = b"Sec-WebSocket-Version: 13\r\n"


@pytest.mark.parametrize("extra,text", [
    (VERSION, b"missing Sec-WebSocket-Key header"),
    (b"Sec-WebSocket-Key: abc\r\n" + VERSION, b"invalid Sec-WebSocket-Key header"),
    (b"Sec-WebSocket-Key: YWJj\r\n" + VERSION, b"invalid Sec-WebSocket-Key header"),
    (KEY, b"missing Sec-WebSocket-Version header"),
])
def test_websocket_upgrade_without_a_valid_handshake_is_400(extra, text):
    status, headers, body = exchange(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                     b"Connection: Upgrade\r\n" + extra + b"\r\n")
    assert status == 400 and text in body
    assert body.startswith(b"Failed to open a WebSocket connection: ")
    assert CALLS == []


@pytest.mark.parametrize("method,body", [(b"POST", b""), (b"PUT", b"Content-Length: 3\r\n\r\nabc")])
def test_websocket_upgrade_that_is_not_a_get_is_400(method, body):
    # RFC 6455 4.1/4.2.1: the handshake is a GET; uvicorn (httptools, websockets) answers 400
    status, headers, got = exchange(method + b" /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                    b"Connection: Upgrade\r\n" + KEY + VERSION + (body or b"\r\n"))
    assert status == 400 and headers.get("connection") == "close"
    assert got == (b"Failed to open a WebSocket connection: did not receive a valid HTTP request; "
                   b"unsupported HTTP method: " + method + b".\n")
    assert CALLS == []


@pytest.mark.parametrize("connection", [b"", b"Connection: keep-alive\r\n"])
def test_upgrade_websocket_without_connection_upgrade_is_plain_http(connection):
    # without `Connection: upgrade` there is no upgrade (RFC 9110 7.8, RFC 6455 4.2.1): an
    # ordinary request, and the connection stays open for the next (as uvicorn)
    CALLS.clear()
    with serving(scope_app) as server:
        s = connect(server)
        f = s.makefile("rb")
        s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n" + connection + KEY + VERSION + b"\r\n")
        status, headers, body = read_response(f)
        assert status == 200 and json.loads(body)["path"] == "/ws" and "connection" not in headers
        s.sendall(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_response(f)
        assert status == 200 and json.loads(body)["path"] == "/next"
        s.close()
    assert CALLS == ["/ws", "/next"]


def test_https_absolute_form_on_plain_tcp_keeps_scheme_http():
    # the connection is plain: the target's scheme does not make it https (uvicorn: http)
    status, _, body = exchange(b"GET https://other.example/p HTTP/1.1\r\nHost: me\r\n\r\n")
    got = json.loads(body)
    assert status == 200 and got["scheme"] == "http" and got["path"] == "/p"


def h2_request(headers):
    CALLS.clear()
    with serving(scope_app) as server:
        c = RawH2(server.port)
        c.conn.send_headers(1, headers, end_stream=True)
        c.flush()
        body, reset = b"", None
        done = False
        while not done:
            for ev in c.events():
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    c.conn.acknowledge_received_data(ev.flow_controlled_length, 1)
                elif isinstance(ev, h2.events.StreamEnded):
                    done = True
                elif isinstance(ev, h2.events.StreamReset):
                    reset, done = ev.error_code, True
        c.close()
    return body, reset


def test_h2_fragment_is_stripped():
    body, reset = h2_request([(":method", "GET"), (":scheme", "http"), (":path", "/a?x=1#frag"),
                              (":authority", "x")])
    got = json.loads(body)
    assert reset is None and (got["path"], got["raw_path"], got["query"]) == ("/a", "/a", "x=1")


@pytest.mark.parametrize("headers", [
    [(":method", "CONNECT"), (":authority", "host:443")],
    [(":method", "GET"), (":scheme", "http"), (":path", "a/b"), (":authority", "x")],
])
def test_h2_connect_and_path_without_slash_are_refused(headers):
    # a guard: h2.go refused these before this file (no test said so); it passes on the old code
    body, reset = h2_request(headers)
    assert reset == h2.errors.ErrorCodes.PROTOCOL_ERROR and CALLS == []
