"""Selection on validation, and the tables of ``bbb reproduce uci``.

The rule (also in results/uci/README.md): for each split, among every variant, checkpoint epoch
and noise scale, the one with the highest validation log-likelihood (mean over the validation
rows, in the target's units; ties: the first in the order variants x epochs x scales). The test
numbers of a split are read at that choice only.
"""

from __future__ import annotations

import csv
import math
import shlex
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ...io import atomic_write_csv, atomic_write_text
from .settings import VARIANTS

__all__ = ["Choice", "select", "select_variant", "summarise", "published", "write_tables", "TABLE_COLUMNS",
           "PUBLISHED_METHODS", "portable_command"]

#: the columns of table.csv (then the chosen settings)
TABLE_COLUMNS = ["dataset", "n_splits", "rmse_mean", "rmse_se", "ll_mean", "ll_se"]
#: the published methods (published.csv), in the order of the tables
PUBLISHED_METHODS = {"vi": "VI (Graves)", "pbp": "PBP", "mc_dropout": "MC dropout",
                     "deep_ensembles": "deep ensembles"}

Choice = tuple[str, int, float]  # (variant, epoch, noise scale)

#: the placeholder shown for a folder of the machine that ran a command, by option
PLACEHOLDERS = {"--out": "$OUT", "--data-dir": "$BBB_DATA"}


def _machine_path(arg: str) -> bool:
    """A folder of the machine, not of the repository: absolute, in a home, or above the checkout."""
    return arg.startswith(("/", "~", "..")) or "/../" in arg


def portable_command(command: str) -> tuple[str, list[str]]:
    """``command`` as a user runs it from a clone: a machine's folder (an absolute path, one in a
    home or above the checkout) becomes ``$OUT`` after ``--out``, ``$BBB_DATA`` after
    ``--data-dir`` and ``DIR`` elsewhere. Returns it and the placeholders used, e.g.
    ``portable_command("bbb reproduce uci --out /srv/u --data-dir /d")`` is
    ``("bbb reproduce uci --out $OUT --data-dir $BBB_DATA", ["$OUT", "$BBB_DATA"])``."""
    args = shlex.split(command)
    out: list[str] = []
    used: list[str] = []
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=") if a.startswith("--") else ("", "", "")
        if eq and _machine_path(value):
            ph = PLACEHOLDERS.get(flag, "DIR")
            out.append(f"{shlex.quote(flag)}={ph}")
        elif i and not a.startswith("-") and _machine_path(a):
            ph = PLACEHOLDERS.get(args[i - 1], "DIR")
            out.append(ph)
        else:
            out.append(shlex.quote(a))
            continue
        if ph.startswith("$") and ph not in used:
            used.append(ph)
    return " ".join(out), used


def _candidates(result: dict[str, Any], member: int, scales: Sequence[float] | None) -> list[tuple[float, int, float]]:
    """(validation LL, epoch, scale) of one member at every checkpoint and allowed scale."""
    out = []
    all_scales = result["noise_scales"]
    for e, sc in zip(result["epochs"], result["scores"]):
        for ci, c in enumerate(all_scales):
            if scales is None or c in scales:
                out.append((sc["ll"][member][ci], e, c))
    return out


def select_variant(val: dict[str, Any], split: int, scales: Sequence[float] | None = None) -> tuple[float, int, float]:
    """(best validation LL, epoch, scale) of one variant's validation job for ``split``."""
    j = val["splits"].index(split)
    cands = _candidates(val, j, scales)
    best = max(range(len(cands)), key=lambda i: (cands[i][0], -i))
    return cands[best]


def select(vals: dict[str, dict[str, Any]], split: int) -> Choice:
    """The split's choice over every variant (in :data:`VARIANTS` order), epoch and scale."""
    best: tuple[float, Choice] | None = None
    for v in VARIANTS:
        if v.name not in vals:
            continue
        ll, e, c = select_variant(vals[v.name], split)
        if best is None or ll > best[0]:
            best = (ll, (v.name, e, c))
    if best is None:
        raise ValueError(f"no validation result for split {split}")
    return best[1]


def _test_at(test: dict[str, Any], split: int, epoch: int, scale: float) -> tuple[float, float]:
    """(RMSE, LL) of a test job at one split, epoch and noise scale."""
    j = test["splits"].index(split)
    i = test["epochs"].index(epoch)
    sc = test["scores"][i]
    return sc["rmse"][j], sc["ll"][j][test["noise_scales"].index(scale)]


def _mean_se(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (population sd / sqrt(n), as PBP and MC dropout report)."""
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / n)
    return m, sd / math.sqrt(n)


def summarise(dataset: str, vals: dict[str, dict[str, Any]], tests: dict[str, dict[str, Any]],
              splits: Sequence[int]) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The dataset's row of table.csv, its rows per split and per variant (each variant at its
    own validation choice; ``learned-noise`` variants keep the noise as trained, scale 1)."""
    per_split = []
    for s in splits:
        name, e, c = select(vals, s)
        full = tests[name]["full"].get(f"{s}:{e}:{c:g}", {})
        rmse, ll = _test_at(tests[name], s, e, c)
        per_split.append({"dataset": dataset, "split": s, "variant": name, "epochs": e, "noise_scale": c,
                          "rmse": rmse, "ll": ll, **{k: full[k] for k in sorted(full) if k.startswith("coverage")},
                          "val_ll": select_variant(vals[name], s)[0]})
    rm, rse = _mean_se([r["rmse"] for r in per_split])
    lm, lse = _mean_se([r["ll"] for r in per_split])
    count = Counter(r["variant"] for r in per_split)
    row: dict[str, Any] = {"dataset": dataset, "n_splits": len(per_split), "rmse_mean": rm, "rmse_se": rse,
                           "ll_mean": lm, "ll_se": lse}
    for key in sorted({k for r in per_split for k in r if k.startswith("coverage")}):
        row[key] = sum(r.get(key, math.nan) for r in per_split) / len(per_split)
    row["variants"] = " ".join(f"{name}:{n}" for name, n in count.most_common())
    row["epochs_median"] = sorted(r["epochs"] for r in per_split)[len(per_split) // 2]
    row["noise_scale_median"] = sorted(r["noise_scale"] for r in per_split)[len(per_split) // 2]
    variants = []
    for v in VARIANTS:
        if v.name not in vals or v.name not in tests:
            continue
        for label, scales in ((v.name, [1.0]), (f"{v.name}+val-noise", None)):
            picks = [(s, *select_variant(vals[v.name], s, scales)[1:]) for s in splits]
            res = [_test_at(tests[v.name], s, e, c) for s, e, c in picks]
            a, ase = _mean_se([r[0] for r in res])
            b, bse = _mean_se([r[1] for r in res])
            variants.append({"dataset": dataset, "variant": label, "rmse_mean": a, "rmse_se": ase,
                             "ll_mean": b, "ll_se": bse})
    return row, per_split, variants


def published() -> dict[tuple[str, str, str], tuple[float, float]]:
    """(dataset, metric, method) -> (mean, +-) of the published tables (published.csv)."""
    text = resources.files(__package__).joinpath("published.csv").read_text()
    out = {}
    for r in csv.DictReader(text.splitlines()):
        out[(r["dataset"], r["metric"], r["method"])] = (float(r["mean"]), float(r["pm"]))
    return out


def _cell(value: tuple[float, float] | None) -> str:
    return "-" if value is None else f"{value[0]:.2f} +- {value[1]:.2f}"


def _markdown(rows: list[dict[str, Any]]) -> str:
    pub = published()
    lines = []
    for metric, title, better in (("rmse", "Test RMSE", "lower"), ("ll", "Test log-likelihood", "higher")):
        lines += [f"### {title} ({better} is better)", "",
                  "| dataset | bbb (this run) | " + " | ".join(PUBLISHED_METHODS.values()) + " |",
                  "|---|---|" + "---|" * len(PUBLISHED_METHODS)]
        for r in rows:
            ours = f"{r[f'{metric}_mean']:.2f} +- {r[f'{metric}_se']:.2f}"
            cells = [_cell(pub.get((r["dataset"], metric, k))) for k in PUBLISHED_METHODS]
            lines.append(f"| {r['dataset']} (n={r['n_splits']}) | {ours} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's targets counted on the datasets present: LL above MC dropout's and PBP's,
    RMSE at or below MC dropout's, LL within deep ensembles' +- or above."""
    pub = published()
    count = {"ll_above_mc_dropout": 0, "ll_above_pbp": 0, "rmse_at_or_below_mc_dropout": 0,
             "ll_within_or_above_deep_ensembles": 0, "datasets": len(rows)}
    for r in rows:
        d = r["dataset"]
        count["ll_above_mc_dropout"] += r["ll_mean"] > pub[(d, "ll", "mc_dropout")][0]
        count["ll_above_pbp"] += r["ll_mean"] > pub[(d, "ll", "pbp")][0]
        count["rmse_at_or_below_mc_dropout"] += round(r["rmse_mean"], 2) <= pub[(d, "rmse", "mc_dropout")][0]
        de, pm = pub[(d, "ll", "deep_ensembles")]
        count["ll_within_or_above_deep_ensembles"] += r["ll_mean"] >= de - pm
    return count


def write_tables(out: Path, rows: list[dict[str, Any]], splits: list[dict[str, Any]],
                 variants: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """table.csv / table.md, splits.csv, variants.csv (and the plot) under ``out``."""
    cols = TABLE_COLUMNS + [k for k in rows[0] if k not in TABLE_COLUMNS] if rows else TABLE_COLUMNS
    written = [atomic_write_csv(out / "table.csv", cols, rows)]
    split_cols = list(dict.fromkeys(k for r in splits for k in r))
    written.append(atomic_write_csv(out / "splits.csv", split_cols, splits))
    written.append(atomic_write_csv(out / "variants.csv", list(variants[0]) if variants else ["dataset"], variants))
    hit = targets(rows) if rows else {}
    command, used = portable_command(meta.get("command", ""))
    said = {"$OUT": "`$OUT`: the output folder", "$BBB_DATA": "`$BBB_DATA`: the data folder"}
    where = f" ({'; '.join(said[u] for u in used)})" if used else ""
    md = ["# bbb reproduce uci", "", f"Command, from the root of a clone: `{command}`{where}", "",
          f"Wall time: {meta.get('wall_seconds', 0) / 60:.1f} min ({meta.get('workers', 1)} worker(s); "
          f"training {meta.get('job_seconds', 0) / 60:.1f} worker-min)", "", _markdown(rows),
          "Targets counted on these datasets: " + ", ".join(f"{k} {v}" for k, v in hit.items()), ""]
    written.append(atomic_write_text(out / "table.md", "\n".join(md)))
    written += _plot(out, rows)
    return written


def _plot(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """table.png: our LL and RMSE against MC dropout's per dataset (differences / ratios)."""
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pub = published()
    names = [r["dataset"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = range(len(rows))
    for key, label in (("pbp", "PBP"), ("deep_ensembles", "deep ensembles"), ("bbb", "bbb")):
        dl = [(r["ll_mean"] if key == "bbb" else pub[(r["dataset"], "ll", key)][0])
              - pub[(r["dataset"], "ll", "mc_dropout")][0] for r in rows]
        rr = [(r["rmse_mean"] if key == "bbb" else pub[(r["dataset"], "rmse", key)][0])
              / max(pub[(r["dataset"], "rmse", "mc_dropout")][0], 1e-9) for r in rows]
        err = [r["ll_se"] for r in rows] if key == "bbb" else None
        axes[0].errorbar(list(x), dl, yerr=err, fmt="o", label=label)
        axes[1].plot(list(x), rr, "o", label=label)
    axes[0].axhline(0, color="k", lw=0.8)
    axes[1].axhline(1, color="k", lw=0.8)
    axes[0].set_ylabel("test LL minus MC dropout's (nats)")
    axes[1].set_ylabel("test RMSE / MC dropout's")
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "table.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
