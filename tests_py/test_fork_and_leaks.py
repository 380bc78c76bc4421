"""Process-level behaviour: the fork guard, lazy loading of the Go engine, multiprocessing
with 'spawn', and the absence of leaks (objects, references, memory, file descriptors).
"""
from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import socket
import sys
import weakref

import pytest

import goloop
from loophelpers import LOOP_KINDS, make_loop, open_fds, run_one_iteration, run_script

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------------------------------
# the fork guard (in subprocesses: a forked child must never hang the test run)
# ---------------------------------------------------------------------------------------

FORK_AFTER_RUNTIME = r"""
import asyncio, os, sys
import goloop

loop = goloop.new_event_loop()
assert loop.run_until_complete(asyncio.sleep(0.001, "parent-ok")) == "parent-ok"
from goloop import http as ghttp

def check(name, f):
    try:
        r = f()
    except RuntimeError as e:
        msg = str(e)
        ok = "spawn" in msg or "forkserver" in msg
        print(f"{name}: RuntimeError {'mentions-spawn' if ok else 'WITHOUT-HINT: ' + msg}", flush=True)
    except BaseException as e:
        print(f"{name}: WRONG {type(e).__name__}: {e}", flush=True)
    else:
        print(f"{name}: NO-ERROR {r!r}", flush=True)

def in_child():
    check("new_event_loop", goloop.new_event_loop)
    check("call_soon", lambda: loop.call_soon(print))
    check("call_later", lambda: loop.call_later(1, print))
    check("call_soon_threadsafe", lambda: loop.call_soon_threadsafe(print))
    coro = asyncio.sleep(0)
    check("run_until_complete", lambda: loop.run_until_complete(coro))
    coro.close()
    check("run_forever", loop.run_forever)
    check("goloop.run", lambda: goloop.run(asyncio.sleep(0)))
    check("HttpRequestParser", lambda: ghttp.HttpRequestParser(object()))
    # asyncio's own loop keeps working in the child
    print("asyncio.run:", asyncio.run(asyncio.sleep(0, "ok")), flush=True)

pid = os.fork()
if pid == 0:
    try:
        in_child()
    finally:
        sys.stdout.flush()
        if os.environ.get("CHILD_EXIT") == "os._exit":
            os._exit(0)
    sys.exit(0)  # a normal interpreter shutdown with goloop loaded: must not hang
_, status = os.waitpid(pid, 0)
print("child-exit:", os.waitstatus_to_exitcode(status), flush=True)
# the parent is unaffected
print("parent-after:", loop.run_until_complete(asyncio.sleep(0.001, "ok")), flush=True)
loop.close()
print("parent-done", flush=True)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("child_exit", ["sys.exit", "os._exit"])
def test_fork_guard(child_exit):
    r = run_script(FORK_AFTER_RUNTIME, timeout=30, env={"CHILD_EXIT": child_exit})
    out = r.stdout
    assert r.returncode == 0, (out, r.stderr)
    for name in ["new_event_loop", "call_soon", "call_later", "call_soon_threadsafe",
                 "run_until_complete", "run_forever", "HttpRequestParser"]:
        assert f"{name}: RuntimeError mentions-spawn" in out, (name, out, r.stderr)
    # goloop.run, a policy path, runs on asyncio's loop there (test_fork_fallback.py)
    assert "goloop.run: NO-ERROR None" in out, (out, r.stderr)
    assert "asyncio.run: ok" in out
    assert "child-exit: 0" in out, (out, r.stderr)
    assert "parent-after: ok" in out
    assert "parent-done" in out
    # each failing call raised once; nothing more at the child's exit (no __del__ of the
    # half-made loop, or of the parent's loop, raising the fork error again)
    assert "Exception ignored" not in r.stderr, r.stderr
    assert "RuntimeError" not in r.stderr, r.stderr


FORK_BEFORE_RUNTIME = r"""
import asyncio, os, sys
import goloop
assert "goloop._goloop" not in sys.modules
pid = os.fork()
if pid == 0:
    # the Go runtime was never started in the parent: the child may use goloop
    code = 0
    try:
        r = goloop.run(asyncio.sleep(0.001, "child-ok"))
        print("child:", r, flush=True)
    except BaseException as e:
        print("child-error:", type(e).__name__, e, flush=True)
        code = 3
    os._exit(code)
_, status = os.waitpid(pid, 0)
print("child-exit:", os.waitstatus_to_exitcode(status), flush=True)
print("parent:", goloop.run(asyncio.sleep(0.001, "parent-ok")), flush=True)
"""


@pytest.mark.timeout(60)
def test_fork_before_runtime_started_is_allowed():
    r = run_script(FORK_BEFORE_RUNTIME, timeout=30)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "child: child-ok" in r.stdout, (r.stdout, r.stderr)
    assert "child-exit: 0" in r.stdout
    assert "parent: parent-ok" in r.stdout


# Interpreter exit frees faulthandler's alternate signal stack and disables sigaltstack on the
# main thread before its last garbage collection, which traverses and frees the loops still
# alive, in Go. Go took faulthandler's stack as its own when the main thread first called into
# Go, so a signal Go handles arriving then (SIGURG: its preemption signal) used to abort the
# process ("fatal error: non-Go code disabled sigaltstack"; seen in CI at the exit of CPython's
# test_unix_events on 3.13t). Here a sibling process sends SIGURG all along the exit, while a
# loop holding many handles lives until the interpreter state is cleared.
SIGNAL_DURING_EXIT = r"""
import asyncio, codecs, faulthandler, os, subprocess, sys, time
import goloop

faulthandler.enable()              # before the main thread's first call into Go
loop = goloop.new_event_loop()
loop.run_until_complete(asyncio.sleep(0))
for _ in range(200_000):
    loop.call_soon(print)          # Go holds them: traversing and freeing the loop takes a while
codecs.register(lambda name, _keep=loop: None)   # cleared with the interpreter state
del loop
subprocess.Popen([sys.executable, "-c", '''if 1:
    import os, signal, sys, time
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            os.kill(int(sys.argv[1]), signal.SIGURG)
        except ProcessLookupError:
            break
        time.sleep(0.0002)
''', str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.1)
print("exiting", flush=True)
"""


@pytest.mark.timeout(120)
def test_signal_during_interpreter_exit():
    for _ in range(3):
        r = run_script(SIGNAL_DURING_EXIT, timeout=60)
        assert "fatal error" not in r.stderr, r.stderr[:3000]
        assert r.returncode == 0, r.stderr[:3000]
        assert r.stdout == "exiting\n"


@pytest.mark.timeout(60)
def test_import_does_not_load_engine():
    r = run_script("""
        import sys
        import goloop
        assert "goloop._goloop" not in sys.modules, "import goloop loaded the Go engine"
        goloop.EventLoopPolicy()
        goloop.install()
        assert "goloop._goloop" not in sys.modules, "install() loaded the Go engine"
        loop = goloop.new_event_loop()
        assert "goloop._goloop" in sys.modules
        loop.close()
        print("ok")
    """, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def _spawn_worker(n: int):
    import asyncio as aio

    import goloop as gl

    async def main():
        await aio.sleep(0.001)
        loop = aio.get_running_loop()
        return n * n, type(loop).__module__

    return gl.run(main())


@pytest.mark.timeout(90)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_multiprocessing_children_use_goloop(gloop, method):
    # the parent has the Go runtime running (gloop); children are started cleanly
    gloop.run_until_complete(asyncio.sleep(0))
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        results = pool.map(_spawn_worker, range(4), chunksize=1)
    assert [r[0] for r in results] == [0, 1, 4, 9]
    assert all(r[1] == "goloop._loop" for r in results)
    # and the parent's loop still works
    assert gloop.run_until_complete(asyncio.sleep(0, "ok")) == "ok"


# ---------------------------------------------------------------------------------------
# leaks
# ---------------------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _gc_count() -> int:
    gc.collect()
    return len(gc.get_objects())


MB = 1 << 20


def _noop(*args):
    pass


def test_no_leak_million_call_soon(gloop):
    def batch():
        for _ in range(100_000):
            gloop.call_soon(_noop)
        run_one_iteration(gloop)

    for _ in range(2):  # warm-up: queues reach their final size
        batch()
    objs, rss, fds = _gc_count(), _rss(), open_fds()
    for _ in range(10):
        batch()
    assert gloop._stats()[0] == 0  # ready queue empty
    assert _gc_count() - objs < 200
    assert _rss() - rss < 20 * MB
    assert open_fds() == fds


def test_no_leak_tasks(gloop):
    async def child(i):
        await asyncio.sleep(0)
        return i

    async def batch():
        res = await asyncio.gather(*(child(i) for i in range(10_000)))
        assert res[-1] == 9_999

    for _ in range(2):
        gloop.run_until_complete(batch())
    objs, rss, fds = _gc_count(), _rss(), open_fds()
    for _ in range(18):  # 180k, + 20k of warm-up: 200k tasks
        gloop.run_until_complete(batch())
    assert _gc_count() - objs < 200
    assert _rss() - rss < 20 * MB
    assert open_fds() == fds


def test_no_leak_timers_and_cancellation(gloop):
    def batch():
        hs = [gloop.call_later(100, _noop, i) for i in range(20_000)]
        for h in hs[::2]:
            h.cancel()
        for i in range(5_000):
            gloop.call_later(0, _noop, i)
        gloop.call_later(0.001, gloop.stop)
        gloop.run_forever()
        for h in hs:
            h.cancel()
        run_one_iteration(gloop)

    batch()
    objs, rss = _gc_count(), _rss()
    for _ in range(5):
        batch()
    assert gloop._stats()[1] == 0  # no timers left in the heap
    assert gloop._timer_cancelled_count == 0
    assert _gc_count() - objs < 200
    assert _rss() - rss < 20 * MB


class _Marker:
    pass


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_callback_arguments_released(kind):
    # the loop drops its references to callbacks and arguments once they ran or were
    # cancelled: the refcount of an argument returns to its baseline
    loop = make_loop(kind)
    try:
        arg = _Marker()
        base = sys.getrefcount(arg)
        for _ in range(1000):
            loop.call_soon(_noop, arg)
            loop.call_soon_threadsafe(_noop, arg)
            loop.call_later(0, _noop, arg)
            loop.call_later(100, _noop, arg).cancel()
            loop.call_soon(_noop, arg).cancel()
        loop.call_later(0.001, loop.stop)
        loop.run_forever()
        run_one_iteration(loop)
        assert sys.getrefcount(arg) == base
        a, b = socket.socketpair()
        with a, b:
            for _ in range(1000):
                loop.add_reader(a.fileno(), _noop, arg)
                loop.add_writer(a.fileno(), _noop, arg)
            assert sys.getrefcount(arg) <= base + 2  # only the current reader and writer
            loop.remove_reader(a.fileno())
            loop.remove_writer(a.fileno())
        assert sys.getrefcount(arg) == base
        pending = [loop.call_soon(_noop, arg) for _ in range(10)]
        pending += [loop.call_later(100, _noop, arg) for _ in range(10)]
        del pending
    finally:
        loop.close()
    gc.collect()
    assert sys.getrefcount(arg) == base  # close() dropped the pending ones


def test_no_leak_exception_path(gloop):
    contexts = []
    gloop.set_exception_handler(lambda lp, c: contexts.append(1))

    def bad(i):
        raise ValueError(i)

    def batch():
        for i in range(2_000):
            gloop.call_soon(bad, i)
        run_one_iteration(gloop)

    batch()
    objs = _gc_count()
    for _ in range(5):
        batch()
    assert len(contexts) == 12_000
    assert _gc_count() - objs < 200


def test_no_leak_threadsafe(gloop):
    import threading

    def batch():
        def producer():
            for _ in range(20_000):
                gloop.call_soon_threadsafe(_noop)
            gloop.call_soon_threadsafe(gloop.stop)

        t = threading.Thread(target=producer)
        gloop.call_soon(t.start)
        gloop.run_forever()
        t.join()
        # the stop may have run before the last callbacks were merged: drain them
        while gloop._stats()[0]:
            run_one_iteration(gloop)

    batch()
    objs, rss = _gc_count(), _rss()
    for _ in range(5):
        batch()
    assert _gc_count() - objs < 200
    assert _rss() - rss < 20 * MB


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_create_close_many_loops_leaks_no_fd(kind):
    def cycle():
        loop = make_loop(kind)
        loop.run_until_complete(asyncio.sleep(0))
        a, b = socket.socketpair()
        loop.add_reader(a.fileno(), _noop)  # left registered: close() must cope
        loop.call_later(100, _noop)
        loop.close()
        a.close()
        b.close()

    cycle()
    gc.collect()
    fds, objs = open_fds(), _gc_count()
    for _ in range(200):
        cycle()
    gc.collect()
    assert open_fds() == fds
    assert _gc_count() - objs < 200


def test_closed_loop_is_collected(gloop):
    gloop.run_until_complete(asyncio.sleep(0))
    gloop.close()
    lp = goloop.new_event_loop()
    lp.call_soon(_noop)
    lp.call_later(100, _noop)
    lp.close()
    ref = weakref.ref(lp)
    del lp
    gc.collect()
    assert ref() is None


def _unclosed_loop_is_collected(kind):
    gc.collect()
    fds = open_fds()
    loop = make_loop(kind)
    loop.run_until_complete(asyncio.sleep(0))
    ref = weakref.ref(loop)
    del loop
    with pytest.warns(ResourceWarning, match="unclosed event loop"):
        gc.collect()
    assert ref() is None
    assert open_fds() == fds


def test_unclosed_loop_is_collected_asyncio():
    # the oracle: asyncio's forgotten loop is collected, warned about and closed
    _unclosed_loop_is_collected("asyncio")


def test_unclosed_loop_is_collected_goloop():
    _unclosed_loop_is_collected("goloop")


def test_unclosed_loop_at_interpreter_exit_raises_nothing():
    # Loop.__del__ runs during interpreter shutdown, when module globals may be gone
    r = run_script("""
        import asyncio, goloop
        def main():
            loop = goloop.new_event_loop()
            asyncio.set_event_loop(loop)  # the policy holds it until the interpreter exits
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()
            unclosed = goloop.new_event_loop()
            asyncio.get_event_loop_policy()._unclosed = unclosed
        main()
    """)
    assert r.returncode == 0, r.stderr
    assert "Exception ignored" not in r.stderr, r.stderr
