#!/usr/bin/env python3
"""Instructions a loop spends per accepted connection (callgrind), for comparing loops and
changes without the run-to-run noise of timing.

    python3 -P bench/analysis/conn_cost.py [--loops goloop,uvloop] [--n 200,700]

For each loop it runs a small HTTP server (an asyncio.Protocol with the loop's parser:
goloop.http for goloop, httptools otherwise; one request per connection, then close)
under `valgrind --tool=callgrind`, twice: serving N1 and then N2 sequential connections
from a plain-socket client. (instructions(N2) - instructions(N1)) / (N2 - N1) is the cost
of one connection: accept, transport and protocol set-up, parser, one read, one write,
close. Go's asynchronous preemption signals crash callgrind, so goloop runs with
GODEBUG=asyncpreemptoff=1. Measured 2026-11-30: goloop ~88k instructions, uvloop ~37k;
counts vary by about ±1.5k between runs.
Needs valgrind (Debian's valgrind package).
"""

import argparse
import os
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import harness  # noqa: E402

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nHello, world!"
REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def serve(loop_name, n, ready_path):
    """The server: stops after n connections have been served and closed."""
    import asyncio
    if loop_name == "goloop":
        import goloop
        from goloop import http as parser_mod
        loop = goloop.new_event_loop()
    else:
        import httptools as parser_mod
        if loop_name == "uvloop":
            import uvloop
            loop = uvloop.new_event_loop()
        else:
            loop = asyncio.new_event_loop()
    done = 0

    class Proto(asyncio.Protocol):
        def connection_made(self, tr):
            self.tr = tr
            self.parser = parser_mod.HttpRequestParser(self)

        def data_received(self, data):
            self.parser.feed_data(data)

        def on_url(self, url):
            pass

        def on_header(self, name, value):
            pass

        def on_message_complete(self):
            self.tr.write(RESPONSE)
            self.tr.close()

        def connection_lost(self, exc):
            nonlocal done
            done += 1
            if done == n:
                loop.stop()

    server = loop.run_until_complete(loop.create_server(Proto, "127.0.0.1", 0, backlog=1024))
    with open(ready_path + ".tmp", "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    os.rename(ready_path + ".tmp", ready_path)
    loop.run_forever()
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.close()


def client(port, n):
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(REQUEST)
            got = b""
            while True:
                d = s.recv(4096)
                if not d:
                    break
                got += d
            if not got.endswith(b"Hello, world!"):
                raise SystemExit(f"bad response: {got!r}")


def instructions(loop_name, n, tmp):
    ready = os.path.join(tmp, f"ready-{loop_name}-{n}")
    env = dict(os.environ, GODEBUG="asyncpreemptoff=1")
    return harness.callgrind_serve(
        [f"--callgrind-out-file={os.path.join(tmp, 'cg.out')}", os.path.abspath(__file__),
         "--serve", loop_name, str(n), ready], ready, env, lambda port: client(port, n), loop_name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loops", default="goloop,uvloop")
    ap.add_argument("--n", default="200,700", help="the two connection counts N1,N2")
    ap.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve[0], int(args.serve[1]), args.serve[2])
    n1, n2 = (int(x) for x in args.n.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.loops.split(","):
            c1, c2 = instructions(name, n1, tmp), instructions(name, n2, tmp)
            print(f"{name}: {(c2 - c1) / (n2 - n1):,.0f} instructions per connection", flush=True)


if __name__ == "__main__":
    if os.path.isdir(os.path.join(os.getcwd(), "goloop", "binding")) and sys.flags.safe_path == 0:
        sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.getcwd()]
    main()
