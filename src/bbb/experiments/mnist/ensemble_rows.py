"""The deep-ensemble rows of Table 1 (Lakshminarayanan et al. 2017; not in the paper; the quick
budget): each is the SGD cell of its width trained with ``BudgetSpec.ensemble`` seeds (the SGD
row's mean is over the same seeds), the predictive the mean of their softmax outputs (each run's
best-validation checkpoint: nothing trains for the row beyond those seeds). Its test error is the
argmax of that mean; its test NLL and ECE stand beside the members' mean NLL and ECE. A row is
kept in ``<out>/ensemble/ensemble_<width>.json`` with what it was computed from (the members'
summaries, the split's sizes), and computed again only when that changes."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ... import runs as T
from ...io import atomic_write_json
from ...runs.jobs import read_json
from ...uncertainty import error_rate
from .laplace_rows import prob_scores, sgd_not_ready
from .plan import Job, ReproduceConfig, fmt_time
from .recipes import WIDTHS

__all__ = ["ENSEMBLE", "ensemble_rows", "ensemble_md_line", "ensemble_note"]

#: the rows' method name in table1.csv
ENSEMBLE = "deep_ensemble"


def ensemble_note(k: int) -> str:
    """The paragraph of table1.md on these rows, ``k`` members each."""
    return (f"The deep-ensemble rows (Lakshminarayanan et al. 2017; not in the paper) are the SGD cell of their width "
            f"trained with {k} seeds (initialisation and shuffling; the SGD row is their mean +- sd), each run's "
            f"best-validation checkpoint, the predictive the mean of the {k} networks' softmax outputs. Test error: "
            "the argmax of that mean; beside it the test NLL and ECE (15 bins) of the ensemble and the mean of its "
            f"members'. Wall time: the {k} runs' training and the predictions.")


def _softmax(run_dir: Path, x: Tensor) -> Tensor:
    """The softmax outputs of the run's best-validation network on ``x`` (float64)."""
    model, _ = T.load_run(run_dir, "best", device="cpu")
    with torch.no_grad():
        return torch.softmax(model(x.to(torch.float32)).double(), -1)


def _row(cfg: ReproduceConfig, sgd: Any, data: dict[str, Tensor]) -> dict[str, Any]:
    """One width's row from the SGD cell ``sgd`` (a ``tables._Cell``)."""
    w, k = sgd.hidden, cfg.spec.ensemble
    row: dict[str, Any] = {"method": ENSEMBLE, "hidden": w, "paper_test_error": None, "n_candidates": 1}
    if (waiting := sgd_not_ready(row, sgd)) is not None:
        return waiting
    chosen: Job = next(j for j in sgd.cands if j.candidate == sgd.selected)
    members = [chosen, *sgd.seeds][:k]
    if len(members) < k or sgd.pending:
        what = "; ".join(sgd.pending) or f"{len(members)} of {k} seeds finished"
        return {**row, "status": "incomplete", "n_seeds": 0,
                "pending": f"waits on the SGD 2x{w} seeds (--cells sgd:{w}): {what}"}
    run_dirs = [cfg.checkpoint_dir(j) for j in members]
    absent = [j.name for j, d in zip(members, run_dirs, strict=True) if not (d / "best.pt").is_file()]
    if absent:
        return {**row, "status": "skipped", "n_seeds": 0,
                "pending": f"the checkpoints of {', '.join('runs/' + a for a in absent)} are not on this machine "
                           "(--checkpoints DIR)"}
    summaries = [sgd.summaries[j.name] for j in members]
    key = {"runs": [j.name for j in members], "summaries": summaries,
           "n": [int(data[f"{s}_y"].shape[0]) for s in ("train", "val", "test")]}
    cache = Path(cfg.out) / "ensemble" / f"ensemble_{w}.json"
    old = read_json(cache) if cache.is_file() else None
    if old is not None and old.get("key") == key:  # computed before from these runs and data: not again
        return dict(old["row"])
    start = time.perf_counter()
    probs = {s: [_softmax(d, data[f"{s}_x"]) for d in run_dirs] for s in ("val", "test")}
    mean = {s: torch.stack(p).mean(0) for s, p in probs.items()}
    seconds = time.perf_counter() - start
    err, nll, ece = prob_scores(mean["test"], data["test_y"])
    each = [prob_scores(p, data["test_y"]) for p in probs["test"]]
    train_seconds = sum(float(s.get("seconds", 0.0)) for s in summaries)
    row = {**row, "status": "ok", "n_seeds": 1, "test_error": round(err, 4), "test_errors": f"{err:.2f}",
           "val_error": round(100.0 * error_rate(mean["val"], data["val_y"]), 4),
           "test_nll": round(nll, 6), "test_ece": round(ece, 4),
           "members_test_nll": round(statistics.fmean(e[1] for e in each), 6),
           "members_test_ece": round(statistics.fmean(e[2] for e in each), 4),
           "members_test_error": round(statistics.fmean(e[0] for e in each), 4),
           "epochs": summaries[0].get("epochs"), "best_epoch": " ".join(str(s.get("best_epoch")) for s in summaries),
           "fit_seconds": round(seconds, 3), "seconds": round(train_seconds + seconds, 3),
           "seconds_all": round(train_seconds + seconds, 3), "candidate": sgd.selected,
           "weights": summaries[0].get("num_weights"), "run": str(Path("runs") / chosen.name),
           "members": " ".join(j.name for j in members)}
    atomic_write_json(cache, {"key": key, "row": row})
    return row


def ensemble_rows(cfg: ReproduceConfig, cells: dict[tuple[str, int], Any], data: dict[str, Tensor]
                  ) -> list[dict[str, Any]]:
    """The rows of the budget's deep ensembles (none where it has none): one per width, from the
    SGD cell of that width in ``cells`` (``tables.cell_state``'s) and its seeds."""
    if not cfg.spec.ensemble:
        return []
    return [_row(cfg, cells[("sgd", w)], data) for w in WIDTHS if ("sgd", w) in cells]


def ensemble_md_line(name: str, r: dict[str, Any], missing_text: dict[str, str]) -> str:
    """A deep-ensemble row of table1.md."""
    w = r["hidden"]
    status = r.get("status")
    if status != "ok":
        text = missing_text.get(status or "", status or "-")
        return f"| {name} | {w} | **{text}** | - | - | - | - | {r.get('pending') or '-'} | - |"
    members = str(r["members"]).split()
    return (f"| {name} | {w} | {r['test_error']:.2f}% | - | {r['val_error']:.2f}% | {r['epochs']} ({r['best_epoch']}) "
            f"| {len(members)} seeds of runs/{members[0]} (best checkpoints) | the mean of {len(members)} softmax "
            f"outputs; test NLL {r['test_nll']:.4f} (members' mean {r['members_test_nll']:.4f}), ECE "
            f"{r['test_ece']:.2f}% (members' {r['members_test_ece']:.2f}%), members' test error "
            f"{r['members_test_error']:.2f}% | {fmt_time(r['seconds'])} |")
