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
         "goroutine 7 [running]:\ngoloop/binding.glConnWrite(...)\n\tgoloop/binding/loop_transport.go:10\n\n"
         + "\n".join(GOROUTINE.format(n=n) for n in range(200)))


def test_go_crash_keeps_the_cause_and_the_crashing_stack():
    g = cpython_suite.go_crash(FATAL)
    assert g.startswith("signal 23 received on thread with no signal stack\nfatal error: ")
    assert "runtime/panic.go:1229" in g and "goroutine 0 " not in g
    g = cpython_suite.go_crash(PANIC)
    assert g.startswith("panic: runtime error: index out of range")
    assert "goloop/binding/loop_transport.go:10" in g and "goroutine 0 " not in g
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


def _job(tmp_path, module, collected, ran, mode="goloop", only=None, load_error=None):
    j = cpython_suite.Job(module, mode, str(tmp_path), only=only)
    j.collected = collected
    j.results = {t: {"outcome": "pass"} for t in ran}
    j.load_error = load_error
    return j


def test_a_module_that_fails_to_load_or_runs_short_fails_the_run(tmp_path):
    ids = [f"m.t{i}" for i in range(100)]
    jobs = [_job(tmp_path, "m_full", ids, ids),
            _job(tmp_path, "m_short", ids, ids[:10]),
            _job(tmp_path, "m_load", None, [], load_error="Traceback ...\nAttributeError: "
                 "module 'test.test_asyncio.test_events' has no attribute 'UnixEventLoopTestsMixin'\n"),
            _job(tmp_path, "m_empty", [], []),
            # a retry of a few ids is not a module's run
            _job(tmp_path, "m_full", None, ids[:3], only=ids[:3])]
    problems = cpython_suite.load_problems(jobs)
    assert len(problems) == 3, problems
    assert problems[0].startswith("m_short [goloop]: ran 10 of the 100 tests it holds")
    assert problems[1] == ("m_load [goloop]: failed to load: AttributeError: module "
                           "'test.test_asyncio.test_events' has no attribute 'UnixEventLoopTestsMixin'")
    assert problems[2] == "m_empty [goloop]: reported no tests"


def _fake_module(**classes):
    import types

    mod = types.ModuleType("test.test_asyncio.fake")
    for name, cls in classes.items():
        setattr(mod, name, cls)
    return mod


def test_adapt_builds_the_goloop_variant_from_the_replaced_class():
    import unittest

    class Mixin:
        def test_a(self):
            pass

        def test_b(self):
            pass

    class EPollEventLoopTests(Mixin, unittest.TestCase):
        def create_event_loop(self):
            raise AssertionError("the stdlib loop")

    drop, add = cpython_suite._adapt("test_events", _fake_module(EPollEventLoopTests=EPollEventLoopTests),
                                     factory=lambda: "goloop's", policy_factory=None)
    assert "EPollEventLoopTests" in drop
    variant = add["GoloopEventLoopTests"]
    assert cpython_suite._test_count(variant) == 2
    assert variant("test_a").create_event_loop() == "goloop's"


def test_adapt_fails_loudly_when_the_module_changed_shape():
    import unittest

    import pytest

    with pytest.raises(cpython_suite.LoadError, match="none of the classes"):
        cpython_suite._adapt("test_events", _fake_module(), factory=None, policy_factory=None)

    class Mixin:
        def test_a(self):
            pass

    class EPollEventLoopTests(Mixin, unittest.TestCase):
        def test_only_here(self):  # a test the variant built from the bases would lose
            pass

    with pytest.raises(cpython_suite.LoadError, match="holds 1 tests, the EPollEventLoopTests it replaces 2"):
        cpython_suite._adapt("test_events", _fake_module(EPollEventLoopTests=EPollEventLoopTests),
                             factory=None, policy_factory=None)


def test_child_reports_a_module_it_cannot_load(tmp_path):
    import json
    import subprocess
    import sys

    results = tmp_path / "r.jsonl"
    p = subprocess.run([sys.executable, cpython_suite.__file__, "--child", "asyncio",
                        "test_no_such_module", "--results", str(results)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    recs = [json.loads(ln) for ln in results.read_text().splitlines()]
    assert [r["ev"] for r in recs] == ["load_error"]
    assert "No module named 'test.test_asyncio.test_no_such_module'" in recs[0]["detail"]
