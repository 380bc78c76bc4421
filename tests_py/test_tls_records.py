"""goloop's TLS record path: goloop's own copy of asyncio's SSLProtocol
(pyshim/goloop/_sslproto.py) with its per-record methods ported to C (goloop/binding/loop_sslfast.c).
asyncio's own SSLProtocol and loop are the oracle: the same inputs must give the app
protocol the same events and bytes, on every CPython goloop supports."""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from asyncio import sslproto

import pytest

import goloop
from test_tls import _serve, certs, run  # noqa: F401  (certs is a fixture)

pytestmark = pytest.mark.timeout(60)

# The methods loop_sslfast.c ports (asyncio's names).
PORTED = ("get_buffer", "buffer_updated", "_do_read", "_do_read__copied", "_process_outgoing",
          "_control_app_writing", "_control_ssl_reading", "_write_appdata")


def _goloop_sslproto():
    goloop.new_event_loop().close()  # loads the extension
    from goloop import _sslproto

    return _sslproto


# -- the C path is the one in use, on every CPython ---------------------------------------


def test_c_methods_shadow_the_python_copy():
    mod = _goloop_sslproto()
    from goloop import _goloop

    assert mod.SSLProtocol.__mro__[1:3] == (_goloop.SSLProtocolFast, mod.PySSLProtocol)
    assert mod._SSLProtocolTransport.__mro__[1:3] == (_goloop.SSLTransportFast,
                                                       mod._PySSLProtocolTransport)
    for name in PORTED:
        # the class the loop uses runs the C method, and it replaces a Python one
        assert getattr(mod.SSLProtocol, name) is vars(_goloop.SSLProtocolFast)[name], name
        assert callable(vars(mod.PySSLProtocol).get(name)), name
    assert mod._SSLProtocolTransport.write is vars(_goloop.SSLTransportFast)["write"]
    assert callable(vars(mod._PySSLProtocolTransport)["write"])
    # the Python copy has every method of asyncio's classes (none was lost in the copy)
    for ours, theirs in ((mod.PySSLProtocol, sslproto.SSLProtocol),
                         (mod._PySSLProtocolTransport, sslproto._SSLProtocolTransport)):
        missing = [n for n, v in vars(theirs).items()
                   if callable(v) and not n.startswith("__") and not hasattr(ours, n)]
        assert missing == []


def test_connections_use_the_c_record_path(gloop, certs):
    mod = _goloop_sslproto()
    from goloop import _goloop

    async def main():
        accepted = gloop.create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, tr):
                accepted.set_result(tr)

        server = await gloop.create_server(Server, "127.0.0.1", 0, ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        tr, _ = await gloop.create_connection(asyncio.Protocol, "127.0.0.1", port,
                                              ssl=certs.client_context(),
                                              server_hostname="localhost")
        str_ = await accepted
        try:
            for t in (tr, str_):
                assert type(t) is mod._SSLProtocolTransport
                assert isinstance(t, asyncio.Transport)
                assert isinstance(t, _goloop.SSLTransportFast)
                assert type(t._ssl_protocol) is mod.SSLProtocol
                assert isinstance(t._ssl_protocol, _goloop.SSLProtocolFast)
                assert isinstance(t._ssl_protocol, asyncio.BufferedProtocol)
        finally:
            tr.close()
            str_.close()
            server.close()
            await server.wait_closed()

    run(gloop, main())


def test_start_tls_uses_the_c_record_path(gloop, certs):
    mod = _goloop_sslproto()

    async def main():
        upgraded = gloop.create_future()

        async def handler(reader, writer):
            await writer.start_tls(certs.server_context())
            upgraded.set_result(writer.transport)
            writer.write((await reader.readexactly(5)).upper())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await writer.start_tls(certs.client_context(), server_hostname="localhost")
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"HELLO"
        for t in (writer.transport, await upgraded):
            assert type(t) is mod._SSLProtocolTransport
            assert type(t._ssl_protocol) is mod.SSLProtocol
        writer.close()
        server.close()
        await server.wait_closed()

    run(gloop, main())


# -- the protocol driven record by record, byte by byte -----------------------------------


class _FakeTransport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.out = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data):
        self.out += data

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def abort(self):
        self.closed = True

    def _force_close(self, exc):
        self.closed = True

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def get_write_buffer_size(self):
        return 0


class _App(asyncio.Protocol):
    def __init__(self, reply=None):
        self.events = []
        self.data = bytearray()
        self.reply = reply
        self.transport = None

    def connection_made(self, tr):
        self.transport = tr
        self.events.append("made")

    def data_received(self, data):
        assert isinstance(data, bytes)
        self.events.append(("data", len(data)))
        self.data += data
        if self.reply is not None:
            self.transport.write(self.reply(data))

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append(("lost", type(exc).__name__ if exc else None))


def _drive(loop, proto_cls, certs, *, chunk):
    """A server-side SSLProtocol over a fake transport, a client ssl.SSLObject in memory;
    ciphertext reaches the protocol `chunk` bytes per buffer_updated (None: all at once).
    Returns what the app protocol saw and what the client read back."""
    app = _App(reply=lambda d: d.upper())
    proto = proto_cls(loop, app, certs.server_context(), None, server_side=True)
    transport = _FakeTransport()
    proto.connection_made(transport)
    cin, cout = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = certs.client_context().wrap_bio(cin, cout, server_hostname="localhost")

    def to_server():
        data = cout.read()
        step = chunk or max(1, len(data))
        for i in range(0, len(data), step):
            piece = data[i:i + step]
            buf = proto.get_buffer(-1)
            buf[:len(piece)] = piece
            proto.buffer_updated(len(piece))

    def to_client():
        cin.write(bytes(transport.out))
        transport.out.clear()

    for _ in range(20):
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            to_server()
            to_client()
    to_server()  # the client's Finished
    to_client()  # session tickets
    got = bytearray()
    for message in (b"a", b"hello " * 1000, b"x" * 40000, b"three"):
        client.write(message)
        if message == b"x" * 40000:
            client.write(b"-and-more")  # two writes, several records in one delivery
        to_server()
        to_client()
        while True:
            try:
                got += client.read(1 << 20)
            except ssl.SSLWantReadError:
                break
    client.write(b"last words")  # then close_notify and the socket's EOF, in one go
    try:
        client.unwrap()
    except ssl.SSLWantReadError:
        pass
    to_server()
    proto.eof_received()  # the transport's EOF: asyncio's FLUSHING state reads the rest
    loop.run_until_complete(asyncio.sleep(0.01))
    return app, bytes(got), proto


@pytest.mark.parametrize("chunk", [1, 7, 1000, None])
@pytest.mark.parametrize("cls", ["SSLProtocol", "PySSLProtocol"])
def test_records_split_anywhere_give_asyncios_events(gloop, certs, chunk, cls):
    """goloop's class (C methods) and its Python copy against asyncio's own class."""
    mod = _goloop_sslproto()
    ours, got, proto = _drive(gloop, getattr(mod, cls), certs, chunk=chunk)
    theirs, their_got, _ = _drive(gloop, sslproto.SSLProtocol, certs, chunk=chunk)
    sent = b"a" + b"hello " * 1000 + b"x" * 40000 + b"-and-more" + b"three"
    assert bytes(ours.data) == sent + b"last words"
    assert got == sent.upper()
    assert ours.events == theirs.events
    assert got == their_got
    assert "eof" in ours.events  # close_notify reached eof_received
    assert proto._state != mod.SSLProtocolState.WRAPPED
    assert proto._state.value != "WRAPPED"


class _FlowApp(_App):
    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")


class _ClientSide:
    """A client SSLProtocol of proto_cls (its app a _FlowApp) over a fake transport, its
    server an ssl.SSLObject in memory, after the handshake: to_client() delivers what the
    server wrote, to_server() what the protocol wrote; the server's plaintext collects in
    .plain."""

    def __init__(self, loop, proto_cls, certs):
        self.app = _FlowApp()
        self.proto = proto_cls(loop, self.app, certs.client_context(), None, server_hostname="localhost")
        self.transport = _FakeTransport()
        self.proto.connection_made(self.transport)
        self.sin, self.sout = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.server = certs.server_context().wrap_bio(self.sin, self.sout, server_side=True)
        self.plain = bytearray()
        for _ in range(20):
            self.to_server()
            try:
                self.server.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.to_client()
        self.to_client()
        self.to_server()
        loop.run_until_complete(asyncio.sleep(0))
        self.tr = self.proto._app_transport

    def to_client(self):
        data = self.sout.read()
        if data:
            buf = self.proto.get_buffer(len(data))
            buf[:len(data)] = data
            self.proto.buffer_updated(len(data))

    def to_server(self):
        self.sin.write(bytes(self.transport.out))
        self.transport.out.clear()
        while True:
            try:
                chunk = self.server.read(1 << 20)
            except ssl.SSLWantReadError:
                break
            if not chunk:
                break
            self.plain.extend(chunk)


def _drive_writes(loop, proto_cls, certs):
    """The write side of a client SSLProtocol over a fake transport: app writes of many
    sizes under tight write limits, the socket transport pausing and resuming the protocol
    (pause_writing/resume_writing), writelines, reads paused by the app, and the server
    reading it all. Returns a trace of (event, app events, write buffer size, ciphertext
    sent so far) and the plaintext the server decrypted."""
    side = _ClientSide(loop, proto_cls, certs)
    app, proto, transport, server, tr = side.app, side.proto, side.transport, side.server, side.tr
    to_client, to_server = side.to_client, side.to_server
    trace = []
    tr.set_write_buffer_limits(high=5000, low=1000)

    def step(name):
        trace.append((name, list(app.events), tr.get_write_buffer_size(), len(transport.out)))

    step("ready")
    for size in (1, 100, 4000, 6000, 20000):
        tr.write(b"w" * size)
        step(("write", size))
    proto.pause_writing()  # the socket transport's buffer is full
    for size in (10, 3000, 7000):
        tr.write(bytearray(b"p" * size))
        step(("paused write", size))
    tr.writelines([b"l1", memoryview(b"--l2--")[2:4], bytearray(b"l3")])
    step("writelines")
    proto.resume_writing()
    step("resumed")
    to_server()
    tr.pause_reading()
    server.write(b"r" * 30000)
    to_client()
    step("read while paused")
    tr.resume_reading()
    loop.run_until_complete(asyncio.sleep(0.01))
    step("read resumed")
    tr.write(b"tail")
    to_server()
    step("tail")
    return trace, bytes(side.plain), app


def test_write_path_gives_asyncios_flow_control(gloop, certs):
    mod = _goloop_sslproto()
    theirs, their_plain, their_app = _drive_writes(gloop, sslproto.SSLProtocol, certs)
    for cls in (mod.SSLProtocol, mod.PySSLProtocol):
        ours, plain, app = _drive_writes(gloop, cls, certs)
        assert ours == theirs, cls
        assert plain == their_plain, cls
        assert app.events == their_app.events
        assert bytes(app.data) == bytes(their_app.data) == b"r" * 30000
    assert plain == (b"w" * 30101 + b"p" * 10010 + b"l1l2l3" + b"tail")
    assert "pause" in app.events and "resume" in app.events


# -- behaviour through real connections, against asyncio's loop --------------------------


def _first_accepted(loop, server_factory):
    """server_factory, wrapped, and a Future of the first protocol it makes."""
    accepted = loop.create_future()

    def factory():
        p = server_factory()
        if not accepted.done():
            accepted.set_result(p)
        return p

    return factory, accepted


async def _pair(loop, certs, server_factory, client_factory, **client_kw):
    factory, accepted = _first_accepted(loop, server_factory)
    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=certs.server_context())
    port = server.sockets[0].getsockname()[1]
    ctx = client_kw.pop("ssl", None) or certs.client_context()
    tr, pr = await loop.create_connection(client_factory, "127.0.0.1", port, ssl=ctx,
                                          server_hostname="localhost", **client_kw)
    return server, tr, pr, await accepted


@contextlib.asynccontextmanager
async def _connected(pair):
    """`async with _connected(_pair(...)) as (tr, client_protocol, server_protocol)`: the
    connection of a pair function, closed with its server at the end."""
    server, tr, cp, sp = await pair
    try:
        yield tr, cp, sp
    finally:
        tr.close()
        server.close()
        await server.wait_closed()


class _Echo(asyncio.Protocol):
    def connection_made(self, tr):
        self.tr = tr

    def data_received(self, data):
        self.tr.write(data)


class _Collect(asyncio.Protocol):
    def __init__(self, loop, want=None):
        self.data = bytearray()
        self.want = want
        self.done = loop.create_future()
        self.lost = loop.create_future()
        self.made = loop.create_future()
        self.transport = None
        self.paused = self.resumed = 0

    def connection_made(self, tr):
        self.transport = tr
        self.made.set_result(None)

    def data_received(self, data):
        self.data += data
        if self.want is not None and len(self.data) >= self.want and not self.done.done():
            self.done.set_result(None)

    def pause_writing(self):
        self.paused += 1

    def resume_writing(self):
        self.resumed += 1

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def test_write_accepts_bytes_likes_and_rejects_others_like_asyncio(loop, certs):
    async def main():
        async with _connected(_pair(loop, certs, lambda: _Collect(loop, want=12),
                                    lambda: _Collect(loop))) as (tr, _, sp):
            with pytest.raises(TypeError) as err:
                tr.write("text")
            assert str(err.value) == "data: expecting a bytes-like instance, got str"
            with pytest.raises(TypeError, match="got int"):
                tr.write(5)
            tr.write(b"")  # nothing
            tr.write(b"abcd")
            tr.write(bytearray(b"efgh"))
            tr.write(memoryview(b"..ijkl..")[2:6])
            await sp.done
            assert bytes(sp.data) == b"abcdefghijkl"

    run(loop, main())


def test_custom_sslobject_class_is_honoured(loop, certs):
    calls = {"read": 0, "write": 0}

    class Counting(ssl.SSLObject):
        def read(self, *args, **kw):
            calls["read"] += 1
            return super().read(*args, **kw)

        def write(self, data):
            calls["write"] += 1
            return super().write(data)

    ctx = certs.client_context()
    ctx.sslobject_class = Counting

    async def main():
        async with _connected(_pair(loop, certs, _Echo, lambda: _Collect(loop, want=30000),
                                    ssl=ctx)) as (tr, pr, _):
            tr.write(b"z" * 30000)
            await pr.done
            assert bytes(pr.data) == b"z" * 30000

    run(loop, main())
    assert calls["write"] >= 1 and calls["read"] >= 1


def test_error_in_data_received_is_a_fatal_ssl_error(loop, certs):
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    class Boom(asyncio.Protocol):
        def __init__(self):
            self.lost = loop.create_future()

        def data_received(self, data):
            raise ZeroDivisionError("boom")

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        async with _connected(_pair(loop, certs, Boom, lambda: _Collect(loop))) as (tr, _, sp):
            tr.write(b"hello")
            exc = await sp.lost
            assert isinstance(exc, ZeroDivisionError)

    run(loop, main())
    assert [c["message"] for c in contexts] == ["Fatal error on SSL protocol"]
    assert isinstance(contexts[0]["exception"], ZeroDivisionError)


def test_flow_control_both_ways(loop, certs):
    size = 6 * 1024 * 1024

    async def main():
        async with _connected(_pair(loop, certs, lambda: _Collect(loop),
                                    lambda: _Collect(loop, want=size))) as (tr, cp, sp):
            await sp.made
            tr.pause_reading()  # the client app stops reading: the server's writes back up
            sp.transport.set_write_buffer_limits(high=64 * 1024)
            chunk = bytes(range(256)) * 256
            for _ in range(size // len(chunk)):
                sp.transport.write(chunk)
            # more than the buffers below take at once: the app was told to pause
            assert sp.paused == 1 and sp.resumed == 0
            assert sp.transport.get_write_buffer_size() > 64 * 1024
            await asyncio.sleep(0.2)
            assert len(cp.data) == 0  # reading is paused on the client's app transport
            tr.resume_reading()
            await cp.done
            for _ in range(100):
                if sp.resumed:
                    break
                await asyncio.sleep(0.01)
            assert sp.paused == sp.resumed >= 1
            assert sp.transport.get_write_buffer_size() == 0
            assert bytes(cp.data) == chunk * (size // len(chunk))

    run(loop, main())


def test_writes_after_close_are_dropped_like_asyncio(loop, certs):
    async def main():
        async with _connected(_pair(loop, certs, lambda: _Collect(loop, want=3),
                                    lambda: _Collect(loop))) as (tr, cp, sp):
            tr.write(b"abc")
            await sp.done
            tr.close()
            tr.write(b"after")  # asyncio drops it (and counts it)
            assert tr.is_closing()
            await cp.lost
            await asyncio.sleep(0.05)
            assert bytes(sp.data) == b"abc"

    run(loop, main())


def test_closed_tls_connections_are_collected(gloop, certs):
    """The protocol's C slots take part in garbage collection: the protocol, app transport
    and app protocol reference each other, and the cycle must still be collected."""
    import gc
    import weakref

    refs = []

    async def main():
        server, tr, cp, sp = await _pair(gloop, certs, lambda: _Collect(gloop, want=2),
                                         lambda: _Collect(gloop))
        await sp.made
        tr.write(b"hi")
        await sp.done
        proto = tr._ssl_protocol
        # the GC sees what the slots hold (tp_traverse)
        held = gc.get_referents(proto)
        for value in (proto._app_protocol, proto._incoming, proto._outgoing, proto._sslobj,
                      proto._transport, proto._write_backlog, proto._ssl_buffer_view):
            assert any(value is h for h in held)
        refs.extend(weakref.ref(o) for o in (proto, sp.transport._ssl_protocol, tr, cp))
        del proto, held
        tr.close()
        await cp.lost
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)

    run(gloop, main())
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


def test_short_ssl_writes_and_write_errors_like_asyncio(loop, certs):
    """SSLObject.write() accepting less than it was given leaves the rest queued (asyncio's
    _write_backlog), and an error from it is asyncio's fatal SSL error: both through a
    context's sslobject_class, so they reach goloop's C write path."""
    class Halves(ssl.SSLObject):
        def write(self, data):
            data = memoryview(data)
            if bytes(data[:4]) == b"boom":
                raise ValueError("refused")
            return super().write(data[:max(1, len(data) // 2)])

    ctx = certs.client_context()
    ctx.sslobject_class = Halves
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))
    payload = bytes(range(256)) * 400  # 100 KiB in shrinking pieces

    async def main():
        async with _connected(_pair(loop, certs, _Echo,
                                    lambda: _Collect(loop, want=len(payload)), ssl=ctx)) as (tr, pr, _):
            tr.write(payload[:50_000])
            tr.write(payload[50_000:])  # queued behind the first one's rest
            await pr.done
            assert bytes(pr.data) == payload
            assert tr.get_write_buffer_size() == 0
            tr.write(b"boom and more")
            exc = await pr.lost
            assert isinstance(exc, ValueError) and str(exc) == "refused"

    run(loop, main())
    assert [c["message"] for c in contexts] == ["Fatal error on SSL protocol"]


# -- close with pending writes: no protocol call after connection_lost (a fixed bug) --------


def test_write_from_resume_writing_while_closing_like_asyncio(loop):
    """A protocol that writes from resume_writing() while its transport is closing: the
    write must return before connection_lost() is called (asyncio's write() never calls the
    protocol back). goloop's write() past the high-water mark flushes at once; when that
    drained the queue of a closing transport it used to call connection_lost() from inside
    the write, and a TLS protocol then called its app's resume_writing() on None."""
    import socket

    events = []

    class P(asyncio.Protocol):
        def __init__(self):
            self.lost = loop.create_future()
            self.in_write = False

        def connection_made(self, tr):
            self.tr = tr
            tr.set_write_buffer_limits(high=1000, low=0)

        def pause_writing(self):
            events.append("pause")

        def resume_writing(self):
            events.append("resume")
            self.in_write = True
            self.tr.write(b"r" * 2000)  # past the high-water mark
            self.in_write = False
            events.append("wrote")

        def connection_lost(self, exc):
            events.append(("lost", self.in_write, exc))
            self.lost.set_result(None)

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        got = bytearray()
        try:
            tr, pr = await loop.connect_accepted_socket(P, a)
            sent = 0
            while "pause" not in events:  # b reads nothing yet: the kernel buffers fill up
                tr.write(b"w" * 65536)
                sent += 65536
                await asyncio.sleep(0)
            tr.close()
            while not pr.lost.done():  # now b reads all, once per loop iteration
                try:
                    while chunk := b.recv(1 << 20):
                        got.extend(chunk)
                except BlockingIOError:
                    pass
                await asyncio.sleep(0)
            try:
                while chunk := b.recv(1 << 20):
                    got.extend(chunk)
            except BlockingIOError:
                pass
            return sent, got
        finally:
            b.close()

    sent, got = run(loop, main())
    assert events == ["pause", "resume", "wrote", ("lost", False, None)]
    assert len(got) == sent + 2000


def test_tls_peer_shutdown_while_client_writes_like_asyncio(loop, certs):
    """The TLS peer sends data then close_notify (and more bytes after it) while the client
    app writes as fast as flow control lets it: the client sees eof_received then
    connection_lost(None), its exception handler nothing (goloop once called the SSL
    protocol's resume_writing after connection_lost, reported as "protocol.resume_writing()
    failed"). The race is in the kernel's buffers, so several rounds."""
    import socket
    import threading

    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))

    def server(lsock, errors):
        try:
            sock, _ = lsock.accept()
            with sock:
                inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
                so = certs.server_context().wrap_bio(inc, out, server_side=True)
                while True:
                    try:
                        so.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        if out.pending:
                            sock.sendall(out.read())
                        inc.write(sock.recv(65536))
                so.write(b"hello" * 1000)
                sock.sendall(out.read())
                try:
                    while True:
                        so.read(65536)
                except ssl.SSLWantReadError:
                    pass
                with pytest.raises(ssl.SSLWantReadError):
                    so.unwrap()  # close_notify, without waiting for the client's
                sock.sendall(out.read())
                while True:  # then the client's trailing data, up to its close_notify
                    try:
                        so.read(65536)
                    except ssl.SSLWantReadError:
                        data = sock.recv(65536)
                        if not data:
                            break
                        inc.write(data)
                    except ssl.SSLZeroReturnError:
                        break
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    async def one_round():
        events = []
        done = loop.create_future()

        class Client(asyncio.Protocol):
            paused = False

            def connection_made(self, tr):
                self.tr = tr
                tr.set_write_buffer_limits(high=65536)
                loop.call_soon(self.pump)

            def pump(self):
                while not self.paused and not self.tr.is_closing():
                    self.tr.write(b"x" * 65536)

            def pause_writing(self):
                self.paused = True

            def resume_writing(self):
                events.append("resume")
                self.paused = False
                loop.call_soon(self.pump)

            def eof_received(self):
                events.append("eof")

            def connection_lost(self, exc):
                events.append(("lost", exc))
                done.set_result(None)

        lsock = socket.create_server(("127.0.0.1", 0))
        errors = []
        th = threading.Thread(target=server, args=(lsock, errors))
        th.start()
        try:
            await loop.create_connection(Client, *lsock.getsockname(),
                                         ssl=certs.client_context(),
                                         server_hostname="localhost")
            await done
            await asyncio.sleep(0.01)
        finally:
            await loop.run_in_executor(None, th.join)
            lsock.close()
        assert errors == []
        return [e for e in events if e != "resume"]

    async def main():
        return [await one_round() for _ in range(6)]

    for events in run(loop, main(), timeout=60):
        assert events == ["eof", ("lost", None)]
    assert contexts == []


def test_custom_sslobject_read_returning_a_bytearray_like_asyncio(loop, certs):
    """asyncio joins whatever a context's sslobject_class read() returns (b''.join); the C
    read path did only for bytes, and raised TypeError for anything else."""
    class ByteArrays(ssl.SSLObject):
        def read(self, *args, **kw):
            return bytearray(super().read(*args, **kw))

    ctx = certs.client_context()
    ctx.sslobject_class = ByteArrays
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))
    payload = bytes(range(256)) * 200  # several records

    async def main():
        async with _connected(_pair(loop, certs, _Echo,
                                    lambda: _Collect(loop, want=len(payload)), ssl=ctx)) as (tr, pr, _):
            tr.write(payload)
            await pr.done
            assert bytes(pr.data) == payload

    run(loop, main())
    assert contexts == []


# -- writes larger than a record: SSL_write record by record -----------------------------
#
# goloop's C write path feeds more than 16 KiB of plaintext to SSL_write one record's worth
# at a time, reading the outgoing BIO after each, and hands the records to the transport
# together. These check that nothing is lost, doubled or reordered, whatever the sizes
# around the record boundary, the flow control and the transport.

MIB = 1024 * 1024
REC = 16384  # the most plaintext a TLS record carries


def _pieces(seed):
    """Writes around the record size, a little over 1 MiB first, small ones between; random
    bytes (a periodic payload would hide records swapped at a multiple of its period); bytes,
    bytearray and memoryview in turn."""
    import random

    rnd = random.Random(seed)
    sizes = [MIB + 1, 3, REC, 1, REC + 1, REC - 1, 2 * REC, 7, 100_007, 1, 5 * REC - 1,
             MIB // 2 + 13, 5, 3 * REC + 2]
    kinds = (bytes, bytearray, memoryview)
    return [kinds[i % 3](rnd.randbytes(n)) for i, n in enumerate(sizes)]


def _small_buffers_pair(loop, certs, server_factory, client_factory):
    """A TLS connection over sockets with small kernel buffers, so that a reader that reads
    slowly pauses the writer soon."""
    import socket

    async def main():
        factory, accepted = _first_accepted(loop, server_factory)
        lsock = socket.socket()
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # accepted ones inherit it
        lsock.bind(("127.0.0.1", 0))
        lsock.listen()
        server = await loop.create_server(factory, sock=lsock, ssl=certs.server_context())
        csock = socket.socket()
        csock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
        csock.setblocking(False)
        await loop.sock_connect(csock, lsock.getsockname())
        tr, pr = await loop.create_connection(client_factory, sock=csock,
                                              ssl=certs.client_context(),
                                              server_hostname="localhost")
        return server, tr, pr, await accepted

    return main()


def test_large_writes_arrive_whole_and_in_order_under_flow_control(loop, certs):
    pieces = _pieces(10) * 2
    want = b"".join(pieces)

    class Writer(asyncio.Protocol):
        """Writes while it may; after pause_writing one more write (asyncio lets it), then
        waits for resume_writing."""

        def __init__(self):
            self.todo = list(pieces)
            self.paused = self.resumed = 0
            self.is_paused = False

        def connection_made(self, tr):
            self.tr = tr
            tr.set_write_buffer_limits(high=64 * 1024, low=16 * 1024)
            loop.call_soon(self.pump)

        def pump(self):
            while self.todo and not self.is_paused:
                self.tr.write(self.todo.pop(0))

        def write_while_paused(self):
            if self.todo and self.is_paused:
                self.tr.write(self.todo.pop(0))

        def pause_writing(self):
            self.is_paused = True
            self.paused += 1
            loop.call_soon(self.write_while_paused)

        def resume_writing(self):
            self.is_paused = False
            self.resumed += 1
            loop.call_soon(self.pump)

    class SlowReader(_Collect):
        """Pauses reading after each delivery, for a moment, until it has all of want."""

        def data_received(self, data):
            super().data_received(data)
            if not self.done.done():
                self.transport.pause_reading()
                loop.call_later(0.002, self.resume)

        def resume(self):
            if not self.transport.is_closing():
                self.transport.resume_reading()

    async def main():
        pair = _small_buffers_pair(loop, certs, lambda: SlowReader(loop, want=len(want)), Writer)
        async with _connected(pair) as (tr, writer, reader):
            await reader.done
            await asyncio.sleep(0.01)
            return writer, bytes(reader.data)

    writer, got = run(loop, main(), timeout=50)
    assert len(got) == len(want)
    assert got == want
    assert writer.todo == []
    assert writer.paused >= 1 and writer.resumed >= 1  # flow control took part


def test_a_large_write_is_one_transport_write_like_asyncio(loop, certs):
    """asyncio's _process_outgoing hands all the ciphertext of one app write to the socket
    transport in one write(); goloop's record-by-record SSL_write still does, through any
    transport (here one whose write() is a Python wrapper: it gets the records joined)."""
    import random

    data = random.Random(3).randbytes(5 * REC + 7)
    writes = []

    async def main():
        async with _connected(_pair(loop, certs, lambda: _Collect(loop, want=len(data) + 2),
                                    lambda: _Collect(loop))) as (tr, _, sp):
            raw = tr._ssl_protocol._transport
            real_write = raw.write

            def write(b):
                writes.append(len(b))
                return real_write(b)

            raw.write = write
            tr.write(data)
            tr.write(b"ok")
            await sp.done
            return bytes(sp.data), list(writes)

    got, writes = run(loop, main())
    assert got == data + b"ok"
    assert len(writes) == 2
    assert 5 * REC + 7 < writes[0] < 5 * REC + 7 + 6 * 100  # six records' headers and tags


def test_ssl_want_read_in_the_middle_of_a_large_write(gloop, certs):
    """SSLWantReadError from SSL_write part way through (as during a TLS 1.2 renegotiation):
    what was not written waits in the backlog and goes at the next read or write, before
    anything written later; the peer gets every byte once, in order, as with asyncio's
    class."""
    import random

    mod = _goloop_sslproto()
    big = random.Random(4).randbytes(6 * REC + 5)
    big2 = random.Random(5).randbytes(3 * REC)

    def drive(proto_cls):
        side = _ClientSide(gloop, proto_cls, certs)
        proto, server, tr = side.proto, side.server, side.tr
        to_client, to_server = side.to_client, side.to_server
        sslobj = proto._sslobj
        inner = sslobj._sslobj
        calls = []
        written = [0]
        raised = []

        class Flaky:
            """The _ssl object, but SSLWantReadError (once) for the write that would take
            the third record's plaintext."""

            def write(self, data):
                calls.append(len(data))
                if written[0] <= 2 * REC < written[0] + len(data) and not raised:
                    raised.append(True)
                    raise ssl.SSLWantReadError("want read")
                n = inner.write(data)
                written[0] += n
                return n

            def __getattr__(self, name):
                return getattr(inner, name)

        sslobj._sslobj = Flaky()
        proto._sslobj = sslobj  # goloop's C class takes the _ssl object when it is set
        sizes = []
        tr.write(big)
        sizes.append(tr.get_write_buffer_size())
        to_server()
        server.write(b"ping")  # the read that follows writes the rest
        to_client()
        sizes.append(tr.get_write_buffer_size())
        to_server()
        written[0] = 0
        raised.clear()
        tr.write(big2)
        sizes.append(tr.get_write_buffer_size())
        tr.write(b"after")  # a write behind the rest writes the rest first
        sizes.append(tr.get_write_buffer_size())
        to_server()
        sslobj._sslobj = inner
        return bytes(side.plain), sizes, calls, bytes(side.app.data)

    for cls in (sslproto.SSLProtocol, mod.PySSLProtocol, mod.SSLProtocol):
        plain, sizes, calls, got = drive(cls)
        assert got == b"ping", cls
        assert len(plain) == len(big) + len(big2) + 5, cls
        assert plain == big + big2 + b"after", cls
        if cls is mod.SSLProtocol:  # two records went out before the error
            assert calls == [REC, REC, REC, len(big) - 2 * REC,
                             REC, REC, REC, REC, 5], cls
            assert sizes == [len(big) - 2 * REC, 0, REC, 0]
        else:  # asyncio's one SSL_write: all of it waited
            assert calls == [len(big), len(big), len(big2), len(big2), 5], cls
            assert sizes == [len(big), 0, len(big2), 0]
