#!/usr/bin/env python3
"""The CPU a request must cost in CPython whatever the server does around it (docs/bounds.md,
"goloop serve: where a pipelined request's time goes"): each part measured alone, best of
--repeat, on the loop goloop serve runs (goloop's) and on asyncio's.

    taskset -c 0 python3 bench/analysis/serve_floor.py [--n 20000] [--repeat 5]

  scope      copy of a 14-key scope dict (what a scope costs at least) + its headers list
  app        bench/servers/serve_apps.py's hello world, its coroutine made and run to its end by hand
             (send/receive: finished awaitables, as goloop serve's)
  task       a Task for a coroutine that returns at once: created, its one step run by the
             loop, freed (what asyncio needs per request for current_task() to work)
The sum is the floor of a pipelined hello world on one core in this interpreter: no server
written above CPython's Task can go below it.
"""
import argparse
import asyncio
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, HERE)  # serve_app_cost
sys.path.insert(0, os.path.join(BENCH, "servers"))  # serve_apps
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "pyshim"))
import serve_apps  # noqa: E402
from serve_app_cost import _Done, scope_for  # noqa: E402


def best(f, n, repeat):
    """µs per call of f(n) (which does n calls), best of repeat."""
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        f(n)
        out.append((time.process_time() - t0) / n * 1e6)
    return min(out)


def scope_part(n):
    base = scope_for("/")
    hdr = [(b"host", b"127.0.0.1:8000")]
    for _ in range(n):
        s = base.copy()
        s["headers"] = [tuple(h) for h in hdr]


DONE = _Done()


async def _send(message):
    return None


def _send_done(message):
    return DONE


def app_part(n):
    app, scope = serve_apps.hello, scope_for("/")
    for _ in range(n):
        c = app(scope, None, _send_done)
        try:
            c.send(None)
        except StopIteration:
            pass


async def _nothing():
    return None


def task_part(loop):
    def run(n):
        async def main():
            done = 0
            batch = 1000
            while done < n:
                k = min(batch, n - done)
                for _ in range(k):
                    loop.create_task(_nothing())
                await asyncio.sleep(0)  # the batch's steps run in the next iteration
                await asyncio.sleep(0)
                done += k
        loop.run_until_complete(main())
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import goloop

    rows = [("scope (dict copy + headers list)", best(scope_part, args.n, args.repeat)),
            ("app (hello world's coroutine, run by hand)", best(app_part, args.n, args.repeat))]
    for name, factory in (("goloop", goloop.new_event_loop), ("asyncio", asyncio.new_event_loop)):
        loop = factory()
        try:
            rows.append((f"task on {name}'s loop (create, one step, free)", best(task_part(loop), args.n, args.repeat)))
        finally:
            loop.close()
    print(f"Python {sys.version.split()[0]}, best of {args.repeat} x {args.n}")
    for name, us in rows:
        print(f"  {name:50s} {us:6.2f} µs")
    floor = rows[0][1] + rows[1][1] + rows[2][1]
    print(f"  {'floor on goloop (scope + app + task)':50s} {floor:6.2f} µs  = {1e6 / floor / 1e3:,.0f}k requests/s")


if __name__ == "__main__":
    main()
