"""Shared helpers for the benchmark scripts: pick an event loop by name.

``new_loop(name)`` returns a fresh event loop for ``asyncio``, ``uvloop``,
``rloop`` or ``goloop``. goloop is imported lazily; when it is not importable from the
current environment we also try the in-tree ``pyshim`` folder. Any failure is
raised as ``LoopUnavailable`` so that callers can report it cleanly.
"""

import asyncio
import os
import sys

LOOPS = ("asyncio", "uvloop", "rloop", "goloop")

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LoopUnavailable(RuntimeError):
    pass


def _import_goloop():
    try:
        import goloop  # noqa: F401
        if hasattr(goloop, "new_event_loop"):
            return goloop
    except ImportError:
        pass
    shim = os.path.join(_REPO, "pyshim")
    if os.path.isdir(shim) and shim not in sys.path:
        sys.path.insert(0, shim)
        sys.modules.pop("goloop", None)
        import goloop  # noqa: F811
        return goloop
    import goloop  # noqa: F811
    return goloop


def new_loop(name):
    try:
        if name == "asyncio":
            asyncio.set_event_loop_policy(None)
            return asyncio.new_event_loop()
        if name == "uvloop":
            import uvloop
            return uvloop.new_event_loop()
        if name == "rloop":
            import rloop  # a Rust asyncio loop (Granian's author); a speed anchor only
            return rloop.new_event_loop()
        if name == "goloop":
            goloop = _import_goloop()
            return goloop.new_event_loop()
    except Exception as exc:  # report anything, never crash the harness
        raise LoopUnavailable(f"{name}: {type(exc).__name__}: {exc}") from exc
    raise LoopUnavailable(f"unknown loop {name!r}")


def http_parser_module(name):
    """The httptools-compatible module: ``httptools`` or ``goloop.http``."""
    try:
        if name == "httptools":
            import httptools
            return httptools
        if name == "goloop":
            _import_goloop()
            from goloop import http
            return http
    except Exception as exc:
        raise LoopUnavailable(f"parser {name}: {type(exc).__name__}: {exc}") from exc
    raise LoopUnavailable(f"unknown parser {name!r}")


def parse_addr(addr):
    host, _, port = addr.rpartition(":")
    return (host or "127.0.0.1"), int(port)


def die(msg, code=3):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)
