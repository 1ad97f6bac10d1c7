"""blitz-bayesian-pytorch 0.2.8: BayesianLinear with the scale-mixture prior, Monte Carlo KL.

As its README: a ``@variational_estimator`` network and ``sample_elbo(inputs, labels, criterion,
sample_nbr=1, complexity_cost_weight=1/M)``. The prior is set to ours (pi 0.25, sigma1 1,
sigma2 e^-7), so the objective matches our paper-faithful configuration (blitz's defaults are a
single N(0, 0.1^2), ``prior_pi=1``). Posterior mean: ``freeze_()`` (its ``forward_frozen`` uses mu).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .base import IN_FEATURES, NUM_BATCHES, NUM_CLASSES, Pair, System, require


@dataclass
class Blitz(System):
    lr: float = 1e-3

    def build(self, width: int, device: torch.device) -> None:
        modules, self.version = require("blitz.modules", "blitz-bayesian-pytorch")
        utils, _ = require("blitz.utils")
        layer = modules.BayesianLinear

        @utils.variational_estimator
        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                sizes = [IN_FEATURES, width, width, NUM_CLASSES]
                self.layers = nn.ModuleList(
                    layer(a, b, prior_sigma_1=1.0, prior_sigma_2=math.exp(-7.0), prior_pi=0.25)
                    for a, b in zip(sizes[:-1], sizes[1:]))

            def forward(self, x: Tensor) -> Tensor:
                for i, lay in enumerate(self.layers):
                    x = lay(x)
                    if i < len(self.layers) - 1:
                        x = F.relu(x)
                return x

        self.model = Net().to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        self.criterion = nn.CrossEntropyLoss()
        self.model.train()

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:
        self.opt.zero_grad()
        loss = self.model.sample_elbo(inputs=x, labels=y, criterion=self.criterion, sample_nbr=1,
                                      complexity_cost_weight=1.0 / NUM_BATCHES)
        loss.backward()
        self.opt.step()

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:
        self.model.freeze_()
        try:
            return self.model(x)
        finally:
            self.model.unfreeze_()

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:
        return torch.stack([self.model(x) for _ in range(k)])  # as its mfvi_forward


def systems() -> dict[str, System]:
    return {"blitz": Blitz(name="blitz", pair=Pair.PAPER, library="blitz BayesianLinear")}
