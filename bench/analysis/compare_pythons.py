#!/usr/bin/env python3
"""Side-by-side table of two bench/run.py --json results, one per Python version.

    python3 bench/analysis/compare_pythons.py /tmp/b311.json /tmp/b313.json >> BENCHMARKS.md

For each configuration: goloop's and uvloop's figure under each interpreter, and goloop's
3.13/3.11 ratio (higher is better for throughput; for µs the ratio is inverted so that
above 1 still means faster on the second interpreter).
"""
import json
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    cells = {}
    for r in d["results"]:
        if "value" in r:
            cells[(r["section"], r["config"], r["column"])] = r
    return d, cells


def fmt(r, key="value"):
    if r is None or r.get(key) is None:
        return "n/a"
    x = r[key]
    if key == "value" and x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if key == "value" and x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.2f}" if key != "value" else f"{x:.0f}"


def main():
    (da, a), (db, b) = load(sys.argv[1]), load(sys.argv[2])
    va, vb = da["machine"]["python"], db["machine"]["python"]
    out = [f"## Python {va} and {vb} side by side", "",
           f"Two runs of `bench/run.py` one after the other on this machine "
           f"({da['command']!s} under each interpreter); the figures are requests or operations "
           f"per second; CPU is the server's µs per request where measured. Compare the ratios.", "",
           f"| section | configuration | goloop {va} | goloop {vb} | goloop {vb}/{va} | "
           f"CPU µs/req {va} → {vb} | uvloop {va} | uvloop {vb} |",
           "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(s, c) for (s, c, col) in a} | {(s, c) for (s, c, col) in b},
                  key=lambda k: (k[0], k[1]))
    seen = []
    for (s, c, col) in [k for r in da["results"] for k in [(r["section"], r["config"], r["column"])]]:
        if (s, c) not in seen:
            seen.append((s, c))
    for s, c in seen + [k for k in keys if k not in seen]:
        ga, gb = a.get((s, c, "goloop")), b.get((s, c, "goloop"))
        ua, ub = a.get((s, c, "uvloop")), b.get((s, c, "uvloop"))
        if ga is None and gb is None:
            continue
        ratio = "n/a"
        if ga and gb and ga.get("value") and gb.get("value"):
            ratio = f"{gb['value'] / ga['value']:.2f}×"
        cpu = "n/a"
        if ga and gb and ga.get("cpu_us") and gb.get("cpu_us"):
            cpu = f"{ga['cpu_us']:.2f} → {gb['cpu_us']:.2f}"
        out.append(f"| {s} | {c} | {fmt(ga)} | {fmt(gb)} | {ratio} | {cpu} | {fmt(ua)} | {fmt(ub)} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
