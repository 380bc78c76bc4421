"""goloop serve answers an HTTP/1 request line whose version is not 1.0 or 1.1 with 505 HTTP
Version Not Supported (RFC 9110 15.6.6): the application (ASGI or WSGI) never sees it."""
import socket

import pytest

from test_serve_http import serving

pytestmark = pytest.mark.usefixtures("serve_readers")

UNSUPPORTED = [
    b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
    b"GET / HTTP/3.0\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.2\r\nHost: x\r\n\r\n",
    b"GET / HTTP/0.9\r\nHost: x\r\n\r\n",
    b"GET /\r\n\r\n",  # HTTP/0.9's form: no version
    b"POST / HTTP/2.0\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
]


def exchange(port, raw):
    """raw sent, everything the server answers before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b


def asgi_app(seen):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        seen.append(scope["http_version"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["http_version"].encode()})
    return app


def wsgi_app(seen):
    def app(environ, start_response):
        seen.append(environ["SERVER_PROTOCOL"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["SERVER_PROTOCOL"].encode()]
    return app


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_unsupported_versions_answered_505(interface):
    seen = []
    app = asgi_app(seen) if interface == "asgi" else wsgi_app(seen)
    with serving(app, interface=interface) as server:
        for raw in UNSUPPORTED:
            out = exchange(server.port, raw)
            assert out.startswith(b"HTTP/1.1 505 HTTP Version Not Supported\r\n"), (raw, out)
        assert seen == []
        # a good request first on the connection is answered, then the 505
        out = exchange(server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/2.0\r\nHost: x\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200 "), out
        assert b"1.1HTTP/1.1 505 " in out, out
        # a malformed version is a bad request
        assert exchange(server.port, b"GET / HTTP/1.x\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        # 1.0 and 1.1 are served
        for v in (b"1.0", b"1.1"):
            out = exchange(server.port, b"GET / HTTP/" + v + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(v), out
        assert len(seen) == 3
