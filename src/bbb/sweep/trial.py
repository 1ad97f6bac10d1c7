"""One trial, on either backend: its directory, history, lock and result row; the local
backend's worker."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import UserError, adopt_warnings_format
from ..io import atomic_write_json
from ..runs.jobs import JobCallbacks, JobResult, JobState, Outcome, RunJob, epochs_done, run_job, watch_parent
from ..runs.loggers import make_loggers
from .cost import trial_data
from .space import DataSpec, Trial, TrialStatus, resolve_params


def silent(_: str) -> None:
    pass


def trial_dir(out: str | Path, trial_id: str) -> Path:
    return Path(out) / "trials" / trial_id


def _history(d: Path) -> list[dict[str, Any]]:
    path = d / "history.json"
    try:
        return list(json.loads(path.read_text())) if path.is_file() else []
    except (OSError, ValueError):
        return []


def append_history(d: Path, event: str, **info: Any) -> None:
    """Log an attempt (``start``: from which epoch, restored from where) or an ``error``."""
    hist = _history(d)
    if event == "start":
        info = {"attempt": 1 + sum(1 for h in hist if h.get("event") == "start"), **info}
    hist.append({"event": event, **info, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    atomic_write_json(d / "history.json", hist)


def result_row(trial: Trial, status: TrialStatus, summary: dict[str, Any] | None, d: Path,
         epochs_run: int | None = None, error: str | None = None, retry: bool = False) -> dict[str, Any]:
    """A trial's result (result.json, a row of sweep.csv). ``retry``: a crashed trial, which a
    re-run of the sweep runs again (a diverged one is not: it would diverge again)."""
    s = summary or {}
    return {
        "trial_id": trial.trial_id,
        "index": trial.index,
        "status": status.value,
        "params": dict(trial.params),
        "epochs_run": s.get("epochs", epochs_run if epochs_run is not None else epochs_done(d)),
        "best_epoch": s.get("best_epoch"),
        "val_error": s.get("best_val_error"),
        "test_error": s.get("test_error"),
        "test_error_mc": s.get("test_error_mc"),
        "test_nll": s.get("test_nll"),
        # a regression's (its val_error is None: RANK_BY then takes val_nll); all in the target's units, as
        # summary.json has them
        "val_nll": s.get("best_val_nll"),
        "selected_by": s.get("selected_by"),  # what chose its best epoch: ranks it too (nll_classifiers)
        "val_rmse": s.get("best_val_rmse"),
        "test_rmse": s.get("test_rmse"),
        "test_log_likelihood": s.get("test_log_likelihood"),
        "seconds": s.get("seconds"),
        "error": error,
        "trial_dir": str(Path("trials") / trial.trial_id),
        "retry": retry,
    }


def finished_row(out: Path, trial: Trial) -> dict[str, Any] | None:
    """The trial's result.json when it is finished (done, stopped, or failed and not to be
    retried), else None."""
    path = trial_dir(out, trial.trial_id) / "result.json"
    if not path.is_file():
        return None
    try:
        row = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if row.get("status") == TrialStatus.FAILED.value and row.get("retry"):
        return None
    if row.get("status") in (TrialStatus.DONE.value, TrialStatus.STOPPED.value, TrialStatus.FAILED.value):
        row["index"] = trial.index
        row["params"] = dict(trial.params)
        return row
    return None


def start_trial(out: Path, trial: Trial) -> tuple[Path, Any, DataSpec]:
    cfg, data = resolve_params(trial.params)
    d = trial_dir(out, trial.trial_id)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_json(d / "trial.json", {**trial.to_dict(), "train_config": cfg.to_dict(),
                                         "data": data.key()})
    return d, cfg, data


#: Seconds :func:`finalize_trial` waits for the run directory's lock (held by a worker that is
#: still stopping).
FINALIZE_LOCK_WAIT = 60.0


def finalize_trial(d: Path, cfg: Any, data: dict[str, Any] | None, lock_wait: float = FINALIZE_LOCK_WAIT
                   ) -> dict[str, Any]:
    """Evaluate a trial that stopped before ``cfg.epochs`` (the job runner with nothing left to
    train) and return its summary. It takes the run directory's lock, waiting up to
    ``lock_wait`` seconds (:class:`~bbb.errors.RunDirBusy` after that); the Ray backend
    calls it once ``tuner.fit()`` has returned, when the trial's worker has let go."""
    from ..runs import load_checkpoint

    done = int(load_checkpoint(d / "last.pt")["epoch"])
    res = run_job(RunJob(d, cfg.replace(epochs=done)), data=data, quiet=True, log=silent, lock_wait=lock_wait)
    if res.summary is None:
        raise UserError(f"cannot evaluate the stopped trial in {d}: {res.error}")
    return res.summary


LOCK_NAME = "trial.lock"


"""Lock file of a trial being trained (``OUT/trials/<id>/trial.lock``): ``flock``-ed by the
process training it, and holding that process's pid and host, for the message of a second one."""


#: Seconds to wait for a trial's lock before calling it busy: a trainer that was just killed
#: (kill -9 of a sweep's process group, then an immediate re-run) frees it within this time.
LOCK_GRACE_SECONDS = 3.0


def _try_flock(fcntl: Any, fd: int, grace: float) -> bool:
    deadline = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def trial_lock(d: Path, grace: float | None = None) -> Iterator[str | None]:
    """Hold ``d/trial.lock`` while the body runs; yields None, or the holder's description when
    another live process holds it for longer than ``grace`` seconds (default
    :data:`LOCK_GRACE_SECONDS`). The lock goes with its holder: a killed trainer frees it."""
    d.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): no cross-process guard
        yield None
        return
    fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        if not _try_flock(fcntl, fd, LOCK_GRACE_SECONDS if grace is None else grace):
            holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
            yield holder or "another process"
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                          f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)
            yield None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def worker_init(parent_pid: int, interval: float = 0.25) -> None:
    """Initializer of the local backend's worker processes: a daemon thread ends the worker
    (``os._exit``) as soon as the sweep process that started it is gone (killed with -9 too), so
    no worker trains on, or starts a queued trial, as an orphan (:func:`bbb.runs.jobs.watch_parent`).
    Each epoch's checkpoint is written atomically, so the trial resumes from its last epoch when
    the sweep is re-run. Its UserWarnings take the command's one-line form."""
    adopt_warnings_format()
    watch_parent(parent_pid, "bbb sweep worker", interval)


def run_trial_local(payload: dict[str, Any]) -> dict[str, Any]:
    """Run (or resume) one trial in this process; retries crashes up to ``max_failures`` times.

    ``payload``: ``trial`` (Trial.to_dict()), ``out``, ``data_dir``, ``max_failures``,
    ``threads``, ``parent_pid`` (a worker's sweep process: the trial is not started when that
    is gone). Writes ``result.json`` in the trial directory and returns that row. The trial is
    locked while it runs (``trial.lock``): when another live process is training it, nothing is
    trained and a pending row saying so is returned. Restores torch's thread count.
    """
    import torch

    parent = payload.get("parent_pid")
    if parent is not None and os.getppid() != int(parent):
        os._exit(3)  # an orphaned worker: never start a (queued) trial
    threads_before = torch.get_num_threads()
    trial = Trial.from_dict(payload["trial"])
    out = Path(payload["out"])
    try:
        if payload.get("threads"):
            torch.set_num_threads(int(payload["threads"]))
        with trial_lock(trial_dir(out, trial.trial_id)) as holder:
            if holder is not None:
                return result_row(trial, TrialStatus.PENDING, None, trial_dir(out, trial.trial_id),
                            error=f"running in another process ({holder}); not started here")
            finished = finished_row(out, trial)  # finished by another process meanwhile
            if finished is not None:
                return finished
            return _run_trial_locked(payload, trial, out)
    finally:
        torch.set_num_threads(threads_before)


class TrialCallbacks(JobCallbacks):
    """The job runner's callbacks of a local trial: its history (each attempt, each crash) and
    the sweep's ``epoch_hook(trial_dir, row)`` (:attr:`SweepOptions.epoch_hook`: the tests'
    faults)."""

    def __init__(self, epoch_hook: Any = None) -> None:
        self.epoch_hook = epoch_hook

    def on_attempt(self, job: Any, state: JobState, attempt: int) -> None:
        append_history(job.run_dir, "start", from_epoch=state.epochs_done, backend="local",
                       source="local" if (job.run_dir / "last.pt").exists() else "fresh")

    def on_epoch(self, job: Any, row: dict[str, Any]) -> None:
        if self.epoch_hook is not None:
            self.epoch_hook(job.run_dir, dict(row))

    def on_error(self, job: Any, error: str, attempt: int) -> None:
        append_history(job.run_dir, "error", error=error)


def trial_result(trial: Trial, res: JobResult, d: Path) -> dict[str, Any]:
    """A trial's row from the job runner's result: done; failed when it diverged (a re-run
    does not train it again) or crashed on every attempt (a re-run retries it)."""
    if res.outcome is Outcome.DONE:
        return result_row(trial, TrialStatus.DONE, res.summary, d)
    if res.outcome is Outcome.DIVERGED:
        return result_row(trial, TrialStatus.FAILED, None, d, error=" ".join(str(res.error).split()))
    return result_row(trial, TrialStatus.FAILED, None, d, error=f"{res.error} (after {res.attempts} attempts)",
                      retry=True)


def _run_trial_locked(payload: dict[str, Any], trial: Trial, out: Path) -> dict[str, Any]:
    d, cfg, spec = start_trial(out, trial)
    res = run_job(RunJob(d, cfg), data=lambda _: trial_data(cfg, spec, payload.get("data_dir")),
                  retries=int(payload.get("max_failures", 0)), record_failures=True, quiet=True, log=silent,
                  callbacks=TrialCallbacks(payload.get("epoch_hook")), loggers=make_loggers(payload.get("loggers")))
    row = trial_result(trial, res, d)
    atomic_write_json(d / "result.json", row)
    return row
