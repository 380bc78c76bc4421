#!/usr/bin/env python3
"""Server CPU per request of a few I/O rows for several loops/builds, taking turns over R
rounds (bench/alternate.py's method, without a whole bench/run.py per turn): echo
Protocol 1 KiB, echo streams 1 KiB (10 connections, bench/echoclient) and HTTP keep-alive
13 B (wrk -t1 -c100), via bench/run.py's measurements (server on core 0, load on core 1).

    python3 -P bench/io_ab.py [--loops uvloop,goloop=DIR,goloop] [--rounds 3]

goloop=DIR imports goloop from DIR (a copy of another build). Prints, per row, each
configuration's least CPU µs per request over the rounds, and its ratio to the first.
Run it under `flock /tmp/goloop-bench.lock`. --results writes the table as
bench/results/loop-io.json (the loops as named, without goloop=DIR copies) and renders
BENCHMARKS.md.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

ROWS = [("echo Protocol 1 KiB", "echo", "protocol", 1024),
        ("echo streams 1 KiB", "echo", "streams", 1024),
        ("HTTP keep-alive 13 B", "http", None, 13)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="uvloop,goloop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", action="store_true", help="write bench/results/loop-io.json")
    args = ap.parse_args()
    loops = args.loops.split(",")
    cfg = run.Config(False)
    err = run.build_echoclient()
    if err:
        raise SystemExit(err)
    best = {}
    base_pp = os.environ.get("PYTHONPATH")
    for r in range(args.rounds):
        for title, kind, mode, size in ROWS:
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
                        res = run.measure_http(name, "goloop" if name == "goloop" else "httptools", size, 1, cfg)
                except Exception as e:  # noqa: BLE001
                    print(f"{title} {lp}: {e}", file=sys.stderr)
                    continue
                if res.get("cpu_us"):
                    k = (title, lp)
                    best[k] = min(best.get(k, 1e9), res["cpu_us"])
                    print(f"round {r + 1} {title} {lp}: {res['cpu_us']:.2f} µs/req {res['value']:.0f} req/s",
                          file=sys.stderr, flush=True)
    label = lambda lp: f"{lp.partition('=')[0]} ({os.path.basename(lp.partition('=')[2].rstrip('/'))})" if "=" in lp else lp
    print("| server CPU µs per request (least of %d rounds) | " % args.rounds + " | ".join(label(l) for l in loops)
          + " | " + " | ".join(f"{label(l)} / {label(loops[0])}" for l in loops[1:]) + " |")
    print("| --- |" + " --- |" * (2 * len(loops) - 1))
    for title, *_ in ROWS:
        vals = [best.get((title, l)) for l in loops]
        cells = [f"{v:.2f}" if v else "error" for v in vals]
        ratios = [f"{v / vals[0]:.2f}×" if v and vals[0] else "n/a" for v in vals[1:]]
        print(f"| {title} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    if args.results:
        write_results(best, loops, args)


def write_results(best, loops, args):
    import render
    from results import write_result
    loops = [lp for lp in loops if "=" not in lp]
    rows = [{"row": title, **{lp: round(best[title, lp], 2) if (title, lp) in best else None for lp in loops}}
            for title, *_ in ROWS]
    write_result(
        "loop-io", group="The event loop", title="I/O against uvloop: server CPU µs per request (A/B rounds)",
        command=f"python3 -P bench/io_ab.py --results --loops {','.join(loops)} --rounds {args.rounds}",
        method=("The echo and HTTP servers of `bench/run.py`, the loops alternating round by round on core 0, "
                f"the load generator on core 1; each figure the least server CPU per request of {args.rounds} rounds."),
        better="lower", columns=["row"] + loops, units={lp: "µs" for lp in loops}, rows=rows,
        compare=[lp for lp in loops if lp != "goloop"] if "goloop" in loops else None, order=40,
        row_label="workload", modules=("uvloop",))
    render.main([])


if __name__ == "__main__":
    main()
