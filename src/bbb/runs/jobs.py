"""The one job runner: train a list of run directories, skipping finished work, resuming the
rest, recording divergence, retrying crashes, and reporting through callbacks.

A *job* is a run directory and the :class:`~bbb.runs.TrainConfig` to train there: any object
with ``run_dir`` and ``config`` attributes (:class:`RunJob`; ``bbb reproduce``'s jobs). The sweep's
local trials (:mod:`bbb.sweep.trial`, one job each, retried), its Ray trainable and ``bbb
reproduce`` (:mod:`bbb.experiments.mnist`) all train through :func:`run_job` / :func:`run_jobs`.

What the runner reads from a run directory (:func:`job_state`), and what it does:

* ``done``: ``summary.json`` of ``config.epochs`` epochs -> skipped;
* ``diverged``: ``diverged.json`` (written here when training diverged) -> skipped: the run
  would diverge again at the same step, so it is never retried;
* ``partial``: epochs in ``metrics.csv`` -> resumed from ``last.pt`` (``train(resume="auto")``);
* ``new`` -> trained.

Before anything, a run directory whose ``config.json`` differs from the job's configuration in
a setting that may not change on resume is refused (:class:`~bbb.errors.SettingsMismatch`). A
crash (any exception but a :class:`~bbb.errors.BBBError` or an interrupt) is retried ``retries``
times, each attempt resuming from the last epoch saved; then it is raised, or recorded as a
``failed`` result (``record_failures``). Interrupts (Ctrl-C: ``TrainingInterrupted``) and bbb's
own errors (a bad setting, a full disk, out of memory...) always propagate. An exception raised
by a callback is the job's own: raised in :meth:`JobCallbacks.on_epoch` it crashes the attempt
(the tests inject faults this way).
"""

from __future__ import annotations

import contextlib
import csv
import multiprocessing as mp
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from enum import Enum
from multiprocessing.context import BaseContext
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import Any, Protocol

from ..errors import BBBError, SettingsMismatch, TrainingDiverged, adopt_warnings_format
from ..io import atomic_write_json, read_json
from .config import TrainConfig, resume_conflicts

__all__ = [
    "DIVERGED_FILE",
    "CallbackList",
    "Job",
    "JobCallbacks",
    "JobResult",
    "JobState",
    "Outcome",
    "RunJob",
    "State",
    "check_job_options",
    "check_validation_seeds",
    "check_settings",
    "diverged_message",
    "epochs_done",
    "finished_summary",
    "job_state",
    "read_json",
    "run_job",
    "run_jobs",
    "watch_parent",
    "watched_manager",
    "worker_pool",
]

#: written into a run directory whose training diverged: ``{"message": ...}``
DIVERGED_FILE = "diverged.json"


# --------------------------------------------------------------------------------------------
# What a run directory holds
# --------------------------------------------------------------------------------------------


def epochs_done(run_dir: str | Path) -> int:
    """Completed epochs recorded in ``run_dir/metrics.csv`` (0 when there is none)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return 0
    try:
        with path.open(newline="") as f:
            return sum(1 for _ in csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return 0


def finished_summary(run_dir: str | Path, epochs: int) -> dict[str, Any] | None:
    """The run's ``summary.json`` when it has finished ``epochs`` epochs, else None."""
    s = read_json(Path(run_dir) / "summary.json")
    if s is None or s.get("epochs") != epochs:
        return None
    return s


def diverged_message(run_dir: str | Path) -> str | None:
    """Why the run diverged (its ``diverged.json``), or None when it did not."""
    d = read_json(Path(run_dir) / DIVERGED_FILE)
    return None if d is None else str(d.get("message", "diverged"))


class State(str, Enum):
    """A run directory's state as the runner sees it."""

    DONE = "done"
    DIVERGED = "diverged"
    PARTIAL = "partial"
    NEW = "new"


@dataclass(frozen=True)
class JobState:
    """What a run directory holds: its :class:`State`, the epochs done, the summary of a done
    run, the message of a diverged one."""

    state: State
    epochs_done: int
    summary: dict[str, Any] | None = None
    message: str | None = None

    @property
    def finished(self) -> bool:
        """Done or diverged: the runner skips it."""
        return self.state in (State.DONE, State.DIVERGED)


def job_state(run_dir: str | Path, epochs: int) -> JobState:
    """The state of ``run_dir`` for a job of ``epochs`` epochs (reads only)."""
    summary = finished_summary(run_dir, epochs)
    if summary is not None:
        return JobState(State.DONE, epochs, summary=summary)
    done = epochs_done(run_dir)
    message = diverged_message(run_dir)
    if message is not None:
        return JobState(State.DIVERGED, done, message=message)
    return JobState(State.PARTIAL if done else State.NEW, done)


# --------------------------------------------------------------------------------------------
# Jobs, results, callbacks
# --------------------------------------------------------------------------------------------


class Job(Protocol):
    """What the runner needs of a job."""

    run_dir: Path
    config: TrainConfig


@dataclass
class RunJob:
    """A job: train ``config`` into ``run_dir``."""

    run_dir: Path
    config: TrainConfig

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)

    @property
    def name(self) -> str:
        return self.run_dir.name


class Outcome(str, Enum):
    DONE = "done"
    DIVERGED = "diverged"
    FAILED = "failed"


@dataclass
class JobResult:
    """How a job ended: ``summary`` of a done run, ``error`` (the divergence, or the last crash
    of a failed one), ``attempts`` this call made (0: it was finished already and skipped)."""

    job: Any
    outcome: Outcome
    summary: dict[str, Any] | None = None
    error: str | None = None
    attempts: int = 0

    @property
    def skipped(self) -> bool:
        return self.attempts == 0


class JobCallbacks:
    """What the runner reports. Subclass and override what you need; each method here does
    nothing. Exceptions raised here propagate as the job's own (see the module's notes)."""

    def on_start(self, job: Any, state: JobState) -> None:
        """Before a job, with what its run directory holds (``state.finished``: it is skipped)."""

    def on_attempt(self, job: Any, state: JobState, attempt: int) -> None:
        """Before each training attempt (1, 2, ...), with the state it starts from."""

    def on_epoch(self, job: Any, row: dict[str, Any]) -> bool | None:
        """After each epoch (its checkpoint and metrics written); True stops training there."""
        return None

    def on_error(self, job: Any, error: str, attempt: int) -> None:
        """An attempt crashed (``error``: one line); it is retried while retries are left."""

    def on_end(self, job: Any, result: JobResult) -> None:
        """After a job: skipped, done, diverged or failed."""


class CallbackList(JobCallbacks):
    """Several callbacks, called in order (``on_epoch`` stops when any of them says so)."""

    def __init__(self, callbacks: Sequence[JobCallbacks | None]) -> None:
        self.callbacks = [c for c in callbacks if c is not None]

    def on_start(self, job: Any, state: JobState) -> None:
        for c in self.callbacks:
            c.on_start(job, state)

    def on_attempt(self, job: Any, state: JobState, attempt: int) -> None:
        for c in self.callbacks:
            c.on_attempt(job, state, attempt)

    def on_epoch(self, job: Any, row: dict[str, Any]) -> bool | None:
        stop = False
        for c in self.callbacks:
            stop = bool(c.on_epoch(job, dict(row))) or stop
        return stop

    def on_error(self, job: Any, error: str, attempt: int) -> None:
        for c in self.callbacks:
            c.on_error(job, error, attempt)

    def on_end(self, job: Any, result: JobResult) -> None:
        for c in self.callbacks:
            c.on_end(job, result)


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------

Data = Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None


def check_settings(job: Job) -> None:
    """Refuse a run directory trained with other settings than ``job.config`` in a setting
    that may not change on resume (:class:`~bbb.errors.SettingsMismatch`, one line)."""
    stored = read_json(Path(job.run_dir) / "config.json")
    if stored is None:
        return
    diff = resume_conflicts(stored, job.config)
    if diff:
        k, was, new = diff[0]
        raise SettingsMismatch(f"{job.run_dir} was trained with {k}={was!r}, this plan has {new!r}")


#: in an experiment's output folder: the options that change its jobs' results, as they trained
JOB_OPTIONS_FILE = "options.json"


def check_job_options(out: str | Path, command: str, options: Mapping[str, Any],
                      recorded: Mapping[str, Any] | None = None) -> None:
    """Record in ``out/options.json`` the command (``"bbb reproduce uci"``) and the options that
    change a job's result (flag -> value) of an experiment whose rerun reuses the finished jobs of
    its folder by name; where the folder holds another command's jobs, or records another value
    of an option (``recorded``: an older folder's values, read where it has no options file; its
    command from its run.json), refuse (:class:`~bbb.errors.SettingsMismatch`, one line): its jobs
    and tables would be taken as this call's, mixed with those it trains and labelled with its
    options, or written over."""
    path = Path(out) / JOB_OPTIONS_FILE
    old = read_json(path)
    if old is None:
        words = str((read_json(Path(out) / "run.json") or {}).get("command", "")).split()
        old = {**(recorded or {}), **({"command": " ".join(words[:3])} if words[:2] == ["bbb", "reproduce"] else {})}
    if old.get("command", command) != command:
        raise SettingsMismatch(f"{out} holds the results of {old['command']}, not of {command}: use another --out")
    for flag, value in options.items():
        if flag in old and old[flag] != value:
            raise SettingsMismatch(f"{out} holds jobs trained with {flag} {old[flag]}, not {value}: "
                                   f"use another --out, or the same {flag}")
    if not path.is_file() or {"command", *options} - old.keys():
        atomic_write_json(path, {**old, "command": command, **options})


def check_validation_seeds(out: str | Path, seeds: Sequence[int], which: str, record: bool) -> None:
    """The seeds an experiment chooses its settings on (``which``: "the first of --seeds") are those
    its folder chose on (``out/options.json``), else a one-line :class:`SettingsMismatch`: another
    first seed found no choice (a ``--report`` wrote empty tables over the folder's, a longer run
    trained validation again on a new seed). ``record``: note them where the folder has none."""
    path = Path(out) / JOB_OPTIONS_FILE
    old = read_json(path) or {}
    mine = [int(s) for s in seeds]
    theirs = old.get("validation_seeds")
    if theirs is not None and [int(s) for s in theirs] != mine:
        first = " ".join(str(s) for s in theirs)
        given = " ".join(str(s) for s in mine)
        raise SettingsMismatch(f"{out} chose its settings on seed(s) {first} ({which}), not {given}: give --seeds "
                               f"starting with {first}, or another --out")
    if record and theirs is None:
        atomic_write_json(path, {**old, "validation_seeds": mine})


def _one_line(text: str, limit: int | None = None) -> str:
    text = " ".join(text.split())
    return text if limit is None else text[:limit]


def run_job(
    job: Job,
    *,
    data: Data = None,
    retries: int = 0,
    record_failures: bool = False,
    quiet: bool = True,
    log: Callable[[str], None] | None = None,
    callbacks: JobCallbacks | None = None,
    lock_wait: float | None = 0.0,
    loggers: Sequence[Any] = (),
) -> JobResult:
    """Train ``job`` unless it is finished (see the module's notes); returns how it ended.

    Args:
        job: the run directory and its configuration.
        data: the tensors to train on (see :func:`~bbb.runs.train`), or a function of the job
            that returns them or None (called only when the job trains), or None: ``config.dataset``
            (or ``config.data_file``), loaded by the run itself.
        retries: attempts after a crash, each resuming from the last epoch saved.
        record_failures: after the last attempt, return a ``failed`` result instead of raising.
        quiet, log: :func:`~bbb.runs.train`'s (defaults: one log line per epoch, printed).
        callbacks: what the runner reports (:class:`JobCallbacks`).
        lock_wait: seconds to wait for another process's lock on the run directory (None: no
            lock; see :func:`~bbb.runs.train`).
        loggers: experiment loggers (:class:`~bbb.runs.loggers.TrainLogger`), started anew for
            each attempt in the job's run directory.
    """
    cb = callbacks or JobCallbacks()
    check_settings(job)
    state = job_state(job.run_dir, job.config.epochs)
    cb.on_start(job, state)
    if state.state is State.DONE:
        result = JobResult(job, Outcome.DONE, summary=state.summary)
    elif state.state is State.DIVERGED:
        result = JobResult(job, Outcome.DIVERGED, error=state.message)
    else:
        result = _train_job(job, data, retries, record_failures, quiet, log, cb, lock_wait, loggers)
    cb.on_end(job, result)
    return result


def run_jobs(jobs: Iterable[Job], **kw: Any) -> list[JobResult]:
    """:func:`run_job` for each job in turn (same keyword arguments); the results in order."""
    return [run_job(job, **kw) for job in jobs]


def _train_job(job: Job, data: Data, retries: int, record_failures: bool, quiet: bool,
               log: Callable[[str], None] | None, cb: JobCallbacks, lock_wait: float | None,
               loggers: Sequence[Any] = ()) -> JobResult:
    from .loop import train

    given = data(job) if callable(data) else data
    tensors = None if given is None else dict(given)
    attempt = 0
    while True:
        attempt += 1
        cb.on_attempt(job, job_state(job.run_dir, job.config.epochs), attempt)
        try:
            summary = train(job.config, job.run_dir, data=tensors, resume="auto", quiet=quiet, log=log,
                            lock_wait=lock_wait, on_epoch=lambda row: cb.on_epoch(job, row), loggers=loggers)
            return JobResult(job, Outcome.DONE, summary=summary, attempts=attempt)
        except TrainingDiverged as e:
            atomic_write_json(Path(job.run_dir) / DIVERGED_FILE, {"message": str(e)})
            return JobResult(job, Outcome.DIVERGED, error=str(e), attempts=attempt)
        except BBBError:
            raise
        except Exception as e:  # noqa: BLE001 - a crash is retried, then raised or recorded
            error = _one_line(f"{type(e).__name__}: {e}", 300)
            cb.on_error(job, error, attempt)
            if attempt > retries:
                if not record_failures:
                    raise
                return JobResult(job, Outcome.FAILED, error=error, attempts=attempt)


def _watch(parent_pid: int, who: str, interval: float) -> None:
    while True:
        time.sleep(interval)
        if os.getppid() != parent_pid:
            try:
                sys.stderr.write(f"{who} {os.getpid()}: the process {parent_pid} that started it is gone; "
                                 "stopping (a re-run resumes from what was saved)\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os._exit(3)


def watch_parent(parent_pid: int, who: str, interval: float = 0.25) -> None:
    """In a worker process (a process pool's initializer): end it (``os._exit``) as soon as the
    process that started it, ``parent_pid``, is gone (killed with -9, or by a SIGTERM that skips
    its ``finally``), so that no worker trains on as an orphan; ``who`` names it in the one line it
    prints. Exits at once where the parent is already gone."""
    if os.getppid() != parent_pid:
        os._exit(3)
    threading.Thread(target=_watch, args=(parent_pid, who, interval), daemon=True,
                     name="bbb-parent-watchdog").start()


def watched_manager(ctx: BaseContext, who: str) -> SyncManager:
    """A started ``multiprocessing`` manager (its process serves, e.g., a progress queue to a
    pool's workers) that ends itself, like a worker under :func:`watch_parent`, as soon as the
    process that started it is gone, so that a ``kill -9`` leaves no server process behind. Shut
    it down (``manager.shutdown()``) when the pool is done."""
    manager = SyncManager(ctx=ctx)
    manager.start(watch_parent, (os.getpid(), who))
    return manager


def _pool_worker_init(threads: int, parent_pid: int, who: str) -> None:
    import torch

    adopt_warnings_format()  # the command's one-line UserWarnings
    torch.set_num_threads(threads)
    watch_parent(parent_pid, who)  # no orphan trains on when the parent is killed


@contextlib.contextmanager
def worker_pool(workers: int, threads: int, who: str) -> Iterator[tuple[Any, Any]]:
    """``(pool, queue)``: a spawn ``ProcessPoolExecutor`` of ``workers`` processes (``threads``
    torch threads each, ended with their parent: :func:`watch_parent`) and a progress queue served
    by a :func:`watched_manager`; ``(None, None)`` for ``workers <= 1`` (the caller trains in its
    own process). On exit the pool's pending jobs are cancelled and both are shut down; ``who``
    names them in the lines a killed parent leaves."""
    if workers <= 1:
        yield None, None
        return
    ctx = mp.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_pool_worker_init,
                               initargs=(threads, os.getpid(), f"{who} worker"))
    manager = None
    try:
        manager = watched_manager(ctx, f"{who}'s progress queue")
        yield pool, manager.Queue()
    finally:
        pool.shutdown(cancel_futures=True)
        if manager is not None:
            manager.shutdown()
