#!/usr/bin/env python3
"""Instructions a loop spends per echo of a streams echo server and per request of the HTTP
keep-alive server (callgrind), with where they go.

    python3 -P bench/analysis/io_cost.py [--loops goloop,uvloop] [--rows streams,http]
                                [--n 3000,9000] [--annotate DIR] [--repeat R]
                                [--results ID [--note TEXT]]

Rows: streams (the streams echo of bench/servers/echo_server.py: asyncio.start_server,
read(102400) + write + drain), protocol (its asyncio.Protocol echo: data_received writes
the data back), http (bench/servers/http_server.py's asyncio.Protocol + parser, goloop.http
on goloop, httptools otherwise), httptools (the same with httptools on every loop). Each
row's server runs under `valgrind --tool=callgrind` twice,
serving N1 and then N2 requests from a plain-socket client (10 connections, each sends
its next request when its answer is back; 1 KiB echoes, 13-byte HTTP bodies), and stops
itself after the last. (instructions(N2) - instructions(N1)) / (N2 - N1) is the cost of one
request, start-up excluded. With --annotate DIR the N2 run's file is kept and each
function's own instructions are summed by group (goloop's Go, goloop's C, uvloop, the
interpreter, allocator, libc's syscall wrappers ...), per request, from the difference of
the two runs' profiles. Kernel time is not counted (callgrind sees user space only).
A loop written goloop=DIR imports goloop from DIR. --repeat R measures each cell R times
(figure: the mean; the runs are kept in the results). --results ID writes the table as
bench/results/<ID>.json (the interpreter's version in its title); a loop that does not import
or that crashes gets its message as the cell's error. Needs valgrind.
"""

import argparse
import collections
import os
import re
import socket
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import harness  # noqa: E402
CONNS = 10
ROW_LABELS = {"protocol": "echo Protocol 1 KiB", "streams": "echo streams 1 KiB",
              "http": "HTTP keep-alive 13 B (goloop.http on goloop, httptools otherwise)",
              "httptools": "HTTP keep-alive 13 B (httptools)"}
HTTP_REQ = b"GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: io_cost\r\nAccept: */*\r\n\r\n"


def serve(loop_name, row, n, ready_path):
    sys.path.insert(0, os.path.join(BENCH, "servers"))
    import asyncio
    loop = harness.new_loop(loop_name)
    asyncio.set_event_loop(loop)
    count = 0

    def one():
        nonlocal count
        count += 1
        if count == n:
            loop.call_soon(loop.stop)

    if row == "protocol":
        import echo_server

        class CountingEcho(echo_server.EchoProtocol):
            __slots__ = ()

            def data_received(self, data):
                self.transport.write(data)
                one()
        server = loop.run_until_complete(loop.create_server(CountingEcho, "127.0.0.1", 0))
    elif row == "streams":
        async def echo(reader, writer):
            try:
                while True:
                    data = await reader.read(102400)
                    if not data:
                        break
                    writer.write(data)
                    await writer.drain()
                    one()
            finally:
                writer.close()
        server = loop.run_until_complete(asyncio.start_server(echo, "127.0.0.1", 0))
    else:
        import http_server
        parser = harness.http_parser_module("goloop" if loop_name == "goloop" and row == "http" else "httptools")
        base = http_server.make_protocol(parser, http_server.build_response(13))

        class Counting(base):
            __slots__ = ()

            def on_message_complete(self):
                base.on_message_complete(self)
                one()
        server = loop.run_until_complete(loop.create_server(Counting, "127.0.0.1", 0))
    with open(ready_path + ".tmp", "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    os.rename(ready_path + ".tmp", ready_path)
    loop.run_forever()
    # no teardown: what closing pending tasks and connections costs (and logs, reading
    # source files for tracebacks) varies between runs and is no request's cost
    os._exit(0)


def client(row, port, n):
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNS)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if row in ("streams", "protocol"):
        msg = b"x" * 1024
        want = len(msg)
    else:
        msg = HTTP_REQ
        want = None
    sent = 0
    per = [0] * CONNS
    for i in range(CONNS):
        per[i] = n // CONNS + (1 if i < n % CONNS else 0)
    import selectors
    sel = selectors.DefaultSelector()
    bufs = {}
    for i, s in enumerate(socks):
        if per[i]:
            s.sendall(msg)
            per[i] -= 1
            bufs[s] = (i, bytearray())
            sel.register(s, selectors.EVENT_READ)
    while bufs:
        for key, _ in sel.select(60):
            s = key.fileobj
            i, buf = bufs[s]
            d = s.recv(65536)
            if not d:
                raise SystemExit("server closed early")
            buf += d
            done = len(buf) >= want if want else buf.endswith(b"X" * 13)
            if done:
                buf.clear()
                if per[i]:
                    s.sendall(msg)
                    per[i] -= 1
                else:
                    sel.unregister(s)
                    del bufs[s]
    for s in socks:
        s.close()


def run_one(loop, row, n, tmp, out):
    ready = os.path.join(tmp, f"ready-{n}")
    env = dict(os.environ, GODEBUG="asyncpreemptoff=1")
    loop, _, path = loop.partition("=")
    if path:
        env["PYTHONPATH"] = path
    return harness.callgrind_serve(
        [f"--callgrind-out-file={out}", os.path.abspath(__file__), "--serve", loop, row, str(n), ready],
        ready, env, lambda port: client(row, port, n), f"{loop}/{row}", start_timeout=600, timeout=900)


GROUPS = [  # (group, test on (object file, function name)), first match wins
    ("goloop Go runtime (cgo crossings, scheduler, GC)", lambda o, f: "_goloop" in o and (
        f.startswith(("runtime.", "runtime/", "_cgo", "crosscall", "x_cgo", "sync.", "internal/")))),
    ("goloop Go (engine, binding's Go)", lambda o, f: "_goloop" in o and ("." in f and not f.startswith("gl_"))),
    ("goloop C (binding)", lambda o, f: "_goloop" in o),
    ("uvloop (Cython + libuv)", lambda o, f: "uvloop" in o or "loop.cpython" in o),
    ("httptools", lambda o, f: "httptools" in o or "parser.cpython" in o or "url_parser" in o),
    ("asyncio C (_asyncio: Future, Task)", lambda o, f: "_asyncio" in o),
    ("allocator (pymalloc, malloc)", lambda o, f: f.startswith(("_PyObject_Malloc", "_PyObject_Free", "pymalloc", "object_dealloc", "_int_malloc", "_int_free", "malloc", "free", "PyObject_Malloc", "PyObject_Free", "_PyObject_GC_New", "PyObject_GC_Del", "gc_alloc", "_PyObject_GC_Link", "cfree", "tcache"))),
    ("libc syscall wrappers and other libc", lambda o, f: "libc" in o or "libpthread" in o),
    ("interpreter: bytecode eval", lambda o, f: f.startswith(("_PyEval_EvalFrameDefault",))),
    ("interpreter: the rest of CPython (objects, calls, dicts, GC)", lambda o, f: True),
]


def self_costs(path):
    """Each function's own instructions in a callgrind file: {(object, function): count}."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    res = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?):(\S+)(?:\s+\[(.*)\])?\s*$", line)
        if not m:
            continue
        res[(m.group(4) or m.group(2), m.group(3))] += int(m.group(1).replace(",", ""))
    return res


def breakdown(c1, c2, dn):
    diff = collections.Counter()
    for k in set(c1) | set(c2):
        diff[k] = c2.get(k, 0) - c1.get(k, 0)
    groups = collections.Counter()
    tops = collections.defaultdict(collections.Counter)
    for (o, f), v in diff.items():
        for name, test in GROUPS:
            if test(o, f):
                groups[name] += v
                tops[name][f] += v
                break
    return {g: v / dn for g, v in groups.items()}, {g: [(f, v / dn) for f, v in t.most_common(8)] for g, t in tops.items()}


def tag(loop):
    """goloop=DIR -> goloop-<DIR's last part>: a loop's name in files and lines."""
    name, _, path = loop.partition("=")
    return name + ("-" + os.path.basename(path.rstrip("/")) if path else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="goloop,uvloop")
    ap.add_argument("--rows", default="streams,http")
    ap.add_argument("--n", default="3000,9000")
    ap.add_argument("--annotate", metavar="DIR", help="keep the callgrind files here and print the breakdown")
    ap.add_argument("--top", action="store_true", help="with --annotate: each group's top functions")
    ap.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=1, help="measure each cell this many times (the mean)")
    ap.add_argument("--results", metavar="ID", help="write bench/results/<ID>.json")
    ap.add_argument("--note", action="append", default=[], help="a note line for the results (repeatable)")
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve[0], args.serve[1], int(args.serve[2]), args.serve[3])
    n1, n2 = (int(x) for x in args.n.split(","))
    runs, errors = collections.defaultdict(list), {}
    with tempfile.TemporaryDirectory() as tmp:
        for row in args.rows.split(","):
            for loop in args.loops.split(","):
                t = tag(loop)
                f1 = os.path.join(args.annotate or tmp, f"cg.{t}.{row}.1")
                f2 = os.path.join(args.annotate or tmp, f"cg.{t}.{row}.2")
                try:
                    for _ in range(args.repeat):
                        i1 = run_one(loop, row, n1, tmp, f1)
                        i2 = run_one(loop, row, n2, tmp, f2)
                        runs[row, t].append((i2 - i1) / (n2 - n1))
                        print(f"{row:8} {t:16} {(i2 - i1) / (n2 - n1):9,.0f} instructions per request", flush=True)
                except (SystemExit, OSError, subprocess.SubprocessError) as exc:
                    if not args.results:
                        raise
                    errors[row, t] = " ".join(str(exc).split())[-600:]
                    print(f"{row:8} {t:16} failed: {errors[row, t]}", flush=True)
                    continue
                if args.annotate:
                    g, tops = breakdown(self_costs(f1), self_costs(f2), n2 - n1)
                    for name, v in sorted(g.items(), key=lambda x: -x[1]):
                        print(f"    {v:8,.0f}  {name}")
                        if args.top:
                            for f, fv in tops[name]:
                                print(f"               {fv:8,.0f}  {f}")
                    sys.stdout.flush()
    if args.results:
        write(args, runs, errors)


def write(args, runs, errors):
    """bench/results/<ID>.json: one row per I/O row, one column per loop (the mean of the runs)."""
    import platform
    from results import write_result
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sched_cost import command_loops, label
    specs = args.loops.split(",")
    tags = {label(lp): tag(lp) for lp in specs}  # column -> the runs' key
    loops = list(tags)
    rows = []
    for row in args.rows.split(","):
        r = {"row": ROW_LABELS.get(row, row)}
        for lp in loops:
            got = runs.get((row, tags[lp]))
            r[lp] = round(sum(got) / len(got)) if got else None
        errs = {lp: errors[row, tags[lp]] for lp in loops if (row, tags[lp]) in errors}
        if errs:
            r["errors"] = errs
        rows.append(r)
    rounds = {ROW_LABELS.get(row, row): {lp: [round(x) for x in runs.get((row, tags[lp]), [])] for lp in loops}
              for row in args.rows.split(",")}
    write_result(
        args.results, group="The event loop",
        title=f"The loop's I/O rows on CPython {platform.python_version()}: user-space instructions per request (callgrind)",
        command=f"python3 -P bench/analysis/io_cost.py --results {args.results} --loops {command_loops(specs)} "
                f"--rows {args.rows} --n {args.n} --repeat {args.repeat}",
        method=(f"Each row's server (`bench/analysis/io_cost.py`: asyncio Protocol echo, streams echo, an asyncio "
                f"Protocol feeding an HTTP parser) under `valgrind --tool=callgrind`, serving N1 and then N2 "
                f"requests from a plain-socket client ({CONNS} connections, each sends its next request when "
                f"its answer is back); (instructions(N2) - instructions(N1)) / (N2 - N1) is one request's "
                f"user-space cost (the kernel's is not counted), start-up excluded; each figure the mean of "
                f"{args.repeat} such measurement(s) (`rounds` keeps each). Load does not move instruction counts, "
                f"but how many requests one wake-up serves does, so small-I/O figures vary between runs. A "
                f"column goloop (DIR) is a copy of another build (goloop=DIR), e.g. before a change."),
        better="lower", columns=["row"] + loops, units={lp: "instructions" for lp in loops}, rows=rows,
        compare=[lp for lp in loops if lp != "goloop"] if "goloop" in loops else None, notes=args.note,
        rounds=rounds, order=37, row_label="request",
        modules=tuple(lp for lp in loops if lp.isidentifier() and lp not in ("goloop", "asyncio")) + ("httptools",))


if __name__ == "__main__":
    if os.path.isdir(os.path.join(os.getcwd(), "goloop", "binding")) and sys.flags.safe_path == 0:
        sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.getcwd()]
    main()
