"""goloop serve --interface wsgi: a pool thread ends its request and takes the next ready one
with the GIL kept (wsgi.go's glWsgiTake; for a list or tuple answer in the same call into Go
as its last part, glWsgiSendEnd) when no other pool thread may want the GIL. What must hold
on that path: each connection's responses in order and kept alive, whatever the kind of
answer; an error at the last part ends the request as before (cut, the connection closed)
and the thread goes on; other Python threads (the loop's, the application's) still run while
requests keep coming (the GIL changes hands on CPython's switch interval, within the
application's Python). That path is the leader/follower pool's (test_serve_wsgi_lf.py runs these
tests there); here, in the default hand-off pool, the same answers mix requests answered with
no call into Go and requests a thread adopts, and must hold the same."""
import os
import subprocess
import sys
import threading
import time

import pytest

from test_serve_http import connect, read_response, serving

WSGI = dict(interface="wsgi")


def kinds_app(environ, start_response):
    """The answer's kind by the path's last digit (0-6); its body is the path (6: and dots)."""
    path = environ["PATH_INFO"]
    body = path.encode()
    kind = int(path[-1])
    if kind == 0:  # a list: its one part the last (the request ends in the same call)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]
    if kind == 1:  # a tuple of parts, with the Content-Length: ended by the part completing it
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return (body[:2], b"", body[2:])
    if kind == 2:  # a generator: chunked, ended after it
        start_response("200 OK", [])
        return (body[i:i + 3] for i in range(0, len(body), 3))
    if kind == 3:  # write() then a list
        write = start_response("200 OK", [])
        write(body[:1])
        return [body[1:]]
    if kind == 4:  # an iterable with a close()
        start_response("200 OK", [("Content-Length", str(len(body)))])

        class Parts:
            def __iter__(self):
                yield body

            def close(self):
                pass
        return Parts()
    if kind == 5:  # an empty list
        start_response("204 No Content", [])
        return []
    start_response("200 OK", [])  # a list whose part is too big to send with the GIL held
    return [body + b"." * 20000]


@pytest.mark.parametrize("threads", [1, 3])
def test_pipelined_answers_of_every_kind_in_order(threads):
    """16 connections each send 14 pipelined requests at once: every answer kind follows
    every other on one connection and on one thread, each answered in its order with its
    own body, the connection kept alive throughout."""
    conns, depth = 16, 14
    with serving(kinds_app, threads=threads, **WSGI) as server:
        socks = [connect(server) for _ in range(conns)]
        try:
            for c, s in enumerate(socks):
                s.sendall(b"".join(b"GET /c%d/r%d/%d HTTP/1.1\r\nHost: x\r\n\r\n" % (c, i, i % 7)
                                   for i in range(depth)))
            for c, s in enumerate(socks):
                f = s.makefile("rb")
                for i in range(depth):
                    status, headers, body = read_response(f)
                    path = b"/c%d/r%d/%d" % (c, i, i % 7)
                    if i % 7 == 5:
                        assert (status, body) == (204, b""), (c, i)
                    else:
                        assert (status, body) == (200, path + b"." * 20000 * (i % 7 == 6)), (c, i, headers)
                    assert headers.get("connection") != "close"
            for s in socks:  # still open: one more each
                s.sendall(b"GET /again0 HTTP/1.1\r\nHost: x\r\n\r\n")
            for s in socks:
                assert read_response(s.makefile("rb"))[::2] == (200, b"/again0")
        finally:
            for s in socks:
                s.close()


def test_errors_at_the_last_part_end_the_request_and_the_thread_goes_on(caplog):
    """--threads 1, pipelined: a list answer shorter than its Content-Length fails at its
    last part (the response cut, the connection closed, the error logged), as does a list
    whose last part is not bytes (a 500, or the response cut after its first part); the one thread answers the next connections."""
    def app(environ, start_response):
        path = environ["PATH_INFO"]
        if path == "/short":
            start_response("200 OK", [("Content-Length", "10")])
            return [b"abc"]
        if path == "/notbytes":
            start_response("200 OK", [])
            return ["b"]
        if path == "/cut":  # its first part sent
            start_response("200 OK", [])
            return [b"a", "b"]
        start_response("200 OK", [])
        return [path.encode()]

    with serving(app, threads=1, **WSGI) as server:
        for bad, status in ((b"/short", 200), (b"/notbytes", 500), (b"/cut", 200)):
            with connect(server) as s:
                s.sendall(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET %s HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"GET /lost HTTP/1.1\r\nHost: x\r\n\r\n" % bad)
                f = s.makefile("rb")
                assert read_response(f)[::2] == (200, b"/ok")
                line = f.readline()
                assert line.startswith(b"HTTP/1.1 %d " % status), line
                rest = f.read()  # to the close: the request after it is not answered
                assert b"/lost" not in rest, rest
            with connect(server) as s:
                s.sendall(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\nGET /next2 HTTP/1.1\r\nHost: x\r\n\r\n")
                f = s.makefile("rb")
                assert read_response(f)[::2] == (200, b"/next")
                assert read_response(f)[::2] == (200, b"/next2")
    text = "\n".join(r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)
    assert "shorter than Content-Length" in text and "must be bytes" in text, text


_LOAD = r"""
import os, socket, sys, selectors
port, n, stop_r = (int(x) for x in sys.argv[1:4])
socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(n)]
req = b"GET /load0 HTTP/1.1\r\nHost: x\r\n\r\n" * 2
sel = selectors.DefaultSelector()
bufs = {}
for s in socks:
    s.setblocking(False)
    s.sendall(req)
    sel.register(s, selectors.EVENT_READ)
    bufs[s] = b""
sel.register(stop_r, selectors.EVENT_READ)
while True:  # two requests in flight on each connection until told to stop
    for key, _ in sel.select(60):
        if key.fileobj == stop_r:
            sys.exit(0)
        s = key.fileobj
        data = s.recv(65536)
        assert data, "closed"
        bufs[s] += data
        while b"/load0" in bufs[s]:
            bufs[s] = bufs[s].split(b"/load0", 1)[1]
            s.send(req[:len(req) // 2])
"""


def test_other_python_threads_run_while_requests_keep_coming():
    """A client keeps two requests in flight on each of 10 connections, so a ready request
    is nearly always waiting when the pool thread finishes one (it keeps the GIL from one to
    the next): meanwhile a thread the application started finishes its pure-Python work,
    the loop thread runs a callback given with call_soon_threadsafe, and this test's own
    thread runs; requests are answered before, while the application's thread runs, and
    after."""
    served = [0]
    loaded = threading.Event()
    worked = threading.Event()
    started, at_end = [], []

    def work():
        x = 0
        for i in range(3_000_000):  # holds the GIL but for the interpreter's switches
            x += i
        at_end.append(served[0])
        worked.set()

    lock = threading.Lock()

    def app(environ, start_response):
        with lock:
            served[0] += 1
            n = served[0]
        if n == 300:
            loaded.set()
            started.append(threading.Thread(target=work, daemon=True))
            started[0].start()
        x = 0
        for i in range(200):
            x += i
        start_response("200 OK", [])
        return [environ["PATH_INFO"].encode()]

    stop_r, stop_w = os.pipe()
    try:
        with serving(app, threads=2, **WSGI) as server:
            client = subprocess.Popen([sys.executable, "-c", _LOAD, str(server.port), "10", str(stop_r)],
                                      pass_fds=(stop_r,))
            try:
                assert loaded.wait(60)
                ran = threading.Event()
                server._loop.call_soon_threadsafe(ran.set)
                assert ran.wait(60)
                assert worked.wait(120)
                assert at_end[0] > 300  # requests were answered while it ran
                mine = sum(range(100_000))  # this thread runs Python too
                before = served[0]
                assert client.poll() is None  # the load went on throughout
                ok = threading.Event()
                server._loop.call_soon_threadsafe(ok.set)
                assert ok.wait(60)
                for _ in range(6000):  # and requests are still answered (a bound, not a timing check)
                    if served[0] != before:
                        break
                    assert client.poll() is None
                    threading.Event().wait(0.01)
                assert served[0] != before
                assert mine == 4999950000
            finally:
                os.write(stop_w, b"s")
                assert client.wait(60) == 0
    finally:
        os.close(stop_r)
        os.close(stop_w)


def test_held_answer_written_while_the_next_request_blocks():
    """A thread that takes the next request at once holds the answer it ended, to write it
    with the answers after it (wsgi.go's endTake); if the next request's application then
    blocks, the held answer is still written (by the progress timer), not kept until that
    application returns. One thread: while /slow runs, the backup reads /a (with /b
    pipelined behind it) and then /c; /a, quick, ends with two requests ready (/c and /b,
    parsed as /a ended), so its answer is held as the thread takes the next, whose
    application waits for the client to have read /a's answer."""
    go, started, a_done, a_read = (threading.Event() for _ in range(4))

    def app(environ, start_response):
        path = environ["PATH_INFO"]
        body = path.encode()
        if path == "/slow":
            started.set()
            assert go.wait(30)
        elif path == "/a":
            a_done.set()
        elif a_done.is_set() and not a_read.wait(3):
            # (without the timer's write, the answer left ~5 s later, with the keep-alive sweep)
            body = b"late"
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]

    with serving(app, threads=1, **WSGI) as server:
        conns = [connect(server) for _ in range(3)]
        try:
            files = [c.makefile("rb") for c in conns]
            conns[0].sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            assert started.wait(30)
            conns[1].sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.05)  # read before /c (not needed for the test to pass, to exercise the hold)
            conns[2].sendall(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.2)
            go.set()
            assert read_response(files[1])[::2] == (200, b"/a")
            a_read.set()
            assert read_response(files[2])[::2] == (200, b"/c")  # neither b"late"
            assert read_response(files[1])[::2] == (200, b"/b")
            assert read_response(files[0])[::2] == (200, b"/slow")
        finally:
            go.set()
            a_read.set()
            for c in conns:
                c.close()
