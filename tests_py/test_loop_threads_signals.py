"""Threads and signals: call_soon_threadsafe under contention and as a wake-up, the
debug-mode thread check, loops running in other threads, add_signal_handler, and
KeyboardInterrupt delivered while the loop sleeps in its poller.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import goloop
from loophelpers import LOOP_KINDS, TESTS_DIR, is_goloop, make_loop, run_one_iteration

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------------------------------
# call_soon_threadsafe
# ---------------------------------------------------------------------------------------


def test_call_soon_threadsafe_many_threads_none_lost(loop):
    nthreads, per_thread = 8, 10_000
    got = [[] for _ in range(nthreads)]
    start = threading.Barrier(nthreads)

    def producer(k):
        start.wait()
        append = got[k].append
        for i in range(per_thread):
            loop.call_soon_threadsafe(append, i)

    def supervisor(threads):
        for t in threads:
            t.join()
        loop.call_soon_threadsafe(loop.stop)  # queued after every producer's last call

    def begin():
        threads = [threading.Thread(target=producer, args=(k,)) for k in range(nthreads)]
        for t in threads:
            t.start()
        threading.Thread(target=supervisor, args=(threads,)).start()

    loop.call_soon(begin)
    loop.run_forever()
    for k in range(nthreads):
        assert got[k] == list(range(per_thread)), f"thread {k}: lost or reordered callbacks"


def test_call_soon_threadsafe_before_run(loop):
    calls = []
    t = threading.Thread(target=lambda: [loop.call_soon_threadsafe(calls.append, i) for i in range(100)])
    t.start()
    t.join()
    loop.call_soon_threadsafe(loop.stop)
    loop.run_forever()
    assert calls == list(range(100))


def test_call_soon_threadsafe_returns_handle(loop):
    calls = []
    h = loop.call_soon_threadsafe(calls.append, 1)
    assert not h.cancelled()
    h.cancel()
    loop.call_soon_threadsafe(loop.stop)
    loop.run_forever()
    assert calls == []


needs_314 = pytest.mark.skipif(sys.version_info < (3, 14),
                               reason="3.14's threadsafe handle (events._ThreadSafeHandle)")


@needs_314
@pytest.mark.parametrize("op", ["cancel", "cancelled"])
def test_threadsafe_handle_waits_for_its_running_callback(loop, op):
    """3.14: cancel() and cancelled() of call_soon_threadsafe's handle, from another thread,
    return only after the running callback returned (asyncio's _ThreadSafeHandle lock)."""
    from asyncio import events

    started, finished = threading.Event(), threading.Event()
    seen = []

    def callback():
        started.set()
        time.sleep(0.2)  # a window in which an unlocked cancel() would return first
        finished.set()

    def other():
        h = loop.call_soon_threadsafe(callback)
        seen.append(isinstance(h, events._ThreadSafeHandle))
        started.wait(10)
        seen.append(getattr(h, op)())
        seen.append(finished.is_set())
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=other)
    t.start()
    loop.call_later(30, loop.stop)
    loop.run_forever()
    t.join()
    assert seen == [True, None if op == "cancel" else False, True]


@needs_314
def test_threadsafe_handle_cancelled_by_its_own_callback(loop):
    """The callback may cancel its own handle (the lock is reentrant): it runs to its end."""
    box = []

    def callback():
        box[0].cancel()
        box.append("ran")
        loop.stop()

    box.append(loop.call_soon_threadsafe(callback))
    loop.call_later(30, loop.stop)
    loop.run_forever()
    assert box[1:] == ["ran"] and box[0].cancelled()


@needs_314
def test_threadsafe_handle_cancelled_before_it_runs(loop):
    calls = []
    h = loop.call_soon_threadsafe(calls.append, 1)
    t = threading.Thread(target=h.cancel)
    t.start()
    t.join()
    assert h.cancelled()
    loop.call_soon_threadsafe(loop.stop)
    loop.run_forever()
    assert calls == []


@pytest.mark.parametrize("pending_timer", [True, False], ids=["long-timer", "no-timer"])
def test_call_soon_threadsafe_wakes_blocked_loop(loop, pending_timer):
    if pending_timer:
        loop.call_later(30, loop.stop)  # the loop sleeps until this one otherwise
    woke = []

    def wake():
        time.sleep(0.1)  # let the loop block in its poller
        loop.call_soon_threadsafe(lambda: (woke.append(time.monotonic()), loop.stop()))

    t = threading.Thread(target=wake)
    start = time.monotonic()
    t.start()
    loop.run_forever()
    t.join()
    assert woke
    assert time.monotonic() - start < 5


def test_threadsafe_wake_repeatedly(loop):
    # many separate wake-ups, each from a blocked poll
    n = 20
    done = []

    def producer():
        for i in range(n):
            time.sleep(0.005)
            loop.call_soon_threadsafe(done.append, i)
        loop.call_soon_threadsafe(loop.stop)

    loop.call_later(30, loop.stop)
    t = threading.Thread(target=producer)
    t.start()
    start = time.monotonic()
    loop.run_forever()
    t.join()
    assert done == list(range(n))
    assert time.monotonic() - start < 10


def test_future_resolved_from_thread(loop):
    async def main():
        fut = loop.create_future()

        def worker():
            time.sleep(0.02)
            loop.call_soon_threadsafe(fut.set_result, "from-thread")

        threading.Thread(target=worker).start()
        return await asyncio.wait_for(fut, 10)

    assert loop.run_until_complete(main()) == "from-thread"


def test_run_coroutine_threadsafe(loop):
    async def add(a, b):
        await asyncio.sleep(0.001)
        return a + b

    results = []

    def client():
        futs = [asyncio.run_coroutine_threadsafe(add(i, i), loop) for i in range(50)]
        results.extend(f.result(10) for f in futs)
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=client)
    loop.call_soon(t.start)
    loop.call_later(30, loop.stop)
    loop.run_forever()
    t.join()
    assert results == [2 * i for i in range(50)]


# ---------------------------------------------------------------------------------------
# the debug-mode thread check
# ---------------------------------------------------------------------------------------


def _from_other_thread(f):
    """Runs f in another thread and returns the exception it raised (or None)."""
    box = []

    def run():
        try:
            f()
        except BaseException as e:  # noqa: BLE001
            box.append(e)
        else:
            box.append(None)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    return box[0]


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at"])
def test_debug_thread_check(loop, method):
    loop.set_debug(True)
    results = []
    calls = []

    def op():
        if method == "call_soon":
            loop.call_soon(calls.append, "bad")
        elif method == "call_later":
            loop.call_later(0, calls.append, "bad")
        else:
            loop.call_at(loop.time(), calls.append, "bad")

    def cb():
        results.append(_from_other_thread(op))
        loop.stop()

    loop.call_soon(cb)
    loop.run_forever()
    assert isinstance(results[0], RuntimeError)
    assert "thread" in str(results[0])
    # the refused callback was not queued
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert calls == []


def test_debug_thread_check_not_when_stopped(loop):
    loop.set_debug(True)
    calls = []
    assert _from_other_thread(lambda: loop.call_soon(calls.append, 1)) is None
    run_one_iteration(loop)
    assert calls == [1]


def test_debug_threadsafe_allowed_from_other_thread(loop):
    loop.set_debug(True)
    results = []

    def cb():
        results.append(_from_other_thread(lambda: loop.call_soon_threadsafe(loop.stop)))

    loop.call_soon(cb)
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert results == [None]


def test_no_thread_check_without_debug(loop):
    # asyncio only checks in debug mode; goloop matches (no false positives)
    results = []

    def cb():
        results.append(_from_other_thread(lambda: loop.call_soon(lambda: None)))
        loop.stop()

    loop.call_soon(cb)
    loop.run_forever()
    assert results == [None]


# ---------------------------------------------------------------------------------------
# loops in other threads
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_loop_running_in_other_thread(kind):
    loop = make_loop(kind)
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    t = threading.Thread(target=run)
    t.start()
    try:
        assert ready.wait(10)
        fut = asyncio.run_coroutine_threadsafe(asyncio.sleep(0.01, "slept"), loop)
        assert fut.result(10) == "slept"
        # a signal handler can only be added from the main thread
        fut = asyncio.run_coroutine_threadsafe(_add_sig(loop), loop)
        assert isinstance(fut.result(10), RuntimeError)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()
    assert not t.is_alive()


async def _add_sig(loop):
    try:
        loop.add_signal_handler(signal.SIGUSR2, print)
    except RuntimeError as e:
        return e
    return None


def test_many_goloop_loops_in_parallel_threads():
    results = {}

    async def main(k):
        total = 0
        for i in range(50):
            await asyncio.sleep(0.001)
            total += i
        fut = asyncio.get_running_loop().run_in_executor(None, lambda: k * 10)
        return total + await fut

    def worker(k):
        results[k] = goloop.run(main(k))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {k: sum(range(50)) + k * 10 for k in range(6)}


# ---------------------------------------------------------------------------------------
# signal handlers
# ---------------------------------------------------------------------------------------


@pytest.fixture
def clean_sigusr():
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(-1)


def test_add_signal_handler_runs(loop, clean_sigusr):
    got = []

    def handler(*args):
        got.append(args)
        loop.stop()

    loop.add_signal_handler(signal.SIGUSR1, handler, "a", 1)
    loop.call_later(0.01, os.kill, os.getpid(), signal.SIGUSR1)
    loop.call_later(10, loop.stop)
    loop.run_forever()
    assert got == [("a", 1)]
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert loop.remove_signal_handler(signal.SIGUSR1) is False
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_signal_from_other_thread_wakes_blocked_loop(loop, clean_sigusr):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, lambda: (got.append(time.monotonic()), loop.stop()))
    loop.call_later(30, loop.stop)

    def sender():
        time.sleep(0.1)  # the loop is blocked in its poller by then
        os.kill(os.getpid(), signal.SIGUSR1)

    t = threading.Thread(target=sender)
    start = time.monotonic()
    t.start()
    loop.run_forever()
    t.join()
    assert got
    assert time.monotonic() - start < 5
    loop.remove_signal_handler(signal.SIGUSR1)


def test_signal_handler_replaced_and_many_signals(loop, clean_sigusr):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "old")
    loop.add_signal_handler(signal.SIGUSR1, got.append, "new")

    def send():
        os.kill(os.getpid(), signal.SIGUSR1)

    loop.call_later(0.01, send)
    loop.call_later(0.05, send)
    loop.call_later(0.15, loop.stop)
    loop.run_forever()
    assert got == ["new", "new"]
    loop.remove_signal_handler(signal.SIGUSR1)


def test_signal_handler_two_signals(loop, clean_sigusr):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, 1)
    loop.add_signal_handler(signal.SIGUSR2, got.append, 2)
    loop.call_later(0.01, os.kill, os.getpid(), signal.SIGUSR2)
    loop.call_later(0.03, os.kill, os.getpid(), signal.SIGUSR1)
    loop.call_later(0.1, loop.stop)
    loop.run_forever()
    assert got == [2, 1]
    assert loop.remove_signal_handler(signal.SIGUSR1)
    assert loop.remove_signal_handler(signal.SIGUSR2)


def test_signal_handler_exception_reaches_handler(loop, clean_sigusr):
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))

    def bad():
        raise ValueError("in signal handler")

    loop.add_signal_handler(signal.SIGUSR1, bad)
    loop.call_later(0.01, os.kill, os.getpid(), signal.SIGUSR1)
    loop.call_later(0.1, loop.stop)
    loop.run_forever()
    assert len(contexts) == 1 and isinstance(contexts[0]["exception"], ValueError)
    loop.remove_signal_handler(signal.SIGUSR1)


def test_invalid_signals(loop, clean_sigusr):
    with pytest.raises(ValueError):
        loop.add_signal_handler(signal.NSIG + 1, print)
    with pytest.raises(ValueError):
        loop.add_signal_handler(0, print)
    with pytest.raises(TypeError):
        loop.add_signal_handler("SIGUSR1", print)
    with pytest.raises(RuntimeError):
        loop.add_signal_handler(signal.SIGKILL, print)
    with pytest.raises(RuntimeError):
        loop.add_signal_handler(signal.SIGSTOP, print)
    with pytest.raises(ValueError):
        loop.remove_signal_handler(signal.NSIG + 1)
    assert loop.remove_signal_handler(signal.SIGUSR2) is False

    async def coro_fn():
        pass

    with pytest.raises(TypeError):
        loop.add_signal_handler(signal.SIGUSR1, coro_fn)
    assert signal.getsignal(signal.SIGUSR1) is not None
    assert loop.remove_signal_handler(signal.SIGUSR1) is False


def test_sigint_handler_added_and_restored(loop):
    got = []
    loop.add_signal_handler(signal.SIGINT, lambda: (got.append("sigint"), loop.stop()))
    try:
        loop.call_later(0.01, os.kill, os.getpid(), signal.SIGINT)
        loop.call_later(10, loop.stop)
        loop.run_forever()
    finally:
        assert loop.remove_signal_handler(signal.SIGINT) is True
        signal.set_wakeup_fd(-1)
    assert got == ["sigint"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_signal_handler_on_closed_loop(loop, clean_sigusr):
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_signal_handler(signal.SIGUSR1, print)


def test_close_removes_signal_handlers(loop, clean_sigusr):
    loop.add_signal_handler(signal.SIGUSR1, print)
    assert signal.getsignal(signal.SIGUSR1) != signal.SIG_DFL
    loop.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_wakeup_fd_restored_after_run(gloop):
    # goloop installs its self-pipe as the wakeup fd while it runs (so signals wake the
    # poller) and must leave none behind
    assert signal.set_wakeup_fd(-1) == -1
    gloop.run_until_complete(asyncio.sleep(0))
    assert signal.set_wakeup_fd(-1) == -1


def test_wakeup_fd_of_others_left_alone(gloop):
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w)
        gloop.run_until_complete(asyncio.sleep(0))
        assert signal.set_wakeup_fd(-1) == w
    finally:
        signal.set_wakeup_fd(-1)
        os.close(r)
        os.close(w)


# ---------------------------------------------------------------------------------------
# KeyboardInterrupt while blocked in the poller (in a subprocess)
# ---------------------------------------------------------------------------------------

SIGINT_SCRIPTS = {
    "goloop.run": """
        import asyncio, goloop

        async def main():
            print("ready", flush=True)
            await asyncio.sleep(30)

        goloop.run(main())
    """,
    "run_forever-timer": """
        import goloop
        loop = goloop.new_event_loop()
        loop.call_soon(lambda: print("ready", flush=True))
        loop.call_later(30, loop.stop)
        try:
            loop.run_forever()
        finally:
            loop.close()
    """,
    "run_forever-no-timer": """
        import goloop
        loop = goloop.new_event_loop()
        loop.call_soon(lambda: print("ready", flush=True))
        try:
            loop.run_forever()
        finally:
            loop.close()
    """,
    "busy-callbacks": """
        import goloop
        loop = goloop.new_event_loop()
        state = {"n": 0}

        def chain():
            state["n"] += 1
            if state["n"] == 1000:
                print("ready", flush=True)
            loop.call_soon(chain)

        loop.call_soon(chain)
        loop.run_forever()
    """,
    "asyncio.run-policy": """
        import asyncio, goloop
        goloop.install()

        async def main():
            print("ready", flush=True)
            await asyncio.sleep(30)

        asyncio.run(main())
    """,
}


@pytest.mark.timeout(40)
@pytest.mark.parametrize("script", list(SIGINT_SCRIPTS))
def test_keyboard_interrupt_while_blocked(script):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SIGINT_SCRIPTS[script])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=TESTS_DIR)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read()
        time.sleep(0.2)  # let it block in the poller
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err, err
    assert elapsed < 10, f"took {elapsed:.1f}s to react to SIGINT"
