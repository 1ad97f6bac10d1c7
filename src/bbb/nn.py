"""Bayesian layers: thin stateful shells over :mod:`bbb.functional`.

Each weight has a diagonal Gaussian posterior with parameters ``*_mu`` and ``*_rho``
(sigma = softplus(rho)); these are the only entries of ``state_dict`` (plus a pruning mask once
:func:`bbb.prune.prune` has set one). Nothing is written onto a module during ``forward``.

Sampling mode: in ``train()`` mode a layer samples, in ``eval()`` mode it uses the posterior mean.
:func:`sampling` switches explicitly (e.g. Monte Carlo prediction in eval mode).

Monte Carlo samples: an input with a leading sample dimension, ``(k, B, in)`` for linear layers
and ``(k, B, C, H, W)`` for convolutions, is evaluated by ``k`` independently sampled networks
in one batched call (:func:`bbb.functional.expand_samples` builds such an input without a copy).

Common random numbers: while a :class:`SampleRecorder` is active (the ELBO opens one), each layer
hands the noise and weights it drew to the recorder, so the Monte Carlo KL uses exactly the
weights of the forward pass. The recorder is an object owned by the caller, not module state.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from . import functional as BF
from .distributions import (
    DiagonalNormal,
    KLMode,
    Prior,
    ScaleMixturePrior,
    kl_term,
    prior_from_config,
    softplus,
)
from .errors import UserError

__all__ = [
    "Estimator",
    "BayesModule",
    "BayesLinear",
    "BayesConv1d",
    "BayesConv2d",
    "BayesMLP",
    "PerSample",
    "SampleRecorder",
    "SampleProvider",
    "providing_samples",
    "sampling",
    "shared_samples",
    "folded_samples",
    "forward_samples",
    "bayes_modules",
    "model_kl",
    "DEFAULT_RHO_INIT",
    "default_prior",
]

#: sigma = softplus(-5) ~ 6.7e-3: the network starts close to a deterministic one, so early
#: learning is not drowned in weight noise (Pyro's autoguide init_scale PR #2156, Riquelme et al.
#: "MAP first"); large initial sigma is a known cause of divergence.
DEFAULT_RHO_INIT = -5.0


def default_prior() -> ScaleMixturePrior:
    """The default prior, the same as ``bbb train``'s: the paper's scale mixture (eq. 7) with
    pi = 1/4, sigma1 = 1, sigma2 = e^-7, a point of the paper's grid (pi in {1/4, 1/2, 3/4},
    -log sigma1 in {0, 1, 2}, -log sigma2 in {6, 7, 8}) and the best of our MNIST model
    selection; the paper names no single best value."""
    return ScaleMixturePrior(pi=0.25, sigma1=1.0, sigma2=math.exp(-7.0))


class Estimator(str, Enum):
    """How the layer turns the weight posterior into activations."""

    REPARAM = "reparam"
    LOCAL = "local"
    FLIPOUT = "flipout"


class SamplingMode(str, Enum):
    MEAN = "mean"
    SAMPLE = "sample"


# --------------------------------------------------------------------------------------------
# Recording samples for the Monte Carlo KL (common random numbers)
# --------------------------------------------------------------------------------------------


@dataclass
class _ParamSample:
    eps: Tensor
    w: Tensor


@dataclass
class SampleRecorder:
    """Collects, per layer and parameter, the noise ``eps`` and weights ``w`` drawn in a forward.

    Use as a context manager around the forward pass; pass it to :func:`model_kl`, whose Monte
    Carlo KL then uses exactly the forward pass's weights (common random numbers).
    ``generator`` (optional) seeds every draw made inside.
    """

    generator: torch.Generator | None = None
    records: dict[int, dict[str, _ParamSample]] = field(default_factory=dict)
    _token: Any = field(default=None, repr=False)

    def record(self, module: nn.Module, name: str, eps: Tensor, w: Tensor) -> None:
        self.records.setdefault(id(module), {})[name] = _ParamSample(eps, w)

    def get(self, module: nn.Module, name: str) -> _ParamSample | None:
        return self.records.get(id(module), {}).get(name)

    def __enter__(self) -> SampleRecorder:
        self._token = _RECORDER.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _RECORDER.reset(self._token)
        self._token = None


class SampleProvider:
    """Supplies the weight samples of Bayesian layers in place of their own draws.

    :class:`bbb.engine.Engine` is one (its weights live in flat buffers that its fused kernel
    updates); :func:`bbb.engine.counter_noise` another (the plain path fed with the engine's
    counter-based noise). Active inside :func:`providing_samples`.
    """

    def draw(self, module: BayesModule, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
        """(mu, eps, w) for ``module``'s parameter ``name`` with k samples (or None: draw as usual)."""
        return None

    def model_kl(self, model: nn.Module, mode: KLMode) -> Tensor | None:
        """The KL of the whole ``model`` for the samples provided, or None (computed as usual)."""
        return None

    def linear(self, module: BayesLinear, x: Tensor) -> Tensor | None:
        """The whole reparameterised forward of ``module`` on ``x``, or None (the layer draws)."""
        return None


_RECORDER: contextvars.ContextVar[SampleRecorder | None] = contextvars.ContextVar(
    "bbb_sample_recorder", default=None
)
_PROVIDER: contextvars.ContextVar[SampleProvider | None] = contextvars.ContextVar(
    "bbb_sample_provider", default=None
)


@contextlib.contextmanager
def providing_samples(provider: SampleProvider) -> Iterator[SampleProvider]:
    """Let ``provider`` supply the weight samples of every Bayesian layer inside the block."""
    token = _PROVIDER.set(provider)
    try:
        yield provider
    finally:
        _PROVIDER.reset(token)


#: (id(module), parameter name, k) -> (mu, eps, w) while :func:`shared_samples` is active
_SHARED: contextvars.ContextVar[dict[tuple[int, str, int | None], tuple[Tensor, Tensor, Tensor]] | None] = (
    contextvars.ContextVar("bbb_shared_samples", default=None))


@contextlib.contextmanager
def shared_samples() -> Iterator[None]:
    """Draw each layer's weights once and reuse them for every forward pass inside the block.

    Evaluating k sampled networks over a data set in chunks then uses the *same* k networks for
    every chunk (a consistent Monte Carlo predictive, and k weight draws instead of k per chunk).
    Applies to weight sampling (``reparam`` and the weight part of ``flipout``); ``local``
    reparameterisation draws per example by construction. Meant for prediction under
    ``torch.no_grad()``; the stored weights are released when the outermost block ends.

    >>> with sampling(net, "sample"), shared_samples():
    ...     logits = torch.cat([net(expand_samples(xc, 10)) for xc in x.split(1024)], dim=1)
    """
    if _SHARED.get() is not None:  # nested: the outer block's draws stay shared
        yield
        return
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


# --------------------------------------------------------------------------------------------
# k samples folded into the batch dimension
# --------------------------------------------------------------------------------------------


@dataclass
class _Fold:
    k: int
    source: Tensor | None = None  # the (B, ...) input whose k copies the model was given
    folded: Tensor | None = None  # that (k*B, ...) input


_FOLD: contextvars.ContextVar[_Fold | None] = contextvars.ContextVar("bbb_folded_samples", default=None)


@contextlib.contextmanager
def folded_samples(k: int) -> Iterator[None]:
    """Inside the block, every batch is ``k`` folded Monte Carlo samples: ``(k*B, ...)`` rows.

    Each Bayesian layer views its input as ``(k, B, ...)``, evaluates it with ``k`` weight samples
    (sample ``j`` on rows ``j*B .. j*B+B-1``) and returns ``(k*B, ...)`` again, so every other
    layer (pooling, ``Flatten``, normalisation, dropout, reshapes that keep dim 0, residual adds)
    sees an ordinary, larger batch and needs no wrapping. :func:`forward_samples` (used by
    :class:`~bbb.elbo.ELBO` and :func:`~bbb.uncertainty.predict`) opens this block for you.

    Caveat: a layer that mixes rows of the batch mixes samples too. ``BatchNorm`` in training mode
    normalises over all ``k*B`` rows (statistics over the k networks' activations together); in
    ``eval()`` mode it uses its running statistics and the samples stay independent.
    """
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise UserError(f"the number of samples must be an integer >= 1, got {k!r}")
    token = _FOLD.set(_Fold(int(k)))
    try:
        yield
    finally:
        _FOLD.reset(token)


def forward_samples(model: nn.Module, x: Tensor, num_samples: int) -> Tensor:
    """``model`` on ``x`` (B, ...) with ``num_samples`` = k weight samples: output (k, B, ...).

    Works for any network whose layers keep dim 0 as the batch (see :func:`folded_samples`): the
    input is repeated k times along the batch dimension, every Bayesian layer uses one weight
    sample per copy, and the output is unfolded. The model's own sampling mode still applies
    (``train()`` samples, ``eval()`` uses the mean unless inside :func:`sampling`).

    >>> with sampling(net, "sample"):
    ...     logits = forward_samples(net, x, 10)     # (10, B, classes), 10 different networks
    """
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise UserError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    k = int(num_samples)
    if not isinstance(x, Tensor) or x.dim() < 1:
        raise UserError(f"expected an input tensor (B, ...) with a batch dimension, got {x!r:.80}")
    if k == 1:
        return _unfold_output(model(x), 1, x.shape[0])
    if getattr(model, "accepts_sample_dim", False):  # (k, B, ...) natively: no folding, no copies
        return model(BF.expand_samples(x, k))
    b = x.shape[0]
    xf = BF.expand_samples(x, k).reshape(k * b, *x.shape[1:])
    token = _FOLD.set(_Fold(k, x, xf))
    try:
        y = model(xf)
    finally:
        _FOLD.reset(token)
    return _unfold_output(y, k, b)


def _unfold_output(y: Any, k: int, b: int) -> Tensor:
    if not isinstance(y, Tensor):
        raise UserError(f"forward_samples needs a network that returns a tensor, got {type(y).__name__}")
    if y.dim() < 1 or y.shape[0] != k * b:
        raise UserError(f"the network returned shape {tuple(y.shape)} for a batch of {k}x{b} rows ({k} "
                        "samples folded into the batch dimension): keep dim 0 as the batch in forward "
                        "(e.g. x.flatten(1), not x.view(-1))")
    return y.reshape(k, b, *y.shape[1:])


# --------------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------------


class BayesModule(nn.Module):
    """Base of layers with a diagonal Gaussian posterior over ``weight`` (and ``bias``)."""

    _param_names: tuple[str, ...] = ("weight",)

    def __init__(
        self,
        prior: Prior | dict | None,
        estimator: Estimator | str,
        mu_init_scale: float | None,
        rho_init: float,
    ) -> None:
        super().__init__()
        try:
            self.estimator = Estimator(estimator)
        except ValueError:
            raise UserError(
                f"unknown estimator {estimator!r}; choose one of: "
                + ", ".join(e.value for e in Estimator)
            ) from None
        self.prior = default_prior() if prior is None else prior_from_config(prior)
        if mu_init_scale is not None and not (mu_init_scale > 0 and math.isfinite(mu_init_scale)):
            raise UserError(f"mu_init_scale must be > 0, got {mu_init_scale}")
        if not math.isfinite(rho_init):
            raise UserError(f"rho_init must be finite, got {rho_init}")
        self.mu_init_scale = mu_init_scale
        self.rho_init = float(rho_init)
        self._sampling_override: SamplingMode | None = None

    # -- parameters ----------------------------------------------------------------------
    def _register_posterior(self, name: str, shape: tuple[int, ...], factory: dict) -> None:
        self.register_parameter(f"{name}_mu", nn.Parameter(torch.empty(shape, **factory)))
        self.register_parameter(f"{name}_rho", nn.Parameter(torch.empty(shape, **factory)))

    def _fan_in(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """mu ~ U(-b, b) with b = mu_init_scale or 1/sqrt(fan_in) (torch.nn's default); rho = rho_init."""
        bound = self.mu_init_scale if self.mu_init_scale is not None else 1.0 / math.sqrt(self._fan_in())
        with torch.no_grad():
            for name in self.param_names():
                getattr(self, f"{name}_mu").uniform_(-bound, bound)
                getattr(self, f"{name}_rho").fill_(self.rho_init)

    def param_names(self) -> tuple[str, ...]:
        return tuple(n for n in self._param_names if getattr(self, f"{n}_mu", None) is not None)

    def posterior(self, name: str = "weight") -> DiagonalNormal:
        return DiagonalNormal(getattr(self, f"{name}_mu"), softplus(getattr(self, f"{name}_rho")))

    def posteriors(self) -> dict[str, DiagonalNormal]:
        return {n: self.posterior(n) for n in self.param_names()}

    @property
    def weight_sigma(self) -> Tensor:
        return softplus(self.weight_rho)

    # -- the deterministic view: what code written for nn.Linear / nn.Conv reads ---------------
    @property
    def weight(self) -> Tensor:
        """The posterior mean of the weight (``weight_mu``, masked once pruned), shaped as in the
        matching ``torch.nn`` layer. Unpruned it *is* the ``weight_mu`` parameter, so init
        helpers (``nn.init.*_``), torchinfo and FLOP counters work on it."""
        return self._mean("weight")  # type: ignore[return-value]

    @property
    def bias(self) -> Tensor | None:  # type: ignore[override]
        """The posterior mean of the bias (``bias_mu``), or None for a layer without bias."""
        return self._mean("bias")

    # -- pruning mask (absent until pruned) --------------------------------------------------
    def _mask(self, name: str) -> Tensor | None:
        return getattr(self, f"{name}_mask", None)

    def _masked(self, name: str, t: Tensor | None) -> Tensor | None:
        m = self._mask(name)
        return t if (m is None or t is None) else t * m

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        # a deterministic layer's state (``weight``, ``bias``): it becomes the posterior mean, the
        # posterior's rho keeps its current value (rho_init for a fresh layer)
        for name in self._param_names:
            key = f"{prefix}{name}"
            if key in state_dict and f"{key}_mu" not in state_dict and getattr(self, f"{name}_mu", None) is not None:
                state_dict[f"{key}_mu"] = state_dict.pop(key)
                if f"{key}_rho" not in state_dict:
                    state_dict[f"{key}_rho"] = getattr(self, f"{name}_rho").detach().clone()
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
        shared = _SHARED.get()
        if shared is not None:
            key = (id(self), name, k)
            hit = shared.get(key)
            if hit is None:
                hit = shared[key] = self._draw_new(name, k)
            return hit
        return self._draw_new(name, k)

    def _draw_new(self, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor]:
        rec = _RECORDER.get()
        provider = _PROVIDER.get()
        hit = None if provider is None else provider.draw(self, name, k)
        if hit is None:
            mu, rho = getattr(self, f"{name}_mu"), getattr(self, f"{name}_rho")
            shape = tuple(mu.shape) if k is None else (k, *mu.shape)
            eps = torch.randn(shape, generator=None if rec is None else rec.generator,
                              device=mu.device, dtype=mu.dtype)
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

    def forward(self, x: Tensor) -> Tensor:
        fold = _FOLD.get()
        if fold is None or fold.k == 1 or not self.is_sampling():
            return self._forward(x, self._input_samples(x))
        k = fold.k
        self._check_folded(x, k)
        if self.estimator is Estimator.LOCAL:  # fresh noise per row already: nothing to unfold
            return self._forward(x, None)
        src = fold.source
        if x is fold.folded and src is not None and src.dim() == (self._batched_rank or 2):
            y = self._forward(src, k)  # k networks on one shared input: no k-fold copy
            return y.reshape(-1, *y.shape[2:])
        n = x.shape[0]
        y = self._forward(x.reshape(k, n // k, *x.shape[1:]), k)
        return y.reshape(n, *y.shape[2:])

    def _check_folded(self, x: Tensor, k: int) -> None:
        rank = self._batched_rank
        bad = None
        if (rank is not None and x.dim() != rank) or x.dim() < 2:
            want = f"{rank}-d (batch, ...)" if rank is not None else "(batch, ..., features)"
            bad = f"a {x.dim()}-d input where a {want} one was expected"
        elif x.shape[0] % k:
            bad = f"{x.shape[0]} rows, not a multiple of {k}"
        if bad is not None:
            raise UserError(
                f"{type(self).__name__}: inside a {k}-sample pass (the samples are folded into the batch "
                f"dimension, k*B rows) it got {bad} (shape {tuple(x.shape)}). Every layer before it must "
                "keep dim 0 as the batch: use x.flatten(1) or x.view(x.shape[0], ...) rather than "
                "x.view(-1, ...), and give ELBO / predict / forward_samples plain (B, ...) inputs "
                "(no expand_samples)")

    def _copy_means(self, layer: nn.Module) -> None:
        """Set the posterior means to a deterministic layer's ``weight`` and ``bias``."""
        with torch.no_grad():
            for name in self.param_names():
                src = getattr(layer, name)
                getattr(self, f"{name}_mu").copy_(src.detach().reshape(getattr(self, f"{name}_mu").shape))

    def _generator(self) -> torch.Generator | None:
        rec = _RECORDER.get()
        return None if rec is None else rec.generator

    def _mean(self, name: str) -> Tensor | None:
        mu = getattr(self, f"{name}_mu", None)
        return self._masked(name, mu)

    # -- KL --------------------------------------------------------------------------------
    def kl(self, mode: KLMode | str = KLMode.AUTO, recorder: SampleRecorder | None = None) -> Tensor:
        """KL[q || P] of this layer's parameters, summed over every weight.

        Monte Carlo uses the samples the forward pass drew (from ``recorder``) when there are any,
        else a fresh draw (e.g. for the local estimator, whose forward never forms weights).
        """
        total = None
        gen = None if recorder is None else recorder.generator
        for name in self.param_names():
            s = None if recorder is None else recorder.get(self, name)
            term = kl_term(self.posterior(name), self.prior, mode, eps=None if s is None else s.eps,
                           w=None if s is None else s.w, generator=gen)
            total = term if total is None else total + term
        assert total is not None
        return total

    def extra_repr(self) -> str:
        return f"prior={self.prior!r}, estimator={self.estimator.value}, rho_init={self.rho_init}"


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class BayesLinear(BayesModule):
    """Bayesian fully connected layer.

    Args:
        in_features: input size, as in ``torch.nn.Linear``.
        out_features: output size.
        bias: learn a Bayesian bias.
        prior: a :class:`~bbb.distributions.Prior` or a ``torch.distributions`` distribution
            (default: :func:`default_prior`, the scale mixture pi=1/4, sigma1=1, sigma2=e^-7).
        estimator: ``"reparam"`` (the paper), ``"local"`` or ``"flipout"``.
        mu_init_scale: mu ~ U(-b, b) with this b (default 1/sqrt(in_features)).
        rho_init: initial rho (default -5, sigma ~ 6.7e-3).

    Shape:
        input (B, in) -> (B, out), one weight sample (or the mean); input (k, *, in) -> (k, *, out),
        k independent weight samples, one per leading slice.

    Example:
        >>> layer = BayesLinear(784, 400, estimator="local")
        >>> layer(torch.zeros(128, 784)).shape
        torch.Size([128, 400])
    """

    _param_names = ("weight", "bias")

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        if in_features <= 0 or out_features <= 0:
            raise UserError(
                f"layer sizes must be positive, got in_features={in_features}, out_features={out_features}"
            )
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        factory = {"device": device, "dtype": dtype}
        self._register_posterior("weight", (out_features, in_features), factory)
        if bias:
            self._register_posterior("bias", (out_features,), factory)
        else:
            self.register_parameter("bias_mu", None)
            self.register_parameter("bias_rho", None)
        self.reset_parameters()

    def _fan_in(self) -> int:
        return self.in_features

    @classmethod
    def from_linear(
        cls,
        layer: nn.Linear,
        prior: Prior | dict | Any | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        rho_init: float = DEFAULT_RHO_INIT,
        from_weights: bool = True,
    ) -> BayesLinear:
        """A Bayesian copy of ``layer`` (same sizes, device and dtype).

        ``from_weights=True`` starts the posterior mean at the layer's trained weights (a warm
        start); ``False`` draws it afresh as a new layer would. sigma starts at softplus(rho_init).
        """
        if not isinstance(layer, nn.Linear):
            raise UserError(f"from_linear needs an nn.Linear, got {type(layer).__name__}")
        new = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, prior=prior,
                  estimator=estimator, rho_init=rho_init, device=layer.weight.device, dtype=layer.weight.dtype)
        if from_weights:
            new._copy_means(layer)
        return new

    def _input_samples(self, x: Tensor) -> int | None:
        return x.shape[0] if x.dim() >= 3 else None

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if not self.is_sampling():
            return BF.linear(x, self._mean("weight"), self._mean("bias"))
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            provider = _PROVIDER.get()
            y = None if (provider is None or k is not None) else provider.linear(self, x)
            if y is not None:
                return y
            _, _, w = self._draw("weight", k)
            b = self._draw("bias", k)[2] if has_bias else None
            return BF.linear(x, self._masked("weight", w), self._masked("bias", b))
        if self.estimator is Estimator.LOCAL:
            w_sigma = self._masked("weight", softplus(self.weight_rho))
            b_sigma = self._masked("bias", softplus(self.bias_rho)) if has_bias else None
            return BF.linear_local(x, self._mean("weight"), w_sigma, self._mean("bias"), b_sigma,
                                   generator=self._generator())
        # flipout: the perturbation delta = w - mu = sigma * eps
        mw, _, w = self._draw("weight", k)
        dw = self._masked("weight", w - mw)
        db = None
        if has_bias:
            mb, _, b = self._draw("bias", k)
            db = self._masked("bias", b - mb)
        return BF.linear_flipout(x, self._mean("weight"), dw, self._mean("bias"), db,
                                 generator=self._generator())

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias_mu is not None}, " + super().extra_repr())


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(i) for i in v)
    if len(t) != 2:
        raise UserError(f"expected an int or a pair, got {v!r}")
    return t  # type: ignore[return-value]


class BayesConv2d(BayesModule):
    """Bayesian 2-d convolution with the same options as :class:`BayesLinear`.

    Shape: (B, C, H, W) -> (B, O, H', W'); (k, B, C, H, W) -> (k, B, O, H', W') with k weight
    samples. Inside :func:`forward_samples` (the ELBO, :func:`~bbb.uncertainty.predict`) the k
    samples travel folded into the batch dimension, so pooling, ``Flatten`` and normalisation
    layers need no wrapping.
    """

    _param_names = ("weight", "bias")
    _batched_rank = 4
    _spatial = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        if in_channels <= 0 or out_channels <= 0 or groups <= 0:
            raise UserError("in_channels, out_channels and groups must be positive")
        if in_channels % groups or out_channels % groups:
            raise UserError(f"in_channels and out_channels must be divisible by groups={groups}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        if self._spatial == 2:
            self.kernel_size = _pair(kernel_size)
            self.stride, self.dilation = _pair(stride), _pair(dilation)
        else:
            self.kernel_size = _single(kernel_size)
            self.stride, self.dilation = _single(stride), _single(dilation)
        self.padding: Any
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise UserError(f"padding must be a number, a tuple, 'same' or 'valid', got {padding!r}")
            self.padding = padding
        else:
            self.padding = _pair(padding) if self._spatial == 2 else _single(padding)
        self.groups = int(groups)
        factory = {"device": device, "dtype": dtype}
        self._register_posterior("weight", (out_channels, in_channels // groups, *self.kernel_size), factory)
        if bias:
            self._register_posterior("bias", (out_channels,), factory)
        else:
            self.register_parameter("bias_mu", None)
            self.register_parameter("bias_rho", None)
        self.reset_parameters()

    def _fan_in(self) -> int:
        return (self.in_channels // self.groups) * math.prod(self.kernel_size)

    @classmethod
    def from_conv(
        cls,
        layer: nn.Conv1d | nn.Conv2d,
        prior: Prior | dict | Any | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        rho_init: float = DEFAULT_RHO_INIT,
        from_weights: bool = True,
    ) -> BayesConv2d:
        """A Bayesian copy of ``layer`` (an ``nn.Conv2d`` for :class:`BayesConv2d`, an
        ``nn.Conv1d`` for :class:`BayesConv1d`), as :meth:`BayesLinear.from_linear`."""
        want = nn.Conv2d if cls._spatial == 2 else nn.Conv1d
        if type(layer) is not want:
            raise UserError(f"{cls.__name__}.from_conv needs an {want.__name__}, got {type(layer).__name__}")
        if layer.padding_mode != "zeros":
            raise UserError(f"{cls.__name__}: padding_mode={layer.padding_mode!r} is not supported (only 'zeros')")
        new = cls(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                  padding=layer.padding, dilation=layer.dilation, groups=layer.groups,
                  bias=layer.bias is not None, prior=prior, estimator=estimator, rho_init=rho_init,
                  device=layer.weight.device, dtype=layer.weight.dtype)
        if from_weights:
            new._copy_means(layer)
        return new

    def _conv_args(self) -> tuple:
        if isinstance(self.padding, str):  # "same" / "valid"
            if self._spatial == 2:
                return (self.stride, self.padding, self.dilation, self.groups)
            return ((1, *self.stride), self.padding, (1, *self.dilation), self.groups)
        if self._spatial == 2:
            return (self.stride, self.padding, self.dilation, self.groups)
        return ((1, *self.stride), (0, *self.padding), (1, *self.dilation), self.groups)

    # 1-d convolutions run as 2-d ones of height 1 (weights (O, C, 1, kw), inputs (B, C, 1, L))
    def _w2d(self, t: Tensor | None) -> Tensor | None:
        return t if (t is None or self._spatial == 2 or t.dim() == 1) else t.unsqueeze(-2)

    def _input_samples(self, x: Tensor) -> int | None:
        return x.shape[0] if x.dim() == self._batched_rank + 1 else None

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if self._spatial == 1:
            return self._forward2d(x.unsqueeze(-2), k).squeeze(-2)
        return self._forward2d(x, k)

    def _forward2d(self, x: Tensor, k: int | None) -> Tensor:
        w2 = self._w2d
        if not self.is_sampling():
            return BF.conv2d(x, w2(self._mean("weight")), self._mean("bias"), *self._conv_args())
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            w = self._draw("weight", k)[2]
            b = self._draw("bias", k)[2] if has_bias else None
            return BF.conv2d(x, w2(self._masked("weight", w)), self._masked("bias", b), *self._conv_args())
        if self.estimator is Estimator.LOCAL:
            w_sigma = self._masked("weight", softplus(self.weight_rho))
            b_sigma = self._masked("bias", softplus(self.bias_rho)) if has_bias else None
            return BF.conv2d_local(x, w2(self._mean("weight")), w2(w_sigma), self._mean("bias"), b_sigma,
                                   *self._conv_args(), generator=self._generator())
        mw, _, w = self._draw("weight", k)
        dw = self._masked("weight", w - mw)
        db = None
        if has_bias:
            mb, _, b = self._draw("bias", k)
            db = self._masked("bias", b - mb)
        return BF.conv2d_flipout(x, w2(self._mean("weight")), w2(dw), self._mean("bias"), db,
                                 *self._conv_args(), generator=self._generator())

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, " + super().extra_repr())


def _single(v: int | Sequence[int]) -> tuple[int]:
    if isinstance(v, int):
        return (v,)
    t = tuple(int(i) for i in v)
    if len(t) != 1:
        raise UserError(f"expected an int or a 1-tuple, got {v!r}")
    return t  # type: ignore[return-value]


class BayesConv1d(BayesConv2d):
    """Bayesian 1-d convolution, as ``torch.nn.Conv1d``, with the options of :class:`BayesLinear`.

    Shape: (B, C, L) -> (B, O, L'); (k, B, C, L) -> (k, B, O, L') with k weight samples.
    Parameters ``weight_mu``/``weight_rho`` are (O, C/groups, kernel_size), as ``nn.Conv1d``'s weight.
    """

    _batched_rank = 3
    _spatial = 1


class PerSample(nn.Module):
    """Apply a 4-d-only module (pooling, batch norm...) to (k, B, ...) by folding k into the batch."""

    def __init__(self, module: nn.Module, sample_rank: int = 5) -> None:
        super().__init__()
        self.module = module
        self.sample_rank = sample_rank

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != self.sample_rank:
            return self.module(x)
        k, b = x.shape[:2]
        y = self.module(x.reshape(k * b, *x.shape[2:]))
        return y.view(k, b, *y.shape[1:])


#: in-place where the activation allows it (the layers' outputs are fresh tensors)
_ACTIVATIONS = {"relu": lambda: nn.ReLU(inplace=True), "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
                "gelu": nn.GELU, "elu": lambda: nn.ELU(inplace=True)}


class BayesMLP(nn.Module):
    """A multilayer perceptron of :class:`BayesLinear` layers (the paper's MNIST network).

    Example:
        >>> net = BayesMLP(784, [400, 400], 10, prior=ScaleMixturePrior(0.25, 1.0, math.exp(-7)))
        >>> net(torch.zeros(5, 784)).shape
        torch.Size([5, 10])
    """

    #: takes inputs with a leading sample dimension (k, B, in) as they are (k batched networks),
    #: so :func:`forward_samples` hands it the k samples without folding them into the batch
    accepts_sample_dim = True

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        activation: str = "relu",
        bias: bool = True,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise UserError(f"unknown activation {activation!r}; choose one of: {', '.join(_ACTIVATIONS)}")
        sizes = [int(in_features), *[int(h) for h in hidden_sizes], int(out_features)]
        if any(s <= 0 for s in sizes):
            raise UserError(f"every layer width must be positive, got {sizes}")
        self.sizes = sizes
        self.activation = activation
        self.layers = nn.ModuleList(
            BayesLinear(a, b, bias=bias, prior=prior, estimator=estimator, mu_init_scale=mu_init_scale,
                        rho_init=rho_init, device=device, dtype=dtype)
            for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.act = _ACTIVATIONS[activation]()

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)


# --------------------------------------------------------------------------------------------
# Model-level helpers
# --------------------------------------------------------------------------------------------


def bayes_modules(model: nn.Module) -> Iterator[BayesModule]:
    """Every :class:`BayesModule` inside ``model`` (including itself)."""
    for m in model.modules():
        if isinstance(m, BayesModule):
            yield m


def model_kl(
    model: nn.Module, mode: KLMode | str = KLMode.AUTO, recorder: SampleRecorder | None = None
) -> Tensor:
    """KL[q(w) || P(w)] of the whole model: a sum over every weight of every Bayesian layer."""
    provider = _PROVIDER.get()
    if provider is not None:
        total = provider.model_kl(model, KLMode(mode))
        if total is not None:
            return total
    terms = [m.kl(mode, recorder) for m in bayes_modules(model)]
    if not terms:
        p = next(model.parameters(), None)
        return torch.zeros((), device=None if p is None else p.device)
    return torch.stack(terms).sum()


@contextlib.contextmanager
def sampling(model: nn.Module, mode: SamplingMode | str = "sample") -> Iterator[nn.Module]:
    """Force every Bayesian layer in ``model`` to use the posterior ``"mean"`` or to ``"sample"``.

    >>> with sampling(net, "sample"):          # Monte Carlo prediction in eval mode
    ...     logits = net(expand_samples(x, 10))
    """
    try:
        mode = SamplingMode(mode)
    except ValueError:
        raise UserError(f"sampling mode must be 'mean' or 'sample', got {mode!r}") from None
    mods = list(bayes_modules(model))
    saved = [m._sampling_override for m in mods]
    for m in mods:
        m._sampling_override = mode
    try:
        yield model
    finally:
        for m, s in zip(mods, saved):
            m._sampling_override = s
