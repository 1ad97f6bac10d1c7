"""The tables of ``bbb reproduce fashion``: each method's mean and standard error over seeds
(methods.csv), every seed's row (seeds.csv), the validation grids (sweep.csv), table.md with the
published rows beside ours, and table.png. The ensembles are scored here, from their members'
saved predictive probabilities."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ...io import atomic_write_csv, atomic_write_text
from .settings import (
    ENSEMBLE_OF,
    ENSEMBLE_SIZE,
    PUBLISHED,
    SCHEDULES,
    FashionBudget,
    FashionConfig,
    Phase,
    Setting,
    ensemble_member_seed,
)
from .train import Job, scores

__all__ = ["ensemble_rows", "method_rows", "write_report", "METRICS", "LABELS"]

METRICS = ("acc", "nll", "ece", "brier", "ood_auroc", "seconds_per_epoch")
LABELS = {"adamw": "AdamW", "ivon": "IVON (bbb.IVON)", "ivon_opt": "IVON (ivon-opt 0.1.3)",
          "bbb": "Bayes by Backprop (bbb)", "mc_dropout": "MC dropout", "ensemble": f"deep ensemble of {ENSEMBLE_SIZE}",
          "bbb_ensemble": f"ensemble of {ENSEMBLE_SIZE} BBB networks", "laplace": "last-layer Laplace (on AdamW)"}


def ensemble_rows(cfg: FashionConfig, folder: Path, results: dict[str, dict[str, Any]],
                  chosen: dict[str, Setting] | None) -> list[dict[str, Any]]:
    """For each ensemble of ``cfg.methods`` (``ENSEMBLE_OF``), one row per seed whose
    ``ENSEMBLE_SIZE`` members (at their method's setting in ``chosen``; not chosen yet: no rows) are
    finished: the members' mean predictive probabilities scored (for BBB members, the mean of their
    posterior predictives); its seconds per epoch the members' sum."""
    rows: list[dict[str, Any]] = []
    for m in cfg.methods:
        member = ENSEMBLE_OF.get(m)
        setting = None if member is None else (chosen or {}).get(str(member))
        if member is None or setting is None:
            continue
        for seed in cfg.seeds:
            jobs = [Job(member, ensemble_member_seed(seed, k), Phase.TEST, setting) for k in range(ENSEMBLE_SIZE)]
            if not all(j.name in results for j in jobs):
                continue
            probs = [torch.load(folder / j.name / "probs.pt", weights_only=True) for j in jobs]
            mean = torch.stack([p["eval"] for p in probs]).mean(0)
            ood = torch.stack([p["ood"] for p in probs]).mean(0)
            rows.append({"method": str(m), "seed": seed, "setting": f"{ENSEMBLE_SIZE} x {member} {setting.label()}",
                         "seconds_per_epoch": sum(results[j.name]["seconds_per_epoch"] for j in jobs),
                         "members": [j.name for j in jobs], **scores(mean, probs[0]["labels"], ood)})
    return rows


def _mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    return m, se


def _mean_or_none(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def method_rows(seed_rows: list[dict[str, Any]], methods: list[str]) -> list[dict[str, Any]]:
    """Each method's mean and standard error over its seeds."""
    out = []
    for m in methods:
        rows = [r for r in seed_rows if r["method"] == m]
        if not rows:
            continue
        row: dict[str, Any] = {"method": m, "setting": rows[0]["setting"], "seeds": len(rows)}
        for k in METRICS:
            vals = [r[k] for r in rows if r.get(k) is not None]
            if vals:
                row[k], row[f"{k}_se"] = _mean_se(vals)
        out.append(row)
    return out


def _cell(row: dict[str, Any], k: str, fmt: str) -> str:
    if k not in row:
        return "-"
    se = row.get(f"{k}_se")
    return fmt.format(row[k]) + ("" if se is None or math.isnan(se) else " +- " + fmt.format(se))


def _report_line(meta: dict[str, Any]) -> list[str]:
    """The ``--report`` that wrote the tables from the command's runs (it picks their rows), if one did."""
    if not meta.get("report_command"):
        return []
    return [f"Tables: `{meta['report_command']}` (the rows it asks for, of the runs the command above trained)", ""]


def _markdown(rows: list[dict[str, Any]], sweeps: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["| method | setting | seeds | accuracy % | NLL | ECE | Brier | OOD AUROC (MNIST) | s / epoch |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {LABELS.get(r['method'], r['method'])} | {r['setting']} | {r['seeds']} | "
                     + " | ".join(_cell(r, k, f) for k, f in (("acc", "{:.2f}"), ("nll", "{:.3f}"), ("ece", "{:.3f}"),
                                                              ("brier", "{:.3f}"), ("ood_auroc", "{:.3f}"),
                                                              ("seconds_per_epoch", "{:.2f}"))) + " |")
    for m, p in PUBLISHED.items():
        lines.append(f"| {LABELS[m].split(' (')[0]} (published) | | 3 | {p['acc']:.1f} +- {p['acc_se']:.1f} | "
                     f"{p['nll']:.3f} | {p['ece']:.3f} | - | {p['ood_auroc']:.3f} (EMNIST letters) | - |")
    text = [f"# Fashion-MNIST LeNet-5 ({meta['budget']} budget: {meta['epochs']} epoch"
            f"{'s' if meta['epochs'] != 1 else ''})", "",
            f"Command: `{meta['command']}`", "", *_report_line(meta), *lines, ""]
    if sweeps:
        held = SCHEDULES[FashionBudget(meta["budget"])].val_size
        text += [f"Validation ({held:,} training images held out; the chosen setting in bold):", "",
                 "| method | setting | validation NLL | validation accuracy % |", "|---|---|---:|---:|"]
        for s in sweeps:
            b = "**" if s["chosen"] else ""
            text.append(f"| {s['method']} | {b}{s['setting']}{b} | {s['val_nll']:.4f} | {s['val_acc']:.2f} |")
        text.append("")
    text.append(f"Seconds per epoch: training only, on {meta['device']} with {meta['workers']} job(s) at once "
                "(concurrent jobs share the device: compare costs with bench/bench_ivon.py instead); an "
                "ensemble's is its members' sum.")
    if meta.get("laplace_fit_seconds") is not None:
        text.append("The last-layer Laplace rows train nothing: each is its seed's AdamW network (its s / epoch "
                    "that network's training), then a KFAC Laplace of its last layer fitted on the training images "
                    "(prior precision by the marginal likelihood; "
                    f"{meta['laplace_fit_seconds']:.1f} s a fit and its predictions, on the CPU) and the probit "
                    "predictive.")
    if meta.get("moved"):
        text.append(f"{len(meta['moved'])} job(s) ran on more than one device (`--allow-device-change`; seeds.csv's "
                    "`devices` says where each epoch ran): their seconds per epoch mix the devices'.")
    if meta.get("missing"):
        text.append(f"Not finished: {len(meta['missing'])} test job(s).")
    return "\n".join(text) + "\n"


def _plot(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    from ...plots import figures, save_png

    plt = figures()
    if plt is None or not rows:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    names = [LABELS.get(r["method"], r["method"]) for r in rows]
    for ax, k, label in zip(axes, ("acc", "nll", "ece"), ("test accuracy %", "test NLL", "test ECE")):
        ys = [r.get(k, float("nan")) for r in rows]
        es = [0.0 if math.isnan(r.get(f"{k}_se", float("nan"))) else r[f"{k}_se"] for r in rows]
        ax.errorbar(range(len(rows)), ys, yerr=es, fmt="o")
        for m, p in PUBLISHED.items():
            ax.axhline(p[k], ls="--", lw=0.8, color="0.3" if m == "ivon" else "0.6", label=f"{m} (published)")
        ax.set_xticks(range(len(rows)), names, rotation=35, ha="right", fontsize=7)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = save_png(fig, out / "table.png", dpi=110)
    plt.close(fig)
    return [path]


def write_report(out: Path, cfg: FashionConfig, test_jobs: list[Job], results: dict[str, dict[str, Any]],
                 sweeps: list[dict[str, Any]], meta: dict[str, Any],
                 extra_rows: list[dict[str, Any]] | None = None,
                 chosen: dict[str, Setting] | None = None) -> list[Path]:
    """Write methods.csv, seeds.csv, sweep.csv, table.md and table.png into ``out``; returns the paths.
    ``extra_rows``: seed rows made after the jobs (the last-layer Laplace's); ``chosen``: each
    validated method's chosen setting (the ensembles' members')."""
    folder = out / "jobs"
    wanted = {str(m) for m in cfg.methods}
    seed_rows = [r for j in test_jobs if (r := results.get(j.name)) is not None and r["method"] in wanted
                 and r["seed"] in cfg.seeds]
    seed_rows += ensemble_rows(cfg, folder, results, chosen)
    seed_rows += [r for r in extra_rows or [] if r["seed"] in cfg.seeds]
    rows = method_rows(seed_rows, [str(m) for m in cfg.methods])
    cols = ["method", "setting", "seeds", *[c for k in METRICS for c in (k, f"{k}_se")]]
    written = [atomic_write_csv(out / "methods.csv", cols, rows),
               atomic_write_csv(out / "seeds.csv", ["method", "seed", "setting", *METRICS, "devices"], seed_rows),
               atomic_write_csv(out / "sweep.csv", ["method", "setting", "val_nll", "val_acc", "chosen"], sweeps),
               atomic_write_text(out / "table.md", _markdown(rows, sweeps, {
                   **meta, "moved": [r["job"] for r in results.values() if "," in (r.get("devices") or "")],
                   "laplace_fit_seconds": _mean_or_none([r["fit_seconds"] for r in seed_rows
                                                         if r["method"] == "laplace"])}))]
    return written + _plot(out, rows)
