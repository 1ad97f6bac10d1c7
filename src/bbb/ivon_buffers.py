"""The state :class:`bbb.IVON` keeps beside the layers: the flat buffers of one dtype and device
(:class:`FlatBuffers`), what a forward notes (:class:`ForwardNotes`), and the check of its
hyperparameters (:func:`check_hyper`)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .engine.layout import Slot, placement_error
from .errors import UserError
from .nn import bayes_modules
from .nn.base import BayesModule, Estimator

__all__ = ["AUTOGRAD_GRAD", "HYPER", "FlatBuffers", "ForwardNotes", "check_hyper", "trained_pairs"]

#: autograd's own ``.grad`` descriptor (a trained mean's class, FusedParameter, reads IVON's gradient)
AUTOGRAD_GRAD: Any = torch.Tensor.grad


#: the hyperparameters in ``param_groups[0]`` that :func:`check_hyper` checks
HYPER = ("lr", "ess", "hess_init", "weight_decay", "beta1", "beta2", "clip_radius")


def check_hyper(group: dict[str, Any], where: str) -> None:
    """A one-line error for a hyperparameter out of its range: at the build (``where`` empty), or
    edited into ``param_groups[0]`` (``where`` says so; there lr may be 0, as a scheduler sets it:
    m stays where it is)."""
    for name in ("lr", "ess", "hess_init", "weight_decay"):
        value = group[name]
        positive = name in ("ess", "hess_init") or (name == "lr" and not where)
        if not (_number(value) and math.isfinite(value) and (value > 0 if positive else value >= 0)):
            raise UserError(f"IVON: {where}{name} must be {'a positive number' if positive else '>= 0'}, got {value!r}")
    for name in ("beta1", "beta2"):
        if not (_number(group[name]) and 0.0 <= group[name] < 1.0):
            raise UserError(f"IVON: {where}{name} must be in [0, 1), got {group[name]!r}")
    if not (_number(group["clip_radius"]) and group["clip_radius"] > 0):
        raise UserError(f"IVON: {where}clip_radius must be > 0, got {group['clip_radius']!r}")


def _number(value: Any) -> bool:
    """A real number (numpy's too; a bool is not one)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class FlatBuffers:
    """The trained weights of one dtype and device in flat buffers: mu and rho (the layers' own
    parameters become views of them), momentum, h, sigma, this step's noise, sample and gradient;
    per weight tensor a :class:`Slot` and its sample leaf (a view of ``w`` whose ``.grad`` is the
    matching view of ``g``)."""

    def __init__(self, pairs: list[tuple[BayesModule, str]], hess_init: float) -> None:
        self.slots: list[Slot] = []
        offset = 0
        for m, n in pairs:
            self.slots.append(Slot(m, n, offset, tuple(m.mu(n).shape)))
            offset += self.slots[-1].numel
        self.numel = offset
        self.params = [m.mu(n) for m, n in pairs]
        with torch.no_grad():
            self.mu = torch.cat([p.detach().reshape(-1) for p in self.params])
            self.rho = torch.cat([m.rho(n).detach().reshape(-1) for m, n in pairs])
        for s, (m, n) in zip(self.slots, pairs):  # the layers' parameters become views of the buffers
            m.mu(n).data = s.view(self.mu)
            m.rho(n).data = s.view(self.rho)
        # momentum and h of half-precision weights in float32: with beta2 near 1 the update of h is
        # below half precision's resolution (h would never move) and beta2 itself rounds to 1
        state = torch.float32 if self.mu.dtype in (torch.float16, torch.bfloat16) else self.mu.dtype
        self.momentum = torch.zeros_like(self.mu, dtype=state)
        self.hess = torch.full_like(self.mu, float(hess_init), dtype=state)
        self.sig, self.w, self.g = (torch.zeros_like(self.mu) for _ in range(3))
        half = (self.numel + 1) // 2
        #: the noise as bbb.random lays it out, pair j's two numbers at j and j + half (an odd count's
        #: last number unused): filled as one (2, half) block, read through its flat view ``eps``
        self.eps_pairs = torch.zeros(2, half, dtype=self.mu.dtype, device=self.mu.device)
        self.eps = self.eps_pairs.view(-1)[: self.numel]
        self.index = torch.arange((self.numel + 1) // 2, dtype=torch.int32, device=self.mu.device)
        self.eps_views = [s.view(self.eps) for s in self.slots]
        self.w_views = [s.view(self.w) for s in self.slots]  # (made once: a view per forward costs microseconds)
        self.g_views = [s.view(self.g) for s in self.slots]
        self.leaves: list[Tensor] = []
        for s in self.slots:
            leaf = s.view(self.w).detach().requires_grad_(True)
            leaf.grad = s.view(self.g)
            self.leaves.append(leaf)
        self.hit: dict[int, int] = {}  # slots drawn from the flat sample this step: the sampling() block that drew each
        self.extra: dict[int, list[tuple[Tensor, Tensor, bool, int]]] = {}  # their other draws: (eps, w, k rows, block)
        self.flat_block = 0  # the sampling() block of this step's flat draw
        self.averaged = -1  # g's version after its last average across DDP's processes
        self.fresh = True  # the flat noise is still to be drawn for this step
        self.clean = self.g._version  # g's version when zeroed (a backward into it advances it)

    def stray_grad(self) -> str | None:
        """What is wrong where a backward reached a trained mean itself rather than its sample (a layer
        in eval() inside a model in train(), a penalty on the parameters), or None: the step applies
        gradients at the sample only, and would drop that one."""
        for s, p in zip(self.slots, self.params):
            if AUTOGRAD_GRAD.__get__(p) is None:
                continue
            where = f"{type(s.module).__name__}'s {s.name}_mu"
            if not s.module.is_sampling():
                return (f"{where} was not sampled (its layer is in eval() mode, where it uses its mean) and IVON "
                        "would not train it: call model.train() before the training forward, or freeze the layer "
                        "(requires_grad_(False)) before building IVON")
            return (f"a backward reached {where} itself, not its weight sample (a term of the loss on the "
                    "parameters), which IVON's step would drop: an L2 penalty is IVON's weight_decay; compute any "
                    "other term from the sampled network's outputs")
        return None

    def check_placement(self) -> None:
        """The layers' mu and rho must still be views of the buffers (``model.to(...)`` after IVON
        was built gives them new tensors, which IVON would neither read nor update)."""
        for s in self.slots:
            mu, rho = s.module.mu(s.name), s.module.rho(s.name)
            if (mu.data_ptr() != self.mu.data_ptr() + s.offset * self.mu.element_size() or mu.dtype != self.mu.dtype
                    or rho.data_ptr() != self.rho.data_ptr() + s.offset * self.rho.element_size()):
                raise placement_error("IVON", mu, self.mu)


class ForwardNotes:
    """What a forward writes (the noise's draw counter, whether it drew): a plain object, because
    Dynamo drops attribute writes on a ``torch.optim.Optimizer`` made inside a compiled function and
    replays those on a plain object (as :mod:`bbb.engine.sampler` explains for the Engine)."""

    def __init__(self) -> None:
        self.counter = 0
        self.drew = False


def trained_pairs(model: nn.Module, others: str
                  ) -> tuple[list[tuple[BayesModule, str]], set[int], tuple[nn.Parameter, ...]]:
    """``(pairs, owned, others)`` of :class:`bbb.IVON` on ``model``: its Bayesian layers' weights
    whose mean requires a gradient, as ``(module, name)``; the ids of their means and rhos; and the
    model's other trainable parameters where ``others`` is ``"leave"`` (empty for ``"refuse"``, which
    makes any of them a one-line error, as a layer IVON cannot train is)."""
    pairs: list[tuple[BayesModule, str]] = []
    still: set[int] = set()  # the rho of a frozen mean (a weight IVON does not train)
    for m in bayes_modules(model):
        trained = [n for n in m.param_names() if m.mu(n).requires_grad]
        still |= {id(m.rho(n)) for n in m.param_names() if n not in trained}
        if trained and m.estimator is not Estimator.REPARAM:
            raise UserError(f"IVON needs each sampled weight's gradient: {type(m).__name__} uses the "
                            f"{m.estimator.value} estimator; build or convert it with estimator='reparam'")
        pairs += [(m, n) for n in trained]
    if not pairs:
        raise UserError("IVON: the model has no Bayesian weights to train (bbb.bayesianize(net) converts a "
                        "network; a frozen layer is not trained)")
    fixed = {id(m.rho(n)) for m, n in pairs if not m.rho(n).requires_grad}
    if fixed:  # IVON writes every trained weight's rho from its Hessian estimate
        names = [name for name, p in model.named_parameters(remove_duplicate=False) if id(p) in fixed]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        raise UserError(f"IVON: {shown} frozen, but the mean of each is trained (IVON learns a weight's mean and "
                        "sigma together, sigma from its Hessian estimate, and would overwrite it): unfreeze them "
                        "(requires_grad_(True)), or freeze their means too")
    owned = {id(m.mu(n)) for m, n in pairs} | {id(m.rho(n)) for m, n in pairs}
    if others not in ("refuse", "leave"):
        raise UserError(f"IVON: others={others!r}; choose 'refuse' or 'leave' (the parameters outside the Bayesian "
                        "layers left to an optimiser of your own)")
    loose = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in owned]
    if loose and others == "refuse":
        shown = ", ".join(loose[:4]) + (f" and {len(loose) - 4} more" if len(loose) > 4 else "")
        if all(id(model.get_parameter(n)) in still for n in loose):
            raise UserError(f"IVON: {shown} trainable, but the mean of each is frozen (IVON learns a weight's "
                            "mean and sigma together, sigma from its Hessian estimate): freeze them too "
                            "(requires_grad_(False)), or unfreeze their means")
        how = ("bayesianize(model, lora='AB') (lora_B too)" if any(".lora_B." in n for n in loose)
               else "bayesianize their layers")
        raise UserError(f"IVON trains Bayesian weights only, and {len(loose)} trainable parameter(s) are not "
                        f"Bayesian ({shown}): {how}, freeze them (requires_grad_(False)), or train them with an "
                        "optimiser of your own: IVON(..., others='leave'), torch.optim.AdamW(ivon.other_parameters())")
    return pairs, owned, tuple(model.get_parameter(n) for n in loose)
