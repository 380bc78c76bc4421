"""Echo suites over TCP and Unix stream sockets, on asyncio's loop (the oracle) and goloop's.

Servers: a Protocol, a BufferedProtocol, a streams server (start_server/start_unix_server)
and a sock_* server (sock_accept/sock_recv or sock_recv_into/sock_sendall). Clients: streams
(open_connection/open_unix_connection), a Protocol client and a sock_* client. Messages of
1 KiB, 10 KiB, 100 KiB and 1 MiB; one client and 128 concurrent clients; every byte is
compared. Each client sends its whole message, half-closes (write_eof) and reads the echo
until EOF; the servers echo until EOF and then close.
"""
from __future__ import annotations

import asyncio
import os
import random
import socket

import pytest

from nethelpers import no_fd_leak, raise_nofile, run, unix_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_fd_leak")]

KIB = 1024
MIB = 1024 * KIB
SIZES = [1 * KIB, 10 * KIB, 100 * KIB, 1 * MIB]
_BASE = random.Random(20240611).randbytes(MIB + 64)


def payload(client: int, size: int) -> bytes:
    """A message unique to the client (so cross-talk between connections shows)."""
    off = (client * 7919) % 64
    head = client.to_bytes(4, "big")
    return (head + _BASE[off:off + size])[:size]


# ---------------------------------------------------------------------------------------
# servers
# ---------------------------------------------------------------------------------------

class EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)

    def eof_received(self):
        return None  # the transport closes itself once the echo has been flushed


class EchoBufferedProtocol(asyncio.BufferedProtocol):
    def __init__(self):
        self.buf = bytearray(64 * KIB)

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.transport.write(bytes(self.buf[:nbytes]))

    def eof_received(self):
        return False


async def _stream_echo(reader, writer):
    try:
        while True:
            data = await reader.read(64 * KIB)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.write_eof()
        await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()


async def _sock_echo(loop, conn, use_into):
    try:
        buf = bytearray(64 * KIB)
        while True:
            if use_into:
                n = await loop.sock_recv_into(conn, buf)
                data = bytes(buf[:n])
            else:
                data = await loop.sock_recv(conn, 64 * KIB)
            if not data:
                break
            await loop.sock_sendall(conn, data)
        conn.shutdown(socket.SHUT_WR)
    finally:
        conn.close()


class SockServer:
    """A sock_accept-based server with the same surface as the bits of asyncio.Server used."""

    def __init__(self, loop, lsock, use_into):
        self.loop, self.lsock, self.use_into = loop, lsock, use_into
        self.tasks = set()
        self.acceptor = loop.create_task(self._accept())

    async def _accept(self):
        while True:
            conn, _ = await self.loop.sock_accept(self.lsock)
            t = self.loop.create_task(_sock_echo(self.loop, conn, self.use_into))
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)

    async def aclose(self):
        self.acceptor.cancel()
        try:
            await self.acceptor
        except asyncio.CancelledError:
            pass
        if self.tasks:
            await asyncio.gather(*self.tasks)
        self.lsock.close()


SERVER_KINDS = ["protocol", "buffered", "streams", "sock", "sock_into"]


async def start_echo_server(loop, family, kind, path=None, backlog=1024):
    """Starts an echo server; returns (address, aclose coroutine function)."""
    if kind in ("protocol", "buffered"):
        factory = EchoProtocol if kind == "protocol" else EchoBufferedProtocol
        if family == "tcp":
            srv = await loop.create_server(factory, "127.0.0.1", 0, backlog=backlog)
        else:
            srv = await loop.create_unix_server(factory, path, backlog=backlog)
    elif kind == "streams":
        if family == "tcp":
            srv = await asyncio.start_server(_stream_echo, "127.0.0.1", 0, backlog=backlog)
        else:
            srv = await asyncio.start_unix_server(_stream_echo, path, backlog=backlog)
    else:
        fam = socket.AF_INET if family == "tcp" else socket.AF_UNIX
        lsock = socket.socket(fam, socket.SOCK_STREAM)
        lsock.bind(("127.0.0.1", 0) if family == "tcp" else path)
        lsock.listen(backlog)
        lsock.setblocking(False)
        ss = SockServer(loop, lsock, use_into=(kind == "sock_into"))
        return lsock.getsockname(), ss.aclose

    addr = srv.sockets[0].getsockname()

    async def aclose():
        srv.close()
        await srv.wait_closed()

    return addr, aclose


# ---------------------------------------------------------------------------------------
# clients
# ---------------------------------------------------------------------------------------

async def stream_client(family, addr, msg):
    if family == "tcp":
        reader, writer = await asyncio.open_connection(*addr)
    else:
        reader, writer = await asyncio.open_unix_connection(addr)
    try:
        async def send():
            for i in range(0, len(msg), 32 * KIB):
                writer.write(msg[i:i + 32 * KIB])
                await writer.drain()
            writer.write_eof()

        sender = asyncio.ensure_future(send())
        got = await reader.read()
        await sender
        return got
    finally:
        writer.close()
        await writer.wait_closed()


class CollectProtocol(asyncio.Protocol):
    def __init__(self, loop):
        self.chunks = []
        self.done = loop.create_future()
        self.eof = False

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.chunks.append(data)

    def eof_received(self):
        self.eof = True
        return True  # keep the transport: closed by the test

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(exc)


async def protocol_client(loop, family, addr, msg):
    if family == "tcp":
        tr, pr = await loop.create_connection(lambda: CollectProtocol(loop), *addr)
    else:
        tr, pr = await loop.create_unix_connection(lambda: CollectProtocol(loop), addr)
    tr.write(msg)
    tr.write_eof()
    while not pr.eof:
        await asyncio.sleep(0.001)
    tr.close()
    exc = await pr.done
    assert exc is None
    return b"".join(pr.chunks)


async def sock_client(loop, family, addr, msg):
    fam = socket.AF_INET if family == "tcp" else socket.AF_UNIX
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        await loop.sock_connect(s, addr)

        async def send():
            await loop.sock_sendall(s, msg)
            s.shutdown(socket.SHUT_WR)

        sender = asyncio.ensure_future(send())
        out = bytearray()
        while True:
            data = await loop.sock_recv(s, 256 * KIB)
            if not data:
                break
            out += data
        await sender
        return bytes(out)
    finally:
        s.close()


async def run_client(loop, ckind, family, addr, msg):
    if ckind == "streams":
        return await stream_client(family, addr, msg)
    if ckind == "protocol":
        return await protocol_client(loop, family, addr, msg)
    return await sock_client(loop, family, addr, msg)


def check_echo(got: bytes, msg: bytes, who: str):
    if got != msg:
        first = next((i for i, (a, b) in enumerate(zip(got, msg)) if a != b), min(len(got), len(msg)))
        pytest.fail(f"{who}: echo differs: got {len(got)} bytes, sent {len(msg)}, "
                    f"first difference at byte {first}")


# ---------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------

FAMILIES = ["tcp", "unix"]


@pytest.mark.parametrize("size", SIZES, ids=["1KiB", "10KiB", "100KiB", "1MiB"])
@pytest.mark.parametrize("server", SERVER_KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_echo_one_client(loop, family, server, size, unix_dir):
    msg = payload(1, size)

    async def main():
        addr, aclose = await start_echo_server(loop, family, server, unix_dir.sock())
        try:
            for ckind in ("streams", "protocol", "sock"):
                got = await run_client(loop, ckind, family, addr, msg)
                check_echo(got, msg, f"{ckind} client")
        finally:
            await aclose()

    run(loop, main())


@pytest.mark.parametrize("server", SERVER_KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_echo_many_clients(loop, family, server, unix_dir):
    """128 concurrent clients, each message size used by 32 of them (1 MiB by a few)."""
    raise_nofile()
    nclients = 128
    sizes = [SIZES[i % 3] for i in range(nclients - 4)] + [MIB] * 4

    async def main():
        addr, aclose = await start_echo_server(loop, family, server, unix_dir.sock())
        try:
            msgs = [payload(i, sizes[i]) for i in range(nclients)]
            kinds = ["streams", "protocol", "sock"]
            results = await asyncio.gather(*[
                run_client(loop, kinds[i % 3], family, addr, msgs[i]) for i in range(nclients)])
            for i, (got, msg) in enumerate(zip(results, msgs)):
                check_echo(got, msg, f"client {i} ({kinds[i % 3]})")
        finally:
            await aclose()

    run(loop, main())


@pytest.mark.parametrize("family", FAMILIES)
def test_echo_many_clients_1mib(loop, family, unix_dir):
    """100 concurrent clients each echoing 1 MiB through a Protocol server."""
    raise_nofile()
    nclients = 100

    async def main():
        addr, aclose = await start_echo_server(loop, family, "protocol", unix_dir.sock())
        try:
            msgs = [payload(i, MIB) for i in range(nclients)]
            results = await asyncio.gather(*[
                stream_client(family, addr, msgs[i]) for i in range(nclients)])
            for i, (got, msg) in enumerate(zip(results, msgs)):
                check_echo(got, msg, f"client {i}")
        finally:
            await aclose()

    run(loop, main(), timeout=50)


@pytest.mark.parametrize("family", FAMILIES)
def test_echo_many_small_writes(loop, family, unix_dir):
    """Thousands of small writes in one iteration (goloop coalesces them into writev)."""
    async def main():
        addr, aclose = await start_echo_server(loop, family, "protocol", unix_dir.sock())
        try:
            if family == "tcp":
                tr, pr = await loop.create_connection(lambda: CollectProtocol(loop), *addr)
            else:
                tr, pr = await loop.create_unix_connection(lambda: CollectProtocol(loop), addr)
            parts = [payload(i, 1 + i % 97) for i in range(5000)]
            for i, p in enumerate(parts):
                # bytes, bytearray and memoryview: goloop keeps bytes, copies the others
                tr.write(p if i % 3 == 0 else bytearray(p) if i % 3 == 1 else memoryview(p))
            tr.write_eof()
            while not pr.eof:
                await asyncio.sleep(0.001)
            tr.close()
            await pr.done
            check_echo(b"".join(pr.chunks), b"".join(parts), "small writes")
        finally:
            await aclose()

    run(loop, main())


def test_echo_mutated_buffer_after_write(loop):
    """Data written from a bytearray is sent as it was at write() time."""
    async def main():
        addr, aclose = await start_echo_server(loop, "tcp", "protocol")
        try:
            tr, pr = await loop.create_connection(lambda: CollectProtocol(loop), *addr)
            buf = bytearray(b"a" * 1000)
            tr.write(buf)
            buf[:] = b"b" * 1000
            tr.write(buf)
            buf[:] = b"c" * 1000
            tr.write_eof()
            while not pr.eof:
                await asyncio.sleep(0.001)
            tr.close()
            await pr.done
            assert b"".join(pr.chunks) == b"a" * 1000 + b"b" * 1000
        finally:
            await aclose()

    run(loop, main())
