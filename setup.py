"""Build goloop: the engine (goloop/binding's Go and C, with the pure Go packages it imports) is
compiled with `go build -buildmode=c-shared` into the extension module goloop._goloop (named
with this interpreter's EXT_SUFFIX).

A plain build (`pip install .`) uses the machine's C compiler for cgo and this interpreter's
headers. `make wheel` sets these for the manylinux wheels (tools/wheels.py):
  GOLOOP_ZIG=/path/to/zig  cgo's compiler is `zig cc -target ARCH-linux-gnu.GLIBC`, which links
                           against the symbol versions of that glibc, not the machine's
  GOLOOP_GLIBC=2.17        that glibc version (default 2.17: manylinux2014)
  GOLOOP_ARCH=aarch64      the target machine (x86_64 or aarch64; default: this one's); Go
                           cross-compiles (GOARCH), the extension's name and the wheel's
                           platform tag follow it
  GOLOOP_PYINCLUDE=A:B     the Python headers to compile against (default this interpreter's)
  GOLOOP_EXT_SUFFIX=...    the extension's suffix (default EXT_SUFFIX, with the target's arch)
The checked builds of the Makefile: GOLOOP_RACE=1 (Go's race detector, `make test-race`),
GOLOOP_ASAN=1 (AddressSanitizer + UBSan over the C, Go's -asan: `make test-asan`).
"""
import os
import re
import shutil
import subprocess
import platform
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's
    from wheel.bdist_wheel import bdist_wheel

GO_MIN = (1, 26)  # go.mod's `go 1.26.0`, which its dependencies (x/net, x/sys, x/text) declare too
GO_PACKAGE = "./goloop/binding"
HERE = os.path.dirname(os.path.abspath(__file__))


def find_go():
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    try:
        out = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(
            "goloop: building needs the Go toolchain (Go >= %d.%d), and `go` was not found.\n"
            "Install it (https://go.dev/doc/install, or `apt-get install golang-go` if your "
            "distribution's version is recent enough) and put it on PATH, or set GO=/path/to/go." % GO_MIN)
    m = re.search(r"go(\d+)\.(\d+)", out)
    if not m or (int(m.group(1)), int(m.group(2))) < GO_MIN:
        raise SystemExit(
            "goloop: building needs Go >= %d.%d, found: %s\nInstall a newer Go from https://go.dev/doc/install."
            % (GO_MIN + (out.strip(),)))
    return go


# The target machine: Go's name for it, and Debian's multiarch triplet in EXT_SUFFIX.
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}
HOST_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())


def target_arch():
    arch = os.environ.get("GOLOOP_ARCH") or HOST_ARCH
    if arch not in GOARCH:
        raise SystemExit(f"goloop: GOLOOP_ARCH={arch!r}: want one of {', '.join(GOARCH)}")
    return arch


def ext_suffix():
    suffix = os.environ.get("GOLOOP_EXT_SUFFIX") or sysconfig.get_config_var("EXT_SUFFIX")
    arch = target_arch()
    if arch != HOST_ARCH:  # .cpython-313-x86_64-linux-gnu.so -> .cpython-313-aarch64-linux-gnu.so
        suffix = suffix.replace(f"-{HOST_ARCH}-", f"-{arch}-")
    return suffix


class GoBuildExt(build_ext):
    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ext_suffix()

    def build_extension(self, ext):
        go = find_go()
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        env = dict(os.environ)
        arch = target_arch()
        includes = [d for d in os.environ.get("GOLOOP_PYINCLUDE", "").split(os.pathsep) if d]
        includes = includes or [sysconfig.get_paths()["include"]]
        env["CGO_ENABLED"] = "1"
        env["GOARCH"] = GOARCH[arch]
        env["CGO_CFLAGS"] = " ".join(f"-I{d}" for d in includes) + " -O2 " + env.get("CGO_CFLAGS", "")
        zig = os.environ.get("GOLOOP_ZIG")
        if zig:
            # zig's clang with its own glibc stubs of that version: the engine needs no newer
            # symbol than GLIBC_<version>. Its linker (lld) leaves a shared library's undefined
            # symbols (Python's) to load time by default, and rejects GNU ld's
            # --unresolved-symbols option.
            glibc = os.environ.get("GOLOOP_GLIBC", "2.17")
            env["CC"] = f"{zig} cc -target {arch}-linux-gnu.{glibc}"
            env["CXX"] = f"{zig} c++ -target {arch}-linux-gnu.{glibc}"
            if not os.environ.get("GOLOOP_DEBUG_SYMBOLS"):
                # Go's -s strips Go's symbols; lld keeps the C parts' unless told
                env["CGO_LDFLAGS"] = "-Wl,--strip-all " + env.get("CGO_LDFLAGS", "")
        else:
            if arch != HOST_ARCH and not os.environ.get("CC"):
                raise SystemExit(f"goloop: building for {arch} on {HOST_ARCH} needs GOLOOP_ZIG or CC "
                                 "(a C cross compiler for cgo)")
            # Python's symbols come from the interpreter at load time: no -lpython on Linux.
            env["CGO_LDFLAGS"] = "-Wl,--unresolved-symbols=ignore-all " + env.get("CGO_LDFLAGS", "")
        ldflags = "" if os.environ.get("GOLOOP_DEBUG_SYMBOLS") else "-s -w"
        checks = []  # -race or -asan
        if os.environ.get("GOLOOP_RACE"):
            # Go's race detector in a c-shared library: its runtime shadows only memory below
            # 256 MiB (and Go's heap) on linux/amd64, while a library lands near the top of
            # the address space and fails to start ("ThreadSanitizer failed to allocate ...").
            # Linking the library at 128 MiB puts its data where the detector looks. Reports
            # go to stderr, or to files named by GORACE=log_path=/tmp/race (a c-shared
            # library never exits with the detector's status 66). Go code only: C and Python
            # memory are not watched.
            checks = ["-race"]
            ldflags += " -extldflags=-Wl,-Ttext-segment=0x8000000"
        if os.environ.get("GOLOOP_ASAN"):
            # AddressSanitizer and UndefinedBehaviorSanitizer over the C files (cgo's compiler),
            # and Go's -asan, which has Go's heap checked by the same runtime (its allocations
            # poisoned around, its cgo calls' pointers checked). Symbols kept for the reports'
            # stacks. The interpreter is not instrumented: it must load the runtime first
            # (LD_PRELOAD=$(gcc -print-file-name=libasan.so); the Makefile's test-asan).
            checks = ["-asan"]
            ldflags = ""
            env["CGO_CFLAGS"] += " -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer"
            env["CGO_LDFLAGS"] = env.get("CGO_LDFLAGS", "") + " -fsanitize=address,undefined"
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", *checks, f"-ldflags={ldflags}", "-o", out,
               GO_PACKAGE]
        print("goloop:", f"CC={env['CC']!r}" if zig else "", f"GOARCH={env['GOARCH']}", " ".join(cmd))
        subprocess.run(cmd, cwd=HERE, env=env, check=True)
        header = os.path.splitext(out)[0] + ".h"
        if os.path.exists(header):
            os.remove(header)


class BdistWheel(bdist_wheel):
    """A wheel for GOLOOP_ARCH's platform when it is not the build host's (auditwheel repair then
    gives it its manylinux tag)."""

    def finalize_options(self):
        arch = target_arch()
        if arch != HOST_ARCH and not self.plat_name:
            self.plat_name = f"linux_{arch}"
        super().finalize_options()


setup(
    packages=["goloop", "goloop.serve"],
    package_dir={"goloop": "pyshim/goloop"},
    package_data={"goloop": ["py.typed", "*.pyi"]},
    # An in-place build (build_ext --inplace, pip install -e) leaves one _goloop*.so per
    # interpreter in pyshim/goloop/: a wheel takes only the one build_ext makes for its own.
    exclude_package_data={"goloop": ["_goloop*.so", "_goloop*.h"]},
    ext_modules=[Extension("goloop._goloop", sources=[])],
    cmdclass={"build_ext": GoBuildExt, "bdist_wheel": BdistWheel},
)
