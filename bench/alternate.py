#!/usr/bin/env python3
"""Several interpreters (or builds) measured side by side in one run, taking turns.

    python3 bench/alternate.py --config 3.11=python3 --config 3.13=/opt/python/3.13/bin/python3 \\
        [--config before-3.11=python3@/path/to/other/checkout ...] [--rounds 3] \\
        [--json FILE] -- --only tls --loops goloop

Each round runs `bench/run.py ARGS` once per configuration, in the order given, so that a
slow spell of the machine falls on every configuration alike. `LABEL=PYTHON[@REPO]`: the
interpreter, and the checkout whose bench/run.py and goloop (its pyshim, put first on
PYTHONPATH) it runs (default: this one). Prints a Markdown table: per row, each configuration's best of the rounds:
the most requests/s and, separately, the least server CPU µs per request (the figure that
other work on the server's core disturbs least).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from harness import human  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", required=True, metavar="LABEL=PYTHON[@REPO]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="write every round's results here")
    ap.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then bench/run.py's arguments")
    args = ap.parse_args()
    run_args = [a for a in args.run_args if a != "--"] if args.run_args[:1] == ["--"] else args.run_args
    configs = []
    for c in args.config:
        label, _, rest = c.partition("=")
        py, _, repo = rest.partition("@")
        configs.append((label, py, os.path.abspath(repo or REPO)))

    rounds = {label: [] for label, _, _ in configs}
    order = []
    for rnd in range(args.rounds):
        for label, py, repo in configs:
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                argv = [py, os.path.join(repo, "bench", "run.py"), *run_args, "--json", tmp.name]
                print(f"# round {rnd + 1}/{args.rounds}: {label}: {' '.join(argv)}", flush=True)
                # the checkout's own goloop, even where another one is installed (bench/harness.py
                # imports an installed goloop first)
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                    [os.path.join(repo, "pyshim")] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
                p = subprocess.run(argv, cwd=repo, stdout=subprocess.PIPE, text=True, env=env)
                for line in p.stdout.splitlines():
                    if line.startswith("  "):
                        print(f"#   {label}: {line.strip()}", flush=True)
                try:
                    with open(tmp.name) as f:
                        d = json.load(f)
                except (OSError, ValueError):
                    print(f"# {label}: run.py failed (exit {p.returncode})", flush=True)
                    continue
            rounds[label].append(d)
            for r in d["results"]:
                key = (r["section"], r["config"], r["column"])
                if key not in order:
                    order.append(key)

    def best(label, key):
        vals = [r for d in rounds[label] for r in d["results"]
                if (r["section"], r["config"], r["column"]) == key and r.get("value")]
        if not vals:
            return None, None
        v = max(r["value"] for r in vals)
        cpus = [r["cpu_us"] for r in vals if r.get("cpu_us")]
        return v, (min(cpus) if cpus else None)

    labels = [c[0] for c in configs]
    cmd = "python3 bench/alternate.py " + " ".join(
        f"--config {c}" for c in args.config) + f" --rounds {args.rounds} -- " + " ".join(run_args)
    out = [f"Command: `{cmd}`", "",
           f"Best of {args.rounds} rounds; each round runs every configuration once, in turn. "
           "req/s: the most; CPU: the server's least µs per request.", "",
           "| section | configuration | loop | " + " | ".join(f"{l} req/s" for l in labels) +
           " | " + " | ".join(f"{l} CPU µs/req" for l in labels) + " |",
           "|---|---|---|" + "---|" * (2 * len(labels))]
    for key in order:
        cells = [best(l, key) for l in labels]
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | " +
                   " | ".join(human(v) if v else "n/a" for v, _ in cells) + " | " +
                   " | ".join(f"{c:.2f}" if c else "n/a" for _, c in cells) + " |")
    print("\n".join(out), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": cmd, "configs": configs, "rounds": rounds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
