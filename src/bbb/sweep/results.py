"""The sweep's options and its results: ``sweep.csv`` and ``best.json``."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import atomic_write_json, atomic_write_text
from ..options import choice
from .space import RANK_BY, RESULT_COLUMNS, Trial, TrialStatus
from .trial import result_row, trial_dir


class Backend(str, Enum):
    """Where ``bbb sweep`` runs its trials."""

    LOCAL = "local"
    RAY = "ray"


class SchedulerKind(str, Enum):
    """Which trials ``bbb sweep`` stops early: none, or Ray Tune's ASHA."""

    NONE = "none"
    ASHA = "asha"


@dataclass
class SweepOptions:
    """How to run a sweep (the command line's options)."""

    out: Path
    backend: str = Backend.LOCAL.value
    address: str | None = None
    scheduler: str = SchedulerKind.NONE.value
    max_concurrent: int | None = None
    gpus_per_trial: float = 0.0
    cpus_per_trial: float | None = None
    max_failures: int = 2
    grace_period: int | None = None
    reduction_factor: float = 4.0
    storage: str | None = None
    data_dir: str | None = None
    progress: bool = True
    #: called after every epoch of every trial with (trial directory, metrics row), in the
    #: process that trains it; raising makes the trial crash there (the tests' fault injection).
    #: Must be picklable (a module-level function) for parallel local trials and for Ray.
    epoch_hook: Callable[[Path, dict[str, Any]], None] | None = None
    #: experiment loggers of every trial (``--log``; names of :data:`bbb.runs.loggers.LOGGERS`),
    #: made in the process that trains it: each trial's events go to its run directory's ``tb/``
    loggers: tuple[str, ...] = ()
    #: train up to this many trials that differ only in what a population's members may
    #: (:data:`bbb.runs.population.MEMBER_SETTINGS`) as one population (``--population N``; the
    #: local backend, one population at a time); None: every trial alone
    population: int | None = None

    def __post_init__(self) -> None:
        from ..runs.loggers import make_loggers

        self.out = Path(self.out)
        self.loggers = tuple(self.loggers or ())
        make_loggers(self.loggers)  # an unknown name or a missing package: one line, before any trial
        for name, enum in (("backend", Backend), ("scheduler", SchedulerKind)):
            setattr(self, name, choice(name, getattr(self, name), enum))
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise UserError(f"--max-concurrent must be >= 1, got {self.max_concurrent}")
        if not (self.gpus_per_trial >= 0 and math.isfinite(self.gpus_per_trial)):
            raise UserError(f"--gpus-per-trial must be >= 0, got {self.gpus_per_trial}")
        if self.cpus_per_trial is not None and not self.cpus_per_trial > 0:
            raise UserError(f"--cpus-per-trial must be > 0, got {self.cpus_per_trial}")
        if self.max_failures < 0:
            raise UserError(f"--max-failures must be >= 0, got {self.max_failures}")
        if self.grace_period is not None and self.grace_period < 1:
            raise UserError(f"--grace-period must be >= 1, got {self.grace_period}")
        if not self.reduction_factor > 1:
            raise UserError(f"--reduction-factor must be > 1, got {self.reduction_factor}")
        if self.scheduler != SchedulerKind.ASHA.value:  # (read by ASHA only)
            for flag, given in (("--grace-period", self.grace_period is not None),
                                ("--reduction-factor", self.reduction_factor != type(self).reduction_factor)):
                if given:
                    raise UserError(f"{flag} is for --scheduler asha (with --backend ray): give it, or leave "
                                    f"{flag} out")
        if self.backend == Backend.LOCAL.value:
            if self.scheduler != SchedulerKind.NONE.value:
                raise UserError(f"--scheduler {self.scheduler} needs --backend ray")
            for flag, v in (("--address", self.address), ("--storage", self.storage)):
                if v is not None:
                    raise UserError(f"{flag} is for --backend ray")
            if self.gpus_per_trial:
                raise UserError("--gpus-per-trial is for --backend ray; the local backend runs its "
                                "trials on the trial's device (auto: cuda:0 when there is one)")
        if self.population is not None:
            check_population_size(self.population)
            why = ("--backend ray" if self.backend != Backend.LOCAL.value else
                   "--max-concurrent (a population is one process)" if (self.max_concurrent or 1) > 1 else
                   "--log (a population's runs write no logger events)" if self.loggers else
                   "the epoch hook (a population's runs call none)" if self.epoch_hook is not None else None)
            if why is not None:
                raise UserError(f"--population trains on the local backend, one population at a time; leave out {why}")


def check_population_size(n: Any) -> int:
    """``--population N``'s N: an integer of at least 2, else a one-line UserError."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise UserError(f"--population N trains N trials together: N must be at least 2, got {n}")
    return n


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list | dict):
        return json.dumps(v)
    return v


def ranked_by(row: dict[str, Any], by_nll: bool = False) -> str | None:
    """The column of :data:`RANK_BY` that ranks a finished trial's ``row`` (None: unranked); a
    classifier's validation NLL with ``by_nll`` (:func:`nll_classifiers`)."""
    if row.get("status") not in (TrialStatus.DONE.value, TrialStatus.STOPPED.value):
        return None
    if by_nll and row.get("val_error") is not None and row.get("val_nll") is not None:
        return "val_nll"
    return next((k for k in RANK_BY if row.get(k) is not None), None)


def nll_classifiers(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the classifier trials are ranked by validation NLL: every finished one chose its best
    epoch by NLL (``selected_by``, a table's default; MNIST's is the error), so that the trial ranked
    best is the one whose own criterion is best. Trials that chose otherwise, or of an older bbb
    that did not record it: by validation error, as their epochs were chosen."""
    done = [r for r in rows if ranked_by(r) == "val_error"]
    return bool(done) and all(r.get("selected_by") == "nll" and r.get("val_nll") is not None for r in done)


def _sort_key(row: dict[str, Any], by_nll: bool) -> tuple[int, float, int]:
    """Finished trials first, by :func:`ranked_by`'s value (classifiers before regressions in the
    unusual sweep of both), then the rest in the space's order."""
    key = ranked_by(row, by_nll)
    if key is None:
        return (len(RANK_BY), math.inf, int(row.get("index", 0)))
    return (0 if row.get("val_error") is not None else 1, float(row[key]), int(row.get("index", 0)))


def write_results(out: Path, trials: Sequence[Trial], rows: dict[str, dict[str, Any]],
                  backend: str) -> Path:
    """Write sweep.csv (every trial; unfinished ones as pending) and best.json, atomically."""
    keys: list[str] = []
    for t in trials:
        keys += [k for k in t.params if k not in keys]
    table = []
    for t in trials:
        r = rows.get(t.trial_id)
        if r is None or r.get("status") == TrialStatus.PENDING.value:  # (its epochs as its folder has them now:
            # a row made as it started said 0 of a trial interrupted at epoch 7)
            r = {**result_row(t, TrialStatus.PENDING, None, trial_dir(out, t.trial_id)), **{
                k: v for k, v in (r or {}).items() if k in ("error", "retry")}}
        table.append({**r, "index": t.index, "params": dict(t.params)})
    by_nll = nll_classifiers(table)
    table.sort(key=lambda r: _sort_key(r, by_nll))
    columns = ["trial_id", "status", *keys, *RESULT_COLUMNS]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in table:
        flat = {**r["params"], **{k: r.get(k) for k in ("trial_id", "status", *RESULT_COLUMNS)}}
        w.writerow([_csv_value(flat.get(c)) for c in columns])
    path = atomic_write_text(out / "sweep.csv", buf.getvalue())
    if table and ranked_by(table[0]) is not None:
        best = table[0]
        regression = best.get("val_error") is None
        scores = (("val_nll", "val_rmse", "test_rmse", "test_log_likelihood") if regression else
                  ("val_error", "val_nll", "test_error", "test_error_mc", "test_nll") if by_nll else
                  ("val_error", "test_error", "test_error_mc", "test_nll"))
        atomic_write_json(out / "best.json", {
            "trial_id": best["trial_id"], "selected_by": ranked_by(best, by_nll), "backend": backend,
            **{k: best.get(k) for k in scores},
            "status": best["status"], "epochs_run": best["epochs_run"], "best_epoch": best["best_epoch"],
            "seconds": best["seconds"], "params": best["params"], "trial_dir": best["trial_dir"],
            "trials": len(trials),
            "finished": sum(1 for r in table if r["status"] != TrialStatus.PENDING.value)})
    return path


def read_sweep(out: str | Path) -> list[dict[str, str]]:
    """The rows of ``OUT/sweep.csv`` (strings, as written)."""
    path = Path(out) / "sweep.csv"
    if not path.is_file():
        raise UserError(f"{path} not found")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))
