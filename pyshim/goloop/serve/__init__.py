"""goloop serve's Python side: the server (server.py: Server, serve(), the CLI's main()), its
options and CLI parser (config.py), the master and its worker processes (workers.py) and the
WSGI interface's pool (wsgi.py). The HTTP engine is goloop/httpserver (Go) with its binding.

`goloop.serve(app, ...)` is a function of the goloop package; importing a module of this
package makes the package itself goloop's attribute `serve` (Python sets a sub-package on
its parent), so the package is callable too, with the same signature. Importing it loads no
part of the Go engine.
"""
from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["serve", "serve_metrics", "main"]


def serve(app: Any, **options: Any) -> int:
    """goloop.serve: see goloop.serve.server.serve."""
    from .server import serve as _serve

    return _serve(app, **options)


def serve_metrics() -> "dict | None":
    """goloop.serve_metrics: see goloop.serve.server.serve_metrics."""
    from .server import serve_metrics as _metrics

    return _metrics()


def main(argv: "list[str] | None" = None) -> int:
    """The `goloop` command and `python -m goloop serve`: see goloop.serve.server.main."""
    from .server import main as _main

    return _main(argv)


class _CallablePackage(types.ModuleType):
    """This package, callable as goloop.serve(app, **options)."""

    def __call__(self, app: Any, **options: Any) -> int:
        return serve(app, **options)


sys.modules[__name__].__class__ = _CallablePackage
