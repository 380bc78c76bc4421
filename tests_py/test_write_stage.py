"""write()'s fast path on goloop's stream transports: small bytes writes wait in C for the
end of the loop iteration and leave with one writev (loop_transport.c, wstage). Each case runs on
asyncio's loop (the oracle) and goloop's, and covers a way the staged data is handed on: to
the socket, back to Go's queue (a mutable buffer written after it, more writes than the
stage holds, a partial send, close, write_eof, abort), or to the error path.
"""
from __future__ import annotations

import asyncio
import socket

import pytest

from nethelpers import no_fd_leak, run, unix_dir  # noqa: F401
from test_transports import Rec, _lingering_reset, _raw_peer

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_fd_leak")]


async def _read_all(peer, timeout=10.0):
    loop = asyncio.get_running_loop()
    peer.setblocking(False)
    got = bytearray()
    while True:
        d = await asyncio.wait_for(loop.sock_recv(peer, 65536), timeout)
        if not d:
            return bytes(got)
        got += d


def test_writes_of_every_kind_in_one_callback_arrive_in_order(loop):
    """More writes than the stage holds, bytes mixed with bytearray and memoryview, then
    close(); a second connection written in the same callback and aborted (its staged data
    is dropped while it is on the loop's list) must not disturb the first."""
    async def main():
        tr, pr, peer = await _raw_peer("tcp", None, Rec)
        tr2, pr2, peer2 = await _raw_peer("tcp", None, Rec)
        want = bytearray()
        done = asyncio.get_running_loop().create_future()

        def burst():
            for i in range(20):
                chunk = bytes([65 + i]) * (i + 1)
                kind = i % 5
                data = bytearray(chunk) if kind == 3 else memoryview(chunk) if kind == 4 else chunk
                tr.write(data)
                tr2.write(chunk)
                want.extend(chunk)
            tr2.abort()
            tr.close()
            done.set_result(None)

        asyncio.get_running_loop().call_soon(burst)
        await done
        got = await _read_all(peer)
        assert got == bytes(want)
        assert await asyncio.wait_for(pr.lost, 10) is None
        await asyncio.wait_for(pr2.lost, 10)
        peer.close()
        peer2.close()
        return True

    assert run(loop, main())


def test_staged_write_partly_sent_keeps_the_rest_in_order(loop):
    """A write under the high-water mark (raised here) that the socket takes only part of:
    the rest stays queued (get_write_buffer_size) and follows once the peer reads."""
    async def main():
        tr, pr, peer = await _raw_peer("tcp", None, Rec)
        # Loopback takes what the sender's and the receiver's buffers hold, and the kernel's
        # autotuning grows both to several MiB (tcp_wmem, tcp_rmem): fixed 64 KiB buffers (the
        # kernel doubles them, and stops tuning them) hold well under 1 MiB in all, whatever
        # the machine's settings, so the 8 MiB below cannot all be taken by the socket.
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        tr.pause_reading()
        tr.set_write_buffer_limits(high=64 * 1024 * 1024)
        data = bytes(range(256)) * (32 * 1024)  # 8 MiB
        tr.write(data)
        # an iteration of the loop or more (how many does not matter: the peer reads nothing,
        # so what the socket did not take stays queued however long this takes)
        await asyncio.sleep(0.05)
        assert 0 < tr.get_write_buffer_size() < len(data)
        tr.write(b"tail")
        tr.close()
        got = await _read_all(peer)
        assert got == data + b"tail"
        assert await asyncio.wait_for(pr.lost, 10) is None
        peer.close()
        return True

    assert run(loop, main())


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_staged_write_then_write_eof(loop, family, unix_dir):
    async def main():
        tr, pr, peer = await _raw_peer(family, unix_dir, Rec)
        tr.write(b"last words")
        tr.write_eof()
        got = await _read_all(peer)
        assert got == b"last words"
        assert not tr.is_closing()
        tr.close()
        await asyncio.wait_for(pr.lost, 10)
        peer.close()
        return True

    assert run(loop, main())


def test_staged_write_to_a_reset_peer_is_a_fatal_error(loop):
    """A small write after the peer reset (reading paused, so only the send can notice):
    connection_lost gets the OSError, and nothing reaches the exception handler."""
    async def main():
        lp = asyncio.get_running_loop()
        seen = []
        lp.set_exception_handler(lambda _lp, ctx: seen.append(ctx))
        tr, pr, peer = await _raw_peer("tcp", None, Rec)
        tr.pause_reading()
        _lingering_reset(peer)
        await asyncio.sleep(0.1)
        for _ in range(3):  # the first send may still be taken before the reset is seen
            if tr.is_closing():
                break
            tr.write(b"into the void")
            await asyncio.sleep(0.05)
        exc = await asyncio.wait_for(pr.lost, 10)
        assert isinstance(exc, (ConnectionResetError, BrokenPipeError)), exc
        assert tr.get_write_buffer_size() == 0
        assert seen == []
        return True

    assert run(loop, main())
