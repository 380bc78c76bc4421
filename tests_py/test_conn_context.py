"""Per-connection contextvars contexts, with asyncio's own loop as the oracle.

Up to 3.14, asyncio runs a transport's protocol callbacks in the contexts of the handles that call them:
a stream socket's reads (data_received, get_buffer/buffer_updated, eof_received) run in one
context per connection, copied when the transport starts reading (its reader handle), so a
ContextVar set there is seen by that connection's later reads and by the connection_lost they
schedule, never by another connection nor by the code that called run_until_complete.
The writer side runs in the context copied by the write() that left data queued
(resume_writing, and connection_lost after a close() that waited for the queue to drain).
3.15 changed the rule for stream connections (TCP, Unix, and TLS over them): every callback
of a connection runs in one context, fixed when the connection is made: a copy of the
context the server was created in for an accepted connection, a copy of the caller's for
create_connection(). What connection_made sets, the reads see, and what the reads set,
the write side and connection_lost see. Datagram endpoints, pipes and subprocesses keep
the old rule. The tests below expect each version's rule (CONN_CONTEXT).
Each test runs the loop in a fresh copy of the test's context, with the variable set to
"caller" there, and checks afterwards that it still reads "caller".
"""
from __future__ import annotations

import asyncio
import contextvars
import os
import socket
import sys

import pytest

from nethelpers import unix_dir  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(60)

UNSET = "-"
# 3.15+: one context per stream connection (see the module's docstring)
CONN_CONTEXT = sys.version_info >= (3, 15)


def run_isolated(loop, var, factory, timeout=10):
    """Runs factory() on loop in a copy of the current context in which var is "caller";
    returns (result, what var reads in that context afterwards)."""
    ctx = contextvars.copy_context()
    ctx.run(var.set, "caller")
    result = ctx.run(loop.run_until_complete, asyncio.wait_for(factory(), timeout))
    return result, ctx.get(var, UNSET)


class Recorder:
    """Logs (event, value of var) for each callback; names itself (and sets var to the name)
    in its first data callback."""

    def __init__(self, var, name_of=lambda data: bytes(data[:1]).decode()):
        self.var = var
        self.name_of = name_of
        self.name = None
        self.log = []
        self.lost = asyncio.get_running_loop().create_future()

    def seen(self, event):
        self.log.append((event, self.var.get(UNSET)))

    def got_data(self, event, data):
        self.seen(event)
        if self.name is None:
            self.name = self.name_of(data)
            self.var.set(self.name)

    def connection_made(self, transport):
        self.transport = transport
        self.seen("connection_made")
        self.var.set("made")  # a different copy than the reads: not seen by them

    def eof_received(self):
        self.seen("eof_received")

    def connection_lost(self, exc):
        self.seen("connection_lost")
        if not self.lost.done():
            self.lost.set_result(None)


class EchoRecorder(Recorder, asyncio.Protocol):
    def data_received(self, data):
        self.got_data("data_received", data)
        self.transport.write(data)


class BufferedEchoRecorder(Recorder, asyncio.BufferedProtocol):
    def __init__(self, var):
        super().__init__(var)
        self.buf = bytearray(64)

    def get_buffer(self, sizehint):
        self.seen("get_buffer")
        return self.buf

    def buffer_updated(self, nbytes):
        data = bytes(self.buf[:nbytes])
        self.got_data("buffer_updated", data)
        self.transport.write(data)


def expected_reads(events, name, conn_context=CONN_CONTEXT):
    """What a connection's read-side callbacks see, asyncio's way: "caller" until the first
    data callback names the connection, then the name. Up to 3.14 connection_made runs in a
    context of its own (a copy), so its "made" is never seen; 3.15 runs it in the
    connection's one context, so the reads see "made" until the first one names it."""
    out, cur = [], "made" if conn_context else "caller"
    for ev in events:
        out.append((ev, cur))
        if ev in ("data_received", "buffer_updated"):
            cur = name
    return out


async def _two_clients(var, open_conn):
    """Connects A and B, then interleaves their messages: A1, B1, A2, B2, EOF A, EOF B."""
    ra, wa = await open_conn()
    rb, wb = await open_conn()
    for w, r, msg in ((wa, ra, b"A1"), (wb, rb, b"B1"), (wa, ra, b"A2"), (wb, rb, b"B2")):
        w.write(msg)
        assert await r.readexactly(2) == msg
    for w, r in ((wa, ra), (wb, rb)):
        w.write_eof()
        assert await r.read() == b""
        w.close()
    assert var.get() == "caller"


@pytest.mark.parametrize("buffered", [False, True], ids=["Protocol", "BufferedProtocol"])
@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_server_connections_have_their_own_context(loop, family, buffered, unix_dir):  # noqa: F811
    var = contextvars.ContextVar("conn")
    protos = []

    def factory():
        p = (BufferedEchoRecorder if buffered else EchoRecorder)(var)
        protos.append(p)
        return p

    async def main():
        if family == "tcp":
            server = await loop.create_server(factory, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            open_conn = lambda: asyncio.open_connection("127.0.0.1", port)  # noqa: E731
        else:
            path = unix_dir.sock()
            server = await loop.create_unix_server(factory, path)
            open_conn = lambda: asyncio.open_unix_connection(path)  # noqa: E731
        await _two_clients(var, open_conn)
        await asyncio.gather(*(p.lost for p in protos))
        server.close()
        await server.wait_closed()
        return var.get()

    inside, after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert [p.name for p in protos] == ["A", "B"]
    for p in protos:
        events = [ev for ev, _ in p.log]
        assert p.log[0] == ("connection_made", "caller")
        # reads, EOF and the connection_lost that eof_received's close() scheduled
        assert p.log[1:] == expected_reads(events[1:], p.name), p.log
        assert events[-2:] == ["eof_received", "connection_lost"]


@pytest.mark.parametrize("buffered", [False, True], ids=["Protocol", "BufferedProtocol"])
def test_client_connections_have_their_own_context(loop, buffered):
    var = contextvars.ContextVar("conn")

    async def echo(reader, writer):
        while data := await reader.read(100):
            writer.write(data)
        writer.close()

    async def main():
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        cls = BufferedEchoRecorder if buffered else EchoRecorder

        class Client(cls):
            def data_received(self, data):  # no echo back
                self.got_data("data_received", data)
                self.got.set_result(None)

            def buffer_updated(self, nbytes):
                self.got_data("buffer_updated", self.buf[:nbytes])
                self.got.set_result(None)

        protos = []
        for _ in range(2):
            _, p = await loop.create_connection(lambda: Client(var), "127.0.0.1", port)
            protos.append(p)
        for p, msg in zip(protos * 2, (b"A1", b"B1", b"A2", b"B2")):
            p.got = loop.create_future()
            p.transport.write(msg)
            await p.got
        for p in protos:
            p.transport.write_eof()
            await p.lost
        server.close()
        await server.wait_closed()
        return protos, var.get()

    (protos, inside), after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    for p in protos:
        events = [ev for ev, _ in p.log]
        assert p.log[0] == ("connection_made", "caller")
        assert p.log[1:] == expected_reads(events[1:], p.name), p.log
        assert events[-2:] == ["eof_received", "connection_lost"]


def test_write_side_callbacks_run_in_the_writers_context(loop):
    """pause_writing runs in write()'s caller; resume_writing and the connection_lost of a
    close() that waited for the queue run in a copy of the context of the write() that left
    data queued: they see what data_received set before it, and what they set is seen by
    each other but not by the reads nor by the caller."""
    var = contextvars.ContextVar("conn")
    wvar = contextvars.ContextVar("writer")
    big = b"x" * (16 * 1024 * 1024)
    server_proto = []

    class Server(asyncio.Protocol):
        def __init__(self):
            self.log = []
            self.lost = loop.create_future()
            server_proto.append(self)

        def seen(self, ev):
            self.log.append((ev, var.get(UNSET), wvar.get(UNSET)))

        def connection_made(self, transport):
            self.transport = transport
            transport.set_write_buffer_limits(high=4096)

        def data_received(self, data):
            self.seen("data_received")
            var.set("A")
            if data == b"go":
                self.transport.write(big)
                var.set("after-write")  # the writer's context is a copy made by write()
                self.transport.close()

        def pause_writing(self):
            self.seen("pause_writing")

        def resume_writing(self):
            self.seen("resume_writing")
            wvar.set("resumed")

        def connection_lost(self, exc):
            self.seen("connection_lost")
            self.lost.set_result(exc)

    async def main():
        server = await loop.create_server(Server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"go")
        n = 0
        while chunk := await reader.read(1024 * 1024):
            n += len(chunk)
            if n < len(big) // 2:
                await asyncio.sleep(0.001)  # a slow reader: the server's queue backs up
        assert n == len(big)
        writer.close()
        assert await server_proto[0].lost is None
        server.close()
        await server.wait_closed()
        return var.get(UNSET), wvar.get(UNSET)

    inside, after = run_isolated(loop, var, main)
    assert inside == ("caller", UNSET)
    assert after == "caller"
    log = server_proto[0].log
    assert log[0] == ("data_received", "caller", UNSET)
    assert log[1] == ("pause_writing", "A", UNSET)  # synchronous, in data_received
    # 3.15: the writer's callbacks run in the connection's context, which saw "after-write"
    writer_sees = "after-write" if CONN_CONTEXT else "A"
    assert ("resume_writing", writer_sees, UNSET) in log
    assert log[-1] == ("connection_lost", writer_sees, "resumed")


def test_datagram_endpoints_have_their_own_context(loop):
    var = contextvars.ContextVar("conn")

    class Endpoint(Recorder, asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            self.got_data("datagram_received", data)
            self.transport.sendto(data, addr)

        def error_received(self, exc):
            self.seen("error_received")

    async def main():
        eps = []
        for _ in range(2):
            _, p = await loop.create_datagram_endpoint(lambda: Endpoint(var),
                                                       local_addr=("127.0.0.1", 0))
            eps.append(p)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            for p, msg in zip(eps * 2, (b"A1", b"B1", b"A2", b"B2")):
                await loop.sock_sendto(s, msg, p.transport.get_extra_info("sockname"))
                assert (await loop.sock_recvfrom(s, 100))[0] == msg
        for p in eps:
            p.transport.close()  # connection_lost: scheduled from this task's context
            await p.lost
        return eps, var.get()

    (eps, inside), after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert [p.name for p in eps] == ["A", "B"]
    for p in eps:
        assert p.log == [("connection_made", "caller"), ("datagram_received", "caller"),
                         ("datagram_received", p.name), ("connection_lost", "caller")]


def test_read_pipes_have_their_own_context(loop):
    var = contextvars.ContextVar("conn")

    class PipeProto(Recorder, asyncio.Protocol):
        def data_received(self, data):
            self.got_data("data_received", data)
            self.got.set_result(None)

    async def main():
        pipes, protos = [], []
        for _ in range(2):
            r, w = os.pipe()
            _, p = await loop.connect_read_pipe(lambda: PipeProto(var), os.fdopen(r, "rb", 0))
            pipes.append(w)
            protos.append(p)
        try:
            for (p, w), msg in zip(list(zip(protos, pipes)) * 2, (b"A1", b"B1", b"A2", b"B2")):
                p.got = loop.create_future()
                os.write(w, msg)
                await p.got
        finally:
            for w in pipes:
                os.close(w)
        for p in protos:
            await p.lost
        return protos, var.get()

    (protos, inside), after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert [p.name for p in protos] == ["A", "B"]
    for p in protos:
        events = [ev for ev, _ in p.log]
        assert p.log[0] == ("connection_made", "caller")
        assert p.log[1:] == expected_reads(events[1:], p.name, conn_context=False), p.log  # pipes: the old rule
        assert events[-2:] == ["eof_received", "connection_lost"]


def test_subprocess_protocols_have_their_own_context(loop):
    var = contextvars.ContextVar("conn")
    code = "import sys; print(sys.argv[1], flush=True); print(sys.stdin.readline().strip(), flush=True)"

    class Proc(Recorder, asyncio.SubprocessProtocol):
        def pipe_data_received(self, fd, data):
            self.got_data(f"pipe_data_received({fd})", data)
            if not self.got.done():
                self.got.set_result(None)

        def pipe_connection_lost(self, fd, exc):
            self.seen(f"pipe_connection_lost({fd})")

        def process_exited(self):
            self.seen("process_exited")

    async def main():
        protos = []
        for name in ("A", "B"):
            p = Proc(var)
            p.got = loop.create_future()
            tr, _ = await loop.subprocess_exec(lambda: p, sys.executable, "-c", code, name)
            protos.append(p)
            await p.got
        for p, msg in zip(protos, (b"A2\n", b"B2\n")):
            p.got = loop.create_future()
            p.transport.get_pipe_transport(0).write(msg)
            await p.got
        for p in protos:
            await p.lost
            p.transport.close()
        return protos, var.get()

    (protos, inside), after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert [p.name for p in protos] == ["A", "B"]
    for p in protos:
        # asyncio's subprocess transport calls the protocol through call_soon() from its pipes'
        # read callbacks: each call has a fresh copy of the pipe's context, so nothing set in
        # one is seen by the next, by the other process or by the caller
        assert p.log[0] == ("connection_made", "caller")
        late = ("process_exited", "connection_lost")
        assert all(v == "caller" for e, v in p.log if e not in late), repr(p.log)
        # process_exited (and the connection_lost it may schedule): asyncio 3.11 calls it from
        # its watcher thread's (empty) context, 3.12+ (pidfd watcher) and goloop from a copy of
        # the spawning task's
        assert all(v in ("caller", UNSET) for e, v in p.log if e in late), repr(p.log)
        assert [e for e, _ in p.log if e in late] == list(late)


def test_tls_app_protocol_has_the_connections_context(loop, tmp_path):
    pytest.importorskip("cryptography")
    from test_tls import make_certs

    certs = make_certs(str(tmp_path))
    var = contextvars.ContextVar("conn")
    protos = []

    def factory():
        protos.append(EchoRecorder(var))
        return protos[-1]

    async def main():
        server = await loop.create_server(factory, "127.0.0.1", 0, ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        conns = [await asyncio.open_connection("127.0.0.1", port, ssl=certs.client_context(),
                                               server_hostname="localhost") for _ in range(2)]
        (ra, wa), (rb, wb) = conns
        for w, r, msg in ((wa, ra, b"A1"), (wb, rb, b"B1"), (wa, ra, b"A2"), (wb, rb, b"B2")):
            w.write(msg)
            assert await r.readexactly(2) == msg
        for r, w in conns:
            w.close()
            await w.wait_closed()
        await asyncio.gather(*(p.lost for p in protos))
        server.close()
        await server.wait_closed()
        return var.get()

    inside, after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert [p.name for p in protos] == ["A", "B"]
    for p in protos:
        events = [ev for ev, _ in p.log]
        # connection_made comes with the handshake's last record: in the read context too
        assert events[:3] == ["connection_made", "data_received", "data_received"], p.log
        assert p.log[:3] == [("connection_made", "caller"), ("data_received", "made"),
                             ("data_received", p.name)]
        assert all(v == p.name for _, v in p.log[3:]), p.log


def test_stream_handlers_have_their_own_context(loop):
    var = contextvars.ContextVar("conn")
    seen = []

    async def handler(reader, writer):
        name = (await reader.readexactly(2))[:1].decode()
        seen.append((name, var.get(UNSET)))
        var.set(name)
        writer.write(b"ok")
        await reader.readexactly(2)
        seen.append((name, var.get(UNSET)))
        writer.close()

    async def main():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ra, wa = await asyncio.open_connection("127.0.0.1", port)
        rb, wb = await asyncio.open_connection("127.0.0.1", port)
        for w, r, msg in ((wa, ra, b"A1"), (wb, rb, b"B1")):
            w.write(msg)
            assert await r.readexactly(2) == b"ok"
        for w, r, msg in ((wa, ra, b"A2"), (wb, rb, b"B2")):
            w.write(msg)
            assert await r.read() == b""
            w.close()
        server.close()
        await server.wait_closed()
        return var.get()

    inside, after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert seen == [("A", "caller"), ("B", "caller"), ("A", "A"), ("B", "B")]


@pytest.mark.parametrize("buffered", [False, True], ids=["Protocol", "BufferedProtocol"])
def test_failing_read_callback_is_reported_in_the_connections_context(loop, buffered):
    """A read callback that raises: the exception handler and connection_lost (scheduled by
    the transport's _fatal_error) run in the connection's read context."""
    var = contextvars.ContextVar("conn")
    seen = []

    class Failing(EchoRecorder if not buffered else BufferedEchoRecorder):
        def data_received(self, data):
            self.got_data("data_received", data)
            raise ZeroDivisionError

        def buffer_updated(self, nbytes):
            self.got_data("buffer_updated", self.buf[:nbytes])
            raise ZeroDivisionError

    protos = []

    def factory():
        protos.append(Failing(var))
        return protos[-1]

    def handler(lp, context):
        seen.append((type(context.get("exception")).__name__, var.get(UNSET)))

    async def main():
        loop.set_exception_handler(handler)
        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for msg in (b"A1", b"B1"):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(msg)
            assert await r.read() == b""
            w.close()
        await asyncio.gather(*(p.lost for p in protos))
        server.close()
        await server.wait_closed()
        return var.get()

    inside, after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert seen == [("ZeroDivisionError", "A"), ("ZeroDivisionError", "B")]
    first_read = "made" if CONN_CONTEXT else "caller"
    for p in protos:
        assert [e for e in p.log if e[0] != "get_buffer"] == [
            ("connection_made", "caller"), (p.log[-2][0], first_read), ("connection_lost", p.name)]


def test_resume_reading_reads_in_a_copy_of_the_resumers_context(loop):
    """Up to 3.14 asyncio's resume_reading registers a new reader handle: the reads that
    follow run in a copy of the context that called resume_reading, not in the one from
    before the pause. 3.15's reader handle is made in the connection's context: the reads
    stay there."""
    var = contextvars.ContextVar("conn")

    class Pausing(EchoRecorder):
        def data_received(self, data):
            super().data_received(data)
            self.transport.pause_reading()
            self.paused.set_result(None)

    async def main():
        protos = []

        def factory():
            protos.append(Pausing(var))
            protos[-1].paused = loop.create_future()
            return protos[-1]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"A1")
        assert await r.readexactly(2) == b"A1"
        p = protos[0]
        await p.paused
        w.write(b"A2")
        var.set("resumer")
        p.paused = loop.create_future()
        p.transport.resume_reading()
        await p.paused
        assert await r.readexactly(2) == b"A2"
        w.close()
        p.transport.close()
        await p.lost
        server.close()
        await server.wait_closed()
        return p.log, var.get()

    (log, inside), after = run_isolated(loop, var, main)
    assert (inside, after) == ("resumer", "caller")
    if CONN_CONTEXT:  # 3.15: the reads stay in the connection's context
        assert log == [("connection_made", "caller"), ("data_received", "made"),
                       ("data_received", "A"), ("connection_lost", "A")]
    else:
        assert log == [("connection_made", "caller"), ("data_received", "caller"),
                       ("data_received", "resumer"), ("connection_lost", "resumer")]


def test_close_after_write_loses_the_connection_in_closes_context(loop):
    """write() then close() in one callback: asyncio's write() sends at once, so close() finds
    the buffer empty and schedules connection_lost in a copy of its own context, which sees
    what was set between the write and the close (goloop sends at the end of the iteration,
    which must not change that)."""
    var = contextvars.ContextVar("conn")

    class Closing(EchoRecorder):
        def data_received(self, data):
            self.got_data("data_received", data)
            self.transport.write(b"bye")
            self.var.set("closing")
            self.transport.close()

    protos = []

    def factory():
        protos.append(Closing(var))
        return protos[-1]

    async def main():
        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"A1")
        assert await r.read() == b"bye"
        w.close()
        await protos[0].lost
        server.close()
        await server.wait_closed()
        return var.get()

    inside, after = run_isolated(loop, var, main)
    assert (inside, after) == ("caller", "caller")
    assert protos[0].log == [("connection_made", "caller"),
                             ("data_received", "made" if CONN_CONTEXT else "caller"),
                             ("connection_lost", "closing")]


def test_resume_writing_that_writes_while_closing(loop):
    """resume_writing (writer's context) writes again after close(): asyncio sends it at once
    and loses the connection in the same writer's context, so connection_lost sees what
    resume_writing set."""
    var = contextvars.ContextVar("conn")
    big = b"x" * (16 * 1024 * 1024)
    protos = []

    class Server(asyncio.Protocol):
        def __init__(self):
            self.log = []
            self.lost = loop.create_future()
            protos.append(self)

        def connection_made(self, transport):
            self.transport = transport
            transport.set_write_buffer_limits(high=4096)

        def data_received(self, data):
            var.set("A")
            self.transport.write(big)
            self.transport.close()

        def pause_writing(self):
            pass

        def resume_writing(self):
            self.log.append(("resume_writing", var.get(UNSET)))
            var.set("resumed")
            self.transport.write(bytearray(b"tail"))

        def connection_lost(self, exc):
            self.log.append(("connection_lost", var.get(UNSET)))
            self.lost.set_result(exc)

    async def main():
        server = await loop.create_server(Server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"go")
        n = 0
        while chunk := await reader.read(1024 * 1024):
            n += len(chunk)
            if n < len(big) // 2:
                await asyncio.sleep(0.001)
        writer.close()
        assert await protos[0].lost is None
        server.close()
        await server.wait_closed()
        return n, var.get()

    (n, inside), after = run_isolated(loop, var, main)
    assert (n, inside, after) == (len(big) + 4, "caller", "caller")
    assert protos[0].log == [("resume_writing", "A"), ("connection_lost", "resumed")]


def test_server_connections_start_from_the_context_the_server_was_made_in(loop):
    """3.15: a Server keeps a copy of the context create_server() ran in, and each connection
    starts from a copy of that, whatever context started serving it. Up to 3.14 the
    listening socket's reader handle, made by start_serving(), copies that one's context."""
    var = contextvars.ContextVar("conn")
    protos = []

    def factory():
        protos.append(EchoRecorder(var))
        return protos[-1]

    async def main():
        var.set("at-create")
        server = await loop.create_server(factory, "127.0.0.1", 0, start_serving=False)
        var.set("at-start")
        await server.start_serving()
        var.set("at-connect")
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"A1")
        assert await r.readexactly(2) == b"A1"
        w.close()
        await protos[0].lost
        server.close()
        await server.wait_closed()
        return var.get()

    inside, after = run_isolated(loop, var, main)
    assert (inside, after) == ("at-connect", "caller")
    start = "at-create" if CONN_CONTEXT else "at-start"
    log = protos[0].log
    assert log[0] == ("connection_made", start)
    assert log[1] == ("data_received", "made" if CONN_CONTEXT else start)
    assert log[-1] == ("connection_lost", "A")


def test_connect_accepted_socket_runs_in_the_callers_context(loop):
    """connect_accepted_socket() (asyncio's _create_connection_transport): 3.15 runs the
    connection in one copy of the caller's context; before, each callback in its own copy."""
    var = contextvars.ContextVar("conn")

    async def main():
        a, b = socket.socketpair()
        with b:
            var.set("connector")
            _, p = await loop.connect_accepted_socket(lambda: EchoRecorder(var), a)
            var.set("later")
            b.sendall(b"A1")
            b.setblocking(False)
            assert await loop.sock_recv(b, 10) == b"A1"
            b.shutdown(socket.SHUT_WR)
            await p.lost
        return p.log, var.get()

    (log, inside), after = run_isolated(loop, var, main)
    assert (inside, after) == ("later", "caller")
    first = "made" if CONN_CONTEXT else "connector"
    assert log == [("connection_made", "connector"), ("data_received", first),
                   ("eof_received", "A"), ("connection_lost", "A")]
