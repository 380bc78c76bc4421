"""The run phase: goloop runs the ready handles in one call into C, and keeps running the
iterations that follow there while only ready handles need the loop (loop_core.c,
gl_run_ready). These tests pin what asyncio's _run_once does at every iteration boundary
inside such a run of chained callbacks: timers that fall due, stop(), debug mode switched
on, exceptions, cancellation and contexts. Each runs on asyncio's loop (the oracle) and
goloop's.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import threading

import pytest

VAR = contextvars.ContextVar("VAR", default="unset")


def chain(loop, order, n, name="link", last=None):
    """Schedules n callbacks, each scheduling the next one (one iteration each)."""
    def link(i):
        order.append(f"{name}{i}")
        if i + 1 < n:
            loop.call_soon(link, i + 1)
        elif last is not None:
            last()
    loop.call_soon(link, 0)


def test_timer_made_in_a_chain_runs_at_the_next_iteration(loop):
    # asyncio: the due timer joins the ready queue at the start of the next iteration,
    # behind what is already ready, and ahead of what that iteration schedules.
    order = []

    def first():
        order.append("first")
        loop.call_later(0, order.append, "timer")
        loop.call_soon(second)

    def second():
        order.append("second")
        chain(loop, order, 5, last=loop.stop)

    loop.call_soon(first)
    loop.run_forever()
    assert order == ["first", "second", "timer", "link0", "link1", "link2", "link3", "link4"]


def test_call_at_in_the_past_inside_a_long_chain(loop):
    # Timers made all along a chain: each joins the ready queue at the very next iteration,
    # behind the link that iteration runs.
    order = []

    def link(i):
        order.append(i)
        if i % 7 == 3:
            loop.call_at(loop.time() - 1, order.append, f"t{i}")
        if i < 300:
            loop.call_soon(link, i + 1)
        else:
            loop.stop()

    loop.call_soon(link, 0)
    loop.run_forever()
    late = [i for i in range(3, 300, 7) if order.index(f"t{i}") != order.index(i + 1) + 1]
    assert late == []


def test_stop_in_a_chain_ends_run_forever_after_that_iteration(loop):
    order = []

    def link(i):
        order.append(i)
        loop.call_soon(link, i + 1)
        if i == 10:
            loop.stop()

    loop.call_soon(link, 0)
    loop.run_forever()
    assert order == list(range(11))
    loop.call_soon(loop.stop)
    loop.run_forever()  # the handle queued by the last iteration runs on the next run
    assert order == list(range(12))


def test_cancel_a_handle_of_the_next_iteration(loop):
    order = []
    later = []

    def link(i):
        order.append(i)
        if i == 5:
            later[0].cancel()
        if i < 10:
            h = loop.call_soon(link, i + 1)
            if i == 4:
                later.append(loop.call_soon(order.append, "cancelled"))
            del h
        else:
            loop.stop()

    loop.call_soon(link, 0)
    loop.run_forever()
    assert order == list(range(11))


def test_exception_in_a_chain_goes_to_the_handler_and_the_chain_goes_on(loop):
    contexts = []
    loop.set_exception_handler(lambda lp, c: contexts.append(c))
    order = []

    def link(i):
        order.append(i)
        if i < 10:
            loop.call_soon(link, i + 1)
            if i == 3:
                loop.call_soon(boom)
        else:
            loop.stop()

    def boom():
        order.append("boom")
        raise ValueError("boom")

    loop.call_soon(link, 0)
    loop.run_forever()
    assert order == [0, 1, 2, 3, 4, "boom", 5, 6, 7, 8, 9, 10]
    assert len(contexts) == 1
    assert isinstance(contexts[0]["exception"], ValueError)
    assert contexts[0]["handle"]._callback is boom


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_base_exception_in_a_chain_keeps_the_rest_queued(loop, exc):
    order = []

    def link(i):
        order.append(i)
        loop.call_soon(link, i + 1)
        if i == 20:
            loop.call_soon(raiser)
            loop.call_soon(order.append, "after")

    def raiser():
        raise exc()

    loop.call_soon(link, 0)
    with pytest.raises(exc):
        loop.run_forever()
    assert order == list(range(22))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert order == list(range(22)) + ["after", 22]


def test_contexts_in_a_chain(loop):
    seen = []

    def link(i):
        seen.append((i, VAR.get()))
        VAR.set(f"set-by-{i}")  # in this handle's copy: the next link's copy starts from it
        if i < 6:
            loop.call_soon(link, i + 1)
            loop.call_soon(sibling, i)  # a copy of the same context
        else:
            loop.stop()

    def sibling(i):
        seen.append(("sibling", i, VAR.get()))
        VAR.set("sibling")

    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "start")
    loop.call_soon(link, 0, context=ctx)
    loop.run_forever()
    assert seen[0] == (0, "start")
    for i in range(1, 7):
        assert (i, f"set-by-{i - 1}") in seen
    for i in range(6):
        assert ("sibling", i, f"set-by-{i}") in seen
    assert VAR.get() == "unset"
    assert ctx[VAR] == "set-by-0"


def test_alternating_contexts_in_one_batch(loop):
    ctxs = [contextvars.copy_context() for _ in range(3)]
    for i, c in enumerate(ctxs):
        c.run(VAR.set, i)
    seen = []

    def cb(i):
        seen.append((i, VAR.get()))
        VAR.set(VAR.get() * 10 + i)

    for rnd in range(3):
        for i, c in enumerate(ctxs):
            loop.call_soon(cb, i, context=c)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen[:3] == [(0, 0), (1, 1), (2, 2)]
    assert seen[3:6] == [(0, 0), (1, 11), (2, 22)]
    assert [c[VAR] for c in ctxs] == [0, 1111, 2222]


def test_set_debug_in_a_chain_reports_slow_callbacks_at_once(loop, caplog):
    # Debug mode switched on and off all along a chain: asyncio looks at it before each
    # handle, so exactly the links run while it is on are reported as slow (duration 0).
    loop.slow_callback_duration = 0.0
    on = set()

    def link(i):
        if loop.get_debug():
            on.add(i)
        loop.set_debug(i % 10 in (3, 4, 5))  # on for links 4, 5 and 6 of every ten
        if i < 200:
            loop.call_soon(link, i + 1)
        else:
            loop.stop()

    loop.call_soon(link, 0)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_forever()
    loop.set_debug(False)
    assert on == {i for i in range(200) if i % 10 in (4, 5, 6)}
    slow = {int(re.search(r"link\((\d+)\)", m).group(1)) for m in (r.getMessage() for r in caplog.records)
            if "Executing" in m and re.search(r"link\((\d+)\)", m)}
    # (whether the link that switches it off is reported differs between versions:
    # 3.11 reports it, 3.13 does not)
    assert {i for i in on if i % 10 != 6} <= slow <= on


def test_set_debug_mid_iteration_reports_the_rest_of_it(loop, caplog):
    loop.slow_callback_duration = 0.0
    for i in range(6):
        loop.call_soon(lambda i=i: loop.set_debug(True) if i == 2 else None)
    loop.call_soon(loop.stop)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_forever()
    loop.set_debug(False)
    slow = [r.getMessage() for r in caplog.records if "Executing" in r.getMessage() and "lambda" in r.getMessage()]
    assert len(slow) == 3  # the handles after the one that switched it on


def test_other_threads_handles_reach_a_chain(loop):
    # A chain that never ends by itself: only the other thread's handle stops it.
    done = threading.Event()
    order = []

    def link(i):
        if i == 0:
            threading.Thread(target=lambda: loop.call_soon_threadsafe(stop)).start()
        if not done.is_set():
            loop.call_soon(link, i + 1)

    def stop():
        done.set()
        order.append("stop")
        loop.stop()

    loop.call_soon(link, 0)
    loop.run_forever()
    assert order == ["stop"]


# ---------------------------------------------------------------------------------------
# A handle made without a context gets a copy of the current one (on GIL builds goloop
# keeps the copy's variables and makes the Context only when asked: loop_handle.c)
# ---------------------------------------------------------------------------------------


def test_pending_handle_context_is_a_copy_made_at_call_soon(loop):
    VAR.set("at-call")
    try:
        h = loop.call_soon(lambda: VAR.set("by-callback"))
        VAR.set("after")
        ctx = h._context
        assert ctx is h._context
        assert ctx[VAR] == "at-call"
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert ctx[VAR] == "by-callback"  # it ran in that Context
        assert VAR.get() == "after"
    finally:
        VAR.set("unset")


def test_handle_context_asked_after_it_ran(loop):
    h = loop.call_soon(lambda: VAR.set("by-callback"))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert h._context[VAR] == "by-callback"
    assert VAR.get() == "unset"


def test_handle_context_asked_by_its_own_callback(loop):
    seen = {}

    def cb():
        ctx = holder[0]._context
        VAR.set("inside")
        seen["value"] = ctx[VAR]
        with pytest.raises(RuntimeError):
            ctx.run(lambda: None)  # the entered Context itself
        seen["ctx"] = ctx

    holder = [loop.call_soon(cb)]
    loop.call_soon(lambda: seen.setdefault("next", VAR.get()))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen["value"] == "inside"
    assert seen["next"] == "unset"
    assert seen["ctx"] is holder[0]._context
    assert seen["ctx"][VAR] == "inside"


def test_handle_run_by_a_callback_gets_its_own_context(loop):
    seen = []

    def outer():
        VAR.set("outer")
        inner._run()
        seen.append(("outer", VAR.get()))
        inner.cancel()

    loop.call_soon(outer)
    inner = loop.call_soon(lambda: (seen.append(("inner", VAR.get())), VAR.set("inner")))
    loop.call_soon(lambda: seen.append(("later", VAR.get())))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == [("inner", "unset"), ("outer", "outer"), ("later", "unset")]
    assert inner._context[VAR] == "inner"


def test_failed_callback_context_reaches_the_handler(loop):
    got = []

    def handler(lp, context):
        got.append(context["handle"]._context[VAR])

    def cb():
        VAR.set("failing")
        raise ValueError("x")

    loop.set_exception_handler(handler)
    loop.call_soon(cb)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert got == ["failing"]


def test_values_set_by_callbacks_are_released_with_their_handles(loop):
    import gc
    import weakref

    class Obj:
        pass

    refs = []

    def cb():
        o = Obj()
        refs.append(weakref.ref(o))
        VAR.set(o)

    for _ in range(3):
        loop.call_soon(cb)
    loop.call_soon(loop.stop)
    loop.run_forever()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


# Queued handles and the collector: goloop takes a Handle queued by call_soon out of the
# collector's lists while it waits (a fan-out of a million handles is not walked by every
# collection); the loop reports what such a handle refers to while the queue is its only
# owner (loop_core.c, stage and loop_traverse).

def test_dropped_loop_with_a_queued_handle_held_elsewhere(loop):
    """A dropped, unclosed loop whose queued callback refers back to it: while the test
    holds the handle, nothing it reaches may be collected (or cleared); once dropped, the
    cycle is collected."""
    import gc
    import warnings
    import weakref

    class Obj:
        pass

    lp = type(loop)()
    obj = Obj()
    ref, lref = weakref.ref(obj), weakref.ref(lp)
    h = lp.call_soon(lambda o, lp=lp: None, obj)
    del obj, lp
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        assert ref() is not None and lref() is not None
        assert not lref().is_closed()
        lref().call_soon(lambda: None)  # still a working loop, not one the collector cleared
        del h
        gc.collect()
    assert ref() is None and lref() is None


def test_queued_handles_leave_the_collectors_lists(gloop):
    import gc
    import sysconfig

    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("free-threaded builds keep queued handles tracked")

    kept = gloop.call_soon(lambda: None)
    assert not gc.is_tracked(kept)
    gloop.call_soon(gloop.stop)
    gloop.run_forever()
    assert gc.is_tracked(kept)  # held here after it ran: the collector walks it again
