"""A model's inputs and outputs as models have them, and k samples folded into their batch
dimension: a tensor, a tuple of arguments or a mapping of keyword tensors in (:data:`Inputs`); a
tensor, a tuple, a mapping or a transformers ``ModelOutput`` out. Which tensors hold the batch and
along which dimension (:func:`fold_inputs`, :func:`split_inputs`), the k*B rows of a folded pass
and back (:func:`unfold`, :func:`refold`), the targets of a batch (:func:`split_targets`) and the
predictions of an output (:func:`select_output`). Stateless: the sampling state is
:mod:`bbb.nn.samples`'."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError, check_int

__all__ = [
    "Inputs",
    "TARGET_KEYS",
    "PADDING_MASK_KEYS",
    "SHARED_MASK_KEYS",
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
    "unfold",
    "refold",
]


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
    return _map_keyed(inputs, lambda t, key: fn(t))


def _map_keyed(inputs: Any, fn: Callable[[Tensor, Any], Any], key: Any = None) -> Any:
    """:func:`map_inputs` with ``fn(tensor, key)``: the keyword that holds the tensor (None for an
    argument)."""
    if isinstance(inputs, Tensor):
        return fn(inputs, key)
    if isinstance(inputs, Mapping):
        return {name: _map_keyed(v, fn, name) for name, v in inputs.items()}
    if _is_args(inputs):
        items = [_map_keyed(v, fn) for v in inputs]
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


#: keyword arguments of torch's attention and transformer modules that hold a (B, S) padding mask:
#: batch first in a sequence-first model too
PADDING_MASK_KEYS = frozenset({"key_padding_mask", "src_key_padding_mask", "tgt_key_padding_mask",
                               "memory_key_padding_mask"})
#: those that hold an (L, S) mask shared by the batch
SHARED_MASK_KEYS = frozenset({"attn_mask", "src_mask", "tgt_mask", "memory_mask"})


def _batch_axis(t: Tensor, b: int, d: int, first: bool, key: Any) -> int | None:
    """The dimension along which ``t`` holds the B examples of inputs batched along ``d``, else
    None. Batch first (``d`` 0): dim 0 where it has B rows. Sequence first (``d`` 1), the first
    input along ``d``; another tensor by its keyword where torch's modules name it (a padding mask:
    dim 0; an attention mask: none), else along ``d`` where it has B rows there, and a 2-d one with
    B rows along dim 0 only, or a square (B, B) one that is not integer (token ids are), along
    dim 0: a (B, S) padding mask, batch first in torch's sequence-first modules too."""
    if d == 0 or first:
        return d if _batched(t, b, d) else None
    if key in SHARED_MASK_KEYS:
        return None
    rows = t.dim() >= 1 and t.shape[0] == b
    if key in PADDING_MASK_KEYS:
        return 0 if rows else None
    integer = not t.dtype.is_floating_point and t.dtype != torch.bool
    square = t.dim() == 2 and rows and not integer
    if _batched(t, b, d) and not square:
        return d
    return 0 if t.dim() == 2 and rows else None


def _first_with_dim(inputs: Any, d: int) -> Tensor | None:
    """The first tensor of ``inputs`` with a dimension ``d`` (a loop, not ``next`` of a generator
    expression: torch.compile of the oldest torch the project supports breaks the graph there)."""
    for t in input_tensors(inputs):
        if t.dim() > d:
            return t
    return None


def _map_batched(inputs: Any, b: int, d: int, fn: Callable[[Tensor, int], Tensor]) -> Any:
    """``inputs`` with ``fn(t, axis)`` applied to every tensor that holds the batch (along
    ``axis``: :func:`_batch_axis`), the rest as it is."""
    first = _first_with_dim(inputs, d) if d else None  # (only sequence-first inputs tell the first apart)

    def one(t: Tensor, key: Any) -> Tensor:
        axis = _batch_axis(t, b, d, t is first, key)
        return t if axis is None else fn(t, axis)

    return _map_keyed(inputs, one)


def fold_inputs(inputs: Any, k: int, batch_dim: int = 0, batch_size: int | None = None) -> Any:
    """``inputs`` with every tensor that has the batch dimension (``batch_size`` rows along
    ``batch_dim``; None: :func:`input_batch_size`) repeated ``k`` times along it, copy j on rows
    ``j*B .. j*B+B-1``: the input of a k-sample pass. Other tensors (a shared table, a scalar) and
    non-tensors are passed as they are. For sequence-first inputs (``batch_dim`` 1) a padding mask
    (B, S) is folded along its dim 0 (:func:`_batch_axis`)."""
    b = input_batch_size(inputs, batch_dim) if batch_size is None else batch_size
    return _map_batched(inputs, b, batch_dim, lambda t, axis: refold(t.unsqueeze(0).expand(k, *t.shape), axis))


def split_inputs(inputs: Any, size: int, batch_dim: int = 0) -> list[Any]:
    """``inputs`` in chunks of ``size`` examples: every tensor with the batch dimension is split
    along it (as ``torch.split``), the rest is passed to every chunk as it is."""
    size = check_int("batch_size", size)
    b = input_batch_size(inputs, batch_dim)

    def chunk(start: int) -> Any:
        n = min(size, b - start)
        return _map_batched(inputs, b, batch_dim, lambda t, axis: t.narrow(axis, start, n))

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
