#!/usr/bin/env python3
"""TechEmpower's six test types on real applications over a real PostgreSQL: goloop serve
against the ASGI and WSGI servers people use (`make bench-web`).

    python3 bench/web_bench.py [--apps asgi_raw,flask,...] [--servers "goloop serve,uvicorn"]
                               [--tests json,db,queries,fortunes,updates,plaintext]
                               [--duration 10] [--rounds 3] [--connections 64] [--results]

A private PostgreSQL cluster (bench/web/pg.py: Debian's packages, loopback, a free port,
pg_stat_statements, TechEmpower's World and Fortune) is created, pinned to core 1, and
removed at the end. Apps (bench/web/, one file each): asgi_raw (asyncpg, orjson, jinja2, no
framework), starlette, fastapi (same drivers), wsgi_raw and flask (psycopg 3, a psycopg_pool
per process), django (its ORM and templates, psycopg 3). Servers, one worker each, pinned to
core 0 with their whole process tree: ASGI: goloop serve, Granian (--runtime-threads 1),
uvicorn (uvloop + httptools), Hypercorn (uvloop); WSGI: goloop serve (--threads 4), Granian
(--blocking-threads 4), gunicorn sync, gunicorn gthread (4 threads), bjoern, uWSGI (pyuwsgi,
--http11-socket); and both, the newer contenders socketify (uWebSockets through cffi) and
fastpysgi (C on libuv), each on one thread of its own event loop: the servers with a pool of
threads run as many as the apps' pool has connections. A server that is not installed is
reported as such.

Each round starts every (app, server) pair afresh, validates it (bench/web/validate.py:
TechEmpower's response rules and the executed queries counted with pg_stat_statements; a
server that fails is not measured and the failure is reported), then per test type runs wrk
-t1 -cN on core 1 for a 1 s warm-up and the measured duration (plaintext 16-deep pipelined,
bench/pipeline.lua; queries and updates with queries=20). Reported per cell: requests/s,
p99 latency, errors (socket errors + non-2xx), and the server tree's CPU µs per request
(utime+stime of every thread of every process of the tree, from /proc, over the measured
run, divided by the requests wrk counted); with several rounds, the median, and the spread
(max/min - 1) of the CPU per request. Rounds are interleaved: round 1 of every pair, then
round 2 of every pair, ...
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WEB = os.path.join(HERE, "web")
sys.path.insert(0, HERE)
sys.path.insert(0, WEB)
from harness import cgroup_add, cgroup_make, free_port, parse_wrk, stop, tree_cpu, wait_port  # noqa: E402

import pg  # noqa: E402

PY = sys.executable
SERVER_CPU, CLIENT_CPU = "0", "1"

# app -> (interface, module:attr, title)
APPS = {
    "asgi_raw": ("asgi", "asgi_raw:app", "raw ASGI (asyncpg, orjson, jinja2)"),
    "starlette": ("asgi", "asgi_starlette:app", "Starlette (asyncpg)"),
    "fastapi": ("asgi", "asgi_fastapi:app", "FastAPI (asyncpg)"),
    "wsgi_raw": ("wsgi", "wsgi_raw:app", "raw WSGI (psycopg 3, orjson, jinja2)"),
    "flask": ("wsgi", "wsgi_flask:app", "Flask (psycopg 3)"),
    "django": ("wsgi", "wsgi_django:app", "Django ORM (psycopg 3)"),
}
ASGI_SERVERS = ["goloop serve", "granian", "uvicorn", "hypercorn", "socketify", "fastpysgi"]
WSGI_SERVERS = ["goloop serve", "granian", "gunicorn sync", "gunicorn gthread", "bjoern", "uwsgi", "socketify",
                "fastpysgi"]
# test -> (title, path, pipeline depth)
TESTS = {
    "json": ("JSON serialization", "/json", 1),
    "db": ("single query", "/db", 1),
    "queries": ("20 queries", "/queries?queries=20", 1),
    "fortunes": ("fortunes", "/fortunes", 1),
    "updates": ("20 updates", "/updates?queries=20", 1),
    "plaintext": ("plaintext, 16 pipelined", "/plaintext", 16),
}
# the threads of the WSGI servers that run a pool (goloop serve, Granian, gunicorn gthread)
# and every WSGI app's pool of connections (WEB_WSGI_POOL)
WSGI_THREADS = 4


def installed(module):
    return subprocess.run([PY, "-c", f"import {module}"], capture_output=True).returncode == 0


def server_argv(name, interface, target, port):
    """The command line of server `name` serving target (None: not installed)."""
    mod, _, attr = target.partition(":")
    host = "127.0.0.1"
    # the WSGI servers with a pool of threads run as many as the app's pool has connections
    # (WSGI_THREADS): with more, the extra threads only wait for a connection, and each wait
    # and hand-over is a futex call and a context switch on the server's one core (goloop's
    # default of 6 threads: 9-10 futex calls per single-query request against 5.5 with 4;
    # Granian's default of up to 512: 209 per 20-query Django request against 35)
    if name == "goloop serve":
        threads = ["--threads", str(WSGI_THREADS)] if interface == "wsgi" else []
        return [PY, "-P", "-m", "goloop", "serve", "--interface", interface, target, "--app-dir", WEB,
                "--host", host, "--port", str(port), "--no-access-log", "--log-level", "warning", *threads]
    if name == "granian":
        if not installed("granian"):
            return None
        # Granian's --loop auto takes rloop when installed (the loop benchmarks install it), and
        # asyncpg does not run on rloop: uvloop, Granian's choice without rloop, for every ASGI app
        loop = ["--loop", "uvloop"] if interface == "asgi" else ["--blocking-threads", str(WSGI_THREADS)]
        return [PY, "-m", "granian", "--interface", interface, "--workers", "1", "--runtime-threads", "1",
                *loop, "--log-level", "warning", "--host", host, "--port", str(port), target]
    if name == "uvicorn":
        return [PY, "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                "--log-level", "warning", "--host", host, "--port", str(port), target]
    if name == "hypercorn":
        if not installed("hypercorn"):
            return None
        return [PY, "-m", "hypercorn", "-w", "1", "-k", "uvloop", "--log-level", "warning",
                "-b", f"{host}:{port}", target]
    if name.startswith("gunicorn"):
        argv = [PY, "-m", "gunicorn", "-w", "1", "-b", f"{host}:{port}", "--log-level", "warning"]
        argv += ["-k", "sync"] if name == "gunicorn sync" else ["-k", "gthread", "--threads", str(WSGI_THREADS)]
        return argv + [target]
    if name == "bjoern":
        if not installed("bjoern"):
            return None
        return [PY, "-c", f"import bjoern, {mod}; bjoern.run({mod}.{attr}, '{host}', {port})"]
    if name == "uwsgi":
        uwsgi = os.path.join(os.path.dirname(PY), "uwsgi")
        if not os.path.exists(uwsgi):
            return None
        return [uwsgi, "--http11-socket", f"{host}:{port}", "--module", target, "--processes", "1",
                "--disable-logging", "--pythonpath", WEB, "--die-on-term", "--need-app"]
    # the newer contenders, both on one thread of their own event loop (WSGI apps called on it)
    if name == "socketify":  # uWebSockets in C++ through cffi
        if not installed("socketify"):
            return None
        return [PY, "-m", "socketify", target, "--host", host, "--port", str(port), "--interface", interface,
                "--disable-listen-log", "true"]
    if name == "fastpysgi":  # C on libuv (ASGI or WSGI found from the app)
        if not installed("fastpysgi"):
            return None
        return [PY, "-c", f"import fastpysgi, {mod}; fastpysgi.run({mod}.{attr}, '{host}', {port}, "
                "loglevel=fastpysgi.LL_ERROR)"]
    raise ValueError(name)


# servers that send no Date (bjoern no Server either): the WSGI apps add TechEmpower's
# required headers themselves there (bench/web/tfb.py's wsgi_headers)
ADD_HEADERS = ("bjoern", "uwsgi")


def split_spec(spec):
    """spec "name[:args]" -> (name, extra arguments, env): NAME=value words of args go to the
    server's environment, the others to its command line ("goloop serve:--threads 1",
    "goloop serve:GOLOOP_WSGI_POOL=leader": a server's variant measured beside it)."""
    name, _, extra = spec.partition(":")
    words = shlex.split(extra)
    env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_][A-Z0-9_]*=", w))
    return name, [w for w in words if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)], env


def server_cmd(spec, interface, target, port):
    """spec "name[:args]" -> (argv or None when not installed, name, env) (split_spec)."""
    name, extra, env = split_spec(spec)
    argv = server_argv(name, interface, target, port)
    if argv is None:
        return None, name, {}
    if extra and name == "granian":  # options before the target
        argv = argv[:-1] + extra + argv[-1:]
    else:
        argv = argv + extra
    return argv, name, env


def start_server(server, argv, env):
    """server's process on core 0, its stderr in a file (proc.errf)."""
    if server in ADD_HEADERS:
        env = dict(env, WEB_ADD_HEADERS="1")
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *argv], env=env, cwd=WEB, stdout=subprocess.DEVNULL,
                            stderr=errf)
    proc.errf = errf
    return proc


def wrk_argv(port, path, depth, conns):
    """wrk's command line for a cell, on the client core, without its duration."""
    wrk = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c", str(conns), "--latency"]
    if depth > 1:
        wrk += ["-s", os.path.join(HERE, "pipeline.lua")]
    return wrk, [f"http://127.0.0.1:{port}{path}"] + (["--", str(depth)] if depth > 1 else [])


def measure(port, path, depth, duration, conns, pid):
    wrk, tail = wrk_argv(port, path, depth, conns)
    subprocess.run(wrk + ["-d1s"] + tail, capture_output=True, timeout=60)  # warm-up
    c0 = tree_cpu(pid)
    out = subprocess.run(wrk + [f"-d{duration}s"] + tail, capture_output=True, text=True,
                         timeout=duration + 60).stdout
    c1 = tree_cpu(pid)
    res = parse_wrk(out)
    if res is None or not res.get("n"):
        raise RuntimeError("wrk output: " + out[-400:])
    res["cpu_us"] = (c1 - c0) * 1e6 / res["n"]
    return res


@contextlib.contextmanager
def served(app, server, env):
    """server serving app on a free port, on core 0: yields (proc, port), or None when the
    server is not installed; stopped at the end (its stderr's tail in the exception when it
    fails to start)."""
    interface, target, _ = APPS[app]
    port = free_port()
    argv, name, extra_env = server_cmd(server, interface, target, port)
    if argv is None:
        yield None
        return
    proc = start_server(name, argv, dict(env, **extra_env))
    try:
        try:
            wait_port(port, proc, timeout=60)
        except RuntimeError as exc:
            proc.errf.seek(0)
            raise RuntimeError(f"{exc}: {proc.errf.read().decode(errors='replace')[-600:]}") from None
        yield proc, port
    finally:
        stop(proc, 10)
        proc.errf.close()


def validation_problems(port, tests, args, cluster):
    """The server on port checked against TechEmpower's rules (bench/web/validate.py): "" when
    it passes, else its first problems."""
    import validate

    problems = validate.validate(f"http://127.0.0.1:{port}", cluster.admin_dsn,
                                 repeat=args.validate_repeat, tests=tests)
    return "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else "")


def failed_tests(port, tests, args, cluster):
    """{test: its problems} for each test type the server on port fails, validated one by one
    as TechEmpower's verifier does: a server that fails one type is still measured on the
    others."""
    out = {}
    for t in tests:
        msg = validation_problems(port, [t], args, cluster)
        if msg:
            out[t] = msg
    return out


def run_pair(app, server, tests, args, env, cluster):
    """Start server with app, validate, measure each test: {test: result dict or "failed: ..."}
    (with --validate-only: {"validation": "OK" or the problems})."""
    out = {}
    try:
        with served(app, server, env) as running:
            if running is None:
                return {t: "not installed" for t in tests}
            proc, port = running
            bad = failed_tests(port, tests, args, cluster)
            if args.validate_only:
                return {"validation": "; ".join(f"FAILED {t}: {m}" for t, m in bad.items()) or "OK"}
            for t, msg in bad.items():
                print(f"# {app} / {server} / {t}: VALIDATION FAILED: {msg}", flush=True)
                out[t] = f"failed validation: {msg}"
            for t in tests:
                if t in bad:
                    continue
                _, path, depth = TESTS[t]
                try:
                    r = measure(port, path, depth, args.duration, args.connections, proc.pid)
                except Exception as exc:  # noqa: BLE001 (a cell that fails is reported, not fatal)
                    out[t] = f"failed: {exc}"
                    print(f"# {app} / {server} / {t}: failed: {exc}", flush=True)
                    continue
                out[t] = r
                print(f"#   {app:9} {server:16} {t:9} {r['value']:9,.0f} req/s {r['cpu_us']:8.1f} µs CPU/req "
                      f"p99 {(r.get('p99_us') or 0) / 1e3:7.2f} ms"
                      + (f"  {r['errors']} errors" if r["errors"] else ""), flush=True)
            return out
    except Exception as exc:  # noqa: BLE001
        print(f"# {app} / {server}: failed: {exc}", flush=True)
        if args.validate_only:
            return {"validation": f"failed: {exc}"}
        return {t: f"failed: {exc}" for t in tests if t not in out} | out


def run_app_together(app, servers, tests, args, env, cluster):
    """One round of --together for app: every server of servers at once, each validated, its
    process tree in a CPU cgroup of its own on core 0 (equal weights: each gets the same part
    of the core, whatever its threads or processes), each under its own wrk on core 1, over
    the same seconds for each test. {(server, test): result dict or "failed: ..."}."""
    out = {}
    with contextlib.ExitStack() as stack:
        running = []
        for i, server in enumerate(servers):
            try:
                r = stack.enter_context(served(app, server, env))
            except Exception as exc:  # noqa: BLE001
                print(f"# {app} / {server}: failed: {exc}", flush=True)
                out.update({(server, t): f"failed: {exc}" for t in tests})
                continue
            if r is None:
                out.update({(server, t): "not installed" for t in tests})
                continue
            proc, port = r
            bad = failed_tests(port, tests, args, cluster)
            for t, msg in bad.items():
                print(f"# {app} / {server} / {t}: VALIDATION FAILED: {msg}", flush=True)
                out[(server, t)] = f"failed validation: {msg}"
            if len(bad) == len(tests):
                continue
            cgroup_add(cgroup_make(f"goloop-web-{i}"), proc.pid)
            running.append((server, proc, port))
        for t in tests:
            _, path, depth = TESTS[t]
            # (a server that failed this test's validation sits it out, idle)
            on = [(server, proc, port) for server, proc, port in running if (server, t) not in out]
            cmds = [wrk_argv(port, path, depth, args.connections) for _, _, port in on]
            warm = [subprocess.Popen(w + ["-d1s"] + tail, stdout=subprocess.DEVNULL) for w, tail in cmds]
            for w in warm:
                w.wait(timeout=60)
            c0 = [tree_cpu(proc.pid) for _, proc, _ in on]
            runs = [subprocess.Popen(w + [f"-d{args.duration}s"] + tail, stdout=subprocess.PIPE, text=True)
                    for w, tail in cmds]
            outs = [r.communicate(timeout=args.duration + 60)[0] for r in runs]
            c1 = [tree_cpu(proc.pid) for _, proc, _ in on]
            for (server, _, _), o, a, b in zip(on, outs, c0, c1):
                res = parse_wrk(o)
                if res is None or not res.get("n"):
                    out[(server, t)] = "failed: wrk output: " + o[-200:]
                    continue
                res["cpu_us"] = (b - a) * 1e6 / res["n"]
                out[(server, t)] = res
            print(f"#   {app:9} {t:9} " + "  ".join(
                f"{s} {out[(s, t)]['cpu_us']:.1f}" if isinstance(out[(s, t)], dict) else f"{s} -"
                for s, _, _ in on) + " µs CPU/req", flush=True)
    return out


def paired(results, app, tests, servers):
    """{(test, peer): (median, spread)} of peer's CPU per request over goloop serve's, paired
    by round (each round's servers measured at once: the ratio of a round is free of the
    machine's drift between rounds)."""
    out = {}
    for t in tests:
        mine = results.get((app, "goloop serve", t)) or []
        for s in servers:
            if s == "goloop serve":
                continue
            rs = [b["cpu_us"] / a["cpu_us"] for a, b in zip(mine, results.get((app, s, t)) or [])
                  if isinstance(a, dict) and isinstance(b, dict) and a["cpu_us"] and b["cpu_us"]]
            if rs:
                out[(t, s)] = (statistics.median(rs), max(rs) / min(rs) - 1)
    return out


def summarize(cells):
    """The rounds of one cell -> the median result and the CPU spread (max/min - 1)."""
    ok = [c for c in cells if isinstance(c, dict)]
    if not ok:
        return cells[0] if cells else "not run"
    cpu = [c["cpu_us"] for c in ok]
    med = lambda k: statistics.median([c[k] for c in ok if c.get(k) is not None] or [0])  # noqa: E731
    return {"cpu_us": statistics.median(cpu), "value": med("value"), "p99_us": med("p99_us"),
            "errors": sum(c.get("errors", 0) for c in ok), "spread": max(cpu) / min(cpu) - 1 if min(cpu) else None,
            "rounds": len(ok), "cpu_rounds": [round(x, 1) for x in cpu]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default=",".join(APPS), help=",".join(APPS))
    ap.add_argument("--servers", default=None,
                    help="comma-separated, each a name or name:ARGS (a variant: extra options, NAME=value for its "
                         "environment); default every server of each app's interface: "
                         + ",".join(dict.fromkeys(ASGI_SERVERS + WSGI_SERVERS)))
    ap.add_argument("--tests", default=",".join(TESTS), help=",".join(TESTS))
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--validate-repeat", type=int, default=10, help="requests per test when counting queries")
    ap.add_argument("--validate-only", action="store_true", help="validate every pair, measure nothing")
    ap.add_argument("--results", action="store_true", help="write bench/results/web-<app>.json and render")
    ap.add_argument("--note", action="append", default=[], help="a note recorded with the results")
    ap.add_argument("--together", action="store_true",
                    help="measure an app's servers at once, each in a CPU cgroup of equal weight on core 0 under "
                         "its own wrk: each round's ratios are free of the machine's drift (needs root)")
    ap.add_argument("--update", action="store_true",
                    help="with --results: replace only the measured servers' and tests' cells of the "
                         "existing bench/results/web-<app>.json, keeping the other cells (said in a note)")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (make bench-deps)")
    apps = args.apps.split(",")
    tests = args.tests.split(",")
    for a in apps:
        if a not in APPS:
            sys.exit(f"unknown app {a!r}: {','.join(APPS)}")
    for t in tests:
        if t not in TESTS:
            sys.exit(f"unknown test {t!r}: {','.join(TESTS)}")
    wanted = args.servers.split(",") if args.servers else None
    pairs = []
    for a in apps:
        pool = ASGI_SERVERS if APPS[a][0] == "asgi" else WSGI_SERVERS
        if wanted is None:
            pairs += [(a, s) for s in pool]
        else:  # in the pool's order, a server's variants after it
            mine = [s for s in dict.fromkeys(wanted) if split_spec(s)[0] in pool]
            pairs += [(a, s) for s in sorted(mine, key=lambda s: (pool.index(split_spec(s)[0]), ":" in s))]
    if args.validate_only:
        args.duration = 0

    # Ctrl-C and SIGTERM unwind through the cluster's __exit__ (it stops and removes PostgreSQL)
    signal.signal(signal.SIGTERM, _interrupted)
    results: dict = {}
    with pg.Cluster(cpu=CLIENT_CPU) as cluster:
        env = dict(os.environ, **cluster.env(), WEB_WSGI_POOL=str(WSGI_THREADS),
                   PYTHONPATH=os.pathsep.join([WEB, os.path.join(REPO, "pyshim"), os.environ.get("PYTHONPATH", "")]))
        print(f"# PostgreSQL on 127.0.0.1:{cluster.port} (core {CLIENT_CPU}); {len(pairs)} app/server pairs, "
              f"tests {','.join(tests)}, "
              + ("validation only" if args.validate_only else f"{args.rounds} round(s) of {args.duration} s"),
              flush=True)
        for rnd in range(1 if args.validate_only else args.rounds):
            print(f"# round {rnd + 1}", flush=True)
            if args.together and not args.validate_only:
                for app in apps:
                    servers = [s for a, s in pairs if a == app]
                    k = rnd % len(servers)
                    got = run_app_together(app, servers[k:] + servers[:k], tests, args, env, cluster)
                    for (server, t), r in got.items():
                        results.setdefault((app, server, t), []).append(r)
                continue
            for app, server in pairs:
                if args.validate_only:
                    r = run_pair(app, server, tests, args, env, cluster)["validation"]
                    print(f"# {app} / {server}: {r}", flush=True)
                    results.setdefault((app, server), []).append(r)
                    continue
                for t, r in run_pair(app, server, tests, args, env, cluster).items():
                    results.setdefault((app, server, t), []).append(r)
    if args.validate_only:
        sys.exit(0 if all(r == ["OK"] for r in results.values()) else 1)
    summary = {k: summarize(v) for k, v in results.items()}
    print_table(summary, apps, pairs, tests)
    ratios = {}
    if args.together:
        print("\neach peer's CPU per request over goloop serve's, paired by round (median; spread)")
        for app in apps:
            ratios[app] = paired(results, app, tests, [s for a, s in pairs if a == app])
            for (t, s), (m, sp) in ratios[app].items():
                print(f"  {app:9} {t:9} {s:16} {m:5.2f}x (±{sp * 100:.0f}%)")
    if args.results:
        write_results(summary, apps, pairs, tests, args, ratios)


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def print_table(summary, apps, pairs, tests):
    print("\nserver CPU µs per request (median of rounds; spread; req/s)")
    for app in apps:
        servers = [s for a, s in pairs if a == app]
        print(f"\n{APPS[app][2]}")
        print(f"{'test':24}" + "".join(f"{s:>22}" for s in servers))
        for t in tests:
            line = f"{TESTS[t][0]:24}"
            for s in servers:
                r = summary.get((app, s, t))
                if isinstance(r, dict):
                    line += f"{r['cpu_us']:9.1f} ±{(r['spread'] or 0) * 100:3.0f}% {r['value']:7,.0f}"
                else:
                    line += f"{str(r)[:20]:>22}"
            print(line)


def write_results(summary, apps, pairs, tests, args, ratios=None):
    import render
    from results import write_result

    method = ("TechEmpower's six test types (bench/web/, rules checked by bench/web/validate.py before each "
              "measurement, executed queries counted with pg_stat_statements) over a private PostgreSQL "
              f"{pg_version()} on loopback pinned to core {CLIENT_CPU}. Each server one worker, its whole process "
              f"tree pinned to core {SERVER_CPU}; wrk -t1 -c{args.connections} on core {CLIENT_CPU}, 1 s warm-up, "
              f"{args.duration} s measured per cell; plaintext 16-deep pipelined; queries and updates with "
              f"queries=20. {args.rounds} interleaved round(s), each starting every server afresh; a cell is "
              "the median of its rounds; in brackets after a CPU figure, its rounds' spread (max/min - 1). CPU per request: utime+stime of every thread of every process of the "
              "server's tree (/proc) over the measured run, divided by the requests wrk counted; PostgreSQL's "
              "own CPU is not included. Servers: goloop serve (WSGI: --threads "
              f"{WSGI_THREADS}); Granian --workers 1 --runtime-threads 1 (ASGI: --loop uvloop; WSGI: "
              f"--blocking-threads {WSGI_THREADS}); "
              "uvicorn --loop uvloop --http httptools; Hypercorn -k uvloop; gunicorn sync, gunicorn gthread "
              f"--threads {WSGI_THREADS}; bjoern; uWSGI (pyuwsgi) --http11-socket --processes 1; socketify and "
              "fastpysgi (ASGI and WSGI, one thread each, defaults): the WSGI servers "
              "with a pool of threads run as many as the app's pool has connections (more only wait for one: "
              "Granian's default of up to 512 threads, each Django thread with its own connection, cost 6x the "
              "futex calls per 20-query request). The ASGI apps "
              "keep an asyncpg pool of 16 connections, the WSGI apps a psycopg_pool of "
              f"{WSGI_THREADS} per process; on bjoern and uWSGI, which send no Date header, the WSGI apps add "
              "Server and Date themselves (bench/web/tfb.py's wsgi_headers).")
    if args.together:
        method += (" Measured together (--together): in each round an app's servers run at once, each process "
                   f"tree in a CPU cgroup of equal weight on core {SERVER_CPU}, each under its own wrk on core "
                   f"{CLIENT_CPU}, over the same seconds, so that the machine's drift (up to 1.6x between rounds "
                   "minutes apart) hits them alike; each server gets an equal part of the core, so requests/s "
                   "are each server's at that part, and the client core, shared by every wrk and PostgreSQL, "
                   "sends less than to a server alone. Each round's ratios (a peer's CPU per request over "
                   "goloop serve's) are in the notes, median and spread over the rounds.")
    command = (f"python3 bench/web_bench.py --results --apps {','.join(apps)} --tests {','.join(tests)} "
               f"--duration {args.duration} --rounds {args.rounds}" + (" --together" if args.together else "")
               + (f" --servers '{args.servers}'" if args.servers else ""))
    modules = ("granian", "uvicorn", "uvloop", "httptools", "hypercorn", "gunicorn", "bjoern", "pyuwsgi",
               "socketify", "fastpysgi",
               "starlette", "fastapi", "flask", "django", "asyncpg", "psycopg", "psycopg-pool", "orjson", "jinja2")
    for order, app in enumerate(apps):
        servers = [s for a, s in pairs if a == app]
        app_notes = list(args.note)
        if ratios and ratios.get(app):
            app_notes.append("Each peer's CPU per request over goloop serve's, paired by round (median, spread over "
                         f"{args.rounds} rounds): " + "; ".join(
                             f"{TESTS[t][0]}: " + ", ".join(f"{s} {m:.2f}x (±{sp * 100:.0f}%)"
                                                            for (t2, s), (m, sp) in ratios[app].items() if t2 == t)
                             for t in tests if any(t2 == t for t2, _ in ratios[app])))
        # every cell's figures: requests/s, p99, errors, CPU spread over the rounds
        figures = {TESTS[t][0]: {s: {k: summary[(app, s, t)].get(k) for k in ("value", "p99_us", "errors", "spread",
                                                                             "cpu_rounds")}
                                 for s in servers if isinstance(summary.get((app, s, t)), dict)}
                   for t in tests}
        kinds = (("", "cpu_us", "µs", "lower", "server CPU µs per request"),
                 ("-rps", "value", "req/s", "higher", "requests/s"))
        if args.together:  # tables of their own: each server had a part of the core, not all of it
            kinds = (("-together", "cpu_us", "µs", "lower", "server CPU µs per request, servers measured together"),)
        for suffix, key, unit, better, what in kinds:
            old = previous(f"web-{app}{suffix}") if args.update else None
            if old is not None:
                rows, cols, kept_notes = updated(old, app, servers, tests, summary, key, figures)
                write_result(f"web-{app}{suffix}", group=old["group"], title=old["title"], command=old["command"],
                             method=old["method"], better=better, columns=cols, units={s: unit for s in cols[1:]},
                             rows=rows, goloop="goloop serve", compare=[s for s in cols[1:] if s != "goloop serve"],
                             row_label="test type", order=old.get("order"), notes=kept_notes + app_notes,
                             figures=figures, modules=modules, spread_in_cells=(key == "cpu_us"))
                continue
            rows = []
            for t in tests:
                row = {"row": TESTS[t][0]}
                errors = {}
                for s in servers:
                    set_cell(row, errors, s, summary.get((app, s, t)), key)
                if errors:
                    row["errors"] = errors
                rows.append(row)
            write_result(f"web-{app}{suffix}", group="Real applications (TechEmpower's test types)",
                         title=f"{APPS[app][2]}: {what}", command=command, method=method, better=better,
                         columns=["row"] + servers, units={s: unit for s in servers}, rows=rows,
                         goloop="goloop serve", compare=[s for s in servers if s != "goloop serve"],
                         row_label="test type", notes=app_notes,
                         order=(40 + order) if args.together else 20 + 2 * order + (1 if suffix else 0),
                         figures=figures, modules=modules, spread_in_cells=(key == "cpu_us"))
    render.main([])


def set_cell(row, errors, server, r, key):
    """row[server] from a summarized cell r (its value of key), or None with r's problem in
    errors; a measured cell that saw socket errors or non-2xx answers keeps a note of them."""
    if isinstance(r, dict):
        row[server] = round(r[key], 1) if key == "cpu_us" else round(r[key])
        if r.get("errors"):
            errors[server] = f"{r['errors']} socket errors or non-2xx answers"
    else:
        row[server] = None
        errors[server] = str(r)


def previous(rid):
    """bench/results/<rid>.json as a dict, or None."""
    path = os.path.join(HERE, "results", f"{rid}.json")
    if not os.path.exists(path):
        return None
    import json
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def updated(old, app, servers, tests, summary, key, figures):
    """The rows of old (a web-<app> result) with the cells of servers x tests measured now
    replaced; figures (this run's, by row label) gets the kept cells' figures too. Returns
    (rows, columns, notes); a note names the cells kept from the earlier run."""
    cols = list(old["columns"]) + [s for s in servers if s not in old["columns"]]
    labels = {TESTS[t][0] for t in tests}
    rows, kept = [], set()
    for orow in old["rows"]:
        row = {c: orow.get(c) for c in cols}
        errors = dict(orow.get("errors") or {})
        label = orow["row"]
        for s in cols[1:]:
            if label in labels and s in servers:
                errors.pop(s, None)
                set_cell(row, errors, s, summary.get((app, s, next(t for t in tests if TESTS[t][0] == label))), key)
            else:
                kept.add(s)
                f = ((old.get("figures") or {}).get(label) or {}).get(s)
                if f is not None:
                    figures.setdefault(label, {})[s] = f
        if errors:
            row["errors"] = errors
        rows.append(row)
    notes = [n for n in old.get("notes") or [] if not n.startswith("Cells kept from the run of")]
    now = sorted(s for s in servers)
    notes.append(f"Cells kept from the run of {old['date']}: every cell but {', '.join(now)} on "
                 f"{', '.join(sorted(labels))}, measured again "
                 f"{__import__('datetime').date.today().isoformat()} (--update).")
    return rows, cols, notes


def pg_version():
    try:
        out = subprocess.run([os.path.join(pg.pg_bin(), "postgres"), "--version"], capture_output=True, text=True)
        m = re.search(r"\d+\.\d+", out.stdout)
        return m.group(0) if m else ""
    except (OSError, RuntimeError):
        return ""


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted: the servers and PostgreSQL were stopped, its cluster removed")
