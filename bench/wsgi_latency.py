#!/usr/bin/env python3
"""Tail latency and CPU per request of WSGI servers (issue 22: p99 next to CPU per request):
goloop serve configurations side by side (A/B) with bjoern and Granian, taking turns in each
round, on bench/wsgi_bench.py's rows and command lines (server_argv).

    python3 bench/wsgi_latency.py [--rows raw,flask] [--conns 10,50] [--rounds 3] [--duration 5]
                                  [--config LABEL=PYSHIM_DIR[@NAME=VALUE,...]] ... [--bjoern] [--granian]

--config: goloop serve from PYSHIM_DIR (empty: this checkout's pyshim) with those environment
variables (THREADS=N: its --threads N); default: this checkout's, and, with --variants, also
--threads 1 and GOLOOP_WSGI_DRIVER=goroutine. Each server is a fresh process tree on core 0
(taskset -c 0), wrk -t1 -cN --latency on core 1, 1 s of warm-up then the measured run; wrk's
Lua done() prints the 50th, 99th and 99.9th percentiles of its latency histogram. Reported per
cell: the median over the rounds of p50 / p99 / p99.9 (ms), requests/s and CPU µs per request
of the server's whole process tree (utime+stime of every thread, from /proc), with the load
average, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import free_port, parse_wrk, stop, tree_cpu, wait_port  # noqa: E402
from wsgi_bench import APPS, ROWS, server_argv  # noqa: E402

LUA = """
done = function(summary, latency, requests)
   io.write(string.format("PCT %d %d %d\\n", latency:percentile(50), latency:percentile(99),
                          latency:percentile(99.9)))
end
"""


def run(kind, pyshim, extra, row, conns, args, lua):
    _, target, path = ROWS[row]
    port = free_port()
    env = dict(os.environ)
    if pyshim:
        env["PYTHONPATH"] = os.pathsep.join([pyshim, env.get("PYTHONPATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), APPS])
    env["WSGI_BENCH_DB"] = args.db
    env.update(extra)
    threads = int(env.pop("THREADS", 0)) or None
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen(["taskset", "-c", "0", *server_argv(kind, target, port, threads=threads)],
                            env=env, cwd=APPS, stdout=subprocess.DEVNULL, stderr=errf)
    try:
        wait_port(port, proc)
        wrk = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", "--latency", "-s", lua,
               f"http://127.0.0.1:{port}{path}"]
        subprocess.run(wrk + ["-d1s"], capture_output=True, check=True)
        c0 = tree_cpu(proc.pid)
        out = subprocess.run(wrk + [f"-d{args.duration}s"], capture_output=True, text=True, check=True).stdout
        c1 = tree_cpu(proc.pid)
        r = parse_wrk(out)
        m = re.search(r"PCT (\d+) (\d+) (\d+)", out)
        if not r or not r.get("n") or not m:
            raise SystemExit(f"{kind}: {out}")
        p50, p99, p999 = (int(x) / 1e3 for x in m.groups())
        return {"rps": r["value"], "us": (c1 - c0) / r["n"] * 1e6, "p50": p50, "p99": p99, "p999": p999,
                "err": r.get("errors") or 0}
    finally:
        stop(proc, 10)
        errf.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", default=[], metavar="LABEL=PYSHIM_DIR[@NAME=VALUE,...]")
    ap.add_argument("--variants", action="store_true", help="add --threads 1 and the goroutine driver")
    ap.add_argument("--granian", action="store_true")
    ap.add_argument("--bjoern", action="store_true")
    ap.add_argument("--rows", default="raw,flask")
    ap.add_argument("--conns", default="10,50")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    args = ap.parse_args()
    configs = []
    for c in args.config:
        label, _, rest = c.partition("=")
        pyshim, _, envs = rest.partition("@")
        configs.append((label, "goloop serve", pyshim or os.path.join(REPO, "pyshim"),
                        dict(e.split("=", 1) for e in envs.split(",") if e)))
    if not configs:
        configs = [("goloop", "goloop serve", os.path.join(REPO, "pyshim"), {})]
    if args.variants:
        base = configs[-1]
        configs.append((base[0] + " --threads 1", base[1], base[2], dict(base[3], THREADS="1")))
        configs.append((base[0] + " goroutine driver", base[1], base[2], dict(base[3], GOLOOP_WSGI_DRIVER="goroutine")))
    if args.bjoern:
        configs.append(("bjoern", "bjoern", None, {}))
    if args.granian:
        configs.append(("granian", "granian", None, {}))
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="wsgi-lat-") as tmp:
        args.db = os.path.join(tmp, "rows.db")
        lua = os.path.join(tmp, "pct.lua")
        with open(lua, "w") as f:
            f.write(LUA)
        print(f"# load average at start: {os.getloadavg()}", file=sys.stderr, flush=True)
        for i in range(args.rounds):
            for row in args.rows.split(","):
                for conns in (int(c) for c in args.conns.split(",")):
                    for label, kind, pyshim, extra in configs:
                        r = run(kind, pyshim, extra, row, conns, args, lua)
                        res.setdefault((row, conns, label), []).append(r)
                        print(f"round {i + 1} {row} -c{conns} {label}: {r['rps']:.0f} req/s, {r['us']:.1f} µs/req, "
                              f"p50 {r['p50']:.2f} p99 {r['p99']:.2f} p99.9 {r['p999']:.2f} ms, {r['err']} errors",
                              file=sys.stderr, flush=True)
    print(f"\n| row | conns | server | p50 ms | p99 ms | p99.9 ms | req/s | CPU µs/req |  "
          f"(median of {args.rounds}; load {os.getloadavg()[0]:.1f})")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for (row, conns, label), rs in res.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"| {row} | {conns} | {label} | {med('p50'):.2f} | {med('p99'):.2f} | {med('p999'):.2f} | "
              f"{med('rps'):,.0f} | {med('us'):.1f} |")


if __name__ == "__main__":
    main()
