"""The README's FastAPI example runs under `goloop serve` in one command, and its Flask example
under `goloop serve --interface wsgi` (goals of goloop serve's). Each test takes the code block
after the README's `readme-fastapi` / `readme-flask` marker, so the README cannot drift from
what works. Skipped without FastAPI / Flask."""
import contextlib
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

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def readme_app(marker: str = "readme-fastapi") -> str:
    text = open(README, encoding="utf-8").read()
    m = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"README lost its example (the {marker} marker)"
    return m.group(1)


def get(port, path, data=None):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", data=data, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:  # an HTML error page
            return e.code, body.decode(errors="replace")


@contextlib.contextmanager
def serving_readme_block(tmp_path, marker, *options):
    """`goloop serve main:app --port N [options]` in a folder holding the README block as main.py;
    the `goloop` command is this module's entry point, run here through the interpreter under test.
    Yields the port; the server must then exit cleanly on SIGTERM."""
    (tmp_path / "main.py").write_text(readme_app(marker))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "goloop", "serve", "main:app", "--port", str(port), *options],
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_listening(proc, port, "goloop serve")
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out = proc.communicate(timeout=20)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode == 0, out


@pytest.mark.timeout(90)
def test_readme_fastapi_app_under_goloop_serve(tmp_path):
    pytest.importorskip("fastapi")
    with serving_readme_block(tmp_path, "readme-fastapi") as port:
        assert get(port, "/items/5?q=x") == (200, {"item_id": 5, "q": "x"})
        assert get(port, "/items/7") == (200, {"item_id": 7, "q": None})
        status, body = get(port, "/items/abc")  # FastAPI's validation error
        assert status == 422 and body["detail"][0]["loc"] == ["path", "item_id"]


@pytest.mark.timeout(90)
def test_readme_flask_app_under_goloop_serve_wsgi(tmp_path):
    pytest.importorskip("flask")
    with serving_readme_block(tmp_path, "readme-flask", "--interface", "wsgi") as port:
        assert get(port, "/items/5?q=x") == (200, {"item_id": 5, "q": "x"})
        assert get(port, "/items/7") == (200, {"item_id": 7, "q": None})
        assert get(port, "/items/abc")[0] == 404  # the int converter does not match
