"""goloop serve's access-log format (--access-log-fmt): the line of each request, for the
application's requests (goloop.serve.server, goloop.serve.wsgi) and the static files Go answered
(goloop.serve.static). Without a format the line is uvicorn's. It imports no other goloop
module.
"""
from __future__ import annotations

import asyncio
import atexit
import logging
import time
from http import HTTPStatus
from typing import Any, Callable

PHRASES = {s.value: s.phrase for s in HTTPStatus}

# the placeholders of --access-log-fmt (printf style, with names: %(status)d, %(dt_ms).1f ...)
PLACEHOLDERS = {
    "addr": "the client's address (host:port; a Unix socket's path; a trusted proxy's client)",
    "method": "the request's method",
    "path": "the request's path (percent-encoded) with ?query if any",
    "query_string": "the query string alone",
    "protocol": "HTTP/1.0, HTTP/1.1, HTTP/2 or HTTP/3",
    "status": "the response's status (an integer)",
    "size": "the response body's bytes (static files, ASGI's http.response.body messages; '-' for WSGI)",
    "dt_ms": "milliseconds from the request's start to its end (a float)",
    "user_agent": "the User-Agent header ('-' if none)",
    "referer": "the Referer header ('-' if none)",
    "time": "the local time the line is written, [05/Dec/2026:14:20:00 +0000]",
}

HELP = ("the access log's line, printf style with named placeholders: " +
        ", ".join(f"%({k})s" for k in PLACEHOLDERS) +
        " (status, size and dt_ms also as %(status)d, %(dt_ms).2f ...); "
        "e.g. '%(addr)s \"%(method)s %(path)s %(protocol)s\" %(status)d %(size)s %(dt_ms).1fms' "
        "(default: uvicorn's line, ADDR - \"METHOD PATH HTTP/V\" STATUS PHRASE)")

_SAMPLE = {"addr": "127.0.0.1:50000", "method": "GET", "path": "/", "query_string": "", "protocol": "HTTP/1.1",
           "status": 200, "size": 0, "dt_ms": 0.0, "user_agent": "-", "referer": "-", "time": "[]"}


def check(fmt: Any) -> None:
    """Raises ValueError naming the problem if fmt is not a usable format."""
    if fmt is None:
        return
    if not isinstance(fmt, str):
        raise ValueError("access_log_fmt must be a str")
    try:
        fmt % _SAMPLE
    except KeyError as e:
        raise ValueError(f"access_log_fmt: unknown placeholder {e.args[0]!r} (known: {', '.join(PLACEHOLDERS)})") \
            from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"access_log_fmt: {e}") from None


def needs(fmt: str | None, *names: str) -> bool:
    """fmt uses one of these placeholders (what must then be measured)."""
    return fmt is not None and any(f"%({n})" in fmt for n in names)


def formatter(fmt: str | None) -> Callable[..., tuple]:
    """line(addr, method, path, query, protocol ("1.1"), status, size, dt_ms, ua, referer) ->
    the (msg, *args) of the logger's call."""
    if fmt is None:
        def uvicorn(addr, method, path, query, protocol, status, size, dt_ms, ua, referer):
            if query:
                path = f"{path}?{query}"
            return ('%s - "%s %s HTTP/%s" %d %s', addr, method, path, protocol, status, PHRASES.get(status, ""))
        return uvicorn

    def line(addr, method, path, query, protocol, status, size, dt_ms, ua, referer):
        fields = {"addr": addr or "-", "method": method, "path": f"{path}?{query}" if query else path,
                  "query_string": query, "protocol": "HTTP/" + protocol, "status": status,
                  "size": "-" if size is None else size, "dt_ms": dt_ms or 0.0, "user_agent": ua or "-",
                  "referer": referer or "-", "time": time.strftime("[%d/%b/%Y:%H:%M:%S %z]")}
        return ("%s", fmt % fields)
    return line


def header(headers: list, name: bytes) -> str | None:
    """An ASGI scope's header value (latin-1), or None."""
    for k, v in headers:
        if k == name:
            return v.decode("latin-1")
    return None


# goloop's own logging (goloop.serve.config.configure_logging): the "goloop" logger, its
# stderr handler, that handler's formatter and what the formatter writes before an INFO
# message, or None while goloop has not configured it
default_logging: tuple[logging.Logger, logging.Handler, logging.Formatter, str] | None = None

# Lines written on a loop's thread wait here for that loop's next iteration (under the
# handler's lock), which writes all of them at once: one write(2) for the requests an
# iteration ended, not one each. goloop's handler (BatchedStreamHandler) writes them before
# any record of its own, so the stream keeps the order of its records; flush() writes them
# at the server's end and at exit.
_pending: list[str] = []
_pending_to: logging.Handler | None = None
# The loop that writes the lines of threads running none (a WSGI server's pool threads):
# the first line of a batch asks it with call_soon_threadsafe, and the lines the threads
# end before it runs go out with it. Set while a WSGI server runs (goloop.serve.server).
threads_loop: Any = None
_get_running_loop = asyncio._get_running_loop


class BatchedStreamHandler(logging.StreamHandler):
    """goloop's stderr handler: a StreamHandler that first writes the access lines waiting
    for the loop's next iteration, so they come before any record it writes after them."""

    def emit(self, record: logging.LogRecord) -> None:
        if _pending:  # (handle() holds the lock)
            _write_pending(self)
        super().emit(record)

    def flush(self) -> None:
        with self.lock:
            if _pending:
                _write_pending(self)
        super().flush()


def _write_pending(h: logging.Handler) -> None:
    """Writes the waiting lines to h's stream (h's lock held); a write that fails drops them
    (a stream that refuses them would refuse logging's report too)."""
    lines = "".join(_pending)
    _pending.clear()
    try:
        stream = h.stream
        stream.write(lines)
        stream.flush()
    except Exception:
        pass


def flush() -> None:
    """Writes the access lines still waiting (the loop's next iteration, the server's end)
    to the handler they were written for (_pending_to)."""
    h = _pending_to
    if h is not None and _pending:
        with h.lock:
            if _pending:
                _write_pending(h)


atexit.register(flush)


def straight(logger: logging.Logger) -> tuple[logging.Logger, logging.Handler, logging.Formatter, str] | None:
    """default_logging where an INFO record of logger would only go through goloop's own
    logging (no handler, filter or record factory of the application's or of a --log-config,
    the level allowing INFO): its line can then go straight to the handler (put), as the
    handler's formatter would write it; else None."""
    d = default_logging
    if d is not None and logger.isEnabledFor(logging.INFO):
        parent, h, fmt, _ = d
        hs = parent.handlers
        if (logger.parent is parent and logger.propagate and not logger.handlers and not logger.filters
                and len(hs) == 1 and hs[0] is h and not parent.filters and not parent.propagate
                and h.formatter is fmt and not h.filters and h.level <= logging.INFO
                and logging.getLogRecordFactory() is logging.LogRecord):
            return d
    return None


def put(h: logging.Handler, line: str) -> bool:
    """Writes line (formatted, its terminator included) to goloop's handler h, under its lock.
    On a thread running a loop it waits for that loop's next iteration, with the lines of the
    other requests ended before then (_pending); on another thread, while threads_loop is
    set, until that loop runs the write it asked for. False where h's stream refused it
    (logging's own path then writes it or reports why not)."""
    global _pending_to
    loop = _get_running_loop()
    to = loop if loop is not None else threads_loop
    with h.lock:
        if to is not None and isinstance(h, BatchedStreamHandler):
            _pending_to = h
            _pending.append(line)
            if len(_pending) == 1:  # the batch's first line: its write asked for
                try:
                    (to.call_soon if to is loop else to.call_soon_threadsafe)(flush)
                except Exception:  # (a loop closing or closed: written now)
                    _write_pending(h)
            return True
        try:
            stream = h.stream
            stream.write(line)
            stream.flush()
            return True
        except Exception:
            return False


def info(logger: logging.Logger, msg: str, *args: Any) -> None:
    """logger.info(msg, *args), the access line: straight to goloop's handler where only
    goloop's own logging would see the record (straight, put): building and formatting a
    LogRecord costs ~7 µs a request, the line ~2."""
    d = straight(logger)
    if d is not None and put(d[1], d[3] + (msg % args if args else msg) + d[1].terminator):
        return
    logger.info(msg, *args)
