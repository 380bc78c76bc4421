"""anyio's Unix socket streams and datagram sockets closed while a receive or send waits, on
asyncio's loop and on goloop (closed sockets' registrations once outlived them; anyio's own tests_sockets close-during-receive/send
and close-after-cancelled-io).

anyio's asyncio backend waits for a raw socket with loop.add_reader(sock)/add_writer(sock)
and removes the registration in the wait's done callback, after aclose() closed the socket:
loop.remove_reader(sock) with sock.fileno() == -1, which asyncio's loop answers by finding
the registration by identity. goloop raised ValueError there (reported to the exception
handler) and kept the registration, and the next socket that got the number never got its
events: each test here then opens another connection and checks that it works.
"""
from __future__ import annotations

import asyncio
from contextlib import suppress

import pytest

from loophelpers import LOOP_KINDS, make_loop
from nethelpers import unix_dir  # noqa: F401  (a fixture)

anyio = pytest.importorskip("anyio")  # installed by `make deps`

pytestmark = pytest.mark.timeout(60)

BOUND = 10  # seconds: only a hang reaches it


def run_anyio(loop_kind, func, *args):
    """Runs func(*args) with anyio on a loop of loop_kind; fails on any exception the loop's
    exception handler got (anyio's test plugin does the same)."""
    errors = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        with anyio.fail_after(BOUND):
            return await func(*args)

    result = anyio.run(main, backend="asyncio",
                       backend_options={"loop_factory": lambda: make_loop(loop_kind)})
    assert errors == []
    return result


class Echo:
    """A connection handler that echoes until EOF; ended is set once n connections ended.

    (Tests wait for it rather than cancel handlers with wait_all_tasks_blocked(): that a
    handler still waits for a read when it is cancelled, while its EOF is already there, is
    a race of anyio's own (its reader callback then sets a cancelled future's result), which
    goloop makes likelier: it looks for I/O at most every 20 us while callbacks are ready,
    so the EOF can be seen an iteration later than on asyncio's loop.)"""

    def __init__(self, n: int = 2):
        self.left = n
        self.ended = anyio.Event()

    async def __call__(self, stream):
        try:
            async with stream:
                with suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                              anyio.ClosedResourceError):
                    while True:
                        await stream.send(await stream.receive())
        finally:
            self.left -= 1
            if self.left == 0:
                self.ended.set()


async def check_echo(path):
    """A new connection to the echo server at path works."""
    async with await anyio.connect_unix(path) as stream:
        await stream.send(b"ping")
        assert await stream.receive() == b"ping"


@pytest.fixture(params=LOOP_KINDS)
def loop_kind(request):
    return request.param


@pytest.mark.parametrize("op", ["receive", "send"])
def test_unix_stream_close_during_io_then_new_connection(loop_kind, unix_dir, op):  # noqa: F811
    path = unix_dir.sock()

    async def silent(stream):  # reads nothing: a send fills the buffers and waits
        async with stream:
            await anyio.sleep_forever()

    async def main():
        async with await anyio.create_unix_listener(path) as listener, \
                anyio.create_task_group() as tg:
            echo = Echo()
            handlers = iter([silent, echo, echo])
            tg.start_soon(listener.serve, lambda s: next(handlers)(s))
            stream = await anyio.connect_unix(path)

            async def interrupt():
                await anyio.wait_all_tasks_blocked()
                await stream.aclose()

            async with stream, anyio.create_task_group() as tg2:
                tg2.start_soon(interrupt)
                with pytest.raises(anyio.ClosedResourceError):
                    if op == "receive":
                        await stream.receive()
                    else:
                        while True:
                            await stream.send(b"\0" * 4096)
            await check_echo(path)
            await check_echo(path)
            await echo.ended.wait()
            tg.cancel_scope.cancel()

    run_anyio(loop_kind, main)


@pytest.mark.parametrize("op", ["receive", "send"])
def test_unix_stream_close_after_cancelled_io_then_new_connection(loop_kind, unix_dir, op):  # noqa: F811
    # anyio's test_close_after_cancelled_io: the server's handler closes its stream after
    # the operation waiting on it was cancelled.
    path = unix_dir.sock()

    async def handler(stream):
        async def operate():
            with suppress(anyio.ClosedResourceError):
                if op == "receive":
                    await stream.receive()
                else:
                    while True:
                        await stream.send(b"\0" * 4096)

        async with anyio.create_task_group() as tg:
            tg.start_soon(operate)
            try:
                await anyio.sleep_forever()
            finally:
                await stream.aclose()

    async def main():
        client = None
        try:
            async with await anyio.create_unix_listener(path) as listener:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(listener.serve, handler)
                    client = await anyio.connect_unix(path)
                    await anyio.wait_all_tasks_blocked()
                    tg.cancel_scope.cancel()
        finally:
            if client is not None:
                await client.aclose()
        async with await anyio.create_unix_listener(path) as listener, \
                anyio.create_task_group() as tg:
            echo = Echo()
            tg.start_soon(listener.serve, echo)
            await check_echo(path)
            await check_echo(path)
            await echo.ended.wait()
            tg.cancel_scope.cancel()

    run_anyio(loop_kind, main)


@pytest.mark.parametrize("connected", [False, True])
def test_unix_datagram_close_during_receive_then_new_socket(loop_kind, unix_dir, connected):  # noqa: F811
    peer_path = unix_dir.sock("peer")

    async def open_socket(name):  # bound: the peer answers to its path
        local = unix_dir.sock(name)
        if connected:
            return await anyio.create_connected_unix_datagram_socket(peer_path, local_path=local)
        return await anyio.create_unix_datagram_socket(local_path=local)

    async def main():
        async with await anyio.create_unix_datagram_socket(local_path=peer_path) as peer:
            sock = await open_socket("old")

            async def interrupt():
                await anyio.wait_all_tasks_blocked()
                await sock.aclose()

            async with sock, anyio.create_task_group() as tg:
                tg.start_soon(interrupt)
                with pytest.raises(anyio.ClosedResourceError):
                    await sock.receive()
            # a new socket (most likely with the number of the closed one) receives
            async with await open_socket("new") as new:
                if connected:
                    await new.send(b"hello")
                    _, addr = await peer.receive()
                else:
                    await new.sendto(b"hello", peer_path)
                    _, addr = await peer.receive()
                # the reply arrives while new.receive() waits
                async with anyio.create_task_group() as tg:
                    async def reply():
                        await anyio.wait_all_tasks_blocked()
                        await peer.sendto(b"back", addr)
                    tg.start_soon(reply)
                    got = await new.receive()
                assert (got if connected else got[0]) == b"back"

    run_anyio(loop_kind, main)
