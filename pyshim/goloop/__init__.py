"""goloop: a drop-in asyncio event loop whose engine is written in Go and C.

    import asyncio, goloop
    asyncio.run(main(), loop_factory=goloop.new_event_loop)   # 3.12+
    goloop.run(main())                                        # like asyncio.run
    with asyncio.Runner(loop_factory=goloop.new_event_loop) as r: r.run(main())
    asyncio.set_event_loop_policy(goloop.EventLoopPolicy())   # the older form (policies:
                                                              # deprecated in 3.14)

Importing goloop does not load the Go runtime (fork safety): the extension module is
loaded when the first loop is created (or when goloop.Loop is first used). Go's runtime
does not survive fork(): in a process forked after its parent loaded it, the policy
(EventLoopPolicy, install(), run()) gives asyncio's own loop, with one RuntimeWarning;
goloop.new_event_loop() and goloop.Loop() raise RuntimeError there.
"""
from __future__ import annotations

import asyncio
import os
import sys
import warnings
from typing import Any, Coroutine, TypeVar

from . import _compat
from ._version import __version__

__all__ = ["__version__", "Loop", "new_event_loop", "EventLoopPolicy", "install", "run", "serve", "serve_metrics",
           "ClientDisconnected"]

_T = TypeVar("_T")


class ClientDisconnected(OSError):
    """send() on a request whose client went away (ASGI 2.4: an OSError). goloop serve's
    send() raises it (the binding raises this class; defined here so that importing goloop
    does not load the Go engine)."""


def new_event_loop() -> "asyncio.AbstractEventLoop":
    """Return a new goloop event loop (loads the Go engine on first use)."""
    from ._loop import Loop

    return Loop()


def _go_lost() -> bool:
    """True in a process forked after its parent loaded goloop's Go runtime (which the child
    did not inherit alive: its threads are gone). Asks the extension's fork flag, which its
    os.register_at_fork hook sets in C: no call into Go."""
    m = sys.modules.get("goloop._goloop")
    return m is not None and m._forked()


_FORK_WARNING = (
    "goloop: this process was forked after its parent started goloop's Go runtime, which does "
    "not survive fork(); asyncio's own event loop is used in this process instead. To have "
    "goloop in child processes, start them with multiprocessing's 'spawn' or 'forkserver' "
    "method (multiprocessing.set_start_method or get_context), or fork before the first loop.")
_warned_pid = 0  # the process that warned (a child forked from it warns again)


def _policy_loop() -> "asyncio.AbstractEventLoop":
    """The policy's loop (EventLoopPolicy, install(), run()): goloop's, or in a process forked
    after the Go runtime started, asyncio's own (one RuntimeWarning per process)."""
    if not _go_lost():
        return new_event_loop()
    global _warned_pid
    if _warned_pid != os.getpid():
        _warned_pid = os.getpid()
        warnings.warn(_FORK_WARNING, RuntimeWarning, stacklevel=3)
    return asyncio.SelectorEventLoop()


class EventLoopPolicy(_compat.BasePolicy):
    """An event loop policy whose loops are goloop's (asyncio's default policy otherwise).

    asyncio.set_event_loop_policy(goloop.EventLoopPolicy())    # or goloop.install()

    Its base is asyncio's own default policy class of the running version (see
    goloop._compat); on 3.14, where DefaultEventLoopPolicy is deprecated, the private base
    class behind it, so making one warns of nothing.
    """

    def _loop_factory(self) -> "asyncio.AbstractEventLoop":  # type: ignore[override]
        return _policy_loop()

    def get_event_loop(self) -> "asyncio.AbstractEventLoop":
        if _go_lost():  # the parent's goloop loop, set for this thread, is unusable here
            local = getattr(self, "_local", None)
            if getattr(local, "_loop", None) is not None and type(local._loop).__module__.startswith("goloop"):
                local._loop = None  # as if never set: the main thread gets a new (asyncio) loop
                local._set_called = False
        return super().get_event_loop()

    def __repr__(self) -> str:
        return "<goloop.EventLoopPolicy>"


def install() -> None:
    """Make goloop the event loop of asyncio.run() and friends (sets the policy).

    On 3.14, where asyncio.set_event_loop_policy() is deprecated, this sets it without
    the warning; goloop.run() and asyncio.Runner(loop_factory=goloop.new_event_loop) need
    no policy at all.
    """
    _compat.set_event_loop_policy(EventLoopPolicy())


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Run coroutine main on a new goloop loop and return its result: asyncio.run's contract
    (in a process forked after the Go runtime started: on asyncio's loop, with a warning)."""
    if _compat.get_running_loop() is not None:
        raise RuntimeError("goloop.run() cannot be called from a running event loop")
    with asyncio.Runner(debug=debug, loop_factory=_policy_loop) as runner:
        return runner.run(main)


def serve(app: Any, **options: Any) -> int:
    """Serve the ASGI application app (or "module:attribute") with goloop's own server (HTTP in
    Go, the app on goloop's loop) until SIGINT/SIGTERM. Options are uvicorn's: host, port, uds,
    fd, root_path, timeout_keep_alive, lifespan ... (goloop.serve.server.SUPPORTED_OPTIONS)."""
    from .serve.server import serve as _serve

    return _serve(app, **options)


def serve_metrics() -> "dict | None":
    """The request counter and latency histogram of the goloop serve server running in this
    process (counted in Go; the histogram with --metrics or --metrics-path), or None."""
    from .serve.server import serve_metrics as _metrics

    return _metrics()


def __getattr__(name: str) -> Any:
    if name == "Loop":
        from ._loop import Loop

        return Loop
    if name == "http":
        import importlib

        return importlib.import_module(".http", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
