"""The README's FastAPI example runs under `goloop serve` in one command (a goal of
goloop serve's). The test takes the code block after the README's `readme-fastapi` marker,
so the README cannot drift from what works. Skipped without FastAPI."""
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from nethelpers import free_port, wait_listening

pytest.importorskip("fastapi")

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def readme_app() -> str:
    text = open(README, encoding="utf-8").read()
    m = re.search(r"<!-- readme-fastapi -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README lost its FastAPI example (the readme-fastapi marker)"
    return m.group(1)


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.timeout(90)
def test_readme_fastapi_app_under_goloop_serve(tmp_path):
    (tmp_path / "main.py").write_text(readme_app())
    port = free_port()
    # `goloop serve main:app --port N` in the app's directory; the `goloop` command is
    # this module's entry point, run here through the interpreter under test
    proc = subprocess.Popen([sys.executable, "-m", "goloop", "serve", "main:app", "--port", str(port)],
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_listening(proc, port, "goloop serve")
        assert get(port, "/items/5?q=x") == (200, {"item_id": 5, "q": "x"})
        assert get(port, "/items/7") == (200, {"item_id": 7, "q": None})
        status, body = get(port, "/items/abc")  # FastAPI's validation error
        assert status == 422 and body["detail"][0]["loc"] == ["path", "item_id"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out = proc.communicate(timeout=20)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode == 0, out
