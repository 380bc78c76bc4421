"""Helpers for goloop's networking tests (test_tcp_echo, test_transports, test_sock_ops).

- ``no_fd_leak``: a fixture failing the test when /proc/self/fd holds more entries after
  the test (loop closed) than before it.
- ``goloop_xfail(reason)``: parametrizes ``loop_kind`` so that only the goloop run is a
  strict xfail (a known goloop bug), the asyncio run staying the oracle.
- ``short_unix_path()``: a socket path short enough for AF_UNIX (108 bytes).
- ``outcome(loop, factory)``: runs a coroutine on ``loop`` and returns ("ok", value) or
  (exception type, message), to compare goloop against a fresh asyncio loop.
"""
from __future__ import annotations

import asyncio
import gc
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import threading
import time

import pytest

import goloop
from loophelpers import close_loop, fd_links, fds_opened_since, open_fds

_warmed = False


def raise_nofile(target: int = 8192) -> None:
    """Raises RLIMIT_NOFILE's soft limit towards the hard limit (at least ``target``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, target)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _warm_up() -> None:
    # The first goloop loop loads the Go runtime, which may keep descriptors of its own for
    # the whole process: load it once before any descriptor is counted.
    global _warmed
    if not _warmed:
        lp = goloop.new_event_loop()
        lp.run_until_complete(asyncio.sleep(0))
        close_loop(lp)
        _warmed = True


_go_netpoll_seen = False


def _is_go_runtime_netpoll(extra: dict[int, str]) -> bool:
    """True when the new descriptors are the Go runtime's own netpoller: one epoll whose only
    registered descriptor is one new eventfd. The Go runtime creates that pair lazily (for
    example when its background scavenger first sleeps on a timer) and keeps it for the life
    of the process: it is not a per-test leak, and it appears at most once."""
    global _go_netpoll_seen
    if _go_netpoll_seen or len(extra) != 2:
        return False
    ep = [fd for fd, t in extra.items() if t == "anon_inode:[eventpoll]"]
    ev = [fd for fd, t in extra.items() if t == "anon_inode:[eventfd]"]
    if len(ep) != 1 or len(ev) != 1:
        return False
    try:
        with open(f"/proc/self/fdinfo/{ep[0]}") as f:
            tfds = [int(line.split()[1]) for line in f if line.startswith("tfd:")]
    except OSError:
        return False
    if tfds == [ev[0]]:
        _go_netpoll_seen = True
        return True
    return False


@pytest.fixture
def no_fd_leak():
    """Fails the test when it leaves a file descriptor open (checked after the loop closes)."""
    _warm_up()
    before = fd_links()
    n0 = open_fds()
    yield
    n1 = open_fds()
    if n1 > n0:
        extra = fds_opened_since(before)
        if n1 == n0 + 2 and _is_go_runtime_netpoll(extra):
            return
        gc.collect()  # only to build a useful message; the leak is reported anyway
        extra = fds_opened_since(before)
        pytest.fail(f"file descriptors leaked: {n0} before, {n1} after: {extra}")


def goloop_xfail(reason: str):
    """Runs the test on both loops; the goloop run is a strict xfail (a known goloop bug)."""
    return pytest.mark.parametrize("loop_kind", [
        "asyncio",
        pytest.param("goloop", marks=pytest.mark.xfail(strict=True, reason=f"goloop bug: {reason}")),
    ])


class ShortTempDir:
    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="gl", dir="/tmp")

    def sock(self, name: str = "s") -> str:
        return os.path.join(self.path, name)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def unix_dir():
    d = ShortTempDir()
    try:
        yield d
    finally:
        d.cleanup()


def outcome(loop: asyncio.AbstractEventLoop, factory):
    """Runs factory(loop) (a coroutine) to completion: ("ok", result) or (type, str(exc))."""
    try:
        return ("ok", loop.run_until_complete(factory(loop)))
    except Exception as exc:  # noqa: BLE001 - the point is to capture it
        return (type(exc), str(exc))


def asyncio_outcome(factory):
    """outcome() on a fresh asyncio selector loop: the oracle."""
    lp = asyncio.SelectorEventLoop()
    try:
        return outcome(lp, factory)
    finally:
        close_loop(lp)


def run(loop, coro, timeout: float = 30):
    """Runs a coroutine on the loop, bounded by a timeout."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


# The source of read_body(receive), the whole body of an ASGI HTTP request, for the apps
# tests write to a file for a server subprocess.
ASGI_READ_BODY = textwrap.dedent('''
    async def read_body(receive):
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                return body
''')


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(proc, port: int, what: str, timeout: float = 30) -> None:
    """Waits until a server subprocess accepts on 127.0.0.1:port; fails the test with its
    output if it exits or the timeout passes first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.communicate()[0]
                pytest.fail(f"{what} did not start:\n" + (out.decode(errors="replace") if out else ""))
            time.sleep(0.1)


def interrupt(proc, timeout: float = 20) -> str:
    """Sends a server subprocess SIGINT and returns its output (stdout, stderr merged into it),
    killing it if it has not exited within timeout."""
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.decode(errors="replace") if out else ""


class OutputLines:
    """The lines a subprocess writes to stream (a text pipe), collected by a thread as they
    come: wait_for() a pattern, count() or log() them."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.eof = False
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.reader.start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, pattern, count=1, timeout=30):
        """The first count matches (re.search) of pattern, once there are as many lines that
        match; AssertionError with the output if the stream ends or the timeout passes first."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [m for m in map(rx.search, self.lines) if m]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    raise AssertionError(f"no {count}x {pattern!r} in the output:\n" + "\n".join(self.lines))
                self.cond.wait(min(left, 0.2))

    def count(self, pattern):
        with self.cond:
            return sum(1 for line in self.lines if re.search(pattern, line))

    def log(self):
        """The output so far (all of it once the stream ended: reader.join())."""
        with self.cond:
            return "\n".join(self.lines)
