"""goloop imports in a process whose spare static thread-local storage is already taken.

A library loaded after start-up (every extension module) gets its initial-exec thread-local
storage from a reserve glibc keeps small (`glibc.rtld.optional_static_tls`, 512 bytes by
default) and shares with every such library: OpenMP's libgomp (scikit-learn, torch,
xgboost), Mesa's libEGL, the sanitizers' runtimes. goloop's engine takes one pointer of it
(the server binding's per-thread state is on the heap, server_thread.c). Each test fills the
reserve in a fresh interpreter, then imports goloop, runs a loop and serves one ASGI and one
WSGI request."""
import ctypes.util
import os
import subprocess
import sys
import textwrap

import pytest

import goloop

PYSHIM = os.path.dirname(os.path.dirname(os.path.abspath(goloop.__file__)))

SCRIPT = textwrap.dedent(r"""
    import ctypes, sys
    for name in sys.argv[1:]:
        ctypes.CDLL(name)  # their static TLS first, as an application that imported them would
    import asyncio
    import goloop
    import goloop._goloop  # the engine: the import that needs static TLS
    from goloop.serve import server as _serve

    async def asgi_app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-i", b"asgi")]})
        await send({"type": "http.response.body", "body": b"asgi ok"})

    def wsgi_app(environ, start_response):
        start_response("200 OK", [("X-I", "wsgi")])
        return [b"wsgi ok"]

    async def one_request(app, interface):
        server = _serve.Server(app, interface=interface, port=0, host="127.0.0.1", access_log=False,
                               lifespan="off")
        task = asyncio.ensure_future(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.005)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = await asyncio.wait_for(r.read(), 30)
        w.close()
        server.request_exit()
        await task
        return data

    async def main():
        assert type(asyncio.get_running_loop()).__module__.startswith("goloop")
        await asyncio.sleep(0)
        a = await one_request(asgi_app, "asgi")
        b = await one_request(wsgi_app, "wsgi")
        return a, b

    a, b = goloop.run(main())
    assert a.startswith(b"HTTP/1.1 200") and a.endswith(b"asgi ok"), a
    assert b.startswith(b"HTTP/1.1 200") and b.endswith(b"wsgi ok"), b
    print("served")
""")


def run(libs=(), tunables=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYSHIM, os.environ.get("PYTHONPATH", "")]))
    env.pop("GLIBC_TUNABLES", None)
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    return subprocess.run([sys.executable, "-c", SCRIPT, *libs], env=env, capture_output=True, text=True,
                          timeout=120)


def check(p):
    assert "cannot allocate memory in static TLS block" not in p.stderr, p.stderr
    assert p.returncode == 0 and "served" in p.stdout, p.stdout + p.stderr


def test_loads_with_no_spare_static_tls():
    # 0: none of the reserve for libraries loaded later (glibc >= 2.32 reads the tunable)
    check(run(tunables="glibc.rtld.optional_static_tls=0"))


def _libs(*names):
    found = [ctypes.util.find_library(n) for n in names]
    return [f for f in found if f]


def test_loads_after_openmp_and_another_tls_library():
    # libgomp takes 136 bytes of the reserve, libEGL_mesa 64, libubsan 32: on glibc 2.36 the
    # first two left too little for the engine's former ~1.5 KiB
    libs = _libs("gomp")
    if not libs:
        pytest.skip("libgomp is not installed (Debian: libgomp1)")
    others = _libs("EGL_mesa", "ubsan")
    check(run(libs=libs + others[:1]))
    # and with the reserve cut to what these libraries take (64 bytes left for the rest)
    check(run(libs=libs + others[:1], tunables="glibc.rtld.optional_static_tls=%d" % (136 + 64 + 64)))
