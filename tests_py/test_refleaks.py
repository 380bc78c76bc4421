"""Reference and memory-block leaks of the C binding's hot paths, on a debug CPython.

A debug interpreter (./configure --with-pydebug) counts every reference it holds
(sys.gettotalrefcount()); sys.getallocatedblocks() counts the blocks of its small-object
allocator. Each test runs one operation N times to warm up (first-use caches, free lists,
interned names, the server's per-thread templates), takes both counts, runs it N times more
and counts, then 2N times more and counts: an operation that leaks one reference or block a
time shows N, then 2N. Neither count may grow by more than 2, nor in both runs: they are read
once the process is quiet (no request in flight; read until two readings agree).

`make test-pydebug` runs this file on a debug 3.13 (tools/pydebug.sh builds it); on a regular
interpreter it skips.
"""
from __future__ import annotations

import array
import asyncio
import gc
import socket
import sys
import threading
import time

import pytest

import goloop

pytestmark = pytest.mark.skipif(
    not hasattr(sys, "gettotalrefcount"),
    reason="needs a debug CPython (./configure --with-pydebug), whose sys.gettotalrefcount() "
           "counts references: `make test-pydebug` runs this file on one")


def read_counts(marks: array.array, i: int) -> None:
    """Writes (references, blocks) into marks[2i:2i+2] once they stop moving: a server thread
    may still be dropping a finished request's objects when the client has its answer. The
    array is made beforehand, so a reading keeps no object of its own."""
    for _ in range(200):
        gc.collect()
        r, b = sys.gettotalrefcount(), sys.getallocatedblocks()
        if marks[2 * i] == r and marks[2 * i + 1] == b:
            return
        marks[2 * i], marks[2 * i + 1] = r, b
        del r, b
        time.sleep(0.01)


def assert_no_growth(step, n: int) -> None:
    """step(k) runs the operation k times; zero growth after N and after 2N more."""
    marks = array.array("q", bytes(8 * 6))
    step(n)  # warm-up
    step(n)
    read_counts(marks, 0)
    step(n)
    read_counts(marks, 1)
    step(2 * n)
    read_counts(marks, 2)
    m = marks.tolist()
    deltas = {"references after N": m[2] - m[0], "references after 2N more": m[4] - m[2],
              "blocks after N": m[3] - m[1], "blocks after 2N more": m[5] - m[3]}
    # A leak grows with the operations: by N or more a time, or, one rarer than every
    # operation, in both runs. One may shrink (an object of the warm-up, a finished thread's
    # state, a cache entry CPython drops, may go between two readings), and one run may find
    # a block or two more that the next does not: a set's or dict's table that its history
    # of deletions had resized (asyncio's WeakSet of tasks) is allocated or not at a reading.
    grew = {k: v for k, v in deltas.items() if v > 0}
    assert max(deltas.values()) <= 2, f"N={n}: {deltas}"
    for what in ("references", "blocks"):
        assert not (f"{what} after N" in grew and f"{what} after 2N more" in grew), f"N={n}: {deltas}"


@pytest.fixture
def run():
    """run(coro_fn, *args): runs coro_fn(*args) to completion on one goloop loop the test keeps."""
    loop = goloop.new_event_loop()
    try:
        yield lambda fn, *a: loop.run_until_complete(fn(*a))
    finally:
        loop.close()
        asyncio.set_event_loop(None)


# ---- the loop ----

def test_call_soon(run):
    async def batch(n):
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        left = [3 * n]  # the callbacks that run: not the cancelled ones

        def cb(x):
            left[0] -= 1
            if not left[0]:
                done.set_result(x)
        for i in range(n):
            loop.call_soon(cb, i)
            loop.call_soon(cb, i).cancel()
            loop.call_soon(cb, i, context=None)
        t = threading.Thread(target=lambda: [loop.call_soon_threadsafe(cb, i) for i in range(n)])
        t.start()
        await done
        t.join()
    assert_no_growth(lambda k: run(batch, k), 200)


def test_call_later_and_call_at(run):
    async def batch(n):
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        left = [2 * n]

        def cb(x):
            left[0] -= 1
            if not left[0]:
                done.set_result(x)
        for i in range(n):
            loop.call_later(0.001 * (i % 3), cb, i)
            loop.call_at(loop.time(), cb, i)
            loop.call_later(60, cb, i).cancel()  # cancelled timers leave the heap
        await done
        await asyncio.sleep(0)
    assert_no_growth(lambda k: run(batch, k), 200)


# ---- TCP and TLS ----

class Echo(asyncio.Protocol):
    live = 0  # server-side connections not lost yet

    def connection_made(self, tr):
        self.tr = tr
        Echo.live += 1

    def data_received(self, data):
        self.tr.write(data)

    def connection_lost(self, exc):
        Echo.live -= 1


class Client(asyncio.Protocol):
    def __init__(self, loop):
        self.loop = loop
        self.waiter = None
        self.got = b""
        self.closed = loop.create_future()

    def connection_made(self, tr):
        self.tr = tr

    def data_received(self, data):
        self.got += data
        if self.waiter is not None and len(self.got) >= self.want:
            self.waiter.set_result(None)

    def connection_lost(self, exc):
        self.closed.set_result(None)

    async def round_trip(self, data):
        self.got, self.want = b"", len(data)
        self.waiter = self.loop.create_future()
        self.tr.write(data)
        await self.waiter
        assert self.got == data


def tcp_ops(run, server_ssl=None, client_ssl=None, cycles=0):
    """step(k) for k round trips on one connection, and k // cycles connections made and
    closed (cycles=0: none)."""
    state = {}

    async def start():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(Echo, "127.0.0.1", 0, ssl=server_ssl)
        state["srv"], state["port"] = srv, srv.sockets[0].getsockname()[1]
        state["conn"] = await connect()

    async def connect():
        loop = asyncio.get_running_loop()
        _, c = await loop.create_connection(lambda: Client(loop), "127.0.0.1", state["port"],
                                            ssl=client_ssl, server_hostname="localhost" if client_ssl else None)
        return c

    async def batch(k):
        c = state["conn"]
        for i in range(k):
            await c.round_trip(b"%d" % i * 50)
        for _ in range(k // cycles if cycles else 0):
            c2 = await connect()
            await c2.round_trip(b"x" * 100)
            c2.tr.close()
            await c2.closed
        # the server's side of those connections is gone too before the counts are read
        while Echo.live > 1:
            await asyncio.sleep(0.001)

    async def stop():
        state["conn"].tr.close()
        await state["conn"].closed
        state["srv"].close()
        await state["srv"].wait_closed()

    run(start)
    return lambda k: run(batch, k), lambda: run(stop)


def test_tcp_round_trip(run):
    step, stop = tcp_ops(run)
    try:
        assert_no_growth(step, 50)
    finally:
        stop()


def test_tcp_connections(run):
    step, stop = tcp_ops(run, cycles=1)
    try:
        assert_no_growth(step, 50)
    finally:
        stop()


def test_tls_round_trip(run, certs):
    step, stop = tcp_ops(run, certs.server_context(), certs.client_context())
    try:
        assert_no_growth(step, 50)
    finally:
        stop()


def test_tls_connections(run, certs):
    # a handshake costs far more than a round trip on a debug build: one new connection in 5
    step, stop = tcp_ops(run, certs.server_context(), certs.client_context(), cycles=5)
    try:
        assert_no_growth(step, 25)
    finally:
        stop()


# ---- the server: ASGI, WSGI, WebSocket ----

def http_requests(port, k, path=b"/x?y=1", close_every=5):
    """k requests with a body, keep-alive; a new connection every close_every requests."""
    s = f = None
    for i in range(k):
        if s is None:
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            f = s.makefile("rb")
        last = (i + 1) % close_every == 0 or i == k - 1
        s.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-A: b\r\n"
                  + (b"Connection: close\r\n" if last else b"") + b"\r\nhello")
        line = f.readline()
        assert line.startswith(b"HTTP/1.1 200"), line
        n = None
        while (h := f.readline()) not in (b"\r\n", b""):
            if h.lower().startswith(b"content-length:"):
                n = int(h.split(b":")[1])
        assert n is not None and len(f.read(n)) == n
        if last:
            f.close()
            s.close()
            s = f = None


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"x-n", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": b"got " + body})


def wsgi_app(environ, start_response):
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(4 + len(body)))])
    return [b"got ", body]


def test_asgi_request():
    from test_serve_http import serving
    with serving(asgi_app) as server:
        assert_no_growth(lambda k: http_requests(server.port, k), 50)


def at_once_request(port, path="/at-once"):
    """One request the application refuses before returning a coroutine: a 500, closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        assert got.startswith(b"HTTP/1.1 500"), got[:80]


def test_asgi_request_with_the_access_log(monkeypatch):
    """The access log's call from the C wrapper of the application's coroutine (asgi_run.c),
    and from a request whose application raised before returning one (asgi.c's launch), with
    goloop's own logging (the lines batched per loop iteration)."""
    import os

    from goloop.serve import accesslog
    from test_serve_http import serving
    from test_serve_logs import own_logging

    devnull = own_logging(monkeypatch, open(os.devnull, "w"))

    def app(scope, receive, send):
        if scope.get("path") == "/at-once":
            raise ValueError("refused before a coroutine")
        return asgi_app(scope, receive, send)

    def step(k):
        http_requests(server.port, k)
        for _ in range(k // 10):
            at_once_request(server.port)

    try:
        with serving(app, access_log=True) as server:
            assert_no_growth(step, 50)
    finally:
        accesslog.flush()
        devnull.close()


def test_asgi_request_coroutine_closed(monkeypatch):
    """A request's coroutine closed from outside while it waits (asgi_run.c's close, with the
    access log's call): a 500, closed, and the Task's step of the closed coroutine."""
    import os

    from goloop.serve import accesslog
    from test_serve_http import serving
    from test_serve_logs import own_logging
    from test_serve_runner import _closed_app
    from test_serve_slow_readers import wait_for

    devnull = own_logging(monkeypatch, open(os.devnull, "w"))
    seen = {}

    def step(k):
        for _ in range(k):
            at_once_request(server.port, "/before")
        # The app's own record of each request, cleared once its last entry is in: the
        # Task's done callback runs after the client has its answer, and an entry added
        # after the clear would be counted as growth.
        wait_for("each request's last record", lambda: len(seen.get("task ended", ())) == k, 10)
        seen.clear()

    try:
        with serving(_closed_app(seen), access_log=True, lifespan="off") as server:
            assert_no_growth(step, 20)
    finally:
        accesslog.flush()
        devnull.close()


@pytest.mark.parametrize("close_every", [
    pytest.param(1000, id="one-connection-a-step"),
    pytest.param(5, id="new-connection-every-5")])
def test_wsgi_request(close_every):
    # A pool thread keeps bounded caches of the strs it put in environs (wsgi.c: header keys
    # and values by hash slot, the client's port by port modulo 67): they fill as new
    # connections bring new ports, then stay the same size. One thread (a second one answers
    # only when the first stalls, whenever load has it) whose caches the warm-up fills: ports
    # come in steps of two, but other processes' connections take some in between, so enough
    # connections that every port slot has surely been hit (coupon collector: 67 slots, 1000
    # draws leave one empty with odds ~1e-5).
    from test_serve_http import serving
    with serving(wsgi_app, interface="wsgi", threads=1) as server:
        http_requests(server.port, 1000, close_every=1)
        assert_no_growth(lambda k: http_requests(server.port, k, close_every=close_every), 50)


async def ws_echo(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            return
        if msg.get("text") is not None:
            await send({"type": "websocket.send", "text": msg["text"]})
        else:
            await send({"type": "websocket.send", "bytes": msg["bytes"]})


def test_websocket_message():
    from test_serve_http import serving
    from test_serve_ws import frame, raw_upgrade, read_frame
    with serving(ws_echo) as server:
        s, f, _ = raw_upgrade(server)
        try:
            def step(k):
                for i in range(k):
                    text = i % 2 == 0
                    payload = (b"message %d " % i) * (1 + i % 20)
                    s.sendall(frame(0x81 if text else 0x82, payload))
                    assert read_frame(f) == (0x81 if text else 0x82, payload)
                # and one connection opened and closed
                s2, f2, _ = raw_upgrade(server)
                s2.sendall(frame(0x88, b"\x03\xe8"))
                assert read_frame(f2)[0] == 0x88
                f2.close()
                s2.close()
            assert_no_growth(step, 50)
        finally:
            f.close()
            s.close()


# ---- goloop.http ----

def test_http_parser_feeding_requests():
    from goloop import http as ghttp

    class Proto:
        def __init__(self):
            self.n = 0

        def on_message_begin(self):
            pass

        def on_url(self, url):
            pass

        def on_header(self, name, value):
            pass

        def on_headers_complete(self):
            pass

        def on_body(self, body):
            pass

        def on_message_complete(self):
            self.n += 1

        def on_chunk_header(self):
            pass

        def on_chunk_complete(self):
            pass

    req = (b"POST /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\nContent-Length: 5\r\n\r\nhello"
           b"GET /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")

    def step(k):
        p = Proto()
        parser = ghttp.HttpRequestParser(p)
        for i in range(k):
            parser.feed_data(req)
            if i % 10 == 0:  # split across feeds, and an URL parsed
                q = ghttp.HttpRequestParser(p)
                for j in range(0, len(req), 7):
                    q.feed_data(req[j:j + 7])
                ghttp.parse_url(b"http://u:p@h:80/p?q#f")
                assert q.get_method() == b"GET"
        try:
            ghttp.HttpRequestParser(p).feed_data(b"BAD\x00 / HTTP/1.1\r\n\r\n")
        except ghttp.HttpParserError:
            pass
        assert p.n == 2 * k + 2 * ((k + 9) // 10)
    assert_no_growth(step, 200)


def parked_app(environ, start_response):
    if environ["PATH_INFO"] != "/gen":
        environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    start_response("200 OK", [])
    part = b"p" * 65536
    return (part for _ in range(160))  # 10 MiB: past the output's bound and the kernel's buffers


def test_wsgi_parked_response():
    # One pool thread; a client that does not read a generator body, then another client's
    # request: answered only once the thread parked the first response; then the first client
    # reads it all (the response resumed, ended, its objects, record and context released).
    from test_serve_http import get, serving
    from test_serve_slow_readers import stalled

    def step(k):
        for _ in range(k):
            s = stalled(server, "/gen", 1)[0]
            try:
                assert get(server, "/small")[2] == b"ok"
                s.settimeout(30)
                data = b""
                while not data.endswith(b"0\r\n\r\n"):
                    b = s.recv(1 << 20)
                    assert b
                    data = (data + b)[-8:]
            finally:
                s.close()

    with serving(parked_app, interface="wsgi", threads=1, min_response_rate=0) as server:
        http_requests(server.port, 1000, close_every=1)  # the thread's caches filled (test_wsgi_request)
        assert_no_growth(step, 10)
