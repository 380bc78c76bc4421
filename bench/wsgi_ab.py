#!/usr/bin/env python3
"""CPU per request of one of bench/wsgi_bench.py's rows (default the raw WSGI hello world,
bench/servers/wsgi_apps.py's raw; each server's command line is bench/wsgi_bench.py's
server_argv): goloop serve --interface wsgi builds side by side (A/B), and Granian --interface
wsgi, bjoern, uWSGI and gunicorn sync, taking turns in each round.

    python3 bench/wsgi_ab.py [--config LABEL=PYSHIM_DIR ...] [--granian] [--bjoern] [--uwsgi] [--gunicorn]
                             [--row raw|flask|flask_db|django|echo|upload] [--body 1024]
                             [--app-alone] [--together]
                             [--rounds 3] [--duration 5] [--conns 10] [--threads N]

--config LABEL=DIR[@NAME=VALUE,...]: goloop from DIR (a pyshim folder with its built _goloop module, put first
on PYTHONPATH; empty: this checkout's), with those environment variables (THREADS=N: its --threads); default: this
checkout's. Each server is a fresh process on core 0 (taskset
-c 0); wrk -t1 -cN on core 1 for 1 s of warm-up, then the measured run. Reported per server:
the median over the rounds of requests/s, CPU µs per request of the server's process tree
(utime+stime of every thread, from /proc) and context switches per request (voluntary and
involuntary of every thread, from /proc/PID/task/*/status), with each round's CPU figure, and the
50th, 99th and 99.9th percentiles of latency (wrk --latency's histogram, through a Lua done()). Taking turns puts every
server under the same drift of the machine, where bench/wsgi_bench.py's table (each server's
rounds minutes apart) spreads by up to 1.5x; below the table, the first configuration's CPU
per request over each other's, paired by round (median of the rounds' ratios).
--together: each round runs every server at once on core 0, each process tree in a CPU cgroup of
its own with the same weight (so each gets the same part of the core, whatever its threads), each
under its own wrk on core 1, over the same seconds (with --app-alone, the application alone runs
as one more process in a cgroup of its own): the VM's drift, which moves one-after-the-other
rounds by up to 1.6x, hits every server alike (paired ratios within ~2% from round to round,
against ~15% taking turns). The servers share the core's caches by time slices (CFS's few ms),
as they would share a machine. Needs root (a cgroup v1 cpu or v2 cpu controller).
--app-alone: after each round, the row's application alone (wsgi_bench's app cost: called in a
loop on core 0 with a prepared environ, no server): its median, and each server's own cost =
its median CPU per request minus that.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import (cgroup_add, cgroup_make, free_port, parse_wrk, tree_cpu, tree_pids,  # noqa: E402
                     wait_port, wrk_post)
from wsgi_bench import APPS, ROWS, measure_app_costs, server_argv  # noqa: E402

# (this tool's own: wrk posts --body bytes to it)
ROWS = dict(ROWS, echo=("raw WSGI, a POST body echoed", "wsgi_apps:echo", "/"),
            upload=("raw WSGI, a POST body read, its length answered", "wsgi_apps:echo", "/len"))


def ctx_switches(pid):
    n = 0
    for p in tree_pids(pid):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            n += int(line.split()[1])
            except OSError:
                pass
    return n


# wsgi_bench's server names for this script's kinds (one command line per server, there)
KINDS = {"goloop": "goloop serve", "granian": "granian", "bjoern": "bjoern", "uwsgi": "uwsgi",
         "gunicorn": "gunicorn sync"}


# wrk's Lua end hook: the percentiles of its latency histogram (µs), 99.9 included
LUA = """done = function(summary, latency, requests)
   io.write(string.format("PCT %d %d %d\\n", latency:percentile(50), latency:percentile(99),
                          latency:percentile(99.9)))
end
"""


def start(kind, pyshim, args, extra):
    """Server `kind` (goloop from pyshim) on a free port, on core 0: (its Popen, the row's URL)."""
    port = free_port()
    env = dict(os.environ)
    if pyshim:
        env["PYTHONPATH"] = os.pathsep.join([pyshim, env.get("PYTHONPATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), APPS])
    env.update(args.env)
    env.update(extra)
    errf = tempfile.TemporaryFile()
    threads = int(env.pop("THREADS", 0)) or args.threads
    _, target, path = ROWS[args.row]
    argv = server_argv(KINDS[kind], target, port, threads=threads)
    if argv is None:
        raise SystemExit(f"{kind}: not installed (make bench-deps)")
    proc = subprocess.Popen(["taskset", "-c", "0", *argv],
                            env=env, cwd=APPS,
                            stdout=subprocess.DEVNULL, stderr=errf)
    proc.errf = errf
    proc.port = port
    return proc, f"http://127.0.0.1:{port}{path}"


def result(label, out, cpu, switches):
    """run's dict from wrk's output and the server tree's CPU seconds and context switches."""
    r = parse_wrk(out)
    pct = re.search(r"PCT (\d+) (\d+) (\d+)", out)
    if not r or not r.get("n") or not pct:
        raise SystemExit(f"{label}: {out}")
    n = r["n"]
    p50, p99, p999 = (int(x) / 1000 for x in pct.groups())
    # errors (Granian's wrk timeouts on a loaded machine) are counted, not fatal
    return {"rps": r["value"], "us": cpu / n * 1e6, "cs": switches / n, "err": r.get("errors") or 0,
            "p50": p50, "p99": p99, "p999": p999}


def stop(proc):
    """Ends proc: SIGTERM, SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(kind, pyshim, args, extra):
    proc, url = start(kind, pyshim, args, extra)
    port = proc.port
    try:
        wait_port(port, proc)
        wrk = ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.conns}", "--latency", "-s", args.lua, url]
        subprocess.run(wrk + ["-d1s"], capture_output=True, check=True)
        c0, s0 = tree_cpu(proc.pid), ctx_switches(proc.pid)
        out = subprocess.run(wrk + [f"-d{args.duration}s"], capture_output=True, text=True, check=True).stdout
        c1, s1 = tree_cpu(proc.pid), ctx_switches(proc.pid)
        return result(kind, out, c1 - c0, s1 - s0)
    finally:
        stop(proc)


# ---------- --together: every server at once, in CPU cgroups of equal weight ----------

# the application alone, as a process of its own for --together: wsgi_bench's app_caller in a
# loop; SIGUSR1 marks the start and the end of the measured window (the calls made in between
# are printed at the end)
_ALONE = """
import signal, sys
sys.path.insert(0, sys.argv[1])
from wsgi_bench import app_caller
once = app_caller(sys.argv[2], sys.argv[3])
for _ in range(1000):
    once()
marks = []
n = 0
def mark(*_):
    marks.append(n)
    if len(marks) == 2:
        print(marks[1] - marks[0], flush=True)
        raise SystemExit
signal.signal(signal.SIGUSR1, mark)
print("ready", flush=True)
while True:
    once()
    n += 1
"""


def run_together(configs, args):
    """One round of --together: every configuration's server at once on core 0, each process
    tree in a CPU cgroup of its own (equal shares: each gets the same part of the core whatever
    its threads), each under its own wrk on core 1, over the same seconds; with --app-alone the
    application alone as one more process in a cgroup of its own. The VM's speed drifts by up to
    1.6x within minutes: servers measured one after the other see different machines; measured
    together they see the same one. Returns the list of results (run's dicts) and the app's µs
    per call (or None)."""
    _, target, path = ROWS[args.row]
    procs, wrks = [], []
    alone = None
    try:
        for i, (label, (kind, pyshim, extra)) in enumerate(configs):
            proc, url = start(kind, pyshim, args, extra)
            procs.append(proc)
            wait_port(proc.port, proc)
            cgroup_add(cgroup_make(f"goloop-wsgi-ab-{i}"), proc.pid)
            wrks.append(["taskset", "-c", "1", "wrk", "-t1", f"-c{args.conns}", "--latency", "-s", args.lua, url])
        if args.app_alone:
            alone = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", _ALONE, HERE, target, path],
                                     env=dict(os.environ, PYTHONPATH=APPS), stdout=subprocess.PIPE, text=True)
            if alone.stdout.readline().strip() != "ready":
                raise SystemExit("the application alone did not start")
            cgroup_add(cgroup_make(f"goloop-wsgi-ab-{len(configs)}"), alone.pid)
        warm = [subprocess.Popen(w + ["-d1s"], stdout=subprocess.DEVNULL) for w in wrks]
        for w in warm:
            w.wait()
        c0 = [(tree_cpu(p.pid), ctx_switches(p.pid)) for p in procs]
        runs = [subprocess.Popen(w + [f"-d{args.duration}s"], stdout=subprocess.PIPE, text=True) for w in wrks]
        if alone:
            a0 = tree_cpu(alone.pid)
            alone.send_signal(signal.SIGUSR1)
        outs = [r.communicate()[0] for r in runs]
        c1 = [(tree_cpu(p.pid), ctx_switches(p.pid)) for p in procs]
        a_us = None
        if alone:
            a1 = tree_cpu(alone.pid)
            alone.send_signal(signal.SIGUSR1)
            calls = int(alone.communicate(timeout=30)[0].split()[-1])
            a_us = (a1 - a0) / calls * 1e6
        res = [result(label, out, t1 - t0, s1 - s0)
               for (label, _), out, (t0, s0), (t1, s1) in zip(configs, outs, c0, c1)]
        return res, a_us
    finally:
        for p in procs + ([alone] if alone else []):
            stop(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", default=[], metavar="LABEL=PYSHIM_DIR[@NAME=VALUE,...]")
    ap.add_argument("--granian", action="store_true")
    ap.add_argument("--gunicorn", action="store_true")
    ap.add_argument("--bjoern", action="store_true")
    ap.add_argument("--uwsgi", action="store_true")
    ap.add_argument("--row", default="raw", choices=sorted(ROWS))
    ap.add_argument("--app-alone", action="store_true", help="measure the row's application alone after each round")
    ap.add_argument("--together", action="store_true",
                    help="run the servers (and the app alone) at once, in CPU cgroups of equal weight")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", action="store_true",
                    help="put this row into bench/results/wsgi-ab-[together-]PEERS.json and render BENCHMARKS.md")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--body", type=int, default=1024, help="the echo and upload rows' body, bytes")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the goloop servers")
    args = ap.parse_args()
    args.env = dict(e.split("=", 1) for e in args.env)
    # the SQLite file of the flask_db row (made by the app on first use), shared by every server
    tmp = tempfile.mkdtemp(prefix="wsgi-ab-")
    os.environ.setdefault("WSGI_BENCH_DB", os.path.join(tmp, "rows.db"))
    args.lua = os.path.join(tmp, "pct.lua")
    with open(args.lua, "w") as f:
        f.write(LUA)
        if args.row in ("echo", "upload"):
            f.write(wrk_post(args.body))
    configs = []
    for c in args.config:
        label, _, rest = c.partition("=")
        pyshim, _, envs = rest.partition("@")
        configs.append((label, ("goloop", pyshim or os.path.join(REPO, "pyshim"),
                                dict(e.split("=", 1) for e in envs.split(",") if e))))
    if not configs:
        configs = [("goloop", ("goloop", os.path.join(REPO, "pyshim"), {}))]
    if args.granian:
        configs.append(("granian", ("granian", None, {})))
    if args.bjoern:
        configs.append(("bjoern", ("bjoern", None, {})))
    if args.uwsgi:
        configs.append(("uwsgi", ("uwsgi", None, {})))
    if args.gunicorn:
        configs.append(("gunicorn sync", ("gunicorn", None, {})))
    res = {label: [] for label, _ in configs}
    alone = []
    for i in range(args.rounds):
        if args.together:
            rs, a = run_together(configs, args)
            for (label, _), r in zip(configs, rs):
                res[label].append(r)
                print(f"round {i + 1} {label}: {r['rps']:.0f} req/s, {r['us']:.1f} µs CPU/req, "
                      f"{r['cs']:.2f} ctx switches/req, p99 {r['p99']:.2f} ms, {r['err']} errors", file=sys.stderr,
                      flush=True)
            if a is not None:
                alone.append(a)
                print(f"round {i + 1} app alone: {a:.1f} µs", file=sys.stderr, flush=True)
            continue
        for label, (kind, pyshim, extra) in configs:
            r = run(kind, pyshim, args, extra)
            res[label].append(r)
            print(f"round {i + 1} {label}: {r['rps']:.0f} req/s, {r['us']:.1f} µs CPU/req, "
                  f"{r['cs']:.2f} ctx switches/req, p50 {r['p50']:.2f} p99 {r['p99']:.2f} p99.9 {r['p999']:.2f} ms, "
                  f"{r['err']} errors", file=sys.stderr,
                  flush=True)
        if args.app_alone:
            env = dict(os.environ, PYTHONPATH=APPS)
            a = measure_app_costs([args.row], env).get(args.row)
            if a is not None:
                alone.append(a)
                print(f"round {i + 1} app alone: {a:.1f} µs", file=sys.stderr, flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    a = statistics.median(alone) if alone else None
    if a is not None:
        print(f"{ROWS[args.row][0]}: the application alone {a:.1f} µs (median; rounds "
              + ", ".join(f"{x:.1f}" for x in alone) + ")")
    own = " | own µs/req" if a is not None else ""
    print(f"| server | req/s | CPU µs/req (median; rounds) | p50 ms | p99 ms | p99.9 ms | ctx switches/req{own} |  "
          f"(load {load})")
    print("| --- | --- | --- | --- | --- | --- | ---" + (" | ---" if a is not None else "") + " |")
    for label, rs in res.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        rounds = ", ".join(f"{r['us']:.1f}" for r in rs)
        tail = f" {med('us') - a:.1f} |" if a is not None else ""
        print(f"| {label} | {med('rps'):.0f} | {med('us'):.1f} ({rounds}) | {med('p50'):.2f} | {med('p99'):.2f} | "
              f"{med('p999'):.2f} | {med('cs'):.2f} |{tail}")
    # the first configuration's CPU per request over each other's, paired by round: the machine's
    # drift between rounds (up to 1.6x on the benchmark machine) cancels within a round
    first, *others = res
    for label in others:
        ratios = [x["us"] / y["us"] for x, y in zip(res[first], res[label])]
        print(f"{first} / {label}, paired by round: {statistics.median(ratios):.2f} (median; rounds "
              + " ".join(f"{r:.2f}" for r in ratios) + ")")
    # own cost (the row minus the application alone) over each other's, paired by round
    if len(alone) == args.rounds:
        for label in others:
            ratios = [(x["us"] - a) / (y["us"] - a) for x, y, a in zip(res[first], res[label], alone)]
            print(f"{first} / {label}, own cost paired by round: {statistics.median(ratios):.2f} (median; rounds "
                  + " ".join(f"{r:.2f}" for r in ratios) + ")")
    if args.results:
        write_results(res, args)


def write_results(res, args):
    """This row into the result file of this set of servers: the other rows stay."""
    import json
    import render
    from results import RESULTS, write_result
    first, *others = res
    rid = "wsgi-ab-" + ("together-" if args.together else "") + "-".join(
        sorted(o.replace(" ", "-") for o in others) or ["alone"])
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    body = f", {args.body // 1024} KiB" if args.row in ("echo", "upload") else ""
    row = {"row": f"{ROWS[args.row][0]}{body}, -c{args.conns}", "goloop": round(med(res[first], "us"), 1)}
    cols = ["row", "goloop"]
    units = {"goloop": "µs"}
    for o in others:
        row[o] = round(med(res[o], "us"), 1)
        cols.append(o)
        units[o] = "µs"
    for o in others:
        k = f"goloop / {o} (paired)"
        row[k] = round(statistics.median(x["us"] / y["us"] for x, y in zip(res[first], res[o])), 2)
        cols.append(k)
        units[k] = "x"
    for o in [first] + others:
        k = f"{'goloop' if o == first else o} p99 ms"
        row[k] = round(med(res[o], "p99"), 1)
        cols.append(k)
        units[k] = "ms"
    row["rounds"] = {o: [round(r["us"], 1) for r in rs] for o, rs in res.items()}
    rows = []
    path = os.path.join(RESULTS, rid + ".json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rows = [r for r in json.load(f)["rows"] if r["row"] != row["row"]]
    rows.append(row)
    how = ("at the same time, each process tree in a CPU cgroup of equal weight on core 0 under its own wrk on "
           "core 1, so that the machine's drift hits them alike" if args.together else
           "taking turns on core 0 in each round, wrk on core 1")
    write_result(
        rid, group="goloop serve (WSGI)",
        title="goloop serve against " + ", ".join(others) + (", measured together" if args.together else ", taking turns")
        + ": server CPU µs per request",
        command=(f"python3 bench/wsgi_ab.py --results {'--together ' if args.together else ''}"
                 + " ".join(f"--{o.split()[0]}" for o in others)
                 + f" --row ROW [--body BYTES] --conns {args.conns} --rounds {args.rounds} --duration {args.duration}"
                 + (f" --threads {args.threads}" if args.threads else "")),
        method=(f"The servers run {how}; {args.rounds} rounds of {args.duration} s, each figure the median over "
                "the rounds of the server tree's CPU time per request; \"paired\" ratios are the median of each "
                "round's goloop / rival ratio (< 1: goloop uses less CPU)."),
        better="lower", columns=cols, units=units, rows=rows, compare=others, order=5 if args.together else 45,
        row_label="workload", modules=("flask", "django", "granian", "bjoern", "gunicorn"))
    render.main([])


if __name__ == "__main__":
    main()
