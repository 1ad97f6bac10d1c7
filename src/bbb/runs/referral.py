"""What a run's predictions are for: the uncertainty of each input (:func:`uncertainty_scores`)
and the rule that refers the least certain to a person, chosen on the run's validation set
(:func:`refer_threshold`, a :class:`Referral`); ``bbb predict`` applies it. For a loaded run
(:func:`bbb.runs.load_model`), an ensemble of runs or a Laplace posterior alike: a
:class:`~bbb.runs.trained.Predictor`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import uncertainty as U
from ..errors import UserError
from . import model as runmodel
from .trained import Predictor, mark_encoded

__all__ = ["Referral", "refer_threshold", "split_outputs", "uncertainty_scores"]


def uncertainty_scores(model: Predictor, outputs: Tensor) -> dict[str, Tensor]:
    """Per input, from k sampled outputs (k, N, C): a classifier's ``probs`` (N, C), ``prediction``
    (class index), ``entropy`` (predictive, nats) and ``mutual_information``; a regressor's
    :meth:`TrainedModel.regression`, with ``prediction`` its mean. ``score``: what a referral ranks
    by, the predictive entropy (classification) or the predictive sd (regression)."""
    if model.task == "regression":
        reg = model.regression(outputs)
        return {**reg, "prediction": reg["mean"], "score": reg["sd"]}
    logits = outputs.double()
    probs = U.predictive_probs(logits)
    ent = U.entropy(probs)
    return {"probs": probs, "prediction": probs.argmax(-1), "entropy": ent,
            "mutual_information": U.mutual_information(logits), "score": ent}


@dataclass
class Referral:
    """The referral rule chosen on a run's validation set: refer an input whose ``score``
    (:func:`uncertainty_scores`) is above ``threshold``. The rule keeps ``target_coverage`` of
    the validation inputs (the default: :data:`bbb.uncertainty.selective.DEFAULT_COVERAGE`), or
    the most of them whose error is at most ``target_error`` (classification: the error rate;
    regression: the RMSE, target units); the other target is None. ``default``: whether the
    rule is the default. ``full_error``: the error of all validation predictions; ``coverage``
    and ``kept_error``: the share of the validation inputs kept and their error at the
    threshold; ``n``: validation inputs."""

    threshold: float
    target_error: float | None
    default: bool
    full_error: float
    coverage: float
    kept_error: float
    n: int
    score: str
    target_coverage: float | None = None


def split_outputs(model: Predictor, split: str, samples: int = 10, seed: int | None = 0,
                  data_dir: str | None = None, data_file: str | None = None) -> tuple[Tensor, Tensor]:
    """The k sampled outputs of ``model`` (a run, or an ensemble of runs of one split) on its own
    ``split`` ("val" or "test"; loaded again, the file's MD5 checked; ``data_file``: the run's
    moved file, ``data_dir``: an MNIST-like run's folder), and the split's targets (encoded, as
    the split holds them)."""
    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    cfg = runmodel.point_data(model.config, data_dir, data_file)
    data, _ = runmodel.load_split(cfg, model.preprocess.to_dict() if model.preprocess.kind != "image" else None)
    x, y = data[f"{split}_x"], data[f"{split}_y"]
    if x.shape[0] == 0:
        return torch.empty(0), y
    # the split's inputs are encoded already: marked, so they are not encoded again
    return model.sample_outputs(mark_encoded(x.to(model.device()), model.fingerprint), samples, seed), y


def refer_threshold(model: Predictor, target_error: float | None = None, samples: int = 10,
                    seed: int = 0, data_dir: str | None = None, *, coverage: float | None = None,
                    data_file: str | None = None) -> Referral:
    """Choose the referral threshold on the run's validation split (loaded again, its file's MD5
    checked; ``data_file``: the run's moved file, ``data_dir``: an MNIST-like run's folder):
    :func:`bbb.uncertainty.threshold_for_coverage` of the score (``coverage``; neither target
    given: keep 80%, a target every run reaches), or :func:`bbb.uncertainty.threshold_for_target_error`
    of the score against the errors (classification: wrong or right; regression: squared error
    against ``target_error ** 2``), which a noisy regression may not reach (then all are referred)."""
    if target_error is not None and coverage is not None:
        raise UserError("give --coverage or --target-error, not both")
    default = target_error is None and coverage is None
    if default:
        coverage = U.selective.DEFAULT_COVERAGE
    if coverage is not None and not (isinstance(coverage, (int, float)) and 0 < coverage <= 1):
        raise UserError(f"--coverage must be a share in (0, 1], e.g. 0.8, got {coverage}")
    outputs, y = split_outputs(model, "val", samples, seed, data_dir, data_file)
    if y.shape[0] == 0:
        raise UserError(f"{model.run_dir} has no validation set to choose the referral threshold on "
                        "(trained with --val-size 0 or --val-fraction 0)")
    s = uncertainty_scores(model, outputs)
    if model.task == "regression":
        y_units = model.preprocess.target_values(y.double().cpu()) if model.preprocess.y is not None else y.double()
        errors = (s["mean"].cpu() - y_units) ** 2
        full = math.sqrt(float(errors.mean()))
    else:
        errors = (s["prediction"].cpu() != y.cpu()).double()
        full = float(errors.mean())
    score = s["score"].cpu()
    if target_error is None:
        assert coverage is not None
        t = U.threshold_for_coverage(score, float(coverage))
    else:
        if not (math.isfinite(target_error) and target_error >= 0):
            raise UserError(f"--target-error must be a number >= 0, got {target_error}")
        t = U.threshold_for_target_error(score, errors, target_error ** 2 if model.task == "regression"
                                         else target_error)
    kept = score <= t
    kept_err = float(errors[kept].mean()) if bool(kept.any()) else 0.0
    return Referral(threshold=t, target_error=None if target_error is None else float(target_error), default=default,
                    full_error=full, coverage=float(kept.double().mean()),
                    kept_error=math.sqrt(kept_err) if model.task == "regression" else kept_err,
                    n=int(y.shape[0]), score="sd" if model.task == "regression" else "entropy",
                    target_coverage=None if coverage is None else float(coverage))
