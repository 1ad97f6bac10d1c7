"""Networks and model-level helpers: :class:`BayesMLP`, :func:`bayes_modules`, :func:`model_kl` and
:func:`sampling`."""

from __future__ import annotations

import contextlib
import inspect
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import KLMode, Prior
from ..errors import UserError, check_int
from ..options import choice
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .layers import BayesLinear
from .samples import LEADING, PROVIDER, SampleRecorder, SamplingMode, check_model, leading_samples

__all__ = ["BayesMLP", "bayes_modules", "model_kl", "sampling", "warn_not_bayesian", "mark_deterministic",
           "warn_unsampled", "whole_weights"]


#: in-place where the activation allows it (the layers' outputs are fresh tensors)
_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": lambda: nn.ReLU(inplace=True), "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU,
    "elu": lambda: nn.ELU(inplace=True)}


def layer_sizes(who: str, in_features: int, hidden_sizes: Iterable[int], out_features: int) -> list[int]:
    """[in_features, *hidden_sizes, out_features] of a multilayer perceptron, each an integer >= 1
    (int() cut a width of 400.7 to 400), ``hidden_sizes`` a list (a bare 400 is a one-line error)."""
    if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Iterable):
        raise UserError(f"{who}'s hidden_sizes is a list of widths (e.g. [400, 400]; [] for none), got "
                        f"{hidden_sizes!r}")
    return [check_int("in_features", in_features), *[check_int("a hidden width", h) for h in hidden_sizes],
            check_int("out_features", out_features)]


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
        choice("activation", activation, list(_ACTIVATIONS))
        sizes = layer_sizes(type(self).__name__, in_features, hidden_sizes, out_features)
        self.sizes = sizes
        self.activation = activation
        self.layers = nn.ModuleList(
            BayesLinear(a, b, bias=bias, prior=prior, estimator=estimator, mu_init_scale=mu_init_scale,
                        rho_init=rho_init, device=device, dtype=dtype)
            for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.act = _ACTIVATIONS[activation]()

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() >= 3 and not LEADING.get():  # (k, B, in): k weight samples
            with leading_samples():
                return self.forward(x)
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)


# --------------------------------------------------------------------------------------------
# Model-level helpers
# --------------------------------------------------------------------------------------------


def bayes_modules(model: nn.Module, active: bool = False) -> Iterator[BayesModule]:
    """Every :class:`BayesModule` inside ``model`` (including itself). ``active=True`` leaves out those
    of an adapter that is not active (a peft model's ``set_adapter``: its forward does not use them):
    the layers of the model's posterior, whose KL counts (:func:`model_kl`, the Engine)."""
    check_model("bbb", model)
    idle = inactive_adapter_modules(model) if active else set()
    for m in model.modules():
        if isinstance(m, BayesModule) and id(m) not in idle:
            yield m


def inactive_adapter_modules(model: nn.Module) -> set[int]:
    """ids of the modules inside adapters that are not active: a module that names its adapter
    containers (peft's ``adapter_layer_names``: LoRA layers, ``modules_to_save`` wrappers) and its
    ``active_adapters`` holds the others' modules idle. Nothing is imported (duck typing)."""
    out: set[int] = set()
    for m in model.modules():
        names = getattr(type(m), "adapter_layer_names", None)
        if not names:
            continue
        try:
            active = set(m.active_adapters)  # type: ignore[arg-type]
        except (AttributeError, TypeError):
            continue
        for attr in names:
            container = getattr(m, attr, None)
            if isinstance(container, nn.ModuleDict):
                for key, sub in container.items():
                    if key not in active:
                        out.update(id(x) for x in sub.modules())
    return out


#: the models :func:`warn_not_bayesian` has looked at (or :func:`mark_deterministic` named): each is looked at once
_LOOKED_AT: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def warn_not_bayesian(model: nn.Module, who: str) -> None:
    """Warn (``UserWarning``), once per model, that ``model`` has no Bayesian layer: ``who``
    (predict, evaluate, the ELBO) then samples nothing (k equal samples, a KL of 0). A model named
    by :func:`mark_deterministic` is not warned about."""
    if model in _LOOKED_AT:
        return
    _LOOKED_AT.add(model)
    if next(bayes_modules(model), None) is None:
        dropout = any(isinstance(m, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)) and m.p > 0
                      for m in model.modules())
        instead = ("; it has dropout layers, which this does not sample: for MC dropout a loaded run's "
                   "sample_outputs(x, k) does (bbb predict uses it)" if dropout else "")
        warnings.warn(f"{who}: {type(model).__name__} has no Bayesian layer, so nothing is sampled (the k samples are "
                      "equal, the KL is 0): convert it with bbb.bayesianize(model) first, or call "
                      f"bbb.nn.mark_deterministic(model) for a deterministic baseline{instead}", UserWarning,
                      stacklevel=3)


#: the models :func:`warn_unsampled` has looked at (once each: the first training forward)
_UNSAMPLED_SEEN: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def warn_unsampled(model: nn.Module, rec: SampleRecorder, who: str) -> None:
    """Warn, once per model (its first forward that ``rec`` recorded, outside an engine's samples),
    of the Bayesian layers that sample whole weights (``reparam``, ``flipout``) and drew none in it:
    the model reads their ``.weight`` (the posterior mean: ``x @ layer.weight.T`` in its forward,
    or ``F.linear(h, emb.weight)`` for a tied decoder) or never calls them, so their noise never
    reaches the output and their sigma learns from the KL alone."""
    if model in _UNSAMPLED_SEEN or PROVIDER.get() is not None or torch.compiler.is_compiling():
        return
    _UNSAMPLED_SEEN.add(model)
    missing = [name or type(m).__name__ for name, m in model.named_modules()
               if isinstance(m, BayesModule) and m.is_sampling() and m.estimator is not Estimator.LOCAL
               and any(p.requires_grad for p in m.parameters(recurse=False)) and not rec.records.get(id(m))]
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        warnings.warn(f"{who}: the Bayesian layer(s) {shown} drew no weight sample in the forward: the model reads "
                      "their .weight (the posterior mean) or does not call them, so their noise never reaches the "
                      "output and their sigma learns from the KL alone; call the layer (layer(x), not x @ "
                      "layer.weight.T), or leave it deterministic (bayesianize's skip=)", UserWarning, stacklevel=3)


#: the models :func:`warn_own_loss` has warned about (once each)
_OWN_LOSS_WARNED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def _own_loss_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook of :func:`warn_own_loss`."""
    if (module.training and torch.is_grad_enabled() and kwargs.get("labels") is not None
            and module not in _OWN_LOSS_WARNED and not torch.compiler.is_compiling()):
        _OWN_LOSS_WARNED.add(module)
        warnings.warn(f"{type(module).__name__} was called with labels in training, so it computes its own loss (as "
                      "transformers' Trainer uses it): the likelihood of one sampled network with no KL term, which "
                      "shrinks every sigma unchecked and learns no posterior. Train with bbb.ELBO (it takes the "
                      "labels from the batch and passes the rest to the model); with a Trainer, override its "
                      "compute_loss (docs/huggingface.md, 'Training with transformers' Trainer')", UserWarning,
                      stacklevel=2)


def warn_own_loss(model: nn.Module) -> None:
    """Make ``model`` (a converted model whose forward takes ``labels``: transformers', peft's) warn
    once when it is called with ``labels`` in training with gradients on: it then computes its own
    loss, the likelihood alone (no KL). The ELBO never passes the labels on. Registered once; on a
    peft model whose forward passes ``**kwargs`` on (``PeftModel``, made without a ``task_type``),
    on the transformers model inside it, which takes them."""
    takes_labels = _takes_labels(model)
    get = getattr(model, "get_base_model", None)
    if not takes_labels and callable(get) and isinstance(inner := get(), nn.Module) and inner is not model:
        model, takes_labels = inner, _takes_labels(inner)
    hooks = model._forward_pre_hooks.values()
    if takes_labels and not any(getattr(h, "__name__", "") == _own_loss_hook.__name__ for h in hooks):
        model.register_forward_pre_hook(_own_loss_hook, with_kwargs=True)


def _takes_labels(model: nn.Module) -> bool:
    try:
        return "labels" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


#: the models :func:`warn_generate_in_training` has warned about (once each)
_GENERATE_WARNED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def _generate_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook of :func:`warn_generate_in_training`."""
    cache = kwargs.get("past_key_values", kwargs.get("cache"))  # (transformers' name, before and after v5.2x)
    if (module.training and not torch.is_grad_enabled() and cache is not None
            and module not in _GENERATE_WARNED and not torch.compiler.is_compiling()):
        layer = next(bayes_modules(module), None)
        if layer is None or layer._sampling_override is not None:  # (bbb.nn.sampling says what it means)
            return
        _GENERATE_WARNED.add(module)
        warnings.warn(f"{type(module).__name__}.generate in train() mode draws new weights at every generated token (a "
                      "different network per step): call model.eval() to write with the posterior mean, or "
                      "bbb.hf.generate(model, inputs, num_samples=k) for one sampled network per sequence",
                      UserWarning, stacklevel=2)


def warn_generate_in_training(model: nn.Module) -> None:
    """Make the transformers model that ``generate`` runs (``model``, or a peft model's base model) warn
    once when it generates in ``train()`` mode outside :func:`sampling` (a cached decoding step:
    ``past_key_values`` or ``cache`` given, gradients off). Registered once."""
    get = getattr(model, "get_base_model", None)
    inner = get() if callable(get) else model
    if not isinstance(inner, nn.Module) or not callable(getattr(inner, "generate", None)):
        return
    if not any(getattr(h, "__name__", "") == _generate_hook.__name__ for h in inner._forward_pre_hooks.values()):
        inner.register_forward_pre_hook(_generate_hook, with_kwargs=True)


def mark_deterministic(model: nn.Module) -> nn.Module:
    """Say that ``model`` is deterministic on purpose (a baseline): :func:`~bbb.uncertainty.predict`,
    :func:`~bbb.uncertainty.evaluate` and the :class:`~bbb.elbo.ELBO` then do not warn that it has no
    Bayesian layer. Returns ``model``.

    >>> baseline = bbb.nn.mark_deterministic(nn.Sequential(nn.Linear(4, 2)))
    """
    _LOOKED_AT.add(model)
    return model


def model_kl(
    model: nn.Module, mode: KLMode | str = KLMode.AUTO, recorder: SampleRecorder | None = None,
    num_samples: int | None = None,
) -> Tensor:
    """KL[q(w) || P(w)] of the whole model: a sum over every weight of every Bayesian layer (the
    adapters of a peft model that are active: :func:`bayes_modules` with ``active=True``).

    ``num_samples``: the weight samples a Monte Carlo KL averages over (None: those the forward
    pass drew, in ``recorder``; see :meth:`BayesModule.kl`)."""
    check_model("model_kl", model)
    provider = PROVIDER.get()
    if provider is not None:
        total = provider.model_kl(model, KLMode(mode), num_samples)
        if total is not None:
            return total
    terms = [m.kl(mode, recorder, num_samples) for m in bayes_modules(model, active=True)]
    if not terms:
        p = next(model.parameters(), None)
        return torch.zeros((), device=None if p is None else p.device)
    return torch.stack(terms).sum()


@contextlib.contextmanager
def modes_kept(model: nn.Module, eval: bool = True) -> Iterator[nn.Module]:
    """``model`` in ``eval()`` inside the block (``eval=False``: as the block leaves it), and after it
    every module back in its own mode: ``model.train(was)`` would also switch on the modules its owner
    had put in ``eval()`` (a BatchNorm whose statistics stay frozen during a fine-tune)."""
    modes = [(m, m.training) for m in model.modules()]
    if eval:
        model.eval()
    try:
        yield model
    finally:
        for m, mode in modes:
            m.training = mode


@contextlib.contextmanager
def whole_weights(model: nn.Module) -> Iterator[nn.Module]:
    """Every Bayesian layer of ``model`` draws whole weights inside the block (its estimator
    ``reparam``; each back to its own after): a draw is then one network for every input, position
    and call. What a prediction needs: the ``local`` estimator samples pre-activations and
    ``flipout`` flips its noise's signs per row, so with positions (a sequence's tokens, an image's
    pixels) one input's positions would see different weights, and an output pooled over them
    would vary less than under any one network of the posterior. A population's layers (dense
    inputs: no positions) keep theirs."""
    layers = [m for m in model.modules()
              if isinstance(m, BayesModule) and m.estimator is not Estimator.REPARAM and not m.member_axis]
    saved = [m.estimator for m in layers]
    for m in layers:
        m.estimator = Estimator.REPARAM
    try:
        yield model
    finally:
        for m, e in zip(layers, saved):
            m.estimator = e


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
