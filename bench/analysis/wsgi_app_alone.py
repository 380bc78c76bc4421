#!/usr/bin/env python3
"""The CPU one request of a web benchmark's WSGI app costs alone: the app (bench/web/) called
n times by one thread, or by several threads at once as a pool's would, each with a copy of an
environ like a server's and a start_response that does nothing (no server, no socket to the
client; the database is real: a private PostgreSQL of bench/web/pg.py on core 1). The process
is pinned to core 0, as bench/web_bench.py pins the servers.

With 4 threads (the suite's pools) their database waits overlap as a server's pool threads'
do, and the figure is what any 4-thread server's row costs at least: a server's row minus it
is that server's own share. With one thread every wait leaves the core idle and each wake-up
costs more: that figure is above some servers' whole rows.

    python3 bench/analysis/wsgi_app_alone.py --apps wsgi_raw,flask,django --tests db,fortunes
"""
from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
import threading
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "web"))
import web_bench as wb  # noqa: E402

import pg  # noqa: E402


def environ_for(path):
    p, _, qs = path.partition("?")
    return {"REQUEST_METHOD": "GET", "SCRIPT_NAME": "", "PATH_INFO": p, "QUERY_STRING": qs,
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:8000", "HTTP_ACCEPT": "*/*",
            "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": False,
            "wsgi.run_once": False}


def start_response(status, headers, exc_info=None):
    return None


def calls(app, path, n):
    for _ in range(n):
        it = app(environ_for(path), start_response)
        for _part in it:
            pass
        close = getattr(it, "close", None)
        if close is not None:
            close()


def per_request(app, path, n, threads):
    """CPU µs of the whole process per call (the pool's own threads included), with `threads`
    threads calling the app at once (n/threads calls each), as a pool's threads would."""
    t0 = time.process_time()
    if threads == 1:
        calls(app, path, n)
    else:
        ts = [threading.Thread(target=calls, args=(app, path, n // threads)) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        n = n // threads * threads
    return (time.process_time() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default="wsgi_raw")
    ap.add_argument("--tests", default="db,fortunes")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,4", help="threads calling the app at once, each count in turn")
    args = ap.parse_args()
    os.sched_setaffinity(0, {int(wb.SERVER_CPU)})
    with pg.Cluster(cpu=wb.CLIENT_CPU) as cluster:
        os.environ.update(cluster.env(), WEB_WSGI_POOL=str(wb.WSGI_THREADS))
        for name in args.apps.split(","):
            _interface, target, _ = wb.APPS[name]
            mod, _, attr = target.partition(":")
            app = getattr(importlib.import_module(mod), attr)
            for test in args.tests.split(","):
                path = wb.TESTS[test][1]
                for threads in (int(t) for t in args.threads.split(",")):
                    per_request(app, path, max(threads, args.n // 10), threads)  # warm-up: pool, caches
                    runs = [per_request(app, path, args.n, threads) for _ in range(args.repeat)]
                    print(f"{name} {test}, {threads} thread(s): {min(runs):.1f} µs CPU per request alone "
                          f"(runs {', '.join(f'{r:.1f}' for r in runs)})", flush=True)


if __name__ == "__main__":
    main()
