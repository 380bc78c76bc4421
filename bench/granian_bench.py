#!/usr/bin/env python3
"""Starlette on Granian with each asyncio loop: Granian's own asyncio loop, uvloop, and
goloop (`python -m goloop.granian`, which installs goloop and runs Granian with
`--loop asyncio`).

    python3 bench/granian_bench.py [--dur 10] [--warm 2] [--repeat 2] [--markdown] [--results]

--results writes the table as bench/results/loop-granian.json and renders BENCHMARKS.md.

Granian runs one worker with one runtime thread (`--workers 1 --runtime-threads 1`), the
whole process tree pinned to core 0; wrk -t1 -c100 on core 1. Two endpoints of one
Starlette app: `/json` (an async JSON endpoint) and `/sync` (a plain `def` endpoint, which
Starlette runs in a worker thread: the case where a loop that keeps the GIL hurts).
Reports requests/s, the server's CPU µs per request (master and worker, all threads), and
wrk's p50/p99 latency. Loops run in alternation, best of --repeat by requests/s.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from harness import free_port, parse_wrk, stop, tree_cpu  # noqa: E402

SERVER_CPU, CLIENT_CPU = "0", "1"

APP = textwrap.dedent('''
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def hello(request):
        return JSONResponse({"message": "Hello, world!"})

    def hello_sync(request):
        return JSONResponse({"message": "Hello, world!"})

    app = Starlette(routes=[Route("/json", hello), Route("/sync", hello_sync)])
''')

LOOPS = {
    "asyncio": ["-m", "granian", "--loop", "asyncio"],
    "uvloop": ["-m", "granian", "--loop", "uvloop"],
    "goloop": ["-m", "goloop.granian"],
}


def measure(loop, path, appdir, warm, dur):
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([appdir, os.path.join(REPO, "pyshim"), env.get("PYTHONPATH", "")])
    argv = ["taskset", "-c", SERVER_CPU, sys.executable, *LOOPS[loop], "--interface", "asgi",
            "--workers", "1", "--runtime-threads", "1", "--no-ws", "--log-level", "warning",
            "--port", str(port), "app:app"]
    srv = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if srv.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{loop}: granian did not start: {srv.stderr.read().decode()[-500:]}")
                time.sleep(0.1)
        time.sleep(0.5)
        wrk = subprocess.Popen(["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c100", f"-d{int(round(warm + dur))}s",
                                "--latency", f"http://127.0.0.1:{port}{path}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(warm)
        c0, t0 = tree_cpu(srv.pid), time.monotonic()
        time.sleep(dur - 0.2)
        c1, t1 = tree_cpu(srv.pid), time.monotonic()
        out, err = wrk.communicate(timeout=warm + dur + 30)
        res = parse_wrk(out)
        if res is None:
            raise RuntimeError(f"{loop}: wrk failed: {err or out}")
        res["cpu_us"] = (c1 - c0) / (t1 - t0) / res["value"] * 1e6
        return res
    finally:
        stop(srv, 15)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dur", type=float, default=10)
    ap.add_argument("--warm", type=float, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--loops", default="asyncio,uvloop,goloop")
    ap.add_argument("--paths", default="/json,/sync")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--results", action="store_true", help="write bench/results/loop-granian.json")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is required (apt-get install wrk)")
    loops = args.loops.split(",")
    with tempfile.TemporaryDirectory() as appdir:
        with open(os.path.join(appdir, "app.py"), "w") as f:
            f.write(APP)
        best = {}
        for path in args.paths.split(","):
            for _ in range(args.repeat):
                for loop in loops:
                    r = measure(loop, path, appdir, args.warm, args.dur)
                    print(f"{path} {loop}: {r['value']:,.0f} req/s, {r['cpu_us']:.1f} µs CPU/req, "
                          f"p50 {r.get('p50_us', 0) / 1e3:.2f} ms, p99 {r.get('p99_us', 0) / 1e3:.2f} ms"
                          + (f", {r['errors']} errors" if r["errors"] else ""), flush=True)
                    key = (path, loop)
                    if key not in best or r["value"] > best[key]["value"]:
                        best[key] = r
    if args.markdown:
        print("\n| endpoint | loop | requests/s | vs asyncio | server CPU µs/request | p50 ms | p99 ms |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for path in args.paths.split(","):
            base = best.get((path, "asyncio"))
            for loop in loops:
                r = best[(path, loop)]
                ratio = f"{r['value'] / base['value']:.2f}x" if base else ""
                print(f"| `{path}` | {loop} | {r['value']:,.0f} | {ratio} | {r['cpu_us']:.1f} | "
                      f"{r.get('p50_us', 0) / 1e3:.2f} | {r.get('p99_us', 0) / 1e3:.2f} |")

    if args.results:
        write_results(best, loops, args)


def write_results(best, loops, args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import render
    from results import write_result
    rows = []
    for path in args.paths.split(","):
        base = best.get((path, "asyncio"))
        for loop in loops:
            r = best[(path, loop)]
            rows.append({"row": f"`{path}`", "loop": loop, "requests/s": round(r["value"]),
                         "vs asyncio": round(r["value"] / base["value"], 2) if base else None,
                         "server CPU µs/request": round(r["cpu_us"], 1),
                         "p50 ms": round(r["p50_us"] / 1e3, 2) if r.get("p50_us") else None,
                         "p99 ms": round(r["p99_us"] / 1e3, 2) if r.get("p99_us") else None})
    write_result(
        "loop-granian", group="The event loop under other servers", title="Starlette on Granian, with each loop",
        command=f"python3 bench/granian_bench.py --dur {args.dur:g} --warm {args.warm:g} --repeat {args.repeat} --results",
        method=("Granian (`--interface asgi --workers 1 --runtime-threads 1`, the whole process tree pinned "
                "to core 0), Starlette, `wrk -t1 -c100` on core 1, best of "
                f"{args.repeat} by requests/s; CPU is Granian's master and worker, all threads. goloop runs as "
                "`python -m goloop.granian` (Granian with `--loop asyncio` after `goloop.install()`). `/json` "
                "is an async JSON endpoint; `/sync` a plain `def` endpoint that Starlette runs in a worker thread."),
        better=None, columns=["row", "loop", "requests/s", "vs asyncio", "server CPU µs/request", "p50 ms", "p99 ms"],
        units={"vs asyncio": "x"}, rows=rows, order=20, row_label="endpoint",
        modules=("granian", "starlette", "uvloop"))
    render.main([])


if __name__ == "__main__":
    main()
