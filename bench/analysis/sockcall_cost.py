#!/usr/bin/env python3
"""read(2)/write(2) against recv(2)/send(2) on a loopback TCP socket: the kernel's cost of the
same echo through the file calls and through the socket calls (bench/analysis/sockcall_cost.c,
one thread, no wake-ups), with the variants taking turns in blocks so the machine's load falls
on all of them alike. Also a read and a recv that find nothing (EAGAIN), writev against sendmsg,
and getppid (entering the kernel at all).

    python3 -P bench/analysis/sockcall_cost.py [--rounds 200] [--iters 2000] [--cpu 0] [--results]

Builds the program with cc (into the ignored .bin directory beside the benchmarks). --results writes bench/results/sockcall-cost.json.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, BENCH)
BIN = os.path.join(BENCH, ".bin", "sockcall_cost")
SRC = os.path.join(HERE, "sockcall_cost.c")


def build():
    os.makedirs(os.path.dirname(BIN), exist_ok=True)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", BIN, SRC], check=True)


def run(rounds, iters, cpu):
    argv = [BIN, str(rounds), str(iters)]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu)] + argv
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--iters", type=int, default=2000, help="iterations per block")
    ap.add_argument("--cpu", default=None, help="pin to this CPU (taskset)")
    ap.add_argument("--results", action="store_true", help="write bench/results/sockcall-cost.json")
    args = ap.parse_args()
    build()
    r = run(args.rounds, args.iters, args.cpu)
    for name, v in r["variants"].items():
        print(f"{name:16} median {v['median_ns']:8.1f} ns  least {v['least_ns']:8.1f} ns per iteration")
    for name, v in r["ratios"].items():
        print(f"{name:28} {v:.3f} (median of the rounds' ratios)")
    if args.results:
        write(r, args)


def write(r, args):
    import render
    from results import write_result
    rows = [{"row": name, "median": v["median_ns"], "least": v["least_ns"], "ratio": None}
            for name, v in r["variants"].items()]
    rows += [{"row": name, "median": None, "least": None, "ratio": round(v, 3)} for name, v in r["ratios"].items()]
    write_result(
        "sockcall-cost", group="The event loop",
        title="read/write against recv/send on a loopback TCP socket: ns per echo (one thread)",
        command=(f"python3 -P bench/analysis/sockcall_cost.py --results --rounds {args.rounds} --iters {args.iters}"
                 + (f" --cpu {args.cpu}" if args.cpu is not None else "")),
        method=("bench/analysis/sockcall_cost.c: one thread, a loopback TCP pair (TCP_NODELAY, non-blocking); "
                "an iteration is one echo's four calls (write 1 KiB on one end, read it on the other into a "
                "256 KiB buffer, write it back, read it), through read/write or recv/send (recvfrom/sendto "
                "without an address); the EAGAIN rows are two reads of an empty socket, the writev/sendmsg "
                "rows the echo with each write in two pieces, getppid x4 four empty kernel entries. The "
                f"variants take turns in blocks of {r['iterations']} iterations, {r['rounds']} rounds, each "
                "round in a rotated order; the thread's CPU time (user + system) per iteration, median and "
                "least over the rounds; a ratio is the median over the rounds of the two variants' ratio "
                "(< 1: the first is cheaper)."),
        better="lower", columns=["row", "median", "least", "ratio"],
        units={"median": "ns", "least": "ns", "ratio": "x"}, rows=rows,
        notes=[], order=45, row_label="variant")
    render.main([])


if __name__ == "__main__":
    main()
