"""Reproduce the paper's MNIST results (section 5.1): Table 1, Figures 2-4 and Table 2.

``bbb reproduce mnist --budget smoke|quick|paper --out DIR`` trains the 12 cells of Table 1
(SGD, dropout, BBB with a Gaussian prior and BBB with the scale-mixture prior, each with two
hidden ReLU layers of 400, 800 and 1200 units) and writes into DIR::

    table1.csv, table1.md        our test error beside the paper's, per cell, with the epochs,
                                 the selected hyperparameters and the wall time
    fig2_curves.png / .csv       test error against epochs for 2x1200 BBB, dropout and SGD
    fig3_weights.png / .csv      density of the trained weights (BBB: one sample from q)
    table2_pruning.csv, .md      pruning the 2x1200 BBB network by |mu|/sigma, beside the paper
    fig4_snr.png / .csv / .json  density and CDF of the signal-to-noise ratio in dB,
                                 10 log10(|mu|/sigma), with the 75% cut-off marked
    reproduce.json               the budget, the plan, the selected runs and the files written
    runs/<cell>/                 one ordinary ``bbb train`` run directory per training run

Protocol. Pixels / 126; 50,000 training, 10,000 validation (a seeded split of the official
training set) and 10,000 test images; minibatches of 128. Model selection uses the validation
split only: within a run, the checkpoint with the lowest validation error (``best.pt``) is the
one tested; across a cell's candidate settings (``paper`` budget), the one with the lowest
validation error is reported. The test error is logged every epoch for Figure 2 only; it never
chooses anything. Table 2, Figure 3 and Figure 4 use the end of training (``last.pt``), as the
paper's Table 2 does.

Budgets (the module-level dict :data:`BUDGETS`): ``smoke`` trains every cell for one epoch on
a 1,024-image subset (seconds; for tests); ``quick`` trains one fixed recipe per cell, chosen
beforehand and not tuned, with epochs sized for about 35 minutes on a quiet 2-core CPU;
``paper`` follows the paper's protocol (600 epochs) with a small candidate list per cell
selected on validation (days on a CPU; meant for a GPU). All use Adam with a cosine learning-rate
schedule and, for BBB, uniform minibatch KL weighting (1/M): Blundell's weighting gives lower
error after few epochs but leaves sigma near its initial value, so pruning by |mu|/sigma fails.

Runs are resumable: a killed ``reproduce`` continues where it stopped (finished runs are
skipped, a half-trained run continues from its last epoch); ``--seeds N`` adds independent
seeds to the headline cells (BBB mixture and dropout at 2x400 and 2x1200) and can be raised
later on the same ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import train as T
from ..distributions import softplus
from ..errors import UserError
from ..io import atomic_write_json, atomic_write_text
from ..nn import bayes_modules
from ..plots import _pyplot

__all__ = [
    "Budget",
    "CellMethod",
    "BudgetSpec",
    "BUDGETS",
    "WIDTHS",
    "HEADLINE_CELLS",
    "PAPER_TABLE1",
    "PAPER_TABLE2",
    "TABLE1_COLUMNS",
    "TABLE2_COLUMNS",
    "SECONDS_PER_EPOCH",
    "ReproduceConfig",
    "Job",
    "plan_jobs",
    "estimate_seconds",
    "run_reproduce",
    "weight_sample",
    "add_arguments",
    "main",
    "EXAMPLE",
]

EXAMPLE = (
    "bbb reproduce mnist --budget quick --out results/mnist --threads 2\n"
    "  bbb reproduce mnist --budget quick --out results/mnist --seeds 3   # rerun: adds seeds 1, 2\n"
    "  bbb reproduce mnist --budget paper --device cuda --out results/mnist-paper\n"
    "  bbb reproduce mnist --budget quick --out results/mnist --plan      # the plan and time estimate only"
)


class Budget(str, Enum):
    SMOKE = "smoke"
    QUICK = "quick"
    PAPER = "paper"


class CellMethod(str, Enum):
    SGD = "sgd"
    DROPOUT = "dropout"
    BBB_GAUSSIAN = "bbb_gaussian"
    BBB_MIXTURE = "bbb_mixture"


class Experiment(str, Enum):
    MNIST = "mnist"


WIDTHS: tuple[int, ...] = (400, 800, 1200)
METHODS: tuple[str, ...] = tuple(m.value for m in CellMethod)
DATASETS: tuple[str, ...] = T.DATASETS

#: the cells that get ``--seeds`` independent seeds
HEADLINE_CELLS: tuple[tuple[str, int], ...] = (
    ("bbb_mixture", 400), ("bbb_mixture", 1200), ("dropout", 400), ("dropout", 1200))

#: Paper Table 1, test error in percent (MNIST only)
PAPER_TABLE1: dict[tuple[str, int], float] = {
    ("sgd", 400): 1.83, ("sgd", 800): 1.84, ("sgd", 1200): 1.88,
    ("dropout", 400): 1.51, ("dropout", 800): 1.33, ("dropout", 1200): 1.36,
    ("bbb_gaussian", 400): 1.82, ("bbb_gaussian", 800): 1.99, ("bbb_gaussian", 1200): 2.04,
    ("bbb_mixture", 400): 1.36, ("bbb_mixture", 800): 1.34, ("bbb_mixture", 1200): 1.32,
}

#: Paper Table 2 (BBB 2x1200): (fraction removed, weights left as printed, test error in percent)
PAPER_TABLE2: tuple[tuple[float, int, float], ...] = (
    (0.0, 2_400_000, 1.24), (0.5, 1_200_000, 1.24), (0.75, 600_000, 1.24),
    (0.95, 120_000, 1.29), (0.98, 48_000, 1.39))
PRUNE_FRACTIONS: tuple[float, ...] = tuple(f for f, _, _ in PAPER_TABLE2)
SNR_CUTOFF = 0.75

METHOD_NAMES = {"sgd": "SGD (no regularisation)", "dropout": "SGD, dropout",
                "bbb_gaussian": "BBB, Gaussian prior", "bbb_mixture": "BBB, scale mixture prior"}

#: settings every run shares (the paper: minibatch 128, pixels / 126, 10,000 validation images)
COMMON_SETTINGS: dict[str, Any] = {
    "optimizer": "adam", "lr": 1e-3, "lr_schedule": "cosine", "batch_size": 128, "scale": 126.0,
    "val_size": 10000, "split_seed": 0, "test_each_epoch": True,
}

#: what makes each of the four methods (TrainConfig fields)
METHOD_SETTINGS: dict[str, dict[str, Any]] = {
    "sgd": {"method": "sgd"},
    "dropout": {"method": "dropout", "dropout_input": 0.2, "dropout_hidden": 0.5},
    "bbb_gaussian": {"method": "bbb", "prior": "gaussian", "kl": "auto", "estimator": "reparam",
                     "kl_weighting": "uniform", "samples": 1},
    "bbb_mixture": {"method": "bbb", "prior": "mixture", "kl": "mc", "estimator": "reparam",
                    "kl_weighting": "uniform", "samples": 1},
}

E = math.exp
#: The quick recipe of each method: one per cell, fixed beforehand (the mixture is the demo's
#: recipe; the Gaussian prior's sigma = e^-1 had the lowest validation error in a 3-epoch 2x400
#: probe: e^0 2.39%, e^-1 2.37%, e^-2 2.55%, e^-3 4.34%). The test set chose nothing.
_QUICK_RECIPES: dict[str, list[dict[str, Any]]] = {
    "sgd": [{"lr": 1e-3}],
    "dropout": [{"lr": 1e-3}],
    "bbb_gaussian": [{"lr": 1e-3, "prior_sigma": E(-1.0)}],
    "bbb_mixture": [{"lr": 1e-3, "pi": 0.25, "sigma1": 1.0, "sigma2": E(-7.0)}],
}

#: the paper budget's candidates per method (from the paper's grids; chosen on validation)
_PAPER_CANDIDATES: dict[str, list[dict[str, Any]]] = {
    "sgd": [{"lr": 1e-3}, {"lr": 1e-4}],
    "dropout": [{"lr": 1e-3}, {"lr": 1e-4}],
    "bbb_gaussian": [{"lr": 1e-3, "prior_sigma": 1.0}, {"lr": 1e-3, "prior_sigma": E(-1.0)},
                     {"lr": 1e-3, "prior_sigma": E(-2.0)}, {"lr": 1e-4, "prior_sigma": E(-1.0)}],
    "bbb_mixture": [{"lr": 1e-3, "pi": 0.25, "sigma1": 1.0, "sigma2": E(-7.0)},
                    {"lr": 1e-3, "pi": 0.5, "sigma1": 1.0, "sigma2": E(-6.0)},
                    {"lr": 1e-3, "pi": 0.75, "sigma1": E(-1.0), "sigma2": E(-8.0)},
                    {"lr": 1e-3, "pi": 0.25, "sigma1": 1.0, "sigma2": E(-7.0), "samples": 2}],
}


@dataclass(frozen=True)
class BudgetSpec:
    """One budget: epochs per cell, candidate settings per method, seeds, data subset."""

    description: str
    epochs: dict[str, dict[int, int]]
    candidates: dict[str, list[dict[str, Any]]]
    seeds: int = 1
    train_limit: int | None = None
    eval_limit: int | None = None
    eval_samples: int = 10


def _all_widths(n: int) -> dict[int, int]:
    return {w: n for w in WIDTHS}


#: The budgets. Epochs of ``quick`` are sized with :data:`SECONDS_PER_EPOCH` (about 35 minutes
#: on a quiet 2-core CPU for the 12 cells with one seed; each extra seed adds about 13 minutes).
BUDGETS: dict[str, BudgetSpec] = {
    "smoke": BudgetSpec(
        description="1 epoch per cell on the first 1,024 training and 1,000 validation/test images "
                    "(a test of the pipeline, not a result)",
        epochs={m: _all_widths(1) for m in METHODS},
        candidates={**_QUICK_RECIPES, "bbb_mixture": [  # two candidates: selection is exercised
            {"lr": 1e-3, "pi": 0.25, "sigma1": 1.0, "sigma2": E(-7.0)},
            {"lr": 1e-3, "pi": 0.5, "sigma1": 1.0, "sigma2": E(-6.0)}]},
        seeds=1, train_limit=1024, eval_limit=1000, eval_samples=2),
    "quick": BudgetSpec(
        description="one fixed recipe per cell (chosen beforehand, not tuned on validation or "
                    "test), few epochs: about 35 minutes on a quiet 2-core CPU",
        epochs={"sgd": {400: 10, 800: 10, 1200: 10},
                "dropout": {400: 20, 800: 20, 1200: 15},
                "bbb_gaussian": {400: 8, 800: 5, 1200: 4},
                "bbb_mixture": {400: 15, 800: 8, 1200: 5}},
        candidates=_QUICK_RECIPES, seeds=1),
    "paper": BudgetSpec(
        description="the paper's protocol: 600 epochs, a small candidate list per cell chosen on "
                    "the validation error (meant for a GPU; over a week on a 2-core CPU)",
        epochs={m: _all_widths(600) for m in METHODS},
        candidates=_PAPER_CANDIDATES, seeds=3),
}

#: Seconds per epoch on the full 50,000 images, measured on a quiet 2-core CPU (one MC sample;
#: BBB's cost grows with the samples). Used for the time estimate only.
SECONDS_PER_EPOCH: dict[tuple[str, int], float] = {
    ("sgd", 400): 2.5, ("sgd", 800): 6.0, ("sgd", 1200): 13.0,
    ("dropout", 400): 3.0, ("dropout", 800): 7.0, ("dropout", 1200): 15.0,
    ("bbb", 400): 13.0, ("bbb", 800): 33.0, ("bbb", 1200): 60.0,
}
FIXED_OVERHEAD_S = 60.0  # data, pruning, figures

TABLE1_COLUMNS = (
    "method", "hidden", "test_error", "paper_test_error", "test_error_sd", "n_seeds", "test_errors",
    "test_error_mc", "val_error", "epochs", "best_epoch", "seconds", "seconds_all", "candidate",
    "n_candidates", "lr", "optimizer", "lr_schedule", "batch_size", "samples", "kl_weighting",
    "prior", "prior_sigma", "pi", "sigma1", "sigma2", "dropout_input", "dropout_hidden", "weights",
    "run", "status")
TABLE2_COLUMNS = ("fraction_removed", "weights_left", "weights_total", "snr_threshold",
                  "snr_threshold_db", "test_error", "paper_weights_left", "paper_test_error")
_HYPER_BY_METHOD = {
    "sgd": ("lr", "optimizer", "lr_schedule", "batch_size"),
    "dropout": ("lr", "optimizer", "lr_schedule", "batch_size", "dropout_input", "dropout_hidden"),
    "bbb_gaussian": ("lr", "optimizer", "lr_schedule", "batch_size", "samples", "kl_weighting",
                     "prior", "prior_sigma"),
    "bbb_mixture": ("lr", "optimizer", "lr_schedule", "batch_size", "samples", "kl_weighting",
                    "prior", "pi", "sigma1", "sigma2"),
}


# --------------------------------------------------------------------------------------------
# Configuration and plan
# --------------------------------------------------------------------------------------------


def _choice(name: str, value: Any, enum: type[Enum] | Sequence[str]) -> str:
    values = [e.value for e in enum] if isinstance(enum, type) else list(enum)
    v = value.value if isinstance(value, Enum) else value
    if v not in values:
        raise UserError(f"unknown {name} {value!r}; choose one of: {', '.join(values)}")
    return str(v)


@dataclass
class ReproduceConfig:
    """Settings of :func:`run_reproduce` (the ``bbb reproduce mnist`` options)."""

    budget: str = Budget.SMOKE.value
    out: str = "results/mnist"
    dataset: str = "mnist"
    seeds: int | None = None  # None: the budget's default
    device: str = T.DeviceKind.AUTO.value
    data_dir: str | None = None
    quiet: bool = False
    experiment: str = Experiment.MNIST.value

    def __post_init__(self) -> None:
        self.experiment = _choice("experiment", self.experiment, Experiment)
        self.budget = _choice("budget", self.budget, Budget)
        self.dataset = _choice("dataset", self.dataset, DATASETS)
        self.device = _choice("device", self.device, T.DeviceKind)
        if self.seeds is None:
            self.seeds = BUDGETS[self.budget].seeds
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise UserError(f"--seeds must be an integer >= 1, got {self.seeds!r}")
        if not str(self.out):
            raise UserError("--out must name a folder")
        if self.data_dir is not None:
            self.data_dir = str(self.data_dir)

    @property
    def spec(self) -> BudgetSpec:
        return BUDGETS[self.budget]


@dataclass
class Job:
    """One training run: a cell's candidate with one seed."""

    method: str
    hidden: int
    candidate: int
    seed: int
    config: T.TrainConfig
    run_dir: Path
    n_candidates: int = 1

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def cell(self) -> tuple[str, int]:
        return (self.method, self.hidden)


def _run_name(method: str, hidden: int, candidate: int, seed: int) -> str:
    return f"{method}_{hidden}" + (f"_c{candidate}" if candidate else "") + (f"_s{seed}" if seed else "")


def _train_config(cfg: ReproduceConfig, method: str, hidden: int, settings: dict[str, Any],
                  seed: int) -> T.TrainConfig:
    spec = cfg.spec
    return T.TrainConfig(**{
        **COMMON_SETTINGS, **METHOD_SETTINGS[method], **settings,
        "epochs": spec.epochs[method][hidden], "hidden": [hidden, hidden], "seed": seed,
        "dataset": cfg.dataset, "device": cfg.device, "data_dir": cfg.data_dir,
        "eval_samples": spec.eval_samples,
    })


def _job(cfg: ReproduceConfig, method: str, hidden: int, candidate: int, seed: int) -> Job:
    cands = cfg.spec.candidates[method]
    return Job(method, hidden, candidate, seed,
               _train_config(cfg, method, hidden, cands[candidate], seed),
               Path(cfg.out) / "runs" / _run_name(method, hidden, candidate, seed), len(cands))


def plan_jobs(cfg: ReproduceConfig) -> tuple[list[Job], list[Job]]:
    """(the selection runs: every candidate of every cell with seed 0; the extra seeds of the
    headline cells, with their first candidate as a placeholder until selection is done)."""
    first = [_job(cfg, m, w, c, 0) for m in METHODS for w in WIDTHS
             for c in range(len(cfg.spec.candidates[m]))]
    extra = [_job(cfg, m, w, 0, s) for (m, w) in HEADLINE_CELLS for s in range(1, int(cfg.seeds or 1))]
    return first, extra


def _epoch_seconds(job: Job, n_train: int) -> float:
    kind = "bbb" if job.config.method == "bbb" else job.config.method
    base = SECONDS_PER_EPOCH.get((kind, job.hidden))
    if base is None:  # another width: scale with the number of weights of 2x400
        base = SECONDS_PER_EPOCH[(kind, 400)] * (784 * job.hidden + job.hidden ** 2) / (784 * 400 + 400 ** 2)
    samples = job.config.samples if job.config.method == "bbb" else 1
    return base * samples * n_train / 50000.0


def estimate_seconds(job: Job, n_train: int = 50000, epochs_done: int = 0) -> float:
    """Estimated seconds of ``job`` on a quiet 2-core CPU (training plus final evaluation)."""
    per_epoch = _epoch_seconds(job, n_train)
    evals = 0.5 if job.config.method == "bbb" else 0.1  # final Monte Carlo evaluation, in epochs
    return per_epoch * (max(0, job.config.epochs - epochs_done) + evals)


def _fmt_time(s: float) -> str:
    s = max(0.0, float(s))
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 48 * 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{s / 86400:.1f} days"


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _check_same_settings(job: Job, out: Path) -> None:
    stored = _read_json(job.run_dir / "config.json")
    if stored is None:
        return
    now = job.config.to_dict()
    diff = [k for k in now if k not in T.RESUME_MUTABLE and k in stored and stored[k] != now[k]]
    if diff:
        k = diff[0]
        raise UserError(f"{job.run_dir} was trained with {k}={stored[k]!r}, this plan has {now[k]!r}; "
                        f"use another --out than {out} (or delete that run)")


def _finished(job: Job) -> dict[str, Any] | None:
    """The run's summary when it has finished ``job.config.epochs`` epochs, else None."""
    s = _read_json(job.run_dir / "summary.json")
    if s is None or s.get("epochs") != job.config.epochs:
        return None
    return s


def _diverged(job: Job) -> str | None:
    d = _read_json(job.run_dir / "diverged.json")
    return None if d is None else str(d.get("message", "diverged"))


def _epochs_done(job: Job) -> int:
    last = job.run_dir / "metrics.csv"
    if not last.is_file():
        return 0
    try:
        return len(T.read_metrics(job.run_dir))
    except (UserError, ValueError, OSError):
        return 0


def _limit(data: dict[str, Tensor], spec: BudgetSpec) -> dict[str, Tensor]:
    out = dict(data)
    for split, n in (("train", spec.train_limit), ("val", spec.eval_limit), ("test", spec.eval_limit)):
        if n is not None:
            out[f"{split}_x"], out[f"{split}_y"] = data[f"{split}_x"][:n], data[f"{split}_y"][:n]
    return out


class _Progress:
    """One line per run: run i/N, the cell, elapsed time and the ETA (estimate x measured pace)."""

    def __init__(self, jobs: Sequence[Job], n_train: int, log: Callable[[str], None]) -> None:
        self.n_train = n_train
        self.log = log
        self.total = len(jobs)
        self.remaining = {j.name: estimate_seconds(j, n_train, _epochs_done(j)) for j in jobs}
        self.t0 = time.perf_counter()
        self.spent_est = 0.0
        self.spent_real = 0.0
        self.i = 0

    def start(self, job: Job, status: str) -> float:
        self.i += 1
        pace = self.spent_real / self.spent_est if self.spent_est > 0 else 1.0
        eta = pace * sum(self.remaining.values())
        cell = f"{METHOD_NAMES[job.method]} 2x{job.hidden}"
        extra = []
        if job.n_candidates > 1:
            extra.append(f"candidate {job.candidate + 1}/{job.n_candidates}")
        extra.append(f"seed {job.seed}")
        self.log(f"[run {self.i}/{self.total}] {cell} ({', '.join(extra)}; {job.name}): {status}; "
                 f"elapsed {_fmt_time(time.perf_counter() - self.t0)}, eta {_fmt_time(eta)}")
        return time.perf_counter()

    def done(self, job: Job, t_start: float, trained: bool) -> None:
        est = self.remaining.pop(job.name, 0.0)
        if trained:
            self.spent_est += est
            self.spent_real += time.perf_counter() - t_start


def _run_job(job: Job, data: dict[str, Tensor], cfg: ReproduceConfig, progress: _Progress,
             log: Callable[[str], None], out: Path) -> dict[str, Any] | None:
    """Train ``job`` unless it is finished; its summary, or None when it diverged."""
    _check_same_settings(job, out)
    summary = _finished(job)
    if summary is not None:
        progress.start(job, "done, skipped")
        progress.done(job, 0.0, trained=False)
        return summary
    msg = _diverged(job)
    if msg is not None:
        progress.start(job, "diverged earlier, skipped")
        progress.done(job, 0.0, trained=False)
        return None
    done = _epochs_done(job)
    status = (f"resuming after epoch {done} of {job.config.epochs}" if done else
              f"training {job.config.epochs} epochs")
    t = progress.start(job, status)
    try:
        summary = T.train(job.config, job.run_dir, data=data, resume=True, quiet=cfg.quiet, log=log)
    except T.TrainingDiverged as e:
        atomic_write_json(job.run_dir / "diverged.json", {"message": str(e)})
        log(f"  {job.name}: {e}")
        summary = None
    except T.TrainingInterrupted as e:
        raise T.TrainingInterrupted(
            f"interrupted in {job.run_dir} (epoch {e.epoch} is saved); run the same "
            f"'bbb reproduce mnist --budget {cfg.budget} --out {out}' to continue", e.run_dir, e.epoch,
        ) from None
    except UserError as e:
        if "cannot resume" in str(e):
            raise UserError(f"{e}; use another --out than {out}") from None
        raise
    progress.done(job, t, trained=True)
    return summary


def _select(jobs: Sequence[Job], summaries: dict[str, dict[str, Any] | None]) -> int | None:
    """The candidate with the lowest validation error (ties: the earlier one)."""
    best: tuple[float, int] | None = None
    for j in jobs:
        s = summaries.get(j.name)
        if s is None or s.get("val_error") is None:
            continue
        key = (float(s["val_error"]), j.candidate)
        if best is None or key < best:
            best = key
    return None if best is None else best[1]


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def _pct(v: float | None) -> float | None:
    return None if v is None else round(100.0 * float(v), 4)


def _csv_text(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else r[c] for c in columns])
    return buf.getvalue()


def _neglog(s: float) -> str:
    v = -math.log(s)
    return f"{0.0 if abs(v) < 1e-9 else v:.3g}"


def _hyper_text(method: str, tc: T.TrainConfig) -> str:
    parts = [f"{tc.optimizer} lr {tc.lr:g}", tc.lr_schedule]
    if method == "dropout":
        parts.append(f"dropout {tc.dropout_input:g} in / {tc.dropout_hidden:g} hidden")
    if method == "bbb_gaussian":
        parts += [f"N(0, sigma=e^-{_neglog(tc.prior_sigma)})", f"k={tc.samples}", f"{tc.kl_weighting} KL"]
    if method == "bbb_mixture":
        parts += [f"pi={tc.pi:g}, -log s1={_neglog(tc.sigma1)}, -log s2={_neglog(tc.sigma2)}",
                  f"k={tc.samples}", f"{tc.kl_weighting} KL"]
    return ", ".join(parts)


def _table1_row(cfg: ReproduceConfig, method: str, hidden: int, cands: Sequence[Job],
                seeds: Sequence[Job], selected: int | None,
                summaries: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    paper = PAPER_TABLE1.get((method, hidden)) if cfg.dataset == "mnist" else None
    row: dict[str, Any] = {"method": method, "hidden": hidden, "paper_test_error": paper,
                           "n_candidates": len(cands)}
    row["seconds_all"] = round(sum(float(s["seconds"]) for j in [*cands, *seeds]
                                   if (s := summaries.get(j.name)) is not None), 3)
    if selected is None:
        row.update({"status": "diverged", "n_seeds": 0})
        return row
    chosen = [j for j in cands if j.candidate == selected][0]
    runs = [chosen, *[j for j in seeds if summaries.get(j.name) is not None]]
    s0 = summaries[chosen.name]
    assert s0 is not None
    errs = [100.0 * float(summaries[j.name]["test_error"]) for j in runs]  # type: ignore[index]
    tc = chosen.config
    row.update({
        "test_error": round(statistics.fmean(errs), 4),
        "test_error_sd": round(statistics.stdev(errs), 4) if len(errs) > 1 else None,
        "n_seeds": len(errs),
        "test_errors": " ".join(f"{e:.2f}" for e in errs),
        "test_error_mc": _pct(s0.get("test_error_mc")),
        "val_error": _pct(s0.get("val_error")),
        "epochs": s0.get("epochs"),
        "best_epoch": s0.get("best_epoch"),
        "seconds": round(float(s0.get("seconds", 0.0)), 3),
        "candidate": selected,
        "weights": s0.get("num_weights"),
        "run": str(Path("runs") / chosen.name),
        "status": "ok",
    })
    for k in _HYPER_BY_METHOD[method]:
        row[k] = getattr(tc, k)
    return row


def _table1_md(cfg: ReproduceConfig, rows: Sequence[dict[str, Any]], jobs: Sequence[Job],
               counts: tuple[int, int, int]) -> str:
    spec = cfg.spec
    lines = [
        f"# Table 1: {cfg.dataset} test error (budget `{cfg.budget}`)",
        "",
        f"Budget `{cfg.budget}`: {spec.description}.",
        "",
        "Test error with the posterior mean weights (BBB) or the deterministic network (SGD; dropout "
        "at test time), for the checkpoint with the lowest **validation** error; when a cell has "
        "several candidate settings, the one with the lowest validation error is reported. The test "
        "set never selects anything. Where n > 1, mean +- sample standard deviation over n "
        "independent seeds (initialisation, shuffling and noise; same data split).",
        "",
        "| method | units/layer | test error (ours) | paper | val error | epochs (best) | "
        "hyperparameters | wall time |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    by_name = {(j.method, j.hidden, j.candidate): j for j in jobs}
    for r in rows:
        paper = "-" if r.get("paper_test_error") is None else f"{r['paper_test_error']:.2f}%"
        if r.get("status") != "ok":
            lines.append(f"| {METHOD_NAMES[r['method']]} | {r['hidden']} | diverged | {paper} | - | - | - | - |")
            continue
        err = f"{r['test_error']:.2f}%"
        if r["n_seeds"] > 1:
            err += f" +- {r['test_error_sd']:.2f} (n={r['n_seeds']})"
        j = by_name[(r["method"], r["hidden"], r["candidate"])]
        hyper = _hyper_text(r["method"], j.config)
        if r["n_candidates"] > 1:
            hyper += f" (candidate {r['candidate'] + 1} of {r['n_candidates']})"
        lines.append(f"| {METHOD_NAMES[r['method']]} | {r['hidden']} | {err} | {paper} | "
                     f"{r['val_error']:.2f}% | {r['epochs']} ({r['best_epoch']}) | {hyper} | "
                     f"{_fmt_time(r['seconds'])} |")
    n = counts
    lines += ["", f"Settings shared by every run: minibatch 128, pixels / 126, {n[0]:,} training / "
              f"{n[1]:,} validation images (a seeded split of the official training set), {n[2]:,} test images, Adam with a cosine learning-rate decay to 0 "
              "over the run's epochs, BBB: reparameterisation (one weight sample per minibatch and "
              "MC sample), uniform minibatch KL weighting 1/M, Monte Carlo KL for the scale mixture, "
              "closed-form KL for the Gaussian prior, rho initialised at -5. Dropout: PyTorch's "
              "inverted dropout, so the test-time weights are the trained weights. `wall time` is the "
              "training time of the reported run; `seconds_all` in table1.csv adds every candidate and "
              "seed. The paper trains for up to 600 epochs; "
              + ("this budget trains far fewer, so the comparison is indicative only."
                 if cfg.budget != "paper" else "so does this budget."),
              *(["", "The quick recipes were fixed before any quick run: the scale mixture is `bbb demo`'s "
                 "recipe; the Gaussian prior's sigma = e^-1 had the lowest validation error in a 3-epoch "
                 "2x400 probe over e^0, e^-1, e^-2, e^-3."] if cfg.budget == "quick" else []),
              "", f"Candidate settings of the `{cfg.budget}` budget (per method, all widths):", ""]
    for m in METHODS:
        eps = spec.epochs[m]
        cands = "; ".join(_hyper_text(m, _train_config(cfg, m, 400, c, 0)) for c in spec.candidates[m])
        lines.append(f"- {METHOD_NAMES[m]}: {cands}; epochs "
                     + ", ".join(f"{eps[w]} (2x{w})" for w in WIDTHS))
    return "\n".join(lines) + "\n"


def _table2(cfg: ReproduceConfig, job: Job, data: dict[str, Tensor]) -> list[dict[str, Any]]:
    rows = T.prune_run(job.run_dir, PRUNE_FRACTIONS, which="last", device=cfg.device, data=data)
    paper = {f: (w, e) for f, w, e in PAPER_TABLE2} if cfg.dataset == "mnist" else {}
    out = []
    for r in rows:
        pw, pe = paper.get(r["fraction_removed"], (None, None))
        thr = float(r["snr_threshold"])
        out.append({
            "fraction_removed": r["fraction_removed"], "weights_left": r["weights_left"],
            "weights_total": r["weights_total"], "snr_threshold": thr,
            "snr_threshold_db": round(10.0 * math.log10(thr), 4) if thr > 0 else None,
            "test_error": _pct(r["test_error"]), "paper_weights_left": pw, "paper_test_error": pe,
        })
    return out


def _weights_text(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.2f}m" if n >= 1e6 else (f"{n / 1e3:.0f}k" if n >= 1e3 else str(n))


def _table2_md(cfg: ReproduceConfig, rows: Sequence[dict[str, Any]], job: Job) -> str:
    lines = [
        f"# Table 2: pruning BBB 2x1200 by signal-to-noise ratio (budget `{cfg.budget}`)",
        "",
        f"Run `runs/{job.name}` ({METHOD_NAMES[job.method]}, {job.config.epochs} epochs), end of "
        "training (`last.pt`), as in the paper. The weights with the lowest |mu|/sigma are set to 0, "
        "the others to mu; biases are kept. Test error with the remaining mean weights.",
        "",
        "| proportion removed | #weights (ours) | test error (ours) | #weights (paper) | test error (paper) |"
        " SNR threshold (dB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pe = "-" if r["paper_test_error"] is None else f"{r['paper_test_error']:.2f}%"
        db = "-" if r["snr_threshold_db"] is None else f"{r['snr_threshold_db']:.2f}"
        lines.append(f"| {100 * r['fraction_removed']:g}% | {_weights_text(r['weights_left'])} | "
                     f"{r['test_error']:.2f}% | {_weights_text(r['paper_weights_left'])} | {pe} | {db} |")
    lines += ["", "SNR in dB is 10 log10(|mu|/sigma) (the paper does not state its convention; "
              "20 log10 would double every dB value)."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


FIG2_METHODS = (("sgd", "SGD"), ("dropout", "dropout"), ("bbb_mixture", "BBB (scale mixture)"))


def _fig2(out: Path, runs: dict[str, Job]) -> list[str]:
    curves: dict[str, list[dict[str, Any]]] = {m: T.read_metrics(runs[m].run_dir) for m, _ in FIG2_METHODS
                                                if m in runs}
    epochs = sorted({r["epoch"] for rows in curves.values() for r in rows})
    table = []
    for e in epochs:
        row: dict[str, Any] = {"epoch": e}
        for m, rows in curves.items():
            r = next((x for x in rows if x["epoch"] == e), None)
            row[f"{m}_test_error"] = None if r is None else _pct(r.get("test_error"))
            row[f"{m}_val_error"] = None if r is None else _pct(r.get("val_error"))
        table.append(row)
    cols = ["epoch", *[f"{m}_{k}" for m, _ in FIG2_METHODS for k in ("test_error", "val_error")]]
    atomic_write_text(out / "fig2_curves.csv", _csv_text(cols, table))
    files = ["fig2_curves.csv"]
    plt = _pyplot()
    if plt is None:
        return files
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for m, label in FIG2_METHODS:
        pts = [(r["epoch"], r[f"{m}_test_error"]) for r in table if r.get(f"{m}_test_error") is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o" if len(pts) < 30 else None, ms=3, label=label)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test error (%)")
    ax.set_title("Figure 2: test error of 2x1200 networks (mean weights)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _savefig(fig, out / "fig2_curves.png")
    plt.close(fig)
    return [*files, "fig2_curves.png"]


@torch.no_grad()
def weight_sample(model: nn.Module, generator: torch.Generator | None = None) -> Tensor:
    """The weights of ``model`` as one flat CPU tensor, biases excluded.

    BBB: one sample w = mu + softplus(rho) * eps from q for every weight (Figure 3's "samples
    from q"); a deterministic network: its ``nn.Linear`` weights (for dropout, the weights used
    at test time: PyTorch's inverted dropout scales during training, not at test time).
    """
    parts: list[Tensor] = []
    bayes = list(bayes_modules(model))
    if bayes:
        for m in bayes:
            mu, sigma = m.weight_mu.detach().float().cpu(), softplus(m.weight_rho.detach().float().cpu())
            eps = torch.randn(mu.shape, generator=generator)
            parts.append((mu + sigma * eps).flatten())
    else:
        parts = [m.weight.detach().float().cpu().flatten() for m in model.modules() if isinstance(m, nn.Linear)]
    if not parts:
        raise UserError("the model has no weights to plot")
    return torch.cat(parts)


def _quantile(v: Tensor, q: float) -> float:
    """The ``q`` quantile of all of ``v`` (numpy's partition: no sort, no size limit)."""
    import numpy as np

    return float(np.quantile(v.detach().double().cpu().numpy(), q))


FIG3_BINS = 240


def _fig3_range(samples: dict[str, Tensor]) -> float:
    """Half-width of the plotted window: 1.1x the largest 99.9% quantile of |w|, rounded up to
    0.05 (the paper's axis is +-0.2), at most 1."""
    r = max(_quantile(v.abs(), 0.999) for v in samples.values()) * 1.1
    return min(1.0, max(0.05, math.ceil(r / 0.05) * 0.05))


def _fig3(out: Path, runs: dict[str, Job]) -> list[str]:
    g = torch.Generator().manual_seed(0)
    samples: dict[str, Tensor] = {}
    for m, _ in FIG2_METHODS:
        if m in runs:
            model, _cfg = T.load_run(runs[m].run_dir, "last", device="cpu")
            samples[m] = weight_sample(model, g)
    rng = _fig3_range(samples)
    edges = torch.linspace(-rng, rng, FIG3_BINS + 1, dtype=torch.float64)
    width = float(edges[1] - edges[0])
    dens = {m: torch.histc(v.double(), bins=FIG3_BINS, min=-rng, max=rng) / (v.numel() * width)
            for m, v in samples.items()}
    rows = [{"bin_left": round(float(edges[i]), 6), "bin_right": round(float(edges[i + 1]), 6),
             **{m: float(d[i]) for m, d in dens.items()}} for i in range(FIG3_BINS)]
    atomic_write_text(out / "fig3_weights.csv", _csv_text(["bin_left", "bin_right", *dens], rows))
    stats = {m: {"n": int(v.numel()), "std": float(v.std()), "mean_abs": float(v.abs().mean()),
                 "fraction_abs_below_0.01": float((v.abs() < 0.01).double().mean()),
                 "fraction_outside_plot": float((v.abs() > rng).double().mean()),
                 "q01": _quantile(v, 0.01), "q99": _quantile(v, 0.99),
                 "run": f"runs/{runs[m].name}", "checkpoint": "last"}
             for m, v in samples.items()}
    atomic_write_json(out / "fig3_weights.json", {
        "what": "density of the weights (biases excluded) of the 2x1200 networks; BBB: one sample "
                "from q; SGD/dropout: the trained (test-time) weights", "plot_range": rng, "methods": stats})
    files = ["fig3_weights.csv", "fig3_weights.json"]
    plt = _pyplot()
    if plt is None:
        return files
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    centers = ((edges[:-1] + edges[1:]) / 2).numpy()
    for m, label in FIG2_METHODS:
        if m in dens:
            ax.plot(centers, dens[m].numpy(), label=label + (" (samples from q)" if m.startswith("bbb") else ""))
    ax.set_xlabel("weight")
    ax.set_ylabel("density")
    ax.set_xlim(-rng, rng)
    ax.set_title("Figure 3: weights of the 2x1200 networks")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _savefig(fig, out / "fig3_weights.png")
    plt.close(fig)
    return [*files, "fig3_weights.png"]


FIG4_BINS = 100
FIG4_LOW_QUANTILE = 0.005  # the histogram starts here: a few near-zero |mu| would squash it


def _fig4(out: Path, job: Job) -> list[str]:
    from ..prune import signal_to_noise, snr_db

    model, _cfg = T.load_run(job.run_dir, "last", device="cpu")
    db = snr_db(signal_to_noise(model)).double()
    n_all = db.numel()
    db = db[torch.isfinite(db)]
    if db.numel() == 0:
        raise UserError(f"{job.run_dir}: no finite signal-to-noise ratio to plot")
    n = db.numel()
    qs = {f"q{round(100 * q):02d}": _quantile(db, q) for q in (0.05, 0.25, 0.5, SNR_CUTOFF, 0.95)}
    cut = _quantile(db, SNR_CUTOFF)
    lo, hi = _quantile(db, FIG4_LOW_QUANTILE), float(db.max())
    hi = hi if hi > lo else lo + 1.0
    edges = torch.linspace(lo, hi, FIG4_BINS + 1, dtype=torch.float64)
    width = (hi - lo) / FIG4_BINS
    counts = torch.histc(db.clamp(lo, hi), bins=FIG4_BINS, min=lo, max=hi)
    below = int((db < lo).sum())
    counts[0] -= below  # clamped values below the window are not density inside it
    cdf = (below + torch.cumsum(counts, 0)) / n
    rows = [{"bin_left": float(edges[i]), "bin_right": float(edges[i + 1]),
             "density": float(counts[i]) / (n * width), "cdf": float(cdf[i])} for i in range(FIG4_BINS)]
    atomic_write_text(out / "fig4_snr.csv", _csv_text(["bin_left", "bin_right", "density", "cdf"], rows))
    atomic_write_json(out / "fig4_snr.json", {
        "convention": "SNR in dB = 10 log10(|mu| / sigma) (the paper does not state it; 20 log10 "
                      "doubles every value)",
        "cutoff_fraction": SNR_CUTOFF, "cutoff_db": cut, "quantiles_db": qs,
        "fraction_below_plot": below / n, "n_weights": int(n_all), "n_finite": int(n),
        "run": f"runs/{job.name}", "checkpoint": "last"})
    files = ["fig4_snr.csv", "fig4_snr.json"]
    plt = _pyplot()
    if plt is None:
        return files
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6.5, 6), sharex=True)
    ax1.stairs((counts / (n * width)).numpy(), edges.numpy(), fill=True, alpha=0.7)
    ax1.axvline(cut, color="red", label=f"{100 * SNR_CUTOFF:g}% cut-off ({cut:.2f} dB)")
    ax1.set_ylabel("density")
    ax1.set_title(f"Figure 4: SNR of the {n:,} weights of {job.name}")
    ax1.legend()
    ax2.plot(edges[1:].numpy(), cdf.numpy())
    ax2.axvline(cut, color="red")
    ax2.axhline(SNR_CUTOFF, color="red", ls=":", lw=0.8)
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("CDF")
    ax2.set_xlabel("signal-to-noise ratio (dB) = 10 log10(|mu| / sigma)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    _savefig(fig, out / "fig4_snr.png")
    plt.close(fig)
    return [*files, "fig4_snr.png"]


def _savefig(fig: Any, path: Path) -> None:
    """Save through a temporary file and rename (a reader never sees half a PNG)."""
    from ..io import atomic_write

    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------


def _manifest(out: Path, cfg: ReproduceConfig) -> dict[str, Any]:
    path = out / "reproduce.json"
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder")
    old = _read_json(path) if path.exists() else None
    if path.exists() and old is None:
        raise UserError(f"{path} is unreadable; use another --out")
    if old is not None:
        for k in ("experiment", "budget", "dataset"):
            if old.get(k) != getattr(cfg, k):
                raise UserError(f"{out} holds a {old.get('experiment')} reproduction with {k} "
                                f"{old.get(k)!r}, not {getattr(cfg, k)!r}; use another --out or the same --{k}")
    return old or {}


def _plan_text(cfg: ReproduceConfig, jobs: Sequence[Job], n_train: int) -> str:
    lines = [f"{'run':<26} {'epochs':>6} {'estimate':>9}"]
    for j in jobs:
        lines.append(f"{j.name:<26} {j.config.epochs:>6} {_fmt_time(estimate_seconds(j, n_train)):>9}")
    return "\n".join(lines)


def run_reproduce(
    cfg: ReproduceConfig,
    *,
    data: dict[str, Tensor] | None = None,
    log: Callable[[str], None] | None = None,
    plan_only: bool = False,
) -> dict[str, Any]:
    """Train the Table 1 cells, select on validation, write the tables and figures.

    Args:
        cfg: the settings (budget, output folder, seeds, device, data).
        data: pre-loaded tensors (keys train_x, train_y, val_x, val_y, test_x, test_y), e.g.
            tiny synthetic data in tests; default: ``cfg.dataset`` through
            :func:`bbb.train.load_data`. The budget's subset limits apply either way.
        log: where progress lines go (default: print).
        plan_only: print the plan and the time estimate and return without training.

    Returns a dict with ``table1`` and ``table2`` (the rows written), ``files`` (written, relative
    to ``cfg.out``), ``selected`` (cell -> run name), ``trained`` (run names trained or resumed
    by this call) and ``seconds``.
    """
    if log is None:
        def log(s: str) -> None:
            print(s, flush=True)
    t0 = time.perf_counter()
    out = Path(cfg.out)
    spec = cfg.spec
    old = _manifest(out, cfg)
    first, extra = plan_jobs(cfg)
    n_train_full = 50000
    n_train = min(n_train_full, spec.train_limit or n_train_full)
    if data is not None:
        n_train = min(int(data["train_x"].shape[0]), spec.train_limit or n_train_full)
    est = sum(estimate_seconds(j, n_train) for j in [*first, *extra]) + FIXED_OVERHEAD_S
    log(f"bbb reproduce mnist: budget {cfg.budget} ({spec.description}); dataset {cfg.dataset}; "
        f"{len(first) + len(extra)} training runs ({len(first)} for the 12 cells"
        + (f", {len(extra)} extra seeds of the headline cells" if extra else "") + f") -> {out}")
    log(f"estimated time: {_fmt_time(est)} on a quiet 2-core CPU (measured seconds per epoch; "
        + ("a GPU is much faster" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
           else "busy cores are slower")
        + "); runs already finished in --out are skipped")
    if plan_only:
        log(_plan_text(cfg, [*first, *extra], n_train))
        return {"table1": [], "table2": [], "files": [], "selected": {}, "trained": [],
                "estimated_seconds": est, "seconds": time.perf_counter() - t0}

    if data is None:
        data = T.load_data(T.TrainConfig(dataset=cfg.dataset, data_dir=cfg.data_dir, device="cpu"))
    missing = [k for k in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y") if k not in data]
    if missing:
        raise UserError(f"data is missing {', '.join(missing)}")
    data = _limit(data, spec)
    if data["val_x"].shape[0] == 0:
        raise UserError("model selection needs a validation split, but it is empty")
    if data["test_x"].shape[0] == 0:
        raise UserError("the test split is empty")

    out.mkdir(parents=True, exist_ok=True)
    manifest = {**old, "experiment": cfg.experiment, "budget": cfg.budget, "dataset": cfg.dataset,
                "seeds": cfg.seeds, "device": cfg.device, "status": "running",
                "estimated_seconds": round(est, 1), "num_train": int(data["train_x"].shape[0]),
                "num_val": int(data["val_x"].shape[0]), "num_test": int(data["test_x"].shape[0])}
    atomic_write_json(out / "reproduce.json", manifest)

    progress = _Progress([*first, *extra], n_train, log)
    summaries: dict[str, dict[str, Any] | None] = {}
    trained: list[str] = []

    def run(job: Job) -> None:
        was_finished = _finished(job) is not None or _diverged(job) is not None
        summaries[job.name] = _run_job(job, data, cfg, progress, log, out)
        if not was_finished:
            trained.append(job.name)

    for job in first:
        run(job)
    selected: dict[tuple[str, int], int | None] = {}
    for m in METHODS:
        for w in WIDTHS:
            selected[(m, w)] = _select([j for j in first if j.cell == (m, w)], summaries)
    # extra seeds of the headline cells, with the selected candidate
    seed_jobs: dict[tuple[str, int], list[Job]] = {c: [] for c in selected}
    for placeholder in extra:
        c = selected[placeholder.cell]
        if c is None:
            progress.done(placeholder, 0.0, trained=False)
            continue
        job = _job(cfg, placeholder.method, placeholder.hidden, c, placeholder.seed)
        progress.remaining[job.name] = progress.remaining.pop(placeholder.name, 0.0)
        seed_jobs[placeholder.cell].append(job)
        run(job)

    table1 = [_table1_row(cfg, m, w, [j for j in first if j.cell == (m, w)], seed_jobs[(m, w)],
                          selected[(m, w)], summaries) for m in METHODS for w in WIDTHS]
    files: list[str] = []
    atomic_write_text(out / "table1.csv", _csv_text(TABLE1_COLUMNS, table1))
    atomic_write_text(out / "table1.md", _table1_md(cfg, table1, first, (
        int(data["train_x"].shape[0]), int(data["val_x"].shape[0]), int(data["test_x"].shape[0]))))
    files += ["table1.csv", "table1.md"]
    log(f"wrote {out / 'table1.md'}")

    chosen = {m: next(j for j in first if j.cell == (m, w) and j.candidate == c)
              for (m, w), c in selected.items() if w == max(WIDTHS) and c is not None}
    files += _fig2(out, chosen)
    files += _fig3(out, chosen)
    table2: list[dict[str, Any]] = []
    if "bbb_mixture" in chosen:
        job = chosen["bbb_mixture"]
        table2 = _table2(cfg, job, data)
        atomic_write_text(out / "table2_pruning.csv", _csv_text(TABLE2_COLUMNS, table2))
        atomic_write_text(out / "table2_pruning.md", _table2_md(cfg, table2, job))
        files += ["table2_pruning.csv", "table2_pruning.md"]
        files += _fig4(out, job)
    else:
        log("the 2x1200 BBB (scale mixture) cell diverged: no Table 2 and no Figure 4")

    seconds = time.perf_counter() - t0
    manifest.update({
        "status": "complete", "files": files, "seconds_last_call": round(seconds, 1),
        "selected": {f"{m}_{w}": (None if c is None else _run_name(m, w, c, 0)) for (m, w), c in selected.items()},
        "runs": sorted(summaries), "trained_last_call": trained,
    })
    atomic_write_json(out / "reproduce.json", manifest)
    _print_summary(table1, table2, log)
    log(f"wrote {', '.join(files)} in {out} ({_fmt_time(seconds)})")
    return {"table1": table1, "table2": table2, "files": files, "trained": trained,
            "selected": manifest["selected"], "estimated_seconds": est, "seconds": seconds}


def _print_summary(table1: Sequence[dict[str, Any]], table2: Sequence[dict[str, Any]],
                   log: Callable[[str], None]) -> None:
    log("")
    log(f"{'method':<26} {'units':>5} {'ours':>16} {'paper':>6}")
    for r in table1:
        ours = "diverged" if r.get("status") != "ok" else f"{r['test_error']:.2f}%"
        if r.get("n_seeds", 0) > 1:
            ours += f" +-{r['test_error_sd']:.2f}"
        paper = "-" if r.get("paper_test_error") is None else f"{r['paper_test_error']:.2f}%"
        log(f"{METHOD_NAMES[r['method']]:<26} {r['hidden']:>5} {ours:>16} {paper:>6}")
    if table2:
        log("")
        log(f"{'removed':>8} {'#weights':>9} {'ours':>7} {'paper':>6}")
        for r in table2:
            paper = "-" if r["paper_test_error"] is None else f"{r['paper_test_error']:.2f}%"
            log(f"{100 * r['fraction_removed']:>7g}% {_weights_text(r['weights_left']):>9} "
                f"{r['test_error']:>6.2f}% {paper:>6}")


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb reproduce`` options on ``parser``."""
    parser.description = (
        "Reproduce the paper's MNIST results (section 5.1): train the 12 cells of Table 1 (SGD, "
        "dropout, BBB Gaussian prior, BBB scale mixture; 2x400, 2x800, 2x1200), select on the "
        "validation split only, and write table1.csv/.md, fig2_curves.png, fig3_weights.png, "
        "table2_pruning.csv/.md and fig4_snr.png (with CSV/JSON beside each figure) to --out. "
        "Resumable: rerun the same command to continue. Budgets: "
        + "; ".join(f"{b}: {s.description}" for b, s in BUDGETS.items()) + ".")
    parser.add_argument("experiment", choices=[e.value for e in Experiment],
                        help="which experiment to reproduce (mnist: Table 1, Figures 2-4, Table 2)")
    parser.add_argument("--budget", choices=[b.value for b in Budget], default=Budget.SMOKE.value,
                        help="smoke (seconds, a pipeline test), quick (~35 min on 2 CPU cores) or "
                             "paper (600 epochs, candidates chosen on validation) (default: smoke)")
    parser.add_argument("--out", default="results/mnist", metavar="DIR",
                        help="output folder; rerunning with the same folder resumes (default: results/mnist)")
    parser.add_argument("--dataset", choices=list(DATASETS), default="mnist",
                        help="mnist or fashion-mnist (paper numbers for mnist only) (default: mnist)")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="independent seeds of the headline cells, BBB mixture and dropout at 2x400 "
                             "and 2x1200 (default: the budget's: smoke 1, quick 1, paper 3)")
    parser.add_argument("--device", choices=[d.value for d in T.DeviceKind], default="auto",
                        help="auto (cuda when available), cpu or cuda (default: auto)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="data folder (else $BBB_DATA, else ~/.cache/bbb)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="CPU threads for torch (default: torch's choice; use 1 when other jobs share the cores)")
    parser.add_argument("--plan", action="store_true",
                        help="print the runs and the time estimate, train nothing")
    parser.add_argument("--quiet", action="store_true", help="one line per epoch instead of progress bars")


def main(args: argparse.Namespace) -> int:
    """``bbb reproduce mnist``: returns the exit code."""
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    cfg = ReproduceConfig(experiment=args.experiment, budget=args.budget, out=args.out,
                          dataset=args.dataset, seeds=args.seeds, device=args.device,
                          data_dir=args.data_dir, quiet=args.quiet)
    run_reproduce(cfg, plan_only=args.plan)
    return 0

