"""Helpers of the bbb.IVON tests (tests/core/test_ivon*.py): a toy classification set, a small
Bayesian MLP, and a training loop under IVON."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.ivon import IVON


def toy_data(n: int = 64, d: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, ((x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def train_steps(net: nn.Module, opt: IVON, steps: int, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    losses = []
    for _ in range(steps):
        with opt.sampling():
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def toy_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return bbb.BayesMLP(4, [16], 3)
