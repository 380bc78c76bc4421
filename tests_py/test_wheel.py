"""Packaging: the wheel and the sdist.

- The wheel for the running interpreter holds the package `goloop` and its compiled engine
  `_goloop<EXT_SUFFIX>` (one, this interpreter's), LICENSE and the notices, and the release
  metadata; installed with pip into a fresh venv it passes tools/wheel_smoke.py (an echo server
  and client, `goloop --version`, one `goloop serve` request) with no `go` on PATH, from outside
  the repository.
- The sdist holds what Go needs to build it, and a build without Go (or with a too old one)
  stops with a message saying what to install.

GOLOOP_WHEEL=path tests that wheel (`make test-py` passes the manylinux wheel `make wheel-one`
made); without it the tests build a wheel from the sdist with pip. GOLOOP_SKIP_WHEEL_TESTS=1
skips this module (`-m "not wheel"` too).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

pytestmark = [
    pytest.mark.wheel,
    pytest.mark.skipif(bool(os.environ.get("GOLOOP_SKIP_WHEEL_TESTS")),
                       reason="GOLOOP_SKIP_WHEEL_TESTS is set"),
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
_V = "%d%d" % sys.version_info[:2]
# this interpreter's wheel tags, as pip and auditwheel name the file: cp311-cp311, cp313-cp313t
PYTAG = f"cp{_V}-cp{_V}" + ("t" if FREE_THREADED else "")
# the shared libraries the engine may link: the C library (Go's runtime needs no other)
# (libresolv: Go's cgo DNS resolver's res_search, in libc itself from glibc 2.34; all are glibc's
# and on manylinux2014's list of libraries a wheel may link)
ALLOWED_NEEDED = {"libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1", "libresolv.so.2",
                  "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def _run(cmd, *, timeout=300, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def _path_without_go(*first: str) -> str:
    """A PATH of `first` then /usr/bin and /bin, leaving out any folder that holds a `go`."""
    dirs = list(first) + ["/usr/bin", "/bin"]
    return os.pathsep.join(d for d in dirs if not os.path.exists(os.path.join(d, "go")))


def _clean_env(path: str, home: str) -> dict:
    """An environment with nothing of the developer's: no PYTHONPATH, no GO*, only `path`."""
    env = {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
    return env


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> str:
    """An sdist of the working tree, made as `python -m build --sdist` would (setup.py sdist)."""
    out = tmp_path_factory.mktemp("sdist")
    _run([sys.executable, "setup.py", "-q", "sdist", "-d", str(out)], cwd=REPO)
    (name,) = os.listdir(out)
    return str(out / name)


@pytest.fixture(scope="module")
def built_from_sdist(sdist, tmp_path_factory) -> str:
    """The wheel pip builds from the sdist (with the Go toolchain: what `pip install` does)."""
    out = tmp_path_factory.mktemp("sdist-wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps",
          "--no-build-isolation", "--no-index", "-w", str(out), sdist], cwd=str(out))
    (name,) = os.listdir(out)
    return str(out / name)


@pytest.fixture(scope="module")
def wheel(request) -> str:
    """GOLOOP_WHEEL, or the wheel built from the sdist."""
    path = os.environ.get("GOLOOP_WHEEL")
    if path:
        assert os.path.isfile(path), f"GOLOOP_WHEEL={path!r} is not a file"
        return os.path.abspath(path)
    return request.getfixturevalue("built_from_sdist")


def _version() -> str:
    """The version, as pyshim/goloop/_version.py writes it (the one place it is written)."""
    import re
    with open(os.path.join(REPO, "pyshim", "goloop", "_version.py")) as f:
        (v,) = re.findall(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    return v


def _check_metadata(metadata: str) -> None:
    """The release metadata of METADATA or PKG-INFO: PEP 639's license fields, one version."""
    lines = metadata.split("\n\n", 1)[0].splitlines()
    assert f"Version: {_version()}" in lines, lines
    assert "License-Expression: MIT" in lines, lines
    assert "License-File: LICENSE" in lines and "License-File: THIRD_PARTY_NOTICES.md" in lines, lines
    assert not [ln for ln in lines if ln.startswith(("License:", "Classifier: License ::"))], lines
    assert "Requires-Python: >=3.11" in lines, lines
    urls = {ln.split(":", 1)[1].split(",")[0].strip() for ln in lines if ln.startswith("Project-URL:")}
    assert urls == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}, urls
    for minor in range(11, 16):
        assert f"Classifier: Programming Language :: Python :: 3.{minor}" in lines
    assert "Description-Content-Type: text/markdown" in lines
    # the long description is the README
    with open(os.path.join(REPO, "README.md")) as f:
        assert metadata.split("\n\n", 1)[1].strip() == f.read().strip()


def _check_wheel_contents(path: str) -> None:
    assert os.path.basename(path).split("-")[2:4] == PYTAG.split("-"), (path, PYTAG)
    assert os.path.basename(path).split("-")[1] == _version(), path
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        info = f"goloop-{_version()}.dist-info"
        for lic in ("LICENSE", "THIRD_PARTY_NOTICES.md"):
            assert f"{info}/licenses/{lic}" in names, names
            with open(os.path.join(REPO, lic), "rb") as f:
                assert z.read(f"{info}/licenses/{lic}") == f.read(), lic
    _check_metadata(metadata)
    pyfiles = sorted(f"goloop/{f}" for f in os.listdir(os.path.join(REPO, "pyshim", "goloop"))
                     if f.endswith(".py") or f == "py.typed")
    missing = [f for f in pyfiles if f not in names]
    assert not missing, f"wheel lacks {missing}"
    engines = [n for n in names if os.path.basename(n).startswith("_goloop")]
    assert engines == ["goloop/_goloop" + EXT_SUFFIX], engines
    stray = [n for n in names if n.endswith((".go", ".h", ".c")) or n.startswith("pyshim/")]
    assert not stray, stray
    # Nothing to install with it: Go is needed to build, never to install or run.
    requires = [ln for ln in metadata.splitlines()
                if ln.startswith("Requires-Dist:") and "extra ==" not in ln]
    assert not requires, requires


def test_wheel_contents(wheel):
    _check_wheel_contents(wheel)


def test_sdist_has_the_go_sources_and_builds(sdist, built_from_sdist):
    import tarfile
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    tracked = _run(["git", "ls-files", "go.mod", "go.sum", "goloop"], cwd=REPO, check=False)
    if tracked.returncode == 0 and tracked.stdout.strip():
        want = set(tracked.stdout.split())
    else:  # not a git checkout: the files on disk
        want = {"go.mod", "go.sum"} | {
            os.path.relpath(os.path.join(d, f), REPO)
            for d, _, fs in os.walk(os.path.join(REPO, "goloop")) for f in fs
            if f.endswith((".go", ".c", ".h")) and f != "_goloop.h"}
    assert want <= names, f"sdist lacks {sorted(want - names)}"
    for f in ("LICENSE", "THIRD_PARTY_NOTICES.md", "README.md", "CHANGELOG.md", "pyshim/goloop/_version.py"):
        assert f in names, f"sdist lacks {f}"
    assert os.path.basename(sdist) == f"goloop-{_version()}.tar.gz", sdist
    with tarfile.open(sdist) as t:
        _check_metadata(t.extractfile(f"goloop-{_version()}/PKG-INFO").read().decode())
    _check_wheel_contents(built_from_sdist)


def test_engine_links_only_libc(wheel, tmp_path):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not installed")
    with zipfile.ZipFile(wheel) as z:
        so = z.extract("goloop/_goloop" + EXT_SUFFIX, tmp_path)
    out = _run([readelf, "-d", so]).stdout
    needed = {ln.split("[", 1)[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln}
    assert needed, out
    assert needed <= ALLOWED_NEEDED, f"unexpected shared libraries: {needed - ALLOWED_NEEDED}"


def _glibc_of_tag(wheel: str):
    """(2, 17) for a manylinux_2_17 (or manylinux2014) wheel, None for a plain linux_* one."""
    import re
    plats = os.path.basename(wheel)[:-len(".whl")].split("-")[4].split(".")
    versions = [(int(m.group(1)), int(m.group(2))) for p in plats if (m := re.match(r"manylinux_(\d+)_(\d+)_", p))]
    versions += [(2, 17) for p in plats if p.startswith("manylinux2014_")]
    return min(versions) if versions else None


def test_engine_needs_no_glibc_newer_than_its_tag(wheel, tmp_path):
    # The engine's C parts are compiled against glibc 2.17's symbol versions (zig): a symbol of a
    # newer glibc (the machine's gcc links pthread_* at GLIBC_2.34) would fail to load on the
    # systems the tag names. zig's linker (lld) also leaves any undefined symbol to load time:
    # one that is not versioned must be Python's C API (Py*, _Py*), never a libc function it
    # did not find in 2.17 (that would bind to whatever the loading glibc has, or fail).
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not installed")
    tag = _glibc_of_tag(wheel)
    if tag is None:
        pytest.skip(f"{os.path.basename(wheel)} is not a manylinux wheel")
    with zipfile.ZipFile(wheel) as z:
        so = z.extract("goloop/_goloop" + EXT_SUFFIX, tmp_path)
    out = _run([readelf, "--dyn-syms", "-W", so]).stdout
    undefined = [ln.split()[7] for ln in out.splitlines() if len(ln.split()) >= 8 and ln.split()[6] == "UND"]
    assert undefined, out
    too_new, unversioned = [], []
    for sym in undefined:
        name, _, version = sym.partition("@")
        version = version.lstrip("@").split(" ")[0]
        if not version:
            if not name.startswith(("Py", "_Py")):
                unversioned.append(name)
        elif version.startswith("GLIBC_"):
            v = tuple(int(x) for x in version[len("GLIBC_"):].split(".")[:2])
            if v > tag:
                too_new.append(sym)
    assert not too_new, f"symbols newer than glibc {tag}: {too_new}"
    assert not unversioned, f"undefined symbols with no version that are not Python's: {unversioned}"


# the smoke test `make wheel-check` runs in each wheel's venv: goloop from the venv, its version,
# an echo round trip on goloop's loop, one `goloop serve` request; it prints ENGINE <path>
SMOKE_SCRIPT = os.path.join(REPO, "tools", "wheel_smoke.py")


def _broken_copy(wheel: str, dest: str) -> str:
    """The wheel without its engine (RECORD left as is: pip does not check it on install)."""
    out = os.path.join(dest, os.path.basename(wheel))
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            if not os.path.basename(item.filename).startswith("_goloop"):
                dst.writestr(item, src.read(item))
    return out


def test_wheel_runs_in_fresh_venv_without_go(wheel, tmp_path):
    # A venv without pip of its own (ensurepip is the slow part of making one: under a CPU hog
    # it took over 2 minutes); this interpreter's pip installs into it (--python).
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    vpy = str(venv / "bin" / "python")
    env = _clean_env(_path_without_go(str(venv / "bin")), str(tmp_path))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert shutil.which("go", path=env["PATH"]) is None, env["PATH"]

    def install(path):
        _run([sys.executable, "-m", "pip", "--python", vpy, "install", "-q", "--no-index", "--no-deps",
              "--force-reinstall", path], env=env, cwd=str(outside))

    def run_smoke():
        return _run([vpy, "-P", SMOKE_SCRIPT, _version()], env=env, cwd=str(outside), timeout=300, check=False)

    # First the wheel without its engine: the check must catch it.
    broken_dir = tmp_path / "broken"
    broken_dir.mkdir()
    install(_broken_copy(wheel, str(broken_dir)))
    p = run_smoke()
    assert p.returncode != 0 and "SMOKE-OK" not in p.stdout, p.stdout + p.stderr
    assert "_goloop" in p.stderr, p.stderr

    install(wheel)
    p = run_smoke()
    assert p.returncode == 0 and "SMOKE-OK" in p.stdout, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    (engine,) = [ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("ENGINE ")]
    assert engine.startswith(str(venv)) and engine.endswith(EXT_SUFFIX), engine


def test_build_without_go_says_what_to_install(sdist, tmp_path):
    # pip building the sdist, as `pip install goloop-*.tar.gz` does, with no Go anywhere.
    env = dict(os.environ, GO=str(tmp_path / "no" / "go"), PATH=_path_without_go(os.path.dirname(sys.executable)))
    p = _run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
              "--no-build-isolation", "--no-index", "-w", str(tmp_path), sdist],
             env=env, cwd=str(tmp_path), check=False, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert not any(f.endswith(".whl") for f in os.listdir(tmp_path))
    assert "building needs the Go toolchain (Go >= 1." in out, out
    assert "https://go.dev/doc/install" in out and "GO=/path/to/go" in out, out


def test_build_with_old_go_says_what_to_install(tmp_path):
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho 'go version go1.20.14 linux/amd64'\n")
    fake.chmod(0o755)
    env = dict(os.environ, GO=str(fake))
    p = _run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
              "--build-temp", str(tmp_path / "tmp")], env=env, cwd=REPO, check=False, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "building needs Go >= 1." in out and "found: go version go1.20.14" in out, out
    assert not (tmp_path / "lib").exists() or not any(
        f.startswith("_goloop") for _, _, fs in os.walk(tmp_path / "lib") for f in fs)
