"""Seconds per epoch of runs (their metrics.csv): median and 5th-95th percentile, from an epoch on.

Usage: python results/mnist-paper/epoch_seconds.py RUN_DIR[:FIRST_EPOCH] [...]

The cost estimates in README.md come from here (FIRST_EPOCH: leave out the epochs trained under
other code or beside other work).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders with a metrics.csv, each optionally :FIRST_EPOCH")
    args = ap.parse_args()
    for arg in args.runs:
        run, _, first = arg.partition(":")
        try:
            start = int(first) if first else 1
            with open(Path(run) / "metrics.csv", newline="") as f:
                rows = [(int(r["epoch"]), float(r["seconds"])) for r in csv.DictReader(f)]
            sec = [s for e, s in rows if e >= start]
        except (OSError, KeyError, ValueError) as e:
            raise SystemExit(f"error: cannot read {run}/metrics.csv as a bbb run's metrics ({e})") from None
        if len(sec) < 2:
            raise SystemExit(f"error: {run} has fewer than 2 epochs from epoch {start} on")
        q = statistics.quantiles(sec, n=20)
        print(f"{run} epochs {start}-{rows[-1][0]} ({len(sec)}): median {statistics.median(sec):.1f} s, "
              f"5th-95th percentile {q[0]:.1f}-{q[-1]:.1f} s")


if __name__ == "__main__":
    main()
