"""The Gaussian pieces every other part uses: softplus and its inverse, the Gaussian log density,
and the variational posterior :class:`DiagonalNormal` (re-exported by :mod:`bbb.distributions`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import UserError

__all__ = ["LOG_SQRT_2PI", "normal_log_prob", "softplus", "inverse_softplus", "check_sigma", "DiagonalNormal"]

#: log sqrt(2 pi), the Gaussian normaliser
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


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


def check_sigma(name: str, value: float) -> float:
    """``value`` as a float, or a UserError unless it is a finite standard deviation > 0."""
    value = float(value)
    if not (value > 0.0) or not math.isfinite(value):
        raise UserError(f"{name} must be a finite standard deviation > 0, got {value}")
    return value


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
