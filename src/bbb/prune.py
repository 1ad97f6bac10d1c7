"""Weight pruning by signal-to-noise ratio |mu| / sigma (section 5.1, Table 2 of the paper).

Weights are ranked globally over every Bayesian layer (in a population or ensemble of networks,
:class:`~bbb.nn.BayesPopulation`, over each member's layers: each member is pruned as it would be
alone); the lowest-SNR fraction is set to 0 via a mask buffer (``weight_mask``), so pruning can be
undone with :func:`unprune`. A pruned network is
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
from .errors import UserError, check_bool, check_float
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
def signal_to_noise(model: nn.Module, include_bias: bool = False, member: int | None = None) -> Tensor:
    """|mu| / sigma of every weight of every Bayesian layer, flattened into one tensor (``member``:
    member j's weights only, of a population's layers, ``(members, ...)``)."""
    def part(t: Tensor) -> Tensor:
        return t if member is None else t[member]

    return torch.cat([(part(getattr(m, f"{n}_mu")).abs() / softplus(part(getattr(m, f"{n}_rho")))).flatten()
                      for m, n in _targets(model, include_bias)])


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


def _population_members(targets: list[tuple[BayesModule, str]]) -> int | None:
    """The number of members where every target is a population layer's (members leading), else None."""
    counts = {getattr(m, "members", None) for m, _ in targets}
    k = counts.pop() if len(counts) == 1 else None
    if not isinstance(k, int) or not all(getattr(m, f"{n}_mu").shape[0] == k for m, n in targets):
        return None
    return k


@dataclass
class PruneResult:
    """``total`` weights ranked, ``kept`` of them; ``threshold`` the SNR of the last weight removed
    (in a population pruned member by member, the largest of ``member_thresholds``, one per member)."""
    fraction: float
    total: int
    kept: int
    threshold: float
    member_thresholds: tuple[float, ...] = ()

    @property
    def removed(self) -> int:
        return self.total - self.kept


@torch.no_grad()
def _lowest(snr: Tensor, fraction: float) -> tuple[Tensor, int, float]:
    """(keep, removed, threshold): floor(fraction * N) of the N ``snr`` set False, the lowest
    (ties in order), and the SNR of the last one removed (0 when none is)."""
    # the decimal the fraction was written as, times n, in exact arithmetic (in float, fraction * n
    # plus a fixed epsilon fell just below a whole number for a large n: one weight too few)
    n_remove = math.floor(Fraction(repr(fraction)) * snr.numel())
    keep = torch.ones(snr.numel(), dtype=torch.bool, device=snr.device)
    if n_remove == 0:
        return keep, 0, 0.0
    order = torch.argsort(snr, stable=True)
    keep[order[:n_remove]] = False
    return keep, n_remove, float(snr[order[n_remove - 1]])


@torch.no_grad()
def prune(model: nn.Module, fraction: float, include_bias: bool = False, by_member: bool | None = None
          ) -> PruneResult:
    """Zero exactly floor(fraction * N) of the N weights, those with the lowest |mu|/sigma.

    A population or ensemble of networks (:class:`~bbb.nn.BayesPopulation`, its layers' weights
    ``(members, ...)``) is pruned member by member (``by_member`` None or True): floor(fraction * n)
    of each member's n weights, ranked over its own layers, as that network alone would be (ranked
    together, a member whose SNRs run higher keeps more of its weights than the others);
    ``by_member=False`` ranks all members' weights together. Replaces every earlier mask (a bias
    pruned earlier with ``include_bias`` is restored when the biases are not ranked now). Returns
    how many weights remain and the SNR threshold.
    """
    fraction = check_float("fraction to prune", fraction, 0.0)  # (a string was a TypeError)
    if fraction > 1.0:
        raise UserError(f"fraction to prune must be in [0, 1], got {fraction}")
    if by_member is not None:
        by_member = check_bool("by_member", by_member)  # (the string "false" read as True)
    targets = _targets(model, include_bias)
    members = _population_members(targets)
    if by_member and members is None:
        raise UserError("by_member=True prunes a population's members (bbb.nn.BayesPopulation, BayesEnsemble); "
                        f"{type(model).__name__} has none: leave it out")
    unprune(model)  # every earlier mask, a bias's too when the biases are not ranked now
    if members is None or by_member is False:
        keep, n_remove, threshold = _lowest(signal_to_noise(model, include_bias), fraction)
        masks = [keep]
        thresholds: tuple[float, ...] = ()
    else:
        per = [_lowest(signal_to_noise(model, include_bias, member=j), fraction) for j in range(members)]
        masks = [keep for keep, _, _ in per]
        n_remove = sum(r for _, r, _ in per)
        thresholds = tuple(t for _, _, t in per)
        threshold = max(thresholds)
    offsets = [0] * len(masks)
    for m, name in targets:
        mu = getattr(m, f"{name}_mu")
        if len(masks) == 1:  # one ranking over all the weights
            part = masks[0][offsets[0]: offsets[0] + mu.numel()].view_as(mu)
            offsets[0] += mu.numel()
        else:  # member j's part of each layer from its own ranking
            size = mu[0].numel()
            part = torch.stack([masks[j][offsets[j]: offsets[j] + size].view_as(mu[j]) for j in range(len(masks))])
            offsets = [o + size for o in offsets]
        m.register_buffer(f"{name}_mask", part.to(mu.dtype))
    n = sum(getattr(m, f"{name}_mu").numel() for m, name in targets)
    return PruneResult(fraction=float(fraction), total=n, kept=n - n_remove, threshold=threshold,
                       member_thresholds=thresholds)


def unprune(model: nn.Module) -> None:
    """Remove every pruning mask."""
    for m in bayes_modules(model):
        for name in m._param_names:
            if f"{name}_mask" in m._buffers:
                del m._buffers[f"{name}_mask"]
