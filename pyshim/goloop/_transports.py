"""goloop's socket transport: asyncio's _SelectorSocketTransport with its hot paths in Go.

Reading (one C read into a reused buffer, or straight into a bytes object after large
reads; data_received / get_buffer+buffer_updated), writing (queueing, one writev per loop
iteration, flow control) and readiness live in Go and C (goloop/binding/loop_transport.go,
loop_transport.c, loop_readpath.c). What stays here is the lifecycle asyncio defines: closing,
EOF, fatal errors, connection_lost, sendfile hand-off; kept close to asyncio's own code so
behaviour and exceptions match. Instances are real asyncio.Transport objects.
"""
from __future__ import annotations

import _socket
import socket
from asyncio import constants, protocols
from asyncio.log import logger
import warnings
import weakref

from . import _compat, _goloop

# The ints behind socket.socket's family/type/proto properties (which convert to enums).
_raw_family = _socket.socket.family.__get__
_raw_type = _socket.socket.type.__get__
_raw_proto = _socket.socket.proto.__get__
_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class TransportMap(dict):
    """The loop's fd -> transport map (asyncio's loop._transports), holding weak references
    as asyncio's WeakValueDictionary does, at a fraction of the cost: that one runs three
    Python functions to add a transport and one more when it dies (~0.7 us per connection).
    goloop's transports add themselves with dict's own __setitem__ and a weakref.ref; an
    entry whose transport is gone reads as missing, and the next transport on the same fd
    replaces it. asyncio's code (its fd-in-use lookup, sendfile's del and re-add: the only
    uses; 3.12+ also calls get()) goes through the methods below."""

    __slots__ = ()

    def __setitem__(self, fd, transport):
        dict.__setitem__(self, fd, weakref.ref(transport))

    def __getitem__(self, fd):
        transport = dict.__getitem__(self, fd)()
        if transport is None:
            raise KeyError(fd)
        return transport

    def get(self, fd, default=None):
        # 3.12+'s _ensure_fd_no_transport uses get()
        ref = dict.get(self, fd)
        if ref is None:
            return default
        transport = ref()
        return default if transport is None else transport


_register = dict.__setitem__


def _set_nodelay(sock):
    """asyncio's _set_nodelay (base_events), reading the socket's ints rather than its
    enum-converting properties."""
    if isinstance(sock, _socket.socket):
        if (_raw_family(sock) in _TCP_FAMILIES and _raw_type(sock) == socket.SOCK_STREAM
                and _raw_proto(sock) == socket.IPPROTO_TCP):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        _compat.set_nodelay(sock)


class SocketTransport(_goloop.SocketTransportCore):
    """A TCP or Unix stream socket transport driven by goloop's Go engine."""

    _start_tls_compatible = True
    _sendfile_compatible = _compat.SendfileMode.TRY_NATIVE
    max_size = 256 * 1024
    # The transport's attributes in slots, not in its __dict__ (made only if something else
    # is stored): CPython 3.13 specializes `transport.write(...)`'s lookup only while no
    # __dict__ was made (_compat.instance_slots). __weakref__: the loop's TransportMap.
    # _context, 3.15: the contextvars context every callback of the connection runs in
    # (asyncio's _SelectorTransport._context); None: each runs in a copy made when scheduled.
    __slots__ = ("__dict__", "__weakref__") + _compat.instance_slots(
        ("_extra", "_loop", "_extra_sock", "_sock", "_protocol", "_protocol_connected", "_server",
         "_context", "_empty_waiter"), _goloop.SocketTransportCore)

    def __init__(self, loop, sock, protocol, waiter=None, extra=None, server=None,
                 context=None):
        self._empty_waiter = self._context = None
        self._extra = {} if extra is None else extra
        self._loop = loop
        self._extra_sock = sock  # get_extra_info('socket') wraps it when first asked
        try:
            self._extra['sockname'] = sock.getsockname()
        except OSError:
            self._extra['sockname'] = None
        if 'peername' not in self._extra:
            try:
                self._extra['peername'] = sock.getpeername()
            except socket.error:
                self._extra['peername'] = None
        self._sock = sock
        self._core_attach(loop, sock.fileno())  # sets _sock_fd
        self.set_protocol(protocol)
        self._server = server
        # _conn_lost, _closing, _paused, _eof start at 0/False (C members): no stores per
        # connection for them
        # _set_write_buffer_limits()'s defaults without the call (a transport per connection)
        self._high_water = 64 * 1024
        self._low_water = 16 * 1024
        if server is not None:
            server._attach(self)
        _register(loop._transports, self._sock_fd, weakref.ref(self))  # see TransportMap
        _set_nodelay(sock)
        if context is not None:
            self._context = context
            self._core_set_context(context)  # reads and the write queue's callbacks
        loop.call_soon(self._protocol.connection_made, self, context=context)
        # only start reading when connection_made() has been called
        loop.call_soon(self._start_reading, context=context)
        if waiter is not None:
            loop.call_soon(_compat.set_result_unless_cancelled, waiter, None, context=context)

    def __repr__(self):
        info = [self.__class__.__name__]
        if self._sock is None:
            info.append('closed')
        elif self._closing:
            info.append('closing')
        info.append(f'fd={self._sock_fd}')
        if self._loop is not None and not self._loop.is_closed():
            ev = self._core_events()
            info.append('read=polling' if ev & 1 else 'read=idle')
            state = 'polling' if ev & 2 else 'idle'
            info.append(f'write=<{state}, bufsize={self.get_write_buffer_size()}>')
        return '<{}>'.format(' '.join(info))

    def get_extra_info(self, name, default=None):
        if name == 'socket' and 'socket' not in self._extra:
            # asyncio makes this TransportSocket in __init__; made on first request it
            # spares 2.6 % of a connection's set-up to the many servers that never ask
            self._extra['socket'] = _compat.TransportSocket(self._extra_sock)
        return self._extra.get(name, default)

    # -- protocol ------------------------------------------------------------------

    def set_protocol(self, protocol):
        self._core_set_protocol(protocol, isinstance(protocol, protocols.BufferedProtocol))
        self._protocol = protocol
        self._protocol_connected = True

    def get_protocol(self):
        return self._protocol

    # -- reading -------------------------------------------------------------------

    def is_reading(self):
        return not self._closing and not self._paused

    def _start_reading(self):
        if self.is_reading():
            self._core_read(True)

    def pause_reading(self):
        if not self.is_reading():
            return
        self._paused = True
        self._core_read(False)
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self):
        if self._closing or not self._paused:
            return
        self._paused = False
        self._core_read(True)
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def _read_ready__on_eof(self):
        # Called from Go when recv() returned b''.
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, 'Fatal error: protocol.eof_received() call failed.')
            return
        if keep_open:
            # The protocol can still write, but nothing more can be received.
            self._core_read(False)
        else:
            self.close()

    # -- writing -------------------------------------------------------------------
    # write() and get_write_buffer_size() are the Go core's.

    def _write_after_conn_lost(self):
        if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
            logger.warning('socket.send() raised exception.')
        self._conn_lost += 1

    def _write_drained(self):
        # Called from Go when the queue empties while closing, after write_eof() or sendfile.
        if self._empty_waiter is not None and not self._empty_waiter.done():
            self._empty_waiter.set_result(None)
        if self._closing:
            self._call_connection_lost(None)
        elif self._eof and self._sock is not None:
            self._sock.shutdown(socket.SHUT_WR)

    def write_eof(self):
        if self._closing or self._eof:
            return
        self._eof = True
        if not self.get_write_buffer_size():
            self._sock.shutdown(socket.SHUT_WR)

    def can_write_eof(self):
        return True

    def get_write_buffer_limits(self):
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high=None, low=None):
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f'high ({high!r}) must be >= low ({low!r}) must be >= 0')
        self._high_water = high
        self._low_water = low

    def set_write_buffer_limits(self, high=None, low=None):
        self._set_write_buffer_limits(high=high, low=low)
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self):
        if self.get_write_buffer_size() <= self._high_water:
            return
        if not self._protocol_paused:
            self._protocol_paused = True
            try:
                self._protocol.pause_writing()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._loop.call_exception_handler({
                    'message': 'protocol.pause_writing() failed',
                    'exception': exc,
                    'transport': self,
                    'protocol': self._protocol,
                })

    def _maybe_resume_protocol(self):
        if self._protocol_paused and self.get_write_buffer_size() <= self._low_water:
            self._protocol_paused = False
            try:
                self._protocol.resume_writing()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._loop.call_exception_handler({
                    'message': 'protocol.resume_writing() failed',
                    'exception': exc,
                    'transport': self,
                    'protocol': self._protocol,
                })

    # -- closing -------------------------------------------------------------------

    def close(self):
        if self._closing:
            return
        self._closing = True
        self._core_read(False)
        if not self.get_write_buffer_size():
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None, context=self._context)
        else:
            # the drain calls connection_lost: in this context's copy, as asyncio's would be,
            # unless sending had blocked (then in the writer's, see gl.h's wctx)
            self._core_close_ctx()

    def abort(self):
        # Buffered data is lost, as in asyncio; but what write() was given in this loop
        # iteration goes to the kernel first, as asyncio's write() would have sent it at once.
        if self._sock is not None and not self._conn_lost and self.get_write_buffer_size():
            self._core_flush()
        self._force_close(None)

    def __del__(self, _warn=warnings.warn):
        if getattr(self, "_sock", None) is not None:  # (None too if __init__ failed early)
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._core_detach()
            self._sock.close()

    def _fatal_error(self, exc, message='Fatal error on transport'):
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler({
                'message': message,
                'exception': exc,
                'transport': self,
                'protocol': self._protocol,
            })
        if self._empty_waiter is not None and not self._empty_waiter.done():
            self._empty_waiter.set_exception(exc)
        self._force_close(exc)

    def _force_close(self, exc):
        if self._conn_lost:
            return
        self._core_clear_write()
        if not self._closing:
            self._closing = True
            self._core_read(False)
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc, context=self._context)

    def _call_connection_lost(self, exc):
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)
        finally:
            self._core_detach()
            self._sock.close()
            self._sock = None
            self._protocol = None
            self._loop = None
            server = self._server
            if server is not None:
                server._detach(self)
                self._server = None
            if self._empty_waiter is not None and not self._empty_waiter.done():
                self._empty_waiter.set_exception(ConnectionError("Connection is closed by peer"))

    # -- sendfile hand-off (asyncio's native sendfile path uses these) ---------------

    def _make_empty_waiter(self):
        if self._empty_waiter is not None:
            raise RuntimeError("Empty waiter is already set")
        self._empty_waiter = self._loop.create_future()
        self._sendfile_busy = True
        if not self.get_write_buffer_size():
            self._empty_waiter.set_result(None)
        return self._empty_waiter

    def _reset_empty_waiter(self):
        self._empty_waiter = None
        self._sendfile_busy = False


# write(), is_closing() ... as SocketTransport's own descriptors: CPython's specialized call
# of a C method requires the instance's type to be exactly the method's class
# (goloop/binding/module.c, _own_methods).
_goloop._own_methods(SocketTransport, _goloop.SocketTransportCore,
                     tuple(n for n, v in vars(_goloop.SocketTransportCore).items()
                           if type(v) is type(str.join)))
