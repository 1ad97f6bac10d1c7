"""Our systems: the deterministic floor and bbb in each like-for-like configuration.

Every step goes through the code ``bbb train`` runs: :func:`bbb.train.build_model`, the
:class:`bbb.ELBO` it builds, :func:`bbb.train.make_optimizer` (the fused engine for bbb) and
:func:`bbb.train.training_step`, as in the epoch loop.
Prediction is :func:`bbb.train._mean_logits` (posterior mean) and
:func:`bbb.uncertainty.predict` (k networks, batched), as ``bbb evaluate`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bbb import uncertainty as U
from bbb.elbo import ELBO
from bbb.train import TrainConfig, _mean_logits, build_model, make_optimizer, training_step

from .base import IN_FEATURES, NUM_BATCHES, NUM_CLASSES, Pair, System

#: TrainConfig settings of each of our systems (hidden is set per width)
CONFIGS: dict[str, tuple[Pair, dict[str, Any], str]] = {
    "mlp": (Pair.FLOOR, {"method": "sgd"}, "eager"),
    "bbb-paper": (Pair.PAPER, {"prior": "mixture", "pi": 0.25, "sigma1": 1.0, "sigma2": math.exp(-7.0),
                               "kl": "mc", "estimator": "reparam"}, "auto"),
    "bbb-paper-compiled": (Pair.PAPER, {"prior": "mixture", "pi": 0.25, "sigma1": 1.0,
                                        "sigma2": math.exp(-7.0), "kl": "mc", "estimator": "reparam"},
                           "compile"),
    "bbb-gauss": (Pair.GAUSS, {"prior": "gaussian", "prior_sigma": 1.0, "kl": "auto",
                               "estimator": "reparam"}, "auto"),
    "bbb-gauss-compiled": (Pair.GAUSS, {"prior": "gaussian", "prior_sigma": 1.0, "kl": "auto",
                                        "estimator": "reparam"}, "compile"),
    "bbb-flipout": (Pair.FLIPOUT, {"prior": "gaussian", "prior_sigma": 1.0, "kl": "auto",
                                   "estimator": "flipout"}, "auto"),
    "bbb-local": (Pair.LOCAL, {"prior": "gaussian", "prior_sigma": 1.0, "kl": "auto",
                               "estimator": "local"}, "auto"),
}


@dataclass
class Ours(System):
    settings: dict[str, Any] = field(default_factory=dict)
    backend: str = "auto"
    cfg: TrainConfig | None = None

    def build(self, width: int, device: torch.device) -> None:
        import bbb

        if self.pair is Pair.FLOOR:
            self.version = str(torch.__version__)
        else:
            self.version = bbb.__version__ + ("" if self.backend == "auto" else f" ({self.backend} kernels)")
        self.cfg = TrainConfig(hidden=[width, width], batch_size=128, samples=1, lr=1e-3,
                               kl_weighting="uniform", **self.settings)
        self.model = build_model(self.cfg, IN_FEATURES, NUM_CLASSES).to(device)
        self.elbo = (ELBO(self.model, "categorical", num_batches=NUM_BATCHES, kl_weighting="uniform",
                          num_samples=1, kl=self.cfg.kl) if self.cfg.method == "bbb" else None)
        self.opt = make_optimizer(self.cfg, self.model)
        self.model.train()

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:
        training_step(self.model, self.elbo, self.opt, x, y, batch_index % NUM_BATCHES)

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:
        return _mean_logits(self.model, x, chunk=x.shape[0])

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:
        if self.cfg is not None and self.cfg.method != "bbb":
            return _mean_logits(self.model, x, chunk=x.shape[0]).unsqueeze(0)
        return U.predict(self.model, x, k)

    @torch.no_grad()
    def predict_probs_dataset(self, x: Tensor, k: int, chunk: int) -> Tensor:
        if self.cfg is not None and self.cfg.method != "bbb":
            return super().predict_probs_dataset(x, k, chunk)
        # bbb.uncertainty.predict, as `bbb evaluate` calls it: the same k networks for every chunk
        return torch.softmax(U.predict(self.model, x, k, batch_size=chunk).float(), -1).mean(0)


def systems() -> dict[str, System]:
    return {name: Ours(name=name, pair=pair, library="bbb (ours)" if pair is not Pair.FLOOR else "torch.nn",
                       settings=settings, backend=backend)
            for name, (pair, settings, backend) in CONFIGS.items()}
