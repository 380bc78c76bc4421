#!/usr/bin/env python3
"""Instructions one attribute lookup of a loop method costs (callgrind): bench/micro.py's
lookup_M (`loop.M(...)` on every call) against bound_M (the same calls through a bound method
taken once), both with N1 and N2 calls; the lookup's cost is

    ((lookup(N2) - lookup(N1)) - (bound(N2) - bound(N1))) / (N2 - N1)

for M in call_soon, call_later, create_task, with the loop running (the calls made by a
coroutine) and not running (--outside). Instruction counts do not move with the machine's load.

    python3 -P bench/analysis/lookup_cost.py [--loops goloop,uvloop,rloop] [--n 20000,60000]
                                      [--rows call_soon,call_soon:outside,...]
                                      [--results [--id-suffix S] [--no-render]]

--rows picks the rows (METHOD for the running loop, METHOD:outside for the loop not running;
all six by default).

A loop written goloop=DIR imports goloop from DIR (a copy of another build, e.g. before a
change); its column is labelled "goloop (<DIR's last part>)". --results writes
bench/results/loop-lookup-instructions.json (with --id-suffix S, loop-lookup-instructions<S>.json,
the interpreter's version in its title) and renders BENCHMARKS.md (not with --no-render: an
interpreter without the renderer's packages).
Needs valgrind.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sched_cost import CellFailed, command_loops, instructions, label  # noqa: E402

METHODS = ("call_soon", "call_later", "create_task")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="goloop,uvloop,rloop")
    ap.add_argument("--n", default="20000,60000", help="the two call counts N1,N2")
    ap.add_argument("--rows", default=",".join(m + o for o in ("", ":outside") for m in METHODS))
    ap.add_argument("--results", action="store_true", help="write bench/results/loop-lookup-instructions.json")
    ap.add_argument("--note", action="append", default=[], help="a note line for the results (repeatable)")
    ap.add_argument("--id-suffix", default="", help="results: loop-lookup-instructions<S>.json")
    ap.add_argument("--no-render", action="store_true", help="results: write the JSON only")
    args = ap.parse_args()
    n1, n2 = (int(x) for x in args.n.split(","))
    loops = args.loops.split(",")
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg")
        for spec in args.rows.split(","):
            m, _, where = spec.partition(":")
            outside = where == "outside"
            extra = ("--outside",) if outside else ()
            row = f"loop.{m} ({'not running' if outside else 'running'})"
            for lp in loops:
                per = {}
                try:
                    for form in ("lookup", "bound"):
                        c1 = instructions(lp, f"{form}_{m}", n1, out, extra)
                        c2 = instructions(lp, f"{form}_{m}", n2, out, extra)
                        per[form] = (c2 - c1) / (n2 - n1)
                except CellFailed as exc:
                    raise SystemExit(str(exc)) from None
                table[row, lp] = round(per["lookup"] - per["bound"])
                print(f"{row:34} {lp:10} {table[row, lp]:6,d} instructions per lookup "
                      f"(call with lookup {per['lookup']:,.0f}, bound {per['bound']:,.0f})", flush=True)
    if args.results:
        write(table, loops, args)


def write(table, loops, args):
    import platform
    from results import write_result
    table = {(r, label(lp)): v for (r, lp), v in table.items()}
    cmd_loops = command_loops(loops)
    loops = [label(lp) for lp in loops]
    rows_seen = []
    for row, _ in table:
        if row not in rows_seen:
            rows_seen.append(row)
    rows = [{"row": r, **{lp: table.get((r, lp)) for lp in loops}} for r in rows_seen]
    on = f" on CPython {platform.python_version()}" if args.id_suffix else ""
    write_result(
        "loop-lookup-instructions" + args.id_suffix, group="The event loop",
        title=f"A loop method looked up on each call{on}: instructions per lookup (callgrind)",
        command=(f"python3 -P bench/analysis/lookup_cost.py --results --loops {cmd_loops} --n {args.n}"
                 f" --rows {args.rows}" + (f" --id-suffix {args.id_suffix}" if args.id_suffix else "")),
        method=("`bench/micro.py`'s lookup_M (`loop.M(...)`, the attribute looked up on every call) against "
                "bound_M (the same calls through a bound method taken once), each under `valgrind "
                "--tool=callgrind` with N1 and N2 calls; the difference of the two forms' instructions per "
                "call is the lookup's cost. Instruction counts do not move with the machine's load. A column "
                "goloop (DIR) is a copy of another build (goloop=DIR), e.g. before a change."),
        better="lower", columns=["row"] + loops, units={lp: "instructions" for lp in loops}, rows=rows,
        compare=[lp for lp in loops if lp != "goloop"] if "goloop" in loops else None, notes=args.note, order=31,
        row_label="lookup", modules=("uvloop", "rloop"))
    if not args.no_render:
        import render
        render.main([])


if __name__ == "__main__":
    main()
