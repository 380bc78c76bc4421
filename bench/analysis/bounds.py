#!/usr/bin/env python3
"""How fast could any event loop be, on the machine it runs on, in the benchmark's workloads?

    python3 -P bench/analysis/bounds.py [--loop uvloop] [--seconds 3] [--only NAME ...]

For each workload this runs the benchmark's server on a loop (uvloop by default) under the
benchmark's load, samples the server with `perf record` and splits its CPU time by the
object it runs in. The kernel (system calls: TCP, epoll), libcrypto/libssl (TLS) and
libpython (the application's Python: the benchmark's protocol, asyncio's streams) do the
same work whichever loop serves the requests, as long as the loop makes the same system
calls, which goloop does (one read and one write per message, see BENCHMARKS.md). What a
loop can save is at most its own share: its module, the HTTP parser's, and (generously)
all of libc. A loop that cost nothing at all would therefore serve at most

    bound = 1 / (1 - loop share)

times the requests per CPU second of the measured loop. A target above that bound cannot
be met by any loop making the same system calls, on that machine. A second bound also
takes away what entering and leaving the kernel costs (the system calls counted with perf
stat, times one getppid() from `perf bench syscall basic`): what a loop batching all its
system calls into io_uring could hope for at the very best.

Prints one JSON line per workload and a markdown table at the end. Needs perf (Debian's
linux-perf), wrk and the benchmark's echo client (bench/run.py builds it).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
import harness  # noqa: E402
import run  # noqa: E402  (the benchmark's own server and load helpers)

# (name, kind, mode or parser, size, target from the issues)
WORKLOADS = [
    ("echo protocol 1 KiB", "echo", "protocol", 1024, 1.15),
    ("echo protocol 10 KiB", "echo", "protocol", 10240, 1.15),
    ("echo protocol 100 KiB", "echo", "protocol", 102400, 1.15),
    ("echo streams 1 KiB", "echo", "streams", 1024, 1.3),
    ("echo streams 10 KiB", "echo", "streams", 10240, 1.3),
    ("echo streams 100 KiB", "echo", "streams", 102400, 1.3),
    ("http 13 B", "http", "httptools", 13, 1.25),
    ("http 1 KiB", "http", "httptools", 1024, 1.25),
    ("http 100 KiB", "http", "httptools", 102400, 1.25),
    ("https 13 B", "https", "httptools", 13, 1.2),
    ("https 1 KiB", "https", "httptools", 1024, 1.2),
    ("https 100 KiB", "https", "httptools", 102400, 1.2),
]

SAME_WORK = ("[kernel", "libcrypto", "libssl", "_ssl.", "_asyncio.", "[vdso]")
LOOP_WORK = ("loop.cpython", "_goloop.cpython", "parser.cpython")  # uvloop, goloop, httptools


def owner(frames):
    """Who a sample's time counts for: its leaf frame's object, except that time in libc
    or libpython (memcpy, malloc, bytes, calls) counts for whoever asked for it: the loop
    or parser module when one of its frames comes first on the way up the stack, the
    application when the interpreter running Python code (_PyEval_EvalFrameDefault) does."""
    sym, dso = frames[0]
    if dso.startswith(SAME_WORK) or dso.startswith(LOOP_WORK):
        return dso
    for sym, dso in frames:
        if dso.startswith(LOOP_WORK):
            return dso
        if dso.startswith(SAME_WORK):
            return dso
        if sym.startswith("_PyEval_EvalFrameDefault"):
            return "application (Python)"
    return "application (Python)"


def dso_shares(data):
    """Samples per owner (see owner()), in %, from perf's DWARF call graphs."""
    p = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"],
                       capture_output=True, text=True, timeout=600)
    counts, total, frames = {}, 0, []

    def flush():
        nonlocal total
        if frames:
            o = owner(frames)
            counts[o] = counts.get(o, 0) + 1
            total += 1
            frames.clear()

    for line in p.stdout.splitlines():
        line = line.strip()
        if not line:
            flush()
        elif line.endswith(")") and "(" in line and not line.endswith("(inlined)"):
            head, _, dso = line[:-1].rpartition("(")
            parts = head.split(None, 1)
            frames.append((parts[1].strip() if len(parts) > 1 else "", os.path.basename(dso)))
    flush()
    return {k: round(100.0 * v / total, 2) for k, v in counts.items()} if total else {}


def classify(name):
    """'loop' for what a loop (and its HTTP parser) could save, 'same' for the rest."""
    return "loop" if name.startswith(LOOP_WORK) else "same"


def load_argv(kind, size, port):
    if kind == "echo":
        return ["taskset", "-c", run.CLIENT_CPU, run.ECHOCLIENT, "-addr", f"127.0.0.1:{port}",
                "-conns", "10", "-size", str(size), "-duration", "30", "-warmup", "0"]
    scheme = "https" if kind == "https" else "http"
    return ["taskset", "-c", run.CLIENT_CPU, "wrk", "-t1", "-c100", "-d30s",
            f"{scheme}://127.0.0.1:{port}/"]


def server_argv(loop, kind, arg, size, port, certs):
    if kind == "echo":
        return [os.path.join(run.BENCH, "servers", "echo_server.py"), "--loop", loop, "--mode", arg,
                "--addr", f"127.0.0.1:{port}"]
    argv = [os.path.join(run.BENCH, "servers", "http_server.py"), "--loop", loop, "--parser",
            "goloop" if loop == "goloop" else arg, "--size", str(size),
            "--addr", f"127.0.0.1:{port}"]
    if kind == "https":
        argv += ["--cert", certs[0], "--key", certs[1]]
    return argv


def measure(loop, kind, arg, size, seconds, certs, tmp):
    port = harness.free_port()
    with run.Server(server_argv(loop, kind, arg, size, port, certs)) as srv:
        load = subprocess.Popen(load_argv(kind, size, port), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)  # warm-up
            data = os.path.join(tmp, "perf.data")
            p = subprocess.run(["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384",
                                "-p", str(srv.proc.pid), "-o", data, "--", "sleep", str(seconds)],
                               capture_output=True, text=True, timeout=seconds + 60)
            if p.returncode != 0:
                raise run.Failure(f"perf record failed: {p.stderr.strip()[-300:]}")
            # system calls per CPU second of the server, over one more second of load
            c0 = run.proc_cpu_seconds(srv.proc.pid)
            p = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p",
                                str(srv.proc.pid), "--", "sleep", "1"],
                               capture_output=True, text=True, timeout=60)
            c1 = run.proc_cpu_seconds(srv.proc.pid)
            calls = next((int(ln.split(",")[0]) for ln in p.stderr.splitlines()
                          if "raw_syscalls:sys_enter" in ln and ln.split(",")[0].isdigit()), None)
        finally:
            load.kill()
            load.wait()
        srv.check_alive()
        per_cpu_s = calls / (c1 - c0) if calls and c1 and c0 is not None and c1 > c0 else None
        return dso_shares(data), per_cpu_s


def null_syscall_seconds():
    """What one system call costs on its own here (perf bench syscall basic: getppid)."""
    p = subprocess.run(["taskset", "-c", run.SERVER_CPU, "perf", "bench", "syscall", "basic",
                        "--loop", "3000000"], capture_output=True, text=True, timeout=120)
    for ln in p.stdout.splitlines():
        if "usecs/op" in ln:
            return float(ln.split()[0]) * 1e-6
    return None


def bound_row(name, target, loop, null_s, shares, calls_per_cpu_s):
    """One workload's shares and bounds."""
    total = sum(shares.values()) or 100.0
    loop_share = sum(v for k, v in shares.items() if classify(k) == "loop") / total
    kernel = sum(v for k, v in shares.items() if k.startswith("[kernel")) / total
    shares = dict(sorted(shares.items(), key=lambda kv: -kv[1]))
    bound = 1 / (1 - loop_share) if loop_share < 1 else float("inf")
    # if, besides, every system call's entry and exit were free (io_uring at best)
    sys_share = min(calls_per_cpu_s * null_s, 0.99) if calls_per_cpu_s and null_s else 0.0
    free = loop_share + sys_share
    bound_free = 1 / (1 - free) if free < 1 else float("inf")
    row = {"workload": name, "loop": loop, "kernel": round(kernel, 3),
           "loop_share": round(loop_share, 3), "bound": round(bound, 3),
           "syscall_share": round(sys_share, 3), "bound_free_syscalls": round(bound_free, 3),
           "target": target, "shares": shares}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", default="uvloop", help="the loop to measure (default uvloop)")
    ap.add_argument("--seconds", type=float, default=3.0, help="perf record time per workload")
    ap.add_argument("--only", action="append", help="workloads whose name contains this")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure each workload this many times and keep the highest bound")
    args = ap.parse_args()
    for tool in ("perf", "wrk", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed")
    if not os.path.exists(run.ECHOCLIENT) and (err := run.build_echoclient()):
        sys.exit(f"cannot build the echo client: {err}")
    rows = []
    null_s = null_syscall_seconds()
    print(json.dumps({"null_syscall_us": round(null_s * 1e6, 3) if null_s else None}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        certs = harness.make_certs(tmp)[1:]
        for name, kind, arg, size, target in WORKLOADS:
            if args.only and not any(o in name for o in args.only):
                continue
            best = None
            for _ in range(args.repeat):
                row = bound_row(name, target, args.loop, null_s,
                                *measure(args.loop, kind, arg, size, args.seconds, certs, tmp))
                print(json.dumps(row), flush=True)
                if best is None or row["bound_free_syscalls"] > best["bound_free_syscalls"]:
                    best = row
            rows.append(best)
    print(f"\n| workload | kernel | {args.loop}'s module + parser (with the calls they make) | "
          "bound for any loop | system call entry/exit | bound if those were free too | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['workload']} | {r['kernel']:.0%} | {r['loop_share']:.1%} | "
              f"{r['bound']:.2f}x | {r['syscall_share']:.1%} | {r['bound_free_syscalls']:.2f}x | "
              f"{r['target']:.2f}x |")


if __name__ == "__main__":
    if os.path.isdir(os.path.join(os.getcwd(), "goloop", "binding")) and sys.flags.safe_path == 0:
        sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.getcwd()]
    main()
