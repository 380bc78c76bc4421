#!/usr/bin/env python3
"""uvicorn serving an ASGI "hello world", on the loop named:

    python3 bench/servers/asgi_server.py --loop {asyncio,uvloop,goloop} --addr host:port

uvicorn runs with its httptools protocol (`--http httptools`), no access log; goloop is
given to it the way users do (`--loop goloop:new_event_loop`). Every request gets
"200 OK" with "Hello, world!". Prints "ready" on stdout once listening.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
from harness import LOOPS, import_goloop, die, parse_addr  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_apps import hello as app  # noqa: E402  (the hello world of goloop serve's table too)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio")
    ap.add_argument("--addr", default="127.0.0.1:8080")
    args = ap.parse_args()
    try:
        import uvicorn
    except ImportError:
        die("uvicorn is not installed (pip install uvicorn)")
    if args.loop == "goloop":
        import_goloop()  # from the repository's pyshim/ when goloop is not installed
    loop = {"goloop": "goloop:new_event_loop"}.get(args.loop, args.loop)
    host, port = parse_addr(args.addr)
    config = uvicorn.Config(app, host=host, port=port, loop=loop, http="httptools",
                            log_level="warning", access_log=False, lifespan="off")

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            print("ready", flush=True)

    Server(config).run()


if __name__ == "__main__":
    main()
