"""goloop.Loop: asyncio's event loop API over goloop's engine.

Loop derives from goloop._goloop.LoopCore, a C type (goloop/binding/loop_core.c) whose loop
state is shared with Go (goloop/binding/loop.go): the ready queue and running handles are C
(call_soon appends without a call into Go), the timer heap, the poller and run_forever's
iterations Go, and the socket I/O hot paths both (loop_transport.go/.c, loop_readpath.c).
This class composes LoopCore with asyncio's own unix selector loop for everything that is
argument handling and protocol plumbing (exception handler, executors, async generators,
signals, create_connection's address logic ...), so behaviour and exceptions match asyncio.
"""
from __future__ import annotations

import selectors
import signal
import socket
import sys
import threading
import warnings
import weakref
from asyncio import base_events, constants
from typing import Any, Mapping

from . import _compat, _goloop
from ._server import ServerMixin
from ._transports import SocketTransport, TransportMap
from ._unix import UnixMixin

_try_recv = _goloop._try_recv
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
        # (a closed socket that was registered is found by identity, as asyncio's is)
        key = None if loop is None or loop.is_closed() else loop._fd_key(fileobj)
        if key is None:
            raise KeyError(f"{fileobj!r} is not registered")
        events, reader, writer, fd, registered = key
        return selectors.SelectorKey(registered, fd, events, (reader, writer))

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


class Loop(UnixMixin, ServerMixin, _goloop.LoopCore, _compat.UnixSelectorEventLoop):
    """An asyncio event loop whose engine is written in Go.

    call_soon, call_later, call_at, call_soon_threadsafe, time, stop and the reader/writer
    registry are implemented in Go; the rest is asyncio's own code running on top of them.
    """

    # The loop's attributes (asyncio's and goloop's) in slots, not in a __dict__: CPython
    # 3.13 specializes `loop.call_soon(...)`'s lookup only while no __dict__ was made
    # (_compat.instance_slots). They start set in __init__ (a slot has no class default).
    __slots__ = _compat.instance_slots(
        _compat.LOOP_ATTRIBUTES + ("_initialized", "_old_agen_hooks", "_wakeup_installed",
                                   "_pidfd_children", "_unix_server_paths"),
        UnixMixin, ServerMixin, _goloop.LoopCore, _compat.UnixSelectorEventLoop)

    def __init__(self) -> None:
        self._initialized = False  # a loop whose __init__ failed (e.g. after fork): nothing to close
        self._old_agen_hooks = None
        self._wakeup_installed = False
        self._pidfd_children = None  # UnixMixin's: pid -> (pidfd, transport)
        self._unix_server_paths = None  # ServerMixin's: listening socket -> inode of its path
        _goloop.LoopCore.__init__(self)
        _compat.UnixSelectorEventLoop.__init__(self, _GoSelector(self))
        self._transports = TransportMap()
        self._initialized = True

    def __del__(self, _warn=warnings.warn, _forked=_goloop._forked) -> None:
        # (_forked bound here: at interpreter exit this module's globals may be None)
        # A half-made loop (or one whose __init__ never ran), or any loop in a process forked
        # after the Go runtime started (where every use raises the fork RuntimeError once,
        # from the call that made it): nothing to warn about or close here.
        if not getattr(self, "_initialized", False) or _forked():
            return
        super().__del__(_warn)

    def __repr__(self) -> str:
        return (f"<goloop.Loop running={self.is_running()} "
                f"closed={self.is_closed()} debug={self.get_debug()}>")

    # create_task is the Go core's (C) fast path; this is asyncio's, for task factories and
    # debug mode.
    _create_task_py = base_events.BaseEventLoop.create_task

    # -- running ---------------------------------------------------------------------

    def run_forever(self) -> None:
        """Run until stop() is called."""
        self._run_forever_setup()
        try:
            self._run_core()
        finally:
            self._run_forever_cleanup()

    # asyncio 3.12+ split run_forever into these two hooks (for loops that run their
    # iterations elsewhere); goloop has them on every version, in 3.12's order.

    def _run_forever_setup(self) -> None:
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self._debug)
        self._old_agen_hooks = sys.get_asyncgen_hooks()
        self._thread_id = threading.get_ident()
        sys.set_asyncgen_hooks(firstiter=self._asyncgen_firstiter_hook,
                               finalizer=self._asyncgen_finalizer_hook)
        self._wakeup_installed = self._install_wakeup_fd()
        _compat.set_running_loop(self)

    def _run_forever_cleanup(self) -> None:
        self._stopping = False
        self._thread_id = None
        _compat.set_running_loop(None)
        self._set_coroutine_origin_tracking(False)
        if self._old_agen_hooks is not None:
            sys.set_asyncgen_hooks(*self._old_agen_hooks)
            self._old_agen_hooks = None
        if self._wakeup_installed:
            self._wakeup_installed = False
            if not self._signal_handlers:
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
                                           _compat.format_handle(handle), dt)
        finally:
            self._current_handle = None
            handle = None  # no cycle through a traceback that holds this frame

    def _handle_callback_exception(self, handle, exc: BaseException) -> None:
        # Called from Go when a callback raised: asyncio's Handle._run reporting.
        cb = _compat.format_callback_source(handle._callback, handle._args or (), self._debug)
        context = {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
        tb = handle._source_traceback
        if tb:  # debug mode: where the handle was made, as asyncio's Handle._run reports
            context["source_traceback"] = tb
        self.call_exception_handler(context)

    # -- socket operations -------------------------------------------------------------
    # asyncio's sock_recv()/sock_recv_into() with the wait done by the Go core: a one-shot
    # readiness registration that sets a future (see LoopCore._wait_fd). The other sock_*
    # methods are asyncio's, on the Go poller.

    async def sock_recv(self, sock, n):
        """Receive up to n bytes from sock (non-blocking); asyncio's contract."""
        # The first attempt is made here for a plain non-blocking socket.socket (an SSL
        # socket never is one): data already there costs no second coroutine.
        if type(sock) is socket.socket and not self._debug and (fd := sock.fileno()) >= 0 \
                and sock.gettimeout() == 0:
            got = _try_recv(fd, n)
            if got is None:
                await self._sock_wait_readable(sock)
            elif got is not NotImplemented:
                return got
        return await self._sock_read(sock, _try_recv, sock.recv, n)

    async def sock_sendall(self, sock, data):
        """Send all of data to sock (non-blocking); asyncio's contract."""
        # asyncio's, whose first send is made here for a plain socket.socket (an SSL socket
        # never is one): when it all goes at once, as it mostly does, no second coroutine.
        if type(sock) is socket.socket and not self._debug:
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            if n == len(data):
                return
            if n:
                data = memoryview(data).cast("B")[n:]
        return await super().sock_sendall(sock, data)

    async def sock_recv_into(self, sock, buf):
        """Receive into buf from sock (non-blocking); asyncio's contract."""
        return await self._sock_read(sock, _try_recv_into, sock.recv_into, buf)

    async def _sock_read(self, sock, try_read, read, arg):
        # asyncio's loop: read(arg), and on BlockingIOError wait until sock is readable. A
        # plain non-blocking socket.socket is read with try_read(fd, arg), one recv(2) that
        # answers None instead of raising (the exception costs more than the read), or
        # NotImplemented for an argument only socket's own method handles (its errors).
        _compat.check_ssl_socket(sock)
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

    async def start_tls(self, transport, protocol, sslcontext, *, server_side=False,
                        server_hostname=None, ssl_handshake_timeout=None,
                        ssl_shutdown_timeout=None):
        """Upgrade transport to TLS: asyncio's start_tls with goloop's SSLProtocol."""
        # asyncio's (3.14) BaseEventLoop.start_tls, line for line, but for the protocol class.
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
        # gh-142352 (asyncio 3.13): what a server-side StreamReader already buffered is
        # the start of the TLS stream: move it into the TLS protocol (on every version).
        if server_side:
            buffered = _compat.take_stream_reader_buffer(protocol)
            if buffered:
                ssl_protocol._incoming.write(buffered)
        transport.set_protocol(ssl_protocol)
        conmade_cb = self.call_soon(ssl_protocol.connection_made, transport)
        resume_cb = self.call_soon(transport.resume_reading)
        try:
            await waiter
        except BaseException:
            transport.close()
            conmade_cb.cancel()
            resume_cb.cancel()
            # gh-159049 (asyncio 3.14): the waiter holds the exception, whose traceback holds
            # this frame, which holds the waiter: a cycle that kept the transport alive.
            waiter = None
            raise
        return ssl_protocol._app_transport

    def _make_ssl_transport(self, rawsock, protocol, sslcontext, waiter=None, *,
                            server_side=False, server_hostname=None, extra=None, server=None,
                            ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                            ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT,
                            context=None):
        from ._sslproto import SSLProtocol

        ssl_protocol = SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)
        SocketTransport(self, rawsock, ssl_protocol, extra=extra, server=server,
                        context=context)
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


# LoopCore's C methods as Loop's own descriptors: CPython's specialized call of a C method
# (`loop.call_later(...)`) requires the instance's type to be exactly the method's class
# (goloop/binding/module.c, _own_methods).
_goloop._own_methods(Loop, _goloop.LoopCore, tuple(n for n, v in vars(_goloop.LoopCore).items()
                                                   if type(v) is type(str.join)))
