"""goloop's servers: the Server object, create_server/create_unix_server and the accept path.

asyncio keeps the bookkeeping between a server and its connections private (Server._attach /
_detach changed signature in 3.13, and goloop's takes both before it; wait_closed's semantics
changed in 3.12.1; close_clients and abort_clients came in 3.13), so goloop owns it, as uvloop
does: this module's Server is the
one goloop's loops create, with the 3.13 API and semantics on every supported version, and
goloop's transports attach to it. create_server and create_unix_server are asyncio's
(3.13) address logic, so arguments, errors and messages are asyncio's; they make goloop's
Server. The accept loop is goloop's: plain connections get their transport at once (no task
per connection), TCP accepts go through one C accept4().
"""
from __future__ import annotations

import collections.abc
import contextvars
import errno
import itertools
import os
import socket
import stat
import sys
import weakref
from asyncio import base_events, constants, exceptions, tasks
from asyncio.log import logger

from . import _compat, _goloop
from ._transports import SocketTransport, _raw_family, _raw_proto, _raw_type

_SOCK_NONBLOCK = socket.SOCK_NONBLOCK
_accept_inet = _goloop._accept_inet
_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_HAS_IPv6 = hasattr(socket, "AF_INET6")


class Server(base_events.Server):
    """The server create_server() and create_unix_server() return (asyncio.Server's API).

    It derives from asyncio's Server class only so that isinstance() checks hold; every
    method and attribute is goloop's own.
    """

    def __init__(self, loop, sockets, protocol_factory, ssl_context, backlog,
                 ssl_handshake_timeout, ssl_shutdown_timeout=None):
        self._loop = loop
        self._sockets = sockets
        # weak references: a transport nobody holds must still be able to warn and go
        self._clients = weakref.WeakSet()
        # connections attached without a transport (asyncio's signature before 3.13)
        self._unnamed_clients = 0
        self._waiters = []
        self._protocol_factory = protocol_factory
        self._backlog = backlog
        self._ssl_context = ssl_context
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        self._serving = False
        self._serving_forever_fut = None
        # 3.15: the context the server's connections start from (each gets a copy)
        self._context = contextvars.copy_context() if _compat.CONNECTION_CONTEXT else None

    def __repr__(self):
        return f'<{self.__class__.__name__} sockets={self.sockets!r}>'

    # -- goloop's transports call these ----------------------------------------------------

    if _compat.SERVER_ATTACH_TAKES_TRANSPORT:
        def _attach(self, transport):
            self._clients.add(transport)

        def _detach(self, transport):
            self._clients.discard(transport)
            if self._connection_count() == 0 and self._sockets is None:
                self._wakeup()
    else:
        def _attach(self, transport=None):
            if transport is None:
                self._unnamed_clients += 1
            else:
                self._clients.add(transport)

        def _detach(self, transport=None):
            if transport is None:
                self._unnamed_clients -= 1
            else:
                self._clients.discard(transport)
            if self._connection_count() == 0 and self._sockets is None:
                self._wakeup()

    def _connection_count(self):
        return len(self._clients) + self._unnamed_clients

    def _wakeup(self):
        waiters = self._waiters
        self._waiters = None
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _start_serving(self):
        if self._serving:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            self._loop._start_serving(
                self._protocol_factory, sock, self._ssl_context,
                self, self._backlog, self._ssl_handshake_timeout,
                self._ssl_shutdown_timeout, context=self._context)

    # -- public API ---------------------------------------------------------------------------

    def get_loop(self):
        return self._loop

    def is_serving(self):
        return self._serving

    @property
    def sockets(self):
        if self._sockets is None:
            return ()
        return tuple(_compat.TransportSocket(s) for s in self._sockets)

    def close(self):
        sockets = self._sockets
        if sockets is None:
            return
        self._sockets = None
        for sock in sockets:
            self._loop._stop_serving(sock)
        self._serving = False
        if (self._serving_forever_fut is not None
                and not self._serving_forever_fut.done()):
            self._serving_forever_fut.cancel()
            self._serving_forever_fut = None
        if self._connection_count() == 0:
            self._wakeup()

    def close_clients(self):
        for transport in self._clients.copy():
            transport.close()

    def abort_clients(self):
        for transport in self._clients.copy():
            transport.abort()

    async def start_serving(self):
        self._start_serving()
        # Skip one loop iteration so that all 'loop.add_reader' go through.
        await tasks.sleep(0)

    async def serve_forever(self):
        if self._serving_forever_fut is not None:
            raise RuntimeError(
                f'server {self!r} is already being awaited on serve_forever()')
        if self._sockets is None:
            raise RuntimeError(f'server {self!r} is closed')
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except exceptions.CancelledError:
            try:
                self.close()
                if _compat.PY313:
                    self.close_clients()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self):
        """Wait until the server is closed and all its connections are dropped.

        3.12.1 and later (asyncio's fixed semantics). 3.11's asyncio returns at once
        from a closed server, even with connections open; goloop does the same there.
        """
        if self._waiters is None:
            return
        if not _compat.WAIT_CLOSED_WAITS_FOR_CLIENTS and self._sockets is None:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class ServerMixin:
    """Mixed into goloop.Loop: servers and the accept path."""

    # self._unix_server_paths (set to None by Loop.__init__): listening socket -> inode of
    # its path

    async def create_server(
            self, protocol_factory, host=None, port=None,
            *,
            family=socket.AF_UNSPEC,
            flags=socket.AI_PASSIVE,
            sock=None,
            backlog=100,
            ssl=None,
            reuse_address=None,
            reuse_port=None,
            keep_alive=None,
            ssl_handshake_timeout=None,
            ssl_shutdown_timeout=None,
            start_serving=True):
        """Create a TCP server (asyncio's create_server, making goloop's Server)."""
        # asyncio 3.13's code, line for line but for the Server class.
        if isinstance(ssl, bool):
            raise TypeError('ssl argument must be an SSLContext or None')
        if ssl_handshake_timeout is not None and ssl is None:
            raise ValueError('ssl_handshake_timeout is only meaningful with ssl')
        if ssl_shutdown_timeout is not None and ssl is None:
            raise ValueError('ssl_shutdown_timeout is only meaningful with ssl')
        if sock is not None:
            _compat.check_ssl_socket(sock)

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError('host/port and sock can not be specified at the same time')
            if reuse_address is None:
                reuse_address = os.name == "posix" and sys.platform != "cygwin"
            sockets = []
            if host == '':
                hosts = [None]
            elif (isinstance(host, str) or
                  not isinstance(host, collections.abc.Iterable)):
                hosts = [host]
            else:
                hosts = host

            fs = [self._create_server_getaddrinfo(host, port, family=family, flags=flags)
                  for host in hosts]
            infos = await tasks.gather(*fs)
            infos = set(itertools.chain.from_iterable(infos))

            completed = False
            try:
                for res in infos:
                    af, socktype, proto, canonname, sa = res
                    try:
                        sock = socket.socket(af, socktype, proto)
                    except socket.error:
                        # Assume it's a bad family/type/protocol combination.
                        if self._debug:
                            logger.warning('create_server() failed to create '
                                           'socket.socket(%r, %r, %r)',
                                           af, socktype, proto, exc_info=True)
                        continue
                    sockets.append(sock)
                    if reuse_address:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
                    # Since Linux 6.12.9, SO_REUSEPORT is not allowed
                    # on other address families than AF_INET/AF_INET6.
                    if reuse_port and af in _TCP_FAMILIES:
                        _compat.set_reuseport(sock)
                    if keep_alive:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
                    # Disable IPv4/IPv6 dual stack support (enabled by
                    # default on Linux) which makes a single socket
                    # listen on both address families.
                    if (_HAS_IPv6 and af == socket.AF_INET6
                            and hasattr(socket, 'IPPROTO_IPV6')):
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
                    try:
                        sock.bind(sa)
                    except OSError as err:
                        msg = ('error while attempting '
                               'to bind on address %r: %s'
                               % (sa, str(err).lower() if _compat.PY312
                                  else (err.strerror or '').lower()))
                        if err.errno == errno.EADDRNOTAVAIL:
                            # Assume the family is not enabled (bpo-30945)
                            sockets.pop()
                            sock.close()
                            if self._debug:
                                logger.warning(msg)
                            continue
                        raise OSError(err.errno, msg) from None

                if not sockets:
                    raise OSError('could not bind on any address out of %r'
                                  % ([info[4] for info in infos],))
                completed = True
            finally:
                if not completed:
                    for sock in sockets:
                        sock.close()
        else:
            if sock is None:
                raise ValueError('Neither host/port nor sock were specified')
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f'A Stream Socket was expected, got {sock!r}')
            sockets = [sock]

        for sock in sockets:
            sock.setblocking(False)

        server = Server(self, sockets, protocol_factory, ssl, backlog,
                        ssl_handshake_timeout, ssl_shutdown_timeout)
        if start_serving:
            server._start_serving()
            # Skip one loop iteration so that all 'loop.add_reader' go through.
            await tasks.sleep(0)

        if self._debug:
            logger.info("%r is serving", server)
        return server

    async def create_unix_server(
            self, protocol_factory, path=None, *,
            sock=None, backlog=100, ssl=None,
            ssl_handshake_timeout=None,
            ssl_shutdown_timeout=None,
            start_serving=True, cleanup_socket=None):
        """Create a Unix socket server (asyncio's create_unix_server, with goloop's Server).

        cleanup_socket (3.13's parameter; default True there, False before, as asyncio's)
        removes the socket's path when the server closes.
        """
        if cleanup_socket is None:
            cleanup_socket = _compat.UNIX_SERVER_CLEANUP
        if isinstance(ssl, bool):
            raise TypeError('ssl argument must be an SSLContext or None')
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError('ssl_handshake_timeout is only meaningful with ssl')
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError('ssl_shutdown_timeout is only meaningful with ssl')

        if path is not None:
            if sock is not None:
                raise ValueError('path and sock can not be specified at the same time')
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # Check for abstract socket. `str` and `bytes` paths are supported.
            if path[0] not in (0, '\x00'):
                try:
                    if stat.S_ISSOCK(os.stat(path).st_mode):
                        os.remove(path)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    # Directory may have permissions only to create socket.
                    logger.error('Unable to check or remove stale UNIX socket '
                                 '%r: %r', path, err)
            try:
                sock.bind(path)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    # Let's improve the error message by adding
                    # with what exact address it occurs.
                    msg = f'Address {path!r} is already in use'
                    raise OSError(errno.EADDRINUSE, msg) from None
                else:
                    raise
            except:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError('path was not specified, and no sock specified')
            if (sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM):
                raise ValueError(f'A UNIX Domain Stream Socket was expected, got {sock!r}')

        if cleanup_socket:
            name = sock.getsockname()
            # Check for abstract socket. `str` and `bytes` paths are supported.
            if name and name[0] not in (0, '\x00'):
                try:
                    ino = os.stat(name).st_ino
                except FileNotFoundError:
                    pass
                else:
                    if self._unix_server_paths is None:
                        self._unix_server_paths = {}
                    self._unix_server_paths[sock] = ino

        sock.setblocking(False)
        server = Server(self, [sock], protocol_factory, ssl, backlog,
                        ssl_handshake_timeout, ssl_shutdown_timeout)
        if start_serving:
            server._start_serving()
            # Skip one loop iteration so that all 'loop.add_reader' go through.
            await tasks.sleep(0)
        return server

    def _start_serving(self, protocol_factory, sock, sslcontext=None, server=None,
                       backlog=100, ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                       ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT, context=None):
        self._add_reader(sock.fileno(), self._accept_connection,
                         protocol_factory, sock, sslcontext, server, backlog,
                         ssl_handshake_timeout, ssl_shutdown_timeout, context)

    def _stop_serving(self, sock):
        paths = self._unix_server_paths
        ino = paths.pop(sock, None) if paths else None
        path = sock.getsockname() if ino is not None else None
        self._remove_reader(sock.fileno())
        sock.close()
        if path is not None:
            # remove the socket's path, unless something else has replaced it meanwhile
            try:
                if os.stat(path).st_ino == ino:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                logger.error('Unable to clean up listening UNIX socket %r: %r', path, err)

    # -- accepting ------------------------------------------------------------------------

    def _accept_connection(self, protocol_factory, sock, sslcontext=None, server=None,
                           backlog=100, ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                           ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT, context=None):
        """Accept up to backlog connections on listening socket sock.

        Plain TCP/Unix connections of a socket.socket (no TLS, not in debug mode) get their
        transport at once, in a copy of the context, as asyncio's per-connection task would
        (its _accept_connection2 there only awaits the transport's waiter); TLS, debug mode
        and socket subclasses go through a task per connection, as in asyncio.
        The copy is of context (3.15: the server's) when given, and then the connection's
        callbacks run in that copy itself; else of the current context (before 3.15).
        """
        fast = not (sslcontext or self._debug or type(sock) is not socket.socket
                    or type(self)._make_socket_transport is not ServerMixin._make_socket_transport)
        family, stype, proto = _raw_family(sock), _raw_type(sock), _raw_proto(sock)
        # TCP: one C accept4() that answers None rather than raising BlockingIOError at the
        # end of each batch, and makes the socket non-blocking (socket.socket then knows it
        # from SOCK_NONBLOCK, without the ioctl of setblocking()).
        inet = fast and family in _TCP_FAMILIES
        lfd = sock.fileno()
        accept_inet = _accept_inet
        for _ in range(backlog):
            try:
                if inet:
                    got = accept_inet(lfd)
                    if got is None:
                        return None
                    fd, addr = got
                    conn = socket.socket(family, stype | _SOCK_NONBLOCK, proto, fileno=fd)
                elif fast:
                    fd, addr = sock._accept()
                    conn = socket.socket(family, stype, proto, fileno=fd)
                    conn.setblocking(False)
                else:
                    conn, addr = sock.accept()
                    conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return None
            except OSError as exc:
                # asyncio's handling.
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.call_exception_handler({
                        'message': 'socket.accept() out of system resource',
                        'exception': exc,
                        'socket': _compat.TransportSocket(sock),
                    })
                    self._remove_reader(sock.fileno())
                    self.call_later(constants.ACCEPT_RETRY_DELAY, self._start_serving,
                                    protocol_factory, sock, sslcontext, server, backlog,
                                    ssl_handshake_timeout, ssl_shutdown_timeout, context)
                    return None
                raise  # The event loop will catch, log and ignore it.
            extra = {'peername': addr}
            if context is None:
                if fast:
                    contextvars.copy_context().run(
                        self._accept_plain, protocol_factory, conn, extra, server)
                else:
                    accept = self._accept_connection2(
                        protocol_factory, conn, extra, sslcontext, server,
                        ssl_handshake_timeout, ssl_shutdown_timeout)
                    self.create_task(accept)
                continue
            conn_context = context.copy()
            if fast:
                conn_context.run(self._accept_plain, protocol_factory, conn, extra, server,
                                 conn_context)
            else:
                accept = self._accept_connection2(
                    protocol_factory, conn, extra, sslcontext, server,
                    ssl_handshake_timeout, ssl_shutdown_timeout, context=conn_context)
                self.create_task(accept, context=conn_context)
        return None

    def _accept_plain(self, protocol_factory, conn, extra, server, context=None):
        # _accept_connection2 without TLS, minus the waiter it awaits: errors are dropped
        # as there (reported in debug mode, which takes _accept_connection2).
        try:
            protocol = protocol_factory()
            SocketTransport(self, conn, protocol, None, extra, server, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            conn.close()

    async def _accept_connection2(self, protocol_factory, conn, extra, sslcontext=None,
                                  server=None,
                                  ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                                  ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT,
                                  context=None):
        protocol = None
        transport = None
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            if sslcontext:
                transport = self._make_ssl_transport(
                    conn, protocol, sslcontext, waiter=waiter,
                    server_side=True, extra=extra, server=server,
                    ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout, context=context)
            else:
                transport = self._make_socket_transport(
                    conn, protocol, waiter=waiter, extra=extra, server=server,
                    context=context)
            try:
                await waiter
            except BaseException:
                transport.close()
                # the exception in this future would keep the protocol alive (gh-109534)
                waiter = None
                raise
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if self._debug:
                context = {
                    'message': 'Error on transport creation for incoming connection',
                    'exception': exc,
                }
                if protocol is not None:
                    context['protocol'] = protocol
                if transport is not None:
                    context['transport'] = transport
                self.call_exception_handler(context)

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None,
                               context=None):
        # context: 3.15's asyncio passes the connection's (see _compat.CONNECTION_CONTEXT)
        return SocketTransport(self, sock, protocol, waiter, extra, server, context)
