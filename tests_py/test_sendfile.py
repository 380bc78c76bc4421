"""loop.sendfile() and loop.sock_sendfile(): the native os.sendfile path on goloop's socket
transport, the fallback path under TLS, and argument errors; asyncio's loop is the oracle."""
from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import tempfile

import pytest

from loophelpers import is_goloop

pytestmark = pytest.mark.timeout(60)

KIB = 1024
MIB = 1024 * KIB


def run(loop, coro, timeout=40):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def _pattern(n: int) -> bytes:
    block = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(2048))  # 64K
    return (block * (n // len(block) + 1))[:n]


DATA = _pattern(10 * MIB + 123)


@pytest.fixture(scope="module")
def files():
    """Temporary files of several sizes (binary mode), by size."""
    d = tempfile.mkdtemp(prefix="goloop-sendfile-")
    out = {}
    for size in (0, KIB, MIB, 10 * MIB):
        path = os.path.join(d, f"f{size}")
        with open(path, "wb") as f:
            f.write(DATA[:size])
        out[size] = path
    yield out
    for path in out.values():
        os.unlink(path)
    os.rmdir(d)


class Sink(asyncio.Protocol):
    """Collects what a connection receives until the peer closes."""

    def __init__(self, loop):
        self.data = bytearray()
        self.done = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(exc)


async def _pair(loop, ssl_pair=None):
    """A server Sink and a connected client transport (TLS when ssl_pair=(sctx, cctx))."""
    sinks = []

    def factory():
        s = Sink(loop)
        sinks.append(s)
        return s

    sctx, cctx = ssl_pair or (None, None)
    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=sctx)
    kw = {"ssl": cctx, "server_hostname": "localhost"} if cctx else {}
    tr, pr = await loop.create_connection(lambda: Sink(loop), "127.0.0.1",
                                          server.sockets[0].getsockname()[1], **kw)
    while not sinks:
        await asyncio.sleep(0.001)
    return server, tr, pr, sinks[0]


CASES = [  # (size, offset, count)
    (0, 0, None),
    (KIB, 0, None),
    (KIB, 100, None),
    (KIB, 100, 50),
    (KIB, 0, 10 * KIB),  # count past the end: what there is
    (MIB, 0, None),
    (MIB, 12345, 500000),
    (10 * MIB, 0, None),
    (10 * MIB, 3 * MIB + 7, None),
    (10 * MIB, 1, 10 * MIB - 2),
]


def _expected(size, offset, count):
    end = size if count is None else min(size, offset + count)
    return DATA[offset:end]


@pytest.mark.parametrize("size,offset,count", CASES)
def test_sendfile_tcp_native(loop, files, size, offset, count):
    async def main():
        server, tr, pr, sink = await _pair(loop)
        with open(files[size], "rb") as f:
            tr.write(b"HEAD")  # queued writes go out before the file
            sent = await loop.sendfile(tr, f, offset, count)
            pos = f.tell()
        tr.write(b"TAIL")  # and the transport works afterwards
        tr.close()
        await sink.done
        server.close()
        await server.wait_closed()
        return sent, pos, bytes(sink.data)

    sent, pos, data = run(loop, main())
    exp = _expected(size, offset, count)
    assert sent == len(exp)
    assert pos == offset + sent
    assert data == b"HEAD" + exp + b"TAIL"


@pytest.mark.parametrize("size,offset,count", [c for c in CASES if c[0] in (KIB, 10 * MIB)])
def test_sendfile_tls_fallback(loop, files, certs, size, offset, count):
    async def main():
        server, tr, pr, sink = await _pair(loop, (certs.server_context(), certs.client_context()))
        with open(files[size], "rb") as f:
            sent = await loop.sendfile(tr, f, offset, count)
            pos = f.tell()
        tr.close()
        await sink.done
        server.close()
        await server.wait_closed()
        return sent, pos, bytes(sink.data)

    sent, pos, data = run(loop, main())
    exp = _expected(size, offset, count)
    assert sent == len(exp) and pos == offset + sent and data == exp


def test_sendfile_tls_without_fallback_is_refused(loop, files, certs):
    async def main():
        server, tr, pr, sink = await _pair(loop, (certs.server_context(), certs.client_context()))
        try:
            with open(files[KIB], "rb") as f:
                with pytest.raises(RuntimeError):
                    await loop.sendfile(tr, f, fallback=False)
        finally:
            tr.close()
            await sink.done
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_sendfile_native_reading_resumes(loop, files):
    # reading is paused during the native sendfile and resumed after it
    async def main():
        class Echo(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport

            def data_received(self, data):
                self.transport.write(data)

        server = await loop.create_server(Echo, "127.0.0.1", 0)
        tr, pr = await loop.create_connection(lambda: Sink(loop), "127.0.0.1",
                                              server.sockets[0].getsockname()[1])
        with open(files[MIB], "rb") as f:
            sent = await loop.sendfile(tr, f)
        assert tr.is_reading()
        for _ in range(500):
            if len(pr.data) >= MIB:
                break
            await asyncio.sleep(0.01)
        tr.close()
        await pr.done
        server.close()
        await server.wait_closed()
        return sent, bytes(pr.data)

    sent, echoed = run(loop, main())
    assert sent == MIB and echoed == DATA[:MIB]


def test_write_during_native_sendfile(loop, files):
    # asyncio refuses transport.write() while a native sendfile runs
    async def main():
        server, tr, pr, sink = await _pair(loop)
        with open(files[10 * MIB], "rb") as f:
            task = loop.create_task(loop.sendfile(tr, f))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            outcome = None
            if not task.done():
                try:
                    tr.write(b"in the middle")
                    outcome = "accepted"
                except RuntimeError:
                    outcome = "RuntimeError"
            sent = await task
        tr.close()
        await sink.done
        server.close()
        await server.wait_closed()
        return outcome, sent

    outcome, sent = run(loop, main())
    assert sent == 10 * MIB
    if outcome is not None:
        assert outcome == "RuntimeError"


def test_sendfile_peer_closes(loop, files):
    async def main():
        server, tr, pr, sink = await _pair(loop)
        sink.transport.abort()  # the receiver goes away
        await asyncio.sleep(0.05)
        with open(files[10 * MIB], "rb") as f:
            try:
                await loop.sendfile(tr, f)
                outcome = "completed"
            except (ConnectionError, OSError, RuntimeError) as exc:
                outcome = type(exc).__name__
        tr.close()
        server.close()
        await server.wait_closed()
        return outcome

    outcome = run(loop, main())
    # the peer is gone: the send fails (EPIPE/ECONNRESET) or the transport is already closing
    assert outcome in ("BrokenPipeError", "ConnectionResetError", "RuntimeError",
                       "ConnectionError")


# ---------------------------------------------------------------------------------------
# loop.sock_sendfile
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size,offset,count",
                         [(0, 0, None), (KIB, 10, None), (MIB, 0, 1000), (10 * MIB, 5, None)])
@pytest.mark.parametrize("fallback", [True, False])
def test_sock_sendfile(loop, files, size, offset, count, fallback):
    async def main():
        server, _, _, _ = None, None, None, None
        got = bytearray()
        done = loop.create_future()

        class P(asyncio.Protocol):
            def data_received(self, data):
                got.extend(data)

            def connection_lost(self, exc):
                done.set_result(None)

        server = await loop.create_server(P, "127.0.0.1", 0)
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, server.sockets[0].getsockname())
        with open(files[size], "rb") as f:
            sent = await loop.sock_sendfile(sock, f, offset, count, fallback=fallback)
            pos = f.tell()
        sock.close()
        await done
        server.close()
        await server.wait_closed()
        return sent, pos, bytes(got)

    sent, pos, data = run(loop, main())
    exp = _expected(size, offset, count)
    assert sent == len(exp) and pos == offset + sent and data == exp


# ---------------------------------------------------------------------------------------
# bad arguments: the same exceptions as asyncio
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw,exc", [
    ({"offset": -1}, ValueError),
    ({"offset": "0"}, TypeError),
    ({"count": 0}, ValueError),
    ({"count": -5}, ValueError),
    ({"count": 1.5}, TypeError),
])
def test_sock_sendfile_bad_arguments(loop, files, kw, exc):
    async def main():
        sock = socket.socket()
        sock.setblocking(False)
        try:
            with open(files[KIB], "rb") as f:
                await loop.sock_sendfile(sock, f, **kw)
        finally:
            sock.close()

    with pytest.raises(exc):
        run(loop, main())


@pytest.mark.parametrize("kw,exc", [
    ({"offset": -1}, ValueError),
    ({"offset": "0"}, TypeError),
    ({"count": 0}, ValueError),
    ({"count": 1.5}, TypeError),
])
def test_sendfile_bad_arguments(loop, files, kw, exc):
    async def main():
        server, tr, pr, sink = await _pair(loop)
        try:
            with open(files[KIB], "rb") as f:
                await loop.sendfile(tr, f, **kw)
        finally:
            tr.close()
            await sink.done
            server.close()
            await server.wait_closed()

    with pytest.raises(exc):
        run(loop, main())


def test_sendfile_text_file_is_rejected(loop, files):
    async def main():
        server, tr, pr, sink = await _pair(loop)
        sock = socket.socket()
        sock.setblocking(False)
        try:
            with open(files[KIB], "r", encoding="latin-1") as f:
                with pytest.raises(ValueError):
                    await loop.sendfile(tr, f)
                with pytest.raises(ValueError):
                    await loop.sock_sendfile(sock, f)
        finally:
            sock.close()
            tr.close()
            await sink.done
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_sock_sendfile_blocking_socket_is_rejected(loop, files):
    loop.set_debug(True)  # asyncio checks the socket's blocking mode in debug mode only

    async def main():
        with open(files[KIB], "rb") as f:
            blocking = socket.socket()
            try:
                with pytest.raises(ValueError):
                    await loop.sock_sendfile(blocking, f)
            finally:
                blocking.close()

    run(loop, main())


def test_sendfile_on_closing_transport(loop, files):
    async def main():
        server, tr, pr, sink = await _pair(loop)
        tr.close()
        try:
            with open(files[KIB], "rb") as f:
                with pytest.raises(RuntimeError):
                    await loop.sendfile(tr, f)
        finally:
            await sink.done
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_sendfile_on_datagram_transport_is_unsupported(loop, files):
    async def main():
        tr, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                    local_addr=("127.0.0.1", 0))
        try:
            with open(files[KIB], "rb") as f:
                with pytest.raises(RuntimeError):
                    await loop.sendfile(tr, f)
        finally:
            tr.close()

    run(loop, main())


def test_sendfile_pipe_sends_nothing_like_asyncio(loop):
    # asyncio 3.11 sizes the transfer with fstat(): a pipe's st_size is 0, so nothing is sent
    async def main():
        server, tr, pr, sink = await _pair(loop)
        r, w = os.pipe()
        os.write(w, b"from a pipe")
        os.close(w)
        with open(r, "rb", buffering=0) as f:
            sent = await loop.sendfile(tr, f)
        tr.close()
        await sink.done
        server.close()
        await server.wait_closed()
        return sent, bytes(sink.data)

    assert run(loop, main()) == (0, b"")


def test_goloop_sendfile_leaves_no_registration(gloop, files):
    # the native path's dup()ed descriptor is unregistered and closed
    from loophelpers import open_fds

    async def main():
        server, tr, pr, sink = await _pair(gloop)
        before_fds, before_stats = open_fds(), gloop._stats()[2]
        with open(files[10 * MIB], "rb") as f:
            await gloop.sendfile(tr, f)
        after = open_fds(), gloop._stats()[2]
        tr.close()
        await sink.done
        server.close()
        await server.wait_closed()
        return (before_fds, before_stats), after

    before, after = run(gloop, main())
    assert is_goloop(gloop) and before == after
