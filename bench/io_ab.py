#!/usr/bin/env python3
"""Server CPU per request of the loop's I/O rows for several loops/builds, taking turns over R
rounds (bench/alternate.py's method, without a whole bench/run.py per turn): echo Protocol
1 KiB and 100 KiB, echo streams 1 KiB (10 connections, bench/echoclient) and HTTP keep-alive
13 B with httptools for every loop (wrk -t1 -c100), via bench/run.py's measurements (server on
core 0, load on core 1).

    python3 -P bench/io_ab.py [--loops uvloop,rloop,rsloop,zuvloop,goloop=DIR,goloop] [--rounds 3]
                              [--rows echo1k,echo100k,streams1k,http] [--rate R] [--no-kernel]
                              [--results [--id-suffix S]]

--rate R paces the echo rows at R requests/s in all: the loops are then compared at the same
load. Unpaced (the default), a loop that answers faster also waits for the client more often,
and each wait (a sleep in epoll_wait and its wake-up, a context switch) is server CPU that a
slower loop, never idle, does not spend: CPU per request at different throughputs is not a
like-for-like comparison.

goloop=DIR imports goloop from DIR (a copy of another build). A loop that cannot be imported
(rsloop and zuvloop install only where they have wheels) is left out, and said so. Prints, per
row, each configuration's least CPU µs per request over the rounds, and its ratio to the first;
then, unless --no-kernel, what `perf stat` counted in the server over the measured windows
(software events and system-call tracepoints: no hardware counters needed), per request,
median of the rounds: user and system CPU µs, system calls, context switches, epoll waits,
futex calls. Those counts, unlike CPU times, barely move with the machine's load.

Run it under `flock /tmp/goloop-bench.lock`. --results writes bench/results/loop-io.json (CPU)
and loop-io-kernel.json (the counts), the loops as named, without goloop=DIR copies, and
renders BENCHMARKS.md.
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

ROWS = {"echo1k": ("echo Protocol 1 KiB", "echo", "protocol", 1024),
        "echo100k": ("echo Protocol 100 KiB", "echo", "protocol", 100 * 1024),
        "streams1k": ("echo streams 1 KiB", "echo", "streams", 1024),
        "http": ("HTTP keep-alive 13 B (httptools)", "http", None, 13)}
KERNEL_COLS = ("user_us", "sys_us", "syscalls", "context_switches", "read", "write", "recv", "send",
               "writev", "epoll_wait", "epoll_ctl", "futex", "wakeups", "ipis", "page_faults", "mem_calls")


def importable(name, path):
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path
    mod = "goloop" if name == "goloop" else name
    return subprocess.run([sys.executable, "-P", "-c", f"import {mod}"], env=env, capture_output=True,
                          cwd="/").returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="uvloop,rloop,rsloop,zuvloop,goloop")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-kernel", action="store_true", help="no perf stat counts")
    ap.add_argument("--rate", type=float, default=0,
                    help="echo rows: this many requests/s in all, paced (echoclient -rate): every loop "
                         "measured at the same load; 0: each connection as fast as its echoes come back")
    ap.add_argument("--results", action="store_true", help="write bench/results/loop-io.json and loop-io-kernel.json")
    ap.add_argument("--id-suffix", default="", help="results: written as loop-io<S>.json, loop-io-kernel<S>.json")
    args = ap.parse_args()
    loops, missing = [], []
    for lp in args.loops.split(","):
        (loops if importable(lp.partition("=")[0], lp.partition("=")[2]) else missing).append(lp)
    if missing:
        print(f"left out (not importable here): {', '.join(missing)}", file=sys.stderr)
    rows = [ROWS[r] for r in args.rows.split(",")]
    cfg = run.Config(False)
    cfg.kernel = not args.no_kernel
    cfg.echo_rate = args.rate
    err = run.build_echoclient()
    if err:
        raise SystemExit(err)
    best, kern = {}, {}
    base_pp = os.environ.get("PYTHONPATH")
    for r in range(args.rounds):
        for title, kind, mode, size in rows:
            for lp in (loops if r % 2 == 0 else loops[::-1]):
                name, _, path = lp.partition("=")
                if path:
                    os.environ["PYTHONPATH"] = path
                elif base_pp is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = base_pp
                try:
                    if kind == "echo":
                        res = run.measure_echo(name, mode, size, cfg)
                    else:
                        res = run.measure_http(name, "httptools", size, 1, cfg)
                except Exception as e:  # noqa: BLE001
                    print(f"{title} {lp}: {e}", file=sys.stderr)
                    continue
                if res.get("cpu_us"):
                    k = (title, lp)
                    best[k] = min(best.get(k, 1e9), res["cpu_us"])
                    for col in KERNEL_COLS:
                        if col in res:
                            kern.setdefault((title, lp, col), []).append(res[col])
                    extra = " ".join(f"{c} {res[c]:.3g}" for c in KERNEL_COLS if c in res)
                    print(f"round {r + 1} {title} {lp}: {res['cpu_us']:.2f} µs/req {res['value']:.0f} req/s {extra}",
                          file=sys.stderr, flush=True)
    label = lambda lp: f"{lp.partition('=')[0]} ({os.path.basename(lp.partition('=')[2].rstrip('/'))})" if "=" in lp else lp
    print("| server CPU µs per request (least of %d rounds) | " % args.rounds + " | ".join(label(l) for l in loops)
          + " | " + " | ".join(f"{label(l)} / {label(loops[0])}" for l in loops[1:]) + " |")
    print("| --- |" + " --- |" * (2 * len(loops) - 1))
    for title, *_ in rows:
        vals = [best.get((title, l)) for l in loops]
        cells = [f"{v:.2f}" if v else "error" for v in vals]
        ratios = [f"{v / vals[0]:.2f}×" if v and vals[0] else "n/a" for v in vals[1:]]
        print(f"| {title} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    if kern:
        print("\n| per request (median of rounds) | " + " | ".join(KERNEL_COLS) + " |")
        print("| --- |" + " --- |" * len(KERNEL_COLS))
        for title, *_ in rows:
            for lp in loops:
                cells = [kern.get((title, lp, c)) for c in KERNEL_COLS]
                print(f"| {title}, {label(lp)} | " + " | ".join(f"{statistics.median(v):.3g}" if v else "n/a"
                                                              for v in cells) + " |")
    if args.results:
        write_results(best, kern, loops, rows, missing, args)


def write_results(best, kern, loops, rows, missing, args):
    import render
    from results import write_result
    loops = [lp for lp in loops if "=" not in lp]
    notes = [f"Not measured (not importable here): {', '.join(missing)}."] if missing else []
    cmd = (f"python3 -P bench/io_ab.py --results --loops {','.join(loops)} --rounds {args.rounds}"
           f" --rows {args.rows}" + (f" --rate {args.rate:g}" if args.rate else "")
           + (f" --id-suffix={args.id_suffix}" if args.id_suffix else ""))
    # another file of the same tables (--id-suffix): its interpreter named in the titles,
    # which must differ from the other file's
    on = f" on CPython {platform.python_version()}" if args.id_suffix else ""
    paced = (f" Echo rows paced at {args.rate:g} requests/s in all (echoclient -rate): every loop at the "
             "same load." if args.rate else " Unpaced: each connection sends as soon as its echo is back.")
    method = ("The echo and HTTP servers of `bench/run.py` (HTTP: an asyncio Protocol feeding httptools on "
              "every loop), the loops alternating round by round on core 0, the load generator on core 1; "
              f"each figure the least server CPU per request of {args.rounds} rounds." + paced)
    write_result(
        "loop-io" + args.id_suffix, group="The event loop",
        title="The loop's I/O rows" + on + ": server CPU µs per request (A/B rounds)"
              + (f", echo at {args.rate:g} requests/s" if args.rate else ""),
        command=cmd, method=method, notes=notes,
        better="lower", columns=["row"] + loops, units={lp: "µs" for lp in loops},
        rows=[{"row": title, **{lp: round(best[title, lp], 2) if (title, lp) in best else None for lp in loops}}
              for title, *_ in rows],
        compare=[lp for lp in loops if lp != "goloop"] if "goloop" in loops else None, order=40,
        row_label="workload", modules=("uvloop", "rloop", "rsloop", "zuvloop", "httptools"))
    if kern:
        write_result(
            "loop-io-kernel" + args.id_suffix, group="The event loop",
            title="The loop's I/O rows" + on + ": the server's CPU split and system calls per request (perf stat)"
                  + (f", echo at {args.rate:g} requests/s" if args.rate else ""),
            command=cmd, notes=notes,
            method=(method + " `perf stat -p` on the server over each measured window (software events and "
                    "system-call tracepoints), divided by the requests answered; the median of the rounds. "
                    "user/sys: the server's user and system CPU µs per request (/proc, clock ticks)."),
            better=None, columns=["row"] + list(KERNEL_COLS), units={"user_us": "µs", "sys_us": "µs"},
            rows=[{"row": f"{title}, {lp}",
                   **{c: (round(statistics.median(kern[title, lp, c]), 3) if (title, lp, c) in kern else None)
                      for c in KERNEL_COLS}}
                  for title, *_ in rows for lp in loops],
            order=41, row_label="workload, loop", modules=("uvloop", "rloop", "rsloop", "zuvloop", "httptools"))
    render.main([])


if __name__ == "__main__":
    main()
