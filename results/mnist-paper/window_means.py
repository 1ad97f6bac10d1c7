"""Test error averaged over 50-epoch windows of finished runs (the curves compared in README.md).

Usage: python results/mnist-paper/window_means.py RUN_DIR [RUN_DIR ...] [--window 50] [--column val_error]

Reads each run's metrics.csv (the test error is logged every epoch for Figure 2; nothing is
selected on it) and prints the mean test error (or --column) of epochs 1-50, 51-100, ...
(a last, shorter window for a run stopped early).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="run folders with a metrics.csv")
    ap.add_argument("--window", type=int, default=50, help="epochs per window (default 50)")
    ap.add_argument("--column", default="test_error", help="the metrics.csv column (default test_error)")
    args = ap.parse_args()
    if args.window < 1:
        raise SystemExit("error: --window must be at least 1")
    for run in args.runs:
        try:
            with open(run / "metrics.csv", newline="") as f:
                rows = [(int(r["epoch"]), float(r[args.column])) for r in csv.DictReader(f)]
        except (OSError, KeyError, ValueError) as e:
            raise SystemExit(f"error: cannot read {run}/metrics.csv as a bbb run's metrics ({e})") from None
        windows: dict[int, list[tuple[int, float]]] = {}
        for epoch, err in rows:
            windows.setdefault((epoch - 1) // args.window, []).append((epoch, err))
        parts = [f"{v[0][0]}-{v[-1][0]}: {100 * sum(e for _, e in v) / len(v):.2f}%"
                 for _, v in sorted(windows.items())]
        print(f"{run}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
