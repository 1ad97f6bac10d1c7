"""Data-parallel training with the engine: the part of the gradient DistributedDataParallel cannot see.
(:class:`bbb.IVON` uses the same parts: its flat gradient, averaged in its step; the seed of its
noise broadcast with mu, rho, h and the momentum at the first DDP forward.)

Under ``torch.nn.parallel.DistributedDataParallel`` every process backpropagates its own minibatch
and DDP averages ``param.grad`` over the processes during backward. The engine's fused gradient
never reaches ``param.grad``: dL/dw of the weight sample lands in the engine's flat buffer g and
dL/dKL in a scalar c, and the kernel forms dL/dmu and dL/drho from them. So the engine averages
them itself, over DDP's process group, before its kernel (in ``step()``, or in
``clip_grad_norm_`` when that comes first):

* g (k rows of dL/dw) and c. dL/dmu and dL/drho are linear in both, and everything else they
  depend on (eps, sigma, dlogp/dw) is the same on every process (the same parameters, seed and
  counter), so the average of g and c gives exactly the average of dL/dmu and dL/drho -- with
  k n numbers where DDP averages 2 n;
* the gradients of the parameters the engine trains that the DDP module does not hold or ignores
  (the ELBO's own, ``params=``).

The model's other parameters are DDP's (averaged in backward as with ``torch.optim``). The engine
learns that it runs under DDP from the forward: a layer draws the engine's sample inside DDP's
forward (``DistributedDataParallel._get_active_ddp_module()``). At that first DDP forward it
broadcasts mu, rho, those extra parameters and the noise's seed, counter and step from the group's
first process (DDP broadcasts the module's parameters when it is built; this covers parameters it
was told to ignore, and seeds drawn apart) and redraws the current sample. Processes that run the
model outside DDP train independently, as with ``torch.optim``; with a process group of several
processes the engine warns once about that.

DDP itself: autograd never writes mu's and rho's ``.grad`` (their gradient is the engine's), which DDP reports
at its second iteration unless it was built with ``find_unused_parameters=True`` or
``static_graph=True``; the engine says so in one line before (:func:`check_ddp`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch import Tensor

from ..errors import UserError

__all__ = ["is_ddp", "active_ddp", "check_ddp", "Averager", "warn_without_ddp"]

try:
    from torch.nn.parallel import DistributedDataParallel as _DDP
except ImportError:  # pragma: no cover - a torch without distributed support
    _DDP = None  # type: ignore[assignment,misc]


def is_ddp(module: Any) -> bool:
    return _DDP is not None and isinstance(module, _DDP)


def active_ddp() -> Any | None:
    """The DistributedDataParallel module whose forward is running (None outside one)."""
    return None if _DDP is None else getattr(_DDP, "_active_ddp_module", None)


def _covered(ddp: Any) -> set[int]:
    """ids of the parameters ``ddp`` averages (those of its module it does not ignore)."""
    ignored: set[str] = getattr(ddp, "parameters_to_ignore", set())
    return {id(p) for n, p in ddp.module.named_parameters() if n not in ignored}


def check_ddp(ddp: Any, fused: Iterable[Tensor], who: str = "bbb.Engine") -> None:
    """A one-line error where DDP would fail at its second iteration: the engine's mu and rho get
    no ``.grad``, which DDP accepts with ``find_unused_parameters=True`` or ``static_graph=True``
    (``who``: the optimiser that averages them itself, bbb.Engine or bbb.IVON)."""
    if getattr(ddp, "find_unused_parameters", False) or getattr(ddp, "static_graph", False):
        return
    covered = _covered(ddp)
    if any(id(p) in covered for p in fused):
        raise UserError(f"DistributedDataParallel around a model trained by {who} needs "
                        f"find_unused_parameters=True or static_graph=True ({who} averages the "
                        "gradient of mu and rho itself; they get no .grad)")


class Averager:
    """What the engine averages under one DDP module, over its process group."""

    def __init__(self, ddp: Any, extra: list[nn.Parameter]) -> None:
        self.ddp = ddp
        self.group = ddp.process_group
        self.world = dist.get_world_size(self.group)
        self.src = dist.get_global_rank(self.group, 0)
        covered = _covered(ddp)
        self.extra = [p for p in extra if id(p) not in covered]

    def broadcast(self, tensors: Iterable[Tensor]) -> None:
        """The first process's values of ``tensors`` (and of the extra parameters) everywhere."""
        with torch.no_grad():
            for t in [*tensors, *self.extra]:
                dist.broadcast(t.detach(), src=self.src, group=self.group)

    def average(self, g: Tensor | None, c: Tensor | None) -> None:
        """Average g and c (in place) and the extra parameters' gradients over the processes."""
        w = float(self.world)
        if g is not None:
            dist.all_reduce(g, group=self.group)
            g.div_(w)
        small = [] if c is None else [c.detach().reshape(1).to(torch.float64)]
        for p in self.extra:  # a gradient a process lacks counts as 0; it stays None where all lack it
            small.append(torch.zeros(p.numel() + 1, dtype=torch.float64, device=p.device) if p.grad is None
                         else torch.cat([p.grad.detach().reshape(-1).to(torch.float64),
                                         torch.ones(1, dtype=torch.float64, device=p.device)]))
        if not small:
            return
        flat = torch.cat([t.to(small[0].device) for t in small])
        dist.all_reduce(flat, group=self.group)
        if c is not None:
            c.copy_(flat[0] / w)
        pos = 0 if c is None else 1
        for p in self.extra:
            n = p.numel()
            if flat[pos + n] > 0:
                avg = (flat[pos:pos + n] / w).view_as(p).to(device=p.device, dtype=p.dtype)
                if p.grad is None:
                    p.grad = avg
                else:
                    p.grad.copy_(avg)
            pos += n + 1


def warn_without_ddp(who: str = "bbb.Engine") -> None:
    """One warning where several processes train but their forward never ran inside DDP."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    warnings.warn(f"{who}: torch.distributed runs {dist.get_world_size()} processes but the model's "
                  f"forward did not run inside DistributedDataParallel, so {who} does not average "
                  "gradients across them (each trains its own model); wrap the model in DDP to train one "
                  "model", UserWarning, stacklevel=4)
