"""goloop serve runs each request's application coroutine inside a C wrapper (asgi_run.c)
when no request limit or access-log format needs Python around it (the access log's line is
a call it makes), and inside a Python wrapper coroutine otherwise: both must give the same
behaviour (errors logged and answered 500, the
Task machinery, awaitables that are not coroutines, cancellation)."""
import asyncio
import contextlib
import http.client
import logging
import sys

import pytest

from test_serve_http import get, serving


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def _goloop_records():
    """The records of goloop's loggers at INFO and above while in the block (a _Records)."""
    h = _Records()
    log = logging.getLogger("goloop")
    log.addHandler(h)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        yield h
    finally:
        log.removeHandler(h)
        log.setLevel(old)


class _Awaitable:
    """An awaitable that is not a coroutine (its __await__ is a generator); it writes its
    Task's repr into seen."""

    def __init__(self, seen, send):
        self.seen, self.send = seen, send

    def __await__(self):
        self.seen["task repr"] = repr(asyncio.current_task())
        yield from asyncio.sleep(0).__await__()
        yield from self.send({"type": "http.response.start", "status": 200, "headers": []}).__await__()
        yield from self.send({"type": "http.response.body", "body": b"awaitable"}).__await__()


def _app(seen):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/raise":
            raise ValueError("boom in the app")
        if path == "/cancel":
            raise asyncio.CancelledError()
        if path == "/task":
            task = asyncio.current_task()
            seen["task"] = task is not None
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.01, fut.set_result, b"waited")
            seen["stack"] = [f.f_code.co_name for f in task.get_stack()]
            seen["repr"], seen["obj"] = repr(task), task
            body = await fut
            await asyncio.sleep(0.001)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def test_errors_are_logged_and_answered_500():
    h = _Records()
    log = logging.getLogger("goloop.error")
    log.addHandler(h)
    try:
        with serving(_app({})) as server:
            st, _, body = get(server, "/raise")
            assert (st, body) == (500, b"Internal Server Error")
            st, _, _ = get(server, "/cancel")
            assert st == 500
            assert get(server, "/")[0] == 200  # the server goes on
    finally:
        log.removeHandler(h)
    errs = [r for r in h.records if "Exception in ASGI application" in r.getMessage()]
    assert len(errs) == 1, [r.getMessage() for r in h.records]
    assert isinstance(errs[0].exc_info[1], ValueError)
    tb = errs[0].exc_info[2]
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "app" in names  # the traceback reaches the application's frame


def test_app_that_waits_runs_in_a_task_with_its_stack():
    seen = {}
    with serving(_app(seen)) as server:
        st, _, body = get(server, "/task")
    assert (st, body) == (200, b"waited")
    assert seen["task"] is True
    assert "app" in seen["stack"]  # Task.get_stack sees the application's frame
    # the Task's repr names the application's coroutine (where it runs, then where defined)
    assert "coro=<_app.<locals>.app() running at " + __file__ in seen["repr"], seen["repr"]
    assert "coro=<_app.<locals>.app() done, defined at " + __file__ in repr(seen["obj"])


def test_app_returning_a_non_coroutine_awaitable():
    seen = {}

    def app(scope, receive, send):
        return _Awaitable(seen, send)

    with serving(app, lifespan="off") as server:
        assert get(server, "/")[:3:2] == (200, b"awaitable")
    # the Task's repr names the awaitable's iterator (a generator: no cr_code, so no place)
    assert "coro=<_Awaitable.__await__() running>" in seen["task repr"], seen["task repr"]


@pytest.mark.parametrize("options", [{}, {"limit_max_requests": 100}], ids=["c", "python"])
def test_access_log_path_still_answers_and_logs(options):
    """With the access log on (uvicorn's line), a request's coroutine is still the
    application's own in the C wrapper, which makes the access call as the call ends: one
    line per request, its status the application's start's (500 where the application
    raised, was cancelled or raised before returning a coroutine), after the application's
    error record; the Python wrapper (a request limit) writes the same lines."""
    seen = {}
    inner = _app(seen)

    async def answer(send, status, start_extra):
        await send({"type": "http.response.start", "status": status, "headers": [], **start_extra})
        await send({"type": "http.response.body", "body": b"x"})

    def app(scope, receive, send):
        path = scope.get("path")
        if path == "/at-once":
            raise ValueError("boom before a coroutine")
        if path == "/missing":  # a start held until the body (its status read in C)
            return answer(send, 404, {})
        if path == "/direct":  # a start given to Go at once (a message with trailers)
            return answer(send, 201, {"trailers": False})
        return inner(scope, receive, send)

    with _goloop_records() as h, serving(app, access_log=True, lifespan="off", **options) as server:
        assert get(server, "/?q=1")[0] == 200
        assert get(server, "/raise")[0] == 500
        assert get(server, "/cancel")[0] == 500
        assert get(server, "/at-once")[0] == 500
        assert get(server, "/task")[0] == 200
        assert get(server, "/missing")[0] == 404
        assert get(server, "/direct")[0] == 201
    lines = [(r.name, r.getMessage()) for r in h.records if r.name in ("goloop.access", "goloop.error")]
    access = [m.split(" - ", 1)[1] for n, m in lines if n == "goloop.access"]
    assert access == ['"GET /?q=1 HTTP/1.1" 200 OK', '"GET /raise HTTP/1.1" 500 Internal Server Error',
                      '"GET /cancel HTTP/1.1" 500 Internal Server Error',
                      '"GET /at-once HTTP/1.1" 500 Internal Server Error', '"GET /task HTTP/1.1" 200 OK',
                      '"GET /missing HTTP/1.1" 404 Not Found', '"GET /direct HTTP/1.1" 201 Created'], lines
    names = [n for n, m in lines]
    raised = [i for i, (n, m) in enumerate(lines) if n == "goloop.error" and "Exception in ASGI application" in m]
    assert len(raised) == 2 and all(names[i + 1] == "goloop.access" for i in raised), lines
    # the Task runs the application's coroutine, not a Python wrapper around it
    if not options:
        assert "coro=<_app.<locals>.app() running at " in seen["repr"], seen["repr"]


def test_scope_addresses_per_connection():
    """The scope's client/server tuples are reused between requests only when equal."""
    import json
    import socket

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = json.dumps({"client": scope["client"], "server": scope["server"]}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    with serving(app) as server:
        seen = []
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                got = json.loads(data.split(b"\r\n\r\n", 1)[1])
                assert got["client"] == ["127.0.0.1", s.getsockname()[1]]
                assert got["server"] == ["127.0.0.1", server.port]
                seen.append(got["client"][1])
        assert len(set(seen)) == 3


def test_each_request_is_its_own_task_with_its_own_context():
    """current_task() inside the application is the request's Task (anyio's cancel scopes and
    Starlette rely on it), a different one per request, in asyncio.all_tasks(); a ContextVar
    set by one request is not seen by the next (each Task runs in a copy of the context)."""
    import contextvars

    var = contextvars.ContextVar("req", default="unset")
    seen = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        task = asyncio.current_task()
        seen.append((task, var.get(), task in asyncio.all_tasks(), task.get_name()))
        var.set(scope["path"])
        await asyncio.sleep(0)  # the same task after a suspension
        assert asyncio.current_task() is task and var.get() == scope["path"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(app, lifespan="off") as server:
        assert get(server, "/a")[0] == 200
        assert get(server, "/b")[0] == 200
    (t1, v1, in1, n1), (t2, v2, in2, n2) = seen
    assert t1 is not None and t2 is not None and t1 is not t2
    assert (v1, v2) == ("unset", "unset")
    assert in1 and in2
    assert n1 != n2  # task names stay unique
    # 3.11 formats "Task-N" eagerly (~4 % of a pipelined request): goloop names the request's
    # task itself there; 3.12+ names tasks lazily and goloop passes no name.
    import re
    pattern = r"goloop-request-\d+" if sys.version_info < (3, 12) else r"Task-\d+"
    assert re.fullmatch(pattern, n1) and re.fullmatch(pattern, n2), (n1, n2)


def test_send_and_receive_after_the_application_returned():
    """A send() kept past the application's return (a task it left behind) raises the
    RuntimeError Go gives for a completed response; receive() gives http.disconnect."""
    got = {}
    done = asyncio.Event

    async def late(send, receive):
        await asyncio.sleep(0.01)
        for msg in ({"type": "http.response.start", "status": 200, "headers": []},
                    {"type": "http.response.body", "body": b"late"}):
            try:
                await send(msg)
            except Exception as exc:  # noqa: BLE001 (recorded for the test)
                got[msg["type"]] = exc
        got["receive"] = await receive()
        got["done"].set()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        got["done"] = done()
        got["task"] = asyncio.get_running_loop().create_task(late(send, receive))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(app, lifespan="off") as server:
        assert get(server, "/")[:3:2] == (200, b"ok")
        for _ in range(200):
            if "receive" in got:
                break
            import time
            time.sleep(0.01)
    assert isinstance(got["http.response.start"], RuntimeError), got
    assert "already started" in str(got["http.response.start"])
    assert isinstance(got["http.response.body"], RuntimeError), got
    assert "already completed" in str(got["http.response.body"])
    assert got["receive"] == {"type": "http.disconnect"}


def test_scope_has_every_key_once_set():
    """The scope is copied from a template holding every key a request sets: none is left
    at its placeholder (None), and "state" is there only with a lifespan state."""
    seen = []

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                if m["type"] == "lifespan.startup":
                    if "state" in scope:
                        scope["state"]["k"] = 1
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        seen.append(dict(scope))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    keys = {"type", "asgi", "http_version", "scheme", "method", "path", "raw_path", "query_string",
            "root_path", "headers", "client", "server", "extensions"}
    with serving(app, lifespan="off") as server:
        assert get(server, "/")[0] == 200
    with serving(app, lifespan="on") as server:
        assert get(server, "/x")[0] == 200
    plain, with_state = seen
    assert set(plain) == keys
    assert set(with_state) == keys | {"state"} and with_state["state"] == {"k": 1}
    for s in (plain, with_state):
        assert all(v is not None for v in s.values()), s


def test_response_headers_as_list_tuple_or_iterable():
    """http.response.start's headers: a list or tuple is indexed, anything else iterated; pairs
    may be tuples or lists; a bad pair is a RuntimeError/TypeError raised by send (500)."""
    def hdrs(path):
        pairs = [(b"x-a", b"1"), [b"x-b", b"2"]]
        return {"/list": pairs, "/tuple": tuple(pairs), "/gen": (p for p in pairs),
                "/bad": [(b"x-a", b"1"), (b"x-b",)]}[path]

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": hdrs(scope["path"])})
        await send({"type": "http.response.body", "body": b"ok"})

    with serving(app, lifespan="off") as server:
        for path in ("/list", "/tuple", "/gen"):
            st, h, _ = get(server, path)
            assert st == 200 and h["x-a"] == "1" and h["x-b"] == "2", (path, h)
        assert get(server, "/bad")[0] == 500


def test_held_start_meets_another_requests_response():
    """asgi.c holds http.response.start until the first body part (one Go call for both):
    a request whose start is held while another request answers (its start reuses the
    buffer), then answers, gets its own status and headers; a second start is refused at
    once; a start followed by the app's return closes the connection (as uvicorn: the
    response is incomplete)."""
    import http.client
    import threading

    ev = {}
    errors = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/a":
            await send({"type": "http.response.start", "status": 201, "headers": [(b"x-who", b"a")]})
            try:
                await send({"type": "http.response.start", "status": 200, "headers": []})
            except RuntimeError as exc:
                errors.append(str(exc))
            ev["a"] = asyncio.Event()
            await ev["a"].wait()  # /b answers meanwhile
            await send({"type": "http.response.body", "body": b"from a"})
        elif path == "/b":
            await send({"type": "http.response.start", "status": 202, "headers": [(b"x-who", b"b")]})
            await send({"type": "http.response.body", "body": b"from b"})
            try:  # a start after the complete response: refused at once, as before
                await send({"type": "http.response.start", "status": 200, "headers": []})
            except RuntimeError as exc:
                errors.append(str(exc))
            ev["a"].set()
        else:  # /start-only: the app returns after its start
            await send({"type": "http.response.start", "status": 204, "headers": [(b"x-who", b"c")]})

    with serving(app, lifespan="off") as server:
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("a", get(server, "/a")))
        t.start()
        import time
        for _ in range(500):
            if "a" in ev:
                break
            time.sleep(0.01)
        res["b"] = get(server, "/b")
        t.join(10)
        try:
            res["c"] = get(server, "/start-only")
        except http.client.RemoteDisconnected as exc:
            res["c"] = exc
        assert get(server, "/b")[0] == 202  # the server goes on
    st, h, body = res["a"]
    assert (st, h["x-who"], body) == (201, "a", b"from a")
    st, h, body = res["b"]
    assert (st, h["x-who"], body) == (202, "b", b"from b")
    assert isinstance(res["c"], http.client.RemoteDisconnected)
    assert errors == ["Unexpected ASGI message 'http.response.start' sent, after response already started."] * 3


def test_access_line_paths_quoted_as_uvicorn():
    """The access line's path is urllib's quote() of it (uvicorn's), also where the check
    that skips quote() for plain paths lets it through."""
    from urllib.parse import quote

    from goloop.serve.server import _quoted

    for c in [chr(i) for i in range(0x100)] + ["€", "😀", "/", "%2F"]:
        for path in (c, "/a" + c + "b", c * 3):
            assert _quoted(path) == quote(path), path


def _closed_app(seen):
    """An application whose request coroutine is closed (coroutine.close(), from outside,
    while it waits), before it starts a response or after it completed one."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        fut = loop.create_future()

        def close():
            task.get_coro().close()
            seen.setdefault("closed", []).append(scope["path"])
            fut.set_result(None)  # the Task steps the closed coroutine once more

        def ended(t):
            seen.setdefault("task ended", []).append(t.cancelled() or repr(t.exception()))

        task.add_done_callback(ended)
        if scope["path"] == "/after":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"sent"})
        loop.call_soon(close)
        try:
            await fut
        except GeneratorExit:
            seen.setdefault("exit", []).append(scope["path"])
            raise

    return app


@pytest.mark.parametrize("options", [{}, {"access_log": True}, {"access_log": True, "limit_max_requests": 100}],
                         ids=["c", "c-access-log", "python"])
def test_closed_request_coroutine(options):
    """A request coroutine closed from outside ends as one ended by a BaseException, in both
    wrappers: a response not started becomes a 500, one complete closes its connection after
    it, nothing is logged as the application's error, the access line has the status; the
    Task then steps a coroutine already closed, as a native coroutine's would."""
    seen = {}
    with _goloop_records() as h, serving(_closed_app(seen), lifespan="off", **options) as server:
        st, head, body = get(server, "/before")
        assert (st, body, head.get("connection")) == (500, b"Internal Server Error", "close")
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            c.request("GET", "/after")
            r = c.getresponse()
            assert (r.status, r.read()) == (200, b"sent")
            with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
                c.request("GET", "/again")  # the connection was closed after the response
                c.getresponse()
        finally:
            c.close()
        assert get(server, "/x")[0] in (200, 500)  # the server goes on
    assert seen["closed"][:2] == seen["exit"][:2] == ["/before", "/after"]
    assert seen["task ended"][:2] == [repr(RuntimeError("cannot reuse already awaited coroutine"))] * 2
    assert not [r.getMessage() for r in h.records if r.levelno >= logging.WARNING]
    access = [r.getMessage().split(" - ", 1)[1] for r in h.records if r.name == "goloop.access"]
    if options:
        assert access[:2] == ['"GET /before HTTP/1.1" 500 Internal Server Error', '"GET /after HTTP/1.1" 200 OK']
    else:
        assert access == []
