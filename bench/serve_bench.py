#!/usr/bin/env python3
"""goloop serve against uvicorn: an ASGI hello world (bench/asgi_server.py's app) under
uvicorn+uvloop, uvicorn+goloop and `goloop serve`, side by side in one run.

    python3 bench/serve_bench.py [--duration 5] [--connections 100] [--rounds 1] [--pipeline 16]

Each server is a fresh subprocess pinned to core 0 (taskset -c 0), wrk -t1 -cN on core 1.
Prints requests/s and the server's CPU time per request (utime+stime of all its threads,
from /proc). Needs wrk, uvicorn, uvloop, httptools.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=os.path.join(REPO, "pyshim") + os.pathsep + os.environ.get("PYTHONPATH", ""))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def servers(port):
    addr = f"127.0.0.1:{port}"
    return {
        "uvicorn+uvloop": [PY, os.path.join(HERE, "asgi_server.py"), "--loop", "uvloop", "--addr", addr],
        "uvicorn+goloop": [PY, os.path.join(HERE, "asgi_server.py"), "--loop", "goloop", "--addr", addr],
        "goloop serve": [PY, "-P", "-m", "goloop", "serve", "asgi_server:app", "--app-dir", HERE, "--port",
                         str(port), "--no-access-log", "--lifespan", "off", "--log-level", "warning"],
    }


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server not ready")


def run_one(argv, port, duration, conns, pipeline):
    proc = subprocess.Popen(["taskset", "-c", "0", *argv], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/"
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c", str(conns), "-d1s", url],
                       capture_output=True, timeout=60)  # warm-up
        wrk = ["taskset", "-c", "1", "wrk", "-t1", "-c", str(conns), f"-d{duration}s", url]
        if pipeline > 1:
            wrk[4:4] = ["-s", os.path.join(HERE, "pipeline.lua")]
            wrk += ["--", str(pipeline)]
        c0 = cpu_seconds(proc.pid)
        out = subprocess.run(wrk, capture_output=True, text=True, timeout=duration + 60).stdout
        c1 = cpu_seconds(proc.pid)
        m = re.search(r"(\d+) requests in", out)
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
        if not m or not rps:
            raise RuntimeError("wrk output: " + out)
        n = int(m.group(1))
        errs = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
        return float(rps.group(1)), (c1 - c0) * 1e6 / max(n, 1), errs.group(0) if errs else ""
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pipeline", type=int, default=1, help="requests per connection in flight (wrk script)")
    ap.add_argument("--only", action="append", help="run only the named servers")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed")
    print(f"ASGI hello world, wrk -t1 -c{args.connections} -d{args.duration}s"
          + (f", {args.pipeline} pipelined" if args.pipeline > 1 else "") + ", server on core 0")
    print(f"| server | requests/s | server CPU µs/request |\n| --- | --- | --- |")
    for _ in range(args.rounds):
        for name in servers(0):
            if args.only and name not in args.only:
                continue
            port = free_port()
            try:
                rps, us, err = run_one(servers(port)[name], port, args.duration, args.connections, args.pipeline)
                print(f"| {name} | {rps:,.0f} | {us:.1f} |" + (f" {err}" if err else ""), flush=True)
            except Exception as exc:
                print(f"| {name} | failed: {exc} | |", flush=True)


if __name__ == "__main__":
    main()
