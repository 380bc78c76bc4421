#!/usr/bin/env python3
"""Two builds of the engine side by side (e.g. gcc's and zig's), in user-space instructions per
operation, which other load on a shared machine does not change (time does).

    python3 bench/analysis/compilers.py --config gcc=/path/to/checkout --config zig=/path/to/other [--rounds 3]

Each config is a checkout whose pyshim/goloop holds the engine to measure (its own build); the
same interpreter runs both. Rounds alternate the configs; each figure is the least of the rounds.
Counted by valgrind's callgrind (Ir, the whole process: Python, the engine, Go's threads; this
machine's VM has no hardware counters for perf), with Go's async preemption off
(GODEBUG=asyncpreemptoff=1: callgrind asserts on its SIGURG):
- micro: bench/micro.py's loop benchmarks (goloop), per operation: the count of a run of n
  operations less that of n/5, over 4n/5 (start-up cancels out);
- echo 1 KiB / HTTP 13 B: bench/servers/echo_server.py (Protocol) and bench/servers/http_server.py (goloop's
  parser) under perf, driven by one client connection doing round trips (1 KiB echoed; a GET
  answered with 13 bytes), per request: the count of N round trips after a warm-up, over N
  (callgrind_control zeroes and dumps the counters).
`goloop serve` hello: bench/analysis/serve_instr.py (callgrind) per checkout, run separately.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

MICRO = {"call_soon": 25_000, "call_later": 5_000, "task": 5_000, "sleep0": 10_000, "sock_pingpong": 5_000}
VALGRIND = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]


def env_for(repo):
    return dict(os.environ, GODEBUG="asyncpreemptoff=1",
                PYTHONPATH=os.pathsep.join([os.path.join(repo, "pyshim"), os.path.join(repo, "bench")]))


def perf_count(path):
    m = re.search(r"Collected : (\d+)", open(path).read())
    if not m:
        raise RuntimeError(open(path).read())
    return int(m.group(1))


def micro(repo, bench, n):
    with tempfile.NamedTemporaryFile(suffix=".perf") as out:
        subprocess.run([*VALGRIND, f"--log-file={out.name}", sys.executable,
                        os.path.join(repo, "bench", "micro.py"), "--loop", "goloop", "--bench", bench, "--n", str(n)],
                       env=env_for(repo), check=True, stdout=subprocess.DEVNULL)
        return perf_count(out.name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served(repo, argv, exchange, n):
    """Instructions of a server process per round trip: after a warm-up the counters are zeroed
    (callgrind_control -z), n round trips are made on one connection, and they are dumped."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                              os.path.join(repo, "bench", argv[0]), *argv[1:], "--loop", "goloop",
                              "--addr", f"127.0.0.1:{port}"],
                             env=env_for(repo), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for _ in range(200):
                    exchange(s)
                subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
                for _ in range(n):
                    exchange(s)
                subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        finally:
            p.kill()  # (a signal while Go waits in epoll_wait trips an assertion in callgrind)
            p.wait()
        dump = sorted(f for f in os.listdir(d) if f.startswith("cg.out."))[-1]
        m = re.search(r"^(?:summary|totals): (\d+)", open(os.path.join(d, dump)).read(), re.M)
        return int(m.group(1)) / n


def echo_1k(s):
    msg = b"x" * 1024
    s.sendall(msg)
    got = 0
    while got < len(msg):
        b = s.recv(65536)
        assert b
        got += len(b)


def http_13(s, _req=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
    s.sendall(_req)
    buf = b""
    while True:
        buf += s.recv(65536)
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep:
            n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            if len(body) >= n:
                return


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", required=True, metavar="LABEL=REPO")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--skip-micro", action="store_true")
    args = ap.parse_args()
    configs = [(c.partition("=")[0], os.path.abspath(c.partition("=")[2])) for c in args.config]
    best = {}

    def keep(row, label, v):
        best.setdefault(row, {})
        best[row][label] = min(v, best[row].get(label, v))

    n = args.requests
    for rnd in range(args.rounds):
        for label, repo in configs:
            for bench, ops in ([] if args.skip_micro else MICRO.items()):
                v = (micro(repo, bench, ops) - micro(repo, bench, ops // 5)) / (ops - ops // 5)
                keep(f"micro {bench}", label, v)
                print(f"# round {rnd + 1} {label} micro {bench}: {v:.0f} instructions/op", flush=True)
            for row, argv, ex in (("echo 1 KiB (Protocol)", ["servers/echo_server.py", "--mode", "protocol"], echo_1k),
                                  ("HTTP 13 B (goloop parser)", ["servers/http_server.py", "--parser", "goloop"], http_13)):
                v = served(repo, argv, ex, n)
                keep(row, label, v)
                print(f"# round {rnd + 1} {label} {row}: {v:.0f} instructions/request", flush=True)
    labels = [lab for lab, _ in configs]
    print()
    print("| workload | " + " | ".join(f"{lab} instructions/op" for lab in labels) +
          f" | {labels[1]} / {labels[0]} |" if len(labels) == 2 else " |")
    print("|---" * (len(labels) + 1 + (len(labels) == 2)) + "|")
    for row, vals in best.items():
        cells = " | ".join(f"{vals[lab]:,.0f}" for lab in labels)
        ratio = f" | {vals[labels[1]] / vals[labels[0]]:.3f}" if len(labels) == 2 else ""
        print(f"| {row} | {cells}{ratio} |")


if __name__ == "__main__":
    main()
