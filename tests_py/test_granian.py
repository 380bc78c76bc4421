"""Granian serves an ASGI app on goloop: `python -m goloop.granian` installs goloop's policy and
runs Granian's command line with `--loop asyncio` (Granian's threads need the GIL while the
loop is busy). Granian's workers build their
loop before importing the app, so the app itself cannot install goloop; the launcher must,
in the worker, with both of multiprocessing's start methods. Skipped without granian."""
import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from nethelpers import ASGI_READ_BODY, free_port, interrupt, wait_listening

pytest.importorskip("granian")
FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()

APP = ASGI_READ_BODY + textwrap.dedent('''
    import asyncio, os

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        loop = asyncio.get_running_loop()
        # a thread hand-off on the way (to_thread needs the loop to give up the GIL)
        pid = await asyncio.to_thread(os.getpid)
        text = f"{type(loop).__module__}.{type(loop).__name__} {pid} ".encode() + body
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": text})
''')

# a launcher of one's own, as the README shows, forcing the spawn start method
SPAWN_LAUNCHER = textwrap.dedent('''
    import multiprocessing, runpy, sys
    if __name__ == "__main__":
        multiprocessing.set_start_method("spawn")
        sys.argv = ["goloop.granian", *sys.argv[1:]]
        runpy.run_module("goloop.granian", run_name="__main__", alter_sys=True)
''')


def serve(tmp_path, cmd):
    (tmp_path / "asgiapp.py").write_text(APP)
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(tmp_path), env.get("PYTHONPATH")] if p)
    proc = subprocess.Popen(
        cmd + ["--interface", "asgi", "--port", str(port), "--workers", "1", "asgiapp:app"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(tmp_path), env=env)
    wait_listening(proc, port, "granian")
    return proc, port


def fetch(port, data):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=data)
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("start", ["default", "spawn"])
def test_granian_runs_the_app_on_goloop(tmp_path, start):
    if start == "spawn":
        (tmp_path / "launch.py").write_text(SPAWN_LAUNCHER)
        cmd = [sys.executable, str(tmp_path / "launch.py")]
    else:
        cmd = [sys.executable, "-m", "goloop.granian"]
    proc, port = serve(tmp_path, cmd)
    try:
        pids = set()
        for i in range(20):
            loop_name, pid, echo = fetch(port, f"ping{i}".encode()).split(" ", 2)
            assert loop_name == "goloop._loop.Loop"
            assert echo == f"ping{i}"
            pids.add(pid)
        assert len(pids) == 1
        if not FREE_THREADED:  # served by the worker process (free-threaded Granian's are threads)
            assert int(pids.pop()) != proc.pid
    finally:
        out = interrupt(proc)
    assert proc.returncode == 0, out


def test_launcher_refuses_another_loop(tmp_path):
    r = subprocess.run([sys.executable, "-m", "goloop.granian", "--loop", "uvloop", "x:app"],
                       capture_output=True, text=True, timeout=30, cwd=str(tmp_path))
    assert r.returncode != 0
    assert "--loop uvloop would not use goloop" in r.stderr


def test_launcher_adds_loop_asyncio():
    from goloop.granian import _loop_option
    assert _loop_option(["--interface", "asgi", "app:app"]) is None
    assert _loop_option(["--loop", "asyncio", "app:app"]) == "asyncio"
    assert _loop_option(["--loop=uvloop", "app:app"]) == "uvloop"


def test_installing_the_policy_does_not_load_the_engine(tmp_path):
    """Granian forks workers from the launcher's process: the Go runtime must not be in it."""
    code = ("import sys, goloop.granian, asyncio, goloop; "
            "assert isinstance(asyncio.get_event_loop_policy(), goloop.EventLoopPolicy); "
            "print(any(m.startswith('goloop._goloop') for m in sys.modules))")
    # (not from the repository root, whose goloop/ folder of Go sources would shadow the package)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
