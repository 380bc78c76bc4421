"""goloop serve --interface wsgi: WSGI applications (PEP 3333: Flask, Django ...) on goloop
serve's Go engine (HTTP/1.1, HTTP/2, TLS).

The engine is the one both interfaces share (goloop/httpserver, goloop/binding): Go reads, parses and writes
every connection without the GIL. A pool of Python threads (--threads) answers the requests:
each thread blocks in Go (GIL released) until Go hands it a request, builds its environ in C,
calls the application with the GIL, and sends the response through Go (the GIL released
again while Go frames and writes it). wsgi.input reads the body from Go as the application
asks for it. The loop thread only waits for the end (signals, graceful shutdown).
This module has what stays in Python: telling a WSGI application from an ASGI one, the
environ's constant part, wsgi.errors, wsgi.file_wrapper, the access log and the pool.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import time
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from .. import _compat
from . import accesslog as _serve_accesslog

logger = logging.getLogger("goloop.error")
_PHRASES = {s.value: s.phrase for s in HTTPStatus}
access_logger = logging.getLogger("goloop.access")

INTERFACES = ("auto", "asgi", "asgi3", "wsgi")


def default_threads() -> int:
    """--threads' default: concurrent.futures.ThreadPoolExecutor's, min(32, cpus + 4).
    WSGI handlers block in I/O (databases, HTTP calls) far more than they compute, so more
    threads than cores keep the process busy while some wait (gthread and Granian's WSGI
    size their pools the same way, from the cores); with the GIL one runs Python at a time
    and more only add switching; on a free-threaded build the cores run that many at once."""
    return min(32, (os.cpu_count() or 1) + 4)


def is_asgi(app: Any) -> bool:
    """What --interface auto decides: ASGI for a class (ASGI 2), a coroutine function or an
    object whose __call__ is one (uvicorn's test), and for any callable that takes three
    positional arguments (scope, receive, send: a function may return an awaitable) or whose
    signature cannot be read; WSGI for one that takes two (environ, start_response) and not
    three: Flask's and Django's applications, a plain WSGI function."""
    if inspect.isclass(app):
        return True  # ASGI 2 (a class called with the scope); a WSGI app is an instance or function
    if inspect.iscoroutinefunction(app) or _compat.iscoroutinefunction(app):
        return True
    call = app.__call__ if callable(app) else None
    if call is not None and (inspect.iscoroutinefunction(call) or _compat.iscoroutinefunction(call)):
        return True
    try:
        sig = inspect.signature(app)
    except (TypeError, ValueError):
        return True
    return _binds(sig, 3) or not _binds(sig, 2)


def _binds(sig: inspect.Signature, n: int) -> bool:
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True


def wants_wsgi(app: Any, interface: str) -> bool:
    if interface == "wsgi":
        return True
    if interface in ("asgi", "asgi3"):
        return False
    return not is_asgi(app)


class ErrorStream:
    """wsgi.errors: a text stream whose lines go to the server's log (goloop.error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf = ""

    def write(self, s: str) -> None:
        with self._lock:
            self._buf += s
            *lines, self._buf = self._buf.split("\n")
        for line in lines:
            logger.error("%s", line)

    def writelines(self, seq) -> None:
        for s in seq:
            self.write(s)

    def flush(self) -> None:
        with self._lock:
            line, self._buf = self._buf, ""
        if line:
            logger.error("%s", line)


class FileWrapper:
    """wsgi.file_wrapper: goloop sends a wrapped regular file with sendfile(2) (Go, on plain
    HTTP/1.1; HTTP/2 and TLS read it in Go), from its current position to its end;
    anything else is iterated in blocks of blksize."""

    def __init__(self, filelike: Any, blksize: int = 8192) -> None:
        self.filelike = filelike
        self.blksize = blksize
        if hasattr(filelike, "close"):
            self.close = filelike.close

    def __iter__(self):
        read = self.filelike.read
        while True:
            b = read(self.blksize)
            if not b:
                return
            yield b


def _log_app_error(exc: BaseException) -> None:
    logger.error("Exception in WSGI application\n", exc_info=exc)


def _access_logger(server: Any, max_requests: int | None, log: bool):
    """The function the pool threads call after each request (access log, request limit)."""
    count = 0
    lock = threading.Lock()
    fmt = server.config.get("access_log_fmt") if log else None
    line = _serve_accesslog.formatter(fmt) if fmt is not None else None

    def access(environ: dict, status: int) -> None:
        nonlocal count
        if line is not None:  # --access-log-fmt (goloop.serve.accesslog)
            addr = environ.get("REMOTE_ADDR") or "-"
            if environ.get("REMOTE_PORT"):
                addr = f"{addr}:{environ['REMOTE_PORT']}"
            t0 = environ.get("goloop.t0")
            _serve_accesslog.info(access_logger, *line(
                addr, environ["REQUEST_METHOD"],
                quote(environ["SCRIPT_NAME"] + environ["PATH_INFO"], safe="/:@!$&'()*+,;=-._~"),
                environ["QUERY_STRING"], environ["SERVER_PROTOCOL"].removeprefix("HTTP/"),
                status, None, (time.perf_counter() - t0) * 1e3 if t0 else 0.0,
                environ.get("HTTP_USER_AGENT"), environ.get("HTTP_REFERER")))
        elif log:
            addr = environ.get("REMOTE_ADDR") or "-"
            if environ.get("REMOTE_PORT"):
                addr = f"{addr}:{environ['REMOTE_PORT']}"
            path = environ["SCRIPT_NAME"] + environ["PATH_INFO"]
            if environ["QUERY_STRING"]:
                path += "?" + environ["QUERY_STRING"]
            # uvicorn's line, as goloop serve's ASGI one: 127.0.0.1:50000 - "GET / HTTP/1.1" 200 OK
            _serve_accesslog.info(access_logger, '%s - "%s %s %s" %d %s', addr, environ["REQUEST_METHOD"], path,
                                  environ["SERVER_PROTOCOL"], status, _PHRASES.get(status, ""))
        if max_requests:
            with lock:
                count += 1
                n = count
            if n == max_requests:
                loop = server._loop
                if loop is not None:
                    loop.call_soon_threadsafe(server.request_exit, "Maximum request limit of %d exceeded. "
                                              "Terminating process." % max_requests)

    return access


def _timed(app: Any) -> Any:
    """app, noting when each request started in its environ (--access-log-fmt's dt_ms)."""
    perf = time.perf_counter

    def timed(environ: dict, start_response: Any) -> Any:
        environ["goloop.t0"] = perf()
        return app(environ, start_response)

    return timed


def make_server(server: Any, app: Any, loop: Any, _goloop: Any, headers: list[str], max_head: int) -> Any:
    """The Go server (a _goloop.WsgiServer) of goloop.serve.server.Server for app."""
    cfg = server.config
    tls = bool(cfg["ssl_certfile"])
    threads = cfg["threads"] or default_threads()
    # a --workers/--reload worker (the master's option is not passed to it): other processes serve too
    multiprocess = (cfg["workers"] or 1) > 1 or bool(getattr(server, "in_worker", False))
    root = cfg["root_path"] or ""
    environ = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https" if tls else "http",
        "wsgi.errors": ErrorStream(),
        "wsgi.multithread": threads > 1,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        "wsgi.file_wrapper": FileWrapper,
        # wsgi.input ends at the body's end, chunked or not (gunicorn's extension, which
        # werkzeug needs to read a chunked body)
        "wsgi.input_terminated": True,
        "SCRIPT_NAME": root,
    }
    # the keys every request sets, in a fixed order (the environ is a copy of this dict)
    for key in ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL",
                "REMOTE_ADDR", "REMOTE_PORT", "wsgi.input"):
        environ[key] = None
    access = bool(cfg["access_log"]) and access_logger.isEnabledFor(logging.INFO)
    hook = _access_logger(server, cfg["limit_max_requests"], access) \
        if access or cfg["limit_max_requests"] else None
    server._loop = loop
    if access and _serve_accesslog.needs(cfg["access_log_fmt"], "dt_ms"):
        app = _timed(app)
    return _goloop.WsgiServer(loop, app, environ, int(max_head), int(float(cfg["timeout_keep_alive"]) * 1000),
                              int(cfg["limit_concurrency"] or 0), bool(cfg["server_header"]),
                              bool(cfg["date_header"]), "\n".join(headers).encode("latin-1"),
                              _log_app_error, FileWrapper, root.encode("latin-1"), hook)


def start_pool(server: Any, srv: Any) -> list[threading.Thread]:
    threads = server.config["threads"] or default_threads()
    pool = [threading.Thread(target=srv.serve_thread, name=f"goloop-wsgi-{i}", daemon=True)
            for i in range(threads)]
    for t in pool:
        t.start()
    return pool


async def join_pool(pool: list[threading.Thread], timeout: float = 5.0) -> None:
    """Waits (without blocking the loop) for the pool threads, which return once the server
    is released; a thread stuck in the application is left (it is a daemon thread)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while any(t.is_alive() for t in pool) and loop.time() < deadline:
        await asyncio.sleep(0.01)
