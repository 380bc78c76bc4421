#!/usr/bin/env python3
"""Per request, natively: the server's user and system CPU time and its system calls by kind
(perf's syscall tracepoints), for the streams echo (1 KiB, 10 connections, bench/echoclient)
and the HTTP keep-alive server (13 B, wrk -t1 -c100), each loop in turn.

    python3 -P bench/analysis/io_native.py [--loops uvloop,goloop] [--rows streams,http,protocol]
                                   [--dur 4] [--conns N]

--conns 1 is the idle-wake case: one connection in ping-pong, so every request wakes a loop
blocked in its poll (what a wake-up costs: system calls, futexes, context switches).

Servers on core 0, load on core 1 (bench/run.py's servers and load generators). Needs perf
with tracepoints (root). callgrind (io_cost.py) sees only user space and runs the server
~50x slower, so more requests are ready per loop iteration than natively: this is the check
on what each request costs the kernel and how many system calls it makes.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import run  # noqa: E402


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]), int(parts[12])  # utime, stime in clock ticks


def measure(loop, row, dur, conns=None):
    port = run.free_port()
    if row in ("streams", "protocol"):
        argv = [os.path.join(run.BENCH, "servers", "echo_server.py"), "--loop", loop, "--mode", row,
                "--addr", f"127.0.0.1:{port}"]
        load = ["taskset", "-c", run.CLIENT_CPU, run.ECHOCLIENT, "-addr", f"127.0.0.1:{port}",
                "-conns", str(conns or 10), "-size", "1024", "-duration", str(dur + 2), "-warmup", "1"]
    else:
        argv = [os.path.join(run.BENCH, "servers", "http_server.py"), "--loop", loop, "--parser",
                "goloop" if loop == "goloop" else "httptools", "--size", "13", "--addr", f"127.0.0.1:{port}"]
        load = ["taskset", "-c", run.CLIENT_CPU, "wrk", "-t1", f"-c{conns or 100}", f"-d{int(dur + 3)}s", f"http://127.0.0.1:{port}/"]
    with run.Server(argv) as srv:
        pid = srv.proc.pid
        p = subprocess.Popen(load, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        # count requests on the server side: connections' bytes are not visible, so use
        # the load generator's rate over its whole run and perf over a window inside it
        t0 = ticks(pid)
        st = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter,syscalls:sys_enter_read,"
                             "syscalls:sys_enter_recvfrom,syscalls:sys_enter_write,syscalls:sys_enter_writev,"
                             "syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,"
                             "syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_futex,syscalls:sys_enter_getpid,"
                             "syscalls:sys_enter_nanosleep,syscalls:sys_enter_sched_yield,context-switches",
                             "-p", str(pid), "--", "sleep", str(dur)], capture_output=True, text=True)
        t1 = ticks(pid)
        out, err = p.communicate(timeout=dur + 60)
    if row == "http":
        m = re.search(r"Requests/sec:\s+([\d.]+)", out)
        rps = float(m.group(1)) if m else 0
    else:
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        import json
        rps = json.loads(lines[-1])["rps"] if lines else 0
    nreq = rps * dur
    hz = os.sysconf("SC_CLK_TCK")
    res = {"rps": rps, "user_us": (t1[0] - t0[0]) / hz * 1e6 / nreq, "sys_us": (t1[1] - t0[1]) / hz * 1e6 / nreq}
    calls = collections.OrderedDict()
    for line in st.stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].strip().isdigit():
            calls[f[2].split(":")[-1].replace("sys_enter_", "")] = int(f[0]) / nreq
    res["calls"] = calls
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="uvloop,goloop")
    ap.add_argument("--rows", default="streams,http")
    ap.add_argument("--dur", type=float, default=4)
    ap.add_argument("--conns", type=int, help="connections (default: echo 10, http 100)")
    args = ap.parse_args()
    run.build_echoclient()
    for row in args.rows.split(","):
        for lp in args.loops.split(","):
            name, _, path = lp.partition("=")
            if path:
                os.environ["PYTHONPATH"] = path
            else:
                os.environ.pop("PYTHONPATH", None)
            r = measure(name, row, args.dur, args.conns)
            c = " ".join(f"{k}={v:.2f}" for k, v in r["calls"].items() if v >= 0.005)
            print(f"{row:8} {lp:10} {r['rps']:9,.0f} req/s  user {r['user_us']:.2f} µs  sys {r['sys_us']:.2f} µs"
                  f"  per request: {c}", flush=True)


if __name__ == "__main__":
    main()
