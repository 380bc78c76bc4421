"""Run Granian with goloop as its asyncio loop:

    python -m goloop.granian --interface asgi app:app [any other granian option]

Granian's ``--loop`` knows asyncio, uvloop, rloop and winloop, not goloop, and its workers
build their loop *before* they import the application, so ``goloop.install()`` in the
application's module comes too late. This launcher installs goloop's policy first, then
runs Granian's own command line with ``--loop asyncio`` (added when absent), whose loop
builder calls ``asyncio.new_event_loop()`` and so gets a goloop loop:

- with the ``fork`` start method (Linux before 3.14), workers inherit the policy;
- with ``spawn``, multiprocessing re-imports this module in each worker (as ``__mp_main__``)
  before the worker starts, which installs the policy there too.

The same works from a script of your own (keep the install at module level)::

    import goloop
    goloop.install()
    if __name__ == "__main__":
        from granian.cli import cli
        cli()        # python myserve.py --interface asgi --loop asyncio app:app

Installing the policy does not load goloop's engine (the Go runtime starts with the first
loop, in the worker), so forking workers stays safe.
"""
from __future__ import annotations

import sys

import goloop

goloop.install()


def _loop_option(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--loop" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--loop="):
            return arg.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    loop = _loop_option(args)
    if loop is None:
        args = ["--loop", "asyncio", *args]
    elif loop != "asyncio":
        sys.exit(f"goloop.granian: --loop {loop} would not use goloop; leave --loop out or give "
                 "--loop asyncio (goloop is installed as asyncio's loop)")
    try:
        from granian.cli import cli
    except ImportError:
        sys.exit("goloop.granian: granian is not installed (pip install granian)")
    sys.argv = ["granian", *args]
    cli()


if __name__ == "__main__":
    main()
