#!/usr/bin/env python3
"""Where a web row's server CPU goes: user and system time, each thread's share, and the
system calls and context switches per request (perf stat's software events and system-call
tracepoints, which a virtual machine without hardware counters still has) for TechEmpower's
test types on bench/web_bench.py's apps and servers, same setup (a private PostgreSQL on
core 1 with wrk, each server one worker on core 0).

    python3 bench/analysis/web_kernel.py [--apps starlette] [--servers 'goloop serve,granian,uvicorn']
                                         [--tests queries,updates] [--duration 5] [--rounds 2]
                                         [--results]

Per cell, medians of the rounds: CPU µs per request split into user and system, the share of
the busiest thread (a loop's or an event thread's) and of all the others (Go's runtime
threads, Granian's Rust threads, WSGI pool threads), and per request: system calls, context
switches, epoll waits, reads/writes (read, recvfrom, write, sendto, writev) and futex calls.
Counts barely move with the machine's load; CPU times do.
--results writes bench/results/web-kernel.json.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, BENCH)
import web_bench as wb  # noqa: E402
from harness import parse_wrk, tree_pids  # noqa: E402

sys.path.insert(0, wb.WEB)
import pg  # noqa: E402

EVENTS = {
    "syscalls": "raw_syscalls:sys_enter",
    "context_switches": "context-switches",
    "epoll_wait": "syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait",
    "recv": "syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg",
    "send": "syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_writev,"
            "syscalls:sys_enter_sendmsg",
    "futex": "syscalls:sys_enter_futex",
}
COLS = ("cpu_us", "user_us", "sys_us", "main_thread_pct", "other_threads_us", "threads", *EVENTS)


def thread_times(pids):
    """{(pid, tid): (utime, stime)} in seconds of every thread of pids."""
    tck = os.sysconf("SC_CLK_TCK")
    out = {}
    for p in pids:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[(p, t)] = (int(fields[11]) / tck, int(fields[12]) / tck)
            except (OSError, IndexError, ValueError):
                pass
    return out


def perf_start(pids):
    import tempfile
    fd, path = tempfile.mkstemp(prefix="web-kernel-", suffix=".txt")
    os.close(fd)
    events = ",".join(EVENTS.values())
    proc = subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-o", path, "-p", ",".join(map(str, pids))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, path


def perf_stop(proc, path):
    import signal
    proc.send_signal(signal.SIGINT)
    proc.wait(10)
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    counts = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit():
            counts[parts[2]] = int(parts[0])
    return {name: sum(counts.get(e, 0) for e in evs.split(",")) for name, evs in EVENTS.items()}


def measure(port, path, depth, duration, conns, pid):
    url = f"http://127.0.0.1:{port}{path}"
    wrk = ["taskset", "-c", wb.CLIENT_CPU, "wrk", "-t1", "-c", str(conns), "--latency"]
    if depth > 1:
        wrk += ["-s", os.path.join(BENCH, "pipeline.lua")]
    tail = ["--", str(depth)] if depth > 1 else []
    subprocess.run(wrk + ["-d1s", url] + tail, capture_output=True, timeout=60)  # warm-up
    pids = tree_pids(pid)
    t0 = thread_times(pids)
    perf = perf_start(pids)
    out = subprocess.run(wrk + [f"-d{duration}s", url] + tail, capture_output=True, text=True,
                         timeout=duration + 60).stdout
    counts = perf_stop(*perf)
    t1 = thread_times(pids)
    res = parse_wrk(out)
    n = res["n"]
    per = {k: (t1[k][0] - t0.get(k, (0, 0))[0], t1[k][1] - t0.get(k, (0, 0))[1]) for k in t1}
    user = sum(u for u, _ in per.values())
    sys_ = sum(s for _, s in per.values())
    busiest = max((u + s for u, s in per.values()), default=0)
    total = user + sys_
    row = {"value": res["value"], "cpu_us": total * 1e6 / n, "user_us": user * 1e6 / n, "sys_us": sys_ * 1e6 / n,
           "main_thread_pct": 100 * busiest / total if total else None,
           "other_threads_us": (total - busiest) * 1e6 / n,
           "threads": sum(1 for u, s in per.values() if u + s > 0)}
    row.update({k: v / n for k, v in counts.items()})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default="starlette")
    ap.add_argument("--servers", default="goloop serve,granian,uvicorn")
    ap.add_argument("--tests", default="queries,updates")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--results", action="store_true")
    args = ap.parse_args()
    apps, servers, tests = args.apps.split(","), args.servers.split(","), args.tests.split(",")
    cells: dict = {}
    with pg.Cluster(cpu=wb.CLIENT_CPU) as cluster:
        env = dict(os.environ, **cluster.env(), WEB_WSGI_POOL=str(wb.WSGI_THREADS),
                   PYTHONPATH=os.pathsep.join([wb.WEB, os.path.join(wb.REPO, "pyshim"),
                                               os.environ.get("PYTHONPATH", "")]))
        for rnd in range(args.rounds):
            for app in apps:
                for server in servers:
                    with wb.served(app, server, env) as running:
                        if running is None:
                            continue
                        proc, port = running
                        for t in tests:
                            _, path, depth = wb.TESTS[t]
                            r = measure(port, path, depth, args.duration, args.connections, proc.pid)
                            cells.setdefault((app, server, t), []).append(r)
                            print(f"# {rnd + 1} {app:9} {server:14} {t:9} " + " ".join(
                                f"{k} {r[k]:.3g}" for k in COLS if r.get(k) is not None), flush=True)
    rows = []
    for (app, server, t), rs in cells.items():
        row = {"row": f"{wb.APPS[app][2]}: {wb.TESTS[t][0]}, {server}"}
        for k in COLS:
            vals = [r[k] for r in rs if r.get(k) is not None]
            row[k] = round(statistics.median(vals), 3) if vals else None
        rows.append(row)
    print()
    for row in rows:
        print(row)
    if args.results:
        sys.path.insert(0, BENCH)
        import render
        from results import write_result
        write_result(
            "web-kernel", group="Real applications (TechEmpower's test types)",
            title="The web rows' CPU split, threads and system calls per request (perf stat)",
            command="python3 bench/analysis/web_kernel.py --results " + " ".join(
                f"--{k} '{v}'" for k, v in (("apps", args.apps), ("servers", args.servers), ("tests", args.tests))),
            method=("bench/web_bench.py's setup (a private PostgreSQL and wrk -t1 -c64 on core 1, each server one "
                    "worker with its whole tree on core 0, 1 s warm-up) with the measured window's CPU split by "
                    "/proc per thread and `perf stat -p` on every process of the server's tree (software events, "
                    "system-call tracepoints), each divided by the requests wrk counted; median of "
                    f"{args.rounds} rounds of {args.duration} s. cpu_us = user_us + sys_us; main_thread_pct: the "
                    "busiest thread's share of it; other_threads_us: every other thread's CPU per request; "
                    "recv: read+recvfrom+recvmsg; send: write+sendto+writev+sendmsg."),
            columns=["row", *COLS], units={"cpu_us": "µs", "user_us": "µs", "sys_us": "µs",
                                           "other_threads_us": "µs", "main_thread_pct": "%"},
            rows=rows, row_label="app: test type, server",
            modules=("granian", "uvicorn", "uvloop", "starlette", "fastapi", "asyncpg", "psycopg"))
        render.main([])


if __name__ == "__main__":
    main()
