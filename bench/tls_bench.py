#!/usr/bin/env python3
"""TLS echo benchmark: a TLS echo server on asyncio, uvloop or goloop, pinned to core 0,
driven by a TLS echo client pinned to core 1.

    python3 bench/tls_bench.py --loop {asyncio,uvloop,goloop} [--sizes 1024,10240,102400]
                               [--conns 10] [--duration 5] [--warmup 1]
                               [--client-loop uvloop]

For each message size the client keeps --conns connections busy, each sending one message
and waiting for its whole echo before sending the next; it verifies every echoed byte. One
JSON line per size is printed, then a summary line:

    {"loop": "goloop", "size": 1024, "rps": ..., "p50_us": ..., "p99_us": ..., "errors": 0,
     "cpu_us": ...}

cpu_us is the server's CPU time per request over the measured window (from /proc): less
disturbed than rps by other work on the server's core.
    {"loop": "goloop", "results": {"1024": ..., "10240": ..., "102400": ...}}

Certificates (a throwaway CA and a server certificate for 127.0.0.1) are made in a
temporary directory with the `cryptography` package, or the openssl command line tool.
The client runs the fastest loop available (uvloop unless --client-loop says otherwise) so
that the server, which does the same TLS work, is what the figures measure; both ends being
Python, compare loops by ratio within one run.

--results also writes a result file, tls-echo-LOOP.json under bench/results/ (one loop's figures
per size), and
renders BENCHMARKS.md; `bench/run.py --only tls --results` measures the loops side by side.

Internal roles (used by the driver): --role server | client.
"""

import argparse
import asyncio
import json
import os
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from harness import LOOPS, LoopUnavailable, die, free_port, make_certs, new_loop, proc_cpu_seconds, serve_until_interrupted, taskset  # noqa: E402

PY = sys.executable
SERVER_CPU = "0"
CLIENT_CPU = "1"
DEFAULT_SIZES = (1024, 10 * 1024, 100 * 1024)
READ_SIZE = 256 * 1024


# --------------------------------------------------------------------------
# certificates

# --------------------------------------------------------------------------
# server

class EchoProtocol(asyncio.Protocol):
    __slots__ = ("transport",)

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc):
        self.transport = None

    def data_received(self, data):
        self.transport.write(data)


def run_server(args):
    try:
        loop = new_loop(args.loop)
    except LoopUnavailable as exc:
        die(str(exc))
    asyncio.set_event_loop(loop)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    try:
        loop.run_until_complete(loop.create_server(EchoProtocol, "127.0.0.1", args.port,
                                                   ssl=ctx, backlog=1024))
    except Exception as exc:
        die(f"{args.loop}: cannot start TLS server: {type(exc).__name__}: {exc}")
    serve_until_interrupted(loop)


# --------------------------------------------------------------------------
# client

class ClientProtocol(asyncio.Protocol):
    def __init__(self, stats, msg, state):
        self.stats, self.msg, self.state = stats, msg, state
        self.buf = bytearray()
        self.t0 = 0.0
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.send()

    def send(self):
        if self.state["phase"] == "stop":
            self.transport.close()
            return
        self.t0 = time.perf_counter()
        self.transport.write(self.msg)

    def data_received(self, data):
        self.buf += data
        if len(self.buf) < len(self.msg):
            return
        st = self.stats
        if len(self.buf) != len(self.msg) or self.buf != self.msg:
            st["errors"] += 1
            st["error"] = st["error"] or "mismatched echo"
        elif self.state["phase"] == "measure":
            st["lat"].append(time.perf_counter() - self.t0)
        self.buf.clear()
        self.send()

    def connection_lost(self, exc):
        if self.state["phase"] != "stop":
            self.stats["errors"] += 1
            self.stats["error"] = self.stats["error"] or f"connection lost: {exc!r}"


async def client_main(args):
    loop = asyncio.get_running_loop()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(args.ca)
    msg = os.urandom(args.size)
    stats = {"lat": [], "errors": 0, "error": None}
    state = {"phase": "warmup"}
    transports = []
    for _ in range(args.conns):
        try:
            tr, _ = await loop.create_connection(lambda: ClientProtocol(stats, msg, state),
                                                 "127.0.0.1", args.port, ssl=ctx,
                                                 server_hostname="localhost")
            tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transports.append(tr)
        except OSError as exc:
            stats["errors"] += 1
            stats["error"] = stats["error"] or f"connect: {exc!r}"
    await asyncio.sleep(args.warmup)
    state["phase"] = "measure"
    t0 = time.perf_counter()
    await asyncio.sleep(args.duration)
    n = len(stats["lat"])
    secs = time.perf_counter() - t0
    state["phase"] = "stop"
    await asyncio.sleep(0.2)
    for tr in transports:
        tr.abort()
    lat = sorted(stats["lat"])
    pct = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6, 1) if lat else None  # noqa: E731
    return {"rps": round(n / secs, 1), "p50_us": pct(0.50), "p99_us": pct(0.99),
            "bytes": n * args.size, "errors": stats["errors"], "error": stats["error"],
            "conns": args.conns, "size": args.size, "duration_s": round(secs, 3)}


def run_client(args):
    try:
        loop = new_loop(args.client_loop)
    except LoopUnavailable:
        loop = new_loop("asyncio")
    try:
        res = loop.run_until_complete(client_main(args))
    finally:
        loop.close()
    print(json.dumps(res), flush=True)


# --------------------------------------------------------------------------
# driver

def wait_ready(proc, timeout=20.0):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sel.select(deadline - time.monotonic()):
            line = proc.stdout.readline()
            if not line:
                return False
            if line.strip() == b"ready":
                return True
    return False


GO_CLIENT = os.path.join(REPO, "bench", ".bin", "echoclient")


def measure(args, size, ca, cert, key):
    port = free_port()
    me = os.path.abspath(__file__)
    errf = tempfile.TemporaryFile()
    srv = subprocess.Popen(taskset(SERVER_CPU) + [PY, me, "--role", "server", "--loop", args.loop,
                                                  "--port", str(port), "--cert", cert,
                                                  "--key", key],
                           stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        if not wait_ready(srv):
            errf.seek(0)
            return {"error": "server not ready: " + errf.read().decode(errors="replace")[-300:]}
        if args.client == "go":
            client = [GO_CLIENT, "-tls", "-addr", f"127.0.0.1:{port}", "-size", str(size),
                      "-conns", str(args.conns), "-duration", str(args.duration),
                      "-warmup", str(args.warmup)]
        else:
            client = [PY, me, "--role", "client", "--client-loop", args.client_loop, "--port",
                      str(port), "--ca", ca, "--size", str(size), "--conns", str(args.conns),
                      "--duration", str(args.duration), "--warmup", str(args.warmup)]
        cli = subprocess.Popen(taskset(CLIENT_CPU) + client, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO)
        # the server's CPU time over the client's measured window: per request, it says
        # what a request costs the server even when other work shares its core
        time.sleep(args.warmup + 0.05)
        c0 = proc_cpu_seconds(srv.pid)
        time.sleep(max(args.duration - 0.1, 0.1))
        c1 = proc_cpu_seconds(srv.pid)
        try:
            out, err = cli.communicate(timeout=args.duration + 60)
        except subprocess.TimeoutExpired:
            cli.kill()
            out, err = cli.communicate()
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            return {"error": f"client failed ({cli.returncode}): {err.strip()[-300:]}"}
        res = json.loads(lines[-1])
        if c0 is not None and c1 is not None and res.get("rps"):
            cpu = (c1 - c0) * args.duration / max(args.duration - 0.1, 0.1)
            res["cpu_us"] = round(cpu * 1e6 / (res["rps"] * args.duration), 2)
        if srv.poll() is not None:
            errf.seek(0)
            res["error"] = res.get("error") or ("server died: " +
                                                errf.read().decode(errors="replace")[-300:])
        return res
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()
        errf.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio", help="the server's event loop")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                    help="message sizes in bytes, comma-separated")
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--client-loop", choices=LOOPS, default="uvloop",
                    help="the Python client's loop (with --client python)")
    ap.add_argument("--client", choices=("go", "python"), default="go",
                    help="go: bench/echoclient -tls (crypto/tls; cheaper than the server, so the "
                         "server is what is measured); python: an asyncio TLS client")
    ap.add_argument("--role", choices=("bench", "server", "client"), default="bench",
                    help=argparse.SUPPRESS)
    ap.add_argument("--results", action="store_true", help="write bench/results/tls-echo-LOOP.json")
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cert", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--ca", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=1024, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.role == "server":
        return run_server(args)
    if args.role == "client":
        return run_client(args)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.client == "go" and not os.path.exists(GO_CLIENT):
        subprocess.run(["go", "build", "-o", GO_CLIENT, "./bench/echoclient"], cwd=REPO, check=True)
    summary = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as d:
        ca, cert, key = make_certs(d)
        for size in sizes:
            res = measure(args, size, ca, cert, key)
            res = {"loop": args.loop, "size": size, **res}
            print(json.dumps(res), flush=True)
            summary[str(size)] = res.get("rps") if not res.get("error") else None
            rows.append(res)
    print(json.dumps({"loop": args.loop, "client": args.client, "conns": args.conns,
                      "results": summary}), flush=True)
    if args.results:
        write_results(args, rows)


def write_results(args, measured):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import render
    from results import write_result
    rows = []
    for r in measured:
        row = {"row": f"TLS {r['size'] // 1024} KiB" if r["size"] >= 1024 else f"TLS {r['size']} B"}
        if r.get("error"):
            row.update({"requests/s": None, "server CPU µs/request": None, "p50 µs": None, "p99 µs": None,
                        "errors": {"requests/s": r["error"]}})
        else:
            row.update({"requests/s": round(r["rps"]), "server CPU µs/request": round(r["cpu_us"], 2) if r.get("cpu_us") else None,
                        "p50 µs": round(r["p50_us"]) if r.get("p50_us") else None,
                        "p99 µs": round(r["p99_us"]) if r.get("p99_us") else None})
        rows.append(row)
    write_result(
        f"tls-echo-{args.loop}", group="The event loop: TLS", title=f"TLS echo on {args.loop}, {args.conns} connections",
        command=f"python3 bench/tls_bench.py --loop {args.loop} --conns {args.conns} --duration {args.duration:g} --results",
        method=(f"A TLS echo server (asyncio.Protocol over `ssl=`) on {args.loop}, pinned to core 0; the "
                f"{'Go crypto/tls' if args.client == 'go' else 'Python'} echo client on core 1, {args.conns} "
                f"connections, each sending a message and waiting for its whole echo; {args.warmup:g} s warm-up, "
                f"{args.duration:g} s measured; every echoed byte verified."),
        better=None, columns=["row", "requests/s", "server CPU µs/request", "p50 µs", "p99 µs"],
        units={"requests/s": "req/s"}, rows=rows, order=50, row_label="message", modules=("uvloop",))
    render.main([])


if __name__ == "__main__":
    main()
