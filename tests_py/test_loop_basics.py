"""The event loop API, single-threaded: scheduling, timers, running/stopping/closing,
argument checking, futures and tasks, readers/writers, executors, async generators, the
exception handler, debug mode and contextvars.

Every test taking ``loop`` runs on asyncio's own loop (the oracle) and on goloop's.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import fractions
import functools
import gc
import logging
import os
import socket
import threading
import time
import unittest.mock
import warnings

import pytest

import goloop
from loophelpers import is_goloop, run_one_iteration, scheduled_count

CLOSED = "Event loop is closed"


# ---------------------------------------------------------------------------------------
# call_soon and handles
# ---------------------------------------------------------------------------------------


def test_call_soon_fifo_and_args(loop):
    calls = []
    for i in range(100):
        loop.call_soon(calls.append, i)
    loop.call_soon(lambda *a: calls.append(a), 1, "two", None)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == list(range(100)) + [(1, "two", None)]


def test_call_soon_from_callback_runs_next_iteration(loop):
    order = []

    def first():
        order.append("first")
        loop.call_soon(order.append, "scheduled-by-first")

    loop.call_soon(first)
    loop.call_soon(order.append, "second")
    run_one_iteration(loop)
    assert order == ["first", "second"]  # the new callback waits for the next iteration
    run_one_iteration(loop)
    assert order == ["first", "second", "scheduled-by-first"]


def handle_context(h):
    # Handle.get_context() is new in Python 3.12; asyncio 3.11 only has the _context attribute
    return h.get_context() if hasattr(h, "get_context") else h._context


def test_call_soon_handle_api(loop):
    ctx = contextvars.copy_context()
    h = loop.call_soon(print, context=ctx)
    assert isinstance(h, asyncio.Handle) or is_goloop(loop)
    assert not h.cancelled()
    assert handle_context(h) is ctx
    assert h._context is ctx
    if is_goloop(loop):
        assert h.get_context() is ctx
        assert loop.call_later(1, print, context=ctx).get_context() is ctx
    h.cancel()
    assert h.cancelled()
    h.cancel()  # idempotent
    assert h.cancelled()
    assert "cancelled" in repr(h)


def test_call_soon_default_context_is_a_copy(loop):
    h = loop.call_soon(print)
    c = handle_context(h)
    assert isinstance(c, contextvars.Context)
    assert c is not contextvars.copy_context()  # a snapshot, not the live context
    h.cancel()


def test_cancelled_handles_do_not_run(loop):
    calls = []
    handles = [loop.call_soon(calls.append, i) for i in range(10)]
    for h in handles[::2]:
        h.cancel()
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1, 3, 5, 7, 9]


def test_handle_cancelled_by_earlier_callback_in_same_iteration(loop):
    calls = []
    h2 = None

    def first():
        calls.append(1)
        h2.cancel()

    loop.call_soon(first)
    h2 = loop.call_soon(calls.append, 2)
    loop.call_soon(calls.append, 3)
    run_one_iteration(loop)
    assert calls == [1, 3]


def test_scheduling_order_across_call_soon_paths(loop):
    """call_soon, call_soon_threadsafe, debug-mode call_soon, reader callbacks and timers
    queue in one order (goloop stages plain call_soon in C and the others in Go)."""
    calls = []
    r, w = socket.socketpair()
    try:
        loop.call_soon(calls.append, "a")
        loop.call_soon_threadsafe(calls.append, "b")
        loop.call_soon(calls.append, "c")
        loop.set_debug(True)
        loop.call_soon(calls.append, "d")
        loop.set_debug(False)
        loop.call_soon(calls.append, "e")

        def first_of_next():
            calls.append("f")
            loop.call_soon(calls.append, "h")  # runs in the next iteration
            loop.call_soon_threadsafe(calls.append, "i")
            loop.call_soon(calls.append, "j")

        loop.call_soon(first_of_next)
        loop.call_soon(calls.append, "g")
        run_one_iteration(loop)
        assert calls == ["a", "b", "c", "d", "e", "f", "g"]
        run_one_iteration(loop)
        assert calls[7:] == ["h", "i", "j"]

        # a reader callback scheduling call_soon: those run after it, in the next iteration
        def on_read():
            r.recv(10)
            calls.append("read")
            loop.remove_reader(r.fileno())
            loop.call_soon(calls.append, "after-read")

        loop.add_reader(r.fileno(), on_read)
        w.send(b"x")
        loop.call_soon(calls.append, "queued")
        for _ in range(5):
            run_one_iteration(loop)
            if "after-read" in calls:
                break
        assert calls[10:] == ["queued", "read", "after-read"]
    finally:
        r.close()
        w.close()


def test_call_soon_queue_released_by_close_and_gc(loop):
    import weakref

    class Big:
        pass

    obj = Big()
    ref = weakref.ref(obj)
    loop.call_soon(lambda o: None, obj)
    del obj
    loop.close()
    gc.collect()
    assert ref() is None

    # an unclosed loop holding queued callbacks is collected with them
    lp = type(loop)()
    obj = Big()
    ref = weakref.ref(obj)
    lp.call_soon(lambda o, lp=lp: None, obj)  # the callback also refers to the loop: a cycle
    del obj
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del lp
        gc.collect()
    assert ref() is None


def test_handle_releases_callback_on_cancel(loop):
    class Big:
        pass

    obj = Big()
    import weakref

    ref = weakref.ref(obj)
    h = loop.call_soon(lambda o: None, obj)
    del obj
    h.cancel()
    run_one_iteration(loop)
    gc.collect()
    assert ref() is None


def test_handle_repr_names_callback(loop):
    def my_named_callback():
        pass

    h = loop.call_soon(my_named_callback)
    assert "my_named_callback" in repr(h)
    t = loop.call_later(10, my_named_callback)
    r = repr(t)
    assert "TimerHandle" in r and "when=" in r and "my_named_callback" in r
    h.cancel()
    t.cancel()


# ---------------------------------------------------------------------------------------
# timers
# ---------------------------------------------------------------------------------------


def test_call_later_order(loop):
    """Timers run in the order of their deadlines, not of the calls that made them.

    call_later reads the clock at each call, so a pause of the process between two calls
    (a loaded machine) moves the later call's deadline: the order the loop owes is that of
    the handles' when(), which the test takes as its oracle. On a quiet machine that is
    [0, 1, 2, 3] (the gaps between the delays are 10 ms); under load it may differ, and the
    loop must still follow the deadlines. test_call_at_order fixes the deadlines from one
    reading of the clock, so there the order is [0, 1, 2, 3] whatever the load."""
    order = []
    made = [(loop.call_later(delay, order.append, i).when(), i)
            for delay, i in [(0.03, 3), (0.01, 1), (0.02, 2), (0.0, 0)]]
    # scheduled last with the longest delay: its deadline is after every other one
    loop.call_later(0.05, loop.stop)
    loop.run_forever()
    by_deadline = [i for _, i in sorted(made)]
    assert order == by_deadline
    assert sorted(order) == [0, 1, 2, 3]


def test_call_at_order(loop):
    """Deadlines fixed from one reading of the clock: however late the loop gets to them
    (all may be due at once under load), they run in deadline order, and the stop, due
    last, runs after them."""
    order = []
    now = loop.time()
    loop.call_at(now + 0.03, order.append, 3)
    loop.call_at(now + 0.01, order.append, 1)
    loop.call_at(now + 0.02, order.append, 2)
    loop.call_at(now, order.append, 0)
    loop.call_at(now + 0.05, loop.stop)
    loop.run_forever()
    assert order == [0, 1, 2, 3]


def test_call_at_ties_are_fifo(gloop):
    # asyncio's heapq does not keep equal deadlines in order; goloop promises FIFO ties
    order = []
    when = gloop.time() + 0.02
    for i in range(50):
        gloop.call_at(when, order.append, i)
    gloop.call_at(when + 0.01, gloop.stop)
    gloop.run_forever()
    assert order == list(range(50))


def test_call_at_ties_all_run(loop):
    order = []
    when = loop.time() + 0.02
    for i in range(50):
        loop.call_at(when, order.append, i)
    loop.call_at(when + 0.01, loop.stop)
    loop.run_forever()
    assert sorted(order) == list(range(50))


def test_call_later_zero_runs_after_already_queued_call_soon(loop):
    order = []
    loop.call_soon(order.append, "soon")
    loop.call_later(0, order.append, "later0")
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert order == ["soon", "later0"]


def test_timer_handle_when(loop):
    t0 = loop.time()
    h = loop.call_later(10, print)
    assert t0 + 10 <= h.when() <= loop.time() + 10
    h2 = loop.call_at(12345.5, print)
    assert h2.when() == 12345.5
    assert isinstance(h2, asyncio.TimerHandle) or is_goloop(loop)
    h.cancel()
    h2.cancel()


def test_timer_handles_compare_by_when(loop):
    a = loop.call_at(100.0, print)
    b = loop.call_at(200.0, print)
    assert a < b and b > a and a <= b and a != b
    a.cancel()
    b.cancel()


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.05, 0.1])
def test_timer_fires_not_before_its_time(loop, delay):
    fired = []
    h = loop.call_later(delay, lambda: (fired.append(loop.time()), loop.stop()))
    start = time.monotonic()
    loop.run_forever()
    assert len(fired) == 1
    # asyncio fires a timer within one clock resolution of its deadline
    assert fired[0] >= h.when() - loop._clock_resolution
    assert time.monotonic() - start < delay + 2.0  # generous upper bound


def test_many_timers_fire_in_order(loop):
    fired = []
    base = loop.time()
    whens = [base + ((i * 7919) % 1000) / 20000 for i in range(1000)]  # 0..50 ms, shuffled
    for i, w in enumerate(whens):
        loop.call_at(w, fired.append, (w, i))
    loop.call_at(base + 0.06, loop.stop)
    loop.run_forever()
    assert len(fired) == 1000
    assert fired == sorted(fired)


def test_cancelled_timer_does_not_run(loop):
    calls = []
    h = loop.call_later(0.01, calls.append, "x")
    h.cancel()
    assert h.cancelled()
    loop.call_later(0.03, loop.stop)
    loop.run_forever()
    assert calls == []


def test_timer_cancelled_count_head_pop(loop):
    handles = [loop.call_later(100 + i, print) for i in range(20)]
    for h in handles[:10]:  # the ten earliest: popped off the head of the heap
        h.cancel()
    assert loop._timer_cancelled_count == 10
    run_one_iteration(loop)
    assert loop._timer_cancelled_count == 0
    assert scheduled_count(loop) == 10
    for h in handles[15:]:  # not at the head: stay in the heap, still counted
        h.cancel()
    run_one_iteration(loop)
    assert loop._timer_cancelled_count == 5
    assert scheduled_count(loop) == 10
    for h in handles[10:15]:
        h.cancel()
    run_one_iteration(loop)
    assert loop._timer_cancelled_count == 0
    assert scheduled_count(loop) == 0


def test_timer_cancel_purge_path(loop):
    # >100 timers with more than half cancelled: the loop rebuilds its heap at once.
    handles = [loop.call_later(100 + (i % 37), print, i) for i in range(300)]
    cancelled = [h for i, h in enumerate(handles) if i % 4 != 0]  # 225 of 300
    for h in cancelled:
        h.cancel()
    assert loop._timer_cancelled_count == 225
    assert scheduled_count(loop) == 300
    run_one_iteration(loop)
    assert loop._timer_cancelled_count == 0
    assert scheduled_count(loop) == 75
    assert not any(h.cancelled() for i, h in enumerate(handles) if i % 4 == 0)
    for h in handles:
        h.cancel()
    run_one_iteration(loop)
    assert loop._timer_cancelled_count == 0
    assert scheduled_count(loop) == 0


def test_timer_cancel_purge_keeps_remaining_timers_working(loop):
    fired = []
    handles = [loop.call_later(0.01 + i * 1e-5, fired.append, i) for i in range(200)]
    for i, h in enumerate(handles):
        if i % 3:
            h.cancel()
    loop.call_later(0.1, loop.stop)
    loop.run_forever()
    assert fired == [i for i in range(200) if i % 3 == 0]
    assert loop._timer_cancelled_count == 0


def test_cancel_after_timer_fired_does_not_count(loop):
    h = loop.call_later(0, lambda: None)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    h.cancel()
    assert loop._timer_cancelled_count == 0


def test_cancel_twice_counts_once(loop):
    h = loop.call_later(100, print)
    h.cancel()
    h.cancel()
    assert loop._timer_cancelled_count == 1


def test_time_monotonic_and_matches_time_monotonic(loop):
    prev = loop.time()
    for _ in range(1000):
        a = time.monotonic()
        t = loop.time()
        b = time.monotonic()
        assert t >= prev
        # the same clock (CLOCK_MONOTONIC); allow a little float slack
        assert a - 1e-3 <= t <= b + 1e-3
        prev = t


# ---------------------------------------------------------------------------------------
# running, stopping, closing
# ---------------------------------------------------------------------------------------


def test_run_until_complete_result(loop):
    async def main(x):
        await asyncio.sleep(0)
        return x * 2

    assert loop.run_until_complete(main(21)) == 42
    assert not loop.is_running()
    assert not loop.is_closed()


def test_run_until_complete_exception(loop):
    async def main():
        await asyncio.sleep(0.001)
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError, match="boom"):
        loop.run_until_complete(main())


def test_run_until_complete_future(loop):
    fut = loop.create_future()
    loop.call_later(0.01, fut.set_result, "done")
    assert loop.run_until_complete(fut) == "done"


def test_is_running_inside_and_outside(loop):
    seen = []

    def cb():
        seen.append((loop.is_running(), asyncio.get_running_loop() is loop))
        loop.stop()

    assert not loop.is_running()
    loop.call_soon(cb)
    loop.run_forever()
    assert seen == [(True, True)]
    assert not loop.is_running()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_stop_before_run_forever_runs_one_iteration(loop):
    calls = []

    def cb():
        calls.append("cb")
        loop.call_soon(calls.append, "next")

    loop.call_soon(cb)
    loop.stop()
    loop.run_forever()
    assert calls == ["cb"]
    loop.stop()
    loop.run_forever()
    assert calls == ["cb", "next"]


def test_stop_runs_rest_of_iteration(loop):
    calls = []
    loop.call_soon(loop.stop)
    loop.call_soon(calls.append, 1)
    loop.run_forever()
    assert calls == [1]


def test_stop_with_pending_timer_returns_promptly(loop):
    loop.call_later(30, print)
    loop.call_later(0.01, loop.stop)
    start = time.monotonic()
    loop.run_forever()
    assert time.monotonic() - start < 5


def test_run_forever_reusable(loop):
    for i in range(5):
        calls = []
        loop.call_soon(calls.append, i)
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert calls == [i]


def test_run_forever_on_running_loop_raises(loop):
    errors = []

    def run_coro():
        c = asyncio.sleep(0)
        try:
            loop.run_until_complete(c)
        finally:
            c.close()

    def cb():
        for f in (loop.run_forever, run_coro):
            try:
                f()
            except RuntimeError as e:
                errors.append(str(e))
        loop.stop()

    loop.call_soon(cb)
    loop.run_forever()
    assert errors == ["This event loop is already running"] * 2


def test_run_while_another_loop_runs_raises(loop):
    other = goloop.new_event_loop() if not is_goloop(loop) else asyncio.SelectorEventLoop()
    errors = []

    def cb():
        try:
            other.run_forever()
        except RuntimeError as e:
            errors.append(str(e))
        loop.stop()

    try:
        loop.call_soon(cb)
        loop.run_forever()
    finally:
        other.close()
    assert errors == ["Cannot run the event loop while another loop is running"]


def test_close_running_loop_raises(loop):
    errors = []

    def cb():
        try:
            loop.close()
        except RuntimeError as e:
            errors.append(str(e))
        loop.stop()

    loop.call_soon(cb)
    loop.run_forever()
    assert errors == ["Cannot close a running event loop"]
    assert not loop.is_closed()


def test_close_is_idempotent(loop):
    assert not loop.is_closed()
    loop.close()
    assert loop.is_closed()
    loop.close()
    assert loop.is_closed()


def test_close_drops_pending_callbacks(loop):
    import weakref

    class Obj:
        pass

    o1, o2 = Obj(), Obj()
    r1, r2 = weakref.ref(o1), weakref.ref(o2)
    loop.call_soon(lambda o: None, o1)
    loop.call_later(100, lambda o: None, o2)
    del o1, o2
    loop.close()
    gc.collect()
    assert r1() is None and r2() is None


def _closed_ops(loop, a, b):
    async def coro():
        pass

    def run_until_complete():
        c = coro()
        try:
            loop.run_until_complete(c)
        finally:
            c.close()

    def create_task():
        c = coro()
        try:
            loop.create_task(c)
        finally:
            c.close()

    return {
        "call_soon": lambda: loop.call_soon(print),
        "call_later": lambda: loop.call_later(1, print),
        "call_at": lambda: loop.call_at(loop.time() + 1, print),
        "call_soon_threadsafe": lambda: loop.call_soon_threadsafe(print),
        "run_forever": loop.run_forever,
        "run_until_complete": run_until_complete,
        "create_task": create_task,
        "add_reader": lambda: loop.add_reader(a.fileno(), print),
        "add_writer": lambda: loop.add_writer(a.fileno(), print),
        "run_in_executor": lambda: loop.run_in_executor(None, print),
    }


@pytest.mark.parametrize("op", ["call_soon", "call_later", "call_at", "call_soon_threadsafe",
                                "run_forever", "run_until_complete", "create_task",
                                "add_reader", "add_writer", "run_in_executor"])
def test_closed_loop_raises(loop, op):
    a, b = socket.socketpair()
    try:
        loop.close()
        with pytest.raises(RuntimeError, match=CLOSED):
            _closed_ops(loop, a, b)[op]()
    finally:
        a.close()
        b.close()


def test_remove_reader_on_closed_loop_returns_false(loop):
    a, b = socket.socketpair()
    with a, b:
        loop.add_reader(a.fileno(), print)
        loop.close()
        assert loop.remove_reader(a.fileno()) is False
        assert loop.remove_writer(a.fileno()) is False


# ---------------------------------------------------------------------------------------
# argument checking
# ---------------------------------------------------------------------------------------


async def _coro_fn():
    pass


class _WithAsyncMethod:
    async def meth(self):
        pass


NON_CALLABLES = [None, 1, "str", 2.5]


@pytest.mark.parametrize("bad", NON_CALLABLES, ids=repr)
def test_call_soon_non_callable(loop, bad):
    loop.set_debug(True)  # asyncio 3.11 checks callbacks only in debug mode
    with pytest.raises(TypeError):
        loop.call_soon(bad)
    with pytest.raises(TypeError):
        loop.call_soon_threadsafe(bad)


@pytest.mark.parametrize("bad", NON_CALLABLES, ids=repr)
def test_call_later_call_at_non_callable_debug(loop, bad):
    # asyncio checks call_later/call_at callbacks only in debug mode
    loop.set_debug(True)
    with pytest.raises(TypeError):
        loop.call_later(1, bad)
    with pytest.raises(TypeError):
        loop.call_at(loop.time() + 1, bad)


@pytest.mark.parametrize("bad", NON_CALLABLES + [_coro_fn],
                         ids=lambda b: b.__name__ if callable(b) else repr(b))
def test_goloop_always_checks_callback(gloop, bad):
    # goloop is stricter than asyncio 3.11: the check is done outside debug mode too
    assert not gloop.get_debug()
    with pytest.raises(TypeError):
        gloop.call_soon(bad)
    with pytest.raises(TypeError):
        gloop.call_soon_threadsafe(bad)
    with pytest.raises(TypeError):
        gloop.call_later(1, bad)
    with pytest.raises(TypeError):
        gloop.call_at(gloop.time() + 1, bad)
    assert scheduled_count(gloop) == 0


class _Partial(functools.partial):
    pass


def _coroutine_callbacks():
    return {
        "coroutine-function": _coro_fn,
        "async-method": _WithAsyncMethod().meth,
        "partial-coroutine-function": functools.partial(_coro_fn),
        "partial-subclass-coroutine-function": _Partial(_coro_fn),
        "asyncmock": unittest.mock.AsyncMock(),
    }


COROUTINE_KINDS = ["coroutine", "coroutine-function", "async-method",
                   "partial-coroutine-function", "partial-subclass-coroutine-function", "asyncmock"]


def _make_coroutine_callback(kind):
    if kind == "coroutine":
        return _coro_fn()
    return _coroutine_callbacks()[kind]


@pytest.mark.parametrize("kind", COROUTINE_KINDS)
@pytest.mark.parametrize("method", ["call_soon", "call_soon_threadsafe", "call_later", "call_at"])
def test_coroutine_callbacks_rejected(loop, kind, method, request):
    loop.set_debug(True)  # asyncio only checks call_later/call_at in debug mode
    cb = _make_coroutine_callback(kind)
    try:
        f = getattr(loop, method)
        args = () if method.startswith("call_soon") else (loop.time() + 1,) if method == "call_at" else (1,)
        with pytest.raises(TypeError, match="coroutines cannot be used with"):
            f(*args, cb)
    finally:
        if kind == "coroutine":
            cb.close()
    assert scheduled_count(loop) == 0


@pytest.mark.parametrize("method", ["call_soon", "call_soon_threadsafe", "call_later", "call_at"])
def test_unexpected_keyword(loop, method):
    f = getattr(loop, method)
    args = () if method.startswith("call_soon") else (1,)
    with pytest.raises(TypeError):
        f(*args, print, bogus=1)


def test_call_later_none_delay(loop):
    with pytest.raises(TypeError, match="None"):
        loop.call_later(None, print)
    with pytest.raises(TypeError):
        loop.call_at(None, print)


def test_call_later_non_number_delay(loop):
    with pytest.raises(TypeError):
        loop.call_later("1", print)


def test_missing_callback(loop):
    with pytest.raises(TypeError):
        loop.call_soon()
    with pytest.raises(TypeError):
        loop.call_later(1)
    with pytest.raises(TypeError):
        loop.call_later()


def test_call_soon_context_none_is_default(loop):
    var = contextvars.ContextVar("var", default="unset")
    seen = []
    var.set("outer")
    loop.call_soon(lambda: seen.append(var.get()), context=None)
    run_one_iteration(loop)
    assert seen == ["outer"]


# ---------------------------------------------------------------------------------------
# futures, tasks, task factory
# ---------------------------------------------------------------------------------------


def test_create_future(loop):
    fut = loop.create_future()
    assert isinstance(fut, asyncio.Future)
    assert fut.get_loop() is loop
    loop.call_soon(fut.set_result, 7)
    assert loop.run_until_complete(fut) == 7


def test_create_task_name_and_context(loop):
    var = contextvars.ContextVar("var", default="default")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")

    async def work():
        await asyncio.sleep(0)
        return var.get()

    t = loop.create_task(work(), name="my-task")
    assert t.get_name() == "my-task"
    t2 = loop.create_task(work(), context=ctx)
    assert loop.run_until_complete(asyncio.gather(t, t2)) == ["default", "in-ctx"]
    assert var.get() == "default"


def test_task_sees_context_copy(loop):
    var = contextvars.ContextVar("var", default=0)

    async def child():
        var.set(var.get() + 1)
        return var.get()

    async def main():
        var.set(10)
        r = await loop.create_task(child())
        return r, var.get()

    assert loop.run_until_complete(main()) == (11, 10)
    assert var.get() == 0


def test_task_factory(loop):
    made = []

    def factory(lp, coro, **kw):
        t = asyncio.Task(coro, loop=lp, **kw)
        made.append(t)
        return t

    assert loop.get_task_factory() is None
    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def main():
        return 5

    assert loop.run_until_complete(main()) == 5
    assert len(made) == 1
    loop.set_task_factory(None)
    assert loop.get_task_factory() is None
    with pytest.raises(TypeError):
        loop.set_task_factory(1)


def test_tasks_interleave(loop):
    order = []

    async def worker(name, n):
        for i in range(n):
            order.append((name, i))
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(worker("a", 3), worker("b", 3))

    loop.run_until_complete(main())
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_task_cancellation(loop):
    async def sleeper():
        await asyncio.sleep(30)

    async def main():
        t = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return t.cancelled()

    assert loop.run_until_complete(main()) is True


def test_wait_for_timeout(loop):
    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(30), 0.02)
        return "ok"

    start = time.monotonic()
    assert loop.run_until_complete(main()) == "ok"
    assert time.monotonic() - start < 5


def test_asyncio_timeout(loop):
    async def main():
        try:
            async with asyncio.timeout(0.02) as cm:
                assert cm.when() is not None
                await asyncio.sleep(30)
        except TimeoutError:
            pass
        else:
            raise AssertionError("no timeout")
        async with asyncio.timeout(5) as cm:
            await asyncio.sleep(0.001)
            cm.reschedule(loop.time() + 10)
            assert cm.when() > loop.time() + 9
        return "ok"

    start = time.monotonic()
    assert loop.run_until_complete(main()) == "ok"
    assert time.monotonic() - start < 5


def test_subprocess_exec(loop):
    import sys

    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; print(sys.stdin.read().upper())",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate(b"hello")
        return proc.returncode, out

    asyncio.set_event_loop(loop)  # asyncio 3.11's child watcher wants the current loop
    rc, out = loop.run_until_complete(asyncio.wait_for(main(), 20))
    assert (rc, out.strip()) == (0, b"HELLO")


# ---------------------------------------------------------------------------------------
# readers and writers
# ---------------------------------------------------------------------------------------


@pytest.fixture
def sockpair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_add_reader_fires(loop, sockpair):
    a, b = sockpair
    got = []

    def on_readable(tag):
        got.append((tag, a.recv(100)))
        loop.remove_reader(a.fileno())
        loop.stop()

    loop.add_reader(a.fileno(), on_readable, "tag")
    loop.call_later(0.01, b.send, b"hello")
    loop.call_later(5, loop.stop)  # safety net
    loop.run_forever()
    assert got == [("tag", b"hello")]


def test_add_reader_accepts_file_object(loop, sockpair):
    a, b = sockpair
    got = []
    loop.add_reader(a, lambda: (got.append(a.recv(10)), loop.stop()))
    b.send(b"x")
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert got == [b"x"]
    assert loop.remove_reader(a) is True


def test_add_writer_fires(loop, sockpair):
    a, b = sockpair
    calls = []

    def on_writable():
        calls.append(a.send(b"data"))
        loop.remove_writer(a.fileno())
        loop.stop()

    loop.add_writer(a.fileno(), on_writable)
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert calls == [4]
    assert b.recv(10) == b"data"


def test_reader_and_writer_on_same_fd(loop, sockpair):
    a, b = sockpair
    events = []

    def on_write():
        events.append("w")
        loop.remove_writer(a.fileno())

    def on_read():
        events.append("r")
        a.recv(10)
        loop.remove_reader(a.fileno())
        loop.stop()

    loop.add_reader(a.fileno(), on_read)
    loop.add_writer(a.fileno(), on_write)
    loop.call_later(0.02, b.send, b"x")
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert events == ["w", "r"]
    assert loop.remove_reader(a.fileno()) is False
    assert loop.remove_writer(a.fileno()) is False


def _reader_handle(loop, fd):
    key = loop._selector.get_key(fd)
    return key.data[0]


def test_replacing_reader_cancels_old_handle(loop, sockpair):
    a, b = sockpair
    calls = []
    loop.add_reader(a.fileno(), calls.append, "old")
    old = _reader_handle(loop, a.fileno())
    loop.add_reader(a.fileno(), lambda: (calls.append("new"), a.recv(10), loop.stop()))
    assert old.cancelled()
    b.send(b"x")
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert calls == ["new"]
    assert loop.remove_reader(a.fileno()) is True


def test_remove_reader_writer_return_values(loop, sockpair):
    a, b = sockpair
    fd = a.fileno()
    assert loop.remove_reader(fd) is False
    assert loop.remove_writer(fd) is False
    loop.add_reader(fd, print)
    h = _reader_handle(loop, fd)
    assert loop.remove_writer(fd) is False
    assert loop.remove_reader(fd) is True
    assert h.cancelled()
    assert loop.remove_reader(fd) is False
    loop.add_writer(fd, print)
    assert loop.remove_writer(fd) is True
    assert loop.remove_writer(fd) is False


def test_removed_reader_does_not_fire(loop, sockpair):
    a, b = sockpair
    calls = []
    loop.add_reader(a.fileno(), calls.append, 1)
    b.send(b"x")
    loop.remove_reader(a.fileno())
    loop.call_later(0.03, loop.stop)
    loop.run_forever()
    assert calls == []


def test_reader_on_closed_fd(loop):
    a, b = socket.socketpair()
    fd = a.fileno()
    a.close()
    b.close()
    with pytest.raises((OSError, ValueError)):
        loop.add_reader(fd, print)
    with pytest.raises(ValueError):
        loop.add_reader(-1, print)
    # asyncio rejects closed socket objects (fileno() == -1) too
    with pytest.raises(ValueError):
        loop.add_reader(a, print)
    assert loop.remove_reader(fd) is False


def test_reader_fd_closed_while_registered(loop):
    a, b = socket.socketpair()
    fd = a.fileno()
    loop.add_reader(fd, print)
    a.close()
    b.close()
    # the fd number is gone: removing the registration must not raise
    loop.remove_reader(fd)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()


def test_goloop_reader_callback_checked(gloop, sockpair):
    # asyncio 3.11 does not check add_reader's callback; goloop does, registering nothing
    a, b = sockpair
    with pytest.raises(TypeError):
        gloop.add_reader(a.fileno(), None)
    with pytest.raises(TypeError):
        gloop.add_writer(a.fileno(), 5)
    with pytest.raises(TypeError):
        gloop.add_reader(a.fileno(), _coro_fn)
    assert gloop.remove_reader(a.fileno()) is False
    assert gloop.remove_writer(a.fileno()) is False


def test_reader_runs_in_registering_context(loop, sockpair):
    a, b = sockpair
    var = contextvars.ContextVar("var", default="none")
    seen = []
    var.set("at-add")

    def on_read():
        seen.append(var.get())
        a.recv(10)
        loop.remove_reader(a.fileno())
        loop.stop()

    loop.add_reader(a.fileno(), on_read)
    var.set("after-add")
    b.send(b"x")
    loop.call_later(5, loop.stop)
    loop.run_forever()
    assert seen == ["at-add"]


def test_many_ready_fds_in_one_iteration(loop):
    # more ready descriptors than one poll returns (goloop asks for 512 events at a time)
    pairs = [socket.socketpair() for _ in range(600)]
    fired = []
    try:
        for i, (a, b) in enumerate(pairs):
            def cb(i=i, a=a):
                fired.append(i)
                a.recv(10)
                loop.remove_reader(a.fileno())
                if len(fired) == len(pairs):
                    loop.stop()

            loop.add_reader(a.fileno(), cb)
            b.send(b"x")
        loop.call_later(10, loop.stop)
        loop.run_forever()
    finally:
        for a, b in pairs:
            a.close()
            b.close()
    assert sorted(fired) == list(range(600))


def test_io_and_timers_not_starved_by_busy_callbacks(loop, sockpair):
    a, b = sockpair
    state = {"n": 0, "stop": False}
    got = {}

    def chain():  # a ready queue that never empties
        state["n"] += 1
        if state["n"] == 10:
            # busy for ten iterations already: only now the data and the timer, so the chain
            # provably runs before and while they are due, however slowly the machine goes
            b.send(b"x")
            loop.call_later(0.01, on_timer)
        if not state["stop"]:
            loop.call_soon(chain)

    def check_done():
        if "reader" in got and "timer" in got:
            state["stop"] = True
            loop.stop()

    def on_read():
        a.recv(10)
        loop.remove_reader(a.fileno())
        got["reader"] = time.monotonic()
        check_done()

    def on_timer():
        got["timer"] = time.monotonic()
        check_done()

    loop.add_reader(a.fileno(), on_read)
    loop.call_soon(chain)
    loop.call_later(10, loop.stop)
    start = time.monotonic()
    loop.run_forever()
    assert set(got) == {"reader", "timer"}
    assert max(got.values()) - start < 5
    assert state["n"] > 10


def test_removing_other_reader_in_same_iteration(loop):
    p1, p2 = socket.socketpair(), socket.socketpair()
    calls = []

    def cb(mine, other):
        calls.append(mine)
        loop.remove_reader(other.fileno())
        loop.remove_reader(mine.fileno())

    try:
        loop.add_reader(p1[0].fileno(), cb, p1[0], p2[0])
        loop.add_reader(p2[0].fileno(), cb, p2[0], p1[0])
        p1[1].send(b"x")
        p2[1].send(b"x")
        loop.call_later(0.05, loop.stop)
        loop.run_forever()
    finally:
        for s in (*p1, *p2):
            s.close()
    assert len(calls) == 1  # the second handle was cancelled before it could run


def test_add_reader_regular_file_refused(loop, tmp_path):
    with open(tmp_path / "f", "wb") as f:
        with pytest.raises(PermissionError):
            loop.add_reader(f.fileno(), print)
        assert loop.remove_reader(f.fileno()) is False


def test_sock_recv_sendall(loop, sockpair):
    a, b = sockpair

    async def main():
        await loop.sock_sendall(a, b"ping" * 1000)
        data = b""
        while len(data) < 4000:
            data += await loop.sock_recv(b, 65536)
        return data

    assert loop.run_until_complete(main()) == b"ping" * 1000


def test_open_connection_echo(loop):
    async def handle(reader, writer):
        data = await reader.readline()
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello\n")
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return line

    assert loop.run_until_complete(asyncio.wait_for(main(), 10)) == b"HELLO\n"


# ---------------------------------------------------------------------------------------
# executors
# ---------------------------------------------------------------------------------------


def test_run_in_executor_default(loop):
    async def main():
        return await loop.run_in_executor(None, lambda x: (x, threading.get_ident()), 3)

    x, tid = loop.run_until_complete(main())
    assert x == 3 and tid != threading.get_ident()
    loop.run_until_complete(loop.shutdown_default_executor())


def test_run_in_executor_custom(loop):
    with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="custom-ex") as ex:
        async def main():
            return await asyncio.gather(*(loop.run_in_executor(
                ex, lambda: threading.current_thread().name) for _ in range(4)))

        names = loop.run_until_complete(main())
    assert all(n.startswith("custom-ex") for n in names)


def test_run_in_executor_exception(loop):
    def fail():
        raise KeyError("k")

    with pytest.raises(KeyError):
        loop.run_until_complete(loop.run_in_executor(None, fail))
    loop.run_until_complete(loop.shutdown_default_executor())


def test_set_default_executor(loop):
    ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="default-ex")
    try:
        loop.set_default_executor(ex)
        name = loop.run_until_complete(loop.run_in_executor(
            None, lambda: threading.current_thread().name))
        assert name.startswith("default-ex")
        with pytest.raises(TypeError):
            loop.set_default_executor(object())
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
    # shut down: the executor refuses new work
    with pytest.raises(RuntimeError):
        ex.submit(print)


def test_shutdown_default_executor(loop):
    loop.run_until_complete(loop.run_in_executor(None, time.sleep, 0.01))
    executor = loop._default_executor
    assert executor is not None
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError):
        loop.run_in_executor(None, print)
    with pytest.raises(RuntimeError):
        executor.submit(print)


def test_run_in_executor_rejects_coroutine_function(loop):
    loop.set_debug(True)  # asyncio checks the function only in debug mode
    with pytest.raises(TypeError):
        loop.run_in_executor(None, _coro_fn)


# ---------------------------------------------------------------------------------------
# async generators
# ---------------------------------------------------------------------------------------


def test_shutdown_asyncgens_runs_finally(loop):
    finalized = []

    async def agen():
        try:
            for i in range(10):
                yield i
        finally:
            await asyncio.sleep(0)
            finalized.append("finally")

    async def main():
        g = agen()
        assert await g.__anext__() == 0
        return g  # left unfinished, referenced

    g = loop.run_until_complete(main())
    assert finalized == []
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert finalized == ["finally"]
    del g


def test_asyncgen_finalized_on_gc(loop):
    finalized = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            finalized.append(True)

    async def main():
        g = agen()
        await g.__anext__()
        del g
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert finalized == [True]


def test_asyncgen_hooks_restored_after_run(loop):
    before = asyncio.sys.get_asyncgen_hooks() if hasattr(asyncio, "sys") else None
    import sys

    before = sys.get_asyncgen_hooks()
    loop.run_until_complete(asyncio.sleep(0))
    assert sys.get_asyncgen_hooks() == before


# ---------------------------------------------------------------------------------------
# exception handler
# ---------------------------------------------------------------------------------------


def test_exception_in_callback_reaches_handler(loop):
    contexts = []
    assert loop.get_exception_handler() is None

    def handler(lp, context):
        contexts.append((lp, context))

    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler

    def bad():
        raise ValueError("in callback")

    after = []
    loop.call_soon(bad)
    loop.call_soon(after.append, "still running")
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert after == ["still running"]
    assert len(contexts) == 1
    lp, ctx = contexts[0]
    assert lp is loop
    assert {"message", "exception", "handle"} <= set(ctx)
    assert isinstance(ctx["exception"], ValueError)
    assert "Exception in callback" in ctx["message"]
    assert ctx["exception"].__traceback__ is not None
    assert "bad" in repr(ctx["handle"])


def test_exception_in_timer_callback_reaches_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))
    h = loop.call_later(0.001, lambda: 1 / 0)
    loop.call_later(0.02, loop.stop)
    loop.run_forever()
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], ZeroDivisionError)
    assert contexts[0]["handle"] is h


def test_exception_handler_type_check(loop):
    with pytest.raises(TypeError):
        loop.set_exception_handler(1)
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None


def test_default_exception_handler_logs(loop, caplog):
    def bad():
        raise RuntimeError("logged-error")

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_soon(bad)
        loop.call_soon(loop.stop)
        loop.run_forever()
    assert "logged-error" in caplog.text
    assert "Exception in callback" in caplog.text


def test_call_exception_handler_and_default(loop, caplog):
    got = []

    def handler(lp, context):
        got.append(context)
        lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_exception_handler({"message": "custom message", "extra": 1})
    assert got == [{"message": "custom message", "extra": 1}]
    assert "custom message" in caplog.text


def test_failing_exception_handler_is_logged_not_raised(loop, caplog):
    def handler(lp, context):
        raise KeyError("handler broke")

    loop.set_exception_handler(handler)
    after = []
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_soon(lambda: 1 / 0)
        loop.call_soon(after.append, 1)
        loop.call_soon(loop.stop)
        loop.run_forever()
    assert after == [1]
    assert "Unhandled error in exception handler" in caplog.text


def test_unretrieved_task_exception_reported(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))

    async def fail():
        raise OSError("never retrieved")

    async def main():
        asyncio.ensure_future(fail())
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    gc.collect()
    assert any(isinstance(c.get("exception"), OSError) for c in contexts)


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_base_exceptions_propagate_from_run_forever(loop, exc):
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))

    def raiser():
        raise exc("out")

    loop.call_soon(raiser)
    with pytest.raises(exc):
        loop.run_forever()
    assert contexts == []
    assert not loop.is_running()
    # reusable afterwards
    calls = []
    loop.call_soon(calls.append, 1)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == [1]
    assert loop.run_until_complete(asyncio.sleep(0, "again")) == "again"


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_base_exception_keeps_rest_of_iteration(loop, exc):
    calls = []

    def raiser():
        raise exc()

    loop.call_soon(calls.append, "before")
    loop.call_soon(raiser)
    loop.call_soon(calls.append, "after")
    with pytest.raises(exc):
        loop.run_forever()
    assert calls == ["before"]
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert calls == ["before", "after"]  # the rest of the interrupted iteration runs later


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_base_exceptions_propagate_from_run_until_complete(loop, exc):
    async def main():
        await asyncio.sleep(0)
        raise exc()

    with pytest.raises(exc):
        loop.run_until_complete(main())
    assert loop.run_until_complete(asyncio.sleep(0, 1)) == 1


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_base_exception_in_timer_propagates(loop, exc):
    def raiser():
        raise exc()

    loop.call_later(0.001, raiser)
    with pytest.raises(exc):
        loop.run_forever()
    assert not loop.is_running()


# ---------------------------------------------------------------------------------------
# debug mode
# ---------------------------------------------------------------------------------------


def test_get_set_debug(loop):
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_slow_callback_warning(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01

    def slow_cb():
        time.sleep(0.05)

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(slow_cb)
        loop.call_soon(loop.stop)
        loop.run_forever()
    msgs = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any("Executing" in m and "slow_cb" in m and "took" in m for m in msgs), msgs


def test_no_slow_callback_warning_without_debug(loop, caplog):
    loop.slow_callback_duration = 0.01
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(time.sleep, 0.03)
        loop.call_soon(loop.stop)
        loop.run_forever()
    assert not [r for r in caplog.records if "Executing" in r.getMessage()]


def test_debug_mode_callbacks_still_run_and_report(loop):
    loop.set_debug(True)
    calls, contexts = [], []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))
    loop.call_soon(calls.append, 1)
    h = loop.call_soon(calls.append, 2)
    h.cancel()
    loop.call_soon(lambda: 1 / 0)
    loop.call_later(0.001, calls.append, 3)
    loop.call_later(0.02, loop.stop)
    loop.run_forever()
    assert calls == [1, 3]
    assert len(contexts) == 1 and isinstance(contexts[0]["exception"], ZeroDivisionError)


def test_debug_cancelled_handle_repr_keeps_callback(loop):
    loop.set_debug(True)

    def named_cb():
        pass

    h = loop.call_soon(named_cb)
    h.cancel()
    assert "named_cb" in repr(h)
    assert "cancelled" in repr(h)


# ---------------------------------------------------------------------------------------
# contextvars
# ---------------------------------------------------------------------------------------


def test_each_callback_runs_in_its_context(loop):
    var = contextvars.ContextVar("var", default="default")
    seen = []

    def cb(tag):
        seen.append((tag, var.get()))
        var.set("mutated-" + tag)  # must not leak into other callbacks

    var.set("A")
    loop.call_soon(cb, "a")
    var.set("B")
    loop.call_soon(cb, "b")
    loop.call_later(0.001, cb, "t")
    var.set("C")
    loop.call_soon(cb, "c")
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert seen == [("a", "A"), ("b", "B"), ("c", "C"), ("t", "B")]
    assert var.get() == "C"


def test_context_argument_honoured(loop):
    var = contextvars.ContextVar("var", default="default")
    ctx = contextvars.Context()
    ctx.run(var.set, "explicit")
    seen = []

    def cb():
        seen.append(var.get())
        var.set("changed")

    loop.call_soon(cb, context=ctx)
    loop.call_later(0.001, cb, context=ctx)
    loop.call_soon_threadsafe(cb, context=ctx)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert seen == ["explicit", "changed", "changed"]
    assert ctx[var] == "changed"
    assert var.get() == "default"


def test_context_entered_during_callback(loop):
    ctx = contextvars.copy_context()
    seen = []

    def cb():
        try:
            ctx.run(print)
        except RuntimeError as e:  # ctx is already entered
            seen.append("entered")

    loop.call_soon(cb, context=ctx)
    run_one_iteration(loop)
    assert seen == ["entered"]


# ---------------------------------------------------------------------------------------
# entry points: asyncio.run with the policy, Runner, goloop.run, install
# ---------------------------------------------------------------------------------------


async def _running_loop_type():
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_asyncio_run_with_goloop_policy(restore_policy):
    with warnings.catch_warnings():  # asyncio 3.14's deprecation of the call (test_compat)
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(goloop.EventLoopPolicy())
    assert issubclass(asyncio.run(_running_loop_type()), goloop.Loop)
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, goloop.Loop)
    finally:
        loop.close()
    assert "goloop" in repr(goloop.EventLoopPolicy())


def test_runner_with_loop_factory():
    with asyncio.Runner(loop_factory=goloop.new_event_loop) as r:
        assert isinstance(r.get_loop(), goloop.Loop)
        assert issubclass(r.run(_running_loop_type()), goloop.Loop)
        assert r.run(asyncio.sleep(0, "second")) == "second"
        loop = r.get_loop()
    assert loop.is_closed()


def test_goloop_run_returns_value():
    async def main(x):
        await asyncio.sleep(0.001)
        return x + 1

    assert goloop.run(main(1)) == 2
    assert issubclass(goloop.run(_running_loop_type()), goloop.Loop)


def test_goloop_run_propagates_exception():
    class MyError(Exception):
        pass

    async def main():
        await asyncio.sleep(0)
        raise MyError("x")

    with pytest.raises(MyError):
        goloop.run(main())


def test_goloop_run_debug_flag():
    async def main():
        return asyncio.get_running_loop().get_debug()

    assert goloop.run(main(), debug=True) is True
    assert goloop.run(main(), debug=False) is False


def test_goloop_run_from_running_loop_raises(loop):
    async def inner():
        pass

    async def main():
        c = inner()
        try:
            with pytest.raises(RuntimeError):
                goloop.run(c)
        finally:
            c.close()
        return "ok"

    assert loop.run_until_complete(main()) == "ok"


def test_goloop_run_cancels_leftover_tasks():
    cancelled = []

    async def bg():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        asyncio.ensure_future(bg())
        await asyncio.sleep(0)

    goloop.run(main())
    assert cancelled == [True]


def test_goloop_install(restore_policy):
    goloop.install()
    assert isinstance(goloop._compat.get_event_loop_policy(), goloop.EventLoopPolicy)
    assert issubclass(asyncio.run(_running_loop_type()), goloop.Loop)


def test_goloop_repr_and_attributes(gloop):
    assert "goloop.Loop" in repr(gloop)
    assert isinstance(gloop, asyncio.AbstractEventLoop)
    assert gloop._clock_resolution > 0
    assert goloop.__version__
    with pytest.raises(AttributeError):
        goloop.does_not_exist


def test_goloop_selector_view(gloop, sockpair):
    a, b = sockpair
    with pytest.raises(KeyError):
        gloop._selector.get_key(a.fileno())
    gloop.add_reader(a.fileno(), print)
    key = gloop._selector.get_key(a.fileno())
    assert key.fd == a.fileno()
    assert key.events & 1
    gloop.remove_reader(a.fileno())
    with pytest.raises(KeyError):
        gloop._selector.get_key(a.fileno())


def test_goloop_run_once_is_refused(gloop):
    with pytest.raises(RuntimeError):
        gloop._run_once()


@pytest.mark.timeout(30)
def test_reader_on_reused_descriptor_number_fires(loop):
    # goloop keeps a removed read registration until the descriptor next reports (lazy
    # removal); a socket closed meanwhile and a new one given the same number must still
    # be watched when a reader is added for it.
    async def main():
        lp = asyncio.get_running_loop()
        a, b = socket.socketpair()
        got = lp.create_future()
        lp.add_reader(a.fileno(), lambda: None)
        await asyncio.sleep(0)
        lp.remove_reader(a.fileno())
        fd = a.fileno()
        a.close()
        b.close()
        c, d = socket.socketpair()
        try:
            if c.fileno() != fd:  # make the new socket take the old number
                os.dup2(c.fileno(), fd)
                c.close()
                c = socket.socket(fileno=fd)
            lp.add_reader(fd, lambda: got.done() or got.set_result(c.recv(10)))
            d.send(b"ping")
            return await asyncio.wait_for(got, 5)
        finally:
            lp.remove_reader(fd)
            c.close()
            d.close()

    assert loop.run_until_complete(main()) == b"ping"


@pytest.mark.timeout(30)
def test_sock_recv_wait_then_transport_on_same_socket(loop):
    # a one-shot sock_recv wait leaves its descriptor to a transport created afterwards
    async def main():
        lp = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        t = asyncio.ensure_future(lp.sock_recv(a, 10))
        await asyncio.sleep(0)
        b.send(b"one")
        assert await t == b"one"
        q = asyncio.Queue()

        class P(asyncio.Protocol):
            def data_received(self, data):
                q.put_nowait(data)

        tr, _ = await lp.connect_accepted_socket(P, a)
        b.send(b"two")
        data = await asyncio.wait_for(q.get(), 5)
        tr.close()
        b.close()
        await asyncio.sleep(0.01)
        return data

    assert loop.run_until_complete(main()) == b"two"


def test_debug_exception_context_has_source_traceback(loop):
    # asyncio's Handle._run puts the handle's creation traceback into the context in debug
    # mode; the frame list ends in the function that scheduled the callback.
    loop.set_debug(True)
    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    def bad():
        1 / 0

    def schedule_it():
        return loop.call_soon(bad)

    handle = schedule_it()
    loop.call_soon(loop.stop)
    loop.run_forever()
    (ctx,) = contexts
    assert isinstance(ctx["exception"], ZeroDivisionError)
    tb = ctx["source_traceback"]
    assert tb is handle._source_traceback
    assert tb[-1].name == "schedule_it"


@pytest.mark.parametrize("kind", [int, float, fractions.Fraction])
def test_call_at_keeps_when_as_given(loop, kind):
    """asyncio's TimerHandle keeps call_at's `when` object: an int stays an int in when(),
    _when, repr() and hash(); the timer still fires at that time."""
    when = kind(int(loop.time()) + 1000)
    h = loop.call_at(when, lambda: None)
    assert type(h.when()) is kind and h.when() == when
    assert h._when == when and type(h._when) is kind
    assert f"when={when} " in repr(h)  # str(), as asyncio formats it
    assert hash(h) == hash(when)
    h.cancel()
    fired = []
    soon = loop.call_at(kind(int(loop.time())), fired.append, 1)  # in the past: runs now
    assert type(soon.when()) is kind
    loop.run_until_complete(asyncio.sleep(0.01))
    assert fired == [1]
