"""Line and function coverage of goloop's C files (goloop/binding/*.c) by a set of test files.

    python tools/coverage_c.py [--json FILE] PYTEST_ARGUMENTS...

Builds the extension with gcc's --coverage into build/cov (the editable install is left alone),
runs the test files against it with pytest (this interpreter), and prints, per C file, the
lines and functions executed (gcov). `make coverage-c` runs it over the files `make test-asan`
runs, to show which C the sanitizers saw. --json writes the table in bench/results' schema.
"""
from __future__ import annotations

import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(HERE, "build", "cov")


def build() -> str:
    """Builds the covered extension into build/cov/lib; returns Go's kept work folder."""
    lib = os.path.join(OUT, "lib", "goloop")
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(lib)
    for f in glob.glob(os.path.join(HERE, "pyshim", "goloop", "*.py")) + [
            os.path.join(HERE, "pyshim", "goloop", "py.typed")]:
        shutil.copy(f, lib)
    shutil.copytree(os.path.join(HERE, "pyshim", "goloop", "serve"), os.path.join(lib, "serve"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, CGO_ENABLED="1")
    inc = sysconfig.get_paths()["include"]
    # atomic counters: loops and server threads run C at once
    env["CGO_CFLAGS"] = f"-I{inc} -O1 --coverage -fprofile-update=atomic"
    env["CGO_LDFLAGS"] = "-Wl,--unresolved-symbols=ignore-all --coverage"
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    so = os.path.join(lib, "_goloop" + sysconfig.get_config_var("EXT_SUFFIX"))
    # -work keeps the folder with the objects' .gcno notes, where the runs write their .gcda
    p = subprocess.run([go, "build", "-work", "-buildmode=c-shared", "-o", so, "./goloop/binding"],
                       cwd=HERE, env=env, stderr=subprocess.PIPE, text=True)
    sys.stderr.write("".join(l + "\n" for l in p.stderr.splitlines() if not l.startswith("WORK=")))
    work = re.search(r"^WORK=(\S+)", p.stderr, re.M)
    if p.returncode != 0 or work is None:
        sys.exit("coverage_c: the build failed")
    return work.group(1)


def report(work: str) -> dict[str, dict[str, int]]:
    """{file.c: {lines, lines_run, funcs, funcs_run}} from gcov over the package's objects
    (the binding's own .c files; not its headers' or Python's inline functions)."""
    out: dict[str, dict[str, int]] = {}
    for g in glob.glob(os.path.join(work, "*", "_x*.gcno")):
        text = subprocess.run(["gcov", "--json-format", "--stdout", "-o", os.path.dirname(g), g],
                              capture_output=True, text=True).stdout
        for f in json.loads(text)["files"] if text.strip() else ():
            name = f["file"]
            if not (name.endswith(".c") and os.path.exists(os.path.join(HERE, "goloop", "binding", name))):
                continue
            out[name] = {"lines": len(f["lines"]), "lines_run": sum(1 for l in f["lines"] if l["count"]),
                         "funcs": len(f["functions"]),
                         "funcs_run": sum(1 for fn in f["functions"] if fn["execution_count"])}
    return dict(sorted(out.items()))


def main() -> None:
    args = sys.argv[1:]
    out_json = None
    if args[:1] == ["--json"]:
        out_json, args = args[1], args[2:]
    if not args:
        sys.exit(__doc__)
    work = build()
    try:
        env = dict(os.environ, PYTHONPATH=os.path.join(OUT, "lib"))
        rc = subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             *args], cwd=HERE, env=env).returncode
        table = report(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    missing = sorted(os.path.basename(f) for f in glob.glob(os.path.join(HERE, "goloop", "binding", "*.c"))
                     if os.path.basename(f) not in table or table[os.path.basename(f)]["lines_run"] == 0)
    print(f"{'C file':24} {'lines run':>14} {'functions run':>16}")
    for name, r in table.items():
        print(f"{name:24} {r['lines_run']:5}/{r['lines']:<5} {100 * r['lines_run'] / r['lines']:3.0f}%"
              f" {r['funcs_run']:5}/{r['funcs']:<5} {100 * r['funcs_run'] / max(r['funcs'], 1):3.0f}%")
    if missing:
        print("coverage_c: not run at all:", " ".join(missing))
    if out_json:
        rid = os.path.splitext(os.path.basename(out_json))[0]
        doc = {
            "schema": 1, "id": rid, "group": "Checks",
            "title": "C files run by the sanitizer and debug-CPython test files",
            "date": datetime.date.today().isoformat(),
            "machine": f"CPython {sys.version.split()[0]}, gcc --coverage",
            "versions": {}, "command": "make coverage-c",
            "method": "The extension built with gcc --coverage -fprofile-update=atomic; the test "
                      "files run against it once (pytest); gcov counts the lines and functions of "
                      "each C file executed at least once.",
            "better": "higher", "columns": ["row", "lines", "lines run", "functions", "functions run"],
            "units": {"lines run": "%", "functions run": "%"},
            "rows": [{"row": n, "lines": r["lines"], "lines run": round(100 * r["lines_run"] / r["lines"], 1),
                      "functions": r["funcs"], "functions run": round(100 * r["funcs_run"] / max(r["funcs"], 1), 1)}
                     for n, r in table.items()],
            "notes": ["pytest " + " ".join(os.path.basename(t) for t in args)],
        }
        with open(out_json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    sys.exit(rc or (1 if missing else 0))


if __name__ == "__main__":
    main()
