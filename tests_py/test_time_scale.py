"""GOLOOP_TIME_SCALE stretches the loop's wall-clock periods (the poll of a loop whose ready
queue never empties, its pass through Go's scheduler) and the WSGI leader/follower pool's
wake delay for instruction counts under valgrind, which runs the loop ~100x slower
(bench/analysis/sched_cost.py and wsgi_instr.py set it). Each case runs in a
fresh interpreter: the periods are fixed when the process makes its first loop."""
import os
import subprocess
import sys

import pytest

PROBE = """
import asyncio, goloop
from goloop import _goloop
loop = goloop.new_event_loop()
async def chain(n):
    for _ in range(n):
        await asyncio.sleep(0)
    return n
assert loop.run_until_complete(chain(1000)) == 1000
loop.close()
print(*_goloop._loop_periods())
"""

POLL, YIELD, WAKE = 20_000, 8_000_000, 1_000_000


def periods(scale):
    env = dict(os.environ)
    env.pop("GOLOOP_TIME_SCALE", None)
    if scale is not None:
        env["GOLOOP_TIME_SCALE"] = scale
    out = subprocess.run([sys.executable, "-P", "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return tuple(int(x) for x in out.stdout.split())


def test_unset_leaves_the_periods():
    assert periods(None) == (POLL, YIELD, WAKE)


def test_a_whole_number_multiplies_each():
    assert periods("100") == (100 * POLL, 100 * YIELD, 100 * WAKE)


@pytest.mark.parametrize("value", ["0", "1", "-5", "abc", "2.5", "", "10001"])
def test_other_values_are_ignored(value):
    assert periods(value) == (POLL, YIELD, WAKE)
