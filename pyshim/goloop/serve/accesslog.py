"""goloop serve's access-log format (--access-log-fmt): the line of each request, for the
application's requests (goloop.serve.server, goloop.serve.wsgi) and the static files Go answered
(goloop.serve.static). Without a format the line is uvicorn's. It imports no other goloop
module.
"""
from __future__ import annotations

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


def info(logger: logging.Logger, msg: str, *args: Any) -> None:
    """logger.info(msg, *args), the access line. Where the record would only go through
    goloop's own logging (default_logging: no handler, filter or record factory of the
    application's or of a --log-config, the level allowing INFO), the line is written
    straight to the handler's stream, under its lock, as its formatter would write it:
    building and formatting a LogRecord costs ~7 µs a request, the line ~2."""
    d = default_logging
    if d is not None and logger.isEnabledFor(logging.INFO):
        parent, h, fmt, prefix = d
        hs = parent.handlers
        if (logger.parent is parent and logger.propagate and not logger.handlers and not logger.filters
                and len(hs) == 1 and hs[0] is h and not parent.filters and not parent.propagate
                and h.formatter is fmt and not h.filters and h.level <= logging.INFO
                and logging.getLogRecordFactory() is logging.LogRecord):
            line = prefix + (msg % args if args else msg) + h.terminator
            with h.lock:
                try:
                    stream = h.stream
                    stream.write(line)
                    stream.flush()
                    return
                except Exception:
                    pass  # logging's own path writes it or reports why not
    logger.info(msg, *args)
