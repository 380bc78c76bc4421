#!/usr/bin/env python3
"""Run the goloop benchmark suite for asyncio, uvloop and goloop in one go.

    python3 bench/run.py [--quick] [--only echo,http,micro,tls]
                         [--loops asyncio,uvloop,goloop] [--repeat N]
                         [--results] [--json results.json]

--results writes each table as a result file under bench/results/ (bench/results.py has the
schema) and renders BENCHMARKS.md and docs/performance.md from every result file there
(bench/render.py): the tables other drivers wrote stay as they are.

Servers run pinned to core 0 (`taskset -c 0`), load generators (the Go
echoclient, wrk -t1 -c100) pinned to core 1. Every server is a fresh
subprocess on a free port, waited for "ready" and killed afterwards. A loop
that cannot be imported, lacks a method or crashes gets "error" in its cell
(the reason is listed under the table); the run always goes on.

Configurations are interleaved (asyncio, uvloop, goloop for one configuration,
then the next) so that the ratios compare measurements taken close in time.
Figures are noisy (about ±20 % between runs): compare ratios from one run.
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import selectors
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
from harness import KernelCounters, free_port, human, make_certs, parse_wrk, proc_cpu_seconds, proc_cpu_split  # noqa: E402

REPO = os.path.dirname(BENCH)
BIN = os.path.join(BENCH, ".bin")
ECHOCLIENT = os.path.join(BIN, "echoclient")
PY = sys.executable
SERVER_CPU = "0"
CLIENT_CPU = "1"

ALL_LOOPS = ("asyncio", "uvloop", "goloop")
ECHO_MODES = ("protocol", "buffered", "streams", "sockets")
ECHO_SIZES = (1024, 10 * 1024, 100 * 1024)
HTTP_CONFIGS = (  # (label, body size, pipeline depth)
    ("13 B", 13, 1),
    ("1 KiB", 1024, 1),
    ("100 KiB", 100 * 1024, 1),
    ("13 B, 16 pipelined", 13, 16),
)
MICRO_BENCHES = (
    ("call_soon", "call_soon chain", 1_000_000),
    ("call_later", "call_later ({n} timers)", 200_000),
    ("task", "create_task + await", 200_000),
    ("sleep0", "`await asyncio.sleep(0)`", 500_000),
    ("sock_pingpong", "sock_sendall/sock_recv ping-pong (socketpair)", 200_000),
)


# --------------------------------------------------------------------------
# small helpers

def human_us(us):
    if not us:
        return "n/a"
    if us >= 10_000:
        return f"{us / 1000:.0f} ms"
    if us >= 1000:
        return f"{us / 1000:.1f} ms"
    return f"{us:.0f} µs"


def size_label(n):
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
    except OSError:
        return ""
    # skip asyncio's noise about writes to closed sockets
    lines = [ln for ln in lines if "socket.send() raised exception" not in ln]
    return " | ".join(lines[-n:])


def run_cmd(argv, timeout):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, f"timed out after {timeout:.0f}s"
    except OSError as e:
        return None, "", str(e)


class Failure(Exception):
    pass


# Filled by run_load when asked for (kernel=True): the last window's server CPU split
# (user and system seconds, scaled to the window as cpu is) and KernelCounters' counts.
LAST_WINDOW = {}


def run_load(argv, timeout, server_pid, warm, dur, kernel=False):
    """Run a load generator; also measure the server's CPU time over its measured window
    (after `warm` seconds, for `dur` seconds). Returns rc, stdout, stderr, cpu seconds.
    kernel: also `perf stat` the server over the window (LAST_WINDOW)."""
    LAST_WINDOW.clear()
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        return None, "", str(e), None
    cpu = None
    try:
        time.sleep(warm + 0.05)
        kc = KernelCounters(server_pid).start() if kernel else None
        c0, s0 = proc_cpu_seconds(server_pid), proc_cpu_split(server_pid)
        time.sleep(max(dur - 0.1, 0.1))
        c1, s1 = proc_cpu_seconds(server_pid), proc_cpu_split(server_pid)
        scale = dur / max(dur - 0.1, 0.1)
        if c0 is not None and c1 is not None:
            cpu = (c1 - c0) * scale
        if kc is not None:
            LAST_WINDOW["counts"] = kc.stop()
            if s0 and s1:
                LAST_WINDOW["user"], LAST_WINDOW["sys"] = (s1[0] - s0[0]) * scale, (s1[1] - s0[1]) * scale
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err, cpu
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, f"timed out after {timeout:.0f}s", None


# --------------------------------------------------------------------------
# servers

class Server:
    """A benchmark server subprocess pinned to the server core."""

    def __init__(self, argv, ready_timeout=20.0):
        self.errfile = tempfile.NamedTemporaryFile(prefix="bench-server-", suffix=".err", delete=False)
        cmd = ["taskset", "-c", SERVER_CPU, PY] + argv
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.errfile,
                                     stdin=subprocess.DEVNULL, cwd=REPO)
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"server not ready after {timeout:.0f}s: {self.stderr_tail()}"
                    self.stop()
                    raise Failure(msg)
                if sel.select(left):
                    line = self.proc.stdout.readline()
                    if not line:
                        try:
                            self.proc.wait(5)
                        except subprocess.TimeoutExpired:
                            pass
                        msg = f"server exited ({self.proc.returncode}) before ready: {self.stderr_tail()}"
                        self.stop()
                        raise Failure(msg)
                    if line.strip() == b"ready":
                        return
        finally:
            sel.close()

    def stderr_tail(self):
        self.errfile.flush()
        return tail(self.errfile.name)

    def check_alive(self):
        if self.proc.poll() is not None:
            raise Failure(f"server died during the run (exit {self.proc.returncode}): "
                          f"{self.stderr_tail()}")

    def problems(self):
        """A warning when the server logged errors (tracebacks) during the run."""
        self.errfile.flush()
        try:
            with open(self.errfile.name, errors="replace") as f:
                text = f.read()
        except OSError:
            return None
        n = text.count("Traceback (most recent call last)")
        if n or "Exception in callback" in text:
            return f"server logged {n or 'some'} exception(s): {tail(self.errfile.name, 3)}"
        return None

    def failure(self, msg):
        """A Failure carrying the server's last stderr lines, if any."""
        t = self.stderr_tail()
        return Failure(f"{msg}; server stderr: {t}" if t else msg)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        try:
            self.proc.stdout.close()
        except OSError:
            pass
        self.errfile.close()
        try:
            os.unlink(self.errfile.name)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# --------------------------------------------------------------------------
# measurements; each returns a dict with "value" (and latencies) or "error"

def window_figures(res, requests):
    """Adds run_load's kernel figures (LAST_WINDOW) to res, per request: user_us, sys_us and
    each KernelCounters count."""
    if not requests or not LAST_WINDOW:
        return
    if "user" in LAST_WINDOW:
        res["user_us"] = LAST_WINDOW["user"] * 1e6 / requests
        res["sys_us"] = LAST_WINDOW["sys"] * 1e6 / requests
    for k, v in (LAST_WINDOW.get("counts") or {}).items():
        res[k] = v / requests


def measure_echo(loop, mode, size, cfg):
    port = free_port()
    with Server([os.path.join(BENCH, "servers", "echo_server.py"), "--loop", loop, "--mode", mode,
                 "--addr", f"127.0.0.1:{port}"]) as srv:
        argv = ["taskset", "-c", CLIENT_CPU, ECHOCLIENT, "-addr", f"127.0.0.1:{port}",
                "-conns", "10", "-size", str(size),
                "-duration", str(cfg.echo_dur), "-warmup", str(cfg.echo_warm)]
        if getattr(cfg, "echo_rate", 0):  # paced: every loop measured at the same load
            argv += ["-rate", str(cfg.echo_rate)]
        rc, out, err, cpu = run_load(argv, cfg.echo_dur + cfg.echo_warm + 30, srv.proc.pid,
                                     cfg.echo_warm, cfg.echo_dur, kernel=getattr(cfg, "kernel", False))
        srv.check_alive()
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            raise srv.failure(f"echoclient failed ({rc}): {err.strip()[-300:]}")
        r = json.loads(lines[-1])
        if not r.get("rps"):
            raise srv.failure("no echo completed in the measured window: "
                          f"{r.get('error') or err.strip()[-300:] or 'the server stalled'}")
        res = {"value": r["rps"], "p50_us": r["p50_us"], "p99_us": r["p99_us"],
               "bytes": r["bytes"], "errors": r["errors"]}
        if cpu:
            res["cpu_us"] = cpu * 1e6 / (r["rps"] * cfg.echo_dur)
        window_figures(res, r["rps"] * cfg.echo_dur)
        if r["errors"]:
            res["warning"] = f"{r['errors']} client errors, first: {r.get('error')}"
        res["warning"] = res.get("warning") or srv.problems()
        if not res["warning"]:
            del res["warning"]
        return res


def http_check(port, size, depth=2, timeout=5.0):
    """Send `depth` pipelined GETs and verify that as many complete 200
    responses with a `size`-byte body come back."""
    req = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench-check\r\n\r\n" * depth
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(req)
        buf = b""
        got = 0
        deadline = time.monotonic() + timeout
        while got < depth:
            head_end = buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = buf[:head_end].decode("latin-1")
                if not head.startswith("HTTP/1.1 200"):
                    raise Failure(f"bad response status: {head.splitlines()[0]!r}")
                m = re.search(r"(?im)^content-length:\s*(\d+)", head)
                if not m:
                    raise Failure("response without Content-Length")
                total = head_end + 4 + int(m.group(1))
                if len(buf) >= total:
                    if int(m.group(1)) != size:
                        raise Failure(f"body is {m.group(1)} bytes, expected {size}")
                    buf = buf[total:]
                    got += 1
                    continue
            if time.monotonic() > deadline:
                raise Failure(f"only {got} of {depth} pipelined responses arrived")
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                raise Failure(f"timeout: {got} of {depth} pipelined responses arrived")
            if not chunk:
                raise Failure(f"connection closed after {got} of {depth} responses")
            buf += chunk
        if buf:
            raise Failure(f"{len(buf)} unexpected extra bytes after the responses")


def measure_http(loop, parser, size, depth, cfg, certs=None):
    """The HTTP server under wrk; with certs (cert, key) it serves HTTPS."""
    port = free_port()
    tls = ["--cert", certs[0], "--key", certs[1]] if certs else []
    with Server([os.path.join(BENCH, "servers", "http_server.py"), "--loop", loop, "--parser", parser,
                 "--size", str(size), "--addr", f"127.0.0.1:{port}"] + tls) as srv:
        url = f"{'https' if certs else 'http'}://127.0.0.1:{port}/"
        return under_wrk(srv, url, depth, cfg, None if certs else (lambda: http_check(port, size)))


def measure_asgi(loop, cfg):
    """uvicorn with an ASGI hello world (bench/servers/asgi_server.py) under wrk."""
    port = free_port()
    with Server([os.path.join(BENCH, "servers", "asgi_server.py"), "--loop", loop,
                 "--addr", f"127.0.0.1:{port}"]) as srv:
        return under_wrk(srv, f"http://127.0.0.1:{port}/", 1, cfg,
                         lambda: http_check(port, len(b"Hello, world!")))


def under_wrk(srv, url, depth, cfg, check):
    """wrk -t1 -c100 against a running server (`depth` pipelined requests per write);
    `check()`, when given, verifies the server's answers before and after the load."""
    if check is not None:
        try:
            check()
        except (Failure, OSError) as e:
            raise srv.failure(f"check before load: {e}")
    base = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c100"]
    script = ["-s", os.path.join(BENCH, "pipeline.lua"), url, "--", str(depth)] if depth > 1 else [url]
    if cfg.http_warm:
        run_cmd(base + [f"-d{cfg.http_warm}s"] + script, cfg.http_warm + 30)
        srv.check_alive()
    rc, out, err, cpu = run_load(base + [f"-d{cfg.http_dur}s", "--latency"] + script,
                                 cfg.http_dur + 30, srv.proc.pid, 0, cfg.http_dur,
                                 kernel=getattr(cfg, "kernel", False))
    srv.check_alive()
    res = parse_wrk(out)
    if res is None or not res["value"]:
        raise srv.failure(f"wrk failed ({rc}): {(err or out).strip()[-300:]}")
    if cpu:
        res["cpu_us"] = cpu * 1e6 / (res["value"] * cfg.http_dur)
    window_figures(res, res["value"] * cfg.http_dur)
    # wrk counts each response it can parse; a broken server still shows
    # up here as errors even when the throughput looks fine
    if res["errors"]:
        res["warning"] = f"wrk reported {res['errors']} socket errors / non-2xx responses"
    if check is not None:
        try:
            check()
        except (Failure, OSError) as e:
            raise srv.failure(f"check after load: {e}")
    res["warning"] = res.get("warning") or srv.problems()
    if not res["warning"]:
        del res["warning"]
    return res


def measure_micro(loop, bench, n, cfg):
    argv = ["taskset", "-c", SERVER_CPU, PY, os.path.join(BENCH, "micro.py"),
            "--loop", loop, "--bench", bench, "--n", str(n)]
    rc, out, err = run_cmd(argv, cfg.micro_timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        msg = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
        raise Failure(msg[-300:])
    return {"value": json.loads(lines[-1])["ops_per_s"]}


def measure_tls(loop, size, cfg):
    """TLS echo via bench/tls_bench.py (it pins its server to core 0 and its client to core 1)."""
    argv = [PY, os.path.join(BENCH, "tls_bench.py"), "--loop", loop, "--sizes", str(size),
            "--duration", str(cfg.echo_dur), "--warmup", str(cfg.echo_warm)]
    rc, out, err = run_cmd(argv, cfg.echo_dur + cfg.echo_warm + 60)
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    rows = [r for r in rows if r.get("size") == size]
    if rc != 0 or not rows or not rows[-1].get("rps"):
        msg = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
        raise Failure(msg[-300:])
    r = rows[-1]
    res = {"value": r["rps"], "p50_us": r.get("p50_us"), "p99_us": r.get("p99_us")}
    if r.get("cpu_us"):
        res["cpu_us"] = r["cpu_us"]
    if r.get("errors"):
        res["warning"] = f"{r['errors']} client errors"
    return res


def best_of(fn, repeat):
    """Best value of `repeat` attempts; an attempt that fails ends the cell."""
    best = None
    for _ in range(repeat):
        try:
            r = fn()
        except Failure as e:
            return {"error": str(e)}
        except Exception as e:  # a harness bug must not end the run
            return {"error": f"{type(e).__name__}: {e}"}
        if best is None or r["value"] > best["value"]:
            best = r
    return best


# --------------------------------------------------------------------------
# tables

class Table:
    """One results table: rows of configurations, one column per loop."""

    def __init__(self, title, columns, unit, latency=False):
        self.title = title
        self.columns = columns  # list of (key, label)
        self.unit = unit
        self.latency = latency
        self.rows = []  # (label, {key: result})

    def add(self, label, results):
        self.rows.append((label, results))

    def _ratio(self, res, a, b):
        ra, rb = res.get(a, {}), res.get(b, {})
        if ra.get("value") and rb.get("value"):
            return f"{ra['value'] / rb['value']:.2f}×"
        return "n/a"

    def markdown(self, notes):
        keys = [k for k, _ in self.columns]
        ratios = []
        if "goloop" in keys and "uvloop" in keys:
            ratios.append(("goloop", "uvloop"))
        if "goloop" in keys and "asyncio" in keys:
            ratios.append(("goloop", "asyncio"))
        head = [self.unit] + [lab for _, lab in self.columns] + [f"{a} vs {b} (> 1: {a} faster)" for a, b in ratios]
        out = [f"### {self.title}", "", "| " + " | ".join(head) + " |",
               "|" + "---|" * len(head)]
        for label, res in self.rows:
            cells = [label]
            for k in keys:
                cells.append(cell(res.get(k), notes, human))
            cells += [self._ratio(res, a, b) for a, b in ratios]
            out.append("| " + " | ".join(cells) + " |")
        if any((r or {}).get("cpu_us") for _, res in self.rows for r in res.values()):
            # With both cores busy (server on one, load generator on the other), requests/s
            # can be bounded by the load generator; the server's CPU time per request is not.
            cr = [(a, b) for a, b in ratios if a == "goloop"]
            out += ["", f"Server CPU time per request, µs, lower is better ({self.title.lower()}):", "",
                    "| " + " | ".join([self.unit] + [lab for _, lab in self.columns]
                                      + [f"{b}'s CPU / {a}'s (> 1: {a} uses less)" for a, b in cr]) + " |",
                    "|" + "---|" * (len(self.columns) + 1 + len(cr))]
            for label, res in self.rows:
                cells = [label]
                for k in keys:
                    r = res.get(k) or {}
                    cells.append(f"{r['cpu_us']:.2f}" if r.get("cpu_us") else "n/a")
                for a, b in cr:
                    ra, rb = res.get(a) or {}, res.get(b) or {}
                    cells.append(f"{rb['cpu_us'] / ra['cpu_us']:.2f}×"
                                 if ra.get("cpu_us") and rb.get("cpu_us") else "n/a")
                out.append("| " + " | ".join(cells) + " |")
        if self.latency:
            out += ["", f"Latency p50 / p99 ({self.title.lower()}):", "",
                    "| " + " | ".join([self.unit] + [lab for _, lab in self.columns]) + " |",
                    "|" + "---|" * (len(self.columns) + 1)]
            for label, res in self.rows:
                cells = [label]
                for k in keys:
                    r = res.get(k) or {}
                    if r.get("p50_us") is not None:
                        cells.append(f"{human_us(r['p50_us'])} / {human_us(r.get('p99_us'))}")
                    else:
                        cells.append("n/a")
                out.append("| " + " | ".join(cells) + " |")
        return "\n".join(out) + "\n"


def cell(r, notes, fmt):
    if r is None:
        return "n/a"
    if "error" in r:
        return f"error [{notes.ref(r['error'])}]"
    s = fmt(r["value"])
    if r.get("warning"):
        s += f" [{notes.ref(r['warning'])}]"
    return s


class Notes:
    def __init__(self):
        self.items = []

    def ref(self, msg):
        msg = " ".join(msg.split())
        if len(msg) > 400:
            msg = msg[:150] + " … " + msg[-240:]
        if msg not in self.items:
            self.items.append(msg)
        return self.items.index(msg) + 1

    def markdown(self):
        if not self.items:
            return ""
        return "\n".join(f"{i}. {m}" for i, m in enumerate(self.items, 1)) + "\n"


# --------------------------------------------------------------------------
# machine facts

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_busy(seconds=1.0):
    """Fraction of the machine's CPU time that was busy over `seconds`."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    try:
        t0, i0 = snap()
        time.sleep(seconds)
        t1, i1 = snap()
        return 1.0 - (i1 - i0) / max(1, t1 - t0)
    except OSError:
        return None


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def version_of(argv):
    rc, out, err = run_cmd(argv, 30)
    return (out or err).strip().splitlines()[0] if (out or err).strip() else "?"


def goloop_info():
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from harness import import_goloop, new_loop\n"
            "g = import_goloop(); v = getattr(g, '__version__', '?')\n"
            "l = new_loop('goloop'); l.close(); print(v, getattr(g, '__file__', ''))") % BENCH
    rc, out, err = run_cmd([PY, "-c", code], 60)
    if rc == 0:
        return out.strip(), None
    msg = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
    return None, msg


def machine_facts(loops):
    facts = {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "go": version_of(["go", "version"]),
        "wrk": version_of(["wrk", "--version"]).split("[")[0].strip() if shutil.which("wrk") else None,
    }
    for mod in ("uvloop", "httptools"):
        try:
            m = __import__(mod)
            facts[mod] = getattr(m, "__version__", "?")
        except Exception as e:
            facts[mod] = None
            facts[mod + "_error"] = str(e)
    if "goloop" in loops:
        facts["goloop"], facts["goloop_error"] = goloop_info()
    return facts


# --------------------------------------------------------------------------

class Config:
    def __init__(self, quick):
        if quick:
            self.echo_warm, self.echo_dur = 0.2, 0.8
            self.http_warm, self.http_dur = 0, 1
            self.micro_scale = 0.2
            self.micro_timeout = 60
        else:
            self.echo_warm, self.echo_dur = 1, 5
            self.http_warm, self.http_dur = 1, 10
            self.micro_scale = 1.0
            self.micro_timeout = 180


def build_echoclient():
    os.makedirs(BIN, exist_ok=True)
    rc, out, err = _build_in_repo()
    if rc != 0:
        return (err or out).strip()[-500:] or f"go build exit {rc}"
    return None


def _build_in_repo():
    try:
        p = subprocess.run(["go", "build", "-o", ECHOCLIENT, "./bench/echoclient"],
                           capture_output=True, text=True, timeout=600, cwd=REPO)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "", str(e)


def say(*a):
    print(*a, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short durations (whole run in about 2 minutes)")
    ap.add_argument("--only", default="echo,http,micro,tls", help="comma-separated sections: echo,http,micro,tls")
    ap.add_argument("--loops", default=",".join(ALL_LOOPS), help="comma-separated: asyncio,uvloop,goloop")
    ap.add_argument("--repeat", type=int, default=1, help="best of N attempts per cell (default 1)")
    ap.add_argument("--results", action="store_true",
                    help="write each table under bench/results/ and render BENCHMARKS.md from all results")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the machine to be idle (<15%% busy)")
    args = ap.parse_args()

    t_start = time.monotonic()
    started = datetime.datetime.now().astimezone()
    command = "python3 bench/run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    cfg = Config(args.quick)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in sections:
        if s not in ("echo", "http", "micro", "tls"):
            ap.error(f"unknown section {s!r}")
    loops = [l.strip() for l in args.loops.split(",") if l.strip()]
    for l in loops:
        if l not in ALL_LOOPS:
            ap.error(f"unknown loop {l!r}")
    if not shutil.which("taskset"):
        ap.error("taskset is required")

    remarks = []
    if "uvloop" in loops and importlib.util.find_spec("uvloop") is None:
        loops.remove("uvloop")
        remarks.append("uvloop is not installed: its columns are skipped.")
    if "http" in sections and not shutil.which("wrk"):
        sections.remove("http")
        remarks.append("wrk is not installed: the HTTP section is skipped.")

    busy = cpu_busy(1.0)
    waited = 0.0
    while busy is not None and busy > 0.15 and waited < args.wait_idle:
        say(f"# machine {busy:.0%} busy, waiting for it to settle ...")
        time.sleep(4)
        waited += 5
        busy = cpu_busy(1.0)
    if busy is not None and busy > 0.10:
        remarks.append(f"The machine was {busy:.0%} busy before the run started (other processes): "
                       "figures may be noisier than usual.")
    t_start = time.monotonic()  # the idle wait does not count
    load_start = loadavg()
    facts = machine_facts(loops)
    if "goloop" in loops and facts.get("goloop_error"):
        remarks.append(f"goloop does not start a loop: {facts['goloop_error']}")

    say(f"# {command}")
    say(f"# {facts['cpu']} × {facts['nproc']}, Python {facts['python']}, {facts['go']}, "
        f"uvloop {facts.get('uvloop')}, httptools {facts.get('httptools')}, "
        f"goloop {facts.get('goloop') or 'unavailable'}")
    for r in remarks:
        say(f"# note: {r}")

    notes = Notes()
    tables = []
    raw = []
    labels = {l: l for l in loops}

    def record(section, config, key, res, extra=""):
        raw.append({"section": section, "config": config, "column": key, **res})
        if "error" in res:
            say(f"  {section:5} {config:24} {key:17} error: {res['error'][:160]}")
        else:
            lat = ""
            if res.get("p50_us") is not None:
                lat = f"  p50 {human_us(res['p50_us'])}  p99 {human_us(res.get('p99_us'))}"
            warn = f"  ! {res['warning'][:100]}" if res.get("warning") else ""
            say(f"  {section:5} {config:24} {key:17} {human(res['value']):>8} {extra}{lat}{warn}")

    def show(table):
        say("")
        say(table.markdown(notes))
        tables.append(table)

    # ---------------------------------------------------------------- echo
    if "echo" in sections:
        say(f"\n## echo: 10 connections, {cfg.echo_warm}s warm-up + {cfg.echo_dur}s "
            "(Go echoclient on core 1)")
        err = build_echoclient()
        table = Table("Echo, requests/s (10 connections)", [(l, labels[l]) for l in loops],
                      "server", latency=True)
        for mode in ECHO_MODES:
            for size in ECHO_SIZES:
                conf = f"{mode} {size_label(size)}"
                results = {}
                for l in loops:
                    if err:
                        res = {"error": f"cannot build echoclient: {err}"}
                    else:
                        res = best_of(lambda: measure_echo(l, mode, size, cfg), args.repeat)
                    results[l] = res
                    record("echo", conf, l, res, "req/s")
                table.add(conf, results)
        show(table)

    # ---------------------------------------------------------------- http
    if "http" in sections:
        say(f"\n## http: wrk -t1 -c100, {cfg.http_warm}s warm-up + {cfg.http_dur}s")
        columns = []
        for l in loops:
            if l == "goloop":
                columns.append(("goloop", "goloop (goloop.http)", "goloop", "goloop"))
                columns.append(("goloop+httptools", "goloop + httptools", "goloop", "httptools"))
            else:
                columns.append((l, f"{l} + httptools", l, "httptools"))
        table = Table("HTTP keep-alive, requests/s (wrk -t1 -c100)",
                      [(k, lab) for k, lab, _, _ in columns], "response", latency=True)
        for label, size, depth in HTTP_CONFIGS:
            results = {}
            for key, _, l, parser in columns:
                res = best_of(lambda: measure_http(l, parser, size, depth, cfg), args.repeat)
                results[key] = res
                record("http", label, key, res, "req/s")
            table.add(label, results)
        show(table)
        try:
            import uvicorn  # noqa: F401
        except ImportError:
            say("uvicorn is not installed: skipping the ASGI server")
        else:
            table = Table("uvicorn (ASGI hello world, its httptools protocol), requests/s (wrk -t1 -c100)",
                          [(l, labels[l]) for l in loops], "server", latency=True)
            results = {}
            for l in loops:
                res = best_of(lambda: measure_asgi(l, cfg), args.repeat)
                results[l] = res
                record("asgi", "uvicorn hello world", l, res, "req/s")
            table.add("uvicorn, 13 B", results)
            show(table)

    # ---------------------------------------------------------------- micro
    if "micro" in sections:
        say(f"\n## micro: one process per figure on core 0 (n scaled ×{cfg.micro_scale})")
        table = Table("Loop microbenchmarks, operations/s (one core)",
                      [(l, labels[l]) for l in loops], "benchmark")
        for bench, label, n in MICRO_BENCHES:
            results = {}
            nn = max(1000, int(n * cfg.micro_scale))
            for l in loops:
                res = best_of(lambda: measure_micro(l, bench, nn, cfg), args.repeat)
                results[l] = res
                record("micro", bench, l, res, "ops/s")
            table.add(label.format(n=f"{nn // 1000}k" if nn >= 1000 else nn), results)
        show(table)

    # ---------------------------------------------------------------- tls
    if "tls" in sections:
        say(f"\n## tls: TLS echo, 10 connections, {cfg.echo_warm}s warm-up + {cfg.echo_dur}s "
            "(Go TLS client, core 1)")
        table = Table("TLS echo, requests/s (10 connections)", [(l, labels[l]) for l in loops],
                      "server", latency=True)
        for size in ECHO_SIZES:
            conf = f"TLS {size_label(size)}"
            results = {}
            for l in loops:
                res = best_of(lambda: measure_tls(l, size, cfg), args.repeat)
                results[l] = res
                record("tls", conf, l, res, "req/s")
            table.add(conf, results)
        show(table)
        if shutil.which("wrk"):
            with tempfile.TemporaryDirectory(prefix="bench-https-") as d:
                _, cert, key = make_certs(d)
                table = Table("HTTPS keep-alive, requests/s (wrk -t1 -c100)",
                              [(l, labels[l]) for l in loops], "response", latency=True)
                for label, size in (("13 B", 13), ("1 KiB", 1024), ("100 KiB", 102400)):
                    results = {}
                    for l in loops:
                        parser = "goloop" if l == "goloop" else "httptools"
                        res = best_of(lambda: measure_http(l, parser, size, 1, cfg, (cert, key)),
                                      args.repeat)
                        results[l] = res
                        record("https", label, l, res, "req/s")
                    table.add(label, results)
                show(table)

    elapsed = time.monotonic() - t_start
    load_end = loadavg()
    busy_end = cpu_busy(0.5)
    if busy_end is not None and busy_end > 0.10:
        remarks.append(f"The machine was still {busy_end:.0%} busy right after the run (other processes).")
    say(f"# total time {elapsed:.0f}s")
    if notes.items:
        say("# errors and warnings in the tables above (the [n] in a cell):")
        say(notes.markdown())

    if args.results:
        write_results(tables, notes, command, cfg, args, facts)
        import render
        render.main([])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "date": started.isoformat(), "seconds": elapsed,
                       "machine": facts, "results": raw}, f, indent=1)
        say(f"# wrote {args.json}")


PIN = ("Server on core 0 (`taskset -c 0`), load generator on core 1; a fresh server process per "
       "figure. Server CPU per request: the server process's CPU time (all threads, user + system) "
       "over the measured window divided by the requests answered in it; with both cores busy the "
       "load generator can bound requests/s, so CPU per request is the fairer figure.")
# Table title -> (result id, group, short title, row label, method, --only section)
RESULT_TABLES = {
    "Echo": ("loop-echo", "The event loop", "Echo, 10 connections", "echo",
             "`bench/echoclient` (Go, one epoll thread), 10 connections, each sends a message and waits "
             "for the whole echo before the next; {echo_warm} s warm-up then {echo_dur} s measured; every "
             "echoed byte is verified. Servers: `bench/servers/echo_server.py` in the vmbench shapes "
             "(Protocol, BufferedProtocol, streams with `reader.read(102400)` + drain, `sock_accept/"
             "sock_recv/sock_sendall`). " + PIN),
    "HTTP keep-alive": ("loop-http", "The event loop", "HTTP keep-alive, wrk -t1 -c100", "http",
                        "`bench/servers/http_server.py` (asyncio.Protocol + an HttpRequestParser, fixed "
                        "body, keep-alive) under `wrk -t1 -c100` for {http_dur} s after {http_warm} s of "
                        "warm-up; pipelined with `bench/pipeline.lua` (16 requests per write). Each server "
                        "is checked with two pipelined requests before and after the load. " + PIN),
    "uvicorn": ("loop-uvicorn", "The event loop under other servers",
                "uvicorn (ASGI hello world, its httptools protocol)", "http",
                "`bench/servers/asgi_server.py`, an ASGI hello world on uvicorn's httptools protocol, the "
                "loop given as users do (`--loop goloop:new_event_loop`), under `wrk -t1 -c100` for "
                "{http_dur} s. " + PIN),
    "Loop microbenchmarks": ("loop-micro-run", "The event loop", "Loop microbenchmarks (bench/run.py)", "micro",
                             "`bench/micro.py`, one process per figure on core 0."),
    "TLS echo": ("loop-tls", "The event loop: TLS", "TLS echo, 10 connections", "tls",
                 "`bench/tls_bench.py`'s TLS echo server (asyncio.Protocol over `ssl=`) and "
                 "`bench/echoclient -tls` (Go crypto/tls), 10 connections, {echo_dur} s. " + PIN),
    "HTTPS keep-alive": ("loop-https", "The event loop: TLS", "HTTPS keep-alive, wrk -t1 -c100", "tls",
                         "`bench/servers/http_server.py --cert` (goloop with goloop.http, the others "
                         "with httptools) under `wrk -t1 -c100` over HTTPS for {http_dur} s. " + PIN),
}


def write_results(tables, notes, command, cfg, args, facts):
    """Each table as result files: requests/s (or operations/s), CPU µs per request, latency."""
    from results import write_result
    for t in tables:
        key = next(k for k in RESULT_TABLES if t.title.startswith(k))
        rid, group, title, section, method = RESULT_TABLES[key]
        base = {"loop-echo": 10, "loop-http": 20, "loop-uvicorn": 10, "loop-micro-run": 31,
                "loop-tls": 10, "loop-https": 20}[rid]
        method = method.format(**vars(cfg))
        if args.quick:
            method += " Quick mode: short runs, rough figures."
        if args.repeat > 1:
            method += f" Best of {args.repeat} attempts per cell."
        cmd = f"python3 bench/run.py --only {section} --results"
        labels = [lab for _, lab in t.columns]
        keys = [k for k, _ in t.columns]
        goloop = dict(t.columns).get("goloop")
        peers = [dict(t.columns)[k] for k in ("uvloop", "asyncio") if k in keys]
        extra = {"goloop": goloop} if goloop and goloop != "goloop" else {}
        common = dict(group=group, command=cmd, method=method, row_label=t.unit,
                      modules=("uvloop", "httptools", "uvicorn"))
        unit = "ops/s" if section == "micro" else "req/s"

        def rows(get):
            out = []
            for label, res in t.rows:
                row, errors = {"row": label}, {}
                for k, lab in t.columns:
                    r = res.get(k) or {}
                    row[lab] = get(r) if "error" not in r else None
                    if "error" in r:
                        errors[lab] = r["error"]
                if errors:
                    row["errors"] = errors
                out.append(row)
            return out
        write_result(rid, title=f"{title}, {'operations' if section == 'micro' else 'requests'}/s",
                     better="higher", columns=["row"] + labels, units={l: unit for l in labels},
                     rows=rows(lambda r: r.get("value")), compare=peers if goloop else None, order=base, **extra, **common)
        if any((r or {}).get("cpu_us") for _, res in t.rows for r in res.values()):
            write_result(rid + "-cpu", title=f"{title}, server CPU µs per request", better="lower",
                         columns=["row"] + labels, units={l: "µs" for l in labels},
                         rows=rows(lambda r: round(r["cpu_us"], 2) if r.get("cpu_us") else None),
                         compare=peers if goloop else None, order=base + 1, **extra, **common)
        if t.latency:
            lat = [f"{l} p50 / p99" for l in labels]
            out = []
            for row in rows(lambda r: (f"{human_us(r['p50_us'])} / {human_us(r.get('p99_us'))}"
                                       if r.get("p50_us") is not None else None)):
                out.append({"row": row["row"], **{f"{l} p50 / p99": row.get(l) for l in labels}})
            write_result(rid + "-latency", title=f"{title}, latency p50 / p99", better="lower",
                         columns=["row"] + lat, rows=out, order=base + 2, **common)


if __name__ == "__main__":
    main()
