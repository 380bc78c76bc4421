"""A process forked after its parent started goloop's Go runtime keeps working: the policy
(goloop.EventLoopPolicy, goloop.install(), goloop.run) gives it asyncio's own loop, with one
RuntimeWarning naming why and the 'spawn'/'forkserver' alternative; an explicit
goloop.new_event_loop() still raises. Real code forks so: multiprocessing's 'fork' start
method (the default on Linux up to 3.13), Celery's prefork pool, gunicorn --preload,
aiohttp's test proxy (a forked worker serving TCP while the parent keeps its loop). Each
case runs in a fresh interpreter (a child that hung must not hang the test run)."""
import sys

import pytest

from loophelpers import run_script

pytestmark = pytest.mark.timeout(120)

MP_FORK = r"""
import asyncio, multiprocessing, os, warnings
import goloop

async def work(x):
    await asyncio.sleep(0.001)
    loop = asyncio.get_running_loop()
    return x * 2, type(loop).__module__

def child(x):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r1 = asyncio.run(work(x))            # the goloop policy, inherited
        r2 = goloop.run(work(x + 1))         # goloop.run
        r3 = asyncio.get_event_loop_policy().new_event_loop()
        r3.close()
        try:
            goloop.new_event_loop()
            explicit = "no error"
        except RuntimeError as e:
            explicit = "RuntimeError" + (" spawn" if "spawn" in str(e) else "")
    fork_warnings = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)
                     and "fork" in str(x.message)]
    return r1, r2, type(r3).__module__, explicit, fork_warnings, os.getpid()

if __name__ == "__main__":
    goloop.install()
    assert asyncio.run(work(0)) == (0, "goloop._loop"), asyncio.run(work(0))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        results = pool.map(child, [1, 2, 3, 4])
    for (r1, r2, r3, explicit, fw, pid), x in zip(results, [1, 2, 3, 4]):
        assert r1 == (2 * x, "asyncio.unix_events"), r1
        assert r2 == (2 * x + 2, "asyncio.unix_events"), r2
        assert r3 == "asyncio.unix_events", r3
        assert explicit == "RuntimeError spawn", explicit
    # one warning per process (a pool worker runs several tasks: it warns once in all)
    by_pid = {}
    for r in results:
        by_pid.setdefault(r[5], []).extend(r[4])
    for pid, fw in by_pid.items():
        assert len(fw) == 1, (pid, fw)
        assert "'spawn'" in fw[0] and "'forkserver'" in fw[0] and "fork()" in fw[0], fw[0]
    # the parent keeps goloop
    assert asyncio.run(work(5)) == (10, "goloop._loop")
    print("ok", len(by_pid))
"""


def test_multiprocessing_fork_children_run_asyncio():
    r = run_script(MP_FORK, timeout=100)
    assert r.returncode == 0 and r.stdout.startswith("ok"), (r.stdout, r.stderr)


FORK_FROM_THREAD = r"""
import asyncio, os, sys, threading, warnings
import goloop

# 3.12+ warns (DeprecationWarning) about forking a process with threads: the Go runtime's
# are among them; that warning is not goloop's to silence
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
goloop.install()
print("parent", goloop.run(asyncio.sleep(0, "ok")), flush=True)

def in_thread():
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always", RuntimeWarning)
                r = asyncio.run(asyncio.sleep(0.001, "child-ok"))
            n = sum(1 for x in w if issubclass(x.category, RuntimeWarning) and "fork" in str(x.message))
            print("child", r, n, flush=True)
        except BaseException as e:
            print("child-error", type(e).__name__, e, flush=True)
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print("child-exit", os.waitstatus_to_exitcode(status), flush=True)

t = threading.Thread(target=in_thread)
t.start()
t.join()
print("parent-after", goloop.run(asyncio.sleep(0, "ok")), flush=True)
"""


def test_fork_from_a_thread():
    r = run_script(FORK_FROM_THREAD, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "child child-ok 1" in r.stdout, (r.stdout, r.stderr)
    assert "child-exit 0" in r.stdout
    assert "parent-after ok" in r.stdout


PROXY_PATTERN = r"""
import asyncio, multiprocessing, os, signal, warnings
import goloop

def worker(conn):
    # a forked worker serving TCP with asyncio (aiohttp's tests' proxy.py does so)
    async def handle(reader, writer):
        line = await reader.readline()
        writer.write(b"echo " + line)
        await writer.drain()
        writer.close()

    async def serve():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        conn.send((server.sockets[0].getsockname()[1], type(asyncio.get_running_loop()).__module__))
        async with server:
            await server.serve_forever()

    warnings.simplefilter("ignore", RuntimeWarning)
    asyncio.run(serve())

async def main():
    # the parent's goloop loop runs while it forks the worker and talks to it
    assert type(asyncio.get_running_loop()).__module__ == "goloop._loop"
    ctx = multiprocessing.get_context("fork")
    a, b = ctx.Pipe()
    p = ctx.Process(target=worker, args=(b,), daemon=True)
    p.start()
    loop = asyncio.get_running_loop()
    port, kind = await asyncio.wait_for(loop.run_in_executor(None, a.recv), 60)
    for i in range(3):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"hello %d\n" % i)
        assert await asyncio.wait_for(r.readline(), 30) == b"echo hello %d\n" % i
        w.close()
    p.terminate()
    p.join(30)
    return kind

goloop.install()
print("worker-loop", goloop.run(main()), flush=True)
"""


def test_forked_worker_serves_while_the_parent_keeps_goloop():
    r = run_script(PROXY_PATTERN, timeout=100)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "worker-loop asyncio.unix_events" in r.stdout, (r.stdout, r.stderr)


GET_EVENT_LOOP = r"""
import asyncio, os, warnings
import goloop

goloop.install()
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)  # the parent's goloop loop, current in the main thread
loop.run_until_complete(asyncio.sleep(0))
pid = os.fork()
if pid == 0:
    warnings.simplefilter("ignore")
    try:
        l = asyncio.get_event_loop()  # not the parent's loop, whose Go half is gone
    except RuntimeError as e:  # 3.14+: no loop is made implicitly, as asyncio's own policy says
        print("child no current loop:", e, flush=True)
        os._exit(0)
    print("child", type(l).__module__, l.run_until_complete(asyncio.sleep(0, "ok")), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", type(asyncio.get_event_loop()).__module__, flush=True)
"""


def test_get_event_loop_in_a_forked_child():
    # The child never gets the parent's goloop loop: before 3.14 asyncio's policy makes the main
    # thread a new loop (asyncio's own, here); from 3.14 on it makes none and says so, as it does
    # after a fork with asyncio's own policy (events.on_fork resets the policy's loop).
    r = run_script(GET_EVENT_LOOP, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    if sys.version_info >= (3, 14):
        assert "child no current loop: There is no current event loop" in r.stdout, (r.stdout, r.stderr)
    else:
        assert "child asyncio.unix_events ok" in r.stdout, (r.stdout, r.stderr)
    assert "parent goloop._loop" in r.stdout
