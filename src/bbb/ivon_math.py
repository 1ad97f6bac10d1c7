"""IVON's update as plain tensor arithmetic (:class:`bbb.IVON` runs it, compiled or eager; the UCI
harness's population optimiser too): one step of one weight tensor (:func:`ivon_update`), or of one
sample of every weight over flat buffers (:func:`ivon_flat_update`), and rho from sigma."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["inverse_softplus", "ivon_update", "ivon_flat_math", "ivon_flat_update"]


def inverse_softplus(sigma: Tensor) -> Tensor:
    """rho with softplus(rho) = sigma (sigma > 0): log(expm1(sigma)), and sigma itself above 20
    (where softplus is the identity to working precision, as ``F.softplus``'s threshold)."""
    return torch.where(sigma > 20.0, sigma, torch.log(torch.expm1(torch.clamp(sigma, max=20.0))))


def _ivon_math(mu: Tensor, momentum: Tensor, hess: Tensor, g: Tensor, gz: Tensor, sigma: Tensor,
               hp: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The new (mu, momentum, h, sigma) of one IVON step (see :func:`ivon_update`)."""
    b1, b2, wd, lr, bc1, ess, clip = (hp[i].to(hess.dtype) for i in range(7))  # (float32 for half weights)
    h_hat = gz.to(hess.dtype) / sigma
    new_m = b1 * momentum + (1.0 - b1) * g
    new_h = b2 * hess + (1.0 - b2) * h_hat + 0.5 * (1.0 - b2) ** 2 * (hess - h_hat) ** 2 / (hess + wd)
    direction = torch.clamp((new_m / bc1 + wd * mu) / (new_h + wd), -clip, clip)
    return mu - lr * direction, new_m, new_h, torch.rsqrt(ess * (new_h + wd))


def ivon_update(mu: Tensor, momentum: Tensor, hess: Tensor, g: Tensor, gz: Tensor, sigma: Tensor,
                hp: Tensor) -> tuple[Tensor, Tensor]:
    """One IVON step of one weight tensor, in place on ``mu``, ``momentum`` and ``hess``; returns
    the new (sigma, rho). ``g``: the gradient at the sampled weights (summed over the samples of a
    mean loss), ``gz``: the same sum of gradient * eps; ``hp`` (float64): beta1, beta2,
    weight_decay, the step of m (lr, rescaled), 1 - beta1^t, ess, clip_radius.
    Plain tensor arithmetic: ``torch.compile`` makes one loop of it."""
    new_mu, new_m, new_h, new_sigma = _ivon_math(mu, momentum, hess, g, gz, sigma, hp)
    momentum.copy_(new_m)
    hess.copy_(new_h)
    mu.copy_(new_mu)
    return new_sigma, inverse_softplus(new_sigma)


def ivon_flat_math(mu: Tensor, momentum: Tensor, hess: Tensor, g: Tensor, eps: Tensor, sigma: Tensor,
                   rho: Tensor, hp: Tensor) -> None:
    """:func:`ivon_flat_update` but the zeroing of ``g``: the loop that ``torch.compile`` makes of it
    on the CPU (with the zeroing in the same compiled function, Inductor emitted this loop without
    its parallel region: docs/bbb_or_ivon.md)."""
    new_mu, new_m, new_h, new_sigma = _ivon_math(mu, momentum, hess, g, g * eps, sigma, hp)
    momentum.copy_(new_m)
    hess.copy_(new_h)
    mu.copy_(new_mu)
    sigma.copy_(new_sigma)
    rho.copy_(inverse_softplus(new_sigma))


def ivon_flat_update(mu: Tensor, momentum: Tensor, hess: Tensor, g: Tensor, eps: Tensor, sigma: Tensor,
                     rho: Tensor, hp: Tensor, kernel: Callable[..., None] = ivon_flat_math) -> None:
    """:func:`ivon_update` of one sample of every weight, in place on flat vectors: ``g`` the
    gradient at mu + sigma * eps (zeroed after use: the next backward accumulates into it),
    ``sigma`` and ``rho`` (the layers' rho) written from the new h. ``kernel``: :func:`ivon_flat_math`
    or its compiled form (one loop), then ``g`` zeroed."""
    kernel(mu, momentum, hess, g, eps, sigma, rho, hp)
    g.zero_()
