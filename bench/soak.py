"""A soak: a mixed load against goloop serve for --minutes (default 10), with each server's
RSS, open descriptors and threads sampled every 10 s. Not part of `make test`.

Three servers (subprocesses on loopback): an ASGI app (bench/servers/slow_apps.py:asgi_app)
on a plain port, the same over TLS, and a WSGI app (wsgi_hello). Client threads, each
paced (a short sleep between operations: the point is what stays allocated, not speed):
- keep-alive GETs on one connection; a new connection per GET; 16 pipelined GETs a write;
- h2c (prior knowledge): 10 streams a round on one connection;
- WebSocket echo of small messages;
- TLS: keep-alive GETs and a new TLS connection per GET;
- WSGI keep-alive GETs;
- client resets: a request for 10 MiB, then a close with SO_LINGER 0 (RST) mid-response,
  and a half-sent request head reset.

Recorded (--json): the samples, and per server RSS/descriptors/threads at the end of the
warm-up (the first --warmup minutes) and at the end, the growth in between, and the
operations done and failed by kind.

python bench/soak.py [--minutes 10] [--json bench/results/soak.json]
"""
import argparse
import datetime
import json
import os
import platform
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

import harness

SERVERS_DIR = os.path.join(harness.BENCH, "servers")
MiB = 1 << 20


def proc_stats(pid):
    out = {"rss_mib": None, "fds": None, "threads": None}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_mib"] = round(int(line.split()[1]) / 1024, 1)
                elif line.startswith("Threads:"):
                    out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def start(args, name, extra):
    port = harness.free_port()
    errf = tempfile.TemporaryFile()
    cmd = [sys.executable, "-m", "goloop", "serve", "--port", str(port), "--no-access-log"] + extra
    proc = subprocess.Popen(cmd, cwd=SERVERS_DIR, stdout=subprocess.DEVNULL, stderr=errf)
    proc.errf = errf
    harness.wait_port(port, proc, timeout=60)
    return name, proc, port


def read_response(f):
    line = f.readline()
    if not line:
        raise EOFError
    n, chunked = None, False
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            n = int(v)
        elif k == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    if chunked:
        while True:
            size = int(f.readline().split(b";")[0], 16)
            f.read(size + 2)
            if size == 0:
                break
    elif n:
        f.read(n)
    return int(line.split()[1])


class Load:
    def __init__(self, stop, pace):
        self.stop, self.pace = stop, pace
        self.ok, self.failed = {}, {}
        self.lock = threading.Lock()

    def count(self, kind, ok=True, n=1):
        with self.lock:
            d = self.ok if ok else self.failed
            d[kind] = d.get(kind, 0) + n

    def loop(self, kind, fn):
        def run():
            while not self.stop.is_set():
                try:
                    fn()
                except Exception:
                    self.count(kind, False)
                    self.stop.wait(0.2)
                self.stop.wait(self.pace)
        t = threading.Thread(target=run, daemon=True, name=kind)
        t.start()
        return t


def keepalive(load, port, kind, path=b"/", ctx=None, n=50):
    def fn():
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        if ctx:
            s = ctx.wrap_socket(s, server_hostname="localhost")
        with s:
            f = s.makefile("rb")
            for _ in range(n):
                s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
                read_response(f)
                load.count(kind)
                if load.stop.wait(load.pace):
                    return
    return fn


def newconn(load, port, kind, ctx=None):
    def fn():
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        if ctx:
            s = ctx.wrap_socket(s, server_hostname="localhost")
        with s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            read_response(s.makefile("rb"))
        load.count(kind)
    return fn


def pipelined(load, port):
    def fn():
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            f = s.makefile("rb")
            for _ in range(10):
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 16)
                for _ in range(16):
                    read_response(f)
                load.count("pipelined", n=16)
                if load.stop.wait(load.pace):
                    return
    return fn


def h2c(load, port):
    import h2.config
    import h2.connection
    import h2.events

    def fn():
        c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(c.data_to_send())
            for _ in range(20):
                ids = []
                for _ in range(10):
                    sid = c.get_next_available_stream_id()
                    c.send_headers(sid, [(":method", "GET"), (":path", "/"), (":scheme", "http"),
                                         (":authority", "x")], end_stream=True)
                    ids.append(sid)
                s.sendall(c.data_to_send())
                done = set()
                while len(done) < len(ids):
                    data = s.recv(65536)
                    if not data:
                        raise EOFError
                    for ev in c.receive_data(data):
                        if isinstance(ev, h2.events.DataReceived):
                            c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                        elif isinstance(ev, h2.events.StreamEnded):
                            done.add(ev.stream_id)
                    s.sendall(c.data_to_send())
                load.count("h2c", n=len(ids))
                if load.stop.wait(load.pace):
                    return
    return fn


def ws_frame(payload, op=1):
    n = len(payload)
    head = bytes([0x80 | op])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + b"\0\0\0\0" + payload  # a zero mask key: the payload as is


def ws_echo(load, port):
    def fn():
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            f = s.makefile("rb")
            if b" 101 " not in f.readline():
                raise RuntimeError("no upgrade")
            while f.readline() not in (b"\r\n", b""):
                pass
            for i in range(100):
                msg = b"message %d " % i * 8
                s.sendall(ws_frame(msg))
                h = f.read(2)
                n = h[1] & 0x7F
                if n == 126:
                    n = struct.unpack(">H", f.read(2))[0]
                if f.read(n) != msg:
                    raise RuntimeError("bad echo")
                load.count("ws")
                if load.stop.wait(load.pace):
                    break
            s.sendall(ws_frame(struct.pack(">H", 1000), op=8))
    return fn


def resets(load, port):
    def fn():
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST mid-response
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.sendall(b"GET / HTTP/1.1\r\nHo")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST mid-head
        load.count("resets", n=2)
    return fn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2, help="minutes before the baseline sample")
    ap.add_argument("--every", type=float, default=10, help="seconds between samples")
    ap.add_argument("--pace", type=float, default=0.002, help="seconds each client sleeps between operations")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    certdir = tempfile.mkdtemp(prefix="goloop-soak-")
    ca, cert, key = harness.make_certs(certdir)
    servers = [
        start(args, "asgi", ["slow_apps:asgi_app"]),
        start(args, "asgi-tls", ["slow_apps:asgi_app", "--ssl-certfile", cert, "--ssl-keyfile", key]),
        start(args, "wsgi", ["slow_apps:wsgi_hello", "--interface", "wsgi"]),
    ]
    ports = {name: port for name, _, port in servers}
    ctx = ssl.create_default_context(cafile=ca)
    stop = threading.Event()
    load = Load(stop, args.pace)
    a, t, w = ports["asgi"], ports["asgi-tls"], ports["wsgi"]
    load.loop("keepalive", keepalive(load, a, "keepalive"))
    load.loop("newconn", newconn(load, a, "newconn"))
    load.loop("pipelined", pipelined(load, a))
    load.loop("h2c", h2c(load, a))
    load.loop("ws", ws_echo(load, a))
    load.loop("tls-keepalive", keepalive(load, t, "tls-keepalive", ctx=ctx))
    load.loop("tls-newconn", newconn(load, t, "tls-newconn", ctx=ctx))
    load.loop("wsgi", keepalive(load, w, "wsgi"))
    load.loop("resets", resets(load, a))
    samples = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.every)
            row = {"t": round(time.monotonic() - t0)}
            for name, proc, _ in servers:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}")
                row[name] = proc_stats(proc.pid)
            samples.append(row)
            print(json.dumps(row), dict(load.ok), dict(load.failed), flush=True)
    finally:
        stop.set()
        time.sleep(1)
        for _, proc, _ in servers:
            harness.stop(proc, 20)
    summary = {}
    base = next((s for s in samples if s["t"] >= args.warmup * 60), samples[0])
    end = samples[-1]
    for name, _, _ in servers:
        after = [s[name] for s in samples if s["t"] >= base["t"]]
        summary[name] = {k: {"after_warmup": base[name][k], "end": end[name][k],
                             "min": min(x[k] for x in after), "max": max(x[k] for x in after)}
                         for k in ("rss_mib", "fds", "threads")}
    print(json.dumps(summary, indent=1))
    if args.json:
        rows = []
        for name, _, _ in servers:
            for k, label in (("rss_mib", "RSS MiB"), ("fds", "open descriptors"), ("threads", "threads")):
                v = summary[name][k]
                rows.append({"row": f"{name}: {label}", "after_warmup": v["after_warmup"], "end": v["end"],
                             "min": v["min"], "max": v["max"]})
        doc = {
            "schema": 1, "id": "soak", "group": "Robustness",
            "title": f"A {args.minutes:g}-minute mixed load: memory, descriptors and threads",
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} cores (shared, loaded), CPython {platform.python_version()}",
            "versions": {"python": platform.python_version()},
            "command": "python bench/soak.py " + " ".join(sys.argv[1:]),
            "method": ("Three goloop serve processes on loopback (ASGI plain, ASGI over TLS, WSGI), default "
                       "options; client threads in one Python process, each pausing "
                       f"{args.pace * 1e3:g} ms between operations: keep-alive and new-connection GETs, 16 "
                       "pipelined GETs a write, h2c (10 streams a round), WebSocket echo, TLS keep-alive and "
                       "new connections, WSGI keep-alive, client resets (RST mid-response and mid-head). "
                       f"Every {args.every:g} s each server's VmRSS, /proc/PID/fd count and thread count; "
                       f"the baseline is the first sample after {args.warmup:g} min of warm-up."),
            "better": None,
            "columns": ["row", "after_warmup", "end", "min", "max"],
            "units": {"after_warmup": "MiB / count", "end": "MiB / count", "min": "MiB / count",
                      "max": "MiB / count"},
            "rows": rows,
            "operations": load.ok, "failures": load.failed,
            "samples": samples,
            "notes": ["flat after warm-up: end close to after_warmup, no steady climb in samples"],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
