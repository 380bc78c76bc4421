#!/usr/bin/env python3
"""The Python cost of one request of each bench/servers/serve_apps.py application, alone: the app's
coroutine driven by hand (no loop, no server, no sockets) with a scope like goloop serve's and
send/receive that do nothing. Any server's CPU per request is at least this (a floor for
bench/serve_bench.py's rows; see BENCHMARKS.md "goloop serve").

    taskset -c 0 python3 bench/analysis/serve_app_cost.py [--n 200000]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "servers"))
import serve_apps  # noqa: E402

APPS = {"hello": ("/", serve_apps.hello), "big": ("/", serve_apps.big)}


def scope_for(path):
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
            "scheme": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [(b"host", b"127.0.0.1:8000")], "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000), "state": {}}


class _Done:
    """What goloop serve's send/receive return: an awaitable already finished."""
    __slots__ = ("v",)

    def __init__(self, v=None):
        self.v = v

    def __await__(self):
        return self.v
        yield  # noqa: unreachable (makes this a generator)


_REQ = {"type": "http.request", "body": b"", "more_body": False}


async def _noop_send(message):
    return None


async def _receive():
    return _REQ


def run(app, path, n):
    base = scope_for(path)
    send, receive = _noop_send, _receive
    for _ in range(min(n, 1000)):  # warm-up (FastAPI builds caches on its first calls)
        c = app(dict(base), receive, send)
        try:
            c.send(None)
        except StopIteration:
            pass
    t0 = time.process_time()
    for _ in range(n):
        c = app(dict(base), receive, send)
        try:
            c.send(None)
            raise RuntimeError("the application waited for something")
        except StopIteration:
            pass
    return (time.process_time() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    apps = dict(APPS, starlette=("/json", serve_apps.starlette), fastapi=("/items/42", serve_apps.fastapi))
    print("| application | Python µs per request, alone (best of %d) |\n| --- | ---: |" % args.repeat)
    for name, (path, app) in apps.items():
        n = args.n if name in ("hello", "big") else args.n // 10
        best = min(run(app, path, n) for _ in range(args.repeat))
        print(f"| {name} | {best:.2f} |", flush=True)


if __name__ == "__main__":
    main()
