"""Loops in several threads at once, and a free-threaded Python (3.13t) keeping its GIL off.

The thread tests run on every interpreter, on asyncio's own loop (the oracle) and on
goloop's: one loop per thread serving echo on a shared SO_REUSEPORT port, loops sending each
other call_soon_threadsafe callbacks while asyncio.to_thread runs, and a loop flooded with
call_soon_threadsafe from 8 threads that must still fire its timers and serve its sockets.
On a free-threaded build a crash here is a data race in goloop.
"""
from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time

import pytest

import goloop
from loophelpers import LOOP_KINDS, TESTS_DIR, close_loop, make_loop

pytestmark = pytest.mark.timeout(120)

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def run_in_threads(n, target):
    """Runs target(k) in n threads; re-raises the first exception a thread raised."""
    errors = []

    def wrap(k):
        try:
            target(k)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(k,), name=f"ft-{k}") for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive(), f"{t.name} hung"
    if errors:
        raise errors[0]


# ---------------------------------------------------------------------------------------
# the GIL stays off
# ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded (--disable-gil) Python")
def test_gil_stays_disabled_after_a_loop_ran():
    code = textwrap.dedent("""
        import asyncio, sys, threading, goloop

        async def main():
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            threading.Thread(target=loop.call_soon_threadsafe, args=(fut.set_result, 7)).start()
            assert await fut == 7
            assert await asyncio.to_thread(lambda: 42) == 42
            await asyncio.sleep(0.01)

        goloop.run(main())
        import goloop.http
        print("gil", sys._is_gil_enabled())
    """)
    env = dict(os.environ)
    env.pop("PYTHON_GIL", None)  # the interpreter's default: the GIL off
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(goloop.__file__)))
    # -W error::RuntimeWarning: the warning CPython gives when an extension re-enables the GIL
    proc = subprocess.run([sys.executable, "-P", "-W", "error::RuntimeWarning", "-c", code],
                          capture_output=True, text=True, timeout=60, env=env, cwd=TESTS_DIR)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["gil", "False"], (proc.stdout, proc.stderr)
    assert "GIL" not in proc.stderr, proc.stderr


def test_gil_disabled_flag_matches_build():
    # On a GIL build the flag is absent and _is_gil_enabled (3.13+) says True.
    if hasattr(sys, "_is_gil_enabled") and not FREE_THREADED:
        assert sys._is_gil_enabled()


# ---------------------------------------------------------------------------------------
# one echo server per thread on one SO_REUSEPORT port
# ---------------------------------------------------------------------------------------


class _Echo(asyncio.Protocol):
    def __init__(self, stats):
        self.stats = stats

    def connection_made(self, transport):
        self.transport = transport
        self.stats["conns"] += 1
        self.stats["loop"] = asyncio.get_running_loop()

    def data_received(self, data):
        self.stats["bytes"] += len(data)
        self.transport.write(data)


def _reuseport_socket(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    s.setblocking(False)
    return s


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="needs SO_REUSEPORT")
@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_echo_server_per_thread_on_reuseport(kind):
    nservers, nclients, msgs = 4, 24, 20
    first = _reuseport_socket(0)
    port = first.getsockname()[1]
    socks = [first] + [_reuseport_socket(port) for _ in range(nservers - 1)]
    stats = [{"conns": 0, "bytes": 0, "loop": None} for _ in range(nservers)]
    loops = [None] * nservers
    up = threading.Barrier(nservers + 1)

    def server(k):
        loop = make_loop(kind)
        loops[k] = loop
        try:
            srv = loop.run_until_complete(loop.create_server(lambda: _Echo(stats[k]), sock=socks[k]))
            loop.call_soon(up.wait)  # blocks this loop only until every server is up
            loop.run_forever()
            srv.close()
            loop.run_until_complete(srv.wait_closed())
        finally:
            close_loop(loop)

    def client(k):
        rnd = random.Random(k)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            for i in range(msgs):
                msg = rnd.randbytes(rnd.choice((1, 100, 4096, 70_000)))
                c.sendall(msg)
                got = bytearray()
                while len(got) < len(msg):
                    chunk = c.recv(len(msg) - len(got))
                    assert chunk, f"client {k}: connection closed after {len(got)} bytes"
                    got += chunk
                assert got == msg, f"client {k}, message {i}: wrong echo"
        return

    servers = [threading.Thread(target=server, args=(k,)) for k in range(nservers)]
    for t in servers:
        t.start()
    try:
        up.wait(30)
        run_in_threads(nclients, client)
    finally:
        for lp in loops:
            if lp is not None:
                lp.call_soon_threadsafe(lp.stop)
        for t in servers:
            t.join(30)
    assert not any(t.is_alive() for t in servers)
    assert sum(s["conns"] for s in stats) == nclients
    served = [s for s in stats if s["conns"]]
    for k, s in enumerate(stats):
        if s["conns"]:
            assert s["loop"] is loops[k], "a connection was served by another thread's loop"
    assert sum(s["bytes"] for s in served) > 0


# ---------------------------------------------------------------------------------------
# loops calling each other
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_loops_cross_call_soon_threadsafe_counts_add_up(kind):
    """8 threads, each running its own loop, send each other callbacks: every one arrives
    once, in the order each sender queued it, and asyncio.to_thread keeps working."""
    nloops, rounds, to_threads = 8, 600, 20
    loops = [None] * nloops
    running = threading.Barrier(nloops)
    finished = threading.Barrier(nloops)
    received = [[0] * nloops for _ in range(nloops)]  # received[dst][src], touched by dst only
    dones = [None] * nloops
    expected = rounds * (nloops - 1)

    def receive(dst, src, seq):
        row = received[dst]
        assert row[src] == seq, f"loop {dst}: from {src} got #{seq}, expected #{row[src]}"
        row[src] = seq + 1
        if sum(row) == expected:
            dones[dst].set_result(None)

    async def main(k):
        loop = asyncio.get_running_loop()
        dones[k] = loop.create_future()
        await loop.run_in_executor(None, running.wait)  # every loop is up (and has dones)
        jobs = [asyncio.to_thread(pow, k + 2, i) for i in range(to_threads)]
        for r in range(rounds):
            for j in range(nloops):
                if j != k:
                    loops[j].call_soon_threadsafe(receive, j, k, r)
            if r % 50 == 0:
                await asyncio.sleep(0)
        assert await asyncio.gather(*jobs) == [pow(k + 2, i) for i in range(to_threads)]
        await asyncio.wait_for(dones[k], 60)

    def worker(k):
        loop = make_loop(kind)
        loops[k] = loop
        try:
            loop.run_until_complete(main(k))
            finished.wait(60)  # nobody sends to a loop after it is closed
        finally:
            close_loop(loop)

    run_in_threads(nloops, worker)
    for dst in range(nloops):
        assert sum(received[dst]) == expected
        assert [received[dst][s] for s in range(nloops) if s != dst] == [rounds] * (nloops - 1)


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_threadsafe_from_many_threads_into_running_loops(kind):
    """Loops that run in threads while 6 other threads each call call_soon_threadsafe into
    all of them: the counts add up, from threads that are not loop threads."""
    nloops, nproducers, per = 3, 6, 3000
    loops, counts = [None] * nloops, [0] * nloops
    up = threading.Barrier(nloops + 1)

    def bump(k):
        counts[k] += 1
        if counts[k] == nproducers * per:
            loops[k].stop()

    def run_loop(k):
        loop = make_loop(kind)
        loops[k] = loop
        try:
            loop.call_soon(up.wait)
            loop.run_forever()
        finally:
            close_loop(loop)

    threads = [threading.Thread(target=run_loop, args=(k,)) for k in range(nloops)]
    for t in threads:
        t.start()
    up.wait(30)

    def producer(_):
        for _i in range(per):
            for k in range(nloops):
                loops[k].call_soon_threadsafe(bump, k)

    run_in_threads(nproducers, producer)
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert counts == [nproducers * per] * nloops


def test_timer_from_another_thread_fires(loop_kind):
    """call_later from another thread (asyncio does not promise it, but a free-threaded
    goloop must not crash for it): the timers fire once the loop wakes up."""
    if loop_kind == "asyncio" and FREE_THREADED:
        # seen: "RuntimeError: list changed size during iteration" in asyncio's _run_once
        pytest.skip("asyncio's own loop is not safe for call_later from another thread without the GIL")
    loop = make_loop(loop_kind)
    fired = []
    try:
        def other_thread():
            for i in range(50):
                loop.call_later(0.001 * (i % 5), fired.append, i)
            loop.call_soon_threadsafe(lambda: None)  # wakes asyncio's loop too

        async def main():
            t = threading.Thread(target=other_thread)
            t.start()
            await loop.run_in_executor(None, t.join)
            deadline = loop.time() + 10
            while len(fired) < 50 and loop.time() < deadline:
                await asyncio.sleep(0.01)

        loop.run_until_complete(main())
        assert sorted(fired) == list(range(50))
    finally:
        close_loop(loop)


# ---------------------------------------------------------------------------------------
# fairness: a flood of call_soon_threadsafe does not starve timers and I/O
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_timer_and_socket_keep_their_turn_under_threadsafe_flood(kind):
    """8 threads keep a backlog of call_soon_threadsafe callbacks queued; a 50 ms timer and a
    readable socket still get their turn within 0.5 s (issue 12: the timer fired after
    1.6-1.8 s and the socket waited for the flood to end). Each iteration takes only a
    bounded batch of what other threads queued."""
    if kind == "asyncio" and FREE_THREADED:
        # measured: 1.7 s once in three runs. With the GIL, asyncio's producers wait for it
        # (and for their self-pipe write) and its backlog stays small; without, it grows
        # and asyncio runs all of it before the timer.
        pytest.skip("asyncio's own loop is not fair under this flood without the GIL")
    nthreads, backlog = 8, 600_000  # the 8 producers keep up to this many queued
    loop = make_loop(kind)
    state = {"ran": 0}
    sent = [0] * nthreads
    stop = threading.Event()
    go = threading.Event()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    def noop():
        state["ran"] += 1

    def producer(k):
        call = loop.call_soon_threadsafe
        go.wait()
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            # a flood, but one whose backlog stays bounded (memory)
            if sum(sent) - state["ran"] > backlog:
                time.sleep(0.0005)
                continue
            for _ in range(100):
                call(noop)
            sent[k] += 100

    async def main():
        timer_fut = loop.create_future()
        read_fut = loop.create_future()
        go.set()
        t = loop.time()  # the flood is on, and its backlog built up if the loop lets it
        while state["ran"] < 5000 or (sum(sent) - state["ran"] < backlog // 2 and loop.time() - t < 1):
            await asyncio.sleep(0.001)
        t0 = loop.time()
        loop.call_later(0.05, lambda: timer_fut.set_result(loop.time()))
        loop.add_reader(b.fileno(), lambda: read_fut.done() or read_fut.set_result(loop.time()))
        a.send(b"x")
        fired, readable = await asyncio.gather(timer_fut, read_fut)
        loop.remove_reader(b.fileno())
        stop.set()
        return fired - t0, readable - t0

    producers = [threading.Thread(target=producer, args=(k,)) for k in range(nthreads)]
    for t in producers:
        t.start()
    try:
        timer_delay, read_delay = loop.run_until_complete(main())
    finally:
        stop.set()
        go.set()
        for t in producers:
            t.join(30)
    try:
        # every queued callback still runs once the flood ends
        async def drain():
            deadline = loop.time() + 30
            while state["ran"] < sum(sent) and loop.time() < deadline:
                await asyncio.sleep(0.01)

        loop.run_until_complete(drain())
        assert state["ran"] == sum(sent)
    finally:
        close_loop(loop)
        a.close()
        b.close()
    # With the GIL, 8 producers that never let it go keep the loop's thread from running a
    # good part of the time, however the loop orders its work (goloop: 0.05-0.3 s measured,
    # 0.57 s once under a full test run; FIFO order: 1.1-1.8 s at this backlog). Without it,
    # the loop's order is all that counts (0.05 s measured; 0.508 s once with six other test
    # runs on the machine's 2 cores): 0.9 s still fails the FIFO order's 1.1 s.
    bound = 0.9 if FREE_THREADED else 1.0
    if kind == "asyncio" and not FREE_THREADED:
        # asyncio's loop is the reference here, not the subject: on a loaded machine (CI with
        # other work, load average 10 on 2 cores) its timer was seen at 1.1 s, and at 2.04 s
        # with CI's two pytest workers. goloop keeps the 1.0 s bound that a FIFO backlog
        # (1.1-1.8 s) breaks.
        bound = 5.0
    assert 0.04 <= timer_delay < bound, f"50 ms timer fired after {timer_delay:.3f} s"
    assert read_delay < bound, f"ready socket waited {read_delay:.3f} s"


# ---------------------------------------------------------------------------------------
# goloop specifics
# ---------------------------------------------------------------------------------------


def test_same_thread_threadsafe_keeps_order_with_call_soon(gloop):
    # From the loop's own thread (running or not), call_soon_threadsafe and call_soon
    # interleave in call order, as asyncio's do.
    got = []

    def first():
        for i in range(6):
            (gloop.call_soon_threadsafe if i % 2 else gloop.call_soon)(got.append, i)
        gloop.call_soon(gloop.stop)

    for i in range(4):
        (gloop.call_soon if i % 2 else gloop.call_soon_threadsafe)(got.append, -4 + i)
    gloop.call_soon(first)
    gloop.run_forever()
    assert got == [-4, -3, -2, -1, 0, 1, 2, 3, 4, 5]


def test_closed_loop_refuses_threadsafe_from_another_thread(gloop):
    gloop.close()
    errors = []

    def other():
        try:
            gloop.call_soon_threadsafe(lambda: None)
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors == ["Event loop is closed"]


def test_stats_count_the_inbox(gloop):
    t = threading.Thread(target=lambda: [gloop.call_soon_threadsafe(lambda: None) for _ in range(5)])
    t.start()
    t.join()
    assert gloop._stats()[0] == 5
    gloop.call_soon(gloop.stop)
    gloop.run_forever()
    assert gloop._stats()[0] == 0


def test_sock_recv_in_many_threads_at_once():
    """sock_recv's read buffer is per thread: loops reading in several threads at once
    each get their own bytes."""
    nloops, rounds = 6, 300

    def worker(k):
        loop = goloop.new_event_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        try:
            async def main():
                for i in range(rounds):
                    msg = bytes([k]) * (1 + (i * 37) % 3000)
                    await loop.sock_sendall(a, msg)
                    got = b""
                    while len(got) < len(msg):
                        got += await loop.sock_recv(b, 65536)
                    assert got == msg, f"loop {k}: round {i}: foreign bytes"

            loop.run_until_complete(main())
        finally:
            close_loop(loop)
            a.close()
            b.close()

    run_in_threads(nloops, worker)


def test_http_parsers_in_many_threads_at_once():
    """goloop.http parsers made and fed in several threads at once."""
    import goloop.http as gh

    class P:
        def __init__(self):
            self.urls, self.done = [], 0

        def on_url(self, url):
            self.urls.append(url)

        def on_message_complete(self):
            self.done += 1

    def worker(k):
        for i in range(400):
            p = P()
            parser = gh.HttpRequestParser(p)
            req = f"GET /t{k}/{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            parser.feed_data(req)
            assert p.urls == [f"/t{k}/{i}".encode()] and p.done == 1
            assert parser.get_http_version() == "1.1"

    run_in_threads(6, worker)


def test_loops_report_to_their_own_thread():
    """Many goloop loops created, run and closed in threads at once (the loop table)."""
    def worker(k):
        for i in range(30):
            loop = goloop.new_event_loop()
            try:
                assert loop.run_until_complete(asyncio.sleep(0, result=(k, i))) == (k, i)
            finally:
                loop.close()

    run_in_threads(8, worker)


def test_threadsafe_callers_racing_close_touch_no_reused_descriptor():
    """Threads keep calling call_soon_threadsafe while the loop closes: each gets either a
    handle or "Event loop is closed", and no wake-up lands in a descriptor that took the
    number of the loop's closed eventfd afterwards."""
    for _ in range(20):
        loop = goloop.new_event_loop()
        stop = threading.Event()
        outcomes = []

        def caller():
            while not stop.is_set():
                try:
                    loop.call_soon_threadsafe(lambda: None)
                except RuntimeError as exc:
                    outcomes.append(str(exc))
                    return
                # let the loop's wake-up be drained now and then, so writes keep happening
                time.sleep(0)

        threads = [threading.Thread(target=caller) for _ in range(4)]
        for t in threads:
            t.start()
        loop.run_until_complete(asyncio.sleep(0.002))  # drains wake-ups: callers keep writing
        loop.close()
        pipes = [os.pipe() for _ in range(4)]  # take the freed numbers
        for r, w in pipes:
            os.set_blocking(r, False)
        stop.set()
        for t in threads:
            t.join()
        try:
            for r, _ in pipes:
                try:
                    data = os.read(r, 64)
                except BlockingIOError:
                    data = b""
                assert data == b"", "a wake-up was written into a reused descriptor"
        finally:
            for r, w in pipes:
                os.close(r)
                os.close(w)
        assert all(o == "Event loop is closed" for o in outcomes), outcomes
