#!/usr/bin/env python3
"""WebSocket echo: goloop serve against uvicorn (uvloop, httptools, websockets) and Granian,
in server CPU per message.

    python3 bench/ws_bench.py [--sizes 64,4096,65536] [--conns 10] [--duration 5] [--rounds 3]
                              [--servers "goloop serve,uvicorn+uvloop,granian+uvloop"] [--results]

The application is bench/servers/serve_apps.py's ws_echo (raw ASGI: accept, then send back
each message). Each server is a fresh process tree pinned to core 0; bench/echoclient -ws
on core 1 opens --conns WebSocket sessions, each sending a binary message of the row's size
and waiting for its echo before the next (every echoed byte checked), 1 s of warm-up, then
--duration seconds measured. CPU per message: utime+stime of every thread of every process
of the server's tree over the measured run, divided by the round trips the client counted;
with --rounds N each cell is the median of its rounds (servers interleaved in each round).
--results writes bench/results/serve-ws-cpu.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as _run  # noqa: E402  (builds bench/echoclient)
from harness import free_port, stop, tree_cpu, wait_port  # noqa: E402
from serve_bench import CLIENT_CPU, ENV, SERVER_CPU, server_argv  # noqa: E402

SERVERS = ["goloop serve", "uvicorn+uvloop", "granian+uvloop"]


def ws_argv(name, port):
    """The server's command line for serve_apps:ws_echo, WebSockets on."""
    argv = server_argv(name, "ws_echo", port, None)
    return [a for a in argv if a != "--no-ws"]


def measure(name, size, args):
    port = free_port()
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *ws_argv(name, port)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc)
        client = ["taskset", "-c", CLIENT_CPU, _run.ECHOCLIENT, "-addr", f"127.0.0.1:{port}", "-ws", "/",
                  "-conns", str(args.conns), "-size", str(size)]
        subprocess.run(client + ["-warmup", "0", "-duration", "1"], capture_output=True, timeout=60)
        c0 = tree_cpu(proc.pid)
        out = subprocess.run(client + ["-warmup", "0", "-duration", str(args.duration)], capture_output=True,
                             text=True, timeout=args.duration + 60)
        c1 = tree_cpu(proc.pid)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        msgs = res["rps"] * res["duration_s"]
        if res["errors"] or not msgs:
            raise SystemExit(f"{name}, {size} B: {res.get('error') or 'no messages'} ({res['errors']} errors)")
        return {"us": (c1 - c0) / msgs * 1e6, "rps": res["rps"], "p99": res["p99_us"]}
    finally:
        stop(proc, 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64,4096,65536")
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--results", action="store_true")
    args = ap.parse_args()
    err = _run.build_echoclient()
    if err:
        raise SystemExit(f"bench/echoclient did not build: {err}")
    sizes = [int(s) for s in args.sizes.split(",")]
    servers = [s.strip() for s in args.servers.split(",")]
    got = {(n, s): [] for n in servers for s in sizes}
    for r in range(args.rounds):
        for size in sizes:
            for name in servers:
                m = measure(name, size, args)
                got[(name, size)].append(m)
                print(f"# round {r + 1} {size} B {name}: {m['us']:.1f} µs CPU/message, {m['rps']:.0f} messages/s, "
                      f"p99 {m['p99']:.0f} µs", flush=True)
    rows = []
    for size in sizes:
        row = {"row": f"{size:,} B messages, {args.conns} sessions"}
        for name in servers:
            row[name] = round(statistics.median(m["us"] for m in got[(name, size)]), 1)
        row["rounds"] = {name: [round(m["us"], 1) for m in got[(name, size)]] for name in servers}
        rows.append(row)
        print("| " + row["row"] + " | " + " | ".join(f"{name} {row[name]}" for name in servers) + " |")
    if args.results:
        from results import write_result
        import render
        first, *others = servers
        write_result(
            "serve-ws-cpu", group="goloop serve (ASGI)",
            title="WebSocket echo: server CPU µs per message",
            command=f"python3 bench/ws_bench.py --results --sizes {args.sizes} --conns {args.conns} "
                    f"--duration {args.duration} --rounds {args.rounds}",
            method=__doc__.split("\n\n")[1].replace("\n", " "), better="lower",
            columns=["row", *servers], units={s: "µs" for s in servers}, rows=rows, compare=others, goloop=first,
            row_label="workload", modules=("uvicorn", "uvloop", "granian", "websockets"))
        render.main([])


if __name__ == "__main__":
    main()
