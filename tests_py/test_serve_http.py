"""goloop serve (HTTP/1.1): real clients (raw sockets, http.client) against the server.

Most tests run goloop.serve.server.Server on a goloop loop in a thread of this process; the CLI
and signal tests run `python -m goloop serve` in a subprocess."""
import asyncio
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager

import pytest

import goloop
from goloop.serve import server as _serve
from nethelpers import OutputLines

HERE = os.path.dirname(os.path.abspath(__file__))
# the folder goloop is imported from (the clone's pyshim in an editable install, site-packages for
# an installed wheel): the servers these tests start in a subprocess run that same goloop
PYSHIM = os.path.dirname(os.path.dirname(os.path.abspath(goloop.__file__)))

# every test with both connection drivers (conftest.py)
pytestmark = pytest.mark.usefixtures("serve_readers")


@contextmanager
def serving(app, **options):
    """Run Server(app, **options) on a goloop loop in a thread; yield it (port: .port)."""
    options.setdefault("port", 0)
    options.setdefault("access_log", False)
    server = _serve.Server(app, **options)
    state = {}
    started = threading.Event()

    async def main():
        state["loop"] = asyncio.get_running_loop()
        task = asyncio.ensure_future(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.005)
        started.set()
        await task

    def run():
        try:
            goloop.run(main())
        except BaseException as exc:  # reported by the test
            state["error"] = exc
        finally:
            started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(20)
    if "error" in state:
        raise state["error"]
    if server.sockets and server.sockets[0].family != socket.AF_UNIX:
        server.port = server.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        if t.is_alive():
            try:
                state["loop"].call_soon_threadsafe(server.request_exit)
            except RuntimeError:  # the loop closed meanwhile: the server stopped by itself
                pass
        t.join(20)
        assert not t.is_alive(), "the server did not stop"
        if "error" in state:
            raise state["error"]


def connect(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return s


def read_response(f):
    """One response from file f (a socket's makefile('rb')): (status, headers dict, body)."""
    line = f.readline()
    if not line:
        raise EOFError("connection closed")
    status = int(line.split()[1])
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode("latin-1").split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int(f.readline().strip(), 16)
            chunk = f.read(size + 2)
            assert chunk.endswith(b"\r\n")
            if size == 0:
                break
            body += chunk[:-2]
    elif "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    return status, headers, body


def get(server, path, method="GET", body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


async def hello_app(scope, receive, send):
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello " + scope["path"].encode()})


async def scope_app(scope, receive, send):
    if scope["type"] != "http":
        return
    out = {k: v for k, v in scope.items() if k not in ("headers", "raw_path", "query_string", "state")}
    out["headers"] = [[n.decode(), v.decode()] for n, v in scope["headers"]]
    out["header_types"] = sorted({type(x).__name__ for pair in scope["headers"] for x in pair})
    out["raw_path"] = scope["raw_path"].decode()
    out["query_string"] = scope["query_string"].decode()
    out["types"] = {k: type(v).__name__ for k, v in scope.items()}
    body = json.dumps(out).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [[b"content-type", b"application/json"]]})
    await send({"type": "http.response.body", "body": body})


def test_scope():
    with serving(scope_app, root_path="/root") as server:
        st, hdrs, body = get(server, "/a%20b/%E2%82%AC?x=1&y=%20", headers={"X-Mixed": "Va"})
    assert st == 200
    s = json.loads(body)
    assert s["type"] == "http"
    assert s["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert s["http_version"] == "1.1" and s["method"] == "GET" and s["scheme"] == "http"
    assert s["path"] == "/a b/\u20ac"
    assert s["raw_path"] == "/a%20b/%E2%82%AC"
    assert s["query_string"] == "x=1&y=%20"
    assert s["root_path"] == "/root"
    assert ["x-mixed", "Va"] in s["headers"] and ["host", "127.0.0.1:%d" % server.port] in s["headers"]
    assert s["header_types"] == ["bytes"]
    assert s["types"]["headers"] == "list" and s["types"]["raw_path"] == "bytes"
    assert s["client"][0] == "127.0.0.1" and isinstance(s["client"][1], int)
    assert s["server"] == ["127.0.0.1", server.port]
    assert hdrs["server"] == "goloop" and "date" in hdrs and hdrs["content-length"] == str(len(body))


def test_keep_alive_and_head():
    with serving(hello_app) as server:
        s = connect(server)
        f = s.makefile("rb")
        for i in range(3):
            s.sendall(b"GET /k%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
            assert read_response(f)[2] == b"hello /k%d" % i
        s.sendall(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        line = f.readline()
        assert line.startswith(b"HTTP/1.1 200")
        while f.readline() != b"\r\n":  # a HEAD response has headers only
            pass
        assert read_response(f)[2] == b"hello /after"
        s.close()


def test_pipelining_in_order():
    """20 requests in one write; the app finishes them in reverse order; the responses
    come back in request order."""
    n = 20
    seen = []

    async def app(scope, receive, send):
        i = int(scope["path"][1:])
        seen.append(i)
        await asyncio.sleep((n - i) * 0.002)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"r%d" % i})

    with serving(app) as server:
        s = connect(server)
        s.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n)))
        f = s.makefile("rb")
        bodies = [read_response(f)[2] for _ in range(n)]
        s.close()
    assert bodies == [b"r%d" % i for i in range(n)]
    assert sorted(seen) == list(range(n))


def pipelined_while_held(server, sent, conns=8, n=100):
    """Sends GET /hold on a connection, then n pipelined requests on each of conns more
    while the application holds the loop in /hold's call (until sent is set: the app waits
    for it), so that one iteration reads them all (up to 32 a connection). Returns the
    /hold connection and the others."""
    first = connect(server)
    others = [connect(server) for _ in range(conns)]
    first.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.2)  # (the loop holds in /hold's call meanwhile, or soon)
    for s in others:
        s.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n)))
    sent.set()
    return first, others


def answer_pipelined_while_held(app, sent, conns, n):
    """Serves app (lifespan off) for pipelined_while_held's requests and checks that each
    is answered with its path, in order (the application's body: the path)."""
    with serving(app, lifespan="off") as server:
        first, others = pipelined_while_held(server, sent, conns, n)
        assert read_response(first.makefile("rb"))[2] == b"/hold"
        for s in others:
            f = s.makefile("rb")
            assert [read_response(f)[2] for _ in range(n)] == [b"/%d" % i for i in range(n)]
        for s in [first] + others:
            s.close()


def test_pipelined_requests_do_not_all_wait_for_the_run_phase():
    """Many pipelined requests read at once do not all wait, made, for the loop's next run
    phase (their scopes, Tasks and coroutines in memory, filling the collector's young
    generations): once the ready queue is long, a request's Task starts at once (3.12+:
    every one, eager_start; 3.11: past 64 queued handles its queued first step is run at
    once). Counted, with 8 x 100 requests read in one iteration (pipelined_while_held):
    applications called whose coroutine has not yet run."""
    conns, n = 8, 100
    waiting = [0, 0]  # now, most
    sent = threading.Event()

    async def run(path, send):
        waiting[0] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": path.encode()})

    def app(scope, receive, send):
        if scope["path"] == "/hold":
            assert sent.wait(10)
        waiting[0] += 1
        waiting[1] = max(waiting[1], waiting[0])
        return run(scope["path"], send)

    answer_pipelined_while_held(app, sent, conns, n)
    assert waiting[0] == 0 and 1 <= waiting[1] <= 70, waiting


def test_debug_mode_times_every_request_first_step(caplog):
    """In debug mode a request's first step is a handle of its own, timed and reported by
    the slow-callback warning like any other, also when many requests are read at once (the
    first step is not started as the request is taken: 3.12+'s eager start and 3.11's run
    past 64 queued handles are for the ordinary mode). Debug mode is switched on in /hold's
    call, before the 8 x 100 pipelined requests are taken; every request's step is then
    reported (duration 0), with its coroutine's name."""
    conns, n = 8, 100
    sent = threading.Event()

    async def request_step(path, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": path.encode()})

    def app(scope, receive, send):
        if scope["path"] == "/hold":
            loop = asyncio.get_running_loop()
            loop.slow_callback_duration = 0.0
            loop.set_debug(True)
            assert sent.wait(10)
        return request_step(scope["path"], send)

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        answer_pipelined_while_held(app, sent, conns, n)
    steps = [m for m in (r.getMessage() for r in caplog.records)
             if m.startswith("Executing <Task") and "request_step()" in m]
    assert len(steps) >= conns * n, len(steps)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+'s eager start: the test before")
def test_app_system_exit_from_a_first_step_run_at_once_ends_the_loop_run():
    """3.11: an application's SystemExit raised in a first step run at once (past 64 queued
    handles, as the request is taken) ends the loop's run as from any Task's step."""
    waiting = [0]
    raised = []
    sent = threading.Event()

    async def run(send):
        if waiting[0] >= 64 and not raised:  # made while 64 others wait: run at once
            raised.append(1)
            raise SystemExit(7)
        waiting[0] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x"})

    def app(scope, receive, send):
        if scope["path"] == "/hold":
            assert sent.wait(10)
        waiting[0] += 1
        return run(send)

    with pytest.raises(SystemExit) as info:
        with serving(app, lifespan="off") as server:
            first, others = pipelined_while_held(server, sent)
            try:
                for s in others:
                    s.settimeout(10)
                    s.makefile("rb").read()  # the server stops: answers, then the end
            except (OSError, http.client.HTTPException):
                pass
    assert info.value.code == 7


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager Task start is 3.12's")
def test_request_task_starts_eagerly():
    """3.12+: a request's Task starts eagerly: the application runs up to its first
    suspension as the loop takes the request from Go, before the callbacks already queued.
    A ticker callback, queued again each time it runs, is always in the queue when a request
    arrives: the tick count is the same when the application is called (as the request is
    taken) and at its coroutine's first step (without eager start, one tick later)."""
    ticks = [0]
    seen = []
    stop = [False]

    def tick():
        ticks[0] += 1
        if not stop[0]:
            asyncio.get_running_loop().call_soon(tick)

    async def run(scope, send, at_call):
        seen.append((scope["path"], at_call, ticks[0]))
        if scope["path"] == "/start":
            asyncio.get_running_loop().call_soon(tick)
        stop[0] = scope["path"] == "/stop"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def app(scope, receive, send):
        return run(scope, send, ticks[0])

    with serving(app, lifespan="off") as server:
        for path in ["/start"] + ["/x"] * 5 + ["/stop"]:
            assert get(server, path)[0] == 200
    assert ticks[0] > 0
    assert [(p, a) for p, a, b in seen if a != b] == []


def test_request_tasks_made_by_the_loops_task_factory():
    """A loop with a task factory makes the requests' Tasks with it (not eagerly started
    then: the factory decides)."""
    made = []

    def factory(loop, coro, **kw):
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    async def app(scope, receive, send):
        if scope["path"] == "/set":
            asyncio.get_running_loop().set_task_factory(factory)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(app, lifespan="off") as server:
        for path in ("/set", "/a", "/b"):
            assert get(server, path)[0] == 200
    assert [type(c).__name__ for c in made[:2]] == ["AsgiRun", "AsgiRun"]  # then the loop's shutdown


def test_request_tasks_made_by_a_create_task_override(monkeypatch):
    """A loop class whose create_task is replaced (as a subclass would) makes the requests'
    Tasks through it, on every version (3.12+: not eagerly then; the override decides)."""
    from goloop import _loop

    made = []
    original = _loop.Loop.create_task

    def create_task(self, coro, **kw):
        made.append(type(coro).__name__)
        return original(self, coro, **kw)

    monkeypatch.setattr(_loop.Loop, "create_task", create_task)
    with serving(hello_app, lifespan="off") as server:
        for path in ("/a", "/b"):
            assert get(server, path)[0] == 200
    assert made.count("AsgiRun") == 2, made


def test_request_tasks_made_by_a_replaced_task_class(monkeypatch):
    """asyncio.tasks.Task replaced by a subclass (as instrumentation does): the requests'
    Tasks are of that class, named as before, on every version (3.11 makes asyncio's own C
    Task without a keyword dict; anything else goes through the class's call)."""
    import asyncio.tasks

    class MyTask(asyncio.tasks.Task):
        pass

    seen = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        t = asyncio.current_task()
        seen.append((type(t).__name__, t.get_name(), t in asyncio.all_tasks()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    monkeypatch.setattr(asyncio.tasks, "Task", MyTask)
    with serving(app, lifespan="off") as server:
        for path in ("/a", "/b"):
            assert get(server, path)[0] == 200
    assert [s[0] for s in seen] == ["MyTask", "MyTask"], seen
    assert all(s[2] for s in seen) and seen[0][1] != seen[1][1], seen


def test_a_served_loop_is_freed():
    """Nothing the requests' path keeps between requests (3.11's reused Task keywords, the
    cached create_task check) holds the loop once it closed: it is freed."""
    import gc
    import weakref

    loops = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(app, lifespan="off") as server:
        assert get(server, "/a")[0] == 200
        del server
    gc.collect()
    assert loops and loops[0]() is None


def test_requests_in_flight_after_pipelined_requests():
    """The end of an application's call that completed its response reaches Go in the
    iteration's flush, with the others of that iteration: goloop_requests_in_flight counts
    the request that still runs and none of those that ended, after pipelined bursts on
    reused connections; and the server's close ends a request left running."""
    release = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/slow":
            while not release.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        if scope["path"] == "/late":  # returns a step after its response
            await asyncio.sleep(0)

    def in_flight(server):
        status, _, body = get(server, "/metrics")
        assert status == 200
        return [int(line.split()[1]) for line in body.decode().splitlines()
                if line.startswith("goloop_requests_in_flight ")][0]

    def burst(server, paths):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p for p in paths))
            data = b""
            while data.count(b"\r\n\r\nok") < len(paths):
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
        assert data.count(b"HTTP/1.1 200 ") == len(paths)

    with serving(app, lifespan="off", metrics=True, metrics_path="/metrics") as server:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        slow.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(3):
            burst(server, [b"/a", b"/late"] * 20)
            burst(server, [b"/b"])
        assert in_flight(server) == 1  # /slow
        release.set()
        assert slow.recv(65536).startswith(b"HTTP/1.1 200 ")
        slow.close()
        burst(server, [b"/c"] * 5)
        assert in_flight(server) == 0


# (name, value) pairs http.response.start refuses, and the message of the RuntimeError
BAD_HEADERS = [
    ((b"", b"v"), "Invalid HTTP header name."),
    ((b"bad name", b"v"), "Invalid HTTP header name."),
    ((b"x-long-header-name:", b"v"), "Invalid HTTP header name."),
    ((b"x-long-header-name\t", b"v"), "Invalid HTTP header name."),
    ((b"x-del\x7f", b"v"), "Invalid HTTP header name."),
    ((b"x-\xc3\xa9", b"v"), "Invalid HTTP header name."),
    ((b"x-nul\x00", b"v"), "Invalid HTTP header name."),
    ((b"x-ok", b"a\r\nx-injected: 1"), "Invalid HTTP header value."),
    ((b"x-ok", b"a long value\n"), "Invalid HTTP header value."),
    ((b"x-ok", b"\x00"), "Invalid HTTP header value."),
]


def test_response_header_names_and_values_are_checked():
    """A header name must be a non-empty token (no control, space, ':', DEL or non-ASCII
    byte); a value may hold anything but CR, LF and NUL (tabs and obs-text pass, as in h11).
    A refused start raises RuntimeError in send() and starts nothing: the application can
    still answer; a header that is not bytes is a TypeError."""
    got = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        for pair, _ in BAD_HEADERS + [((b"x-ok", "str"), None)]:
            try:
                await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1"), pair]})
            except (RuntimeError, TypeError) as exc:
                got.append((type(exc).__name__, str(exc)))
            else:
                got.append(None)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-Mixed_Case.name~1!", b"tab\there \x80\xff:;"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(app, lifespan="off") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith(b"\r\n\r\nok"):
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
    assert got[:-1] == [("RuntimeError", msg) for _, msg in BAD_HEADERS]
    assert got[-1][0] == "TypeError" and "must be bytes" in got[-1][1], got[-1]
    assert data.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nx-Mixed_Case.name~1!: tab\there \x80\xff:;\r\n" in data, data


async def echo_app(scope, receive, send):
    """Echoes the request body in parts (a chunked response), reporting the receive() messages."""
    if scope["type"] != "http":
        return
    parts = []
    while True:
        m = await receive()
        assert m["type"] == "http.request"
        parts.append(m["body"])
        if not m.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-parts", b"%d" % len(parts))]})
    for p in parts:
        if p:
            await send({"type": "http.response.body", "body": p, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def test_chunked_request_streams_and_chunked_response():
    with serving(echo_app) as server:
        s = connect(server)
        f = s.makefile("rb")
        s.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        time.sleep(0.2)  # the app has the first part and waits in receive() for more
        s.sendall(b"6\r\n world\r\n0\r\n\r\n")
        st, hdrs, body = read_response(f)
        assert st == 200 and body == b"hello world"
        assert hdrs["transfer-encoding"] == "chunked" and "content-length" not in hdrs
        assert int(hdrs["x-parts"]) >= 2  # it streamed: not one message with everything
        # and the connection is reusable, with a Content-Length body this time
        s.sendall(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert read_response(f)[2] == b"abc"
        s.close()


@pytest.mark.parametrize("close", [b"Connection: close\r\n", b""], ids=["connection-close", "http10"])
def test_closing_request_body_in_later_reads(close):
    """A request that closes the connection (Connection: close, or HTTP/1.0 without
    keep-alive) still gets a body that arrives after its head, in several reads; what the
    client sends after that request is not served."""
    with serving(echo_app) as server:
        s = connect(server)
        f = s.makefile("rb")
        version = b"1.1" if close else b"1.0"
        s.sendall(b"POST /e HTTP/" + version + b"\r\nHost: x\r\n" + close + b"Content-Length: 200000\r\n\r\n")
        data = os.urandom(200000)
        for i in range(0, len(data), 50000):
            time.sleep(0.05)
            s.sendall(data[i:i + 50000])
        s.sendall(b"GET /e HTTP/1.1\r\nHost: x\r\n\r\n")  # after the last request: dropped
        st, hdrs, body = read_response(f)
        if not close:  # HTTP/1.0: the body ends where the connection does
            body = f.read()
        assert st == 200 and body == data  # and nothing answered the request after it
        assert f.read() == b""  # closed
        f.close()
        s.close()


def test_large_body_both_ways():
    data = os.urandom(3 * 1024 * 1024)
    with serving(echo_app) as server:
        st, hdrs, body = get(server, "/big", method="POST", body=data)
    assert st == 200 and body == data


@pytest.mark.parametrize("raw,status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n", 400),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 3000 + b"\r\n\r\n", 431),
])
def test_bad_requests_answered_by_go(raw, status):
    calls = []

    async def app(scope, receive, send):
        if scope["type"] == "http":
            calls.append(scope["path"])
            if (await receive())["type"] == "http.request":
                await hello_app(scope, receive, send)

    with serving(app, h11_max_incomplete_event_size=1024) as server:
        s = connect(server)
        s.sendall(raw)
        f = s.makefile("rb")
        st, hdrs, _ = read_response(f)
        assert st == status and hdrs["connection"] == "close"
        assert f.read() == b""  # closed
        f.close()  # the socket's descriptor stays open while a makefile() of it does
        s.close()
    # a malformed head never reaches the app; a malformed body reaches it as a disconnect
    assert calls == ([] if b"chunked" not in raw else ["/"])


def test_app_errors():
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/raise":
            raise ValueError("boom")
        if scope["path"] == "/nothing":
            return
        if scope["path"] == "/raise-after-start":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
            await send({"type": "http.response.body", "body": b"abc", "more_body": True})
            raise ValueError("late")
        if scope["path"] == "/bad-header":
            try:
                await send({"type": "http.response.start", "status": 200, "headers": [(b"a\r\nb", b"v")]})
            except RuntimeError:
                pass
            await send({"type": "http.response.start", "status": 201, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    with serving(app) as server:
        st, _, body = get(server, "/raise")
        assert st == 500 and body == b"Internal Server Error"
        st, _, body = get(server, "/nothing")
        assert st == 500
        st, _, body = get(server, "/bad-header")
        assert st == 201 and body == b"ok"
        s = connect(server)
        s.sendall(b"GET /raise-after-start HTTP/1.1\r\nHost: x\r\n\r\n")
        data = s.makefile("rb").read()  # the server closes after the partial response
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"\r\n\r\nabc")
        s.close()


def test_app_system_exit_ends_the_loop_run():
    """An application's SystemExit (a BaseException, not an Exception) ends the loop's run as
    from any Task's step, also when it is raised in the Task's eager first step (3.12+; on
    3.11 see the test of a first step run at once), as the request is started: not reported
    and dropped there."""
    async def app(scope, receive, send):
        if scope["type"] == "http":
            raise SystemExit(3)

    with pytest.raises(SystemExit) as info:
        with serving(app, lifespan="off") as server:
            try:
                get(server, "/")  # answered 500 or not at all: the loop stops
            except (OSError, http.client.HTTPException):
                pass
    assert info.value.code == 3


def test_disconnect_and_send_after_it():
    got = {}
    first, done = threading.Event(), threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        got["first"] = await receive()
        first.set()
        got["second"] = await receive()  # waits until the client goes away
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x"})
        except OSError as exc:
            got["send_error"] = exc
        done.set()

    with serving(app) as server:
        s = connect(server)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert first.wait(10)  # the app waits in its second receive()
        s.close()
        assert done.wait(10)
    assert got["first"] == {"type": "http.request", "body": b"", "more_body": False}
    assert got["second"] == {"type": "http.disconnect"}
    assert isinstance(got["send_error"], OSError)


def test_receive_after_response_is_disconnect():
    got = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})
        got.append(await receive())

    with serving(app) as server:
        assert get(server, "/")[0] == 204
        for _ in range(100):
            if got:
                break
            time.sleep(0.02)
    assert got == [{"type": "http.disconnect"}]


def test_lifespan_state_and_shutdown():
    events = []

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                events.append(m["type"])
                if m["type"] == "lifespan.startup":
                    scope["state"]["db"] = "connected"
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = scope["state"]["db"].encode()
        scope["state"]["db"] = "changed"  # each request has its own copy
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    with serving(app, lifespan="on") as server:
        assert get(server, "/")[2] == b"connected"
        assert get(server, "/")[2] == b"connected"
    assert events == ["lifespan.startup", "lifespan.shutdown"]


@pytest.mark.serve_one_driver  # no connection
def test_lifespan_startup_failure():
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.failed", "message": "no db"})

    server = _serve.Server(app, port=0, lifespan="on")
    goloop.run(server.serve())
    assert server.exit_code == 3 and not server.started


def test_lifespan_auto_unsupported_app():
    async def app(scope, receive, send):
        if scope["type"] != "http":
            raise RuntimeError("only http")
        await hello_app(scope, receive, send)

    with serving(app, lifespan="auto") as server:
        assert get(server, "/x")[2] == b"hello /x"


def test_options_headers_and_limits():
    with serving(hello_app, server_header=False, date_header=False, headers=["X-Powered: goloop", ("x-two", "2")],
                 timeout_keep_alive=0.3) as server:
        st, hdrs, _ = get(server, "/")
        assert "server" not in hdrs and "date" not in hdrs
        assert hdrs["x-powered"] == "goloop" and hdrs["x-two"] == "2"
        s = connect(server)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        f = s.makefile("rb")
        read_response(f)
        t0 = time.monotonic()
        assert f.read() == b""  # the idle connection is closed after the keep-alive timeout
        assert time.monotonic() - t0 < 8
        s.close()


def test_limit_concurrency_503():
    release = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] == "http":
            while not release.is_set():
                await asyncio.sleep(0.01)
            await hello_app(scope, receive, send)

    with serving(app, limit_concurrency=1) as server:
        s1 = connect(server)
        s1.sendall(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(500):
            if server.stats()[1] == 1:
                break
            time.sleep(0.01)
        st, hdrs, _ = get(server, "/2")
        assert st == 503
        release.set()
        assert read_response(s1.makefile("rb"))[2] == b"hello /1"
        s1.close()


def test_limit_max_requests():
    with serving(hello_app, limit_max_requests=3) as server:
        for i in range(3):
            assert get(server, "/%d" % i)[0] == 200
        for _ in range(200):
            if server.should_exit:
                break
            time.sleep(0.01)
        assert server.should_exit


def test_unix_socket(tmp_path):
    path = str(tmp_path / "s.sock")
    with serving(scope_app, uds=path) as server:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(b"GET /u HTTP/1.1\r\nHost: x\r\n\r\n")
        st, _, body = read_response(s.makefile("rb"))
        s.close()
    sc = json.loads(body)
    assert st == 200 and sc["path"] == "/u" and sc["client"] is None and sc["server"][0] == path
    assert not os.path.exists(path)


@pytest.mark.serve_one_driver  # no connection
def test_unknown_and_unsupported_options():
    with pytest.raises(_serve.ConfigError, match="no option 'bogus'"):
        _serve.Server(hello_app, bogus=1)
    with pytest.raises(_serve.ConfigError, match="support 'loop' yet"):  # (--interface: test_serve_wsgi.py)
        _serve.Server(hello_app, loop="uvloop")
    with pytest.raises(_serve.ConfigError, match="timeout_worker_healthcheck must be"):
        _serve.Server(hello_app, timeout_worker_healthcheck="soon")
    with pytest.raises(_serve.ConfigError, match="ssl.ciphers"):  # TLS is Go's: its cipher suites
        _serve.Server(hello_app, ssl_certfile="x.pem", ssl_ciphers="HIGH")
    _serve.Server(hello_app, workers=1, reload=False)  # uvicorn's defaults are fine


def run_cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    return subprocess.run([sys.executable, "-P", "-m", "goloop", *args], capture_output=True, text=True,
                          timeout=60, env=env, **kw)


@pytest.mark.serve_one_driver  # no connection
def test_cli_rejects_unknown_options():
    r = run_cli("serve", "x:app", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    r = run_cli("serve", "x:app", "--loop", "uvloop")
    assert r.returncode == 2 and "--loop is not supported by goloop serve yet" in r.stderr
    r = run_cli("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr


@pytest.mark.serve_one_driver  # no connection
def test_import_goloop_loads_no_go_runtime():
    code = "import sys, goloop, goloop.serve.server; assert 'goloop._goloop' not in sys.modules, sys.modules.keys()"
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    subprocess.run([sys.executable, "-P", "-c", code], check=True, env=env, timeout=60)


SLOW_APP = textwrap.dedent("""
    import asyncio, os
    RELEASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release")
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                if m["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    print("lifespan shutdown", flush=True)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/slow":  # in flight until the test releases it (a minute at most)
            print("slow started", flush=True)
            for _ in range(6000):
                if os.path.exists(RELEASE):
                    break
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done " + scope["path"].encode()})
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_graceful_shutdown(tmp_path, sig):
    """`python -m goloop serve` on a Unix socket: a signal while a request is in flight
    stops accepting, answers that request (connection: close), runs the lifespan shutdown
    and exits 0."""
    (tmp_path / "slowapp.py").write_text(SLOW_APP)
    path = str(tmp_path / "srv.sock")
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    p = subprocess.Popen([sys.executable, "-P", "-m", "goloop", "serve", "slowapp:app", "--uds", path,
                          "--app-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env, text=True)
    out = OutputLines(p.stdout)
    try:
        # Not the socket file's existence: the kernel makes it at bind(), before listen(),
        # and a connect() in between is refused.
        out.wait_for("running on unix socket", timeout=120)  # (generous: a loaded machine)
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        out.wait_for("slow started", timeout=120)  # the request is in the application: the signal comes now
        p.send_signal(sig)
        # The request finishes only once the server stopped accepting: a fixed sleep in the
        # app raced with the signal (on a loaded machine the signal came after it, and the
        # answer was a keep-alive one).
        out.wait_for("Shutting down", timeout=120)
        (tmp_path / "release").touch()
        st, hdrs, body = read_response(s.makefile("rb"))
        assert (st, body) == (200, b"done /slow")
        assert hdrs.get("connection") == "close"
        s.close()
        p.wait(120)
        out.reader.join(120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = out.log()
    assert p.returncode == 0, out
    assert "lifespan shutdown" in out
    assert not os.path.exists(path)


def test_starlette_app():
    pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    async def item(request):
        return JSONResponse({"id": request.path_params["item_id"], "q": request.query_params.get("q")})

    async def post(request):
        data = await request.json()
        return JSONResponse({"got": data}, status_code=201)

    async def stream(request):
        async def gen():
            for i in range(5):
                yield b"part%d;" % i
                await asyncio.sleep(0)
        return StreamingResponse(gen(), media_type="text/plain")

    async def boom(request):
        raise RuntimeError("boom")

    app = Starlette(routes=[Route("/items/{item_id:int}", item), Route("/post", post, methods=["POST"]),
                            Route("/stream", stream), Route("/boom", boom),
                            Route("/text", lambda r: PlainTextResponse("plain"))])
    with serving(app) as server:
        st, hdrs, body = get(server, "/items/42?q=x")
        assert st == 200 and json.loads(body) == {"id": 42, "q": "x"}
        assert hdrs["content-type"] == "application/json"
        st, _, body = get(server, "/post", method="POST", body=json.dumps({"a": [1, 2]}),
                          headers={"Content-Type": "application/json"})
        assert st == 201 and json.loads(body) == {"got": {"a": [1, 2]}}
        st, hdrs, body = get(server, "/stream")
        assert st == 200 and body == b"part0;part1;part2;part3;part4;"
        assert hdrs["transfer-encoding"] == "chunked"
        assert get(server, "/missing")[0] == 404
        assert get(server, "/boom")[0] == 500
        assert get(server, "/text")[2] == b"plain"
