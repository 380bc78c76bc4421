"""goloop serve --interface wsgi, the hand-off pool (the default; goloop/binding/wsgi.h,
wsgi_handoff.c and .go): a goroutine reads and parses, the pool threads take requests from a C
queue and answer them with no call into Go when the answer is one part of up to 64 KiB
(detached), and adopt the request (Go makes it theirs, as the leader/follower pool's) for
anything else: reading a body still arriving or over 64 KiB (a smaller one that came whole
with its head is handed over with it), an answer in parts, write(), a file, a larger part,
an answer whose length is not its Content-Length. WsgiServer.handoff_counts() says which way each request went, so these tests
see the path taken, not only the answer.

The other WSGI suites run in this pool too; test_serve_wsgi_lf.py runs test_serve_wsgi.py's and
the parking tests again in the leader/follower pool (GOLOOP_WSGI_POOL=leader)."""
import hashlib
import os
import socket
import threading

import pytest

from test_serve_http import connect, get, read_response, serving

WSGI = dict(interface="wsgi")


@pytest.fixture(autouse=True)
def handoff_pool(monkeypatch):
    monkeypatch.delenv("GOLOOP_WSGI_POOL", raising=False)  # (the default)


def counts(server):
    return server._srv.handoff_counts()


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"Hello, world!"]


def test_one_part_answers_are_detached_and_keep_alive():
    with serving(hello, threads=2, **WSGI) as server:
        with connect(server) as s:
            f = s.makefile("rb")
            for _ in range(20):
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                status, headers, body = read_response(f)
                assert (status, body) == (200, b"Hello, world!")
                assert headers["content-length"] == "13"
        assert counts(server) == (20, 0)


def test_pipelined_requests_answered_in_order():
    def path_app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    with serving(path_app, threads=4, **WSGI) as server:
        with connect(server) as s:
            s.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(30)))
            f = s.makefile("rb")
            assert [read_response(f)[2] for _ in range(30)] == [b"/%d" % i for i in range(30)]
        assert counts(server)[0] == 30


def echo(environ, start_response):
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return [body]


def post(body, chunked=False):
    if chunked:
        return b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
            len(body), body)
    return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def test_a_small_body_that_came_whole_is_read_detached():
    """A body of up to 64 KiB that arrived with its head goes to the thread with it: reading
    wsgi.input makes no call into Go, and the answer stays detached; pipelined requests each
    get their own body; a request with no body reads an empty one the same way."""
    bodies = [os.urandom(1000), b"", b"line one\nline two\n", os.urandom(3000)]

    def lines(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [b"|".join(environ["wsgi.input"])]

    with serving(echo, threads=2, **WSGI) as server:
        with connect(server) as s:
            f = s.makefile("rb")
            s.sendall(b"".join(post(b) for b in bodies) + post(b"chunked body", chunked=True))
            for b in bodies + [b"chunked body"]:
                assert read_response(f)[::2] == (200, b)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(f)[::2] == (200, b"")
        assert counts(server) == (6, 0)
    with serving(lines, threads=1, **WSGI) as server:
        with connect(server) as s:
            s.sendall(post(b"a\nb\nc"))
            assert read_response(s.makefile("rb"))[::2] == (200, b"a\n|b\n|c")
        assert counts(server) == (1, 0)

    def digest(environ, start_response):  # a small answer: the body's size and hash
        body = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"%d %s" % (len(body), hashlib.sha256(body).hexdigest().encode())]

    # over 16 KiB: the job's memory is the body's for the request only (freed, made again).
    # Each request fits one 64 KiB read with its head, but whether all of it is in the socket
    # when the server reads is the kernel's timing (a request read in two parts is adopted, and
    # answered the same): each size is sent until it went detached, at most 5 times.
    with serving(digest, threads=1, **WSGI) as server:
        with connect(server) as s:
            f = s.makefile("rb")
            for n in (40_000, 60_000, 20_000, 100):
                for _ in range(5):
                    before, b = counts(server), os.urandom(n)
                    s.sendall(post(b))
                    assert read_response(f)[2] == b"%d %s" % (len(b), hashlib.sha256(b).hexdigest().encode())
                    if counts(server)[0] == before[0] + 1:
                        break
                else:
                    pytest.fail("a %d-byte body that came whole was never read detached" % n)


def test_a_body_still_arriving_or_large_adopts_the_request():
    entered, sent = threading.Event(), threading.Event()

    def late_echo(environ, start_response):
        entered.set()
        sent.wait(30)
        return echo(environ, start_response)

    with serving(late_echo, threads=2, **WSGI) as server:
        payload = os.urandom(100_000)  # over 64 KiB: Go keeps it
        sent.set()
        status, _, body = get(server, "/", method="POST", body=payload)
        assert (status, body) == (200, payload)
        assert counts(server) == (0, 1)
        entered.clear(), sent.clear()
        with connect(server) as s:
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab")
            assert entered.wait(30)  # handed over with part of its body: read from Go
            s.sendall(b"cde")
            sent.set()
            assert read_response(s.makefile("rb"))[::2] == (200, b"abcde")
        assert counts(server) == (0, 2)
        for n in (16 * 1024 + 1, 64 * 1024, 64 * 1024 + 1):  # whichever way they arrived
            payload = os.urandom(n)
            assert get(server, "/", method="POST", body=payload)[::2] == (200, payload)


def test_answers_in_parts_and_large_parts_adopt():
    big = os.urandom(64 * 1024 + 1)

    def routes(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        if environ["PATH_INFO"] == "/large":
            return [big]
        return (part for part in (b"a", b"b"))  # a generator: parts as they come

    with serving(routes, threads=2, **WSGI) as server:
        assert get(server, "/parts")[::2] == (200, b"ab")
        assert get(server, "/large")[::2] == (200, big)
        assert counts(server) == (0, 2)


def test_answers_up_to_64_kib_are_detached():
    """One part of up to 64 KiB goes back to Go in the request's record (over 16 KiB, in a
    buffer the pool keeps for the next such answer), also one after another on a connection
    and in pipelined requests."""
    sizes = [64 * 1024, 16 * 1024 + 1, 10, 40_000, 64 * 1024, 100]
    parts = {n: os.urandom(n) for n in sizes}

    def sized(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [parts[int(environ["PATH_INFO"][1:])]]

    with serving(sized, threads=2, **WSGI) as server:
        with connect(server) as s:
            f = s.makefile("rb")
            for n in sizes:
                s.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % n)
                assert read_response(f)[::2] == (200, parts[n])
            s.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % n for n in sizes))
            assert [read_response(f)[2] for _ in sizes] == [parts[n] for n in sizes]
        assert counts(server) == (2 * len(sizes), 0)


def test_write_callable_adopts():
    def write_app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])(b"written, ")
        return [b"then returned"]

    with serving(write_app, threads=2, **WSGI) as server:
        assert get(server, "/")[::2] == (200, b"written, then returned")
        assert counts(server) == (0, 1)


def test_app_errors_end_detached_requests_with_500(caplog):
    def boom(environ, start_response):
        if environ["PATH_INFO"] == "/late":
            start_response("200 OK", [("Content-Type", "text/plain")])
        raise ValueError("boom " + environ["PATH_INFO"])

    with serving(boom, threads=2, **WSGI) as server:
        for path in ("/early", "/late"):
            status, _, body = get(server, path)
            assert (status, body) == (500, b"Internal Server Error")
        assert counts(server) == (2, 0)
    text = "\n".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert "boom /early" in text and "boom /late" in text


def test_wrong_content_length_is_the_apps_error(caplog):
    def short(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"abc"]

    with serving(short, threads=2, **WSGI) as server:
        with connect(server) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(30)
            data = b""
            while chunk := s.recv(65536):  # the response is cut: the connection closes
                data += chunk
        assert b"abc" in data and not data.endswith(b"abc" + b"\0" * 7)
        assert counts(server) == (0, 1)
    assert any("shorter than Content-Length" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_file_wrapper_adopts(tmp_path):
    path = tmp_path / "f.bin"
    data = os.urandom(200_000)
    path.write_bytes(data)

    def files(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](open(path, "rb"))

    with serving(files, threads=2, **WSGI) as server:
        assert get(server, "/")[::2] == (200, data)
        assert counts(server) == (0, 1)


def test_threads_answer_at_once_while_others_wait():
    """Two requests held in the application at once on two threads: the queue gives each its
    own thread, and a third is answered by whichever is free."""
    started, go = threading.Barrier(3, timeout=30), threading.Event()

    def hold(environ, start_response):
        if environ["PATH_INFO"] == "/hold":
            started.wait()
            go.wait(30)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]

    with serving(hold, threads=2, **WSGI) as server:
        out = []
        clients = [threading.Thread(target=lambda: out.append(get(server, "/hold")[2])) for _ in range(2)]
        for c in clients:
            c.start()
        started.wait()  # both threads hold a request
        go.set()
        for c in clients:
            c.join(30)
        assert out == [b"/hold", b"/hold"]
        assert get(server, "/after")[2] == b"/after"
        assert counts(server) == (3, 0)


def test_a_burst_reaches_every_thread():
    """Requests that arrive together while every thread waits: one thread at a time is woken
    for the queue, and each that takes a request wakes the next, so all four run the
    application at once (each waits for the others: a request left in the queue with a
    thread asleep would time the barrier out)."""
    n = 4
    together = threading.Barrier(n, timeout=30)

    def meet(environ, start_response):
        together.wait()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"met"]

    with serving(meet, threads=n, **WSGI) as server:
        socks = [connect(server) for _ in range(n)]
        for s in socks:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in socks:
            s.settimeout(30)
            with s.makefile("rb") as f:
                assert read_response(f)[2] == b"met"
            s.close()
        assert counts(server) == (n, 0)


def test_requests_queued_at_shutdown_are_answered_or_closed():
    """Requests still in the queue when the server stops end with their connections; no pool
    thread is left waiting (serving() fails if the server does not stop)."""
    gate = threading.Event()

    def slow(environ, start_response):
        gate.wait(30)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"done"]

    socks = []
    with serving(slow, threads=1, timeout_graceful_shutdown=1, **WSGI) as server:
        for _ in range(4):
            s = connect(server)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        threading.Timer(0.5, gate.set).start()
    for s in socks:  # each gets its answer or the connection's end, never silence
        s.settimeout(30)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        s.close()


def test_each_thread_has_a_processor_of_the_runtime():
    """A thread that adopted a request keeps one of Go's processors (a P) while it runs
    Python; with fewer Ps than threads, the next thread to call into Go waited for the
    runtime's monitor to take one back (up to 10 ms): the pool gives each thread a P, and one
    to spare, beyond the running loop's; the threads of a pool that ended count no more."""
    from goloop import _goloop

    threads = _goloop._procs() + 2  # more than the runtime has now, whatever the machine

    def gen(environ, start_response):  # (an answer in parts: adopted)
        start_response("200 OK", [("Content-Type", "text/plain")])
        yield b"a"
        yield b"b"

    with serving(gen, threads=threads, **WSGI) as server:
        assert get(server, "/")[::2] == (200, b"ab")
        assert _goloop._procs() >= threads + 2
    procs = _goloop._procs()
    with serving(gen, threads=threads, **WSGI) as server:  # the first pool's threads ended
        assert get(server, "/")[::2] == (200, b"ab")
        assert _goloop._procs() == procs


def test_leader_pool_has_no_handoff_counts(monkeypatch):
    monkeypatch.setenv("GOLOOP_WSGI_POOL", "leader")
    with serving(hello, threads=2, **WSGI) as server:
        assert get(server, "/")[::2] == (200, b"Hello, world!")
        assert counts(server) is None
