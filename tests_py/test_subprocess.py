"""Subprocesses: create_subprocess_exec/shell, pipes, exit codes and signals, timeouts, and
the absence of zombies and leaked descriptors. goloop watches children with a pidfd on its
own poller (no thread per child); asyncio's loop (ThreadedChildWatcher) is the oracle.
"""
from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest

import goloop
from goloop import _unix
from loophelpers import fd_links, fds_opened_since, is_goloop

pytestmark = pytest.mark.timeout(60)

PY = sys.executable
MIB = 1024 * 1024


def run(loop, coro, timeout=30):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def proc_state(pid: int) -> str | None:
    """The /proc state letter of pid ('Z' for a zombie), None once it has been reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # reading races the reap: ESRCH
        return None


def assert_reaped(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while proc_state(pid) is not None:
        assert time.monotonic() < deadline, f"pid {pid} not reaped: state {proc_state(pid)}"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------
# exec / shell, communicate, wait
# ---------------------------------------------------------------------------------------


def test_exec_communicate_exit_code(loop):
    async def main():
        p = await asyncio.create_subprocess_exec(
            PY, "-c", "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d[::-1]);"
                      "sys.stderr.buffer.write(b'err'); sys.exit(7)",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await p.communicate(b"hello")
        return p.pid, out, err, p.returncode

    pid, out, err, rc = run(loop, main())
    assert (out, err, rc) == (b"olleh", b"err", 7)
    assert_reaped(pid)


def test_shell(loop):
    async def main():
        p = await asyncio.create_subprocess_shell(
            "echo $((6*7)); echo oops >&2; exit 3", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await p.communicate()
        return out, await p.wait()

    out, rc = run(loop, main())
    assert out == b"42\noops\n" and rc == 3


def test_wait_without_pipes_and_returncode_attr(loop):
    async def main():
        p = await asyncio.create_subprocess_exec(PY, "-c", "pass")
        assert p.returncode is None or p.returncode == 0
        rc = await p.wait()
        return rc, p.returncode, await p.wait()  # wait() again: the same code

    assert run(loop, main()) == (0, 0, 0)


def test_cwd_env_start_new_session(loop, tmp_path):
    code = ("import os, sys; print(os.getcwd()); print(os.environ.get('GOLOOP_T'));"
            "print(os.getsid(0) == os.getpid())")

    async def main():
        p = await asyncio.create_subprocess_exec(
            PY, "-c", code, stdout=subprocess.PIPE, cwd=str(tmp_path),
            env={"GOLOOP_T": "v1", "PATH": os.environ.get("PATH", "")}, start_new_session=True)
        out, _ = await p.communicate()
        return out.decode().split()

    assert run(loop, main()) == [str(tmp_path), "v1", "True"]


def test_pass_fds(loop):
    r, w = os.pipe()
    try:
        async def main():
            p = await asyncio.create_subprocess_exec(
                PY, "-c", f"import os; os.write({w}, b'through-fd')", pass_fds=(w,))
            return await p.wait()

        assert run(loop, main()) == 0
        assert os.read(r, 100) == b"through-fd"
    finally:
        os.close(r)
        os.close(w)


def test_exec_missing_program(loop):
    async def main():
        await asyncio.create_subprocess_exec("/nonexistent/goloop-test-program")

    with pytest.raises(FileNotFoundError):
        run(loop, main())


# ---------------------------------------------------------------------------------------
# large outputs, stdin fed while output is read
# ---------------------------------------------------------------------------------------


def test_10mib_stdout_and_stderr_at_once(loop):
    code = ("import sys, threading\n"
            "n = 10 * 1024 * 1024\n"
            "t = threading.Thread(target=lambda: sys.stderr.buffer.write(b'e' * n))\n"
            "t.start(); sys.stdout.buffer.write(b'o' * n); t.join()\n")

    async def main():
        p = await asyncio.create_subprocess_exec(PY, "-c", code, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE)
        out, err = await p.communicate()
        return out, err, p.returncode

    out, err, rc = run(loop, main())
    assert rc == 0
    assert len(out) == 10 * MIB and out.count(b"o") == 10 * MIB
    assert len(err) == 10 * MIB and err.count(b"e") == 10 * MIB


def test_stdin_fed_while_output_read(loop):
    # cat echoes as it reads: feeding 10 MiB without reading concurrently would deadlock
    async def main():
        p = await asyncio.create_subprocess_exec("cat", stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE)
        chunk = bytes(range(256)) * 256  # 64 KiB

        async def feed():
            for _ in range(160):
                p.stdin.write(chunk)
                await p.stdin.drain()
            p.stdin.close()
            await p.stdin.wait_closed()

        async def drain():
            got = bytearray()
            while data := await p.stdout.read(1 << 16):
                got += data
            return bytes(got)

        _, got = await asyncio.gather(feed(), drain())
        return got, await p.wait(), chunk

    got, rc, chunk = run(loop, main())
    assert rc == 0 and len(got) == 160 * len(chunk) and got == chunk * 160


def test_readline_streaming(loop):
    async def main():
        p = await asyncio.create_subprocess_exec(
            PY, "-u", "-c", "import time\nfor i in range(5):\n print(i)\n time.sleep(0.01)",
            stdout=subprocess.PIPE)
        lines = [int(line) async for line in p.stdout]
        return lines, await p.wait()

    assert run(loop, main()) == ([0, 1, 2, 3, 4], 0)


# ---------------------------------------------------------------------------------------
# signals, kill, terminate, timeouts
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["kill", "terminate", "send_signal"])
def test_kill_terminate_send_signal(loop, how):
    expected = {"kill": -signal.SIGKILL, "terminate": -signal.SIGTERM,
                "send_signal": -signal.SIGUSR1}[how]

    async def main():
        p = await asyncio.create_subprocess_exec("sleep", "30")
        await asyncio.sleep(0.05)
        if how == "send_signal":
            p.send_signal(signal.SIGUSR1)
        else:
            getattr(p, how)()
        return p.pid, await p.wait()

    pid, rc = run(loop, main())
    assert rc == expected
    assert_reaped(pid)


def test_child_killed_by_signal_it_raises(loop):
    async def main():
        p = await asyncio.create_subprocess_exec(
            PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)")
        return await p.wait()

    assert run(loop, main()) == -signal.SIGABRT


def test_signal_after_exit(loop):
    async def main():
        p = await asyncio.create_subprocess_exec(PY, "-c", "pass")
        await p.wait()
        # asyncio.subprocess.Process: after the exit, signals are refused
        with pytest.raises(ProcessLookupError):
            p.kill()
        return p.returncode

    assert run(loop, main()) == 0


def test_wait_for_timeout_then_kill(loop):
    async def main():
        p = await asyncio.create_subprocess_exec("sleep", "30", stdout=subprocess.PIPE)
        t0 = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.wait(), 0.1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.communicate(), 0.1)
        elapsed = time.monotonic() - t0
        p.kill()
        return p.pid, await p.wait(), elapsed

    pid, rc, elapsed = run(loop, main())
    assert rc == -signal.SIGKILL and elapsed < 5
    assert_reaped(pid)


def test_many_children_concurrently(loop):
    async def main():
        procs = [await asyncio.create_subprocess_exec(PY, "-c", f"import sys; sys.exit({i})",
                                                      stdout=subprocess.PIPE)
                 for i in range(20)]
        rcs = await asyncio.gather(*(p.wait() for p in procs))
        return [p.pid for p in procs], rcs

    pids, rcs = run(loop, main())
    assert rcs == list(range(20))
    for pid in pids:
        assert_reaped(pid)


# ---------------------------------------------------------------------------------------
# resources: no zombie, no descriptor, no thread per child
# ---------------------------------------------------------------------------------------


def test_no_fd_left_behind(loop):
    async def main():
        for _ in range(5):
            p = await asyncio.create_subprocess_exec(PY, "-c", "print('x')", stdin=subprocess.PIPE,
                                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            await p.communicate(b"")
        p = await asyncio.create_subprocess_exec("sleep", "30", stdout=subprocess.PIPE)
        p.kill()
        await p.wait()

    run(loop, asyncio.sleep(0))
    before = fd_links()
    run(loop, main())
    run(loop, asyncio.sleep(0.01))  # let transports' connection_lost run
    gc.collect()
    # none opened and kept (one of an earlier test's closing meanwhile is not this test's)
    assert fds_opened_since(before) == {}


def test_goloop_uses_no_thread_per_child(gloop):
    if not _unix._pidfd_available():
        pytest.skip("pidfd_open() unavailable: asyncio's watcher is used")

    async def main():
        before = threading.active_count()
        procs = [await asyncio.create_subprocess_exec("sleep", "0.2") for _ in range(5)]
        during = threading.active_count()
        rcs = await asyncio.gather(*(p.wait() for p in procs))
        return before, during, rcs

    before, during, rcs = run(gloop, main())
    assert during == before and rcs == [0] * 5
    assert not gloop._pidfd_children


def test_goloop_ignores_other_sigchld_users(gloop):
    # Another SIGCHLD handler (and waitpid of its own children) does not disturb goloop.
    if not _unix._pidfd_available():
        pytest.skip("pidfd_open() unavailable")
    got = []
    old = signal.signal(signal.SIGCHLD, lambda *a: got.append(a[0]))
    try:
        async def main():
            other = subprocess.Popen(["true"])  # somebody else's child, reaped by them
            p = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(5)")
            rc = await p.wait()
            other.wait()
            return rc, other.returncode

        assert run(gloop, main()) == (5, 0)
    finally:
        signal.signal(signal.SIGCHLD, old)


def test_pidfd_unavailable_falls_back_to_a_waitpid_thread(gloop, monkeypatch):
    monkeypatch.setattr(_unix, "_pidfd_supported", False)
    names = []
    real_start = threading.Thread.start

    def start(self):
        names.append(self.name)
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)

    async def main():
        p = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(4)",
                                                 stdout=subprocess.PIPE)
        out, _ = await p.communicate()
        return p.pid, await p.wait()

    pid, rc = run(gloop, main())
    assert rc == 4
    assert not gloop._pidfd_children
    assert f"goloop-waitpid-{pid}" in names
    assert_reaped(pid)


def test_goloop_never_consults_the_policys_child_watcher(gloop):
    # asyncio 3.11-3.13 ask the policy's child watcher; goloop watches its children itself
    # (and 3.14 has no watchers at all), so a policy whose watcher fails changes nothing.
    if sys.version_info >= (3, 14):
        pytest.skip("no child watchers in 3.14")
    import warnings

    class Policy(asyncio.DefaultEventLoopPolicy):
        def get_child_watcher(self):
            raise AssertionError("goloop asked the policy for a child watcher")

    old = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(Policy())
    try:
        async def main():
            p = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(7)")
            return await p.wait()

        assert run(gloop, main()) == 7
    finally:
        asyncio.set_event_loop_policy(old)


def test_close_loop_with_children_running_leaves_no_zombie(loop_kind):
    from loophelpers import make_loop
    if loop_kind == "asyncio" and sys.version_info >= (3, 12):
        pytest.skip("asyncio 3.12+'s default PidfdChildWatcher stops watching when its loop "
                    "closes; goloop keeps ThreadedChildWatcher's (3.11) behaviour")

    lp = make_loop(loop_kind)
    try:
        async def main():
            fast = await asyncio.create_subprocess_exec("sleep", "0.3")
            slow = await asyncio.create_subprocess_exec("sleep", "30")
            return fast, slow

        fast, slow = run(lp, main())
        pids = (fast.pid, slow.pid)
    finally:
        lp.close()
    assert lp.is_closed()
    # like asyncio's watcher, goloop goes on waiting for the children and reaps them on exit
    assert_reaped(pids[0])
    assert proc_state(pids[1]) not in (None, "Z")
    os.kill(pids[1], signal.SIGKILL)
    assert_reaped(pids[1])
    fast._transport.close()  # no pipes: closing after the loop is fine
    slow._transport.close()


def test_runner_exits_with_child_left_running(loop_kind):
    # asyncio.Runner closes the loop while a child runs: as with asyncio's watcher thread,
    # the child goes on running (nothing kills it) and is reaped when it exits.
    from loophelpers import make_loop
    if loop_kind == "asyncio" and sys.version_info >= (3, 12):
        pytest.skip("asyncio 3.12+'s default PidfdChildWatcher stops watching when its loop "
                    "closes; goloop keeps ThreadedChildWatcher's (3.11) behaviour")

    pid_box = []

    async def main():
        p = await asyncio.create_subprocess_exec("sleep", "30")
        pid_box.append(p.pid)
        await asyncio.sleep(0.01)

    with asyncio.Runner(loop_factory=lambda: make_loop(loop_kind)) as runner:
        runner.run(main())
    gc.collect()
    pid = pid_box[0]
    time.sleep(0.05)
    assert proc_state(pid) not in (None, "Z")
    os.kill(pid, signal.SIGKILL)
    assert_reaped(pid)
    with warnings.catch_warnings():  # the never-closed transport, once the watcher drops it
        warnings.simplefilter("ignore", ResourceWarning)
        time.sleep(0.05)
        gc.collect()


def test_transport_close_kills_running_child(loop):
    async def main():
        tr, proto = await loop.subprocess_exec(asyncio.SubprocessProtocol, "sleep", "30")
        pid = tr.get_pid()
        tr.close()
        rc = await tr._wait()
        return pid, rc, tr.get_returncode()

    pid, rc, rc2 = run(loop, main())
    assert rc == -signal.SIGKILL and rc2 == rc
    assert_reaped(pid)


def test_subprocess_protocol_callbacks_order(loop):
    events = []

    class Proto(asyncio.SubprocessProtocol):
        def __init__(self):
            self.done = loop.create_future()

        def connection_made(self, transport):
            events.append("made")

        def pipe_data_received(self, fd, data):
            events.append(("data", fd, data))

        def pipe_connection_lost(self, fd, exc):
            events.append(("pipe_lost", fd))

        def process_exited(self):
            events.append("exited")

        def connection_lost(self, exc):
            events.append("lost")
            self.done.set_result(None)

    async def main():
        tr, proto = await loop.subprocess_exec(Proto, PY, "-c", "print('hi', end='')",
                                               stdin=None, stderr=None)
        await proto.done
        rc = tr.get_returncode()
        tr.close()
        return rc

    assert run(loop, main()) == 0
    assert events[0] == "made" and events[-1] == "lost"
    assert ("data", 1, b"hi") in events and ("pipe_lost", 1) in events and "exited" in events


def test_goloop_waitpid_fallback_without_waitid_pidfd(gloop, monkeypatch):
    # Linux 5.3 has pidfd_open() but not waitid(P_PIDFD): waitpid(pid, WNOHANG) is used
    if not _unix._pidfd_available():
        pytest.skip("pidfd_open() unavailable")
    monkeypatch.setattr(_unix, "_waitid_pidfd", False)

    async def main():
        p = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(9)")
        q = await asyncio.create_subprocess_exec("sleep", "30")
        q.kill()
        return p.pid, await p.wait(), await q.wait()

    pid, rc, rc2 = run(gloop, main())
    assert (rc, rc2) == (9, -signal.SIGKILL)
    assert_reaped(pid)


def test_goloop_pidfd_open_failure_uses_a_waitpid_thread(gloop, monkeypatch, caplog):
    if not _unix._pidfd_available():
        pytest.skip("pidfd_open() unavailable")

    def no_pidfd(pid, flags=0):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)

    async def main():
        p = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(6)")
        return await p.wait()

    assert run(gloop, main()) == 6
    assert "pidfd_open" in caplog.text


def test_child_reaped_by_transport_close_before_loop_notices(loop, caplog):
    # The child exits; before the loop learns of it, close() runs Popen.poll(), which reaps
    # it. The exit is still reported, with the right code and without asyncio's warning.
    if not is_goloop(loop):
        pytest.skip("asyncio's outcome is 255 with a warning in 3.12+ (its PidfdChildWatcher "
                    "finds the status read by Popen.poll()), and in 3.11 a race: the real code "
                    "if its watcher thread's waitpid() reaps the child before Popen.poll() "
                    "does, else 255 (seen on a loaded machine); goloop reports the real code")
    async def main():
        tr, _ = await loop.subprocess_exec(asyncio.SubprocessProtocol, PY, "-c",
                                           "import sys; sys.exit(3)")
        pid = tr.get_pid()
        deadline = time.monotonic() + 10
        while proc_state(pid) not in ("Z", None) and time.monotonic() < deadline:
            time.sleep(0.005)  # without yielding to the loop
        tr.close()
        return pid, await tr._wait()

    pid, rc = run(loop, main())
    assert rc == 3
    assert_reaped(pid)
    assert "Unknown child process" not in caplog.text


def test_waitpid_thread_child_reaped_by_close_first(gloop, monkeypatch, caplog):
    # the thread fallback: Popen.poll() (from close()) reaps the child before the thread's
    # waitpid() does; the real code is still reported, without asyncio's 255 warning
    monkeypatch.setattr(_unix, "_pidfd_supported", False)

    async def main():
        tr, _ = await gloop.subprocess_exec(asyncio.SubprocessProtocol, PY, "-c",
                                            "import sys; sys.exit(3)")
        pid = tr.get_pid()
        deadline = time.monotonic() + 10
        while proc_state(pid) not in ("Z", None) and time.monotonic() < deadline:
            time.sleep(0.005)
        tr.close()
        return pid, await tr._wait()

    pid, rc = run(gloop, main())
    assert rc == 3
    assert_reaped(pid)
    assert "Unknown child process" not in caplog.text


def _waiting_thread(pid):
    names = (f"goloop-waitpid-{pid}",)
    for t in threading.enumerate():
        if t.name in names:
            return t
    return None


def test_threaded_wait_keeps_the_pid_reserved_until_the_exit_is_reported(gloop, monkeypatch):
    """Without a pidfd a thread waits for the child; it must not reap it (gh-127049): until
    the loop's thread reaps the child and reports the exit in one step, the pid stays a
    zombie, so a send_signal() in between cannot reach a process that reused the pid."""
    monkeypatch.setattr(_unix, "_pidfd_available", lambda: False)

    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import time; time.sleep(60)")
        thread = _waiting_thread(proc.pid)
        assert thread is not None
        proc.kill()
        thread.join(30)  # the thread saw the exit; the loop has not run since
        assert not thread.is_alive()
        assert proc.returncode is None
        # still unreaped: waitid() raises ChildProcessError for a reaped (or recycled) pid
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        proc.send_signal(signal.SIGKILL)  # safe: the pid is still the child's
        assert await proc.wait() == -signal.SIGKILL

    gloop.run_until_complete(main())


@pytest.mark.skipif(sys.version_info < (3, 14), reason="3.14's loop-owned child watcher")
def test_goloop_uses_asyncios_threaded_watcher_where_asyncio_would(monkeypatch):
    """3.14+: where asyncio's loop finds no pidfd (unix_events.can_use_pidfd()) it makes a
    threaded child watcher of its own (loop._watcher); goloop's loop then waits with it."""
    from asyncio import unix_events

    monkeypatch.setattr(unix_events, "can_use_pidfd", lambda: False)
    loop = goloop.new_event_loop()
    try:
        async def main():
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
            assert loop._watcher._threads.get(proc.pid) is not None
            assert await proc.wait() == 0

        loop.run_until_complete(main())
    finally:
        loop.close()
