"""goloop serve runs each request's application coroutine inside a C wrapper (asgi_run.c)
when no access log or request limit needs Python around it: what the Python wrapper did
must still hold (errors logged and answered 500, the Task machinery, awaitables that are not
coroutines, cancellation), and the Python wrapper still serves the access-log case."""
import asyncio
import logging

from test_serve_http import get, serving


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


class _Awaitable:
    """An awaitable that is not a coroutine (its __await__ is a generator)."""

    def __init__(self, scope, send):
        self.scope, self.send = scope, send

    def __await__(self):
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


def test_app_returning_a_non_coroutine_awaitable():
    def app(scope, receive, send):
        return _Awaitable(scope, send)

    with serving(app, lifespan="off") as server:
        assert get(server, "/")[:3:2] == (200, b"awaitable")


def test_access_log_path_still_answers_and_logs():
    h = _Records()
    log = logging.getLogger("goloop.access")
    log.addHandler(h)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        with serving(_app({}), access_log=True) as server:
            assert get(server, "/")[0] == 200
            assert get(server, "/raise")[0] == 500
    finally:
        log.removeHandler(h)
        log.setLevel(old)
    lines = [r.getMessage() for r in h.records]
    assert any('"GET / HTTP/1.1" 200' in x for x in lines), lines
    assert any('"GET /raise HTTP/1.1" 500' in x for x in lines), lines


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
