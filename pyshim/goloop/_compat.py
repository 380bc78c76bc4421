"""Every private asyncio name goloop uses, in one place, with a branch per Python version.

goloop owns its contract (its Server, accept path, run loop, subprocess watching, policy,
socket transport, TLS protocol). What it still borrows from asyncio's private API is named
here and nowhere else, so a CPython release that changes one of them breaks this module (and
tests_py/test_compat.py, which checks each name's presence and shape on the running
version) rather than some code path at run time.

Public asyncio API (``asyncio.AbstractServer``, ``asyncio.Transport``, ``BaseEventLoop``'s
documented methods, ``asyncio.log.logger``, ``asyncio.constants``' public values ...) is
used directly where it is needed.
"""
from __future__ import annotations

import sys
from asyncio import (base_events, constants, coroutines, events, format_helpers, futures,
                     transports, unix_events)

PY = sys.version_info[:2]
PY312 = PY >= (3, 12)
PY313 = PY >= (3, 13)
PY314 = PY >= (3, 14)
PY315 = PY >= (3, 15)

# -- the loop's base ------------------------------------------------------------------------
# goloop.Loop composes its Go core with asyncio's unix selector loop for argument handling and
# protocol plumbing (exception handler, executors, async generators, signals, UDP/pipes,
# create_connection's address logic). Its selector and _run_once are never used.
UnixSelectorEventLoop = unix_events._UnixSelectorEventLoop

# The per-child transport asyncio's subprocess API is built on (3.11-3.14: same signature).
UnixSubprocessTransport = unix_events._UnixSubprocessTransport

# The attributes asyncio's loop classes (BaseEventLoop, BaseSelectorEventLoop,
# _UnixSelectorEventLoop; 3.11-3.15) set on the loop: goloop.Loop keeps them in slots
# (instance_slots below). A name missing here still works (it goes to the instance's
# __dict__); tests_py/test_sched_paths.py says when a loop's life made that dict.
LOOP_ATTRIBUTES = (
    "_asyncgens", "_asyncgens_shutdown_called", "_clock_resolution", "_closed",
    "_coroutine_origin_tracking_enabled", "_coroutine_origin_tracking_saved_depth", "_csock",
    "_current_handle", "_debug", "_default_executor", "_exception_handler",
    "_executor_shutdown_called", "_internal_fds", "_old_agen_hooks", "_ready", "_scheduled",
    "_selector", "_signal_handlers", "_ssock", "_stopping", "_task_factory", "_thread_id",
    "_timer_cancelled_count", "_transports", "_unix_server_sockets", "_watcher",
    "slow_callback_duration",
)


def instance_slots(names, *bases) -> tuple:
    """__slots__ for a class of these bases that keeps names in its instances: names less
    those a base already defines (a C member, a property, a class's default value).

    CPython 3.13 keeps an instance's attributes inline (no __dict__) only if its type has no
    C fields (3.12 and 3.14 also with them); goloop's loop and transports have them, so there
    their first attribute stored would make a __dict__, and with a __dict__ CPython does not
    specialize a method's lookup (`loop.call_soon(...)`, `transport.write(...)`: specialize.c,
    LOAD_ATTR_METHOD_LAZY_DICT needs the dict not made). In slots, the attributes never make
    it; elsewhere slots cost what inline values do."""
    return tuple(n for n in dict.fromkeys(names)
                 if not any(n in vars(c) for b in bases for c in b.__mro__))



# 3.14 removed the child-watcher API: its unix loop makes its own watcher (loop._watcher),
# a pidfd one if unix_events.can_use_pidfd(), else a threaded one. goloop watches with a pidfd
# on its poller; where asyncio's loop made the threaded watcher, goloop's uses that watcher.
if PY314:
    def threaded_child_watcher(loop):
        """asyncio's threaded child watcher of loop (3.14+), or None if it uses a pidfd."""
        watcher = getattr(loop, "_watcher", None)
        return watcher if isinstance(watcher, unix_events._ThreadedChildWatcher) else None

    def asyncio_uses_pidfd(loop) -> bool:
        """Whether asyncio's loop would watch children with a pidfd here (3.14+)."""
        return threaded_child_watcher(loop) is None
else:
    def threaded_child_watcher(loop):
        """None: before 3.14 goloop's own thread waits where no pidfd can be had."""
        return None

    def asyncio_uses_pidfd(loop) -> bool:
        return True


def subprocess_popen(transp):
    """The subprocess.Popen behind one of asyncio's subprocess transports."""
    return transp._proc


def subprocess_exited(transp, returncode: int) -> None:
    """Tell asyncio's subprocess transport that its child exited with returncode."""
    transp._process_exited(returncode)


def subprocess_wait(transp):
    """asyncio's subprocess transport's own wait for the exit (a coroutine)."""
    return transp._wait()


def take_stream_reader_buffer(protocol):
    """The bytes a StreamReaderProtocol's reader holds unread, removed from it (start_tls
    moves them into the TLS protocol, as asyncio 3.13's does since gh-142352); None if
    protocol is no StreamReaderProtocol or nothing is buffered."""
    from asyncio.streams import StreamReaderProtocol

    if not isinstance(protocol, StreamReaderProtocol):
        return None
    reader = getattr(protocol, "_stream_reader", None)
    if reader is None or not reader._buffer:
        return None
    data = bytes(reader._buffer)
    reader._buffer.clear()
    return data


# -- the policy -------------------------------------------------------------------------------
# 3.11-3.13: the unix default policy (it carries the child-watcher API those versions' code
# and tests call; goloop's loops never consult a watcher). 3.14 deprecates
# DefaultEventLoopPolicy (the public alias warns) and removes child watchers: its private
# base policy is the same class without them.
if PY314:
    BasePolicy = events._BaseDefaultEventLoopPolicy
else:
    BasePolicy = unix_events._UnixDefaultEventLoopPolicy


def set_event_loop_policy(policy) -> None:
    """asyncio.set_event_loop_policy without 3.14's deprecation warning (goloop.install())."""
    if PY314:
        events._set_event_loop_policy(policy)
    else:
        events.set_event_loop_policy(policy)


def get_event_loop_policy():
    """asyncio.get_event_loop_policy without 3.14's deprecation warning."""
    if PY314:
        return events._get_event_loop_policy()
    return events.get_event_loop_policy()


# -- call_soon_threadsafe's handle ----------------------------------------------------------
# 3.14: call_soon_threadsafe returns an events._ThreadSafeHandle, a Handle with a lock around
# _run, cancel and cancelled: a cancel() or cancelled() from another thread waits for the
# callback that is running, and a callback cancelled meanwhile does not start. goloop's loop
# returns (and runs) that class on 3.14+ (made in C: goloop/binding/loop_core.c); before 3.14,
# its own C Handle, as asyncio's Handle.
ThreadSafeHandle = events._ThreadSafeHandle if PY314 else None

# -- running ------------------------------------------------------------------------------
get_running_loop = events._get_running_loop
set_running_loop = events._set_running_loop

# -- helpers asyncio's own loop uses, with the same behaviour and messages ---------------------
format_handle = base_events._format_handle
_format_callback_source = format_helpers._format_callback_source
if PY313:
    def format_callback_source(func, args, debug=False):
        """'func(args) at file:line' as asyncio's Handle repr has it (3.13: the
        arguments only in debug mode)."""
        return _format_callback_source(func, args, debug=debug)
else:
    def format_callback_source(func, args, debug=False):
        """'func(args) at file:line' as asyncio's Handle repr has it."""
        return _format_callback_source(func, args)
check_ssl_socket = base_events._check_ssl_socket
set_nodelay = base_events._set_nodelay
set_reuseport = base_events._set_reuseport
set_result_unless_cancelled = futures._set_result_unless_cancelled
SendfileMode = constants._SendfileMode
# asyncio's write flow control (pause_writing/resume_writing): the base of goloop's socket
# transport type (made in C, goloop/binding/loop_transport.c, whose slot layout it checks) and
# of goloop's TLS app transport.
FlowControlMixin = transports._FlowControlMixin

# asyncio's _check_callback refuses coroutines and coroutine functions, including functions
# marked with the _is_coroutine object (AsyncMock); 3.14 deprecates the public
# iscoroutinefunction (it warns), its private twin is what asyncio calls there.
iscoroutine = coroutines.iscoroutine
iscoroutinefunction = getattr(coroutines, "_iscoroutinefunction", coroutines.iscoroutinefunction)
IS_COROUTINE_MARK = getattr(coroutines, "_is_coroutine", None)

# asyncio's Server.wait_closed: 3.12.1 fixed it to wait for the connections to drop even if
# the server was already closed; 3.11's returns at once once the server is closed.
WAIT_CLOSED_WAITS_FOR_CLIENTS = PY312

# asyncio's Server before 3.13 counts its connections: _attach() and _detach() take no
# argument (3.12's own test_server calls them so); 3.13 keeps the transports themselves
# (_attach(transport), for close_clients). goloop's Server keeps the transports on every
# version, and before 3.13 also takes the older calls, as one unnamed connection each.
SERVER_ATTACH_TAKES_TRANSPORT = PY313

# 3.15: each connection's protocol callbacks run in one contextvars context, fixed when the
# connection is made (not in per-callback copies): a server copies the context it was created
# in (Server._context), each accepted connection runs in a copy of that, and
# create_connection()'s in a copy of its caller's. asyncio passes it around as context= to
# the loop's _start_serving, _accept_connection(2), _make_socket_transport and
# _make_ssl_transport (goloop's own, which take it on every version); before 3.15 those get
# none and every callback runs in a copy made when it was scheduled, as before.
CONNECTION_CONTEXT = PY315

# 3.13 added create_unix_server(cleanup_socket=), True by default (goloop's create_server
# takes 3.13's keep_alive= on every version).
UNIX_SERVER_CLEANUP = PY313


def _trsock():
    from asyncio import trsock

    return trsock.TransportSocket


# asyncio's wrapper that keeps users from blocking/closing a transport's socket.
TransportSocket = _trsock()

# Every private name above, for tests_py/test_compat.py: (module, attribute).
PRIVATE_NAMES = [
    ("asyncio.unix_events", "_UnixSelectorEventLoop"),
    ("asyncio.unix_events", "_UnixSubprocessTransport"),
    ("asyncio.events", "_get_running_loop"),
    ("asyncio.events", "_set_running_loop"),
    ("asyncio.base_events", "_format_handle"),
    ("asyncio.format_helpers", "_format_callback_source"),
    ("asyncio.base_events", "_check_ssl_socket"),
    ("asyncio.base_events", "_set_nodelay"),
    ("asyncio.base_events", "_set_reuseport"),
    ("asyncio.futures", "_set_result_unless_cancelled"),
    ("asyncio.constants", "_SendfileMode"),
    ("asyncio.transports", "_FlowControlMixin"),
    ("asyncio.coroutines", "iscoroutine"),
    ("asyncio.trsock", "TransportSocket"),
] + ([("asyncio.events", "_BaseDefaultEventLoopPolicy"),
      ("asyncio.events", "_set_event_loop_policy"),
      ("asyncio.events", "_get_event_loop_policy"),
      ("asyncio.events", "_ThreadSafeHandle"),
      ("asyncio.unix_events", "_ThreadedChildWatcher")] if PY314 else
     [("asyncio.unix_events", "_UnixDefaultEventLoopPolicy")])
