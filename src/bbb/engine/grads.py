"""The fused mu's and rho's ``.grad``: the engine's gradient, formed when read.

The engine's gradient of a fused parameter never lands in ``param.grad``: dL/dw of the weight sample
goes to a flat buffer g, dL/dKL to a scalar c, and the kernel forms dL/dmu and dL/drho from them
inside the step. Code written for ``torch.optim`` reads and edits ``param.grad`` between
``backward()`` and ``step()`` -- ``torch.nn.utils.clip_grad_norm_(model.parameters(), c)`` above
all -- and saw nothing there (a norm of 0, nothing clipped).

So the fused parameters' class becomes a subclass of ``nn.Parameter`` whose ``grad`` property,
after a backward, returns a view of a (2, n) buffer holding dL/dmu and dL/drho (the KL's part
included, as :meth:`~bbb.engine.Engine.clip_grad_norm_` counts it), formed from g and c on the first
read (one pass; nothing is formed, nor allocated, when nobody reads it). An in-place edit of those
views (clipping, ``clip_grad_value_``) is what the next ``step()`` applies: the engine notices it
from the buffer's version counter and runs its update on the edited gradient instead of forming it
again. Before a backward (and after a step) the property reads None, as after ``zero_grad()``.
Assigning a tensor to a fused ``.grad`` is a one-line error (edit it in place); under
DistributedDataParallel a read is one too (the gradient must first be averaged across the
processes, which :meth:`~bbb.engine.Engine.clip_grad_norm_` does on every process at once).

The class is per engine (``type(p)._bbb_engine``, a weak reference), so ``state_dict``, pickling
(a plain ``nn.Parameter`` comes back) and ``deepcopy`` (a copy the engine does not own reads its own
``.grad``) are unchanged.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..errors import UserError
from .kernels import gradients

__all__ = ["FusedParameter", "FusedGrads"]

_GRAD: Any = torch.Tensor.grad  # the descriptor of autograd's own .grad (what a backward outside sampling() fills)


class FusedParameter(nn.Parameter):
    """A fused ``*_mu`` or ``*_rho``: its ``.grad`` reads the engine's gradient (see the module)."""

    _bbb_engine: Any = None  # a weak reference to the engine, set on each engine's own subclass

    @property  # type: ignore[override]
    def grad(self) -> Tensor | None:
        own = _GRAD.__get__(self)
        ref = type(self)._bbb_engine
        engine = None if ref is None else ref()
        if own is not None or engine is None:
            return own
        return engine._grads.read(self)

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        ref = type(self)._bbb_engine
        engine = None if ref is None else ref()
        if value is not None and engine is not None and engine._grads.owns(self):
            raise UserError(engine._grads.ASSIGN)
        _GRAD.__set__(self, value)


class FusedGrads:
    """The engine's side: which parameters are fused, and the buffer their ``.grad`` views. (The
    owner of a :class:`FusedParameter` is any object whose ``_grads`` has ``read``, ``owns`` and
    ``ASSIGN``: :class:`bbb.IVON`'s too.)"""

    ASSIGN = ("the .grad of a fused mu or rho is the engine's gradient: edit it in place (e.g. "
              "torch.nn.utils.clip_grad_norm_) or use engine.clip_grad_norm_; do not assign it")

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.where: dict[int, tuple[Tensor, int, Any]] = {}  # id(param) -> (param, row 0/1, slot)
        self.buf: Tensor | None = None
        self.key: tuple[int, int] | None = None  # (g, c) versions the buffer was formed from
        self.formed = -1  # the buffer's version when formed (a later one: edited in place)

    def adopt(self, layout: Any) -> None:
        """Make the layout's mu and rho this engine's :class:`FusedParameter` (their class only)."""
        cls = type("FusedParameter", (FusedParameter,), {"_bbb_engine": weakref.ref(self.engine),
                                                         "__module__": __name__})
        for s in layout.slots:
            for row, x in enumerate(("mu", "rho")):
                p = getattr(s.module, f"{s.name}_{x}")
                p.__class__ = cls
                self.where[id(p)] = (p, row, s)

    def owns(self, p: Tensor) -> bool:
        hit = self.where.get(id(p))
        return hit is not None and hit[0] is p

    def versions(self) -> tuple[int, int]:
        """The version counters of g and c (a backward or an in-place edit advances them)."""
        e = self.engine
        return e._g._version, e._sampler.anchor.grad._version

    def read(self, p: Tensor) -> Tensor | None:
        """``p.grad``: None before a backward since the last step, else its view of the formed buffer."""
        hit = self.where.get(id(p))
        e = self.engine
        if hit is None or hit[0] is not p or not e._sampler.drawn or self.versions() == e._clean:
            return None
        if e._ddp is not None:
            raise UserError("under DistributedDataParallel the engine's gradient is averaged across the "
                            "processes before use: clip with engine.clip_grad_norm_(max_norm) on every process, "
                            "not through param.grad")
        if self.key != self.versions():
            self._form()
        assert self.buf is not None
        return hit[2].view(self.buf[hit[1]])

    @torch.no_grad()
    def _form(self) -> None:
        e = self.engine
        if self.buf is None:
            self.buf = torch.zeros((2, e.layout.numel), device=e._g.device, dtype=e._g.dtype)
        gmu, grho = gradients(e._mu, e._g, e._eps(e._sampler.cur), e._sig, e._sr, e._dlp, e._sampler.anchor.grad,
                              e._kl_mask, **e.gradient_options())
        self.buf[0].copy_(gmu)
        self.buf[1].copy_(grho)
        self.key, self.formed = self.versions(), self.buf._version

    def edited(self) -> Tensor | None:
        """The buffer when it was formed from this step's gradient and then edited in place (what the
        step must apply), else None (the kernel forms the gradient itself)."""
        if self.buf is None or self.key != self.versions() or self.buf._version == self.formed:
            return None
        return self.buf
