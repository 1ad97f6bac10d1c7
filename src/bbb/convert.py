"""Make a network you already have Bayesian: :func:`bayesianize`.

Every ``nn.Linear``, ``nn.Conv1d`` and ``nn.Conv2d`` is replaced, in place, by the matching
:mod:`bbb.nn` layer (:class:`~bbb.nn.BayesLinear`, :class:`~bbb.nn.BayesConv1d`,
:class:`~bbb.nn.BayesConv2d`) with the same sizes, device and dtype; everything else (activations,
pooling, normalisation, embeddings...) stays as it is. The module names do not change, so a
deterministic ``state_dict`` loads into the converted model (``weight`` becomes ``weight_mu``),
and the Bayesian layers expose ``.weight``/``.bias`` (the posterior mean) for code that reads them.

>>> net = nn.Sequential(nn.Flatten(), nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 10))
>>> net.load_state_dict(torch.load("trained.pt"))      # optional: a trained network
>>> bbb.bayesianize(net, from_weights=True)            # posterior means start at its weights
>>> elbo = bbb.ELBO(net, "categorical", num_batches=len(loader), num_samples=2)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch.nn as nn

from .errors import UserError
from .nn import DEFAULT_RHO_INIT, BayesConv1d, BayesConv2d, BayesLinear, BayesModule, Estimator

__all__ = ["bayesianize", "deterministic_layers", "CONVERTIBLE"]

_log = logging.getLogger("bbb.convert")

#: the torch.nn layer types :func:`bayesianize` replaces, and by what
CONVERTIBLE: dict[type[nn.Module], type[BayesModule]] = {
    nn.Linear: BayesLinear,
    nn.Conv1d: BayesConv1d,
    nn.Conv2d: BayesConv2d,
}

Skip = Iterable[str | type] | Callable[[str, nn.Module], bool] | None


def _skipper(skip: Skip) -> Callable[[str, nn.Module], bool]:
    if skip is None:
        return lambda name, mod: False
    if callable(skip) and not isinstance(skip, type):
        return skip  # type: ignore[return-value]
    if isinstance(skip, (str, type)):
        skip = [skip]
    items = list(skip)  # type: ignore[arg-type]
    names = {s for s in items if isinstance(s, str)}
    types = tuple(s for s in items if isinstance(s, type))
    bad = [s for s in items if not isinstance(s, (str, type))]
    if bad:
        raise UserError(f"skip takes module names, module types or a callable (name, module) -> bool, got {bad!r}")

    def fn(name: str, mod: nn.Module) -> bool:
        # a name skips that module and everything inside it
        return isinstance(mod, types) or any(name == n or name.startswith(n + ".") for n in names)

    return fn


def _convert(layer: nn.Module, **kw: Any) -> BayesModule:
    cls = CONVERTIBLE[type(layer)]
    if cls is BayesLinear:
        return BayesLinear.from_linear(layer, **kw)  # type: ignore[arg-type]
    return cls.from_conv(layer, **kw)  # type: ignore[attr-defined]


def bayesianize(
    model: nn.Module,
    prior: Any = None,
    estimator: Estimator | str = Estimator.REPARAM,
    rho_init: float = DEFAULT_RHO_INIT,
    from_weights: bool = True,
    skip: Skip = None,
) -> nn.Module:
    """Replace the ``nn.Linear``, ``nn.Conv1d`` and ``nn.Conv2d`` layers of ``model`` by Bayesian ones.

    Args:
        model: any ``nn.Module``; converted in place (and returned). A bare ``nn.Linear`` or conv
            layer cannot be replaced in place: the Bayesian layer is returned.
        prior: a :class:`~bbb.distributions.Prior`, a ``torch.distributions`` distribution (e.g.
            ``Normal(0., 1.)``), or None for the default (:func:`bbb.nn.default_prior`).
        estimator: ``"reparam"`` (the paper), ``"local"`` or ``"flipout"``.
        rho_init: initial rho of every weight (sigma = softplus(rho_init), about 0.0067 by default).
        from_weights: start each posterior mean at the layer's current weights (warm start from
            a trained network); False draws fresh means as a new Bayesian layer would.
        skip: layers to leave deterministic: qualified module names (``"fc3"``, ``"features.0"``;
            a name covers everything inside it), module types, or a callable ``(name, module) ->
            bool``.

    Only exact ``nn.Linear``/``nn.Conv1d``/``nn.Conv2d`` instances are converted (subclasses may
    carry behaviour a copy would lose); convolutions with a ``padding_mode`` other than
    ``"zeros"`` are left as they are. Every layer with parameters that stays deterministic is
    logged (logger ``bbb.convert``, INFO) and listed by :func:`deterministic_layers`; its
    parameters are trained as point estimates by the same optimiser.
    """
    if not isinstance(model, nn.Module):
        raise UserError(f"bayesianize needs an nn.Module, got {type(model).__name__}")
    skipped = _skipper(skip)
    kw = {"prior": prior, "estimator": estimator, "rho_init": rho_init, "from_weights": from_weights}
    if type(model) in CONVERTIBLE and not skipped("", model):
        return _convert(model, **kw)
    converted: list[str] = []
    done: dict[int, BayesModule] = {}  # a layer used in several places (tied) stays one layer
    for name, mod in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(mod._modules.items()):  # (named_children skips repeats)
            if child is None:
                continue
            full = f"{name}.{child_name}" if name else child_name
            if id(child) in done:
                setattr(mod, child_name, done[id(child)])
                continue
            if type(child) not in CONVERTIBLE or skipped(full, child):
                continue
            if getattr(child, "padding_mode", "zeros") != "zeros":
                continue
            done[id(child)] = new = _convert(child, **kw)
            setattr(mod, child_name, new)
            converted.append(full)
    left = deterministic_layers(model)
    _log.info("bayesianize: %d layer(s) made Bayesian (%s); left deterministic: %s", len(converted),
              ", ".join(converted) or "none",
              ", ".join(f"{n} ({t})" for n, t in left) or "none")
    return model


def deterministic_layers(model: nn.Module) -> list[tuple[str, str]]:
    """(qualified name, type name) of every module that has parameters of its own and is not a
    Bayesian layer: what :func:`bayesianize` left as point estimates (norm layers, embeddings,
    skipped or unsupported layers)."""
    out = []
    for name, mod in model.named_modules():
        if isinstance(mod, BayesModule):
            continue
        if any(True for _ in mod.parameters(recurse=False)):
            out.append((name, type(mod).__name__))
    return out
