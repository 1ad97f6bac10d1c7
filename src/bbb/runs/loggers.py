"""Experiment loggers: what :func:`bbb.runs.train` reports each epoch to TensorBoard, W&B, MLflow...

The protocol is :class:`TrainLogger`, three methods that :func:`~bbb.runs.train` calls (pass
``train(cfg, out, loggers=[...])``; ``bbb train --log tensorboard`` on the command line):

* ``start(run_dir, epoch, config)`` once, before the first epoch it trains: the run directory,
  the epochs already done (0, or the epoch a resumed run continues after) and config.json's
  contents;
* ``log_epoch(epoch, scalars, histograms)`` after each epoch, once its checkpoint and
  metrics.csv are written: ``scalars`` maps a tag to a number (:data:`SCALARS`) and
  ``histograms`` a tag to a 1-D CPU tensor: ``sigma/<layer>.<weight>``, the posterior standard
  deviations of each weight of each Bayesian layer, and ``snr_db/<layer>.<weight>``, their
  signal-to-noise ratios 10 log10(|mu|/sigma) (the quantity :func:`bbb.prune.prune` ranks by);
  none for a network without Bayesian layers;
* ``close()`` once, when training ends, stops or fails.

Any object with these three methods is a logger (subclass :class:`TrainLogger`, whose methods do
nothing, and override what you need). A W&B logger, for example::

    class WandbLogger(bbb.runs.TrainLogger):
        def start(self, run_dir, epoch, config):
            self.run = wandb.init(dir=run_dir, config=config, resume="allow")
        def log_epoch(self, epoch, scalars, histograms):
            self.run.log({**scalars, **{k: wandb.Histogram(v.numpy()) for k, v in histograms.items()}},
                         step=epoch)
        def close(self):
            self.run.finish()

MLflow's ``mlflow.log_metrics(scalars, step=epoch)`` fits ``log_epoch`` in the same way. An
exception raised by a logger stops training as any other error does (``last.pt`` keeps the last
completed epoch).

:class:`TensorBoardLogger` writes event files into ``RUN/tb/`` (``tensorboard --logdir RUN/tb``);
it needs the optional ``tensorboard`` package (``pip install tensorboard``),
without which making one is a one-line :class:`~bbb.errors.UserError` that says so.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import softplus
from ..errors import UserError
from ..nn import BayesModule
from ..options import choice
from .rundir import LOG_DIR

__all__ = ["LOGGERS", "SCALARS", "TensorBoardLogger", "TrainLogger", "epoch_histograms", "epoch_scalars",
           "log_step", "make_loggers", "opened_loggers", "report_epoch", "write_points"]

#: The scalar tags of each epoch and what they are (per training example where a loss).
SCALARS: dict[str, str] = {
    "train/elbo": "the evidence lower bound per training example: minus metrics.csv's train_loss (the free energy)",
    "train/nll": "the mean negative log-likelihood per training example (metrics.csv's nll)",
    "train/kl": "the KL divergence of the posterior from the prior in nats (metrics.csv's kl)",
    "val/error": "validation error of the mean network (when there is a validation set; regression: val/rmse)",
    "val/nll": "validation NLL per example of the mean network (metrics.csv's val_nll; --select-by nll picks by it)",
    "test/error": "test error of the mean network (with --test-each-epoch; regression: test/rmse)",
    "lr": "the learning rate of the epoch",
    "time/epoch_seconds": "the epoch's wall-clock seconds (metrics.csv's seconds)",
}


class TrainLogger:
    """An experiment logger (see the module's notes for when each method is called); every
    method here does nothing."""

    def start(self, run_dir: Path, epoch: int, config: Mapping[str, Any]) -> None:
        """Before training: the run directory, the epochs already done, config.json's contents."""

    def log_epoch(self, epoch: int, scalars: Mapping[str, float], histograms: Mapping[str, Tensor]) -> None:
        """After each epoch: :data:`SCALARS` and the per-layer sigma and SNR histograms."""

    def close(self) -> None:
        """When training ends, stops or fails."""


def _writer_class() -> Any:
    """torch's SummaryWriter, or a one-line UserError when the tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError("TensorBoard logging (--log tensorboard) needs the tensorboard package: "
                        "pip install tensorboard (or pip install '.[tensorboard]' in a clone of bbb)") from None
    return SummaryWriter


class TensorBoardLogger(TrainLogger):
    """Event files for TensorBoard in ``log_dir`` (default: ``RUN/tb``). A resumed run continues
    the same curves: the events a killed process wrote after its last checkpoint are purged
    (SummaryWriter's ``purge_step``); a new run (``--overwrite``, or one started afresh) removes
    the default ``RUN/tb`` of the run it replaces. Raises :class:`~bbb.errors.UserError` at once when the
    tensorboard package is not installed."""

    def __init__(self, log_dir: str | Path | None = None) -> None:
        _writer_class()  # refuse before training starts
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.writer: Any = None

    def start(self, run_dir: Path, epoch: int, config: Mapping[str, Any]) -> None:
        self.close()
        log_dir = self.log_dir if self.log_dir is not None else Path(run_dir) / LOG_DIR
        if not epoch and self.log_dir is None:  # a new run (or --overwrite): the old run's curves go
            shutil.rmtree(log_dir, ignore_errors=True)
        # the events after the last commit (a killed process's) are dropped; at epoch 0: all earlier ones
        self.writer = _writer_class()(str(log_dir), purge_step=epoch + 1)
        if not epoch:
            self.writer.add_text("config", "```\n" + json.dumps(dict(config), indent=1, default=str) + "\n```", 0)

    def log_epoch(self, epoch: int, scalars: Mapping[str, float], histograms: Mapping[str, Tensor]) -> None:
        for tag, v in scalars.items():
            self.writer.add_scalar(tag, v, epoch)
        for tag, h in histograms.items():
            h = h[torch.isfinite(h)]  # a pruned weight's SNR is -inf dB
            if h.numel():
                self.writer.add_histogram(tag, h, epoch)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


#: The loggers the command line names (``--log NAME``).
LOGGERS: dict[str, type[TrainLogger]] = {"tensorboard": TensorBoardLogger}


def make_loggers(names: Sequence[str] | None, log_dir: str | Path | None = None) -> list[TrainLogger]:
    """The loggers ``names`` (keys of :data:`LOGGERS`), each made now: a missing package is a
    one-line UserError before anything trains. ``log_dir``: where each writes instead of
    ``RUN/tb`` (an experiment of several networks in one folder: ``OUT/tb/<network>``)."""
    out = []
    for name in names or ():
        factory: Any = LOGGERS[choice("logger", name, list(LOGGERS))]
        out.append(factory() if log_dir is None else factory(log_dir))
    return out


@contextmanager
def opened_loggers(names: Sequence[str] | None, log_dir: str | Path,
                   config: Mapping[str, Any]) -> Iterator[list[TrainLogger]]:
    """The loggers ``names`` writing into ``log_dir`` (:func:`make_loggers`), started at epoch 0
    with ``config`` and closed on leaving: for the experiments that train outside
    :func:`~bbb.runs.train` (``bbb regression``, ``bbb bandit``)."""
    loggers = make_loggers(names, log_dir)
    try:
        for lg in loggers:
            lg.start(Path(log_dir), 0, config)
        yield loggers
    finally:
        for lg in loggers:
            lg.close()


def log_step(loggers: Sequence[TrainLogger], step: int, scalars: Mapping[str, float],
             model: nn.Module | None = None) -> None:
    """Each logger's :meth:`TrainLogger.log_epoch` of ``step``: ``scalars`` and, with ``model``,
    the sigma and SNR histograms of its Bayesian layers (:func:`epoch_histograms`)."""
    if not loggers:
        return
    hists = epoch_histograms(model) if model is not None else {}
    for lg in loggers:
        lg.log_epoch(step, dict(scalars), dict(hists))


def write_points(names: Sequence[str] | None, log_dir: str | Path, config: Mapping[str, Any],
                 points: Iterable[tuple[int, Mapping[str, float | None]]]) -> None:
    """Event files in ``log_dir`` written at once from stored ``(step, scalars)`` points, in
    step order (the scalars of one step merged; a ``None`` value left out), replacing what
    ``log_dir`` held: for the experiments whose networks train where no logger runs (``bbb
    reproduce uci`` and ``lora``: written from each job's file when the run ends)."""
    steps: dict[int, dict[str, float]] = {}
    for step, scalars in points:
        steps.setdefault(int(step), {}).update({k: float(v) for k, v in scalars.items() if v is not None})
    shutil.rmtree(log_dir, ignore_errors=True)
    with opened_loggers(names, log_dir, config) as loggers:
        for step in sorted(steps):
            log_step(loggers, step, steps[step])


def epoch_scalars(row: Mapping[str, Any], lr: float | None, error: str = "error") -> dict[str, float]:
    """The :data:`SCALARS` of one metrics.csv row (those it has) and the epoch's learning rate.
    Any other number of the row is logged too, ``val_X`` as ``val/X`` (``train_``, ``test_``
    alike), else as ``metrics/X``. ``error``: what the row's ``val_error`` and ``test_error``
    are (a regression run's: ``rmse``, logged as ``val/rmse``)."""
    out = {"train/elbo": -float(row["train_loss"]), "train/nll": float(row["nll"]), "train/kl": float(row["kl"])}
    if lr is not None:
        out["lr"] = float(lr)
    for key, v in row.items():
        if key in ("epoch", "train_loss", "nll", "kl") or v is None or isinstance(v, bool) \
                or not isinstance(v, int | float):
            continue
        split, _, rest = key.partition("_")
        rest = error if rest == "error" else rest
        tag = "time/epoch_seconds" if key == "seconds" else \
            f"{split}/{rest}" if split in ("train", "val", "test") and rest else f"metrics/{key}"
        out[tag] = float(v)
    return out


@torch.no_grad()
def epoch_histograms(model: nn.Module) -> dict[str, Tensor]:
    """``sigma/<layer>.<weight>`` and ``snr_db/<layer>.<weight>`` of every posterior of every
    Bayesian layer of ``model``, as flat float32 CPU tensors (none without Bayesian layers)."""
    out: dict[str, Tensor] = {}
    for name, m in model.named_modules():
        if not isinstance(m, BayesModule):
            continue
        for p in m.param_names():
            sigma = softplus(m.rho(p).float()).flatten()
            key = f"{name or 'model'}.{p}"
            out[f"sigma/{key}"] = sigma.cpu()
            out[f"snr_db/{key}"] = (10.0 * torch.log10(m.mu(p).float().flatten().abs() / sigma)).cpu()
    return out


def report_epoch(loggers: Sequence[TrainLogger], model: nn.Module, row: Mapping[str, Any], lr: float | None,
                 error: str = "error") -> None:
    """Each logger's :meth:`TrainLogger.log_epoch` of the epoch ``row`` (the histograms made once;
    ``error``: as :func:`epoch_scalars`)."""
    if not loggers:
        return
    scalars, hists = epoch_scalars(row, lr, error), epoch_histograms(model)
    for lg in loggers:
        lg.log_epoch(int(row["epoch"]), dict(scalars), dict(hists))
