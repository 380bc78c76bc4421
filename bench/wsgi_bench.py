#!/usr/bin/env python3
"""goloop serve --interface wsgi against the WSGI servers people use: the table of BENCHMARKS.md's
"goloop serve: WSGI" section.

    python3 bench/wsgi_bench.py [--duration 5] [--rounds 3] [--rows raw,flask,flask_db,django]
                                [--servers ...] [--free-threaded /opt/python/3.13t/bin/python3]

Rows (bench/servers/wsgi_apps.py, wsgi_flask.py, wsgi_django.py): a raw WSGI hello world, Flask's hello world, a
Flask endpoint reading one SQLite row by id, Django's hello world (startproject's middleware).
Servers, one worker each: gunicorn (sync worker; gthread worker with 4 threads), uWSGI (pyuwsgi,
one process, --http11-socket), waitress (its default 4 threads), Granian --interface wsgi
(--workers 1 --runtime-threads 1), bjoern (when it installs: it needs libev), meinheld (does not
build on current CPythons: reported as such) and goloop serve --interface wsgi. No server writes
an access log. Each server is a fresh process tree on core 0 (`taskset -c 0`), wrk -t1 -cN
--latency on core 1 after a 1 s warm-up (bench/serve_bench.py's run_one). Reported: requests/s,
CPU µs per request over the server's whole process tree (utime+stime of every thread of every
process, from /proc, before/after the measured run, over the requests wrk counted), p99 latency;
with --rounds N each cell is the run with the least CPU per request.

Then the application's own cost: each row's app called in-process in a loop (core 0) with a
prepared environ, no server and no socket (the floor any server pays), measured after each
round's runs of that row (the least of the rounds), and each server's own cost = its row's CPU
per request - that.

--free-threaded PY: goloop serve on a free-threaded interpreter (3.13t), a CPU-bound handler
(wsgi_apps:cpu, ~1 ms of Python), --threads 1 against --threads 2, server and wrk not pinned
(two cores): with the GIL gone, two threads should answer near twice the requests.
Needs wrk, gunicorn, pyuwsgi, waitress, granian, flask, django (make bench-deps).
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
APPS = os.path.join(HERE, "servers")
sys.path.insert(0, HERE)
from harness import free_port  # noqa: E402
from serve_bench import fmt_ms, run_one  # noqa: E402

PY = sys.executable

# name -> (title, target module:attr, path)
ROWS = {
    "raw": ("raw WSGI hello world", "wsgi_apps:raw", "/"),
    "flask": ("Flask hello world", "wsgi_flask:flask_hello", "/"),
    "flask_db": ("Flask, one SQLite row by id", "wsgi_flask:flask_db", "/items/42"),
    "django": ("Django hello world", "wsgi_django:application", "/"),
}
SERVERS = ["gunicorn sync", "gunicorn gthread", "uwsgi", "waitress", "granian", "bjoern", "meinheld", "goloop serve"]


def installed(module):
    return subprocess.run([PY, "-c", f"import {module}"], capture_output=True).returncode == 0


def server_argv(name, target, port, py=PY, threads=None):
    """The command line of server `name` serving target on port (None: not installed)."""
    mod, _, attr = target.partition(":")
    if name.startswith("gunicorn"):
        argv = [py, "-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "--log-level", "warning"]
        argv += ["-k", "sync"] if name == "gunicorn sync" else ["-k", "gthread", "--threads", "4"]
        return argv + [target]
    if name == "uwsgi":
        uwsgi = os.path.join(os.path.dirname(py), "uwsgi")
        if not os.path.exists(uwsgi):
            return None
        return [uwsgi, "--http11-socket", f"127.0.0.1:{port}", "--module", target, "--processes", "1",
                "--disable-logging", "--pythonpath", APPS, "--die-on-term", "--need-app"]
    if name == "waitress":
        return [py, "-m", "waitress", "--listen", f"127.0.0.1:{port}", target]
    if name == "granian":
        return [py, "-m", "granian", "--interface", "wsgi", "--workers", "1", "--runtime-threads", "1",
                "--log-level", "warning", "--host", "127.0.0.1", "--port", str(port), target]
    if name == "bjoern":
        if not installed("bjoern"):
            return None
        return [py, "-c", f"import bjoern, {mod}; bjoern.run({mod}.{attr}, '127.0.0.1', {port})"]
    if name == "meinheld":
        if not installed("meinheld"):
            return None
        return [py, "-c", f"from meinheld import server; import {mod}; server.listen(('127.0.0.1', {port})); "
                          f"server.run({mod}.{attr})"]
    if name == "goloop serve":
        argv = [py, "-P", "-m", "goloop", "serve", "--interface", "wsgi", target, "--app-dir", APPS, "--port",
                str(port), "--no-access-log", "--log-level", "warning"]
        return argv + (["--threads", str(threads)] if threads else [])
    raise ValueError(name)


# ---------- the application alone ----------

def base_environ(path):
    return {"REQUEST_METHOD": "GET", "SCRIPT_NAME": "", "PATH_INFO": path, "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "40000", "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_USER_AGENT": "wrk", "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": False,
            "wsgi.run_once": False}


def app_caller(target, path):
    """A function that calls the app once with a fresh copy of a prepared environ (and
    wsgi.input), its iterable consumed and closed: what a server cannot avoid paying per
    request (also bench/analysis/wsgi_instr.py's "app alone")."""
    import importlib

    mod, _, attr = target.partition(":")
    sys.path.insert(0, APPS)
    app = getattr(importlib.import_module(mod), attr)
    base = base_environ(path)

    def start_response(status, headers, exc_info=None):
        if not status.startswith("200"):
            raise RuntimeError(f"{target} {path}: {status}")
        return None

    def once():
        env = dict(base)
        env["wsgi.input"] = io.BytesIO(b"")
        it = app(env, start_response)
        try:
            for _ in it:
                pass
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    return once


def app_cost_us(target, path, n, repeat=3):
    """µs of CPU per call of the app (app_caller's call)."""
    once = app_caller(target, path)
    for _ in range(min(n, 1000)):  # warm-up (caches, first-request setup)
        once()
    best = None
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            once()
        us = (time.process_time() - t0) / n * 1e6
        best = us if best is None else min(best, us)
    return best


def measure_app_costs(rows, env):
    out = {}
    for row in rows:
        _, target, path = ROWS[row]
        n = 100000 if row == "raw" else 5000
        p = subprocess.run(["taskset", "-c", "0", PY, __file__, "--app-cost", target, path, str(n)], env=env,
                           capture_output=True, text=True, timeout=600)
        try:
            out[row] = float(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            print(f"# app cost of {row}: failed: {p.stderr[-400:]}", flush=True)
    return out


# ---------- the free-threaded row ----------

_THREADS_ALONE = r"""
import statistics, sys, threading, time
sys.path.insert(0, sys.argv[1])
from wsgi_apps import cpu
environ = {"QUERY_STRING": ""}
def call():
    for chunk in cpu(environ, lambda status, headers: None):
        pass
def work(n):
    for _ in range(n):
        call()
call()
out = {1: [], 2: []}
for r in range(int(sys.argv[2])):
    for k in ((1, 2) if r % 2 == 0 else (2, 1)):
        ts = [threading.Thread(target=work, args=(100,)) for _ in range(k)]
        t = time.perf_counter()
        [x.start() for x in ts]
        [x.join() for x in ts]
        out[k].append(100 * k / (time.perf_counter() - t))
print(statistics.median(out[2]) / statistics.median(out[1]))
"""


def threads_alone(py, rounds, env):
    """The handler called by 1 and 2 plain threading.Threads in one process, no server: how
    far the interpreter itself scales this code (the ceiling for any server)."""
    out = subprocess.run([py, "-c", _THREADS_ALONE, APPS, str(rounds)], capture_output=True, text=True, env=env)
    try:
        return float(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"# threads alone on {py}: failed: {out.stderr[-300:]}", flush=True)
        return None


def free_threaded(py, duration, env, rounds):
    """goloop serve --threads 1 and 2 on a CPU-bound handler, server and wrk not pinned: on py
    (free-threaded), then on this interpreter (with the GIL: the control, expect ~1x). The two
    configurations alternate within each round (the machine's speed drifts by 20 % and more
    between minutes); each cell is the median of the rounds. Beside it, the same handler run
    by 1 and 2 plain threads with no server: the interpreter's own scaling."""
    ok = subprocess.run([py, "-c", "import sys; assert not sys._is_gil_enabled()"], capture_output=True, env=env)
    if ok.returncode != 0:
        print(f"# free-threaded: {py} is not a free-threaded interpreter: {ok.stderr.decode()[-300:]}", flush=True)
        return []
    out = []
    print("\n| goloop serve, CPU-bound handler (wsgi_apps:cpu), two cores | requests/s (median) | p99 ms "
          "| vs 1 thread | server CPU cores busy | plain threads, no server: 2 vs 1 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for interp, label in ((py, "free-threaded"), (PY, "with the GIL")):
        runs = {1: [], 2: []}
        for r in range(rounds):
            for threads in ((1, 2) if r % 2 == 0 else (2, 1)):
                port = free_port()
                argv = server_argv("goloop serve", "wsgi_apps:cpu", port, py=interp, threads=threads)
                try:
                    res = run_one(argv, port, "/", duration, 8, 1, False, env=env, server_cpu=None, client_cpu=None)
                except Exception as exc:  # noqa: BLE001
                    print(f"# {label} --threads {threads}: failed: {exc}", flush=True)
                    continue
                print(f"# round {r + 1} {label} --threads {threads}: {res['value']:,.0f} req/s", flush=True)
                runs[threads].append(res)
        alone = threads_alone(interp, max(rounds, 3), env)
        base = None
        for threads in (1, 2):
            if not runs[threads]:
                continue
            med = sorted(runs[threads], key=lambda x: x["value"])[len(runs[threads]) // 2]
            base = base or med["value"]
            busy = med["cpu_us"] * med["value"] / 1e6  # CPU seconds per second: above 1, threads ran in parallel
            ceiling = f"{alone:.2f}x" if (alone and threads == 2) else ""
            print(f"| {label} ({interp}), --threads {threads} | {med['value']:,.0f} | {fmt_ms(med.get('p99_us'))} | "
                  f"{med['value'] / base:.2f}x | {busy:.2f} | {ceiling} |", flush=True)
            out.append({"row": f"{label} ({interp}), --threads {threads}", "requests/s (median)": round(med["value"]),
                        "p99 ms": round(med["p99_us"] / 1e3, 2) if med.get("p99_us") else None,
                        "vs 1 thread": round(med["value"] / base, 2), "server CPU cores busy": round(busy, 2),
                        "plain threads, no server: 2 vs 1": round(alone, 2) if (alone and threads == 2) else None})
    return out


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--app-cost":  # child: one app's cost, printed alone
        print(f"{app_cost_us(sys.argv[2], sys.argv[3], int(sys.argv[4])):.2f}")
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rows", default=",".join(ROWS), help=",".join(ROWS))
    ap.add_argument("--servers", default=",".join(SERVERS), help=",".join(SERVERS))
    ap.add_argument("--free-threaded", metavar="PY", help="add the free-threaded row, run by this interpreter")
    ap.add_argument("--no-app-cost", action="store_true")
    ap.add_argument("--results", action="store_true",
                    help="write bench/results/wsgi-servers.json (and wsgi-free-threaded.json) and render BENCHMARKS.md")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed")
    rows = [r for r in args.rows.split(",") if r and r != "none"]  # --rows none: the free-threaded row alone
    servers = args.servers.split(",")
    best: dict = {}
    costs: dict = {}
    with tempfile.TemporaryDirectory(prefix="wsgi-bench-") as tmp:
        env = dict(os.environ, WSGI_BENCH_DB=os.path.join(tmp, "rows.db"),
                   PYTHONPATH=os.pathsep.join([APPS, os.path.join(REPO, "pyshim"), os.environ.get("PYTHONPATH", "")]))
        print(f"# load average at start: {os.getloadavg()}", flush=True)
        for rnd in range(args.rounds):
            for row in rows:
                title, target, path = ROWS[row]
                for name in servers:
                    port = free_port()
                    argv = server_argv(name, target, port)
                    if argv is None:
                        best[(row, name)] = "not installed"
                        continue
                    try:
                        r = run_one(argv, port, path, args.duration, args.connections, 1, False, env=env)
                    except Exception as exc:  # noqa: BLE001 (a cell that fails is reported, not fatal)
                        print(f"# {title} / {name}: failed: {exc}", flush=True)
                        best.setdefault((row, name), "failed")
                        continue
                    print(f"# round {rnd + 1} {title} / {name}: {r['value']:,.0f} req/s, {r['cpu_us']:.1f} µs CPU/req, "
                          f"p99 {fmt_ms(r.get('p99_us'))} ms" + (f", {r['errors']} errors" if r["errors"] else ""),
                          flush=True)
                    old = best.get((row, name))
                    if not isinstance(old, dict) or r["cpu_us"] < old["cpu_us"]:
                        best[(row, name)] = r
                # the app alone, once per round next to its row's runs (the same load): the least wins
                for k, v in ({} if args.no_app_cost else measure_app_costs([row], env)).items():
                    costs[k] = min(v, costs.get(k, v))
        print(f"# load average at end: {os.getloadavg()}", flush=True)
        if rows:
            table(rows, servers, best, costs, args)
        ft = free_threaded(args.free_threaded, args.duration, env, args.rounds) if args.free_threaded else []
    if args.results:
        write_results(rows, servers, best, costs, ft, args)


def write_results(rows, servers, best, costs, ft, args):
    import render
    from results import write_result
    command = (f"python3 bench/wsgi_bench.py --results --duration {args.duration} --rounds {args.rounds} "
               f"--connections {args.connections}")
    if rows:
        out = []
        for row in rows:
            cells, errors = {"row": ROWS[row][0], "app alone": round(costs[row], 1) if row in costs else None}, {}
            for name in servers:
                r = best.get((row, name))
                cells[name] = round(r["cpu_us"], 1) if isinstance(r, dict) else None
                if r == "failed":
                    errors[name] = "the server failed to start or to answer (its error is in the run's output)"
            if errors:
                cells["errors"] = errors
            out.append(cells)
        write_result(
            "wsgi-servers", group="goloop serve (WSGI)", title="WSGI servers taking turns: server CPU µs per request",
            command=command + f" --rows {','.join(rows)}",
            method=(f"Each server a fresh process tree on core 0, `wrk -t1 -c{args.connections} -d{args.duration}s` "
                    f"on core 1, best of {args.rounds} round(s) by CPU per request. \"app alone\": the application "
                    "called in a loop with no server, its CPU per request. The servers take turns, so the "
                    "machine's drift between minutes moves their figures apart: `bench/wsgi_ab.py --together` "
                    "(the next tables) runs them at the same time."),
            better="lower", columns=["row", "app alone"] + servers, units={k: "µs" for k in ["app alone"] + servers},
            rows=out, goloop="goloop serve", compare=[s for s in servers if s != "goloop serve"][:4], order=40,
            row_label="workload", modules=("flask", "django", "granian", "bjoern", "gunicorn", "waitress"))
    if ft:
        write_result(
            "wsgi-free-threaded", group="goloop serve (WSGI)",
            title="Free-threaded CPython: a CPU-bound handler with 1 and 2 threads",
            command=command + f" --rows none --free-threaded {args.free_threaded}",
            method=("`tests_py/wsgi_apps`'s `cpu` handler (a few ms of pure-Python arithmetic per request), "
                    "`goloop serve --threads 1` and `--threads 2`, server and `wrk -t1 -c8` not pinned (two cores "
                    f"for both); the two configurations alternate in each round, median of {args.rounds}. The last "
                    "column is the interpreter's own scaling: the same work on plain `threading.Thread`s in one "
                    "process, no server."),
            better=None, columns=["row", "requests/s (median)", "p99 ms", "vs 1 thread", "server CPU cores busy",
                                  "plain threads, no server: 2 vs 1"],
            units={"requests/s (median)": "req/s", "vs 1 thread": "x", "plain threads, no server: 2 vs 1": "x"},
            rows=ft, order=30, row_label="interpreter, threads")
    render.main([])


def table(rows, servers, best, costs, args):
    """The table of BENCHMARKS.md: one row per workload, one column per server."""
    print(f"\nwrk -t1 -c{args.connections} -d{args.duration}s --latency on core 1, server tree on core 0, "
          f"best of {args.rounds} by CPU/request. Cells: server CPU µs/request (server's own: minus the app "
          f"alone) · requests/s · p99 ms\n")
    print("| workload | app alone µs | " + " | ".join(servers) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in servers) + " |")
    for row in rows:
        cost = costs.get(row)
        cells = []
        for name in servers:
            r = best.get((row, name))
            if not isinstance(r, dict):
                cells.append(r or "")
                continue
            own = f" ({r['cpu_us'] - cost:.1f})" if cost is not None else ""
            cells.append(f"{r['cpu_us']:.1f}{own} · {r['value']:,.0f} · {fmt_ms(r.get('p99_us'))}"
                         + (f" ({r['errors']} err)" if r["errors"] else ""))
        print(f"| {ROWS[row][0]} | {'' if cost is None else f'{cost:.1f}'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
