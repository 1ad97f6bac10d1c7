"""IntelLabs bayesian-torch 0.5.0: LinearReparameterization and LinearFlipout.

Written as its MNIST example does: each layer returns ``(out, kl)`` (``kl`` is the mean of the
closed-form elementwise KL of the tensor), and the loss is ``cross_entropy + kl / batch_size``.
Prior N(0, 1) (``prior_variance=1``, used as a standard deviation), ``posterior_rho_init=-3``.
The layers always sample in ``forward`` (no mean mode: IntelLabs/bayesian-torch#8), so the
posterior-mean prediction applies the ``mu_*`` parameters directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .base import IN_FEATURES, NUM_CLASSES, Pair, System, mlp_logits, require


class _Net(nn.Module):
    def __init__(self, layer_cls: type, width: int) -> None:
        super().__init__()
        sizes = [IN_FEATURES, width, width, NUM_CLASSES]
        self.layers = nn.ModuleList(
            layer_cls(a, b, prior_mean=0.0, prior_variance=1.0, posterior_mu_init=0.0, posterior_rho_init=-3.0)
            for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        kl_sum = x.new_zeros(())
        for i, layer in enumerate(self.layers):
            x, kl = layer(x)
            kl_sum = kl_sum + kl
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x, kl_sum


@dataclass
class BayesianTorch(System):
    module: str = ""
    cls_name: str = ""
    lr: float = 1e-3

    def build(self, width: int, device: torch.device) -> None:
        mod, self.version = require(self.module, "bayesian-torch")
        self.model = _Net(getattr(mod, self.cls_name), width).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        self.model.train()

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:
        out, kl = self.model(x)
        loss = F.cross_entropy(out, y) + kl / x.shape[0]
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:
        return mlp_logits(x, [(m.mu_weight, m.mu_bias) for m in self.model.layers])

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:
        return torch.stack([self.model(x)[0] for _ in range(k)])  # the library's MC loop


def systems() -> dict[str, System]:
    return {
        "bayesian-torch-reparam": BayesianTorch(
            name="bayesian-torch-reparam", pair=Pair.GAUSS, library="bayesian-torch LinearReparameterization",
            module="bayesian_torch.layers.variational_layers.linear_variational",
            cls_name="LinearReparameterization"),
        "bayesian-torch-flipout": BayesianTorch(
            name="bayesian-torch-flipout", pair=Pair.FLIPOUT, library="bayesian-torch LinearFlipout",
            module="bayesian_torch.layers.flipout_layers.linear_flipout", cls_name="LinearFlipout"),
    }
