"""Monte Carlo prediction (:func:`predict`) and the metrics of a model on data (:func:`evaluate`):
classification, or regression with ``likelihood=``."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal, cast, overload

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from ..elbo import Categorical, Gaussian, HeteroscedasticGaussian, Likelihood, likelihood_from_name
from ..errors import UserError, check_int
from ..hf import causal_lm, decoder_inputs
from ..lora import warn_untrained
from ..nn import SampleRecorder, forward_samples, model_batch_dim, sampling, shared_samples, warn_not_bayesian
from ..nn.inputs import (
    Inputs,
    call_model,
    check_output,
    input_batch_size,
    map_inputs,
    select_output,
    split_inputs,
    split_targets,
)
from ..nn.model import modes_kept, whole_weights
from ..nn.samples import PROVIDER
from .classification import (
    brier_score,
    entropy,
    error_rate,
    expected_calibration_error,
    mutual_information,
    predictive_log_likelihood,
    predictive_probs,
)
from .regression import regression_metrics

__all__ = ["predict", "evaluate"]


def _batches(data: Any) -> Iterator[tuple[Any, Tensor | None]]:
    """(inputs, targets or None) per batch of a DataLoader / iterable of batches: tensors,
    ``(inputs, targets, ...)`` tuples (inputs a tensor, a tuple of model arguments or a mapping) or
    mappings (:func:`bbb.nn.inputs.split_targets`: Hugging Face batches, ``labels`` the targets, or
    ``{"x", "y"}``)."""
    for batch in data:
        if isinstance(batch, (Tensor, Mapping)):
            yield split_targets(batch)
        elif isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], (Tensor, tuple, list, Mapping)):
            y = batch[1] if len(batch) > 1 and isinstance(batch[1], Tensor) else None
            yield batch[0], y
        else:
            raise UserError("expected batches that are tensors, (inputs, targets) tuples or mappings (Hugging Face "
                            f"batches, or dicts with 'x'/'y'), got {type(batch).__name__}")


def _one_batch(x: Any) -> bool:
    """Whether predict's ``x`` is one batch of inputs (a tensor, a tuple of model arguments or a
    mapping), not an iterable of batches (a DataLoader, a list of batches)."""
    return isinstance(x, (Tensor, tuple, Mapping))


def _device(model: nn.Module) -> torch.device | None:
    p = next(model.parameters(), None)
    return None if p is None else p.device


def _as_generator(generator: torch.Generator | int | None, device: torch.device | None,
                  fn: str) -> torch.Generator | None:
    """``generator=``: None, a ``torch.Generator`` on the model's device type, or an int seed (a new
    generator on the model's device, seeded with it)."""
    if generator is None:
        return None
    dev = torch.device("cpu") if device is None else device
    if isinstance(generator, torch.Generator):
        if generator.device.type != dev.type:
            raise UserError(f"{fn}: generator= is a {generator.device.type} generator but the model is on {dev}: "
                            f"use torch.Generator(device={dev.type!r}) or pass an int seed")
        return generator
    if isinstance(generator, bool) or not isinstance(generator, numbers.Integral) or generator < 0:
        raise UserError(f"{fn}: generator= must be a torch.Generator or an int seed >= 0, got {generator!r}")
    return torch.Generator(device=dev).manual_seed(int(generator))


def _rng_states(device: torch.device | None) -> list[Tensor]:
    """torch's global random states that a forward on ``device`` may draw from (CPU, and CUDA's)."""
    states = [torch.get_rng_state()]
    if device is not None and device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _set_rng_states(states: list[Tensor], device: torch.device | None) -> None:
    torch.set_rng_state(states[0])
    if len(states) > 1 and device is not None:
        torch.cuda.set_rng_state(states[1], device)


@overload
def predict(model: nn.Module, x: Inputs | Iterable, num_samples: int = ..., mode: str = ...,
            batch_size: int | None = ..., return_targets: Literal[False] = ...,
            generator: torch.Generator | int | None = ..., output: str | int | None = ...) -> Tensor: ...
@overload
def predict(model: nn.Module, x: Inputs | Iterable, num_samples: int = ..., mode: str = ...,
            batch_size: int | None = ..., *, return_targets: Literal[True],
            generator: torch.Generator | int | None = ...,
            output: str | int | None = ...) -> tuple[Tensor, Tensor]: ...
@overload
def predict(model: nn.Module, x: Inputs | Iterable, num_samples: int = ..., mode: str = ...,
            batch_size: int | None = ..., return_targets: bool = ...,
            generator: torch.Generator | int | None = ...,
            output: str | int | None = ...) -> Tensor | tuple[Tensor, Tensor]: ...
@torch.no_grad()
def predict(
    model: nn.Module,
    x: Inputs | Iterable,
    num_samples: int = 10,
    mode: str = "sample",
    batch_size: int | None = None,
    return_targets: bool = False,
    generator: torch.Generator | int | None = None,
    output: str | int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Network outputs for ``x`` (B examples): (k, B, ...) sampled, or (1, B, ...) with ``mode="mean"``.

    ``x`` is one batch of the model's inputs: a tensor (``model(x)``; a numpy array is one too), a
    tuple of arguments (``model(*x)``) or a mapping of keyword tensors (``model(**x)``, e.g. a
    tokenizer's ``{"input_ids", "attention_mask"}``; its ``"labels"`` are not passed). Or a ``DataLoader`` (any
    other iterable of batches, a list of batches included: tensors, ``(inputs, targets)`` tuples,
    Hugging Face mappings with ``"labels"`` or dicts with ``"x"``/``"y"``), whose batches are moved
    to the model's device. The model's output may be a tensor, a tuple (its first element), a
    mapping or a ``ModelOutput`` (its ``"logits"``, or the key ``output=`` names).
    The k networks run batched (the samples folded into the batch dimension, so any network
    works: :func:`bbb.nn.forward_samples`); ``batch_size`` bounds memory by chunking each batch
    (every tensor with the batch dimension is split), and every chunk or batch sees the same k
    networks (weights drawn once, :func:`bbb.nn.shared_samples`): sample j is one network of the
    posterior across all the inputs. Layers trained with the ``local`` or ``flipout`` estimator
    draw whole weights here too (:func:`bbb.nn.whole_weights`): their own noise is per row, so an
    input's positions (a sequence's tokens, an image's pixels) would see different weights and a
    pooled output would vary less than the posterior says.
    ``return_targets=True`` (DataLoader only) also returns the concatenated targets:
    ``(outputs, targets)``.

    ``generator``: a ``torch.Generator`` (on the model's device type) or an int seed. When given,
    all weight noise (reparameterisation, local reparameterisation and Flipout draws) comes from it,
    so equal seeds give equal outputs, and torch's global random state is left exactly as it was
    (it is restored on return, so a DataLoader's own draws are undone too and evaluating does not
    perturb a training run). A layer that draws from the global generator anyway (a custom layer
    that ignores :class:`bbb.nn.SampleRecorder`'s generator) is a one-line :class:`UserError`. None
    (the default): torch's global generator, as before. A model with no Bayesian layer warns once;
    a Bayesian LoRA model whose adapter is still at peft's init (A Bayesian, B = 0, so every sample
    is the base model) warns at each sampled prediction (:func:`bbb.lora.warn_untrained`).

    A loaded run (``bbb.load_model(RUN)``, a :class:`bbb.runs.TrainedModel`) takes raw inputs
    here, as its ``forward`` does, or the inputs its ``encode_csv`` / ``encode`` return (marked as
    encoded, so never encoded twice); its bare network, ``model.network``, takes encoded inputs.
    An input that does not fit is an error that names the shape you gave, not the folded one.

    >>> logits, labels = predict(net, test_loader, num_samples=20, return_targets=True)
    >>> expected_calibration_error(predictive_probs(logits), labels)
    >>> torch.equal(predict(net, x, generator=0), predict(net, x, generator=0))
    True
    >>> logits = predict(bert, {"input_ids": ids, "attention_mask": mask}, num_samples=8)  # (8, B, C)
    """
    if mode not in ("sample", "mean"):
        raise UserError(f"mode must be 'sample' or 'mean', got {mode!r}")
    num_samples = check_int("num_samples", num_samples)
    check_output(output)
    if isinstance(x, np.ndarray):  # one batch, not an iterable of its rows
        if x.dtype.kind not in "biuf":
            raise UserError(f"predict takes numbers, got an array of {x.dtype} (shape {x.shape}); a table with "
                            "text columns goes through its run: bbb.load_model(RUN).encode_csv(path)")
        x = torch.as_tensor(np.require(x, requirements="C"))  # (a reversed view, x[::-1], has negative strides)
    if hasattr(x, "columns") and hasattr(x, "to_numpy"):  # a DataFrame iterates its column names
        raise UserError(f"predict takes a tensor or an array, got a {type(x).__name__}: give its values, "
                        "df[columns].to_numpy(), the columns in the order the network was trained on (a run "
                        "loaded by bbb.load_model checks them by name: model.sample_outputs(df, num_samples))")
    if not _one_batch(x) and not isinstance(x, Iterable):
        raise UserError(f"predict takes a tensor, a tuple or mapping of model inputs, or a DataLoader, got "
                        f"{type(x).__name__}")
    if _one_batch(x) and return_targets:
        raise UserError("return_targets needs a DataLoader (one batch of inputs carries no targets)")
    warn_not_bayesian(model, "predict")
    if mode == "sample":
        warn_untrained(model, "predict")
    dev = _device(model)
    gen = _as_generator(generator, dev, "predict")
    if gen is not None and PROVIDER.get() is not None:
        raise UserError("predict: generator= has no effect inside engine.sampling() (the engine supplies the "
                        "weights): call predict outside the block")
    saved = None if gen is None else _rng_states(dev)
    try:
        with modes_kept(model):  # (each module back in its own mode: a frozen BatchNorm stays in eval())
            return _predict(model, x, int(num_samples), mode, batch_size, return_targets, dev, gen, saved, output)
    finally:
        if saved is not None:
            _set_rng_states(saved, dev)


def _predict(model: nn.Module, x: Inputs | Iterable, num_samples: int, mode: str, batch_size: int | None,
             return_targets: bool, dev: torch.device | None, gen: torch.Generator | None,
             saved: list[Tensor] | None, output: str | int | None) -> Tensor | tuple[Tensor, Tensor]:
    d = model_batch_dim(model)  # 1 for a sequence-first model: inputs (T, B, ...)
    one = _one_batch(x)
    batches = _chunks([(split_targets(x)[0], None)] if one else _batches(x), batch_size, d)
    outs, targets = [], []
    record: AbstractContextManager[Any] = SampleRecorder(gen) if gen is not None else nullcontext()
    whole = whole_weights(model) if mode == "sample" else nullcontext()
    with sampling(model, mode), whole, shared_samples(), record:
        sizes, steps = [], []
        for xc, yc, first in batches:
            if not one and dev is not None:
                xc = map_inputs(xc, lambda t: t.to(dev))
            if return_targets:  # (scored on the batches' labels: evaluate's DataLoader)
                xc = decoder_inputs(model, xc, yc, "evaluate (predict with return_targets)")
            sizes.append(_size(xc, d))
            steps.append(_size(xc, 0))  # a sequence-first input's steps T
            before = None if saved is None else _rng_states(dev)
            if mode == "mean":
                out = select_output(call_model(model, xc), output).unsqueeze(0)
            else:
                out = forward_samples(model, xc, num_samples, output=output)
            if before is not None and any(not torch.equal(a, b) for a, b in zip(before, _rng_states(dev))):
                raise UserError(f"predict: generator= was given, but {type(model).__name__} drew from torch's global "
                                "random generator (a layer that ignores bbb.nn.SampleRecorder's generator), so "
                                "its noise is not reproducible: route that layer's draws through the recorder")
            outs.append(out)
            if return_targets and first:
                if yc is None:
                    raise UserError("return_targets: the DataLoader's batches carry no targets")
                targets.append(yc.to(out.device))
    if not outs:
        raise UserError("predict: the DataLoader yielded no batches")
    # the outputs' batch: dim 1 after the samples, or 2 for a sequence-first output (k, T, B, ...)
    per_step = d == 1 and _per_step(outs, sizes, steps)
    result = torch.cat(outs, dim=2 if per_step else 1)
    return (result, torch.cat(targets)) if return_targets else result


def _chunks(batches: Iterable[tuple[Any, Tensor | None]], batch_size: int | None,
            d: int) -> Iterator[tuple[Any, Tensor | None, bool]]:
    """(inputs, targets, whether the batch's first chunk) of each batch in chunks of ``batch_size``
    examples along ``d`` (None: whole); a batch's targets come with each of its chunks."""
    for xb, yb in batches:
        for j, c in enumerate([xb] if batch_size is None else split_inputs(xb, batch_size, d)):
            yield c, yb, j == 0


def _per_step(outs: list[Tensor], sizes: list[int], steps: list[int]) -> bool:
    """Whether a sequence-first model's outputs, one per chunk of ``sizes`` examples (inputs of
    ``steps`` steps), are per step, (k, T, B, ...), rather than per example, (k, B, ...): B at dim 2
    and not at dim 1; where it is at both (a chunk of B examples, B classes), the outputs per step
    are those whose dim 1 is the inputs' T."""
    at_2 = all(o.dim() > 2 and o.shape[2] == n for o, n in zip(outs, sizes))
    at_1 = all(o.shape[1] == n for o, n in zip(outs, sizes))
    return at_2 and (not at_1 or all(o.shape[1] == t for o, t in zip(outs, steps)))


def _size(inputs: Any, d: int) -> int:
    """The batch size of ``inputs`` along ``d``, or -1 when none of its tensors has that dimension."""
    try:
        return input_batch_size(inputs, d)
    except UserError:
        return -1


def evaluate(
    model: nn.Module,
    data: Iterable | tuple[Inputs, Tensor] | Mapping[str, Any],
    num_samples: int = 10,
    num_bins: int = 15,
    *,
    likelihood: Likelihood | str | None = None,
    shift: float | Tensor = 0.0,
    scale: float | Tensor = 1.0,
    generator: torch.Generator | int | None = None,
    output: str | int | None = None,
) -> dict[str, float]:
    """Metrics of the Monte Carlo predictive on a DataLoader or ``(x, targets)``, each a float.

    ``data``: a DataLoader (any iterable of batches, as :func:`predict` takes them, with targets),
    ``(inputs, targets)`` (inputs a tensor, a tuple of model arguments or a mapping of keyword
    tensors) or one mapping batch with its targets (a Hugging Face batch's ``"labels"``, or
    ``{"x", "y"}``). ``output``: the part of the model's output that holds the predictions, as
    :func:`predict`'s. A model with no Bayesian layer warns once.

    Classification (integer labels; ``likelihood`` None or categorical): error rate, NLL, Brier
    score, ECE (``num_bins`` bins), mean predictive entropy and mean mutual information (nats). On a
    transformers causal LM (:func:`bbb.hf.causal_lm`) with labels per token: per scored token, the
    logits at t against the label at t + 1 (labels of -100 ignored), as the model's own loss; on any
    other model with labels per token (token classification, outputs (k, B, T, C)): per token, labels
    of -100 ignored, as the ELBO's likelihood.

    Regression: pass the training likelihood, ``likelihood=elbo.likelihood``. A
    :class:`~bbb.elbo.Gaussian` gives every sampled network the noise sd ``likelihood.sigma`` (learned
    or fixed); a :class:`~bbb.elbo.HeteroscedasticGaussian` reads each sampled output's mean and
    noise with its ``split``. The predictive is the equal-weight mixture of the k Gaussians and the
    result is :func:`regression_metrics` (``rmse``, ``log_likelihood``, ``nll``, ``coverage_50`` /
    ``_90`` / ``_95``, ``mean_sd``), in the original units of a target that was standardised as
    ``(y - shift) / scale`` for training (the data's targets are the standardised ones, as the
    network was trained on). Use ``num_samples >= 100`` for regression: the log-likelihood and the
    coverage of a mixture of a few components are noisy. Floating-point targets without a
    likelihood are a :class:`UserError` (say which noise the network was trained with).

    ``generator`` (a ``torch.Generator`` or an int seed): the weight noise, as :func:`predict`'s;
    torch's global random state is left as it was.

    >>> bbb.uncertainty.evaluate(net, test_loader, num_samples=20)["ece"]
    >>> evaluate(bert, {"input_ids": ids, "attention_mask": mask, "labels": labels})["error"]
    >>> evaluate(net, (x_test, y_test_n), num_samples=100, likelihood=elbo.likelihood,
    ...          shift=ys.mean, scale=ys.std, generator=0)["rmse"]
    """
    if likelihood is not None:
        likelihood = likelihood_from_name(likelihood)
        if not isinstance(likelihood, (Categorical, Gaussian, HeteroscedasticGaussian)):
            raise UserError(f"evaluate: likelihood= must be a Categorical, Gaussian or HeteroscedasticGaussian, got "
                            f"{type(likelihood).__name__}")
    regression = isinstance(likelihood, (Gaussian, HeteroscedasticGaussian))
    if not regression and not (_is_default(shift, 0.0) and _is_default(scale, 1.0)):
        raise UserError("evaluate: shift= and scale= apply to regression only (pass likelihood=, a Gaussian)")
    check_output(output)
    warn_not_bayesian(model, "evaluate")
    outputs: Tensor
    one: tuple[Any, Tensor | None] | None = None
    if isinstance(data, Mapping):
        one = split_targets(data)
        if one[1] is None:
            raise UserError(f"evaluate: a mapping batch needs its targets under 'labels' (or 'y'), got keys "
                            f"{', '.join(map(str, data))}")
    elif (isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[1], Tensor)
          and _one_batch(data[0])):
        one = (data[0], data[1])
    if one is not None:
        one = (decoder_inputs(model, one[0], one[1], "evaluate"), one[1])
        outputs = predict(model, one[0], num_samples, generator=generator, output=output)
        targets = cast(Tensor, one[1]).to(outputs.device)
    else:
        outputs, targets = predict(model, data, num_samples, return_targets=True,
                                   generator=generator, output=output)
    if not regression and causal_lm(model) and outputs.dim() == targets.dim() + 2 and targets.dim() >= 2:
        # a causal LM's labels are its input ids: the logits at t score the label at t + 1, -100 ignored
        outputs, targets = outputs[..., :-1, :], targets[..., 1:]
        keep = targets != -100
        outputs, targets = outputs[:, keep], targets[keep]
    elif (not regression and outputs.dim() == targets.dim() + 2 and targets.dim() >= 2
          and not targets.is_floating_point()):  # a label per token (token classification): -100 ignored
        keep = targets != -100
        outputs, targets = outputs[:, keep], targets[keep]
    if regression:
        means, sigmas, target = _regression_outputs(likelihood, outputs, targets)  # type: ignore[arg-type]
        return regression_metrics(means, sigmas, target, shift=shift, scale=scale)
    if targets.is_floating_point():
        raise UserError("evaluate: the targets are floating point (regression?): pass likelihood=, a "
                        "bbb.elbo.Gaussian with the noise sd (e.g. elbo.likelihood) or the HeteroscedasticGaussian")
    if outputs.shape[-1] < 2:  # (a softmax over one class is 1: every score perfect on labels 0)
        raise UserError(f"evaluate: the network gives {outputs.shape[-1]} logit per example, and a softmax over one "
                        "class is certain: a classifier gives one logit per class (a regressor: pass likelihood=)")
    probs = predictive_probs(outputs)
    return {
        "error": error_rate(probs, targets),
        "nll": float(-predictive_log_likelihood(outputs, targets).mean()) + 0.0,  # (from the logits: no floor)
        "brier": brier_score(probs, targets),
        "ece": expected_calibration_error(probs, targets, num_bins),
        "entropy": float(entropy(probs).mean()),
        "mutual_information": float(mutual_information(outputs).mean()),
    }


def _is_default(v: float | Tensor, default: float) -> bool:
    try:
        return float(v) == default
    except (TypeError, ValueError, RuntimeError):
        return False


def _regression_outputs(likelihood: Gaussian | HeteroscedasticGaussian, outputs: Tensor,
                        targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(means (k, B), sigmas (k, B) or 0-d, targets (B,)) of k sampled regressors' outputs."""
    if targets.dim() == 2 and targets.shape[-1] == 1:
        targets = targets.squeeze(-1)
    if targets.dim() != 1:
        raise UserError(f"evaluate: regression metrics take one target per example, targets (B,), got "
                        f"{tuple(targets.shape)}")
    if isinstance(likelihood, HeteroscedasticGaussian):
        means, sigmas = likelihood.split(outputs)
    else:
        means = outputs.squeeze(-1) if outputs.dim() == 3 and outputs.shape[-1] == 1 else outputs
        sigmas = likelihood.sigma.detach().to(outputs.device)
    if means.dim() != 2 or means.shape[1] != targets.shape[0]:
        raise UserError(f"evaluate: network outputs of shape {tuple(outputs.shape)} do not give one mean per target "
                        f"({targets.shape[0]} targets) for the {type(likelihood).__name__} likelihood")
    return means, sigmas, targets.to(means.dtype if targets.is_floating_point() else torch.float64)


