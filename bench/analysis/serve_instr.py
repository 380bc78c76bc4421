#!/usr/bin/env python3
"""Instructions per request of `goloop serve`, counted by callgrind: stable on a shared machine
where CPU-time benchmarks are not (other processes change the time, not the instructions).

    python3 bench/analysis/serve_instr.py [--app hello] [--depth 16] [--conns 10] [--n 5000] [--https]
                                          [--access-log] [--annotate [N]]

The server runs under `valgrind --tool=callgrind`; after a warm-up the counters are zeroed
(callgrind_control -z), n GET requests are served (pipelined `depth` deep on `conns`
connections, each batch's responses read before the next) and the counters dumped: their
total / n is the per-request count. --annotate prints the N functions with the largest
inclusive count per request (where a request's instructions go). Go's async preemption is
off (GODEBUG=asyncpreemptoff=1): callgrind asserts on its SIGURG. --https serves over TLS (a
certificate made with openssl; the client does not verify it). Needs valgrind.
"""
import argparse
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
APPS = os.path.join(BENCH, "servers")  # serve_apps.py
sys.path.insert(0, BENCH)
from harness import free_port, make_certs, wait_port  # noqa: E402


def drive(port, n, depth, conns, path, tls=False):
    """n GET requests, `depth` per write, on `conns` connections; waits for every response."""
    req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").encode()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        socks = [ctx.wrap_socket(s) for s in socks]
    left = n
    while left > 0:
        batch = []
        for s in socks:
            k = min(depth, left)
            if k == 0:
                break
            s.sendall(req * k)
            batch.append((s, k))
            left -= k
        for s, k in batch:
            buf = b""
            while buf.count(b"HTTP/1.1 ") < k or not _complete(buf, k):
                d = s.recv(65536)
                if not d:
                    raise RuntimeError("connection closed")
                buf += d
    for s in socks:
        s.close()


def _complete(buf, k):
    # every response of the benchmark apps has a content-length: the batch is complete when
    # the k-th head and its body arrived
    heads = [m.end() for m in re.finditer(rb"\r\n\r\n", buf)]
    if len(heads) < k:
        return False
    m = re.findall(rb"content-length: (\d+)", buf, re.I)
    return len(m) >= k and len(buf) >= heads[k - 1] + int(m[k - 1])


def count(app, n, depth, conns, path, out, certs=None, access_log=False):
    """Instructions of the server while it serves n requests (after a warm-up), and the dump;
    over TLS with certs (certificate, key); with access_log, each request's line written (to a
    file: the server's stderr)."""
    port = free_port()
    env = dict(os.environ, GODEBUG="asyncpreemptoff=1", PYTHONPATH=os.pathsep.join([APPS, os.path.join(REPO, "pyshim")]))
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-P", "-m", "goloop",
            "serve", f"serve_apps:{app}", "--app-dir", APPS, "--port", str(port),
            "--lifespan", "off", "--timeout-keep-alive", "300"]
    argv += ["--access-log", "--log-level", "info"] if access_log else ["--no-access-log", "--log-level", "warning"]
    if certs:
        argv += ["--ssl-certfile", certs[0], "--ssl-keyfile", certs[1]]
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, env=env, cwd=APPS, stdout=subprocess.DEVNULL, stderr=errf)
    proc.errf = errf
    try:
        wait_port(port, proc, timeout=300)  # valgrind starts slowly
        drive(port, 1000, depth, conns, path, bool(certs))  # warm-up
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        drive(port, n, depth, conns, path, bool(certs))
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
    finally:
        proc.kill()
        proc.wait()
    dump = [f for f in sorted(os.listdir(os.path.dirname(out))) if f.startswith(os.path.basename(out) + ".")]
    path_ = os.path.join(os.path.dirname(out), dump[-1])
    with open(path_) as f:
        m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
    return int(m.group(1)), path_


def per_function(out, incl):
    """function -> its instructions, inclusive or its own (callgrind_annotate)."""
    txt = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if incl else 'no'}", "--threshold=100", out],
                         capture_output=True, text=True).stdout
    res = {}
    for line in txt.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if m and ":" in m.group(2):
            res[m.group(2).strip()] = res.get(m.group(2).strip(), 0) + int(m.group(1).replace(",", ""))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--app", default="hello")
    ap.add_argument("--path", default="/")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--annotate", type=int, nargs="?", const=40, default=0)
    ap.add_argument("--inclusive", action="store_true", help="--annotate with inclusive counts (unreliable "
                    "across cgo calls: callgrind takes Go's stack switches for calls)")
    ap.add_argument("--keep", help="copy the callgrind dump here")
    ap.add_argument("--https", action="store_true", help="serve over TLS")
    ap.add_argument("--access-log", action="store_true", help="with the access log on (goloop's own logging)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(tmp)[1:] if args.https else None
        total, dump = count(args.app, args.n, args.depth, args.conns, args.path, os.path.join(tmp, "cg"), certs,
                            args.access_log)
        print(f"{args.app}{' over HTTPS' if certs else ''}, {args.depth} deep on {args.conns} connections: "
              f"{total / args.n:,.0f} instructions per request")
        if args.keep:
            shutil.copy(dump, args.keep)
        if args.annotate:
            rows = sorted(per_function(dump, args.inclusive).items(), key=lambda kv: -kv[1])[:args.annotate]
            for k, v in rows:
                print(f"{v / args.n:10,.0f}  {k}")


if __name__ == "__main__":
    main()
