"""goloop serve --interface wsgi on plain TCP with GOLOOP_WSGI_POOL=leader: the pool threads lead
the server's poller themselves (leader/follower, goloop/binding/wsgi.go; the default is the
hand-off pool, test_serve_wsgi_handoff.py). What must hold whoever leads: a
thread waiting for its request's body or for its output to drain reads the socket itself
when nobody else does (--threads 1), the poller is taken over when its leader runs a
blocked application call, and the engine's timers (keep-alive) and answers (503) go on
while every thread is busy. GOLOOP_WSGI_DRIVER=goroutine keeps the goroutine driver.
test_serve_wsgi.py's, the parking and the take-with-the-GIL tests run here again in this pool
(at the end)."""
import ctypes
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import test_serve_wsgi
import test_serve_wsgi_park
import test_serve_wsgi_take
from test_serve_http import connect, get, read_response, serving

WSGI = dict(interface="wsgi")


@pytest.fixture(autouse=True)
def leader_pool(monkeypatch):
    monkeypatch.setenv("GOLOOP_WSGI_POOL", "leader")


def path_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [environ["PATH_INFO"].encode()]


def blocking_app():
    """path_app whose /block waits until released: (app, entered, release)."""
    release, entered = threading.Event(), threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/block":
            entered.set()
            assert release.wait(30)
        return path_app(environ, start_response)
    return app, entered, release


def test_one_thread_reads_its_slow_body_while_another_connection_sends():
    """--threads 1: the only thread waits for the rest of its body; it must read the
    socket itself (leading the poller), and the other connection's request waits for it."""
    first = threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/slow":
            inp = environ["wsgi.input"]
            part = inp.read(5)
            first.set()
            part += inp.read(5)
            start_response("200 OK", [])
            return [part]
        return path_app(environ, start_response)

    with serving(app, threads=1, **WSGI) as server, connect(server) as a, connect(server) as b:
        a.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
        assert first.wait(20)
        b.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        a.sendall(b"world")
        assert read_response(a.makefile("rb"))[::2] == (200, b"helloworld")
        assert read_response(b.makefile("rb"))[::2] == (200, b"/fast")


def test_one_thread_expect_100_continue():
    """The 100 Continue leaves when the app reads, though the thread that owes it is the
    only one and waits for the body it asked for."""
    def app(environ, start_response):
        body = environ["wsgi.input"].read(5)
        start_response("200 OK", [])
        return [body]

    with serving(app, threads=1, **WSGI) as server, connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        f = s.makefile("rb")
        assert f.readline().startswith(b"HTTP/1.1 100 ")
        assert f.readline() == b"\r\n"
        s.sendall(b"abcde")
        assert read_response(f)[::2] == (200, b"abcde")


def test_poller_taken_over_while_a_thread_is_blocked():
    """--threads 2: the thread that read /block runs it until released; the other thread
    takes the poller over and answers new connections and keep-alive requests meanwhile."""
    app, entered, release = blocking_app()
    with serving(app, threads=2, **WSGI) as server:
        out = []
        t = threading.Thread(target=lambda: out.append(get(server, "/block")))
        t.start()
        try:
            assert entered.wait(20)
            for i in range(3):
                assert get(server, f"/new{i}")[::2] == (200, f"/new{i}".encode())
            with connect(server) as s:
                f = s.makefile("rb")
                for i in range(3):
                    s.sendall(b"GET /ka%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
                    assert read_response(f)[::2] == (200, b"/ka%d" % i)
        finally:
            release.set()
            t.join(20)
        assert out[0][::2] == (200, b"/block")


def test_every_thread_busy_timers_and_accepts_go_on():
    """--threads 1 blocked in the app: an idle keep-alive connection is still closed at its
    deadline and a new connection's request is read (answered once the thread is free)."""
    app, entered, release = blocking_app()
    with serving(app, threads=1, timeout_keep_alive=1, **WSGI) as server:
        idle = connect(server)
        idle.sendall(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(idle.makefile("rb"))[::2] == (200, b"/first")
        out = []
        t = threading.Thread(target=lambda: out.append(get(server, "/block")))
        t.start()
        try:
            assert entered.wait(20)
            idle.settimeout(20)
            assert idle.recv(100) == b""  # closed at its keep-alive deadline
            with connect(server) as s:
                s.sendall(b"GET /queued HTTP/1.1\r\nHost: x\r\n\r\n")
                release.set()
                assert read_response(s.makefile("rb"))[::2] == (200, b"/queued")
        finally:
            release.set()
            t.join(20)
            idle.close()
        assert out[0][::2] == (200, b"/block")


def test_one_thread_backpressure_drains():
    """--threads 1: the thread waits for its output to drain (a slow reader), leading the
    poller itself: the writable events that drain it are its own to handle."""
    n = 64

    def app(environ, start_response):
        start_response("200 OK", [])
        return (b"%06d" % i + b"x" * 65530 for i in range(n))

    with serving(app, threads=1, **WSGI) as server, connect(server) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        st, _, body = read_response(s.makefile("rb"))
        assert st == 200 and len(body) == n * 65536
        assert [body[i * 65536:i * 65536 + 6] for i in (0, n - 1)] == [b"000000", b"%06d" % (n - 1)]


@pytest.mark.parametrize("driver", ["goroutine", "pool"])
def test_both_drivers_serve(monkeypatch, driver):
    """GOLOOP_WSGI_DRIVER=goroutine (A/B) and the default both serve pipelined requests."""
    if driver == "goroutine":
        monkeypatch.setenv("GOLOOP_WSGI_DRIVER", "goroutine")
    else:
        monkeypatch.delenv("GOLOOP_WSGI_DRIVER", raising=False)
    with serving(path_app, threads=2, **WSGI) as server, connect(server) as s:
        s.sendall(b"".join(b"GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(4)))
        f = s.makefile("rb")
        assert [read_response(f)[2] for _ in range(4)] == [b"/p%d" % i for i in range(4)]


def test_request_read_while_the_app_runs_python_is_answered():
    """--threads 2, with the GIL: one thread runs Python without pause (the GIL changes
    hands only by the interpreter's forced switches); requests that come meanwhile are read
    by the other thread (the lead was left vacant and the pool stalled), which takes one only
    once it holds the GIL, and answered while the first still runs."""
    release, entered = threading.Event(), threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/spin":
            entered.set()
            deadline = time.monotonic() + 60  # a bound if the test fails, not a timing check
            while not release.is_set() and time.monotonic() < deadline:
                pass
        return path_app(environ, start_response)

    with serving(app, threads=2, **WSGI) as server:
        out = []
        t = threading.Thread(target=lambda: out.append(get(server, "/spin")))
        t.start()
        try:
            assert entered.wait(20)
            for i in range(3):
                assert get(server, f"/x{i}")[::2] == (200, f"/x{i}".encode())
            assert not release.is_set() and t.is_alive()  # answered while /spin runs
        finally:
            release.set()
            t.join(20)
        assert out[0][::2] == (200, b"/spin")


@pytest.mark.parametrize("threads", [1, 3])
def test_many_connections_pipelined_all_answered_in_order(threads):
    """20 connections each send 5 pipelined requests at once to an app that runs some
    Python per request: every request is answered, each connection's in its order, whichever
    thread reads and whichever takes them (--threads 3: threads finishing a request take the
    next read one, or wait for the GIL before they take one)."""
    def app(environ, start_response):
        x = 0
        for i in range(2000):
            x += i
        return path_app(environ, start_response)

    conns, depth = 20, 5
    with serving(app, threads=threads, **WSGI) as server:
        socks = [connect(server) for _ in range(conns)]
        try:
            for c, s in enumerate(socks):
                s.sendall(b"".join(b"GET /c%d/r%d HTTP/1.1\r\nHost: x\r\n\r\n" % (c, i) for i in range(depth)))
            for c, s in enumerate(socks):
                f = s.makefile("rb")
                assert [read_response(f)[::2] for _ in range(depth)] == [(200, b"/c%d/r%d" % (c, i))
                                                                        for i in range(depth)]
        finally:
            for s in socks:
                s.close()


_CLIENT = r"""
import os, socket, sys
port, go_r, release_w, n = (int(x) for x in sys.argv[1:5])
socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(n)]
os.write(1, b"c")  # connected
assert os.read(go_r, 1) == b"g"  # the app holds the GIL from now until the release
for i, s in enumerate(socks):
    s.sendall(b"GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
import time
time.sleep(1)  # the server reads them meanwhile (the count asserted does not depend on it)
os.write(release_w, b"r")
for i, s in enumerate(socks):
    data = b""
    while not data.endswith(b"/r%d" % i):
        chunk = s.recv(4096)
        assert chunk, data
        data += chunk
    assert data.startswith(b"HTTP/1.1 200 "), data
os.write(1, b"d")
"""


@pytest.mark.skipif(not getattr(sys, "_is_gil_enabled", lambda: True)(), reason="with the GIL only")
def test_requests_read_while_the_gil_is_held_are_not_bound_to_waiting_threads():
    """--threads 6, with the GIL: an app call holds the GIL (a C call that does not release
    it) while 5 requests arrive. The pool reads them, but only one thread at a time waits for
    the GIL to claim one, holding none; when the GIL is free they are answered by that thread
    and the one that held it, not each by its own thread woken to wait for the GIL (before:
    one thread per request, woken every other millisecond while the pool stalled)."""
    n = 5
    go_r, go_w = os.pipe()
    release_r, release_w = os.pipe()
    libc = ctypes.PyDLL(None)  # its functions are called with the GIL held
    libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    idents = {}

    def app(environ, start_response):
        path = environ["PATH_INFO"]
        if path == "/hold":
            os.write(go_w, b"g")
            buf = ctypes.create_string_buffer(1)
            assert libc.read(release_r, buf, 1) == 1  # blocks, GIL held
        else:
            idents[path] = threading.get_ident()
        return path_app(environ, start_response)

    try:
        with serving(app, threads=6, **WSGI) as server, connect(server) as s:
            client = subprocess.Popen([sys.executable, "-c", _CLIENT, str(server.port), str(go_r), str(release_w),
                                       str(n)], stdout=subprocess.PIPE, pass_fds=(go_r, release_w))
            try:
                assert client.stdout.read(1) == b"c"
                s.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(s.makefile("rb"))[::2] == (200, b"/hold")
                assert client.stdout.read(1) == b"d"
                assert client.wait(60) == 0
            finally:
                if client.poll() is None:
                    client.kill()
                    client.wait()
        assert sorted(idents) == ["/r%d" % i for i in range(n)]
        # 2: the claiming thread and the one that held the GIL (3: a stall of the loaded
        # machine let the timer wake one more); before: 5, one per request
        assert len(set(idents.values())) <= 3, idents
    finally:
        for fd in (go_r, go_w, release_r, release_w):
            os.close(fd)


# test_serve_wsgi.py's, the parking and the take tests again, in this pool (the fixture above), under
# names of their own here (their functions keep their modules' globals)
def _again(module, tag):
    for name, obj in list(vars(module).items()):
        if name.startswith("test_") and callable(obj):
            globals()[f"test_{tag}_{name[5:]}"] = obj


_again(test_serve_wsgi, "wsgi")
_again(test_serve_wsgi_park, "park")
_again(test_serve_wsgi_take, "take")
certs = test_serve_wsgi.certs
