"""The variational free energy (negative ELBO) as an object of its own.

For minibatch i of M, with k Monte Carlo samples w^(1..k) ~ q (eqs. 2 and 9 of the paper)::

    loss_i = kl_weight_i * KL[q || P] - (1/k) sum_j sum_n log p(y_n | x_n, w^(j))

The KL is *summed* over every weight (never averaged), and weighted per minibatch, never by the
batch size: ``"uniform"`` gives 1/M (Graves 2011, eq. 8), ``"blundell"`` gives
pi_i = 2^(M-i) / (2^M - 1) (eq. 9). Over one epoch the weights sum to 1, so the losses of an
epoch add up to the full-data free energy.
"""

from __future__ import annotations

import math
import os
import sys
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .distributions import KLMode, check_kl_samples, inverse_softplus, normal_log_prob, softplus
from .errors import UserError, check_float, check_int
from .hf import causal_lm, check_checkpointing, decoder_inputs
from .nn import SampleRecorder, bayes_modules, forward_samples, model_kl, shared_samples, warn_not_bayesian
from .nn.inputs import Inputs, call_model, check_output, select_output, split_targets
from .nn.model import warn_unsampled
from .nn.samples import PROVIDER, check_model
from .options import StrOption, choice

_TORCH_DIR = os.path.dirname(torch.__file__)
__all__ = [
    "KLWeighting",
    "kl_weights",
    "Likelihood",
    "Categorical",
    "Gaussian",
    "HeteroscedasticGaussian",
    "ELBO",
    "ELBOOutput",
    "likelihood_from_name",
]


class KLWeighting(StrOption):
    """How one epoch's KL is split over its M minibatches (:func:`kl_weights`)."""

    UNIFORM = "uniform"
    BLUNDELL = "blundell"
    BLOB = "blob"


def kl_weights(
    num_batches: int,
    scheme: KLWeighting | str | Callable[[int], Tensor] = KLWeighting.UNIFORM,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The M per-minibatch KL weights of one epoch, as a tensor that sums to 1.

    ``"blundell"``: pi_i = 2^(M-i) / (2^M - 1) = 2^-i / (1 - 2^-M), computed in that second,
    overflow-free form in float64 (later weights underflow to 0 for large M, as they should).
    ``"blob"``: Blundell's reversed, pi_i = 2^(i-1) / (2^M - 1), almost all of the KL on the last
    minibatches of each cycle of M: BLoB's KL re-weighting (Wang et al. 2024, 2^i / (2^(M+1) - 1),
    which sums to 1 - 1/(2^(M+1) - 1); normalised here), with M its cycle length (``num_batches``).
    A callable receives M and returns M non-negative weights (normalised here).
    """
    m = check_int("num_batches", num_batches)
    if callable(scheme) and not isinstance(scheme, KLWeighting):
        w = torch.as_tensor(scheme(m), dtype=torch.float64).flatten()
        if w.numel() != m or not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise UserError(f"a custom KL weighting must return {m} finite non-negative weights")
        return (w / w.sum()).to(dtype)
    try:
        scheme = KLWeighting(scheme)
    except ValueError:
        raise UserError(f"unknown KL weighting {scheme!r}; choose 'uniform', 'blundell' or 'blob'") from None
    if scheme is KLWeighting.UNIFORM:
        return torch.full((m,), 1.0 / m, dtype=dtype)
    i = torch.arange(1, m + 1, dtype=torch.float64)
    log_w = -i * math.log(2.0) - math.log1p(-(2.0 ** -m))
    w = torch.exp(log_w)
    return (w.flip(0) if scheme is KLWeighting.BLOB else w).to(dtype)


# --------------------------------------------------------------------------------------------
# Likelihoods
# --------------------------------------------------------------------------------------------


class Likelihood(nn.Module):
    """log p(y | f) for network outputs f; ``log_prob`` returns one value per example.

    Shapes are checked, never broadcast silently: the trailing dimensions of the output must
    be the target's (leading sample dimensions on the output only), else :class:`UserError`.
    """

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def _check_shapes(name: str, output_shape: torch.Size, target: Tensor, what: str) -> None:
        """``output_shape`` (the part compared with the target) must end with ``target.shape``."""
        t = tuple(target.shape)
        o = tuple(output_shape)
        if len(o) < len(t) or (t and o[len(o) - len(t):] != t):
            raise UserError(f"{name} likelihood: targets of shape {t} do not match network outputs of "
                            f"shape {what}; give one target per output (no broadcasting)")


_MULTI_LABEL = ("{what}: a regressor's targets take likelihood='gaussian'; multi-label targets (0/1 per class, "
                "transformers' problem_type='multi_label_classification') need a Bernoulli likelihood, which bbb does "
                "not have: subclass bbb.elbo.Likelihood (log_prob: minus the binary cross-entropy summed over classes)")


class Categorical(Likelihood):
    """Softmax classification: output = logits (..., C), target = class indices (...)."""

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
            raise UserError(f"categorical likelihood: targets must be integer class indices, got {target.dtype}"
                            + _MULTI_LABEL.format(what="" if target.shape != output.shape else ", a target per class"))
        if output.dim() < 1:
            raise UserError("categorical likelihood: the network output must have a class dimension")
        if output.shape[-1] < 2:  # (a softmax over one class is 1: an NLL of 0 whatever the data)
            raise UserError(f"categorical likelihood: the network gives {output.shape[-1]} logit per example (outputs "
                            f"{tuple(output.shape)}), and a softmax over one class is certain: give one logit per "
                            "class (nn.Linear(h, 2) for a binary classifier)")
        if target.dim() and target.shape == output.shape:  # (one 0/1 per class: multi-label)
            raise UserError(f"categorical likelihood: targets of shape {tuple(target.shape)}, one per class, need "
                            "one class index per example (B,)" + _MULTI_LABEL.format(what=""))
        self._check_shapes("categorical", output.shape[:-1], target, f"{tuple(output.shape)} (..., classes)")
        target = target.long()  # (torch's loss takes int64 or uint8 only: int32 labels, numpy's on some systems)
        if output.dim() > target.dim() + 1:  # sample dims on the logits only
            target = target.expand(*output.shape[:-1])
        c = output.shape[-1]
        return -F.cross_entropy(output.reshape(-1, c), target.reshape(-1), reduction="none").view(
            output.shape[:-1]
        )


class Gaussian(Likelihood):
    """y ~ N(f, sigma^2) with a fixed or learned noise standard deviation ``sigma``.

    ``ELBO(net, "gaussian")`` means ``Gaussian()``: a *fixed* noise sd of 1, which suits targets
    standardised to sd 1 (:class:`bbb.data.Standardizer`) only as a crude default; the noise is not
    learned. Pass ``Gaussian(learn_sigma=True)`` (optionally ``sigma=`` its initial value) to learn
    it, and train its parameter too (``[*net.parameters(), *elbo.parameters()]``, or
    ``Engine(elbo, ...)``), or ``"heteroscedastic"`` (:class:`HeteroscedasticGaussian`) for a
    network that predicts its own noise. A learned sigma is stored raw (``raw_sigma``,
    sigma = softplus(raw_sigma)). For evaluation, :func:`bbb.uncertainty.evaluate` takes it as
    ``likelihood=elbo.likelihood``.

    Example:
        >>> elbo = ELBO(net, Gaussian(learn_sigma=True), num_batches=len(loader), kl_weighting="uniform")
        >>> float(elbo.likelihood.sigma)     # after training: the noise sd, in the targets' units
    """

    def __init__(self, sigma: float = 1.0, learn_sigma: bool = False) -> None:
        super().__init__()
        if not (sigma > 0 and math.isfinite(sigma)):
            raise UserError(f"noise sigma must be a finite standard deviation > 0, got {sigma}")
        raw = torch.tensor(float(inverse_softplus(float(sigma))))
        if learn_sigma:
            self.raw_sigma = nn.Parameter(raw)
        else:
            self.register_buffer("raw_sigma", raw)
        self.learn_sigma = learn_sigma

    @property
    def sigma(self) -> Tensor:
        return softplus(self.raw_sigma)

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """Targets (B,) for one output (network output (..., B, 1)) or (B, D) for D outputs."""
        shown = tuple(output.shape)
        if target.dim() == 1 and output.shape != target.shape:
            if output.dim() < 2 or output.shape[-1] != 1:  # one target per example: one output
                raise UserError(f"Gaussian likelihood: targets of shape {tuple(target.shape)} need network "
                                f"outputs of shape (..., {target.shape[0]}, 1), got {shown}; for several "
                                "outputs per example give targets (B, D)")
            output = output.squeeze(-1)
        self._check_shapes("Gaussian", output.shape, target, str(shown))
        lp = normal_log_prob(target, output, self.sigma)
        return lp.sum(-1) if target.dim() >= 2 else lp

    def extra_repr(self) -> str:
        return f"learn_sigma={self.learn_sigma}"


class HeteroscedasticGaussian(Likelihood):
    """y ~ N(f_0, softplus(f_1)^2 + min_sigma^2): the network predicts its own noise (2 outputs)."""

    def __init__(self, min_sigma: float = 1e-3) -> None:
        super().__init__()
        self.min_sigma = check_float("min_sigma", min_sigma, 0.0)  # (NaN: every loss NaN)

    def split(self, output: Tensor) -> tuple[Tensor, Tensor]:
        if output.shape[-1] != 2:
            raise UserError("a heteroscedastic Gaussian needs 2 network outputs (mean, noise)")
        sigma = torch.sqrt(softplus(output[..., 1]) ** 2 + self.min_sigma**2)
        return output[..., 0], sigma

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        if target.dim() == 2 and target.shape[-1] == 1:
            target = target.squeeze(-1)
        mean, sigma = self.split(output)
        self._check_shapes("heteroscedastic Gaussian", mean.shape, target,
                           f"{tuple(output.shape)} (..., 2: mean and noise)")
        return normal_log_prob(target, mean, sigma)


def likelihood_from_name(name: str | Likelihood, **kwargs) -> Likelihood:
    if isinstance(name, Likelihood):
        return name
    table = {"categorical": Categorical, "gaussian": Gaussian, "heteroscedastic": HeteroscedasticGaussian}
    return table[choice("likelihood", name, list(table))](**kwargs)


# --------------------------------------------------------------------------------------------
# The objective
# --------------------------------------------------------------------------------------------


#: training steps in a row in which the model's Bayesian parameters kept a gradient and their values
#: before the ELBO says that no optimiser steps them (far more than any gradient accumulation's)
STALE_STEPS = 100


def _caller_level() -> int:
    """The ``stacklevel`` of a warning from an ELBO method that points at the caller's line, past
    this module and torch's ``Module.__call__``."""
    level = 2
    if not torch.compiler.is_compiling():
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename == __file__
                                     or frame.f_code.co_filename.startswith(_TORCH_DIR)):
            level, frame = level + 1, frame.f_back
    return level


@dataclass
class ELBOOutput:
    """One minibatch's objective and its parts (all scalars, ``loss`` differentiable).

    ``loss = kl_weight * kl + nll``, where ``kl_weight`` is the coefficient applied (``beta`` times
    the minibatch's weight; a tensor when the weight was given as one); ``nll`` is summed over the
    minibatch and averaged over the k samples; ``output`` holds the network outputs (the tensor
    the ELBO's ``output=`` selects, e.g. a ``ModelOutput``'s logits), (k, B, ...) when k > 1.
    """

    loss: Tensor
    nll: Tensor
    kl: Tensor
    kl_weight: float | Tensor
    output: Tensor


class ELBO(nn.Module):
    """The minibatch variational free energy of a Bayesian model.

    Args:
        model: a network of :mod:`bbb.nn` layers (any ``nn.Module``; deterministic parts allowed).
        likelihood: ``"categorical"``, ``"gaussian"``, ``"heteroscedastic"`` or a :class:`Likelihood`.
            ``"gaussian"`` is :class:`Gaussian` with a *fixed* noise sd of 1 (in the units of the
            targets, so meant for standardised ones); to learn the noise pass
            ``Gaussian(learn_sigma=True)`` (and train ``elbo.parameters()`` too), or
            ``"heteroscedastic"`` for a network with 2 outputs that predicts its own noise.
        num_batches: M, minibatches per epoch (for the KL weights); a training epoch whose
            ``batch_index`` returns to 0 before M, its KL weights summing to less than 1 (M the
            number of examples, say), warns once.
        kl_weighting: ``"blundell"`` (2^(M-i)/(2^M-1), the paper's eq. 9 scheme and ``bbb train``'s;
            the default, None), ``"uniform"`` (1/M), ``"blob"`` (Blundell's reversed: BLoB's
            re-weighting, most of the KL on the last minibatches of each cycle of M) or a callable
            M -> weights. ``"blundell"``
            front-loads the KL onto the first minibatches of every epoch (the first carries half
            of it, the last ones almost none), so most steps see little of the prior; for
            regression, and any training of many epochs, use ``"uniform"``: the KL counted once
            per epoch, 1/M of it on each minibatch. Left at the default on a model that
            :func:`bbb.bayesianize` made from a trained network's weights (``from_weights=True``
            on weights that left their default initialisation; a freshly built network does not
            count: :attr:`bbb.nn.BayesModule.from_weights`), with M > 1, it warns once: a short
            fine-tune then barely moves sigma (docs/your_network.md, "Fine-tuning a trained
            network"); pass it explicitly to choose.
        num_samples: k, Monte Carlo samples per step, evaluated batched (no Python loop). The k
            samples are folded into the batch dimension (:func:`bbb.nn.forward_samples`), so any
            network whose layers keep dim 0 as the batch works (pooling, ``Flatten``, norms...).
        kl: ``"auto"`` (closed form when it exists), ``"closed"``, ``"mc"`` (the paper's choice) or
            ``"split"`` (closed-form parts, the rest from one importance sample per weight:
            :class:`~bbb.distributions.KLMode`).
        kl_samples: the weight samples a Monte Carlo KL averages over. None (the default, the
            paper's estimator) uses the k samples of the likelihood (common random numbers); a
            larger number K adds K - k samples drawn for the KL alone, which lowers the variance
            of its gradient without another forward pass (the KL's cost grows with K, the
            likelihood's does not). A closed-form KL is exact and ignores it; with ``kl="split"``: an error.
        beta: a fixed scale on the KL term (tempering): ``loss = nll + beta * kl_weight_i * KL``.
            1 (the default) is the variational free energy of the paper; beta < 1 down-weights
            the prior (a "cold" posterior), beta > 1 up-weights it. Unlike ``kl_weighting``
            (the split of one KL over the M minibatches of an epoch, normalised to sum to 1),
            beta changes the objective.
        shift_labels: score the next token, as a causal language model's labels mean: the outputs
            at positions 0..T-2 against the targets at 1..T-1 (targets -100 ignored, as transformers
            does). None (the default): True for a transformers causal LM (GPT-2, Llama..., converted
            whole or through a peft model: :func:`bbb.hf.causal_lm`), else False. The targets are then
            the labels as transformers takes them (the input ids, unshifted), whether from the
            batch's ``"labels"`` or given as ``y``; the NLL is summed over the scored tokens.
        output: which part of the model's output holds the predictions when it is not a tensor:
            None takes a tuple's first element and a mapping's or a transformers ``ModelOutput``'s
            ``"logits"``; a key (or a tuple's index) names another (:func:`bbb.nn.inputs.select_output`).

    The ELBO does not own the model: ``elbo.state_dict()`` and ``elbo.parameters()`` hold only the
    likelihood's own state (e.g. a learned noise ``raw_sigma``), so keeping both ``net`` and
    ``elbo`` in one ``nn.Module`` (a LightningModule) duplicates nothing, and an optimiser needs
    ``[*net.parameters(), *elbo.parameters()]`` to learn the likelihood's parameters too. For the
    same reason ``elbo.train()``, ``elbo.eval()`` and ``elbo.to(...)`` act on the likelihood only:
    switch and move the network itself (``elbo.model`` is the network).
    Under :class:`~bbb.engine.Engine` build the engine from the ELBO (``Engine(elbo, ...)``): it
    then takes ``num_samples``, ``kl`` and ``kl_samples`` from the ELBO, which owns them, and trains
    the ELBO's parameters. An engine built from the network needs the same three given again and
    ``params=elbo.parameters()``; an ELBO whose parameters the engine does not train is a one-line
    error inside ``engine.sampling()``.

    Example:
        >>> elbo = ELBO(net, "categorical", num_batches=len(loader), kl_weighting="blundell")
        >>> opt = torch.optim.Adam([*net.parameters(), *elbo.parameters()], lr=1e-3)
        >>> out = elbo(x, y, batch_index=i)   # i = 0 .. M-1 within the epoch
        >>> out.loss.backward()

        A Hugging Face model and batch as they come: the mapping's ``"labels"`` are the targets,
        the rest the model's keyword inputs, the output's ``logits`` the predictions:

        >>> out = ELBO(bert, num_batches=len(loader), num_samples=4)(batch, batch_index=i)

        Regression on standardised targets, the noise learned (docs/regression.md):

        >>> elbo = ELBO(net, Gaussian(learn_sigma=True), num_batches=len(loader), kl_weighting="uniform")
    """

    model: nn.Module
    """The network: referenced, not a submodule (not in ``state_dict()`` nor ``parameters()``)."""

    def __init__(
        self,
        model: nn.Module,
        likelihood: str | Likelihood = "categorical",
        num_batches: int = 1,
        kl_weighting: KLWeighting | str | Callable[[int], Tensor] | None = None,
        num_samples: int = 1,
        kl: KLMode | str = KLMode.AUTO,
        beta: float = 1.0,
        kl_samples: int | None = None,
        output: str | int | None = None,
        shift_labels: bool | None = None,
    ) -> None:
        super().__init__()
        self.output = check_output(output)
        if shift_labels not in (None, True, False):
            raise UserError(f"shift_labels must be None, True or False, got {shift_labels!r}")
        self.beta = check_float("beta", beta, 0.0)
        num_samples = check_int("num_samples", num_samples)
        num_batches = check_int("num_batches", num_batches)
        try:
            self.kl_mode = KLMode(kl)
        except ValueError:
            raise UserError(f"unknown KL mode {kl!r}; choose 'auto', 'closed', 'mc' or 'split'") from None
        check_model("ELBO", model)
        self.__dict__["model"] = model  # referenced, not a submodule: not in state_dict / parameters()
        self.shift_labels = causal_lm(model) if shift_labels is None else bool(shift_labels)
        self.likelihood = likelihood_from_name(likelihood)
        self.num_samples = num_samples
        self.kl_samples = None if kl_samples is None else check_kl_samples(kl_samples, self.num_samples)
        if self.kl_samples is not None and self.kl_mode is KLMode.SPLIT:  # (it draws one importance sample a weight)
            raise UserError("ELBO: kl_samples averages a Monte Carlo KL, and kl='split' draws its own one importance "
                            "sample per weight: leave kl_samples out, or use kl='mc'")
        if kl_weighting is None:
            kl_weighting = KLWeighting.BLUNDELL
            if num_batches > 1 and any(m.from_weights for m in bayes_modules(model)):
                warnings.warn("ELBO: the model was made Bayesian from a trained network's weights (bayesianize, "
                              "from_weights=True) and kl_weighting is left at its default 'blundell', which puts "
                              "half of each epoch's KL on its first minibatch and nearly all of it on the first "
                              "ten, so a short fine-tune from trained weights barely moves sigma: pass "
                              "kl_weighting='uniform' (docs/your_network.md, 'Fine-tuning a trained network'), or "
                              "kl_weighting='blundell' to keep the paper's scheme", UserWarning, stacklevel=2)
        self.kl_weighting = kl_weighting
        self.num_batches = num_batches
        self._weights = kl_weights(num_batches, kl_weighting, dtype=torch.float64).tolist()
        self._warned_batch_index = False
        self._warned_eval = False
        self._last_index: int | None = None  # the batch_index of the last training step
        self._versions: tuple[int, tuple[int, ...]] | None = None  # (a model parameter's, ours) at the last step
        self._warned_untrained = False  # (also once its own parameters are seen stepped: nothing left to check)
        self._stale: tuple[int, int] = (-1, 0)  # (a Bayesian parameter's version, steps it kept it with a grad)
        self._warned_epoch = False

    def kl_weight(self, batch_index: int) -> float:
        if not 0 <= batch_index < self.num_batches:
            raise UserError(f"batch_index must be in [0, {self.num_batches}), got {batch_index}")
        return self._weights[batch_index]

    def forward(
        self,
        inputs: Inputs,
        y: Tensor | None = None,
        batch_index: int | None = None,
        kl_weight: float | Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> ELBOOutput:
        """The objective of minibatch ``batch_index`` (its KL weight), or with the KL weight
        ``kl_weight`` in its place (both: an error): a number, or a one-element floating tensor, read
        where it lives (a GPU loop updates it in place: no host sync; a captured CUDA graph reads each
        batch's weight); a tensor's value is not checked (that would read it).

        ``batch_index``: the minibatch's position in the epoch, 0 .. M-1 (``enumerate(loader)``).
        Left out, minibatch 0's weight is used, which is right only when the M weights are equal
        (``kl_weighting="uniform"``, or M = 1); otherwise (the default ``"blundell"`` puts half of
        the KL on minibatch 0) every step would get the first minibatch's weight, so the ELBO warns
        once: pass ``batch_index=i`` or ``kl_weight=``.

        ``inputs``: a tensor (``model(x)``), a tuple of arguments (``model(*x)``) or a mapping of
        keyword tensors (``model(**x)``). ``y``: the targets; None takes them from a mapping
        batch, its ``"labels"`` (Hugging Face) or the ``"y"`` of an ``{"x", "y"}`` batch, which are
        then not passed to the model (:func:`bbb.nn.inputs.split_targets`). The model's output may
        be a tensor, a tuple, a mapping or a ``ModelOutput`` (the ELBO's ``output=``)."""
        if y is None:
            inputs, y = split_targets(inputs)
            if y is None:
                raise UserError(f"the ELBO needs targets: pass y, or a mapping batch with 'labels' (got "
                                f"{type(inputs).__name__})")
        if kl_weight is not None and batch_index is not None:  # (kl_weight was used, the index unread)
            raise UserError("ELBO: kl_weight is the minibatch's whole KL weight, in place of batch_index's: give "
                            "one of the two (a warm-up factor: kl_weight=factor * elbo.kl_weight(i))")
        if isinstance(kl_weight, Tensor):
            if kl_weight.numel() != 1 or not kl_weight.is_floating_point():
                raise UserError(f"kl_weight must be a number or a one-element floating tensor, got a "
                                f"{kl_weight.dtype} tensor of shape {tuple(kl_weight.shape)}")
        elif kl_weight is not None:
            kl_weight = check_float("kl_weight", kl_weight, 0.0)
        provider = PROVIDER.get()
        if provider is not None:
            self._check_trained(provider)
        k = self.num_samples
        # (compiled too: a seq2seq LM's decoder read its source, shifted, without them)
        inputs = decoder_inputs(self.model, inputs, y, "the ELBO")
        if not torch.compiler.is_compiling():
            check_checkpointing(self.model, k, provider is not None, generator is not None)
            warn_not_bayesian(self.model, "the ELBO")
            if not self.model.training and torch.is_grad_enabled() and not self._warned_eval:
                self._warn_eval()
            if torch.is_grad_enabled():
                self._see_trained()
        with SampleRecorder(generator) as rec, shared_samples(per_call=True):  # a layer called twice: one sample
            if k == 1:
                output = select_output(call_model(self.model, inputs), self.output)
            else:
                output = forward_samples(self.model, inputs, k, output=self.output)
        if torch.is_grad_enabled() and self.model.training:
            warn_unsampled(self.model, rec, "the ELBO")
        if self.shift_labels and (y.dim() < 2 or output.dim() < 3):  # (else example i scored on label i + 1)
            raise UserError(f"the ELBO's shift_labels scores each position on the next one's label: it needs targets "
                            f"per token (B, T) and outputs (B, T, vocab), got targets {tuple(y.shape)} and outputs "
                            f"{tuple(output.shape)}; pass shift_labels=False")
        scored, target = (output[..., :-1, :], y[..., 1:]) if self.shift_labels else (output, y)
        if k > 1 and y.dim() == 1 and isinstance(self.likelihood, Gaussian) and output.shape == (k, *y.shape):
            scored = output.unsqueeze(-1)  # k samples of a regressor whose forward squeezes its one output to (B,)
        nll = -self.likelihood.log_prob(scored, target).sum() / k
        kl = model_kl(self.model, self.kl_mode, rec, self.kl_samples)
        weight: float | Tensor
        if isinstance(kl_weight, Tensor):
            weight = kl_weight.reshape(()).to(kl.dtype)  # (a 0-d float64 weight would promote the loss)
            if self.beta != 1.0:
                weight = weight * self.beta
        else:
            if kl_weight is None and batch_index is None:
                self._warn_no_batch_index()
            elif kl_weight is None and torch.is_grad_enabled() and not torch.compiler.is_compiling():
                self._see_batch_index(cast(int, batch_index))
            weight = self.beta * (self.kl_weight(batch_index or 0) if kl_weight is None else float(kl_weight))
        return ELBOOutput(loss=nll + weight * kl, nll=nll, kl=kl, kl_weight=weight, output=output)

    def _warn_eval(self) -> None:
        """Once per ELBO: a training step (grad enabled) on a model in ``eval()`` whose Bayesian layers
        all use their posterior means (a validation loss under ``torch.no_grad()`` is not warned)."""
        layers = list(bayes_modules(self.model))
        if layers and not any(m.is_sampling() for m in layers):
            self._warned_eval = True
            warnings.warn(f"ELBO: {type(self.model).__name__} is in eval() mode, so its Bayesian layers use their "
                          "posterior means: the k samples are equal, the NLL is the mean network's and sigma learns "
                          "from the KL alone; call model.train() before training (a model converted in eval(), as "
                          "from_pretrained returns it, stays in eval())", UserWarning, stacklevel=3)

    def _warn_no_batch_index(self) -> None:
        """Once per ELBO: no ``batch_index`` where the M minibatches' KL weights differ."""
        w = self._weights
        if self._warned_batch_index or max(w) == min(w):
            return
        self._warned_batch_index = True
        kw = self.kl_weighting
        name = kw.value if isinstance(kw, KLWeighting) else kw if isinstance(kw, str) else "custom"
        warnings.warn(f"ELBO: no batch_index given, so with kl_weighting={name!r} over num_batches="
                      f"{self.num_batches} every minibatch gets minibatch 0's KL weight ({w[0]:.3g}; "
                      f"{w[0] * self.num_batches:.3g}x the KL over an epoch, not 1x): pass batch_index=i, the "
                      f"minibatch's position in the epoch (0..{self.num_batches - 1}: for i, (x, y) in "
                      "enumerate(loader)), or kl_weighting='uniform'", UserWarning, stacklevel=_caller_level())

    def _see_batch_index(self, i: int) -> None:
        """Once per ELBO: a training epoch (``batch_index`` back at 0) that ended before ``num_batches``
        minibatches, so that its KL weights summed to less than 1 (``num_batches`` the number of
        examples, say, not of minibatches)."""
        last, self._last_index = self._last_index, i
        if i != 0 or not last or last + 1 >= self.num_batches or self._warned_epoch:  # (0 again: a repeat, a closure's)
            return
        total = sum(self._weights[: last + 1])
        if total > 0.99:  # (blundell's first minibatches hold nearly all of it)
            return
        self._warned_epoch = True
        warnings.warn(f"ELBO: batch_index went back to 0 after {last + 1} minibatches, but num_batches="
                      f"{self.num_batches}: that epoch's KL weights summed to {total:.3g}, not 1 (its KL counted "
                      f"{total:.3g} times); pass num_batches=len(loader), the minibatches of an epoch (not the "
                      "examples)", UserWarning, stacklevel=_caller_level())

    def _see_trained(self) -> None:
        """Once per ELBO each, read from the tensors' in-place version counters (no copy, no device sync):
        the model's Bayesian parameters kept their values and a gradient for :data:`STALE_STEPS` training
        steps in a row (no optimiser steps them: one built before ``bbb.bayesianize`` holds the layers it
        replaced); its own parameters (a learned noise) kept theirs and a gradient while the model's were
        stepped since the last training step (the optimiser was not given ``elbo.parameters()``)."""
        if self._stale[1] >= 0:  # (-1: seen stepped, or warned: nothing left to check, no cost per step)
            bayes = next((p for m in bayes_modules(self.model) for p in m.parameters(recurse=False)
                          if p.requires_grad), None)
            if bayes is None or (self._stale[0] >= 0 and bayes._version != self._stale[0]):
                self._stale = (-1, -1)  # an optimiser steps them (or there are none)
            else:
                kept = bayes.grad is not None and bayes._version == self._stale[0]
                self._stale = (bayes._version, self._stale[1] + 1 if kept else 0)
                if self._stale[1] == STALE_STEPS:
                    self._stale = (-1, -1)
                    warnings.warn(f"ELBO: the model's Bayesian parameters kept their values and a gradient for "
                                  f"{STALE_STEPS} training steps: no optimiser steps them; an optimiser built before "
                                  "bbb.bayesianize(net) holds the layers it replaced: build it after converting",
                                  UserWarning, stacklevel=_caller_level())
        if self._warned_untrained:  # (warned, or seen trained: nothing left to check)
            return
        own = [p for p in self.parameters() if p.requires_grad]
        ref = next((p for p in self.model.parameters() if p.requires_grad), None)
        if not own or ref is None:
            self._warned_untrained = True
            return
        before, self._versions = self._versions, (ref._version, tuple(p._version for p in own))
        if before is not None and before[1] != self._versions[1]:
            self._warned_untrained = True  # an optimiser steps them
        elif (before is not None and before[0] != self._versions[0]
                and any(p.grad is not None for p in own)):
            self._warned_untrained = True
            names = ", ".join(n for n, p in self.named_parameters() if p.requires_grad)
            warnings.warn(f"ELBO: the model's parameters were stepped but the ELBO's own ({names}: a learned noise) "
                          "kept their values and their gradient: no optimiser trains them; give it "
                          "[*net.parameters(), *elbo.parameters()] (or build bbb.Engine(elbo, ...))", UserWarning,
                          stacklevel=_caller_level())

    def _check_trained(self, provider) -> None:
        """Under an optimiser that samples (:class:`~bbb.engine.Engine`): it must train our parameters."""
        for name, p in self.named_parameters():
            if p.requires_grad and provider.trains(p) is False:
                raise UserError(f"the ELBO's parameter {name} is not trained by the Engine: build it with "
                                "Engine(elbo, ...) or pass params=elbo.parameters()")

    def extra_repr(self) -> str:
        kw = self.kl_weighting if isinstance(self.kl_weighting, str) else getattr(
            self.kl_weighting, "value", "custom")
        return (f"num_batches={self.num_batches}, kl_weighting={kw}, num_samples={self.num_samples}, "
                f"kl={self.kl_mode.value}, beta={self.beta:g}"
                + ("" if self.kl_samples is None else f", kl_samples={self.kl_samples}")
                + (", shift_labels=True" if self.shift_labels else "")
                + ("" if self.output is None else f", output={self.output!r}"))
