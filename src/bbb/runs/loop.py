"""The epoch loop: :func:`train` trains one network into a run directory (section 5.1 of the paper).

One function trains one network: :func:`train` takes a :class:`TrainConfig` and a run directory
and leaves there::

    config.json    every setting, the seed, library versions, torch's thread count
    metrics.csv    one row per epoch: epoch, seconds, train_loss, nll, kl, val_error, test_error,
                   val_nll
    summary.json   final test/validation error (mean weights and k-sample average), timings
    last.pt        checkpoint of the last completed epoch (written atomically every epoch, or
                   every ``checkpoint_every`` epochs, see below)
    best.pt        checkpoint of the best epoch by ``select_by``: the lowest validation NLL
                   (``"nll"``, the default for your own data) or error (``"error"``, MNIST's)
    .lock          flock-ed by the process training there (its pid); see :mod:`bbb.runs.rundir`

The best epoch (``select_by``): ``"error"``, the paper's early stopping, takes the lowest
validation error (a regressor's RMSE); ``"nll"``, the default for your own data, the lowest
validation NLL per example of the mean weights (in the target's units for regression): on a
table's validation set of tens of rows the error moves in large steps, and an undertrained
early epoch can win it by luck. Ties go to the earlier epoch; ``metrics.csv`` holds both.

Objective and loss scale. For ``method="bbb"`` the optimised quantity for minibatch i of M is the
paper's minibatch free energy divided by the minibatch size B::

    (pi_i * KL[q || P] + sum_{n in batch} -log p(y_n | x_n, w)) / B

(the NLL averaged over k Monte Carlo samples, ``pi_i`` from ``kl_weighting``). Dividing by B puts
the loss on a per-example scale, so learning rates are comparable with the deterministic
baselines (``sgd``, ``dropout``), which minimise the mean cross-entropy; the minimiser is the
same. The logged ``train_loss`` is the epoch's free energy per training example,
(sum_i loss_i) / N; ``nll`` the mean per-example NLL; ``kl`` the mean over the epoch's minibatches
of the full KL in nats (summed over every weight). A regression run's ``train_loss`` and ``nll`` are
on the standardised target (the objective optimised), its ``val_nll`` in the target's units: they
differ by log(the target's sd) per example. For ``method="ivon"`` (:class:`bbb.IVON`, on the
same network as ``bbb``) the loss is the mean NLL under IVON's weight samples, with no KL term
(IVON's prior, a Gaussian of precision ``ess * weight_decay``, is in its update):
``train_loss`` and ``nll`` are then that NLL and ``kl`` is 0.

Data live on the device as tensors; each epoch shuffles with a seeded ``torch.randperm`` and
slices, with no host-device synchronisation inside it (:func:`run_epoch`: the permutation copied
asynchronously from pinned memory, the KL weight a device scalar from a device table, the engine's
per-step numbers on the device, the epoch's sums, divergence check and error counts read once
after it). All randomness (initialisation, shuffling, weight noise, dropout) flows from the global
torch RNG seeded with ``seed`` and the shuffling generator, both checkpointed: a killed run resumed
with ``resume=True`` continues exactly where it stopped (bit for bit on CPU). A resume on other
data (another row count or other values: ``model_info``'s ``num_train`` and ``train_sum``) is refused.

Commit order of an epoch: ``last.pt`` (the commit point: model, optimiser, RNG states, the
metrics history, the best epoch so far), then ``best.pt`` when validation improved (the same
state), then ``metrics.csv``; ``summary.json`` after the last epoch. A process killed anywhere
leaves ``last.pt`` of the previous or of this epoch, and resuming rewrites the derived files from
it (:func:`bbb.runs.checkpoint.repair_derived`), so the run ends as if never killed.

``checkpoint_every`` N > 1 (``--checkpoint-every``; a large network's checkpoint on a GPU costs an
epoch) commits every N-th epoch and the last, keeping the epochs between in memory (a copy of the
state, on the device): Ctrl-C, a divergence or another exception first commits the last completed
epoch; a process killed outright resumes from the last commit, exactly. ``best.pt`` and
``metrics.csv`` are written with ``last.pt`` (``best.pt`` the best epoch so far, perhaps between).
"""

from __future__ import annotations

import contextlib
import copy
import math
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..data.arrays import data_kind
from ..data.files import Preprocess
from ..devices import resolve_device
from ..elbo import ELBO, HeteroscedasticGaussian, Likelihood
from ..engine import Engine
from ..errors import CheckpointError, TrainingDiverged, TrainingInterrupted, UserError, reason_of
from ..io import atomic_torch_save, atomic_write_json, atomic_write_text
from ..ivon import IVON
from ..nn import forward_samples
from ..options import Method, is_bayesian
from ..progress import progress_bar
from . import model as runmodel
from .checkpoint import CHECKPOINT_FORMAT, diverged_text, improves, load_last, metrics_text, repair_derived
from .config import TrainConfig, resume_conflicts
from .cuda_graph import GraphedEpoch
from .evaluation import check_memory, mean_logits
from .loggers import TrainLogger, report_epoch
from .model import DATA_KEYS, build_model, check_data, num_weights, versions
from .optim import check_schedule_on_resume, end_run_hint, make_optimizer, make_scheduler
from .rundir import guard_run_dir, keep_started, new_run_id, remove_results
from .summary import finish_classifier, finish_regression

__all__ = ["batch_objective", "kl_weight_table", "run_epoch", "train", "training_step"]


def batch_objective(
    model: nn.Module, elbo: ELBO | None, xb: Tensor, yb: Tensor, batch_index: int,
    kl_weight: Tensor | None = None, likelihood: Likelihood | None = None, num_samples: int = 1,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss to optimise, free-energy term, summed NLL, KL) of one minibatch.

    bbb: ``out.loss / B`` is optimised (the paper's minibatch free energy per example);
    sgd/dropout and ivon (inside :meth:`bbb.IVON.sampling`: no KL term, IVON's prior is its own):
    the mean cross-entropy, or the mean negative log-likelihood of ``likelihood`` (a regression
    run's Gaussian, the one bbb's ELBO uses), averaged over ``num_samples`` weight samples
    (:func:`bbb.forward_samples`; ivon's ``--train-samples``). The other three are detached, for
    the epoch sums. ``kl_weight``: the minibatch's KL weight as a device scalar
    (:func:`kl_weight_table`), else the ELBO's weight of ``batch_index``.
    """
    b = xb.shape[0]
    if elbo is not None:
        out = elbo(xb, yb, batch_index=batch_index if kl_weight is None else None, kl_weight=kl_weight)
        return out.loss / b, out.loss.detach(), out.nll.detach(), out.kl.detach()
    if num_samples > 1:  # (k, B, C): the NLL of each sample, averaged over the k
        logits = forward_samples(model, xb, num_samples).float()
        if likelihood is not None:
            nll = -likelihood.log_prob(logits, yb).sum() / num_samples
        else:
            nll = F.cross_entropy(logits.flatten(0, 1), yb.repeat(num_samples), reduction="sum") / num_samples
    elif likelihood is not None:
        nll = -likelihood.log_prob(model(xb).float(), yb).sum()
    else:
        nll = F.cross_entropy(model(xb).float(), yb, reduction="sum")
    zero = torch.zeros((), device=xb.device)
    return nll / b, nll.detach(), nll.detach(), zero


def training_step(model: nn.Module, elbo: ELBO | None, opt: torch.optim.Optimizer, xb: Tensor, yb: Tensor,
                  batch_index: int, kl_weight: Tensor | None = None, likelihood: Likelihood | None = None,
                  num_samples: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """One optimisation step on a minibatch; returns its (free energy, summed NLL, KL), detached.

    The step ``bbb train`` takes (and the bench times): the objective under the optimiser's weight
    sample when ``opt`` is an :class:`~bbb.engine.Engine` or a :class:`bbb.IVON`, then zero_grad /
    backward / step. ``num_samples``: :func:`batch_objective`'s (without an ELBO).
    """
    ctx = opt.sampling() if isinstance(opt, Engine | IVON) else contextlib.nullcontext()
    with ctx:
        loss, fe, nll, kl = batch_objective(model, elbo, xb, yb, batch_index, kl_weight, likelihood,
                                            num_samples=num_samples)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return fe, nll, kl


def kl_weight_table(elbo: ELBO | None, model: nn.Module, device: torch.device) -> Tensor | None:
    """The ELBO's M minibatch KL weights as a tensor on ``device`` in the model's dtype (the
    values the ELBO applies, rounded as it rounds them), made once per run; None without an ELBO."""
    if elbo is None:
        return None
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    weights = torch.tensor([elbo.kl_weight(i) for i in range(elbo.num_batches)], dtype=torch.float64)
    return weights.to(dtype).to(device)


def run_epoch(model: nn.Module, elbo: ELBO | None, opt: torch.optim.Optimizer, x: Tensor, y: Tensor,
              perm: Tensor, batch_size: int, *, kl_weights: Tensor | None = None,
              autocast: Callable[[], Any] = contextlib.nullcontext, steps: Any = None,
              likelihood: Likelihood | None = None, num_samples: int = 1) -> Tensor:
    """The training steps of one epoch over ``x[perm]``, ``y[perm]`` in minibatches of ``batch_size``.

    Returns the epoch's sums (free energy, NLL, KL) as a float64 tensor on the device, unread: the
    loop has no host-device synchronisation (what ``torch.cuda.set_sync_debug_mode("error")``
    checks). ``kl_weights``: :func:`kl_weight_table`; each minibatch's weight is copied into one
    device scalar, in place. ``steps``: the minibatch indices to run (a progress bar over
    ``range(M)``), default all M. ``likelihood``: a regression run's (sgd/dropout/ivon; bbb's is the
    ELBO's). ``num_samples``: weight samples per step without an ELBO (ivon's ``--train-samples``).
    """
    sums = torch.zeros(3, dtype=torch.float64, device=x.device)  # free energy, nll, kl
    kl_w = None if kl_weights is None else torch.zeros((), dtype=kl_weights.dtype, device=kl_weights.device)
    if steps is None:
        steps = range(math.ceil(perm.shape[0] / batch_size))
    for i in steps:
        idx = perm[i * batch_size:(i + 1) * batch_size]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        if kl_w is not None:
            kl_w.copy_(kl_weights[i])  # type: ignore[index]
        with autocast():
            fe, nll, kl = training_step(model, elbo, opt, xb, yb, i, kl_w, likelihood, num_samples)
        sums += torch.stack([fe.double(), nll.double(), kl.double()])
    return sums


def _to_device(t: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device``: to a GPU asynchronously, from pinned memory (no sync)."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _check_training_memory(cfg: TrainConfig, in_features: int, num_classes: int, device: torch.device) -> None:
    """Refuse a network whose weights and gradients alone exceed the device's memory (a lower
    bound of what training needs), before anything is allocated."""
    widths = [in_features, *cfg.hidden, num_classes]
    weights = sum(a * b + b for a, b in zip(widths, widths[1:]))
    per_weight = 4 if is_bayesian(cfg.method) else 2  # (mu, rho) or w, and their gradients
    activations = cfg.samples * cfg.batch_size * max(widths)
    images = cfg.data_file is not None and data_kind(cfg.data_file) == "folder"  # (--image-size: the inputs)
    check_memory(4 * (per_weight * weights + activations), device,
                 f"training {cfg.method} {'x'.join(map(str, cfg.hidden))} ({weights:,} weights"
                 + (f", {in_features:,} inputs a pixel each" if images else "") + ")",
                 f"a smaller {'--image-size, ' if images else ''}--hidden, --batch-size or --train-samples")


@torch.no_grad()
def validation_sums(model: nn.Module, x: Tensor, y: Tensor, likelihood: Likelihood | None = None) -> Tensor:
    """(errors, summed NLL) of the mean weights on ``(x, y)``, a float64 device tensor read with the
    epoch's sums: the misclassified count and the cross-entropy, or with ``likelihood`` (a
    regression run's) the squared error of the mean output and the Gaussian NLL."""
    if x.shape[0] == 0:
        return torch.zeros(2, dtype=torch.float64, device=x.device)
    out = mean_logits(model, x).float()
    if likelihood is None:
        errors = (out.argmax(-1) != y).sum().double()
        nll = F.cross_entropy(out, y, reduction="sum").double()
    else:
        errors = ((out[:, 0].double() - y.double()) ** 2).sum()
        nll = -likelihood.log_prob(out, y).double().sum()
    return torch.stack([errors, nll])


def _divergence_advice(cfg: TrainConfig, model: nn.Module, elbo: ELBO | None, last_path: Path, xb: Tensor,
                       yb: Tensor, likelihood: Likelihood | None, num_samples: int, start: int) -> str:
    """What to change after a divergence: a lower --lr, unless the first minibatch's loss or gradient
    is not finite at the weights of ``last_path`` already, before any step (no learning rate helps)."""
    model.load_state_dict(load_last(last_path.parent)["model"])
    model.zero_grad(set_to_none=True)
    loss = batch_objective(model, elbo, xb, yb, 0, None, likelihood, num_samples)[0]
    loss.backward()
    if bool(torch.isfinite(loss)) and all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()
                                          if p.grad is not None):
        return "try a lower --lr"
    bbb = cfg.method == Method.BBB.value
    what = "a huge --sigma-init or --mu-init-scale, a tiny --prior-sigma or --sigma2, " if bbb else ""
    return (f"its loss or gradient is not finite at epoch {start}'s weights already, before any step, so a lower --lr "
            f"does not help: look for settings or inputs that overflow float32 ({what}inputs of a huge scale)")


def _all_finite(model: nn.Module) -> Tensor:
    """Whether every parameter is finite, as a device boolean (read with the epoch's sums)."""
    return torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.2f}%" if pct else f"{v:.4g}"


def train(
    cfg: TrainConfig,
    out: str | Path,
    *,
    data: dict[str, Tensor] | None = None,
    preprocess: Preprocess | None = None,
    resume: bool | Literal["auto"] = False,
    overwrite: bool = False,
    lock_wait: float | None = 0.0,
    quiet: bool = False,
    log: Callable[[str], None] | None = None,
    on_epoch: Callable[[dict[str, Any]], bool | None] | None = None,
    loggers: Sequence[TrainLogger] = (),
) -> dict[str, Any]:
    """Train ``cfg`` into the run directory ``out`` and return the summary (also summary.json).

    Args:
        cfg: the settings.
        out: run directory (created). A fresh run refuses a directory holding any file of a
            previous run (:data:`~bbb.runs.rundir.RUN_FILES`) unless ``overwrite``. The run holds
            an exclusive lock on ``out/.lock`` throughout; a second process is refused.
        data: pre-loaded tensors (keys train_x, train_y, val_x, val_y, test_x, test_y; optional
            ``num_classes``) instead of loading ``cfg.dataset`` (tests inject tiny data this way);
            float targets make a regression run (standardised targets, or ``preprocess.y`` says
            how to bring them back to their units).
        preprocess: what was done to ``data``'s raw inputs (:class:`bbb.data.files.Preprocess`),
            kept in the checkpoint so :func:`bbb.runs.load_model` and ``bbb predict`` take raw inputs;
            without ``data``, the loaded split's own.
        resume: True: continue from ``out/last.pt``, which must exist (settings other than
            epochs, device, data_dir, test_each_epoch, eval_samples, bf16 and checkpoint_every must
            match the stored ones); ``"auto"``: continue when ``last.pt`` exists, else start afresh
            (replacing what an interrupted start left); False: a new run.
        overwrite: a new run removes the previous run's files in ``out`` first.
        lock_wait: seconds to wait for another process's lock on ``out`` before refusing;
            None takes no lock (the sweep finalises a trial whose worker Ray is still stopping).
        quiet: one log line per epoch instead of a tqdm progress bar.
        log: where log lines go (default: print to stdout); pass ``lambda s: None`` for silence.
        on_epoch: called after each epoch (once its checkpoints and metrics.csv are written)
            with a copy of the metrics row; returning True stops training there, and the
            summary is written for the epochs done (``bbb sweep`` reports to Ray Tune here).
        loggers: experiment loggers (:class:`~bbb.runs.loggers.TrainLogger`: TensorBoard, W&B,
            MLflow...), given each epoch's ELBO, NLL, KL, errors, learning rate and the per-layer
            sigma and SNR histograms.

    Raises:
        TrainingDiverged: NaN/inf loss (``last.pt`` keeps the last good epoch).
        TrainingInterrupted: Ctrl-C (``last.pt`` holds the last completed epoch).
        UserError: bad settings, missing data, a mismatching checkpoint, nothing to resume, a
            previous run in ``out`` (fresh run without ``overwrite``), ``out`` in use by another
            process (:class:`~bbb.errors.RunDirBusy`). Nothing in ``out`` changes then.
        OutOfMemory: the network cannot fit the device (checked before allocating).
        DiskFullError: no space left while writing a file (an ``OSError``; the files written keep
            their last complete version).
    """
    out = Path(out)
    with guard_run_dir(out, resume, overwrite, lock_wait, cfg.data_file) as resuming:
        try:
            return _train(cfg, out, data=data, preprocess=preprocess, resume=resuming, quiet=quiet, log=log,
                          on_epoch=on_epoch, loggers=loggers)
        finally:
            for lg in loggers:
                lg.close()


def _train(
    cfg: TrainConfig,
    out: Path,
    *,
    data: dict[str, Tensor] | None,
    preprocess: Preprocess | None,
    resume: bool,
    quiet: bool,
    log: Callable[[str], None] | None,
    on_epoch: Callable[[dict[str, Any]], bool | None] | None,
    loggers: Sequence[TrainLogger] = (),
) -> dict[str, Any]:
    if log is None:
        def log(s: str) -> None:
            print(s, flush=True)
    last_path, best_path = out / "last.pt", out / "best.pt"
    ckpt: dict[str, Any] | None = None
    if data is not None:  # recorded: tensors that are not cfg.dataset's are refused where a run's data are loaded
        check_data(data)
        cfg = cfg.replace(data_source=runmodel.data_source_of(cfg, data))
    if resume:  # guard_run_dir made sure that last.pt exists
        ckpt = load_last(out)
        if data is None:  # a run on tensors given in memory: refused where its data would be loaded
            cfg = cfg.replace(data_source=ckpt["config"].get("data_source"))
        group = ckpt.get("population")
        if isinstance(group, dict):  # bbb.runs.population: its state is the population's
            raise UserError(f"cannot resume {out} alone: it trains as member {group.get('member')} of a population "
                            f"whose state is in {group.get('dir')}; resume that population (the command that "
                            "trained it)")
        stored_cfg = dict(ckpt["config"])
        if stored_cfg.get("task") is None and cfg.task == (dict(ckpt.get("model_info") or {}).get("preprocess")
                                                            or {}).get("task"):
            stored_cfg["task"] = cfg.task  # --task saying what the run inferred: the same run ('was None' before)
        diff = resume_conflicts(stored_cfg, cfg)
        if diff:
            k, was, new = diff[0]
            raise UserError(f"cannot resume {out}: setting {k!r} was {was!r}, now {new!r} "
                            "(only epochs, device, data-dir, test-each-epoch, eval-samples, bf16, checkpoint-every "
                            "may change)")
        check_schedule_on_resume(int(stored_cfg.get("epochs", cfg.epochs)), cfg, str(out))
        done = int(ckpt.get("epoch", 0))
        if cfg.epochs < done:  # else nothing trains, and config.json would say the run has cfg.epochs
            raise UserError(f"cannot resume {out} with epochs {cfg.epochs}: it holds {done} epochs already; give "
                            f"--epochs {done} or more to continue it (its best.pt and last.pt are kept as they are)")

    device = resolve_device(cfg.device)
    use_bf16 = cfg.bf16 and device.type == "cuda"
    if cfg.bf16 and not use_bf16:
        warnings.warn("--bf16 is ignored on CPU (bf16 autocast is used on CUDA only)", stacklevel=2)

    torch.manual_seed(cfg.seed)
    if data is None:
        stored = dict(ckpt["model_info"]).get("preprocess") if ckpt is not None else None
        data, preprocess = runmodel.load_split(cfg, stored, new_run=ckpt is None)
    check_data(data)
    cfg.check_split(*(int(data[f"{k}_x"].shape[0]) for k in ("train", "val", "test")))
    regression = bool(data["train_y"].is_floating_point())
    task = "regression" if regression else "classification"
    if preprocess is not None and preprocess.task != task:
        raise UserError(f"the data's targets are for {task} but the preprocessing says {preprocess.task}")
    if not regression and cfg.likelihood != "heteroscedastic":
        raise UserError("--likelihood applies to regression; this run's target is a class label")
    if regression:
        num_classes = 2  # the Gaussian's mean and noise
        y_scale = float(preprocess.y.std) if preprocess is not None and preprocess.y is not None else 1.0
    else:
        num_classes = int(data.get("num_classes", 0)) or int(
            max(int(data[k].max()) for k in ("train_y", "val_y", "test_y") if data[k].numel()) + 1)
    data = {k: data[k].to(device, torch.float32 if k.endswith("_x") or regression else torch.int64)
            for k in DATA_KEYS}
    x, y = data["train_x"], data["train_y"]
    n, in_features = x.shape[0], int(x.shape[1])
    bsz = cfg.batch_size
    num_batches = math.ceil(n / bsz)
    cfg.warn_moot_kl_weighting(num_batches)

    _check_training_memory(cfg, in_features, num_classes, device)
    model = build_model(cfg, in_features, num_classes, task).to(device)
    likelihood = HeteroscedasticGaussian() if regression else None
    elbo = (ELBO(model, likelihood or "categorical", num_batches=num_batches, kl_weighting=cfg.kl_weighting,
                 num_samples=cfg.samples, kl=cfg.kl, kl_samples=cfg.kl_samples)
            if cfg.method == Method.BBB.value else None)
    opt = make_optimizer(cfg, model, n)
    sched = make_scheduler(cfg, opt)
    kl_table = kl_weight_table(elbo, model, device)
    graphed = (GraphedEpoch.for_run(model, elbo, opt, x, y, bsz, kl_table, step=training_step)
               if cfg.cuda_graph else None)  # (TrainConfig: method bbb, no bf16); before any file is written
    gen = torch.Generator().manual_seed(cfg.seed)
    metrics: list[dict[str, Any]] = []
    best: dict[str, Any] = {"epoch": 0, "val_error": None, "val_nll": None}
    start_epoch = 0
    model_info: dict[str, Any] = {"in_features": in_features, "num_classes": num_classes, "num_train": n,
                                  "task": task, "train_sum": float(x.double().sum() + y.double().sum())}
    if preprocess is not None:
        model_info["preprocess"] = preprocess.to_dict()

    if ckpt is not None:
        was = dict(ckpt["model_info"])
        if was.get("in_features") != in_features or was.get("num_classes") != num_classes or \
                was.get("num_train", n) != n or not math.isclose(was.get("train_sum", model_info["train_sum"]),
                                                                 model_info["train_sum"], rel_tol=1e-9, abs_tol=1e-6):
            raise UserError(f"cannot resume {out}: the data are not those it trained on ({was.get('num_train')} "
                            f"training rows, these {n}, or other values): resume with the same data")
        try:
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["optimizer"])
            if sched is not None and ckpt.get("scheduler") is not None:
                sched.load_state_dict(ckpt["scheduler"])
            gen.set_state(ckpt["rng"]["shuffle"])
            torch.set_rng_state(ckpt["rng"]["torch"])
            if device.type == "cuda" and ckpt["rng"].get("cuda") is not None:
                torch.cuda.set_rng_state(ckpt["rng"]["cuda"], device)
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise CheckpointError(f"checkpoint {last_path} cannot be resumed ({reason_of(e)})") from None
        metrics = [dict(r) for r in ckpt.get("metrics", [])]
        start_epoch = int(ckpt["epoch"])
        log(f"resuming {out} after epoch {start_epoch}")
        best = repair_derived(out, ckpt, log)  # first: where it refuses (a damaged best.pt), nothing is lost
        if start_epoch < cfg.epochs:  # it trains on: what was made from its checkpoints before is stale
            # summary.json too, written again at the end: a resumed run killed before it is one stopped
            # before its end, not a finished one whose test numbers are of an older best checkpoint
            removed = [f for f in remove_results(out, also=("summary.json",)) if f != "summary.json"]
            if removed:  # a warning, not a progress line: said with bbb's --quiet too
                warnings.warn(f"removed {', '.join(removed)} from {out} (made from the run before it trained on; "
                              "run the commands that wrote them again)", UserWarning, stacklevel=2)

    lib_versions = versions()
    threads = torch.get_num_threads()
    config_json = {
        **cfg.to_dict(), "versions": lib_versions, "device_used": str(device), "threads": threads,
        "num_train": n, "num_val": int(data["val_x"].shape[0]), "num_test": int(data["test_x"].shape[0]),
        "num_batches": num_batches, "num_weights": num_weights(model), "argv": sys.argv[1:],
    }
    if isinstance(opt, IVON):  # the effective sample size used (the setting ess: null means num_train)
        config_json["ess_used"] = opt.param_groups[0]["ess"]
    if preprocess is not None and preprocess.kind != "image":
        config_json["preprocess"] = preprocess.to_dict()

    def checkpoint(epoch: int) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": None if sched is None else sched.state_dict(),
            "epoch": epoch,
            "rng": {"shuffle": gen.get_state(), "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None},
            "metrics": [dict(r) for r in metrics],
            "best": dict(best),
            "config": cfg.to_dict(),
            "model_info": dict(model_info),
            "versions": lib_versions,
            "threads": threads,
        }

    if ckpt is not None:  # the command, threads and device that started the run stay; this one's under resumed
        config_json = keep_started(out, config_json, start_epoch)
    else:
        config_json["run_id"] = new_run_id()
    if ckpt is None:  # epoch 0 first: a run killed during its first epoch can be resumed too
        atomic_torch_save(last_path, checkpoint(0))
        atomic_write_text(out / "metrics.csv", metrics_text(metrics))
    atomic_write_json(out / "config.json", config_json)
    for lg in loggers:
        lg.start(out, start_epoch, config_json)

    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else contextlib.nullcontext
    has_val = data["val_x"].shape[0] > 0
    every = cfg.checkpoint_every
    # with every > 1: the last completed epoch's state and the best epoch's, where not yet on disk (copies)
    pending: dict[str, Any] | None = None
    pending_best: dict[str, Any] | None = None

    def commit(state: dict[str, Any], best_state: dict[str, Any] | None) -> None:
        """last.pt (the commit point), then best.pt when the best epoch is not on disk yet, then metrics.csv."""
        nonlocal pending, pending_best
        atomic_torch_save(last_path, state)
        pending = pending_best = None  # committed (best_state is the caller's)
        if best_state is not None:
            atomic_torch_save(best_path, best_state)
        atomic_write_text(out / "metrics.csv", metrics_text(state["metrics"]))

    def flush() -> None:
        """Commit the completed epochs held in memory (a stop, a divergence, an error)."""
        if pending is not None:
            commit(pending, pending_best)

    try:
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            t0 = time.perf_counter()
            lr = float(opt.param_groups[0]["lr"])  # this epoch's (the scheduler steps after it)
            model.train()
            perm = _to_device(torch.randperm(n, generator=gen), device)
            bar = None
            steps: Any = range(num_batches)
            if not quiet:
                last = metrics[-1] if metrics else {}
                # a bar over the epoch's minibatches on a terminal; nothing in a log (the epoch's line below)
                bar = progress_bar(steps, desc=f"epoch {epoch}/{cfg.epochs}", unit="batch")
                if last:
                    bar.set_postfix(loss=_fmt(last["train_loss"]), val_err=_fmt(last["val_error"], not regression))
                steps = bar
            if graphed is not None:
                sums = graphed.run(perm, steps)
            else:
                sums = run_epoch(model, elbo, opt, x, y, perm, bsz, kl_weights=kl_table, autocast=autocast,
                                 steps=steps, likelihood=likelihood if elbo is None else None,
                                 num_samples=cfg.samples if cfg.method == Method.IVON.value else 1)
            if bar is not None:
                bar.close()
            # the epoch's one synchronisation: its sums, whether the weights are finite, the error counts
            parts = [sums, _all_finite(model).double().view(1)]
            if has_val:
                parts.append(validation_sums(model, data["val_x"], data["val_y"], likelihood))
            if cfg.test_each_epoch:
                parts.append(validation_sums(model, data["test_x"], data["test_y"], likelihood)[:1])
            read = torch.cat(parts).tolist()
            fe_sum, nll_sum, kl_sum = read[:3]
            if not (math.isfinite(fe_sum) and read[3]):
                flush()  # last.pt: the epoch before, whose weights tell a start already not finite from a step
                ivon_k = cfg.samples if cfg.method == Method.IVON.value else 1
                raise TrainingDiverged(diverged_text(epoch, fe_sum, last_path, _divergence_advice(
                    cfg, model, elbo, last_path, x[:bsz], y[:bsz], likelihood, ivon_k, epoch - 1))
                    + end_run_hint(cfg, out, epoch - 1))
            if sched is not None:
                sched.step()
            val_error = read[4] / data["val_x"].shape[0] if has_val else None
            val_nll = read[5] / data["val_x"].shape[0] if has_val else None
            n_test = data["test_x"].shape[0]
            test_error = read[-1] / n_test if cfg.test_each_epoch and n_test else None
            if regression:  # the root mean squared error and the NLL, in the target's units
                val_error = None if val_error is None else math.sqrt(val_error) * y_scale
                val_nll = None if val_nll is None else val_nll + math.log(y_scale)
                test_error = None if test_error is None else math.sqrt(test_error) * y_scale
            row = {
                "epoch": epoch,
                "seconds": time.perf_counter() - t0,
                "train_loss": fe_sum / n,
                "nll": nll_sum / n,
                "kl": kl_sum / num_batches,
                "val_error": val_error,
                "test_error": test_error,
                "val_nll": val_nll,
            }
            metrics.append(row)
            improved = improves(cfg.select_by, row, best)
            if improved:
                best = {"epoch": epoch, "val_error": val_error, "val_nll": val_nll}
            state = checkpoint(epoch)
            if every == 1 or epoch % every == 0 or epoch == cfg.epochs:
                commit(state, state if improved else pending_best)  # the files below derive from last.pt
            else:  # kept until the next commit (or a stop): a copy, as training goes on in place
                pending = copy.deepcopy(state)
                if improved:
                    pending_best = pending
            name = "rmse" if regression else "err"
            msg = (f"epoch {epoch}/{cfg.epochs}  loss {row['train_loss']:.4f}  nll {row['nll']:.4f}  "
                   f"kl {row['kl']:.4g}  val_{name} {_fmt(val_error, not regression)}  val_nll {_fmt(val_nll)}")
            if test_error is not None:
                msg += f"  test_{name} {_fmt(test_error, not regression)}"
            msg += f"  ({row['seconds']:.1f}s)"
            if quiet:
                log(msg)
            else:
                # tqdm's bar is gone (leave=False); keep one line per epoch on stderr
                print(msg, file=sys.stderr, flush=True)
            report_epoch(loggers, model, row, lr, "rmse" if regression else "error")
            if on_epoch is not None and on_epoch(dict(row)):
                break
        flush()
    except KeyboardInterrupt:
        flush()
        done = metrics[-1]["epoch"] if metrics else 0
        raise TrainingInterrupted(
            f"interrupted during epoch {done + 1}; {last_path} holds epoch {done}; "
            f"resume with: bbb train --resume --out {shlex.quote(str(out))}", out, done) from None
    except Exception:
        with contextlib.suppress(Exception):  # keep the completed epochs; the error itself is what is said
            flush()
        raise

    if regression:
        return finish_regression(out, cfg, data, model, metrics, best, preprocess)
    return finish_classifier(out, cfg, data, model, metrics, best)
