"""Make a network you already have Bayesian: :func:`bayesianize`.

Every layer of a type in the registry (:data:`CONVERTIBLE`: linear, convolutions of every dimension
and their transposes, embeddings, recurrent layers, multi-head attention; transformers' ``Conv1D``
when transformers is loaded) is replaced, in place, by the matching :mod:`bbb.nn` layer with the
same sizes, options, device and dtype; each Bayesian layer type converts through its own
``from_torch``, and :func:`register_conversion` adds a type without editing this module. The module
names do not change, so a deterministic ``state_dict`` loads into the converted model (``weight``
becomes ``weight_mu``), and the Bayesian layers expose ``.weight``/``.bias`` (the posterior mean)
for code that reads them.

What stays deterministic is said: a ``UserWarning`` names every module with parameters of its own
that is not Bayesian and gives the share of weights that became Bayesian (``strict=True`` raises
instead); :func:`layer_summary` prints the whole table. Tied weights stay tied (one posterior, one
sample per forward, the KL counted once: :mod:`bbb.nn.tied`), or the warning names the tie.

>>> net = nn.Sequential(nn.Flatten(), nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 10))
>>> net.load_state_dict(torch.load("trained.pt"))      # optional: a trained network
>>> bbb.bayesianize(net, from_weights=True)            # posterior means start at its weights
>>> print(bbb.layer_summary(net))
>>> elbo = bbb.ELBO(net, "categorical", num_batches=len(loader), num_samples=2)
"""

from __future__ import annotations

import inspect
import math
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
import torch.nn as nn
from torch.nn.parameter import is_lazy
from torch.nn.utils.parametrize import is_parametrized

from .distributions import GaussianPrior, prior_from_config
from .errors import UserError
from .inventory import deterministic_layers, layer_summary
from .lora import LORA_PRIOR_SIGMA, bayesianize_lora, is_lora_model
from .nn import DEFAULT_RHO_INIT, BayesModule, no_fast_path
from .nn import layer_types as _layer_types
from .nn.base import Estimator, RelativeSigma
from .nn.hf_conv1d import BayesHFConv1D, transformers_conv1d
from .nn.model import warn_generate_in_training, warn_own_loss
from .nn.samples import check_model
from .nn.tied import draw_once_per_forward, tie_converted, tie_groups
from .options import choice

__all__ = ["bayesianize", "register_conversion", "CONVERTIBLE", "at_initialisation", "convert_layer"]

#: a conversion: (the torch layer, prior=, estimator=, rho_init=, from_weights=[, sigma_init=]) -> its
#: Bayesian copy (``sigma_init`` is passed only when given)
Converter = Callable[..., nn.Module]

#: the torch.nn layer types :func:`bayesianize` replaces (exact types), and how; transformers'
#: ``Conv1D`` joins on the first :func:`bayesianize` after transformers is imported
CONVERTIBLE: dict[type[nn.Module], Converter] = {}


def register_conversion(torch_type: type[nn.Module], converter: type[BayesModule] | Converter) -> None:
    """Let :func:`bayesianize` convert layers of exactly ``torch_type``: ``converter`` is a
    :class:`~bbb.nn.BayesModule` subclass (its ``from_torch`` is called) or a callable taking
    the layer and the keywords ``prior``, ``estimator``, ``rho_init``, ``from_weights`` (and
    ``sigma_init`` when :func:`bayesianize` is given one) and returning the replacement module.
    A later registration of the same type replaces the earlier.

    >>> bbb.register_conversion(MyLinear, lambda layer, **kw: bbb.nn.BayesLinear.from_linear(layer.inner, **kw))
    """
    if not (isinstance(torch_type, type) and issubclass(torch_type, nn.Module)):
        raise UserError(f"register_conversion needs an nn.Module type, got {torch_type!r}")
    if isinstance(converter, type) and issubclass(converter, BayesModule):
        CONVERTIBLE[torch_type] = converter.from_torch
    elif callable(converter):  # (mypy narrows a class that is no BayesModule to type[object])
        CONVERTIBLE[torch_type] = cast(Converter, converter)
    else:
        raise UserError(f"register_conversion needs a BayesModule subclass or a callable, got {converter!r}")


for _cls in _layer_types():
    for _t in _cls.converts:
        register_conversion(_t, _cls)



def _register_optional() -> None:
    """Register transformers' ``Conv1D`` (:class:`~bbb.nn.BayesHFConv1D`) once transformers is
    loaded (a model holding one has loaded it), unless a conversion of it is registered already;
    ``import bbb`` never imports transformers."""
    if "transformers" not in sys.modules:
        return
    t = transformers_conv1d()
    if t is not None and t not in CONVERTIBLE:
        register_conversion(t, BayesHFConv1D)


Skip = Iterable[str | type] | Callable[[str, nn.Module], bool] | None


def _skipper(skip: Skip, model: nn.Module) -> Callable[[str, nn.Module], bool]:
    if skip is None:
        return lambda name, mod: False
    if callable(skip) and not isinstance(skip, type):
        try:
            inspect.signature(skip).bind("", model)
        except TypeError:  # (a one-argument callable met a bare TypeError at its first module)
            raise UserError(f"skip's callable is called as skip(name, module) -> bool, and "
                            f"{getattr(skip, '__name__', type(skip).__name__)} does not take those two arguments: "
                            "e.g. skip=lambda name, module: isinstance(module, nn.LayerNorm)") from None
        except ValueError:  # (no signature to read: a builtin)
            pass
        return _every_name(skip, model)
    if isinstance(skip, (str, type)):
        skip = [skip]
    items = list(skip)
    names = {s for s in items if isinstance(s, str)}
    types = tuple(s for s in items if isinstance(s, type))
    bad = [s for s in items if not isinstance(s, (str, type))]
    if bad:
        raise UserError(f"skip takes module names, module types or a callable (name, module) -> bool, got {bad!r}")
    known = {n for n, _ in model.named_modules(remove_duplicate=False)}
    unknown = sorted(n for n in names if n not in known)
    if unknown:
        raise UserError(f"skip names no module of the model: {', '.join(unknown)} (its modules are named as in "
                        "model.named_modules(), e.g. 'encoder.layers.0.linear1')")

    # a type skips its modules and everything inside them, as a name does
    under = names | {n for n, m in model.named_modules(remove_duplicate=False) if types and isinstance(m, types)}

    def fn(name: str, mod: nn.Module) -> bool:
        # a name skips that module and everything inside it
        return (isinstance(mod, types) or "" in under
                or any(name == n or name.startswith(n + ".") for n in under))

    return _every_name(fn, model)


def _every_name(skipped: Callable[[str, nn.Module], bool], model: nn.Module) -> Callable[[str, nn.Module], bool]:
    """``skipped`` extended to every name of a module held in several places (``self.alias =
    self.body``): skipped under one name, it is skipped under all (one layer, not a Bayesian and a
    deterministic copy of it, whichever name came first)."""
    held = {id(m) for n, m in model.named_modules(remove_duplicate=False) if skipped(n, m)}
    return lambda name, mod: id(mod) in held or skipped(name, mod)


def convert_layer(layer: nn.Module, full: str, **kw: Any) -> nn.Module:
    """The Bayesian copy of ``layer`` (a registered type; ``full``: its name, for errors), made by
    its conversion with the keywords of :func:`bayesianize` (``prior``, ``estimator``, ``rho_init``,
    ``from_weights``[, ``sigma_init``]), in the layer's ``training`` mode."""
    _check_hooks(layer, full)
    try:
        with warnings.catch_warnings(record=True) as said:  # a conversion's warning names the layer
            warnings.simplefilter("always")
            new = CONVERTIBLE[type(layer)](layer, **kw)
    except UserError as e:
        raise UserError(f"bayesianize: {full or 'the model'} ({type(layer).__name__}): {e}; pass "
                        f"skip=[{full!r}] to leave it deterministic") from None
    except TypeError as e:
        if "sigma_init" not in str(e):
            raise
        raise UserError(f"bayesianize: the conversion registered for {type(layer).__name__} takes no sigma_init; "
                        "accept it (**kw) in the converter, or skip the layer") from None
    for w in said:
        if issubclass(w.category, UserWarning):
            warnings.warn(f"bayesianize: {full or 'the model'}: {w.message}", w.category, stacklevel=3)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    new.train(layer.training)  # a model converted in eval() stays in eval()
    _keep_requires_grad(layer, new)
    for attr in _HOOKS:  # the layer's hooks go on with the copy (the same dicts: their handles still remove them)
        hooks = getattr(layer, attr, None)
        if hooks:
            hooks.update(getattr(new, attr))
            setattr(new, attr, hooks)
            if attr == "_backward_hooks":
                new._is_full_backward_hook = layer._is_full_backward_hook
    return new


#: the hook tables of an ``nn.Module`` that :func:`convert_layer` carries to the Bayesian copy
_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
          "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")


def _check_hooks(layer: nn.Module, full: str) -> None:
    """A one-line error for hooks a Bayesian copy of ``layer`` cannot keep: torch's weight
    reparametrisations by hook (``spectral_norm``, ``weight_norm``, ``torch.nn.utils.prune``: they
    recompute ``weight`` from parameters the copy does not have) and hooks on a module inside the layer (an attention's
    ``out_proj``), which the copy does not hold."""
    from torch.nn.utils.prune import BasePruningMethod
    from torch.nn.utils.spectral_norm import SpectralNorm
    from torch.nn.utils.weight_norm import WeightNorm

    where = f"bayesianize: {full or 'the model'} ({type(layer).__name__})"
    for sub, m in layer.named_modules():
        hooks = [h for a in _HOOKS for h in getattr(m, a, {}).values() if callable(h)]
        if any(isinstance(h, (SpectralNorm, WeightNorm, BasePruningMethod)) for h in hooks):
            raise UserError(f"{where}: torch.nn.utils.spectral_norm/weight_norm/prune recompute its weight by a "
                            "hook that a posterior cannot follow: remove it first (remove_spectral_norm, "
                            "remove_weight_norm, prune.remove; bbb.prune prunes a posterior), or pass "
                            f"skip=[{full!r}] to leave it deterministic")
        if sub and hooks:
            raise UserError(f"{where}: its part {sub} has hooks, which the Bayesian layer (no such part) cannot "
                            f"keep: register them after bayesianize, or pass skip=[{full!r}]")


#: the torch layer types whose ``reset_parameters`` draws every parameter from a bounded range
#: that :func:`at_initialisation` knows: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the weight and
#: the bias of linear and convolution layers, U(-1/sqrt(hidden_size), ...) for recurrent ones
_FAN_IN_INIT = (nn.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear, nn.Conv1d, nn.Conv2d, nn.Conv3d,
                nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_RECURRENT_INIT = (nn.RNN, nn.LSTM, nn.GRU)


def _init_bounds(layer: nn.Module) -> dict[str, float] | None:
    """The bound b of U(-b, b) (0: a constant 0) that torch's default initialisation draws each
    parameter of ``layer`` from, by the parameter's name; None where it is not bounded or not known
    (an embedding's N(0, 1), transformers' Conv1D's N(0, 0.02), a registered type)."""
    if type(layer) in _FAN_IN_INIT:
        shape = tuple(cast(torch.Tensor, layer.weight).shape)
        fan_in = shape[1] * math.prod(shape[2:]) if len(shape) > 1 else 0
        b = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        return {n: b for n, _ in layer.named_parameters(recurse=False)}
    if type(layer) in _RECURRENT_INIT:
        hidden = int(cast(int, layer.hidden_size))
        b = 1.0 / math.sqrt(hidden) if hidden > 0 else 0.0
        return {n: b for n, _ in layer.named_parameters()}
    if type(layer) is nn.MultiheadAttention:
        if layer.bias_k is not None:  # (xavier_normal: unbounded)
            return None
        out = {f"out_proj.{n}": b for n, b in (_init_bounds(layer.out_proj) or {}).items()}
        out["out_proj.bias"] = 0.0  # (zeroed by the attention's own reset)
        for n, p in layer.named_parameters(recurse=False):  # xavier_uniform projections, zero biases
            out[n] = 0.0 if n.endswith("bias") else math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
        return out
    return None


def at_initialisation(layer: nn.Module) -> bool | None:
    """Whether ``layer``'s parameters may still be those torch's default initialisation drew:
    every one within the range its ``reset_parameters`` draws from (:func:`_init_bounds`). True
    (they may: a freshly built layer), False (some parameter left that range: trained, or
    initialised otherwise), or None where the range is unknown or unbounded (an embedding,
    transformers' Conv1D). Training moves the weights near the range's edges in every direction,
    so a few steps take some weight of a layer out of it (one step, where the layer has thousands
    of weights); a layer of a few weights trained very briefly may still look fresh."""
    bounds = _init_bounds(layer)
    if bounds is None:
        return None
    for name, p in layer.named_parameters():
        b = bounds.get(name)
        if b is None:
            return None
        if p.numel() == 0 or p.is_meta:
            continue
        tol = 4 * torch.finfo(p.dtype).eps if p.is_floating_point() else 0.0
        if float(p.detach().abs().max()) > b * (1 + tol):
            return False
    return True


def _mark_from_weights(converted: list[tuple[nn.Module, nn.Module]]) -> None:
    """Set :attr:`BayesModule.from_weights` (what the ELBO's default KL weighting warns on) on the
    new layers of one :func:`bayesianize` call: the network counts as trained when some converted
    layer's weights left their default initialisation's range (:func:`at_initialisation`), or when
    no layer's range is known (then the warning errs on the side of saying it)."""
    seen = [at_initialisation(old) for old, _ in converted]
    trained = any(v is False for v in seen) or all(v is None for v in seen)
    for _, new in converted:
        for m in new.modules():
            if isinstance(m, BayesModule):
                m.from_weights = trained


def _convert_adapter(layer: nn.Module, full: str, **kw: Any) -> nn.Module:
    """:func:`convert_layer` for a LoRA adapter: a fine-tune of a pretrained model by construction, so
    its layers count as made from trained weights (:attr:`BayesModule.from_weights`)."""
    new = convert_layer(layer, full, **kw)
    for m in new.modules():
        if isinstance(m, BayesModule):
            m.from_weights = True
    return new


def _keep_requires_grad(layer: nn.Module, new: nn.Module) -> None:
    """A frozen weight stays frozen: each posterior's mu and rho take the ``requires_grad`` of the
    weight they replace (by name; a weight not found by name: frozen when every weight of the layer was)."""
    grads = {n: p.requires_grad for n, p in layer.named_parameters()}
    if all(grads.values()):
        return
    default = any(grads.values())
    for sub, m in new.named_modules():
        if isinstance(m, BayesModule):
            for n in m.param_names():
                keep = grads.get(f"{sub}.{n}" if sub else n, default)
                m.mu(n).requires_grad_(keep)
                m.rho(n).requires_grad_(keep)


#: what bayesianize adds where a layer is parametrized (its type is then torch's Parametrized..., not converted)
PARAMETRIZED_HINT = ("; a parametrized layer (weight_norm, orthogonal...: torch.nn.utils.parametrize) converts once "
                     "torch.nn.utils.parametrize.remove_parametrizations(layer, 'weight') has made its weight plain")


def bayesianize(
    model: nn.Module,
    prior: Any = None,
    estimator: Estimator | str = Estimator.REPARAM,
    rho_init: float = DEFAULT_RHO_INIT,
    from_weights: bool = True,
    skip: Skip = None,
    strict: bool = False,
    sigma_init: RelativeSigma | None = None,
    *,
    lora: str | None = None,
    modules_to_save: bool = False,
) -> nn.Module:
    """Replace every convertible layer of ``model`` by a Bayesian one (:data:`CONVERTIBLE`); on a
    ``peft`` LoRA model, its adapters only (Bayesian LoRA, :mod:`bbb.lora`, docs/bayesian_lora.md).

    Args:
        model: any ``nn.Module``; converted in place (and returned). A bare convertible layer
            cannot be replaced in place: the Bayesian layer is returned.
        prior: a :class:`~bbb.distributions.Prior`, a ``torch.distributions`` distribution (e.g.
            ``Normal(0., 1.)``), or None for the default (:func:`bbb.nn.default_prior`). A
            :class:`~bbb.distributions.CenteredPrior` (``CenteredPrior(0.1)``: N(w0, 0.1^2) per
            weight) is centred on each layer's trained weights w0 (empirical Bayes; it needs
            ``from_weights=True``).
        estimator: ``"reparam"`` (the paper), ``"local"`` or ``"flipout"``; a layer type for which
            it is not defined (e.g. flipout for an embedding, local for a recurrent layer) is a
            one-line error naming the module (skip it, or choose another estimator).
        rho_init: initial rho of every weight (sigma = softplus(rho_init), about 0.0067 by default).
        sigma_init: the initial sigma relative to each weight instead,
            :class:`~bbb.nn.RelativeSigma` (``RelativeSigma(delta=0.1)``: sigma0 = 0.1 |w|,
            at least ``min_sigma``; MOPED): not with a ``rho_init`` of its own.
        from_weights: start each posterior mean at the layer's current weights (warm start from
            a trained network); False draws fresh means as a new Bayesian layer would. With
            True, the new layers' :attr:`~bbb.nn.BayesModule.from_weights` (on which the ELBO's
            default KL weighting warns that a short fine-tune barely moves sigma) says whether
            the weights were trained: it is set when some converted layer's weights left the
            range torch's default initialisation draws them from (:func:`at_initialisation`:
            linear, convolution, recurrent and attention layers; a few training steps leave it), or
            when no converted layer's range is known (embeddings, transformers' ``Conv1D``), and
            not for a freshly built network, whose warm start is a fresh start.
        skip: layers to leave deterministic: qualified module names (``"fc3"``, ``"features.0"``;
            a name covers everything inside it; a name that is no module of the model is an
            error), module types (each covers everything inside its modules too), or a callable
            ``(name, module) -> bool``. A module held under several names is skipped under all of
            them; one inside a layer that converts whole (``MultiheadAttention``'s ``out_proj``)
            cannot be: its name is an error, a type or callable that covers it a warning.
        strict: raise instead of warning when a module with parameters stays deterministic
            (other than those ``skip`` names).
        lora: on a model with peft LoRA layers (``get_peft_model``), which adapter matrices become
            Bayesian: ``"A"`` (None means it: A Bayesian, B a point estimate, as BLoB) or ``"AB"``
            (both). Only the adapters convert: the frozen base model is never copied nor made
            Bayesian, and each weight keeps its ``requires_grad``. ``prior=None`` there means
            ``GaussianPrior(0.2)`` (BLoB's N(0, 0.2^2)); ``skip`` names LoRA layers to leave as
            point estimates. A DoRA adapter, a LoRA variant or a LoRA layer type bbb does not convert
            (e.g. on an ``nn.Embedding``) is a one-line error naming it. On a model without LoRA
            layers ``lora`` is an error.
        modules_to_save: on a peft model, make the modules peft trains in full (``modules_to_save``,
            e.g. a classifier head; their trainable copies) Bayesian too; False (the default) keeps
            them point estimates.

    Each new layer keeps the ``training`` flag of the module it replaces (a model converted in
    ``eval()``, as ``from_pretrained`` returns it, predicts with the posterior means until
    ``train()``), and each posterior's mu and rho the ``requires_grad`` of the weight it replaces (a
    frozen weight stays frozen: no optimiser, ``bbb.Engine`` included, updates it). Only exact
    instances of the registered types convert (a subclass may carry behaviour a copy would lose:
    :func:`register_conversion` adds it). A model with nothing convertible is an
    error. Every module with parameters that stays deterministic is named in one
    ``UserWarning`` with the share of weights that became Bayesian (:func:`layer_summary` prints
    the table; :func:`deterministic_layers` lists them); its parameters are trained as point
    estimates by the same optimiser.

    Tied weights (one tensor held by several modules: GPT-2's ``lm_head`` and ``wte``, anything
    transformers' ``tie_weights`` ties) stay one posterior: the linear layers that shared a
    converted layer's weight become :class:`~bbb.nn.TiedBayesLinear` (one weight sample per forward
    for both uses, the KL counted once, one entry in the ``state_dict``); a tie that cannot be kept
    is named in a ``UserWarning`` with how to keep it (an error with ``strict=True``). A layer held
    in several places (``nn.Sequential(lin, act, lin)``) likewise draws one sample per forward for
    all its uses; the ELBO, ``predict`` and ``forward_samples`` draw each layer once per call
    however often the forward calls it (a cell called in a loop).
    """
    check_model("bayesianize", model)
    if isinstance(model, torch.jit.ScriptModule):  # (its layers are compiled, none of a convertible type)
        raise UserError("bayesianize needs the eager model, not a TorchScript one (torch.jit.script / trace): convert "
                        "the nn.Module the script was made from")
    _register_optional()
    for flag, v in (("from_weights", from_weights), ("strict", strict), ("modules_to_save", modules_to_save)):
        if v not in (True, False):  # ("no", a config's string, would read as True)
            raise UserError(f"bayesianize: {flag} must be True or False, got {v!r}")
    estimator = Estimator(choice("estimator", estimator, Estimator))  # (before any layer is read)
    skipped = _skipper(skip, model)
    kw: dict[str, Any] = {"prior": prior, "estimator": estimator, "rho_init": rho_init, "from_weights": from_weights}
    if sigma_init is not None:
        if not isinstance(sigma_init, RelativeSigma):
            raise UserError(f"sigma_init must be a bbb.nn.RelativeSigma (or None), got {type(sigma_init).__name__}")
        if rho_init != DEFAULT_RHO_INIT:
            raise UserError("rho_init and sigma_init both set the initial sigma: pass one of them")
        kw["sigma_init"] = sigma_init
    if is_lora_model(model):
        ignored = _settings_ignored(model, kw)  # (before the default prior: an argument at its default is none)
        if prior is None:
            kw["prior"] = GaussianPrior(LORA_PRIOR_SIGMA)
        out = bayesianize_lora(model, lora, modules_to_save, skipped, _convert_adapter, kw, strict, CONVERTIBLE)
        _say_ignored(ignored, strict)
        warn_own_loss(out)  # transformers' Trainer trains on the model's own loss: no KL
        warn_generate_in_training(out)
        return out
    if lora is not None or modules_to_save:
        what = "lora=" if lora is not None else "modules_to_save=True"
        raise UserError(f"bayesianize: {what} is for a peft LoRA model (get_peft_model(model, LoraConfig(...))), and "
                        f"{type(model).__name__} holds no LoRA layer")
    if type(model) in CONVERTIBLE and not skipped("", model):
        _skipped_inside(model, "", skipped, skip, strict)
        new = convert_layer(model, "", **kw)
        if from_weights:
            _mark_from_weights([(model, new)])
        return new
    lazy = [f"{n or '(the model)'} ({type(m).__name__})" for n, m in model.named_modules()
            if any(is_lazy(p) for p in m.parameters(recurse=False)) and not skipped(n, m)]
    if lazy:  # (its type becomes the torch layer's, a Linear's, at the first forward: too late)
        raise UserError(f"bayesianize: parameters not made yet in {', '.join(lazy)} (a lazy module): run one "
                        "forward pass on an example batch first, which makes it the torch layer it stands for")
    ignored = _settings_ignored(model, kw)  # layers Bayesian already keep their own settings
    ties = tie_groups(model)  # parameters held by several modules (GPT-2's lm_head and wte)
    done: dict[int, nn.Module] = {}  # a layer used in several places (tied) stays one layer
    converted: list[tuple[nn.Module, nn.Module]] = []  # (the torch layer, its Bayesian copy)
    for name, mod in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(mod._modules.items()):  # (named_children skips repeats)
            if child is None:
                continue
            full = f"{name}.{child_name}" if name else child_name
            if id(child) in done:
                setattr(mod, child_name, done[id(child)])
                continue
            if type(child) not in CONVERTIBLE or skipped(full, child) or _inside_bayes(name, model):
                continue
            _skipped_inside(child, full, skipped, skip, strict)
            done[id(child)] = new = convert_layer(child, full, **kw)
            converted.append((child, new))
            setattr(mod, child_name, new)
    if not any(isinstance(m, BayesModule) for m in model.modules()):
        if any(type(m) in CONVERTIBLE for m in model.modules()):  # (all of them skipped)
            raise UserError(f"bayesianize: no layer to make Bayesian: skip covers every layer of "
                            f"{type(model).__name__} that converts (a name or type covers everything inside its "
                            "modules; '' or the model's type, all of it)")
        raise UserError(f"bayesianize: {type(model).__name__} has no layer to make Bayesian (convertible types: "
                        f"{', '.join(sorted(t.__name__ for t in CONVERTIBLE))}); register its layer types "
                        "with bbb.register_conversion"
                        + (PARAMETRIZED_HINT if any(is_parametrized(m) for m in model.modules()) else ""))
    if from_weights:
        _mark_from_weights(converted)
    untied = tie_converted(model, ties)
    held = [id(m) for _, m in model.named_modules(remove_duplicate=False) if isinstance(m, BayesModule)]
    if len(held) != len(set(held)):  # a layer held in several places: one sample for all its uses, as a tie's
        draw_once_per_forward(model)
    warn_own_loss(model)  # transformers' Trainer trains on the model's own loss: no KL
    warn_generate_in_training(model)
    no_fast_path(model)  # torch's fused transformer paths would read the posterior mean instead of sampling
    left = [(n, t) for n, t in deterministic_layers(model) if not skipped(n, model.get_submodule(n))]
    if left:
        s = layer_summary(model)
        what = ", ".join(f"{n or '(the model)'} ({t})" for n, t in left)
        msg = (f"bayesianize: {len(left)} module(s) with parameters stay deterministic: {what}; "
               f"{100 * s.bayesian_share:.1f}% of the weights are Bayesian. Pass skip=[...] to say so, "
               "or register_conversion for their types (bbb.layer_summary(model) prints the table)")
        if any(n == "" for n, _ in left):  # (a name or type for it would skip everything inside it)
            msg += "; the model's own parameters: skip=lambda name, module: name == ''"
        if any(is_parametrized(model.get_submodule(n)) for n, _ in left):  # (no conversion of its own type helps)
            msg += PARAMETRIZED_HINT
        if strict:
            raise UserError(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)
    if untied:
        msg = f"bayesianize: {len(untied)} tied weight(s) untied: " + "; ".join(untied)
        if strict:
            raise UserError(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)
    _say_ignored(ignored, strict)
    return model


def _say_ignored(ignored: str, strict: bool) -> None:
    """Warn (``strict``: raise) that the settings passed leave the layers Bayesian already as they were."""
    if ignored:
        msg = (f"bayesianize: {ignored}, which it does not change: the settings passed apply only to the layers "
               "it converts now; convert the deterministic network to give every layer them")
        if strict:
            raise UserError(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)


def _skipped_inside(layer: nn.Module, full: str, skipped: Callable[[str, nn.Module], bool], skip: Skip,
                    strict: bool) -> None:
    """Say that ``skip`` covers a module inside ``layer``, which converts as a whole (a
    ``MultiheadAttention``'s ``out_proj``): an error for a name given, a warning for a type or callable."""
    named = [(f"{full}.{n}" if full else n, m) for n, m in layer.named_modules() if n]
    inner = [n for n, m in named if skipped(n, m)]
    if not inner:
        return
    items = [skip] if isinstance(skip, str) else skip if isinstance(skip, (list, tuple, set, frozenset)) else []
    given = {s for s in items if isinstance(s, str)}
    msg = (f"bayesianize: skip covers {', '.join(inner)}, inside {full or '(the model)'} ({type(layer).__name__}), "
           f"which converts as a whole: skip {full or 'the model'} to leave it deterministic, or leave "
           f"{'them' if len(inner) > 1 else 'it'} out of skip")
    if strict or any(n == g or n.startswith(g + ".") for n in inner for g in given):
        raise UserError(msg)
    warnings.warn(msg, UserWarning, stacklevel=3)


def _settings_ignored(model: nn.Module, kw: dict[str, Any]) -> str:
    """What :func:`bayesianize` would leave unapplied: the layers of ``model`` that are Bayesian
    already and whose estimator, prior or initial sigma differ from those passed in ``kw`` (an
    argument at its default counts as not passed), said in words; "" when none."""
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, BayesModule)
              and not (n and _inside_bayes(n.rpartition(".")[0], model))]
    est = Estimator(kw["estimator"])
    prior = None if kw["prior"] is None else prior_from_config(kw["prior"])
    sigma = kw.get("sigma_init")
    rho = kw["rho_init"] if kw["rho_init"] != DEFAULT_RHO_INIT else None
    names, what = [], set()
    for n, m in layers:
        differ = {"estimator": est is not Estimator.REPARAM and m.estimator is not est,
                  "prior": prior is not None and prior != m.prior,
                  "sigma_init": sigma is not None and sigma != m.sigma_init,
                  "rho_init": rho is not None and (m.sigma_init is not None or rho != m.rho_init)}
        if any(differ.values()):
            names.append(n or "(the model)")
            what |= {k for k, v in differ.items() if v}
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} layer(s) are Bayesian already ({shown}) with another {', '.join(sorted(what))}"


def _inside_bayes(name: str, model: nn.Module) -> bool:
    """Whether the module ``name`` lies inside a Bayesian layer (its own children are its business)."""
    parts = name.split(".") if name else []
    mod: nn.Module = model
    for p in parts:
        if isinstance(mod, BayesModule):
            return True
        mod = mod._modules[p]  # type: ignore[assignment]
    return isinstance(mod, BayesModule)
