"""Keep-alive connections of a server whose loop is busy longer than its keep-alive timeout:
does a client lose its next request to the idle close?

    python bench/keepalive_busy_loop.py [--servers goloop,uvicorn,granian] [--conns 64]
        [--busy 0.03] [--keep-alive 1] [--n 640] [--results]

Each server (one process, one worker, on loopback) serves bench/servers/serve_apps.py's
`busy` app, which blocks the loop --busy seconds per request (time.sleep: CPU work, or
a server slowed down as valgrind slows it); --conns keep-alive connections each send a
request, read its response and send the next at once, until --n are answered. A round of
one request per connection blocks the loop conns x busy seconds (1.9 s at the defaults),
longer than the keep-alive timeout (1 s): every connection's deadline passes while its
next request is on its way. Counted: requests answered, connections reset (ECONNRESET)
or closed (EOF) with a request outstanding. The keep-alive timeout is each server's own:
goloop serve and uvicorn --timeout-keep-alive, Granian --http1-header-read-timeout (hyper
applies it to idle keep-alive connections too). A count of load, not of time: a loaded
machine makes the rounds longer, not the outcome different.
"""
import argparse
import os
import selectors
import socket
import subprocess
import sys
import tempfile

import harness

PY = sys.executable
SERVERS_DIR = os.path.join(harness.BENCH, "servers")
SERVERS = ("goloop", "uvicorn", "granian")


def argv(name, port, keep_alive):
    host = "127.0.0.1"
    if name == "goloop":
        return [PY, "-m", "goloop", "serve", "serve_apps:busy", "--host", host, "--port", str(port),
                "--no-access-log", "--log-level", "warning", "--lifespan", "off",
                "--timeout-keep-alive", str(keep_alive)]
    if name == "uvicorn":
        return [PY, "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                "--log-level", "warning", "--lifespan", "off", "--host", host, "--port", str(port),
                "--timeout-keep-alive", str(keep_alive), "serve_apps:busy"]
    if name == "granian":
        return [PY, "-m", "granian", "--interface", "asgi", "--workers", "1", "--runtime-threads", "1",
                "--loop", "uvloop", "--log-level", "warning", "--host", host, "--port", str(port),
                "--http1-header-read-timeout", str(int(keep_alive * 1000)), "serve_apps:busy"]
    raise ValueError(name)


def drive(port, n, conns, timeout=120):
    """(answered, reset, closed): n requests over conns keep-alive connections, one in
    flight on each; a connection lost with a request outstanding is counted and dropped."""
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    sel = selectors.DefaultSelector()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=timeout) for _ in range(conns)]
    buf = {s: b"" for s in socks}
    sent = answered = reset = closed = 0
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
        s.sendall(req)
        sent += 1
    live = set(socks)
    try:
        while live and answered + reset + closed < n:
            ready = sel.select(timeout)
            if not ready:
                raise RuntimeError(f"no response for {timeout} s")
            for key, _ in ready:
                s = key.fileobj
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk, reset = None, reset + 1
                if not chunk:
                    closed += chunk is not None
                    sel.unregister(s)
                    live.discard(s)
                    s.close()
                    continue
                buf[s] += chunk
                end = buf[s].find(b"Hello, world!")
                if end < 0:
                    continue
                buf[s] = buf[s][end + 13:]
                answered += 1
                if sent < n:
                    s.sendall(req)
                    sent += 1
                else:
                    sel.unregister(s)
                    live.discard(s)
                    s.close()
    finally:
        for s in live:
            s.close()
    return answered, reset, closed


def run(name, args):
    port = harness.free_port()
    env = dict(os.environ, BUSY_SECONDS=str(args.busy), PYTHONPATH=SERVERS_DIR)
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(argv(name, port, args.keep_alive), cwd=SERVERS_DIR, env=env,
                                stdout=subprocess.DEVNULL, stderr=errf)
        proc.errf = errf
        try:
            harness.wait_port(port, proc, timeout=60)
            return drive(port, args.n, args.conns)
        finally:
            harness.stop(proc, 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--busy", type=float, default=0.03, help="seconds the app blocks the loop per request")
    ap.add_argument("--keep-alive", type=int, default=1, help="the servers' keep-alive timeout (s)")
    ap.add_argument("--n", type=int, default=640)
    ap.add_argument("--results", action="store_true", help="write bench/results/keepalive-busy-loop.json")
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args()
    rows = []
    for name in args.servers.split(","):
        answered, reset, closed = run(name, args)
        print(f"{name:8} answered {answered:5}  reset {reset:3}  closed {closed:3}", flush=True)
        rows.append({"row": name, "answered": answered, "reset": reset, "closed": closed})
    if args.results:
        from results import write_result

        write_result(
            "keepalive-busy-loop", group="Robustness",
            title=f"{args.conns} keep-alive clients of a loop busy past the keep-alive timeout",
            command=("python bench/keepalive_busy_loop.py --results --servers " + args.servers
                     + f" --conns {args.conns} --busy {args.busy} --keep-alive {args.keep_alive} --n {args.n}"),
            method=(f"The app blocks the loop {args.busy} s per request; {args.conns} keep-alive connections "
                    "send their next request as soon as a response is read, so a round of one request per "
                    f"connection keeps the loop busy {args.conns * args.busy:.2f} s, past the keep-alive "
                    f"timeout of {args.keep_alive} s. Counted until {args.n} requests are answered or every "
                    "connection is lost: connections reset (ECONNRESET) or closed (EOF) with a request "
                    "outstanding. Counts, not times: load makes the rounds longer, not the outcome different."),
            better=None, columns=["row", "answered", "reset", "closed"],
            units={"answered": "requests", "reset": "connections", "closed": "connections"},
            rows=rows, notes=list(args.note), modules=("uvicorn", "granian", "uvloop"))


if __name__ == "__main__":
    main()
