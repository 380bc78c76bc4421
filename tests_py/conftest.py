"""Shared fixtures for goloop's Python tests.

Most tests take the ``loop`` fixture, which runs them twice: once on asyncio's own unix
selector loop (id "asyncio", the oracle for semantics and exception types) and once on a
goloop loop (id "goloop"). Every loop a fixture creates is closed at teardown.
"""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

# `python3 -m pytest` from the repository root puts the root on sys.path, where the Go
# sources' `goloop/` folder would shadow the installed package (as a namespace package with
# none of goloop's API). Drop the root so `import goloop` finds the real package.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _REPO_ROOT]
for _name in [n for n in sys.modules if n == "goloop" or n.startswith("goloop.")]:
    if getattr(sys.modules[_name], "__file__", None) is None:
        del sys.modules[_name]

import goloop  # noqa: E402
from loophelpers import LOOP_KINDS, close_loop, make_loop  # noqa: E402


@pytest.fixture(params=LOOP_KINDS)
def loop_kind(request) -> str:
    return request.param


@pytest.fixture
def loop(loop_kind):
    """A fresh event loop of each kind (asyncio first, as the oracle); closed at teardown."""
    lp = make_loop(loop_kind)
    try:
        yield lp
    finally:
        close_loop(lp)
        asyncio.set_event_loop(None)


@pytest.fixture
def gloop():
    """A goloop loop only, for goloop-specific checks."""
    lp = goloop.new_event_loop()
    try:
        yield lp
    finally:
        close_loop(lp)
        asyncio.set_event_loop(None)


@pytest.fixture
def restore_policy():
    """Restores asyncio's event loop policy after a test that changes it (without the
    deprecation warnings asyncio 3.14's public calls give)."""
    from goloop import _compat

    old = _compat.get_event_loop_policy()
    try:
        yield
    finally:
        _compat.set_event_loop_policy(old)


def pytest_configure(config):
    config.addinivalue_line("markers", "serve_one_driver: a serve test run with the default "
                            "connection driver only (pytest_generate_tests)")


def pytest_generate_tests(metafunc):
    # serve_readers: both drivers, or the default one for a test marked serve_one_driver
    # (it exercises nothing the drivers differ in: no connection, or TLS or HTTP/2 only,
    # which the goroutine driver serves under both)
    if "serve_readers" in metafunc.fixturenames:
        one = metafunc.definition.get_closest_marker("serve_one_driver")
        metafunc.parametrize("serve_readers", ["loop"] if one else ["loop", "goroutines"], indirect=True)


@pytest.fixture
def serve_readers(request, monkeypatch):
    """Runs a goloop serve test with each connection driver: the loop thread's (default) and
    the goroutine per connection of GOLOOP_SERVE_READERS=goroutines (read when a server is
    made; subprocesses inherit it)."""
    if request.param == "goroutines":
        monkeypatch.setenv("GOLOOP_SERVE_READERS", "goroutines")
    else:
        monkeypatch.delenv("GOLOOP_SERVE_READERS", raising=False)
    return request.param


@pytest.fixture(scope="module")
def certs():
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate
    (test_tls.make_certs), made once per test module; skips where neither cryptography nor
    openssl can make them."""
    import tempfile

    from test_tls import make_certs

    with tempfile.TemporaryDirectory(prefix="goloop-certs-") as d:
        try:
            made = make_certs(d)
        except RuntimeError as exc:  # no cryptography and no openssl
            pytest.skip(str(exc))
        yield made
