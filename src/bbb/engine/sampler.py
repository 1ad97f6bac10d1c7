"""The engine's side of the forward pass: the weight samples and the KL the layers receive.

:class:`Sampler` is the :class:`~bbb.nn.SampleProvider` that ``engine.sampling()`` installs. It is a
plain object of its own, not the :class:`~bbb.engine.Engine`: ``torch.compile`` traces the layers'
calls into it, and Dynamo drops attribute writes on a ``torch.optim.Optimizer`` (the engine is
one) made inside a compiled function, so a compiled loss would draw the samples but leave the
engine believing that no forward ran (it then skipped every step). On a plain object Dynamo
replays the writes (``drawn``) after the compiled graph, as Python would.

Inside a compiled region the layers take the sample leaves (views of the engine's weight sample
whose ``.grad`` is the matching view of the gradient buffer, so the compiled backward accumulates
into the buffer as the eager one does) and the KL through :class:`KLCoefficient`; the eager
linear fast path (:class:`LinearIntoBuffers`, whose backward writes into the buffer directly) is
left to eager code.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..devices import autocast_enabled
from ..distributions import KLMode, Prior, uses_monte_carlo
from ..errors import UserError
from ..nn import SampleProvider
from . import distributed as ddp_
from .layout import Layout

__all__ = ["Sampler", "LinearIntoBuffers", "KLCoefficient", "kl_kind", "spend_layout_notice"]

_LAYOUT_NOTICE = "grad and param do not obey the gradient layout contract"
_layout_notice_spent = False


def spend_layout_notice() -> None:
    """Spend, silently, torch's one notice per process that a gradient "does not obey the layout
    contract" (``TORCH_WARN_ONCE`` in autograd's gradient accumulation).

    With k > 1 samples each layer's weight sample is a strided view of the (k, n) buffers, and
    autograd accumulates its gradient in place into the matching view of the gradient buffer, as
    intended; torch notes that once, from inside the caller's ``backward()``, where no filter of
    the engine's can be scoped. So the engine triggers that one notice here, on two tiny tensors,
    under a filter that ends with this function: no process-wide warnings filter, and no notice
    later (unless ``torch.set_warn_always(True)`` asks for every one).
    """
    global _layout_notice_spent
    if _layout_notice_spent:
        return
    _layout_notice_spent = True
    with warnings.catch_warnings(), torch.inference_mode(False), torch.enable_grad():
        warnings.filterwarnings("ignore", message=_LAYOUT_NOTICE)
        leaf = torch.zeros(2, 3)[:, :2].detach().requires_grad_(True)  # not dense: like a sample view
        leaf.grad = torch.zeros(2, 3)[:, :2]
        leaf.sum().backward()


def kl_kind(prior: Prior, mode: KLMode) -> tuple[bool, bool]:
    """(split, closed) of a KL mode for ``prior`` (a split with a closed form is closed)."""
    split = KLMode(mode) is KLMode.SPLIT and not prior.has_closed_form
    return split, not split and not uses_monte_carlo(prior, mode)


class LinearIntoBuffers(torch.autograd.Function):
    """y = x w^T + b whose backward adds dL/dw and dL/db into the engine's gradient buffers.

    The weight gradient goes straight into its place in the flat buffer (``addmm_``), so backprop
    allocates no weight-sized temporary and makes no separate accumulation pass; ``anchor`` (a
    leaf that requires grad) makes autograd call the backward even for the first layer.
    """

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor | None, gw: Tensor, gb: Tensor | None,  # type: ignore[override]
                anchor: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.gw, ctx.gb = gw, gb
        return torch.nn.functional.linear(x, w, b)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, go: Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        go2, x2 = go.reshape(-1, go.shape[-1]), x.reshape(-1, x.shape[-1])
        ctx.gw.addmm_(go2.t(), x2)
        if ctx.gb is not None:
            ctx.gb.add_(go2.sum(0))
        gx = go @ w if ctx.needs_input_grad[0] else None
        return gx, None, None, None, None, None


class KLCoefficient(torch.autograd.Function):
    """Forward: the KL value. Backward: routes dL/dKL into ``anchor.grad`` (the kernel's c)."""

    @staticmethod
    def forward(ctx, value: Tensor, anchor: Tensor) -> Tensor:  # type: ignore[override]
        return value.clone()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, Tensor]:  # type: ignore[override]
        return None, grad


def _join_ddp(engine: Any, ddp: Any) -> None:
    """The first forward inside ``ddp``, eager even in a compiled forward (it communicates; the
    decorator is applied here, not at import: importing bbb does not import Dynamo)."""
    torch.compiler.disable(engine._join)(ddp)


class Sampler(SampleProvider):
    """What the layers of an engine's model read inside ``engine.sampling()``.

    Holds the per-step state the forward touches: whether a forward drew the sample since the last
    step (``drawn``), which of the two noise buffers is current (``cur``), the current sample's KL
    value (``kl``), the sample leaves and the KL's anchor (whose ``.grad`` is the KL coefficient c).
    The engine writes ``cur``, ``kl`` and ``drawn`` at its steps; the forward writes ``drawn``.
    """

    def __init__(self, engine: Any, k: int, kl_mode: KLMode, kl_samples: int | None) -> None:
        self.engine = engine
        self.k, self.kl_mode, self.kl_samples = k, kl_mode, kl_samples
        self.layout: Layout | None = None
        self.groups: list[dict[str, Any]] = []  # the engine's param_groups (the same list)
        self.drawn = False  # a forward drew the engine's sample (or its KL) since the last step
        self.cur = 0
        self._trained: tuple[int, frozenset[int]] = (-1, frozenset())

    def bind(self, layout: Layout, prior: Prior, w: Tensor, g: Tensor, eps: tuple[Tensor, Tensor]) -> None:
        """Take the fused layout: the sample ``w`` (k, n), its gradient ``g`` and the two noise buffers."""
        self.layout, self.prior, self.w, self.g = layout, prior, w, g
        self.split, self.closed = kl_kind(prior, self.kl_mode)
        dev, dt = w.device, w.dtype
        if self.k > 1:
            spend_layout_notice()
        self.kl: Tensor = torch.zeros((), device=dev, dtype=dt)
        self.anchor = torch.zeros((), device=dev, dtype=dt, requires_grad=True)
        self.anchor.grad = torch.zeros((), device=dev, dtype=dt)
        self.lin_anchor = torch.zeros((), device=dev, dtype=dt, requires_grad=True)
        # per (module, name, batched): the sample leaf, and the noise views by the parity of the noise buffer
        self.leaves: dict[tuple[int, str, bool], tuple[Tensor, Tensor, Tensor]] = {}
        for s in layout.slots:
            for batched in (False, True):
                if batched or self.k == 1:
                    # one sample: views of the buffers' first row, shaped directly (an indexed (1, *shape)
                    # view as .grad breaks Dynamo's fake-tensor copy of the leaf before torch 2.13)
                    leaf = (s.view(w) if batched else s.view(w[0])).detach()
                    grad = s.view(g) if batched else s.view(g[0])
                    noise = [s.view(e) if batched else s.view(e[0]) for e in eps]
                    leaf.requires_grad_(True)
                    leaf.grad = grad
                    self.leaves[(id(s.module), s.name, batched)] = (leaf, noise[0], noise[1])

    def _first_draw(self) -> None:
        """The first draw of a step: note it, and whether it runs inside DistributedDataParallel."""
        self.drawn = True
        if self.engine._ddp is None:
            ddp = ddp_.active_ddp()
            if ddp is not None:
                _join_ddp(self.engine, ddp)

    def draw(self, module, name, k):
        if not self.drawn:
            self._first_draw()
        slot = self.layout.slot(module, name) if self.layout is not None else None
        if slot is None:
            return None
        if (k or 1) != self.k or (k is None and self.k != 1):
            raise UserError(f"the engine draws {self.k} weight sample(s) per step, the model asked for {k or 1}; "
                            "build the Engine from the ELBO, Engine(elbo, ...), so that they share num_samples")
        hit = self.leaves[(id(module), name, k is not None)]
        return getattr(module, f"{name}_mu"), hit[1 + self.cur], hit[0]

    def linear(self, module, x):
        """Single-sample, unpruned ``BayesLinear`` without autocast, in eager code: the fused linear."""
        if not self.drawn:
            self._first_draw()
        if torch.compiler.is_compiling():
            return None  # compiled: the layer takes the sample leaf (draw), whose .grad is the buffer's
        if self.layout is None or self.k != 1 or x.dim() != 2 or autocast_enabled(x.device.type):
            return None  # (a leading sample dimension takes the batched path)
        ws = self.layout.slot(module, "weight")
        if ws is None or module._mask("weight") is not None or module._mask("bias") is not None:
            return None
        bs = self.layout.slot(module, "bias")
        w, gw = ws.view(self.w)[0], ws.view(self.g)[0]
        b = gb = None
        if bs is not None:
            b, gb = bs.view(self.w)[0], bs.view(self.g)[0]
        return LinearIntoBuffers.apply(x, w, b, gw, gb, self.lin_anchor)

    def model_kl(self, model: nn.Module, mode: KLMode, kl_samples: int | None = None) -> Tensor | None:
        if self.layout is None:
            return None
        if not self.layout.covers(model):
            raise UserError("the KL under an Engine is that of the whole model it was built for (after a peft "
                            "model's set_adapter, build a new Engine)")
        if kl_kind(self.prior, mode) != (self.split, self.closed):
            raise UserError(f"the ELBO asks for kl={mode.value} but the engine was built with kl={self.kl_mode.value}; "
                            "build the Engine from the ELBO, Engine(elbo, ...), so that they share kl")
        if kl_samples != self.kl_samples and not (self.closed or self.split):
            raise UserError(f"the ELBO asks for kl_samples={kl_samples} but the engine was built with "
                            f"kl_samples={self.kl_samples}; build the Engine from the ELBO, Engine(elbo, ...), "
                            "so that they share kl_samples")
        self.drawn = True
        return KLCoefficient.apply(self.kl, self.anchor)

    def trains(self, param: Tensor) -> bool | None:
        """Whether ``param`` is among the parameters the engine updates."""
        if self._trained[0] != len(self.groups):
            self._trained = (len(self.groups), frozenset(id(p) for g in self.groups for p in g["params"]))
        return id(param) in self._trained[1]
