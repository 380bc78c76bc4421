"""Memory a spike left in C's allocator goes back to the system (goloop/binding/server_memtrim.c):
Python's large objects (a burst of request bodies read whole) are malloc's; freed, glibc
keeps them in its arenas and the process' RSS stays at its peak. While a server runs, the
engine's memory watcher (every 5 s) calls malloc_trim when the arenas hold more than 32 MiB
free.

No test here times anything: it waits for a state with a generous bound that only ends a
test that would otherwise hang."""
import ctypes
import ctypes.util
import sysconfig
import time

import pytest

from test_serve_http import serving

MiB = 1 << 20


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def libc():
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("a free-threaded build's objects are mimalloc's, not malloc's")
    try:
        c = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        c.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        pytest.skip("not glibc 2.33 or later (mallinfo2)")
    return c


async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def test_free_arena_pages_are_returned_after_a_spike():
    c = libc()
    # 1 MiB blocks from the arena (not mmap), and free() does not shrink its top by itself:
    # glibc's state after a burst of large frees raised its thresholds
    c.mallopt(M_MMAP_THRESHOLD, 64 * MiB)
    c.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    try:
        with serving(app):
            blocks, pins = [], []
            for i in range(96):  # each followed by a small block kept alive
                blocks.append(bytes([i % 251]) * MiB)
                pins.append(bytes([i % 251]) * 600)
            before = rss()
            del blocks
            assert c.mallinfo2().fordblks > 64 * MiB, "the arena did not keep the freed blocks"
            assert rss() > before - 32 * MiB, "freed already"
            end = time.monotonic() + 60
            while rss() > before - 64 * MiB:
                assert time.monotonic() < end, "the free arena pages were kept"
                time.sleep(0.1)
            del pins
    finally:
        c.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
        c.mallopt(M_TRIM_THRESHOLD, 128 * 1024)
