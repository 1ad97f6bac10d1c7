"""The last-layer Laplace rows of Table 1 (not in the paper; the smoke and quick budgets): each
is the SGD cell's network of its width (the same run, its best-validation checkpoint: nothing
trains again), then :func:`bbb.laplace.fit_last_layer_laplace` on the training images (KFAC,
prior precision by the marginal likelihood) and the probit predictive. Its test error is the
argmax of that predictive; its test NLL and ECE stand beside the SGD network's own. Where
laplace-torch is not installed, or the SGD cell is not finished, the row says so. A row is kept
in ``<out>/laplace/laplace_<width>.json`` with what it was fitted on (the run's summary, the
split's sizes), and fitted again only when that changes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ... import runs as T
from ...errors import UserError
from ...io import atomic_write_json
from ...runs.jobs import read_json
from ...uncertainty import error_rate, expected_calibration_error, negative_log_likelihood
from .plan import Job, ReproduceConfig, fmt_time
from .recipes import WIDTHS

__all__ = ["LAPLACE", "laplace_rows", "laplace_md_line", "laplace_methods", "LAPLACE_NOTE", "ECE_BINS",
           "prob_scores", "sgd_not_ready"]

#: the rows' method name in table1.csv
LAPLACE = "laplace"
#: the bins of the ECE (as bbb evaluate's)
ECE_BINS = 15
#: the paragraph of table1.md on these rows
LAPLACE_NOTE = (
    "The last-layer Laplace rows (Daxberger et al. 2021, `bbb.laplace`; not in the paper) train nothing: each is "
    "the SGD cell's network of its width (the same run, its best-validation checkpoint), then a Laplace "
    "approximation of its last layer (KFAC, fitted on the training images, prior precision by the marginal "
    "likelihood) and the probit approximation of the predictive. Test error: the argmax of that predictive; "
    "beside it the test NLL and ECE (15 bins) of the Laplace and of the SGD network alone. Wall time: the fit "
    "and the predictions, the SGD run's training time not included (`seconds` in table1.csv adds it).")


def prob_scores(probs: Tensor, y: Tensor) -> tuple[float, float, float]:
    """(error %, NLL, ECE %) of predictive probabilities."""
    return (100.0 * error_rate(probs, y), negative_log_likelihood(probs, y),
            100.0 * expected_calibration_error(probs, y, ECE_BINS))


def sgd_not_ready(row: dict[str, Any], sgd: Any) -> dict[str, Any] | None:
    """``row`` (a row made of the SGD cell ``sgd``'s networks: these Laplace rows, the deep
    ensembles') marked as waiting on that cell or as diverged with it; None once the cell is done."""
    w = sgd.hidden
    if sgd.status in ("not run", "incomplete"):
        return {**row, "status": sgd.status, "n_seeds": 0,
                "pending": f"waits on the SGD 2x{w} network(s) (--cells sgd:{w}): {'; '.join(sgd.pending)}"}
    if sgd.selected is None:
        return {**row, "status": "diverged", "n_seeds": 0, "pending": f"the SGD 2x{w} network diverged"}
    return None


def _row(cfg: ReproduceConfig, sgd: Any, data: dict[str, Tensor]) -> dict[str, Any]:
    """One width's row from the SGD cell ``sgd`` (a ``tables._Cell``)."""
    w = sgd.hidden
    row: dict[str, Any] = {"method": LAPLACE, "hidden": w, "paper_test_error": None, "n_candidates": 1}
    if (waiting := sgd_not_ready(row, sgd)) is not None:
        return waiting
    job: Job = next(j for j in sgd.cands if j.candidate == sgd.selected)
    summary = sgd.summaries[job.name]
    run_dir = cfg.checkpoint_dir(job)
    if not (run_dir / "last.pt").is_file() and not (run_dir / "best.pt").is_file():
        return {**row, "status": "skipped", "n_seeds": 0,
                "pending": f"the checkpoint of runs/{job.name} is not on this machine (--checkpoints DIR)"}
    from ...laplace import fit_last_layer_laplace, require_laplace

    try:
        require_laplace()
    except UserError as e:  # laplace-torch missing (or not importable): the row says so, the rest stands
        return {**row, "status": "skipped", "n_seeds": 0, "pending": f"{e}"}
    key = {"run": job.name, "summary": summary, "n": [int(data[f"{k}_y"].shape[0]) for k in ("train", "val", "test")]}
    cache = Path(cfg.out) / "laplace" / f"laplace_{w}.json"
    old = read_json(cache) if cache.is_file() else None
    if old is not None and old.get("key") == key:  # fitted before on this run and data: not again
        return dict(old["row"])
    start = time.perf_counter()
    model, _ = T.load_run(run_dir, "best", device="cpu")
    post = fit_last_layer_laplace(model, (data["train_x"], data["train_y"]), likelihood="classification")
    probs = {k: post.predict(data[f"{k}_x"]).double() for k in ("val", "test")}
    seconds = time.perf_counter() - start
    err, nll, ece = prob_scores(probs["test"], data["test_y"])
    with torch.no_grad():
        map_probs = torch.softmax(model(data["test_x"].to(torch.float32)).double(), -1)
    _, map_nll, map_ece = prob_scores(map_probs, data["test_y"])
    row = {**row, "status": "ok", "n_seeds": 1, "test_error": round(err, 4), "test_errors": f"{err:.2f}",
            "val_error": round(100.0 * error_rate(probs["val"], data["val_y"]), 4),
            "test_nll": round(nll, 6), "test_ece": round(ece, 4), "map_test_nll": round(map_nll, 6),
            "map_test_ece": round(map_ece, 4), "prior_precision": post.prior_precision,
            "epochs": summary.get("epochs"), "best_epoch": summary.get("best_epoch"),
            "fit_seconds": round(seconds, 3), "seconds": round(float(summary.get("seconds", 0.0)) + seconds, 3),
            "seconds_all": round(float(summary.get("seconds", 0.0)) + seconds, 3), "candidate": sgd.selected,
            "weights": summary.get("num_weights"), "run": str(Path("runs") / job.name), "of_run": job.name}
    atomic_write_json(cache, {"key": key, "row": row})
    return row


def laplace_rows(cfg: ReproduceConfig, cells: dict[tuple[str, int], Any], data: dict[str, Tensor]
                 ) -> list[dict[str, Any]]:
    """The rows of the budget's last-layer Laplace (none where it has none): one per width, from
    the SGD cell of that width in ``cells`` (``tables.cell_state``'s)."""
    if not cfg.spec.laplace:
        return []
    return [_row(cfg, cells[("sgd", w)], data) for w in WIDTHS]


def laplace_md_line(name: str, r: dict[str, Any], missing_text: dict[str, str]) -> str:
    """A laplace row of table1.md."""
    w = r["hidden"]
    status = r.get("status")
    if status != "ok":
        text = missing_text.get(status or "", status or "-")
        return f"| {name} | {w} | **{text}** | - | - | - | - | {r.get('pending') or '-'} | - |"
    return (f"| {name} | {w} | {r['test_error']:.2f}% | - | {r['val_error']:.2f}% | {r['epochs']} ({r['best_epoch']}) "
            f"| of runs/{r['of_run']} (best checkpoint) | last layer, KFAC, prior precision {r['prior_precision']:.3g} "
            f"(marginal likelihood), probit; test NLL {r['test_nll']:.4f} (SGD's {r['map_test_nll']:.4f}), ECE "
            f"{r['test_ece']:.2f}% (SGD's {r['map_test_ece']:.2f}%) | {fmt_time(r['fit_seconds'])} |")


def laplace_methods(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether Table 1 has laplace rows."""
    return any(r["method"] == LAPLACE for r in rows)
