"""Run the stages of `make test` one after another, each even when one before it failed.

    python3 tools/stages.py "LABEL=COMMAND" ...

Each COMMAND runs in a shell; its output passes through, under a header line naming the stage.
At the end one line per stage says whether it passed and how long it took; the exit status is 1
if any stage failed (or was stopped), else 0. Ctrl-C stops the stage running and the stages
after it (they are reported as not run).
"""
from __future__ import annotations

import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    stages = []
    for arg in argv:
        label, sep, command = arg.partition("=")
        if not sep or not label or not command:
            print(f"stages.py: want LABEL=COMMAND, got {arg!r}", file=sys.stderr)
            return 2
        stages.append((label, command))
    results = []
    interrupted = False
    for label, command in stages:
        if interrupted:
            results.append((label, "not run", 0.0))
            continue
        print(f"::: goloop: stage {label}: {command}", flush=True)
        t0 = time.monotonic()
        try:
            rc = subprocess.run(command, shell=True).returncode
        except KeyboardInterrupt:
            rc, interrupted = "stopped", True
        took = time.monotonic() - t0
        results.append((label, "passed" if rc == 0 else ("stopped" if interrupted else f"FAILED (exit {rc})"), took))
    width = max(len(label) for label, _, _ in results)
    print(flush=True)
    for label, verdict, took in results:
        print(f"goloop: stage {label:<{width}}  {verdict}" + (f" in {took:.0f} s" if verdict != "not run" else ""))
    bad = [label for label, verdict, _ in results if verdict != "passed"]
    if bad:
        print(f"goloop: {len(bad)} of {len(results)} stages did not pass: {', '.join(bad)}")
        return 1
    print(f"goloop: all {len(results)} stages passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
