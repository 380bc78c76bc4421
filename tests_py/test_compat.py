"""goloop's contract with asyncio's private API, checked on the running Python version.

Every private asyncio name goloop uses is in pyshim/goloop/_compat.py (PRIVATE_NAMES). These
tests fail loudly when a CPython release removes or reshapes one of them, and when code
outside _compat starts reaching into asyncio's private names again.
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import io
import os
import re
import socket
import ssl
import sys
import tokenize

import pytest

from goloop import _compat

PKG_DIR = os.path.dirname(_compat.__file__)


@pytest.mark.parametrize("module,name", _compat.PRIVATE_NAMES,
                         ids=[f"{m}.{n}" for m, n in _compat.PRIVATE_NAMES])
def test_private_name_exists(module, name):
    mod = importlib.import_module(module)
    assert hasattr(mod, name), (
        f"{module}.{name} is gone in Python {sys.version.split()[0]}: "
        f"goloop/_compat.py needs a branch for this version")


def _params(fn):
    return list(inspect.signature(fn).parameters)


@pytest.mark.parametrize("fn,expected", [
    (_compat.format_handle, ["handle"]),
    (_compat.check_ssl_socket, ["sock"]),
    (_compat.set_nodelay, ["sock"]),
    (_compat.set_reuseport, ["sock"]),
    (_compat.set_result_unless_cancelled, ["fut", "result"]),
], ids=lambda x: getattr(x, "__name__", None) or str(x))
def test_private_function_signatures(fn, expected):
    assert _params(fn) == expected


def test_format_callback_source_per_version():
    # 3.13 added a keyword-only debug flag that controls the "at file:line" suffix
    params = _params(_compat._format_callback_source)
    assert params[:2] == ["func", "args"]
    assert ("debug" in params) == _compat.PY313

    def cb(x):
        pass

    plain = _compat.format_callback_source(cb, (1,), False)
    debug = _compat.format_callback_source(cb, (1,), True)
    name = "test_format_callback_source_per_version.<locals>.cb"
    where = f" at {__file__}:"
    # 3.13 shows the arguments only in debug mode (they may be secrets)
    assert plain.startswith(name + ("()" if _compat.PY313 else "(1)") + where)
    assert debug.startswith(name + "(1)" + where)


def test_server_attach_takes_asyncios_signature(gloop):
    """goloop's Server._attach/_detach take what asyncio's take on this version (a
    transport from 3.13, nothing before it: 3.12's own test_server calls them so), and
    wait_closed (3.12+) waits for connections attached either way."""
    from asyncio import base_events

    assert ("transport" in _params(base_events.Server._attach)) == _compat.SERVER_ATTACH_TAKES_TRANSPORT

    async def main():
        srv = await gloop.create_server(asyncio.Protocol, "127.0.0.1", 0)

        class Client:  # stands for a transport (the server keeps weak references)
            pass

        client = Client()
        if _compat.SERVER_ATTACH_TAKES_TRANSPORT:
            attach, detach = (lambda: srv._attach(client)), (lambda: srv._detach(client))
        else:
            attach, detach = srv._attach, srv._detach
            srv._attach(client)  # goloop's own transports pass themselves on every version
            srv._detach(client)
        attach()
        srv.close()
        waiter = asyncio.ensure_future(srv.wait_closed())
        await asyncio.sleep(0)
        # 3.11's wait_closed returns at once from a closed server
        assert waiter.done() != _compat.WAIT_CLOSED_WAITS_FOR_CLIENTS
        detach()
        await asyncio.wait_for(waiter, 10)

    gloop.run_until_complete(main())


def test_base_loop_shape():
    # What goloop.Loop takes from asyncio's unix selector loop (argument handling and
    # protocol plumbing); each must exist with the signature goloop's code calls.
    base = _compat.UnixSelectorEventLoop
    assert _params(base.__init__) == ["self", "selector"]
    for name in ("_make_datagram_transport", "_make_read_pipe_transport",
                 "_make_write_pipe_transport", "_ensure_fd_no_transport",
                 "_sock_sendfile_native", "_make_self_pipe", "_read_from_self",
                 "_write_to_self", "_process_self_data", "_check_closed", "_check_running",
                 "_set_coroutine_origin_tracking", "_asyncgen_firstiter_hook",
                 "_asyncgen_finalizer_hook", "_create_server_getaddrinfo",
                 "add_signal_handler", "remove_signal_handler", "call_exception_handler",
                 "run_in_executor", "shutdown_asyncgens", "shutdown_default_executor",
                 "create_connection", "create_datagram_endpoint", "sock_sendall",
                 "sock_connect", "sock_accept", "sock_sendfile", "connect_accepted_socket"):
        assert callable(getattr(base, name, None)), f"{base.__name__}.{name} is gone"
    assert list(inspect.signature(base._ensure_fd_no_transport).parameters) == ["self", "fd"]


def test_subprocess_transport_shape():
    tr = _compat.UnixSubprocessTransport
    params = _params(tr.__init__)
    assert params[:9] == ["self", "loop", "protocol", "args", "shell", "stdin", "stdout",
                          "stderr", "bufsize"]
    assert "waiter" in params and "extra" in params
    assert inspect.iscoroutinefunction(tr._wait)
    assert _params(tr._process_exited) == ["self", "returncode"]


def test_subprocess_helpers_on_a_real_child(gloop):
    # _proc / _process_exited / _wait as goloop's subprocess watching uses them
    async def main():
        tr, _ = await gloop.subprocess_exec(asyncio.SubprocessProtocol, sys.executable,
                                            "-c", "import sys; sys.exit(3)")
        popen = _compat.subprocess_popen(tr)
        rc = await _compat.subprocess_wait(tr)
        tr.close()
        return popen, rc

    popen, rc = gloop.run_until_complete(main())
    assert popen.pid > 0 and rc == 3


def test_check_ssl_socket_rejects_ssl_sockets():
    ctx = ssl.create_default_context()
    with socket.socket() as raw:
        s = ctx.wrap_socket(raw, do_handshake_on_connect=False, server_hostname="x")
        with pytest.raises(TypeError, match="SSLSocket"):
            _compat.check_ssl_socket(s)
        s.close()


def test_sendfile_mode_and_transport_socket():
    assert _compat.SendfileMode.TRY_NATIVE.name == "TRY_NATIVE"
    a, b = socket.socketpair()
    try:
        ts = _compat.TransportSocket(a)
        assert ts.fileno() == a.fileno()
        with pytest.raises(AttributeError):  # no close() through it
            ts.close
    finally:
        a.close()
        b.close()


def test_policy_base_is_asyncios_default_policy():
    import warnings

    import goloop

    with warnings.catch_warnings():  # 3.14 deprecates the public names (removal in 3.16)
        warnings.simplefilter("ignore", DeprecationWarning)
        assert issubclass(goloop.EventLoopPolicy, asyncio.AbstractEventLoopPolicy)
        if not _compat.PY314:
            assert issubclass(goloop.EventLoopPolicy, asyncio.DefaultEventLoopPolicy)


def test_policy_install_without_deprecation_warning(restore_policy):
    """goloop.install() warns of nothing on any version (3.14 deprecates the policy API),
    and the policy it set is goloop's; read back without asyncio's own warning."""
    import warnings

    import goloop

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        goloop.install()
    pol = _compat.get_event_loop_policy()
    assert isinstance(pol, goloop.EventLoopPolicy)
    loop = pol.new_event_loop()
    try:
        assert isinstance(loop, goloop.Loop)
    finally:
        loop.close()


def test_asyncio_set_event_loop_policy_warns_only_of_itself(restore_policy):
    """asyncio.set_event_loop_policy(goloop.EventLoopPolicy()) keeps working on 3.14+, where
    the only warning is asyncio's own deprecation of that call (at the caller's line):
    none comes from goloop's code, nor from the loops the policy makes."""
    import warnings

    import goloop

    async def main():
        return type(asyncio.get_running_loop())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.set_event_loop_policy(goloop.EventLoopPolicy())
        assert asyncio.run(main()) is goloop.Loop
        loop = asyncio.new_event_loop()
        loop.close()
    from_goloop = [w for w in caught if os.path.dirname(os.path.abspath(w.filename)) == os.path.abspath(PKG_DIR)]
    assert from_goloop == []
    deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    if _compat.PY314:
        assert len(deprecations) == 1 and "set_event_loop_policy" in deprecations[0]
        assert caught[0].filename == __file__
    else:
        assert deprecations == []


# Modules of asyncio whose private names count; "asyncio._x" counts too.
_PRIVATE = re.compile(
    r"\b(?:asyncio|base_events|base_subprocess|constants|coroutines|events|exceptions|"
    r"format_helpers|futures|protocols|selector_events|sslproto|streams|tasks|transports|"
    r"trsock|unix_events)\._[A-Za-z]\w*")


def _private_uses(source: str):
    """(line, 'module._name') for each attribute access on one of asyncio's modules that
    names a private attribute, from the token stream (strings and comments do not count)."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.COMMENT)]
    for a, dot, b in zip(toks, toks[1:], toks[2:]):
        if (a.type == tokenize.NAME and dot.string == "." and b.type == tokenize.NAME
                and _PRIVATE.fullmatch(f"{a.string}.{b.string}")):
            yield a.start[0], f"{a.string}.{b.string}"


def test_no_private_asyncio_names_outside_compat():
    offenders = []
    for fn in sorted(os.listdir(PKG_DIR)):
        if not fn.endswith(".py") or fn == "_compat.py":
            continue
        with open(os.path.join(PKG_DIR, fn)) as f:
            for lineno, name in _private_uses(f.read()):
                offenders.append(f"{fn}:{lineno}: {name}")
    assert not offenders, "private asyncio names outside _compat.py:\n" + "\n".join(offenders)


def test_scan_catches_a_private_name():
    # the scan above must be able to fail
    found = list(_private_uses("x = base_events._set_nodelay(sock)\n"
                               "if asyncio._get_running_loop():\n    pass\n"
                               "self._transports.get(fd)  # events._x in a comment\n"
                               "msg = 'asyncio._SSLProtocolTransport'\n"))
    assert found == [(1, "base_events._set_nodelay"), (2, "asyncio._get_running_loop")]


def test_readme_first_example_runs_on_goloop_without_warnings():
    """The README's first lines: asyncio.run(loop_factory=) (3.12+) and goloop.run(), on
    every version without a deprecation warning."""
    import sys
    import warnings

    import goloop

    async def main():
        return type(asyncio.get_running_loop())

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        if sys.version_info >= (3, 12):
            assert asyncio.run(main(), loop_factory=goloop.new_event_loop) is goloop.Loop
        assert goloop.run(main()) is goloop.Loop
