"""Ensembles of runs on your own tables (results/your-data/README.md, "Ensembles of runs"): on each
table of make_csvs.py, 5 runs of `bbb train` (seeds 0-4, the defaults for a table) of each method:
Bayes by Backprop, the deterministic network (`--method sgd`: 5 make a deep ensemble), MC dropout
(`--method dropout`) and IVON (`--method ivon`); a last-layer Laplace posterior of each
deterministic run (`bbb laplace RUN --out DIR`: no training, its prior precision by the marginal
likelihood on the run's training rows); then `bbb evaluate RUN x 5 --out DIR`: each ensemble's test
scores beside its members'.

Usage, from a folder where make_csvs.py wrote the tables, with the `bbb` command installed:

    BBB_DATA=... python results/your-data/make_csvs.py
    python results/your-data/ensembles.py --runs runs/ensembles --out results/your-data --workers 2

Finished runs are kept (a killed one resumes: `bbb train --resume`); writes OUT/ensembles.csv,
OUT/ensembles.md and OUT/members.csv (each run's own scores). Calibration: a regression's mean gap
between each central interval's level and the share of test targets inside it (eval.json's
``calibration_error``, levels 5-99%) and its sign (``coverage_bias``: above 0 too wide
intervals), a classifier's ECE (15 bins). Nothing is chosen on the test
splits: every setting is the table default (chosen on validation splits, docs/defaults.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

#: table -> (CSV file, target, task, extra `bbb train` options)
TABLES = {
    "yacht": ("yacht.csv", "resistance", "regression", []),
    "boston": ("boston.csv", "medv", "regression", []),
    "concrete": ("concrete.csv", "strength", "regression", []),
    "energy": ("energy.csv", "heating_load", "regression", []),
    "wine": ("wine.csv", "quality", "regression", []),
    "kin8nm": ("kin8nm.csv", "y", "regression", []),
    "mushroom (100 training rows)": ("mushroom.csv", "edible", "classification", ["--train-size", "100"]),
}
METHODS = ("bbb", "sgd", "dropout", "ivon")
#: the methods of the table: those trained, and ``laplace``, each sgd run's last-layer Laplace posterior
ROWS = (*METHODS, "laplace")
SEEDS = (0, 1, 2, 3, 4)


def stem(table: str) -> str:
    return table.split(" ")[0]


def train(runs: Path, table: str, method: str, seed: int) -> Path:
    file, target, task, extra = TABLES[table]
    return train_file(runs, stem(table), file, target, task, extra, method, seed)


def train_file(runs: Path, name: str, file: str, target: str, task: str, extra: list[str], method: str,
               seed: int) -> Path:
    """``bbb train`` of ``method`` at the table defaults on ``file`` into RUNS/NAME-METHOD-sSEED (kept
    once finished; a killed one resumes)."""
    out = runs / f"{name}-{method}-s{seed}"
    if not (out / "summary.json").exists():
        cmd = ["bbb", "train", "--csv", file, "--target", target, "--task", task, "--method", method,
               "--seed", str(seed), "--out", str(out), "--threads", "1", "--quiet", *extra]
        if (out / "config.json").exists():
            cmd.append("--resume")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def laplace(runs: Path, run: Path) -> Path:
    """The last-layer Laplace posterior of the sgd run ``run`` (its folder is kept once fitted)."""
    out = runs / run.name.replace("-sgd-", "-laplace-")
    if not (out / "eval.json").exists():
        subprocess.run(["bbb", "laplace", str(run), "--out", str(out), "--threads", "1"], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def coverage_bias(scores: dict) -> float | str:
    """A regression's mean over its central intervals of (share of targets inside - level):
    above 0 its intervals are too wide (underconfident), below too narrow; "" for a classifier."""
    cal = scores.get("interval_calibration")
    if cal is None:
        return ""
    from bbb.uncertainty import coverage_gap

    return coverage_gap(cal["levels"], cal["coverage"])["bias"]


def script_args(doc: str, script: str, runs: str, writes: str) -> argparse.Namespace:
    """The options of this folder's benchmark scripts (``script``: ensembles.py, ood.py): --runs
    (default ``runs``), --out (of ``writes``), --workers, --samples."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                epilog=f"Example: python results/your-data/{script} --runs {runs} "
                                       "--out results/your-data --workers 2",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default=runs, help=f"folder of the runs (default: {runs})")
    p.add_argument("--out", default=runs, help=f"output folder of {writes}")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once (default: 2)")
    p.add_argument("--samples", type=int, default=10, help="weight samples of each run (default: 10)")
    return p.parse_args()


def main() -> int:
    args = script_args(__doc__, "ensembles.py", "runs/ensembles", "ensembles.csv and .md")
    runs, out = Path(args.runs), Path(args.out)
    runs.mkdir(parents=True, exist_ok=True)
    jobs = [(t, m, s) for t in TABLES for m in METHODS for s in SEEDS]
    with ThreadPoolExecutor(args.workers) as pool:
        done = list(tqdm(pool.map(lambda j: train(runs, *j), jobs), total=len(jobs), desc="runs", file=sys.stderr))
        sgd = [d for d, (_, m, _) in zip(done, jobs) if m == "sgd"]
        fitted = list(tqdm(pool.map(lambda d: laplace(runs, d), sgd), total=len(sgd), desc="laplace",
                           file=sys.stderr))
    done += fitted
    jobs += [(t, "laplace", s) for t, m, s in jobs if m == "sgd"]
    rows, member_rows = [], []
    for table in TABLES:
        for method in ROWS:
            members = [d for d, (t, m, _) in zip(done, jobs) if t == table and m == method]
            ens = runs / f"{stem(table)}-{method}-ensemble"
            subprocess.run(["bbb", "evaluate", *map(str, members), "--out", str(ens), "--samples",
                            str(args.samples), "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
            r = json.loads((ens / "eval.json").read_text())
            regression = r["task"] == "regression"
            keys = (("test_rmse_mc", "log_likelihood", "calibration_error") if regression
                    else ("test_error_mc", "nll", "ece"))
            scores = [m[k] for m in r["member_scores"] for k in keys[:1]]
            for seed, m in zip(SEEDS, r["member_scores"]):
                member_rows.append({"table": table, "method": method, "seed": seed, "score": m[keys[0]],
                                    "fit": m[keys[1]], "calibration": m[keys[2]], "coverage_bias": coverage_bias(m)})
            rows.append({"table": table, "method": method, "members": len(members), "n_test": r["n"],
                         "score": "RMSE" if regression else "error",
                         "members_mean": r["member_mean"][keys[0]], "members_best": min(scores),
                         "members_worst": max(scores), "ensemble": r[keys[0]],
                         "fit": "log-likelihood" if regression else "NLL",
                         "members_mean_fit": r["member_mean"][keys[1]], "ensemble_fit": r[keys[1]],
                         "calibration": "interval gap" if regression else "ECE",
                         "members_mean_calibration": r["member_mean"][keys[2]],
                         "ensemble_calibration": r[keys[2]],
                         "members_mean_coverage_bias": (sum(coverage_bias(m) for m in r["member_scores"])
                                                        / len(r["member_scores"]) if regression else ""),
                         "ensemble_coverage_bias": coverage_bias(r)})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "ensembles.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(out / "members.csv", "w", newline="") as f:  # each run's own test scores (score: RMSE or error;
        w = csv.DictWriter(f, fieldnames=list(member_rows[0]))  # fit: log-likelihood or NLL, as ensembles.csv's)
        w.writeheader()
        w.writerows(member_rows)
    lines = ["| table (test rows) | method | test RMSE / error: members' mean (best, worst) | ensemble of 5 | "
             "log-likelihood / NLL: members' mean | ensemble of 5 | interval gap / ECE: members' mean | "
             "ensemble of 5 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pct = r["score"] == "error"
        fmt = (lambda v: f"{100 * v:.2f}%") if pct else (lambda v: f"{v:.3f}")
        lines.append(f"| {r['table']} ({r['n_test']}) | {r['method']} | {fmt(r['members_mean'])} "
                     f"({fmt(r['members_best'])}, {fmt(r['members_worst'])}) | {fmt(r['ensemble'])} | "
                     f"{r['members_mean_fit']:.3f} | {r['ensemble_fit']:.3f} | "
                     f"{100 * r['members_mean_calibration']:.1f}{' pp' if not pct else '%'} | "
                     f"{100 * r['ensemble_calibration']:.1f}{' pp' if not pct else '%'} |")
    (out / "ensembles.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
