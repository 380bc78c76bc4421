"""Every example of the manual runs: each file under docs/examples/ says how in its first
lines (`# run:` the command, `# check: GET /path -> STATUS BODY` what a request gets,
`# prints:` what the script prints, `# needs:` the packages without which it is skipped), and
the pages include those files (pymdownx.snippets), so a broken example fails here. The
deployment recipes' `goloop serve` command lines are checked against the command's parser,
and README.md's FastAPI and Flask blocks are the examples' own code."""
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from nethelpers import free_port, wait_listening

from goloop.serve import config as serve_config  # the module whose parser() is goloop serve's

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "docs", "examples")
FILES = sorted(glob.glob(os.path.join(EXAMPLES, "*.py")))


def header(path):
    meta = {"run": None, "check": [], "needs": [], "prints": None}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"# (run|check|needs|prints): (.*)", line)
            if not m:
                break
            key, value = m.groups()
            if key == "check":
                meta["check"].append(value)
            elif key == "needs":
                meta["needs"] += value.split()
            else:
                meta[key] = value
    return meta


def command(run, port):
    argv = shlex.split(run.replace("{port}", str(port)))
    if argv[0] == "goloop":  # the console script, run through the interpreter under test
        return [sys.executable, "-m", "goloop", *argv[1:]] + ([] if "{port}" in run else ["--port", str(port)])
    assert argv[0] == "python", run
    return [sys.executable, *argv[1:]]


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_every_example_says_how_it_runs():
    assert FILES
    for path in FILES:
        meta = header(path)
        assert meta["run"], f"{os.path.basename(path)}: no '# run:' line"
        assert meta["check"] or meta["prints"], f"{os.path.basename(path)}: nothing to check"


def test_every_example_is_in_a_page():
    pages = "".join(open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
    for path in FILES + glob.glob(os.path.join(EXAMPLES, "deploy", "*")):
        name = os.path.relpath(path, EXAMPLES)
        assert f'--8<-- "{name}' in pages, f"{name} is in no page of docs/"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p) for p in FILES])
def test_example_runs(path, tmp_path):
    meta = header(path)
    for mod in meta["needs"]:
        pytest.importorskip(mod)
    port = free_port()
    argv = command(meta["run"], port)
    env = dict(os.environ, PORT=str(port))
    if meta["prints"] is not None:
        p = subprocess.run(argv, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip().splitlines()[0] == meta["prints"], p.stdout
        assert "Warning" not in p.stderr, p.stderr
        return
    proc = subprocess.Popen(argv, cwd=EXAMPLES, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_listening(proc, port, meta["run"])
        for check in meta["check"]:
            m = re.fullmatch(r"GET (\S+) -> (\d+) (.*)", check)
            assert m, check
            status, body = get(port, m.group(1))
            assert status == int(m.group(2)), (check, body)
            want = m.group(3)
            if want.startswith("{"):
                assert json.loads(body) == json.loads(want), (check, body)
            else:
                assert json.loads(want) in body, (check, body)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out = proc.communicate(timeout=30)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode == 0, out


def deploy_commands():
    """Every `goloop serve ...` command line of the deployment recipes, as argv."""
    out = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "deploy", "*"))):
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"^ExecStart=\S*goloop (serve .*)$", text, re.M):
            out.append((os.path.basename(path), shlex.split(m.group(1))))
        for m in re.finditer(r'(?:CMD|args:) (\["goloop", "serve".*\])', text):
            out.append((os.path.basename(path), json.loads(m.group(1))[1:]))
    return out


def test_deploy_recipes_name_real_options():
    cmds = deploy_commands()
    assert {name for name, _ in cmds} == {"goloop.service", "Dockerfile", "kubernetes.yaml"}
    for name, argv in cmds:
        assert argv[0] == "serve"
        serve_config.parser().parse_args(argv[1:])  # exits (SystemExit) on a wrong option


def test_nginx_recipe_parses():
    nginx = "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        pytest.skip("nginx is not installed")
    conf = os.path.join(EXAMPLES, "deploy", "nginx.conf")
    p = subprocess.run([nginx, "-t", "-c", conf], capture_output=True, text=True)
    assert "syntax is ok" in p.stderr or "unknown directive" not in p.stderr, p.stderr


@pytest.mark.parametrize("marker,example", [("readme-fastapi", "main.py"), ("readme-flask", "flask_app.py")])
def test_readme_blocks_are_the_examples(marker, example):
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    block = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", readme, re.S).group(1)
    code = open(os.path.join(EXAMPLES, example), encoding="utf-8").read()
    code = "".join(line for line in code.splitlines(True) if not re.match(r"# (run|check|needs|prints):", line))
    strip = lambda s: [l for l in s.splitlines() if l.strip() and not l.startswith("# ")]  # noqa: E731
    assert strip(block) == strip(code)
