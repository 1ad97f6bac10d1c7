"""Posteriors, priors and the KL between them.

One contract for every distribution (as in ``torch.distributions``): ``log_prob(w)`` is
elementwise, ``sample(shape)`` draws. The KL is chosen by type through a registry
(:func:`register_kl`); :func:`kl_divergence` raises ``NotImplementedError`` when no closed form
is registered, and :func:`kl_term` falls back to the Monte Carlo estimate
``log q(w) - log p(w)`` on the very weight samples used in the forward pass (the paper's
common random numbers).

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
from .options import PriorKind, StrOption, choice

__all__ = [
    "normal_log_prob",
    "DiagonalNormal",
    "Prior",
    "GaussianPrior",
    "ScaleMixturePrior",
    "TorchPrior",
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

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def normal_log_prob(x: Tensor, mean: Tensor, sigma: Tensor) -> Tensor:
    """log N(x; mean, sigma^2), elementwise (broadcasting): the one Gaussian log density of the
    likelihoods, the regression metrics and the UCI benchmark."""
    z = (x - mean) / sigma
    return -0.5 * z * z - torch.log(sigma) - _LOG_SQRT_2PI


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


def _check_sigma(name: str, value: float) -> float:
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
        return -torch.log(self.sigma) - _LOG_SQRT_2PI - 0.5 * z * z

    def log_prob_eps(self, eps: Tensor) -> Tensor:
        """log q(mu + sigma*eps), written through eps: exact, cheaper and free of the division.

        Its total derivative with respect to (mu, rho) equals that of ``log_prob(rsample(eps))``:
        d/dmu is 0 and d/dsigma is -1/sigma either way.
        """
        return -torch.log(self.sigma) - _LOG_SQRT_2PI - 0.5 * eps * eps

    def entropy(self) -> Tensor:
        return torch.log(self.sigma) + _LOG_SQRT_2PI + 0.5

    def __repr__(self) -> str:
        return f"DiagonalNormal(shape={tuple(self.mu.shape)})"


# --------------------------------------------------------------------------------------------
# Priors
# --------------------------------------------------------------------------------------------


class Prior:
    """A fixed prior over each weight, applied elementwise."""

    #: name used in configs and on the command line
    name: str = "prior"

    def log_prob(self, w: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        """(log p(w), d log p / dw) elementwise; used by the fused sampling + KL kernel.

        This default goes through autograd; the built-in priors override it in closed form.
        """
        with torch.enable_grad():
            wd = w.detach().requires_grad_(True)
            lp = self.log_prob(wd)
            (g,) = torch.autograd.grad(lp.sum(), wd)
        return lp.detach(), g

    def kl_closed_form(self, mu: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        """Closed-form KL[N(mu, sigma^2) || P] elementwise with its derivatives in mu and sigma,
        ``(kl, dkl/dmu, dkl/dsigma)``; ``None`` when there is none (Monte Carlo is used).

        Written in plain tensor arithmetic, so it is differentiable and compiles; the training
        engine (:mod:`bbb.engine`) uses the derivatives, the plain path autograd through ``kl``.
        """
        return None

    def kl_split(self, mu: Tensor, sigma: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        """KL[N(mu, sigma^2) || P] elementwise, split into closed-form parts and a remainder
        estimated without bias from one importance sample per weight drawn with the standard
        normal noise ``z``: ``(kl, dkl/dmu, dkl/dsigma)`` (estimates), or ``None`` when the prior
        has no such split (``kl="split"``). A prior with a closed form returns it (no remainder).
        """
        return self.kl_closed_form(mu, sigma)

    @property
    def has_closed_form(self) -> bool:
        return type(self).kl_closed_form is not Prior.kl_closed_form

    @property
    def has_split(self) -> bool:
        """``kl_split`` gives a result (a closed form, or a written-out split)."""
        return self.has_closed_form or type(self).kl_split is not Prior.kl_split

    @property
    def has_analytic_grad(self) -> bool:
        """``log_prob_and_grad`` is written out (not the autograd default): the engine can fuse it."""
        return type(self).log_prob_and_grad is not Prior.log_prob_and_grad

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None,
               device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Tensor:
        raise NotImplementedError  # pragma: no cover - abstract

    def to_config(self) -> dict[str, Any]:
        raise NotImplementedError  # pragma: no cover - abstract

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v:.4g}" for k, v in self.to_config().items() if k != "type")
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Prior) and self.to_config() == other.to_config()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.to_config().items())))


class GaussianPrior(Prior):
    """P(w) = N(w | mu, sigma^2); ``sigma`` is a standard deviation."""

    name = "gaussian"

    def __init__(self, sigma: float = 1.0, mu: float = 0.0) -> None:
        self.sigma = _check_sigma("sigma", sigma)
        self.mu = float(mu)
        if not math.isfinite(self.mu):
            raise UserError(f"prior mean must be finite, got {mu}")
        self._log_sigma = math.log(self.sigma)

    def log_prob(self, w: Tensor) -> Tensor:
        z = (w - self.mu) / self.sigma
        return -0.5 * z * z - (self._log_sigma + _LOG_SQRT_2PI)

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        d = w - self.mu if self.mu else w
        lp = d * d * (-0.5 / self.sigma**2) - (self._log_sigma + _LOG_SQRT_2PI)
        return lp, d * (-1.0 / self.sigma**2)

    def kl_closed_form(self, mu: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        inv_s2 = 1.0 / self.sigma**2
        z = mu - self.mu if self.mu else mu
        kl = 0.5 * inv_s2 * (sigma * sigma + z * z) - torch.log(sigma) + (self._log_sigma - 0.5)
        return kl, z * inv_s2, sigma * inv_s2 - 1.0 / sigma

    def sample(self, shape, generator=None, device=None, dtype=None) -> Tensor:
        return self.mu + self.sigma * torch.randn(shape, generator=generator, device=device, dtype=dtype)

    def to_config(self) -> dict[str, Any]:
        return {"type": self.name, "sigma": self.sigma, "mu": self.mu}


#: |a - b| is capped here before exp(-|a - b|): beyond it the smaller mixture component adds
#: less than 2e-35 to the log-density (invisible next to the larger one, even in float64), and
#: exp of a large negative float32 lands in the denormal range, which is much slower per element
#: on x86 CPUs (docs/engine.md, "Denormals", has the measurement).
_MAX_GAP = 80.0


def _gap(a: Tensor, b: Tensor) -> Tensor:
    return torch.abs(a - b).clamp_(max=_MAX_GAP)


class ScaleMixturePrior(Prior):
    """P(w) = pi N(w | 0, sigma1^2) + (1 - pi) N(w | 0, sigma2^2)  (eq. 7 of the paper).

    The log-density goes through ``logsumexp``, so it stays finite for w = 0, |w| = 1e3 and
    sigma2 = exp(-8) in float32. pi = 1 reduces to a single Gaussian N(0, sigma1^2).
    """

    name = "mixture"

    def __init__(self, pi: float = 0.25, sigma1: float = 1.0, sigma2: float = math.exp(-7)) -> None:
        pi = float(pi)
        if not (0.0 < pi <= 1.0):
            raise UserError(f"mixture weight pi must be in (0, 1], got {pi}")
        self.pi = pi
        self.sigma1 = _check_sigma("sigma1", sigma1)
        self.sigma2 = _check_sigma("sigma2", sigma2)
        # log of each component's weight and normaliser, folded into constants
        self._c1 = math.log(pi) - math.log(self.sigma1) - _LOG_SQRT_2PI
        self._c2 = (math.log1p(-pi) if pi < 1.0 else -math.inf) - math.log(self.sigma2) - _LOG_SQRT_2PI
        self._h1 = -0.5 / self.sigma1**2
        self._h2 = -0.5 / self.sigma2**2

    def log_prob(self, w: Tensor) -> Tensor:
        w2 = w * w
        a = self._c1 + self._h1 * w2
        if self.pi == 1.0:
            return a
        b = self._c2 + self._h2 * w2
        # logsumexp of two terms, elementwise, without stacking: max + log(1 + exp(-|a - b|)).
        # log(1 + e) rather than log1p(e): e >= e^-80 here, where log1p runs 3x slower on CPU,
        # and the two differ by < 6e-8, below float32 resolution next to max(a, b).
        return torch.maximum(a, b) + torch.log(torch.exp(-_gap(a, b)) + 1.0)

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        w2 = w * w
        a = self._c1 + self._h1 * w2
        if self.pi == 1.0:
            return a, (2.0 * self._h1) * w
        b = self._c2 + self._h2 * w2
        diff = a - b
        e = torch.exp(-torch.abs(diff).clamp_(max=_MAX_GAP))  # in [e^-80, 1]
        e1 = e + 1.0
        lp = torch.maximum(a, b).add_(torch.log(e1))
        # d/dw = 2 w (h1 r1 + h2 r2) = 2 w (h1 + (h2 - h1) r2), with r2 = sigmoid(b - a) the
        # responsibility of component 2. Written through r2, not r1: where component 1 dominates
        # (r1 = 1 in float32) h1 + (h2 - h1) r2 stays exact, whereas h2 + (h1 - h2) r1 cancels
        # two numbers of size |h2| ~ 6e5 (sigma2 = e^-7) down to h1 = -0.5 with an error of
        # up to 0.1. sigmoid(b - a) from the same e = exp(-|a - b|): e / (1 + e) where a >= b,
        # else 1 / (1 + e); one exp per weight for the density and the responsibility.
        inv = e1.reciprocal_()
        r2 = torch.where(diff >= 0, e * inv, inv)
        g = w * r2.mul_(2.0 * (self._h2 - self._h1)).add_(2.0 * self._h1)
        return lp, g

    def kl_split(self, mu: Tensor, sigma: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The KL with log p(w) = log(pi N(w; 0, sigma1^2)) + h(w), h(w) = log(1 + r(w)) and
        r(w) = ((1 - pi) N(w; 0, sigma2^2)) / (pi N(w; 0, sigma1^2)): the entropy of q and the wide
        component's part in closed form; E_q[h], which lives within a few sigma2 of 0, from one
        importance sample u ~ g = N(m, t^2) per weight, the product of q and a Gaussian of sd
        2 sigma2' (sigma2'^-2 = sigma2^-2 - sigma1^-2, h's width): E_q[h] ~ h(u) q(u) / g(u).

        Unbiased for the value and (g held fixed, only q differentiated) for the gradients. Where
        sigma >> sigma2 (the paper's regime: sigma ~ 0.04, sigma2 = e^-8) the single-sample
        Monte Carlo KL meets the spike only on rare draws, with gradients of order w / sigma2^2
        (mean-zero kicks far larger than the mean pull); this estimate keeps the pull and drops
        almost all of that noise. Where sigma is far below sigma2 the roles turn: its gradient,
        a weighted score q'/q, has noise of order 1/sigma, and the Monte Carlo KL is the better
        estimate there.
        """
        # closed form: E_q[log q] - E_q[log(pi N(w; 0, sigma1^2))]
        log_s = torch.log(sigma)
        kl = -log_s - (_LOG_SQRT_2PI + 0.5) - self._c1 - self._h1 * (mu * mu + sigma * sigma)
        dmu = (-2.0 * self._h1) * mu
        dsig = (-2.0 * self._h1) * sigma - 1.0 / sigma
        if self.pi == 1.0:
            return kl, dmu, dsig
        # the importance sample, from values only (g is held fixed)
        m0, s0 = mu.detach(), sigma.detach()
        h12 = self._h2 - self._h1  # -(1/2) sigma2'^-2
        inv_tau2 = -h12 / 2.0  # tau = 2 sigma2': tau^-2 = sigma2'^-2 / 4
        inv_s2 = 1.0 / (s0 * s0)
        t2 = 1.0 / (inv_tau2 + inv_s2)
        t = torch.sqrt(t2)
        u = t2 * inv_s2 * m0 + t * z
        x = (self._c2 - self._c1) + h12 * u * u  # log r(u)
        log_h = torch.where(x < -30.0, x, torch.log(softplus(x)))  # h(u) = softplus(x) = log(1 + r(u))
        d = (u - mu) / sigma
        # log[h(u) q(u) / g(u)]: q(u) = N(u; mu, sigma^2), g(u) = N(u; m, t^2) (the 2 pi cancel)
        v = torch.exp(log_h - log_s + torch.log(t) - 0.5 * d * d + 0.5 * z * z)
        kl = kl - v
        dmu = dmu - v * d / sigma
        dsig = dsig - v * (d * d - 1.0) / sigma
        return kl, dmu, dsig

    def sample(self, shape, generator=None, device=None, dtype=None) -> Tensor:
        z = torch.randn(shape, generator=generator, device=device, dtype=dtype)
        pick = torch.rand(shape, generator=generator, device=device) < self.pi
        return torch.where(pick, self.sigma1 * z, self.sigma2 * z)

    def to_config(self) -> dict[str, Any]:
        return {"type": self.name, "pi": self.pi, "sigma1": self.sigma1, "sigma2": self.sigma2}


class TorchPrior(Prior):
    """Any ``torch.distributions.Distribution`` with ``log_prob`` as an elementwise prior.

    The KL is estimated by Monte Carlo through ``log_prob`` (as the paper does for its mixture);
    the training engine uses autograd for its gradient (the plain path). A scalar
    ``torch.distributions.Normal`` never ends up here: :func:`prior_from_config` turns it into a
    :class:`GaussianPrior` (closed-form KL, the fused engine). The distribution must be univariate
    (``event_shape == ()``) with a batch shape that broadcasts against each weight tensor.

    >>> layer = BayesLinear(10, 2, prior=torch.distributions.Laplace(0.0, 0.1))
    """

    name = "torch"

    def __init__(self, dist: torch.distributions.Distribution) -> None:
        if not isinstance(dist, torch.distributions.Distribution):
            raise UserError(f"TorchPrior needs a torch.distributions.Distribution, got {type(dist).__name__}")
        if tuple(dist.event_shape) != ():
            raise UserError(f"a prior must be elementwise (event_shape ()), got a {type(dist).__name__} with "
                            f"event_shape {tuple(dist.event_shape)}")
        self.dist = dist

    def log_prob(self, w: Tensor) -> Tensor:
        return self.dist.log_prob(w)

    def sample(self, shape, generator=None, device=None, dtype=None) -> Tensor:
        if generator is not None:
            raise UserError("a torch.distributions prior draws from torch's global generator only")
        return self.dist.sample(tuple(shape)).to(device=device, dtype=dtype)

    def to_config(self) -> dict[str, Any]:
        return {"type": self.name, "repr": repr(self.dist)}

    def __repr__(self) -> str:
        return f"TorchPrior({self.dist!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TorchPrior) and other.dist is self.dist

    def __hash__(self) -> int:
        return id(self.dist)


def _from_torch(dist: torch.distributions.Distribution) -> Prior:
    """A scalar ``Normal`` becomes a :class:`GaussianPrior` (closed form, fused); others wrap."""
    if type(dist) is torch.distributions.Normal and dist.loc.numel() == 1 and dist.scale.numel() == 1:
        return GaussianPrior(sigma=float(dist.scale), mu=float(dist.loc))
    return TorchPrior(dist)


def prior_from_config(cfg: dict[str, Any] | Prior | torch.distributions.Distribution) -> Prior:
    """A :class:`Prior` from a prior, a ``torch.distributions`` distribution (see
    :class:`TorchPrior`; a scalar ``Normal`` becomes a :class:`GaussianPrior`), or
    :meth:`Prior.to_config` output (used by checkpoints and the CLI)."""
    if isinstance(cfg, Prior):
        return cfg
    if isinstance(cfg, torch.distributions.Distribution):
        return _from_torch(cfg)
    if not isinstance(cfg, dict):
        raise UserError(f"a prior must be a bbb Prior, a torch.distributions distribution or a config "
                        f"dict, got {type(cfg).__name__}")
    cfg = dict(cfg)
    kind = cfg.pop("type", None)
    if kind == GaussianPrior.name:
        return GaussianPrior(**cfg)
    if kind == ScaleMixturePrior.name:
        return ScaleMixturePrior(**cfg)
    if kind == TorchPrior.name:
        raise UserError(f"a torch.distributions prior ({cfg.get('repr')}) cannot be rebuilt from a checkpoint; "
                        "pass the distribution again (prior=...) when building the model")
    raise UserError(f"unknown prior type {kind!r}; expected 'gaussian' or 'mixture'")


def make_prior(kind: str, *, pi: float = 0.5, sigma1: float = 1.0, sigma2: float = 0.0025,
               prior_sigma: float = 1.0) -> Prior:
    """The prior a configuration's flat fields describe: ``gaussian`` N(0, prior_sigma^2) or the
    scale ``mixture`` pi N(0, sigma1^2) + (1 - pi) N(0, sigma2^2) (:class:`bbb.options.PriorKind`)."""
    kind = choice("prior", kind, PriorKind)
    if kind == PriorKind.GAUSSIAN.value:
        return GaussianPrior(prior_sigma)
    return ScaleMixturePrior(pi, sigma1, sigma2)


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
    """KL[q || p] summed over all elements (a scalar).

    With Monte Carlo and ``eps`` of shape ``(k, *q.mu.shape)``, the k estimates are averaged.
    Without ``eps``, one fresh sample is drawn. ``num_samples`` (Monte Carlo only) is the number
    of weight samples the estimate averages over: None takes the given samples (or one fresh
    draw); a larger number adds ``num_samples - k`` draws of the KL's own to the k given ones
    (``extra_eps`` of shape ``(num_samples - k, *q.mu.shape)`` when supplied, else fresh noise
    from ``generator``). A closed-form KL needs no samples and ignores it.
    """
    mode = KLMode(mode)
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
        raise UserError(f"no split KL for a {type(p).__name__}; use kl='mc' or kl='auto'")


def check_kl_samples(num_samples: object, given: int = 1) -> int:
    """``num_samples`` of the Monte Carlo KL as an int: at least 1 and at least the ``given``
    samples of the likelihood (the KL averages over those and adds draws of its own)."""
    n = check_int("kl_samples", num_samples)
    if n < max(given, 1):
        raise UserError(f"kl_samples ({n}) must be at least the likelihood's weight samples ({max(given, 1)}): "
                        "the KL averages over those and adds samples of its own")
    return n
