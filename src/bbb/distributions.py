"""Posteriors, priors and the KL between them.

One contract for every distribution (as in ``torch.distributions``): ``log_prob(w)`` is
elementwise, ``sample(shape)`` draws. The KL is chosen by type through a registry
(:func:`register_kl`); :func:`kl_divergence` raises ``NotImplementedError`` when no closed form
is registered, and :func:`kl_term` falls back to the Monte Carlo estimate
``log q(w) - log p(w)`` on the very weight samples used in the forward pass (the paper's
common random numbers). The priors are defined in :mod:`bbb.priors` and importable from here.

All scale arguments are standard deviations, never variances.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import UserError, check_int
from .options import StrOption
from .priors import (
    DEFAULT_PI,
    DEFAULT_SIGMA1,
    DEFAULT_SIGMA2,
    LOG_SQRT_2PI,
    CenteredPrior,
    GaussianPrior,
    MemberPrior,
    Prior,
    ScaleMixturePrior,
    TorchPrior,
    make_prior,
    prior_from_config,
)

__all__ = [
    "normal_log_prob",
    "DiagonalNormal",
    "Prior",
    "GaussianPrior",
    "ScaleMixturePrior",
    "TorchPrior",
    "CenteredPrior",
    "MemberPrior",
    "KLMode",
    "register_kl",
    "kl_divergence",
    "has_closed_form_kl",
    "uses_monte_carlo",
    "mc_kl",
    "kl_term",
    "check_kl_samples",
    "split_kl",
    "softplus",
    "inverse_softplus",
    "prior_from_config",
    "make_prior",
    "DEFAULT_PI",
    "DEFAULT_SIGMA1",
    "DEFAULT_SIGMA2",
]


def normal_log_prob(x: Tensor, mean: Tensor, sigma: Tensor) -> Tensor:
    """log N(x; mean, sigma^2), elementwise (broadcasting): the one Gaussian log density of the
    likelihoods, the regression metrics and the UCI benchmark."""
    z = (x - mean) / sigma
    return -0.5 * z * z - torch.log(sigma) - LOG_SQRT_2PI


def softplus(rho: Tensor) -> Tensor:
    """sigma = log(1 + exp(rho)), stable for any rho (finite, > 0 down to rho ~ -87 in float32)."""
    return F.softplus(rho)


def inverse_softplus(sigma: float | Tensor) -> float | Tensor:
    """rho such that softplus(rho) = sigma (sigma > 0)."""
    if isinstance(sigma, Tensor):
        return sigma + torch.log(-torch.expm1(-sigma))
    if sigma <= 0:
        raise UserError(f"sigma must be > 0 to invert softplus, got {sigma}")
    return sigma + math.log(-math.expm1(-sigma))


# --------------------------------------------------------------------------------------------
# Variational posterior
# --------------------------------------------------------------------------------------------


class DiagonalNormal:
    """Fully factorised Gaussian q(w) = prod_j N(w_j | mu_j, sigma_j^2).

    A light view over tensors (usually a layer's ``mu`` and ``softplus(rho)``), not a module:
    building one costs nothing and keeps gradients flowing to the parameters.
    """

    def __init__(self, mu: Tensor, sigma: Tensor) -> None:
        self.mu = mu
        self.sigma = sigma

    @classmethod
    def from_rho(cls, mu: Tensor, rho: Tensor) -> DiagonalNormal:
        return cls(mu, softplus(rho))

    def rsample(self, eps: Tensor) -> Tensor:
        """w = mu + sigma * eps for standard normal noise ``eps`` (broadcast over leading dims)."""
        return torch.addcmul(self.mu, self.sigma, eps)

    def sample_eps(self, shape: tuple[int, ...] = (), generator: torch.Generator | None = None) -> Tensor:
        return torch.randn(
            (*shape, *self.mu.shape), generator=generator, device=self.mu.device, dtype=self.mu.dtype
        )

    def log_prob(self, w: Tensor) -> Tensor:
        z = (w - self.mu) / self.sigma
        return -torch.log(self.sigma) - LOG_SQRT_2PI - 0.5 * z * z

    def log_prob_eps(self, eps: Tensor) -> Tensor:
        """log q(mu + sigma*eps), written through eps: exact, cheaper and free of the division.

        Its total derivative with respect to (mu, rho) equals that of ``log_prob(rsample(eps))``:
        d/dmu is 0 and d/dsigma is -1/sigma either way.
        """
        return -torch.log(self.sigma) - LOG_SQRT_2PI - 0.5 * eps * eps

    def entropy(self) -> Tensor:
        return torch.log(self.sigma) + LOG_SQRT_2PI + 0.5

    def __repr__(self) -> str:
        return f"DiagonalNormal(shape={tuple(self.mu.shape)})"


# --------------------------------------------------------------------------------------------
# KL dispatch
# --------------------------------------------------------------------------------------------


class KLMode(StrOption):
    """How the complexity cost KL[q || P] is computed.

    ``auto``: closed form when one is registered for the (posterior, prior) pair, else Monte Carlo.
    ``closed``: closed form, error when none exists. ``mc``: Monte Carlo always (the paper's choice).
    ``split``: closed form where it exists for a part of the KL, the rest estimated without bias
    from one importance sample per weight (:meth:`Prior.kl_split`; for the scale mixture, the
    narrow component's share); the same as ``closed`` for a prior with a closed form.
    """

    AUTO = "auto"
    CLOSED = "closed"
    MC = "mc"
    SPLIT = "split"


_KL_REGISTRY: dict[tuple[type, type], Callable[[Any, Any], Tensor]] = {}


def register_kl(q_type: type, p_type: type):
    """Decorator registering an elementwise closed-form KL[q || p] for a pair of types."""

    def deco(fn: Callable[[Any, Any], Tensor]) -> Callable[[Any, Any], Tensor]:
        _KL_REGISTRY[(q_type, p_type)] = fn
        return fn

    return deco


def _lookup_types(q_type: type, p: Any) -> Callable[[Any, Any], Tensor] | None:
    for qt in q_type.__mro__:
        for pt in type(p).__mro__:
            fn = _KL_REGISTRY.get((qt, pt))
            if fn is _kl_normal_prior and not p.has_closed_form:
                continue
            if fn is not None:
                return fn
    return None


def _lookup(q: Any, p: Any) -> Callable[[Any, Any], Tensor] | None:
    return _lookup_types(type(q), p)


def has_closed_form_kl(q: Any, p: Any) -> bool:
    return _lookup(q, p) is not None


def uses_monte_carlo(p: Any, mode: KLMode | str, q_type: type = DiagonalNormal) -> bool:
    """Whether ``kl_term`` with this mode estimates KL[q || p] by Monte Carlo."""
    mode = KLMode(mode)
    if isinstance(p, CenteredPrior):  # a layer's centred prior: what each layer's (with its mean) does
        p = p.base
    if mode is KLMode.MC:
        return True
    if mode is KLMode.SPLIT:
        _check_split(p)
        return False
    closed = _lookup_types(q_type, p) is not None
    if mode is KLMode.CLOSED and not closed:
        raise UserError(f"no closed-form KL for a {type(p).__name__}; use kl='mc' or kl='auto'")
    return not closed


def kl_divergence(q: Any, p: Any) -> Tensor:
    """Elementwise closed-form KL[q || p]; ``NotImplementedError`` when none is registered."""
    fn = _lookup(q, p)
    if fn is None:
        raise NotImplementedError(
            f"no closed-form KL between {type(q).__name__} and {type(p).__name__}; use Monte Carlo"
        )
    return fn(q, p)


@register_kl(DiagonalNormal, Prior)
def _kl_normal_prior(q: DiagonalNormal, p: Prior) -> Tensor:
    """Any prior that states its closed form (:meth:`Prior.kl_closed_form`)."""
    out = p.kl_closed_form(q.mu, q.sigma)
    if out is None:
        raise NotImplementedError(f"{type(p).__name__} has no closed-form KL; use Monte Carlo")
    return out[0]


def mc_kl(q: DiagonalNormal, p: Prior, eps: Tensor, w: Tensor | None = None) -> Tensor:
    """Elementwise single-sample estimate log q(w) - log p(w) at w = mu + sigma * eps.

    ``eps`` may carry leading sample dimensions; pass ``w`` when it was already formed (the
    forward pass's own weights: common random numbers, no recomputation).
    """
    if w is None:
        w = q.rsample(eps)
    return q.log_prob_eps(eps) - p.log_prob(w)


def kl_term(
    q: DiagonalNormal,
    p: Prior,
    mode: KLMode | str = KLMode.AUTO,
    eps: Tensor | None = None,
    w: Tensor | None = None,
    generator: torch.Generator | None = None,
    num_samples: int | None = None,
    extra_eps: Tensor | None = None,
) -> Tensor:
    """KL[q || p] summed over all elements (a scalar; float32 for a 16-bit ``q``).

    With Monte Carlo and ``eps`` of shape ``(k, *q.mu.shape)``, the k estimates are averaged.
    Without ``eps``, one fresh sample is drawn. ``num_samples`` (Monte Carlo only) is the number
    of weight samples the estimate averages over: None takes the given samples (or one fresh
    draw); a larger number adds ``num_samples - k`` draws of the KL's own to the k given ones
    (``extra_eps`` of shape ``(num_samples - k, *q.mu.shape)`` when supplied, else fresh noise
    from ``generator``). A closed-form KL needs no samples and ignores it.
    """
    mode = KLMode(mode)
    if q.mu.dtype in (torch.float16, torch.bfloat16):  # summed over every weight: float16 overflows at 65504
        q = DiagonalNormal(q.mu.float(), q.sigma.float())
        eps, w, extra_eps = (None if t is None else t.float() for t in (eps, w, extra_eps))
    if mode is KLMode.SPLIT:
        return split_kl(q, p, extra_eps, generator)
    if mode is not KLMode.MC:
        fn = _lookup(q, p)
        if fn is not None:
            return fn(q, p).sum()
        if mode is KLMode.CLOSED:
            raise UserError(
                f"no closed-form KL for a {type(p).__name__}; use kl='mc' or kl='auto'"
            )
    given = 0 if eps is None else math.prod(eps.shape[: eps.dim() - q.mu.dim()])
    want = max(given, 1) if num_samples is None else check_kl_samples(num_samples, given)
    total = mc_kl(q, p, eps, w).sum() if eps is not None and given else None
    if want > given:
        if extra_eps is None:
            extra_eps = q.sample_eps((want - given,), generator=generator)
        elif tuple(extra_eps.shape) != (want - given, *q.mu.shape):
            raise UserError(f"extra_eps must have shape {(want - given, *q.mu.shape)}, got {tuple(extra_eps.shape)}")
        more = mc_kl(q, p, extra_eps).sum()
        total = more if total is None else total + more
    assert total is not None
    return total / want if want > 1 else total


def split_kl(q: DiagonalNormal, p: Prior, z: Tensor | None = None,
             generator: torch.Generator | None = None) -> Tensor:
    """KL[q || p] summed, by :meth:`Prior.kl_split` with the noise ``z`` (one row, ``(1, *shape)``
    or ``shape``; None: a fresh draw from ``generator``). Differentiable: its gradients with
    respect to mu and sigma are the split's estimates (the value is the estimate's)."""
    _check_split(p)
    if z is None:
        z = q.sample_eps(generator=generator)
    z = z.reshape(q.mu.shape)
    out = p.kl_split(q.mu.detach(), q.sigma.detach(), z)
    assert out is not None
    kl, dmu, dsig = (t.detach() for t in out)
    # the value of the estimate, with dmu and dsig as its gradients (first order)
    return (kl + dmu * (q.mu - q.mu.detach()) + dsig * (q.sigma - q.sigma.detach())).sum()


def _check_split(p: Prior) -> None:
    if not p.has_split:
        why = (" with sigma1 <= sigma2 (the split needs the wide component first: swap them, pi -> 1 - pi)"
               if isinstance(p, ScaleMixturePrior) else "")
        raise UserError(f"no split KL for a {type(p).__name__}{why}; use kl='mc' or kl='auto'")


def check_kl_samples(num_samples: object, given: int = 1) -> int:
    """``num_samples`` of the Monte Carlo KL as an int: at least 1 and at least the ``given``
    samples of the likelihood (the KL averages over those and adds draws of its own)."""
    n = check_int("kl_samples", num_samples)
    if n < max(given, 1):
        raise UserError(f"kl_samples ({n}) must be at least the likelihood's weight samples ({max(given, 1)}): "
                        "the KL averages over those and adds samples of its own")
    return n
