#!/usr/bin/env python3
"""Instructions per request of ASGI servers (goloop serve, Granian, uvicorn) on the JSON and
plaintext rows of bench/web_bench.py's apps (TechEmpower's test types on the raw ASGI app,
Starlette and FastAPI; the raw ASGI app's need its database pool, so a raw hello world of
bench/servers/serve_apps.py stands for it), with the application alone beside them: how much of a row the server
still costs, a figure the machine's load does not move.

    python3 bench/analysis/asgi_instr.py [--rows starlette-json,starlette-plaintext,...]
                                         [--servers "goloop serve,granian,uvicorn"]
                                         [--n 2000] [--conns 16] [--annotate 30] [--keep DIR]
                                         [--results] [--cache-sim]

Each server runs under `valgrind --tool=callgrind --trace-children=yes` (user-space
instructions of every thread of every process of its tree, the application's Python
included) with the lifespan off (JSON and plaintext need no database: goloop serve and
uvicorn `--lifespan off`, Granian `--interface asginl`); after a warm-up the counters of each
process are zeroed (callgrind_control -z), n GET requests are made on `conns` keep-alive
connections, JSON one at a time per connection and plaintext 16 deep (TechEmpower's
pipelining), and the counters dumped (callgrind_control -d): the sum over the tree / n is the
count per request.

"app alone" is the application called n times in one coroutine on asyncio's loop under
callgrind (a copy of a scope like goloop serve's, a receive and a send that are `async def`
functions doing nothing), minus a run of 0 calls: what any server's request costs at least.
A server's own share is its row minus it; the send and receive coroutines of the app alone
(~2 x 300 instructions) are in the app's figure, so the server's share is a slight
under-estimate.

--cache-sim adds callgrind's cache simulation (the machine's I1, D1 and last-level caches, as
valgrind reads them): each cell then also gives the first-level and last-level misses per
request (instruction fetches, data reads and writes), the app alone's beside them: what the
server's requests cost beyond their instructions, which CPU time sees and instruction counts
do not (a virtual machine without hardware counters cannot count the real ones).

Go's async preemption is off (GODEBUG=asyncpreemptoff=1: callgrind asserts on its SIGURG).
PYTHONHASHSEED=0 in every process (str hashes move the attribute cache's misses between runs).
--results writes bench/results/serve-asgi-app-instructions.json.
"""
import argparse
import glob
import os
import re
import selectors
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
WEB = os.path.join(BENCH, "web")
sys.path.insert(0, BENCH)
sys.path.insert(0, HERE)
from harness import free_port, wait_port  # noqa: E402
from wsgi_instr import STEP_TIMEOUT, Stalled, control, dump_events, keep_and_annotate, stop, tree  # noqa: E402

PY = sys.executable
WARMUP = 300

# row -> (title, module:app, path, pipeline depth)
ROWS = {
    "hello": ("raw ASGI hello world (bench/servers/serve_apps.py)", "serve_apps:hello", "/", 1),
    "starlette-json": ("Starlette, JSON", "asgi_starlette:app", "/json", 1),
    "starlette-plaintext": ("Starlette, plaintext 16 pipelined", "asgi_starlette:app", "/plaintext", 16),
    "fastapi-json": ("FastAPI, JSON", "asgi_fastapi:app", "/json", 1),
    "fastapi-plaintext": ("FastAPI, plaintext 16 pipelined", "asgi_fastapi:app", "/plaintext", 16),
}


def server_argv(name, target, port):
    """The command line of server `name` serving target with no lifespan (None: not installed)."""
    host = "127.0.0.1"
    if name == "goloop serve":
        return [PY, "-P", "-m", "goloop", "serve", target, "--app-dir", WEB, "--host", host, "--port", str(port),
                "--no-access-log", "--log-level", "warning", "--lifespan", "off", "--timeout-keep-alive", "300"]
    if name == "granian":
        return [PY, "-m", "granian", "--interface", "asginl", "--workers", "1", "--runtime-threads", "1",
                "--loop", "uvloop", "--log-level", "warning", "--host", host, "--port", str(port),
                "--http1-header-read-timeout", "60000", target]  # its most (the others: 300 s)
    if name == "uvicorn":
        return [PY, "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan",
                "off", "--log-level", "warning", "--host", host, "--port", str(port), "--timeout-keep-alive", "300",
                target]
    raise ValueError(name)


def installed(name):
    mod = {"goloop serve": "goloop", "granian": "granian", "uvicorn": "uvicorn"}[name]
    return subprocess.run([PY, "-c", f"import {mod}"], capture_output=True).returncode == 0


def drive(port, n, conns, path, depth):
    """n GET requests over conns keep-alive connections, `depth` written at once per connection
    and all their responses read before the next batch; raises Stalled if no response comes
    for STEP_TIMEOUT seconds."""
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=STEP_TIMEOUT) for _ in range(conns)]
    state = {}
    sent = done = 0

    def send(s):
        nonlocal sent
        k = min(depth, n - sent)
        if k > 0:
            s.sendall(req * k)
            sent += k
        state[s][1] = k

    try:
        for s in socks:
            state[s] = [bytearray(), 0]
            sel.register(s, selectors.EVENT_READ)
            send(s)
        while done < n:
            ready = sel.select(timeout=STEP_TIMEOUT)
            if not ready:
                raise Stalled(f"no response for {STEP_TIMEOUT} s after {done} of {n}")
            for key, _ in ready:
                s = key.fileobj
                buf, want = state[s]
                chunk = s.recv(262144)
                if not chunk:
                    raise RuntimeError("server closed a connection")
                buf += chunk
                while want and (end := _one(buf)):
                    if bytes(buf[:12]) != b"HTTP/1.1 200":
                        raise RuntimeError("not a 200: " + bytes(buf[:300]).decode("latin-1"))
                    del buf[:end]
                    want -= 1
                    done += 1
                state[s][1] = want
                if want == 0:
                    send(s)
    finally:
        sel.close()
        for s in socks:
            s.close()


def _one(buf):
    """The length of the first whole response in buf (content-length framing), or 0."""
    head = buf.find(b"\r\n\r\n")
    if head < 0:
        return 0
    m = re.search(rb"(?im)^content-length:\s*(\d+)", bytes(buf[:head]))
    if m is None:
        raise RuntimeError("a response without content-length: " + bytes(buf[:head]).decode("latin-1"))
    end = head + 4 + int(m.group(1))
    return end if len(buf) >= end else 0


# callgrind's cache simulation (--cache-sim): the misses each cell adds up, by level
MISSES = {"L1": ("I1mr", "D1mr", "D1mw"), "LL": ("ILmr", "DLmr", "DLmw")}


def misses(events):
    """{level: misses} of dump_events' totals."""
    return {lv: sum(events.get(e, 0) for e in evs) for lv, evs in MISSES.items()}


def instructions(name, target, path, depth, n, conns, tmp, env, cache_sim=False):
    """(instructions per request over the server's tree, the dumps, every event's count per
    request summed over them: with cache_sim, callgrind's cache simulation's misses too)."""
    port = free_port()
    for f in glob.glob(os.path.join(tmp, "cg.*")):
        os.unlink(f)
    argv = ["valgrind", "--tool=callgrind", *(["--cache-sim=yes"] if cache_sim else []), "--trace-children=yes",
            f"--callgrind-out-file={os.path.join(tmp, 'cg.%p')}", *server_argv(name, target, port)]
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, env=env, cwd=WEB, stdout=subprocess.DEVNULL, stderr=errf, start_new_session=True)
    proc.errf = errf
    try:
        try:
            wait_port(port, proc, timeout=300)  # valgrind starts slowly
            drive(port, WARMUP, conns, path, depth)
        except Exception as exc:
            errf.seek(0)
            raise RuntimeError(f"{exc}: {errf.read()[-1500:].decode(errors='replace')}") from None
        watched = [p for p in tree(proc.pid) if control("-z", p)]
        if not watched:
            raise RuntimeError("callgrind_control reached no process")
        drive(port, n, conns, path, depth)
        for p in watched:
            if not control("-d", p):
                raise RuntimeError(f"callgrind_control -d {p} failed")
    finally:
        stop(proc)
    dumps = []
    for p in watched:  # the last dump of each process (cg.PID.N): the measured interval
        mine = [f for f in glob.glob(os.path.join(tmp, f"cg.{p}.*")) if re.search(r"\.\d+$", f)]
        if mine:
            dumps.append(max(mine, key=lambda f: int(f.rsplit(".", 1)[1])))
    if not dumps:
        raise RuntimeError("no callgrind dump")
    per: dict = {}
    for d in dumps:
        for e, v in dump_events(d).items():
            per[e] = per.get(e, 0) + v / n
    return per.get("Ir", 0), dumps, per


APP_ALONE = r"""
import asyncio, importlib, sys
mod, _, attr = sys.argv[1].partition(":")
app = getattr(importlib.import_module(mod), attr)
path, n = sys.argv[2], int(sys.argv[3])
scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
         "scheme": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
         "root_path": "", "headers": [(b"host", b"127.0.0.1:8000")], "client": ("127.0.0.1", 40000),
         "server": ("127.0.0.1", 8000)}
REQ = {"type": "http.request", "body": b"", "more_body": False}


async def receive():
    return REQ

async def send(message):
    pass

async def main():
    import time
    for _ in range(300):
        await app(dict(scope), receive, send)
    t0 = time.process_time()
    for _ in range(n):
        await app(dict(scope), receive, send)
    if n:
        print((time.process_time() - t0) / n * 1e6)

asyncio.run(main())
"""


def app_alone(target, path, n, tmp, env, events=None, cache_sim=False):
    """Instructions of the app called n times minus 0 times, per call: its own cost per request
    (events: filled with every event's count per call, with cache_sim the cache simulation's
    misses too)."""
    res = []
    for k in (0, n):
        out = os.path.join(tmp, f"app{k}")
        subprocess.run(["valgrind", "--tool=callgrind", *(["--cache-sim=yes"] if cache_sim else []),
                        f"--callgrind-out-file={out}", PY, "-c", APP_ALONE, target, path, str(k)], check=True, capture_output=True, cwd=WEB, env=env, timeout=3600)
        res.append(dump_events(out))
        os.unlink(out)
    if events is not None:
        events.update({e: (res[1].get(e, 0) - res[0].get(e, 0)) / n for e in res[1]})
    return (res[1].get("Ir", 0) - res[0].get("Ir", 0)) / n


def app_alone_cpu(target, path, n, rounds, env):
    """The app alone's CPU µs per call, without valgrind, on core 0: the least of `rounds` runs
    of n calls (the machine's other work only adds)."""
    out = []
    for _ in range(rounds):
        r = subprocess.run(["taskset", "-c", "0", PY, "-c", APP_ALONE, target, path, str(n)], check=True,
                           capture_output=True, text=True, cwd=WEB, env=env, timeout=600)
        out.append(float(r.stdout.split()[-1]))
    return min(out)


def write_results(table, servers, args, notes=()):
    """bench/results/serve-asgi-app-instructions.json: each row's count per server and the app
    alone, and each server's own share (the row minus the app alone)."""
    from results import write_result

    own = [f"{s}: own" for s in servers]
    rows = []
    for row, (alone, cells) in table.items():
        r = {"row": ROWS[row][0], "app alone": None if alone is None else round(alone)}
        for s in servers:
            r[s] = None if cells.get(s) is None else round(cells[s])
        for s, o in zip(servers, own, strict=True):
            r[o] = None if cells.get(s) is None or alone is None else round(cells[s] - alone)
        rows.append(r)
    cols = ["app alone"] + servers + own
    return write_result(
        "serve-asgi-app-instructions", group="goloop serve (ASGI)",
        title="TechEmpower's JSON and plaintext on Starlette and FastAPI: instructions per request, "
              "the application alone and each server's own share (callgrind)",
        command=f"python3 bench/analysis/asgi_instr.py --rows {','.join(table)} --servers \"{','.join(servers)}\" "
                f"--n {args.n} --conns {args.conns} --results",
        method="Every process of the server under `valgrind --tool=callgrind --trace-children=yes`, instructions "
               f"counted over {args.n} requests after a warm-up of {WARMUP}, divided by the requests; "
               f"{args.conns} keep-alive connections, JSON one request at a time per connection, plaintext 16 "
               "pipelined. One worker each, the lifespan off (these rows need no database); uvicorn with uvloop "
               "and httptools, Granian --runtime-threads 1. 'app alone' is the application awaited n times in one "
               "coroutine on asyncio's loop with a copy of a scope and do-nothing receive/send coroutines (minus a "
               "run of 0 calls); ': own' is a server's row minus it, what the server itself costs. The machine's "
               "load does not move these counts.",
        columns=["row"] + cols, units=dict.fromkeys(cols, "instructions"), rows=rows, better="lower",
        notes=list(notes), modules=("granian", "uvicorn", "uvloop", "httptools", "starlette", "fastapi"),
        goloop="goloop serve", compare=[s for s in servers if s != "goloop serve"], order=21, row_label="row")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--servers", default="goloop serve,granian,uvicorn")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--annotate", type=int, default=0, metavar="N")
    ap.add_argument("--inclusive", action="store_true")
    ap.add_argument("--no-alone", action="store_true", help="skip the app alone")
    ap.add_argument("--keep", metavar="DIR", help="copy each callgrind dump here")
    ap.add_argument("--results", action="store_true")
    ap.add_argument("--cache-sim", action="store_true", help="callgrind's cache simulation: L1 and last-level "
                    "misses per request beside the instructions")
    ap.add_argument("--alone-cpu", action="store_true", help="only the app alone's CPU µs per call (no valgrind: "
                    "core 0, the least of 5 runs of 20,000 calls), the floor of any server's CPU per request")
    args = ap.parse_args()
    if args.alone_cpu:
        env = dict(os.environ, PYTHONHASHSEED="0",
                   PYTHONPATH=os.pathsep.join([WEB, os.path.join(BENCH, "servers"), os.environ.get("PYTHONPATH", "")]))
        for row in args.rows.split(","):
            title, target, path, _ = ROWS[row]
            print(f"{title}: app alone {app_alone_cpu(target, path, 20000, 5, env):.2f} µs CPU per call", flush=True)
        return
    servers = [s for s in args.servers.split(",") if installed(s)]
    print("| row | app alone | " + " | ".join(f"{s} (own)" for s in servers) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in servers) + " |", flush=True)
    table = {}
    with tempfile.TemporaryDirectory(prefix="asgi-instr-") as tmp:
        env = dict(os.environ, PYTHONHASHSEED="0", GODEBUG="asyncpreemptoff=1",
                   PYTHONPATH=os.pathsep.join([WEB, os.path.join(BENCH, "servers"), os.path.join(REPO, "pyshim"), os.environ.get("PYTHONPATH", "")]))
        for row in args.rows.split(","):
            title, target, path, depth = ROWS[row]
            alone, alone_ev = None, {}
            if not args.no_alone:
                try:
                    alone = app_alone(target, path, args.n, tmp, env, alone_ev, args.cache_sim)
                except Exception as exc:  # noqa: BLE001
                    print(f"# {row}: app alone failed: {exc}", file=sys.stderr, flush=True)
            cells, shown = {}, []
            for name in servers:
                try:
                    ins, dumps, per = instructions(name, target, path, depth, args.n, args.conns, tmp, env, args.cache_sim)
                except Exception as exc:  # noqa: BLE001 (a failed cell is reported, not fatal)
                    print(f"# {row} / {name}: failed: {exc}", file=sys.stderr, flush=True)
                    shown.append("failed")
                    continue
                cells[name] = ins
                keep_and_annotate(dumps, args, f"{row}-{name.replace(' ', '_')}", f"{row} / {name}")
                cell = f"{ins:,.0f}" + (f" ({ins - alone:,.0f})" if alone is not None else "")
                if args.cache_sim:
                    theirs = misses(alone_ev)
                    cell += "".join(f" · {lv} misses {v:,.0f}" + (f" ({v - theirs[lv]:,.0f})" if alone_ev else "")
                                    for lv, v in misses(per).items())
                shown.append(cell)
            table[row] = (alone, cells)
            first = "-" if alone is None else f"{alone:,.0f}"
            if args.cache_sim and alone_ev:
                first += "".join(f" · {lv} misses {v:,.0f}" for lv, v in misses(alone_ev).items())
            print(f"| {title} | {first} | " + " | ".join(shown) + " |", flush=True)
    if args.results:
        write_results(table, servers, args)


if __name__ == "__main__":
    main()
