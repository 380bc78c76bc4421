#!/usr/bin/env python3
"""Render every result under bench/results/ into BENCHMARKS.md and docs/performance.md,
and README.md's headline table (between its headline markers).

    python3 bench/render.py            # write both pages and the charts (docs/img/bench/)
    python3 bench/render.py --check    # exit 1 if the committed pages differ from a fresh render

The pages are generated: edit a result file (or run its benchmark again), never the pages.
The schema is described in bench/results.py. Charts need matplotlib (make docs-deps); without
it the pages are still written and the charts left as they are.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
CHARTS = os.path.join("docs", "img", "bench")  # relative to the repository

# The sections, in page order; a group not listed comes after these, by name.
GROUPS = [
    "The event loop",
    "The event loop: TLS",
    "The event loop under other servers",
    "goloop serve (ASGI)",
    "goloop serve (WSGI)",
    "Builds and interpreters",
]


def load(results_dir: str = RESULTS) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        name = os.path.splitext(os.path.basename(path))[0]
        if doc.get("id") != name:
            raise SystemExit(f"{path}: id {doc.get('id')!r} is not the file's name")
        for key in ("group", "title", "date", "columns", "rows"):
            if key not in doc:
                raise SystemExit(f"{path}: no {key!r}")
        out.append(doc)
    return out


def group_key(doc):
    g = doc["group"]
    return (GROUPS.index(g) if g in GROUPS else len(GROUPS), g)


def human(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:,.0f}" if a >= 100 else f"{v:g}"


def fmt(v, unit: str | None) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if unit in ("req/s", "ops/s", "/s"):
        return human(v)
    if unit == "x":
        return f"{v:.2f}×"
    if unit == "%":
        return f"{v:g} %"
    if isinstance(v, int) or float(v).is_integer() and abs(v) >= 1000:
        return f"{int(v):,}"
    return f"{v:,}"


def ratio(doc, row, peer):
    """goloop against peer for one row, oriented so that > 1 means goloop is better."""
    me, other = row.get(doc.get("goloop", "goloop")), row.get(peer)
    if not isinstance(me, (int, float)) or not isinstance(other, (int, float)) or not me or not other:
        return None
    return me / other if doc.get("better") == "higher" else other / me


def chart_path(doc) -> str | None:
    return f"{CHARTS}/{doc['id']}.svg" if doc.get("compare") else None


def table(doc, notes: list[str]) -> list[str]:
    cols = doc["columns"]
    units = doc.get("units", {})
    peers = doc.get("compare") or []
    head = []
    for c in cols:
        if c == "row":
            head.append(doc.get("row_label", ""))
        else:
            u = units.get(c)
            head.append(f"{c} ({u})" if u and u != "x" and not doc.get("units_in_title") else c)
    head += [f"vs {p} (> 1: goloop better)" for p in peers]
    out = ["| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
    # "spread_in_cells": each value followed by its rounds' spread (max/min - 1), read from
    # figures[row][column]["spread"]
    spreads = doc.get("figures") if doc.get("spread_in_cells") else None
    for row in doc["rows"]:
        cells = []
        errors = row.get("errors") or {}
        for c in cols:
            text = fmt(row.get(c), None if c == "row" else units.get(c))
            if c != "row" and spreads and isinstance(row.get(c), (int, float)):
                sp = (spreads.get(row["row"]) or {}).get(c) or {}
                if isinstance(sp.get("spread"), (int, float)):
                    text += f" ({sp['spread'] * 100:.0f} %)"
            if c in errors:
                msg = " ".join(str(errors[c]).split())
                if msg not in notes:
                    notes.append(msg)
                # a measured value with a problem keeps its value; a missing one shows the problem
                text = f"{text} [{notes.index(msg) + 1}]" if isinstance(row.get(c), (int, float)) \
                    else f"error [{notes.index(msg) + 1}]"
            cells.append(text)
        cells += [fmt(ratio(doc, row, p), "x") for p in peers]
        out.append("| " + " | ".join(cells) + " |")
    return out


def section(doc, img_prefix: str) -> list[str]:
    out = [f"### {doc['title']}", ""]
    meta = [f"Measured {doc['date']}"]
    if doc.get("better"):
        meta.append(f"{doc['better']} is better")
    out += [", ".join(meta) + ".", ""]
    notes: list[str] = []
    out += table(doc, notes) + [""]
    for i, n in enumerate(notes, 1):
        out.append(f"{i}. error: {n}")
    if notes:
        out.append("")
    c = chart_path(doc)
    if c:
        out += [f"![{doc['title']}: goloop against each peer]({img_prefix}{os.path.basename(c)})", ""]
    if doc.get("method"):
        out += [f"**Method.** {doc['method']}", ""]
    for n in doc.get("notes") or []:
        out += [n, ""]
    if doc.get("command"):
        out += ["Reproduce:", "", "```sh", doc["command"], "```", ""]
    return out


def machines(docs) -> list[str]:
    seen = {}
    for d in docs:
        seen.setdefault(d.get("machine") or "not recorded", []).append(d["title"])
    out = ["## Machine", "",
           "Every figure was measured on a 2-core virtual machine shared with other work: the "
           "server pinned to one core, the load generator to the other. Ratios measured in one "
           "run are what to compare; absolute figures move between runs by up to 20 % "
           "(instruction counts do not). The machines the results name:", ""]
    for m, titles in seen.items():
        out.append(f"- {m} ({len(titles)} table{'s' if len(titles) > 1 else ''})")
    return out + [""]


def body(docs, img_prefix: str, level_shift: str = "") -> list[str]:
    out = []
    groups: dict[str, list] = {}
    for d in sorted(docs, key=lambda d: (group_key(d), d.get("order", 100), d["title"])):
        groups.setdefault(d["group"], []).append(d)
    for g, items in groups.items():
        out += [f"## {g}", ""]
        for d in items:
            out += section(d, img_prefix)
    return out


def contents(docs) -> list[str]:
    out = ["Contents:", ""]
    groups = sorted({d["group"] for d in docs}, key=lambda g: group_key({"group": g}))
    for g in groups:
        out.append(f"- [{g}](#{anchor(g)})")
    return out + [""]


def anchor(title: str) -> str:
    """The anchor MkDocs (toc's slugify) and GitHub both give a heading of plain words."""
    import re
    s = re.sub(r"[^\w\s-]", "", title.lower()).strip()
    return re.sub(r"[\s]+", "-", s)


def render_benchmarks(docs) -> str:
    out = ["# goloop benchmarks", "",
           "<!-- Generated by bench/render.py from bench/results/*.json: do not edit. -->", "",
           "The current figures of every benchmark, each with its method and the command that "
           "reproduces it. `make bench` runs the drivers again (each writes its results under "
           "`bench/results/`) and renders this page; the manual's Performance page "
           "(`docs/performance.md`) is the same tables with the analyses beside them.", ""]
    out += contents(docs) + machines(docs) + body(docs, CHARTS + "/")
    return "\n".join(out).rstrip() + "\n"


def render_performance(docs) -> str:
    out = ["# Performance", "",
           "<!-- Generated by bench/render.py from bench/results/*.json: do not edit. -->", "",
           "goloop's figures against asyncio's own loop, uvloop, rloop, uvicorn, Granian, bjoern, "
           "gunicorn and uWSGI. Each table says when it was measured, how, and the command that "
           "reproduces it; the charts show goloop against each peer, row by row, as a ratio "
           "where more than 1 means goloop is better. Where the time goes and what bounds each "
           "figure: [Where the time goes](analysis.md), [Where the instructions go](instructions.md) and "
           "[Bounds](bounds.md).", ""]
    out += machines(docs) + body(docs, "img/bench/")
    return "\n".join(out).rstrip() + "\n"


# README's headline table: (result id, row, peer, what the row says)
HEADLINE = [
    ("loop-micro", "call_soon chain", "uvloop", "the event loop: `call_soon`, operations/s"),
    ("loop-tls", "TLS 1 KiB", "uvloop", "the event loop: TLS echo, 1 KiB, requests/s"),
    ("loop-io", "HTTP keep-alive 13 B (httptools)", "uvloop", "the event loop: HTTP keep-alive, CPU per request"),
    ("loop-uvicorn-cpu", "uvicorn, 13 B", "uvloop", "uvicorn on goloop's loop: server CPU per request"),
    ("serve-asgi-cpu", "hello world", "uvicorn+uvloop", "goloop serve, ASGI hello world: CPU per request"),
    ("serve-asgi-cpu", "FastAPI path param + Pydantic", "granian+uvloop", "goloop serve, FastAPI: CPU per request"),
    ("wsgi-ab-together-bjoern", "Django hello world, -c50", "bjoern", "goloop serve, Django: CPU per request"),
    ("wsgi-ab-together-bjoern", "Flask hello world, -c50", "bjoern", "goloop serve, Flask: CPU per request"),
    ("web-fastapi", "fortunes", "granian", "goloop serve, FastAPI + PostgreSQL, TechEmpower fortunes: CPU per request"),
    ("web-wsgi_raw", "20 queries", "granian", "goloop serve, WSGI + PostgreSQL, TechEmpower 20 queries: CPU per request"),
]
README_BEGIN = "<!-- headline: rendered by bench/render.py -->"
README_END = "<!-- /headline -->"


def headline(docs) -> str:
    by_id = {d["id"]: d for d in docs}
    out = [README_BEGIN, "| workload | against | goloop's advantage (> 1: goloop better) |", "| --- | --- | ---: |"]
    for rid, row, peer, what in HEADLINE:
        d = by_id[rid]
        r = next(x for x in d["rows"] if x["row"] == row)
        out.append(f"| {what} | {re.sub(r'(?<! )[+](?! )', ' + ', peer)} | {fmt(ratio(d, r, peer), 'x')} |")
    return "\n".join(out + [README_END])


def with_headline(readme: str, docs) -> str:
    a, b = readme.find(README_BEGIN), readme.find(README_END)
    if a < 0 or b < 0:
        return readme
    return readme[:a] + headline(docs) + readme[b + len(README_END):]


def draw(doc, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.hashsalt"] = "goloop"
    peers = doc["compare"]
    rows = [r for r in doc["rows"] if any(ratio(doc, r, p) for p in peers)]
    if not rows:
        return
    n, k = len(rows), len(peers)
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * n * k + 1.4))
    h = 0.8 / k
    for j, p in enumerate(peers):
        ys = [i + j * h for i in range(n)]
        vals = [ratio(doc, r, p) or 0 for r in rows]
        bars = ax.barh(ys, vals, height=h, label=f"vs {p}")
        for y, v in zip(ys, vals):
            if v:
                ax.text(v, y, f" {v:.2f}×", va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks([i + h * (k - 1) / 2 for i in range(n)])
    ax.set_yticklabels([str(r["row"]) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("goloop against the peer (> 1: goloop better)")
    ax.set_title(doc["title"], fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlim(0, max(ratio(doc, r, p) or 0 for r in rows for p in peers) * 1.18)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed pages, write nothing")
    ap.add_argument("--no-charts", action="store_true", help="write the pages only")
    args = ap.parse_args(argv)
    docs = load()
    pages = {os.path.join(REPO, "BENCHMARKS.md"): render_benchmarks(docs),
             os.path.join(REPO, "docs", "performance.md"): render_performance(docs)}
    readme = os.path.join(REPO, "README.md")
    with open(readme, encoding="utf-8") as f:
        pages[readme] = with_headline(f.read(), docs)
    if args.check:
        bad = [p for p, text in pages.items()
               if not os.path.exists(p) or open(p, encoding="utf-8").read() != text]
        for p in bad:
            print(f"{os.path.relpath(p, REPO)} differs from a render of bench/results/: "
                  "run python3 bench/render.py", file=sys.stderr)
        return 1 if bad else 0
    for p, text in pages.items():
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"# wrote {os.path.relpath(p, REPO)}")
    if not args.no_charts:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("# matplotlib is not installed: charts left as they are (make docs-deps)")
            return 0
        os.makedirs(os.path.join(REPO, CHARTS), exist_ok=True)
        for d in docs:
            c = chart_path(d)
            if c:
                draw(d, os.path.join(REPO, c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
