"""The optimiser and the learning-rate schedule of a run's :class:`~bbb.runs.TrainConfig`
(:func:`make_optimizer`, :func:`make_scheduler`): the training loop's (:mod:`bbb.runs.loop`) and a
population's (:mod:`bbb.runs.population`)."""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..distributions import KLMode
from ..engine import Engine
from ..engine.engine import OptimizerKind
from ..engine.support import compile_from_env, unsupported_reason
from ..errors import UserError
from ..ivon import IVON
from ..options import LRSchedule, Method
from .config import FILE_DATASET, IN_MEMORY, TrainConfig
from .model import grouped_parameters, noise_group

__all__ = ["check_schedule_on_resume", "end_run_hint", "make_optimizer", "make_scheduler"]


def make_optimizer(cfg: TrainConfig, model: nn.Module, num_train: int | None = None,
                   member_lr_scale: Sequence[float] | None = None) -> torch.optim.Optimizer:
    """The optimiser of ``cfg``: for ``bbb``, the fused :class:`~bbb.engine.Engine` (seeded with
    ``cfg.seed``; it takes the plain path by itself where its kernel does not apply); for ``ivon``,
    :class:`bbb.IVON` (its noise seeded with ``cfg.seed``; ``ess`` = ``cfg.ess``, else
    ``num_train``, the training set's size); for the deterministic methods ``torch.optim.SGD`` or
    the fused ``torch.optim.Adam``. ``member_lr_scale``: a population's learning rates member by
    member as multiples of ``cfg.lr`` (the engine's; bbb only).

    A run on your own data (``data_file``) uses the eager kernels unless ``BBB_COMPILE=1``: a
    table's network is small and its run short, so a first compile costs more than it saves;
    the image datasets keep the engine's choice (:func:`bbb.engine.support.compile_default`)."""
    if member_lr_scale is not None and cfg.method != Method.BBB.value:
        raise UserError(f"learning rates member by member are the bbb engine's, not --method {cfg.method}'s")
    compile = compile_from_env()
    if compile is None and cfg.dataset == FILE_DATASET:
        compile = False
    if cfg.method == Method.IVON.value:
        ess = cfg.ess if cfg.ess is not None else num_train
        if ess is None:
            raise UserError("make_optimizer: --method ivon needs its effective sample size: set cfg.ess, or pass "
                            "num_train (the training set's size)")
        assert cfg.hess_init is not None and cfg.weight_decay is not None  # (TrainConfig fills them for ivon)
        return IVON(model, lr=cfg.lr, ess=ess, hess_init=cfg.hess_init, weight_decay=cfg.weight_decay,
                    seed=cfg.seed, compile=compile)
    own = noise_group(model, cfg)  # a homoscedastic network's noise parameter, at its own learning rate
    if cfg.method == Method.BBB.value:
        # a model the kernel cannot fuse (--estimator local or flipout) takes the plain path without the
        # engine's warning, whose remedy (fused=False) is the library's: the settings chose that path
        fused = None if unsupported_reason(model, KLMode(cfg.kl)) is None else False
        return Engine(model, cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum if cfg.optimizer == "sgd" else 0.0,
                      rho_lr_scale=cfg.rho_lr_scale, num_samples=cfg.samples, kl=cfg.kl, kl_samples=cfg.kl_samples,
                      seed=cfg.seed, compile=compile, member_lr_scale=member_lr_scale, params=own or None,
                      fused=fused)
    if cfg.optimizer == OptimizerKind.SGD.value:
        return torch.optim.SGD(grouped_parameters(model, own), lr=cfg.lr, momentum=cfg.momentum)
    params = grouped_parameters(model, own)
    # The fused Adam kernel (one pass over all parameters; CPU since torch 2.4); older torch falls back.
    # --cuda-graph: capturable (its step count on the device, safe to capture).
    try:
        return torch.optim.Adam(params, lr=cfg.lr, fused=True, capturable=cfg.cuda_graph)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - torch < 2.4 or other devices
        return torch.optim.Adam(params, lr=cfg.lr)


def make_scheduler(cfg: TrainConfig, opt: torch.optim.Optimizer) -> Any:
    """The learning-rate schedule of ``cfg`` on ``opt`` (None: constant), stepped after each epoch."""
    if cfg.lr_schedule == LRSchedule.COSINE.value:
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, cfg.epochs))
    if cfg.lr_schedule == LRSchedule.STEP.value:
        step = cfg.lr_step_size or max(1, cfg.epochs // 3)
        if cfg.lr_step_size and step >= cfg.epochs:  # (the first step after the last epoch: lr never changes)
            warnings.warn(f"--lr-step-size {step} has no effect here: --lr-schedule step lowers the learning rate "
                          f"after every {step} epochs, and the run has --epochs {cfg.epochs}; give a smaller "
                          "--lr-step-size (or leave it out: a third of --epochs)", stacklevel=3)
        return torch.optim.lr_scheduler.StepLR(opt, step_size=step, gamma=cfg.lr_gamma)
    return None


def _schedule_length(cfg: TrainConfig, epochs: int) -> int | None:
    """The number of epochs :func:`make_scheduler`'s schedule takes from ``epochs`` (cosine's
    ``T_max``, step's step size when ``lr_step_size`` is 0); None when it does not depend on them."""
    if cfg.lr_schedule == LRSchedule.COSINE.value:
        return max(1, epochs)
    if cfg.lr_schedule == LRSchedule.STEP.value and not cfg.lr_step_size:
        return max(1, epochs // 3)
    return None


def end_run_hint(cfg: TrainConfig, out: Path, epochs: int) -> str:
    """The command that ends the stopped run ``out`` at its ``epochs`` completed ones (nothing more
    trained: its summary from best.pt) as the end of an error line, where resuming with ``--epochs
    epochs`` is allowed; empty where not (none completed, a schedule whose length is the epochs', or
    data given in memory, which the command cannot load)."""
    if epochs < 1 or cfg.data_source == IN_MEMORY or _schedule_length(cfg, epochs) != _schedule_length(cfg, cfg.epochs):
        return ""
    return f"; or end the run at epoch {epochs}: bbb train --resume --out {shlex.quote(str(out))} --epochs {epochs}"


def check_schedule_on_resume(stored_epochs: int, cfg: TrainConfig, what: str) -> None:
    """Refuse to resume ``what`` (a run written with ``stored_epochs``) with ``cfg.epochs`` where the
    learning-rate schedule's length derives from the epochs: the checkpointed schedule keeps the
    length it started with (cosine would climb back from 0), which the run's config would not say."""
    was, now = _schedule_length(cfg, stored_epochs), _schedule_length(cfg, cfg.epochs)
    if was == now:
        return
    how = ("anneals to 0 over" if cfg.lr_schedule == LRSchedule.COSINE.value
           else f"steps every {was} epochs, a third of")
    raise UserError(f"cannot resume {what} with epochs {cfg.epochs}: its --lr-schedule {cfg.lr_schedule} {how} the "
                    f"{stored_epochs} epochs it started with; resume with --epochs {stored_epochs}, or train a new "
                    f"run with --epochs {cfg.epochs}")
