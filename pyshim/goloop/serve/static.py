"""goloop serve's static files (--static-path-route, --static-path-mount, Granian's names):
the options, their checks, and the access log of what Go answered. Go serves them
(goloop/httpserver/static.go) before the application is called, over every protocol; Python only
configures the mounts and writes the access-log lines of their records, taken from Go
twice a second. It imports no other goloop module but the access-log format's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
from typing import Any

from . import accesslog as _serve_accesslog

access_logger = logging.getLogger("goloop.access")
logger = logging.getLogger("goloop.error")

OPTIONS: dict[str, Any] = {
    "static_path_route": None,        # [route, ...] (pairs with static_path_mount by position)
    "static_path_mount": None,        # [directory, ...]
    "static_path_dir_to_file": None,  # a directory's index file name
    "static_path_expires": "1d",      # Cache-Control: max-age; 0: none
}

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def expires_seconds(v: Any) -> int:
    """--static-path-expires: seconds, or a number with s, m, h, d or w (Granian's 1d)."""
    if isinstance(v, bool):
        raise ValueError("static_path_expires must be seconds or a duration like 1h, 1d")
    if isinstance(v, (int, float)):
        n = int(v)
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", str(v).lower())
        if not m:
            raise ValueError(f"static_path_expires: {v!r} is not seconds or a duration like 30m, 1h, 1d")
        n = int(m.group(1)) * _UNITS[m.group(2)]
    if n < 0:
        raise ValueError("static_path_expires must be >= 0")
    return n


def path_list(v: Any) -> list:
    """A setting that takes one path or several (a str, bytes or PathLike, or an iterable of
    them) as a list; None as an empty one."""
    if v is None:
        return []
    if isinstance(v, (str, bytes, os.PathLike)):
        return [v]
    return list(v)


def mounts(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The mounts of cfg, checked (ValueError naming the problem): a route for each mount, in
    order; a single mount without a route is at /static (Granian's default route)."""
    routes, dirs = [str(r) for r in path_list(cfg.get("static_path_route"))], path_list(cfg.get("static_path_mount"))
    if not dirs:
        if routes:
            raise ValueError("--static-path-route needs --static-path-mount (the directory it serves)")
        return []
    if not routes and len(dirs) == 1:
        routes = ["/static"]
    if len(routes) != len(dirs):
        raise ValueError(f"{len(routes)} --static-path-route for {len(dirs)} --static-path-mount: give one "
                         "route per directory, in the same order")
    index = cfg.get("static_path_dir_to_file") or ""
    if index and ("/" in index or index in (".", "..") or "\0" in index):
        raise ValueError("--static-path-dir-to-file must be a file name (e.g. index.html)")
    max_age = expires_seconds(cfg.get("static_path_expires") if cfg.get("static_path_expires") is not None else 0)
    out = []
    for route, d in zip(routes, dirs, strict=True):
        if not route.startswith("/"):
            raise ValueError(f"--static-path-route {route!r} must begin with '/'")
        d = os.path.abspath(os.fsdecode(d))
        if not os.path.isdir(d):
            raise ValueError(f"--static-path-mount {d!r} is not a directory")
        out.append({"route": route, "dir": d, "index": index, "max_age": max_age})
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--static-path-route", dest="static_path_route", action="append", default=None,
                   help="a URL path whose files Go serves from the --static-path-mount of the same position, "
                        "without calling the application; repeatable (default: /static for a single mount)")
    p.add_argument("--static-path-mount", dest="static_path_mount", action="append", default=None,
                   help="a directory served at its --static-path-route: GET and HEAD, ETag and Last-Modified "
                        "(304), one byte range (206, 416), precompressed .br/.gz siblings; nothing outside it "
                        "is reachable; repeatable (default: none)")
    p.add_argument("--static-path-dir-to-file", dest="static_path_dir_to_file", default=None,
                   help="the file served for a directory of a static mount, e.g. index.html "
                        "(default: none, a directory is 404)")
    p.add_argument("--static-path-expires", dest="static_path_expires", default="1d",
                   help="static responses' Cache-Control max-age: seconds or a duration (30m, 1h, 1d); "
                        "0: no Cache-Control (default: %(default)s)")


async def _drain_forever(srv: Any, _goloop: Any, line: Any) -> None:
    while True:
        await asyncio.sleep(0.5)
        drain(srv, _goloop, line)


def drain(srv: Any, _goloop: Any, line: Any) -> None:
    """Logs the records of the static responses Go answered since the last call."""
    out = json.loads(_goloop._static_log(srv))
    for addr, method, path, proto, status, size, dur, ua, referer in out["records"]:
        path, _, query = path.partition("?")
        _serve_accesslog.info(access_logger,
                              *line(addr, method, path, query, proto, status, size, dur / 1e6, ua, referer))
    if out["dropped"]:
        logger.warning("access log: %d static responses not logged (too many at once)", out["dropped"])


def configure(cfg: dict[str, Any], srv: Any, _goloop: Any, access: bool) -> asyncio.Task | None:
    """Before listen: the mounts to Go; with the access log on, the task that logs their
    responses (cancel it, then call its .drain() once more, at shutdown)."""
    ms = mounts(cfg)
    if not ms:
        return None
    _goloop._static_config(srv, json.dumps(ms), access)
    if not access:
        return None
    line = _serve_accesslog.formatter(cfg.get("access_log_fmt"))
    task = asyncio.get_running_loop().create_task(_drain_forever(srv, _goloop, line))
    task.drain = lambda: drain(srv, _goloop, line)  # type: ignore[attr-defined]
    return task
