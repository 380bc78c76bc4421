"""goloop serve and clients that do not read their responses (goloop/httpserver/writerate.go,
goloop/binding/server_held.go; docs/server-behaviour.md, "Slow clients"): a WSGI whole-bytes body is
sent from its bytes object (a reference held, not a copy), other large parts are copied a
slice at a time as the socket takes them, so a connection holds a bounded amount; a client
reading slower than min_response_rate after min_response_grace is dropped: its ASGI
application sees http.disconnect, its WSGI iterable is closed and the pool thread freed.

No test here times anything: they wait for a state (a reference count, an event) with a
generous bound that only ends a test that would otherwise hang."""
import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import types
import zlib

from nethelpers import free_port, wait_listening
from test_serve_http import get, serving

HERE = os.path.dirname(os.path.abspath(__file__))

WSGI = dict(interface="wsgi")
MiB = 1 << 20
BIG = b"b" * (8 * MiB)  # one object, answered to every client
BUF = bytearray(8 * MiB)  # not a bytes object: copied (a slice at a time)


def rss(pid="self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * 4096


def wait_for(what, cond, bound=30.0):
    end = time.monotonic() + bound
    while not cond():
        assert time.monotonic() < end, f"still waiting for {what}"
        time.sleep(0.01)


def stalled(server, path, n):
    """n connections that ask for path and never read (small receive buffers)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", server.port))
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        socks.append(s)
    return socks


def bytes_app(environ, start_response):
    if environ["PATH_INFO"] == "/small":
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    start_response("200 OK", [("Content-Length", str(len(BIG)))])
    return [BIG]


def test_whole_bytes_body_is_held_not_copied():
    """Ten clients that do not read an 8 MiB bytes body: the server holds ten references to
    the one object (no copy: the process grows far less than 80 MiB), the pool threads are
    free (another client is answered), and the references go once the clients leave."""
    base = sys.getrefcount(BIG)
    with serving(bytes_app, threads=2, min_response_rate=0, **WSGI) as server:
        before = rss()
        socks = stalled(server, "/big", 10)
        try:
            wait_for("ten held references", lambda: sys.getrefcount(BIG) - base >= 10)
            assert get(server, "/small")[2] == b"ok"
            assert rss() - before < 40 * MiB
        finally:
            for s in socks:
                s.close()
        wait_for("the references released", lambda: sys.getrefcount(BIG) == base)


WRITERS = []


def write_app(environ, start_response):
    if environ["PATH_INFO"] == "/small":
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    if environ["PATH_INFO"] == "/writers":
        start_response("200 OK", [])
        return [b"%d" % len(WRITERS)]
    write = start_response("200 OK", [("Content-Length", str(2 * len(BUF)))])
    WRITERS.append(1)
    write(BUF)  # a buffer that may change after the call: copied, a slice at a time
    write(BUF)
    return []


def test_large_copied_part_waits_for_the_socket_in_slices():
    """Five clients that do not read two 8 MiB write()s of a bytearray: each pool thread waits
    for its socket with a bounded copy queued (under 1 MiB a connection, not 8 or 16 MiB), the
    GIL released (a sixth thread answers another client). The server runs in a process of its
    own, whose resident size is its own."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "goloop", "serve", "--interface", "wsgi", "--threads", "6",
                             "--min-response-rate", "0", "--port", str(port), "test_serve_slow_readers:write_app"],
                            cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(proc, port, "goloop serve", timeout=60)
        server = types.SimpleNamespace(port=port)
        assert get(server, "/small")[2] == b"ok"
        before = rss(proc.pid)
        socks = stalled(server, "/w", 5)
        try:
            wait_for("five writers", lambda: get(server, "/writers")[2] == b"5")
            grown = 0
            for _ in range(50):  # a copy of the whole part would show at once
                grown = max(grown, rss(proc.pid) - before)
                time.sleep(0.02)
            assert grown < 20 * MiB, grown
        finally:
            for s in socks:
                s.close()
    finally:
        proc.terminate()
        proc.wait(20)


CLOSED = threading.Event()


class Stream:
    """An iterable of 64 KiB parts (64 MiB) whose close() is recorded."""

    def __iter__(self):
        part = b"s" * 65536
        for _ in range(1024):
            yield part

    def close(self):
        CLOSED.set()


def stream_app(environ, start_response):
    if environ["PATH_INFO"] == "/small":
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    start_response("200 OK", [])
    return Stream()


def test_wsgi_reader_slower_than_min_response_rate_frees_the_thread():
    """One pool thread, a client that never reads a streamed body: after the grace the
    connection is dropped, the iterable's close() is called, and the thread answers the next
    client."""
    CLOSED.clear()
    with serving(stream_app, threads=1, min_response_rate=100_000, min_response_grace=0.3, **WSGI) as server:
        socks = stalled(server, "/stream", 1)
        try:
            assert CLOSED.wait(30), "the iterable was not closed"
            assert get(server, "/small")[2] == b"ok"
        finally:
            socks[0].close()


def test_wsgi_reader_stays_without_min_response_rate():
    """min_response_rate 0: no minimum (a grace long past and the client still connected is
    not cut: the body is read in full afterwards)."""
    CLOSED.clear()
    with serving(stream_app, threads=2, min_response_rate=0, min_response_grace=0.1, **WSGI) as server:
        s = stalled(server, "/stream", 1)[0]
        try:
            time.sleep(0.5)
            assert not CLOSED.is_set()
            s.settimeout(30)
            got = 0
            while True:
                b = s.recv(1 << 20)
                if not b or b.endswith(b"0\r\n\r\n"):
                    break
                got += len(b)
            assert got > 64 * MiB
        finally:
            s.close()


ASGI_EVENTS = []


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    part = b"a" * 65536
    try:
        for _ in range(1024):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except OSError:
        pass
    ASGI_EVENTS.append((await asyncio.wait_for(receive(), 30))["type"])


def test_asgi_reader_slower_than_min_response_rate_gets_http_disconnect():
    ASGI_EVENTS.clear()
    with serving(asgi_app, min_response_rate=100_000, min_response_grace=0.3) as server:
        socks = stalled(server, "/", 1)
        try:
            wait_for("the application's end", lambda: ASGI_EVENTS)
            assert ASGI_EVENTS == ["http.disconnect"]
        finally:
            socks[0].close()


async def ws_app(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


def bomb(port, payload, codes):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert b"permessage-deflate" in head.split(b"\r\n\r\n")[0]
        data = head.split(b"\r\n\r\n", 1)[1]
        # FIN, RSV1 (compressed), binary, masked with a zero key
        s.sendall(bytes([0xC2, 0x80 | 127]) + len(payload).to_bytes(8, "big") + b"\0\0\0\0" + payload)
        while len(data) < 4:
            b = s.recv(4096)
            if not b:
                break
            data += b
        codes.append(int.from_bytes(data[2:4], "big") if len(data) >= 4 and data[0] & 0x0F == 8 else None)


def test_websocket_decompression_bomb_is_cut_at_the_bound():
    """Four permessage-deflate messages of 256 MiB of zeros (256 KiB compressed) at once against
    the default 16 MiB --ws-max-size: each closed 1009, and the server grows by about the bound
    each (under 90 MiB together), not by buffers doubled past it (~35 MiB each). The server runs
    in a process of its own."""
    z = zlib.compressobj(1, zlib.DEFLATED, -15)
    zero = bytes(MiB)
    payload = b"".join([z.compress(zero) for _ in range(256)] + [z.flush(zlib.Z_SYNC_FLUSH)])[:-4]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "goloop", "serve", "--port", str(port),
                             "test_serve_slow_readers:ws_app"],
                            cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(proc, port, "goloop serve", timeout=60)
        before = rss(proc.pid)
        codes = []
        ts = [threading.Thread(target=bomb, args=(port, payload, codes)) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert codes == [1009] * 4
        grown = rss(proc.pid) - before
        assert grown < 90 * MiB, grown
    finally:
        proc.terminate()
        proc.wait(20)


async def big_app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"%d" % len(BIG))]})
    await send({"type": "http.response.body", "body": BIG})


def test_h2_stream_with_a_shut_window_holds_the_body_not_a_copy():
    """Ten HTTP/2 streams (h2c, prior knowledge) whose client keeps its window shut, each
    answered one 8 MiB body: the server holds ten references to the one object (no copy
    per stream), released once the client leaves."""
    import h2.config
    import h2.connection
    import h2.settings
    base = sys.getrefcount(BIG)
    with serving(big_app, min_response_rate=0) as server:
        c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        for i in range(10):
            c.send_headers(1 + 2 * i, [(":method", "GET"), (":path", "/"), (":scheme", "http"),
                                       (":authority", "x")], end_stream=True)
        s = socket.create_connection(("127.0.0.1", server.port))
        try:
            s.sendall(c.data_to_send())
            wait_for("ten held references", lambda: sys.getrefcount(BIG) - base >= 10)
        finally:
            s.close()
        wait_for("the references released", lambda: sys.getrefcount(BIG) == base)
