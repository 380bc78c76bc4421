"""BENCHMARKS.md and docs/performance.md are rendered from bench/results/*.json by
bench/render.py: a hand edit of either page, a result file that breaks the schema, or a row
the renderer drops fails here; and the drivers' result writers produce files the renderer
takes (bench/run.py's tables, bench/serve_bench.py's), without touching other drivers' files."""
import argparse
import glob
import json
import os
import re
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
sys.path.insert(0, BENCH)

import render  # noqa: E402
import results  # noqa: E402

FILES = sorted(glob.glob(os.path.join(BENCH, "results", "*.json")))


def test_committed_pages_are_a_render_of_the_committed_results():
    docs = render.load()
    for path, text in ((os.path.join(REPO, "BENCHMARKS.md"), render.render_benchmarks(docs)),
                       (os.path.join(REPO, "docs", "performance.md"), render.render_performance(docs))):
        with open(path, encoding="utf-8") as f:
            assert f.read() == text, (f"{os.path.relpath(path, REPO)} is not what bench/render.py makes of "
                                      "bench/results/: edit the results and run python3 bench/render.py")
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert render.README_BEGIN in readme and render.with_headline(readme, docs) == readme, \
        "README.md's headline table is not what bench/render.py makes of bench/results/"


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p) for p in FILES])
def test_result_file_follows_the_schema(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["schema"] == 1
    assert doc["id"] == os.path.basename(path)[:-5]
    for key in ("group", "title", "date", "machine", "command", "method", "columns", "rows"):
        assert doc.get(key), f"{key} missing or empty"
    assert doc["columns"][0] == "row"
    assert doc.get("better") in ("higher", "lower", None)
    for row in doc["rows"]:
        extra = set(row) - set(doc["columns"]) - {"errors", "rounds"}
        assert not extra, f"row {row['row']!r} has figures for no column: {extra}"
        for v in row.values():
            assert v is None or isinstance(v, (int, float, str, dict, list)), v
    for peer in doc.get("compare") or []:
        assert peer in doc["columns"] and doc.get("goloop", "goloop") in doc["columns"]


def table_rows(page, title):
    """The body rows of the first table under the heading `### title`."""
    lines = page.splitlines()
    i = lines.index(f"### {title}")
    while not lines[i].startswith("|"):
        i += 1
    out = []
    i += 2
    while i < len(lines) and lines[i].startswith("|"):
        out.append(lines[i])
        i += 1
    return out


def test_no_result_row_is_lost():
    page = render.render_benchmarks(render.load())
    for doc in render.load():
        rows = table_rows(page, doc["title"])
        assert len(rows) == len(doc["rows"]), doc["id"]
        for line, row in zip(rows, doc["rows"]):
            assert line.startswith(f"| {row['row']} |"), (doc["id"], line)
            # every figure of the row is in its line (a missing one: "n/a", or with a
            # problem written down, its note: "error [k]")
            cells = [c.strip() for c in line.strip("|").split("|")]
            errors = row.get("errors") or {}
            for col, cell in zip(doc["columns"][1:], cells[1:]):
                v = row.get(col)
                if v is None and col in errors:
                    assert re.fullmatch(r"error \[\d+\]", cell), (doc["id"], col, cell)
                    continue
                if v is None:
                    assert cell == "n/a", (doc["id"], col, cell)
                else:  # the figure as the renderer writes it, then its spread or note, if any
                    assert cell.startswith(render.fmt(v, doc.get("units", {}).get(col))), (doc["id"], col, cell)


def test_titles_are_unique():
    titles = [d["title"] for d in render.load()]
    assert len(titles) == len(set(titles))


def test_render_formats():
    assert render.fmt(None, "µs") == "n/a"
    assert render.fmt(31900, "req/s") == "31.9k"
    assert render.fmt(1610000, "ops/s") == "1.61M"
    assert render.fmt(1.04, "x") == "1.04×"
    assert render.fmt(10444, "instructions") == "10,444"
    doc = {"better": "lower", "columns": ["row", "goloop", "uvloop"], "compare": ["uvloop"]}
    assert render.ratio(doc, {"goloop": 5.0, "uvloop": 10.0}, "uvloop") == 2.0  # less CPU: better
    doc["better"] = "higher"
    assert render.ratio(doc, {"goloop": 5.0, "uvloop": 10.0}, "uvloop") == 0.5
    assert render.ratio(doc, {"goloop": None, "uvloop": 10.0}, "uvloop") is None


def test_errors_are_footnoted():
    doc = {"id": "t", "title": "T", "date": "2026-01-01", "group": "g", "columns": ["row", "goloop"],
           "units": {}, "rows": [{"row": "a", "goloop": None, "errors": {"goloop": "it crashed"}}]}
    text = "\n".join(render.section(doc, ""))
    assert "| a | error [1] |" in text and "1. error: it crashed" in text


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    d = tmp_path / "results"
    d.mkdir()
    (d / "other.json").write_text(json.dumps({
        "schema": 1, "id": "other", "group": "g", "title": "another driver's table", "date": "2026-01-01",
        "machine": "m", "command": "c", "method": "m", "columns": ["row", "x"], "rows": [{"row": "r", "x": 1}]}))
    monkeypatch.setattr(results, "RESULTS", str(d))
    monkeypatch.setattr(results, "machine", lambda: "test machine")
    return d


def test_run_py_writes_its_tables_as_results(results_dir):
    import run
    t = run.Table("Echo, requests/s (10 connections)", [("asyncio", "asyncio"), ("goloop", "goloop")], "server",
                  latency=True)
    t.add("protocol 1 KiB", {"asyncio": {"value": 1000.0, "cpu_us": 20.0, "p50_us": 100, "p99_us": 900},
                             "goloop": {"error": "goloop failed to start"}})
    args = argparse.Namespace(quick=True, repeat=1)
    run.write_results([t], run.Notes(), "cmd", run.Config(True), args, {})
    names = sorted(p.name for p in results_dir.iterdir())
    assert names == ["loop-echo-cpu.json", "loop-echo-latency.json", "loop-echo.json", "other.json"]
    doc = json.loads((results_dir / "loop-echo.json").read_text())
    assert doc["rows"] == [{"row": "protocol 1 KiB", "asyncio": 1000.0, "goloop": None,
                            "errors": {"goloop": "goloop failed to start"}}]
    docs = render.load(str(results_dir))
    page = render.render_benchmarks(docs)
    assert "another driver's table" in page and "error [1]" in page


def test_serve_bench_writes_results_and_keeps_other_rows(results_dir, monkeypatch):
    import serve_bench
    monkeypatch.setattr(render, "main", lambda argv: 0)
    (results_dir / "serve-asgi-cpu.json").write_text(json.dumps({
        "schema": 1, "id": "serve-asgi-cpu", "group": "g", "title": "t", "date": "2026-01-01", "machine": "m",
        "command": "c", "method": "m", "columns": ["row", "goloop serve"],
        "rows": [{"row": "Starlette JSON", "goloop serve": 60.0}, {"row": "hello world", "goloop serve": 99.0}]}))
    best = {("hello", "goloop serve"): {"value": 60000.0, "cpu_us": 16.04, "p50_us": 1500, "p99_us": 3000, "errors": 0},
            ("hello", "uvicorn+uvloop"): "failed: no uvicorn"}
    args = argparse.Namespace(connections=100, duration=5, rounds=1)
    serve_bench.write_results(best, ["hello"], ["uvicorn+uvloop", "goloop serve"], args)
    doc = json.loads((results_dir / "serve-asgi-cpu.json").read_text())
    assert doc["rows"][0] == {"row": "Starlette JSON", "goloop serve": 60.0}
    assert doc["rows"][1]["goloop serve"] == 16.0 and doc["rows"][1]["uvicorn+uvloop"] is None
    assert doc["rows"][1]["errors"] == {"uvicorn+uvloop": "failed: no uvicorn"}
    assert doc["command"].endswith("--rows hello,json"), "the rows of the whole table, not only this run's"


def test_serve_bench_table_reads_right(capsys):
    import serve_bench
    best = {("pipeline", "goloop serve"): {"value": 78000.0, "cpu_us": 12.8, "p50_us": 0, "p99_us": None, "errors": 0},
            ("pipeline", "uvicorn+uvloop"): "failed: connection refused",
            ("pipeline", "go fasthttp"): {"value": 500000.0, "cpu_us": 2.0, "p50_us": 1800, "p99_us": 5000, "errors": 7}}
    serve_bench.print_table(best, ["pipeline"], ["uvicorn+uvloop", "goloop serve", "go fasthttp"],
                            argparse.Namespace(connections=100, duration=5, rounds=1))
    out = capsys.readouterr().out
    assert "0.00" not in out
    assert "> 1: goloop serve uses less" in out
    assert "| hello world, 16 pipelined | uvicorn+uvloop | error [1] | n/a |" in out
    assert "[1] failed: connection refused" in out and "[2] wrk counted 7" in out
    assert "| goloop serve | 78,000 | 12.8 | (itself) | n/a | n/a |" in out


def test_run_py_demo_table_reads_right():
    """make demo's loop tables: n/a where a figure does not exist, ratios labelled so that
    > 1 means goloop is better, an error in its cell with a footnote."""
    import run
    t = run.Table("HTTP keep-alive, requests/s (wrk -t1 -c100)",
                  [("asyncio", "asyncio"), ("uvloop", "uvloop"), ("goloop", "goloop")], "response", latency=True)
    t.add("13 B", {"asyncio": {"value": 1000.0, "cpu_us": 20.0, "p50_us": 100, "p99_us": None},
                   "uvloop": {"error": "uvloop is not installed"},
                   "goloop": {"value": 2000.0, "cpu_us": 10.0, "p50_us": 50, "p99_us": 90}})
    notes = run.Notes()
    text = t.markdown(notes)
    assert "–" not in text and not re.search(r"(?<![\d.])0\.00\b", text)
    assert "goloop vs asyncio (> 1: goloop faster)" in text
    assert "asyncio's CPU / goloop's (> 1: goloop uses less)" in text
    assert re.search(r"\| 13 B \| \S+ \| error \[1\] \| \S+ \| n/a \| 2\.00× \|", text), text
    assert notes.items == ["uvloop is not installed"]
    assert "| 13 B | 20.00 | n/a | 10.00 | n/a | 2.00× |" in text
    assert "100 µs / n/a" in text


DRIVERS = ["run", "serve_bench", "wsgi_bench", "wsgi_ab", "tls_bench", "granian_bench", "sched_table", "io_ab",
           "gil_bench"]


@pytest.mark.parametrize("driver", DRIVERS)
def test_every_driver_writes_results(driver):
    """Each driver offers --results (its tables under bench/results/, then a render)."""
    import subprocess
    p = subprocess.run([sys.executable, os.path.join(BENCH, f"{driver}.py"), "--help"], capture_output=True,
                       text=True, timeout=60, cwd=BENCH)
    assert p.returncode == 0, p.stderr
    assert "--results" in p.stdout


def test_a_measured_value_with_errors_keeps_its_value_and_spread():
    doc = {"id": "x", "title": "t", "date": "2026-01-01", "better": "lower", "columns": ["row", "goloop", "peer"],
           "units": {"goloop": "µs", "peer": "µs"}, "compare": ["peer"], "spread_in_cells": True,
           "figures": {"a": {"goloop": {"spread": 0.031}, "peer": {"spread": None}}},
           "rows": [{"row": "a", "goloop": 10.0, "peer": 20.0, "errors": {"peer": "3 socket errors"}}]}
    text = "\n".join(render.section(doc, ""))
    assert "| a | 10.0 (3 %) | 20.0 [1] | 2.00× |" in text, text
    assert "1. error: 3 socket errors" in text
