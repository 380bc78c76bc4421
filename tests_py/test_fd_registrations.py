"""Registrations of sockets that get closed, with asyncio's loop as the oracle (a closed socket's registration once outlived it).

asyncio's selector keeps the object each registration was made with (SelectorKey.fileobj):
remove_reader(sock) after sock.close() (fileno() is -1 then) finds the registration by
identity and answers True, or False when only the other direction was registered; an object
that registered nothing, or a registration made with the number, gives ValueError. anyio
removes its readers that way when a stream is closed during a receive.

A socket closed with a registration outstanding leaves a stale one behind: epoll forgets a
closed descriptor without a word, and the next socket that gets the number must still be
armed, and its events must not reach the old callbacks. The matrix below makes an
outstanding registration of each kind (add_reader, add_writer, a sock_recv or sock_sendall
wait), closes its socket, and then uses a new socket that has the same number in each way
(add_reader, add_writer, sock_recv, sock_sendall, sock_accept, sock_connect, a transport of
create_connection or connect_accepted_socket):
- "removed": the old registration is removed after the close (remove_reader on the closed
  socket, or the wait cancelled), as anyio does: both loops;
- "left": it is not: goloop only, as asyncio's loop fails there (its selector keeps the
  stale key, so the new socket's add_reader changes nothing in epoll and never fires, and
  an add_writer raises FileNotFoundError); test_stale_registration_on_asyncio shows it.
"""
from __future__ import annotations

import asyncio
import os
import socket

import pytest

from loophelpers import LOOP_KINDS, close_loop, is_goloop, make_loop

pytestmark = pytest.mark.timeout(60)

INVALID_FD = "Invalid file descriptor: -1"


def _nonblocking_pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


# ---------------------------------------------------------------------------------------
# remove_reader/remove_writer/get_key on a socket closed since it was registered
# ---------------------------------------------------------------------------------------


def test_remove_reader_after_close_finds_the_registration(loop):
    a, b = _nonblocking_pair()
    with b:
        loop.add_reader(a, print)
        handle = loop._selector.get_key(a).data[0]
        a.close()
        assert loop.remove_reader(a) is True
        assert handle.cancelled()
        # gone now: the closed object finds nothing more
        with pytest.raises(ValueError, match=INVALID_FD):
            loop.remove_reader(a)
        with pytest.raises(ValueError, match=INVALID_FD):
            loop.remove_writer(a)


def test_remove_writer_after_close_finds_the_registration(loop):
    a, b = _nonblocking_pair()
    with b:
        loop.add_writer(a, print)
        a.close()
        assert loop.remove_writer(a) is True
        with pytest.raises(ValueError, match=INVALID_FD):
            loop.remove_writer(a)


def test_remove_after_close_other_direction_returns_false(loop):
    a, b = _nonblocking_pair()
    with b:
        loop.add_writer(a, print)
        a.close()
        assert loop.remove_reader(a) is False  # found, but no reader: asyncio's False
        assert loop.remove_writer(a) is True


def test_remove_after_close_both_directions(gloop):
    # (asyncio's loop raises OSError EBADF here: it asks epoll to keep the other direction
    # of the closed descriptor, then forgets both; anyio, with a receive and a send
    # pending on a stream it closes, gets that error, then ValueError, in its callbacks.)
    a, b = _nonblocking_pair()
    with b:
        gloop.add_reader(a, print)
        gloop.add_writer(a, print)
        reader, writer = gloop._selector.get_key(a).data
        a.close()
        assert gloop.remove_writer(a) is True
        assert gloop.remove_reader(a) is True
        assert reader.cancelled() and writer.cancelled()
        with pytest.raises(ValueError, match=INVALID_FD):
            gloop.remove_reader(a)


def test_selector_key_after_close(loop):
    a, b = _nonblocking_pair()
    with b:
        fd = a.fileno()
        loop.add_reader(a, print)
        a.close()
        key = loop._selector.get_key(a)
        assert key.fd == fd
        assert key.fileobj is a
        assert key.events == 1
        assert loop.remove_reader(a) is True


def test_registered_by_number_not_found_by_closed_object(loop):
    # asyncio looks the closed object up by identity: a registration made with the number
    # is not the object's (the number still removes it).
    a, b = _nonblocking_pair()
    with b:
        fd = a.fileno()
        loop.add_reader(fd, print)
        a.close()
        with pytest.raises(ValueError, match=INVALID_FD):
            loop.remove_reader(a)
        assert loop.remove_reader(fd) is True


def test_closed_unregistered_socket_raises_asyncios_error(loop):
    a, b = _nonblocking_pair()
    a.close()
    b.close()
    for op in (lambda: loop.remove_reader(a), lambda: loop.remove_writer(a),
               lambda: loop.add_reader(a, print), lambda: loop.add_writer(a, print)):
        with pytest.raises(ValueError, match=INVALID_FD):
            op()
    with pytest.raises(ValueError, match=INVALID_FD):
        loop.remove_reader(-1)


def test_remove_after_close_on_closed_loop_returns_false(loop):
    a, b = _nonblocking_pair()
    with b:
        loop.add_reader(a, print)
        loop.close()
        a.close()
        assert loop.remove_reader(a) is False
        assert loop.remove_writer(a) is False


def test_registration_of_closed_socket_does_not_keep_it(loop):
    # The registration holds its object only while a handle is registered (as asyncio's
    # key does): removed, the socket is freed at once.
    import weakref
    a, b = _nonblocking_pair()
    with b:
        loop.add_writer(a, print)
        ref = weakref.ref(a)
        a.close()
        assert loop.remove_writer(a) is True
        del a
        assert ref() is None


# ---------------------------------------------------------------------------------------
# a new socket with the number of one closed with a registration outstanding
# ---------------------------------------------------------------------------------------


def _at(fd: int, sock: socket.socket, hold: socket.socket | None = None) -> socket.socket:
    """sock, moved to descriptor number fd (free now, or held by hold, closed first) if
    the kernel gave it another."""
    if hold is not None:
        hold.close()
    if sock.fileno() != fd:
        os.dup2(sock.fileno(), fd, inheritable=False)
        moved = socket.socket(fileno=fd)
        sock.close()
        sock = moved
    sock.setblocking(False)
    return sock


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


async def _io_barrier(loop):
    """Returns after an iteration that polled for I/O after this call (and ran the callbacks
    it queued): readiness that existed before the call has been delivered by then."""
    r, w = _nonblocking_pair()
    with r, w:
        fut = loop.create_future()
        loop.add_reader(r, lambda: fut.done() or fut.set_result(None))
        w.send(b"x")
        try:
            await fut
        finally:
            loop.remove_reader(r)
    await asyncio.sleep(0)


class Proto(asyncio.Protocol):
    def __init__(self):
        self.data = bytearray()
        self.got = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data
        if not self.got.done():
            self.got.set_result(None)


async def _recv_exactly(loop, sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(sock, n - len(buf))
        assert chunk, "EOF"
        buf += chunk
    return bytes(buf)


class Stale:
    """An outstanding registration of a socket that then gets closed."""

    def __init__(self, loop, kind: str):
        self.loop, self.kind = loop, kind
        self.calls = 0
        self.task = None

    def _called(self):
        self.calls += 1

    async def make(self, cleanup: str) -> int:
        loop = self.loop
        a, peer = _nonblocking_pair()
        if self.kind == "add_reader":
            loop.add_reader(a, self._called)
        elif self.kind == "add_writer":
            loop.add_writer(a, self._called)
        elif self.kind == "sock_recv":
            self.task = asyncio.ensure_future(loop.sock_recv(a, 10))
        elif self.kind == "sock_sendall":
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            self.task = asyncio.ensure_future(loop.sock_sendall(a, b"s" * (8 << 20)))
        await _io_barrier(loop)
        if self.task is not None:
            assert not self.task.done()  # waiting
        fd = a.fileno()
        a.close()
        peer.close()
        self.hold = _at(fd, socket.socket())  # fd until the new socket takes it
        await _io_barrier(loop)  # what was queued for the open socket ran
        if cleanup == "removed":  # what anyio does
            if self.kind == "add_reader":
                assert loop.remove_reader(a) is True
            elif self.kind == "add_writer":
                assert loop.remove_writer(a) is True
            else:
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)
        self.calls_at_close = self.calls
        return fd

    def check(self):
        """The old callbacks were not called for the new socket's events."""
        assert self.calls == self.calls_at_close
        if self.task is not None and not self.task.cancelled():
            assert not self.task.done(), self.task  # the old wait was not woken

    async def finish(self):
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def _use(loop, kind: str, fd: int, hold: socket.socket) -> None:
    """Uses a new socket of descriptor number fd (held by hold until then) in the way kind
    says; checks that it works, then makes it readable (its peer sends) and lets the loop
    poll."""
    if kind in ("add_reader", "add_writer", "sock_recv", "sock_sendall", "create_connection"):
        b, peer = socket.socketpair()
        b = _at(fd, b, hold)
        peer.setblocking(False)
        with b, peer:
            if kind == "add_reader":
                fut = loop.create_future()
                loop.add_reader(b, lambda: fut.done() or fut.set_result(b.recv(10)))
                peer.send(b"x")
                assert await fut == b"x"
                assert loop.remove_reader(b) is True
            elif kind == "add_writer":
                fut = loop.create_future()
                loop.add_writer(b, lambda: fut.done() or fut.set_result("w"))
                assert await fut == "w"
                assert loop.remove_writer(b) is True
            elif kind == "sock_recv":
                loop.call_soon(peer.send, b"x")  # after sock_recv found nothing and waits
                assert await loop.sock_recv(b, 10) == b"x"
            elif kind == "sock_sendall":
                b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                payload = os.urandom(1 << 20)  # more than the buffers: sock_sendall waits
                _, got = await asyncio.gather(loop.sock_sendall(b, payload),
                                              _recv_exactly(loop, peer, len(payload)))
                assert got == payload
            else:
                tr, proto = await loop.create_connection(Proto, sock=b)
                try:
                    peer.send(b"x")
                    await proto.got
                    tr.write(b"y")
                    assert await _recv_exactly(loop, peer, 1) == b"y"
                finally:
                    tr.close()
                await asyncio.sleep(0)
                return
            peer.send(b"!")
            await _io_barrier(loop)
        return
    lst = _listener()
    with lst:
        addr = lst.getsockname()
        if kind == "sock_accept":
            b = _at(fd, _listener(), hold)
            with b, socket.socket() as c1, socket.socket() as c2:
                loop.call_soon(c1.connect, b.getsockname())  # loopback: completes at once
                conn, _ = await loop.sock_accept(b)
                conn.close()
                c2.connect(b.getsockname())  # readable again
                await _io_barrier(loop)
        elif kind == "sock_connect":
            b = _at(fd, socket.socket(), hold)
            with b:
                await loop.sock_connect(b, addr)
                conn, _ = lst.accept()
                with conn:
                    b.send(b"x")
                    assert conn.recv(10) == b"x"
                    conn.send(b"!")
                    await _io_barrier(loop)
        elif kind == "connect_accepted_socket":
            with socket.create_connection(addr) as client:
                client.setblocking(False)
                conn, _ = lst.accept()
                b = _at(fd, conn, hold)
                tr, proto = await loop.connect_accepted_socket(Proto, sock=b)
                try:
                    client.send(b"x")
                    await proto.got
                    tr.write(b"y")
                    assert await _recv_exactly(loop, client, 1) == b"y"
                finally:
                    tr.close()
                await asyncio.sleep(0)
        else:
            raise AssertionError(kind)


STALE = ["add_reader", "add_writer", "sock_recv", "sock_sendall"]
USES = ["add_reader", "add_writer", "sock_recv", "sock_sendall", "sock_accept", "sock_connect",
        "create_connection", "connect_accepted_socket"]


def _reuse(loop, stale_kind, use, cleanup, timeout=10):
    async def main():
        stale = Stale(loop, stale_kind)
        fd = await stale.make(cleanup)
        try:
            await asyncio.wait_for(_use(loop, use, fd, stale.hold), timeout)
            stale.check()
        finally:
            await stale.finish()

    loop.run_until_complete(main())


@pytest.mark.parametrize("use", USES)
@pytest.mark.parametrize("stale_kind", STALE)
def test_reuse_after_removed_registration(loop, stale_kind, use):
    _reuse(loop, stale_kind, use, "removed")


@pytest.mark.parametrize("use", USES)
@pytest.mark.parametrize("stale_kind", STALE)
def test_reuse_with_stale_registration(gloop, stale_kind, use):
    _reuse(gloop, stale_kind, use, "left")


@pytest.mark.parametrize("use", ["add_reader", "add_writer"])
@pytest.mark.parametrize("loop_kind", [
    pytest.param("asyncio", marks=pytest.mark.xfail(
        reason="asyncio's selector keeps the stale key: the new socket's add_reader never "
               "fires, its add_writer raises FileNotFoundError")),
    "goloop"])
def test_stale_registration_on_asyncio(loop_kind, use):
    # test_reuse_with_stale_registration's first cases on both loops (asyncio's fails fast:
    # a short bound, as its add_reader would wait forever).
    lp = make_loop(loop_kind)
    try:
        _reuse(lp, "add_reader", use, "left", timeout=10 if is_goloop(lp) else 0.5)
    finally:
        close_loop(lp)


def test_stale_handles_are_cancelled(gloop):
    # goloop drops the closed socket's handles when the number comes back (asyncio's loop
    # cancels a reader it replaces; the writer of the old socket goes too).
    async def main():
        a, peer = _nonblocking_pair()
        loop = gloop
        loop.add_reader(a, print)
        loop.add_writer(a, print)
        key = loop._selector.get_key(a)
        reader, writer = key.data
        fd = a.fileno()
        a.close()
        peer.close()
        b, peer = socket.socketpair()
        b = _at(fd, b)
        with b, peer:
            loop.add_reader(b, print)
            assert reader.cancelled() and writer.cancelled()
            key = loop._selector.get_key(b)
            assert key.events == 1 and key.fileobj is b
            # the closed socket's registration is gone: asyncio's error for it
            with pytest.raises(ValueError, match=INVALID_FD):
                loop.remove_writer(a)
            assert loop.remove_reader(b) is True

    gloop.run_until_complete(main())


@pytest.mark.parametrize("loop_kind", LOOP_KINDS)
def test_transport_fd_refused_to_add_reader_after_reuse(loop_kind):
    # asyncio's _ensure_fd_no_transport still guards a transport's descriptor.
    lp = make_loop(loop_kind)

    async def main():
        b, peer = socket.socketpair()
        with peer:
            tr, _ = await lp.create_connection(asyncio.Protocol, sock=b)
            try:
                with pytest.raises(RuntimeError, match="is used by transport"):
                    lp.add_reader(b.fileno(), print)
            finally:
                tr.close()
            await asyncio.sleep(0)

    try:
        lp.run_until_complete(main())
    finally:
        close_loop(lp)
