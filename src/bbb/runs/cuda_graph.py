"""An epoch's training steps replayed from CUDA graphs (``bbb train --cuda-graph``, issue 74): on a
GPU one step of the paper's MLP is a few hundred small kernel launches, and Python's launching
them, not the arithmetic, sets the epoch's time; a captured graph launches them all at once.

:class:`GraphedEpoch` runs the same steps as :func:`bbb.runs.loop.run_epoch`, written so that a
step is the same code for every minibatch: the epoch's permutation, the step's index and the
epoch's sums live in device tensors it updates in place (the minibatch is chosen on the device,
the KL weight read from the device table at that index). Each step of a full minibatch runs
through :func:`~bbb.runs.loop.training_step` as ``run_epoch``'s does; the last, smaller
minibatch runs as ``run_epoch`` runs it. With ``capture`` (CUDA), after ``warmup`` steps run
eagerly, one step is captured for each of the engine's two noise parities
(:meth:`bbb.engine.Engine.capturing`) and the other full minibatches are replays of the graph of
the current parity (:meth:`~bbb.engine.Engine.replayed`); the deterministic MLP's step (a
capturable ``torch.optim`` optimiser, no ELBO) is one graph. The graphs are captured again after a
hyperparameter changes (a learning-rate schedule). Without ``capture`` the steps run eagerly (the
CPU, and the tests: the same numbers as ``run_epoch``, bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..elbo import ELBO
from ..engine import Engine
from ..engine.graphs import capture_problem
from ..errors import UserError

__all__ = ["GraphedEpoch", "StepGraphs", "check_capturable"]


class StepGraphs:
    """One training step run eagerly or replayed from CUDA graphs: ``step`` (no arguments) takes the
    minibatch whose index it reads from the device and moves that index on, so that every call is
    the same code. With ``capture``, after ``warmup`` eager calls (on a side stream, as torch asks
    before a capture) the step is captured, one graph per noise parity of bbb's engine
    (:meth:`bbb.engine.Engine.capturing`, each replay counted by :meth:`~bbb.engine.Engine.replayed`)
    or one graph for a capturable ``torch.optim`` optimiser, and later calls replay it. An epoch is
    :meth:`begin`, the calls, and :meth:`join` (also before any other work on the device: the
    warm-up's stream joins the current one); a hyperparameter changed since the graphs were
    captured (a learning-rate schedule) drops them at :meth:`begin` (the new value reaches the
    device in an eager step)."""

    def __init__(self, opt: torch.optim.Optimizer, step: Callable[[], None], device: torch.device, *,
                 capture: bool, warmup: int = 3) -> None:
        self.opt, self.step, self.device = opt, step, device
        self.capture, self.warmup = bool(capture), int(warmup)
        #: bbb's engine alternates two noise buffers (a graph per parity); a torch.optim optimiser
        #: (the deterministic MLP: capturable, its step count on the device) steps the same way
        #: each time (one graph)
        self.engine = opt if isinstance(opt, Engine) else None
        self.graphs: dict[int, Any] = {}
        self._key: tuple[Any, ...] | None = None
        self._eager = 0  # eager calls since the graphs were dropped
        self._side: Any = None
        #: how many steps ran from a graph (the tests read it)
        self.replays = 0

    def _hyper(self) -> tuple[Any, ...]:
        return tuple((k, v) for g in self.opt.param_groups for k, v in sorted(g.items()) if k != "params")

    def begin(self) -> None:
        """An epoch starts: the graphs dropped if a hyperparameter changed; the warm-up's stream."""
        key = self._hyper()
        if key != self._key:
            self.graphs.clear()
            self._key, self._eager = key, 0
        if self.capture and not self.graphs:
            self._side = torch.cuda.Stream(self.device)

    def join(self) -> None:
        """The warm-up's side stream joins the current one (before other work, and at the end)."""
        if self._side is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._side)
            self._side = None

    def _capture_graphs(self) -> None:
        """One graph per noise parity, each with a memory pool of its own (an epoch's odd number of
        steps changes which of the two replays first, and graphs that share a pool must replay
        in the order of their capture); nothing runs."""
        torch.cuda.synchronize(self.device)
        if self.engine is None:
            for group in self.opt.param_groups:  # (a state loaded from a run without --cuda-graph says False)
                if "capturable" in group:
                    group["capturable"] = True
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.step()
            self.graphs[0] = g
            return
        for parity in (self.engine.parity, 1 - self.engine.parity):
            g = torch.cuda.CUDAGraph()
            with self.engine.capturing(parity), torch.cuda.graph(g):
                self.step()
            self.graphs[parity] = g

    def __call__(self) -> None:
        parity = 0 if self.engine is None else self.engine.parity
        graph = self.graphs.get(parity)
        if graph is None and self.capture and self._eager >= self.warmup:
            self.join()
            self._capture_graphs()
            graph = self.graphs[parity]
        if graph is not None:
            graph.replay()
            if self.engine is not None:
                self.engine.replayed()
            self.replays += 1
            return
        if self._side is not None:
            self._side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self._side):
                self.step()
        else:
            self.step()
        self._eager += 1


def check_capturable(elbo: ELBO | None, opt: torch.optim.Optimizer, device: torch.device,
                     kl_weights: Tensor | None = None) -> None:
    """``--cuda-graph``'s checks, before anything is written: a GPU, and bbb's fused engine of an
    ELBO (:func:`bbb.engine.graphs.capture_problem`) or a capturable ``torch.optim`` optimiser
    without one (the deterministic MLP); else a one-line UserError that says to leave it out."""
    if device.type != "cuda":
        raise UserError(f"--cuda-graph captures the training step on a GPU; this run is on {device.type} "
                        "(leave it out there)")
    if isinstance(opt, Engine):
        problem = capture_problem(opt) if elbo is not None and kl_weights is not None else "no ELBO"
    elif elbo is None and all(g.get("capturable", True) for g in opt.param_groups):
        problem = None  # the deterministic MLP: torch.optim's capturable Adam, or SGD
    else:
        problem = f"{type(opt).__name__} is not capturable"
    if problem is not None:
        raise UserError(f"--cuda-graph cannot capture this run's step ({problem}); leave it out")


class GraphedEpoch:
    """The training steps of each epoch over ``x[perm]``, ``y[perm]`` in minibatches of
    ``batch_size``, as :func:`~bbb.runs.loop.run_epoch` takes them, from CUDA graphs where
    ``capture`` (:class:`StepGraphs`). ``kl_weights``: the ELBO's M minibatch weights on the device
    (:func:`~bbb.runs.loop.kl_weight_table`); ``step``: the training step,
    :func:`~bbb.runs.loop.training_step` (given by the loop, which imports this module)."""

    def __init__(self, model: nn.Module, elbo: ELBO | None, opt: torch.optim.Optimizer, x: Tensor, y: Tensor,
                 batch_size: int, kl_weights: Tensor | None, *, step: Callable[..., tuple[Tensor, Tensor, Tensor]],
                 capture: bool, warmup: int = 3) -> None:
        self.model, self.elbo, self.opt, self.training_step = model, elbo, opt, step
        self.x, self.y, self.kl_weights = x, y, kl_weights
        self.batch = int(batch_size)
        self.full = x.shape[0] // self.batch
        self.steps = math.ceil(x.shape[0] / self.batch)
        dev = x.device
        self.perm = torch.zeros(x.shape[0], dtype=torch.int64, device=dev)
        self.index = torch.zeros(1, dtype=torch.int64, device=dev)
        self.sums = torch.zeros(3, dtype=torch.float64, device=dev)
        self.graphs = StepGraphs(opt, self._step, dev, capture=capture, warmup=warmup)

    @property
    def replays(self) -> int:
        """How many steps ran from a graph."""
        return self.graphs.replays

    @classmethod
    def for_run(cls, model: nn.Module, elbo: ELBO | None, opt: torch.optim.Optimizer, x: Tensor, y: Tensor,
                batch_size: int, kl_weights: Tensor | None, *,
                step: Callable[..., tuple[Tensor, Tensor, Tensor]]) -> GraphedEpoch:
        """``bbb train --cuda-graph``'s epochs (capturing), after :func:`check_capturable`."""
        check_capturable(elbo, opt, x.device, kl_weights)
        return cls(model, elbo, opt, x, y, batch_size, kl_weights, step=step, capture=True)

    def _step(self) -> None:
        """Step ``index`` (a full minibatch), its numbers added into ``sums``: the same code for
        every index, all of it on the device."""
        b = self.batch
        idx = self.perm[: self.full * b].view(self.full, b).index_select(0, self.index).view(b)
        xb, yb = self.x.index_select(0, idx), self.y.index_select(0, idx)
        kl_w = None if self.kl_weights is None else self.kl_weights.index_select(0, self.index).view(())
        fe, nll, kl = self.training_step(self.model, self.elbo, self.opt, xb, yb, 0, kl_w)
        self.sums += torch.stack([fe.double(), nll.double(), kl.double()])
        self.index += 1

    def run(self, perm: Tensor, steps: Iterable[int] | None = None) -> Tensor:
        """One epoch over ``perm``; returns its (free energy, NLL, KL) sums, a float64 device
        tensor, unread. ``steps``: the minibatch indices, in order (a progress bar over
        ``range(M)``), default all M."""
        self.perm.copy_(perm)
        self.index.zero_()
        self.sums.zero_()
        self.graphs.begin()
        for i in steps if steps is not None else range(self.steps):
            if i >= self.full:  # the last, smaller minibatch: as run_epoch takes it
                self.graphs.join()
                self._last(i)
            else:
                self.graphs()
        self.graphs.join()
        return self.sums

    def _last(self, i: int) -> None:
        idx = self.perm[i * self.batch:]
        kl_w = None if self.kl_weights is None else self.kl_weights[i]
        fe, nll, kl = self.training_step(self.model, self.elbo, self.opt, self.x.index_select(0, idx),
                                         self.y.index_select(0, idx), i, kl_w)
        self.sums += torch.stack([fe.double(), nll.double(), kl.double()])
