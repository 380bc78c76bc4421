"""An HTTP/1.1 server written as an asyncio Protocol on goloop, parsing with goloop.http,
serving real clients: http.client, urllib, raw sockets (pipelining, slow senders,
malformed requests), keep-alive and Connection: close.

Run from the repository root as `python3 -P -m pytest tests_py/test_http_server.py`.
"""
import asyncio
import http.client
import json
import socket
import threading
import time
import urllib.request

import pytest

import goloop
from goloop import http as ghttp

HOST = "127.0.0.1"


class ServerState:
    def __init__(self):
        self.connections = 0
        self.open = 0
        self.bad_requests = 0


class HttpServerProtocol(asyncio.Protocol):
    """Answers every request with a JSON echo of it; 400 + close on a parse error."""

    def __init__(self, state):
        self.state = state
        self.transport = None
        self.parser = ghttp.HttpRequestParser(self)
        self.count = 0
        self._reset()

    def _reset(self):
        self.url = b""
        self.headers = []
        self.body = []
        self.chunks = 0

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport
        self.state.connections += 1
        self.state.open += 1

    def connection_lost(self, exc):
        self.state.open -= 1

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except ghttp.HttpParserUpgrade:
            self.transport.close()
        except ghttp.HttpParserError as e:
            self.state.bad_requests += 1
            msg = ("bad request: %s: %s" % (type(e).__name__, e)).encode()
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                                 b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))
            self.transport.close()

    # parser callbacks
    def on_message_begin(self):
        self._reset()

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_body(self, body):
        self.body.append(body)

    def on_chunk_header(self):
        self.chunks += 1

    def on_message_complete(self):
        if self.transport.is_closing():
            return
        self.count += 1
        keep_alive = self.parser.should_keep_alive()
        payload = json.dumps({
            "method": self.parser.get_method().decode(),
            "url": self.url.decode("latin-1"),
            "version": self.parser.get_http_version(),
            "headers": self.headers,
            "body": b"".join(self.body).decode("latin-1"),
            "chunks": self.chunks,
            "n": self.count,
            "connection": id(self),
        }).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(payload)
        if not keep_alive:
            head += b"Connection: close\r\n"
        self.transport.write(head + b"\r\n" + payload)
        if not keep_alive:
            self.transport.close()


def serve_and_run(client, *args, timeout=30):
    """Runs an HttpServerProtocol server on a goloop loop and client(port, *args) in a
    thread; returns (client's result, server state)."""
    state = ServerState()

    async def main():
        loop = asyncio.get_running_loop()
        assert isinstance(loop, goloop.Loop)
        server = await loop.create_server(lambda: HttpServerProtocol(state), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await asyncio.wait_for(asyncio.to_thread(client, port, *args), timeout)
        finally:
            server.close()
            await server.wait_closed()

    return goloop.run(main()), state


# ---------- client helpers (blocking, run in a thread) ----------


def recv_responses(sock, n, timeout=10.0):
    """Reads n responses from sock with goloop's response parser; returns their bodies
    (decoded JSON or text) and whether the server closed the connection."""

    class Collector:
        def __init__(self):
            self.done = []
            self.body = []
            self.status = None

        def on_body(self, body):
            self.body.append(body)

        def on_message_complete(self):
            raw = b"".join(self.body)
            self.body = []
            try:
                self.done.append((parser.get_status_code(), json.loads(raw)))
            except ValueError:
                self.done.append((parser.get_status_code(), raw.decode("latin-1")))

    c = Collector()
    parser = ghttp.HttpResponseParser(c)
    sock.settimeout(timeout)
    closed = False
    while len(c.done) < n:
        data = sock.recv(65536)
        if not data:
            closed = True
            break
        parser.feed_data(data)
    return c.done, closed


def wait_closed(sock, timeout=10.0):
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


# ---------- tests ----------


@pytest.mark.timeout(60)
def test_http_client_get():
    def client(port):
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("GET", "/hello?x=1", headers={"X-Test": "yes"})
        r = conn.getresponse()
        out = (r.status, json.loads(r.read()))
        conn.close()
        return out

    (status, body), state = serve_and_run(client)
    assert status == 200
    assert body["method"] == "GET" and body["url"] == "/hello?x=1" and body["version"] == "1.1"
    assert ["X-Test", "yes"] in body["headers"]
    assert state.bad_requests == 0


@pytest.mark.timeout(60)
def test_urllib_post_with_body():
    payload = b"name=goloop&value=" + b"x" * 5000

    def client(port):
        req = urllib.request.Request("http://%s:%d/submit" % (HOST, port), data=payload, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())

    (status, body), _ = serve_and_run(client)
    assert status == 200
    assert body["method"] == "POST" and body["url"] == "/submit"
    assert body["body"].encode() == payload
    assert ["Content-Length", str(len(payload))] in body["headers"]


@pytest.mark.timeout(60)
def test_http_client_chunked_post():
    parts = [b"first,", b"second,", b"x" * 10000, b"last"]

    def client(port):
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("POST", "/upload", body=iter(parts), encode_chunked=True,
                     headers={"Transfer-Encoding": "chunked"})
        r = conn.getresponse()
        out = (r.status, json.loads(r.read()))
        conn.close()
        return out

    (status, body), _ = serve_and_run(client)
    assert status == 200
    assert body["body"].encode() == b"".join(parts)
    assert body["chunks"] == len(parts) + 1  # the last, empty chunk too


@pytest.mark.timeout(60)
def test_pipelined_requests_answered_in_order():
    def client(port):
        with socket.create_connection((HOST, port), timeout=10) as s:
            reqs = []
            for i in range(16):
                if i % 3 == 1:
                    body = b"body-%d" % i
                    reqs.append(b"POST /r%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (i, len(body), body))
                else:
                    reqs.append(b"GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
            s.sendall(b"".join(reqs))
            return recv_responses(s, 16)

    (responses, closed), state = serve_and_run(client)
    assert not closed
    assert [r[1]["url"] for r in responses] == ["/r%d" % i for i in range(16)]
    assert [r[1]["n"] for r in responses] == list(range(1, 17))
    assert len({r[1]["connection"] for r in responses}) == 1
    assert responses[1][1]["body"] == "body-1"
    assert state.connections == 1


@pytest.mark.timeout(60)
def test_slow_sender_byte_by_byte():
    request = (b"POST /slow HTTP/1.1\r\nHost: localhost\r\nX-Long-Header: " + b"v" * 40 +
               b"\r\nContent-Length: 5\r\n\r\nhello")

    def client(port):
        with socket.create_connection((HOST, port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(len(request)):
                s.sendall(request[i:i + 1])
                time.sleep(0.002)
            return recv_responses(s, 1)

    (responses, _), _ = serve_and_run(client)
    body = responses[0][1]
    assert responses[0][0] == 200
    assert body["url"] == "/slow" and body["body"] == "hello"
    assert ["X-Long-Header", "v" * 40] in body["headers"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("garbage", [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
    b"GET /\x01 HTTP/1.1\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
])
def test_malformed_request_gets_400_while_other_connection_works(garbage):
    def client(port):
        good = http.client.HTTPConnection(HOST, port, timeout=10)
        good.request("GET", "/before")
        r1 = json.loads(good.getresponse().read())
        with socket.create_connection((HOST, port), timeout=10) as bad:
            bad.sendall(garbage)
            responses, closed = recv_responses(bad, 1)
            closed = closed or wait_closed(bad)
        good.request("GET", "/after")
        r2 = json.loads(good.getresponse().read())
        good.close()
        return r1, r2, responses, closed

    (r1, r2, responses, closed), state = serve_and_run(client)
    assert responses[0][0] == 400
    assert "bad request" in responses[0][1]
    assert closed
    assert state.bad_requests == 1
    # The keep-alive connection kept working: same connection, second request.
    assert r1["connection"] == r2["connection"]
    assert (r1["n"], r2["n"]) == (1, 2)


@pytest.mark.timeout(60)
def test_keep_alive_reuse():
    def client(port):
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        out = []
        for i in range(20):
            conn.request("POST" if i % 2 else "GET", "/k%d" % i, body=b"b" * i if i % 2 else None)
            r = conn.getresponse()
            out.append((r.getheader("Connection"), json.loads(r.read())))
        conn.close()
        return out

    out, state = serve_and_run(client)
    assert [o[1]["n"] for o in out] == list(range(1, 21))
    assert len({o[1]["connection"] for o in out}) == 1
    assert all(o[0] is None for o in out)
    assert out[3][1]["body"] == "bbb"
    assert state.connections == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("request_bytes", [
    b"GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /bye HTTP/1.0\r\nHost: x\r\n\r\n",
])
def test_connection_close(request_bytes):
    def client(port):
        with socket.create_connection((HOST, port), timeout=10) as s:
            s.sendall(request_bytes)
            responses, closed = recv_responses(s, 1)
            return responses, closed or wait_closed(s)

    (responses, closed), _ = serve_and_run(client)
    assert responses[0][0] == 200 and responses[0][1]["url"] == "/bye"
    assert closed


@pytest.mark.timeout(60)
def test_http10_keep_alive():
    def client(port):
        with socket.create_connection((HOST, port), timeout=10) as s:
            s.sendall(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            first, _ = recv_responses(s, 1)
            s.sendall(b"GET /b HTTP/1.0\r\n\r\n")
            second, closed = recv_responses(s, 1)
            return first + second, closed or wait_closed(s)

    (responses, closed), _ = serve_and_run(client)
    assert [r[1]["url"] for r in responses] == ["/a", "/b"]
    assert [r[1]["version"] for r in responses] == ["1.0", "1.0"]
    assert closed


@pytest.mark.timeout(60)
def test_many_concurrent_clients():
    def client(port):
        results = []
        errors = []

        def one(i):
            try:
                conn = http.client.HTTPConnection(HOST, port, timeout=10)
                for j in range(5):
                    conn.request("GET", "/c%d/%d" % (i, j))
                    results.append(json.loads(conn.getresponse().read())["url"])
                conn.close()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results, errors

    (results, errors), state = serve_and_run(client)
    assert not errors
    assert sorted(results) == sorted("/c%d/%d" % (i, j) for i in range(16) for j in range(5))
    assert state.connections == 16
