#!/usr/bin/env python3
"""Other threads on a busy loop: how often another Python thread gets the GIL, and the
round-trip time of asyncio.to_thread, while the loop's ready queue never empties.

    python3 bench/gil_bench.py [--loops asyncio,uvloop,goloop] [--rounds 200]

One task awaits asyncio.sleep(0) forever (the loop always has a callback ready); one thread
calls time.sleep(0) in a loop (each call gives up the GIL and waits to take it back) and
counts its turns; the main task times `await asyncio.to_thread(noop)` --rounds times.
A loop that never releases the GIL while busy makes both wait for CPython's switch
interval (5 ms). --results writes the table as bench/results/loop-threads.json and renders
BENCHMARKS.md.
"""
import argparse
import asyncio
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import new_loop as make_loop  # noqa: E402


async def spin(stop):
    while not stop.is_set():
        await asyncio.sleep(0)


def taker(counter, stop):
    while not stop.is_set():
        time.sleep(0)
        counter[0] += 1


async def measure(rounds):
    stop, tstop, turns = asyncio.Event(), threading.Event(), [0]
    spinner = asyncio.ensure_future(spin(stop))
    th = threading.Thread(target=taker, args=(turns, tstop))
    th.start()
    await asyncio.sleep(0)
    t0, n0 = time.perf_counter(), turns[0]
    lat = []
    for _ in range(rounds):
        s = time.perf_counter()
        await asyncio.to_thread(lambda: None)
        lat.append(time.perf_counter() - s)
    rate = (turns[0] - n0) / (time.perf_counter() - t0)
    tstop.set()
    stop.set()
    await spinner
    th.join()
    lat.sort()
    return rate, statistics.median(lat), lat[int(len(lat) * 0.9)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="asyncio,uvloop,goloop")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--results", action="store_true", help="write bench/results/loop-threads.json")
    args = ap.parse_args()
    rows = []
    print("| loop | other thread's GIL turns/s | to_thread median | to_thread p90 |")
    print("|---|---:|---:|---:|")
    for name in args.loops.split(","):
        loop = make_loop(name)
        try:
            rate, med, p90 = loop.run_until_complete(measure(args.rounds))
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
        print(f"| {name} | {rate:,.0f} | {med * 1e3:.3f} ms | {p90 * 1e3:.3f} ms |", flush=True)
        rows.append({"row": name, "other thread's GIL turns/s": round(rate),
                     "to_thread median": f"{med * 1e3:.3f} ms", "to_thread p90": f"{p90 * 1e3:.3f} ms"})
    if args.results:
        import render
        from results import write_result
        write_result(
            "loop-threads", group="The event loop under other servers", title="Other threads on a busy loop",
            command=f"python3 bench/gil_bench.py --results --loops {args.loops} --rounds {args.rounds}",
            method=("One task keeps the ready queue non-empty, one thread takes and gives up the GIL in a loop, "
                    "and the main task times `asyncio.to_thread`; unpinned. goloop releases the GIL at every "
                    "iteration's poll while other threads exist, as asyncio and uvloop do."),
            better=None, columns=["row", "other thread's GIL turns/s", "to_thread median", "to_thread p90"],
            units={"other thread's GIL turns/s": "/s"}, rows=rows, order=30, row_label="loop",
            modules=("uvloop",))
        render.main([])


if __name__ == "__main__":
    main()
