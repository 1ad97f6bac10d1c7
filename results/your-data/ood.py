"""Rows from elsewhere on your own tables (results/your-data/README.md, "Rows from elsewhere"): does
a method's uncertainty tell rows unlike its training rows from its own test rows?

On each regression table of make_csvs.py: the input column with at least 10 distinct values most
correlated with the target (|Pearson r| over the whole table) decides; the rows whose value is above
its 80th percentile are held out (``TABLE-far.csv``, never trained on), the others
(``TABLE-near.csv``) are the table the runs train on (`bbb train` splits them 80/10/10 itself). Then
5 runs (seeds 0-4, the defaults for a table) of each method, Bayes by Backprop, the deterministic
network (`--method sgd`: 5 make a deep ensemble), MC dropout and IVON, a last-layer Laplace
posterior of each deterministic run, and `bbb ood RUN --ood-data TABLE-far.csv`: the AUROC with
which each run's predictive sd, and its epistemic sd (the sampled networks' spread; undefined for
one network), rank the held-out rows above the run's own test rows; the same for each method's
ensemble of 5 (`bbb ood RUN x 5 --ood-data ... --out DIR`). Nothing is chosen on the held-out rows
or the test splits: every setting is the table default (docs/defaults.md).

Usage, from a folder where make_csvs.py wrote the tables, with the `bbb` command installed:

    BBB_DATA=... python results/your-data/make_csvs.py
    python results/your-data/ood.py --runs runs/ood --out results/your-data --workers 2

Finished runs are kept (a killed one resumes); writes OUT/ood.csv (each method's members' mean and
sd and its ensemble's AUROC, per table), OUT/ood_members.csv (each run's) and OUT/ood.md.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from ensembles import METHODS, ROWS, SEEDS, laplace, script_args, train_file
from tqdm import tqdm

#: table -> (CSV file of make_csvs.py, target)
TABLES = {"yacht": ("yacht.csv", "resistance"), "boston": ("boston.csv", "medv"),
          "concrete": ("concrete.csv", "strength"), "energy": ("energy.csv", "heating_load"),
          "wine": ("wine.csv", "quality")}
#: the uncertainty scores of a regression's ood.json
SCORES = ("sd", "epistemic_sd")


def split_far(table: str, folder: Path) -> tuple[Path, Path, str, float]:
    """Write TABLE-near.csv and TABLE-far.csv (the rows above the 80th percentile of the column
    that decides); returns them, the column and the percentile."""
    file, target = TABLES[table]
    with open(file, newline="") as f:
        rows = list(csv.DictReader(f))
    y = np.array([float(r[target]) for r in rows])
    best: tuple[float, str, np.ndarray] | None = None
    for column in rows[0]:
        if column == target:
            continue
        x = np.array([float(r[column]) for r in rows])
        if len(set(x.tolist())) < 10:
            continue
        r = abs(float(np.corrcoef(x, y)[0, 1]))
        if best is None or r > best[0]:
            best = (r, column, x)
    assert best is not None
    _, column, x = best
    q = float(np.quantile(x, 0.8))
    near, far = folder / f"{table}-near.csv", folder / f"{table}-far.csv"
    for path, keep in ((near, x <= q), (far, x > q)):
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(r for r, k in zip(rows, keep) if k)
    return near, far, column, q


def ood(runs: list[Path], far: Path, out: Path | None, samples: int) -> dict:
    """``bbb ood`` of one run (its folder) or an ensemble (into ``out``); its ood.json's scores."""
    target = runs[0] if out is None else out
    if not (target / "ood.json").exists() or json.loads((target / "ood.json").read_text()).get("ood") != far.name:
        subprocess.run(["bbb", "ood", *map(str, runs), "--ood-data", str(far), "--samples", str(samples),
                        "--threads", "1", "--quiet", *(["--out", str(out)] if out is not None else [])],
                       check=True, stdout=subprocess.DEVNULL)
    return json.loads((target / "ood.json").read_text())


def main() -> int:
    args = script_args(__doc__, "ood.py", "runs/ood", "ood.csv and ood.md")
    runs, out = Path(args.runs), Path(args.out)
    runs.mkdir(parents=True, exist_ok=True)
    splits = {t: split_far(t, runs) for t in TABLES}
    jobs = [(t, m, s) for t in TABLES for m in METHODS for s in SEEDS]
    with ThreadPoolExecutor(args.workers) as pool:
        done = list(tqdm(pool.map(lambda j: train_file(runs, j[0], str(splits[j[0]][0]), TABLES[j[0]][1],
                                                       "regression", [], j[1], j[2]), jobs),
                         total=len(jobs), desc="runs", file=sys.stderr))
        sgd = [d for d, (_, m, _) in zip(done, jobs) if m == "sgd"]
        done += list(tqdm(pool.map(lambda d: laplace(runs, d), sgd), total=len(sgd), desc="laplace",
                          file=sys.stderr))
        jobs += [(t, "laplace", s) for t, m, s in jobs if m == "sgd"]
        scored = list(tqdm(pool.map(lambda dj: ood([dj[0]], splits[dj[1][0]][1], None, args.samples),
                                    zip(done, jobs)), total=len(jobs), desc="ood", file=sys.stderr))
        groups = [(t, m) for t in TABLES for m in ROWS]
        ensembles = list(tqdm(pool.map(
            lambda g: ood([d for d, (t, m, _) in zip(done, jobs) if (t, m) == g], splits[g[0]][1],
                          runs / f"{g[0]}-{g[1]}-ensemble", args.samples), groups),
            total=len(groups), desc="ensembles", file=sys.stderr))
    member_rows = [{"table": t, "method": m, "seed": s, "n_in": r["n_in"], "n_out": r["n_out"],
                    **{f"auroc_{k}": r["scores"][k]["auroc"] for k in SCORES}}
                   for (t, m, s), r in zip(jobs, scored)]
    rows = []
    for (table, method), ens in zip(groups, ensembles):
        mine = [r for r in member_rows if (r["table"], r["method"]) == (table, method)]
        row = {"table": table, "column": splits[table][2], "above": splits[table][3], "n_in": mine[0]["n_in"],
               "n_out": mine[0]["n_out"], "method": method}
        for k in SCORES:
            vals = [r[f"auroc_{k}"] for r in mine if r[f"auroc_{k}"] is not None]
            row[f"members_mean_{k}"] = statistics.mean(vals) if vals else None
            row[f"members_sd_{k}"] = statistics.stdev(vals) if len(vals) > 1 else None
            row[f"ensemble_{k}"] = ens["scores"][k]["auroc"]
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    for name, table_rows in (("ood.csv", rows), ("ood_members.csv", member_rows)):
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table_rows[0]))
            w.writeheader()
            w.writerows(table_rows)

    def fmt(mean: float | None, sd: float | None = None) -> str:
        return "-" if mean is None else f"{mean:.3f}" + ("" if sd is None else f" +- {sd:.3f}")

    lines = ["Written by `python results/your-data/ood.py` (results/your-data/README.md, \"Rows from elsewhere\"): the "
             "AUROC with which each score ranks the held-out rows above the run's own test rows.", "",
             "| table: held out (test rows, held-out rows) | method | AUROC by predictive sd: members (5) | "
             "ensemble of 5 | AUROC by epistemic sd: members (5) | ensemble of 5 |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['table']}: {r['column']} > {r['above']:g} ({r['n_in']}, {r['n_out']}) | {r['method']} | "
                     f"{fmt(r['members_mean_sd'], r['members_sd_sd'])} | {fmt(r['ensemble_sd'])} | "
                     f"{fmt(r['members_mean_epistemic_sd'], r['members_sd_epistemic_sd'])} | "
                     f"{fmt(r['ensemble_epistemic_sd'])} |")
    (out / "ood.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
