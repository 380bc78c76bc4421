"""Stream transports (TCP and Unix) on asyncio's loop (the oracle) and goloop's: the
asyncio.Transport API, flow control, reading control, half-close, abort, resets, closing
rules, servers, refused and timed-out connects, many connections, callback exceptions.
"""
from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import os
import select
import socket
import sys
import struct
from asyncio import base_events, selector_events

import pytest

from nethelpers import (free_port, asyncio_outcome, goloop_xfail, no_fd_leak, outcome,  # noqa: F401
                        raise_nofile, run, unix_dir)

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_fd_leak")]

FAMILIES = ["tcp", "unix"]


class Rec(asyncio.Protocol):
    """Records what the transport does to it."""

    def __init__(self, eof_ret=None):
        loop = asyncio.get_running_loop()
        self.events = []
        self.data = bytearray()
        self.made = loop.create_future()
        self.lost = loop.create_future()
        self.got_eof = loop.create_future()
        self.eof_ret = eof_ret
        self.tr = None

    def connection_made(self, transport):
        self.tr = transport
        self.events.append("made")
        self.made.set_result(transport)

    def data_received(self, data):
        assert isinstance(data, bytes)
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        self.data += data

    def eof_received(self):
        self.events.append("eof")
        self.got_eof.set_result(None)
        return self.eof_ret

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")

    def connection_lost(self, exc):
        self.events.append("lost")
        self.lost.set_result(exc)


async def until(pred, timeout=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


class Pair:
    """A server (create_server/create_unix_server) and one client connected to it."""

    @classmethod
    async def open(cls, family, path=None, server_proto=Rec, client_proto=Rec):
        self = cls()
        loop = asyncio.get_running_loop()
        self.server_protos = []

        def sfactory():
            p = server_proto()
            self.server_protos.append(p)
            return p

        if family == "tcp":
            self.server = await loop.create_server(sfactory, "127.0.0.1", 0)
            self.addr = self.server.sockets[0].getsockname()
            self.ctr, self.cpr = await loop.create_connection(client_proto, *self.addr)
        else:
            self.server = await loop.create_unix_server(sfactory, path)
            self.addr = path
            self.ctr, self.cpr = await loop.create_unix_connection(client_proto, path)
        await until(lambda: self.server_protos and self.server_protos[0].tr is not None)
        self.spr = self.server_protos[0]
        self.str = self.spr.tr
        return self

    async def close(self):
        for tr in (self.ctr, self.str):
            if tr is not None:
                tr.close()
        for p in (self.cpr, self.spr):
            if isinstance(p, Rec):
                await asyncio.wait_for(p.lost, 10)
        self.server.close()
        await self.server.wait_closed()


def pair_test(loop, family, unix_dir, body, **kw):
    async def main():
        p = await Pair.open(family, unix_dir.sock(), **kw)
        try:
            return await body(p)
        finally:
            await p.close()
    return run(loop, main())


# ---------------------------------------------------------------------------------------
# the Transport API
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_transport_types_and_extra_info(loop, family, unix_dir):
    async def body(p):
        for tr, peer in ((p.ctr, p.str), (p.str, p.ctr)):
            assert isinstance(tr, asyncio.Transport)
            assert isinstance(tr, asyncio.ReadTransport)
            assert isinstance(tr, asyncio.WriteTransport)
            sock = tr.get_extra_info("socket")
            assert sock is not None
            assert sock.family == (socket.AF_INET if family == "tcp" else socket.AF_UNIX)
            assert sock.type == socket.SOCK_STREAM
            assert sock.fileno() >= 0
            assert tr.get_extra_info("sockname") == sock.getsockname()
            assert tr.get_extra_info("peername") == sock.getpeername()
            assert tr.get_extra_info("peername") == peer.get_extra_info("sockname") or family == "unix"
            assert tr.get_extra_info("no-such-key") is None
            sentinel = object()
            assert tr.get_extra_info("no-such-key", sentinel) is sentinel
            assert tr.get_extra_info("sslcontext") is None
            assert tr.is_closing() is False
            assert tr.can_write_eof() is True
            assert tr.is_reading() is True
            assert tr.get_write_buffer_size() == 0
            assert tr.get_protocol() is (p.cpr if tr is p.ctr else p.spr)
            assert "closed" not in repr(tr)
        if family == "tcp":
            assert p.ctr.get_extra_info("peername") == p.addr
            assert p.ctr.get_extra_info("socket").getsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        else:
            assert p.ctr.get_extra_info("peername") == p.addr
            assert p.str.get_extra_info("sockname") == p.addr
        return True

    assert pair_test(loop, family, unix_dir, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_is_closing_and_repr_after_close(loop, family, unix_dir):
    async def body(p):
        p.ctr.close()
        assert p.ctr.is_closing() is True
        assert p.ctr.is_reading() is False
        p.ctr.close()  # idempotent
        exc = await p.cpr.lost
        assert exc is None
        assert p.ctr.is_closing() is True
        assert "closed" in repr(p.ctr)
        assert p.ctr.get_extra_info("sockname") is not None  # extra info survives
        assert p.cpr.events == ["made", "lost"]
        # the server side sees EOF, then (eof_received() returned None) closes
        assert await p.spr.lost is None
        assert p.spr.events == ["made", "eof", "lost"]

    pair_test(loop, family, unix_dir, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_set_protocol_get_protocol(loop, family, unix_dir):
    class Plain(asyncio.Protocol):
        def __init__(self):
            self.data = bytearray()

        def data_received(self, data):
            self.data += data

    class Buffered(asyncio.BufferedProtocol):
        def __init__(self):
            self.buf = bytearray(16)
            self.data = bytearray()

        def get_buffer(self, sizehint):
            return self.buf

        def buffer_updated(self, n):
            self.data += self.buf[:n]

    async def body(p):
        assert p.str.get_protocol() is p.spr
        p.ctr.write(b"to-first")
        await until(lambda: bytes(p.spr.data) == b"to-first")
        second = Plain()
        p.str.set_protocol(second)
        assert p.str.get_protocol() is second
        p.ctr.write(b"to-second")
        await until(lambda: bytes(second.data) == b"to-second")
        third = Buffered()
        p.str.set_protocol(third)
        assert p.str.get_protocol() is third
        p.ctr.write(b"to-third-buffered-protocol" * 3)
        await until(lambda: bytes(third.data) == b"to-third-buffered-protocol" * 3)
        assert bytes(p.spr.data) == b"to-first" and bytes(second.data) == b"to-second"
        p.str.set_protocol(p.spr)  # back, so that connection_lost reaches the recorder

    pair_test(loop, family, unix_dir, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_write_type_errors_and_write_after_eof(loop, loop_kind, family, unix_dir):
    async def body(p):
        msgs = []
        for bad in ("text", 1, None, [1, 2], bytearray):
            with pytest.raises(TypeError) as ei:
                p.ctr.write(bad)
            msgs.append(str(ei.value))
        with pytest.raises(TypeError):
            p.ctr.writelines(["a", "b"])
        p.ctr.write(b"")
        p.ctr.write(bytearray())
        p.ctr.write(memoryview(b""))
        p.ctr.writelines([b"ab", bytearray(b"cd"), memoryview(b"ef")])
        p.ctr.write_eof()
        p.ctr.write_eof()  # a second call does nothing
        with pytest.raises(RuntimeError, match="write_eof"):
            p.ctr.write(b"late")
        with pytest.raises(RuntimeError, match="write_eof"):
            p.ctr.writelines([b"late"])
        await p.spr.got_eof
        assert bytes(p.spr.data) == b"abcdef"
        return msgs

    msgs = pair_test(loop, family, unix_dir, body)
    # asyncio's message changed within 3.13's patch releases and in 3.14 (gh-138703; every
    # 3.11 and 3.12 release has the old one): asyncio's loop is checked against the message
    # of its running version's write(), goloop's has the new one from 3.13 on.
    if loop_kind == "asyncio":
        new = "bytes, bytearray, or memoryview" in inspect.getsource(selector_events._SelectorSocketTransport.write)
    else:
        new = sys.version_info >= (3, 13)
    kind = "a bytes, bytearray, or memoryview object" if new else "a bytes-like object"
    assert msgs == [f"data argument must be {kind}, not '{t}'"
                    for t in ("str", "int", "NoneType", "list", "type")]


@pytest.mark.parametrize("family", FAMILIES)
def test_writes_while_closing_are_flushed(loop, family, unix_dir):
    async def body(p):
        # data still queued at close(): asyncio queues later writes too and flushes them all
        p.str.pause_reading()
        sent = 0
        while p.ctr.get_write_buffer_size() < 500_000:
            p.ctr.write(b"b" * 100_000)
            sent += 100_000
            await asyncio.sleep(0)
        p.ctr.close()
        p.ctr.write(b"-while-closing")
        p.ctr.write_eof()  # closing: ignored
        p.str.resume_reading()
        assert await p.cpr.lost is None
        # (no write() now: asyncio 3.11 raises AttributeError on a write after a close()
        # that had to flush first, as its _conn_lost stays 0)
        await p.spr.got_eof
        assert bytes(p.spr.data) == b"b" * sent + b"-while-closing"
        return True

    assert pair_test(loop, family, unix_dir, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_write_after_close_without_pending_data(loop, family, unix_dir, caplog):
    async def body(p):
        p.ctr.close()
        for _ in range(7):
            p.ctr.write(b"x")  # ignored
        assert await p.cpr.lost is None
        await p.spr.got_eof
        return bytes(p.spr.data)

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        assert pair_test(loop, family, unix_dir, body) == b""
    warnings = [r for r in caplog.records if "socket.send() raised exception." in r.getMessage()]
    assert len(warnings) == 3


# ---------------------------------------------------------------------------------------
# flow control
# ---------------------------------------------------------------------------------------

def test_write_buffer_limits(loop):
    async def body(p):
        tr = p.ctr
        assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        tr.set_write_buffer_limits(high=1000)
        assert tr.get_write_buffer_limits() == (250, 1000)
        tr.set_write_buffer_limits(low=100)
        assert tr.get_write_buffer_limits() == (100, 400)
        tr.set_write_buffer_limits(high=300, low=200)
        assert tr.get_write_buffer_limits() == (200, 300)
        tr.set_write_buffer_limits(high=0)
        assert tr.get_write_buffer_limits() == (0, 0)
        errs = []
        for kw in ({"high": 1, "low": 2}, {"high": -1}, {"low": -4}, {"high": 5, "low": -1}):
            with pytest.raises(ValueError) as ei:
                tr.set_write_buffer_limits(**kw)
            errs.append(str(ei.value))
        assert tr.get_write_buffer_limits() == (0, 0)  # unchanged by the failed calls
        tr.set_write_buffer_limits()
        assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        return errs

    async def full(lp):
        p = await Pair.open("tcp")
        try:
            return await body(p)
        finally:
            await p.close()

    got = run(loop, full(loop))
    assert got == ["high (1) must be >= low (2) must be >= 0",
                   "high (-1) must be >= low (-1) must be >= 0",
                   "high (-16) must be >= low (-4) must be >= 0",
                   "high (5) must be >= low (-1) must be >= 0"]


@pytest.mark.parametrize("family", FAMILIES)
def test_pause_resume_writing_with_slow_reader(loop, family, unix_dir):
    async def body(p):
        p.str.pause_reading()  # the slow reader: the server reads nothing for now
        p.ctr.set_write_buffer_limits(high=64 * 1024, low=16 * 1024)
        chunk = b"x" * 65536
        sent = 0
        while "pause" not in p.cpr.events:
            p.ctr.write(chunk)
            sent += len(chunk)
            await asyncio.sleep(0)
            assert sent < 256 * 1024 * 1024, "pause_writing never called"
        assert p.ctr.get_write_buffer_size() > 16 * 1024
        assert p.cpr.events.count("pause") == 1 and "resume" not in p.cpr.events
        p.str.resume_reading()
        await until(lambda: "resume" in p.cpr.events)
        assert p.cpr.events.count("resume") == 1
        assert p.ctr.get_write_buffer_size() <= 16 * 1024
        await until(lambda: p.ctr.get_write_buffer_size() == 0)
        await until(lambda: len(p.spr.data) == sent)
        assert p.spr.data == b"x" * sent
        return list(p.cpr.events)

    assert pair_test(loop, family, unix_dir, body) == ["made", "pause", "resume"]


@pytest.mark.parametrize("family", FAMILIES)
def test_set_write_buffer_limits_pauses_at_once(loop, family, unix_dir):
    async def body(p):
        p.str.pause_reading()
        p.ctr.set_write_buffer_limits(high=10 * 1024 * 1024)
        # fill the kernel buffers so that what follows stays queued in the transport
        while p.ctr.get_write_buffer_size() < 200_000:
            p.ctr.write(b"y" * 65536)
            await asyncio.sleep(0)
        assert p.cpr.events == ["made"]
        p.ctr.set_write_buffer_limits(high=5 * 1024 * 1024)  # still under: nothing
        assert p.cpr.events == ["made"]
        p.ctr.set_write_buffer_limits(high=1000)
        assert p.cpr.events == ["made", "pause"]
        p.ctr.set_write_buffer_limits(high=500)  # already paused
        p.str.resume_reading()
        await until(lambda: "resume" in p.cpr.events)
        await until(lambda: p.ctr.get_write_buffer_size() == 0)
        return list(p.cpr.events)

    assert pair_test(loop, family, unix_dir, body) == ["made", "pause", "resume"]


@pytest.mark.parametrize("family", FAMILIES)
def test_streams_drain_with_slow_reader(loop, family, unix_dir):
    """StreamWriter.drain() blocks while the peer does not read, then completes."""
    async def main():
        got = bytearray()
        gate = asyncio.Event()
        done = asyncio.Event()

        async def handler(reader, writer):
            await gate.wait()
            while data := await reader.read(65536):
                got.extend(data)
            writer.close()
            await writer.wait_closed()
            done.set()

        if family == "tcp":
            srv = await asyncio.start_server(handler, "127.0.0.1", 0)
            reader, writer = await asyncio.open_connection(*srv.sockets[0].getsockname())
        else:
            srv = await asyncio.start_unix_server(handler, unix_dir.sock())
            reader, writer = await asyncio.open_unix_connection(unix_dir.sock())
        total = 0
        blocked = False
        for _ in range(2000):
            writer.write(b"z" * 65536)
            total += 65536
            try:
                await asyncio.wait_for(writer.drain(), 0.05)
            except TimeoutError:
                blocked = True
                break
        assert blocked, "drain() never blocked"
        gate.set()
        await writer.drain()
        writer.write_eof()
        await done.wait()
        assert len(got) == total and got == b"z" * total
        writer.close()
        await writer.wait_closed()
        srv.close()
        await srv.wait_closed()

    run(loop, main())


# ---------------------------------------------------------------------------------------
# reading control
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_pause_resume_reading(loop, family, unix_dir):
    async def body(p):
        tr = p.str
        assert tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        tr.pause_reading()  # idempotent
        assert not tr.is_reading()
        p.ctr.write(b"while-paused")
        p.ctr.write_eof()
        await asyncio.sleep(0.1)
        assert p.spr.data == b"" and p.spr.events == ["made"]
        tr.resume_reading()
        assert tr.is_reading()
        tr.resume_reading()  # idempotent
        await p.spr.got_eof
        assert p.spr.data == b"while-paused"
        assert p.spr.events == ["made", "data", "eof", "lost"] or p.spr.events == ["made", "data", "eof"]
        return True

    assert pair_test(loop, family, unix_dir, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_pause_reading_from_data_received(loop, family, unix_dir):
    """pause_reading() inside data_received stops delivery until resume_reading()."""
    class Pauser(Rec):
        def data_received(self, data):
            super().data_received(data)
            self.tr.pause_reading()

    async def body(p):
        p.ctr.write(b"a" * 300_000)
        await until(lambda: len(p.spr.data) > 0)
        n = len(p.spr.data)
        await asyncio.sleep(0.05)
        assert len(p.spr.data) == n  # paused: nothing more delivered
        while len(p.spr.data) < 300_000:
            before = len(p.spr.data)
            p.str.resume_reading()
            await until(lambda: len(p.spr.data) > before)
        assert p.spr.data == b"a" * 300_000
        p.str.resume_reading()

    pair_test(loop, family, unix_dir, body, server_proto=Pauser)


def _epoll_masks(fd):
    """The events every epoll set of this process has registered for descriptor fd (Linux's
    /proc fdinfo: "tfd: FD events: MASK ...")."""
    masks = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/self/fdinfo/{name}") as f:
                for line in f:
                    parts = line.split()
                    if parts[:1] == ["tfd:"] and int(parts[1]) == fd:
                        masks.append(int(parts[3], 16))
        except OSError:  # (closed meanwhile)
            continue
    return masks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads epoll's registrations in /proc")
def test_paused_reading_keeps_its_registration_until_data_comes(gloop, unix_dir):
    """pause_reading() leaves the read interest registered (a resume then costs no epoll_ctl,
    as libuv's stop and start); data that comes while paused is not delivered and drops the
    interest then (no poll reporting it again and again), and resume_reading() delivers it."""
    async def body(p):
        fd = p.str.get_extra_info("socket").fileno()
        assert any(m & select.EPOLLIN for m in _epoll_masks(fd))
        p.str.pause_reading()
        await asyncio.sleep(0.01)
        assert any(m & select.EPOLLIN for m in _epoll_masks(fd)), "kept while nothing came"
        p.str.resume_reading()
        p.str.pause_reading()
        p.ctr.write(b"while paused")
        await until(lambda: not any(m & select.EPOLLIN for m in _epoll_masks(fd)))
        await asyncio.sleep(0.01)
        assert p.spr.data == b""
        p.str.resume_reading()
        await until(lambda: p.spr.data == b"while paused")
        assert any(m & select.EPOLLIN for m in _epoll_masks(fd))

    pair_test(gloop, "tcp", unix_dir, body)


def test_pause_reading_after_close(loop):
    async def body(p):
        p.str.close()
        assert not p.str.is_reading()
        p.str.pause_reading()
        p.str.resume_reading()
        assert not p.str.is_reading()
        await p.spr.lost

    async def main():
        p = await Pair.open("tcp")
        try:
            await body(p)
        finally:
            await p.close()

    run(loop, main())


# ---------------------------------------------------------------------------------------
# half-close
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_half_close_keep_open(loop, family, unix_dir):
    """eof_received() returning True: the server can still write after the client's EOF."""
    async def body(p):
        p.ctr.write(b"request")
        p.ctr.write_eof()
        await p.spr.got_eof
        assert p.spr.data == b"request"
        assert not p.str.is_closing()
        await asyncio.sleep(0.05)
        assert not p.spr.lost.done()
        p.str.write(b"response-" * 10000)
        p.str.write_eof()
        await p.cpr.got_eof
        assert p.cpr.data == b"response-" * 10000
        assert p.spr.events == ["made", "data", "eof"]
        return True

    assert pair_test(loop, family, unix_dir, body,
                     server_proto=lambda: Rec(eof_ret=True), client_proto=lambda: Rec(eof_ret=True))


@pytest.mark.parametrize("ret", [False, None])
@pytest.mark.parametrize("family", FAMILIES)
def test_half_close_closes(loop, family, unix_dir, ret):
    """eof_received() returning False/None: the transport closes itself."""
    async def body(p):
        p.ctr.write(b"request")
        p.ctr.write_eof()
        assert await p.spr.lost is None
        assert p.str.is_closing()
        assert p.spr.events == ["made", "data", "eof", "lost"]
        assert p.spr.data == b"request"
        await p.cpr.got_eof  # the server's close reaches the client as EOF
        return True

    assert pair_test(loop, family, unix_dir, body, server_proto=lambda: Rec(eof_ret=ret),
                     client_proto=lambda: Rec(eof_ret=True))


@pytest.mark.parametrize("family", FAMILIES)
def test_write_eof_waits_for_queued_data(loop, family, unix_dir):
    async def body(p):
        p.str.pause_reading()
        data = bytes(range(256)) * 20000  # 5 MB: more than the socket buffers hold
        p.ctr.write(data)
        p.ctr.write_eof()
        assert p.ctr.can_write_eof()
        assert not p.ctr.is_closing()
        await asyncio.sleep(0.02)
        p.str.resume_reading()
        await p.spr.got_eof
        assert p.spr.data == data
        await until(lambda: p.ctr.get_write_buffer_size() == 0)
        return True

    assert pair_test(loop, family, unix_dir, body, server_proto=lambda: Rec(eof_ret=True))


# ---------------------------------------------------------------------------------------
# abort, resets
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_abort_discards_unsent_data(loop, family, unix_dir):
    async def body(p):
        p.str.pause_reading()
        total = 0
        while p.ctr.get_write_buffer_size() < 1_000_000:
            p.ctr.write(b"q" * 100_000)
            total += 100_000
            await asyncio.sleep(0)
        p.ctr.write(b"never-sent")
        total += 10
        p.ctr.abort()
        assert p.ctr.is_closing()
        assert p.ctr.get_write_buffer_size() == 0
        p.ctr.abort()  # a second abort does nothing
        assert await p.cpr.lost is None
        assert p.cpr.events.count("lost") == 1
        p.str.resume_reading()
        exc = await p.spr.lost
        assert exc is None or isinstance(exc, ConnectionResetError)
        assert 0 < len(p.spr.data) < total
        assert not p.spr.data.endswith(b"never-sent")
        return True

    assert pair_test(loop, family, unix_dir, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_abort_right_after_write(loop, family, unix_dir):
    async def body(p):
        p.ctr.abort()
        p.ctr.write(b"ignored")
        assert await p.cpr.lost is None
        assert p.cpr.events == ["made", "lost"]
        await p.spr.lost
        return True

    assert pair_test(loop, family, unix_dir, body)


def _lingering_reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class BufRec(asyncio.BufferedProtocol, Rec):
    """Rec as a BufferedProtocol (reads go through get_buffer/buffer_updated)."""

    def get_buffer(self, sizehint):
        self.buf = bytearray(64 * 1024)
        return self.buf

    def buffer_updated(self, nbytes):
        self.data_received(bytes(self.buf[:nbytes]))


async def _raw_peer(family, unix_dir, proto):
    """A transport (protocol `proto`) connected to a plain socket: (tr, pr, peer)."""
    lp = asyncio.get_running_loop()
    if family == "tcp":
        lsock = socket.create_server(("127.0.0.1", 0))
    else:
        lsock = socket.socket(socket.AF_UNIX)
        lsock.bind(unix_dir.sock())
        lsock.listen()
    lsock.setblocking(False)
    try:
        addr = lsock.getsockname()
        if family == "tcp":
            conn_t = lp.create_connection(proto, *addr)
        else:
            conn_t = lp.create_unix_connection(proto, addr)
        (tr, pr), (peer, _) = await asyncio.gather(conn_t, lp.sock_accept(lsock))
        return tr, pr, peer
    finally:
        lsock.close()


@pytest.mark.parametrize("proto", [Rec, BufRec], ids=["protocol", "buffered"])
@pytest.mark.parametrize("family", FAMILIES)
def test_peer_reset_while_reading(loop, family, unix_dir, proto):
    """The peer closes with SO_LINGER 0 (TCP RST); Unix: the peer closes with unread data."""
    async def main():
        tr, pr, peer = await _raw_peer(family, unix_dir, proto)
        tr.write(b"unread data")  # unread by the peer: a Unix close resets too
        await asyncio.sleep(0.05)
        _lingering_reset(peer)
        exc = await asyncio.wait_for(pr.lost, 10)
        assert tr.is_closing()
        return type(exc)

    got = run(loop, main())
    assert got is ConnectionResetError


@pytest.mark.parametrize("size", [1_000, 40_000, 100_000])
@pytest.mark.parametrize("proto", [Rec, BufRec], ids=["protocol", "buffered"])
@pytest.mark.parametrize("family", FAMILIES)
def test_peer_sends_then_resets(loop, family, unix_dir, proto, size):
    """Data, then a reset, both waiting when reading resumes: the data arrives whole, then
    connection_lost gets the reset (not an EOF), small reads and reads of more than one
    buffer alike."""
    async def main():
        tr, pr, peer = await _raw_peer(family, unix_dir, proto)
        tr.pause_reading()
        tr.write(b"unread data")  # unread by the peer: a Unix close resets too
        peer.setblocking(False)
        sent = 0
        try:
            while sent < size:
                sent += peer.send(b"d" * (size - sent))
        except BlockingIOError:
            pass  # the buffers are full: the rest is not sent
        await asyncio.sleep(0.05)
        _lingering_reset(peer)
        await asyncio.sleep(0.05)
        tr.resume_reading()
        exc = await asyncio.wait_for(pr.lost, 10)
        return sent, len(pr.data), type(exc), pr.events

    sent, got, exc, events = run(loop, main())
    assert got == sent
    assert exc is ConnectionResetError
    assert events == ["made", "data", "lost"]


@pytest.mark.parametrize("family", FAMILIES)
def test_peer_reset_while_writing(loop, family, unix_dir):
    async def main():
        tr, pr, peer = await _raw_peer(family, unix_dir, Rec)
        tr.pause_reading()  # only the write path can notice
        while tr.get_write_buffer_size() < 1_000_000:
            tr.write(b"w" * 100_000)
            await asyncio.sleep(0)
        _lingering_reset(peer)
        exc = await asyncio.wait_for(pr.lost, 10)
        assert isinstance(exc, OSError), exc
        assert tr.get_write_buffer_size() == 0
        tr.write(b"after the reset")  # ignored
        return type(exc)

    got = run(loop, main())
    assert got in (ConnectionResetError, BrokenPipeError)


@pytest.mark.parametrize("family", FAMILIES)
def test_mutable_buffer_written_to_a_reset_peer_fails_the_transport(loop, family, unix_dir):
    # A memoryview written with nothing queued goes to the socket inside write(); when the
    # socket fails, the transport fails as asyncio's does (connection_lost with the OSError,
    # nothing left queued), not by queueing a copy that can never leave.
    async def main():
        tr, pr, peer = await _raw_peer(family, unix_dir, Rec)
        tr.pause_reading()  # only the write path can notice
        _lingering_reset(peer)
        await asyncio.sleep(0.05)
        tr.write(memoryview(bytearray(b"m" * 1000)))
        exc = await asyncio.wait_for(pr.lost, 10)
        assert tr.get_write_buffer_size() == 0
        return type(exc)

    assert run(loop, main()) in (ConnectionResetError, BrokenPipeError)


# ---------------------------------------------------------------------------------------
# exceptions raised by protocol callbacks
# ---------------------------------------------------------------------------------------

class Boom(Exception):
    pass


def _callback_exception(loop, family, unix_dir, proto_cls, trigger):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def body(p):
        await trigger(p)
        exc = await asyncio.wait_for(p.spr.lost, 10)
        assert p.str.is_closing()
        return exc

    exc = pair_test(loop, family, unix_dir, body, server_proto=proto_cls)
    assert isinstance(exc, Boom)
    assert len(contexts) == 1, contexts
    ctx = contexts[0]
    assert ctx["exception"] is exc
    assert ctx["protocol"] is not None
    assert isinstance(ctx["transport"], asyncio.Transport)
    assert ctx["transport"].is_closing()
    return ctx["message"]


@pytest.mark.parametrize("family", FAMILIES)
def test_data_received_raises(loop, family, unix_dir):
    class P(Rec):
        def data_received(self, data):
            raise Boom("data")

    async def trigger(p):
        p.ctr.write(b"hello")

    msg = _callback_exception(loop, family, unix_dir, P, trigger)
    assert msg == "Fatal error: protocol.data_received() call failed."


@pytest.mark.parametrize("family", FAMILIES)
def test_eof_received_raises(loop, family, unix_dir):
    class P(Rec):
        def eof_received(self):
            raise Boom("eof")

    async def trigger(p):
        p.ctr.write_eof()

    msg = _callback_exception(loop, family, unix_dir, P, trigger)
    assert msg == "Fatal error: protocol.eof_received() call failed."


@pytest.mark.parametrize("which", ["get_buffer", "buffer_updated"])
@pytest.mark.parametrize("family", FAMILIES)
def test_buffered_protocol_raises(loop, family, unix_dir, which):
    class P(asyncio.BufferedProtocol, Rec):
        def __init__(self):
            Rec.__init__(self)
            self.buf = bytearray(100)

        def get_buffer(self, sizehint):
            if which == "get_buffer":
                raise Boom("get_buffer")
            return self.buf

        def buffer_updated(self, n):
            raise Boom("buffer_updated")

    async def trigger(p):
        p.ctr.write(b"hello")

    msg = _callback_exception(loop, family, unix_dir, P, trigger)
    assert msg == f"Fatal error: protocol.{which}() call failed."


@pytest.mark.parametrize("family", FAMILIES)
def test_buffered_protocol_empty_buffer(loop, family, unix_dir):
    class P(asyncio.BufferedProtocol, Rec):
        def get_buffer(self, sizehint):
            return bytearray()

        def buffer_updated(self, n):
            pass

    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def body(p):
        p.ctr.write(b"hello")
        return await asyncio.wait_for(p.spr.lost, 10)

    exc = pair_test(loop, family, unix_dir, body, server_proto=P)
    assert type(exc) is RuntimeError and str(exc) == "get_buffer() returned an empty buffer"
    assert [c["message"] for c in contexts] == ["Fatal error: protocol.get_buffer() call failed."]


@pytest.mark.parametrize("family", FAMILIES)
def test_buffered_protocol_buffer_updated_raises(loop, family, unix_dir):
    class P(BufRec):
        def buffer_updated(self, n):
            raise Boom("updated")

    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def body(p):
        p.ctr.write(b"hello")
        return await asyncio.wait_for(p.spr.lost, 10)

    exc = pair_test(loop, family, unix_dir, body, server_proto=P)
    assert type(exc) is Boom and str(exc) == "updated"
    assert [c["message"] for c in contexts] == ["Fatal error: protocol.buffer_updated() call failed."]


@pytest.mark.parametrize("family", FAMILIES)
def test_pause_writing_raises(loop, family, unix_dir):
    class P(Rec):
        def pause_writing(self):
            super().pause_writing()
            raise Boom("pause")

    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def body(p):
        p.str.pause_reading()
        p.ctr.set_write_buffer_limits(high=1000)
        for _ in range(100):
            p.ctr.write(b"p" * 100_000)
            await asyncio.sleep(0)
            if "pause" in p.cpr.events:
                break
        assert not p.ctr.is_closing()  # not fatal
        p.str.resume_reading()
        await until(lambda: p.ctr.get_write_buffer_size() == 0)
        return True

    assert pair_test(loop, family, unix_dir, body, client_proto=P)
    assert [c["message"] for c in contexts] == ["protocol.pause_writing() failed"]
    assert isinstance(contexts[0]["exception"], Boom)


# ---------------------------------------------------------------------------------------
# servers
# ---------------------------------------------------------------------------------------

class Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr

    def data_received(self, data):
        self.tr.write(data)


async def _echo_roundtrip(reader, writer, msg):
    writer.write(msg)
    await writer.drain()
    return await reader.readexactly(len(msg))


@pytest.mark.parametrize("family", FAMILIES)
def test_server_close_with_clients_attached(loop, family, unix_dir):
    async def main():
        lp = asyncio.get_running_loop()
        if family == "tcp":
            srv = await lp.create_server(Echo, "127.0.0.1", 0)
            addr = srv.sockets[0].getsockname()
            connect = lambda: asyncio.open_connection(*addr)  # noqa: E731
        else:
            srv = await lp.create_unix_server(Echo, unix_dir.sock())
            connect = lambda: asyncio.open_unix_connection(unix_dir.sock())  # noqa: E731
        assert srv.is_serving()
        assert srv.get_loop() is lp
        clients = [await connect() for _ in range(3)]
        for r, w in clients:
            assert await _echo_roundtrip(r, w, b"ping") == b"ping"
        srv.close()
        assert not srv.is_serving()
        assert srv.sockets == ()
        srv.close()  # idempotent
        with pytest.raises((ConnectionRefusedError, FileNotFoundError)):
            await connect()
        # connections accepted before close() go on working
        for r, w in clients:
            assert await _echo_roundtrip(r, w, b"still-here") == b"still-here"
        waiter = asyncio.ensure_future(srv.wait_closed())
        await asyncio.sleep(0.01)
        early = waiter.done()  # 3.11: wait_closed() returns at once after close()
        for r, w in clients:
            w.close()
            await w.wait_closed()
        await asyncio.wait_for(waiter, 5)
        await srv.wait_closed()
        return early

    got = run(loop, main())
    # asyncio is the oracle for wait_closed()'s timing
    assert got == asyncio_outcome(lambda lp: _wait_closed_early(family))[1]


async def _wait_closed_early(family):
    lp = asyncio.get_running_loop()
    srv = await lp.create_server(Echo, "127.0.0.1", 0)
    r, w = await asyncio.open_connection(*srv.sockets[0].getsockname())
    await _echo_roundtrip(r, w, b"x")
    srv.close()
    waiter = asyncio.ensure_future(srv.wait_closed())
    await asyncio.sleep(0.01)
    early = waiter.done()
    w.close()
    await w.wait_closed()
    await waiter
    return early


def _serve_forever_waits_for_clients(loop_kind: str) -> bool:
    """Whether a cancelled serve_forever() waits for the server's open connections to go.
    3.11's wait_closed does not wait for them. From 3.12 on it does, and serve_forever
    closes them first in asyncio from 3.13.15 on (gh-123720; not in any 3.12 release),
    in goloop on every 3.13 (its Server has 3.13's API)."""
    if sys.version_info < (3, 12):
        return False
    if loop_kind == "asyncio":
        return "close_clients" not in inspect.getsource(base_events.Server.serve_forever)
    return sys.version_info < (3, 13)


def test_server_serve_forever_cancelled(loop, loop_kind):
    waits_for_clients = _serve_forever_waits_for_clients(loop_kind)

    async def main():
        lp = asyncio.get_running_loop()
        srv = await lp.create_server(Echo, "127.0.0.1", 0, start_serving=False)
        assert not srv.is_serving()
        addr = srv.sockets[0].getsockname()
        task = asyncio.ensure_future(srv.serve_forever())
        await asyncio.sleep(0)
        assert srv.is_serving()
        r, w = await asyncio.open_connection(*addr)
        assert await _echo_roundtrip(r, w, b"hi") == b"hi"
        with pytest.raises(RuntimeError, match="already being awaited"):
            await srv.serve_forever()
        task.cancel()
        if waits_for_clients:
            # serve_forever stops serving, then waits for the open connection
            for _ in range(10):
                await asyncio.sleep(0)
            assert not task.done() and not srv.is_serving()
            w.close()
            await w.wait_closed()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not srv.is_serving()
        await srv.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(*addr)
        w.close()
        await w.wait_closed()
        with pytest.raises(RuntimeError, match="is closed"):
            await srv.serve_forever()

    run(loop, main())


@pytest.mark.parametrize("family", FAMILIES)
def test_server_async_with_and_start_serving(loop, family, unix_dir):
    async def main():
        lp = asyncio.get_running_loop()
        if family == "tcp":
            srv = await lp.create_server(Echo, "127.0.0.1", 0, start_serving=False)
        else:
            srv = await lp.create_unix_server(Echo, unix_dir.sock(), start_serving=False)
        async with srv:
            assert not srv.is_serving()
            await srv.start_serving()
            assert srv.is_serving()
            await srv.start_serving()  # twice is fine
            addr = srv.sockets[0].getsockname()
            if family == "tcp":
                r, w = await asyncio.open_connection(*addr)
            else:
                r, w = await asyncio.open_unix_connection(addr)
            assert await _echo_roundtrip(r, w, b"ctx") == b"ctx"
            w.close()
            await w.wait_closed()
        assert not srv.is_serving()
        assert srv.sockets == ()

    run(loop, main())


def test_server_sockets_are_transport_sockets(loop):
    async def main():
        lp = asyncio.get_running_loop()
        srv = await lp.create_server(Echo, "127.0.0.1", 0)
        s = srv.sockets[0]
        with pytest.raises(ValueError):  # asyncio.trsock.TransportSocket forbids it
            s.setblocking(True)  # noqa
        names = type(s).__name__
        srv.close()
        await srv.wait_closed()
        return names

    assert run(loop, main()) == "TransportSocket"


# ---------------------------------------------------------------------------------------
# connects: refused, timed out; many connections
# ---------------------------------------------------------------------------------------

def test_connect_refused(loop, unix_dir):
    async def main():
        lp = asyncio.get_running_loop()
        port = free_port()
        with pytest.raises(ConnectionRefusedError):
            await lp.create_connection(asyncio.Protocol, "127.0.0.1", port)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        with pytest.raises(FileNotFoundError):
            await lp.create_unix_connection(asyncio.Protocol, unix_dir.sock("none"))
        # a socket file nobody listens on
        s = socket.socket(socket.AF_UNIX)
        s.bind(unix_dir.sock("stale"))
        s.close()
        with pytest.raises(ConnectionRefusedError):
            await lp.create_unix_connection(asyncio.Protocol, unix_dir.sock("stale"))
        s = socket.socket()
        s.setblocking(False)
        with pytest.raises(ConnectionRefusedError):
            await lp.sock_connect(s, ("127.0.0.1", port))
        s.close()

    run(loop, main())


def test_connect_timeout(loop):
    """A listener whose backlog is full drops SYNs: the connect hangs, wait_for times out."""
    async def main():
        lp = asyncio.get_running_loop()
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(0)
        addr = lsock.getsockname()
        fillers = []
        try:
            # fill the accept queue (listen(0) holds one connection)
            for _ in range(2):
                f = socket.socket()
                f.setblocking(False)
                f.connect_ex(addr)
                fillers.append(f)
            await asyncio.sleep(0.05)
            for _ in range(2):
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(lp.create_connection(asyncio.Protocol, *addr), 0.3)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.open_connection(*addr), 0.2)
            s = socket.socket()
            s.setblocking(False)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(lp.sock_connect(s, addr), 0.2)
            s.close()
        finally:
            for f in fillers:
                f.close()
            lsock.close()

    run(loop, main())


@pytest.mark.parametrize("family", FAMILIES)
def test_thousand_connections(loop, family, unix_dir):
    raise_nofile()
    n = 1000

    async def main():
        lp = asyncio.get_running_loop()
        server_trs = []

        lost = []

        class S(Echo):
            def connection_made(self, tr):
                super().connection_made(tr)
                server_trs.append(tr)

            def connection_lost(self, exc):
                lost.append(exc)

        if family == "tcp":
            srv = await lp.create_server(S, "127.0.0.1", 0, backlog=n)
            addr = srv.sockets[0].getsockname()
            opened = await asyncio.gather(*[lp.create_connection(
                lambda: Rec(eof_ret=True), *addr) for _ in range(n)])
        else:
            srv = await lp.create_unix_server(S, unix_dir.sock(), backlog=n)
            opened = await asyncio.gather(*[lp.create_unix_connection(
                lambda: Rec(eof_ret=True), unix_dir.sock()) for _ in range(n)])
        await until(lambda: len(server_trs) == n)
        for i, (tr, pr) in enumerate(opened):
            tr.write(b"conn-%d;" % i)
        await until(lambda: all(pr.data for _, pr in opened))
        for i, (tr, pr) in enumerate(opened):
            assert pr.data == b"conn-%d;" % i
        for tr, _ in opened:
            tr.close()
        await asyncio.gather(*[pr.lost for _, pr in opened])
        await until(lambda: len(lost) == n)
        assert lost == [None] * n
        srv.close()
        await srv.wait_closed()

    run(loop, main(), timeout=50)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("size", [100, 3 << 20])
def test_mutable_buffers_are_sent_as_they_were_at_write(loop, loop_kind, family, unix_dir, size):
    # A mutable buffer (bytearray, memoryview: asyncpg writes memoryviews) goes to the socket
    # at once when nothing is queued, and goloop copies what the socket did not take:
    # changing the buffer after write() returns must not change what the peer gets, whether
    # it all went (100 bytes) or most waits for the peer to read (3 MiB), and bytes objects
    # written before and after keep their order. (asyncio's loop copies it up to 3.11; from
    # 3.12 it queues the unsent part by reference, for sendmsg, and sends what the buffer
    # holds by then.)
    if loop_kind == "asyncio" and size > 100 and sys.version_info >= (3, 12):
        pytest.skip("asyncio 3.12+ sends a queued mutable buffer as it is when sent, not as written")

    async def body(p):
        a = bytearray(b"a" * size)
        m = bytearray(b"m" * size)
        p.ctr.write(a)
        a[:] = b"x" * size
        p.ctr.write(b"<bytes>")
        p.ctr.write(memoryview(m)[1:])
        m[:] = b"y" * size
        p.ctr.write(memoryview(b"<ro>"))
        p.ctr.write(b"<end>")
        want = b"a" * size + b"<bytes>" + b"m" * (size - 1) + b"<ro><end>"
        await until(lambda: len(p.spr.data) >= len(want), timeout=30)
        assert bytes(p.spr.data) == want
        assert p.ctr.get_write_buffer_size() == 0

    pair_test(loop, family, unix_dir, body)


def test_write_non_contiguous_memoryview(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        lp = asyncio.get_running_loop()
        a, b = socket.socketpair()
        try:
            tr, pr = await lp.connect_accepted_socket(Rec, a)
            tr.write(memoryview(b"abcdef")[::2])  # asyncio: no exception here
            exc = await asyncio.wait_for(pr.lost, 5)
            return type(exc)
        finally:
            b.close()

    assert run(loop, main()) is BufferError
    assert [c["message"] for c in contexts] == ["Fatal write error on socket transport"]


@pytest.mark.timeout(120)
def test_many_small_writes_under_backpressure_arrive_in_order(loop, loop_kind):
    # A writer that resumes at the low-water mark and keeps writing small chunks keeps the
    # write queue from ever emptying (goloop compacts it as it goes): every byte must still
    # arrive, in order. asyncio's own loop (the oracle) sums its whole buffer on each write
    # (3.12+), quadratic here: it took over 120 s on a loaded 3.13t, so it gets a tenth.
    total_chunks = 200_000 if loop_kind != "asyncio" else 20_000

    async def main():
        lp = asyncio.get_running_loop()
        a, b = socket.socketpair()
        b.setblocking(False)
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)

        class P(asyncio.Protocol):
            def __init__(self):
                self.can_write = asyncio.Event()
                self.can_write.set()
                self.pauses = 0

            def pause_writing(self):
                self.pauses += 1
                self.can_write.clear()

            def resume_writing(self):
                self.can_write.set()

        tr, pr = await lp.connect_accepted_socket(P, a)
        expected = b"".join(b"%08d" % i for i in range(total_chunks))
        received = bytearray()

        async def reader():
            while len(received) < len(expected):
                received.extend(await lp.sock_recv(b, 4096))
                await asyncio.sleep(0)

        rt = asyncio.ensure_future(reader())
        for i in range(0, total_chunks, 2000):
            await pr.can_write.wait()
            for j in range(i, i + 2000):
                tr.write(b"%08d" % j)
            await asyncio.sleep(0)
        await asyncio.wait_for(rt, 60)
        assert pr.pauses > 0
        tr.close()
        await asyncio.sleep(0.01)
        b.close()
        return bytes(received) == expected

    assert loop.run_until_complete(main())


# ---------------------------------------------------------------------------------------
# accepting connections (goloop makes plain transports at once, not in a task each)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_accepted_connections_each_get_a_context_copy(loop, family, unix_dir):
    """The protocol factory runs in a copy of the context per connection, as asyncio's
    per-connection task does: what it sets is seen by that connection's connection_made and
    by no other connection."""
    import contextvars

    var = contextvars.ContextVar("var", default=0)
    seen = []

    class P(asyncio.Protocol):
        def connection_made(self, tr):
            seen.append(var.get())
            tr.close()

    def factory():
        var.set(var.get() + 1)
        return P()

    async def main():
        if family == "tcp":
            server = await loop.create_server(factory, "127.0.0.1", 0)
            addr = server.sockets[0].getsockname()
            opener = lambda: asyncio.open_connection(*addr)  # noqa: E731
        else:
            path = unix_dir.sock()
            server = await loop.create_unix_server(factory, path)
            opener = lambda: asyncio.open_unix_connection(path)  # noqa: E731
        try:
            for _ in range(5):
                reader, writer = await opener()
                assert await asyncio.wait_for(reader.read(), 10) == b""
                writer.close()
            await until(lambda: len(seen) == 5)
        finally:
            server.close()
            await server.wait_closed()
        return seen, var.get()

    assert run(loop, main()) == ([1, 1, 1, 1, 1], 0)


def test_failing_protocol_factory_drops_only_that_connection(loop):
    calls = []
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    lost = []

    class Echo(asyncio.Protocol):
        def connection_made(self, tr):
            self.tr = tr

        def data_received(self, data):
            self.tr.write(data)

        def connection_lost(self, exc):
            lost.append(exc)

    def factory():
        calls.append(1)
        if len(calls) == 1:
            raise ZeroDivisionError("no protocol")
        return Echo()

    async def main():
        server = await loop.create_server(factory, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        try:
            r1, w1 = await asyncio.open_connection(*addr)
            # the first connection has no transport: the peer sees it closed
            import gc

            for _ in range(50):
                gc.collect()  # asyncio's task frame may hold the socket a little longer
                try:
                    got = await asyncio.wait_for(r1.read(), 0.1)
                    break
                except asyncio.TimeoutError:
                    continue
            else:
                got = None
            w1.close()
            r2, w2 = await asyncio.open_connection(*addr)
            w2.write(b"ping")
            echoed = await asyncio.wait_for(r2.readexactly(4), 10)
            w2.close()
            await w2.wait_closed()
            await until(lambda: lost)
            return got, echoed
        finally:
            server.close()
            await server.wait_closed()

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        got, echoed = run(loop, main())
    assert got in (b"", None) and echoed == b"ping"
    assert contexts == []  # reported only in debug mode, as asyncio does


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_accepted_socket_as_asyncio_gives_it(loop, host):
    """goloop accepts TCP connections with its own accept4(); the transport's socket and
    peername must be what asyncio's sock.accept() path gives: same family, type and proto,
    non-blocking, the peer's address in the socket module's format, TCP_NODELAY on."""
    got = []

    class P(asyncio.Protocol):
        def connection_made(self, tr):
            s = tr.get_extra_info("socket")
            got.append((s.family, s.type, s.proto, s.gettimeout(),
                        s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0,
                        tr.get_extra_info("peername"), tr.get_extra_info("sockname")))
            tr.close()

    async def main():
        try:
            server = await loop.create_server(P, host, 0)
        except OSError:
            pytest.skip(f"no {host} here")
        addr = server.sockets[0].getsockname()
        try:
            c = socket.socket(server.sockets[0].family)
            c.setblocking(False)
            await loop.sock_connect(c, addr[:2])
            await until(lambda: got)
            mine, peer = c.getsockname(), c.getpeername()
            c.close()
            return got[0], mine, peer
        finally:
            server.close()
            await server.wait_closed()

    (family, stype, proto, timeout, nodelay, peername, sockname), mine, peer = run(loop, main())
    assert family == (socket.AF_INET6 if ":" in host else socket.AF_INET)
    assert stype == socket.SOCK_STREAM and timeout == 0.0 and nodelay
    assert peername == mine and sockname == peer
    assert type(peername) is tuple and all(type(a) is type(b) for a, b in zip(peername, mine))


def test_accept_out_of_descriptors_pauses_then_resumes(gloop, monkeypatch):
    """accept() failing with EMFILE: asyncio reports it to the exception handler, stops
    accepting and tries again ACCEPT_RETRY_DELAY later; goloop's accept path does the same."""
    from asyncio import constants

    from goloop import _server

    real = _server._accept_inet
    fails = []

    def accept_inet(fd):
        if not fails:
            fails.append(1)
            raise OSError(errno.EMFILE, "Too many open files")
        return real(fd)

    monkeypatch.setattr(_server, "_accept_inet", accept_inet)
    monkeypatch.setattr(constants, "ACCEPT_RETRY_DELAY", 0.05)
    contexts = []
    gloop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
    served = []

    class P(asyncio.Protocol):
        def connection_made(self, tr):
            served.append(1)
            tr.close()

    async def main():
        server = await gloop.create_server(P, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        try:
            c = socket.create_connection(addr)
            await until(lambda: served, timeout=10)
            c.close()
        finally:
            server.close()
            await server.wait_closed()

    run(gloop, main())
    assert fails and served == [1]
    assert [c["message"] for c in contexts] == ["socket.accept() out of system resource"]
    assert contexts[0]["exception"].errno == errno.EMFILE


def test_extra_info_socket_before_and_after_close(loop):
    """get_extra_info('socket') is one TransportSocket for the transport's whole life (goloop
    makes it on first request; asyncio in __init__), also when first asked after close."""
    seen = {}

    class P(asyncio.Protocol):
        def connection_made(self, tr):
            self.tr = tr

        def connection_lost(self, exc):
            seen["lost"] = True

    async def main():
        server = await loop.create_server(P, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        try:
            results = []
            for ask_before in (True, False):
                tr, pr = await loop.create_connection(P, *addr)
                if ask_before:
                    s1 = tr.get_extra_info("socket")
                    assert s1 is tr.get_extra_info("socket")
                    assert s1.fileno() >= 0 and s1.getpeername() == addr
                seen.clear()
                tr.close()
                await until(lambda: seen.get("lost"))
                s2 = tr.get_extra_info("socket")
                results.append((type(s2).__name__, s2.fileno(),
                                s2 is tr.get_extra_info("socket"),
                                (s2 is s1) if ask_before else None))
            return results
        finally:
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == [("TransportSocket", -1, True, True),
                                 ("TransportSocket", -1, True, None)]


def test_transport_map_holds_transports_weakly():
    """loop._transports (goloop's TransportMap) as asyncio's code uses it: set, look up,
    delete; a transport that is gone reads as missing and does not stay alive."""
    import gc
    import weakref

    from goloop._transports import TransportMap

    class T:
        pass

    m = TransportMap()
    a = T()
    m[5] = a  # asyncio's own transports register this way
    dict.__setitem__(m, 6, weakref.ref(T()))  # goloop's way, for an object already gone
    assert m[5] is a
    gc.collect()
    with pytest.raises(KeyError):
        m[6]
    with pytest.raises(KeyError):
        m[7]
    del m[5]  # sendfile steps the transport aside, then puts it back
    with pytest.raises(KeyError):
        m[5]
    m[5] = a
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is None  # the map kept no strong reference
    with pytest.raises(KeyError):
        m[5]


def test_fd_of_a_closed_transport_is_free_again(gloop):
    """While a transport uses an fd, add_reader on it raises; once the transport is closed,
    and also once it is gone, the fd number may serve add_reader again (asyncio's
    _ensure_fd_no_transport looks it up in loop._transports)."""
    import gc
    import os

    lost = []

    class P(asyncio.Protocol):
        def connection_lost(self, exc):
            lost.append(exc)

    async def main():
        a, b = socket.socketpair()
        c, d = socket.socketpair()  # made now, so that neither takes a's number later
        tr, pr = await gloop.connect_accepted_socket(P, a)
        fd = a.fileno()
        with pytest.raises(RuntimeError, match="is used by transport"):
            gloop.add_reader(fd, lambda: None)
        tr.close()
        await until(lambda: lost)  # the transport has closed its socket
        try:
            os.dup2(c.fileno(), fd)  # the transport's fd number, now another socket
            gloop.add_reader(fd, lambda: None)  # the transport is closing
            gloop.remove_reader(fd)
            del tr, pr
            gc.collect()
            gloop.add_reader(fd, lambda: None)  # the transport is gone
            gloop.remove_reader(fd)
        finally:
            os.close(fd)
            for s in (b, c, d):
                s.close()
        return True

    assert run(gloop, main())
