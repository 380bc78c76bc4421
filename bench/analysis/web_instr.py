#!/usr/bin/env python3
"""Instructions per request of the web benchmark's apps (bench/web/) on each ASGI server,
counted by callgrind over the server's whole process tree: the many-await rows (20 queries,
20 updates) compared where CPU time on a shared machine is not comparable.

    python3 bench/analysis/web_instr.py --apps starlette,fastapi --tests queries,updates
    python3 bench/analysis/web_instr.py --apps fastapi --tests queries --pools 16,64   # what grows with the pool
    python3 bench/analysis/web_instr.py --apps fastapi --tests updates --servers "goloop serve" --annotate 30

A private PostgreSQL (bench/web/pg.py) on core 1. Each server runs under `valgrind
--tool=callgrind --trace-children=yes` with its app; after a warm-up the counters of every
process of its tree are zeroed (callgrind_control -z), n requests are served on `conns`
connections (one request in flight per connection, as wrk does) and the counters dumped:
the dumps' total / n is the per-request count of the whole tree (every thread: Granian's
Rust runtime too). The app's pool size is WEB_POOL (--pools). Go's async preemption is off
for goloop (GODEBUG=asyncpreemptoff=1): callgrind asserts on its SIGURG. --annotate prints
the functions with the largest own counts per request for each server (callgrind_annotate).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "web"))
sys.path.insert(0, os.path.join(BENCH, "analysis"))
import web_bench as wb  # noqa: E402
from harness import free_port, kill_tree, tree_pids, wait_port  # noqa: E402
from serve_instr import per_function  # noqa: E402

import pg  # noqa: E402

SERVERS = ["goloop serve", "granian", "uvicorn"]


def drive(port, n, conns, path):
    """n GET requests of path on `conns` keep-alive connections, one in flight on each (threads
    of http.client: the responses may be chunked); raises on a status other than 200."""
    import http.client
    import threading

    left = [n]
    lock = threading.Lock()
    errors = []

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                c.request("GET", path)
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    raise RuntimeError(f"status {r.status}")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            c.close()

    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(f"client: {errors[0]!r}")


def count(app, server, path, n, conns, env, tmp):
    """(instructions per request of server's tree serving app, the dump files)."""
    interface, target, _ = wb.APPS[app]
    port = free_port()
    argv = wb.server_argv(server, interface, target, port)
    # valgrind stretches wall time ~50x: long idle bounds, so that no keep-alive close meets
    # a client's next request (Granian's is its header-read timeout, at most 60 s)
    if server in ("uvicorn", "goloop serve"):
        argv += ["--timeout-keep-alive", "600"]
    elif server == "granian":
        argv += ["--http1-header-read-timeout", "60000"]
    out = os.path.join(tmp, f"cg.{server.split()[0]}.%p")
    env = dict(env, GODEBUG="asyncpreemptoff=1", PYTHONMALLOC="malloc")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}",
                             *argv], env=env, cwd=wb.WEB, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc, timeout=600)
        drive(port, max(50, n // 4), conns, path)  # warm-up: the pool's connections, caches
        pids = tree_pids(proc.pid)
        for p in pids:
            subprocess.run(["callgrind_control", "-z", str(p)], capture_output=True)
        try:
            drive(port, n, conns, path)
        except RuntimeError as exc:
            proc.kill()
            raise RuntimeError(f"{exc}; the server's stderr: {proc.stderr.read().decode(errors='replace')[-1500:]}") from None
        for p in pids:
            subprocess.run(["callgrind_control", "-d", str(p)], capture_output=True)
    finally:
        kill_tree(proc)
    total, dumps = 0, []
    prefix = out.replace("%p", "")
    for f in glob.glob(prefix + "*"):
        if not re.search(r"\.\d+\.\d+$", f):  # the dumps callgrind_control -d made: <pid>.<n>
            continue
        with open(f) as fh:
            m = re.search(r"^(?:summary|totals): (\d+)", fh.read(), re.M)
        if m:
            total += int(m.group(1))
            dumps.append(f)
    if not dumps:
        raise RuntimeError(f"{server}: no callgrind dump ({proc.stderr.read().decode(errors='replace')[-600:]})")
    return total / n, dumps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default="asgi_raw,starlette,fastapi")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--tests", default="queries,updates")
    ap.add_argument("--pools", default="16", help="WEB_POOL values, comma-separated")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--annotate", type=int, default=0)
    ap.add_argument("--json", help="write the table here (JSON)")
    ap.add_argument("--keep", help="copy the callgrind dumps into this directory")
    ap.add_argument("--results", action="store_true", help="write bench/results/web-instructions.json")
    ap.add_argument("--note", action="append", default=[], help="a note recorded with the results")
    args = ap.parse_args()
    rows = []
    with pg.Cluster() as cluster:
        base = dict(os.environ, **cluster.env())
        for app in args.apps.split(","):
            for test in args.tests.split(","):
                path = wb.TESTS[test][1]
                for pool in args.pools.split(","):
                    row = {"app": app, "test": test, "pool": int(pool)}
                    for server in args.servers.split(","):
                        with tempfile.TemporaryDirectory() as tmp:
                            t0 = time.time()
                            try:
                                per, dumps = count(app, server, path, args.n, args.conns,
                                                   dict(base, WEB_POOL=pool), tmp)
                            except Exception as exc:  # noqa: BLE001
                                print(f"# {app} {test} pool {pool} {server}: failed: {exc}", flush=True)
                                row[server] = None
                                continue
                            row[server] = round(per)
                            if args.keep:
                                os.makedirs(args.keep, exist_ok=True)
                                for d in dumps:
                                    shutil.copy(d, os.path.join(args.keep, f"{app}.{test}.{pool}.{os.path.basename(d)}"))
                            print(f"# {app:9} {test:8} pool {pool:>3} {server:13} {per:12,.0f} instructions/request"
                                  f"  ({time.time() - t0:.0f} s)", flush=True)
                            if args.annotate:
                                funcs = {}
                                for d in dumps:
                                    for k, v in per_function(d, False).items():
                                        funcs[k] = funcs.get(k, 0) + v
                                for k, v in sorted(funcs.items(), key=lambda kv: -kv[1])[:args.annotate]:
                                    print(f"    {v / args.n:10,.0f}  {k[:150]}")
                    rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.results:
        write(rows, args)


def write(rows, args):
    from results import write_result

    servers = args.servers.split(",")
    pools = {r["pool"] for r in rows}
    table = []
    for r in rows:
        label = f"{wb.APPS[r['app']][2]}: {wb.TESTS[r['test']][0]}" + (f", pool {r['pool']}" if len(pools) > 1 else "")
        table.append({"row": label, **{s: r.get(s) for s in servers}})
    cmd = "python3 bench/analysis/web_instr.py --results " + " ".join(
        f"--{k} {v}" if " " not in str(v) else f"--{k} '{v}'"
        for k, v in (("apps", args.apps), ("servers", args.servers), ("tests", args.tests), ("pools", args.pools),
                     ("n", args.n), ("conns", args.conns)))
    write_result("web-instructions", group="Real applications (TechEmpower's test types)",
                 title="The database rows in instructions per request (callgrind, whole server tree)",
                 command=cmd,
                 method=("Each server under valgrind --tool=callgrind --trace-children=yes with the app; a private "
                         "PostgreSQL 15 (bench/web/pg.py) on loopback. After a warm-up the counters of every "
                         f"process of the server's tree are zeroed, {args.n} requests are served on {args.conns} "
                         "keep-alive connections (one request in flight on each) and the counters dumped; the "
                         "dumps' total over the requests is the figure: every thread of the server (Granian's Rust "
                         "runtime, goloop's Go threads), not PostgreSQL. Instruction counts do not move with the "
                         "machine's load, which CPU times on a shared machine do. The apps' asyncpg pool: "
                         f"{', '.join(sorted(str(p) for p in pools))} connections (WEB_POOL)."),
                 better="lower", columns=["row"] + servers, units={s: "instructions" for s in servers},
                 rows=table, goloop="goloop serve", compare=[s for s in servers if s != "goloop serve"],
                 row_label="app: test type", order=19, notes=list(args.note),
                 modules=("granian", "uvicorn", "uvloop", "httptools", "starlette", "fastapi", "asyncpg"))
    print("# wrote bench/results/web-instructions.json")


if __name__ == "__main__":
    main()
