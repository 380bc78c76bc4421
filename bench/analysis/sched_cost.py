#!/usr/bin/env python3
"""Instructions a loop spends per scheduler operation (callgrind): bench/micro.py's rows run
twice, with N1 and N2 operations, under `valgrind --tool=callgrind`;
(instructions(N2) - instructions(N1)) / (N2 - N1) is the cost of one operation, free of the
start-up and of other processes' load (a shared machine's timings are not).

    python3 -P bench/analysis/sched_cost.py [--loops goloop,uvloop,rloop] [--benches call_soon,...]
                                   [--n 20000,60000] [--annotate DIR]

A loop written goloop=DIR imports goloop from DIR (e.g. a copy of the build before a change).
--annotate DIR keeps the N2 run's callgrind file per loop and bench in DIR (callgrind_annotate
--inclusive=yes shows where the instructions go). Go's asynchronous preemption signals crash
callgrind, so every loop runs with GODEBUG=asyncpreemptoff=1 (it matters only to goloop).
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


def instructions(loop, bench, n, out):
    env = dict(os.environ, GODEBUG="asyncpreemptoff=1")
    loop, _, path = loop.partition("=")
    if path:  # goloop=DIR: the goloop package found in DIR (a copy of another build)
        env["PYTHONPATH"] = path
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-P",
         os.path.join(BENCH, "micro.py"), "--loop", loop, "--bench", bench, "--n", str(n)],
        capture_output=True, text=True, env=env, timeout=1800)
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"{loop}/{bench}: callgrind failed ({proc.returncode}): {proc.stderr[-800:]}")
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="goloop,uvloop,rloop")
    ap.add_argument("--benches", default=BENCHES)
    ap.add_argument("--n", default="20000,60000", help="the two operation counts N1,N2")
    ap.add_argument("--annotate", metavar="DIR", help="keep the N2 runs' callgrind files here")
    args = ap.parse_args()
    n1, n2 = (int(x) for x in args.n.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        for bench in args.benches.split(","):
            for loop in args.loops.split(","):
                c1 = instructions(loop, bench, n1, os.path.join(tmp, "cg1"))
                keep = os.path.join(args.annotate, f"cg.{loop.partition('=')[0]}.{bench}") if args.annotate else os.path.join(tmp, "cg2")
                c2 = instructions(loop, bench, n2, keep)
                print(f"{bench:18} {loop:8} {(c2 - c1) / (n2 - n1):8,.0f} instructions per op", flush=True)


if __name__ == "__main__":
    main()
