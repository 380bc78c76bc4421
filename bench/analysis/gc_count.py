#!/usr/bin/env python3
"""The cycle collector's work per request on each ASGI server: how many collections of each
generation, and how long they took, while wrk loads a row of the web benchmark's apps.

    python3 bench/analysis/gc_count.py --app asgi_fastapi:app --path /plaintext --depth 16
    python3 bench/analysis/gc_count.py --app asgi_starlette:app --path /json --servers "goloop serve,uvicorn"

A server's collections are its application's objects and its own, in flight at once: a
server that holds many requests made but not yet run (a read of many pipelined requests)
fills the young generations, whose survivors are promoted, and promotions trigger full
collections, which walk the application's whole heap (FastAPI's: ~16 ms each). The app is
wrapped (a module written to a temporary directory) so that `gc.callbacks` times every
collection and a request to /gc-count-report prints and resets the counts; the server runs
on core 0 with the lifespan off (the JSON and plaintext rows need no database), wrk on
core 1: a warm-up, a report to reset, the measured run, a report. Printed per server:
requests, collections of each generation per 100,000 requests, and the collector's share of
the measured run's wall time (the server's one core is busy throughout).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "analysis"))
from asgi_instr import server_argv  # noqa: E402  (the servers with the lifespan off)
from harness import free_port, kill_tree, parse_wrk, wait_port  # noqa: E402
from web_bench import wrk_argv  # noqa: E402

WRAPPER = '''
import gc, importlib, sys, time
_mod, _, _attr = {target!r}.partition(":")
_app = getattr(importlib.import_module(_mod), _attr)
_count, _secs, _t0 = [0, 0, 0], [0.0, 0.0, 0.0], [0.0]

def _timed(phase, info):
    if phase == "start":
        _t0[0] = time.perf_counter()
    else:
        g = info["generation"]
        _count[g] += 1
        _secs[g] += time.perf_counter() - _t0[0]

gc.callbacks.append(_timed)

async def app(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/gc-count-report":
        body = ("%d %d %d %.6f %.6f %.6f" % (*_count, *_secs)).encode()
        _count[:] = [0, 0, 0]
        _secs[:] = [0.0, 0.0, 0.0]
        await send({{"type": "http.response.start", "status": 200, "headers": []}})
        await send({{"type": "http.response.body", "body": body}})
        return
    await _app(scope, receive, send)
'''


def report(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/gc-count-report", timeout=30) as r:
        v = r.read().decode().split()
    return [int(x) for x in v[:3]], [float(x) for x in v[3:]]


def measure(name, args, tmp):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, os.path.join(BENCH, "web"), os.path.join(BENCH, "servers"),
                                                       os.path.join(REPO, "pyshim"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(["taskset", "-c", "0", *server_argv(name, "gc_count_app:app", port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        wrk, tail = wrk_argv(port, args.path, args.depth, args.connections)
        subprocess.run(wrk + ["-d2s"] + tail, capture_output=True, timeout=60)
        report(port)
        t0 = time.perf_counter()
        out = subprocess.run(wrk + [f"-d{args.duration}s"] + tail, capture_output=True, text=True,
                             timeout=args.duration + 60).stdout
        wall = time.perf_counter() - t0
        counts, secs = report(port)
    finally:
        kill_tree(proc)
    w = parse_wrk(out)
    if not w or not w.get("n"):
        raise RuntimeError(f"{name}: wrk output: {out[-300:]}")
    n = w["n"]
    per = [c * 100000 / n for c in counts]
    print(f"{name:14} {n:9,} requests  collections per 100k requests: young {per[0]:8.1f}  middle {per[1]:6.1f}  "
          f"full {per[2]:5.1f}  ({counts[2]} full, {secs[2] * 1000 / max(counts[2], 1):.1f} ms each)  "
          f"collector {sum(secs) / wall * 100:4.1f} % of the run", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--app", default="asgi_fastapi:app", help="module:attribute (bench/web/ or bench/servers/)")
    ap.add_argument("--path", default="/plaintext")
    ap.add_argument("--depth", type=int, default=16, help="requests pipelined per write")
    ap.add_argument("--servers", default="goloop serve,uvicorn,granian")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--duration", type=int, default=10)
    args = ap.parse_args()
    if not re.match(r"^[\w.]+:\w+$", args.app):
        sys.exit(f"--app {args.app!r}: module:attribute")
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "gc_count_app.py"), "w") as f:
            f.write(WRAPPER.format(target=args.app))
        print(f"# {args.app} {args.path}, {args.depth} a write, {args.connections} connections, {args.duration} s; "
              f"Python {sys.version.split()[0]}", flush=True)
        for name in args.servers.split(","):
            measure(name, args, tmp)


if __name__ == "__main__":
    main()
