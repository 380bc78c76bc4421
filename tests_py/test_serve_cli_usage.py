"""`goloop serve` with a wrong option prints argparse's one-line usage and the error (not
every option: those are --help's), exit code 2; --help still lists every option."""
import os
import subprocess
import sys

from goloop.serve import config as serve_config  # the module whose parser() is goloop serve's


def goloop_serve(*args):
    # from a folder without the repository's goloop/ (Go sources), which python -m would find first
    return subprocess.run([sys.executable, "-m", "goloop", "serve", *args], capture_output=True, text=True,
                          timeout=60, cwd=os.path.dirname(os.path.abspath(__file__)))


def test_wrong_option_prints_one_usage_line_and_the_error():
    p = goloop_serve("--no-such-option", "main:app")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert lines == ["usage: goloop serve [options] module:app  (--help: every option)",
                     "goloop serve: error: unrecognized arguments: --no-such-option"], p.stderr
    assert p.stdout == ""


def test_bad_value_is_short_too():
    p = goloop_serve("--port", "eighty", "main:app")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2 and "argument --port: invalid int value: 'eighty'" in lines[1], p.stderr


def test_help_lists_every_option():
    p = goloop_serve("--help")
    assert p.returncode == 0
    for action in serve_config.parser()._actions:
        for opt in action.option_strings:
            assert opt in p.stdout, opt
    assert len(p.stdout.splitlines()) > 60
