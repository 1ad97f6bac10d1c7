"""Training, evaluation and run directories for the MNIST experiments (section 5.1 of the paper).

One function trains one network: :func:`train` takes a :class:`TrainConfig` and a run directory
and leaves there::

    config.json    every setting, the seed, library versions
    metrics.csv    one row per epoch: epoch, seconds, train_loss, nll, kl, val_error, test_error
    summary.json   final test/validation error (mean weights and k-sample average), timings
    last.pt        checkpoint of the last completed epoch (written atomically every epoch)
    best.pt        checkpoint of the epoch with the lowest validation error

Objective and loss scale. For ``method="bbb"`` the optimised quantity for minibatch i of M is the
paper's minibatch free energy divided by the minibatch size B::

    (pi_i * KL[q || P] + sum_{n in batch} -log p(y_n | x_n, w)) / B

(the NLL averaged over k Monte Carlo samples, ``pi_i`` from ``kl_weighting``). Dividing by B puts
the loss on a per-example scale, so learning rates are comparable with the deterministic
baselines (``sgd``, ``dropout``), which minimise the mean cross-entropy; the minimiser is the
same. The logged ``train_loss`` is the epoch's free energy per training example,
(sum_i loss_i) / N; ``nll`` the mean per-example NLL; ``kl`` the mean over the epoch's minibatches
of the full KL in nats (summed over every weight).

Data live on the device as tensors; each epoch shuffles with ``torch.randperm`` from a seeded
generator and slices. No host-device synchronisation happens inside an epoch. All randomness
(initialisation, shuffling, weight noise, dropout) flows from the global torch RNG seeded with
``seed`` and the shuffling generator; both states are checkpointed, so a killed run resumed with
``resume=True`` continues exactly where it stopped (bit for bit on CPU).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import math
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from . import uncertainty as U
from .distributions import KLMode, Prior
from .elbo import ELBO, KLWeighting
from .engine import Engine, OptimizerKind
from .errors import CheckpointError, UserError
from .io import atomic_torch_save, atomic_write_json, atomic_write_text
from .nn import DEFAULT_RHO_INIT, BayesMLP, Estimator, bayes_modules, shared_samples
from .options import (
    IMAGE_DATASETS,
    Checkpoint,
    DeviceKind,
    LRSchedule,
    Method,
    PriorKind,
    choice,
    make_prior,
    resolve_device,
)

__all__ = [
    "Method",
    "PriorKind",
    "OptimizerKind",
    "LRSchedule",
    "DeviceKind",
    "TrainConfig",
    "TrainingDiverged",
    "TrainingInterrupted",
    "METRIC_COLUMNS",
    "build_model",
    "load_data",
    "resolve_device",
    "train",
    "make_optimizer",
    "training_step",
    "evaluate",
    "load_run",
    "load_checkpoint",
    "read_metrics",
    "evaluate_run",
    "prune_run",
]

CHECKPOINT_FORMAT = 1
METRIC_COLUMNS = ("epoch", "seconds", "train_loss", "nll", "kl", "val_error", "test_error")
PRUNING_COLUMNS = ("fraction_removed", "weights_left", "weights_total", "snr_threshold", "test_error")
EVAL_CHUNK = 2048


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


DATASETS = IMAGE_DATASETS


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {value!r}") from None
    ok = (v >= 0 if allow_zero else v > 0) and math.isfinite(v)
    if not ok:
        raise UserError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
    return v


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise UserError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise UserError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


@dataclass
class TrainConfig:
    """Every setting of one training run (the command line's ``bbb train`` options).

    Construction validates and normalises every field; a bad value raises :class:`UserError`
    with a one-line message. ``to_dict`` / ``from_dict`` round-trip through plain JSON types.
    """

    dataset: str = "mnist"
    method: str = Method.BBB.value
    prior: str = PriorKind.MIXTURE.value
    pi: float = 0.25
    sigma1: float = 1.0
    sigma2: float = math.exp(-7.0)
    prior_sigma: float = 1.0
    hidden: list[int] = field(default_factory=lambda: [400, 400])
    epochs: int = 10
    lr: float = 1e-3
    optimizer: str = OptimizerKind.ADAM.value
    momentum: float = 0.9
    lr_schedule: str = LRSchedule.NONE.value
    lr_step_size: int = 0
    lr_gamma: float = 0.1
    batch_size: int = 128
    samples: int = 1
    estimator: str = Estimator.REPARAM.value
    kl_weighting: str = KLWeighting.BLUNDELL.value
    kl: str = KLMode.AUTO.value
    rho_init: float = DEFAULT_RHO_INIT
    mu_init_scale: float | None = None
    dropout_input: float = 0.2
    dropout_hidden: float = 0.5
    seed: int = 0
    device: str = DeviceKind.AUTO.value
    bf16: bool = False
    scale: float = 126.0
    val_size: int = 10000
    split_seed: int = 0
    eval_samples: int = 10
    test_each_epoch: bool = False
    data_dir: str | None = None

    def __post_init__(self) -> None:
        self.dataset = choice("dataset", self.dataset, DATASETS)
        self.method = choice("method", self.method, Method)
        self.prior = choice("prior", self.prior, PriorKind)
        self.optimizer = choice("optimizer", self.optimizer, OptimizerKind)
        self.lr_schedule = choice("lr schedule", self.lr_schedule, LRSchedule)
        self.estimator = choice("estimator", self.estimator, Estimator)
        self.kl_weighting = choice("KL weighting", self.kl_weighting, KLWeighting)
        self.kl = choice("KL mode", self.kl, KLMode)
        self.device = choice("device", self.device, DeviceKind)
        pi = float(self.pi)
        if not (0.0 < pi <= 1.0):
            raise UserError(f"pi (mixture weight) must be in (0, 1], got {self.pi}")
        self.pi = pi
        self.sigma1 = _positive("sigma1", self.sigma1)
        self.sigma2 = _positive("sigma2", self.sigma2)
        self.prior_sigma = _positive("prior-sigma", self.prior_sigma)
        if isinstance(self.hidden, int | float):
            self.hidden = [self.hidden]
        self.hidden = [_integer("hidden width", h, 1) for h in self.hidden]
        self.epochs = _integer("epochs", self.epochs, 0)
        self.lr = _positive("lr", self.lr)
        self.momentum = float(self.momentum)
        if not (0.0 <= self.momentum < 1.0):
            raise UserError(f"momentum must be in [0, 1), got {self.momentum}")
        self.lr_step_size = _integer("lr step size", self.lr_step_size, 0)
        self.lr_gamma = _positive("lr gamma", self.lr_gamma)
        self.batch_size = _integer("batch size", self.batch_size, 1)
        self.samples = _integer("samples", self.samples, 1)
        self.rho_init = float(self.rho_init)
        if not math.isfinite(self.rho_init):
            raise UserError(f"rho-init must be finite, got {self.rho_init}")
        if self.mu_init_scale is not None:
            self.mu_init_scale = _positive("mu-init-scale", self.mu_init_scale)
        for name in ("dropout_input", "dropout_hidden"):
            p = float(getattr(self, name))
            if not (0.0 <= p < 1.0):
                raise UserError(f"{name.replace('_', '-')} must be in [0, 1), got {p}")
            setattr(self, name, p)
        self.seed = _integer("seed", self.seed, 0)
        self.bf16 = bool(self.bf16)
        self.scale = _positive("scale", self.scale)
        self.val_size = _integer("val size", self.val_size, 0)
        self.split_seed = _integer("split seed", self.split_seed, 0)
        self.eval_samples = _integer("eval samples", self.eval_samples, 1)
        self.test_each_epoch = bool(self.test_each_epoch)
        if self.data_dir is not None:
            self.data_dir = str(self.data_dir)
        if self.method == Method.BBB.value and self.prior == PriorKind.MIXTURE.value and self.kl == "closed":
            raise UserError("no closed-form KL for the scale-mixture prior; use --kl mc or --kl auto")

    # -- conversion ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise UserError(f"unknown setting(s) {', '.join(unknown)}")
        return cls(**d)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def make_prior(self) -> Prior:
        return make_prior(self.prior, pi=self.pi, sigma1=self.sigma1, sigma2=self.sigma2,
                          prior_sigma=self.prior_sigma)


#: settings that may change when a run is resumed (they do not alter the trajectory)
RESUME_MUTABLE = frozenset({"epochs", "device", "data_dir", "test_each_epoch", "eval_samples", "bf16"})


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; ``last.pt`` holds the last completed epoch."""

    def __init__(self, message: str, run_dir: Path, epoch: int) -> None:
        super().__init__(message)
        self.message = message
        self.run_dir = run_dir
        self.epoch = epoch

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------------------------
# Models, data, devices
# --------------------------------------------------------------------------------------------


def build_model(cfg: TrainConfig, in_features: int = 784, num_classes: int = 10) -> nn.Module:
    """The network of ``cfg.method``: BayesMLP (bbb), a ReLU MLP (sgd) or one with dropout."""
    if cfg.method == Method.BBB.value:
        return BayesMLP(in_features, cfg.hidden, num_classes, prior=cfg.make_prior(),
                        estimator=cfg.estimator, rho_init=cfg.rho_init,
                        mu_init_scale=cfg.mu_init_scale)
    sizes = [in_features, *cfg.hidden, num_classes]
    dropout = cfg.method == Method.DROPOUT.value
    layers: list[nn.Module] = []
    if dropout and cfg.dropout_input > 0:
        layers.append(nn.Dropout(cfg.dropout_input))
    for j, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if j < len(sizes) - 2:
            layers.append(nn.ReLU())
            if dropout and cfg.dropout_hidden > 0:
                layers.append(nn.Dropout(cfg.dropout_hidden))
    return nn.Sequential(*layers)


def infer_method(model: nn.Module) -> str:
    if any(True for _ in bayes_modules(model)):
        return Method.BBB.value
    if any(isinstance(m, nn.Dropout) for m in model.modules()):
        return Method.DROPOUT.value
    return Method.SGD.value


def load_data(cfg: TrainConfig) -> dict[str, Tensor]:
    """The train/validation/test split of ``cfg.dataset`` (flat pixels / ``cfg.scale``)."""
    from .data import mnist_splits

    return mnist_splits(cfg.dataset, data_dir=cfg.data_dir, scale=cfg.scale,
                        val_size=cfg.val_size, seed=cfg.split_seed)


_DATA_KEYS = ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y")


def _check_data(data: dict[str, Tensor]) -> None:
    missing = [k for k in _DATA_KEYS if k not in data]
    if missing:
        raise UserError(f"data is missing {', '.join(missing)}")
    if data["train_x"].shape[0] == 0:
        raise UserError("the training set is empty")
    for s in ("train", "val", "test"):
        if data[f"{s}_x"].shape[0] != data[f"{s}_y"].shape[0]:
            raise UserError(f"{s}_x and {s}_y have different lengths")


def _versions() -> dict[str, str]:
    import numpy

    from . import __version__

    return {"bbb": __version__, "torch": str(torch.__version__), "python": platform.python_version(),
            "numpy": numpy.__version__}


def _num_weights(model: nn.Module) -> int:
    if infer_method(model) == Method.BBB.value:
        return sum(m.weight_mu.numel() + (0 if m.bias_mu is None else m.bias_mu.numel())
                   for m in bayes_modules(model))
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def mc_dropout(model: nn.Module) -> Iterator[None]:
    """Eval mode everywhere except the dropout layers (Monte Carlo dropout)."""
    was = model.training
    model.eval()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.train()
    try:
        yield
    finally:
        model.train(was)


@torch.no_grad()
def mean_logits(model: nn.Module, x: Tensor, chunk: int = EVAL_CHUNK) -> Tensor:
    was = model.training
    model.eval()
    try:
        return torch.cat([model(xc) for xc in torch.split(x, chunk)]) if x.shape[0] else x.new_zeros(0, 0)
    finally:
        model.train(was)


@torch.no_grad()
def _error(model: nn.Module, x: Tensor, y: Tensor) -> float | None:
    """Error rate with the posterior mean / deterministic network (one sync); None if empty."""
    if x.shape[0] == 0:
        return None
    return float((mean_logits(model, x).argmax(-1) != y).double().mean())


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    method: str | None = None,
    samples: int = 10,
    chunk: int = EVAL_CHUNK,
    seed: int | None = 0,
    return_probs: bool = False,
) -> dict[str, Any]:
    """Classification metrics of ``model`` on ``(x, y)``.

    Returns ``error`` with the posterior mean weights (bbb) or the deterministic network (sgd;
    dropout in eval mode), ``error_mc`` of the ``samples``-sample predictive average (bbb: weight
    samples via :func:`bbb.uncertainty.predict`; dropout: MC dropout; sgd: equal to ``error``),
    and ``nll``, ``ece``, ``brier`` of that predictive distribution (``nll_mean``, ``ece_mean``,
    ``brier_mean`` for the mean network, so the value of averaging is visible). With
    ``return_probs`` the (N, C) probabilities come back too, as ``probs`` and ``mean_probs``.
    Examples are processed in chunks of ``chunk``. With ``seed`` set, the Monte Carlo
    draws come from a forked RNG, so the result is reproducible and the caller's RNG untouched.
    """
    method = infer_method(model) if method is None else choice("method", method, Method)
    if x.shape[0] == 0:
        raise UserError("cannot evaluate on an empty set")
    if samples < 1:
        raise UserError(f"samples must be >= 1, got {samples}")
    dev = x.device
    fork = (torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else [])
            if seed is not None else contextlib.nullcontext())
    with fork:
        if seed is not None:
            torch.manual_seed(seed)
        mean_probs = torch.softmax(mean_logits(model, x, chunk).float(), -1)
        if method == Method.BBB.value:
            with shared_samples():  # the same k networks score every chunk
                parts = [U.predictive_probs(U.predict(model, xc, samples).float()) for xc in torch.split(x, chunk)]
            probs = torch.cat(parts)
        elif method == Method.DROPOUT.value:
            parts = []
            with mc_dropout(model):
                for xc in torch.split(x, chunk):
                    logits = model(xc.unsqueeze(0).expand(samples, *xc.shape))
                    parts.append(torch.softmax(logits.float(), -1).mean(0))
            probs = torch.cat(parts)
        else:
            probs = mean_probs
    y = y.to(probs.device)
    res: dict[str, Any] = {
        "error": U.error_rate(mean_probs, y),
        "error_mc": U.error_rate(probs, y),
        "nll": U.negative_log_likelihood(probs, y),
        "ece": U.expected_calibration_error(probs, y),
        "brier": U.brier_score(probs, y),
        "nll_mean": U.negative_log_likelihood(mean_probs, y),
        "ece_mean": U.expected_calibration_error(mean_probs, y),
        "brier_mean": U.brier_score(mean_probs, y),
        "samples": int(samples) if method != Method.SGD.value else 1,
        "n": int(x.shape[0]),
    }
    if return_probs:
        res["probs"], res["mean_probs"] = probs, mean_probs
    return res


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; any problem is a one-line CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to read is the same user problem
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({reason[:160]})") from None
    need = ("model", "config", "epoch", "model_info")
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in need):
        raise CheckpointError(f"checkpoint {path} is not a bbb training checkpoint")
    return ckpt


def _model_from_checkpoint(ckpt: dict[str, Any], path: Path) -> tuple[nn.Module, TrainConfig]:
    try:
        cfg = TrainConfig.from_dict(ckpt["config"])
    except UserError as e:
        raise CheckpointError(f"checkpoint {path} has an invalid config: {e}") from None
    info = ckpt["model_info"]
    model = build_model(cfg, int(info["in_features"]), int(info["num_classes"]))
    try:
        model.load_state_dict(ckpt["model"])
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path} does not match its model ({str(e).splitlines()[0][:160]})") from None
    return model, cfg


def _run_dir(run_dir: str | Path) -> Path:
    d = Path(run_dir)
    if not d.is_dir():
        raise CheckpointError(f"run directory {d} not found")
    return d


def load_run(run_dir: str | Path, which: str = "best", device: str | torch.device = "cpu",
             ) -> tuple[nn.Module, TrainConfig]:
    """Rebuild the trained model of a run directory: ``which`` is ``"best"`` or ``"last"``.

    Returns ``(model, config)``; the model is in eval mode on ``device``.
    """
    which = choice("checkpoint", which, Checkpoint)
    d = _run_dir(run_dir)
    path = d / f"{which}.pt"
    model, cfg = _model_from_checkpoint(load_checkpoint(path), path)
    return model.to(device).eval(), cfg


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.csv`` as dicts of floats (None for empty cells)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise CheckpointError(f"{path} not found")
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            rows.append({k: (None if v in ("", None) else (int(v) if k == "epoch" else float(v)))
                         for k, v in r.items()})
    return rows


def _csv_text(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else (repr(r[c]) if isinstance(r[c], float) else r[c])
                    for c in columns])
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def make_optimizer(cfg: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """The optimiser of ``cfg``: for ``bbb``, the fused :class:`~bbb.engine.Engine` (seeded with
    ``cfg.seed``; it takes the plain path by itself where its kernel does not apply); for the
    deterministic methods ``torch.optim.SGD`` or the fused ``torch.optim.Adam``."""
    if cfg.method == Method.BBB.value:
        return Engine(model, cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum if cfg.optimizer == "sgd" else 0.0,
                      num_samples=cfg.samples, kl=cfg.kl, seed=cfg.seed)
    if cfg.optimizer == OptimizerKind.SGD.value:
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    params = list(model.parameters())
    # The fused Adam kernel (one pass over all parameters; CPU since torch 2.4); older torch falls back.
    try:
        return torch.optim.Adam(params, lr=cfg.lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - torch < 2.4 or other devices
        return torch.optim.Adam(params, lr=cfg.lr)


def _make_scheduler(cfg: TrainConfig, opt: torch.optim.Optimizer) -> Any:
    if cfg.lr_schedule == LRSchedule.COSINE.value:
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, cfg.epochs))
    if cfg.lr_schedule == LRSchedule.STEP.value:
        step = cfg.lr_step_size or max(1, cfg.epochs // 3)
        return torch.optim.lr_scheduler.StepLR(opt, step_size=step, gamma=cfg.lr_gamma)
    return None


def _batch_objective(
    model: nn.Module, elbo: ELBO | None, xb: Tensor, yb: Tensor, batch_index: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss to optimise, free-energy term, summed NLL, KL) of one minibatch.

    bbb: ``out.loss / B`` is optimised (the paper's minibatch free energy per example);
    sgd/dropout: the mean cross-entropy. The other three are detached, for the epoch sums.
    """
    b = xb.shape[0]
    if elbo is not None:
        out = elbo(xb, yb, batch_index=batch_index)
        return out.loss / b, out.loss.detach(), out.nll.detach(), out.kl.detach()
    nll = F.cross_entropy(model(xb).float(), yb, reduction="sum")
    zero = torch.zeros((), device=xb.device)
    return nll / b, nll.detach(), nll.detach(), zero


def training_step(model: nn.Module, elbo: ELBO | None, opt: torch.optim.Optimizer, xb: Tensor, yb: Tensor,
                  batch_index: int) -> tuple[Tensor, Tensor, Tensor]:
    """One optimisation step on a minibatch; returns its (free energy, summed NLL, KL), detached.

    The step ``bbb train`` takes (and the bench times): the objective under the engine's weight
    sample when ``opt`` is an :class:`~bbb.engine.Engine`, then zero_grad / backward / step.
    """
    ctx = opt.sampling() if isinstance(opt, Engine) else contextlib.nullcontext()
    with ctx:
        loss, fe, nll, kl = _batch_objective(model, elbo, xb, yb, batch_index)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return fe, nll, kl


def _all_finite(model: nn.Module) -> bool:
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.2f}%" if pct else f"{v:.4g}"


def train(
    cfg: TrainConfig,
    out: str | Path,
    *,
    data: dict[str, Tensor] | None = None,
    resume: bool = False,
    quiet: bool = False,
    log: Callable[[str], None] | None = None,
    on_epoch: Callable[[dict[str, Any]], bool | None] | None = None,
) -> dict[str, Any]:
    """Train ``cfg`` into the run directory ``out`` and return the summary (also summary.json).

    Args:
        cfg: the settings.
        out: run directory (created). Refuses to overwrite an existing checkpoint unless
            ``resume``.
        data: pre-loaded tensors (keys train_x, train_y, val_x, val_y, test_x, test_y; optional
            ``num_classes``) instead of loading ``cfg.dataset`` (tests inject tiny data this way).
        resume: continue from ``out/last.pt`` if it exists (settings other than epochs, device,
            data_dir, test_each_epoch, eval_samples and bf16 must match the stored ones).
        quiet: one log line per epoch instead of a tqdm progress bar.
        log: where log lines go (default: print to stdout); pass ``lambda s: None`` for silence.
        on_epoch: called after each epoch (once its checkpoints and metrics.csv are written)
            with a copy of the metrics row; returning True stops training there, and the
            summary is written for the epochs done (``bbb sweep`` reports to Ray Tune here).

    Raises:
        TrainingDiverged: NaN/inf loss (``last.pt`` keeps the last good epoch).
        TrainingInterrupted: Ctrl-C (``last.pt`` holds the last completed epoch).
        UserError: bad settings, missing data, a mismatching checkpoint.
    """
    if log is None:
        def log(s: str) -> None:
            print(s, flush=True)
    out = Path(out)
    last_path, best_path = out / "last.pt", out / "best.pt"
    ckpt: dict[str, Any] | None = None
    if last_path.exists():
        if not resume:
            raise UserError(f"{out} already holds a run (last.pt); pass --resume to continue it "
                            "or choose another --out")
        ckpt = load_checkpoint(last_path)
        stored = ckpt["config"]
        now = cfg.to_dict()
        diff = [k for k in now if k not in RESUME_MUTABLE and stored.get(k) != now[k]]
        if diff:
            k = diff[0]
            raise UserError(f"cannot resume {out}: setting {k!r} was {stored.get(k)!r}, now {now[k]!r} "
                            "(only epochs, device, data-dir, test-each-epoch, eval-samples, bf16 may change)")

    device = resolve_device(cfg.device)
    use_bf16 = cfg.bf16 and device.type == "cuda"
    if cfg.bf16 and not use_bf16:
        warnings.warn("--bf16 is ignored on CPU (bf16 autocast is used on CUDA only)", stacklevel=2)

    torch.manual_seed(cfg.seed)
    if data is None:
        data = load_data(cfg)
    _check_data(data)
    num_classes = int(data.get("num_classes", 0)) or int(
        max(int(data[k].max()) for k in ("train_y", "val_y", "test_y") if data[k].numel()) + 1)
    data = {k: data[k].to(device, torch.float32 if k.endswith("_x") else torch.int64) for k in _DATA_KEYS}
    x, y = data["train_x"], data["train_y"]
    n, in_features = x.shape[0], int(x.shape[1])
    bsz = cfg.batch_size
    num_batches = math.ceil(n / bsz)

    model = build_model(cfg, in_features, num_classes).to(device)
    elbo = (ELBO(model, "categorical", num_batches=num_batches, kl_weighting=cfg.kl_weighting,
                 num_samples=cfg.samples, kl=cfg.kl) if cfg.method == Method.BBB.value else None)
    opt = make_optimizer(cfg, model)
    sched = _make_scheduler(cfg, opt)
    gen = torch.Generator().manual_seed(cfg.seed)
    metrics: list[dict[str, Any]] = []
    best = {"epoch": 0, "val_error": None}
    start_epoch = 0
    model_info = {"in_features": in_features, "num_classes": num_classes, "num_train": n}

    if ckpt is not None:
        if dict(ckpt["model_info"]).get("in_features") != in_features or \
                dict(ckpt["model_info"]).get("num_classes") != num_classes:
            raise UserError(f"cannot resume {out}: the data do not match the stored model")
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
            raise CheckpointError(f"checkpoint {last_path} cannot be resumed ({str(e).splitlines()[0][:160]})") from None
        metrics = [dict(r) for r in ckpt.get("metrics", [])]
        best = dict(ckpt.get("best", best))
        start_epoch = int(ckpt["epoch"])
        log(f"resuming {out} after epoch {start_epoch}")

    out.mkdir(parents=True, exist_ok=True)
    versions = _versions()
    atomic_write_json(out / "config.json", {
        **cfg.to_dict(), "versions": versions, "device_used": str(device),
        "num_train": n, "num_val": int(data["val_x"].shape[0]), "num_test": int(data["test_x"].shape[0]),
        "num_batches": num_batches, "num_weights": _num_weights(model), "argv": sys.argv[1:],
    })

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
            "versions": versions,
        }

    if ckpt is None:  # epoch 0: a run killed during its first epoch can be resumed too
        atomic_torch_save(last_path, checkpoint(0))
        atomic_write_text(out / "metrics.csv", _csv_text(METRIC_COLUMNS, metrics))

    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else contextlib.nullcontext
    has_val = data["val_x"].shape[0] > 0
    try:
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            t0 = time.perf_counter()
            model.train()
            perm = torch.randperm(n, generator=gen).to(device)
            sums = torch.zeros(3, dtype=torch.float64, device=device)  # free energy, nll, kl
            bar = None
            steps: Any = range(num_batches)
            if not quiet:
                from tqdm import tqdm

                last = metrics[-1] if metrics else {}
                bar = tqdm(steps, desc=f"epoch {epoch}/{cfg.epochs}", leave=False, dynamic_ncols=True,
                           file=sys.stderr, disable=None)  # no bar when stderr is not a terminal
                if last:
                    bar.set_postfix(loss=_fmt(last["train_loss"]), val_err=_fmt(last["val_error"], True))
                steps = bar
            for i in steps:
                idx = perm[i * bsz:(i + 1) * bsz]
                xb, yb = x.index_select(0, idx), y.index_select(0, idx)
                with autocast():
                    fe, nll, kl = training_step(model, elbo, opt, xb, yb, i)
                sums += torch.stack([fe.double(), nll.double(), kl.double()])
            if bar is not None:
                bar.close()
            fe_sum, nll_sum, kl_sum = sums.tolist()  # the epoch's one synchronisation
            if not (math.isfinite(fe_sum) and _all_finite(model)):
                raise TrainingDiverged(
                    f"training diverged in epoch {epoch} (loss {fe_sum}); {last_path} keeps epoch "
                    f"{epoch - 1}; try a lower --lr")
            if sched is not None:
                sched.step()
            val_error = _error(model, data["val_x"], data["val_y"]) if has_val else None
            test_error = _error(model, data["test_x"], data["test_y"]) if cfg.test_each_epoch else None
            row = {
                "epoch": epoch,
                "seconds": time.perf_counter() - t0,
                "train_loss": fe_sum / n,
                "nll": nll_sum / n,
                "kl": kl_sum / num_batches,
                "val_error": val_error,
                "test_error": test_error,
            }
            metrics.append(row)
            improved = (not has_val) or best["val_error"] is None or val_error < best["val_error"]
            if improved:
                best = {"epoch": epoch, "val_error": val_error}
            state = checkpoint(epoch)
            atomic_torch_save(last_path, state)
            if improved:
                atomic_torch_save(best_path, state)
            atomic_write_text(out / "metrics.csv", _csv_text(METRIC_COLUMNS, metrics))
            msg = (f"epoch {epoch}/{cfg.epochs}  loss {row['train_loss']:.4f}  nll {row['nll']:.4f}  "
                   f"kl {row['kl']:.4g}  val_err {_fmt(val_error, True)}")
            if test_error is not None:
                msg += f"  test_err {_fmt(test_error, True)}"
            msg += f"  ({row['seconds']:.1f}s)"
            if quiet:
                log(msg)
            else:
                # tqdm's bar is gone (leave=False); keep one line per epoch on stderr
                print(msg, file=sys.stderr, flush=True)
            if on_epoch is not None and on_epoch(dict(row)):
                break
    except KeyboardInterrupt:
        done = metrics[-1]["epoch"] if metrics else 0
        raise TrainingInterrupted(
            f"interrupted during epoch {done + 1}; {last_path} holds epoch {done}; "
            f"resume with: bbb train --resume --out {out}", out, done) from None

    return _finish(out, cfg, data, model, metrics, best)


def _finish(out: Path, cfg: TrainConfig, data: dict[str, Tensor], model: nn.Module,
            metrics: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, Any]:
    """Evaluate the best and last models on the test set and write summary.json."""
    done = metrics[-1]["epoch"] if metrics else 0
    device = data["test_x"].device
    last_test = _error(model, data["test_x"], data["test_y"])
    last_val = _error(model, data["val_x"], data["val_y"])
    which = "best" if (out / "best.pt").exists() else "last"
    eval_model = model
    if which == "best" and best.get("epoch") != done:
        eval_model, _ = load_run(out, "best", device=device)
    res = evaluate(eval_model, data["test_x"], data["test_y"], cfg.method, samples=cfg.eval_samples)
    summary = {
        "model": which,
        "test_error": res["error"],
        "test_error_mc": res["error_mc"],
        "val_error": _error(eval_model, data["val_x"], data["val_y"]),
        "test_nll": res["nll"],
        "test_ece": res["ece"],
        "test_brier": res["brier"],
        "eval_samples": res["samples"],
        "last_test_error": last_test,
        "last_val_error": last_val,
        "best_epoch": best.get("epoch"),
        "best_val_error": best.get("val_error"),
        "epochs": done,
        "seconds": float(sum(r["seconds"] for r in metrics)),
        "method": cfg.method,
        "dataset": cfg.dataset,
        "hidden": list(cfg.hidden),
        "num_weights": _num_weights(model),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


# --------------------------------------------------------------------------------------------
# Run-directory jobs used by the command line
# --------------------------------------------------------------------------------------------


def _run_data(cfg: TrainConfig, data_dir: str | None, data: dict[str, Tensor] | None) -> dict[str, Tensor]:
    if data is not None:
        return data
    if data_dir is not None:
        cfg = cfg.replace(data_dir=data_dir)
    return load_data(cfg)


def evaluate_run(
    run_dir: str | Path,
    samples: int = 10,
    which: str = "best",
    data_dir: str | None = None,
    device: str = "auto",
    data: dict[str, Tensor] | None = None,
    reliability: bool = True,
) -> dict[str, Any]:
    """Evaluate a run's checkpoint on its test set and write ``run_dir/eval.json`` (and, with
    ``reliability`` and matplotlib installed, ``run_dir/reliability.png``: one reliability
    diagram for the mean/deterministic network and one for the k-sample predictive average)."""
    d = _run_dir(run_dir)
    if samples < 1:
        raise UserError(f"--samples must be >= 1, got {samples}")
    dev = resolve_device(device)
    model, cfg = load_run(d, which, device=dev)
    data = _run_data(cfg, data_dir, data)
    x, y = data["test_x"].to(dev), data["test_y"].to(dev)
    res = evaluate(model, x, y, cfg.method, samples=samples, return_probs=True)
    ckpt_epoch = int(load_checkpoint(d / f"{which}.pt")["epoch"])
    result = {"run": str(d), "checkpoint": which, "epoch": ckpt_epoch, "method": cfg.method,
              "dataset": cfg.dataset, "test_error": res["error"], "test_error_mc": res["error_mc"],
              "samples": res["samples"], "nll": res["nll"], "ece": res["ece"], "brier": res["brier"],
              "nll_mean": res["nll_mean"], "ece_mean": res["ece_mean"], "brier_mean": res["brier_mean"],
              "ece_bins": 15, "n": res["n"]}
    if reliability:
        from .plots import plot_reliability

        panels = {"mean weights" if cfg.method == Method.BBB.value else "deterministic":
                  U.reliability_bins(res["mean_probs"], y)}
        if cfg.method != Method.SGD.value:
            panels[f"{res['samples']}-sample average"] = U.reliability_bins(res["probs"], y)
        if plot_reliability(panels, d / "reliability.png", title=f"{cfg.method} on {cfg.dataset} test") is not None:
            result["plots"] = ["reliability.png"]
    atomic_write_json(d / "eval.json", result)
    return result


def prune_run(
    run_dir: str | Path,
    fractions: Sequence[float] = (0.0, 0.5, 0.75, 0.95, 0.98),
    which: str = "last",
    data_dir: str | None = None,
    device: str = "auto",
    data: dict[str, Tensor] | None = None,
) -> list[dict[str, Any]]:
    """The paper's Table 2 for a BBB run: prune by |mu|/sigma and test with the mean weights.

    Writes ``run_dir/pruning.csv`` (columns :data:`PRUNING_COLUMNS`) and returns its rows.
    """
    from .prune import prune, unprune

    d = _run_dir(run_dir)
    for f in fractions:
        if not (0.0 <= float(f) <= 1.0):
            raise UserError(f"fractions must be in [0, 1], got {f}")
    dev = resolve_device(device)
    model, cfg = load_run(d, which, device=dev)
    if cfg.method != Method.BBB.value:
        raise UserError(f"pruning by signal-to-noise needs a bbb run; {d} was trained with --method {cfg.method}")
    data = _run_data(cfg, data_dir, data)
    x, y = data["test_x"].to(dev), data["test_y"].to(dev)
    rows = []
    for f in fractions:
        r = prune(model, float(f))
        rows.append({"fraction_removed": float(f), "weights_left": r.kept, "weights_total": r.total,
                     "snr_threshold": r.threshold, "test_error": _error(model, x, y)})
    unprune(model)
    atomic_write_text(d / "pruning.csv", _csv_text(PRUNING_COLUMNS, rows))
    return rows
