"""The scheduler's hot paths and what must not change with them: the C Task's
call_soon(step, context=ctx) (on 3.11 the running loop's call_soon is bound once), the
callback check's fast path for C callables, create_task's Task(coro, loop=), and the run
phase's clock read every few iterations (loop_core.c, gl_run_ready). Each runs on
asyncio's loop (the oracle) and goloop's, but for the goloop-only checks.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import weakref

import pytest

VAR = contextvars.ContextVar("VAR", default="unset")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ call loop.call_soon as a method")
def test_running_loop_call_soon_is_bound_once(gloop):
    async def main():
        await asyncio.sleep(0)
        return gloop.call_soon is gloop.call_soon

    assert gloop.run_until_complete(main())
    assert gloop.call_soon is not gloop.call_soon  # not running: made per access, no cycle
    assert type(gloop).call_soon(gloop, lambda: None) is not None  # the class's method


def test_a_loop_that_ran_tasks_is_freed_without_the_collector(loop_kind):
    import gc

    from loophelpers import close_loop, make_loop

    lp = make_loop(loop_kind)

    async def main():
        await asyncio.sleep(0)
        return lp.call_soon

    meth = lp.run_until_complete(main())
    close_loop(lp)
    ref = weakref.ref(lp)
    gc.disable()
    try:
        del lp, meth
        assert ref() is None
    finally:
        gc.enable()


def test_an_instance_call_soon_is_what_tasks_call(loop):
    calls = []
    real = loop.call_soon

    def call_soon(cb, *args, context=None):
        calls.append(context)
        return real(cb, *args, context=context)

    loop.call_soon = call_soon
    try:
        async def main():
            VAR.set("task")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return VAR.get()

        assert loop.run_until_complete(main()) == "task"
    finally:
        del loop.call_soon
    assert sum(1 for c in calls if c is not None and c.get(VAR) == "task") >= 2


def test_callback_check(gloop):
    # (asyncio checks callbacks in debug mode only; goloop always, as in debug mode)
    loop = gloop

    async def coro_fn():
        pass

    fut = loop.create_future()
    loop.call_soon(fut.set_result, 1)  # a bound builtin method: a static C callable
    loop.call_soon(functools.partial(print, end=""), "")
    for bad in (coro_fn, functools.partial(coro_fn), 5, None):
        with pytest.raises(TypeError):
            loop.call_soon(bad)
    c = coro_fn()
    with pytest.raises(TypeError):
        loop.call_soon(c)
    c.close()
    assert loop.run_until_complete(fut) == 1


_CYTHON_CHECK = r"""
import asyncio, inspect, sys
import goloop._compat as compat
asked = []
for name in ("iscoroutine", "iscoroutinefunction"):
    orig = getattr(compat, name)
    setattr(compat, name, lambda f, orig=orig: (asked.append(f), orig(f))[1])
import goloop, httptools
meth = httptools.HttpRequestParser.get_method  # a Cython 3 function: a heap type with a dict
assert type(meth).__name__ == "cython_function_or_method", type(meth)
loop = goloop.new_event_loop()
parser = httptools.HttpRequestParser(object())
loop.call_soon(parser.get_method).cancel()  # bound
loop.call_soon(meth, parser).cancel()
loop.call_later(1, meth, parser).cancel()
print("plain asked", len(asked))
# a marked function is left to asyncio's check, which refuses it
if sys.version_info >= (3, 12):
    inspect.markcoroutinefunction(meth)
else:
    meth._is_coroutine = asyncio.coroutines._is_coroutine
try:
    loop.call_soon(parser.get_method)
except TypeError as exc:
    print("marked refused", "coroutines cannot be used" in str(exc), len(asked) > 0)
loop.close()
"""


def test_callback_check_cython_functions_without_python(tmp_path):
    # Cython 3's functions (asyncpg's done callbacks, one per query) are decided in C: no
    # call into asyncio's iscoroutinefunction (inspect's Python) when their code is not a
    # coroutine's and their dict holds no mark; a marked one is still asyncio's to refuse.
    import subprocess

    pytest.importorskip("httptools")
    out = subprocess.run([sys.executable, "-c", _CYTHON_CHECK], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "plain asked 0" in out.stdout, out.stdout
    assert "marked refused True True" in out.stdout, out.stdout


def test_create_task_loop_name_and_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, "given")

    async def read():
        return VAR.get()

    async def main():
        t1 = loop.create_task(read())
        t2 = loop.create_task(read(), name="named", context=ctx)
        return t1, t2, await t1, await t2

    before = loop.create_task(read())  # made before the loop runs
    t1, t2, v1, v2 = loop.run_until_complete(main())
    assert loop.run_until_complete(before) == "unset"
    assert before.get_loop() is loop and t1.get_loop() is loop and t2.get_loop() is loop
    assert t1.get_name().startswith("Task-") and t2.get_name() == "named"
    assert (v1, v2) == ("unset", "given")


def test_create_task_on_another_loop_from_a_running_one(loop, loop_kind):
    # A task made while this thread runs the loop finds it as the running loop; one made then
    # on a loop that is not running (nor this thread's) must still be that loop's.
    from loophelpers import close_loop, make_loop

    other = make_loop(loop_kind)

    async def value():
        return 7

    async def main():
        mine, theirs = loop.create_task(value()), other.create_task(value())
        return mine, theirs, await mine

    try:
        mine, theirs, v = loop.run_until_complete(main())
        assert mine.get_loop() is loop and theirs.get_loop() is other and v == 7
        assert other.run_until_complete(theirs) == 7
    finally:
        close_loop(other)


def test_a_timer_falling_due_inside_a_fast_chain_interrupts_it(loop):
    # The run phase reads the clock only every few iterations of a fast chain: a timer that
    # falls due while the chain runs still runs then, not after the chain.
    cap = 2_000_000  # far more iterations than 2 ms of a chain takes
    state = {"n": 0, "fired_at": None}

    def link():
        state["n"] += 1
        if state["fired_at"] is None and state["n"] < cap:
            loop.call_soon(link)
        else:
            loop.stop()

    def timer():
        state["fired_at"] = state["n"]

    loop.call_later(0.002, timer)
    loop.call_soon(link)
    loop.run_forever()
    assert state["fired_at"] is not None and state["fired_at"] < cap
    assert state["n"] <= state["fired_at"] + 1  # the chain ended right after it


def test_loop_and_transport_c_methods_are_their_classes_own(gloop):
    # CPython's specialized call of a C method needs the instance's exact type to be the
    # method's class: goloop.Loop and its transports get their own descriptors of LoopCore's
    # and SocketTransportCore's methods (module.c, _own_methods), which behave as before.
    from goloop import _goloop
    from goloop._transports import SocketTransport

    cls = type(gloop)
    for name in ("call_later", "call_at", "create_task", "time", "create_future", "call_soon_threadsafe"):
        d = cls.__dict__[name]
        assert d.__objclass__ is cls and d.__name__ == name
    assert SocketTransport.__dict__["write"].__objclass__ is SocketTransport
    with pytest.raises(TypeError):
        cls.call_later(object(), 1, print)  # the descriptor's own type check
    with pytest.raises(TypeError):
        SocketTransport.write(object(), b"x")

    class Sub(cls):
        pass

    sub = Sub()
    try:
        fired = []
        sub.call_later(0, fired.append, 1)
        sub.call_soon(fired.append, 2)
        sub.run_until_complete(asyncio.sleep(0.01))
        assert sorted(fired) == [1, 2]
    finally:
        sub.close()


def test_call_soon_descriptor_called_as_a_method(gloop):
    # LOAD_METHOD calls the class's call_soon with the loop as first argument (3.11: the
    # descriptor that binds once, called through its own vectorcall)
    cls = type(gloop)
    got = []
    h = cls.call_soon(gloop, got.append, 1, context=contextvars.copy_context())
    assert not h.cancelled()
    gloop.run_until_complete(asyncio.sleep(0))
    assert got == [1]
    with pytest.raises(TypeError):
        cls.call_soon(object(), print)
    with pytest.raises(TypeError):
        cls.call_soon()


def _specializes():
    """Whether this interpreter specializes a method call's lookup (not free-threaded 3.13)."""
    import dis

    class C:
        def m(self):
            pass

    def f(o):
        o.m()

    c = C()
    for _ in range(100):
        f(c)
    return any("WITH_VALUES" in i.opname for i in dis.get_instructions(f, adaptive=True))


@pytest.mark.skipif(not _specializes(), reason="this interpreter does not specialize method lookups")
def test_loop_method_calls_take_the_specialized_paths(gloop):
    # the loop's instance attributes live in the object (inline values: loop_new readies them),
    # so `loop.call_later(...)` is specialized as a method of the instance's type, and the call
    # as a C method descriptor's
    import dis

    def f(loop):
        loop.time()
        return loop.call_later(3600, print)

    for _ in range(200):
        f(gloop).cancel()
    ops = [i.opname for i in dis.get_instructions(f, adaptive=True)]
    assert _lookups_specialized(ops, type(gloop).__flags__), ops
    assert sum("METHOD_DESCRIPTOR" in op for op in ops) >= 2, ops


def _lookups_specialized(ops, flags):
    """Whether every method lookup in ops took the specialized path for a type of these
    __flags__.

    CPython 3.13 gives inline values (Py_TPFLAGS_INLINE_VALUES, 1 << 2) only to a type whose
    instances have no C fields (typeobject.c, type_ready_managed_dict): LoopCore and
    SocketTransportCore have them, so there a lookup is specialized only while the instance
    made no __dict__ (LOAD_ATTR_METHOD_LAZY_DICT): their attributes live in slots."""
    lookups = [op for op in ops if "METHOD" in op and "LOAD" in op]
    inline = sys.version_info < (3, 13) or bool(flags & (1 << 2))
    want = "WITH_VALUES" if inline else "LAZY_DICT"
    return bool(lookups) and all(want in op for op in lookups)


_AFTER_USE = r"""
import asyncio, dis, socket, subprocess, sys, tempfile, os
import goloop

transports = []


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        transports.append(transport)
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def main(loop):
    srv = await loop.create_server(Echo, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"ping")
    assert await r.readexactly(4) == b"ping"
    await loop.run_in_executor(None, int)
    p = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass", stdout=subprocess.DEVNULL)
    await p.wait()
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.setblocking(False)
        await loop.sock_sendall(a, b"x")
        assert await loop.sock_recv(b, 1) == b"x"
    us = await loop.create_unix_server(asyncio.Protocol, os.path.join(tempfile.mkdtemp(), "s"))
    us.close()
    await us.wait_closed()
    w.close()
    await w.wait_closed()
    srv.close()
    await srv.wait_closed()


def f(loop):
    return loop.call_soon(print)


def g(tr):
    return tr.is_closing()


loop = goloop.new_event_loop()
loop.set_debug(True)
loop.run_until_complete(main(loop))
loop.set_debug(False)
loop.run_until_complete(loop.shutdown_default_executor())
tr = transports[0]
assert type(tr).__name__ == "SocketTransport"
for _ in range(200):
    f(loop).cancel()
    g(tr)
for fn, obj in ((f, loop), (g, tr)):
    print(type(obj).__flags__, *[i.opname for i in dis.get_instructions(fn, adaptive=True)])
loop.close()
"""


@pytest.mark.skipif(not _specializes(), reason="this interpreter does not specialize method lookups")
def test_loop_and_transport_lookups_stay_specialized_after_use():
    # a loop's life (servers TCP and Unix, connections, an executor, a subprocess, socket
    # calls, debug mode) stores every attribute in the loop's and the transport's slots: no
    # __dict__ is made, and `loop.call_soon(...)` / `transport.is_closing()` keep their
    # specialized lookups. In a new interpreter: on 3.11/3.12 one instance attribute named
    # like a method, stored on any loop before (a test's patch), unspecializes that lookup
    # for every loop of the class (the name joins the class's shared keys).
    import subprocess

    out = subprocess.run([sys.executable, "-P", "-c", _AFTER_USE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line in lines:
        flags, *ops = line.split()
        assert _lookups_specialized(ops, int(flags)), line
