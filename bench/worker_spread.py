#!/usr/bin/env python3
"""How `goloop serve --workers N` spreads the requests over its workers: BENCHMARKS.md's
worker spread table.

    python3 bench/worker_spread.py [--workers 2,4] [--duration 10] [--loads slow,c2,c100,c100close]
                                   [--rounds 1] [--pyshim DIR]

(--pyshim: the goloop package to run, default this checkout's pyshim/: a copy with another
serve/workers.py compares two versions.)

For each worker count and load, a fresh `goloop serve --workers N` (its process tree pinned
to core 0) serves an app that answers its worker's PID and counts its requests; each worker
writes its count at its lifespan shutdown, so the counts are exact, whoever the client is.
Loads (on core 1), each `--duration` seconds:
  slow       one client in a loop, a new connection per request (light load: the case where a
             shared listening socket lets the worker that is already awake take every accept)
  c2         wrk -t1 -c2 (two keep-alive connections: at most two workers can see them)
  c100       wrk -t1 -c100 (full load, keep-alive)
  c100close  wrk -t1 -c100 with `Connection: close` (full load, a new connection per request)
Reported per row: each worker's share of the requests (sorted, largest first), and the
requests per second of the whole run. Needs wrk.
"""
from __future__ import annotations

import argparse
import glob
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import free_port, parse_wrk, stop, taskset, wait_port  # noqa: E402

SERVER_CPU, CLIENT_CPU = "0", "1"

APP = '''
import os

COUNT = 0


async def app(scope, receive, send):
    global COUNT
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                with open(os.path.join(os.environ["SPREAD_DIR"], "count-%d" % os.getpid()), "w") as f:
                    f.write(str(COUNT))
                await send({"type": "lifespan.shutdown.complete"})
                return
    COUNT += 1
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"%d" % os.getpid()})
'''

LOADS = ("slow", "c2", "c100", "c100close")


def slow_client(port, duration):
    """One client, a new connection per request, for duration s: the requests it made."""
    end = time.monotonic() + duration
    n = 0
    while time.monotonic() < end:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/")
        r = c.getresponse()
        r.read()
        c.close()
        n += 1
    return n


PYSHIM = os.path.join(REPO, "pyshim")


def run_one(workers, load, duration):
    """({pid: requests}, requests/s) of one server run."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "spreadapp.py"), "w") as f:
            f.write(APP)
        port = free_port()
        env = dict(os.environ, SPREAD_DIR=d,
                   PYTHONPATH=os.pathsep.join([PYSHIM, os.environ.get("PYTHONPATH", "")]))
        errf = tempfile.TemporaryFile()
        argv = [*taskset(SERVER_CPU), sys.executable, "-P", "-m", "goloop", "serve", "spreadapp:app",
                "--app-dir", d, "--port", str(port), "--workers", str(workers), "--no-access-log",
                "--log-level", "warning"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=errf)
        proc.errf = errf
        try:
            wait_port(port, proc)
            time.sleep(2.0)  # every worker listening (the port answers as soon as one does)
            t0 = time.monotonic()
            if load == "slow":
                if hasattr(os, "sched_setaffinity"):  # the client loop runs in this process
                    os.sched_setaffinity(0, {int(CLIENT_CPU)})
                total = slow_client(port, duration)
            else:
                conns = 2 if load == "c2" else 100
                wrk = [*taskset(CLIENT_CPU), "wrk", "-t1", "-c", str(conns), f"-d{int(duration)}s"]
                if load == "c100close":
                    wrk += ["-H", "Connection: close"]
                r = subprocess.run(wrk + [f"http://127.0.0.1:{port}/"], capture_output=True, text=True,
                                   timeout=duration + 60)
                res = parse_wrk(r.stdout)
                if res is None:
                    print(f"# wrk failed: {r.stdout}{r.stderr}", file=sys.stderr)
                total = res["n"] if res else 0
            elapsed = time.monotonic() - t0
        finally:
            stop(proc, 30)
        counts = {}
        for p in glob.glob(os.path.join(d, "count-*")):
            with open(p) as f:
                counts[int(p.rsplit("-", 1)[1])] = int(f.read() or 0)
        if len(counts) < workers:  # a worker that served nothing still wrote 0; missing: it died
            print(f"# warning: {len(counts)} of {workers} workers reported", file=sys.stderr)
        return counts, total / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--rounds", type=int, default=1, help="runs of each row (a row each)")
    ap.add_argument("--pyshim", default=PYSHIM)
    args = ap.parse_args()
    globals()["PYSHIM"] = os.path.abspath(args.pyshim)
    if shutil.which("wrk") is None and any(x != "slow" for x in args.loads.split(",")):
        sys.exit("wrk is needed (apt-get install wrk) for the loads other than slow")
    print("| workers | load | requests per worker (share, largest first) | requests/s |")
    print("| --- | --- | --- | --- |")
    for w in (int(x) for x in args.workers.split(",")):
        for load in [x for x in args.loads.split(",") for _ in range(args.rounds)]:
            if os.name == "posix" and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
            counts, rate = run_one(w, load, args.duration)
            total = sum(counts.values()) or 1
            shares = sorted(counts.values(), reverse=True) + [0] * max(0, w - len(counts))
            cells = " / ".join(f"{c} ({100 * c / total:.0f}%)" for c in shares)
            print(f"| {w} | {load} | {cells} | {rate:.0f} |", flush=True)


if __name__ == "__main__":
    main()
