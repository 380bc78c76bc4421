#!/usr/bin/env python3
"""CPU per request of one of bench/wsgi_bench.py's rows (default the raw WSGI hello world,
bench/servers/wsgi_apps.py's raw; each server's command line is bench/wsgi_bench.py's
server_argv): goloop serve --interface wsgi builds side by side (A/B), and Granian --interface
wsgi, bjoern, uWSGI and gunicorn sync, taking turns in each round.

    python3 bench/wsgi_ab.py [--config LABEL=PYSHIM_DIR ...] [--granian] [--bjoern] [--uwsgi] [--gunicorn]
                             [--row raw|flask|flask_db|django] [--app-alone]
                             [--rounds 3] [--duration 5] [--conns 10] [--threads N]

--config LABEL=DIR[@NAME=VALUE,...]: goloop from DIR (a pyshim folder with its built _goloop module, put first
on PYTHONPATH; empty: this checkout's), with those environment variables (THREADS=N: its --threads); default: this
checkout's. Each server is a fresh process on core 0 (taskset
-c 0); wrk -t1 -cN on core 1 for 1 s of warm-up, then the measured run. Reported per server:
the median over the rounds of requests/s, CPU µs per request of the server's process tree
(utime+stime of every thread, from /proc) and context switches per request (voluntary and
involuntary of every thread, from /proc/PID/task/*/status), with each round's CPU figure, and the
50th, 99th and 99.9th percentiles of latency (wrk --latency's histogram, through a Lua done()). Taking turns puts every
server under the same drift of the machine, where bench/wsgi_bench.py's table (each server's
rounds minutes apart) spreads by up to 1.5x; below the table, the first configuration's CPU
per request over each other's, paired by round (median of the rounds' ratios).
--app-alone: after each round, the row's application alone (wsgi_bench's app cost: called in a
loop on core 0 with a prepared environ, no server): its median, and each server's own cost =
its median CPU per request minus that.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import free_port, parse_wrk, tree_cpu, tree_pids, wait_port  # noqa: E402
from wsgi_bench import APPS, ROWS, measure_app_costs, server_argv  # noqa: E402


def ctx_switches(pid):
    n = 0
    for p in tree_pids(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            n += int(line.split()[1])
            except OSError:
                pass
    return n


# wsgi_bench's server names for this script's kinds (one command line per server, there)
KINDS = {"goloop": "goloop serve", "granian": "granian", "bjoern": "bjoern", "uwsgi": "uwsgi",
         "gunicorn": "gunicorn sync"}


# wrk's Lua end hook: the percentiles of its latency histogram (µs), 99.9 included
LUA = """done = function(summary, latency, requests)
   io.write(string.format("PCT %d %d %d\\n", latency:percentile(50), latency:percentile(99),
                          latency:percentile(99.9)))
end
"""


def run(kind, pyshim, args, extra):
    port = free_port()
    env = dict(os.environ)
    if pyshim:
        env["PYTHONPATH"] = os.pathsep.join([pyshim, env.get("PYTHONPATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), APPS])
    env.update(args.env)
    env.update(extra)
    errf = tempfile.TemporaryFile()
    threads = int(env.pop("THREADS", 0)) or args.threads
    _, target, path = ROWS[args.row]
    argv = server_argv(KINDS[kind], target, port, threads=threads)
    if argv is None:
        raise SystemExit(f"{kind}: not installed (make bench-deps)")
    proc = subprocess.Popen(["taskset", "-c", "0", *argv],
                            env=env, cwd=APPS,
                            stdout=subprocess.DEVNULL, stderr=errf)
    proc.errf = errf
    try:
        wait_port(port, proc)
        wrk = ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.conns}", "--latency", "-s", args.lua,
               f"http://127.0.0.1:{port}{path}"]
        subprocess.run(wrk + ["-d1s"], capture_output=True, check=True)
        c0, s0 = tree_cpu(proc.pid), ctx_switches(proc.pid)
        out = subprocess.run(wrk + [f"-d{args.duration}s"], capture_output=True, text=True, check=True).stdout
        c1, s1 = tree_cpu(proc.pid), ctx_switches(proc.pid)
        r = parse_wrk(out)
        n = r["n"]
        pct = re.search(r"PCT (\d+) (\d+) (\d+)", out)
        if n == 0 or not pct:
            raise SystemExit(f"{kind}: {out}")
        p50, p99, p999 = (int(x) / 1000 for x in pct.groups())
        # errors (Granian's wrk timeouts on a loaded machine) are counted, not fatal
        return {"rps": r["value"], "us": (c1 - c0) / n * 1e6, "cs": (s1 - s0) / n, "err": r.get("errors") or 0,
                "p50": p50, "p99": p99, "p999": p999}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", default=[], metavar="LABEL=PYSHIM_DIR[@NAME=VALUE,...]")
    ap.add_argument("--granian", action="store_true")
    ap.add_argument("--gunicorn", action="store_true")
    ap.add_argument("--bjoern", action="store_true")
    ap.add_argument("--uwsgi", action="store_true")
    ap.add_argument("--row", default="raw", choices=sorted(ROWS))
    ap.add_argument("--app-alone", action="store_true", help="measure the row's application alone after each round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the goloop servers")
    args = ap.parse_args()
    args.env = dict(e.split("=", 1) for e in args.env)
    # the SQLite file of the flask_db row (made by the app on first use), shared by every server
    tmp = tempfile.mkdtemp(prefix="wsgi-ab-")
    os.environ.setdefault("WSGI_BENCH_DB", os.path.join(tmp, "rows.db"))
    args.lua = os.path.join(tmp, "pct.lua")
    with open(args.lua, "w") as f:
        f.write(LUA)
    configs = []
    for c in args.config:
        label, _, rest = c.partition("=")
        pyshim, _, envs = rest.partition("@")
        configs.append((label, ("goloop", pyshim or os.path.join(REPO, "pyshim"),
                                dict(e.split("=", 1) for e in envs.split(",") if e))))
    if not configs:
        configs = [("goloop", ("goloop", os.path.join(REPO, "pyshim"), {}))]
    if args.granian:
        configs.append(("granian", ("granian", None, {})))
    if args.bjoern:
        configs.append(("bjoern", ("bjoern", None, {})))
    if args.uwsgi:
        configs.append(("uwsgi", ("uwsgi", None, {})))
    if args.gunicorn:
        configs.append(("gunicorn sync", ("gunicorn", None, {})))
    res = {label: [] for label, _ in configs}
    alone = []
    for i in range(args.rounds):
        for label, (kind, pyshim, extra) in configs:
            r = run(kind, pyshim, args, extra)
            res[label].append(r)
            print(f"round {i + 1} {label}: {r['rps']:.0f} req/s, {r['us']:.1f} µs CPU/req, "
                  f"{r['cs']:.2f} ctx switches/req, p50 {r['p50']:.2f} p99 {r['p99']:.2f} p99.9 {r['p999']:.2f} ms, "
                  f"{r['err']} errors", file=sys.stderr,
                  flush=True)
        if args.app_alone:
            env = dict(os.environ, PYTHONPATH=APPS)
            a = measure_app_costs([args.row], env).get(args.row)
            if a is not None:
                alone.append(a)
                print(f"round {i + 1} app alone: {a:.1f} µs", file=sys.stderr, flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    a = statistics.median(alone) if alone else None
    if a is not None:
        print(f"{ROWS[args.row][0]}: the application alone {a:.1f} µs (median; rounds "
              + ", ".join(f"{x:.1f}" for x in alone) + ")")
    own = " | own µs/req" if a is not None else ""
    print(f"| server | req/s | CPU µs/req (median; rounds) | p50 ms | p99 ms | p99.9 ms | ctx switches/req{own} |  "
          f"(load {load})")
    print("| --- | --- | --- | --- | --- | --- | ---" + (" | ---" if a is not None else "") + " |")
    for label, rs in res.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        rounds = ", ".join(f"{r['us']:.1f}" for r in rs)
        tail = f" {med('us') - a:.1f} |" if a is not None else ""
        print(f"| {label} | {med('rps'):.0f} | {med('us'):.1f} ({rounds}) | {med('p50'):.2f} | {med('p99'):.2f} | "
              f"{med('p999'):.2f} | {med('cs'):.2f} |{tail}")
    # the first configuration's CPU per request over each other's, paired by round: the machine's
    # drift between rounds (up to 1.6x here) cancels within a round
    first, *others = res
    for label in others:
        ratios = [x["us"] / y["us"] for x, y in zip(res[first], res[label])]
        print(f"{first} / {label}, paired by round: {statistics.median(ratios):.2f} (median; rounds "
              + " ".join(f"{r:.2f}" for r in ratios) + ")")


if __name__ == "__main__":
    main()
