#!/usr/bin/env python3
"""How long interpreter exit takes after heavy use of event loops, goloop's against asyncio's.

    python3 bench/exit_time.py [--loops 40] [--rounds 5] [--no-write]

A child interpreter uses N loops one after another (each: a default-executor call, a
getaddrinfo, a TCP server (every other one over TLS) with one client exchange; a third of
the servers are left open, a quarter of the loops neither closed nor their executor shut
down), prints the wall clock when its last statement ran, and exits. The exit time is the
moment the parent saw the child gone minus that stamp: what the interpreter's shutdown waits
for (threading's join of non-daemon threads, concurrent.futures' atexit join of executor
threads, the collection of unclosed loops, atexit handlers). Rounds alternate goloop and
asyncio; the median of each is reported. Wall-clock figures on a loaded machine are noisy:
the question is whether goloop's exit waits for something asyncio's does not (seconds, not
milliseconds)."""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# (tests_py/test_exit_prompt.py runs it too)
CHILD = r"""
import asyncio, faulthandler, os, ssl, sys, threading, time
faulthandler.dump_traceback_later(60, exit=True)  # a hang: every thread's stack, then exit 1
kind, n, key, crt = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if kind == "goloop":
    import goloop
    new_loop = goloop.new_event_loop
else:
    new_loop = asyncio.new_event_loop
sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
sctx.load_cert_chain(crt, key)
cctx = ssl.create_default_context()
cctx.check_hostname = False
cctx.verify_mode = ssl.CERT_NONE
kept = []
before = set(threading.enumerate())

async def use(i):
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, time.sleep, 0.001)
    await loop.getaddrinfo("localhost", 80)
    async def echo(r, w):
        w.write(await r.readline())
        await w.drain()
        w.close()
    tls = i % 2 == 1
    srv = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=sctx if tls else None)
    port = srv.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx if tls else None)
    w.write(b"x\n")
    assert await r.readline() == b"x\n"
    w.close()
    if i % 3 == 0:
        kept.append(srv)  # left open
    else:
        srv.close()
        await srv.wait_closed()

for i in range(n):
    loop = new_loop()
    loop.run_until_complete(use(i))
    if i % 4 == 0:
        kept.append(loop)  # neither closed nor its executor shut down
    else:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
# servers in process (goloop: goloop.serve's Server on its loop; asyncio: uvicorn's, when
# installed): ASGI and WSGI (a pool of threads), plain and TLS, a few requests each; one
# of each left serving in a thread of its own at exit; an explicit thread pool left open
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(4)
pool.submit(time.sleep, 0.001).result()
kept.append(pool)

async def asgi(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

def wsgi(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]

def make_server(app, iface, tls):
    opts = dict(ssl_certfile=crt, ssl_keyfile=key) if tls else {}
    if kind == "goloop":
        from goloop.serve.server import Server
        return Server(app, port=0, access_log=False, interface=iface, **opts)
    import uvicorn
    cfg = uvicorn.Config(app, port=0, interface="asgi3" if iface == "asgi" else iface, lifespan="off",
                         log_level="error", **opts)
    return uvicorn.Server(cfg)

def port_of(srv):
    socks = getattr(srv, "sockets", None) or [s for v in srv.servers for s in v.sockets]
    return socks[0].getsockname()[1]

async def serve_some(app, iface, tls, stop):
    srv = make_server(app, iface, tls)
    task = asyncio.ensure_future(srv.serve())
    while not srv.started and not task.done():
        await asyncio.sleep(0.005)
    for _ in range(5):
        r, w = await asyncio.open_connection("127.0.0.1", port_of(srv), ssl=cctx if tls else None)
        w.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = await r.read()
        assert data.endswith(b"ok"), data
        w.close()
    if stop:
        if kind == "goloop":
            srv.request_exit()
        else:
            srv.should_exit = True
        await task
    else:
        await task  # serves until the interpreter exits

try:
    if kind != "goloop":
        import uvicorn  # noqa: F401
    serving = True
except ImportError:
    serving = False
if serving and n:
    for i, (app, iface) in enumerate([(asgi, "asgi"), (wsgi, "wsgi")] * 2):
        loop = new_loop()
        loop.run_until_complete(serve_some(app, iface, i % 2 == 1, True))
        loop.close()
    for app, iface in [(asgi, "asgi"), (wsgi, "wsgi")]:
        up = threading.Event()
        def left(app=app, iface=iface):
            loop = new_loop()
            asyncio.set_event_loop(loop)
            loop.call_later(1, up.set)
            loop.run_until_complete(serve_some(app, iface, True, False))
        threading.Thread(target=left, daemon=True).start()
        up.wait(60)
# the threads the interpreter's shutdown joins (non-daemon), by name
joined = [t.name for t in threading.enumerate() if t not in before and not t.daemon]
print("END", time.time(), ",".join(joined) or "-", flush=True)
"""


def one(kind: str, n: int, key: str, crt: str) -> tuple[float, int]:
    # (cwd: the key's folder, not the clone's, whose goloop/ folder is the Go engine's)
    p = subprocess.Popen([sys.executable, "-c", CHILD, kind, str(n), key, crt], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, cwd=os.path.dirname(key))
    out, _ = p.communicate(timeout=600)
    gone = time.time()
    end = [line for line in out.splitlines() if line.startswith("END ")]
    if p.returncode != 0 or not end:
        raise SystemExit(f"{kind}: the child failed (status {p.returncode}): {out[-500:]}")
    _, stamp, joined = end[0].split()
    return gone - float(stamp), 0 if joined == "-" else len(joined.split(","))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only, no bench/results file")
    args = ap.parse_args()
    d = tempfile.mkdtemp()
    key, crt = os.path.join(d, "k.pem"), os.path.join(d, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True)
    times: dict[str, list[float]] = {"goloop": [], "asyncio": []}
    threads: dict[str, int] = {}
    for r in range(args.rounds):
        for kind in ("goloop", "asyncio") if r % 2 == 0 else ("asyncio", "goloop"):
            t, nd = one(kind, args.loops, key, crt)
            times[kind].append(t)
            threads[kind] = nd
            print(f"round {r} {kind}: exit {t * 1000:.0f} ms, {nd} threads for shutdown to join", flush=True)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"median exit: goloop {med['goloop']:.0f} ms, asyncio {med['asyncio']:.0f} ms")
    if args.no_write:
        return
    from results import write_result
    write_result(
        "exit-time", group="The event loop", title=f"Interpreter exit after heavy use ({args.loops} loops)",
        command=f"python bench/exit_time.py --loops {args.loops} --rounds {args.rounds}",
        method=("A child interpreter uses N loops one after another (a default-executor call, a getaddrinfo, "
                "a TCP server with one client exchange, every other one over TLS; a third of the servers "
                "left open, a quarter of the loops neither closed nor their executor shut down), then HTTP "
                "servers in process (goloop: goloop.serve's Server; asyncio: uvicorn's): ASGI and WSGI, plain "
                "and TLS, five requests each, one of each left serving in a thread at exit, and a thread pool "
                "left open; prints the "
                "wall clock at its last statement and exits; the exit time is when the parent saw it gone "
                f"minus that stamp. {args.rounds} rounds, goloop and asyncio alternating; medians."),
        better="lower", columns=["row", "goloop", "asyncio"], units={"goloop": "ms", "asyncio": "ms"},
        rows=[{"row": "interpreter exit (median)", "goloop": round(med["goloop"]),
               "asyncio": round(med["asyncio"])},
              {"row": "threads the shutdown joins (idle executor workers)", "goloop": threads["goloop"],
               "asyncio": threads["asyncio"]}],
        rounds={k: [round(x * 1000) for x in v] for k, v in times.items()},
        modules=("goloop",))


if __name__ == "__main__":
    main()
