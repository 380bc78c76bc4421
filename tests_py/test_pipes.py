"""connect_read_pipe / connect_write_pipe (asyncio's pipe transports on goloop's poller):
os.pipe, large writes, flow control, EOF, the peer closing, FIFOs and PTYs; asyncio's own
loop is the oracle."""
from __future__ import annotations

import asyncio
import errno
import os
import pty
import tempfile
import threading

import pytest

from loophelpers import open_fds

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024


def run(loop, coro, timeout=30):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


class ReadProto(asyncio.Protocol):
    def __init__(self, loop):
        self.data = bytearray()
        self.eof = False
        self.lost = loop.create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data

    def eof_received(self):
        self.eof = True

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


class WriteProto(asyncio.BaseProtocol):
    def __init__(self, loop):
        self.loop = loop
        self.paused = 0
        self.resumed = 0
        self.lost = loop.create_future()
        self._resume = None

    def pause_writing(self):
        self.paused += 1
        self._resume = self.loop.create_future()

    def resume_writing(self):
        self.resumed += 1
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    async def drain(self):
        if self._resume is not None:
            await self._resume

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def reader_thread(fd, sink, chunk=1 << 16):
    def body():
        with os.fdopen(fd, "rb", buffering=0) as f:
            while data := f.read(chunk):
                sink.append(data)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def test_read_pipe_large_and_eof(loop):
    r, w = os.pipe()
    payload = os.urandom(MIB) * 10

    def writer():
        with os.fdopen(w, "wb", buffering=0) as f:
            f.write(payload)

    async def main():
        rf = os.fdopen(r, "rb", buffering=0)
        tr, proto = await loop.connect_read_pipe(lambda: ReadProto(loop), rf)
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        exc = await proto.lost
        t.join()
        return exc, proto.eof, bytes(proto.data), tr.is_closing(), rf.closed

    exc, eof, data, closing, rf_closed = run(loop, main())
    assert exc is None and eof and closing and rf_closed
    assert len(data) == len(payload) and data == payload


def test_write_pipe_10mib_with_flow_control(loop):
    r, w = os.pipe()
    payload = os.urandom(MIB) * 10
    got = []

    async def main():
        wf = os.fdopen(w, "wb", buffering=0)
        tr, proto = await loop.connect_write_pipe(lambda: WriteProto(loop), wf)
        tr.set_write_buffer_limits(high=256 * 1024)
        assert tr.get_write_buffer_limits() == (64 * 1024, 256 * 1024)
        t = reader_thread(r, got)
        view = memoryview(payload)
        for i in range(0, len(payload), 128 * 1024):
            tr.write(view[i:i + 128 * 1024])
            await proto.drain()
        assert tr.can_write_eof()
        tr.write_eof()
        exc = await proto.lost
        await loop.run_in_executor(None, t.join)
        return exc, proto.paused, proto.resumed, wf.closed

    exc, paused, resumed, closed = run(loop, main())
    assert exc is None and closed
    assert paused >= 1 and resumed == paused
    assert b"".join(got) == payload


def test_write_pipe_single_huge_write(loop):
    r, w = os.pipe()
    payload = os.urandom(10 * MIB)
    got = []

    async def main():
        tr, proto = await loop.connect_write_pipe(lambda: WriteProto(loop),
                                                  os.fdopen(w, "wb", buffering=0))
        tr.write(payload)  # one write larger than the pipe: queued, paused
        size = tr.get_write_buffer_size()
        t = reader_thread(r, got)
        tr.close()  # close waits for the buffer to drain
        exc = await proto.lost
        await loop.run_in_executor(None, t.join)
        return exc, size, proto.paused

    exc, size, paused = run(loop, main())
    assert exc is None and 0 < size <= len(payload) and paused == 1
    assert b"".join(got) == payload


def test_write_pipe_reader_closes(loop):
    # the read end closes: the write transport sees it (EPIPE / connection_lost)
    r, w = os.pipe()

    async def main():
        tr, proto = await loop.connect_write_pipe(lambda: WriteProto(loop),
                                                  os.fdopen(w, "wb", buffering=0))
        tr.write(b"x" * (256 * 1024))  # fills the pipe: some stays queued
        await asyncio.sleep(0.01)
        os.close(r)
        exc = await proto.lost
        return exc, tr.is_closing()

    exc, closing = run(loop, main())
    assert closing
    # asyncio reports the peer closing as connection_lost with BrokenPipeError (write
    # pending) or None (detected by the read-side poll)
    assert exc is None or isinstance(exc, BrokenPipeError)


def test_write_pipe_reader_closes_while_idle(loop):
    r, w = os.pipe()

    async def main():
        tr, proto = await loop.connect_write_pipe(lambda: WriteProto(loop),
                                                  os.fdopen(w, "wb", buffering=0))
        await asyncio.sleep(0)
        os.close(r)
        return await proto.lost

    assert run(loop, main()) is None


def test_read_pipe_writer_closes(loop):
    r, w = os.pipe()

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: ReadProto(loop),
                                                 os.fdopen(r, "rb", buffering=0))
        os.write(w, b"last words")
        os.close(w)
        exc = await proto.lost
        return exc, proto.eof, bytes(proto.data)

    assert run(loop, main()) == (None, True, b"last words")


def test_read_pipe_pause_resume(loop):
    r, w = os.pipe()

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: ReadProto(loop),
                                                 os.fdopen(r, "rb", buffering=0))
        await asyncio.sleep(0)
        assert tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        os.write(w, b"held")
        await asyncio.sleep(0.05)
        held = bytes(proto.data)
        tr.resume_reading()
        for _ in range(100):
            if proto.data:
                break
            await asyncio.sleep(0.01)
        os.close(w)
        await proto.lost
        return held, bytes(proto.data)

    assert run(loop, main()) == (b"", b"held")


def test_pipe_transport_close_and_extra_info(loop):
    r, w = os.pipe()

    async def main():
        rf = os.fdopen(r, "rb", buffering=0)
        wf = os.fdopen(w, "wb", buffering=0)
        rt, rp = await loop.connect_read_pipe(lambda: ReadProto(loop), rf)
        wt, wp = await loop.connect_write_pipe(lambda: WriteProto(loop), wf)
        assert rt.get_extra_info("pipe") is rf and wt.get_extra_info("pipe") is wf
        wt.write(b"ping")
        for _ in range(100):
            if rp.data:
                break
            await asyncio.sleep(0.01)
        rt.close()
        wt.close()
        assert rt.is_closing() and wt.is_closing()
        return await rp.lost, await wp.lost, bytes(rp.data), rf.closed, wf.closed

    before = open_fds()
    assert run(loop, main()) == (None, None, b"ping", True, True)
    assert open_fds() == before - 2


def test_write_after_close_is_dropped(loop):
    r, w = os.pipe()

    async def main():
        wt, wp = await loop.connect_write_pipe(lambda: WriteProto(loop),
                                               os.fdopen(w, "wb", buffering=0))
        wt.close()
        wt.write(b"after close")  # counted and dropped, as in asyncio
        return await wp.lost

    try:
        assert run(loop, main()) is None
    finally:
        os.close(r)


def test_connect_read_pipe_rejects_regular_file(loop, tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"data")

    async def main():
        with open(p, "rb") as f:
            await loop.connect_read_pipe(lambda: ReadProto(loop), f)

    with pytest.raises(ValueError):
        run(loop, main())


def test_fifo(loop):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "fifo")
    os.mkfifo(path)
    payload = os.urandom(MIB)

    async def main():
        rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        rt, rp = await loop.connect_read_pipe(lambda: ReadProto(loop),
                                              os.fdopen(rfd, "rb", buffering=0))
        wt, wp = await loop.connect_write_pipe(lambda: WriteProto(loop),
                                               os.fdopen(wfd, "wb", buffering=0))
        wt.write(payload)
        wt.close()
        assert await wp.lost is None
        assert await rp.lost is None
        return rp.eof, bytes(rp.data)

    try:
        eof, data = run(loop, main())
        assert eof and data == payload
    finally:
        os.unlink(path)
        os.rmdir(d)


def test_pty_output(loop):
    master, slave = pty.openpty()

    async def main():
        mf = os.fdopen(master, "rb", buffering=0)
        rt, rp = await loop.connect_read_pipe(lambda: ReadProto(loop), mf)
        os.write(slave, b"hello from the slave\n")
        for _ in range(200):
            if rp.data.endswith(b"\n"):  # (the terminal may pass the line on in parts)
                break
            await asyncio.sleep(0.01)
        os.close(slave)
        # closing the slave: the master reports EIO, which asyncio's read pipe transport
        # treats as a normal end (connection_lost(None)) for PTYs
        exc = await rp.lost
        return bytes(rp.data), exc

    data, exc = run(loop, main())
    assert data.replace(b"\r\n", b"\n") == b"hello from the slave\n"
    assert exc is None or (isinstance(exc, OSError) and exc.errno == errno.EIO)


def test_pty_write_pipe(loop):
    # a PTY slave as a write pipe (character device): connect_write_pipe accepts it
    master, slave = pty.openpty()
    got = bytearray()

    async def main():
        wt, wp = await loop.connect_write_pipe(lambda: WriteProto(loop),
                                               os.fdopen(slave, "wb", buffering=0))
        wt.write(b"to the terminal\n")
        for _ in range(200):
            try:
                got.extend(os.read(master, 1024))
            except BlockingIOError:
                pass
            if got.endswith(b"\n"):  # (the terminal may pass the line on in parts)
                break
            await asyncio.sleep(0.01)
        wt.close()
        return await wp.lost

    os.set_blocking(master, False)
    try:
        assert run(loop, main()) is None
    finally:
        os.close(master)
    assert got.replace(b"\r\n", b"\n") == b"to the terminal\n"
