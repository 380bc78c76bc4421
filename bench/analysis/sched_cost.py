#!/usr/bin/env python3
"""Instructions a loop spends per scheduler operation (callgrind): bench/micro.py's rows run
twice, with N1 and N2 operations, under `valgrind --tool=callgrind`;
(instructions(N2) - instructions(N1)) / (N2 - N1) is the cost of one operation, free of the
start-up and of other processes' load (a shared machine's timings are not).

    python3 -P bench/analysis/sched_cost.py [--loops goloop,uvloop,rloop] [--benches call_soon,...]
                                   [--n 20000,60000] [--annotate DIR] [--functions K]
                                   [--results ID [--note TEXT]]

A loop written goloop=DIR imports goloop from DIR (e.g. a copy of the build before a change).
--annotate DIR keeps the N2 run's callgrind file per loop and bench in DIR (callgrind_annotate
--inclusive=yes shows where the instructions go). --functions K prints, under each row, the K
functions whose own instructions per op are largest (callgrind_annotate of both runs, the
difference / (N2 - N1), each with its library; goloop built with GOLOOP_DEBUG_SYMBOLS=1 names
its Go and C functions). Go's asynchronous preemption signals crash
callgrind, so every loop runs with GODEBUG=asyncpreemptoff=1 (it matters only to goloop), and
with GOLOOP_TIME_SCALE=100 (TIME_SCALE below; only goloop reads it).
--results ID writes the table as bench/results/<ID>.json (the interpreter's version in its
title); a loop that does not import or that crashes gets its message as the cell's error.
Needs valgrind (Debian's valgrind package).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/, where micro.py is
BENCHES = "call_soon,call_soon_fanout,call_later,task,sleep0"
ROW_LABELS = {"call_soon": "call_soon chain", "call_soon_fanout": "call_soon fan-out",
              "call_later": "call_later (timers)", "task": "create_task + await",
              "sleep0": "`await asyncio.sleep(0)`"}


# callgrind runs a loop ~100x slower (create_task + await: 1.65 µs per operation natively,
# 192 µs under callgrind): goloop's wall-clock periods (the poll of a loop whose ready queue
# never empties, every 20 µs; its pass through Go's scheduler, every 8 ms) are stretched as
# much (GOLOOP_TIME_SCALE, binding/loop.go's scaleTimes), so that they come as often per
# operation as at full speed (unscaled, the polls added ~1,500 instructions per create_task +
# await on 3.11, ~17 % of goloop's count).
TIME_SCALE = 100


class CellFailed(Exception):
    """One loop's run failed (not importable, crashed): the message names why."""


def functions(out):
    """{function [library]: own instructions} of a callgrind file (callgrind_annotate)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", "--show-percs=no", out],
                          capture_output=True, text=True, check=True).stdout
    fns = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(\S.*:.*)$", line)
        if m:
            name = re.sub(r"^.*?/(Python|Objects|Modules|Include)/", r"\1/", m.group(2).strip())
            lib = re.search(r"\[(?:.*/)?([^/\]]+)\]$", name)
            name = re.sub(r"\s*\[.*\]$", "", name) + (f" [{lib.group(1)}]" if lib else "")
            fns[name] = fns.get(name, 0) + int(m.group(1).replace(",", ""))
    return fns


def instructions(loop, bench, n, out, extra=()):
    env = dict(os.environ, GODEBUG="asyncpreemptoff=1", GOLOOP_TIME_SCALE=str(TIME_SCALE))
    loop, _, path = loop.partition("=")
    if path:  # goloop=DIR: the goloop package found in DIR (a copy of another build)
        env["PYTHONPATH"] = path
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-P",
         os.path.join(BENCH, "micro.py"), "--loop", loop, "--bench", bench, "--n", str(n), *extra],
        capture_output=True, text=True, env=env, timeout=1800)
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not m:
        raise CellFailed(f"{loop}/{bench}: callgrind failed ({proc.returncode}): {failure(proc.stderr)}")
    return int(m.group(1))


def failure(stderr):
    """The lines of a failed run's stderr that say why (valgrind's own lines left out)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("==")]
    return " | ".join(lines[-6:])[-800:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="goloop,uvloop,rloop")
    ap.add_argument("--benches", default=BENCHES)
    ap.add_argument("--n", default="20000,60000", help="the two operation counts N1,N2")
    ap.add_argument("--annotate", metavar="DIR", help="keep the N2 runs' callgrind files here")
    ap.add_argument("--functions", type=int, default=0, metavar="K", help="print the K costliest functions per op")
    ap.add_argument("--results", metavar="ID", help="write bench/results/<ID>.json")
    ap.add_argument("--note", action="append", default=[], help="a note line for the results (repeatable)")
    args = ap.parse_args()
    n1, n2 = (int(x) for x in args.n.split(","))
    table, errors = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for bench in args.benches.split(","):
            for loop in args.loops.split(","):
                keep = os.path.join(args.annotate, f"cg.{loop.partition('=')[0]}.{bench}") if args.annotate else os.path.join(tmp, "cg2")
                try:
                    c1 = instructions(loop, bench, n1, os.path.join(tmp, "cg1"))
                    c2 = instructions(loop, bench, n2, keep)
                except CellFailed as exc:
                    if not args.results:
                        raise SystemExit(str(exc)) from None
                    errors[bench, loop] = str(exc)
                    print(f"{bench:18} {loop:8} failed: {exc}", flush=True)
                    continue
                table[bench, loop] = round((c2 - c1) / (n2 - n1))
                print(f"{bench:18} {loop:8} {(c2 - c1) / (n2 - n1):8,.0f} instructions per op", flush=True)
                if args.functions:
                    f1, f2 = functions(os.path.join(tmp, "cg1")), functions(keep)
                    per = sorted(((f2.get(k, 0) - f1.get(k, 0)) / (n2 - n1), k) for k in f1.keys() | f2.keys())
                    for v, k in per[::-1][:args.functions]:
                        print(f"    {v:7,.0f}  {k}", flush=True)
    if args.results:
        write(args, table, errors)


def write(args, table, errors):
    """bench/results/<ID>.json: one row per bench, one column per loop."""
    import platform
    sys.path.insert(0, BENCH)
    from results import write_result
    specs = args.loops.split(",")
    loops = [label(lp) for lp in specs]
    rows = []
    for bench in args.benches.split(","):
        row = {"row": ROW_LABELS.get(bench, bench), **{label(lp): table.get((bench, lp)) for lp in specs}}
        errs = {label(lp): errors[bench, lp] for lp in specs if (bench, lp) in errors}
        if errs:
            row["errors"] = errs
        rows.append(row)
    write_result(
        args.results, group="The event loop",
        title=f"Loop microbenchmarks on CPython {platform.python_version()}, instructions per operation (callgrind)",
        command=f"python3 -P bench/analysis/sched_cost.py --results {args.results} --loops {command_loops(specs)} "
                f"--benches {args.benches} --n {args.n}",
        method=("Each microbenchmark of `bench/micro.py` under `valgrind --tool=callgrind`, run with N1 and "
                "N2 operations; (instructions(N2) - instructions(N1)) / (N2 - N1) is one operation's cost, "
                "start-up excluded. Instruction counts do not move with the machine's load. A column goloop "
                "(DIR) is a copy of another build (goloop=DIR), e.g. before a change. goloop runs with "
                f"GOLOOP_TIME_SCALE={TIME_SCALE}: its wall-clock periods (the poll of a loop whose ready queue "
                "never empties, every 20 µs; its pass through Go's scheduler, every 8 ms) stretched as callgrind "
                "stretches the run (~100x), so that they come as often per operation as at full speed "
                "(unstretched, those polls added ~1,500 instructions to each create_task + await)."),
        better="lower", columns=["row"] + loops, units={lp: "instructions" for lp in loops}, rows=rows,
        compare=[lp for lp in loops if lp != "goloop"] if "goloop" in loops else None, notes=args.note,
        order=36, row_label="operation", modules=tuple(lp for lp in loops if lp.isidentifier() and lp not in ("goloop", "asyncio")))


def label(lp):
    """A loop's column: its name, or "goloop (<DIR's last part>)" for goloop=DIR."""
    name, _, path = lp.partition("=")
    return f"{name} ({os.path.basename(path.rstrip('/'))})" if path else name


def command_loops(specs):
    """--loops as a results' command line gives it: goloop=DIR written goloop=DIR."""
    return ",".join(lp if "=" not in lp else lp.partition("=")[0] + "=DIR" for lp in specs)


if __name__ == "__main__":
    main()
