"""uvicorn runs an ASGI app on goloop (`uvicorn --loop goloop:new_event_loop`) and shuts down
cleanly on SIGINT. Skipped when uvicorn is not installed."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

pytest.importorskip("uvicorn")

APP = textwrap.dedent('''
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"echo:" + body})
''')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_uvicorn_on_goloop(tmp_path, http):
    if http == "httptools":
        pytest.importorskip("httptools")
    (tmp_path / "asgiapp.py").write_text(APP)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--loop", "goloop:new_event_loop", "--http", http,
         "--port", str(port), "--app-dir", str(tmp_path), "--lifespan", "off", "asgiapp:app"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        for i in range(3):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=f"ping{i}".encode())
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
                assert r.read() == f"echo:ping{i}".encode()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "Finished server process" in text, text
