"""The priors: :class:`Prior` (the contract), :class:`GaussianPrior`, the paper's
:class:`ScaleMixturePrior`, :class:`TorchPrior` (any ``torch.distributions`` distribution),
:class:`CenteredPrior` (a prior centred on given weights), and the builders
:func:`prior_from_config` and :func:`make_prior`. :mod:`bbb.distributions` re-exports them (the
KL between a posterior and a prior is there).

All scale arguments are standard deviations, never variances.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import UserError
from .options import PriorKind, choice

__all__ = ["Prior", "GaussianPrior", "ScaleMixturePrior", "TorchPrior", "CenteredPrior", "MemberPrior",
           "prior_from_config", "make_prior", "LOG_SQRT_2PI", "DEFAULT_PI", "DEFAULT_SIGMA1", "DEFAULT_SIGMA2"]

#: log sqrt(2 pi), the Gaussian normaliser
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: The default scale mixture's pi, sigma1 and sigma2 (a point of the paper's grid), the one set that
#: :class:`ScaleMixturePrior`, :func:`make_prior`, :func:`bbb.nn.default_prior`, ``bbb train`` and
#: ``bbb regression`` share
DEFAULT_PI = 0.25
DEFAULT_SIGMA1 = 1.0
DEFAULT_SIGMA2 = math.exp(-7.0)


def _check_sigma(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0.0) or not math.isfinite(value):
        raise UserError(f"{name} must be a finite standard deviation > 0, got {value}")
    return value


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


def _centred(w: Tensor, mean: Any) -> Tensor:
    """w - mean; w itself for a mean of 0.0 (a float: no pass over w)."""
    return w if isinstance(mean, float) and not mean else w - mean


class GaussianPrior(Prior):
    """P(w) = N(w | mu, sigma^2); ``sigma`` is a standard deviation."""

    name = "gaussian"

    def __init__(self, sigma: float = 1.0, mu: float = 0.0) -> None:
        self.sigma = _check_sigma("sigma", sigma)
        self.mu = float(mu)
        if not math.isfinite(self.mu):
            raise UserError(f"prior mean must be finite, got {mu}")
        self._log_sigma = math.log(self.sigma)

    def constants(self) -> tuple[float, ...]:
        """The numbers its elementwise functions read, (mean, 1 / sigma^2, log sigma, sigma), which the
        ``*_with`` methods take as arguments: a population whose members have their own priors
        (:class:`MemberPrior`) passes each weight's member's as tensors."""
        return (self.mu, 1.0 / self.sigma**2, self._log_sigma, self.sigma)

    def log_prob(self, w: Tensor) -> Tensor:
        return self.log_prob_with(w, self.constants())

    def log_prob_with(self, w: Tensor, c: tuple[Any, ...]) -> Tensor:
        z = (w - c[0]) / c[3]
        return -0.5 * z * z - (c[2] + LOG_SQRT_2PI)

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        return self.log_prob_and_grad_with(w, self.constants())

    def log_prob_and_grad_with(self, w: Tensor, c: tuple[Any, ...]) -> tuple[Tensor, Tensor]:
        d = _centred(w, c[0])
        return d * d * (-0.5 * c[1]) - (c[2] + LOG_SQRT_2PI), d * (-c[1])

    def kl_closed_form(self, mu: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.kl_closed_form_with(mu, sigma, self.constants())

    def kl_closed_form_with(self, mu: Tensor, sigma: Tensor, c: tuple[Any, ...]) -> tuple[Tensor, Tensor, Tensor]:
        inv_s2 = c[1]
        z = _centred(mu, c[0])
        kl = 0.5 * inv_s2 * (sigma * sigma + z * z) - torch.log(sigma) + (c[2] - 0.5)
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

    def __init__(self, pi: float = DEFAULT_PI, sigma1: float = DEFAULT_SIGMA1, sigma2: float = DEFAULT_SIGMA2) -> None:
        pi = float(pi)
        if not (0.0 < pi <= 1.0):
            raise UserError(f"mixture weight pi must be in (0, 1], got {pi}")
        self.pi = pi
        self.sigma1 = _check_sigma("sigma1", sigma1)
        self.sigma2 = _check_sigma("sigma2", sigma2)
        # log of each component's weight and normaliser, folded into constants
        self._c1 = math.log(pi) - math.log(self.sigma1) - LOG_SQRT_2PI
        self._c2 = (math.log1p(-pi) if pi < 1.0 else -math.inf) - math.log(self.sigma2) - LOG_SQRT_2PI
        self._h1 = -0.5 / self.sigma1**2
        self._h2 = -0.5 / self.sigma2**2

    def constants(self) -> tuple[float, ...]:
        """The numbers its elementwise functions read, (c1, c2, h1, h2): log p(w) is the logsumexp
        of c1 + h1 w^2 and c2 + h2 w^2; the ``*_with`` methods take them as arguments (as
        :meth:`GaussianPrior.constants`). Whether pi is 1 (one component) is the prior's own."""
        return (self._c1, self._c2, self._h1, self._h2)

    def log_prob(self, w: Tensor) -> Tensor:
        return self.log_prob_with(w, self.constants())

    def log_prob_with(self, w: Tensor, c: tuple[Any, ...]) -> Tensor:
        c1, c2, h1, h2 = c
        w2 = w * w
        a = c1 + h1 * w2
        if self.pi == 1.0:
            return a
        b = c2 + h2 * w2
        # logsumexp of two terms, elementwise, without stacking: max + log(1 + exp(-|a - b|)).
        # log(1 + e) rather than log1p(e): e >= e^-80 here, where log1p runs 3x slower on CPU,
        # and the two differ by < 6e-8, below float32 resolution next to max(a, b).
        return torch.maximum(a, b) + torch.log(torch.exp(-_gap(a, b)) + 1.0)

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        return self.log_prob_and_grad_with(w, self.constants())

    def log_prob_and_grad_with(self, w: Tensor, c: tuple[Any, ...]) -> tuple[Tensor, Tensor]:
        c1, c2, h1, h2 = c
        w2 = w * w
        a = c1 + h1 * w2
        if self.pi == 1.0:
            return a, (2.0 * h1) * w
        b = c2 + h2 * w2
        diff = a - b
        gap = torch.abs(diff)
        # beyond the cap the smaller component's share is exactly 0, not exp(-cap): that floor times
        # (h2 - h1), which grows as 1 / sigma2^2, outweighed h1 in the gradient of a very narrow spike
        # (the density is the same either way)
        far = gap >= _MAX_GAP
        e = gap.clamp_(max=_MAX_GAP).neg_().exp_().masked_fill_(far, 0.0)  # in [0, 1], never denormal
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
        g = w * r2.mul_(2.0 * (h2 - h1)).add_(2.0 * h1)  # (r2 has the full shape: in place)
        return lp, g

    def kl_split(self, mu: Tensor, sigma: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.kl_split_with(mu, sigma, z, self.constants())

    def kl_split_with(self, mu: Tensor, sigma: Tensor, z: Tensor,
                      c: tuple[Any, ...]) -> tuple[Tensor, Tensor, Tensor]:
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
        c1, c2, h1, h2 = c
        # closed form: E_q[log q] - E_q[log(pi N(w; 0, sigma1^2))]
        log_s = torch.log(sigma)
        kl = -log_s - (LOG_SQRT_2PI + 0.5) - c1 - h1 * (mu * mu + sigma * sigma)
        dmu = (-2.0 * h1) * mu
        dsig = (-2.0 * h1) * sigma - 1.0 / sigma
        if self.pi == 1.0:
            return kl, dmu, dsig
        # the importance sample, from values only (g is held fixed)
        m0, s0 = mu.detach(), sigma.detach()
        h12 = h2 - h1  # -(1/2) sigma2'^-2
        inv_tau2 = -h12 / 2.0  # tau = 2 sigma2': tau^-2 = sigma2'^-2 / 4
        inv_s2 = 1.0 / (s0 * s0)
        t2 = 1.0 / (inv_tau2 + inv_s2)
        t = torch.sqrt(t2)
        u = t2 * inv_s2 * m0 + t * z
        x = (c2 - c1) + h12 * u * u  # log r(u)
        log_h = torch.where(x < -30.0, x, torch.log(F.softplus(x)))  # h(u) = softplus(x) = log(1 + r(u))
        d = (u - mu) / sigma
        # log[h(u) q(u) / g(u)]: q(u) = N(u; mu, sigma^2), g(u) = N(u; m, t^2) (the 2 pi cancel)
        v = torch.exp(log_h - log_s + torch.log(t) - 0.5 * d * d + 0.5 * z * z)
        kl = kl - v
        dmu = dmu - v * d / sigma
        dsig = dsig - v * (d * d - 1.0) / sigma
        return kl, dmu, dsig

    @property
    def has_split(self) -> bool:
        """Sigma1's component in closed form, sigma2's sampled near 0: sigma1 > sigma2 (or pi = 1)."""
        return self.pi == 1.0 or self.sigma1 > self.sigma2

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
        try:  # a Gaussian posterior puts weight outside a support not the real line: an infinite KL
            support = getattr(dist.support, "base_constraint", dist.support)  # (a mixture's: its components')
        except NotImplementedError:  # (a distribution of one's own may not say)
            support = None
        if support is not None and not isinstance(support, type(torch.distributions.constraints.real)):
            raise UserError(f"a prior must give every real weight a density, and a {type(dist).__name__}'s support is "
                            f"{support}: the KL of a Gaussian posterior to it is infinite; choose one on the real "
                            "line (Normal, Laplace, StudentT, bbb.ScaleMixturePrior)")
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


class CenteredPrior(Prior):
    """P(w) = base(w - mean): each weight's prior centred on its own value in ``mean``. With a
    Gaussian base, N(w | w0, s^2) per weight; centred on a trained network's weights it is the
    empirical-Bayes prior of fine-tuning (Krishnan et al. 2020, MOPED), which pulls each posterior
    mean towards its trained weight rather than towards 0.

    ``base``: a :class:`Prior` (a float ``s`` is ``GaussianPrior(s)``). ``mean``: the centres (a
    tensor the weights broadcast against), or None for the prior a layer is given
    (``bayesianize(net, prior=CenteredPrior(0.1))``): each Bayesian layer then centres it on its
    own posterior means (:meth:`bbb.nn.BayesModule.center_prior`, which ``bayesianize`` and
    ``from_torch`` call on the trained weights; the centres are buffers ``{name}_prior_mean`` of
    the layer's ``state_dict``) and reads it through :meth:`~bbb.nn.BayesModule.prior_for`.

    Everything is the base's, shifted: the closed-form KL where the base has one (Gaussian:
    KL[N(mu, sigma^2) || N(w0, s^2)] = log(s / sigma) + (sigma^2 + (mu - w0)^2) / (2 s^2) - 1/2),
    the Monte Carlo ``log_prob`` and the split otherwise. A prior without ``mean`` has none of
    them (a one-line error), so :class:`bbb.Engine`, whose fused kernel takes one prior for all
    the weights, trains such a model on its plain path (it says so).

    >>> p = CenteredPrior(0.1, mean=w0)                  # N(w0, 0.1^2) per weight
    >>> kl_term(DiagonalNormal(mu, sigma), p)            # closed form
    >>> bbb.bayesianize(net, prior=CenteredPrior(0.1))   # centred on net's trained weights
    """

    name = "centered"

    def __init__(self, base: Prior | float = 1.0, mean: Tensor | None = None) -> None:
        if isinstance(base, (int, float)) and not isinstance(base, bool):
            base = GaussianPrior(base)
        if not isinstance(base, Prior) or isinstance(base, CenteredPrior):
            raise UserError(f"CenteredPrior's base must be a Prior that is not itself centred (or a float sigma), "
                            f"got {base!r}")
        if mean is not None and not isinstance(mean, Tensor):
            raise UserError(f"CenteredPrior's mean must be a tensor (or None), got {type(mean).__name__}")
        self.base = base
        self.mean = mean

    def at(self, mean: Tensor) -> CenteredPrior:
        """The same prior centred on ``mean``."""
        return CenteredPrior(self.base, mean)

    def _centre(self) -> Tensor:
        if self.mean is None:
            raise UserError("this CenteredPrior has no mean: a layer centres its prior on its weights "
                            "(layer.center_prior(); bayesianize and from_torch do it) and reads layer.prior_for(name)")
        return self.mean

    def _shift(self, w: Tensor) -> Tensor:
        return w - self._centre()

    def log_prob(self, w: Tensor) -> Tensor:
        return self.base.log_prob(self._shift(w))

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        return self.base.log_prob_and_grad(self._shift(w))

    def kl_closed_form(self, mu: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        # d(mu - mean)/dmu = 1: the base's derivatives are this prior's
        return self.base.kl_closed_form(self._shift(mu), sigma) if self.base.has_closed_form else None

    def kl_split(self, mu: Tensor, sigma: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        return self.base.kl_split(self._shift(mu), sigma, z)

    @property
    def has_closed_form(self) -> bool:
        return self.mean is not None and self.base.has_closed_form

    @property
    def has_split(self) -> bool:
        return self.mean is not None and self.base.has_split

    @property
    def has_analytic_grad(self) -> bool:
        return self.mean is not None and self.base.has_analytic_grad

    def sample(self, shape, generator=None, device=None, dtype=None) -> Tensor:
        return self.base.sample(shape, generator=generator, device=device, dtype=dtype) + self._centre()

    def to_config(self) -> dict[str, Any]:
        return {"type": self.name, "base": self.base.to_config()}

    def __repr__(self) -> str:
        where = "" if self.mean is None else f", mean={tuple(self.mean.shape)}"
        return f"CenteredPrior({self.base!r}{where})"

    def __eq__(self, other: object) -> bool:
        # the centres are the layer's state (its buffers), not part of the rule
        return isinstance(other, CenteredPrior) and other.base == self.base

    def __hash__(self) -> int:
        return hash((self.name, self.base))


class MemberPrior(Prior):
    """The priors of a population's members (:class:`bbb.nn.BayesPopulation`), one each: member j's
    weights have ``priors[j]``, so that a grid over the prior trains as one population. The
    priors are of one family (every one a :class:`GaussianPrior`, or every one a
    :class:`ScaleMixturePrior`, with pi below 1 in all or in none); each member's numbers are
    its prior's :meth:`~GaussianPrior.constants`, and its functions the family's ``*_with``
    methods: member j computes exactly what ``priors[j]`` computes, to float32's rounding of
    those constants.

    A population's parameter has the member as its leading dimension, ``(members, ...)``, and its
    samples more dimensions before it: a prior for a tensor is bound to the parameter's number of
    dimensions (:meth:`at`; a population layer's :meth:`~bbb.nn.BayesModule.prior_for` does it).
    The fused engine takes the members' constants as a table (:meth:`table`) and looks up each
    weight's.

    >>> p = MemberPrior([ScaleMixturePrior(0.25, 1.0, math.exp(-7)), ScaleMixturePrior(0.5, 1.0, math.exp(-6))])
    >>> BayesPopulation(784, [400, 400], 10, bayesian=2, prior=p)
    """

    name = "members"

    def __init__(self, priors: Any, rank: int | None = None, _tables: dict[Any, Tensor] | None = None) -> None:
        try:
            items = [prior_from_config(p) for p in priors]
        except TypeError:
            raise UserError(f"MemberPrior takes a list of priors, one per member, got "
                            f"{type(priors).__name__}") from None
        if not items:
            raise UserError("MemberPrior needs the prior of at least one member")
        kinds = {type(p) for p in items}
        if len(kinds) != 1 or not kinds <= {GaussianPrior, ScaleMixturePrior}:
            names = ", ".join(sorted(k.__name__ for k in kinds))
            raise UserError(f"the members' priors must be of one family, every one a GaussianPrior or every one a "
                            f"ScaleMixturePrior; got {names}")
        if len({getattr(p, "pi", 0.0) == 1.0 for p in items}) != 1:
            raise UserError("the members' scale mixtures must all have pi below 1, or all pi = 1 (one component)")
        self.priors: tuple[Prior, ...] = tuple(items)
        #: the family's functions (its ``*_with`` methods, and whether pi is 1) are this member's
        self.family = items[0]
        self.rank = None if rank is None else int(rank)
        #: :meth:`table` by (device, dtype), shared with the copies :meth:`at` makes (one copy to a GPU)
        self._tables: dict[Any, Tensor] = {} if _tables is None else _tables

    @property
    def members(self) -> int:
        return len(self.priors)

    def member(self, j: int) -> Prior:
        """Member j's prior."""
        return self.priors[j]

    def at(self, rank: int) -> MemberPrior:
        """The same priors for a tensor whose last ``rank`` dimensions are a parameter's
        ``(members, ...)`` (its samples may add dimensions before them)."""
        return MemberPrior(self.priors, rank, self._tables)

    def table(self, device: Any = None, dtype: torch.dtype | None = None) -> Tensor:
        """(members, constants): row j is member j's :meth:`~GaussianPrior.constants` (made once per
        device and dtype)."""
        dtype = torch.float32 if dtype is None else dtype
        key = (str(torch.device(device) if device is not None else torch.device("cpu")), dtype)
        if key not in self._tables:
            with torch.inference_mode(False):  # (kept for training too: never an inference tensor)
                self._tables[key] = torch.tensor([p.constants() for p in self.priors],  # type: ignore[attr-defined]
                                                 device=device, dtype=dtype)
        return self._tables[key]

    def _constants(self, like: Tensor) -> tuple[Tensor, ...]:
        if self.rank is None:
            raise UserError("a MemberPrior reads tensors of a population's parameter: bind it to the parameter "
                            "first (prior.at(param.dim()); a layer's prior_for(name) does it)")
        if like.dim() < self.rank or like.shape[like.dim() - self.rank] != self.members:
            raise UserError(f"this MemberPrior has {self.members} members; a tensor of shape {tuple(like.shape)} "
                            f"has no member dimension {self.rank} from its end")
        t = self.table(like.device, like.dtype).view(self.members, -1, *([1] * (self.rank - 1)))
        return tuple(t[:, i] for i in range(t.shape[1]))

    def log_prob(self, w: Tensor) -> Tensor:
        return self.family.log_prob_with(w, self._constants(w))  # type: ignore[attr-defined]

    def log_prob_and_grad(self, w: Tensor) -> tuple[Tensor, Tensor]:
        return self.family.log_prob_and_grad_with(w, self._constants(w))  # type: ignore[attr-defined]

    def kl_closed_form(self, mu: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        if not self.family.has_closed_form:
            return None
        return self.family.kl_closed_form_with(mu, sigma, self._constants(mu))  # type: ignore[attr-defined]

    def kl_split(self, mu: Tensor, sigma: Tensor, z: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        if self.family.has_closed_form:
            return self.kl_closed_form(mu, sigma)
        return self.family.kl_split_with(mu, sigma, z, self._constants(mu))  # type: ignore[attr-defined]

    @property
    def has_closed_form(self) -> bool:
        return self.family.has_closed_form

    @property
    def has_split(self) -> bool:
        return all(p.has_split for p in self.priors)

    @property
    def has_analytic_grad(self) -> bool:
        return self.family.has_analytic_grad

    def sample(self, shape, generator=None, device=None, dtype=None) -> Tensor:
        """Member j's draws from its own prior, the member dimension ``rank`` from the end of ``shape``."""
        if self.rank is None or len(shape) < self.rank or shape[len(shape) - self.rank] != self.members:
            raise UserError(f"MemberPrior.sample needs a shape with its {self.members} members {self.rank} "
                            f"dimensions from the end (bind it with .at(rank)), got {tuple(shape)}")
        axis = len(shape) - self.rank
        one = (*shape[:axis], *shape[axis + 1:])
        return torch.stack([p.sample(one, generator=generator, device=device, dtype=dtype) for p in self.priors],
                           dim=axis)

    def to_config(self) -> dict[str, Any]:
        return {"type": self.name, "priors": [p.to_config() for p in self.priors]}

    def __repr__(self) -> str:
        return f"MemberPrior([{', '.join(repr(p) for p in self.priors)}])"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemberPrior) and other.priors == self.priors

    def __hash__(self) -> int:
        return hash((self.name, self.priors))


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
    if kind == CenteredPrior.name:
        return CenteredPrior(prior_from_config(cfg["base"]))
    if kind == MemberPrior.name:
        return MemberPrior(cfg["priors"])
    if kind == TorchPrior.name:
        raise UserError(f"a torch.distributions prior ({cfg.get('repr')}) cannot be rebuilt from a checkpoint; "
                        "pass the distribution again (prior=...) when building the model")
    raise UserError(f"unknown prior type {kind!r}; expected 'gaussian', 'mixture', 'centered' or 'members'")


def make_prior(kind: str, *, pi: float = DEFAULT_PI, sigma1: float = DEFAULT_SIGMA1, sigma2: float = DEFAULT_SIGMA2,
               prior_sigma: float = 1.0) -> Prior:
    """The prior a configuration's flat fields describe: ``gaussian`` N(0, prior_sigma^2) or the
    scale ``mixture`` pi N(0, sigma1^2) + (1 - pi) N(0, sigma2^2) (:class:`bbb.options.PriorKind`);
    a field left out is the library's default (:class:`ScaleMixturePrior`'s)."""
    kind = choice("prior", kind, PriorKind)
    if kind == PriorKind.GAUSSIAN.value:
        return GaussianPrior(prior_sigma)
    return ScaleMixturePrior(pi, sigma1, sigma2)
