"""Freed handles are reused (GIL builds: loop_handle.c keeps up to 256 freed Handles and
TimerHandles for the next call_soon/call_later). Reuse must be invisible: a handle is
reused only once nothing refers to it, and a reused one carries nothing of its past (its
context, type, `when`, cancelled state). The checks run on asyncio's loop (the oracle) and
goloop's; the free list's own count is goloop's.
"""
from __future__ import annotations

import contextvars
import gc
import sysconfig
import weakref

import pytest

VAR = contextvars.ContextVar("VAR", default="unset")
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def run_queued(loop):
    loop.call_soon(loop.stop)
    loop.run_forever()


def test_a_run_handle_is_freed(loop):
    h = loop.call_soon(lambda: None)
    ref = weakref.ref(h)
    del h
    run_queued(loop)
    assert ref() is None  # freed by its last reference, no collection needed


def test_a_kept_handle_is_not_reused(loop):
    def a(x):
        pass

    def b(x):
        pass

    kept = loop.call_soon(a, 1)
    run_queued(loop)
    others = []
    for _ in range(3):
        for i in range(50):  # freed handles, then new ones that may take their place
            loop.call_soon(b, i)
        others += [loop.call_soon(b, -1), loop.call_later(0, b, -2)]
        run_queued(loop)
    assert all(o is not kept for o in others)
    assert kept._callback is a and kept._args == (1,) and not kept.cancelled()


def test_reused_handles_run_in_their_own_contexts(loop):
    seen = []

    def check(expected):
        seen.append((expected, VAR.get()))
        VAR.set("changed-by-callback")

    for r in range(5):  # each round reuses the handles the previous one freed
        for i in range(20):
            ctx = contextvars.copy_context()
            ctx.run(VAR.set, f"explicit{r}.{i}")
            loop.call_soon(check, f"explicit{r}.{i}", context=ctx)
            VAR.set(f"current{r}.{i}")
            loop.call_soon(check, f"current{r}.{i}")
            loop.call_later(0, check, f"current{r}.{i}")
        VAR.set("unset")
        run_queued(loop)
    assert len(seen) == 5 * 20 * 3
    assert all(expected == got for expected, got in seen)
    assert VAR.get() == "unset"


def test_reused_handles_carry_nothing_of_their_past(loop):
    t0 = loop.time()
    timers = [loop.call_at(int(t0) + 1000 + i, lambda: None) for i in range(10)]
    assert all(isinstance(t.when(), int) for t in timers)
    for t in timers:
        t.cancel()
    handles = [loop.call_soon(lambda: None) for _ in range(10)]
    for h in handles:
        h.cancel()
    del timers, handles
    run_queued(loop)
    gc.collect()
    fresh = [loop.call_soon(lambda: None) for _ in range(10)]
    later = [loop.call_later(1000, lambda: None) for _ in range(10)]
    try:
        for h in fresh:
            assert not h.cancelled() and "cancelled" not in repr(h)
            assert type(h).__name__ == "Handle" and not hasattr(h, "when")
        for t in later:
            assert not t.cancelled() and type(t).__name__ == "TimerHandle"
            assert isinstance(t.when(), float) and t.when() > t0 + 999
    finally:
        for t in later:
            t.cancel()
    run_queued(loop)


@pytest.mark.skipif(FREE_THREADED, reason="free-threaded builds keep no free list")
def test_freed_handles_wait_on_the_free_list(gloop):
    from goloop import _goloop

    gc.collect()
    gc.disable()  # (a collection freeing some earlier test's handles would add to the count)
    try:
        for _ in range(300):  # fill the list (256)
            gloop.call_soon(lambda: None)
        run_queued(gloop)
        full = _goloop._handle_free_count()
        assert full == 256
        kept = [gloop.call_soon(lambda: None) for _ in range(10)]
        assert _goloop._handle_free_count() == full - 10  # taken from the list
        run_queued(gloop)
        assert _goloop._handle_free_count() == full - 10  # (stop's came back; these are held)
        del kept
        assert _goloop._handle_free_count() == full
    finally:
        gc.enable()
