"""Make, or reuse, the project's virtual environment for one interpreter.

    PY tools/venv.py VENV [--set NAME] [--require FILE] [--require-gil FILE] [--try FILE]

PY is the interpreter the venv is made from (the Makefile's `PY`; it may itself be a venv's
python: `venv` then uses the interpreter that venv was made from). The Makefile keeps one venv
per interpreter tag under .venv/ (.venv/cp311-cp311, .venv/cp313-cp313t, ...), so successive
interpreters in one clone do not replace each other's; PY's own site-packages are never written.

The first line printed names the venv. A venv made from another interpreter than PY is made
again. With --set NAME, the named set of requirement files is installed unless the venv's stamp
file (VENV/goloop-stamp.json) already holds the same hash of those files' contents: a second run
installs nothing.

  --require FILE       `pip install -r FILE`; a failure fails the run
  --require-gil FILE   each line on its own: required on an interpreter with the GIL; on a
                       free-threaded one from a wheel only (--only-binary), and a package that
                       does not install is reported (pip's output in build/pip-NAME-TAG.log) and
                       left out: the tests that need it skip
  --try FILE           each line on its own; a package that does not install is reported and
                       left out
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import sysconfig

STAMP = "goloop-stamp.json"


def requirement_lines(path: str) -> list[str]:
    """The requirements of a file, one a line; comments and blank lines dropped."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


def files_hash(paths: list[str], extra: str) -> str:
    """The hash a set is stamped with: its files' contents (and those they include with -r),
    and `extra` (the interpreter's kind)."""
    h = hashlib.sha256(extra.encode())
    seen: set[str] = set()

    def add(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        h.update(path.encode() + b"\0")
        with open(path, "rb") as f:
            data = f.read()
        h.update(data + b"\0")
        for line in data.decode().splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("-r "):
                add(os.path.join(os.path.dirname(path), line[3:].strip()))

    for p in paths:
        add(p)
    return h.hexdigest()


def base_of(python: str) -> str:
    """The interpreter a venv made from `python` is based on (for a venv's python, the one that
    venv was made from)."""
    return subprocess.run([python, "-c", "import sys;print(getattr(sys, '_base_executable', sys.executable))"],
                          check=True, capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("venv")
    ap.add_argument("--set", help="the name of the requirement set (its stamp key)")
    ap.add_argument("--require", action="append", default=[])
    ap.add_argument("--require-gil", action="append", default=[])
    ap.add_argument("--try", dest="try_", action="append", default=[])
    ap.add_argument("--quiet", action="store_true", help="print nothing when nothing is to do")
    args = ap.parse_args()

    venv = args.venv
    vpy = os.path.join(venv, "bin", "python")
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    v = "%d%d" % sys.version_info[:2]
    tag = "cp%s-cp%s%s" % (v, v, "t" if free_threaded else "")
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))

    stamp_path = os.path.join(venv, STAMP)
    stamp: dict = {}
    if os.path.exists(stamp_path):
        try:
            with open(stamp_path) as f:
                stamp = json.load(f)
        except (OSError, ValueError):
            stamp = {}
    made = os.path.exists(vpy) and stamp.get("base") == base
    if made:
        try:
            made = os.path.realpath(base_of(vpy)) == base
        except (OSError, subprocess.CalledProcessError):
            made = False

    if not made:
        # a folder that is not a venv is never emptied (VENV may be set by hand to a wrong path)
        if os.path.isdir(venv) and os.listdir(venv) and not os.path.exists(os.path.join(venv, "pyvenv.cfg")):
            print(f"goloop: {venv} exists and is not a virtual environment: not touching it "
                  "(set VENV to a new or a venv folder)", file=sys.stderr)
            return 2

    files = args.require + args.require_gil + args.try_
    digest = files_hash(files, tag) if args.set else ""
    todo = not made or (args.set and stamp.get("sets", {}).get(args.set) != digest)
    if not todo and args.quiet:
        return 0
    what = "made now" if not made else ("installing " + args.set if todo else "up to date")
    print(f"goloop: using the virtual environment {venv} (from {sys.executable}, "
          f"Python {sys.version.split()[0]}{' free-threaded' if free_threaded else ''}): {what}", flush=True)
    if not todo:
        return 0

    if not made:
        # --clear: a venv of another interpreter at this path is replaced, not mixed into
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        stamp = {"base": base, "sets": {}}
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
    if not args.set:
        return 0

    pip = [vpy, "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    env = dict(os.environ, PIP_ROOT_USER_ACTION="ignore")   # pip warns on every call as root
    for path in args.require:
        print("  pip install -r " + path, flush=True)
        if subprocess.run(pip + ["-r", path], env=env).returncode:
            print(f"goloop: the requirements of {path} did not install", file=sys.stderr)
            return 1
    os.makedirs("build", exist_ok=True)
    for path in args.require_gil + args.try_:
        optional = path in args.try_ or free_threaded
        for req in requirement_lines(path):
            name = req.split("=")[0].split(">")[0].split("<")[0].split("[")[0]
            extra = ["--only-binary", ":all:"] if free_threaded and path in args.require_gil else []
            print(f"  pip install {' '.join(extra + [req])}", flush=True)
            if not optional:
                if subprocess.run(pip + extra + [req], env=env).returncode:
                    return 1
                continue
            log = os.path.join("build", f"pip-{name}-{tag}.log")
            with open(log, "w") as f:
                rc = subprocess.run(pip + extra + [req], env=env, stdout=f, stderr=subprocess.STDOUT).returncode
            if rc:
                print(f"goloop: {req} does not install on {sys.executable} (pip's output: {log}): "
                      "what needs it skips or leaves its column empty", flush=True)
    stamp.setdefault("sets", {})[args.set] = digest
    with open(stamp_path, "w") as f:
        json.dump(stamp, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
