"""Running the jobs: skip finished runs, resume the others, record divergence, select
the candidate with the lowest validation error."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from ... import runs as T
from ...errors import UserError
from ...io import atomic_write_json
from ...runs import jobs as runjobs
from ...runs.jobs import read_json
from .plan import Job, ReproduceConfig, cells_text, estimate_seconds, fmt_time
from .recipes import METHOD_NAMES, BudgetSpec


def check_same_settings(job: Job, out: Path) -> None:
    stored = read_json(job.run_dir / "config.json")
    if stored is None:
        return
    now = job.config.to_dict()
    diff = [k for k in now if k not in T.RESUME_MUTABLE and k in stored and stored[k] != now[k]]
    if diff:
        k = diff[0]
        raise UserError(f"{job.run_dir} was trained with {k}={stored[k]!r}, this plan has {now[k]!r}; "
                        f"use another --out than {out} (or delete that run)")


def finished_summary(job: Job) -> dict[str, Any] | None:
    """The run's summary when it has finished ``job.config.epochs`` epochs, else None."""
    return runjobs.finished_summary(job.run_dir, job.config.epochs)


def diverged_reason(job: Job) -> str | None:
    d = read_json(job.run_dir / "diverged.json")
    return None if d is None else str(d.get("message", "diverged"))


def job_epochs_done(job: Job) -> int:
    return runjobs.epochs_done(job.run_dir)


def limit_data(data: dict[str, Tensor], spec: BudgetSpec) -> dict[str, Tensor]:
    out = dict(data)
    for split, n in (("train", spec.train_limit), ("val", spec.eval_limit), ("test", spec.eval_limit)):
        if n is not None:
            out[f"{split}_x"], out[f"{split}_y"] = data[f"{split}_x"][:n], data[f"{split}_y"][:n]
    return out


class Progress:
    """One line per run: run i/N, the cell, elapsed time and the ETA (estimate x measured pace)."""

    def __init__(self, jobs: Sequence[Job], n_train: int, log: Callable[[str], None]) -> None:
        self.n_train = n_train
        self.log = log
        self.total = len(jobs)
        self.remaining = {j.name: estimate_seconds(j, n_train, job_epochs_done(j)) for j in jobs}
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
            extra.append(f"candidate {job.candidate + 1}/{job.n_candidates}"
                         + (f" {job.label!r}" if job.label else ""))
        extra.append(f"seed {job.seed}")
        self.log(f"[run {self.i}/{self.total}] {cell} ({', '.join(extra)}; {job.name}): {status}; "
                 f"elapsed {fmt_time(time.perf_counter() - self.t0)}, eta {fmt_time(eta)}")
        return time.perf_counter()

    def done(self, job: Job, t_start: float, trained: bool) -> None:
        est = self.remaining.pop(job.name, 0.0)
        if trained:
            self.spent_est += est
            self.spent_real += time.perf_counter() - t_start


def run_job(job: Job, data: dict[str, Tensor], cfg: ReproduceConfig, progress: Progress,
             log: Callable[[str], None], out: Path) -> dict[str, Any] | None:
    """Train ``job`` unless it is finished; its summary, or None when it diverged."""
    check_same_settings(job, out)
    summary = finished_summary(job)
    if summary is not None:
        progress.start(job, "done, skipped")
        progress.done(job, 0.0, trained=False)
        return summary
    msg = diverged_reason(job)
    if msg is not None:
        progress.start(job, "diverged earlier, skipped")
        progress.done(job, 0.0, trained=False)
        return None
    done = job_epochs_done(job)
    status = (f"resuming after epoch {done} of {job.config.epochs}" if done else
              f"training {job.config.epochs} epochs")
    t = progress.start(job, status)
    try:
        summary = T.train(job.config, job.run_dir, data=data, resume="auto", quiet=cfg.quiet, log=log)
    except T.TrainingDiverged as e:
        atomic_write_json(job.run_dir / "diverged.json", {"message": str(e)})
        log(f"  {job.name}: {e}")
        summary = None
    except T.TrainingInterrupted as e:
        raise T.TrainingInterrupted(
            f"interrupted in {job.run_dir} (epoch {e.epoch} is saved); run the same "
            f"'{command_line(cfg)}' to continue", e.run_dir, e.epoch,
        ) from None
    except UserError as e:
        if "cannot resume" in str(e):
            raise UserError(f"{e}; use another --out than {out}") from None
        raise
    progress.done(job, t, trained=True)
    return summary


def command_line(cfg: ReproduceConfig, *extra: str) -> str:
    """The command line that runs ``cfg`` again (to resume it)."""
    parts = ["bbb reproduce mnist", f"--budget {cfg.budget}", f"--out {cfg.out}"]
    if cfg.dataset != "mnist":
        parts.append(f"--dataset {cfg.dataset}")
    if not cfg.all_cells and "--report" not in extra:  # a report covers every cell
        parts.append(f"--cells {cells_text(cfg.cells)}")
    if cfg.seeds != cfg.spec.seeds:
        parts.append("--seeds " + " ".join(str(i) for i in range(int(cfg.seeds or 1))))
    return " ".join([*parts, *extra])


def select_candidate(jobs: Sequence[Job], summaries: dict[str, dict[str, Any] | None]) -> int | None:
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
