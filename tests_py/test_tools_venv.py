"""tools/venv.py, which makes the project's virtual environment for `make test` and `make demo`:
a VENV path set by hand to a folder that is not a venv is refused, never emptied."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.path.dirname(HERE), "tools", "venv.py")


def test_a_folder_that_is_not_a_venv_is_left_alone(tmp_path):
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    r = subprocess.run([sys.executable, TOOL, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "is not a virtual environment" in r.stderr
    assert keep.read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
