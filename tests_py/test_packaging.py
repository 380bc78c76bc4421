"""Packaging without building: the one version number, the license files, the release metadata
pyproject.toml declares, the notices of derived code, and tools/wheels.py's aarch64 pyconfig.h
rule (checked against Debian's own x86-64 and aarch64 headers). The built artifacts are
tests_py/test_wheel.py's."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

import goloop

if sys.version_info >= (3, 11):
    import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = tomllib.load(open(os.path.join(REPO, "pyproject.toml"), "rb"))
PROJECT = PYPROJECT["project"]


def _version_file() -> str:
    text = open(os.path.join(REPO, "pyshim", "goloop", "_version.py")).read()
    (v,) = re.findall(r'^__version__ = "([^"]+)"$', text, re.M)
    return v


def _tools_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tools", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_version_everywhere(tmp_path):
    v = _version_file()
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+)?", v), v
    assert goloop.__version__ == v
    # pyproject reads it from the file, never repeats it
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "goloop._version.__version__"}
    # the CLI
    p = subprocess.run([sys.executable, "-P", "-m", "goloop", "--version"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout == f"goloop {v}\n", (p.returncode, p.stdout, p.stderr)
    # and the changelog has its entry
    changelog = open(os.path.join(REPO, "CHANGELOG.md")).read()
    assert re.search(rf"^## \[{re.escape(v)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M), "CHANGELOG.md lacks " + v


def test_license_files_and_metadata():
    assert PROJECT["license"] == "MIT"  # a PEP 639 expression, not the table form
    assert PROJECT["license-files"] == ["LICENSE", "THIRD_PARTY_NOTICES.md"]
    lic = open(os.path.join(REPO, "LICENSE")).read()
    assert lic.startswith("MIT License\n") and "Copyright (c) 2026 the goloop authors" in lic
    # PEP 639: no license classifier beside a license expression
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    for minor in range(11, 16):
        assert f"Programming Language :: Python :: 3.{minor}" in PROJECT["classifiers"]
    for c in ("Programming Language :: Go", "Programming Language :: C", "Operating System :: POSIX :: Linux",
              "Framework :: AsyncIO", "Topic :: Internet :: WWW/HTTP :: HTTP Servers"):
        assert c in PROJECT["classifiers"], c
    assert PROJECT["requires-python"] == ">=3.11"
    assert set(PROJECT["urls"]) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    reqs = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in reqs), reqs
    manifest = open(os.path.join(REPO, "MANIFEST.in")).read()
    for f in ("LICENSE", "THIRD_PARTY_NOTICES.md", "CHANGELOG.md", "README.md"):
        assert os.path.isfile(os.path.join(REPO, f)), f
        assert f in manifest, f


def test_notices_name_every_derived_file():
    notices = open(os.path.join(REPO, "THIRD_PARTY_NOTICES.md")).read()
    # each file whose own text says it holds another project's code
    marker = re.compile(r"a copy of CPython|line for line|holds? asyncio's code|goloop: uvloop's|ported to C", re.I)
    derived = []
    for top in ("pyshim", "goloop"):
        for d, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if f.endswith((".py", ".c", ".go", ".h")):
                    path = os.path.join(d, f)
                    if marker.search(open(path, errors="replace").read()):
                        derived.append(os.path.relpath(path, REPO))
    assert "pyshim/goloop/_sslproto.py" in derived
    missing = [f for f in derived if f"`{f}`" not in notices]
    assert not missing, f"THIRD_PARTY_NOTICES.md does not name {missing}"
    named = re.findall(r"^\| `((?:pyshim|goloop)/[^`]+)` \|", notices, re.M)
    assert "pyshim/goloop/_sslproto.py" in named
    gone = [f for f in named if not os.path.isfile(os.path.join(REPO, f))]
    assert not gone, f"THIRD_PARTY_NOTICES.md names files that do not exist: {gone}"
    # the licenses' own texts, not only their names
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in notices
    assert "Copyright (C) 2016-present the uvloop authors and contributors." in notices
    assert "Copyright 2009 The Go Authors." in notices
    # every Go module compiled into the engine is named
    gomod = open(os.path.join(REPO, "go.mod")).read()
    for mod in ("golang.org/x/net", "golang.org/x/sys", "golang.org/x/text"):
        assert mod in gomod and mod in notices, mod


def test_pyconfig_rule_is_exact_on_a_synthetic_header():
    wheels = _tools_module("wheels")
    x86 = ("#define HAVE_GCC_ASM_FOR_X64 1\n/* #undef HAVE_USABLE_WCHAR_T */\n#define PY_SUPPORT_TIER 1\n"
           "#define SIZEOF_LONG 8\n#define HAVE_GCC_ASM_FOR_X64_SOMETHING 1\n")
    assert wheels.derive_aarch64_pyconfig(x86) == (
        "/* #undef HAVE_GCC_ASM_FOR_X64 */\n#define HAVE_USABLE_WCHAR_T 1\n#define PY_SUPPORT_TIER 2\n"
        "#define SIZEOF_LONG 8\n#define HAVE_GCC_ASM_FOR_X64_SOMETHING 1\n")


@pytest.mark.wheel
@pytest.mark.parametrize("ver", ["3.11", "3.13", "3.14"])
def test_pyconfig_rule_matches_debian(ver):
    # tools/wheels.py derives the aarch64 pyconfig.h of 3.12 and 3.13t (Debian has none) from the
    # x86-64 one: the same rule must turn Debian's x86-64 header of each version into Debian's
    # aarch64 one, byte for byte.
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        pytest.skip("tools/pyheaders.sh needs Debian's apt-get and dpkg")
    wheels = _tools_module("wheels")
    try:
        x86 = wheels.pyconfig_of(wheels.debian_headers("x86_64", ver), "x86_64", ver)
        arm = wheels.pyconfig_of(wheels.debian_headers("aarch64", ver), "aarch64", ver)
    except wheels.Missing as e:
        # (apt inside another root, or no network: `make wheel` checks the same rule on every build)
        pytest.skip(f"Debian's headers of {ver} cannot be fetched here: {e}")
    assert x86 != arm
    assert wheels.derive_aarch64_pyconfig(x86) == arm
