#!/usr/bin/env python3
"""CPU per request of a raw WSGI hello world (bench/servers/wsgi_apps.py's raw; each server's
command line is bench/wsgi_bench.py's server_argv): goloop serve --interface wsgi builds side by side
(A/B), and Granian --interface wsgi, bjoern and gunicorn sync, taking turns in each round.

    python3 bench/wsgi_ab.py [--config LABEL=PYSHIM_DIR ...] [--granian] [--bjoern] [--gunicorn]
                             [--rounds 3] [--duration 5] [--conns 10] [--threads N]

--config LABEL=DIR[@NAME=VALUE,...]: goloop from DIR (a pyshim folder with its built _goloop module, put first
on PYTHONPATH; empty: this checkout's), with those environment variables (THREADS=N: its --threads); default: this
checkout's. Each server is a fresh process on core 0 (taskset
-c 0); wrk -t1 -cN on core 1 for 1 s of warm-up, then the measured run. Reported per server:
the median over the rounds of requests/s, CPU µs per request of the server's process tree
(utime+stime of every thread, from /proc) and context switches per request (voluntary and
involuntary of every thread, from /proc/PID/task/*/status), with each round's CPU figure.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import free_port, parse_wrk, tree_cpu, tree_pids, wait_port  # noqa: E402
from wsgi_bench import APPS, server_argv  # noqa: E402


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
KINDS = {"goloop": "goloop serve", "granian": "granian", "bjoern": "bjoern", "gunicorn": "gunicorn sync"}


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
    proc = subprocess.Popen(["taskset", "-c", "0", *server_argv(KINDS[kind], "wsgi_apps:raw", port, threads=threads)],
                            env=env, cwd=APPS,
                            stdout=subprocess.DEVNULL, stderr=errf)
    proc.errf = errf
    try:
        wait_port(port, proc)
        wrk = ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.conns}", f"http://127.0.0.1:{port}/"]
        subprocess.run(wrk + ["-d1s"], capture_output=True, check=True)
        c0, s0 = tree_cpu(proc.pid), ctx_switches(proc.pid)
        out = subprocess.run(wrk + [f"-d{args.duration}s"], capture_output=True, text=True, check=True).stdout
        c1, s1 = tree_cpu(proc.pid), ctx_switches(proc.pid)
        r = parse_wrk(out)
        n = r["n"]
        if n == 0:
            raise SystemExit(f"{kind}: {out}")
        # errors (Granian's wrk timeouts on a loaded machine) are counted, not fatal
        return {"rps": r["value"], "us": (c1 - c0) / n * 1e6, "cs": (s1 - s0) / n, "err": r.get("errors") or 0}
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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the goloop servers")
    args = ap.parse_args()
    args.env = dict(e.split("=", 1) for e in args.env)
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
    if args.gunicorn:
        configs.append(("gunicorn sync", ("gunicorn", None, {})))
    res = {label: [] for label, _ in configs}
    for i in range(args.rounds):
        for label, (kind, pyshim, extra) in configs:
            r = run(kind, pyshim, args, extra)
            res[label].append(r)
            print(f"round {i + 1} {label}: {r['rps']:.0f} req/s, {r['us']:.1f} µs CPU/req, "
                  f"{r['cs']:.2f} ctx switches/req, {r['err']} errors", file=sys.stderr, flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"| server | req/s | CPU µs/req (median; rounds) | ctx switches/req |  (load {load})")
    print("| --- | --- | --- | --- |")
    for label, rs in res.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        rounds = ", ".join(f"{r['us']:.1f}" for r in rs)
        print(f"| {label} | {med('rps'):.0f} | {med('us'):.1f} ({rounds}) | {med('cs'):.2f} |")


if __name__ == "__main__":
    main()
