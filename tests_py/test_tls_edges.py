"""TLS edge cases where goloop follows asyncio 3.14 or uvloop rather than the asyncio of the
running version (asyncio 3.11-3.13's own loop fails each of them; see the README's
Compatibility section). The uvloop cases run on goloop and, when it is installed, on uvloop
(the reference); the 3.14 cases on goloop only (asyncio's loop passes them from 3.14 on)."""
from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import threading
import weakref

import pytest
from loophelpers import close_loop
from test_tls import certs  # noqa: F401  (fixture)

import goloop

WAIT = 20  # seconds a test waits for an event that must come (a hang fails the test)


@pytest.fixture(params=["goloop", "uvloop"])
def ref_loop(request):
    """goloop's loop, and uvloop's (the reference for these cases) when installed."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        lp = uvloop.new_event_loop()
    else:
        lp = goloop.new_event_loop()
    try:
        yield lp
    finally:
        close_loop(lp)
        asyncio.set_event_loop(None)


def _server_thread(target):
    """A listening socket on 127.0.0.1 whose first connection target(sock) handles in a
    thread; returns (address, thread)."""
    ls = socket.create_server(("127.0.0.1", 0))
    ls.settimeout(WAIT)

    def run():
        try:
            conn, _ = ls.accept()
        finally:
            ls.close()
        conn.settimeout(WAIT)
        try:
            target(conn)
        finally:
            conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return ls.getsockname(), t


class _Recorder(asyncio.Protocol):
    def __init__(self, loop, pause=False):
        self.lost = loop.create_future()
        self.pause = pause
        self.received = 0
        self.eof = False

    def connection_made(self, transport):
        self.transport = transport
        if self.pause:
            transport.pause_reading()

    def data_received(self, data):
        self.received += len(data)

    def eof_received(self):
        self.eof = True

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def _read_to_close_notify(ssock):
    """The server side's end of a clean TLS shutdown: read until the client's close_notify,
    then answer with ours."""
    try:
        while ssock.recv(65536):
            pass
    except ssl.SSLZeroReturnError:
        pass
    ssock.unwrap()


def _until_lost(lp, proto_cls, addr, certs, release):  # noqa: F811
    """Connects a proto_cls(lp) over TLS to addr and runs lp until connection_lost; sets
    release (the server thread's event) whatever happens. Returns (protocol, exception)."""
    async def client():
        tr, pr = await lp.create_connection(
            lambda: proto_cls(lp), *addr, ssl=certs.client_context(),
            server_hostname="localhost", ssl_shutdown_timeout=WAIT)
        try:
            return pr, await asyncio.wait_for(pr.lost, WAIT)
        finally:
            release.set()

    return lp.run_until_complete(client())


# -- asyncio 3.14's fixes ---------------------------------------------------------------------


def test_failed_start_tls_leaves_no_reference_cycle(gloop, certs):  # noqa: F811
    # gh-159049 (asyncio 3.14): the waiter held the handshake's exception, whose traceback
    # held start_tls's frame, which held the waiter: the plain transport lived until a GC.
    def server(sock):
        try:
            certs.server_context().wrap_socket(sock, server_side=True)
        except OSError:
            pass

    addr, t = _server_thread(server)
    refs = []

    async def client():
        tr, proto = await gloop.create_connection(asyncio.Protocol, *addr)
        refs.append(weakref.ref(tr))
        with pytest.raises(ssl.SSLCertVerificationError):
            await gloop.start_tls(tr, proto, certs.client_context(ca=certs.other_ca_cert),
                                  server_hostname="localhost")

    gc.collect()
    gc.disable()
    try:
        gloop.run_until_complete(asyncio.wait_for(client(), WAIT))
        assert [r() for r in refs] == [None]
    finally:
        gc.enable()
    t.join(WAIT)


@pytest.mark.parametrize("close_first", [True, False], ids=["close-then-eof", "eof-then-close"])
def test_shutdown_timeout_applies_after_eof_from_a_peer_that_does_not_read(gloop, certs,  # noqa: F811
                                                                          close_first):
    # asyncio 3.14: ssl_shutdown_timeout also bounds the flush of the socket's write buffer
    # once the TLS shutdown is done (the peer sent EOF, before or after close()), when the
    # peer does not read: connection_lost(TimeoutError) instead of a connection kept forever.
    filled, done = threading.Event(), threading.Event()

    def server(sock):
        ssock = certs.server_context().wrap_socket(sock, server_side=True)
        filled.wait(WAIT)
        ssock.shutdown(socket.SHUT_WR)  # EOF, and never a read
        done.wait(WAIT)
        ssock.close()

    class Proto(_Recorder):
        paused = False

        def pause_writing(self):
            self.paused = True

    addr, t = _server_thread(server)

    async def client():
        tr, pr = await gloop.create_connection(
            lambda: Proto(gloop), *addr, ssl=certs.client_context(),
            server_hostname="localhost", ssl_shutdown_timeout=0.2)
        try:
            for _ in range(64):
                if pr.paused:
                    break
                tr.write(bytes(1 << 20))
                await asyncio.sleep(0)
            else:
                pytest.fail("the transport never paused writing")
            if close_first:
                tr.close()
            filled.set()
            return await asyncio.wait_for(pr.lost, WAIT)
        finally:
            filled.set()
            done.set()
            tr.abort()

    exc = gloop.run_until_complete(client())
    assert isinstance(exc, TimeoutError)
    t.join(WAIT)


def test_handshake_completes_for_the_peer_while_the_app_pauses_reading(gloop, certs):  # noqa: F811
    # The client's last handshake message (TLS 1.3: its Finished) leaves when the handshake
    # completes, also when the app pauses reading in connection_made(): asyncio (and uvloop)
    # sent it from the first read, which a paused app skips, so the server's handshake
    # waited for the client to resume reading (or to write).
    handshaken = threading.Event()

    def server(sock):
        ssock = certs.server_context().wrap_socket(sock, server_side=True)
        handshaken.set()
        try:
            ssock.recv(1)  # until the client aborts
        except OSError:
            pass

    addr, t = _server_thread(server)

    async def client():
        tr, pr = await gloop.create_connection(
            lambda: _Recorder(gloop, pause=True), *addr, ssl=certs.client_context(),
            server_hostname="localhost")
        try:
            return await gloop.run_in_executor(None, handshaken.wait, WAIT)
        finally:
            tr.abort()

    assert gloop.run_until_complete(client()) is True
    t.join(WAIT)


# -- where uvloop is the reference ------------------------------------------------------------


@pytest.mark.parametrize("size", [1000, 2_000_000], ids=["small", "over-the-read-high-water"])
def test_close_while_reading_is_paused_completes_the_shutdown(ref_loop, certs, size):  # noqa: F811
    # The app paused reading after the first data, the peer's trailing data waits unread,
    # the app closes: the shutdown completes with the peer's close_notify (eof_received,
    # connection_lost(None)); the unread data is dropped. asyncio's unwrap() met the unread
    # data (SSLError APPLICATION_DATA_AFTER_CLOSE_NOTIFY), and with more than the read
    # high-water mark unread the socket was never read again (the shutdown timed out).
    result = {}
    paused = threading.Event()

    def server(sock):
        ssock = certs.server_context().wrap_socket(sock, server_side=True)
        ssock.sendall(b"x" * 100)
        paused.wait(WAIT)
        ssock.sendall(b"y" * size)
        _read_to_close_notify(ssock)
        result["clean"] = True

    class Proto(_Recorder):
        def data_received(self, data):
            if not self.received:
                self.transport.pause_reading()
                paused.set()
                # the peer's trailing data arrives while reading is paused
                asyncio.get_running_loop().call_later(0.2, self.transport.close)
            super().data_received(data)

    addr, t = _server_thread(server)

    pr, exc = _until_lost(ref_loop, Proto, addr, certs, paused)
    t.join(WAIT)
    assert exc is None
    assert pr.eof  # the peer's close_notify
    assert pr.received == 100  # what came while paused is dropped with the close
    assert result == {"clean": True}


def test_application_data_after_our_close_notify_is_discarded(ref_loop, certs):  # noqa: F811
    # bpo-39951: the peer still sends when our close_notify reaches it, then answers with its
    # own: that data is discarded and the shutdown is clean (asyncio: SSLError
    # APPLICATION_DATA_AFTER_CLOSE_NOTIFY into connection_lost).
    result = {}
    first = threading.Event()

    def server(sock):
        ssock = certs.server_context().wrap_socket(sock, server_side=True)
        ssock.sendall(b"y" * 1000)
        first.wait(WAIT)  # the client has closed: its close_notify is on its way
        for _ in range(20):
            ssock.sendall(b"z" * 1000)
        _read_to_close_notify(ssock)
        result["clean"] = True

    class Proto(_Recorder):
        def data_received(self, data):
            super().data_received(data)
            if not self.transport.is_closing():
                self.transport.close()
                first.set()

    addr, t = _server_thread(server)

    pr, exc = _until_lost(ref_loop, Proto, addr, certs, first)
    t.join(WAIT)
    assert exc is None
    assert 0 < pr.received <= 1000  # nothing of what came after the close
    assert result == {"clean": True}


@pytest.mark.parametrize("buffer", ["sized-by-hint", "bytearray-64k"])
@pytest.mark.parametrize("how", ["start_tls", "create_connection"])
def test_buffered_protocol_gets_the_data(ref_loop, certs, how, buffer):  # noqa: F811
    # sized-by-hint: get_buffer() returns a bytearray of the size it is hinted (the hint is
    # "the recommended minimum size"). asyncio hinted the encrypted bytes waiting, 0 right
    # after the handshake: the empty buffer's read of 0 bytes was taken for a close_notify
    # (eof_received, then the shutdown), and the upgraded connection never got the peer's
    # data. uvloop (and goloop) hint what is waiting, decrypted or not, plus 256.
    # bytearray-64k: one bytearray larger than a TLS record: asyncio read each record after
    # the first of a read into a copy of the buffer's tail (data lost, zeros delivered).
    payload = b"p" * 20_000
    done = threading.Event()

    def server(sock):
        if how == "start_tls":
            assert sock.recv(5) == b"hello"
        ssock = certs.server_context().wrap_socket(sock, server_side=True)
        ssock.sendall(payload)
        done.wait(WAIT)

    class Proto(asyncio.BufferedProtocol):
        def __init__(self):
            self.hints, self.got, self.eof = [], bytearray(), False
            self.all = ref_loop.create_future()

        def connection_made(self, transport):
            self.transport = transport

        def get_buffer(self, sizehint):
            self.hints.append(sizehint)
            self.buf = bytearray(sizehint if buffer == "sized-by-hint" else 65536)
            return self.buf

        def buffer_updated(self, nbytes):
            self.got += self.buf[:nbytes]
            if len(self.got) >= len(payload) and not self.all.done():
                self.all.set_result(bytes(self.got))

        def eof_received(self):
            self.eof = not self.all.done()  # an EOF before all the data

        def connection_lost(self, exc):
            if not self.all.done():
                self.all.set_exception(ConnectionError(f"lost before the data: {exc!r}"))

    addr, t = _server_thread(server)

    async def client():
        if how == "start_tls":
            tr, pr = await ref_loop.create_connection(Proto, *addr)
            tr.write(b"hello")
            tls = await ref_loop.start_tls(tr, pr, certs.client_context(),
                                           server_hostname="localhost")
        else:
            tls, pr = await ref_loop.create_connection(
                Proto, *addr, ssl=certs.client_context(), server_hostname="localhost")
        try:
            return pr, await asyncio.wait_for(pr.all, WAIT)
        finally:
            done.set()
            tls.close()

    pr, got = ref_loop.run_until_complete(client())
    t.join(WAIT)
    assert got == payload
    assert not pr.eof
    assert min(pr.hints) > 0


def _handshake_then_data_in_one_send(port, ctx, first, out):
    """A client over a raw socket (ssl.MemoryBIO) that asks for STARTTLS, then sends its last
    handshake message and its first record in one send (as TLS 1.3 clients often do); puts
    what comes back (or the error) in out."""
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, outg, server_hostname="localhost")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
            s.sendall(b"STARTTLS\n")
            assert s.recv(3) == b"OK\n"
            while True:
                try:
                    obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if outg.pending:
                        s.sendall(outg.read())
                    data = s.recv(65536)
                    if not data:
                        raise ConnectionError("EOF during the handshake")
                    inc.write(data)
            obj.write(first)
            s.sendall(outg.read())  # Finished and the first record: one segment
            got = b""
            while len(got) < len(first):
                try:
                    got += obj.read(65536)
                except ssl.SSLWantReadError:
                    data = s.recv(65536)
                    if not data:
                        break
                    inc.write(data)
            out.append(got)
    except Exception as exc:  # noqa: BLE001  (reported to the test)
        out.append(exc)


def test_server_start_tls_answers_data_that_came_with_the_handshake(ref_loop, certs):  # noqa: F811
    # A STARTTLS echo server: its protocol swaps in the TLS transport when start_tls()
    # returns. asyncio handed it the data that came with the client's Finished before
    # start_tls() returned, so the echo went out through the plain transport: the client
    # read clear text as a TLS record (SSLError WRONG_VERSION_NUMBER). uvloop reads that
    # data one callback later, after start_tls()'s caller has resumed.
    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.plain = transport, True

        def data_received(self, data):
            if self.plain and data == b"STARTTLS\n":
                self.plain = False
                self.transport.write(b"OK\n")
                self.upgrade = asyncio.ensure_future(self.start_tls())
            else:
                self.transport.write(data)

        async def start_tls(self):
            self.transport = await ref_loop.start_tls(
                self.transport, self, certs.server_context(), server_side=True)

    async def main():
        server = await ref_loop.create_server(Echo, "127.0.0.1", 0)
        try:
            out = []
            await ref_loop.run_in_executor(
                None, _handshake_then_data_in_one_send, server.sockets[0].getsockname()[1],
                certs.client_context(), b"first record", out)
            return out
        finally:
            server.close()

    assert ref_loop.run_until_complete(asyncio.wait_for(main(), WAIT)) == [b"first record"]


def test_tcp_eof_without_close_notify_while_paused_delivers_all_then_eof(certs):  # noqa: F811
    # With reading paused, the peer sends data, then a TCP EOF with no close_notify. goloop
    # keeps asyncio's behaviour here, on purpose (README, Compatibility): when the app resumes
    # reading it gets every byte, then eof_received, and the connection ends. uvloop (not a
    # reference for this case) closes at once and drops what the app had not read; asyncio's
    # own loop does not get this far (paused in connection_made, its client never sends the
    # handshake's last message: the server's handshake times out, the case above).
    size = 2_000_000
    sent, done = threading.Event(), threading.Event()

    def server(sock):
        ssock = certs.server_context().wrap_socket(sock, server_side=True)
        ssock.sendall(b"z" * size)
        ssock.shutdown(socket.SHUT_WR)  # SSLSocket.shutdown: a TCP FIN, no close_notify
        sent.set()
        done.wait(WAIT)

    lp = goloop.new_event_loop()
    addr, t = _server_thread(server)

    async def client():
        tr, pr = await lp.create_connection(
            lambda: _Recorder(lp, pause=True), *addr, ssl=certs.client_context(),
            server_hostname="localhost")
        try:
            await lp.run_in_executor(None, sent.wait, WAIT)
            await asyncio.sleep(0.2)  # the EOF reaches the paused connection
            assert not pr.lost.done()
            tr.resume_reading()
            await asyncio.wait_for(pr.lost, WAIT)
            return pr
        finally:
            done.set()
            tr.abort()

    try:
        pr = lp.run_until_complete(client())
    finally:
        close_loop(lp)
    t.join(WAIT)
    assert pr.received == size
    assert pr.eof
