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


def test_settings_page_lists_every_option_with_its_default():
    """docs/settings.md's tables come from the same parser (docs/hooks.py): every option of
    --help is there, each with a default."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(root, "docs", "hooks.py"))
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    assert hooks.SERVE_CONFIG == serve_config.__name__
    page = hooks.on_page_markdown(open(os.path.join(root, "docs", "settings.md"), encoding="utf-8").read(),
                                  None, None, None)
    rows = [line for line in page.splitlines() if line.startswith('| <span id="')]
    for action in serve_config.parser()._actions:
        for opt in action.option_strings:
            if opt in ("-h", "--help"):
                continue
            row = next((r for r in rows if f"`{opt}`" in r), None)
            assert row, f"{opt} is not on the Settings page"
            default = row.split(" | ")[1]
            assert default.strip(), f"{opt} has no default on the Settings page"
    assert "timeout-keep-alive" in page and "| 5 |" in next(r for r in rows if "`--timeout-keep-alive`" in r)
