"""goloop's own Server (pyshim/goloop/_server.py) against asyncio's loop's.

goloop owns the server/connection bookkeeping that asyncio keeps private; these tests hold
it to asyncio's public behaviour on the running version (wait_closed's 3.12.1 semantics,
3.13's close_clients/abort_clients and create_unix_server(cleanup_socket=)).
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile

import pytest

from loophelpers import is_goloop, open_fds

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)


class Hold(asyncio.Protocol):
    """Keeps its connection open; records what happens to it."""

    def __init__(self, log):
        self.log = log

    def connection_made(self, tr):
        self.tr = tr
        self.log.append("made")

    def connection_lost(self, exc):
        self.log.append(("lost", type(exc).__name__ if exc else None))


async def connect(srv, log, made):
    """A client connection to srv, once the server side has made `made` connections."""
    port = srv.sockets[0].getsockname()[1]
    rw = await asyncio.open_connection("127.0.0.1", port)
    while log.count("made") < made:
        await asyncio.sleep(0.001)
    return rw


def run(loop, coro, timeout=10):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def test_server_type_and_public_api(loop):
    async def main():
        srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        try:
            assert isinstance(srv, asyncio.AbstractServer)
            from asyncio import base_events
            assert isinstance(srv, base_events.Server)
            assert srv.get_loop() is loop and srv.is_serving()
            (s,) = srv.sockets
            assert s.family == socket.AF_INET and s.getsockname()[0] == "127.0.0.1"
            assert repr(srv).startswith("<Server sockets=(")
        finally:
            srv.close()
        assert not srv.is_serving() and srv.sockets == ()
        await srv.wait_closed()

    run(loop, main())


def test_wait_closed_waits_for_connections_per_version(loop):
    # 3.12.1+: wait_closed() returns only when the server is closed AND its connections
    # are gone; 3.11 returns at once from a closed server. goloop does what the running
    # version's asyncio does.
    log = []

    async def main():
        srv = await loop.create_server(lambda: Hold(log), "127.0.0.1", 0)
        r, w = await connect(srv, log, 1)
        srv.close()
        waiter = asyncio.ensure_future(srv.wait_closed())
        await asyncio.sleep(0.05)
        early = waiter.done()
        w.close()  # the client goes: the server's transport sees EOF and closes
        await asyncio.wait_for(waiter, 5)
        await w.wait_closed()
        return early

    early = run(loop, main())
    assert early == (not PY312)


def test_close_clients_and_abort_clients(loop):
    if not PY313 and not is_goloop(loop):
        pytest.skip("asyncio < 3.13 has no close_clients/abort_clients")
    log = []

    async def main():
        srv = await loop.create_server(lambda: Hold(log), "127.0.0.1", 0)
        conns = [await connect(srv, log, k) for k in (1, 2)]
        srv.close()
        srv.close_clients()
        for r, w in conns:
            assert await r.read() == b""  # orderly close: EOF
            w.close()
        await srv.wait_closed()
        # abort: a second server, its client sees a reset or EOF at once
        srv2 = await loop.create_server(lambda: Hold(log), "127.0.0.1", 0)
        r, w = await connect(srv2, log, 3)
        srv2.close()
        srv2.abort_clients()
        await srv2.wait_closed()
        w.close()
        return log

    log = run(loop, main())
    assert log.count(("lost", None)) == 3


def test_serve_forever_cancelled_closes(loop):
    async def main():
        srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, start_serving=False)
        assert not srv.is_serving()
        task = asyncio.ensure_future(srv.serve_forever())
        await asyncio.sleep(0.01)
        assert srv.is_serving()
        with pytest.raises(RuntimeError, match="already being awaited"):
            await srv.serve_forever()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not srv.is_serving()
        with pytest.raises(RuntimeError, match="is closed"):
            await srv.serve_forever()

    run(loop, main())


def test_async_with_closes(loop):
    async def main():
        async with await loop.create_server(asyncio.Protocol, "127.0.0.1", 0) as srv:
            assert srv.is_serving()
        assert not srv.is_serving()

    run(loop, main())


@pytest.mark.parametrize("cleanup", [None, True, False])
def test_unix_server_socket_cleanup_per_version(loop, cleanup):
    if cleanup is not None and not PY313 and not is_goloop(loop):
        pytest.skip("asyncio < 3.13 has no cleanup_socket")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s")

        async def main():
            kw = {} if cleanup is None else {"cleanup_socket": cleanup}
            srv = await loop.create_unix_server(asyncio.Protocol, path, **kw)
            assert os.path.exists(path)
            srv.close()
            await srv.wait_closed()
            return os.path.exists(path)

        removed = not run(loop, main())
    expect = PY313 if cleanup is None else cleanup
    assert removed == expect


def test_unix_server_leaves_a_replaced_path_alone(gloop):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s")

        async def main():
            srv = await gloop.create_unix_server(asyncio.Protocol, path, cleanup_socket=True)
            os.unlink(path)
            with open(path, "w") as f:  # somebody else's file now
                f.write("x")
            srv.close()
            await srv.wait_closed()
            return os.path.exists(path)

        assert run(gloop, main())


def test_create_server_argument_errors_match(loop):
    async def main():
        errs = []
        for kw in ({"ssl": True}, {"ssl_handshake_timeout": 1}, {"ssl_shutdown_timeout": 1},
                   {}):
            try:
                await loop.create_server(asyncio.Protocol, **kw)
            except (TypeError, ValueError) as e:
                errs.append((type(e).__name__, str(e)))
        with socket.socket() as s:
            try:
                await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, sock=s)
            except ValueError as e:
                errs.append(str(e))
        with socket.socket(type=socket.SOCK_DGRAM) as s:
            try:
                await loop.create_server(asyncio.Protocol, sock=s)
            except ValueError as e:
                errs.append(str(e).split(",")[0])
        return errs

    errs = run(loop, main())
    assert errs == [
        ("TypeError", "ssl argument must be an SSLContext or None"),
        ("ValueError", "ssl_handshake_timeout is only meaningful with ssl"),
        ("ValueError", "ssl_shutdown_timeout is only meaningful with ssl"),
        ("ValueError", "Neither host/port nor sock were specified"),
        "host/port and sock can not be specified at the same time",
        "A Stream Socket was expected",
    ]


def test_bind_error_message_matches(loop):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def main():
            with pytest.raises(OSError) as ei:
                await loop.create_server(asyncio.Protocol, "127.0.0.1", port,
                                         reuse_address=False)
            return ei.value.errno, str(ei.value)

        return_errno, msg = run(loop, main())
    import errno as E
    assert return_errno == E.EADDRINUSE
    assert msg.startswith(f"[Errno {E.EADDRINUSE}] error while attempting to bind on address "
                          f"('127.0.0.1', {port}): ")
    assert "address already in use" in msg


def test_protocol_factory_error_leaks_no_descriptor(loop):
    # asyncio drops the error (reported in debug mode only); goloop also closes the socket
    async def main():
        def factory():
            raise RuntimeError("no protocol today")

        srv = await loop.create_server(factory, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        before = open_fds()
        for _ in range(5):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            data = await asyncio.wait_for(r.read(), 5)  # goloop closes; asyncio leaves it
            w.close()
            await w.wait_closed()
        srv.close()
        await srv.wait_closed()
        return data, before

    if not is_goloop(loop):
        pytest.skip("asyncio's loop leaves the accepted socket to the garbage collector")
    data, before = run(loop, main())
    assert data == b""
    assert open_fds() <= before


def test_connections_attach_and_detach(loop):
    # the server counts its connections: closing one detaches it
    log = []

    async def main():
        srv = await loop.create_server(lambda: Hold(log), "127.0.0.1", 0)
        r, w = await connect(srv, log, 1)
        w.close()
        await w.wait_closed()
        while ("lost", None) not in log:
            await asyncio.sleep(0.001)
        srv.close()
        # nothing attached any more: wait_closed returns at once on every version
        await asyncio.wait_for(srv.wait_closed(), 1)

    run(loop, main())


@pytest.mark.parametrize("keep_alive", [None, True])
def test_create_server_keep_alive(loop, keep_alive):
    if keep_alive and not PY313 and not is_goloop(loop):
        pytest.skip("asyncio < 3.13 has no keep_alive")

    async def main():
        kw = {} if keep_alive is None else {"keep_alive": keep_alive}
        srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, **kw)
        try:
            return srv.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        finally:
            srv.close()
            await srv.wait_closed()

    assert bool(run(loop, main())) == bool(keep_alive)
