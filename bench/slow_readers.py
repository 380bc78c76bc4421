"""Clients that do not read, and memory spikes: goloop serve side by side with uvicorn.

Scenarios (each a server subprocess on loopback, bounded in time, stopping by itself):
- wsgi-bytes: a Flask app answering one 10 MiB bytes object (the same object every time);
  --clients connections ask for it and never read (4 KiB receive buffers) for --hold
  seconds, then close. Meanwhile a probe client asks for a small page every 0.25 s on a new
  connection. Recorded: the server's RSS idle, peak and --after seconds after the clients
  closed; the probes' p50/max latency and how many took over 100 ms or were not answered.
- wsgi-gen: the same with a generator of 64 KiB parts. goloop's pool threads park a response
  whose output is over its bound and answer others; --min-response-rate drops the clients
  after its grace, which closes their generators. A stats client asks the app every 0.25 s
  how many generators began and were closed: recorded, the seconds until all had begun
  (every request taken by the pool) and until all were closed (the pool holds none).
- asgi-bytes: an ASGI app answering one 10 MiB body.
- ws-bomb: --bombs WebSocket connections each send one permessage-deflate message of 1 GiB
  of zeros (about 1 MiB compressed): RSS peak and 60 s after (the close code is recorded).
- h2-stall: 50 connections x 10 streams of 10 MiB (64 KiB parts) with a zero flow-control
  window (goloop only: uvicorn has no HTTP/2): RSS peak and 60 s after; h2-stall-big: the
  same with the 10 MiB body in one part (held by reference, not copied per stream).
- h2-many: 50 h2c connections x 100 streams of 10 MiB (64 KiB parts), a zero window, the
  client never reads, for --hold seconds: RSS peak and --spike-after seconds after the
  clients closed, and the probes' latencies meanwhile; beside Hypercorn and Granian (HTTP/2
  servers; uvicorn has none: null).
- upload-burst: 100 concurrent 10 MiB uploads (HTTP/1.1) to an ASGI app that reads them
  whole: RSS idle, peak and --spike-after seconds after.

python bench/slow_readers.py [--scenarios wsgi-bytes,...] [--servers goloop,uvicorn,hypercorn,granian]
  [--clients 200] [--hold 15] [--after 20] [--json bench/results/slow-readers.json]
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import harness

SERVERS_DIR = os.path.join(harness.BENCH, "servers")
MiB = 1 << 20


def rss(pid):
    total = 0
    for p in harness.tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def command(server, scenario, port, extra=()):
    target = {"wsgi-bytes": "slow_apps:flask_big", "wsgi-gen": "slow_apps:wsgi_gen"}.get(scenario,
                                                                                        "slow_apps:asgi_app")
    wsgi = scenario.startswith("wsgi")
    if server == "goloop":
        cmd = [sys.executable, "-m", "goloop", "serve", target, "--port", str(port), "--no-access-log"]
        if wsgi:
            cmd += ["--interface", "wsgi"]
        return cmd + list(extra)
    if server == "gunicorn":  # (WSGI only) gthread with goloop's default pool of 6 threads
        return [sys.executable, "-m", "gunicorn", "-k", "gthread", "--threads", "6", "-w", "1",
                "-b", f"127.0.0.1:{port}", "--log-level", "warning", target]
    if server == "hypercorn":
        return [sys.executable, "-m", "hypercorn", target, "--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
    if server == "granian":
        return [sys.executable, "-m", "granian", target, "--interface", "asgi", "--host", "127.0.0.1",
                "--port", str(port), "--loop", "uvloop", "--log-level", "warning", "--no-ws"]
    cmd = [sys.executable, "-m", "uvicorn", target, "--port", str(port), "--no-access-log",
           "--lifespan", "off", "--log-level", "warning"]
    if wsgi:
        cmd += ["--interface", "wsgi"]
    return cmd


class Sampler(threading.Thread):
    """The server's RSS every 0.1 s: peak since reset."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.threads, self.stop = pid, 0, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss(self.pid))
            self.threads = max(self.threads, threads(self.pid))
            time.sleep(0.1)


def threads(pid):
    """The threads of the server's processes (OS threads: Go's, the pool's, the loop's)."""
    n = 0
    for p in harness.tree_pids(pid):
        try:
            n += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            pass
    return n


def get_small(port, timeout=30.0):
    """GET / on a new connection; its latency in seconds, or None (no answer)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n\r\nok" not in data:
                b = s.recv(4096)
                if not b:
                    return None
                data += b
    except OSError:
        return None
    return time.monotonic() - t0


def prober(port, stop, out, timeout, done_at):
    while not stop.is_set():
        lat = get_small(port, timeout)
        out.append(lat)
        if lat is not None and not done_at:
            done_at.append(time.monotonic())
        stop.wait(0.25)


def gen_stats(port, stop, clients, t0, out):
    """wsgi-gen: asks the app how many generators began and were closed, every 0.25 s; out
    gets the seconds from t0 until all clients' had begun, and until all were closed."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while (b := s.recv(4096)):
                    data += b
            began, closed = (int(x) for x in data.rsplit(b"\r\n\r\n", 1)[1].split())
        except (OSError, ValueError):
            began = closed = -1
        now = round(time.monotonic() - t0, 1)
        if began >= clients and "all_began_s" not in out:
            out["all_began_s"] = now
        if closed >= clients and "all_closed_s" not in out:
            out["all_closed_s"] = now
        stop.wait(0.25)


def start(server, scenario, extra=()):
    port = harness.free_port()
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen(command(server, scenario, port, extra), cwd=SERVERS_DIR, stdout=subprocess.DEVNULL, stderr=errf)
    proc.errf = errf
    harness.wait_port(port, proc, timeout=60)
    for _ in range(5):  # warm
        get_small(port)
    time.sleep(1)
    return proc, port


def probe_while_held(port, args):
    """The prober for --hold seconds: (latencies, [first answer's time], seconds held)."""
    t0 = time.monotonic()
    stop, lat, done_at = threading.Event(), [], []
    pt = threading.Thread(target=prober, args=(port, stop, lat, args.probe_timeout, done_at), daemon=True)
    pt.start()
    time.sleep(args.hold)
    stop.set()
    pt.join(args.probe_timeout + 10)
    return lat, done_at, time.monotonic() - t0


def probe_stats(lat):
    ok = [x for x in lat if x is not None]
    return {"probes": len(lat), "answered": len(ok),
            "over_100ms": sum(1 for x in lat if x is None or x > 0.1),
            "p50_ms": round(statistics.median(ok) * 1e3, 1) if ok else None,
            "max_ms": round(max(ok) * 1e3, 1) if ok else None}


SPIKES = ("ws-bomb", "h2-stall", "h2-stall-big", "h2-many", "upload-burst")


def run_readers(server, scenario, args):
    proc, port = start(server, scenario, args.goloop_args.split() if server == "goloop" else ())
    try:
        idle = rss(proc.pid)
        sampler = Sampler(proc.pid)
        sampler.start()
        socks = []
        for _ in range(args.clients):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        t0 = time.monotonic()
        gen, st, st_stop = {}, None, threading.Event()
        if scenario == "wsgi-gen":
            st = threading.Thread(target=gen_stats, args=(port, st_stop, args.clients, t0, gen), daemon=True)
            st.start()
        lat, done_at, held_for = probe_while_held(port, args)
        st_stop.set()
        if st is not None:
            st.join(10)
        peak = sampler.peak
        for s in socks:
            s.close()
        time.sleep(args.after)
        sampler.stop.set()
        after = rss(proc.pid)
        row = {"rss_idle_mib": round(idle / MiB, 1), "rss_peak_mib": round(peak / MiB, 1),
               "rss_after_mib": round(after / MiB, 1), "held_s": round(held_for, 1),
               "first_answer_s": round(done_at[0] - t0, 1) if done_at else None}
        if scenario == "wsgi-gen":
            row.update(all_began_s=gen.get("all_began_s"), all_closed_s=gen.get("all_closed_s"),
                       threads_peak=sampler.threads)
        row.update(probe_stats(lat))
        row["probe_ms"] = [None if x is None else round(x * 1e3, 1) for x in lat]
        return row
    finally:
        harness.stop(proc, 20)


def bomb_payload():
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    zero = bytes(MiB)
    out = [z.compress(zero) for _ in range(1024)]
    out.append(z.flush(zlib.Z_SYNC_FLUSH))
    data = b"".join(out)
    return data[:-4] if data.endswith(b"\x00\x00\xff\xff") else data


def bomb(port, payload, codes):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                      b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            if b" 101 " not in head.split(b"\r\n")[0] or b"permessage-deflate" not in head:
                codes.append("no deflate")
                return
            rest = head.split(b"\r\n\r\n", 1)[1]
            # FIN, RSV1 (compressed), binary; masked with a zero key (the payload unchanged)
            frame = bytes([0xC2, 0x80 | 127]) + len(payload).to_bytes(8, "big") + b"\0\0\0\0" + payload
            s.sendall(frame)
            data = rest
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
                if len(data) >= 4 and data[0] & 0x0F == 8:
                    break
            codes.append(int.from_bytes(data[2:4], "big") if len(data) >= 4 and data[0] & 0x0F == 8 else None)
    except OSError as exc:
        codes.append(type(exc).__name__)


def h2_stall(port, conns, path=b"/stream", streams=10):
    import h2.config
    import h2.connection
    import h2.settings
    socks = []
    for _ in range(conns):
        c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        for i in range(streams):
            c.send_headers(1 + 2 * i, [(":method", "GET"), (":path", path), (":scheme", "http"),
                                       (":authority", "x")], end_stream=True)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(c.data_to_send())
        socks.append(s)
    return socks


def upload(port, size, out):
    """POST size bytes to /upload (the app reads it whole and answers its length)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
            s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
            chunk = bytes(MiB)
            for _ in range(size // MiB):
                s.sendall(chunk)
            data = b""
            while b"\r\n\r\n" not in data:
                b = s.recv(4096)
                if not b:
                    break
                data += b
            out.append(data.split(b" ", 2)[1] if data else None)
    except OSError as exc:
        out.append(type(exc).__name__)


def run_spike(server, scenario, args):
    if scenario.startswith("h2-") and server == "uvicorn":
        return None
    if scenario.startswith("h2-stall") and server != "goloop":
        return None
    proc, port = start(server, scenario, args.goloop_args.split() if server == "goloop" else ())
    try:
        idle = rss(proc.pid)
        sampler = Sampler(proc.pid)
        sampler.start()
        extra = {}
        if scenario == "ws-bomb":
            payload = bomb_payload()
            codes = []
            ts = [threading.Thread(target=bomb, args=(port, payload, codes)) for _ in range(args.bombs)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
            extra["close_codes"] = codes
            extra["compressed_mib"] = round(len(payload) / MiB, 2)
        elif scenario == "upload-burst":
            codes = []
            ts = [threading.Thread(target=upload, args=(port, 10 * MiB, codes)) for _ in range(100)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(300)
            extra["answers"] = {str(k): codes.count(k) for k in set(codes)}
        elif scenario == "h2-many":
            socks = h2_stall(port, 50, b"/stream", streams=100)
            lat, _, held_for = probe_while_held(port, args)
            extra["held_s"] = round(held_for, 1)
            extra.update(probe_stats(lat))
            for s in socks:
                s.close()
        else:
            socks = h2_stall(port, 50, b"/big" if scenario == "h2-stall-big" else b"/stream")
            time.sleep(args.hold)
            for s in socks:
                s.close()
        peak = sampler.peak
        t_end = time.monotonic()
        curve = []
        while time.monotonic() - t_end < args.spike_after:
            time.sleep(5)
            curve.append(round(rss(proc.pid) / MiB, 1))
        sampler.stop.set()
        lat = get_small(port)
        row = {"rss_idle_mib": round(idle / MiB, 1), "rss_peak_mib": round(max(peak, sampler.peak) / MiB, 1),
               "rss_after_mib": curve[-1] if curve else None, "rss_every_5s_after": curve,
               "probe_after_ms": round(lat * 1e3, 1) if lat is not None else None}
        row.update(extra)
        return row
    finally:
        harness.stop(proc, 20)


def versions():
    out = {"python": platform.python_version()}
    for name in ("goloop", "uvicorn", "hypercorn", "granian", "flask", "websockets"):
        try:
            from importlib.metadata import version
            out[name] = version(name)
        except Exception:
            out[name] = None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="wsgi-bytes,wsgi-gen,asgi-bytes,ws-bomb,h2-stall")
    ap.add_argument("--servers", default="goloop,uvicorn")
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--hold", type=float, default=15, help="seconds the clients stay without reading")
    ap.add_argument("--after", type=float, default=20, help="seconds after they closed, RSS measured")
    ap.add_argument("--spike-after", type=float, default=60, help="seconds after a spike, RSS measured")
    ap.add_argument("--bombs", type=int, default=4)
    ap.add_argument("--probe-timeout", type=float, default=30)
    ap.add_argument("--goloop-args", default="", help="more options of goloop serve (e.g. --min-response-grace 1)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = {}
    for scenario in args.scenarios.split(","):
        for server in args.servers.split(","):
            spike = scenario in SPIKES
            row = (run_spike if spike else run_readers)(server, scenario, args)
            results[f"{scenario}/{server}"] = row
            print(scenario, server, json.dumps(row), flush=True)
    if args.json:
        write_json(args, results)


def write_json(args, results):
    servers = args.servers.split(",")
    rows = []
    for scenario in args.scenarios.split(","):
        spike = scenario in SPIKES
        keys = (["rss_idle_mib", "rss_peak_mib", "rss_after_mib", "p50_ms", "max_ms", "over_100ms", "answered",
                 "probes"] if scenario == "h2-many" else
                ["rss_idle_mib", "rss_peak_mib", "rss_after_mib", "probe_after_ms"] if spike else
                ["rss_idle_mib", "rss_peak_mib", "rss_after_mib", "p50_ms", "max_ms", "over_100ms", "answered",
                 "probes", "first_answer_s"] + (["all_began_s", "all_closed_s", "threads_peak"]
                                                if scenario == "wsgi-gen" else []))
        for k in keys:
            row = {"row": f"{scenario}: {k}"}
            for sv in servers:
                r = results.get(f"{scenario}/{sv}")
                row[sv] = r.get(k) if r else None
            rows.append(row)
    doc = {
        "schema": 1, "id": "slow-readers", "group": "Robustness",
        "title": f"{args.clients} clients that never read a 10 MiB body; memory spikes",
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores (shared, loaded), CPython {platform.python_version()}",
        "versions": versions(),
        "command": "python bench/slow_readers.py " + " ".join(sys.argv[1:]),
        "method": (f"Each server a subprocess on loopback, default options (goloop: --min-response-rate 240 "
                   f"after 5 s; WSGI: goloop's 6 pool threads, uvicorn's WSGI middleware). {args.clients} "
                   f"connections with 4 KiB receive buffers ask for 10 MiB and never read for {args.hold} s, "
                   f"then close; a probe asks for a 2-byte page on a new connection every 0.25 s meanwhile. "
                   f"RSS of the server's process (VmRSS) sampled every 0.1 s: idle before, peak, and "
                   f"{args.after} s after the clients closed. Spikes: {args.bombs} WebSocket bombs of 1 GiB of "
                   f"zeros (permessage-deflate), 50 h2c connections x 10 streams with a zero window; RSS "
                   f"{args.spike_after} s after. One run; memory figures do not depend on load, latencies do."),
        "better": "lower",
        "columns": ["row"] + servers,
        "units": {sv: "MiB / ms / count" for sv in servers},
        "rows": rows,
        "raw": results,
        "notes": ["the 10 MiB bytes body is one object answered to every client: goloop holds a reference "
                  "per connection, no copy",
                  "h2-stall: uvicorn has no HTTP/2 (null)"],
    }
    if os.path.exists(args.json):  # a run of some scenarios: the other rows stay
        with open(args.json) as f:
            old = json.load(f)
        cols = old["columns"] + [c for c in doc["columns"] if c not in old["columns"]]
        new = {r["row"]: r for r in rows}
        merged = []
        for r in old["rows"]:  # this run's servers' figures replace theirs
            r.update({k: v for k, v in new.pop(r["row"], {}).items() if k in servers})
            merged.append(r)
        merged += list(new.values())
        for r in merged:
            for c in cols:
                r.setdefault(c, None)
        old["raw"].update({k: v for k, v in results.items() if v is not None})
        old["versions"].update({k: v for k, v in doc["versions"].items() if v})
        old["units"].update(doc["units"])
        old.update(columns=cols, rows=merged, date=doc["date"])
        old["command"] += "; " + doc["command"]
        doc = old
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
