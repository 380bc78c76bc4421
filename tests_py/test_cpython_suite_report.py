"""cpython_suite.py's report of a process that died with a Go crash dump: the cause (at the
dump's start, followed by every goroutine's stack) must reach the report, not the last line."""
from __future__ import annotations

import cpython_suite

GOROUTINE = """goroutine {n} gp=0x1 m=nil [cleanup wait]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
\truntime/proc.go:462 +0xce fp=0x1 sp=0x1 pc=0x1
created by runtime.(*cleanupQueue).createGs in goroutine 1
\truntime/mcleanup.go:672 +0xa5
"""

FATAL = ("test output\nsignal 23 received on thread with no signal stack\n"
         "fatal error: non-Go code disabled sigaltstack\n\nruntime stack:\n"
         "runtime.throw({0x7f57bc7c02b1?, 0x0?})\n\truntime/panic.go:1229 +0x4a\n\n"
         + "\n".join(GOROUTINE.format(n=n) for n in range(200)))

PANIC = ("panic: runtime error: index out of range [3] with length 3\n\n"
         "goroutine 7 [running]:\ngoloop/binding.glConnWrite(...)\n\tgoloop/binding/transport.go:10\n\n"
         + "\n".join(GOROUTINE.format(n=n) for n in range(200)))


def test_go_crash_keeps_the_cause_and_the_crashing_stack():
    g = cpython_suite.go_crash(FATAL)
    assert g.startswith("signal 23 received on thread with no signal stack\nfatal error: ")
    assert "runtime/panic.go:1229" in g and "goroutine 0 " not in g
    g = cpython_suite.go_crash(PANIC)
    assert g.startswith("panic: runtime error: index out of range")
    assert "goloop/binding/transport.go:10" in g and "goroutine 0 " not in g
    assert cpython_suite.go_crash("Traceback (most recent call last):\nValueError: x\n") == ""


def test_short_names_the_go_error():
    detail = "process exited with status -6\n" + cpython_suite.go_crash(FATAL) + "\n[...]\n"
    assert cpython_suite.short(detail + FATAL[-2000:]) == \
        "Go fatal error: non-Go code disabled sigaltstack"
    assert cpython_suite.short(PANIC) == \
        "Go panic: runtime error: index out of range [3] with length 3"


def test_baseline_runs_goloops_failures_or_the_whole_module_after_a_crash(tmp_path):
    def job(module, outcomes, log=()):
        j = cpython_suite.Job(module, "goloop", str(tmp_path))
        j.results = {f"{module}.t{i}": {"outcome": o} for i, o in enumerate(outcomes)}
        j.log = list(log)
        return j

    jobs = [job("m_pass", ["pass", "skip", "xfail"]),
            job("m_fail", ["pass", "fail", "error", "timeout", "pass"]),
            job("m_died", ["pass"], log=["m_died[goloop]: process exited with status -11"])]
    got = {j.module: j for j in cpython_suite.baseline_jobs(jobs, str(tmp_path))}
    assert set(got) == {"m_fail", "m_died"}
    assert all(j.mode == "asyncio" for j in got.values())
    assert got["m_fail"].only == ["m_fail.t1", "m_fail.t2", "m_fail.t3"]
    assert got["m_died"].only is None  # every test: the ones goloop never ran show up
    assert got["m_fail"].dir != cpython_suite.Job("m_fail", "asyncio", str(tmp_path), only=["x"]).dir
