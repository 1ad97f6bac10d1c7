"""The summary that ends a run (``summary.json``): the best checkpoint (or the last) evaluated on
the test set, by :func:`bbb.runs.train` once its epochs are done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.nn as nn
from torch import Tensor

from ..data.files import Preprocess
from ..io import atomic_write_json
from .checkpoint import load_run
from .config import TrainConfig
from .evaluation import classifier_metrics, mean_network_error, regressor_metrics
from .model import noise_sd, num_weights

__all__ = ["finish_classifier", "finish_regression"]


def finish_regression(out: Path, cfg: TrainConfig, data: dict[str, Tensor], model: nn.Module,
                       metrics: list[dict[str, Any]], best: dict[str, Any], preprocess: Preprocess | None,
                       ) -> dict[str, Any]:
    """A regression run's summary.json: RMSE, log-likelihood and interval coverage of the best
    model on the test set, in the target's units; ``val_error`` columns are validation RMSEs."""
    done = metrics[-1]["epoch"] if metrics else 0
    eval_model = model
    if (out / "best.pt").exists() and best.get("epoch") != done:
        eval_model, _ = load_run(out, "best", device=data["test_x"].device)
    res = regressor_metrics(eval_model, data["test_x"], data["test_y"], cfg.method, samples=cfg.eval_samples,
                            target=None if preprocess is None else preprocess.y)
    summary = {
        "model": "best" if (out / "best.pt").exists() else "last", "task": "regression",
        "test_rmse": res["rmse"], "test_rmse_mc": res["rmse_mc"], "test_log_likelihood": res["log_likelihood"],
        "test_coverage_95": res["coverage_95"], "eval_samples": res["samples"],
        "best_epoch": best.get("epoch"), "best_val_rmse": best.get("val_error"), "best_val_nll": best.get("val_nll"),
        "selected_by": cfg.select_by, "epochs": done,
        "seconds": float(sum(r["seconds"] for r in metrics)), "method": cfg.method, "dataset": cfg.dataset,
        "hidden": list(cfg.hidden), "num_weights": num_weights(model),
    }
    sd = noise_sd(eval_model, preprocess)
    if sd is not None:  # --likelihood homoscedastic: the one noise sd it learned, in the target's units
        summary["noise_sd"] = sd
    atomic_write_json(out / "summary.json", summary)
    return summary


def finish_classifier(out: Path, cfg: TrainConfig, data: dict[str, Tensor], model: nn.Module,
            metrics: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, Any]:
    """Evaluate the best and last models on the test set and write summary.json."""
    done = metrics[-1]["epoch"] if metrics else 0
    device = data["test_x"].device
    last_test = mean_network_error(model, data["test_x"], data["test_y"])
    last_val = mean_network_error(model, data["val_x"], data["val_y"])
    which = "best" if (out / "best.pt").exists() else "last"
    eval_model = model
    if which == "best" and best.get("epoch") != done:
        eval_model, _ = load_run(out, "best", device=device)
    res = classifier_metrics(eval_model, data["test_x"], data["test_y"], cfg.method, samples=cfg.eval_samples)
    summary = {
        "model": which,
        "test_error": res["error"],
        "test_error_mc": res["error_mc"],
        "val_error": mean_network_error(eval_model, data["val_x"], data["val_y"]),
        "test_nll": res["nll"],
        "test_ece": res["ece"],
        "test_brier": res["brier"],
        "eval_samples": res["samples"],
        "last_test_error": last_test,
        "last_val_error": last_val,
        "best_epoch": best.get("epoch"),
        "best_val_error": best.get("val_error"),
        "best_val_nll": best.get("val_nll"),
        "selected_by": cfg.select_by,
        "epochs": done,
        "seconds": float(sum(r["seconds"] for r in metrics)),
        "method": cfg.method,
        "dataset": cfg.dataset,
        "hidden": list(cfg.hidden),
        "num_weights": num_weights(model),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary
