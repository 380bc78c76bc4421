#!/usr/bin/env python3
"""Static files: `goloop serve --static-path-mount` against Granian's static files, nginx and
WhiteNoise under gunicorn (gthread), for a small file and a 1 MiB one.

    python3 bench/static_bench.py [--duration 5] [--rounds 1] [--conns 50] [--servers ...]

Each server serves the same directory at /static (its application, when it has one, is never
called), as a fresh process tree pinned to core 0 (`taskset -c 0`); after a 1 s warm-up
`wrk -t1 -cN` runs on core 1 against one file. Reported: requests/s and the server's CPU µs
per request (utime+stime of every thread of every process of its tree, from /proc, over the
measured run, divided by the requests wrk counted). With --rounds N each cell is the run with
the least CPU per request. nginx is Debian's, started with a generated configuration in a
temporary directory (one worker, sendfile on, access log off); every server runs without an
access log. Results: bench/results/static-files-rps.json and static-files-cpu.json (and lines on stdout).
Needs wrk, nginx, granian, gunicorn, whitenoise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import serve_bench  # noqa: E402
from harness import free_port  # noqa: E402

PY = sys.executable
BIN = os.path.dirname(PY)
FILES = {"small": ("small file (1 KiB CSS)", "site.css", 1024), "1mib": ("1 MiB file", "big.bin", 1 << 20)}
SERVERS = ["goloop", "granian", "nginx", "whitenoise+gunicorn"]

APP = '''
async def app(scope, receive, send):  # never called for /static
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def wsgi(environ, start_response):
    start_response("404 Not Found", [])
    return [b""]


def whitenoise_app():
    from whitenoise import WhiteNoise
    import os
    return WhiteNoise(wsgi, root=os.environ["STATIC_DIR"], prefix="static/")
'''

NGINX_CONF = '''
daemon off;
master_process on;
worker_processes 1;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location /static/ {{ alias {dir}/; expires 1d; etag on; }}
    }}
}}
'''


def server_argv(name, port, tmp, static_dir):
    if name == "goloop":
        return [PY, "-m", "goloop", "serve", "bapp:app", "--port", str(port), "--no-access-log",
                "--app-dir", tmp, "--static-path-route", "/static", "--static-path-mount", static_dir]
    if name == "granian":
        return [os.path.join(BIN, "granian"), "--interface", "asgi", "--workers", "1", "--runtime-threads", "1",
                "--port", str(port), "--static-path-route", "/static", "--static-path-mount", static_dir,
                "--working-dir", tmp, "bapp:app"]
    if name == "nginx":
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(tmp=tmp, port=port, dir=static_dir))
        return [shutil.which("nginx") or "/usr/sbin/nginx", "-c", conf, "-p", tmp]
    if name == "whitenoise+gunicorn":
        return [os.path.join(BIN, "gunicorn"), "-w", "1", "-k", "gthread", "--threads", "8", "-b",
                f"127.0.0.1:{port}", "--chdir", tmp, "bapp:whitenoise_app()"]
    raise ValueError(name)


def run_one(name, tmp, static_dir, path, duration, conns):
    """One measured run (serve_bench.run_one: pinned server tree, wrk warm-up, CPU from /proc)."""
    port = free_port()
    argv = server_argv(name, port, tmp, static_dir)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, os.path.join(REPO, "pyshim")]), STATIC_DIR=static_dir)
    res = serve_bench.run_one(argv, port, f"/static/{path}", duration, conns, 1, False, env=env)
    if res.get("errors"):
        raise RuntimeError(f"{name}: {res['errors']} errors or non-2xx answers")
    return res


def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def nginx_version():
    try:
        out = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr
        return out.strip().split("/")[-1].split()[0]
    except (OSError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--note", action="append", default=[], help="a note line for the results file")
    args = ap.parse_args()
    servers = args.servers.split(",")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="goloop-static-bench-") as tmp:
        static_dir = os.path.join(tmp, "public")
        os.makedirs(static_dir)
        for _, fname, size in FILES.values():
            with open(os.path.join(static_dir, fname), "wb") as f:
                f.write((b"p{color:red}\n" * (size // 13 + 1))[:size] if size < 4096 else os.urandom(size))
        with open(os.path.join(tmp, "bapp.py"), "w") as f:
            f.write(APP)
        for key, (label, fname, _) in FILES.items():
            for name in servers:
                best = None
                for _ in range(args.rounds):
                    try:
                        r = run_one(name, tmp, static_dir, fname, args.duration, args.conns)
                    except Exception as exc:  # noqa: BLE001 (reported in the table)
                        print(f"{name} {key}: {exc}", file=sys.stderr)
                        continue
                    if best is None or r["cpu_us"] < best["cpu_us"]:
                        best = r
                results[(key, name)] = best
                if best:
                    print(f"{label:24} {name:22} {best['value']:10.0f} req/s {best['cpu_us']:8.1f} µs CPU/req "
                          f"errors {best['errors']}", flush=True)
    from results import write_result

    peers = [n for n in servers if n != "goloop"]
    method = (f"Each server serves the same directory at /static from a fresh process tree pinned to core 0; "
              f"after a 1 s warm-up, wrk -t1 -c{args.conns} -d{args.duration}s on core 1 fetches one file over "
              f"keep-alive HTTP/1.1. CPU per request: utime+stime of the server's whole tree from /proc over the "
              f"run, divided by wrk's request count; each cell is the best of {args.rounds} round(s) by CPU per "
              f"request. goloop serve (--static-path-mount: sendfile(2) from the loop thread), Granian "
              f"(--static-path-mount, ASGI, 1 worker, 1 runtime thread), nginx (one worker, sendfile on), "
              f"WhiteNoise under gunicorn (1 worker, gthread, 8 threads); no access logs.")
    command = f"python bench/static_bench.py --duration {args.duration} --rounds {args.rounds} --conns {args.conns}"
    for suffix, title, key, unit, better, nd in (
            ("rps", "Static files: requests/s", "value", "req/s", "higher", 0),
            ("cpu", "Static files: server CPU per request", "cpu_us", "µs", "lower", 1)):
        rows = []
        for fkey, (label, _, _) in FILES.items():
            row = {"row": label}
            for name in servers:
                r = results.get((fkey, name))
                row[name] = round(r[key], nd) if r else None
            rows.append(row)
        write_result(f"static-files-{suffix}", group="goloop serve: static files", title=title, command=command,
                     method=method, columns=["row"] + servers, units={n: unit for n in servers}, rows=rows,
                     better=better, notes=list(args.note), compare=peers, order=10 if suffix == "rps" else 20,
                     versions={"goloop": version("goloop"), "granian": version("granian"),
                               "nginx": nginx_version(), "whitenoise": version("whitenoise"),
                               "gunicorn": version("gunicorn")})


if __name__ == "__main__":
    main()
