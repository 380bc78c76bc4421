"""uvicorn runs an ASGI app on goloop (`uvicorn --loop goloop:new_event_loop`) and shuts down
cleanly on SIGINT. Skipped when uvicorn is not installed."""
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from nethelpers import ASGI_READ_BODY, free_port, interrupt, wait_listening

pytest.importorskip("uvicorn")

APP = ASGI_READ_BODY + textwrap.dedent('''
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"echo:" + body})
''')


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
    wait_listening(proc, port, "uvicorn", timeout=20)
    try:
        for i in range(3):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=f"ping{i}".encode())
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
                assert r.read() == f"echo:ping{i}".encode()
    finally:
        text = interrupt(proc)
    assert proc.returncode == 0, text
    assert "Finished server process" in text, text
