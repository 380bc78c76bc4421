#!/usr/bin/env python3
"""The uvloop-blog HTTP server: an asyncio.Protocol feeding an httptools parser.

    python3 bench/servers/http_server.py --loop {asyncio,uvloop,goloop} \
        --parser {httptools,goloop} --size N (--addr host:port | --unix path)

Every request gets "HTTP/1.1 200 OK" with a fixed body of N bytes and
keep-alive. Pipelined requests are answered in order: one data_received may
complete several requests and each gets its response as it completes.
Prints "ready" on stdout once listening.
"""

import argparse
import asyncio
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
from harness import LOOPS, LoopUnavailable, die, http_parser_module, new_loop, parse_addr, serve_until_interrupted  # noqa: E402


def make_protocol(httptools, response):
    HttpRequestParser = httptools.HttpRequestParser
    HttpParserError = httptools.HttpParserError
    HttpParserUpgrade = getattr(httptools, "HttpParserUpgrade", HttpParserError)

    class HttpProtocol(asyncio.Protocol):
        __slots__ = ("transport", "parser", "url", "headers")

        def __init__(self):
            self.transport = None
            self.parser = None
            self.url = None
            self.headers = []

        def connection_made(self, transport):
            self.transport = transport
            sock = transport.get_extra_info("socket")
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass
            self.parser = HttpRequestParser(self)

        def connection_lost(self, exc):
            self.transport = None
            self.parser = None

        # httptools callbacks
        def on_message_begin(self):
            self.headers = []

        def on_url(self, url):
            self.url = url

        def on_header(self, name, value):
            self.headers.append((name, value))

        def on_message_complete(self):
            self.transport.write(response)
            if not self.parser.should_keep_alive():
                self.transport.close()

        def data_received(self, data):
            try:
                self.parser.feed_data(data)
            except (HttpParserError, HttpParserUpgrade):
                if self.transport is not None:
                    self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                                         b"Connection: close\r\n\r\n")
                    self.transport.close()

    return HttpProtocol


def build_response(size):
    body = b"X" * size
    head = (b"HTTP/1.1 200 OK\r\n"
            b"Content-Type: text/plain\r\n"
            b"Content-Length: %d\r\n"
            b"Connection: keep-alive\r\n"
            b"\r\n") % size
    return head + body


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio")
    ap.add_argument("--parser", choices=("httptools", "goloop"), default="httptools")
    ap.add_argument("--size", type=int, default=13, help="response body size in bytes")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--addr", default="127.0.0.1:8080")
    g.add_argument("--unix", default=None)
    ap.add_argument("--cert", help="serve HTTPS with this certificate (PEM) ...")
    ap.add_argument("--key", help="... and this key")
    args = ap.parse_args()
    ssl_ctx = None
    if args.cert:
        import ssl
        ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_ctx.load_cert_chain(args.cert, args.key)

    try:
        httptools = http_parser_module(args.parser)
        loop = new_loop(args.loop)
    except LoopUnavailable as exc:
        die(str(exc))
    asyncio.set_event_loop(loop)

    protocol = make_protocol(httptools, build_response(args.size))
    try:
        if args.unix:
            if os.path.exists(args.unix):
                os.unlink(args.unix)
            server = loop.run_until_complete(loop.create_unix_server(protocol, args.unix, ssl=ssl_ctx))
        else:
            host, port = parse_addr(args.addr)
            server = loop.run_until_complete(
                loop.create_server(protocol, host, port, reuse_address=True, backlog=1024, ssl=ssl_ctx))
    except Exception as exc:
        die(f"{args.loop}/{args.parser}: cannot start server: {type(exc).__name__}: {exc}")

    serve_until_interrupted(loop)


if __name__ == "__main__":
    main()
