"""The per-member optimisers of ``bbb reproduce uci``'s populations: parameters whose first
dimension is the member (network), each member with its own hyperparameters, elementwise, so that
each member trains exactly as it would alone.

- :class:`MemberAdam`: Adam, one learning rate per member (BBB, MC dropout, deep ensembles, the
  Laplace's MAP network).
- :class:`MemberIVON`: IVON (Shen et al. 2024; the update of :func:`bbb.ivon_math.ivon_update`, the
  same as :class:`bbb.IVON`'s), one learning rate, effective sample size and prior precision per
  member; the posterior's sigma is written into the layers' rho after every step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ...ivon_math import inverse_softplus, ivon_update

__all__ = ["MemberAdam", "MemberIVON"]


class MemberAdam:
    """Adam (Kingma & Ba) over parameters whose first dimension is the member, with one learning
    rate per member: ``lr`` (members,). Elementwise, so each member trains exactly as it would
    alone with its own rate."""

    def __init__(self, params: Sequence[Tensor], lr: Tensor, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr = lr.detach().clone().float()
        self.betas, self.eps, self.t = betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        self.t += 1
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            lr = self.lr.to(p.dtype).view(-1, *([1] * (p.dim() - 1)))
            p.addcdiv_(m * (lr / c1), (v / c2).sqrt_().add_(self.eps), value=-1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "m": [m.clone() for m in self.m], "v": [v.clone() for v in self.v]}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.t = int(st["t"])
        for dst, src in zip(self.m + self.v, st["m"] + st["v"]):
            dst.copy_(src)


class MemberIVON:
    """IVON over a population's Bayesian weights, each a pair (mu, rho) of shape (members, ...),
    with one learning rate ``lr``, effective sample size ``ess`` and prior precision
    ``weight_decay`` per member (each (members,)); ``hess_init``, ``beta1``, ``beta2`` shared.

    The state per weight: the momentum, the Hessian estimate h (``hess_init`` at the start) and
    sigma = 1 / sqrt(ess (h + weight_decay)), written into rho (softplus(rho) = sigma) at the start
    and after every step. A step needs each weight's gradient at the sample mu + sigma * eps
    (``mu.grad``: the sample's derivative by mu is 1) and that sample's eps: :meth:`step`.
    The learning rate is rescaled by (hess_init + weight_decay), as :class:`bbb.IVON` does by
    default, so that ``lr`` means the same for any ``hess_init``."""

    def __init__(self, pairs: Sequence[tuple[Tensor, Tensor]], lr: Tensor, ess: Tensor, weight_decay: Tensor,
                 hess_init: float, beta1: float = 0.9, beta2: float = 0.99999) -> None:
        if not hess_init > 0:
            raise ValueError(f"hess_init must be > 0, got {hess_init}")
        self.pairs = list(pairs)
        self.lr, self.ess, self.wd = (t.detach().double().clone() for t in (lr, ess, weight_decay))
        self.hess_init, self.betas, self.t = float(hess_init), (float(beta1), float(beta2)), 0
        self.m = [torch.zeros_like(mu) for mu, _ in self.pairs]
        self.h = [torch.full_like(mu, self.hess_init) for mu, _ in self.pairs]
        sigma0 = (self.ess * (self.hess_init + self.wd)).rsqrt()
        self.sigma = [self._member_column(sigma0, mu).to(mu.dtype).expand_as(mu).clone() for mu, _ in self.pairs]
        with torch.no_grad():
            for (_, rho), s in zip(self.pairs, self.sigma):
                rho.copy_(inverse_softplus(s))

    @staticmethod
    def _member_column(col: Tensor, like: Tensor) -> Tensor:
        """(members,) as (members, 1, ...) against ``like``."""
        return col.view(-1, *([1] * (like.dim() - 1)))

    def sigma_of(self, mu: Tensor) -> Tensor:
        """The sigma of the weight whose mean is ``mu`` (the one the next sample uses)."""
        for (m, _), s in zip(self.pairs, self.sigma):
            if m is mu:
                return s
        raise KeyError("MemberIVON.sigma_of: not one of its means")

    def zero_grad(self) -> None:
        for mu, rho in self.pairs:
            mu.grad = None
            rho.grad = None

    @torch.no_grad()
    def step(self, eps: Sequence[Tensor]) -> None:
        """One IVON step of every member: ``eps`` the noise of this step's sample, one tensor per
        pair (as ``pairs``); the gradients in ``mu.grad`` (a member's mean loss over its minibatch)."""
        if len(eps) != len(self.pairs):
            raise ValueError(f"MemberIVON.step: {len(eps)} noise tensors for {len(self.pairs)} weights")
        b1, b2 = self.betas
        self.t += 1
        ones = torch.ones_like(self.lr)
        hp = torch.stack([ones * b1, ones * b2, self.wd, self.lr * (self.hess_init + self.wd),
                          ones * (1.0 - b1 ** self.t), self.ess, ones * math.inf])  # (7, members), float64
        for (mu, rho), m, h, s, e in zip(self.pairs, self.m, self.h, self.sigma, eps):
            if mu.grad is None:
                continue
            g = mu.grad
            sigma, new_rho = ivon_update(mu, m, h, g, g * e, s, hp.view(7, -1, *([1] * (mu.dim() - 1))))
            s.copy_(sigma)
            rho.copy_(new_rho)

    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "m": [x.clone() for x in self.m], "h": [x.clone() for x in self.h],
                "sigma": [x.clone() for x in self.sigma]}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.t = int(st["t"])
        for dst, src in zip(self.m + self.h + self.sigma, st["m"] + st["h"] + st["sigma"]):
            dst.copy_(src)
