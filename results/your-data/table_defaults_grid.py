"""The validation grid that chose the table defaults of ``bbb train --method ivon`` and ``--method
dropout`` (docs/defaults.md, "Your own data"): each setting on yacht, Boston, concrete and the
synthetic customers table (the tables the script of docs/your_data.md makes, in the current
folder), one run each (seed 0), ranked by the mean over the tables of the validation NLL of the
chosen epoch (summary.json's ``best_val_nll``). The test splits are not read. BBB and the
deterministic network at the table defaults are listed for scale.

Usage: python results/your-data/table_defaults_grid.py [--runs runs/table-grid] [--workers 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

TABLES = (("yacht.csv", "resistance", "regression"), ("boston.csv", "medv", "regression"),
          ("concrete.csv", "strength", "regression"), ("customers.csv", "segment", "classification"))


def settings() -> dict[str, list[str]]:
    grid: dict[str, list[str]] = {}
    for lr, h in itertools.product((0.5, 0.2, 0.1, 0.03, 0.01), (0.5, 1.0)):
        grid[f"ivon-lr{lr}-h{h}"] = ["--method", "ivon", "--lr", str(lr), "--hess-init", str(h)]
    for lr, h in ((0.1, 2.0), (0.05, 1.0), (0.05, 2.0), (0.1, 4.0)):
        grid[f"ivon-lr{lr}-h{h}"] = ["--method", "ivon", "--lr", str(lr), "--hess-init", str(h)]
    for lr in (0.1, 0.03):
        grid[f"ivon-lr{lr}-h0.5-wd2e-3"] = ["--method", "ivon", "--lr", str(lr), "--hess-init", "0.5",
                                             "--weight-decay", "2e-3"]
    for di, dh in ((0.0, 0.05), (0.0, 0.1), (0.0, 0.2), (0.1, 0.2), (0.2, 0.5)):
        grid[f"dropout-i{di}-h{dh}"] = ["--method", "dropout", "--dropout-input", str(di), "--dropout-hidden",
                                        str(dh)]
    grid["bbb"] = ["--method", "bbb"]
    grid["sgd"] = ["--method", "sgd"]
    return grid


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Example: python results/your-data/table_defaults_grid.py --workers 2")
    p.add_argument("--runs", default="runs/table-grid", help="folder of the runs (default: runs/table-grid)")
    p.add_argument("--workers", type=int, default=2, help="runs at once (default: 2)")
    args = p.parse_args()
    grid, runs = settings(), Path(args.runs)

    def run(job: tuple[str, tuple[str, str, str]]) -> None:
        name, (file, target, task) = job
        out = runs / f"{name}-{file[:-4]}"
        if (out / "summary.json").exists() or (out / "failed.txt").exists():
            return
        r = subprocess.run(["bbb", "train", "--csv", file, "--target", target, "--task", task, "--out", str(out),
                            "--threads", "1", "--quiet", *grid[name]], capture_output=True, text=True)
        if r.returncode:  # a diverged setting is a result: kept, and shown as such
            out.mkdir(parents=True, exist_ok=True)
            (out / "failed.txt").write_text(r.stderr)

    jobs = [(name, t) for name in grid for t in TABLES]
    with ThreadPoolExecutor(args.workers) as pool:
        list(tqdm(pool.map(run, jobs), total=len(jobs), desc="runs", file=sys.stderr))
    rows = []
    for name in grid:
        vals = []
        for file, _, _ in TABLES:
            s = runs / f"{name}-{file[:-4]}" / "summary.json"
            vals.append(json.loads(s.read_text())["best_val_nll"] if s.exists() else None)
        mean = None if None in vals else sum(v for v in vals if v is not None) / len(vals)
        rows.append((name, vals, mean))
    print("| setting | " + " | ".join(t[0][:-4] for t in TABLES) + " | mean |")
    print("|---|" + "---:|" * (len(TABLES) + 1))
    for name, vals, mean in sorted(rows, key=lambda r: (r[2] is None, r[2] or 0.0)):
        cells = ["diverged" if v is None else f"{v:.3f}" for v in vals]
        print(f"| {name} | " + " | ".join(cells) + f" | {'-' if mean is None else f'{mean:.3f}'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
