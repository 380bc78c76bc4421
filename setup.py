"""Build goloop: the Go engine is compiled with `go build -buildmode=c-shared` into the
extension module goloop._goloop (named with this interpreter's EXT_SUFFIX)."""
import os
import re
import shutil
import subprocess
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

GO_MIN = (1, 24)
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


class GoBuildExt(build_ext):
    def build_extension(self, ext):
        go = find_go()
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        env = dict(os.environ)
        include = sysconfig.get_paths()["include"]
        env["CGO_ENABLED"] = "1"
        env["CGO_CFLAGS"] = f"-I{include} -O2 " + env.get("CGO_CFLAGS", "")
        # Python's symbols come from the interpreter at load time: no -lpython on Linux.
        env["CGO_LDFLAGS"] = "-Wl,--unresolved-symbols=ignore-all " + env.get("CGO_LDFLAGS", "")
        ldflags = "" if os.environ.get("GOLOOP_DEBUG_SYMBOLS") else "-s -w"
        race = []
        if os.environ.get("GOLOOP_RACE"):
            # Go's race detector in a c-shared library: its runtime shadows only memory below
            # 256 MiB (and Go's heap) on linux/amd64, while a library lands near the top of
            # the address space and fails to start ("ThreadSanitizer failed to allocate ...").
            # Linking the library at 128 MiB puts its data where the detector looks. Reports
            # go to stderr, or to files named by GORACE=log_path=/tmp/race (a c-shared
            # library never exits with the detector's status 66). Go code only: C and Python
            # memory are not watched.
            race = ["-race"]
            ldflags += " -extldflags=-Wl,-Ttext-segment=0x8000000"
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", *race, f"-ldflags={ldflags}", "-o", out,
               GO_PACKAGE]
        print("goloop:", " ".join(cmd))
        subprocess.run(cmd, cwd=HERE, env=env, check=True)
        header = os.path.splitext(out)[0] + ".h"
        if os.path.exists(header):
            os.remove(header)


setup(
    packages=["goloop"],
    package_dir={"goloop": "pyshim/goloop"},
    package_data={"goloop": ["py.typed", "*.pyi"]},
    # An in-place build (build_ext --inplace, pip install -e) leaves one _goloop*.so per
    # interpreter in pyshim/goloop/: a wheel takes only the one build_ext makes for its own.
    exclude_package_data={"goloop": ["_goloop*.so", "_goloop*.h"]},
    ext_modules=[Extension("goloop._goloop", sources=[])],
    cmdclass={"build_ext": GoBuildExt},
)
