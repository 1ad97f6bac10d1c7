"""The seed spread of ``bbb reproduce uci`` (``--seed-runs``): how far each method's table entry
moves when only ``--seed`` changes.

Each run (this one and the folders named) holds methods.csv: per dataset and method, the test RMSE
and log-likelihood averaged over the splits. For each (dataset, method, number of splits) that
every run holds: the mean of those averages over the runs and their sample standard deviation over
the seeds. A difference between two methods smaller than about twice that deviation is within
what the seed alone moves. The runs must share the protocol (the settings in
:data:`PROTOCOL_KEYS`) and differ in their seed.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...io import atomic_write_csv, atomic_write_text
from .report import OUR_METHODS

__all__ = ["SEED_COLUMNS", "PROTOCOL_KEYS", "read_seed_run", "with_splits", "seed_spread", "seed_runs",
           "write_seed_spread"]

#: the columns of seeds.csv
SEED_COLUMNS = ["dataset", "method", "n_splits", "seeds", "rmse_mean", "rmse_sd", "ll_mean", "ll_sd",
                "rmse_by_seed", "ll_by_seed", "calibration_gap_mean", "calibration_gap_sd", "calibration_gap_by_seed"]
#: the settings (run.json's config) that runs compared by seed must share
PROTOCOL_KEYS = ("budget", "samples", "adversarial_eps", "hidden", "hidden_overrides", "noise_init")


def read_seed_run(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``folder``'s configuration (run.json) and its rows of methods.csv (the scores as floats);
    a folder without them is a one-line :class:`~bbb.errors.UserError`."""
    meta, table = folder / "run.json", folder / "methods.csv"
    if not meta.is_file() or not table.is_file():
        raise UserError(f"--seed-runs: {folder} holds no finished bbb reproduce uci run (run.json and "
                        f"methods.csv); run `bbb reproduce uci --report --out {folder}` first")
    try:
        config = json.loads(meta.read_text())["config"]
        config = {**config, "seed": int(config["seed"])}
        with table.open(newline="") as f:
            rows = [{"dataset": r["dataset"], "method": r["method"], "n_splits": int(r["n_splits"]),
                     "rmse_mean": float(r["rmse_mean"]), "ll_mean": float(r["ll_mean"]),
                     # (a run reported before the intervals' gap was written has none)
                     **({"calibration_gap": float(r["calibration_gap"])} if r.get("calibration_gap") else {})}
                    for r in csv.DictReader(f)]
        rows = with_splits(folder, rows)
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"--seed-runs: {folder}'s run.json, methods.csv or splits.csv cannot be read ({e!r}); "
                        f"rerun `bbb reproduce uci --report --out {folder}`") from None
    return config, rows


def with_splits(folder: Path, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (methods.csv's) with the splits each averages over (``splits``: ascending,
    space-separated), read from ``folder``'s splits.csv; a row stays without them where the
    folder has no splits.csv."""
    table = folder / "splits.csv"
    if not table.is_file():
        return [dict(r) for r in rows]
    held: dict[tuple[str, str], list[int]] = {}
    with table.open(newline="") as f:
        for r in csv.DictReader(f):
            held.setdefault((r["dataset"], r["method"]), []).append(int(r["split"]))
    return [{**r, **({"splits": " ".join(map(str, sorted(held[k])))} if (k := (r["dataset"], r["method"])) in held
                     else {})} for r in rows]


def seed_spread(runs: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """``runs``: seed -> methods.csv rows. One row per (dataset, method, n_splits) held by every
    run over the same splits (a row's ``splits``, where the runs give them), in the first run's
    order: mean and sample sd over the seeds of ``rmse_mean`` and
    ``ll_mean`` (and of ``calibration_gap`` where every run has it), and the values by seed (seeds
    ascending)."""
    if len(runs) < 2:
        raise UserError(f"the seed spread needs runs of 2 or more seeds, got {len(runs)}")
    keyed = {s: {(r["dataset"], r["method"], int(r["n_splits"])): r for r in rows} for s, rows in runs.items()}
    seeds = sorted(keyed)
    first = next(iter(keyed.values()))
    out = []
    for key in first:
        if not all(key in keyed[s] for s in seeds):
            continue
        if len({keyed[s][key].get("splits") for s in seeds} - {None}) > 1:  # other splits: not the seed alone
            continue
        rmse = [float(keyed[s][key]["rmse_mean"]) for s in seeds]
        ll = [float(keyed[s][key]["ll_mean"]) for s in seeds]
        out.append({"dataset": key[0], "method": key[1], "n_splits": key[2], "seeds": " ".join(map(str, seeds)),
                    "rmse_mean": statistics.fmean(rmse), "rmse_sd": statistics.stdev(rmse),
                    "ll_mean": statistics.fmean(ll), "ll_sd": statistics.stdev(ll),
                    "rmse_by_seed": " ".join(f"{v:.4f}" for v in rmse),
                    "ll_by_seed": " ".join(f"{v:.4f}" for v in ll)})
        if all("calibration_gap" in keyed[s][key] for s in seeds):  # every run's intervals: their gap too
            gap = [float(keyed[s][key]["calibration_gap"]) for s in seeds]
            out[-1].update({"calibration_gap_mean": statistics.fmean(gap), "calibration_gap_sd": statistics.stdev(gap),
                            "calibration_gap_by_seed": " ".join(f"{v:.4f}" for v in gap)})
    return out


def seed_runs(config: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
              folders: Sequence[Path]) -> list[dict[str, Any]]:
    """This run (its run.json ``config`` and methods.csv ``rows``) beside the finished runs in
    ``folders``: :func:`seed_spread` of them all, after checking that they share the protocol and
    that no seed comes twice."""
    runs: dict[int, Sequence[Mapping[str, Any]]] = {int(config["seed"]): rows}
    for folder in folders:
        other, other_rows = read_seed_run(folder)
        for k in PROTOCOL_KEYS:
            if other.get(k) != config.get(k):
                raise UserError(f"--seed-runs: {folder} ran with {k}={other.get(k)!r}, this run with "
                                f"{config.get(k)!r}: a seed spread compares runs that differ only in --seed")
        seed = other["seed"]
        if seed in runs:
            raise UserError(f"--seed-runs: {folder} ran with --seed {seed}, as another of the runs; give runs "
                            "of different seeds")
        runs[seed] = other_rows
    spread = seed_spread(runs)
    if not spread:
        raise UserError("--seed-runs: no dataset and method with the same splits is finished in every run; "
                        "compare runs of the same --datasets and --splits")
    return spread


def write_seed_spread(out: Path, spread: list[dict[str, Any]], command: str = "") -> list[Path]:
    """seeds.csv and seeds.md under ``out``; seeds.md opens with ``command``, the ``--report``
    that writes them again from the finished runs."""
    seeds = spread[0]["seeds"] if spread else ""
    md = ["# The seed spread", "", *([f"Command: `{command}`", ""] if command else []),
          f"Runs of `bbb reproduce uci` that differ only in `--seed` ({seeds}): each method's test score "
          "averaged over the splits, then its mean and standard deviation (sd) over the seeds (the interval "
          "gap: the mean |coverage - level| of the central 50/90/95% intervals, methods.csv's "
          "`calibration_gap`). A difference between two methods below about twice the sd is "
          "within what the seed alone moves.", "",
          "| dataset | method | splits | test RMSE: mean (sd) | test LL: mean (sd) | RMSE by seed | LL by seed |"
          " interval gap, points: mean (sd) | gap by seed |",
          "|---|---|---|---|---|---|---|---|---|"]

    def gap(r: Mapping[str, Any]) -> str:
        if "calibration_gap_mean" not in r:
            return "- | -"
        return (f"{100 * r['calibration_gap_mean']:.2f} ({100 * r['calibration_gap_sd']:.2f}) | "
                + " ".join(f"{100 * float(v):.2f}" for v in r["calibration_gap_by_seed"].split()))

    md += [f"| {r['dataset']} | {OUR_METHODS.get(r['method'], r['method'])} | {r['n_splits']} | "
           f"{r['rmse_mean']:.3f} ({r['rmse_sd']:.3f}) | {r['ll_mean']:.3f} ({r['ll_sd']:.3f}) | "
           f"{r['rmse_by_seed']} | {r['ll_by_seed']} | {gap(r)} |" for r in spread]
    return [atomic_write_csv(out / "seeds.csv", SEED_COLUMNS, spread),
            atomic_write_text(out / "seeds.md", "\n".join(md) + "\n")]
