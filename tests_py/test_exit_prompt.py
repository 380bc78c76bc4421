"""Interpreter exit after heavy use of goloop (many loops, default executors, getaddrinfo,
servers closed and left open, TLS) completes: nothing goloop leaves behind holds the
interpreter's shutdown. Not a timing test: it fails only if the exit hangs (faulthandler
then dumps every thread's stack, which names what it waits for), or if a thread goloop made
is one that shutdown would join (non-daemon)."""
import os
import ssl
import subprocess
import sys
import textwrap

import pytest

import goloop

PYSHIM = os.path.dirname(os.path.dirname(os.path.abspath(goloop.__file__)))

CHILD = textwrap.dedent(r"""
    import asyncio, faulthandler, ssl, sys, threading, time
    faulthandler.dump_traceback_later(60, exit=True)  # a hang: every thread's stack, then exit 1
    import goloop
    key, crt = sys.argv[1], sys.argv[2]
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    sctx.load_cert_chain(crt, key)
    cctx = ssl.create_default_context()
    cctx.check_hostname = False
    cctx.verify_mode = ssl.CERT_NONE
    kept = []
    before = set(threading.enumerate())

    async def use(i):
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, time.sleep, 0.001)
        await loop.getaddrinfo("localhost", 80)
        async def echo(r, w):
            w.write(await r.readline())
            await w.drain()
            w.close()
        tls = i % 2 == 1
        srv = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=sctx if tls else None)
        r, w = await asyncio.open_connection("127.0.0.1", srv.sockets[0].getsockname()[1],
                                             ssl=cctx if tls else None)
        w.write(b"x\n")
        assert await r.readline() == b"x\n"
        w.close()
        if i % 3 == 0:
            kept.append(srv)  # left open
        else:
            srv.close()
            await srv.wait_closed()

    for i in range(12):
        loop = goloop.new_event_loop()
        loop.run_until_complete(use(i))
        if i % 4 == 0:
            kept.append(loop)  # neither closed nor its executor shut down
        else:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
    goloop.run(asyncio.sleep(0))
    # the threads shutdown will join: only the default executors' workers (idle; asyncio's
    # loop leaves the same), none of goloop's own
    joined = [t.name for t in threading.enumerate() if t not in before and not t.daemon]
    assert all(n.startswith("asyncio_") for n in joined), joined
    print("END", len(joined), flush=True)
""")


def test_exit_after_heavy_use_completes(tmp_path):
    key, crt = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    if subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                       "-days", "1", "-subj", "/CN=localhost"], capture_output=True).returncode != 0:
        pytest.skip("openssl could not make a certificate")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYSHIM, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-c", CHILD, key, crt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=str(tmp_path))
    try:
        out, err = p.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail("the interpreter did not exit:\n" + out + err)
    assert p.returncode == 0 and "END" in out, out + err
    assert "Fatal Python error" not in err and "Timeout" not in err, err
