"""`make wheel-check`: each of the twelve wheels `make wheel` makes, installed into a fresh venv of
an interpreter of its version and architecture wherever one can be had, and smoke-tested there
(tools/wheel_smoke.py: an echo round trip, `goloop --version`, one `goloop serve` request).
Prints one line per wheel: tested where, or not run and why. Exits 1 if a wheel is missing or
a smoke test failed (a wheel with no interpreter to run it is not a failure: the line says why).

    python3 tools/wheel_check.py --dist dist --version 0.1.0

Where each wheel runs (the first interpreter of its list that exists; the roots are made once
per machine by the scripts named, see docs/install.md):
  x86-64:   cp311 python3 (when it is 3.11); cp312 pyenv's 3.12; cp313 /opt/python/3.13 or
            pyenv's 3.13, and also tools/oldglibc.sh's Debian bullseye root (glibc 2.31);
            cp313t /opt/python/3.13t; cp314, cp315 shared/pythons/sid.sh's Debian sid root
  aarch64:  cp311 shared/pythons/arm64.sh's Debian bookworm arm64 root under qemu-user; cp313,
            cp314, cp315 a Debian sid arm64 root (ARM64_SID_ROOT, default /opt/arm64-sid: `make
            arm64-sid-root`), entered by arm64.sh too; cp312 and cp313t have no aarch64
            interpreter to run them (below, NOT_RUN)
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# shared/pythons/ (build.sh, sid.sh, arm64.sh) beside the clone, or beside its folder; PYTHONS_DIR
SHARED = os.environ.get("PYTHONS_DIR") or next(
    (d for d in (os.path.join(os.path.dirname(REPO), "shared", "pythons"),
                 os.path.join(os.path.dirname(os.path.dirname(REPO)), "shared", "pythons")) if os.path.isdir(d)),
    os.path.join(os.path.dirname(REPO), "shared", "pythons"))
TAGS = ("cp311-cp311", "cp312-cp312", "cp313-cp313", "cp313-cp313t", "cp314-cp314", "cp315-cp315")
ARCHES = ("x86_64", "aarch64")

NOT_RUN = {
    ("cp312-cp312", "aarch64"): "no aarch64 CPython 3.12: Debian's arm64 suites ship 3.11 (bookworm), "
                                "3.13 (trixie) and 3.13-3.15 (sid), none 3.12",
    ("cp313-cp313t", "aarch64"): "no free-threaded aarch64 CPython: Debian builds none, and building one "
                                 "under qemu-user would take hours",
}
ARM64_SID_ROOT = os.environ.get("ARM64_SID_ROOT", "/opt/arm64-sid")
for _tag in ("cp313-cp313", "cp314-cp314", "cp315-cp315"):
    NOT_RUN[(_tag, "aarch64")] = (f"needs a Debian sid arm64 root under qemu-user with CPython 3.{_tag[4:5]} "
                                  f"at {ARM64_SID_ROOT} (`make arm64-sid-root` makes it, once per machine)")


def pyenv_python(minor: str) -> list[str]:
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    return sorted(glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", "python3")))[-1:]


def places(tag: str, arch: str) -> list[tuple[str, list[str], str]]:
    """(label, command prefix, interpreter) for each place this wheel should run."""
    minor = "3." + tag[3:5]
    if arch == "aarch64":
        if tag == "cp311-cp311":
            return [("bookworm arm64 root (qemu)", ["bash", os.path.join(SHARED, "arm64.sh")], "/usr/bin/python3.11")]
        py = f"/usr/bin/python{minor}"
        if not tag.endswith("t") and os.path.exists(ARM64_SID_ROOT + py):
            # arm64.sh only binds and enters a root that exists: this one is sid's
            return [("sid arm64 root (qemu)", ["env", f"ARM64_ROOT={ARM64_SID_ROOT}", "bash",
                                               os.path.join(SHARED, "arm64.sh")], py)]
        return []
    if tag == "cp311-cp311":
        return [("host", [], shutil.which("python3") or "python3")]
    if tag == "cp312-cp312":
        return [("host", [], p) for p in pyenv_python("3.12")]
    if tag == "cp313-cp313":
        first = [p for p in ["/opt/python/3.13/bin/python3"] if os.path.exists(p)] or pyenv_python("3.13")
        return [("host", [], p) for p in first[:1]] + [
            ("bullseye root, glibc 2.31", ["bash", os.path.join(HERE, "oldglibc.sh")], "/opt/python-3.13/bin/python3.13")]
    if tag == "cp313-cp313t":
        return [("host", [], "/opt/python/3.13t/bin/python3")]
    return [("sid root", ["bash", os.path.join(SHARED, "sid.sh"), minor], f"/usr/bin/python{minor}")]


def sh(cmd, timeout=900):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          cwd=REPO, stdin=subprocess.DEVNULL)


def smoke(wheel: str, tag: str, arch: str, label: str, prefix: list[str], py: str, version: str) -> tuple[bool, str]:
    want = "%s %s" % ("3." + tag[3:5] + ("t" if tag.endswith("t") else ""), arch)
    probe = ("import sys,sysconfig,platform;print('%d.%d' % sys.version_info[:2] + "
             "('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else ''), platform.machine())")
    if not prefix and not os.path.exists(py):
        return False, f"not run: {py} not found"
    p = sh(prefix + [py, "-c", probe], timeout=1800)  # a root is made on first use (minutes)
    if p.returncode != 0 or p.stdout.strip().splitlines()[-1:] != [want]:
        return False, f"not run [{label}]: {' '.join(prefix + [py])} is not CPython {want}: {p.stdout.strip()[-300:]}"
    venv = os.path.join(REPO, "build", "wheel-check", f"{tag}-{arch}-{label.split()[0]}")
    shutil.rmtree(venv, ignore_errors=True)
    steps = [prefix + [py, "-m", "venv", venv],
             prefix + [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                       "--no-index", "--no-deps", wheel],
             prefix + [os.path.join(venv, "bin", "python"), "-P", os.path.join(HERE, "wheel_smoke.py"), version]]
    for cmd in steps:
        p = sh(cmd)
        if p.returncode != 0:
            return False, f"FAILED [{label}]: {' '.join(cmd)}:\n{p.stdout[-3000:]}"
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("SMOKE-OK")]
    shutil.rmtree(venv, ignore_errors=True)
    return True, f"tested [{label}]: {line[-1][len('SMOKE-OK '):] if line else p.stdout.strip()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dist", default=os.path.join(REPO, "dist"))
    ap.add_argument("--version", required=True)
    ap.add_argument("--only", action="append", default=[], help="TAG-ARCH, e.g. cp311-cp311-aarch64 (repeatable)")
    ap.add_argument("--places", default="host,sid,bullseye,bookworm",
                    help="where to run: comma-separated first words of the places (default: all)")
    args = ap.parse_args()
    lines, failed = [], False
    for tag in TAGS:
        for arch in ARCHES:
            if args.only and f"{tag}-{arch}" not in args.only:
                continue
            found = glob.glob(os.path.join(args.dist, f"goloop-{args.version}-{tag}-*manylinux_2_17_{arch}.whl"))
            name = f"goloop-{args.version}-{tag}-...{arch}.whl"
            if len(found) != 1:
                lines.append(f"{name}: MISSING ({len(found)} found: make wheel)")
                failed = True
                continue
            wheel = os.path.abspath(found[0])
            name = os.path.basename(wheel)
            todo = places(tag, arch)
            if not todo:
                lines.append(f"{name}: not run: {NOT_RUN[(tag, arch)]}")
                continue
            for label, prefix, py in todo:
                if label.split()[0] not in args.places.split(","):
                    lines.append(f"{name}: not run [{label}]: left out by --places")
                    continue
                t0 = time.monotonic()
                print(f"wheel-check: {name} [{label}] ...", flush=True)
                ok, what = smoke(wheel, tag, arch, label, prefix, py, args.version)
                if not ok and not what.startswith("not run"):
                    failed = True
                lines.append(f"{name}: {what} ({time.monotonic() - t0:.0f}s)")
                print(lines[-1], flush=True)
    print()
    for ln in lines:
        print("wheel-check:", ln)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
