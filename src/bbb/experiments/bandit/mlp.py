"""A population of MLPs with hand-written forward and backward passes, and the fused
optimisers over their flat parameter tensors."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


class MLPLayout:
    """Where each layer lives in a flat parameter vector of S numbers per member.

    Layer l is an ``(in_l + 1, out_l)`` block, row ``in_l`` being the bias: an input carries a
    trailing constant 1 and every hidden activation gets one too, so each layer is a single
    ``bmm`` and its bias gradient comes out of the weight gradient's ``bmm``.
    """

    def __init__(self, in_features: int, hidden: Sequence[int], out_features: int = 1) -> None:
        self.sizes = [int(in_features), *[int(h) for h in hidden], int(out_features)]
        self.blocks: list[tuple[int, int, int]] = []
        off = 0
        for a, b in zip(self.sizes[:-1], self.sizes[1:]):
            self.blocks.append((off, a + 1, b))
            off += (a + 1) * b
        self.size = off

    @property
    def in_features(self) -> int:
        return self.sizes[0]

    def views(self, flat: Tensor) -> list[Tensor]:
        """``flat`` (M, S) -> per layer (M, in_l + 1, out_l) views (no copy)."""
        m = flat.shape[0]
        return [flat[:, o:o + r * c].view(m, r, c) for o, r, c in self.blocks]

    def init_(self, flat: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """torch.nn.Linear's default: weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
        for (_, rows, _), v in zip(self.blocks, self.views(flat)):
            bound = 1.0 / math.sqrt(rows - 1)
            u = torch.rand(v.shape, generator=generator, dtype=torch.float32)
            v.copy_(u.mul_(2 * bound).sub_(bound))
        return flat


@dataclass
class _Activations:
    hs: list[Tensor]  # the input of each layer, with its trailing ones column
    out: Tensor


class Workspace:
    """Hidden-activation buffers (with their ones column) reused across calls of one shape."""

    def __init__(self) -> None:
        self._bufs: dict[tuple, list[Tensor]] = {}

    def get(self, layout: MLPLayout, m: int, b: int, like: Tensor) -> list[Tensor]:
        key = (m, b, like.device, like.dtype)
        bufs = self._bufs.get(key)
        if bufs is None:
            bufs = []
            for h in layout.sizes[1:-1]:
                t = torch.empty(m, b, h + 1, device=like.device, dtype=like.dtype)
                t[..., h] = 1.0
                bufs.append(t)
            self._bufs[key] = bufs
        return bufs


def mlp_forward(layout: MLPLayout, w: Tensor, x: Tensor, workspace: Workspace | None = None) -> _Activations:
    """ReLU MLP of M members: weights ``w`` (M, S), inputs ``x`` (M, B, in + 1) (last column 1).

    Returns the output (M, B, out) and the per-layer inputs the backward pass needs.
    """
    m, b = x.shape[0], x.shape[1]
    views = layout.views(w)
    bufs = (workspace or Workspace()).get(layout, m, b, x)
    hs = [x]
    h = x
    for i, v in enumerate(views[:-1]):
        z = torch.bmm(h, v)
        hb = bufs[i]
        torch.clamp_min(z, 0.0, out=hb[..., : z.shape[-1]])
        hs.append(hb)
        h = hb
    return _Activations(hs, torch.bmm(h, views[-1]))


def mlp_backward(layout: MLPLayout, w: Tensor, acts: _Activations, dout: Tensor, grad: Tensor) -> Tensor:
    """Write dL/dw into ``grad`` (M, S) given dL/d(output) ``dout`` (M, B, out); returns ``grad``."""
    views = layout.views(w)
    gviews = layout.views(grad)
    d = dout
    for i in range(len(views) - 1, -1, -1):
        h = acts.hs[i]
        torch.bmm(h.transpose(1, 2), d, out=gviews[i])
        if i > 0:
            dh = torch.bmm(d, views[i][:, :-1, :].transpose(1, 2))
            d = torch.ops.aten.threshold_backward(dh, h[..., :-1], 0.0)
    return grad


class FlatSGD:
    """Plain SGD over tensors whose ``.grad`` the caller fills (no state)."""

    def __init__(self, params: list[Tensor], lr: float) -> None:
        self.params, self.lr = params, float(lr)

    def step(self) -> None:
        torch._foreach_add_(self.params, [p.grad for p in self.params], alpha=-self.lr)

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, st: dict[str, Any]) -> None:
        pass


#: training-key entries added after the first checkpoints were written, with the value those
#: checkpoints implied (so an older checkpoint still resumes)
KEY_DEFAULTS: dict[str, Any] = {"bbb_optimizer": "adam", "bbb_lr": None}


class FlatAdam:
    """Adam over a list of tensors whose ``.grad`` the caller fills; one fused call per step.

    Adam is elementwise, so population members never influence each other.
    """

    def __init__(self, params: list[Tensor], lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = params
        self.lr, self.betas, self.eps = float(lr), betas, float(eps)
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        dev = params[0].device
        self.step_t = torch.zeros((), dtype=torch.float32, device=dev)
        self._fused = hasattr(torch, "_fused_adam_") and dev.type in ("cpu", "cuda")
        if not self._fused:  # pragma: no cover - old torch / other devices
            ps = [torch.nn.Parameter(p, requires_grad=False) for p in params]
            self._opt = torch.optim.Adam(ps, lr=lr, betas=betas, eps=eps)

    def step(self) -> None:
        grads = [p.grad for p in self.params]
        if self._fused:
            self.step_t += 1
            n = len(self.params)
            torch._fused_adam_(self.params, grads, self.exp_avg, self.exp_avg_sq, [], [self.step_t] * n,
                               amsgrad=False, lr=self.lr, beta1=self.betas[0], beta2=self.betas[1],
                               weight_decay=0.0, eps=self.eps, maximize=False)
        else:  # pragma: no cover
            for q, g in zip(self._opt.param_groups[0]["params"], grads):
                q.grad = g
            self._opt.step()

    def state(self) -> dict[str, Any]:
        if not self._fused:  # pragma: no cover
            return {"opt": self._opt.state_dict()}
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_t}

    def load(self, st: dict[str, Any]) -> None:
        if not self._fused:  # pragma: no cover
            self._opt.load_state_dict(st["opt"])
            return
        for a, b in zip(self.exp_avg, st["exp_avg"]):
            a.copy_(b)
        for a, b in zip(self.exp_avg_sq, st["exp_avg_sq"]):
            a.copy_(b)
        self.step_t.copy_(st["step"])
