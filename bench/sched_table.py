#!/usr/bin/env python3
"""bench/micro.py's scheduler rows for several loops side by side, best of R rounds, the
loops alternating within each round (so every loop sees the same load), each run pinned
to one core. Prints a Markdown table of operations per second.

    python3 -P bench/sched_table.py [--loops asyncio,uvloop,rloop,goloop=DIR,goloop]
                                    [--benches call_soon,...] [--rounds 3] [--cpu 0]

A loop written goloop=DIR imports goloop from DIR (e.g. a copy of the build before a
change), shown as "goloop (DIR's last part)". Run it under `flock /tmp/goloop-bench.lock`.
--results writes the table as bench/results/loop-micro.json (the loops as named, without
goloop=DIR copies) and renders BENCHMARKS.md.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = "call_soon,call_soon_fanout,call_later,task,sleep0"
TITLES = {
    "call_soon": "call_soon chain",
    "call_soon_fanout": "call_soon fan-out (1M, then run)",
    "call_later": "call_later, 200k timers",
    "task": "create_task + await",
    "sleep0": "`await asyncio.sleep(0)`",
}


def run(loop, bench, cpu):
    env = dict(os.environ)
    name, _, path = loop.partition("=")
    if path:
        env["PYTHONPATH"] = path
    out = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-P", os.path.join(HERE, "micro.py"),
                          "--loop", name, "--bench", bench], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["ops_per_s"]


def label(loop):
    name, _, path = loop.partition("=")
    return f"{name} ({os.path.basename(path.rstrip('/'))})" if path else name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="asyncio,uvloop,rloop,goloop")
    ap.add_argument("--benches", default=BENCHES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--results", action="store_true", help="write bench/results/loop-micro.json")
    args = ap.parse_args()
    loops, benches = args.loops.split(","), args.benches.split(",")
    best = {}
    for r in range(args.rounds):
        for b in benches:
            for lp in (loops if r % 2 == 0 else loops[::-1]):
                v = run(lp, b, args.cpu)
                if v is not None:
                    best[b, lp] = max(best.get((b, lp), 0), v)
        print(f"round {r + 1} done", file=sys.stderr, flush=True)
    print("| benchmark | " + " | ".join(label(lp) for lp in loops) + " |")
    print("| --- |" + " --- |" * len(loops))
    for b in benches:
        cells = [f"{best[b, lp] / 1e6:.2f}M" if (b, lp) in best else "error" for lp in loops]
        print(f"| {TITLES.get(b, b)} | " + " | ".join(cells) + " |")
    if args.results:
        write_results(best, loops, benches, args)


def write_results(best, loops, benches, args):
    sys.path.insert(0, HERE)
    import render
    from results import write_result
    loops = [lp for lp in loops if "=" not in lp]
    rows = [{"row": TITLES.get(b, b), **{lp: round(best[b, lp]) if (b, lp) in best else None for lp in loops}}
            for b in benches]
    write_result(
        "loop-micro", group="The event loop", title="Loop microbenchmarks, operations/s (one core)",
        command=f"python3 -P bench/sched_table.py --results --loops {','.join(loops)} --rounds {args.rounds}",
        method=(f"`bench/micro.py`'s loops, each figure a fresh process on core {args.cpu}; best of {args.rounds} "
                "alternating rounds. call_soon chain: each callback schedules the next; fan-out: 1M callbacks "
                "queued, then run; call_later: 200k timers; create_task + await; `await asyncio.sleep(0)` in a loop."),
        better="higher", columns=["row"] + loops, units={lp: "ops/s" for lp in loops},
        rows=rows, compare=[lp for lp in ("uvloop", "rloop", "asyncio") if lp in loops] if "goloop" in loops else None,
        order=30, row_label="benchmark", modules=("uvloop", "rloop"))
    render.main([])


if __name__ == "__main__":
    main()
