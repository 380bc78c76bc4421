#!/usr/bin/env python3
"""The newer contenders' cells of one full web benchmark run, in one table beside goloop serve's
from the same run: bench/results/web-contenders.json.

    python3 bench/web_bench.py --results ...          # a full run (writes bench/results/web-<app>.json)
    cp bench/results/web-*.json RUN/                  # keep that run's files
    python3 bench/analysis/web_contenders.py RUN      # then this table from them

For when a full run is not fit to replace the apps' tables (its rounds far apart: a busy hour)
but its contenders' ratios to goloop, measured in the same hour, are worth keeping: each cell is
the run's (median of its rounds, their spread in brackets); a contender that failed a test
type's validation has no cell, its failure in the cell's footnote.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from results import write_result  # noqa: E402
from web_bench import APPS  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="the folder holding a full run's web-<app>.json")
    ap.add_argument("--servers", default="socketify,fastpysgi")
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args(argv)
    servers = args.servers.split(",")
    rows, figures, first = [], {}, None
    for app in APPS:
        path = os.path.join(args.run, f"web-{app}.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        first = first or doc
        app_title = APPS[app][2].split(" (")[0]
        for r in doc["rows"]:
            label = f"{app_title}: {r['row']}"
            row, errors = {"row": label}, {}
            for s in ["goloop serve", *servers]:
                row[s] = r.get(s)
                why = (r.get("errors") or {}).get(s)
                if why:
                    errors[s] = why
            if errors:
                row["errors"] = errors
            rows.append(row)
            figs = doc.get("figures", {}).get(r["row"], {})
            figures[label] = {s: figs[s] for s in ["goloop serve", *servers] if s in figs}
    if first is None:
        sys.exit(f"no web-<app>.json in {args.run}")
    write_result("web-contenders", group=first["group"],
                 title="The newer contenders in a full run: server CPU µs per request",
                 command=first["command"] + "; python3 bench/analysis/web_contenders.py RUN",
                 method=first["method"] + " This table takes goloop serve's, "
                 + " and ".join(servers) + "'s cells of that run.",
                 better="lower", columns=["row", "goloop serve", *servers],
                 units={s: "µs" for s in ["goloop serve", *servers]}, rows=rows, goloop="goloop serve",
                 compare=servers, row_label="app: test type", notes=args.note, order=60, figures=figures,
                 spread_in_cells=True, date=first["date"], machine=first["machine"], versions=first["versions"])
    import render
    render.main([])


if __name__ == "__main__":
    main()
