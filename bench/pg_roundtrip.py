"""asyncpg round trips on asyncio, uvloop and goloop, without a server: what one database
round trip costs each loop in wall time, CPU, syscalls and context switches.

    python bench/pg_roundtrip.py                       # all modes, all loops
    python bench/pg_roundtrip.py --modes seq --strace  # + syscalls per round trip (strace -c -f)
    python bench/pg_roundtrip.py --perf                # + perf stat (context switches, instructions)
    python bench/pg_roundtrip.py --callgrind           # + instructions per round trip (callgrind)

A private PostgreSQL (bench/web/pg.py) runs pinned to core 1, each loop's client process to
core 0 (--cpu). Modes:

  seq          one connection, N sequential fetchval of a prepared statement (the 20-queries
               row's inner loop)
  poolP        a pool of P connections, P tasks each acquiring, querying and releasing (the
               framework apps' pattern: the many-await rows under a large pool)
  executemany  the 20-updates row's write: executemany of 20 UPDATEs, N/20 times

Each client warms up, then measures N operations: wall time, CPU time (user + system,
getrusage), voluntary and involuntary context switches, the process's threads. --strace and
--perf and --callgrind re-run the client under the tool, once per loop.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "web"))

READ_SQL = 'SELECT "randomnumber", "id" FROM "world" WHERE id = $1'
WRITE_SQL = 'UPDATE "world" SET "randomnumber" = $1 WHERE id = $2'
LOOPS = ("asyncio", "uvloop", "goloop")
WARMUP = 400


# ---------- the client (a child process per loop) ----------

def _new_loop(name):
    import asyncio
    if name == "uvloop":
        import uvloop
        return uvloop.new_event_loop()
    if name == "goloop":
        import goloop
        return goloop.new_event_loop()
    return asyncio.new_event_loop()


async def _ops(mode, dsn, n):
    """Runs `n` operations of `mode` after a warm-up; returns (ops, round trips, measure())."""
    import asyncpg
    import random
    rnd = random.Random(1)
    if mode == "seq":
        conn = await asyncpg.connect(dsn)
        st = await conn.prepare(READ_SQL)

        async def run(k):
            for _ in range(k):
                await st.fetchval(rnd.randint(1, 10000))
        close = conn.close
    elif mode.startswith("pool"):
        size = int(mode[4:])
        pool = await asyncpg.create_pool(dsn, min_size=size, max_size=size)

        async def worker(k):
            for _ in range(k):
                async with pool.acquire() as c:
                    await c.fetchval(READ_SQL, rnd.randint(1, 10000))

        async def run(k):
            import asyncio
            await asyncio.gather(*(worker(k // size) for _ in range(size)))
        close = pool.close
    elif mode == "executemany":
        conn = await asyncpg.connect(dsn)

        async def run(k):
            for _ in range(max(1, k // 20)):
                ids = sorted(rnd.sample(range(1, 10001), 20))
                await conn.executemany(WRITE_SQL, [(rnd.randint(1, 10000), i) for i in ids])
        close = conn.close
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    await run(WARMUP)  # warm-up (statement caches, pool connections): the same in every run,
    # so that the difference of an N and a 2N run is N operations
    return run, close


def client(loop_name, mode, dsn, n):
    import resource
    import time
    loop = _new_loop(loop_name)
    run, close = loop.run_until_complete(_ops(mode, dsn, n))
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    loop.run_until_complete(run(n))
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    loop.run_until_complete(close())
    loop.close()
    ops = n if mode != "executemany" else max(1, n // 20) * 20
    threads = len(os.listdir("/proc/self/task"))
    print(json.dumps({
        "loop": loop_name, "mode": mode, "ops": ops,
        "wall_us": (t1 - t0) / ops * 1e6,
        "cpu_us": ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) / ops * 1e6,
        "user_us": (r1.ru_utime - r0.ru_utime) / ops * 1e6,
        "sys_us": (r1.ru_stime - r0.ru_stime) / ops * 1e6,
        "vcsw": (r1.ru_nvcsw - r0.ru_nvcsw) / ops,
        "ivcsw": (r1.ru_nivcsw - r0.ru_nivcsw) / ops,
        "threads": threads,
    }), flush=True)


# ---------- the parent ----------

def child_argv(loop_name, mode, dsn, n):
    return [sys.executable, os.path.abspath(__file__), "--child", loop_name, "--modes", mode,
            "--dsn", dsn, "-n", str(n)]


def pin(cpu):
    return ["taskset", "-c", cpu] if cpu and shutil.which("taskset") else []


def run_plain(loop_name, mode, dsn, n, cpu):
    out = subprocess.run(pin(cpu) + child_argv(loop_name, mode, dsn, n), capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_strace(loop_name, mode, dsn, n, cpu):
    """Syscalls per operation: strace -c -f over the whole client, minus a run of the warm-up
    alone (n=0 would skip nothing: the difference of two runs cancels start-up and warm-up)."""
    def counts(k):
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as f:
            subprocess.run(pin(cpu) + ["strace", "-f", "-c", "-o", f.name] + child_argv(loop_name, mode, dsn, k),
                           capture_output=True, text=True, check=True)
            out = {}
            for line in f.read().splitlines():
                m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
                if m and m.group(2) != "total":
                    out[m.group(2)] = int(m.group(1))
            return out
    a, b = counts(n), counts(2 * n)
    diff = {k: (b.get(k, 0) - a.get(k, 0)) / n for k in set(a) | set(b)}
    return {k: round(v, 2) for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def run_perf(loop_name, mode, dsn, n, cpu):
    # (instructions and cycles need a PMU, which virtual machines often lack: "not supported")
    ev = "context-switches,cpu-migrations,task-clock,instructions,cycles"

    def stat(k):
        with tempfile.NamedTemporaryFile("r", suffix=".perf") as f:
            subprocess.run(pin(cpu) + ["perf", "stat", "-x,", "-o", f.name, "-e", ev]
                           + child_argv(loop_name, mode, dsn, k), capture_output=True, text=True, check=True)
            out = {}
            for line in f.read().splitlines():
                parts = line.split(",")
                if len(parts) > 3 and parts[0] and parts[0][0].isdigit():
                    out[parts[2]] = float(parts[0])
            return out
    a, b = stat(n), stat(2 * n)
    return {k: round((b.get(k, 0) - a.get(k, 0)) / n, 2) for k in a}


def run_callgrind(loop_name, mode, dsn, n, cpu):
    """Instructions per operation, the whole client process (all threads): two runs, n and
    2n operations, their difference over n (start-up and warm-up cancel)."""
    def total(k):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cg.out")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
                           + child_argv(loop_name, mode, dsn, k), capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONMALLOC="malloc", GODEBUG="asyncpreemptoff=1"))
            s = 0
            for fn in os.listdir(d):
                with open(os.path.join(d, fn)) as f:
                    for line in f:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            s += int(line.split()[1])
                            break
            return s
    a, b = total(n), total(2 * n)
    return round((b - a) / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default=",".join(LOOPS))
    ap.add_argument("--modes", default="seq,pool16,pool64,executemany")
    ap.add_argument("-n", type=int, default=20000, help="operations measured per run")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    ap.add_argument("--cpu", default="0", help="the client's core (PostgreSQL gets core 1)")
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--callgrind-n", type=int, default=2000)
    ap.add_argument("--dsn", default=None, help="an existing database (else a private cluster)")
    ap.add_argument("--results", action="store_true", help="write bench/results/pg-roundtrip.json")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        client(args.child, args.modes, args.dsn, args.n)
        return
    loops = args.loops.split(",")
    modes = args.modes.split(",")
    if args.dsn:
        measure_all(args, loops, modes, args.dsn)
    else:
        from pg import Cluster
        with Cluster() as pg:
            measure_all(args, loops, modes, pg.dsn)


def measure_all(args, loops, modes, dsn):
    import statistics
    table = {}
    for mode in modes:
        for r in range(args.rounds):
            for lp in loops:
                res = run_plain(lp, mode, dsn, args.n, args.cpu)
                table.setdefault((mode, lp), []).append(res)
                print(f"# {mode:12} {lp:8} round {r + 1}: wall {res['wall_us']:7.1f} µs  cpu {res['cpu_us']:6.1f} µs"
                      f"  (user {res['user_us']:.1f} sys {res['sys_us']:.1f})  vcsw {res['vcsw']:.2f}"
                      f"  ivcsw {res['ivcsw']:.2f}  threads {res['threads']}", flush=True)
    summary = {}
    for (mode, lp), rs in table.items():
        s = {k: statistics.median(x[k] for x in rs) for k in ("wall_us", "cpu_us", "user_us", "sys_us", "vcsw", "ivcsw")}
        s["threads"] = rs[-1]["threads"]
        s["rounds_wall_us"] = [round(x["wall_us"], 1) for x in rs]
        s["rounds_cpu_us"] = [round(x["cpu_us"], 1) for x in rs]
        summary[(mode, lp)] = s
    for mode in modes:
        for lp in loops:
            if args.strace:
                summary[(mode, lp)]["syscalls"] = run_strace(lp, mode, dsn, max(2000, args.n // 5), args.cpu)
                print(f"# strace {mode} {lp}: {summary[(mode, lp)]['syscalls']}", flush=True)
            if args.perf:
                summary[(mode, lp)]["perf"] = run_perf(lp, mode, dsn, args.n, args.cpu)
                print(f"# perf {mode} {lp}: {summary[(mode, lp)]['perf']}", flush=True)
            if args.callgrind:
                summary[(mode, lp)]["instructions"] = run_callgrind(lp, mode, dsn, args.callgrind_n, args.cpu)
                print(f"# callgrind {mode} {lp}: {summary[(mode, lp)]['instructions']} instructions/op", flush=True)
    print(f"\n{'mode':12} {'loop':8} {'wall µs':>8} {'cpu µs':>7} {'vcsw':>5} {'ivcsw':>5} {'syscalls':>8} {'instr':>8}")
    for mode in modes:
        for lp in loops:
            s = summary[(mode, lp)]
            sc = sum(s["syscalls"].values()) if "syscalls" in s else None
            print(f"{mode:12} {lp:8} {s['wall_us']:8.1f} {s['cpu_us']:7.1f} {s['vcsw']:5.2f} {s['ivcsw']:5.2f}"
                  f" {sc if sc is not None else '':>8} {s.get('instructions', ''):>8}")
    if args.results:
        write(args, loops, modes, summary)


def write(args, loops, modes, summary):
    sys.path.insert(0, HERE)
    from results import write_result
    rows = []
    for mode in modes:
        for what, key, unit in (("wall", "wall_us", "µs"), ("CPU", "cpu_us", "µs"),
                                ("syscalls", "syscalls", "calls"), ("instructions", "instructions", "instructions")):
            row = {"row": f"{mode}: {what} per operation ({unit})"}
            for lp in loops:
                v = summary[(mode, lp)].get(key)
                if isinstance(v, dict):
                    v = round(sum(v.values()), 2)
                elif isinstance(v, float):
                    v = round(v, 1)
                row[lp] = v
            if any(row[lp] is not None for lp in loops):
                rows.append(row)
    detail = {f"{m}/{lp}": summary[(m, lp)] for m in modes for lp in loops}
    cmd = "python bench/pg_roundtrip.py " + " ".join(a for a in sys.argv[1:])
    write_result("pg-roundtrip", group="The event loop", title="asyncpg round trips (PostgreSQL 15 on loopback)",
                 command=cmd,
                 method=("One asyncpg client process per loop pinned to core 0, a private PostgreSQL 15 on core 1 "
                         "(bench/web/pg.py). seq: N sequential fetchval of a prepared statement on one connection; "
                         "poolP: P tasks on a pool of P connections, each acquiring, querying and releasing; "
                         "executemany: 20-row UPDATE batches. Wall and CPU (getrusage user+system) per operation, "
                         f"median of {args.rounds} interleaved rounds of N={args.n}. Syscalls: strace -c -f, the "
                         "difference of an N and a 2N run over N. Instructions: callgrind over the whole client "
                         "(all threads), the difference of an N and a 2N run."),
                 better="lower", columns=["row"] + loops,
                 units={lp: "per op" for lp in loops}, rows=rows, compare=[lp for lp in loops if lp != "goloop"],
                 modules=("asyncpg", "uvloop"), detail=detail)
    print("# wrote bench/results/pg-roundtrip.json")


if __name__ == "__main__":
    main()
