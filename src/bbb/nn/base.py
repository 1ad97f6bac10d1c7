"""The base class of the Bayesian layers (:class:`BayesModule`), the estimators and the defaults."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Self, overload

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import (
    DEFAULT_PI,
    DEFAULT_SIGMA1,
    DEFAULT_SIGMA2,
    CenteredPrior,
    DiagonalNormal,
    KLMode,
    MemberPrior,
    Prior,
    ScaleMixturePrior,
    inverse_softplus,
    kl_term,
    prior_from_config,
    softplus,
)
from ..errors import UserError, check_float
from ..options import StrOption, choice
from .inputs import refold, unfold
from .samples import FOLD, PROVIDER, RECORDER, SHARED, SampleRecorder, SamplingMode

__all__ = ["Estimator", "BayesModule", "RelativeSigma", "DEFAULT_RHO_INIT", "DEFAULT_PI", "DEFAULT_SIGMA1",
           "DEFAULT_SIGMA2", "default_prior"]

#: sigma = softplus(-5) ~ 6.7e-3: the network starts close to a deterministic one, so early
#: learning is not drowned in weight noise (Pyro's autoguide init_scale PR #2156, Riquelme et al.
#: "MAP first"); large initial sigma is a known cause of divergence.
DEFAULT_RHO_INIT = -5.0

def default_prior() -> ScaleMixturePrior:
    """The default prior, the same as ``bbb train``'s: the paper's scale mixture (eq. 7) with
    pi = 1/4, sigma1 = 1, sigma2 = e^-7, a point of the paper's grid (pi in {1/4, 1/2, 3/4},
    -log sigma1 in {0, 1, 2}, -log sigma2 in {6, 7, 8}); the paper names no single best value
    (how it fares: docs/defaults.md)."""
    return ScaleMixturePrior(pi=DEFAULT_PI, sigma1=DEFAULT_SIGMA1, sigma2=DEFAULT_SIGMA2)


@dataclass(frozen=True)
class RelativeSigma:
    """The posterior's initial sigma relative to each weight: sigma0 = max(delta * |w|, min_sigma),
    w the posterior mean it starts from (the trained weight when converting with
    ``from_weights=True``): MOPED (Krishnan et al. 2020). A large weight gets room to move, a weight
    near 0 a small sigma; ``min_sigma`` keeps sigma > 0 (rho finite) where w = 0. It replaces
    ``rho_init`` (one initial sigma for all) in :func:`bbb.bayesianize` and ``from_torch``.

    >>> bbb.bayesianize(net, sigma_init=bbb.nn.RelativeSigma(delta=0.1))
    """

    #: sigma0 / |w|: 0.1 is MOPED's usual value
    delta: float = 0.1
    #: the least initial sigma (where |w| < min_sigma / delta, e.g. a weight of exactly 0)
    min_sigma: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("delta", "min_sigma"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise UserError(f"RelativeSigma's {name} must be a finite number > 0, got {v!r}")

    def rho(self, mu: Tensor) -> Tensor:
        """rho with softplus(rho) = max(delta * |mu|, min_sigma), elementwise."""
        sigma = (self.delta * mu.detach().abs()).clamp_min(self.min_sigma)
        return inverse_softplus(sigma)  # type: ignore[return-value]


class Estimator(StrOption):
    """How the layer turns the weight posterior into activations."""

    REPARAM = "reparam"
    LOCAL = "local"
    FLIPOUT = "flipout"


# --------------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------------



def positions(x: Tensor, k: int | None) -> int:
    """Rows per example of a linear layer's input ``(B, *, in)`` (``(k, B, *, in)`` with k weight
    samples): the product of the dimensions between the batch's and the features' (1: none)."""
    lead = 2 if k is not None else 1
    return math.prod(x.shape[lead:-1]) if x.dim() > lead + 1 else 1

#: (layer type, estimator) pairs :meth:`BayesModule._warn_positions` has warned about (once each)
_POSITIONS_WARNED: set[tuple[str, str]] = set()


class BayesModule(nn.Module):
    """Base of layers with a diagonal Gaussian posterior over ``weight`` (and ``bias``)."""

    _param_names: tuple[str, ...] = ("weight",)
    #: the ``torch.nn`` layer types this class converts (exact types: :func:`bbb.bayesianize`'s
    #: registry, :func:`bbb.register_conversion`), each through :meth:`from_torch`
    converts: ClassVar[tuple[type[nn.Module], ...]] = ()
    #: the estimators defined for this layer type (another is a one-line error)
    estimators: ClassVar[frozenset[Estimator]] = frozenset(Estimator)
    #: whether :func:`bbb.bayesianize` made this layer with its posterior means at a trained
    #: network's weights (``from_weights=True`` on weights that left their default initialisation:
    #: :func:`bbb.convert.at_initialisation`; a plain attribute, not in the ``state_dict``)
    from_weights: bool = False
    #: whether a :class:`~bbb.nn.TiedBayesLinear` reads this layer's weight (a tie): every row of it
    #: then meets the data, so every row counts in the KL (an embedding's ``padding_idx`` row too)
    weight_tied: bool = False
    #: whether the layer's parameters have a population's member as their leading dimension (it
    #: then takes a :class:`~bbb.distributions.MemberPrior`: a prior per member)
    member_axis: ClassVar[bool] = False

    def __init__(
        self,
        prior: Prior | dict | None,
        estimator: Estimator | str,
        mu_init_scale: float | None,
        rho_init: float,
    ) -> None:
        super().__init__()
        self.estimator = Estimator(choice("estimator", estimator, Estimator))
        if self.estimator not in self.estimators:
            raise UserError(
                f"{type(self).__name__}: the {self.estimator.value} estimator is not defined for this layer "
                f"type; choose one of: {', '.join(e.value for e in Estimator if e in self.estimators)}")
        self.prior = default_prior() if prior is None else prior_from_config(prior)
        if isinstance(self.prior, CenteredPrior) and self.prior.mean is not None:
            raise UserError("a layer's CenteredPrior takes no mean: the layer centres it on its own posterior means "
                            "(layer.center_prior(); bayesianize and from_torch centre it on the trained weights)")
        if isinstance(self.prior, MemberPrior) and not self.member_axis:
            raise UserError(f"a MemberPrior (a prior per member) is for a population's layers "
                            f"(bbb.nn.BayesPopulation), not a {type(self).__name__}")
        # (a string or None was a TypeError out of math.isfinite)
        self.mu_init_scale = None if mu_init_scale is None else check_float("mu_init_scale", mu_init_scale, 0.0,
                                                                               above=True)
        self.rho_init = check_float("rho_init", rho_init)
        #: the rule the posterior's sigma started from when not ``rho_init`` (``from_torch``)
        self.sigma_init: RelativeSigma | None = None
        self._sampling_override: SamplingMode | None = None

    @classmethod
    def from_torch(
        cls,
        layer: nn.Module,
        prior: Prior | dict | Any | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        rho_init: float = DEFAULT_RHO_INIT,
        from_weights: bool = True,
        sigma_init: RelativeSigma | None = None,
    ) -> Self:
        """A Bayesian copy of ``layer`` (one of :attr:`converts`): same sizes and options, device
        and dtype. ``from_weights=True`` starts the posterior means at the layer's weights (a warm
        start), ``False`` draws them as a new layer would; sigma starts at softplus(rho_init), or
        relative to each mean with ``sigma_init`` (:class:`RelativeSigma`; not with a ``rho_init``
        of its own). A :class:`~bbb.distributions.CenteredPrior` is centred on the layer's weights
        (it needs ``from_weights=True``).

        >>> BayesLinear.from_torch(trained, prior=CenteredPrior(0.1), sigma_init=RelativeSigma(0.1))
        """
        if sigma_init is not None and not isinstance(sigma_init, RelativeSigma):
            raise UserError(f"sigma_init must be a bbb.nn.RelativeSigma (or None), got {type(sigma_init).__name__}")
        if sigma_init is not None and rho_init != DEFAULT_RHO_INIT:
            raise UserError("rho_init and sigma_init both set the initial sigma: pass one of them")
        prior = None if prior is None else prior_from_config(prior)
        centred = isinstance(prior, CenteredPrior)
        if centred and not from_weights:
            raise UserError("a CenteredPrior is centred on the trained weights, which from_weights=False discards: "
                            "pass from_weights=True (or another prior)")
        if not cls.converts:
            raise NotImplementedError(f"{cls.__name__} converts no torch.nn layer")
        if not cls._converts_layer(layer):
            raise UserError(f"{cls.__name__}.from_torch needs an {cls._torch_name()}, got {type(layer).__name__}")
        if any(hasattr(m, "parametrizations") for m in layer.modules()):
            raise UserError(f"{type(layer).__name__} carries a parametrization (weight norm, spectral norm...) "
                            "that a Bayesian copy would lose; remove it or skip the layer")
        ref = next(layer.parameters())
        new = cls._from_options(dict(cls._torch_options(layer), prior=prior, estimator=estimator, rho_init=rho_init,
                                     device=ref.device, dtype=ref.dtype))
        if from_weights:
            new._copy_means(layer)
        for m in new.modules():  # (a layer may hold Bayesian layers of its own: attention's out_proj)
            if isinstance(m, BayesModule):
                if sigma_init is not None:
                    m._init_relative_sigma(sigma_init)
                if centred:
                    m.center_prior()
        return new

    # -- conversion hooks (:meth:`from_torch`) --------------------------------------------------
    @classmethod
    def _converts_layer(cls, layer: nn.Module) -> bool:
        """Whether :meth:`from_torch` takes ``layer``: exactly one of :attr:`converts`."""
        return type(layer) in cls.converts

    @classmethod
    def _torch_name(cls) -> str:
        """What :meth:`from_torch` needs, in its error."""
        return f"nn.{cls.converts[0].__name__}"

    #: the constructor's arguments that :meth:`_torch_options` reads off the torch layer, whose
    #: attributes have the same names
    _torch_option_names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def _torch_options(cls, layer: Any) -> dict[str, Any]:
        """The constructor's arguments that ``layer`` (one of :attr:`converts`) fixes: its sizes and
        options, by keyword (not prior, estimator, rho_init, device nor dtype); here the layer's
        attributes :attr:`_torch_option_names`."""
        return {name: getattr(layer, name) for name in cls._torch_option_names}

    @classmethod
    def _from_options(cls, options: dict[str, Any]) -> Self:
        """The layer :meth:`from_torch` builds from the constructor's arguments ``options``."""
        return cls(**options)

    # -- parameters ----------------------------------------------------------------------
    def _register_posterior(self, name: str, shape: tuple[int, ...] | None, factory: dict) -> None:
        """The parameters ``{name}_mu`` and ``{name}_rho`` of shape ``shape`` (uninitialised;
        ``factory``: device and dtype), or None for both when the layer has no such weight."""
        for part in ("mu", "rho"):
            self.register_parameter(f"{name}_{part}", None if shape is None else
                                    nn.Parameter(torch.empty(shape, **factory)))

    def mu(self, name: str) -> Tensor:
        """The posterior mean of the weight ``name``: the parameter ``{name}_mu`` (its
        ``state_dict`` key), unmasked. AttributeError when the layer has no such posterior."""
        return self._posterior_param(f"{name}_mu")

    def rho(self, name: str) -> Tensor:
        """The posterior's rho of the weight ``name`` (sigma = softplus(rho)): the parameter
        ``{name}_rho``. AttributeError when the layer has no such posterior."""
        return self._posterior_param(f"{name}_rho")

    def _posterior_param(self, key: str) -> Tensor:
        # the names are built at run time (``_register_posterior``), so attribute access types
        # them as torch's ``Tensor | Module``: this is the one place that checks them
        t = getattr(self, key, None)
        if not isinstance(t, Tensor):
            raise AttributeError(f"{type(self).__name__} has no posterior parameter {key!r}")
        return t

    def _register_weight_and_bias(self, weight: tuple[int, ...], bias: tuple[int, ...] | None,
                                  device: torch.device | str | None, dtype: torch.dtype | None) -> None:
        """The posterior of the weight (shape ``weight``) and of the bias (``bias``; None: no
        bias, ``bias_mu``/``bias_rho`` are None), initialised (:meth:`reset_parameters`)."""
        factory = {"device": device, "dtype": dtype}
        self._register_posterior("weight", weight, factory)
        self._register_posterior("bias", bias, factory)
        self.reset_parameters()

    def _fan_in(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """mu ~ U(-b, b) with b = mu_init_scale or 1/sqrt(fan_in) (torch.nn's default); rho = rho_init."""
        bound = self.mu_init_scale if self.mu_init_scale is not None else 1.0 / math.sqrt(self._fan_in())
        with torch.no_grad():
            for name in self.param_names():
                self.mu(name).uniform_(-bound, bound)
                self.rho(name).fill_(self.rho_init)

    def param_names(self) -> tuple[str, ...]:
        return tuple(n for n in self._param_names if getattr(self, f"{n}_mu", None) is not None)

    def posterior(self, name: str = "weight") -> DiagonalNormal:
        return DiagonalNormal(self.mu(name), softplus(self.rho(name)))

    def posteriors(self) -> dict[str, DiagonalNormal]:
        return {n: self.posterior(n) for n in self.param_names()}

    def _init_relative_sigma(self, rule: RelativeSigma) -> None:
        self.sigma_init = rule
        with torch.no_grad():
            for name in self.param_names():
                self.rho(name).copy_(rule.rho(self.mu(name)))

    def center_prior(self) -> None:
        """Centre the layer's :class:`~bbb.distributions.CenteredPrior` on its current posterior
        means (the buffers ``{name}_prior_mean``, saved in the ``state_dict``); ``bayesianize`` and
        ``from_torch`` call it on the trained weights. Its own posteriors only (not those of
        Bayesian layers inside it).

        >>> layer = BayesLinear(10, 2, prior=CenteredPrior(0.1)); layer.center_prior()
        """
        if not isinstance(self.prior, CenteredPrior):
            raise UserError(f"center_prior needs a layer with a CenteredPrior, this one has {self.prior!r}")
        for name in self.param_names():
            mean = self.mu(name).detach().clone()
            key = f"{name}_prior_mean"
            buf = self._buffers.get(key)
            if buf is not None:
                buf.copy_(mean)
            else:
                self.register_buffer(key, mean)

    def prior_for(self, name: str) -> Prior:
        """The prior of the weight ``name``: the layer's, centred on ``{name}_prior_mean`` for a
        :class:`~bbb.distributions.CenteredPrior` (a one-line error before :meth:`center_prior`)."""
        if isinstance(self.prior, MemberPrior):  # bound to the parameter's (members, ...)
            return self.prior.at(getattr(self, f"{name}_mu").dim())
        if not isinstance(self.prior, CenteredPrior):
            return self.prior
        mean = self._buffers.get(f"{name}_prior_mean")
        if mean is None:
            raise UserError(f"{type(self).__name__} has a CenteredPrior that is not centred yet: call "
                            "layer.center_prior() (bayesianize and from_torch centre it on the trained weights)")
        return self.prior.at(mean)

    @property
    def weight_sigma(self) -> Tensor:
        return softplus(self.rho("weight"))

    # -- the deterministic view: what code written for nn.Linear / nn.Conv reads ---------------
    @property
    def weight(self) -> Tensor:
        """The posterior mean of the weight (``weight_mu``, masked once pruned), shaped as in the
        matching ``torch.nn`` layer. Unpruned it *is* the ``weight_mu`` parameter, so init
        helpers (``nn.init.*_``), torchinfo and FLOP counters work on it."""
        return self._mean("weight")  # type: ignore[return-value]

    @property
    def bias(self) -> Tensor | None:
        """The posterior mean of the bias (``bias_mu``), or None for a layer without bias."""
        return self._mean("bias")

    def __setattr__(self, name: str, value: Any) -> None:
        # ``layer.weight = ...`` (torch's habit) would meet torch's bare KeyError or a missing setter
        params = self.__dict__.get("_parameters")
        if params is not None and f"{name}_mu" in params:  # (a posterior's name: its mean)
            raise UserError(f"{type(self).__name__}.{name} is the posterior mean (read only): set {name}_mu (and "
                            f"{name}_rho, sigma = softplus(rho)) in place, e.g. `with torch.no_grad(): "
                            f"layer.{name}_mu.copy_(w)`, or load_state_dict({{'{name}': w}}, strict=False) "
                            f"(torch.func.functional_call: the key '{name}_mu')")
        super().__setattr__(name, value)

    # -- pruning mask (absent until pruned) --------------------------------------------------
    def _mask(self, name: str) -> Tensor | None:
        return getattr(self, f"{name}_mask", None)

    @overload
    def _masked(self, name: str, t: Tensor) -> Tensor: ...
    @overload
    def _masked(self, name: str, t: None) -> None: ...
    @overload
    def _masked(self, name: str, t: Tensor | None) -> Tensor | None: ...
    def _masked(self, name: str, t: Tensor | None) -> Tensor | None:
        m = self._mask(name)
        return t if (m is None or t is None) else t * m

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a deterministic layer's state (``weight``, ``bias``): it becomes the posterior mean, the
        # posterior's rho starts as at a conversion of it (rho_init, or sigma_init of the loaded
        # weights; never the memory of a layer made on "meta" and moved by to_empty), and a
        # CenteredPrior is centred on it (the trained weights)
        centred = isinstance(self.prior, CenteredPrior)
        for name in self._param_names:
            key = f"{prefix}{name}"
            if key in state_dict and f"{key}_mu" not in state_dict and getattr(self, f"{name}_mu", None) is not None:
                state_dict[f"{key}_mu"] = state_dict.pop(key)
                if f"{key}_rho" not in state_dict:
                    rho, mu = self.rho(name), state_dict[f"{key}_mu"]  # (mu's device: load_state_dict(assign=True))
                    state_dict[f"{key}_rho"] = (torch.full(rho.shape, self.rho_init, dtype=rho.dtype, device=mu.device)
                                                if self.sigma_init is None else self.sigma_init.rho(mu).to(rho.dtype))
                if centred and f"{key}_prior_mean" not in state_dict:
                    state_dict[f"{key}_prior_mean"] = state_dict[f"{key}_mu"]
            # a centred checkpoint loads into a layer not centred yet
            if centred and f"{key}_prior_mean" in state_dict and f"{name}_prior_mean" not in self._buffers:
                self.register_buffer(f"{name}_prior_mean", torch.empty_like(state_dict[f"{key}_prior_mean"]))
        # a pruned checkpoint carries masks that a fresh layer has not registered yet
        for name in self._param_names:
            key = f"{prefix}{name}_mask"
            if key in state_dict and f"{name}_mask" not in self._buffers:
                self.register_buffer(f"{name}_mask", torch.empty_like(state_dict[key]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- sampling ---------------------------------------------------------------------------
    def is_sampling(self) -> bool:
        if self._sampling_override is not None:
            return self._sampling_override is SamplingMode.SAMPLE
        return self.training

    def _draw(self, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor]:
        """Sample the named parameter (k samples or one) and record it for the MC KL.

        Returns (mu, eps, w).
        """
        shared = SHARED.get()
        if shared is not None:
            key = (id(self), name, k)
            hit = shared.get(key)
            if hit is None:
                hit = shared[key] = self._draw_new(name, k)
            return hit
        return self._draw_new(name, k)

    def _draw_new(self, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor]:
        rec = RECORDER.get()
        provider = PROVIDER.get()
        hit = None if provider is None else provider.draw(self, name, k)
        if hit is None:
            mu, rho = self.mu(name), self.rho(name)
            shape = tuple(mu.shape) if k is None else (k, *mu.shape)
            eps = BF.standard_normal(shape, like=mu, generator=None if rec is None else rec.generator)
            hit = (mu, eps, torch.addcmul(mu, softplus(rho), eps))
        if rec is not None:
            rec.record(self, name, hit[1], hit[2])
        return hit

    # -- forward: one sample, k samples, or k samples folded into the batch -------------------
    #: rank of an input with one batch dimension and no sample dimension (None: any rank >= 2)
    _batched_rank: int | None = None

    def _input_samples(self, x: Tensor) -> int | None:  # pragma: no cover - abstract
        """k when ``x`` carries an explicit leading sample dimension, else None."""
        raise NotImplementedError

    def _forward(self, x: Tensor, k: int | None) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fold_dim(self, x: Tensor, fold_dim: int) -> int:
        """The dimension of ``x`` that holds the batch inside a fold whose model input has its
        batch in ``fold_dim`` (0 or 1): a linear layer's is ``fold_dim`` when ``x`` has a
        dimension after it besides the features, else 0; convolutions override it (always 0)."""
        return fold_dim if x.dim() >= fold_dim + 2 else 0

    def forward(self, x: Tensor) -> Tensor:
        fold = FOLD.get()
        if fold is None or fold.k == 1 or not self.is_sampling():
            return self._forward(x, self._input_samples(x))
        k = fold.k
        d = fold.batch_dim(x, self._fold_dim(x, fold.dim))
        self._check_folded(x, k, d)
        if self.estimator is Estimator.LOCAL:  # fresh noise per row already: nothing to unfold
            return self._forward(x, None)
        src = fold.source
        if d == 0 and x is fold.folded and src is not None and src.dim() == (self._batched_rank or 2):
            # k networks on one shared input, the first of its k copies (not ``src``: the model may have
            # changed its input in place, x.div_(255)): no k-fold matmul
            y = self._forward(x.narrow(0, 0, x.shape[0] // k), k)
            return y.reshape(-1, *y.shape[2:])
        return refold(self._forward(unfold(x, k, d, type(self).__name__), k), d)

    def _check_folded(self, x: Tensor, k: int, d: int = 0) -> None:
        rank = self._batched_rank
        bad = None
        if (rank is not None and x.dim() != rank) or x.dim() < 2:
            want = f"{rank}-d (batch, ...)" if rank is not None else "(batch, ..., features)"
            bad = f"a {x.dim()}-d input where a {want} one was expected"
        elif x.shape[d] % k:
            bad = f"{x.shape[d]} rows along dim {d}, not a multiple of {k}"
        if bad is not None:
            raise UserError(
                f"{type(self).__name__}: inside a {k}-sample pass (the samples are folded into the batch "
                f"dimension, k*B rows) it got {bad} (shape {tuple(x.shape)}). Every layer before it must "
                "keep the batch dimension: use x.flatten(1) or x.view(x.shape[0], ...) rather than "
                "x.view(-1, ...), give ELBO / predict / forward_samples plain (B, ...) inputs "
                "(no expand_samples), and for a sequence-first model (batch_first=False) batch_dim=1")

    def _copy_means(self, layer: nn.Module) -> None:
        """Set the posterior means to a deterministic layer's ``weight`` and ``bias``."""
        with torch.no_grad():
            for name in self.param_names():
                src = getattr(layer, name)
                mu = self.mu(name)
                mu.copy_(src.detach().reshape(mu.shape))

    def _masked_sigma(self, name: str) -> Tensor:
        """The posterior's sigma of ``name``, masked once pruned (what the local estimator reads)."""
        return self._masked(name, softplus(self.rho(name)))

    def _flipout_delta(self, name: str, k: int | None) -> Tensor:
        """Flipout's perturbation of ``name``: a draw less the mean, w - mu = sigma * eps, masked."""
        mu, _, w = self._draw(name, k)
        return self._masked(name, w - mu)

    def _warn_positions(self, positions: int) -> None:
        """Warn once per layer type and estimator that the ``local`` or ``flipout`` estimator met an
        input with ``positions`` > 1 rows per example (a sequence's tokens, an image's pixels): its
        noise is per row, so the training loss is not that of one sampled network per example."""
        key = (type(self).__name__, self.estimator.value)
        if positions <= 1 or key in _POSITIONS_WARNED or torch.compiler.is_compiling():
            return
        _POSITIONS_WARNED.add(key)
        what = "samples its pre-activations" if self.estimator is Estimator.LOCAL else "flips its noise's signs"
        warnings.warn(f"{key[0]} with the {key[1]} estimator {what} per position of an input ({positions} here: a "
                      "sequence's tokens or an image's pixels), so one example's positions see different weights and "
                      "the training loss is not that of one sampled network per example (predictions draw whole "
                      "weights); estimator='reparam' trains on one network per example", UserWarning, stacklevel=3)

    def _generator(self) -> torch.Generator | None:
        rec = RECORDER.get()
        return None if rec is None else rec.generator

    def _mean(self, name: str) -> Tensor | None:
        mu = getattr(self, f"{name}_mu", None)
        return self._masked(name, mu)

    # -- KL --------------------------------------------------------------------------------
    def kl(self, mode: KLMode | str = KLMode.AUTO, recorder: SampleRecorder | None = None,
           num_samples: int | None = None) -> Tensor:
        """KL[q || P] of this layer's parameters, summed over every weight.

        Monte Carlo uses the samples the forward pass drew (from ``recorder``) when there are any,
        else a fresh draw (e.g. for the local estimator, whose forward never forms weights).
        ``num_samples`` (the ELBO's ``kl_samples``) averages the Monte Carlo estimate over that
        many weight samples: the forward pass's, plus draws of the KL's own (from the active
        :class:`SampleProvider`'s ``kl_noise`` when it supplies them).
        """
        total = None
        gen = None if recorder is None else recorder.generator
        provider = PROVIDER.get()
        for name in self.param_names():
            s = None if recorder is None else recorder.get(self, name)
            q = self.posterior(name)
            extra = None
            if provider is not None and KLMode(mode) is KLMode.SPLIT:
                extra = provider.kl_noise(self, name, 1)  # the split's importance sample
            elif num_samples is not None and provider is not None:
                given = 0 if s is None else math.prod(s.eps.shape[: s.eps.dim() - q.mu.dim()])
                if num_samples > given:
                    extra = provider.kl_noise(self, name, num_samples - given)
            eps, w = (None, None) if s is None else (s.eps, s.w)
            if w is not None and not w.requires_grad and torch.is_grad_enabled() and q.mu.requires_grad:
                # drawn under no_grad (torch.utils.checkpoint's reentrant first pass): the weights are
                # formed again from the same noise, else log p(w) would give mu and rho no gradient; its
                # backward redraws them with one sample from torch's global random state
                if gen is not None or (eps is not None and eps.dim() > q.mu.dim()):
                    raise UserError(f"{type(self).__name__} drew its weights under torch.no_grad() inside the forward "
                                    "(torch.utils.checkpoint with use_reentrant=True?), whose backward recomputes them "
                                    "with one sample from torch's global random state: under num_samples > 1 or a "
                                    "generator the gradient would be another network's; use num_samples=1 and no "
                                    "generator, or leave the Bayesian layers out of the checkpoint")
                w = None
            prior = self.prior_for(name)
            rows = self.kl_rows(name)
            if rows is not None:  # only these rows count (an embedding's padding row does not)
                q = DiagonalNormal(q.mu.index_select(0, rows), q.sigma.index_select(0, rows))
                eps, w, extra = (None if t is None else t.index_select(t.dim() - q.mu.dim(), rows)
                                 for t in (eps, w, extra))
                if isinstance(prior, CenteredPrior) and prior.mean is not None:  # its centres: the same rows
                    prior = prior.at(prior.mean.index_select(0, rows))
            term = kl_term(q, prior, mode, eps=eps, w=w, generator=gen, num_samples=num_samples,
                           extra_eps=extra)
            total = term if total is None else total + term
        assert total is not None
        return total

    def kl_rows(self, name: str) -> Tensor | None:
        """The rows (indices along dim 0) of parameter ``name`` that the KL counts; None: all of them."""
        return None

    def extra_repr(self) -> str:
        init = f"sigma_init={self.sigma_init}" if self.sigma_init is not None else f"rho_init={self.rho_init}"
        return f"prior={self.prior!r}, estimator={self.estimator.value}, {init}"

