"""Sampling state of the Bayesian layers: the sampling mode, recording samples for the Monte Carlo
KL (common random numbers), sample providers, shared samples and k samples folded into the batch
dimension. The context variables below are read by the layers during ``forward``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import KLMode
from ..errors import UserError, check_int
from .inputs import (
    Inputs,
    call_model,
    check_inputs,
    fold_inputs,
    input_batch_size,
    input_tensors,
    refold,
    select_output,
    unfold,
)

__all__ = [
    "SamplingMode",
    "SampleRecorder",
    "SampleProvider",
    "providing_samples",
    "shared_samples",
    "folded_samples",
    "forward_samples",
    "check_model",
    "leading_samples",
    "LEADING",
    "fold_samples",
    "model_batch_dim",
    "RECORDER",
    "PROVIDER",
    "SHARED",
    "OneForward",
    "FOLD",
]


T = TypeVar("T")


class ContextSlot(threading.local, Generic[T]):
    """A per-thread value with ``contextvars.ContextVar``'s ``get``/``set``/``reset``, which
    ``torch.compile`` traces (Dynamo breaks the graph at ``ContextVar.get``): the layers read the
    sampling state below during ``forward`` without a graph break, and a compiled function
    recompiles (guards) when the state it was traced with changes."""

    def __init__(self, name: str, default: T) -> None:
        self.name = name
        self.value = default

    def get(self) -> T:
        return self.value

    def set(self, value: T) -> T:
        """Set the value; returns the token (the previous value) that :meth:`reset` restores."""
        token, self.value = self.value, value
        return token

    def reset(self, token: T) -> None:
        self.value = token


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

    def preactivation_noise(self, module: nn.Module, shape: tuple[int, ...]) -> Tensor | None:
        """The standard normal noise (of ``shape``) of a population layer's local
        reparameterisation, one number per pre-activation, or None (the layer draws)."""
        return None

    def linear(self, module: nn.Module, x: Tensor) -> Tensor | None:
        """The whole reparameterised forward of ``module`` (a :class:`~bbb.nn.BayesLinear`) on ``x``,
        or None (the layer draws)."""
        return None

    def trains(self, param: Tensor) -> bool | None:
        """Whether the optimiser behind this provider updates ``param`` (None: it is no optimiser).
        The ELBO asks it of its own parameters (a learned noise) and refuses a False."""
        return None


#: the active :class:`SampleRecorder` (None outside one); the layers record their draws in it
RECORDER: ContextSlot[SampleRecorder | None] = ContextSlot(
    "bbb_sample_recorder", default=None
)
#: the active :class:`SampleProvider` (None outside :func:`providing_samples`)
PROVIDER: ContextSlot[SampleProvider | None] = ContextSlot(
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
SHARED: ContextSlot[dict[tuple[int, str, int | None], tuple[Tensor, Tensor, Tensor]] | None] = (
    ContextSlot("bbb_shared_samples", None))


class OneForward(dict):
    """The draws of one objective's forward (:func:`shared_samples` with ``per_call=True``)."""


@contextlib.contextmanager
def shared_samples(per_call: bool = False) -> Iterator[None]:
    """Draw each layer's weights once and reuse them for every forward pass inside the block.

    Evaluating k sampled networks over a data set in chunks then uses the *same* k networks for
    every chunk (a consistent Monte Carlo predictive, and k weight draws instead of k per chunk).
    Applies to weight sampling (``reparam`` and the weight part of ``flipout``); ``local``
    reparameterisation draws per row by construction (:func:`bbb.nn.whole_weights` makes every
    layer draw whole weights, as :func:`bbb.uncertainty.predict` does). Meant for prediction under
    ``torch.no_grad()``; the stored weights are released when the outermost block ends.
    ``per_call=True`` (what the ELBO opens around its forward): one network sample for a forward
    that calls a layer several times (a cell in a loop), not a prediction's block.

    >>> with sampling(net, "sample"), shared_samples():
    ...     logits = torch.cat([net(expand_samples(xc, 10)) for xc in x.split(1024)], dim=1)
    """
    if SHARED.get() is not None:  # nested: the outer block's draws stay shared
        yield
        return
    token = SHARED.set(OneForward() if per_call else {})
    try:
        yield
    finally:
        SHARED.reset(token)


# --------------------------------------------------------------------------------------------
# k samples folded into the batch dimension
# --------------------------------------------------------------------------------------------


#: an explicit leading sample dimension: inside :func:`leading_samples`, a linear layer reads a
#: (k, *, in) input as k weight samples (outside it, as ``nn.Linear`` does: any leading dims)
LEADING: ContextSlot[bool] = ContextSlot("bbb_leading_samples", False)


@contextlib.contextmanager
def leading_samples() -> Iterator[None]:
    """Inside the block, the first dimension of a linear layer's input of 3 or more dims is the
    sample dimension: ``(k, B, in)`` is evaluated by k weight samples in one batched call
    (convolutions read a ``(k, B, C, ...)`` input so anywhere). :class:`BayesMLP` opens it for its
    own 3-d inputs, and :func:`forward_samples` for a model with ``accepts_sample_dim``; open it
    for a stack of Bayesian linear layers of your own. Outside it a linear layer treats leading
    dims as ``nn.Linear`` does (one weight sample for a ``(B, T, in)`` sequence), so
    :func:`forward_samples` (the samples folded into the batch) is the way for any other network.

    >>> with sampling(net, "sample"), leading_samples():
    ...     logits = net(expand_samples(x, 10))    # (10, B, classes)
    """
    token = LEADING.set(True)
    try:
        yield
    finally:
        LEADING.reset(token)


@dataclass
class _Fold:
    k: int
    source: Tensor | None = None  # the (B, ...) input whose k copies the model was given
    folded: Tensor | None = None  # that (k*B, ...) input
    dim: int = 0  # the batch dimension of the model's input: 0 (batch first) or 1 (sequence first)
    b: int | None = None  # B, the examples of the batch (None: not known, inside folded_samples)
    #: the model's input tensors, as given and as folded (held, not their ids: torch.compile guards
    #: an ``id()`` of an input on that very object, and recompiled for every new batch)
    given: tuple[Tensor, ...] = ()

    def batch_dim(self, t: Tensor, d: int, shared: bool = False) -> int:
        """``d``, the dimension a layer expects its k*B rows along, or 0 where ``t`` has them there and not
        along ``d`` (a sequence-first model that made its data batch first, ``h.transpose(0, 1)``);
        ``shared``: 1 row along ``d`` stays there (a table shared by the batch: :meth:`shared`)."""
        rows = None if self.b is None else self.k * self.b
        keep = (rows, 1) if shared else (rows,)
        return 0 if d and rows is not None and t.dim() > d and t.shape[d] not in keep and t.shape[0] == rows else d

    def is_input(self, t: Tensor) -> bool:
        """Whether ``t`` is one of the model's inputs (as given, or its k copies): not made by the model."""
        return any(t is g for g in self.given)

    def shared(self, t: Tensor, d: int) -> bool:
        """Whether ``t`` (a layer's input, batch along ``d``) is a table shared by the batch: 1 row
        where k*B are expected. Each of the k samples then computes it once, broadcast over B rows."""
        return self.b is not None and t.dim() > d and t.shape[d] == 1 and self.k * self.b != 1

    def broadcast(self, y: Tensor, d: int) -> Tensor:
        """(k, ..., 1, ...) -> (..., k*B, ...): each sample's result repeated over its B rows."""
        assert self.b is not None
        shape = list(y.shape)
        shape[d + 1] = self.b
        return refold(y.expand(shape), d)


#: k samples folded into the batch dimension (None outside :func:`folded_samples` and
#: :func:`forward_samples`)
FOLD: ContextSlot[_Fold | None] = ContextSlot("bbb_folded_samples", None)


def _check_dim(dim: Any) -> int:
    if dim not in (0, 1) or isinstance(dim, bool):
        raise UserError(f"batch_dim must be 0 (inputs batch first) or 1 (sequence first), got {dim!r}")
    return int(dim)


@contextlib.contextmanager
def folded_samples(k: int, batch_dim: int = 0) -> Iterator[None]:
    """Inside the block, every batch is ``k`` folded Monte Carlo samples: ``k*B`` rows.

    Each Bayesian layer views its input as ``(k, B, ...)``, evaluates it with ``k`` weight samples
    (sample ``j`` on rows ``j*B .. j*B+B-1`` of the batch dimension) and returns ``k*B`` rows
    again, so every other layer (pooling, ``Flatten``, normalisation, dropout, reshapes that keep
    the batch dimension, residual adds) sees an ordinary, larger batch and needs no wrapping.
    ``batch_dim`` is the batch dimension of the model's input: 0, or 1 for a sequence-first
    model (``batch_first=False`` recurrent or attention layers, inputs ``(T, B, ...)``). Recurrent
    and attention layers read their own ``batch_first``; linear layers fold along ``batch_dim``
    when their input has a dimension after it besides the features (and, inside
    :func:`forward_samples`, not k*B rows along 0 only: data made batch first), else along 0;
    convolutions along 0. :func:`forward_samples` (used by :class:`~bbb.elbo.ELBO` and
    :func:`~bbb.uncertainty.predict`) opens this block for you.

    Caveat: a layer that mixes rows of the batch mixes samples too. ``BatchNorm`` in training mode
    normalises over all ``k*B`` rows (statistics over the k networks' activations together); in
    ``eval()`` mode it uses its running statistics and the samples stay independent.
    """
    token = FOLD.set(_Fold(check_int("the number of samples", k), dim=_check_dim(batch_dim)))
    try:
        yield
    finally:
        FOLD.reset(token)


def fold_samples() -> int | None:
    """k while a k-sample fold with k >= 2 is active (inside :func:`forward_samples`), else None."""
    fold = FOLD.get()
    return None if fold is None or fold.k == 1 else fold.k


def model_batch_dim(model: nn.Module) -> int:
    """The batch dimension of ``model``'s input as its layers declare it: 1 when every layer with
    a ``batch_first`` attribute (recurrent, attention) has it False, else 0. A one-line error
    when they disagree (pass ``batch_dim`` explicitly)."""
    firsts = {bool(m.batch_first) for m in model.modules()
              if isinstance(getattr(m, "batch_first", None), bool)}
    if len(firsts) > 1:
        raise UserError(f"{type(model).__name__} mixes batch_first=True and batch_first=False layers, so the "
                        "batch dimension of its input is not known: pass batch_dim=0 or batch_dim=1")
    return 1 if firsts == {False} else 0


def check_model(who: str, model: object) -> None:
    """A one-line :class:`UserError` unless ``model`` is an ``nn.Module``: ``who`` (the Engine, IVON, the
    ELBO, ...) takes the network itself, where ``torch.optim``'s optimisers take ``model.parameters()``."""
    if isinstance(model, nn.Module):
        return
    hint = ""
    if isinstance(model, (Iterator, list, tuple)):  # (model.parameters(), a list of tensors or groups)
        hint = ": give the model itself, not model.parameters()"
    raise UserError(f"{who} needs the network (an nn.Module), got {type(model).__name__}{hint}")


def forward_samples(model: nn.Module, inputs: Inputs, num_samples: int, batch_dim: int | None = None,
                    output: str | int | None = None) -> Tensor:
    """``model`` on ``inputs`` (B examples) with ``num_samples`` = k weight samples: output (k, B, ...).

    Works for any network whose layers keep the batch dimension (see :func:`folded_samples`): the
    input is repeated k times along the batch dimension, every Bayesian layer uses one weight
    sample per copy, and the output is unfolded. The model's own sampling mode still applies
    (``train()`` samples, ``eval()`` uses the mean unless inside :func:`sampling`).

    ``inputs``: a tensor (``model(x)``), a tuple/list of arguments (``model(*x)``) or a mapping of
    keyword arguments (``model(**x)``, e.g. ``{"input_ids": ..., "attention_mask": ...}``). B is the
    batch size of its first tensor; every tensor with B rows along the batch dimension is repeated
    k times (:func:`fold_inputs`), the rest passed as is. A table shared by the batch (a
    ``position_ids`` of shape (1, T)) reaches each Bayesian layer with 1 row: each of the k sampled
    networks reads its own table, broadcast over its B rows. ``output``: which part of the model's
    output holds the predictions (:func:`select_output`: a tuple's first element, a mapping's or a
    ``ModelOutput``'s ``"logits"`` by default).

    ``batch_dim``: the batch dimension of the inputs; None reads it from the model (1 for a
    sequence-first model, inputs ``(T, B, ...)``: :func:`model_batch_dim`). The output's samples are
    unfolded from the same dimension when it has ``k*B`` rows there, else from dim 0 (e.g. a
    sequence-first classifier that pools over time); the sample dimension always comes first.

    >>> with sampling(net, "sample"):
    ...     logits = forward_samples(net, x, 10)     # (10, B, classes), 10 different networks
    ...     logits = forward_samples(bert, {"input_ids": ids, "attention_mask": mask}, 10)
    """
    check_model("forward_samples", model)
    k = check_int("num_samples", num_samples)
    if isinstance(inputs, Tensor) and inputs.dim() < 1:
        raise UserError(f"expected an input tensor (B, ...) with a batch dimension, got {inputs!r:.80}")
    check_inputs(inputs, "forward_samples")
    d = model_batch_dim(model) if batch_dim is None else _check_dim(batch_dim)
    b = input_batch_size(inputs, d)
    with shared_samples(per_call=True):  # a layer the forward calls twice (a cell in a loop): one network sample
        if k == 1:
            return _unfold_output(select_output(call_model(model, inputs), output), 1, b, d)
        if isinstance(inputs, Tensor) and d == 0 and getattr(model, "accepts_sample_dim", False):
            with leading_samples():  # (k, B, ...) natively: no folding
                return select_output(model(inputs.unsqueeze(0).expand(k, *inputs.shape)), output)
        steps = next(iter(input_tensors(inputs))).shape[0] if d else None  # T of a sequence-first input (T, B, ...)
        folded = fold_inputs(inputs, k, d, b)
        src = inputs if isinstance(inputs, Tensor) and d == 0 else None  # a layer fed it reads it unfolded
        given = (*input_tensors(inputs), *input_tensors(folded))
        token = FOLD.set(_Fold(k, src, folded if src is not None else None, d, b, given))
        try:
            y = call_model(model, folded)
        finally:
            FOLD.reset(token)
        return _unfold_output(select_output(y, output), k, b, d, steps)


def _unfold_output(y: Tensor, k: int, b: int, d: int = 0, steps: int | None = None) -> Tensor:
    """(k*B, ...) or, per step of a sequence-first model (``d`` 1), (T, k*B, ...) -> (k, B, ...) or (k, T, B, ...);
    k*B rows along both dims are per step only where dim 0 is the input's ``steps`` (a (k*B, C) output of
    C = k*B classes, one example of 10 classes at k = 10, is per example)."""
    per_step = y.dim() > d and y.shape[d] == k * b and (y.shape[0] != k * b or steps in (None, k * b))
    if d != 0 and per_step:
        return unfold(y, k, d)
    if y.dim() < 1 or y.shape[0] != k * b:
        raise UserError(f"the network returned shape {tuple(y.shape)} for a batch of {k}x{b} rows ({k} "
                        "samples folded into the batch dimension): keep the batch dimension in forward "
                        "(e.g. x.flatten(1), not x.view(-1))" + (SEQUENCE_FIRST_HINT if d else ""))
    return y.reshape(k, b, *y.shape[1:])


#: what a k-sample error adds for a model read as sequence-first (:func:`model_batch_dim`)
SEQUENCE_FIRST_HINT = ("; the inputs were taken as sequence-first, (T, B, ...) with B along dim 1 (as predict and the "
                       "ELBO read a model whose recurrent/attention layers have batch_first=False): a model that "
                       "takes batch-first inputs and transposes them in forward needs those layers built with "
                       "batch_first=True (or bbb.nn.forward_samples(model, x, k, batch_dim=0))")
