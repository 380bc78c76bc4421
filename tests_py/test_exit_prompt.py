"""Interpreter exit after heavy use of goloop (many loops, default executors, getaddrinfo,
servers closed and left open, TLS, loops left unclosed, goloop.serve's ASGI and WSGI servers
stopped and left serving, a thread pool: bench/exit_time.py's child)
completes. Not a timing test: it fails only if the exit hangs (faulthandler then dumps every
thread's stack, which names what it waits for), or if a thread the interpreter's shutdown
joins (non-daemon) is other than an idle executor worker, as asyncio's loop leaves."""
import os
import subprocess
import sys

import pytest

import goloop

PYSHIM = os.path.dirname(os.path.dirname(os.path.abspath(goloop.__file__)))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from exit_time import CHILD  # noqa: E402


def test_exit_after_heavy_use_completes(tmp_path):
    key, crt = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    if subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                       "-days", "1", "-subj", "/CN=localhost"], capture_output=True).returncode != 0:
        pytest.skip("openssl could not make a certificate")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYSHIM, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-c", CHILD, "goloop", "12", key, crt], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path))
    try:
        out, err = p.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail("the interpreter did not exit:\n" + out + err)
    assert p.returncode == 0 and "END" in out, out + err
    assert "Fatal Python error" not in err, err
    joined = out.split("END", 1)[1].split()[1]
    # idle default-executor workers, and the child's own ThreadPoolExecutor's
    assert joined == "-" or all(n.startswith(("asyncio_", "ThreadPoolExecutor-")) for n in joined.split(",")), joined
