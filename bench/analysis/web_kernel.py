#!/usr/bin/env python3
"""Where a web server's CPU per request goes, for configurations side by side (A/B: a server's
options, its environment or another build of goloop (PYTHONPATH=...) per column), in the
counts the machine's load does not move:
per request, the server tree's system calls by name, context switches and CPU migrations
(`perf stat` software events and system-call tracepoints), its user and system CPU, and
each thread's share (on-CPU time, voluntary and involuntary switches, from /proc's
schedstat and status), for the apps of the web benchmark (bench/web/) under wrk.

    python3 bench/analysis/web_kernel.py --apps wsgi_raw --tests db \\
        --servers "goloop serve,goloop serve:--threads 4,granian,granian:--blocking-threads 4,bjoern"

A server is web_bench.py's name, optionally followed by ':' and extra arguments for its
command line (goloop serve's --threads 4, Granian's --blocking-threads 4) and NAME=value words for its
environment (GOMAXPROCS=4). A private
PostgreSQL (bench/web/pg.py) on core 1 with wrk -t1 -cN; each server's tree on core 0, as
bench/web_bench.py runs them. Per round and server: a 1 s warm-up, then the measured run
with `perf stat -p` on every process of the tree; rounds alternate the servers' order.
Prints per (app, test, server) the median over the rounds of each count per request, and
the threads that ran (by their share of the tree's CPU). CPU times here are those of a
loaded machine (for the idle machine's figures run bench/web_bench.py); the counts are not.

--profile N records the measured run with `perf record` too (cpu-clock samples, no
hardware counters needed) and prints, in µs of CPU per request, each shared object's part
(the kernel, libpython, _goloop, uvloop, asyncpg, ...) and the N symbols with the most,
so two servers' time on the same application can be set side by side (GOLOOP_DEBUG_SYMBOLS=1
builds give goloop's symbols).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "web"))
import web_bench as wb  # noqa: E402
from harness import cgroup_add, cgroup_make, parse_wrk, tree_pids  # noqa: E402

import pg  # noqa: E402

# counted with perf stat: software events and the system calls a web server's request makes
EVENTS = ["context-switches", "cpu-migrations", "sched:sched_waking", "raw_syscalls:sys_enter"] + [
    f"syscalls:sys_enter_{s}" for s in (
        "futex", "epoll_wait", "epoll_pwait", "epoll_ctl", "poll", "ppoll", "select", "pselect6", "read",
        "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg", "nanosleep",
        "clock_nanosleep", "sched_yield", "tgkill", "rt_sigreturn", "getpid", "madvise", "mmap", "munmap",
        "accept4", "close", "getrandom", "clock_gettime", "gettid", "timerfd_settime", "io_uring_enter",
        "eventfd2")]


def tasks(pids):
    """(pid, tid) of every thread of pids that still exist."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            yield pid, tid


def thread_stats(pids):
    """{(pid, tid): (comm, run ns, wait ns, voluntary, involuntary switches)} of every thread."""
    out = {}
    for pid, tid in tasks(pids):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                comm = f.read().strip()
            with open(f"{base}/schedstat") as f:
                run, wait, _ = (int(x) for x in f.read().split())
            vol = invol = 0
            with open(f"{base}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol = int(line.split()[1])
            with open(f"{base}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ut, st = int(fields[11]), int(fields[12])
        except (OSError, ValueError):
            continue
        out[(pid, int(tid))] = (comm, run, wait, vol, invol, ut, st)
    return out


def sample_wchan(pids, samples, every=0.05):
    """Samples, every `every` s in a thread of this process, where each thread of pids sleeps
    (/proc's wchan; "0": running): samples[tid][wchan] counts. Returns the function that stops it."""
    import threading

    done = threading.Event()

    def run():
        while not done.wait(every):
            for pid, tid in tasks(pids):
                try:
                    with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                        w = f.read().strip() or "0"
                except OSError:
                    continue
                d = samples.setdefault(int(tid), {})
                d[w] = d.get(w, 0) + 1

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def stop_it():
        done.set()
        t.join()

    return stop_it


def perf_start(pids, path):
    return subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(EVENTS), "-o", path,
                             "-p", ",".join(str(p) for p in pids)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_stop(proc, path):
    proc.send_signal(signal.SIGINT)
    proc.wait(20)
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                name = parts[2].replace("syscalls:sys_enter_", "").replace("raw_syscalls:sys_enter", "syscalls")
                counts[name] = counts.get(name, 0) + int(parts[0])
    return counts


def record_start(pids, path):
    return subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-e", "cpu-clock", "-o", path,
                             "-p", ",".join(str(p) for p in pids)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def record_shares(path, sort):
    """[(share %, key)] of a perf.data by `sort` (dso, or dso,sym)."""
    out = subprocess.run(["perf", "report", "-i", path, "--stdio", "-q", "--sort", sort,
                          "--percent-limit", "0.2" if sort == "dso" else "0.02"], capture_output=True, text=True, timeout=300).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), " ".join(m.group(2).split())))
    return rows


def server_env(cluster):
    """The servers' environment: the private cluster's, the apps' pool size, bench/web and this
    checkout's goloop first on PYTHONPATH."""
    return dict(os.environ, **cluster.env(), WEB_WSGI_POOL=str(wb.WSGI_THREADS),
                PYTHONPATH=os.pathsep.join([wb.WEB, os.path.join(wb.REPO, "pyshim"),
                                            os.environ.get("PYTHONPATH", "")]))


def wrk(port, path, seconds, conns):
    out = subprocess.run(["taskset", "-c", wb.CLIENT_CPU, "wrk", "-t1", "-c", str(conns), "--latency",
                          f"-d{seconds}s", f"http://127.0.0.1:{port}{path}"],
                         capture_output=True, text=True, timeout=seconds + 60).stdout
    res = parse_wrk(out)
    if res is None or not res.get("n"):
        raise RuntimeError("wrk output: " + out[-400:])
    return res


@contextlib.contextmanager
def sharing(pid, share):
    """With share N > 1: the server's tree in a CPU cgroup of its own on its core and N - 1
    CPU burners there, each in one of equal weight, so the server gets 1/N of the core, as
    web_bench.py --together gives each of N servers, but beside busy loops that touch almost
    no memory instead of other servers."""
    if share <= 1:
        yield
        return
    cgroup_add(cgroup_make("goloop-kernel-server"), pid)
    burners = [subprocess.Popen(["taskset", "-c", wb.SERVER_CPU, sys.executable, "-c", "while True: pass"])
               for _ in range(share - 1)]
    try:
        for i, b in enumerate(burners):
            cgroup_add(cgroup_make(f"goloop-kernel-burn-{i}"), b.pid)
        yield
    finally:
        for b in burners:
            b.kill()
            b.wait()


def measure(app, spec, path, args, env):
    with wb.served(app, spec, env) as running, contextlib.ExitStack() as stack:
        if running is None:
            return None
        proc, port = running
        stack.enter_context(sharing(proc.pid, args.share))
        wrk(port, path, 1, args.connections)  # warm-up: the pool's connections, threads, caches
        pids = tree_pids(proc.pid)
        fd, out = tempfile.mkstemp(prefix="web-kernel-ab-", suffix=".txt")
        os.close(fd)
        rec = out + ".data"
        try:
            t0 = thread_stats(pids)
            perf = perf_start(pids, out)
            recorder = record_start(pids, rec) if args.profile else None
            time.sleep(0.3)  # perf attached
            samples: dict = {}
            stop_sampling = sample_wchan(pids, samples)
            try:
                res = wrk(port, path, args.duration, args.connections)
            finally:
                stop_sampling()
            counts = perf_stop(perf, out)
            t1 = thread_stats(tree_pids(proc.pid))
            profile = None
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait(60)
                profile = {"dso": record_shares(rec, "dso"), "sym": record_shares(rec, "dso,sym")}
        finally:
            os.unlink(out)
            if os.path.exists(rec):
                os.unlink(rec)
    n = res["n"]
    tck = os.sysconf("SC_CLK_TCK")
    per = {k: v / n for k, v in counts.items()}
    threads = []
    ut = st = run = 0
    for key, b in t1.items():
        a = t0.get(key, (b[0], 0, 0, 0, 0, 0, 0))
        d = [b[i] - a[i] for i in range(1, 7)]
        run += d[0]
        ut += d[4]
        st += d[5]
        if d[0] > 0 or d[2] or d[3]:
            ws = samples.get(key[1], {})
            threads.append({"tid": key[1], "comm": b[0], "cpu_us": d[0] / 1e3 / n, "wait_us": d[1] / 1e3 / n,
                            "vol": d[2] / n, "invol": d[3] / n,
                            "wchan": ",".join(f"{w}:{c}" for w, c in sorted(ws.items(), key=lambda x: -x[1])[:3])})
    threads.sort(key=lambda t: -t["cpu_us"])
    per["cpu_us"] = run / 1e3 / n  # schedstat: ns on CPU (the perf stat window is a bit longer)
    per["user_share"] = ut / (ut + st) if ut + st else None
    per["user_us"] = per["cpu_us"] * per["user_share"] if per["user_share"] is not None else None
    per["sys_us"] = per["cpu_us"] - per["user_us"] if per["user_us"] is not None else None
    per["threads_ran"] = len(threads)
    return {"rps": res["value"], "p99_us": res.get("p99_us"), "errors": res["errors"], "per": per,
            "threads": threads, "clock_ticks": tck, "profile": profile}


def print_profile(rs, top):
    """The rounds' profiles in µs per request (each share of that round's CPU per request), the
    median over the rounds: by shared object, then the top symbols."""
    for kind, limit in (("dso", 12), ("sym", top)):
        per: dict = {}
        for r in rs:
            if r.get("profile"):
                for share, key in r["profile"][kind]:
                    per.setdefault(key, []).append(share / 100 * r["per"]["cpu_us"])
        rows = sorted(((statistics.median(v + [0] * (len(rs) - len(v))), k) for k, v in per.items()),
                      reverse=True)[:limit]
        print(f"  {'by shared object' if kind == 'dso' else 'top symbols'} (µs per request):")
        for us, key in rows:
            print(f"    {us:8.1f}  {key[:110]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default="wsgi_raw")
    ap.add_argument("--tests", default="db")
    ap.add_argument("--servers", default="goloop serve,granian,bjoern")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=6, help="threads listed per server")
    ap.add_argument("--json", help="write every round's figures here")
    ap.add_argument("--share", type=int, default=1, metavar="N",
                    help="the server gets 1/N of its core: N - 1 CPU burners beside it, each process in a CPU "
                         "cgroup of equal weight (needs root)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="perf record the measured run: µs per request by shared object and the N top symbols")
    args = ap.parse_args()
    specs = args.servers.split(",")
    runs: dict = {}
    with pg.Cluster(cpu=wb.CLIENT_CPU) as cluster:
        env = server_env(cluster)
        for rnd in range(args.rounds):
            for app in args.apps.split(","):
                for test in args.tests.split(","):
                    path = wb.TESTS[test][1]
                    for spec in (specs if rnd % 2 == 0 else specs[::-1]):
                        try:
                            r = measure(app, spec, path, args, env)
                        except Exception as exc:  # noqa: BLE001
                            print(f"# {app} {test} {spec}: failed: {exc}", flush=True)
                            continue
                        if r is None:
                            print(f"# {app} {test} {spec}: not installed", flush=True)
                            continue
                        runs.setdefault((app, test, spec), []).append(r)
                        p = r["per"]
                        print(f"# round {rnd + 1} {app} {test} {spec}: {r['rps']:,.0f} req/s, "
                              f"{p['cpu_us']:.1f} µs CPU/req (user {p['user_us'] or 0:.1f}), "
                              f"cs {p.get('context-switches', 0):.2f}, syscalls {p.get('syscalls', 0):.1f}, "
                              f"futex {p.get('futex', 0):.2f}, errors {r['errors']}", flush=True)
    show = ["cpu_us", "user_us", "sys_us", "context-switches", "sched:sched_waking", "cpu-migrations", "syscalls", "futex",
            "epoll_wait", "epoll_pwait", "epoll_ctl", "poll", "ppoll", "select", "read", "write", "writev",
            "recvfrom", "sendto", "nanosleep", "sched_yield", "tgkill", "madvise", "getrandom", "threads_ran"]
    for (app, test, spec), rs in runs.items():
        med = {k: statistics.median([r["per"].get(k) or 0 for r in rs]) for k in show}
        print(f"\n## {app} / {test} / {spec}: {statistics.median(r['rps'] for r in rs):,.0f} req/s, "
              f"p99 {statistics.median(r['p99_us'] or 0 for r in rs) / 1e3:.2f} ms "
              f"(median of {len(rs)} rounds, per request)")
        print("  " + ", ".join(f"{k} {v:.3g}" for k, v in med.items() if v))
        extra = {k: v for k, v in rs[-1]["per"].items() if k not in show and v >= 0.01}
        if extra:
            print("  other (last round): " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(extra.items())))
        print("  threads (last round): cpu µs, runnable-wait µs, voluntary, involuntary switches per request")
        for t in rs[-1]["threads"][:args.threads]:
            print(f"    {t['tid']:>8} {t['comm'][:16]:16} {t['cpu_us']:8.1f} {t['wait_us']:8.1f} "
                  f"{t['vol']:6.3f} {t['invol']:6.3f}  {t['wchan']}")
        if args.profile:
            print_profile(rs, args.profile)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"app": a, "test": t, "server": s, "rounds": rs} for (a, t, s), rs in runs.items()], f,
                      indent=1)


if __name__ == "__main__":
    main()
