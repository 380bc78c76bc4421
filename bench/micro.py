#!/usr/bin/env python3
"""Event-loop microbenchmarks; prints one JSON line {"ops_per_s": ...}.

    python3 bench/micro.py --loop {asyncio,uvloop,rloop,goloop} \
        --bench {call_soon,call_soon_fanout,call_soon_threadsafe,threadsafe_threads,call_later,
                 task,sleep0,sock_pingpong} [--n N] [--threads T]

call_soon      a callback that re-schedules itself with call_soon, N times
call_soon_fanout
               N call_soon (default 1M) of one callback, then run them all; ops = callbacks
               per second, from the first call_soon to the last callback
call_soon_threadsafe
               the same chain with call_soon_threadsafe, called on the loop's own thread
threadsafe_threads
               T other threads (default 1) call call_soon_threadsafe N times in all; ops =
               callbacks run per second, from the first call to the last callback
call_later     N timers (default 200k) at random delays in [0, 10 ms); ops =
               timers fired per second, from the first call_later to the last
               callback
task           N times `await loop.create_task(trivial())`
sleep0         N times `await asyncio.sleep(0)`
lookup_M, bound_M (M: call_soon, call_later, create_task)
               N calls of the loop's method M: lookup_ as `loop.M(...)` (the attribute looked
               up on every call, LOAD_METHOD), bound_ through a bound method taken once;
               the difference is the lookup's cost. With --outside the calls are made while
               the loop is not running (then it runs what they scheduled).
sock_pingpong  over a socketpair (a, b): sock_sendall(a, 1 byte), sock_recv(b),
               then back with sock_sendall(b), sock_recv(a); ops = one-way hops
               (a sock_sendall + sock_recv pair), N hops = N/2 round trips
"""

import argparse
import asyncio
import json
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import LOOPS, LoopUnavailable, die, new_loop  # noqa: E402

DEFAULT_N = {
    "call_soon": 1_000_000,
    "call_soon_fanout": 1_000_000,
    "call_soon_threadsafe": 1_000_000,
    "threadsafe_threads": 1_000_000,
    "call_later": 200_000,
    "task": 200_000,
    "sleep0": 500_000,
    "sock_pingpong": 200_000,  # hops
    **{f"{form}_{m}": 200_000 for form in ("lookup", "bound") for m in ("call_soon", "call_later", "create_task")},
}


def _chain(loop, n, schedule):
    """n callbacks, each scheduling the next with schedule (a loop method)."""
    fut = loop.create_future()
    count = 0

    def cb():
        nonlocal count
        count += 1
        if count < n:
            schedule(cb)
        else:
            fut.set_result(count)

    t0 = time.perf_counter()
    schedule(cb)
    loop.run_until_complete(fut)
    return n, time.perf_counter() - t0


def bench_call_soon(loop, n):
    return _chain(loop, n, loop.call_soon)


def bench_call_soon_fanout(loop, n):
    fut = loop.create_future()
    count = 0

    def cb():
        nonlocal count
        count += 1
        if count == n:
            fut.set_result(count)

    t0 = time.perf_counter()
    call_soon = loop.call_soon
    for _ in range(n):
        call_soon(cb)
    loop.run_until_complete(fut)
    return n, time.perf_counter() - t0


def bench_call_soon_threadsafe(loop, n):
    return _chain(loop, n, loop.call_soon_threadsafe)


def bench_threadsafe_threads(loop, n, threads=1):
    import threading
    fut = loop.create_future()
    per = n // threads
    total = per * threads
    count = 0
    go = threading.Event()

    def cb():
        nonlocal count
        count += 1
        if count == total:
            fut.set_result(count)

    def producer():
        go.wait()
        call = loop.call_soon_threadsafe
        for _ in range(per):
            call(cb)

    ts = [threading.Thread(target=producer) for _ in range(threads)]
    for t in ts:
        t.start()

    async def main():
        go.set()
        return await fut

    t0 = time.perf_counter()
    loop.run_until_complete(main())
    secs = time.perf_counter() - t0
    for t in ts:
        t.join()
    return total, secs


def bench_call_later(loop, n):
    rnd = random.Random(42)
    delays = [rnd.random() * 0.010 for _ in range(n)]
    fut = loop.create_future()
    fired = 0

    def cb():
        nonlocal fired
        fired += 1
        if fired == n:
            fut.set_result(fired)

    t0 = time.perf_counter()
    call_later = loop.call_later
    for d in delays:
        call_later(d, cb)
    loop.run_until_complete(fut)
    return n, time.perf_counter() - t0


def bench_task(loop, n):
    async def trivial():
        return 1

    async def main():
        create_task = loop.create_task
        for _ in range(n):
            await create_task(trivial())

    t0 = time.perf_counter()
    loop.run_until_complete(main())
    return n, time.perf_counter() - t0


def bench_sleep0(loop, n):
    async def main():
        sleep = asyncio.sleep
        for _ in range(n):
            await sleep(0)

    t0 = time.perf_counter()
    loop.run_until_complete(main())
    return n, time.perf_counter() - t0


def bench_sock_pingpong(loop, n):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    msg = b"x"
    rounds = max(1, n // 2)

    async def main():
        sendall, recv = loop.sock_sendall, loop.sock_recv
        for _ in range(rounds):
            await sendall(a, msg)
            data = await recv(b, 1024)
            await sendall(b, data)
            await recv(a, 1024)

    try:
        t0 = time.perf_counter()
        loop.run_until_complete(main())
        return 2 * rounds, time.perf_counter() - t0
    finally:
        a.close()
        b.close()


_LOOKUP_ARGS = {"call_soon": "cb", "call_later": "3600.0, cb", "create_task": "coro()"}


def _method_calls(method, lookup, outside):
    """bench_lookup_M / bench_bound_M: n calls of loop.M, looked up on each call or bound once."""
    call = f"loop.{method}({_LOOKUP_ARGS[method]})" if lookup else f"m({_LOOKUP_ARGS[method]})"
    # the call's own line, compiled: `loop.M(...)` is LOAD_METHOD, `m(...)` a local's call
    ns = {}
    exec(f"def calls(loop, n, cb, coro):\n    m = loop.{method}\n    for _ in range(n):\n        {call}\n", ns)
    calls = ns["calls"]

    def bench(loop, n, outside=outside):
        async def coro():
            pass

        def cb():
            pass

        async def main():
            calls(loop, n, cb, coro)

        t0 = time.perf_counter()
        if outside:
            calls(loop, n, cb, coro)
            loop.run_until_complete(asyncio.sleep(0))
        else:
            loop.run_until_complete(main())
        secs = time.perf_counter() - t0
        if method == "create_task":  # let the tasks finish (not measured)
            loop.run_until_complete(asyncio.sleep(0))
        return n, secs
    return bench


BENCHES = {
    "call_soon": bench_call_soon,
    "call_soon_fanout": bench_call_soon_fanout,
    "call_soon_threadsafe": bench_call_soon_threadsafe,
    "threadsafe_threads": bench_threadsafe_threads,
    "call_later": bench_call_later,
    "task": bench_task,
    "sleep0": bench_sleep0,
    "sock_pingpong": bench_sock_pingpong,
    **{f"{form}_{m}": _method_calls(m, form == "lookup", False)
       for form in ("lookup", "bound") for m in ("call_soon", "call_later", "create_task")},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio")
    ap.add_argument("--bench", choices=sorted(BENCHES), required=True)
    ap.add_argument("--n", type=int, default=None, help="operations (default depends on the bench)")
    ap.add_argument("--threads", type=int, default=1, help="producer threads (threadsafe_threads)")
    ap.add_argument("--outside", action="store_true", help="lookup_/bound_: call while the loop is not running")
    args = ap.parse_args()
    n = args.n or DEFAULT_N[args.bench]

    try:
        loop = new_loop(args.loop)
    except LoopUnavailable as exc:
        die(str(exc))
    asyncio.set_event_loop(loop)
    try:
        if args.bench == "threadsafe_threads":
            ops, secs = BENCHES[args.bench](loop, n, args.threads)
        elif args.outside and args.bench.startswith(("lookup_", "bound_")):
            ops, secs = BENCHES[args.bench](loop, n, True)
        else:
            ops, secs = BENCHES[args.bench](loop, n)
    except Exception as exc:
        die(f"{args.loop}/{args.bench}: {type(exc).__name__}: {exc}")
    finally:
        try:
            loop.close()
        except Exception:
            pass
    print(json.dumps({"ops_per_s": round(ops / secs, 1), "n": ops, "seconds": round(secs, 4),
                      "loop": args.loop, "bench": args.bench}), flush=True)


if __name__ == "__main__":
    main()
