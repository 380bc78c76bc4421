"""Socket-level loop APIs on asyncio's loop (the oracle) and goloop's: sock_* operations,
bad input to create_server/create_connection/sock_*, address in use, Unix socket paths,
getaddrinfo/getnameinfo, connect_accepted_socket, create_connection(sock=...),
local_addr and happy_eyeballs_delay.

Error cases are compared with asyncio's outcome (exception type and message) on a fresh
asyncio loop: on the asyncio param that is a self-check, on goloop the real comparison.
"""
from __future__ import annotations

import asyncio
import errno
import os
import re
import socket

import pytest

from nethelpers import free_port, asyncio_outcome, no_fd_leak, outcome, run, unix_dir  # noqa: F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_fd_leak")]


def _norm(o):
    return (o[0], re.sub(r"fd=\d+", "fd=N", o[1]) if isinstance(o[1], str) else o[1])


def check_same_as_asyncio(loop, factory, expected_type):
    got = _norm(outcome(loop, factory))
    want = _norm(asyncio_outcome(factory))
    assert want[0] is expected_type, want
    assert got == want


# ---------------------------------------------------------------------------------------
# sock_* with blocking, closed, wrong-typed sockets
# ---------------------------------------------------------------------------------------

SOCK_OPS = {
    "sock_recv": lambda lp, s: lp.sock_recv(s, 10),
    "sock_recv_into": lambda lp, s: lp.sock_recv_into(s, bytearray(10)),
    "sock_sendall": lambda lp, s: lp.sock_sendall(s, b"data"),
    "sock_connect": lambda lp, s: lp.sock_connect(s, ("127.0.0.1", 1)),
    "sock_accept": lambda lp, s: lp.sock_accept(s),
    "sock_recvfrom": lambda lp, s: lp.sock_recvfrom(s, 10),
    "sock_sendto": lambda lp, s: lp.sock_sendto(s, b"x", ("127.0.0.1", 1)),
}


@pytest.mark.parametrize("op", sorted(SOCK_OPS))
def test_sock_ops_reject_blocking_sockets(loop, op):
    async def f(lp):
        s = socket.socket()
        try:
            return await SOCK_OPS[op](lp, s)
        finally:
            s.close()

    if op in ("sock_recvfrom", "sock_sendto") and not hasattr(loop, op):
        pytest.skip("not in this Python")
    # asyncio 3.11 checks this in debug mode only
    loop.set_debug(True)
    got = outcome(loop, f)
    assert got == (ValueError, "the socket must be non-blocking")

    async def f_debug(lp):
        lp.set_debug(True)
        return await f(lp)
    assert got == asyncio_outcome(f_debug)


@pytest.mark.parametrize("op", ["sock_recv", "sock_recv_into", "sock_sendall", "sock_connect",
                                "sock_accept"])
def test_sock_ops_on_closed_socket(loop, op):
    async def f(lp):
        s = socket.socket()
        s.setblocking(False)
        s.close()
        return await SOCK_OPS[op](lp, s)

    got = outcome(loop, f)
    assert issubclass(got[0], (OSError, ValueError)), got
    assert got == asyncio_outcome(f)


BAD_SOCK_ARGS = {
    "recv_size_str": lambda lp, s: lp.sock_recv(s, "10"),
    "recv_into_bytes": lambda lp, s: lp.sock_recv_into(s, b"immutable"),
    "recv_into_str": lambda lp, s: lp.sock_recv_into(s, "text"),
    "sendall_str": lambda lp, s: lp.sock_sendall(s, "text"),
    "sendall_int": lambda lp, s: lp.sock_sendall(s, 5),
    "connect_bad_addr": lambda lp, s: lp.sock_connect(s, "not-a-tuple"),
    "recv_not_socket": lambda lp, s: lp.sock_recv(object(), 10),
    "sendall_not_socket": lambda lp, s: lp.sock_sendall(None, b"x"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOCK_ARGS))
def test_sock_ops_bad_arguments(loop, case):
    async def f(lp):
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        try:
            b.send(b"pending")  # so that recv would succeed
            return await asyncio.wait_for(BAD_SOCK_ARGS[case](lp, a), 5)
        finally:
            a.close()
            b.close()

    got = outcome(loop, f)
    want = asyncio_outcome(f)
    assert want[0] is not str and want[0] != "ok", want
    assert got == want


def test_sock_ops_on_transport_socket(loop):
    """sock_* refuse a socket owned by a transport (asyncio's _ensure_fd_no_transport)."""
    async def f(lp):
        srv = await lp.create_server(asyncio.Protocol, "127.0.0.1", 0)
        tr, _ = await lp.create_connection(asyncio.Protocol, *srv.sockets[0].getsockname())
        try:
            raw = socket.socket(fileno=os.dup(tr.get_extra_info("socket").fileno()))
            raw.setblocking(False)
            try:
                # same fd number as the transport's: build one on exactly that fd
                fd = tr.get_extra_info("socket").fileno()
                results = []
                for op in ("sock_recv", "sock_recv_into"):
                    probe = socket.socket(fileno=fd)
                    try:
                        await SOCK_OPS[op](lp, probe)
                    except RuntimeError as e:
                        results.append(str(e).split(" is used by transport")[0])
                    finally:
                        probe.detach()
                return results
            finally:
                raw.close()
        finally:
            tr.close()
            await asyncio.sleep(0.01)
            srv.close()
            await srv.wait_closed()

    got = run(loop, f(loop))
    assert len(got) == 2 and all(r.startswith("File descriptor") for r in got), got


async def _accepted_pair(lp):
    """A non-blocking listening socket, a client socket connected to it with sock_connect
    and the (conn, address) sock_accept gave for it."""
    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.setblocking(False)
    c = socket.socket()
    c.setblocking(False)
    try:
        accepted, _ = await asyncio.gather(lp.sock_accept(lsock),
                                           lp.sock_connect(c, lsock.getsockname()))
    except BaseException:
        c.close()
        lsock.close()
        raise
    return lsock, c, accepted


def test_sock_basic_ops(loop):
    async def f(lp):
        lsock, c, (conn, peer) = await _accepted_pair(lp)
        try:
            assert conn.gettimeout() == 0  # asyncio hands out non-blocking sockets
            assert peer == c.getsockname()
            await lp.sock_sendall(c, b"")  # nothing to send
            await lp.sock_sendall(c, memoryview(b"hello world"))
            assert await lp.sock_recv(conn, 5) == b"hello"
            buf = bytearray(100)
            n = await lp.sock_recv_into(conn, buf)
            assert buf[:n] == b" world"
            # a pending recv, cancelled, then a new one
            t = asyncio.ensure_future(lp.sock_recv(conn, 10))
            await asyncio.sleep(0.01)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            await lp.sock_sendall(c, b"again")
            assert await asyncio.wait_for(lp.sock_recv(conn, 10), 5) == b"again"
            c.shutdown(socket.SHUT_WR)
            assert await lp.sock_recv(conn, 10) == b""
            conn.close()
            return True
        finally:
            c.close()
            lsock.close()

    assert run(loop, f(loop))


# ---------------------------------------------------------------------------------------
# bad input to create_server / create_connection
# ---------------------------------------------------------------------------------------

def _dgram():
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


async def _cc_sock_and_host(lp):
    s = socket.socket()
    try:
        return await lp.create_connection(asyncio.Protocol, "127.0.0.1", 1, sock=s)
    finally:
        s.close()


async def _cc_dgram(lp):
    s = _dgram()
    try:
        return await lp.create_connection(asyncio.Protocol, sock=s)
    finally:
        s.close()


async def _cs_dgram(lp):
    s = _dgram()
    try:
        return await lp.create_server(asyncio.Protocol, sock=s)
    finally:
        s.close()


async def _cs_sock_and_host(lp):
    s = socket.socket()
    try:
        return await lp.create_server(asyncio.Protocol, "127.0.0.1", 0, sock=s)
    finally:
        s.close()


async def _cus_inet_sock(lp):
    s = socket.socket()
    try:
        return await lp.create_unix_server(asyncio.Protocol, sock=s)
    finally:
        s.close()


async def _cuc_inet_sock(lp):
    s = socket.socket()
    try:
        return await lp.create_unix_connection(asyncio.Protocol, sock=s)
    finally:
        s.close()


BAD_CREATE = {
    "cc_no_host_no_sock": (lambda lp: lp.create_connection(asyncio.Protocol), ValueError),
    "cc_sock_and_host": (_cc_sock_and_host, ValueError),
    "cc_dgram_sock": (_cc_dgram, ValueError),
    "cc_handshake_timeout_no_ssl": (lambda lp: lp.create_connection(
        asyncio.Protocol, "127.0.0.1", 1, ssl_handshake_timeout=1), ValueError),
    "cc_server_hostname_no_ssl": (lambda lp: lp.create_connection(
        asyncio.Protocol, "127.0.0.1", 1, server_hostname="x"), ValueError),
    "cc_port_str": (lambda lp: lp.create_connection(
        asyncio.Protocol, "127.0.0.1", "no-such-service"), socket.gaierror),
    "cc_host_int": (lambda lp: lp.create_connection(asyncio.Protocol, 12, 80), TypeError),
    "cs_dgram_sock": (_cs_dgram, ValueError),
    "cs_sock_and_host": (_cs_sock_and_host, ValueError),
    "cs_no_host_no_sock_ok_but_ssl_timeout": (lambda lp: lp.create_server(
        asyncio.Protocol, "127.0.0.1", 0, ssl_handshake_timeout=1), ValueError),
    "cs_port_str": (lambda lp: lp.create_server(
        asyncio.Protocol, "127.0.0.1", "no-such-service"), socket.gaierror),
    "cs_host_int": (lambda lp: lp.create_server(asyncio.Protocol, 12, 0), TypeError),
    "cus_no_path_no_sock": (lambda lp: lp.create_unix_server(asyncio.Protocol), ValueError),
    "cus_inet_sock": (_cus_inet_sock, ValueError),
    "cus_path_int": (lambda lp: lp.create_unix_server(asyncio.Protocol, 5), TypeError),
    "cuc_no_path_no_sock": (lambda lp: lp.create_unix_connection(asyncio.Protocol), ValueError),
    "cuc_inet_sock": (_cuc_inet_sock, ValueError),
    "cuc_path_int": (lambda lp: lp.create_unix_connection(asyncio.Protocol, 5), TypeError),
    "cas_dgram": (None, ValueError),  # filled below
}


async def _cas_dgram(lp):
    s = _dgram()
    try:
        return await lp.connect_accepted_socket(asyncio.Protocol, s)
    finally:
        s.close()

BAD_CREATE["cas_dgram"] = (_cas_dgram, ValueError)


@pytest.mark.parametrize("case", sorted(BAD_CREATE))
def test_create_bad_input(loop, case):
    factory, exc_type = BAD_CREATE[case]
    check_same_as_asyncio(loop, factory, exc_type)


def test_address_in_use(loop):
    async def main():
        lp = asyncio.get_running_loop()
        srv = await lp.create_server(asyncio.Protocol, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            with pytest.raises(OSError) as ei:
                await lp.create_server(asyncio.Protocol, "127.0.0.1", port)
            assert ei.value.errno == errno.EADDRINUSE
            lsock = socket.create_server(("127.0.0.1", 0))
            try:
                with pytest.raises(OSError) as ei2:
                    await lp.create_server(asyncio.Protocol, "127.0.0.1",
                                           lsock.getsockname()[1])
                assert ei2.value.errno == errno.EADDRINUSE
            finally:
                lsock.close()
            return str(ei.value).replace(str(port), "PORT")
        finally:
            srv.close()
            await srv.wait_closed()

    msg = run(loop, main())
    assert "address already in use" in msg.lower()


def test_unix_server_on_existing_paths(loop, unix_dir):
    async def main():
        lp = asyncio.get_running_loop()
        # a regular file: left alone, EADDRINUSE
        path = unix_dir.sock("file")
        with open(path, "w") as f:
            f.write("keep me")
        with pytest.raises(OSError) as ei:
            await lp.create_unix_server(asyncio.Protocol, path)
        assert ei.value.errno == errno.EADDRINUSE
        with open(path) as f:
            assert f.read() == "keep me"
        # a directory
        d = unix_dir.sock("dir")
        os.mkdir(d)
        with pytest.raises(OSError) as ei2:
            await lp.create_unix_server(asyncio.Protocol, d)
        assert ei2.value.errno == errno.EADDRINUSE
        # a stale socket file is replaced
        stale = unix_dir.sock("stale")
        s = socket.socket(socket.AF_UNIX)
        s.bind(stale)
        s.close()
        srv = await lp.create_unix_server(asyncio.Protocol, stale)
        assert srv.sockets[0].getsockname() == stale
        tr, _ = await lp.create_unix_connection(asyncio.Protocol, stale)
        tr.close()
        await asyncio.sleep(0.01)
        srv.close()
        await srv.wait_closed()
        # a missing directory
        with pytest.raises(FileNotFoundError):
            await lp.create_unix_server(asyncio.Protocol, unix_dir.sock("no/such/dir/s"))
        return str(ei.value).replace(unix_dir.path, "DIR")

    got = run(loop, main())
    assert got == "[Errno 98] Address 'DIR/file' is already in use"


# ---------------------------------------------------------------------------------------
# getaddrinfo / getnameinfo
# ---------------------------------------------------------------------------------------

GAI_CASES = [
    (("127.0.0.1", 80), {}),
    (("127.0.0.1", 80), {"type": socket.SOCK_STREAM}),
    (("localhost", 8080), {"family": socket.AF_INET}),
    (("localhost", "http"), {}),
    (("::1", 443), {"family": socket.AF_INET6, "proto": socket.IPPROTO_TCP}),
    ((None, 0), {"flags": socket.AI_PASSIVE}),
    ((None, 5000), {"flags": socket.AI_PASSIVE, "type": socket.SOCK_DGRAM}),
    ((b"127.0.0.1", b"80"), {}),
    (("127.0.0.1", None), {"flags": socket.AI_NUMERICHOST}),
]


@pytest.mark.parametrize("args,kw", GAI_CASES, ids=[str(i) for i in range(len(GAI_CASES))])
def test_getaddrinfo_matches_socket_module(loop, args, kw):
    got = run(loop, loop.getaddrinfo(*args, **kw))
    assert got == socket.getaddrinfo(*args, **kw)


@pytest.mark.parametrize("args,kw", [
    (("127.0.0.1", "no-such-service-xyz"), {}),
    (("not-an-ip", 80), {"flags": socket.AI_NUMERICHOST}),
], ids=["bad-service", "numerichost"])
def test_getaddrinfo_errors_match_socket_module(loop, args, kw):
    with pytest.raises(socket.gaierror) as mine:
        run(loop, loop.getaddrinfo(*args, **kw))
    with pytest.raises(socket.gaierror) as ref:
        socket.getaddrinfo(*args, **kw)
    assert mine.value.args == ref.value.args


@pytest.mark.parametrize("sockaddr,flags", [
    (("127.0.0.1", 80), 0),
    (("127.0.0.1", 80), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV),
    (("::1", 443, 0, 0), socket.NI_NUMERICHOST),
    (("127.0.0.1", 22), socket.NI_NUMERICSERV),
])
def test_getnameinfo_matches_socket_module(loop, sockaddr, flags):
    got = run(loop, loop.getnameinfo(sockaddr, flags))
    assert got == socket.getnameinfo(sockaddr, flags)


def test_getnameinfo_errors(loop):
    for bad in ((1, 2, 3, 4, 5), "x"):
        with pytest.raises(Exception) as mine:
            run(loop, loop.getnameinfo(bad, 0))
        with pytest.raises(Exception) as ref:
            socket.getnameinfo(bad, 0)
        assert type(mine.value) is type(ref.value) and str(mine.value) == str(ref.value)


# ---------------------------------------------------------------------------------------
# connect_accepted_socket, create_connection(sock=...), local_addr, happy eyeballs
# ---------------------------------------------------------------------------------------

class Collect(asyncio.Protocol):
    def __init__(self):
        loop = asyncio.get_running_loop()
        self.data = bytearray()
        self.eof = loop.create_future()
        self.lost = loop.create_future()

    def connection_made(self, tr):
        self.tr = tr

    def data_received(self, data):
        self.data += data

    def eof_received(self):
        self.eof.set_result(None)
        return True

    def connection_lost(self, exc):
        self.lost.set_result(exc)


@pytest.mark.parametrize("family", ["tcp", "unix"])
@pytest.mark.parametrize("blocking", [False, True])
def test_connect_accepted_socket(loop, family, blocking):
    async def main():
        lp = asyncio.get_running_loop()
        if family == "tcp":
            lsock = socket.create_server(("127.0.0.1", 0))
            client = socket.create_connection(lsock.getsockname())
        else:
            a, client = socket.socketpair()
            lsock = None
        try:
            if lsock is not None:
                a, _ = lsock.accept()
            a.setblocking(blocking)  # asyncio makes it non-blocking itself
            tr, pr = await lp.connect_accepted_socket(Collect, a)
            assert isinstance(tr, asyncio.Transport)
            assert tr.get_extra_info("socket").fileno() == a.fileno()
            assert a.gettimeout() == 0
            client.sendall(b"from-client")
            client.shutdown(socket.SHUT_WR)
            await pr.eof
            assert pr.data == b"from-client"
            tr.write(b"from-server" * 1000)
            tr.close()
            assert await pr.lost is None
            got = b""
            client.settimeout(5)
            while chunk := client.recv(65536):
                got += chunk
            assert got == b"from-server" * 1000
            assert a.fileno() == -1  # the transport closed it
        finally:
            client.close()
            if lsock is not None:
                lsock.close()

    run(loop, main())


def test_connect_accepted_socket_streams(loop):
    """asyncio.start_server-like handling of an accepted socket through streams."""
    async def main():
        lp = asyncio.get_running_loop()
        a, b = socket.socketpair()
        try:
            reader = asyncio.StreamReader()
            rp = asyncio.StreamReaderProtocol(reader)
            tr, _ = await lp.connect_accepted_socket(lambda: rp, a)
            b.sendall(b"line one\nline two\n")
            assert await reader.readline() == b"line one\n"
            assert await reader.readline() == b"line two\n"
            tr.close()
            await asyncio.sleep(0.01)
        finally:
            b.close()

    run(loop, main())


def test_create_connection_with_sock(loop):
    async def main():
        lp = asyncio.get_running_loop()
        lsock = socket.create_server(("127.0.0.1", 0))
        s = socket.create_connection(lsock.getsockname())
        try:
            conn, _ = lsock.accept()
            tr, pr = await lp.create_connection(Collect, sock=s)
            assert tr.get_extra_info("peername") == lsock.getsockname()
            assert tr.get_extra_info("socket").fileno() == s.fileno()
            conn.sendall(b"hello")
            conn.shutdown(socket.SHUT_WR)
            await pr.eof
            assert pr.data == b"hello"
            tr.write(b"back")
            tr.close()
            await pr.lost
            conn.settimeout(5)
            assert conn.recv(100) == b"back"
            conn.close()
        finally:
            s.close()
            lsock.close()

    run(loop, main())


def test_create_unix_connection_with_sock(loop, unix_dir):
    async def main():
        lp = asyncio.get_running_loop()
        a, b = socket.socketpair()
        try:
            tr, pr = await lp.create_unix_connection(Collect, sock=a)
            b.sendall(b"unix")
            b.shutdown(socket.SHUT_WR)
            await pr.eof
            assert pr.data == b"unix"
            tr.close()
            await pr.lost
        finally:
            b.close()

    run(loop, main())


def test_create_connection_local_addr(loop):
    async def main():
        lp = asyncio.get_running_loop()
        srv = await lp.create_server(asyncio.Protocol, "127.0.0.1", 0)
        addr = srv.sockets[0].getsockname()
        try:
            for _ in range(5):  # a free port may be taken in between: retry
                port = free_port()
                try:
                    tr, pr = await lp.create_connection(Collect, *addr,
                                                        local_addr=("127.0.0.1", port))
                    break
                except OSError as e:
                    if e.errno != errno.EADDRINUSE:
                        raise
            assert tr.get_extra_info("sockname") == ("127.0.0.1", port)
            tr.close()
            await pr.lost
            # local_addr already in use by a listener
            with pytest.raises(OSError) as ei:
                await lp.create_connection(Collect, *addr, local_addr=addr)
            return ei.value.errno
        finally:
            srv.close()
            await srv.wait_closed()

    assert run(loop, main()) == errno.EADDRINUSE


@pytest.mark.parametrize("interleave", [None, 1])
def test_happy_eyeballs_single_address(loop, interleave):
    async def main():
        lp = asyncio.get_running_loop()
        srv = await lp.create_server(asyncio.Protocol, "127.0.0.1", 0)
        addr = srv.sockets[0].getsockname()
        try:
            tr, pr = await lp.create_connection(Collect, *addr, happy_eyeballs_delay=0.25,
                                                interleave=interleave)
            assert tr.get_extra_info("peername") == addr
            tr.close()
            await pr.lost
            with pytest.raises(OSError) as ei:
                await lp.create_connection(Collect, "127.0.0.1", free_port(),
                                           happy_eyeballs_delay=0.25, interleave=interleave)
            return type(ei.value)
        finally:
            srv.close()
            await srv.wait_closed()

    assert run(loop, main()) is ConnectionRefusedError


def test_happy_eyeballs_localhost(loop):
    """'localhost' may resolve to ::1 and 127.0.0.1; the server listens on both."""
    async def main():
        lp = asyncio.get_running_loop()
        srv = await lp.create_server(asyncio.Protocol, "localhost", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            tr, pr = await lp.create_connection(Collect, "localhost", port,
                                                happy_eyeballs_delay=0.1)
            tr.close()
            await pr.lost
            return True
        except OSError as e:  # some socket families refused: not this test's subject
            if e.errno == errno.EADDRINUSE:
                pytest.skip("port taken for the other family")
            raise
        finally:
            srv.close()
            await srv.wait_closed()

    assert run(loop, main())


@pytest.mark.timeout(30)
def test_cancelled_sock_recv_does_not_disturb_the_next(loop):
    # A cancelled sock_recv must not unregister a later sock_recv on the same socket (the
    # cancelled task only resumes after the new wait is registered).
    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        lp = asyncio.get_running_loop()
        try:
            t = asyncio.ensure_future(lp.sock_recv(a, 10))
            await asyncio.sleep(0)
            t.cancel()
            second = asyncio.ensure_future(lp.sock_recv(a, 10))
            await asyncio.sleep(0)
            with pytest.raises(asyncio.CancelledError):
                await t
            await asyncio.sleep(0.01)
            b.send(b"hello")
            return await asyncio.wait_for(second, 5)
        finally:
            a.close()
            b.close()

    assert loop.run_until_complete(main()) == b"hello"


@pytest.mark.timeout(30)
def test_sock_recv_many_waits_leave_no_registration(gloop):
    # every wait's one-shot registration ends with it
    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        lp = asyncio.get_running_loop()
        try:
            for i in range(200):
                fut = asyncio.ensure_future(lp.sock_recv(a, 10))
                await asyncio.sleep(0)
                b.send(b"x")
                assert await fut == b"x"
            assert lp._fd_key(a.fileno()) is None
        finally:
            a.close()
            b.close()

    gloop.run_until_complete(main())


def test_sock_recv_paths_match_asyncio(loop):
    """goloop reads a plain non-blocking socket with one recv(2) that does not raise when
    nothing is there; sockets of other kinds go through their own recv()/recv_into(), as
    with asyncio. Every variant must give asyncio's results."""
    calls = []

    class Counting(socket.socket):
        def recv(self, n, *a):
            calls.append("recv")
            return super().recv(n, *a)

        def recv_into(self, buf, *a):
            calls.append("recv_into")
            return super().recv_into(buf, *a)

    async def f(lp):
        lsock, c, (conn, _) = await _accepted_pair(lp)
        try:
            assert await lp.sock_recv(conn, 0) == b""  # at once, nothing read
            # data arriving while the recv waits; then a large n (past goloop's 256 KiB buffer)
            t = asyncio.ensure_future(lp.sock_recv(conn, 300_000))
            await asyncio.sleep(0.01)
            big = bytes(range(256)) * 600
            await lp.sock_sendall(c, big)
            got = await asyncio.wait_for(t, 5)
            while len(got) < len(big):
                got += await asyncio.wait_for(lp.sock_recv(conn, 300_000), 5)
            assert got == big
            # recv_into: a memoryview slice, and an empty buffer (0 at once)
            await lp.sock_sendall(c, b"0123456789")
            buf = bytearray(20)
            n = await asyncio.wait_for(lp.sock_recv_into(conn, memoryview(buf)[5:]), 5)
            assert bytes(buf[5:5 + n]) == b"0123456789"[:n]
            assert await lp.sock_recv_into(conn, bytearray()) == 0
            rest = 10 - n
            while rest:
                rest -= len(await asyncio.wait_for(lp.sock_recv(conn, rest), 5))
            # a socket subclass: its own recv()/recv_into() are called
            sub = Counting(fileno=os.dup(conn.fileno()))
            sub.setblocking(False)
            try:
                await lp.sock_sendall(c, b"sub")
                assert await asyncio.wait_for(lp.sock_recv(sub, 10), 5) == b"sub"
                await lp.sock_sendall(c, b"SUB")
                buf = bytearray(10)
                assert await asyncio.wait_for(lp.sock_recv_into(sub, buf), 5) == 3
                assert bytes(buf[:3]) == b"SUB"
            finally:
                sub.close()
            assert calls[0] == "recv" and "recv_into" in calls
            # a reset peer: the error recv(2) gives, as socket.recv raises it
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(lp.sock_recv(conn, 10), 5)
            conn.close()
            return True
        finally:
            c.close()
            lsock.close()

    assert run(loop, f(loop))


def test_sock_recv_small_and_large_reads_in_any_order(loop):
    """goloop copies small reads out of one buffer and receives large ones straight into
    their bytes, choosing by the size of the previous read; whatever the order of sizes and
    of n, every read must give the bytes sent, in order, at most n at a time, and a
    datagram socket must keep its boundaries."""
    async def read_exactly(lp, sock, total, n):
        out = b""
        while len(out) < total:
            chunk = await asyncio.wait_for(lp.sock_recv(sock, n), 5)
            assert 0 < len(chunk) <= n
            out += chunk
        return out

    async def f(lp):
        a, b = socket.socketpair()
        d1, d2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (a, b, d1, d2):
            s.setblocking(False)
        try:
            # (message size, n): small after small, large (direct), a short read into a
            # large n, n past the direct limit after a large read, tiny n after large reads
            plan = [(100, 65536), (40_000, 65536), (50_000, 65536), (7, 65536),
                    (60_000, 200_000), (30_000, 100_000), (5_000, 3), (20_000, 65536),
                    (1, 65536)]
            for i, (size, n) in enumerate(plan):
                msg = bytes((i * 7 + j) % 251 for j in range(size))
                await lp.sock_sendall(b, msg)
                assert await read_exactly(lp, a, size, n) == msg, (size, n)
            # datagrams after large stream reads: one datagram a read, truncated to n
            for size, n in [(30_000, 65536), (10, 65536), (40_000, 100_000), (9, 4)]:
                msg = os.urandom(size)
                d2.send(msg)
                got = await asyncio.wait_for(lp.sock_recv(d1, n), 5)
                assert got == msg[:n], (size, n)
            return True
        finally:
            for s in (a, b, d1, d2):
                s.close()

    assert run(loop, f(loop))


def test_sock_recv_never_blocks_the_loop_on_a_descriptor_made_blocking(gloop):
    """goloop's first recv(2) holds the GIL; MSG_DONTWAIT keeps it from blocking even when
    the descriptor was made blocking behind the socket object's back (gettimeout() == 0)."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    os.set_blocking(a.fileno(), True)
    try:
        async def main():
            ticks = []
            t = asyncio.ensure_future(gloop.sock_recv(a, 10))
            for i in range(3):
                await asyncio.sleep(0.01)
                ticks.append(i)  # the loop keeps running while the recv waits
            b.send(b"late")
            return ticks, await asyncio.wait_for(t, 5)

        assert run(gloop, main()) == ([0, 1, 2], b"late")
    finally:
        a.close()
        b.close()


def test_sock_sendall_partial_first_send(loop):
    # more than the socket buffers take at once: the first send goes in part (made in
    # goloop's sock_sendall), the rest waits for the socket, and every byte arrives once, in
    # order, on both loops

    async def f(lp):
        lsock, c, (conn, _) = await _accepted_pair(lp)
        try:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            want = bytes(range(256)) * 6000  # 1.5 MB
            data = bytearray(want)
            send = asyncio.ensure_future(lp.sock_sendall(c, data))
            got = bytearray()
            while len(got) < len(want):
                got += await asyncio.wait_for(lp.sock_recv(conn, 65536), 5)
            assert await asyncio.wait_for(send, 5) is None
            assert bytes(got) == want
        finally:
            for s in (c, conn, lsock):
                s.close()

    loop.run_until_complete(f(loop))
