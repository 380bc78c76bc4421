"""Benchmark results as data: every driver writes its tables as JSON files under
bench/results/ (one file per table, named by its id), and bench/render.py turns all of
them into BENCHMARKS.md and docs/performance.md.

The schema (version 1; extra keys are allowed and kept):

    schema   1
    id       unique, the file's name without .json
    group    the page's section ("The event loop", "goloop serve (ASGI)", ...)
    title    the table's heading
    date     "YYYY-MM-DD" (the day it was measured)
    machine  free text: cores, CPU, Go and CPython versions
    versions {"goloop": "0.1.0", "uvloop": "0.23.0", ...}
    command  how to reproduce it
    method   one paragraph: what was measured, how, rounds, pinning
    better   "higher", "lower" or null: which way the figures are better
    columns  ["row", col, ...]: "row" is the row label
    units    {col: unit}: "req/s", "ops/s", "µs", "ms", "x" (a ratio), "instructions", ...
    rows     [{"row": label, col: number or string or null}, ...]; null: no figure
    notes    ["free text", ...]

Optional keys the renderer reads:
    compare  ["uvloop", ...]: peers the renderer adds a ratio column for (goloop against
             each, oriented so that > 1 means goloop is better) and draws a chart of
    goloop   the column that is goloop's (default "goloop")
    errors   in a row: {col: "what went wrong"}: the cell says "error" with a footnote
    rounds   free: the raw figures of each round, kept for whoever wants them
    order    a number: the table's place inside its group (default 100, then by title)
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


def _version(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def machine() -> str:
    """The machine in one line: cores, CPU model, kernel, Go and CPython."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    go = (_version(["go", "version"]) or "go unknown").replace("go version ", "")
    return (f"{os.cpu_count()} cores, {cpu}, Linux {platform.release()}, {go}, "
            f"CPython {platform.python_version()}")


def versions(*modules: str) -> dict:
    """Installed versions of goloop and of the named distributions (None when missing)."""
    from importlib import metadata
    out = {}
    for name in ("goloop",) + modules:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def write_result(id: str, *, group: str, title: str, command: str, method: str, columns: list,
                 rows: list, units: dict | None = None, better: str | None = None,
                 notes: list | None = None, modules: tuple = (), **extra) -> str:
    """Write bench/results/<id>.json (replacing that id's previous file, and only it)."""
    doc = {
        "schema": 1, "id": id, "group": group, "title": title,
        "date": datetime.date.today().isoformat(),
        "machine": machine(), "versions": versions(*modules),
        "command": command, "method": method, "better": better,
        "columns": columns, "units": units or {}, "rows": rows, "notes": notes or [],
    }
    doc.update(extra)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{id}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"# wrote {os.path.relpath(path, REPO)}", flush=True)
    return path
