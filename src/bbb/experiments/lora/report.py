"""The tables and figures of ``bbb reproduce lora``: per backbone, task, K and method the mean and
standard error over seeds (methods.csv, table.md), every job (seeds.csv), the validation sweeps
(sweep.csv), the target check (target.csv), reliability diagrams and NLL/ECE against steps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ...io import atomic_write_csv, atomic_write_json, atomic_write_text
from .settings import LoraMethod
from .train import Job

__all__ = ["write_report", "summarise", "target_rows", "METRICS", "SETTING_KEYS"]

METRICS = ("acc", "ece", "nll", "brier", "confidence")
#: a result row's entries that are its setting (Setting.record), not metrics
SETTING_KEYS = ("kl_weight", "prior_sigma", "lr", "ess")


def _mean_se(values: list[Any]) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    if not v:
        return None, None
    m = sum(v) / len(v)
    if len(v) < 2:
        return m, None
    return m, math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v))


#: the out-of-distribution sets by their role: the backbone's held-back classes, or the other data set
OOD_ROLES = {"mnist0-4": "held", "fashion5-9": "held", "fashion": "other", "mnist": "other"}


def _role(key: str) -> str:
    """``auroc_entropy_mnist0-4`` -> ``auroc_entropy_held``: one column per role for both tasks
    (digits: held = MNIST 0-4, other = Fashion-MNIST; fashion: held = Fashion 5-9, other = MNIST)."""
    for name, role in OOD_ROLES.items():
        for kind in ("entropy", "mi"):
            if key == f"auroc_{kind}_{name}":
                return f"auroc_{kind}_{role}"
    return key


def _row(job: Job, result: dict[str, Any], validation_seconds: float | None) -> dict[str, Any]:
    (label, r), = result["settings"].items()
    return {"arch": str(job.arch), "task": str(job.task), "shots": job.shots, "method": str(job.method),
            "seed": job.seed, "setting": label,
            **{_role(k): v for k, v in r.items() if k not in ("curve", "bins")},
            "seconds": result.get("seconds"), "validation_seconds": validation_seconds}


def summarise(jobs: list[Job], results: dict[str, dict[str, Any]],
              validation_seconds: dict[str, float] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-job rows, per-group rows: mean and standard error over seeds of every metric).
    ``validation_seconds``: by test job name, the seconds of the validation job that chose its
    setting (a method with no grid has none); a row's ``seconds`` are its test job's."""
    val = validation_seconds or {}
    rows = [_row(j, results[j.name], val.get(j.name)) for j in jobs if j.name in results]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["arch"], r["task"], r["shots"], r["method"]), []).append(r)
    out = []
    for (arch, task, shots, method), rs in groups.items():
        row: dict[str, Any] = {"arch": arch, "task": task, "shots": shots, "method": method, "seeds": len(rs),
                               "setting": rs[0]["setting"]}
        # (validation_seconds: a validation job belongs to one seed or none, so no mean over seeds)
        keys = [k for k in rs[0] if k not in ("arch", "task", "shots", "method", "seed", "setting",
                                              "validation_seconds", *SETTING_KEYS)]
        for k in keys:
            m, se = _mean_se([r.get(k) for r in rs])
            row[k], row[f"{k}_se"] = m, se
        out.append(row)
    return rows, out


def target_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 63's target per backbone, task and K: BBB on A's ECE at most half of MLE LoRA's, its
    NLL below, its accuracy within 2 points."""
    by = {(g["arch"], g["task"], g["shots"], g["method"]): g for g in groups}
    out = []
    for (arch, task, k, m), g in by.items():
        mle = by.get((arch, task, k, str(LoraMethod.MLE)))
        if m not in (LoraMethod.BBB_A, LoraMethod.BBB_AB) or mle is None:
            continue
        ok = {"ece_half": g["ece"] <= 0.5 * mle["ece"], "nll_below": g["nll"] < mle["nll"],
              "acc_within_2": g["acc"] >= mle["acc"] - 0.02}
        out.append({"arch": arch, "task": task, "shots": k, "method": m, "ece": g["ece"], "mle_ece": mle["ece"],
                    "nll": g["nll"], "mle_nll": mle["nll"], "acc": g["acc"], "mle_acc": mle["acc"], **ok,
                    "holds": all(ok.values())})
    return out


def _fmt(v: Any, se: Any = None, pct: bool = False) -> str:
    if v is None:
        return "-"
    s = 100 if pct else 1
    return f"{s * v:.1f}" + (f" ± {s * se:.1f}" if se is not None else "") if pct else \
        f"{v:.3f}" + (f" ± {se:.3f}" if se is not None else "")


def _markdown(groups: list[dict[str, Any]], targets: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Command: `{meta.get('command', '')}`", "",
             *([f"Tables: `{meta['report_command']}` (the rows it asks for, of the runs the command above "
                "trained)", ""] if meta.get("report_command") else []),
             "Mean ± standard error over seeds; ACC and ECE (15 bins) in %, NLL of the averaged "
             "probabilities, Brier (sum over classes), mean confidence; OOD: AUROC of the predictive entropy "
             "(H) and of the mutual information (MI, sampled methods) against the held-back classes (held: "
             "MNIST 0-4 for digits, Fashion 5-9 for fashion) and the other data set (other: Fashion-MNIST, "
             "MNIST).", ""]
    ood = sorted({k[len("auroc_entropy_"):] for g in groups for k in g if k.startswith("auroc_entropy_")
                  and not k.endswith("_se")})
    head = ["backbone", "task", "K", "method", "setting", "ACC", "ECE", "NLL", "Brier", "conf."]
    head += [f"AUROC H {o}" for o in ood] + [f"AUROC MI {o}" for o in ood]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {str(m): i for i, m in enumerate(LoraMethod)}
    for g in sorted(groups, key=lambda g: (g["arch"], g["task"], g["shots"], order.get(g["method"], 99))):
        cells = [g["arch"], g["task"], str(g["shots"]), g["method"], g["setting"], _fmt(g["acc"], g["acc_se"], True),
                 _fmt(g["ece"], g["ece_se"], True), _fmt(g["nll"], g["nll_se"]), _fmt(g["brier"]),
                 _fmt(g["confidence"])]
        cells += [_fmt(g.get(f"auroc_entropy_{o}")) for o in ood] + [_fmt(g.get(f"auroc_mi_{o}")) for o in ood]
        lines.append("| " + " | ".join(cells) + " |")
    if targets:
        lines += ["", "Target (BBB ECE <= half of MLE's, NLL below, ACC within 2 points):", "",
                  "| backbone | task | K | method | ECE vs MLE | NLL vs MLE | ACC vs MLE | holds |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in targets:
            lines.append(f"| {t['arch']} | {t['task']} | {t['shots']} | {t['method']} | {100 * t['ece']:.1f} / "
                         f"{100 * t['mle_ece']:.1f} | {t['nll']:.3f} / {t['mle_nll']:.3f} | {100 * t['acc']:.1f} / "
                         f"{100 * t['mle_acc']:.1f} | {'yes' if t['holds'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _figures(out: Path, jobs: list[Job], results: dict[str, dict[str, Any]]) -> list[Path]:
    """reliability-<arch>-<task>.png (rows K, columns methods; bins pooled over seeds) and
    curves-<arch>-<task>.png (NLL and ECE of the curve subset against steps, mean over seeds)."""
    from ...plots import canvas, finish, plot_reliability

    written: list[Path] = []
    pairs = sorted({(str(j.arch), str(j.task)) for j in jobs if j.name in results})
    for arch, task in pairs:
        mine = [j for j in jobs if j.name in results and (str(j.arch), str(j.task)) == (arch, task)]
        shots = sorted({j.shots for j in mine})
        methods = [str(m) for m in LoraMethod if any(j.method is m for j in mine)]
        fig, axes = canvas(None, len(shots) * len(methods), nrows=len(shots), ncols=len(methods),
                           figsize=(3.2 * len(methods), 3.0 * len(shots)))
        if fig is None:
            return written
        for i, k in enumerate(shots):
            bins = {}
            for m in methods:
                rs = [next(iter(results[j.name]["settings"].values()))["bins"] for j in mine
                      if j.shots == k and str(j.method) == m]
                count = torch.tensor([r["count"] for r in rs]).sum(0)
                safe = count.clamp_min(1)
                bins[f"{m} K={k}"] = {"count": count,
                                      "confidence": torch.tensor([r["conf_sum"] for r in rs]).sum(0) / safe,
                                      "accuracy": torch.tensor([r["acc_sum"] for r in rs]).sum(0) / safe,
                                      "edges": torch.linspace(0, 1, len(count) + 1)}
            plot_reliability(bins, ax=axes[i * len(methods):(i + 1) * len(methods)])
        for a in axes:
            a.title.set_fontsize(8)
            a.legend().remove()
        fig.suptitle(f"{arch}, {task}: reliability (test, seeds pooled)")
        written.append(finish(fig, out / f"reliability-{arch}-{task}.png", new=True))
        fig, axes = canvas(None, 2 * len(shots), nrows=2, ncols=len(shots), figsize=(4.0 * len(shots), 6.0))
        for i, k in enumerate(shots):
            for m in methods:
                curves = [next(iter(results[j.name]["settings"].values()))["curve"] for j in mine
                          if j.shots == k and str(j.method) == m]
                if not curves:
                    continue
                steps = [p["step"] for p in curves[0]]
                for row, key in enumerate(("nll", "ece")):
                    ys = [sum(c[t][key] for c in curves) / len(curves) for t in range(len(steps))]
                    axes[row * len(shots) + i].plot(steps, ys, marker="o", ms=3, label=m)
            axes[i].set_title(f"K={k}: NLL")
            axes[len(shots) + i].set_title(f"K={k}: ECE")
            axes[len(shots) + i].set_xlabel("training step")
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{arch}, {task}: test NLL and ECE against steps (mean over seeds)")
        written.append(finish(fig, out / f"curves-{arch}-{task}.png", new=True))
    return written


def write_report(out: Path, jobs: list[Job], results: dict[str, dict[str, Any]], sweeps: list[dict[str, Any]],
                 meta: dict[str, Any], validation_seconds: dict[str, float] | None = None) -> list[Path]:
    """Write the tables and figures of the finished test jobs; returns the paths written."""
    rows, groups = summarise(jobs, results, validation_seconds)
    if not rows:
        return []
    targets = target_rows(groups)
    written = []
    cols = list(dict.fromkeys(k for r in rows for k in r))
    written.append(atomic_write_csv(out / "seeds.csv", cols, rows))
    gcols = list(dict.fromkeys(k for g in groups for k in g))
    written.append(atomic_write_csv(out / "methods.csv", gcols, groups))
    if sweeps:
        written.append(atomic_write_csv(out / "sweep.csv", list(sweeps[0]), sweeps))
    if targets:
        written.append(atomic_write_csv(out / "target.csv", list(targets[0]), targets))
    written.append(atomic_write_json(out / "results.json", {"meta": meta, "methods": groups, "target": targets}))
    written.append(atomic_write_text(out / "table.md", _markdown(groups, targets, meta)))
    written += _figures(out, jobs, results)
    return written
