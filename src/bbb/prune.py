"""Weight pruning by signal-to-noise ratio |mu| / sigma (section 5.1, Table 2 of the paper).

Weights are ranked globally over every Bayesian layer; the lowest-SNR fraction is set to 0 via a
mask buffer (``weight_mask``), so pruning can be undone with :func:`unprune`. A pruned network is
evaluated with the posterior mean of the remaining weights (as in the paper) or sampled; pruned
weights are exactly 0 either way. A pruned weight still counts in the KL with its Gaussian posterior
(mu and sigma unmasked, which :func:`unprune` restores; a point mass at 0 has no finite KL against
a continuous prior), on the plain path and the Engine's alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn as nn
from torch import Tensor

from .distributions import softplus
from .errors import UserError, check_float
from .nn import BayesModule, bayes_modules

__all__ = ["signal_to_noise", "prune", "unprune", "PruneResult", "count_weights", "snr_db"]


def _is_bias(name: str) -> bool:
    """A bias posterior: ``bias``, ``bias_ih_l0`` (recurrent), ``in_proj_bias`` (attention)..."""
    return name == "bias" or name.startswith("bias_") or name.endswith("_bias")


def _targets(model: nn.Module, include_bias: bool) -> list[tuple[BayesModule, str]]:
    """Every weight posterior of every Bayesian layer (``weight``, a recurrent layer's
    ``weight_ih_l0``..., attention's ``in_proj_weight``), and the biases with ``include_bias``."""
    out = [(m, n) for m in bayes_modules(model) for n in m.param_names() if include_bias or not _is_bias(n)]
    if not out:
        raise UserError("the model has no Bayesian layers to prune")
    return out


@torch.no_grad()
def signal_to_noise(model: nn.Module, include_bias: bool = False) -> Tensor:
    """|mu| / sigma of every weight of every Bayesian layer, flattened into one tensor."""
    parts = [
        (getattr(m, f"{n}_mu").abs() / softplus(getattr(m, f"{n}_rho"))).flatten()
        for m, n in _targets(model, include_bias)
    ]
    return torch.cat(parts)


def snr_db(snr: Tensor) -> Tensor:
    """SNR in decibels, 10 log10(|mu| / sigma) (the paper does not state its convention)."""
    return 10.0 * torch.log10(snr)


def count_weights(model: nn.Module, include_bias: bool = False) -> tuple[int, int]:
    """(total, unpruned) counts of the Bayesian weights."""
    total = kept = 0
    for m, n in _targets(model, include_bias):
        numel = getattr(m, f"{n}_mu").numel()
        mask = m._mask(n)
        total += numel
        kept += numel if mask is None else int(mask.count_nonzero())
    return total, kept


@dataclass
class PruneResult:
    fraction: float
    total: int
    kept: int
    threshold: float

    @property
    def removed(self) -> int:
        return self.total - self.kept


@torch.no_grad()
def prune(model: nn.Module, fraction: float, include_bias: bool = False) -> PruneResult:
    """Zero exactly floor(fraction * N) of the N weights, those with the lowest |mu|/sigma.

    Replaces every earlier mask (a bias pruned earlier with ``include_bias`` is restored when the
    biases are not ranked now). Returns how many weights remain and the SNR threshold.
    """
    fraction = check_float("fraction to prune", fraction, 0.0)  # (a string was a TypeError)
    if fraction > 1.0:
        raise UserError(f"fraction to prune must be in [0, 1], got {fraction}")
    targets = _targets(model, include_bias)
    unprune(model)  # every earlier mask, a bias's too when the biases are not ranked now
    snr = signal_to_noise(model, include_bias)
    n = snr.numel()
    # the decimal the fraction was written as, times n, in exact arithmetic (in float, fraction * n
    # plus a fixed epsilon fell just below a whole number for a large n: one weight too few)
    n_remove = math.floor(Fraction(repr(fraction)) * n)
    keep = torch.ones(n, dtype=torch.bool, device=snr.device)
    threshold = 0.0
    if n_remove > 0:
        order = torch.argsort(snr, stable=True)
        keep[order[:n_remove]] = False
        threshold = float(snr[order[n_remove - 1]])
    offset = 0
    for m, name in targets:
        mu = getattr(m, f"{name}_mu")
        mask = keep[offset: offset + mu.numel()].view_as(mu).to(mu.dtype)
        offset += mu.numel()
        m.register_buffer(f"{name}_mask", mask)
    return PruneResult(fraction=float(fraction), total=n, kept=n - n_remove, threshold=threshold)


def unprune(model: nn.Module) -> None:
    """Remove every pruning mask."""
    for m in bayes_modules(model):
        for name in m._param_names:
            if f"{name}_mask" in m._buffers:
                del m._buffers[f"{name}_mask"]
