"""Selection on validation, and the tables of ``bbb reproduce uci``.

The rule (also in results/uci/README.md), the same for every method: for each split, among the
method's variants, their grid points, checkpoint epochs and noise scales, the one with the
highest validation log-likelihood (mean over the validation rows, in the target's units; ties:
the first in the order variants x grid x epochs x scales). The test numbers of a split are read
at that choice only.
"""

from __future__ import annotations

import csv
import math
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

from ...data.uci import UCI_DATASETS
from ...io import atomic_write_csv, atomic_write_text
from ..ties import nan_worst, same_score
from .settings import VARIANTS, UCIConfig, UCIMethod, Variant

__all__ = ["Choice", "select", "select_variant", "summarise", "published", "write_tables", "TABLE_COLUMNS",
           "PUBLISHED_METHODS", "OUR_METHODS", "portable_command", "training_command", "by_method", "head_to_head",
           "targets", "coverage_levels", "calibration", "gap_terms", "RESULT_OPTIONS"]

#: the columns of table.csv (then the chosen settings)
TABLE_COLUMNS = ["dataset", "n_splits", "rmse_mean", "rmse_se", "ll_mean", "ll_se"]
#: the published methods (published.csv), in the order of the tables
PUBLISHED_METHODS = {"vi": "VI (Graves)", "pbp": "PBP", "mc_dropout": "MC dropout",
                     "deep_ensembles": "deep ensembles"}

Choice = tuple[str, int, int, float]  # (variant, grid point, epoch, noise scale)

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
            portable = (*PLACEHOLDERS.values(), "DIR")
            out.append(a if a in portable or (eq and value in portable) else shlex.quote(a))  # already portable
            continue
        if ph.startswith("$") and ph not in used:
            used.append(ph)
    return " ".join(out), used


#: the run.json settings that are options of ``bbb reproduce uci`` and change a result, by option
RESULT_OPTIONS = {"budget": "--budget", "samples": "--samples", "adversarial_eps": "--adversarial-eps",
                   "seed": "--seed"}
#: the run.json settings a command cannot set (the protocol's network and noise)
_FIXED = ("hidden", "hidden_overrides", "noise_init")


def training_command(config: Mapping[str, Any], datasets: Sequence[str]) -> str | None:
    """The one ``bbb reproduce uci`` command that trains ``datasets`` as run.json's ``config``
    did, or None when ``config`` holds a setting no option sets. A split's rows do not depend on
    what trains beside it, so this command gives the rows of a folder filled by several
    invocations, a dataset at a time (what ``--report`` shows). Options at their default are left
    out; ``--workers`` and ``--threads`` are kept (they change the time, not a digit)."""
    base = UCIConfig()

    def plain(v: Any) -> Any:
        return [plain(x) for x in v] if isinstance(v, list) else v.value if isinstance(v, Enum) else v

    if any(config.get(k, getattr(base, k)) != getattr(base, k) for k in _FIXED):
        return None
    args = ["bbb", "reproduce", "uci"]
    if list(datasets) != list(UCI_DATASETS):
        args += ["--datasets", *datasets]
    if config.get("splits") is not None:
        args += ["--splits", *map(str, config["splits"])]
    methods = plain(list(config.get("methods", base.methods)))
    if methods != plain(base.methods):
        args += ["--methods", ",".join(methods)]
    for key, flag in RESULT_OPTIONS.items():
        value = plain(config.get(key, getattr(base, key)))
        if value != plain(getattr(base, key)):
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    args += ["--out", str(config.get("out", base.out))]
    for key in ("workers", "threads"):
        if config.get(key, 1) != 1:
            args += [f"--{key}", str(config[key])]
    if config.get("data_dir"):
        args += ["--data-dir", str(config["data_dir"])]
    return shlex.join(args)


def _candidates(result: dict[str, Any], split: int,
                scales: Sequence[float] | None) -> list[tuple[float, int, int, float]]:
    """(validation LL, grid point, epoch, scale) of every member of ``split`` in one validation
    job, at every checkpoint and allowed scale, in the order grid x epochs x scales."""
    out = []
    all_scales = result["noise_scales"]
    members = result.get("members") or [[s, 0] for s in result["splits"]]
    for j, (s, g) in enumerate(members):
        if s != split:
            continue
        for e, sc in zip(result["epochs"], result["scores"]):
            for ci, c in enumerate(all_scales):
                if scales is None or c in scales:
                    out.append((sc["ll"][j][ci], g, e, c))
    return out


def _rank(ll: float) -> float:
    """A validation LL as selection compares it: NaN (a diverged network) below every number."""
    return nan_worst(ll, higher_is_better=True)


def select_variant(val: dict[str, Any], split: int,
                   scales: Sequence[float] | None = None) -> tuple[float, int, int, float]:
    """(best validation LL, grid point, epoch, scale) of one variant's validation job for
    ``split``; ties go to the first in the order grid x epochs x scales; a NaN LL is never
    chosen over a number."""
    cands = _candidates(val, split, scales)
    if not cands:
        raise ValueError(f"no validation result for split {split}")
    best = max(range(len(cands)), key=lambda i: (_rank(cands[i][0]), -i))
    return cands[best]


def select(vals: dict[str, dict[str, Any]], split: int, variants: Sequence[Variant] = VARIANTS) -> Choice:
    """The split's choice over ``variants`` (one method's, in :data:`VARIANTS` order), their grid
    points, epochs and scales: the highest validation log-likelihood, the first on ties (NaN
    the lowest)."""
    best: tuple[float, Choice] | None = None
    for v in variants:
        if v.name not in vals or split not in vals[v.name]["splits"]:  # (a BBB ensemble's variant: some splits)
            continue
        ll, g, e, c = select_variant(vals[v.name], split)
        if best is None or _rank(ll) > _rank(best[0]):
            best = (ll, (v.name, g, e, c))
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
    """Mean and standard error (population sd / sqrt(n), as PBP and MC dropout report); the error
    of one value is unknown (NaN), not 0."""
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / n)
    return m, sd / math.sqrt(n)


def summarise(dataset: str, vals: dict[str, dict[str, Any]], tests: dict[str, dict[str, Any]],
              splits: Sequence[int], variants: Sequence[Variant] = VARIANTS,
              ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """One method's row of the tables for ``dataset`` (its ``variants``), its rows per split and
    per variant (each variant at its own validation choice; none for a BBB ensemble's variants,
    which BBB's validation chose, each on its own splits)."""
    method = variants[0].method.value if variants else ""
    grids = {v.name: v.grid for v in variants}
    per_split = []
    for s in splits:
        name, g, e, c = select(vals, s, variants)
        full = tests[name]["full"].get(f"{s}:{e}:{c:g}", {})
        rmse, ll = _test_at(tests[name], s, e, c)
        per_split.append({"dataset": dataset, "method": method, "split": s, "variant": name,
                          "setting": grids[name][g].label(), "epochs": e, "noise_scale": c, "rmse": rmse, "ll": ll,
                          **{k: full[k] for k in sorted(full) if k.startswith("coverage")},
                          "val_ll": select_variant(vals[name], s)[0]})
    rm, rse = _mean_se([r["rmse"] for r in per_split])
    lm, lse = _mean_se([r["ll"] for r in per_split])
    count = Counter(r["variant"] for r in per_split)
    row: dict[str, Any] = {"dataset": dataset, "n_splits": len(per_split), "rmse_mean": rm, "rmse_se": rse,
                           "ll_mean": lm, "ll_se": lse}
    for key in sorted({k for r in per_split for k in r if k.startswith("coverage")}):
        row[key] = sum(r.get(key, math.nan) for r in per_split) / len(per_split)
    row["variants"] = " ".join(f"{name}:{n}" for name, n in count.most_common())
    row["settings"] = " ".join(f"{lab.replace(' ', ',')}:{n}"
                               for lab, n in Counter(r["setting"] for r in per_split).most_common(3))
    row["epochs_median"] = sorted(r["epochs"] for r in per_split)[len(per_split) // 2]
    row["noise_scale_median"] = sorted(r["noise_scale"] for r in per_split)[len(per_split) // 2]
    row["seconds"] = round(sum(vals[v.name].get("seconds", 0.0) + tests[v.name].get("seconds", 0.0)
                               for v in variants if v.name in vals and v.name in tests), 1)
    row.update(calibration(row))
    terms = gap_terms(row, per_split)
    if "calibration_gap" in row and len(terms) > 1 and all(math.isfinite(t) for t in terms):
        row["calibration_gap_se"] = _mean_se(terms)[1]
    row["method"] = method
    rows_v = []
    for v in variants:
        if v.name not in vals or v.name not in tests or v.of:  # a BBB ensemble's variant is BBB's choice, not its
            continue
        res = [_test_at(tests[v.name], s, *select_variant(vals[v.name], s)[2:]) for s in splits]
        a, ase = _mean_se([r[0] for r in res])
        b, bse = _mean_se([r[1] for r in res])
        rows_v.append({"dataset": dataset, "method": method, "variant": v.name, "rmse_mean": a, "rmse_se": ase,
                       "ll_mean": b, "ll_se": bse})
    return row, per_split, rows_v


def coverage_levels(row: Mapping[str, Any]) -> dict[float, float]:
    """{level: share of the test targets inside the central interval} of a row's ``coverage_NN``
    columns (the split means of the harness's 50, 90 and 95% intervals), in the levels' order."""
    found = {float(k.removeprefix("coverage_")) / 100: float(v) for k, v in row.items()
             if k.startswith("coverage_") and k.removeprefix("coverage_").isdigit() and v not in ("", None)}
    return dict(sorted(found.items()))


def calibration(row: Mapping[str, Any]) -> dict[str, float]:
    """``calibration_gap`` and ``coverage_bias`` of a method's row: :func:`bbb.uncertainty.coverage_gap`
    of its split-mean coverages (the intervals' systematic miscalibration; a split's own gap, on a
    small test set, would add its sampling noise); none without coverages."""
    from ...uncertainty.regression import coverage_gap

    cov = coverage_levels(row)
    if not cov or not all(math.isfinite(c) for c in cov.values()):
        return {}
    gap = coverage_gap(cov, cov.values())
    return {"calibration_gap": gap["error"], "coverage_bias": gap["bias"]}


def gap_terms(row: Mapping[str, Any], split_rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each split's term of a method's calibration gap (``row``: its split means, ``split_rows``:
    its splits): the mean over the levels of sign(mean coverage - level) x (the split's coverage
    - level). Their mean is the gap exactly, so their standard error is the gap's (the delta
    method), and two methods' terms pair by split."""
    mean = coverage_levels(row)
    signs = {v: (c > v) - (c < v) for v, c in mean.items()}
    out = []
    for r in split_rows:
        cov = coverage_levels(r)
        if set(cov) != set(signs):
            return []
        out.append(sum(signs[v] * (c - v) for v, c in cov.items()) / len(cov))
    return out


def published() -> dict[tuple[str, str, str], tuple[float, float]]:
    """(dataset, metric, method) -> (mean, +-) of the published tables (published.csv)."""
    text = resources.files(__package__).joinpath("published.csv").read_text()
    out = {}
    for r in csv.DictReader(text.splitlines()):
        out[(r["dataset"], r["metric"], r["method"])] = (float(r["mean"]), float(r["pm"]))
    return out


def decimals_for(pm: float) -> int:
    """The decimals that show ``pm`` (a standard error) to two significant digits: at least 2 (a
    dataset's scale of tenths), at most 6 (a target in thousandths still shows its digits)."""
    if not pm > 0 or not math.isfinite(pm):
        return 2
    return min(6, max(2, 1 - math.floor(math.log10(pm))))


def cell(value: tuple[float, float] | None, bold: bool = False, decimals: int | None = None) -> str:
    """``mean +- pm`` to ``decimals`` (by default those of :func:`decimals_for`); the mean alone
    where ``pm`` is unknown (NaN: one split); ``-`` for none; in bold for the best of ours."""
    if value is None:
        return "-"
    d = decimals_for(value[1]) if decimals is None else decimals
    text = f"{value[0]:.{d}f}" + (f" +- {value[1]:.{d}f}" if not math.isnan(value[1]) else "")
    return f"**{text}**" if bold else text


#: our methods in the tables, by :class:`UCIMethod` value
OUR_METHODS = {UCIMethod.BBB.value: "bbb", UCIMethod.MC_DROPOUT.value: "MC dropout (ours)",
               UCIMethod.DEEP_ENSEMBLE.value: "deep ens. (ours)", UCIMethod.LAPLACE.value: "last-layer Laplace (ours)",
               UCIMethod.BBB_ENSEMBLE.value: "5 x bbb (ours)", UCIMethod.IVON.value: "IVON (ours)"}


def by_method(method_rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """method -> dataset -> row."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in method_rows:
        out.setdefault(r["method"], {})[r["dataset"]] = r
    return out


def _markdown(method_rows: list[dict[str, Any]]) -> str:
    pub = published()
    ours = by_method(method_rows)
    names = [m for m in OUR_METHODS if m in ours]
    datasets = list(dict.fromkeys(r["dataset"] for r in method_rows))
    lines = []
    for metric, title, better in (("rmse", "Test RMSE", "lower"), ("ll", "Test log-likelihood", "higher")):
        lines += [f"### {title} ({better} is better)", "",
                  "| dataset | " + " | ".join(OUR_METHODS[m] for m in names) + " | "
                  + " | ".join(f"{v} (published)" for v in PUBLISHED_METHODS.values()) + " |",
                  "|---|" + "---|" * (len(names) + len(PUBLISHED_METHODS))]
        for d in datasets:
            means = {m: ours[m][d][f"{metric}_mean"] for m in names if d in ours[m]}
            best = (min if metric == "rmse" else max)(means.values()) if len(means) > 1 else None
            cells = [cell((means[m], ours[m][d][f"{metric}_se"]), bold=best is not None and same_score(means[m], best))
                     if m in means else "-"
                     for m in names]
            cells += [cell(pub.get((d, metric, k)), decimals=2) for k in PUBLISHED_METHODS]  # as published
            n = next(ours[m][d]["n_splits"] for m in names if d in ours[m])
            lines.append(f"| {d} (n={n}) | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines + _coverage_markdown(ours, names, datasets))


def _coverage_markdown(ours: dict[str, dict[str, dict[str, Any]]], names: list[str], datasets: list[str]) -> list[str]:
    """The intervals' table: each method's split-mean coverage of the 50/90/95% intervals and its
    calibration gap (the smallest of ours in bold) and bias; none without coverages."""
    rows = {(m, d): ours[m][d] for m in names for d in datasets if "calibration_gap" in ours[m].get(d, {})}
    if not rows:
        return []
    levels = next(iter(coverage_levels(r) for r in rows.values()))
    said = " / ".join(f"{100 * v:g}" for v in levels)
    lines = [f"### Interval coverage (% of test targets inside the central {said}% intervals, split means; "
             "gap: mean |coverage - level| in points, lower is better, +- its standard error over the splits; then "
             "the mean of coverage - level: + too wide, - too narrow)", "",
             "| dataset | " + " | ".join(OUR_METHODS[m] for m in names) + " |", "|---|" + "---|" * len(names)]
    for d in datasets:
        gaps = {m: rows[(m, d)]["calibration_gap"] for m in names if (m, d) in rows}
        if not gaps:
            continue
        cells = []
        for m in names:
            if (m, d) not in rows:
                cells.append("-")
                continue
            r = rows[(m, d)]
            gap = f"{100 * r['calibration_gap']:.1f}"
            gap = f"**{gap}**" if len(gaps) > 1 and same_score(gaps[m], min(gaps.values())) else gap
            se = f" +- {100 * r['calibration_gap_se']:.1f}" if "calibration_gap_se" in r else ""
            cells.append(" / ".join(f"{100 * c:.0f}" for c in coverage_levels(r).values())
                         + f" (gap {gap}{se}, {100 * r['coverage_bias']:+.1f})")
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return lines + [""]


def _above(a: float, b: float) -> bool:
    """``a > b``, where the two are not one value (:func:`bbb.experiments.ties.same_score`)."""
    return a > b and not same_score(a, b)


def head_to_head(method_rows: list[dict[str, Any]]) -> dict[str, int]:
    """On how many datasets BBB's mean test LL is above, its RMSE below and its intervals' calibration
    gap below each of our other methods' (the datasets both have; the gap where both rows have it;
    one value, :func:`bbb.experiments.ties.same_score`, is neither above nor below)."""
    ours = by_method(method_rows)
    bbb = ours.get(UCIMethod.BBB.value, {})
    out: dict[str, int] = {}
    for m in (UCIMethod.MC_DROPOUT.value, UCIMethod.DEEP_ENSEMBLE.value, UCIMethod.LAPLACE.value,
              UCIMethod.BBB_ENSEMBLE.value, UCIMethod.IVON.value):
        both = [d for d in bbb if d in ours.get(m, {})]
        if not both:
            continue
        out[f"datasets_vs_{m}"] = len(both)
        out[f"ll_above_{m}"] = sum(_above(bbb[d]["ll_mean"], ours[m][d]["ll_mean"]) for d in both)
        out[f"rmse_below_{m}"] = sum(_above(ours[m][d]["rmse_mean"], bbb[d]["rmse_mean"]) for d in both)
        if all("calibration_gap" in bbb[d] and "calibration_gap" in ours[m][d] for d in both):
            out[f"calibration_gap_below_{m}"] = sum(_above(ours[m][d]["calibration_gap"], bbb[d]["calibration_gap"])
                                                    for d in both)
    return out


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
                 variants: list[dict[str, Any]], meta: dict[str, Any],
                 method_rows: list[dict[str, Any]] | None = None) -> list[Path]:
    """table.csv (BBB's rows), methods.csv (every method's), table.md, splits.csv, variants.csv
    and the plot under ``out``."""
    method_rows = rows if method_rows is None else method_rows
    cols = TABLE_COLUMNS + [k for k in rows[0] if k not in TABLE_COLUMNS] if rows else TABLE_COLUMNS
    written = [atomic_write_csv(out / "table.csv", cols, rows)]
    mcols = ["method"] + TABLE_COLUMNS + [k for r in method_rows[:1] for k in r if k not in TABLE_COLUMNS
                                          and k != "method"]
    written.append(atomic_write_csv(out / "methods.csv", mcols, method_rows))
    split_cols = list(dict.fromkeys(k for r in splits for k in r))
    written.append(atomic_write_csv(out / "splits.csv", split_cols, splits))
    written.append(atomic_write_csv(out / "variants.csv", list(variants[0]) if variants else ["dataset"], variants))
    hit = targets(rows) if rows else {}
    command, used = portable_command(meta.get("command", ""))
    said = {"$OUT": "`$OUT`: the output folder", "$BBB_DATA": "`$BBB_DATA`: the data folder"}
    where = f" ({'; '.join(said[u] for u in used)})" if used else ""
    times = by_method(method_rows)
    per = ", ".join(f"{OUR_METHODS.get(m, m)} {sum(r.get('seconds', 0.0) for r in t.values()) / 60:.1f}"
                    for m, t in times.items())
    env = ("; every digit with `ATEN_CPU_CAPABILITY=default` in the environment, as it ran"
           if meta.get("cpu_capability") == "DEFAULT" else "")
    wall, before = meta.get("wall_seconds"), meta.get("wall_seconds_before")  # (before: earlier invocations)
    over = "unknown (no run.json)" if wall is None else f"{(wall + (before or 0.0)) / 60:.1f} min" + (
        f" in all its invocations ({wall / 60:.1f} min the last)" if before is not None else "")
    md = ["# bbb reproduce uci", "", f"Command, from the root of a clone: `{command}`{where}{env}", "",
          f"Wall time: {over} (" + (f"{meta['workers']} worker(s); " if "workers" in meta else "") +
          f"training {meta.get('job_seconds', 0) / 60:.1f} worker-min" + (f": {per}" if per else "") + ")", "",
          _markdown(method_rows) if method_rows else "",
          "Targets counted on these datasets (BBB against the published columns): "
          + ", ".join(f"{k} {v}" for k, v in hit.items()), "",
          "BBB against our own baselines (one protocol): "
          + (", ".join(f"{k} {v}" for k, v in head_to_head(method_rows).items()) or "-"), ""]
    written.append(atomic_write_text(out / "table.md", "\n".join(md)))
    written += _plot(out, rows, method_rows)
    return written


def _plot(out: Path, rows: list[dict[str, Any]], method_rows: list[dict[str, Any]]) -> list[Path]:
    """table.png: each method's test LL and RMSE against the published MC dropout's per dataset
    (differences / ratios): the published columns and our methods."""
    if not method_rows:
        return []
    from ...plots import figures, save_png

    plt = figures()  # Agg figures, no pyplot: the caller's backend stays; None without matplotlib (warned)
    if plt is None:
        return []
    pub = published()
    names = list(dict.fromkeys(r["dataset"] for r in method_rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = range(len(names))
    ours = by_method(method_rows)
    for key, label in (("pbp", "PBP (published)"), ("deep_ensembles", "deep ensembles (published)")):
        dl = [pub[(d, "ll", key)][0] - pub[(d, "ll", "mc_dropout")][0] for d in names]
        rr = [pub[(d, "rmse", key)][0] / max(pub[(d, "rmse", "mc_dropout")][0], 1e-9) for d in names]
        axes[0].plot(list(x), dl, "x", color="0.6" if key == "pbp" else "0.3", label=label)
        axes[1].plot(list(x), rr, "x", color="0.6" if key == "pbp" else "0.3", label=label)
    for m, label in OUR_METHODS.items():
        if m not in ours:
            continue
        got = [ours[m].get(d) for d in names]
        xs = [i for i, r in enumerate(got) if r is not None]
        dl = [got[i]["ll_mean"] - pub[(names[i], "ll", "mc_dropout")][0] for i in xs]  # type: ignore[index]
        rr = [got[i]["rmse_mean"] / max(pub[(names[i], "rmse", "mc_dropout")][0], 1e-9) for i in xs]  # type: ignore[index]
        axes[0].errorbar(xs, dl, yerr=[got[i]["ll_se"] for i in xs], fmt="o", label=label)  # type: ignore[index]
        axes[1].plot(xs, rr, "o", label=label)
    axes[0].axhline(0, color="k", lw=0.8)
    axes[1].axhline(1, color="k", lw=0.8)
    axes[0].set_ylabel("test LL minus MC dropout's (nats)")
    axes[1].set_ylabel("test RMSE / MC dropout's")
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = save_png(fig, out / "table.png", dpi=110)  # atomically
    plt.close(fig)
    return [path]
