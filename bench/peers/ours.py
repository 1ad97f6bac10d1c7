"""Our systems: the deterministic floors and bbb in each like-for-like configuration.

Every step goes through the code ``bbb train`` runs: :func:`bbb.runs.build_model`, the
:class:`bbb.ELBO` it builds, :func:`bbb.runs.make_optimizer` (for bbb the fused training engine,
:class:`bbb.engine.Engine`, which compiles its kernels by itself for networks of at least
:data:`bbb.engine.COMPILE_MIN_NUMEL` Bayesian weights) and :func:`bbb.runs.training_step`, as
in the epoch loop. Prediction is :func:`bbb.runs.mean_logits` (posterior mean) and
:func:`bbb.uncertainty.predict` (k networks, batched), as ``bbb evaluate`` does.

Two optimisers, each with its own floor: the Adam rows (``mlp``, ``bbb-paper``, ``bbb-gauss``,
...; Adam 1e-3 as the peers) and the plain-SGD rows (``mlp-sgd``, ``bbb-paper-sgd``; momentum 0,
lr 0.1, the paper's eqs. 5-6). A row's ratio to the floor is taken against the floor with the
same optimiser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bbb import uncertainty as U
from bbb.elbo import ELBO
from bbb.runs import TrainConfig, build_model, make_optimizer, mean_logits, training_step

from .base import IN_FEATURES, NUM_BATCHES, NUM_CLASSES, Pair, System

#: the paper's configuration: scale-mixture prior (pi 1/4, sigma1 1, sigma2 e^-7), Monte Carlo
#: KL, weight reparameterisation, uniform KL weighting (one sample per step is set for every row;
#: the deterministic rows take none of these: TrainConfig refuses them for --method sgd)
PAPER: dict[str, Any] = {"prior": "mixture", "pi": 0.25, "sigma1": 1.0, "sigma2": math.exp(-7.0),
                         "kl": "mc", "estimator": "reparam", "kl_weighting": "uniform"}
GAUSS: dict[str, Any] = {"prior": "gaussian", "prior_sigma": 1.0, "kl": "auto", "kl_weighting": "uniform"}
#: plain SGD, as the paper's updates (eqs. 5-6): the same on both sides of the SGD ratio
SGD: dict[str, Any] = {"optimizer": "sgd", "momentum": 0.0, "lr": 0.1}

#: TrainConfig settings of each of our systems, over :data:`BASE` (hidden is set per width)
CONFIGS: dict[str, tuple[Pair, dict[str, Any]]] = {
    "mlp": (Pair.FLOOR, {"method": "sgd"}),  # method sgd = the deterministic MLP; Adam 1e-3 (fused)
    "mlp-sgd": (Pair.FLOOR, {"method": "sgd", **SGD}),
    "bbb-paper": (Pair.PAPER, dict(PAPER)),
    "bbb-paper-sgd": (Pair.PAPER, {**PAPER, **SGD}),
    "bbb-gauss": (Pair.GAUSS, {**GAUSS, "estimator": "reparam"}),
    "bbb-flipout": (Pair.FLIPOUT, {**GAUSS, "estimator": "flipout"}),
    "bbb-local": (Pair.LOCAL, {**GAUSS, "estimator": "local"}),
}
#: what every row shares (a row's settings override it)
BASE: dict[str, Any] = {"batch_size": 128, "samples": 1, "lr": 1e-3, "optimizer": "adam"}


def engine_info(opt: Any) -> dict[str, Any] | None:
    """Whether the optimiser is bbb's engine, fused, compiled (None: not an engine)."""
    if not hasattr(opt, "fused") or not hasattr(opt, "compiled"):
        return None
    kernels = getattr(opt, "kernels", None) if opt.fused else None
    return {"fused": bool(opt.fused), "compiled": bool(opt.compiled),
            "fallback_reason": getattr(opt, "fallback_reason", None),
            "compile_failed": getattr(kernels, "failed", None)}


def engine_text(info: dict[str, Any] | None) -> str:
    """``engine fused, compiled`` / ``engine fused, eager`` / ``engine plain path``."""
    if info is None:
        return ""
    if not info["fused"]:
        return "engine plain path"
    return "engine fused, " + ("compiled" if info["compiled"] else
                               "eager (compile failed)" if info.get("compile_failed") else "eager")


@dataclass
class Ours(System):
    settings: dict[str, Any] = field(default_factory=dict)
    cfg: TrainConfig | None = None

    @property
    def optimizer(self) -> str:
        return str({**BASE, **self.settings}["optimizer"])

    @property
    def lr(self) -> float:
        return float({**BASE, **self.settings}["lr"])

    def build(self, width: int, device: torch.device) -> None:
        self.cfg = TrainConfig(**{**BASE, **self.settings, "hidden": [width, width]})
        self.model = build_model(self.cfg, IN_FEATURES, NUM_CLASSES).to(device)
        self.elbo = (ELBO(self.model, "categorical", num_batches=NUM_BATCHES, kl_weighting=self.cfg.kl_weighting,
                          num_samples=self.cfg.samples, kl=self.cfg.kl) if self.cfg.method == "bbb" else None)
        self.opt = make_optimizer(self.cfg, self.model)
        self.model.train()
        self.refresh_version()

    def engine(self) -> dict[str, Any] | None:
        return engine_info(getattr(self, "opt", None))

    def refresh_version(self) -> None:
        """The version string, with the engine's state (a failed compilation falls back to eager
        at the first step, so the bench asks again after timing)."""
        import bbb

        if self.pair is Pair.FLOOR:
            self.version = str(torch.__version__)
            return
        text = engine_text(self.engine())
        self.version = bbb.__version__ + (f" ({text})" if text else "")

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:
        training_step(self.model, self.elbo, self.opt, x, y, batch_index % NUM_BATCHES)

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:
        return mean_logits(self.model, x, chunk=x.shape[0])

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:
        if self.cfg is not None and self.cfg.method != "bbb":
            return mean_logits(self.model, x, chunk=x.shape[0]).unsqueeze(0)
        return U.predict(self.model, x, k)

    @torch.no_grad()
    def predict_probs_dataset(self, x: Tensor, k: int, chunk: int) -> Tensor:
        if self.cfg is not None and self.cfg.method != "bbb":
            return super().predict_probs_dataset(x, k, chunk)
        # bbb.uncertainty.predict, as `bbb evaluate` calls it: the same k networks for every chunk
        return torch.softmax(U.predict(self.model, x, k, batch_size=chunk).float(), -1).mean(0)


def systems() -> dict[str, System]:
    return {name: Ours(name=name, pair=pair, library="bbb (ours)" if pair is not Pair.FLOOR else "torch.nn",
                       settings=settings)
            for name, (pair, settings) in CONFIGS.items()}
