"""goloop serve --interface wsgi and clients slow to read an iterable's body (goloop/binding/wsgi.c,
wsgi.go's glWsgiPark; docs/server-behaviour.md, "Slow clients"): a pool thread whose send finds
the connection's output over its bound parks the response (its iterable, the part being sent,
the request's objects and contextvars.Context) and answers other requests; when the socket
drains, or the client goes away, any pool thread resumes it. So clients that do not read
hold no pool thread: more of them than threads, and the pool still answers.

No test here times anything: they wait for a state (a count, an event) with a generous bound
that only ends a test that would otherwise hang."""
import contextlib
import contextvars
import socket
import threading

from test_serve_http import get, serving
from test_serve_slow_readers import stalled, wait_for

WSGI = dict(interface="wsgi", min_response_rate=0, timeout_graceful_shutdown=1)
PART = b"g" * 65536

STARTED = []  # the generators that began
CLOSED = []  # the iterables closed (each appends its own id)
SEEN = []  # (thread id, the context variable's value) of each part after the first
REQ = contextvars.ContextVar("REQ")
BARRIER = threading.Barrier(2, timeout=60)
HOLD = {}  # path -> threading.Event a request waits for, with the Event set when it began


class Body:
    """parts 64 KiB parts; boom: raises after them; sets REQ before its first part and records
    what it sees after each."""

    def __init__(self, tag, parts, boom=False):
        self.tag, self.parts, self.boom = tag, parts, boom

    def __iter__(self):
        REQ.set(self.tag)
        STARTED.append(self.tag)
        for _ in range(self.parts):
            yield PART
            SEEN.append((threading.get_ident(), REQ.get(None)))
        if self.boom:
            raise RuntimeError("boom after resume")

    def close(self):
        CLOSED.append(self.tag)


class Whole(Body):
    """One 8 MiB bytes part, its Content-Length given (Flask's and Django's shape)."""

    def __iter__(self):
        STARTED.append(self.tag)
        yield WHOLE


WHOLE = b"w" * (8 << 20)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/barrier":  # answered only while two pool threads run it at once
        BARRIER.wait()
        path = "/small"
    if path in HOLD:
        began, release = HOLD[path]
        began.set()
        assert release.wait(60)
        path = "/small"
    if path == "/var":  # what the thread's previous request set, if it leaked: then set it
        body = repr(REQ.get(None)).encode()
        REQ.set("set by /var")
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/small":
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    if path == "/file":  # wsgi.file_wrapper around a regular file: sent with sendfile(2)
        start_response("200 OK", [])
        f = open(environ["QUERY_STRING"], "rb")
        STARTED.append(environ["REMOTE_PORT"])
        return environ["wsgi.file_wrapper"](f)
    if path == "/whole":
        start_response("200 OK", [("Content-Length", str(len(WHOLE)))])
        return Whole(environ["REMOTE_PORT"], 1)
    start_response("200 OK", [])
    n = int(environ["QUERY_STRING"] or 1024)
    return Body(environ["REMOTE_PORT"], n, boom=path == "/boom")


def reset():
    STARTED.clear()
    CLOSED.clear()
    SEEN.clear()
    BARRIER.reset()
    HOLD.clear()


@contextlib.contextmanager
def non_readers(server, path, n):
    """n clients that ask for path and never read, once their n responses began and another
    client was answered (a pool thread is free); closed after."""
    socks = stalled(server, path, n)
    try:
        wait_for(f"{n} responses", lambda: len(STARTED) == n)
        assert get(server, "/small")[2] == b"ok"
        yield socks
    finally:
        for s in socks:
            s.close()


def read_all(s):
    """Everything s receives until the peer closes or a chunked body's end."""
    s.settimeout(60)
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        b = s.recv(1 << 20)
        if not b:
            break
        data += b
    return data


def test_non_readers_do_not_hold_the_pool():
    """Two pool threads, four clients that never read a 64 MiB generator body: all four
    generators run (each parked in turn), another client is answered, and both threads are
    free at once (two requests that each wait for the other are answered)."""
    reset()
    with serving(app, threads=2, **WSGI) as server:
        with non_readers(server, "/gen", 4):
            got = []
            ts = [threading.Thread(target=lambda: got.append(get(server, "/barrier")[2])) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            assert got == [b"ok", b"ok"]
            assert CLOSED == []
        wait_for("the four iterables closed", lambda: len(CLOSED) == 4)
    assert sorted(CLOSED) == sorted(STARTED)  # each once


def test_resumed_on_another_thread_in_the_requests_context():
    """A generator that set a context variable before its first part is parked by one pool
    thread and resumed by the other (the first is busy then): it sees its own value there."""
    reset()
    b1, b2 = (threading.Event(), threading.Event()), (threading.Event(), threading.Event())
    HOLD.update({"/hold1": b1, "/hold2": b2})
    with serving(app, threads=2, **WSGI) as server:
        holds = stalled(server, "/hold1", 1)
        assert b1[0].wait(60)  # one thread holds /hold1: the generator runs on the other
        s = stalled(server, "/gen?256", 1)[0]
        try:
            wait_for("the generator", lambda: STARTED)
            # /hold2 runs only once that thread is free: the generator parked
            holds += stalled(server, "/hold2", 1)
            assert b2[0].wait(60)
            b1[1].set()  # the first thread is free now, the second held: it resumes the body
            body = read_all(s)
            assert body.endswith(b"0\r\n\r\n") and body.count(PART) == 256
        finally:
            b1[1].set()
            b2[1].set()
            for x in holds + [s]:
                x.close()
    threads = {t for t, _ in SEEN}
    assert len(threads) == 2, threads
    assert {v for _, v in SEEN} == {STARTED[0]}
    assert CLOSED == STARTED


def test_parked_iterables_closed_at_shutdown():
    """Responses parked when the server stops (its graceful timeout past): the threads close
    each iterable once as they leave."""
    reset()
    with serving(app, threads=2, **WSGI) as server:
        socks = stalled(server, "/gen", 4)
        wait_for("four generators", lambda: len(STARTED) == 4)
        assert CLOSED == []
    try:
        assert sorted(CLOSED) == sorted(STARTED)
    finally:
        for s in socks:
            s.close()


def test_keep_alive_waits_for_the_parked_response():
    """A connection's pipelined request is answered after its parked response, in order."""
    reset()
    with serving(app, threads=1, **WSGI) as server:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", server.port))
        try:
            s.sendall(b"GET /gen?128 HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
            wait_for("the generator", lambda: STARTED)
            assert get(server, "/small")[2] == b"ok"  # the one thread is free: parked
            s.settimeout(60)
            data = b""
            while not data.endswith(b"\r\n\r\nok"):
                b = s.recv(1 << 20)
                assert b, data[-200:]
                data += b
            first, _, second = data.partition(b"0\r\n\r\n")
            assert first.count(PART) == 128
            assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"ok")
        finally:
            s.close()
    assert CLOSED == STARTED


def test_error_raised_after_resume_cuts_the_response():
    """A generator that raises after it was resumed: the response is cut (no last chunk, the
    connection closed), its close() is called once, and the pool goes on answering."""
    reset()
    with serving(app, threads=1, **WSGI) as server:
        s = stalled(server, "/boom?128", 1)[0]
        try:
            wait_for("the generator", lambda: STARTED)
            assert get(server, "/small")[2] == b"ok"
            body = read_all(s)
            assert body.count(PART) == 128 and not body.endswith(b"0\r\n\r\n")
        finally:
            s.close()
        assert get(server, "/small")[2] == b"ok"
    assert CLOSED == STARTED


def test_h2_stream_with_a_shut_window_is_parked():
    """An HTTP/2 stream (h2c) whose client keeps its window shut, answered by a generator: the
    one pool thread parks it and answers another client; the stream's iterable is closed
    when the client leaves."""
    import h2.config
    import h2.connection
    import h2.settings
    reset()
    with serving(app, threads=1, **WSGI) as server:
        c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        c.send_headers(1, [(":method", "GET"), (":path", "/gen"), (":scheme", "http"), (":authority", "x")],
                       end_stream=True)
        s = socket.create_connection(("127.0.0.1", server.port))
        try:
            s.sendall(c.data_to_send())
            wait_for("the generator", lambda: STARTED)
            assert get(server, "/small")[2] == b"ok"
        finally:
            s.close()
        wait_for("the iterable closed", lambda: CLOSED)
    assert CLOSED == STARTED


def test_complete_responses_end_when_their_clients_leave():
    """Six clients that do not read an 8 MiB body sent whole, two threads: each response is
    complete in the server's output (held, not copied); when the clients leave, every
    iterable is closed once and no request stays in flight."""
    reset()
    with serving(app, threads=2, **WSGI) as server:
        with non_readers(server, "/whole", 6):
            pass
        wait_for("the six iterables closed", lambda: len(CLOSED) == 6)
        wait_for("nothing in flight", lambda: server._srv.stats()[:2] == (0, 0))
    assert sorted(CLOSED) == sorted(STARTED)


def test_file_wrapper_to_non_readers_holds_no_thread(tmp_path):
    """Four clients that never read a 16 MiB file sent through wsgi.file_wrapper, two threads:
    the file is the response's last part, sent from its descriptor; no thread waits for the
    sockets, another client is answered."""
    reset()
    path = tmp_path / "big"
    path.write_bytes(b"f" * (16 << 20))
    with serving(app, threads=2, **WSGI) as server:
        with non_readers(server, f"/file?{path}", 4):
            pass


def test_context_variables_do_not_leak_into_the_next_request():
    """Each request runs in a Context of its own: what one sets, the thread's next request
    does not see."""
    with serving(app, threads=1, **WSGI) as server:
        assert [get(server, "/var")[2] for _ in range(3)] == [b"None"] * 3
