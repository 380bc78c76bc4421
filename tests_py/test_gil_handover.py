"""Other Python threads get the GIL while the loop is busy (they starved once).

A loop whose ready queue never empties must still let waiting threads run, as asyncio's
loop does by releasing the GIL around each iteration's poll. Without that, a waiting thread
gets the GIL only when CPython's switch interval forces a hand-over.

The tests set the switch interval to 1,000 s, so no forced hand-over happens while they run:
a thread waiting for the GIL gets it only because the loop lets it go. What they assert is
that the other thread's work gets done at all (a count of turns, or results), not how fast:
a loop that never releases the GIL leaves the thread with nothing until the test's deadline
(far beyond what any load makes of a hand-over, which takes well under a millisecond on a
quiet machine), and load cannot make a loop that does release it fail.
test_a_gil_holder_starves_the_other_thread shows the method can fail: a busy holder that
never releases the GIL gives the thread no turn at all.
"""
from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

# no forced hand-over during a test (the interval is in µs internally: 1,000 s fits)
SWITCH_INTERVAL = 1000.0
# the most a test waits for the other thread's work: what it checks is that the work is
# done, and a loop that does not hand the GIL over never lets it be
DEADLINE = 30.0

# A free-threaded build without the GIL has nothing to hand over (and its threads run at
# once): there these tests would check nothing.
pytestmark = pytest.mark.skipif(not getattr(sys, "_is_gil_enabled", lambda: True)(),
                                reason="no GIL in this interpreter")


@pytest.fixture
def no_forced_switch():
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


async def _spin(stop: asyncio.Event) -> None:
    while not stop.is_set():  # keeps the ready queue from ever emptying
        await asyncio.sleep(0)


async def _while_busy(work):
    """Awaits work() while a spinner keeps the loop's ready queue full."""
    stop = asyncio.Event()
    spinner = asyncio.ensure_future(_spin(stop))
    await asyncio.sleep(0)
    try:
        return await asyncio.wait_for(work(), DEADLINE)
    finally:
        stop.set()
        await spinner


def test_a_gil_holder_starves_the_other_thread(no_forced_switch):
    """The control: while this thread holds the GIL and never releases it, a thread that
    wants it gets no turn at all (no forced hand-over comes to rescue it)."""
    turns = [0]
    done = threading.Event()
    started = threading.Event()

    def other():
        started.set()
        while not done.is_set():
            time.sleep(0.001)  # releases the GIL; wants it back 1 ms later
            turns[0] += 1

    th = threading.Thread(target=other)
    th.start()
    started.wait()
    time.sleep(0.01)  # lets it reach its sleep
    n0 = turns[0]
    spins = 0
    while spins < 2_000_000:  # pure Python: the GIL is never released
        spins += 1
    n1 = turns[0]
    done.set()
    th.join()
    assert n1 == n0


def test_to_thread_round_trip_on_a_busy_loop(loop, no_forced_switch):
    async def round_trips():
        for _ in range(20):
            assert await asyncio.to_thread(lambda: 42) == 42
        return True

    assert loop.run_until_complete(_while_busy(round_trips))
    loop.run_until_complete(loop.shutdown_default_executor())


def test_a_thread_taking_the_gil_runs_while_the_loop_is_busy(loop, no_forced_switch):
    turns = [0]
    done = threading.Event()

    def other():
        while not done.is_set() and turns[0] < 50:
            time.sleep(0.001)  # releases the GIL; wants it back 1 ms later, from the busy loop
            turns[0] += 1

    async def fifty_turns():
        th = threading.Thread(target=other)
        th.start()
        try:
            while turns[0] < 50:
                await asyncio.sleep(0.01)  # the loop keeps running _spin meanwhile
            return turns[0]
        finally:
            done.set()
            th.join()  # waits with the GIL released

    assert loop.run_until_complete(_while_busy(fifty_turns)) == 50
    loop.run_until_complete(loop.shutdown_default_executor())


def test_an_executor_callback_does_not_wait_for_a_switch_interval(loop, no_forced_switch):
    """run_in_executor's result comes back through call_soon_threadsafe from the worker
    thread, which needs the GIL to make that call."""
    async def calls():
        for i in range(10):
            assert await loop.run_in_executor(None, pow, i, 2) == i * i
        return True

    assert loop.run_until_complete(_while_busy(calls))
    loop.run_until_complete(loop.shutdown_default_executor())
