"""Sampling state of the Bayesian layers: the sampling mode, recording samples for the Monte Carlo
KL (common random numbers), sample providers, shared samples and k samples folded into the batch
dimension. The context variables below are read by the layers during ``forward``."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import KLMode
from ..errors import UserError

__all__ = [
    "SamplingMode",
    "SampleRecorder",
    "SampleProvider",
    "providing_samples",
    "shared_samples",
    "folded_samples",
    "forward_samples",
    "RECORDER",
    "PROVIDER",
    "SHARED",
    "FOLD",
]


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
        self._token = RECORDER.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        RECORDER.reset(self._token)
        self._token = None


class SampleProvider:
    """Supplies the weight samples of Bayesian layers in place of their own draws.

    :class:`bbb.engine.Engine` is one (its weights live in flat buffers that its fused kernel
    updates); :func:`bbb.engine.counter_noise` another (the plain path fed with the engine's
    counter-based noise). Active inside :func:`providing_samples`.
    """

    def draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
        """(mu, eps, w) for ``module``'s (a :class:`~bbb.nn.BayesModule`) parameter ``name`` with k
        samples (or None: draw as usual)."""
        return None

    def model_kl(self, model: nn.Module, mode: KLMode, kl_samples: int | None = None) -> Tensor | None:
        """The KL of the whole ``model`` for the samples provided (averaged over ``kl_samples``
        weight samples, None: the likelihood's), or None (computed as usual)."""
        return None

    def kl_noise(self, module: nn.Module, name: str, n: int) -> Tensor | None:
        """The noise (n, *shape) of ``n`` weight samples that the Monte Carlo KL of ``module``'s
        parameter ``name`` draws beyond the likelihood's (``kl_samples``), or None (fresh draws)."""
        return None

    def linear(self, module: nn.Module, x: Tensor) -> Tensor | None:
        """The whole reparameterised forward of ``module`` (a :class:`~bbb.nn.BayesLinear`) on ``x``,
        or None (the layer draws)."""
        return None


#: the active :class:`SampleRecorder` (None outside one); the layers record their draws in it
RECORDER: contextvars.ContextVar[SampleRecorder | None] = contextvars.ContextVar(
    "bbb_sample_recorder", default=None
)
#: the active :class:`SampleProvider` (None outside :func:`providing_samples`)
PROVIDER: contextvars.ContextVar[SampleProvider | None] = contextvars.ContextVar(
    "bbb_sample_provider", default=None
)


@contextlib.contextmanager
def providing_samples(provider: SampleProvider) -> Iterator[SampleProvider]:
    """Let ``provider`` supply the weight samples of every Bayesian layer inside the block."""
    token = PROVIDER.set(provider)
    try:
        yield provider
    finally:
        PROVIDER.reset(token)


#: (id(module), parameter name, k) -> (mu, eps, w) while :func:`shared_samples` is active
SHARED: contextvars.ContextVar[dict[tuple[int, str, int | None], tuple[Tensor, Tensor, Tensor]] | None] = (
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
    if SHARED.get() is not None:  # nested: the outer block's draws stay shared
        yield
        return
    token = SHARED.set({})
    try:
        yield
    finally:
        SHARED.reset(token)


# --------------------------------------------------------------------------------------------
# k samples folded into the batch dimension
# --------------------------------------------------------------------------------------------


@dataclass
class _Fold:
    k: int
    source: Tensor | None = None  # the (B, ...) input whose k copies the model was given
    folded: Tensor | None = None  # that (k*B, ...) input


#: k samples folded into the batch dimension (None outside :func:`folded_samples` and
#: :func:`forward_samples`)
FOLD: contextvars.ContextVar[_Fold | None] = contextvars.ContextVar("bbb_folded_samples", default=None)


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
    token = FOLD.set(_Fold(int(k)))
    try:
        yield
    finally:
        FOLD.reset(token)


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
    token = FOLD.set(_Fold(k, x, xf))
    try:
        y = model(xf)
    finally:
        FOLD.reset(token)
    return _unfold_output(y, k, b)


def _unfold_output(y: Any, k: int, b: int) -> Tensor:
    if not isinstance(y, Tensor):
        raise UserError(f"forward_samples needs a network that returns a tensor, got {type(y).__name__}")
    if y.dim() < 1 or y.shape[0] != k * b:
        raise UserError(f"the network returned shape {tuple(y.shape)} for a batch of {k}x{b} rows ({k} "
                        "samples folded into the batch dimension): keep dim 0 as the batch in forward "
                        "(e.g. x.flatten(1), not x.view(-1))")
    return y.reshape(k, b, *y.shape[1:])
