#!/usr/bin/env python3
"""goloop serve against uvicorn and Granian: the table of BENCHMARKS.md's goloop serve sections.

    python3 bench/serve_bench.py [--duration 5] [--rounds 3] [--rows hello,json,...] [--servers ...]

Workloads (bench/servers/serve_apps.py): a raw ASGI hello world, a Starlette JSON endpoint, a FastAPI
endpoint with a path parameter and a Pydantic response, the hello world 16-deep pipelined
(bench/pipeline.lua), a 100 KiB response, and a 100 KiB request body read (POSTs). Servers: uvicorn (httptools) on the asyncio,
uvloop and goloop loops; Granian (ASGI, --workers 1 --runtime-threads 1) on asyncio and uvloop;
`goloop serve`; and the ceiling, "go fasthttp" (bench/servers/ceiling: Go's fastest HTTP/1.1 server on
one thread with no Python at all, for the rows whose answer needs no framework: hello, 16
pipelined, 100 KiB, HTTPS). Each server is a fresh process tree pinned to core 0 (`taskset -c 0`, which
its threads and child processes inherit: Go's threads, Granian's worker and Rust threads),
after a 1 s warm-up wrk -t1 -cN runs on core 1. Reported: requests/s, the server's CPU µs per
request (utime+stime of every thread of every process of its tree, over the measured run,
divided by the requests wrk counted) and wrk's p50/p99 latency. With --rounds N each cell is
the run with the least CPU per request (the machine is shared: the best of N is the steadiest).

HTTPS rows (--https adds "https"; "https-big" is the 100 KiB response over HTTPS) run the
servers that take a certificate: uvicorn, Granian, and `goloop serve` once it has
--ssl-certfile (the row says "not supported" until then).
Needs wrk, uvicorn, uvloop, httptools, granian, starlette, fastapi (make bench-deps).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import free_port, make_certs, parse_wrk, stop, tree_cpu, wait_port, wrk_post  # noqa: E402
PY = sys.executable
APPS = os.path.join(HERE, "servers")  # serve_apps.py
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([APPS, os.path.join(REPO, "pyshim"), os.environ.get("PYTHONPATH", "")]))
SERVER_CPU, CLIENT_CPU = "0", "1"

# name -> (app in serve_apps, path, pipeline depth, tls)
ROWS = {
    "hello": ("hello world", "hello", "/", 1, False),
    "json": ("Starlette JSON", "starlette", "/json", 1, False),
    "fastapi": ("FastAPI path param + Pydantic", "fastapi", "/items/42", 1, False),
    "pipeline": ("hello world, 16 pipelined", "hello", "/", 16, False),
    "big": ("100 KiB response", "big", "/", 1, False),
    "upload": ("100 KiB request body read", "upload", "/", 1, False),
    "https": ("hello world, HTTPS", "hello", "/", 1, True),
    "https-big": ("100 KiB response, HTTPS", "big", "/", 1, True),
}
# rows whose requests are POSTs with a body of this many bytes
BODIES = {"upload": 100 * 1024}
SERVERS = ["uvicorn+asyncio", "uvicorn+uvloop", "uvicorn+goloop", "granian+asyncio", "granian+uvloop",
           "goloop serve", "go fasthttp"]
# not run unless named: goloop serve with a goroutine per connection (GOLOOP_SERVE_READERS)
GOROUTINES = "goloop serve goroutines"
# The ceiling: Go's fastest HTTP/1.1 server (bench/servers/ceiling), one thread, no
# Python: what the hello and big apps answer, answered with no application cost at all.
CEILING_APPS = ("hello", "big")


def ceiling_binary():
    """bench/servers/ceiling built once into build/ (None: Go or the module proxy is not available)."""
    out = os.path.join(REPO, "build", "ceiling-fasthttp")
    if not os.path.exists(out):
        go = shutil.which("go") or "/usr/local/go/bin/go"
        try:
            subprocess.run([go, "build", "-o", out, "./bench/servers/ceiling"], cwd=REPO, check=True,
                           capture_output=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"# go fasthttp: not built ({exc})", flush=True)
            return None
    return out


def goloop_serve_has_tls() -> bool:
    sys.path.insert(0, os.path.join(REPO, "pyshim"))
    try:
        from goloop.serve import server as _serve
    except ImportError:
        return False
    return "ssl_certfile" in getattr(_serve, "SUPPORTED_OPTIONS", {})


def server_argv(name, app, port, certs):
    """The command line of server `name` serving serve_apps:app on port (None: unsupported)."""
    target = f"serve_apps:{app}"
    if name.startswith("uvicorn+"):
        loop = name.split("+")[1]
        loop = "goloop:new_event_loop" if loop == "goloop" else loop
        argv = [PY, "-m", "uvicorn", target, "--app-dir", APPS, "--host", "127.0.0.1", "--port", str(port),
                "--loop", loop, "--http", "httptools", "--no-access-log", "--lifespan", "off",
                "--log-level", "warning"]
        if certs:
            argv += ["--ssl-certfile", certs[0], "--ssl-keyfile", certs[1]]
        return argv
    if name.startswith("granian+"):
        argv = [PY, "-m", "granian", "--interface", "asgi", "--workers", "1", "--runtime-threads", "1",
                "--loop", name.split("+")[1], "--no-ws", "--log-level", "warning", "--host", "127.0.0.1",
                "--port", str(port)]
        if certs:
            argv += ["--ssl-certificate", certs[0], "--ssl-keyfile", certs[1]]
        return argv + [target]
    if name == GOROUTINES:
        argv = server_argv("goloop serve", app, port, certs)
        return argv and ["env", "GOLOOP_SERVE_READERS=goroutines", *argv]
    if name == "goloop serve":
        argv = [PY, "-P", "-m", "goloop", "serve", target, "--app-dir", APPS, "--port", str(port),
                "--no-access-log", "--lifespan", "off", "--log-level", "warning"]
        if certs:
            if not goloop_serve_has_tls():
                return None
            argv += ["--ssl-certfile", certs[0], "--ssl-keyfile", certs[1]]
        return argv
    if name == "go fasthttp":
        binary = ceiling_binary() if app in CEILING_APPS else None
        if binary is None:
            return None
        argv = [binary, "-addr", f"127.0.0.1:{port}", "-app", app]
        if certs:
            argv += ["-cert", certs[0], "-key", certs[1]]
        return argv
    raise ValueError(name)


def run_one(argv, port, path, duration, conns, depth, tls, env=None, server_cpu=SERVER_CPU, client_cpu=CLIENT_CPU,
            body=0):
    """One measured run (a dict of parse_wrk's plus "cpu_us"); server_cpu/client_cpu None: not pinned;
    body: POST requests with a body of that many bytes."""
    # stderr to a file, not a pipe: a server logging more than a pipe holds (tracebacks of
    # the requests wrk cut off at its end) would block on it.
    errf = tempfile.TemporaryFile()
    pin = lambda cpu: ["taskset", "-c", cpu] if cpu else []  # noqa: E731
    proc = subprocess.Popen([*pin(server_cpu), *argv], env=env or ENV, stdout=subprocess.DEVNULL,
                            stderr=errf, cwd=HERE)
    proc.errf = errf
    try:
        wait_port(port, proc)
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}"
        wrk = [*pin(client_cpu), "wrk", "-t1", "-c", str(conns), "--latency"]
        if depth > 1:
            wrk += ["-s", os.path.join(HERE, "pipeline.lua")]
        elif body:
            lua = os.path.join(tempfile.gettempdir(), f"goloop-post-{body}.lua")
            with open(lua, "w") as f:
                f.write(wrk_post(body))
            wrk += ["-s", lua]
        tail = ["--", str(depth)] if depth > 1 else []
        subprocess.run(wrk + ["-d1s", url] + tail, capture_output=True, timeout=60)  # warm-up
        c0 = tree_cpu(proc.pid)
        out = subprocess.run(wrk + [f"-d{duration}s", url] + tail, capture_output=True, text=True,
                             timeout=duration + 60).stdout
        c1 = tree_cpu(proc.pid)
        res = parse_wrk(out)
        if res is None or not res.get("n"):
            raise RuntimeError("wrk output: " + out[-400:])
        res["cpu_us"] = (c1 - c0) * 1e6 / res["n"]
        return res
    finally:
        stop(proc, 10)
        errf.close()


def fmt_ms(us):
    """wrk's latency in ms; "n/a" where it reports none (pipelined requests: its script sends them)."""
    return f"{us / 1e3:.2f}" if us else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rows", default="hello,json,fastapi,pipeline,big", help=",".join(ROWS))
    ap.add_argument("--servers", default=",".join(SERVERS), help=",".join(SERVERS + [GOROUTINES]))
    ap.add_argument("--https", action="store_true", help="add the HTTPS row")
    ap.add_argument("--results", action="store_true",
                    help="write the table under bench/results/ (serve-asgi-*) and render BENCHMARKS.md")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed")
    rows = args.rows.split(",") + (["https"] if args.https and "https" not in args.rows else [])
    servers = args.servers.split(",")
    best: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(tmp)[1:] if any(ROWS[r][4] for r in rows) else None
        for rnd in range(args.rounds):
            for row in rows:
                title, app, path, depth, tls = ROWS[row]
                for name in servers:
                    port = free_port()
                    argv = server_argv(name, app, port, certs if tls else None)
                    if argv is None:
                        best[(row, name)] = "no Python app" if name == "go fasthttp" else "not supported"
                        continue
                    try:
                        r = run_one(argv, port, path, args.duration, args.connections, depth, tls,
                                    body=BODIES.get(row, 0))
                    except Exception as exc:  # noqa: BLE001 (a row that fails is reported, not fatal)
                        print(f"# {title} / {name}: failed: {exc}", flush=True)
                        best.setdefault((row, name), f"failed: {exc}")
                        continue
                    print(f"# round {rnd + 1} {title} / {name}: {r['value']:,.0f} req/s, {r['cpu_us']:.2f} µs CPU/req, "
                          f"p50 {fmt_ms(r.get('p50_us'))} ms, p99 {fmt_ms(r.get('p99_us'))} ms"
                          + (f", {r['errors']} errors" if r["errors"] else ""), flush=True)
                    old = best.get((row, name))
                    if not isinstance(old, dict) or r["cpu_us"] < old["cpu_us"]:
                        best[(row, name)] = r
    print_table(best, rows, servers, args)
    if args.results:
        write_results(best, rows, servers, args)


def print_table(best, rows, servers, args):
    """The table a newcomer reads: "n/a" where a figure does not exist, goloop serve's advantage
    as a ratio where more than 1 means goloop serve used less CPU per request, and any error in
    its cell with a footnote saying what it was."""
    print(f"\nwrk -t1 -c{args.connections} -d{args.duration}s on core {CLIENT_CPU}, server tree on core {SERVER_CPU}"
          f", best of {args.rounds} by CPU/request\n")
    print("| workload | server | requests/s | server CPU µs/request | goloop serve's advantage: "
          "server's CPU / goloop serve's (> 1: goloop serve uses less) | p50 ms | p99 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    notes: list[str] = []

    def note(msg):
        msg = " ".join(str(msg).split())
        if len(msg) > 300:  # a traceback: its end says what failed
            msg = "... " + msg[-300:]
        if msg not in notes:
            notes.append(msg)
        return f"[{notes.index(msg) + 1}]"
    for row in rows:
        title = ROWS[row][0]
        mine = best.get((row, "goloop serve"))
        for name in servers:
            r = best.get((row, name))
            if not isinstance(r, dict):
                if r is None:
                    continue
                cell = f"error {note(r)}" if r.startswith("failed") else r
                print(f"| {title} | {name} | {cell} | n/a | n/a | n/a | n/a |")
                continue
            if name == "goloop serve":
                ratio = "(itself)"
            elif isinstance(mine, dict):
                ratio = f"{r['cpu_us'] / mine['cpu_us']:.2f}x"
            else:
                ratio = "n/a"
            errs = ""
            if r.get("errors"):
                errs = " " + note(f"wrk counted {r['errors']} socket errors or non-2xx answers")
            print(f"| {title} | {name} | {r['value']:,.0f}{errs} | {r['cpu_us']:.1f} | {ratio} | {fmt_ms(r.get('p50_us'))} "
                  f"| {fmt_ms(r.get('p99_us'))} |")
    print()
    if any(ROWS[r][3] > 1 for r in rows):
        print("Pipelined rows: wrk's script sends 16 requests per write and wrk times few of them: "
              "their latency, n/a where wrk timed none, is not comparable with the other rows'.")
    for i, n in enumerate(notes, 1):
        print(f"[{i}] {n}")


def write_results(best, rows, servers, args):
    """The table as three result files (CPU per request, requests/s, p99), replacing the
    rows this run measured in the committed ones and keeping the others (and their compared
    columns and notes)."""
    import json
    import render
    from results import RESULTS, write_result
    method = ("Each server a fresh process tree pinned to core 0 (its threads and child processes "
              f"inherit it), `wrk -t1 -c{args.connections}` on core 1 after a 1 s warm-up, "
              f"{args.duration} s measured; each cell the best of {args.rounds} round(s) by CPU per "
              "request. Server CPU per request: utime + stime of every thread of every process of the "
              "server's tree over the measured run, divided by the requests wrk counted. Granian runs "
              "`--interface asgi --workers 1 --runtime-threads 1`, uvicorn its httptools protocol. "
              "\"go fasthttp\" is `bench/servers/ceiling`: Go's fastest HTTP/1.1 server on one thread "
              "with no Python at all, the ceiling, for the rows whose answer needs no framework. "
              "Workloads: `bench/servers/serve_apps.py`.")
    for rid, key, unit, better, title in (
            ("serve-asgi-cpu", "cpu_us", "µs", "lower", "server CPU µs per request"),
            ("serve-asgi-rps", "value", "req/s", "higher", "requests/s"),
            ("serve-asgi-p99", "p99_us", "ms", "lower", "p99 latency, ms")):
        old, prev = {}, {}
        path = os.path.join(RESULTS, rid + ".json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                prev = json.load(f)
            old = {r["row"]: r for r in prev["rows"]}
        table = {}
        for row in rows:
            label = ROWS[row][0]
            cells = {"row": label}
            errors = {}
            for name in servers:
                r = best.get((row, name))
                if isinstance(r, dict):
                    v = r.get(key)
                    if key == "p99_us":
                        v = round(v / 1e3, 2) if v else None
                    elif key == "cpu_us":
                        v = round(v, 1)
                    else:
                        v = round(v)
                    cells[name] = v
                else:
                    cells[name] = None
                    if isinstance(r, str) and r.startswith("failed"):
                        errors[name] = r
            if errors:
                cells["errors"] = errors
            table[label] = cells
        merged = [table.pop(r, None) or old[r] for r in old] + list(table.values())
        # (the rows of the whole table, which runs of different rows may have written)
        labels = {r["row"] for r in merged}
        every = [k for k, v in ROWS.items() if v[0] in labels]
        command = (f"python3 bench/serve_bench.py --results --duration {args.duration} --rounds {args.rounds}"
                   f" --rows {','.join(every)}")
        caveat = (" With both cores busy wrk can bound requests/s: CPU per request (the table above) is "
                  "the fairer figure.") if key == "value" else ""
        write_result(rid, group="goloop serve (ASGI)", title=f"goloop serve against uvicorn and Granian: {title}",
                     command=command, method=method + caveat, better=better, columns=["row"] + servers,
                     units={s: unit for s in servers}, rows=merged, goloop="goloop serve",
                     compare=prev.get("compare") or [s for s in ("uvicorn+uvloop", "granian+uvloop") if s in servers],
                     notes=prev.get("notes"),
                     order={"serve-asgi-cpu": 10, "serve-asgi-rps": 11, "serve-asgi-p99": 12}[rid],
                     row_label="workload", modules=("uvicorn", "uvloop", "granian", "starlette", "fastapi"))
    render.main([])


if __name__ == "__main__":
    main()
