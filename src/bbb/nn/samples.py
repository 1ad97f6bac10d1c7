"""Sampling state of the Bayesian layers: the sampling mode, recording samples for the Monte Carlo
KL (common random numbers), sample providers, shared samples and k samples folded into the batch
dimension. The context variables below are read by the layers during ``forward``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import KLMode
from ..errors import UserError, check_int

__all__ = [
    "SamplingMode",
    "SampleRecorder",
    "SampleProvider",
    "providing_samples",
    "shared_samples",
    "folded_samples",
    "forward_samples",
    "check_model",
    "Inputs",
    "TARGET_KEYS",
    "call_model",
    "select_output",
    "check_output",
    "split_targets",
    "map_inputs",
    "input_tensors",
    "check_inputs",
    "input_batch_size",
    "fold_inputs",
    "split_inputs",
    "leading_samples",
    "LEADING",
    "fold_samples",
    "unfold",
    "refold",
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
    reparameterisation draws per example by construction. Meant for prediction under
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
    given: frozenset[int] = frozenset()  # ids of the model's input tensors, as given and as folded

    def batch_dim(self, t: Tensor, d: int, shared: bool = False) -> int:
        """``d``, the dimension a layer expects its k*B rows along, or 0 where ``t`` has them there and not
        along ``d`` (a sequence-first model that made its data batch first, ``h.transpose(0, 1)``);
        ``shared``: 1 row along ``d`` stays there (a table shared by the batch: :meth:`shared`)."""
        rows = None if self.b is None else self.k * self.b
        keep = (rows, 1) if shared else (rows,)
        return 0 if d and rows is not None and t.dim() > d and t.shape[d] not in keep and t.shape[0] == rows else d

    def is_input(self, t: Tensor) -> bool:
        """Whether ``t`` is one of the model's inputs (as given, or its k copies): not made by the model."""
        return id(t) in self.given

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


def unfold(t: Tensor, k: int, dim: int, who: str = "a layer") -> Tensor:
    """``k*B`` rows along ``dim`` -> a leading sample dimension: ``(..., k*B, ...)`` ->
    ``(k, ..., B, ...)`` (a view where the layout allows). A one-line error when ``t`` cannot hold
    ``k`` folded samples along ``dim``."""
    if t.dim() <= dim or t.shape[dim] % k:
        got = f"{t.dim()}-d" if t.dim() <= dim else f"{t.shape[dim]} rows along dim {dim}, not a multiple of {k}"
        raise UserError(
            f"{who}: inside a {k}-sample pass (the samples folded into the batch dimension) it got {got} "
            f"(shape {tuple(t.shape)}). Keep the batch dimension in forward (x.flatten(1), not x.view(-1, ...)); "
            "for a sequence-first model (batch_first=False) the batch is dim 1: forward_samples(..., "
            "batch_dim=1)")
    return t.unflatten(dim, (k, t.shape[dim] // k)).movedim(dim, 0)


def refold(t: Tensor, dim: int) -> Tensor:
    """The inverse of :func:`unfold`: ``(k, ..., B, ...)`` -> ``(..., k*B, ...)``."""
    return t.movedim(0, dim).flatten(dim, dim + 1)


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


# --------------------------------------------------------------------------------------------
# The model's inputs and outputs as models have them: a tensor, a tuple of arguments or a mapping
# of keyword tensors in; a tensor, a tuple, a mapping or a transformers ModelOutput out
# --------------------------------------------------------------------------------------------

#: a model's inputs: a tensor (``model(x)``), a tuple/list of arguments (``model(*x)``) or a mapping of
#: keyword arguments (``model(**x)``, e.g. a Hugging Face batch)
Inputs = Tensor | tuple | list | Mapping[str, Any]

#: the keys of a mapping batch that hold the targets (not passed to the model): Hugging Face's
#: ``labels``; the ``{"x": inputs, "y": targets}`` batches of earlier versions read ``y``/``target``/``label``
TARGET_KEYS = ("labels",)
_OLD_INPUT_KEYS, _OLD_TARGET_KEYS = ("x", "input"), ("y", "target", "label")


def _is_args(inputs: Any) -> bool:
    """A tuple or list of model arguments (a named tuple, e.g. a ``PackedSequence``, is one value)."""
    return isinstance(inputs, (tuple, list)) and not hasattr(type(inputs), "_fields")


def _describe(inputs: Any) -> str:
    if isinstance(inputs, Tensor):
        return f"a tensor of shape {tuple(inputs.shape)}"
    if isinstance(inputs, Mapping):
        return f"a mapping with keys {', '.join(map(str, inputs))}"
    return f"a {type(inputs).__name__}"


def map_inputs(inputs: Any, fn: Callable[[Tensor], Any]) -> Any:
    """``inputs`` with ``fn`` applied to every tensor in it (inside tuples, lists and mappings, a
    mapping comes back a ``dict``); anything else is kept as it is."""
    if isinstance(inputs, Tensor):
        return fn(inputs)
    if isinstance(inputs, Mapping):
        return {key: map_inputs(v, fn) for key, v in inputs.items()}
    if _is_args(inputs):
        items = [map_inputs(v, fn) for v in inputs]
        return items if isinstance(inputs, list) else tuple(items)
    return inputs


def input_tensors(inputs: Any) -> Iterator[Tensor]:
    """Every tensor in ``inputs``, in order (arguments, then keywords in the mapping's order)."""
    if isinstance(inputs, Tensor):
        yield inputs
    elif isinstance(inputs, Mapping):
        for v in inputs.values():
            yield from input_tensors(v)
    elif _is_args(inputs):
        for v in inputs:
            yield from input_tensors(v)


def check_inputs(inputs: Any, who: str = "the model's inputs") -> None:
    """A one-line error unless ``inputs`` is a tensor, a tuple/list or a mapping with a tensor in it."""
    if not (isinstance(inputs, (Tensor, Mapping)) or _is_args(inputs)):
        raise UserError(f"{who}: expected a tensor, a tuple of model arguments or a mapping of keyword tensors "
                        f"(model(x), model(*x), model(**x)), got {type(inputs).__name__}")


def input_batch_size(inputs: Any, batch_dim: int = 0) -> int:
    """B: the size along ``batch_dim`` of the first tensor of ``inputs`` that has that dimension
    (the first argument, or a mapping's first key, e.g. ``input_ids``)."""
    check_inputs(inputs)
    for t in input_tensors(inputs):
        if t.dim() > batch_dim:
            return t.shape[batch_dim]
    raise UserError(f"the model's inputs ({_describe(inputs)}) hold no tensor with a batch dimension {batch_dim}"
                    + (f" (shape {tuple(inputs.shape)})" if isinstance(inputs, Tensor) else ""))


def _batched(t: Tensor, b: int, d: int) -> bool:
    return t.dim() > d and t.shape[d] == b


def fold_inputs(inputs: Any, k: int, batch_dim: int = 0, batch_size: int | None = None) -> Any:
    """``inputs`` with every tensor that has the batch dimension (``batch_size`` rows along
    ``batch_dim``; None: :func:`input_batch_size`) repeated ``k`` times along it, copy j on rows
    ``j*B .. j*B+B-1``: the input of a k-sample pass. Other tensors (a shared table, a scalar) and
    non-tensors are passed as they are."""
    b = input_batch_size(inputs, batch_dim) if batch_size is None else batch_size
    return map_inputs(inputs, lambda t: refold(t.unsqueeze(0).expand(k, *t.shape), batch_dim)
                      if _batched(t, b, batch_dim) else t)


def split_inputs(inputs: Any, size: int, batch_dim: int = 0) -> list[Any]:
    """``inputs`` in chunks of ``size`` examples: every tensor with the batch dimension is split
    along it (as ``torch.split``), the rest is passed to every chunk as it is."""
    size = check_int("batch_size", size)
    b = input_batch_size(inputs, batch_dim)

    def chunk(start: int) -> Any:
        n = min(size, b - start)
        return map_inputs(inputs, lambda t: t.narrow(batch_dim, start, n) if _batched(t, b, batch_dim) else t)

    return [chunk(start) for start in range(0, b, size)]


def split_targets(batch: Any) -> tuple[Any, Tensor | None]:
    """(the model's inputs, the targets or None) of a batch: a mapping's ``"labels"`` (Hugging Face)
    is the target and is left out of the inputs; a ``{"x": inputs, "y": targets}`` mapping (a key
    ``x``/``input`` with one of ``y``/``target``/``label``, or ``x`` alone) gives ``x`` and ``y``
    (other keys are not read, as in earlier versions); anything else is all inputs. A
    ``(inputs, targets)`` tuple is *not* split (a tuple is the model's arguments).

    >>> inputs, labels = split_targets({"input_ids": ids, "attention_mask": mask, "labels": y})
    """
    if not isinstance(batch, Mapping):
        return batch, None
    if any(key in batch for key in TARGET_KEYS):
        y = next(batch[key] for key in TARGET_KEYS if key in batch)
        return {key: v for key, v in batch.items() if key not in TARGET_KEYS}, y
    old = any(key in batch for key in _OLD_INPUT_KEYS) and (
        any(key in batch for key in _OLD_TARGET_KEYS) or set(batch) <= {*_OLD_INPUT_KEYS, *_OLD_TARGET_KEYS})
    if old:
        x = next(batch[key] for key in _OLD_INPUT_KEYS if key in batch)
        y = next((batch[key] for key in _OLD_TARGET_KEYS if key in batch), None)
        return x, y if isinstance(y, Tensor) else None
    return batch, None


def call_model(model: Callable[..., Any], inputs: Any) -> Any:
    """``model(*x)`` for a tuple/list, ``model(**x)`` for a mapping, else ``model(x)`` (a tensor, or
    any other one value: a named tuple, an object of the model's own).

    >>> logits = select_output(call_model(bert, {"input_ids": ids, "attention_mask": mask}))
    """
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if _is_args(inputs):
        return model(*inputs)
    return model(inputs)


def check_output(output: Any) -> str | int | None:
    """``output=`` (:func:`select_output`): None, a key (str) or an index (int); else a one-line error."""
    if isinstance(output, bool) or not (output is None or isinstance(output, (str, int))):
        raise UserError(f"output= must be a key of the model's output (a str), an index or None, got {output!r}")
    return output


def select_output(y: Any, output: str | int | None = None) -> Tensor:
    """The tensor of a model's output: the output itself when it is a tensor; of a tuple/list its
    first element; of a mapping or a transformers ``ModelOutput`` its ``"logits"``. ``output``
    names another key (or a tuple's index). Anything else is a one-line error naming what there is.

    >>> select_output({"loss": loss, "logits": logits}) is logits
    True
    """
    check_output(output)
    if isinstance(y, Tensor) and output is None:
        return y
    if isinstance(y, Mapping):
        key = "logits" if output is None else output
        got = y.get(key) if isinstance(key, str) else None
        if isinstance(got, Tensor):
            return got
        keys = ", ".join(map(str, y)) or "(none)"
        raise UserError(f"the model returned a {type(y).__name__} with keys {keys}, {key!r} not a tensor among "
                        "them: pass output= the key of the network's predictions (e.g. ELBO(..., output='logits'))")
    if _is_args(y) and y:
        i = 0 if output is None else output
        if isinstance(i, int) and -len(y) <= i < len(y) and isinstance(y[i], Tensor):
            return y[i]
        kinds = ", ".join(type(v).__name__ for v in y)
        raise UserError(f"the model returned a {type(y).__name__} ({kinds}): output={output!r} selects no tensor "
                        "in it; pass output= the index of its predictions")
    if isinstance(y, Tensor):  # (with output= given)
        raise UserError(f"the model returned a tensor, which has no part output={output!r} could select (a key of a "
                        "mapping or a ModelOutput, an index of a tuple): leave output= out")
    raise UserError(f"the model returned a {type(y).__name__}, where a tensor, a tuple, a mapping or a ModelOutput "
                    "was expected" + ("" if output is None else f" (output={output!r} selects a key or an index)"))


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
        given = frozenset(id(t) for t in (*input_tensors(inputs), *input_tensors(folded)))
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
