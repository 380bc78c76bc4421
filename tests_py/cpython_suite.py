#!/usr/bin/env python3
"""Run CPython's own asyncio test suite (test.test_asyncio) against goloop.

    python3 tests_py/cpython_suite.py                 # what `make test-cpython` runs
    python3 tests_py/cpython_suite.py -m test_tasks -m test_events -v
    python3 tests_py/cpython_suite.py --list-failures # print every goloop failure

Every module runs in fresh subprocesses, in parallel, in two modes:

* ``goloop``:  the tests with goloop as the loop under test;
* ``asyncio``: the baseline, asyncio's own unix selector loop, on the tests goloop failed
  (``--baseline all``: on every test, for the full side-by-side table; a module whose
  goloop process hung or crashed always runs in full).

"The loop under test" means: the event loop policy is goloop's (and stays goloop's when a
test resets it with ``set_event_loop_policy(None)``), so ``asyncio.new_event_loop()``,
``asyncio.run()``, ``asyncio.Runner`` and ``IsolatedAsyncioTestCase`` make goloop loops;
and the test classes that hard-code ``asyncio.SelectorEventLoop(<selector>)`` (the
Epoll/Poll/Select/Kqueue variants of test_events, test_sock_lowlevel, test_sendfile, ...)
are replaced by one ``Goloop*`` variant whose loop factory is the loop under test.  The
``Goloop*`` classes exist in both runs (with asyncio's loop in the baseline), so test ids
are the same in both and compare one to one.

Tests built on ``test_utils.TestLoop`` (a fake-clock stdlib BaseEventLoop) or on mocks do
not touch the loop under test; the report's "exercised" column counts the tests that
created at least one loop under test.

A test that passes with asyncio but fails with goloop is a regression.  Regressions are
retried once in a fresh process (load-induced flakiness); the remaining ones must each be
listed in cpython_known_failures.txt with a reason, else the exit status is 1.  Every test
has a timeout (faulthandler kills the process and dumps the stacks; the module is then
resumed after the hanging test), and every subprocess has one too.

Every module must load, on every version: the ``Goloop*`` variants are built from the bases
of the classes they replace (whatever the mixins are called in that version) and must hold as
many tests as those. A module that fails to load, or whose goloop run does not run every test
it holds (each child first reports the ids it collected), fails the run whatever the
known-failures file says, under "THE SUITE DID NOT RUN IN FULL".

The last line is ``cpython-asyncio: N passed, M failed``: N tests passed on goloop, M
regressions are not in the known-failures file (", K MODULES NOT RUN IN FULL" follows when
some module did not run in full).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN_FAILURES = os.path.join(HERE, "cpython_known_failures.txt")
PKG = "test.test_asyncio"

# Module -> rough baseline duration in seconds on 2 cores (used to start the longest first).
MODULES = {
    "test_events": 20,
    "test_subprocess": 20,
    "test_tasks": 12,
    "test_sendfile": 8,
    "test_streams": 8,
    "test_ssl": 8,
    "test_sslproto": 4,
    "test_sock_lowlevel": 6,
    "test_unix_events": 5,
    "test_locks": 4,
    "test_waitfor": 4,
    "test_timeouts": 3,
    "test_taskgroups": 3,
    "test_futures": 3,
    "test_runners": 3,
    "test_queues": 2,
    "test_threads": 2,
    "test_server": 2,
    "test_buffered_proto": 2,
    "test_pep492": 2,
    "test_futures2": 1,
    "test_context": 1,
    "test_protocols": 1,
    "test_transports": 1,
    # 3.12+
    "test_eager_task_factory": 2,
    "test_staggered": 1,
}
# Only the modules the running Python has.
MODULES = {m: t for m, t in MODULES.items()
           if os.path.exists(os.path.join(os.path.dirname(os.__file__), "test", "test_asyncio",
                                          m + ".py"))}
MODES = ("asyncio", "goloop")
# Tests that legitimately take long (gc-heavy), seconds: their own timeout.
SLOW_TESTS = {"test_task_del_collect": 90.0, "test_future_del_collect": 90.0}
GOOD = {"pass", "xfail"}          # outcomes that count as passing
BAD = {"fail", "error", "timeout", "crash", "missing", "xpass"}


# ---------------------------------------------------------------------------------------
# Child side: run one module's tests in this process, one JSON line per event.
# ---------------------------------------------------------------------------------------

class LoadError(Exception):
    """A module of the suite cannot be adapted to the loop under test: the run must fail."""


def _test_count(cls):
    import unittest

    return unittest.TestLoader().loadTestsFromTestCase(cls).countTestCases()


def _variant(mod, name, replaced):
    """The bases of the first of `replaced` (class names of mod) that mod has: the Goloop
    variant of a test class that hard-codes a stdlib loop is those bases plus its own loop
    factory, so it holds whatever tests that class holds on this version (the mixins' names
    change between versions: 3.14 dropped test_events.UnixEventLoopTestsMixin)."""
    for cname in replaced:
        cls = getattr(mod, cname, None)
        if isinstance(cls, type):
            return cls
    raise LoadError(f"{name}: none of the classes {', '.join(replaced)} that "
                    f"cpython_suite.py replaces by a goloop variant exists in {mod.__name__}")


def _adapt(name, mod, factory, policy_factory):
    """Return (classes to drop, classes to add) for module `name`.

    Replaces the classes that hard-code stdlib loops by one variant on `factory`. Raises
    LoadError if the module does not have the shape this adapts (a new CPython version):
    a variant that would hold fewer tests than the class it replaces is such a case.
    """
    import unittest
    from test.test_asyncio import utils as test_utils

    selector_variants = {"EPollEventLoopTests", "PollEventLoopTests", "SelectEventLoopTests",
                         "KqueueEventLoopTests", "ProactorEventLoopTests"}
    epoll_first = ("EPollEventLoopTests", "PollEventLoopTests", "SelectEventLoopTests")
    drop, add = set(), {}
    replaces = {}   # added class name -> the class whose tests it must hold

    def loop_variant(cname, replaced, method):
        cls = _variant(mod, name, replaced)
        add[cname] = (cls.__bases__, {method: lambda self: factory()})
        replaces[cname] = cls

    if name == "test_events":
        drop |= selector_variants
        loop_variant("GoloopEventLoopTests", epoll_first, "create_event_loop")
    elif name == "test_sock_lowlevel":
        drop |= selector_variants
        loop_variant("GoloopSockTests", epoll_first, "create_event_loop")
    elif name == "test_sendfile":
        drop |= selector_variants
        loop_variant("GoloopSendfileTests", epoll_first, "create_event_loop")
    elif name == "test_server":
        drop |= {"SelectorStartServerTests", "ProactorStartServerTests"}
        cls = _variant(mod, name, ("SelectorStartServerTests",))
        add["GoloopStartServerTests"] = ((cls,), {"new_loop": lambda self: factory()})
        replaces["GoloopStartServerTests"] = cls
    elif name == "test_buffered_proto":
        drop |= {"BufferedProtocolSelectorTests", "BufferedProtocolProactorTests"}
        loop_variant("GoloopBufferedProtocolTests", ("BufferedProtocolSelectorTests",), "new_loop")
    elif name == "test_sslproto":
        # SslProtoHandshakeTests drive asyncio's SSLProtocol with mocks (no loop under test
        # is involved beyond its clock); the start_tls tests hard-code the loop class.
        drop |= {"SelectorStartTLSTests", "ProactorStartTLSTests"}
        loop_variant("GoloopStartTLSTests", ("SelectorStartTLSTests",), "new_loop")
        if factory.__module__.startswith("goloop"):
            # test_create_connection_ssl_failed_certificate_no_cycles (3.14+) patches
            # `sslproto.SSLProtocol.connection_made` to see the transports the loop's TLS
            # protocol gets: goloop's loop makes goloop's SSLProtocol, so the module's
            # `sslproto` names goloop's class for these tests (asyncio's module otherwise).
            import types

            from goloop import _sslproto

            def setUp(self, _orig=mod.sslproto):
                proxy = types.ModuleType(_orig.__name__)
                proxy.__dict__.update(vars(_orig))
                proxy.SSLProtocol = _sslproto.SSLProtocol
                mod.sslproto = proxy
                self.addCleanup(setattr, mod, "sslproto", _orig)
                super(type(self), self).setUp()

            add["GoloopStartTLSTests"][1]["setUp"] = setUp
    elif name == "test_unix_events":
        # Only the parts about the public loop API.  Dropped: SelectorEventLoopSignalTests
        # (mocks unix_events.signal and calls _check_signal/_handle_signal), the pipe
        # transport and child watcher tests (mocks on test_utils.TestLoop), and the
        # abstract-class tests: they test stdlib internals, not the loop.
        keep = {"SelectorEventLoopUnixSockSendfileTests", "TestFunctional"}
        drop |= {n for n, v in vars(mod).items()
                 if isinstance(v, type) and issubclass(v, unittest.TestCase) and n not in keep}

        def setUp(self):
            test_utils.TestCase.setUp(self)
            self.loop = factory()
            self.set_event_loop(self.loop)

        cls = _variant(mod, name, ("SelectorEventLoopUnixSocketTests",))
        add["GoloopUnixSocketTests"] = ((cls,), {"setUp": setUp})
        replaces["GoloopUnixSocketTests"] = cls
        # the policy tests went with the child watchers (3.14)
        if hasattr(mod, "PolicyTests"):
            add["GoloopPolicyTests"] = ((mod.PolicyTests,),
                                        {"create_policy": lambda self: policy_factory()})
            replaces["GoloopPolicyTests"] = mod.PolicyTests

    classes = {}
    for cname, (bases, ns) in add.items():
        ns = dict(ns, __module__=mod.__name__, __qualname__=cname)
        classes[cname] = type(cname, bases, ns)
        want, got = _test_count(replaces[cname]), _test_count(classes[cname])
        if got < want:
            raise LoadError(f"{name}: {cname} holds {got} tests, the {replaces[cname].__name__} "
                            f"it replaces {want}")
    return drop, classes


def child_main(args) -> int:
    import faulthandler
    import importlib
    import unittest

    faulthandler.enable()
    import asyncio
    from asyncio import events, unix_events

    if args.mode == "goloop":
        import goloop
        from goloop._loop import Loop as target_cls

        factory = goloop.new_event_loop
        policy_factory = goloop.EventLoopPolicy

        # Keep goloop's policy when a test resets the policy with set_event_loop_policy(None)
        # (every module's tearDownModule, test_runners' setUp/tearDown, ...).
        def _init_event_loop_policy():
            with events._lock:
                if events._event_loop_policy is None:
                    events._event_loop_policy = policy_factory()

        events._init_event_loop_policy = _init_event_loop_policy
    else:
        target_cls = unix_events._UnixSelectorEventLoop
        factory = asyncio.SelectorEventLoop
        policy_factory = asyncio.DefaultEventLoopPolicy
    asyncio.set_event_loop_policy(policy_factory())

    # Count the loops under test that get created, to tell which tests exercise them.
    created = [0]
    orig_init = unix_events._UnixSelectorEventLoop.__init__

    def counting_init(self, *a, **kw):
        if isinstance(self, target_cls):
            created[0] += 1
        orig_init(self, *a, **kw)

    unix_events._UnixSelectorEventLoop.__init__ = counting_init

    name = args.module
    out = open(args.results, "a", buffering=1)
    try:
        mod = importlib.import_module(f"{PKG}.{name}")
        drop, extra = _adapt(name, mod, factory, policy_factory)
    except Exception:
        import traceback

        # Not one error among the tests: the parent fails the run for this (see load_problems).
        out.write(json.dumps({"ev": "load_error", "detail": traceback.format_exc()[-4000:]}) + "\n")
        out.close()
        return 3
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for cname in sorted(n for n, v in vars(mod).items()
                        if isinstance(v, type) and issubclass(v, unittest.TestCase)
                        and v.__module__ == mod.__name__ and n not in drop):
        suite.addTests(loader.loadTestsFromTestCase(getattr(mod, cname)))
    for cls in extra.values():
        suite.addTests(loader.loadTestsFromTestCase(cls))

    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t

    only = set(_read_lines(args.only)) if args.only else None
    exclude = set(_read_lines(args.exclude)) if args.exclude else set()
    every = list(flatten(suite))
    tests = [t for t in every
             if t.id() not in exclude and (only is None or t.id() in only)]
    if args.collect:
        for t in tests:
            print(t.id())
        return 0
    # What the module holds (after the adaptation): the parent checks every one of them ran.
    out.write(json.dumps({"ev": "collected", "ids": [t.id() for t in every]}) + "\n")

    # Known failures get a short timeout: a known hang should not cost the full one.
    known = load_known_failures(args.known) if args.known and args.mode == "goloop" else {}
    timeouts = {}
    for t in tests:
        name = getattr(t, "_testMethodName", "")
        timeouts[t.id()] = SLOW_TESTS.get(name, args.test_timeout)
        if known_reason(known, t.id())[0] is not None:
            timeouts[t.id()] = min(timeouts[t.id()], args.known_timeout)
    result = _JsonResult(out, timeouts, created)
    # One flat suite: unittest then handles class and module fixtures itself.
    unittest.TestSuite(tests).run(result)
    out.write(json.dumps({"ev": "done"}) + "\n")
    out.close()
    return 0


def _make_result_class():
    import faulthandler
    import traceback
    import unittest

    rank = {"pass": 0, "skip": 1, "xfail": 1, "xpass": 2, "fail": 3, "error": 4}

    class JsonResult(unittest.TestResult):
        def __init__(self, out, timeout, created):
            super().__init__()
            self.out, self.timeout, self.created = out, timeout, created
            self.cur = None

        def _emit(self, **rec):
            self.out.write(json.dumps(rec) + "\n")
            self.out.flush()

        def _fmt(self, err):
            s = "".join(traceback.format_exception(*err))
            return s[-4000:]

        def startTest(self, test):
            super().startTest(test)
            self.cur = {"id": test.id(), "outcome": "pass", "detail": "",
                        "t0": time.monotonic(), "n0": self.created[0]}
            self._emit(ev="start", id=test.id())
            faulthandler.dump_traceback_later(self.timeout[test.id()], exit=True)

        def stopTest(self, test):
            faulthandler.cancel_dump_traceback_later()
            super().stopTest(test)
            c, self.cur = self.cur, None
            if c is None:
                return
            self._emit(ev="end", id=c["id"], outcome=c["outcome"], detail=c["detail"],
                       secs=round(time.monotonic() - c["t0"], 3),
                       exercised=self.created[0] > c["n0"])

        def _set(self, test, outcome, detail):
            if self.cur is None or test.id() != self.cur["id"]:
                # setUpClass/tearDownModule errors and the like: no startTest for them.
                self._emit(ev="end", id=test.id(), outcome=outcome, detail=detail,
                           secs=0.0, exercised=False)
                return
            if rank[outcome] >= rank[self.cur["outcome"]]:
                self.cur["outcome"] = outcome
            if detail:
                self.cur["detail"] = (self.cur["detail"] + "\n" + detail)[-6000:]

        def addError(self, test, err):
            super().addError(test, err)
            self._set(test, "error", self._fmt(err))

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._set(test, "fail", self._fmt(err))

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._set(test, "skip", str(reason))

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._set(test, "xfail", "")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._set(test, "xpass", "unexpected success")

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                kind = "fail" if issubclass(err[0], test.failureException) else "error"
                self._set(test, kind, f"[subtest {subtest._subDescription()}]\n" + self._fmt(err))

    return JsonResult


def _JsonResult(*a):
    return _make_result_class()(*a)


def _read_lines(path):
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip()]


# ---------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------

class Job:
    def __init__(self, module, mode, workdir, only=None, tag="retry"):
        self.module, self.mode, self.only = module, mode, only
        self.dir = os.path.join(workdir, f"{module}.{mode}" + (f".{tag}" if only else ""))
        self.results = {}      # test id -> record
        self.log = []          # notes about crashes / timeouts
        self.secs = 0.0
        self.collected = None  # the ids the module holds (its child's first report)
        self.load_error = None # why the module could not be loaded and adapted


def run_job(job: Job, args) -> Job:
    os.makedirs(job.dir, exist_ok=True)
    res_path = os.path.join(job.dir, "results.jsonl")
    excl_path = os.path.join(job.dir, "exclude.txt")
    only_path = None
    if job.only is not None:
        only_path = os.path.join(job.dir, "only.txt")
        with open(only_path, "w") as f:
            f.write("\n".join(job.only) + "\n")
    open(res_path, "w").close()
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONASYNCIODEBUG", None)
    for attempt in range(args.max_restarts + 1):
        with open(excl_path, "w") as f:
            f.write("\n".join(job.results) + "\n")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", job.mode, job.module,
               "--results", res_path, "--exclude", excl_path,
               "--test-timeout", str(args.test_timeout), "--known", args.known,
               "--known-timeout", str(args.known_timeout)]
        if only_path:
            cmd += ["--only", only_path]
        log_path = os.path.join(job.dir, f"output.{attempt}.log")
        offset = os.path.getsize(res_path)      # this attempt's records start here
        remaining = min(args.module_timeout - (time.monotonic() - t0),
                        args.deadline - time.monotonic())
        if remaining < 2:
            job.log.append(f"{job.module}[{job.mode}]: time budget exhausted, not (re)started")
            break
        timed_out = False
        with open(log_path, "wb") as logf:
            proc = subprocess.Popen(cmd, cwd=job.dir, env=env, stdout=logf,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=max(remaining, 1))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                rc = proc.wait()
        started, done = None, False
        with open(res_path) as f:
            f.seek(offset)
            for ln in f:
                try:
                    rec = json.loads(ln)
                except ValueError:
                    continue
                if rec["ev"] == "start":
                    started = rec["id"]
                elif rec["ev"] == "end":
                    rec["mode"] = job.mode
                    job.results.setdefault(rec["id"], rec)
                    if rec["id"] == started:
                        started = None
                elif rec["ev"] == "done":
                    done = True
                elif rec["ev"] == "collected" and job.collected is None:
                    job.collected = rec["ids"]
                elif rec["ev"] == "load_error":
                    job.load_error = rec["detail"]
        if done and rc == 0:
            break
        if job.load_error is not None:
            job.log.append(f"{job.module}[{job.mode}]: the module failed to load")
            break
        with open(log_path, "rb") as f:
            out = f.read().decode("utf-8", "replace")
        tail = out[-6000:]
        shown = tail
        go = go_crash(out)
        if go and go not in tail:
            # A Go crash dump lists every goroutine: its cause is at its start, far from the tail.
            shown = f"{go}\n[...]\n{out[-2000:]}"
        if timed_out:
            kind, why = "timeout", ("time budget exhausted" if time.monotonic() >= args.deadline
                                    else f"module timeout ({args.module_timeout:g}s) reached")
        elif "Timeout (" in tail:
            m = re.search(r"Timeout \((\d+):(\d+):(\d+)", tail)
            secs = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3)) if m else "?"
            kind, why = "timeout", f"test timeout ({secs}s)"
        else:
            kind, why = "crash", f"process exited with status {rc}"
        job.log.append(f"{job.module}[{job.mode}]: {why}" + (f" in {started}" if started else ""))
        if started is not None and started not in job.results:
            job.results[started] = {"id": started, "outcome": kind, "mode": job.mode,
                                    "detail": f"{why}\n{shown}", "secs": 0.0,
                                    "exercised": False}
        else:
            # Died outside any test (import, module fixtures): nothing to resume after.
            job.results.setdefault(f"{PKG}.{job.module}.<process>", {
                "id": f"{PKG}.{job.module}.<process>", "outcome": kind, "mode": job.mode,
                "detail": f"{why}\n{shown}", "secs": 0.0, "exercised": False})
            break
        if timed_out:
            break
    job.secs = time.monotonic() - t0
    return job


def _kill_group(proc):
    import signal as _signal
    try:
        os.killpg(proc.pid, _signal.SIGKILL)   # the child's own session: its subprocesses too
    except (ProcessLookupError, PermissionError):
        proc.kill()


def collect_ids(module, mode):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, module,
                          "--collect", "--results", os.devnull],
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    return out.stdout.split()


def load_known_failures(path):
    """Lines `[python-versions] <test id or fnmatch pattern> <reason>`; lines starting with
    `#` are comments. The optional first field, e.g. `[>=3.12]` or `[3.13]`, limits the
    entry to those Python versions."""
    known = {}
    if not os.path.exists(path):
        return known
    here = sys.version_info[:2]
    with open(path) as f:
        for n, ln in enumerate(f, 1):
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            if ln.startswith("["):
                spec, _, ln = ln[1:].partition("]")
                op = ">=" if spec.startswith(">=") else "<" if spec.startswith("<") else "=="
                ver = tuple(int(x) for x in spec.lstrip("><=").split("."))
                if not {">=": here >= ver, "<": here < ver, "==": here == ver}[op]:
                    continue
                ln = ln.strip()
            parts = ln.split(None, 1)
            if len(parts) < 2:
                raise SystemExit(f"{path}:{n}: entry without a reason: {ln!r}")
            known[parts[0]] = parts[1].strip()
    return known


def known_reason(known, tid):
    if tid in known:
        return tid, known[tid]
    for pat, why in known.items():
        if any(c in pat for c in "*?[") and fnmatch.fnmatchcase(tid, pat):
            return pat, why
    return None, None


# The first line of a Go runtime crash dump (the lines before it, e.g. "signal 23 received on
# thread with no signal stack", say where; the goroutine that crashed follows it).
GO_CRASH = re.compile(r"^(fatal error: |panic: |fatal: |unexpected fault address )", re.M)


def go_crash(out):
    """The start of a Go crash dump in a process's output: the lines just before its first
    line, the error, and the stack of the goroutine that crashed (or the runtime's stack),
    up to 4000 characters; "" when the output has no Go crash."""
    m = GO_CRASH.search(out)
    if m is None:
        return ""
    start = out.rfind("\n", 0, max(out.rfind("\n", 0, m.start()), 0)) + 1
    # The error, then blank-line separated blocks: keep through the first stack block.
    blocks = out[start:].split("\n\n")
    keep = blocks[:1]
    for b in blocks[1:]:
        keep.append(b)
        if re.match(r"(goroutine \d+ |runtime stack:)", b.lstrip()):
            break
    return "\n\n".join(keep)[:4000]


def short(detail):
    """The exception line of a traceback (where a hung test was stuck), for the report."""
    m = GO_CRASH.search(detail or "")
    if m is not None:
        return "Go " + detail[m.start():].split("\n", 1)[0].strip()[:200]
    lines = [ln for ln in (detail or "").strip().splitlines() if ln.strip()]
    if any(ln.startswith("Timeout (") for ln in lines):
        # faulthandler's dump, most recent call first: the innermost frame in a test file.
        frames = [f"{os.path.basename(m.group(1))}:{m.group(2)} in {m.group(3)}"
                  for m in (re.match(r'\s*File "(.*/test_asyncio/\w+\.py)", line (\d+) in (\w+)',
                                     ln) for ln in lines) if m]
        if frames:
            return f"{lines[0]}, stuck at {' <- '.join(dict.fromkeys([frames[0], frames[-1]]))}"
        return lines[0]
    for ln in reversed(lines):
        if not ln.startswith(" ") and ("Error" in ln or "Exception" in ln or "Timeout" in ln):
            return ln.strip()[:200]
    return lines[-1].strip()[:200] if lines else ""


def _counts(recs):
    c = collections.Counter()
    for r in recs:
        c["run"] += 1
        c[{"pass": "passed", "xfail": "passed", "skip": "skipped", "fail": "failed",
           "xpass": "failed"}.get(r["outcome"], "errors")] += 1
        c["exercised"] += bool(r.get("exercised"))
    return c


def _fmt_counts(c):
    return f"{c['run']}/{c['passed']}/{c['failed']}/{c['errors']}/{c['skipped']}"


def _run_all(jobs, args):
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = [ex.submit(run_job, j, args) for j in jobs]
        for fut in concurrent.futures.as_completed(futs):
            j = fut.result()
            if args.verbose:
                what = f"retry of {len(j.only)}" if j.only else f"{len(j.results)} tests"
                print(f"  {j.module:<20} {j.mode:<8} {what:>16} {j.secs:6.1f}s", flush=True)


def load_problems(jobs):
    """What fails the run whatever the known-failures file says: a module that could not be
    loaded and adapted (in either mode), and a module whose goloop run did not run every
    test it holds (ids its child collected that never reported: a crash the restarts could
    not get past, an exhausted time budget). One line each."""
    out = []
    for j in jobs:
        if j.load_error is not None:
            out.append(f"{j.module} [{j.mode}]: failed to load: {short(j.load_error)}")
        elif j.mode == "goloop" and j.only is None:
            if not j.collected:
                out.append(f"{j.module} [goloop]: reported no tests")
                continue
            missing = [t for t in j.collected if t not in j.results]
            if missing:
                out.append(f"{j.module} [goloop]: ran {len(j.collected) - len(missing)} of the "
                           f"{len(j.collected)} tests it holds (first not run: {missing[0]})")
    return out


def baseline_jobs(goloop_jobs, workdir):
    """The asyncio runs that --baseline failures needs after goloop's: a module's failed
    tests, or the whole module if its goloop process hung or crashed (a log entry)."""
    out = []
    for j in goloop_jobs:
        if j.log:
            out.append(Job(j.module, "asyncio", workdir))
            continue
        bad = [t for t, r in j.results.items() if r["outcome"] in BAD]
        if bad:
            out.append(Job(j.module, "asyncio", workdir, only=bad, tag="base"))
    return out


def parent_main(args) -> int:
    t_start = time.monotonic()
    args.deadline = t_start + args.budget
    modules = args.module or list(MODULES)
    for m in modules:
        if m not in MODULES:
            raise SystemExit(f"unknown module {m!r}; choose from {', '.join(MODULES)}")
    known = load_known_failures(args.known)
    workdir = tempfile.mkdtemp(prefix="goloop-cpython-suite-")
    order = sorted(modules, key=lambda m: -MODULES[m])
    full = args.baseline == "all"
    jobs = [Job(m, mode, workdir) for m in order for mode in (MODES if full else ("goloop",))]
    print(f"cpython asyncio suite: {len(modules)} modules, asyncio's loop vs goloop "
          f"({'every test' if full else 'the tests goloop fails'} on asyncio), "
          f"{args.jobs} workers, python {sys.version.split()[0]}", flush=True)
    _run_all(jobs, args)
    baselined = set(modules)      # modules whose every test ran on asyncio's loop too
    if not full:
        # The baseline only decides what a goloop failure means, so asyncio's loop runs the
        # tests goloop failed; a module whose goloop process died or hung runs in full (the
        # tests that never ran on goloop are found by comparison with asyncio's run).
        bjobs = baseline_jobs(jobs, workdir)
        baselined = {j.module for j in bjobs if j.only is None}
        _run_all(bjobs, args)
        jobs += bjobs

    res = {mode: {} for mode in MODES}     # mode -> test id -> record
    notes = []
    for j in jobs:
        for rec in j.results.values():
            rec["module"] = j.module
        res[j.mode].update(j.results)
        notes += j.log
        if j.collected and j.only is None:  # what the module holds but never reported
            for tid in j.collected:
                res[j.mode].setdefault(tid, {
                    "id": tid, "module": j.module, "outcome": "missing", "mode": j.mode,
                    "detail": "not run: its process died earlier", "secs": 0.0,
                    "exercised": False})
    problems = load_problems(jobs)

    # Ids present in one mode only are "missing" in the other (their process died first).
    for a, b in ((MODES[0], MODES[1]), (MODES[1], MODES[0])):
        for tid, rec in res[a].items():
            if b == "asyncio" and rec["module"] not in baselined:
                continue
            if tid not in res[b] and not tid.endswith(".<process>"):
                res[b][tid] = {"id": tid, "module": rec["module"], "outcome": "missing",
                               "mode": b, "detail": "not run: its process died earlier",
                               "secs": 0.0, "exercised": False}

    # Retry once, in fresh processes: goloop failures that pass on asyncio (flaky under
    # load?), and asyncio failures where goloop fails too (a flaky baseline would hide a
    # goloop bug).  Hangs, crashes and tests that never ran are not retried.
    retry = {m: collections.defaultdict(list) for m in MODES}
    for tid, g in res["goloop"].items():
        a = res["asyncio"].get(tid)
        retriable = {"fail", "error", "xpass"}
        if g["outcome"] in retriable and a is not None and not tid.endswith(">"):
            if a["outcome"] in GOOD:
                retry["goloop"][g["module"]].append(tid)
            elif a["outcome"] in retriable:
                retry["asyncio"][g["module"]].append(tid)
    flaky = {}
    rjobs = [Job(mod, mode, workdir, only=ids) for mode in MODES
             for mod, ids in retry[mode].items()]
    if rjobs and args.deadline - time.monotonic() < 15:
        notes.append(f"time budget nearly exhausted: {len(rjobs)} retry runs skipped")
        rjobs = []
    if rjobs:
        _run_all(rjobs, args)
        for j in rjobs:
            notes += [n + " (retry)" for n in j.log]
            for tid in j.only:
                rec = j.results.get(tid)
                if rec is not None and rec["outcome"] in GOOD:
                    rec["module"] = j.module
                    flaky[(j.mode, tid)] = res[j.mode][tid]["outcome"]
                    res[j.mode][tid] = rec

    # Per-module table.
    if not full:
        print("\n(asyncio column: the tests goloop failed, run on asyncio's loop; "
              "--baseline all runs every test on both)")
    hdr = (f"{'module':<20} | {'asyncio run/pass/fail/err/skip':>30} | "
           f"{'goloop run/pass/fail/err/skip':>30} | exercised")
    print()
    print(hdr)
    print("-" * len(hdr))
    tot = {m: collections.Counter() for m in MODES}
    for mod in modules:
        cs = {m: _counts(r for r in res[m].values() if r["module"] == mod) for m in MODES}
        for m in MODES:
            tot[m].update(cs[m])
        print(f"{mod:<20} | {_fmt_counts(cs['asyncio']):>30} | {_fmt_counts(cs['goloop']):>30}"
              f" | {cs['goloop']['exercised']:>5}")
    print("-" * len(hdr))
    print(f"{'total':<20} | {_fmt_counts(tot['asyncio']):>30} | {_fmt_counts(tot['goloop']):>30}"
          f" | {tot['goloop']['exercised']:>5}")
    print("(exercised: tests that created at least one goloop loop; the others run on mocks "
          "or test_utils.TestLoop)")

    # Regressions: pass with asyncio, fail (or never ran) with goloop.
    regressions, new, used = [], [], set()
    for tid in sorted(res["goloop"]):
        g, a = res["goloop"][tid], res["asyncio"].get(tid)
        if g["outcome"] in BAD and (a is None or a["outcome"] in GOOD):
            pat, why = known_reason(known, tid)
            regressions.append((tid, g, why))
            if pat is None:
                new.append(tid)
            else:
                used.add(pat)

    if regressions:
        print(f"\npass with asyncio, fail with goloop: {len(regressions)} "
              f"({len(new)} not in {os.path.relpath(args.known)})")
        died = collections.defaultdict(list)
        for tid, g, why in regressions:
            if g["outcome"] == "missing" and why is None:
                died[g["module"]].append(tid)
                continue
            tag = "NEW  " if why is None else "known"
            print(f"  {tag} {g['outcome']:<7} {tid}")
            print(f"          {why if why else short(g['detail'])}")
            if why is None and args.verbose:
                print("          | " + "\n          | ".join(g["detail"].splitlines()[-30:]))
        for mod, tids in died.items():
            print(f"  NEW   missing {len(tids)} tests of {mod} never ran on goloop "
                  f"(see the process events below)")
    if flaky:
        print(f"\npassed on retry (flaky, counted as passed): {len(flaky)}")
        for (mode, tid), first in sorted(flaky.items()):
            print(f"  [{mode}] {tid} (first run: {first})")
    stale = [pat for pat in known if pat not in used
             and (not pat.startswith(PKG + ".") or pat.split(".")[2] in modules)]
    # a test a later patch release added is absent from an earlier one's suite: not fixed
    absent = [pat for pat in stale if not any(fnmatch.fnmatchcase(tid, pat) for tid in res["goloop"])]
    stale = [pat for pat in stale if pat not in absent]
    if stale:
        print(f"\nknown failures that did not fail this run (fixed? remove them): {len(stale)}")
        for pat in stale:
            print(f"  {pat}")
    if absent:
        print(f"\nknown failures whose tests this version's suite does not have: {len(absent)}")
        for pat in absent:
            print(f"  {pat}")
    if notes:
        print("\nprocess events (timeouts kill the process; the module resumes after the test):")
        for n in notes:
            print(f"  {n}")
        died = collections.defaultdict(list)
        for mode in MODES:
            for tid, r in sorted(res[mode].items()):
                if tid.endswith(".<process>"):
                    died[(mode, short(r["detail"]))].append(r["module"])
        for (mode, why), mods in died.items():
            print(f"  [{mode}] died outside any test in {len(mods)} module(s) "
                  f"({', '.join(mods)}): {why}")
    if args.list_failures:
        print("\nall goloop failures, whatever asyncio did:")
        for tid, g in sorted(res["goloop"].items()):
            if g["outcome"] in BAD:
                a = res["asyncio"].get(tid, {}).get("outcome")
                print(f"  {g['outcome']:<7} (asyncio: {a}) {tid}\n          {short(g['detail'])}")

    if problems:
        print("\nTHE SUITE DID NOT RUN IN FULL (this fails the run, known failures or not):")
        for line in problems:
            print(f"  {line}")

    report = os.path.join(workdir, "report.json")
    with open(report, "w") as f:
        json.dump({"results": res, "regressions": [t for t, _, _ in regressions],
                   "new": new, "flaky": [list(k) for k in flaky]}, f, indent=1)
    keep = args.keep or new or notes or problems
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    passed = sum(1 for r in res["goloop"].values() if r["outcome"] in GOOD)
    print(f"\nruntime {time.monotonic() - t_start:.1f}s"
          + (f"; logs and report.json in {workdir}" if keep else ""))
    print(f"cpython-asyncio: {passed} passed, {len(new)} failed"
          + (f", {len(problems)} MODULES NOT RUN IN FULL" if problems else ""))
    return 1 if new or problems else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", nargs=2, metavar=("MODE", "MODULE"), help=argparse.SUPPRESS)
    p.add_argument("--results", help=argparse.SUPPRESS)
    p.add_argument("--only", help=argparse.SUPPRESS)
    p.add_argument("--exclude", help=argparse.SUPPRESS)
    p.add_argument("--collect", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-m", "--module", action="append", help="run only this module (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=max(3, (os.cpu_count() or 2) + 1),
                   help="parallel subprocesses")
    p.add_argument("--test-timeout", type=float, default=15.0,
                   help="seconds per test (a few known-slow tests get more: SLOW_TESTS)")
    p.add_argument("--module-timeout", type=float, default=180.0,
                   help="seconds per module run (all restarts included)")
    p.add_argument("--budget", type=float, default=240.0,
                   help="seconds for the whole run: modules not done by then are killed")
    p.add_argument("--max-restarts", type=int, default=25,
                   help="resume a module this many times after a hanging/crashing test")
    p.add_argument("--known", default=KNOWN_FAILURES, help="known-failures file")
    p.add_argument("--known-timeout", type=float, default=5.0,
                   help="seconds per test for the tests listed as known failures")
    p.add_argument("--baseline", choices=("failures", "all"), default="failures",
                   help="run on asyncio's own loop only the tests goloop fails (default), "
                        "or every test (the full side-by-side table)")
    p.add_argument("--keep", action="store_true", help="keep the logs directory")
    p.add_argument("--list-failures", action="store_true",
                   help="also list goloop failures that fail on asyncio too")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.child:
        args.mode, args.module = args.child
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
