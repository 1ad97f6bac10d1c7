"""Posteriors, priors and the KL between them.

One contract for every distribution (as in ``torch.distributions``): ``log_prob(w)`` is
elementwise, ``sample(shape)`` draws. The KL is chosen by type through a registry
(:func:`register_kl`); :func:`kl_divergence` raises ``NotImplementedError`` when no closed form
is registered, and :func:`kl_term` falls back to the Monte Carlo estimate
``log q(w) - log p(w)`` on the very weight samples used in the forward pass (the paper's
common random numbers).

All scale arguments are standard deviations, never variances.
"""

from .kl import (
    KLMode,
    check_kl_samples,
    has_closed_form_kl,
    kl_divergence,
    kl_term,
    mc_kl,
    register_kl,
    split_kl,
    uses_monte_carlo,
)
from .normal import DiagonalNormal, inverse_softplus, normal_log_prob, softplus
from .priors import (
    CenteredPrior,
    GaussianPrior,
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
]
