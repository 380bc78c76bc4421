#!/usr/bin/env python3
"""How often Go's scheduler does what, per request of a web benchmark's app on goloop serve:
uprobes (`perf probe`) on the Go runtime's functions inside goloop's extension, counted per
request and by their callers (the monitor's retake and handoffp: a P taken back from a thread
in a system call or in Python; preemptone: a P whose schedtick stood still 10 ms; wakep,
startlockedm, stoplockedm: a thread woken or handed a P; newproc1: a goroutine made).

    GOLOOP_DEBUG_SYMBOLS=1 make build    # the runtime's symbols (they are stripped otherwise)
    python3 bench/analysis/go_sched_probes.py --apps wsgi_raw --tests db \\
        --servers "goloop serve:--threads 4"

A server is web_kernel.py's spec (web_bench.py's name, then ':' and extra arguments and
NAME=value words for its environment, PYTHONPATH=... for another build). The probes go on the
extension that `python -c 'import goloop._goloop'` finds with the server's PYTHONPATH (or
--so). Per server: a private PostgreSQL on core 1 (bench/web/pg.py), a 1 s warm-up, then
`perf record -g` of the probes on every process of the server's tree over a wrk run. Prints
each function's calls per request and its callers' chains (the most frequent first). Needs
root (uprobes); the probes are removed at the end.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import web_kernel as wk  # noqa: E402
from web_kernel import pg, tree_pids, wb  # noqa: E402

FUNCS = "retake,handoffp,preemptone,wakep,startlockedm,stoplockedm,newproc1"
GROUP = "goloop_sched"


def extension(env):
    """The path of the goloop._goloop the server's Python imports with env."""
    out = subprocess.run([sys.executable, "-c", "import goloop._goloop as m; print(m.__file__)"], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def add_probes(so, funcs):
    syms = subprocess.run(["nm", so], capture_output=True, text=True).stdout
    if " runtime.retake\n" not in syms:
        sys.exit(f"{so} has no symbols of Go's runtime: build with GOLOOP_DEBUG_SYMBOLS=1")
    for f in funcs:
        r = subprocess.run(["perf", "probe", "-q", "-x", so, "-a", f"{GROUP}:{f}=runtime.{f}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"perf probe runtime.{f}: {r.stderr.strip()[-300:]}")


def remove_probes():
    subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True)


def parse(script_out):
    """perf script's lines -> Counter of (event, caller chain)."""
    counts = collections.Counter()
    ev, stack = None, []

    def flush():
        if ev:
            counts[(ev, " < ".join(stack[1:6]))] += 1

    for line in script_out.splitlines():
        if not line.strip():
            continue
        if line.startswith("\t"):
            parts = line.split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else parts[0])
        else:
            flush()
            ev, stack = line.split()[0].rstrip(":").split(":")[-1], []
    flush()
    return counts


def measure(app, spec, path, args, env, funcs):
    with wb.served(app, spec, env) as running, contextlib.ExitStack() as stack:
        if running is None:
            return None
        proc, port = running
        stack.enter_context(wk.sharing(proc.pid, args.share))
        wk.wrk(port, path, 1, args.connections)  # warm-up
        pids = tree_pids(proc.pid)
        fd, data = tempfile.mkstemp(prefix="go-sched-", suffix=".data")
        os.close(fd)
        try:
            events = [a for f in funcs for a in ("-e", f"{GROUP}:{f}")]
            rec = subprocess.Popen(["perf", "record", "-q", "-g", "-o", data, *events, "-p",
                                    ",".join(str(p) for p in pids)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # perf attached
            res = wk.wrk(port, path, args.duration, args.connections)
            rec.send_signal(2)
            rec.wait(60)
            out = subprocess.run(["perf", "script", "-i", data, "-F", "event,ip,sym"], capture_output=True,
                                 text=True).stdout
        finally:
            os.unlink(data)
    return res, parse(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default="wsgi_raw")
    ap.add_argument("--tests", default="db")
    ap.add_argument("--servers", default="goloop serve:--threads 4")
    ap.add_argument("--funcs", default=FUNCS, help="the runtime's functions to count")
    ap.add_argument("--duration", type=int, default=4)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--share", type=int, default=1, metavar="N",
                    help="the server gets 1/N of its core beside N - 1 CPU burners (web_kernel.py's --share)")
    ap.add_argument("--callers", type=int, default=12, help="caller chains listed per server")
    ap.add_argument("--so", help="goloop's extension to probe (default: the one the server imports)")
    args = ap.parse_args()
    funcs = args.funcs.split(",")
    with pg.Cluster(cpu=wb.CLIENT_CPU) as cluster:
        base = wk.server_env(cluster)
        for spec in args.servers.split(","):
            _name, _args, extra = wb.split_spec(spec)
            so = args.so or extension(dict(base, **extra))
            remove_probes()
            add_probes(so, funcs)
            try:
                for app in args.apps.split(","):
                    for test in args.tests.split(","):
                        r = measure(app, spec, wb.TESTS[test][1], args, base, funcs)
                        if r is None:
                            print(f"# {app} {test} {spec}: not installed")
                            continue
                        res, counts = r
                        n = res["n"]
                        per = collections.Counter()
                        for (ev, _), c in counts.items():
                            per[ev] += c
                        print(f"\n## {app} / {test} / {spec}: {res['value']:,.0f} req/s, {n:,} requests; "
                              f"calls per request: " + ", ".join(f"{f} {per[f] / n:.3g}" for f in funcs))
                        for (ev, chain), c in counts.most_common(args.callers):
                            print(f"  {c / n:8.3f}  {ev:13} {chain[:200]}")
            finally:
                remove_probes()


if __name__ == "__main__":
    main()
