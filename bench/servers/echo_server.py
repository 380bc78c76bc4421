#!/usr/bin/env python3
"""Echo servers in the classic vmbench shapes.

    python3 bench/servers/echo_server.py --loop {asyncio,uvloop,goloop} \
        --mode {protocol,buffered,streams,sockets} (--addr host:port | --unix path)

Prints "ready" on stdout once listening, then serves until killed.
"""

import argparse
import asyncio
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
from harness import LOOPS, LoopUnavailable, die, new_loop, parse_addr, serve_until_interrupted  # noqa: E402

READ_SIZE = 102400


def _nodelay(sock):
    if sock is None:
        return
    try:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass


class EchoProtocol(asyncio.Protocol):
    __slots__ = ("transport",)

    def connection_made(self, transport):
        self.transport = transport
        _nodelay(transport.get_extra_info("socket"))

    def connection_lost(self, exc):
        self.transport = None

    def data_received(self, data):
        self.transport.write(data)


class EchoBufferedProtocol(asyncio.BufferedProtocol):
    __slots__ = ("transport", "buffer")

    def connection_made(self, transport):
        self.transport = transport
        _nodelay(transport.get_extra_info("socket"))
        # Slicing the bytearray copies, so the next read cannot clobber
        # data that is still queued for writing.
        self.buffer = bytearray(256 * 1024)

    def connection_lost(self, exc):
        self.transport = None

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        self.transport.write(self.buffer[:nbytes])


async def echo_streams(reader, writer):
    _nodelay(writer.get_extra_info("socket"))
    try:
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def echo_sock_client(loop, client):
    with client:
        try:
            while True:
                data = await loop.sock_recv(client, READ_SIZE)
                if not data:
                    break
                await loop.sock_sendall(client, data)
        except (ConnectionError, OSError):
            pass


async def sock_accept_loop(loop, server):
    while True:
        client, _ = await loop.sock_accept(server)
        client.setblocking(False)
        _nodelay(client)
        loop.create_task(echo_sock_client(loop, client))


def listening_socket(args):
    if args.unix:
        if os.path.exists(args.unix):
            os.unlink(args.unix)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(args.unix)
    else:
        host, port = parse_addr(args.addr)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio")
    ap.add_argument("--mode", choices=("protocol", "buffered", "streams", "sockets"), default="protocol")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--addr", default="127.0.0.1:25000")
    g.add_argument("--unix", default=None)
    args = ap.parse_args()

    try:
        loop = new_loop(args.loop)
    except LoopUnavailable as exc:
        die(str(exc))
    asyncio.set_event_loop(loop)

    sock = listening_socket(args)
    try:
        if args.mode == "protocol":
            server = loop.run_until_complete(loop.create_server(EchoProtocol, sock=sock))
        elif args.mode == "buffered":
            server = loop.run_until_complete(loop.create_server(EchoBufferedProtocol, sock=sock))
        elif args.mode == "streams":
            server = loop.run_until_complete(asyncio.start_server(echo_streams, sock=sock))
        else:
            server = loop.create_task(sock_accept_loop(loop, sock))
    except Exception as exc:
        die(f"{args.loop}/{args.mode}: cannot start server: {type(exc).__name__}: {exc}")

    try:
        serve_until_interrupted(loop)
    finally:
        if args.unix and os.path.exists(args.unix):
            os.unlink(args.unix)


if __name__ == "__main__":
    main()
