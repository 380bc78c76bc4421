"""Helpers shared by goloop's Python tests (loop construction, subprocess scripts, counters)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import goloop

# GOLOOP_TEST_LOOPS=goloop leaves out asyncio's own loop, the oracle most tests also run on
# (the aarch64 run under emulation, make test-arm64, spends its time on goloop only)
LOOP_KINDS = [k for k in os.environ.get("GOLOOP_TEST_LOOPS", "asyncio,goloop").split(",") if k]
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def make_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "asyncio":
        return asyncio.SelectorEventLoop()
    if kind == "goloop":
        return goloop.new_event_loop()
    raise ValueError(kind)


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    if loop.is_running():  # a test left it running: stop it, then close
        loop.stop()
    if not loop.is_closed():
        loop.close()


def is_goloop(loop) -> bool:
    return isinstance(loop, goloop.Loop)


def scheduled_count(loop) -> int:
    """How many timer handles the loop holds (cancelled ones included)."""
    if is_goloop(loop):
        return loop._stats()[1]
    return len(loop._scheduled)


def run_one_iteration(loop) -> None:
    """Runs exactly one iteration of the loop (stop() before run_forever())."""
    loop.stop()
    loop.run_forever()


def run_script(code: str, *, timeout: float = 30, env: dict | None = None,
               **kw) -> subprocess.CompletedProcess:
    """Runs a Python script in a fresh interpreter and returns the completed process."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    kw.setdefault("cwd", TESTS_DIR)  # not the repository root: see conftest.py
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=full_env, **kw)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_links() -> dict[int, str]:
    """This process's open descriptors and what each is (an fd closed while they are read is
    left out)."""
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return links


def fds_opened_since(before: dict[int, str]) -> dict[int, str]:
    """The descriptors open now that were not open (as the same thing) in fd_links()'s
    before: a leak check that an unrelated descriptor closing meanwhile (a thread of an
    earlier test ending) does not fail."""
    return {fd: link for fd, link in fd_links().items() if before.get(fd) != link}
