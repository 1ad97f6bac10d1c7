"""A trained run as a model that takes raw inputs: :func:`load_model` (``bbb.runs.load_model``).

``bbb.runs.load_run`` rebuilds a run's network, which takes the *preprocessed* inputs it was
trained on (pixels / 126, flattened; standardised table columns). :func:`load_model` wraps that
network with the run's preprocessing (:class:`bbb.data.files.Preprocess`, kept in the checkpoint;
for the MNIST-like runs of older checkpoints, made from the config), so raw inputs go straight in::

    model = bbb.runs.load_model("runs/bbb400")                 # eval mode, on the CPU
    logits = bbb.uncertainty.predict(model, images, 10)   # images (N, 1, 28, 28), uint8 0..255 or 0..1
    model.classes                                         # the label of each output

A CSV run takes its table through :meth:`TrainedModel.encode_csv` (text columns by name); a
regression run's outputs are (mean, noise) of a Gaussian in standardised units, and
:meth:`TrainedModel.regression` turns k sampled outputs into the predictive mean, sd and interval
in the target's units. ``bbb predict`` is this module on the command line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import uncertainty as U
from ..data.files import Preprocess, read_csv
from ..elbo import HeteroscedasticGaussian
from ..errors import UserError, check_int
from ..options import Method
from . import model as runmodel
from .checkpoint import committed_checkpoint, model_from_checkpoint
from .config import TrainConfig
from .evaluation import mc_outputs

__all__ = ["Referral", "TrainedModel", "load_model", "refer_threshold", "uncertainty_scores"]


class TrainedModel(nn.Module):
    """A run's network behind its preprocessing: ``forward(raw)`` = ``network(encode(raw))``.

    Attributes: ``network`` (takes preprocessed inputs), ``config`` (the run's
    :class:`TrainConfig`), ``preprocess``, ``task`` (``"classification"`` or ``"regression"``),
    ``classes`` (the label of each output of a classifier; None for regression),
    ``run_dir``, ``epoch``.
    """

    def __init__(self, network: nn.Module, config: TrainConfig, preprocess: Preprocess, task: str,
                 run_dir: Path, epoch: int, num_outputs: int) -> None:
        super().__init__()
        self.network = network
        self.num_outputs = num_outputs
        self.config = config
        self.preprocess = preprocess
        self.task = task
        self.run_dir = run_dir
        self.epoch = epoch

    @property
    def classes(self) -> list[str] | None:
        if self.task != "classification":
            return None
        if self.preprocess.classes is not None:
            return list(self.preprocess.classes)
        return [str(c) for c in range(self.num_outputs)]

    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    def encode(self, x: Any) -> Tensor:
        """Raw inputs (an array or tensor; see :meth:`bbb.data.files.Preprocess.encode_array`) ->
        the network's (N, D) float32 inputs, on the network's device."""
        if isinstance(x, Tensor) and x.device != torch.device("cpu"):
            x = x.cpu()
        return self.preprocess.encode_array(x).to(self.device())

    def encode_csv(self, path: str | Path) -> tuple[Tensor, list[str], list[list[str]]]:
        """A CSV with the training feature columns -> (network inputs, header, rows)."""
        header, rows = read_csv(path)
        return self.preprocess.encode_table(header, rows, str(path)).to(self.device()), header, rows

    def forward(self, x: Any) -> Tensor:
        return self.network(self.encode(x))

    def sample_outputs(self, inputs: Tensor, samples: int = 10, seed: int | None = 0) -> Tensor:
        """(k, N, C) outputs of the network on *encoded* ``inputs``: bbb weight samples through
        :func:`bbb.uncertainty.predict` (``generator=seed``), MC dropout, or the one sgd network."""
        samples = check_int("--samples", samples)
        if self.config.method == Method.BBB.value:
            return U.predict(self.network, inputs, samples, batch_size=2048, generator=seed)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            return mc_outputs(self.network, inputs, self.config.method, samples)

    def regression(self, outputs: Tensor, level: float = 0.95) -> dict[str, Tensor]:
        """k sampled (mean, noise) outputs (k, N, 2) -> per input the predictive ``mean``, ``sd``,
        its ``epistemic_sd`` and ``aleatoric_sd`` parts, and the central ``level`` interval
        (``lower``, ``upper``) of the mixture of the k Gaussians, all in the target's units."""
        if self.task != "regression":
            raise UserError(f"{self.run_dir} is a classifier; regression() reads a regression run's outputs")
        means, sigmas = HeteroscedasticGaussian().split(outputs.double())
        unc = U.regression_uncertainty(means, sigmas)
        lo, hi = U.gaussian_mixture_quantiles(means, sigmas, ((1 - level) / 2, (1 + level) / 2))
        y = self.preprocess.y
        shift, scale = (0.0, 1.0) if y is None else (float(y.mean), float(y.std))
        return {"mean": unc["mean"] * scale + shift, "sd": unc["std"] * scale,
                "epistemic_sd": unc["epistemic"].sqrt() * scale, "aleatoric_sd": unc["aleatoric"].sqrt() * scale,
                "lower": lo * scale + shift, "upper": hi * scale + shift}


def load_model(run_dir: str | Path, which: str = "best", device: str | torch.device = "cpu") -> TrainedModel:
    """The trained model of a run directory with its preprocessing (see the module's notes), in
    eval mode on ``device``; ``which``: ``"best"`` (by validation) or ``"last"``."""
    path, ckpt = committed_checkpoint(run_dir, which)
    network, cfg = model_from_checkpoint(ckpt, path)
    info = dict(ckpt["model_info"])
    stored = info.get("preprocess")
    pre = Preprocess.from_dict(stored) if stored is not None else Preprocess.image(cfg.scale)
    task = str(info.get("task", "classification"))
    model = TrainedModel(network, cfg, pre, task, Path(run_dir), int(ckpt["epoch"]), int(info["num_classes"]))
    return model.to(device).eval()


def uncertainty_scores(model: TrainedModel, outputs: Tensor) -> dict[str, Tensor]:
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
    (:func:`uncertainty_scores`) is above ``threshold``. ``target_error``: the error allowed
    among the kept predictions (classification: the error rate; regression: the RMSE, target
    units); ``default``: whether it is the default, half the error of all validation
    predictions (``full_error``). ``coverage`` and ``kept_error``: the share of the validation
    inputs kept and their error at the threshold; ``n``: validation inputs."""

    threshold: float
    target_error: float
    default: bool
    full_error: float
    coverage: float
    kept_error: float
    n: int
    score: str


def refer_threshold(model: TrainedModel, target_error: float | None = None, samples: int = 10, seed: int = 0,
                    data_dir: str | None = None) -> Referral:
    """Choose the referral threshold on the run's validation split (loaded again, its file's MD5
    checked): :func:`bbb.uncertainty.threshold_for_target_error` of the score against the errors
    (classification: wrong or right; regression: squared error against ``target_error ** 2``).
    ``target_error`` None: half the error of all validation predictions (see ``bbb predict``)."""
    cfg = model.config if data_dir is None else model.config.replace(data_dir=data_dir)
    data, _ = runmodel.load_split(cfg, model.preprocess.to_dict() if model.preprocess.kind != "image" else None)
    x, y = data["val_x"], data["val_y"]
    if x.shape[0] == 0:
        raise UserError(f"{model.run_dir} has no validation set to choose the referral threshold on "
                        "(trained with --val-size 0 or --val-fraction 0)")
    s = uncertainty_scores(model, model.sample_outputs(x.to(model.device()), samples, seed))
    if model.task == "regression":
        y_units = model.preprocess.target_values(y.double().cpu()) if model.preprocess.y is not None else y.double()
        errors = (s["mean"].cpu() - y_units) ** 2
        full = math.sqrt(float(errors.mean()))
    else:
        errors = (s["prediction"].cpu() != y.cpu()).double()
        full = float(errors.mean())
    default = target_error is None
    target = full / 2 if target_error is None else float(target_error)
    if not (math.isfinite(target) and target >= 0):
        raise UserError(f"--target-error must be a number >= 0, got {target_error}")
    allowed = target ** 2 if model.task == "regression" else target
    score = s["score"].cpu()
    t = U.threshold_for_target_error(score, errors, allowed)
    kept = score <= t
    kept_err = float(errors[kept].mean()) if bool(kept.any()) else 0.0
    return Referral(threshold=t, target_error=target, default=default, full_error=full,
                    coverage=float(kept.double().mean()),
                    kept_error=math.sqrt(kept_err) if model.task == "regression" else kept_err,
                    n=int(x.shape[0]), score="sd" if model.task == "regression" else "entropy")
