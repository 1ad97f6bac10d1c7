"""What the engine trains, whether its kernel applies, and gradient clipping across both paths."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import CenteredPrior, KLMode, uses_monte_carlo
from ..elbo import ELBO
from ..errors import UserError, check_float
from ..nn import bayes_modules
from ..nn.base import Estimator
from ..random import counter_keys
from .kernels import gradients

__all__ = ["elbo_settings", "unsupported_reason", "param_groups", "new_params", "torch_optimizer", "clip_grad_norm",
           "compile_default", "has_triton", "COMPILE_ENV", "compile_from_env", "check_member_lr_scale",
           "frozen_changed", "hyper_values"]

#: the environment variable that sets the engine's ``compile=None`` for the whole process (and the
#: processes it starts): ``0`` never compiles (the eager kernels, the same mathematics; no seconds
#: spent compiling), ``1`` compiles at any size, ``auto`` (or unset) leaves the choice to the
#: engine (:func:`compile_default`). An engine's explicit ``compile=True``/``False`` wins. The
#: ``bbb`` command's ``--no-compile`` sets it to ``0``.
COMPILE_ENV = "BBB_COMPILE"

_warned_no_triton = False


def has_triton() -> bool:
    """Whether torch.compile can generate CUDA kernels here (Triton is installed)."""
    try:
        from torch.utils._triton import has_triton as torch_has_triton
    except ImportError:  # pragma: no cover
        return False
    return bool(torch_has_triton())


def compile_from_env() -> bool | None:
    """:data:`COMPILE_ENV` read: False (``0``), True (``1``) or None (``auto`` or unset); any other
    value is a one-line :class:`UserError`."""
    v = os.environ.get(COMPILE_ENV, "").strip().lower()
    if v in ("", "auto"):
        return None
    if v in ("0", "false", "no", "off"):
        return False
    if v in ("1", "true", "yes", "on"):
        return True
    raise UserError(f"{COMPILE_ENV} must be 0 (never compile), 1 (always) or auto, got {v!r}")


def compile_default(compile: bool | None, dev: torch.device, numel: int, min_numel: int) -> bool:
    """Whether the engine compiles: ``compile`` where given; else :data:`COMPILE_ENV` where set;
    else on CUDA at any size, on the CPU from ``min_numel`` weights. On CUDA without Triton: the
    eager kernels, with one warning a process."""
    global _warned_no_triton
    if compile is None:
        compile = compile_from_env()
    use = (dev.type == "cuda" or (dev.type == "cpu" and numel >= min_numel)) if compile is None else compile
    if use and dev.type == "cuda" and not has_triton():
        use = False
        if not _warned_no_triton:
            _warned_no_triton = True
            warnings.warn("bbb.Engine: Triton is not installed, so the engine's CUDA kernels run eagerly (many "
                          "small kernels a step, slower); install triton to compile them", RuntimeWarning,
                          stacklevel=5)
    return bool(use)


def unsupported_reason(model: nn.Module, kl: KLMode) -> str | None:
    """Why the fused kernel cannot train ``model`` (None: it can)."""
    mods = list(bayes_modules(model, active=True))
    if not mods:
        return "the model has no Bayesian layers"
    params = [p for m in mods for n in m.param_names() for p in (getattr(m, f"{n}_mu"), getattr(m, f"{n}_rho"))]
    if len({(p.dtype, p.device) for p in params}) != 1:
        return "its Bayesian parameters differ in dtype or device"
    if not params[0].is_floating_point():
        return "its parameters are not floating point"
    if params[0].dtype in (torch.float16, torch.bfloat16):
        return (f"its parameters are {str(params[0].dtype).replace('torch.', '')}: the fused kernel draws its noise "
                "and sums its KL in the parameters' dtype (16 bits: float16's KL overflows past 65504, bfloat16's "
                "rounds to 8 bits), where the plain path forms the KL in float32")
    frozen = sum(not p.requires_grad for p in params)
    if frozen:
        return (f"{frozen} of its {len(params)} Bayesian parameters are frozen (requires_grad=False), which the "
                "fused kernel would update")
    prior = mods[0].prior
    for m in mods:
        if m.estimator is not Estimator.REPARAM:
            return f"the {m.estimator.value} estimator is not fused (only reparam)"
        if m.prior != prior:
            return "its layers have different priors"
    if isinstance(prior, CenteredPrior):
        return "a prior centred per weight (CenteredPrior) is not fused: the kernel takes one prior for all weights"
    if KLMode(kl) is KLMode.SPLIT:
        if not prior.has_split:
            return f"{type(prior).__name__} has no split KL"
    elif uses_monte_carlo(prior, kl):
        if not prior.has_analytic_grad:
            return f"{type(prior).__name__} does not write out log_prob_and_grad"
    elif not prior.has_closed_form:
        return f"{type(prior).__name__} has no kl_closed_form"
    return None


def param_groups(params: Any) -> list[dict[str, Any]]:
    """``params=`` (None, parameters, or parameter groups as dicts) as a list of groups (copies)."""
    if params is None:
        return []
    try:
        items = [params] if isinstance(params, (Tensor, dict)) else list(params)
    except TypeError:
        items = [params]
    groups = [dict(g) for g in items if isinstance(g, dict)]
    tensors = [p for p in items if not isinstance(p, dict)]
    if tensors:
        groups.append({"params": tensors})
    for g in groups:
        ps = g.get("params")
        g["params"] = [ps] if isinstance(ps, Tensor) else list(ps or [])
        if not all(isinstance(p, Tensor) for p in g["params"]):
            raise UserError("params must be parameters (tensors) or parameter groups ({'params': [...], ...})")
    return groups


#: Adam's betas and eps, as ``torch.optim.Adam`` has them: the Engine's defaults
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def check_optimizer_options(adam: bool, betas: tuple[float, float], eps: float, momentum: float,
                            nesterov: bool) -> None:
    """A one-line error for an option the engine's optimiser would ignore: ``momentum`` or
    ``nesterov`` for Adam, ``betas`` or ``eps`` other than Adam's defaults for SGD, ``nesterov``
    without momentum."""
    if adam and (momentum or nesterov):
        raise UserError("momentum and nesterov are SGD's, which Adam would ignore: Engine(model, 'sgd', "
                        "momentum=...), or Adam's own betas=")
    if not adam and (tuple(betas) != ADAM_BETAS or eps != ADAM_EPS):
        raise UserError("betas and eps are Adam's, which SGD would ignore: Engine(model, 'adam', betas=...), or "
                        "SGD's own momentum=")
    if nesterov and not momentum:
        raise UserError("nesterov=True needs a momentum > 0, as torch.optim.SGD's")


#: torch.optim options the fused kernel does not have (a group that sets one is refused, not ignored)
_ABSENT = ("weight_decay", "amsgrad", "maximize", "dampening", "decoupled_weight_decay")


def check_kernel_options(adam: bool, group: dict[str, Any], nesterov: bool, momentum: bool) -> None:
    """A one-line error at the fused step for an option of ``param_groups[0]`` changed since the
    kernel was built (by hand or by a scheduler) that the kernel cannot follow: ``nesterov``
    (``nesterov`` as built), a momentum where SGD was built without one (no buffer: ``momentum`` as
    built), the other optimiser's options, a ``torch.optim`` option it does not have
    (``weight_decay``: the prior is the engine's regulariser)."""
    absent = [k for k in _ABSENT if group.get(k)]
    if adam and (group.get("momentum") or group.get("nesterov")):
        what: str | None = "momentum and nesterov are SGD's, which Adam ignores"
    elif not adam and (tuple(group.get("betas", ADAM_BETAS)) != ADAM_BETAS or group.get("eps", ADAM_EPS) != ADAM_EPS):
        what = "betas and eps are Adam's, which SGD ignores"
    elif bool(group.get("nesterov")) != nesterov:
        what = f"nesterov is fixed when the engine is built (as {nesterov})"
    elif not adam and group.get("momentum") and not momentum:
        what = "a momentum needs an engine built with momentum > 0"
    else:
        what = f"the fused kernel has no {absent[0]}" if absent else None
    if what is not None:
        raise UserError(f"bbb.Engine.step: param_groups[0] was changed after the engine was built, and {what}: "
                        "build the Engine with the options it should use")


def torch_optimizer(adam: bool, groups: list[dict[str, Any]], defaults: dict[str, Any]) -> torch.optim.Optimizer:
    """The engine's inner optimiser (what it does not fuse): ``torch.optim.Adam`` or ``SGD`` with the
    engine's options (``defaults``) for the groups that set none of their own."""
    if adam:
        return torch.optim.Adam(groups, lr=defaults["lr"], betas=defaults["betas"], eps=defaults["eps"])
    return torch.optim.SGD(groups, lr=defaults["lr"], momentum=defaults["momentum"], nesterov=defaults["nesterov"])


def check_fused_groups(groups: list[dict[str, Any]], fused: set[int]) -> None:
    """A one-line error for a ``params=`` group with options of its own (``lr``, say) that holds a
    fused mu or rho, which steps in the kernel at the engine's options (the group's would be ignored)."""
    for g in groups:
        own = sorted(k for k in g if k != "params")
        if own and any(id(p) in fused for p in g["params"]):
            raise UserError(f"bbb.Engine: a params= group with its own {', '.join(own)} holds a fused Bayesian mu or "
                            "rho, which steps at the engine's options: leave it out (rho_lr_scale= sets rho's "
                            "learning rate), or fused=False to train it in that group")


def new_params(groups: list[dict[str, Any]], seen: set[int]) -> list[dict[str, Any]]:
    """``groups`` without the parameters in ``seen`` or in an earlier group (each trained once)."""
    out = []
    for g in groups:
        ps = []
        for p in g["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                ps.append(p)
        if ps:
            out.append({**g, "params": ps})
    return out


@torch.no_grad()
def frozen_changed(model: nn.Module, params: tuple[Tensor, ...], trained: set[int], updated: tuple[Tensor, ...],
                   who: str, add_group: bool = False) -> str | None:
    """What went wrong when ``requires_grad`` of some of ``model``'s ``params`` changed since the
    optimiser ``who`` (the Engine, IVON) was built: a parameter of ``updated`` (stepped whatever its
    ``requires_grad``: the fused kernel's, IVON's means) frozen, or a parameter unfrozen that no group
    trains (``trained``: their ids; it would get gradients and never move); None if neither."""
    names = {id(p): n for n, p in model.named_parameters()}
    frozen = [names.get(id(p), "?") for p in updated if not p.requires_grad]
    if frozen:
        return (f"{len(frozen)} parameter(s) frozen (requires_grad=False) after {who} was built "
                f"({', '.join(frozen[:3])}), which it would still update: build {who} after freezing")
    left = [names.get(id(p), "?") for p in params if p.requires_grad and id(p) not in trained]
    if left:
        return (f"{len(left)} parameter(s) unfrozen (requires_grad=True) after {who} was built "
                f"({', '.join(left[:3])}), which it does not train: build {who} after unfreezing"
                + (", or add_param_group({'params': [...]})" if add_group else ""))
    return None


def clip_grad_norm(engine: Any, max_norm: float, norm_type: float, error_if_nonfinite: bool) -> Tensor:
    """:meth:`Engine.clip_grad_norm_` (after the distributed average): torch's arithmetic, with the
    fused dL/dmu and dL/drho formed from g and c (the kernel's formula) and clipped by scaling g and c."""
    inner = engine._inner.param_groups if engine._inner is not None else []
    grads = [p.grad for g in inner for p in g["params"] if p.grad is not None]
    parts = list(grads)
    if engine.fused:
        parts[:0] = gradients(engine._mu, engine._g, engine._eps(engine._sampler.cur), engine._sig, engine._sr,
                              engine._dlp, engine._sampler.anchor.grad, engine._kl_mask, **engine.gradient_options())
    if not parts:
        return torch.tensor(0.0)
    dev = parts[0].device
    total = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(t, norm_type).to(dev) for t in parts]), norm_type)
    if error_if_nonfinite and not bool(torch.isfinite(total)):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite, so it cannot "
                           "be clipped; error_if_nonfinite=False turns this off")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    if engine.fused:
        engine._g.mul_(coef.to(engine._g.dtype))
        engine._sampler.anchor.grad.mul_(coef.to(engine._g.dtype))
    for t in grads:
        t.mul_(coef.to(t.device, t.dtype))
    return total


def check_member_lr_scale(scale: Any, layout: Any, reason: str | None) -> tuple[float, ...] | None:
    """``member_lr_scale`` checked against the model: one positive number per member of a population
    on the fused kernel, else a one-line UserError; None stays None."""
    if scale is None:
        return None
    members = None if layout is None else layout.members()
    if members is None:
        why = reason or "the model is not a population (bbb.nn.BayesPopulation)"
        raise UserError(f"member_lr_scale sets a population's learning rates member by member in the fused kernel; "
                        f"here {why}")
    try:
        values = tuple(float(v) for v in scale)
    except (TypeError, ValueError):
        raise UserError(f"member_lr_scale must be a list of numbers, one per member, got {scale!r}") from None
    if len(values) != members[0]:
        raise UserError(f"member_lr_scale has {len(values)} numbers for a population of {members[0]} members")
    for v in values:
        check_float("member_lr_scale", v, 0.0, above=True)
    return values


def elbo_settings(elbo: ELBO, k: int | None, kl_mode: KLMode | None,
                 kl_samples: int | None) -> tuple[int, KLMode, int | None]:
    """The ELBO's ``num_samples``, ``kl`` and ``kl_samples``, which an engine built from it takes;
    a value given to the engine too that differs from the ELBO's is a one-line :class:`UserError`."""
    def text(v: Any) -> str:
        return repr(v.value if isinstance(v, KLMode) else v)

    for name, given, owned in (("num_samples", k, elbo.num_samples), ("kl", kl_mode, elbo.kl_mode),
                               ("kl_samples", kl_samples, elbo.kl_samples)):
        if given is not None and given != owned:
            raise UserError(f"Engine(elbo, {name}={text(given)}) but the ELBO has {name}={text(owned)}: an engine "
                            f"built from an ELBO takes num_samples, kl and kl_samples from it; leave {name} out "
                            "of the Engine (or give it to the ELBO)")
    return elbo.num_samples, elbo.kl_mode, elbo.kl_samples


def hyper_values(group: dict[str, Any], adam: bool, step: int, seed: int, counter: int) -> tuple[float, ...]:
    """The fused kernels' ``hp`` as numbers: the hyperparameters of this step of the parameter
    ``group`` (Adam's bias corrections at ``step``), then the keys of the noise drawn
    (:func:`bbb.random.counter_keys` of ``seed`` and ``counter``)."""
    lr = float(group["lr"])
    if adam:
        b1, b2 = group["betas"]
        moments = (b1, b2, group["eps"], lr / (1.0 - b1**step) if step else 0.0, (1.0 - b2**step) ** 0.5)
    else:
        moments = (0.0, 0.0, 0.0, 0.0, 0.0)
    return (lr, *moments, float(group.get("momentum", 0.0)), float(group["rho_lr_scale"]),
            *counter_keys(seed, counter))
