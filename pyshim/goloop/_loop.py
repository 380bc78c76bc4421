"""goloop.Loop: asyncio's event loop API over the Go engine.

The Go core (goloop._goloop.LoopCore) owns scheduling, timers, polling and the I/O hot
paths; this class composes it with asyncio's own unix selector loop for everything that is
argument handling and protocol plumbing (exception handler, executors, async generators,
signals, create_connection's address logic ...), so behaviour and exceptions match asyncio.
"""
from __future__ import annotations

import contextvars
import errno
import os
import selectors
import signal
import socket
import sys
import threading
import weakref
from asyncio import base_events, constants, events, format_helpers, trsock, unix_events
from typing import Any, Mapping

from . import _goloop
from ._transports import SocketTransport, TransportMap, _raw_family, _raw_proto, _raw_type
from ._unix import UnixMixin

_LOADED_PID = os.getpid()
_try_recv = _goloop._try_recv
_accept_inet = _goloop._accept_inet
_SOCK_NONBLOCK = socket.SOCK_NONBLOCK
_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_try_recv_into = _goloop._try_recv_into


def _numeric_host(host) -> bool:
    """Whether getaddrinfo() can answer for host without a name lookup."""
    if host is None:
        return True
    if isinstance(host, bytes):
        try:
            host = host.decode("idna")
        except UnicodeError:
            return False
    if not isinstance(host, str):
        return False
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return True
        except (OSError, ValueError):
            pass
    return False


def _numeric_port(port) -> bool:
    if port is None or isinstance(port, int):
        return True
    if isinstance(port, (str, bytes)):
        return port.isdigit()
    return False


class _GoSelector(selectors.BaseSelector):
    """A read-only selector view of the Go poller.

    asyncio's transports look at ``loop._selector`` only to describe themselves in repr();
    registration goes through the loop's _add_reader/_add_writer, which the Go core owns.
    """

    def __init__(self, loop: "Loop") -> None:
        self._loop = weakref.ref(loop)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        loop = self._loop()
        key = None if loop is None or loop.is_closed() else loop._fd_key(fileobj)
        if key is None:
            raise KeyError(f"{fileobj!r} is not registered")
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return selectors.SelectorKey(fileobj, fd, key[0], (key[1], key[2]))

    def register(self, fileobj, events, data=None):  # pragma: no cover - not used
        raise RuntimeError("goloop's selector is driven by the Go poller; use loop.add_reader()")

    def unregister(self, fileobj):  # pragma: no cover - not used
        raise RuntimeError("goloop's selector is driven by the Go poller; use loop.remove_reader()")

    def select(self, timeout=None):  # pragma: no cover - not used
        raise RuntimeError("goloop's selector is driven by the Go poller")

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}

    def close(self) -> None:
        pass


class Loop(UnixMixin, _goloop.LoopCore, unix_events._UnixSelectorEventLoop):
    """An asyncio event loop whose engine is written in Go.

    call_soon, call_later, call_at, call_soon_threadsafe, time, stop and the reader/writer
    registry are implemented in Go; the rest is asyncio's own code running on top of them.
    """

    def __init__(self) -> None:
        _goloop.LoopCore.__init__(self)
        unix_events._UnixSelectorEventLoop.__init__(self, _GoSelector(self))
        self._transports = TransportMap()

    def __repr__(self) -> str:
        return (f"<goloop.Loop running={self.is_running()} "
                f"closed={self.is_closed()} debug={self.get_debug()}>")

    # create_task is the Go core's (C) fast path; this is asyncio's, for task factories and
    # debug mode.
    _create_task_py = base_events.BaseEventLoop.create_task

    # -- running ---------------------------------------------------------------------

    def run_forever(self) -> None:
        """Run until stop() is called."""
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self._debug)
        old_agen_hooks = sys.get_asyncgen_hooks()
        wakeup = False
        try:
            self._thread_id = threading.get_ident()
            sys.set_asyncgen_hooks(firstiter=self._asyncgen_firstiter_hook,
                                   finalizer=self._asyncgen_finalizer_hook)
            wakeup = self._install_wakeup_fd()
            events._set_running_loop(self)
            self._run_core()
        finally:
            self._stopping = False
            self._thread_id = None
            events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_agen_hooks)
            if wakeup and not self._signal_handlers:
                signal.set_wakeup_fd(-1)

    def _install_wakeup_fd(self) -> bool:
        # A signal may be delivered to one of the Go runtime's threads while the loop thread
        # sleeps in epoll: Python's handler then writes the signal number to the wakeup fd,
        # which is the loop's self-pipe, so the poll returns and the Python-level handler runs
        # (KeyboardInterrupt, asyncio.Runner's SIGINT handling) at once.
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            old = signal.set_wakeup_fd(self._csock.fileno())
        except (ValueError, OSError):
            return False
        if old not in (-1, self._csock.fileno()):
            signal.set_wakeup_fd(old)  # somebody else's: leave it alone
            return False
        return old == -1

    def _run_once(self) -> None:
        raise RuntimeError("goloop runs its iterations in Go; use run_forever()/run_until_complete()")

    def _run_handle_debug(self, handle) -> None:
        # Debug mode: asyncio's slow-callback warning around each callback.
        if handle._cancelled:
            return
        try:
            self._current_handle = handle
            t0 = self.time()
            handle._run()
            dt = self.time() - t0
            if dt >= self.slow_callback_duration:
                base_events.logger.warning("Executing %s took %.3f seconds",
                                           base_events._format_handle(handle), dt)
        finally:
            self._current_handle = None

    def _handle_callback_exception(self, handle, exc: BaseException) -> None:
        # Called from Go when a callback raised: asyncio's Handle._run reporting.
        cb = format_helpers._format_callback_source(handle._callback, handle._args or ())
        context = {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
        self.call_exception_handler(context)

    # -- socket operations -------------------------------------------------------------
    # asyncio's sock_recv()/sock_recv_into() with the wait done by the Go core: a one-shot
    # readiness registration that sets a future (see LoopCore._wait_fd). The other sock_*
    # methods are asyncio's, on the Go poller.

    async def sock_recv(self, sock, n):
        """Receive up to n bytes from sock (non-blocking); asyncio's contract."""
        return await self._sock_read(sock, _try_recv, sock.recv, n)

    async def sock_recv_into(self, sock, buf):
        """Receive into buf from sock (non-blocking); asyncio's contract."""
        return await self._sock_read(sock, _try_recv_into, sock.recv_into, buf)

    async def _sock_read(self, sock, try_read, read, arg):
        # asyncio's loop: read(arg), and on BlockingIOError wait until sock is readable. A
        # plain non-blocking socket.socket is read with try_read(fd, arg), one recv(2) that
        # answers None instead of raising (the exception costs more than the read), or
        # NotImplemented for an argument only socket's own method handles (its errors).
        base_events._check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")
        plain = type(sock) is socket.socket and sock.gettimeout() == 0
        while True:
            if plain and (fd := sock.fileno()) >= 0:
                got = try_read(fd, arg)
                if got is NotImplemented:
                    plain = False
                    continue
                if got is not None:
                    return got
            else:
                try:
                    return read(arg)
                except (BlockingIOError, InterruptedError):
                    pass
            await self._sock_wait_readable(sock)

    async def _sock_wait_readable(self, sock):
        fut = self.create_future()
        handle = self._wait_fd(sock.fileno(), fut, False)
        try:
            await fut
        except BaseException:
            # Cancelled: this wait's registration must not fire; another wait may have
            # replaced it already, so only this handle is cancelled (the Go core drops a
            # cancelled handle when its descriptor next reports).
            handle.cancel()
            raise

    # -- name resolution -----------------------------------------------------------------

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        # Numeric hosts and ports need no lookup: the socket module answers at once, so no
        # executor thread is involved. Results are the socket module's, as with asyncio.
        if (not self._debug and not flags & socket.AI_CANONNAME
                and _numeric_host(host) and _numeric_port(port)):
            self._check_closed()
            return socket.getaddrinfo(host, port, family, type, proto,
                                      flags | socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
        return await super().getaddrinfo(host, port, family=family, type=type, proto=proto,
                                         flags=flags)

    async def getnameinfo(self, sockaddr, flags=0):
        numeric = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
        if flags & numeric == numeric:
            self._check_closed()
            return socket.getnameinfo(sockaddr, flags)
        return await super().getnameinfo(sockaddr, flags)

    # -- transports ------------------------------------------------------------------

    def _accept_connection(self, protocol_factory, sock, sslcontext=None, server=None,
                           backlog=100, ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                           ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT):
        """asyncio's accept loop. For plain TCP/Unix connections of a socket.socket (no TLS,
        not in debug mode) each transport is made at once, in a copy of the context as
        asyncio's per-connection task would, instead of in a task of its own: asyncio's
        _accept_connection2 there only awaits the transport's waiter."""
        if (sslcontext or self._debug or type(sock) is not socket.socket
                or type(self)._make_socket_transport is not Loop._make_socket_transport):
            return super()._accept_connection(
                protocol_factory, sock, sslcontext, server, backlog,
                ssl_handshake_timeout, ssl_shutdown_timeout)
        family, stype, proto = _raw_family(sock), _raw_type(sock), _raw_proto(sock)
        # TCP: one C accept4() that answers None rather than raising BlockingIOError at the
        # end of each batch, and makes the socket non-blocking (socket.socket then knows it
        # from SOCK_NONBLOCK, without the ioctl of setblocking()).
        inet = family in _TCP_FAMILIES
        lfd = sock.fileno()
        for _ in range(backlog):
            try:
                if inet:
                    got = _accept_inet(lfd)
                    if got is None:
                        return None
                    fd, addr = got
                    conn = socket.socket(family, stype | _SOCK_NONBLOCK, proto, fileno=fd)
                else:
                    fd, addr = sock._accept()
                    conn = socket.socket(family, stype, proto, fileno=fd)
                    conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return None
            except OSError as exc:
                # asyncio's handling, unchanged.
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.call_exception_handler({
                        'message': 'socket.accept() out of system resource',
                        'exception': exc,
                        'socket': trsock.TransportSocket(sock),
                    })
                    self._remove_reader(sock.fileno())
                    self.call_later(constants.ACCEPT_RETRY_DELAY, self._start_serving,
                                    protocol_factory, sock, sslcontext, server, backlog,
                                    ssl_handshake_timeout, ssl_shutdown_timeout)
                else:
                    raise  # The event loop will catch, log and ignore it.
            else:
                contextvars.copy_context().run(
                    self._accept_plain, protocol_factory, conn, {'peername': addr}, server)

    def _accept_plain(self, protocol_factory, conn, extra, server):
        # asyncio's _accept_connection2 without TLS, minus the waiter it awaits: errors are
        # dropped as there (reported in debug mode, which takes asyncio's path).
        try:
            protocol = protocol_factory()
            SocketTransport(self, conn, protocol, None, extra, server)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            pass

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return SocketTransport(self, sock, protocol, waiter, extra, server)

    async def start_tls(self, transport, protocol, sslcontext, *, server_side=False,
                        server_hostname=None, ssl_handshake_timeout=None,
                        ssl_shutdown_timeout=None):
        """Upgrade transport to TLS: asyncio's start_tls with goloop's SSLProtocol."""
        # asyncio's BaseEventLoop.start_tls, line for line, but for the protocol class.
        import ssl

        from ._sslproto import SSLProtocol

        if not isinstance(sslcontext, ssl.SSLContext):
            raise TypeError(
                f"sslcontext is expected to be an instance of ssl.SSLContext, "
                f"got {sslcontext!r}")
        if not getattr(transport, "_start_tls_compatible", False):
            raise TypeError(f"transport {transport!r} is not supported by start_tls()")
        waiter = self.create_future()
        ssl_protocol = SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=False)
        # Pause early so that "ssl_protocol.data_received()" doesn't
        # have a chance to get called before "ssl_protocol.connection_made()".
        transport.pause_reading()
        transport.set_protocol(ssl_protocol)
        conmade_cb = self.call_soon(ssl_protocol.connection_made, transport)
        resume_cb = self.call_soon(transport.resume_reading)
        try:
            await waiter
        except BaseException:
            transport.close()
            conmade_cb.cancel()
            resume_cb.cancel()
            raise
        return ssl_protocol._app_transport

    def _make_ssl_transport(self, rawsock, protocol, sslcontext, waiter=None, *,
                            server_side=False, server_hostname=None, extra=None, server=None,
                            ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                            ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT):
        from ._sslproto import SSLProtocol

        ssl_protocol = SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)
        SocketTransport(self, rawsock, ssl_protocol, extra=extra, server=server)
        return ssl_protocol._app_transport

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        try:
            super().close()
        finally:
            self._close_core()
