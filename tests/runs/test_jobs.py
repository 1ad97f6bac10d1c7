"""The one job runner (``bbb.runs.jobs``): finished runs are skipped, interrupted ones resume
from ``last.pt``, a diverged run is recorded and never trained again, a crash is retried then
raised or recorded, a run of other settings is refused. Faults are injected by callbacks handed
to the runner. Tiny synthetic data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bbb.errors import SettingsMismatch, TrainingInterrupted, UserError
from bbb.runs import TrainConfig, read_metrics
from bbb.runs import jobs as J
from testkit import blobs

QUIET = {"quiet": True, "log": lambda s: None}


def tiny_cfg(**kw: Any) -> TrainConfig:
    base = {"hidden": [16], "epochs": 3, "batch_size": 32, "lr": 1e-2, "device": "cpu", "eval_samples": 2}
    return TrainConfig(**{**base, **kw})


def rows_without_seconds(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in read_metrics(run)]


class Recorder(J.JobCallbacks):
    """Every call, as (event, job name, detail); ``fail`` raises ``exc`` once after that epoch
    of the named job."""

    def __init__(self, fail: dict[str, int] | None = None, exc: BaseException | None = None) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.fail = dict(fail or {})
        self.exc = exc or RuntimeError("injected crash")

    def on_start(self, job: Any, state: J.JobState) -> None:
        self.events.append(("start", job.name, (state.state.value, state.epochs_done)))

    def on_attempt(self, job: Any, state: J.JobState, attempt: int) -> None:
        self.events.append(("attempt", job.name, (attempt, state.epochs_done)))

    def on_epoch(self, job: Any, row: dict[str, Any]) -> None:
        if self.fail.get(job.name) == row["epoch"]:
            del self.fail[job.name]
            raise self.exc

    def on_error(self, job: Any, error: str, attempt: int) -> None:
        self.events.append(("error", job.name, error))

    def on_end(self, job: Any, result: J.JobResult) -> None:
        self.events.append(("end", job.name, (result.outcome.value, result.attempts)))

    def of(self, kind: str) -> list[tuple[str, Any]]:
        return [(name, detail) for k, name, detail in self.events if k == kind]


@pytest.fixture(scope="module")
def data():
    return blobs()


def test_finished_runs_are_skipped_and_states_are_read(tmp_path, data):
    jobs = [J.RunJob(tmp_path / "a", tiny_cfg()), J.RunJob(tmp_path / "b", tiny_cfg(seed=1))]
    assert [J.job_state(j.run_dir, 3).state for j in jobs] == [J.State.NEW, J.State.NEW]
    first = J.run_jobs(jobs, data=data, **QUIET)
    assert [(r.outcome, r.attempts, r.summary["epochs"]) for r in first] == [(J.Outcome.DONE, 1, 3)] * 2
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.pt")}
    rec = Recorder()
    again = J.run_jobs(jobs, data=lambda job: pytest.fail("data is loaded only to train"), callbacks=rec, **QUIET)
    assert all(r.skipped and r.outcome is J.Outcome.DONE for r in again)
    assert [r.summary for r in again] == [r.summary for r in first]
    assert rec.of("start") == [("a", ("done", 3)), ("b", ("done", 3))] and rec.of("attempt") == []
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.pt")} == stamps
    # more epochs asked for: the run is partial, and resumes
    assert J.job_state(tmp_path / "a", 5) == J.JobState(J.State.PARTIAL, 3)


def test_an_interrupted_job_resumes_from_its_last_epoch(tmp_path, data):
    J.run_job(J.RunJob(tmp_path / "twin", tiny_cfg()), data=data, **QUIET)
    job = J.RunJob(tmp_path / "run", tiny_cfg())
    with pytest.raises(TrainingInterrupted):  # Ctrl-C is never retried
        J.run_job(job, data=data, retries=3, callbacks=Recorder({"run": 2}, KeyboardInterrupt()), **QUIET)
    assert J.job_state(job.run_dir, 3) == J.JobState(J.State.PARTIAL, 2)
    rec = Recorder()
    res = J.run_job(job, data=data, callbacks=rec, **QUIET)
    assert res.outcome is J.Outcome.DONE and res.attempts == 1
    assert rec.of("start") == [("run", ("partial", 2))] and rec.of("attempt") == [("run", (1, 2))]
    assert rows_without_seconds(job.run_dir) == rows_without_seconds(tmp_path / "twin")


def test_a_crash_is_retried_from_the_checkpoint_then_recorded_or_raised(tmp_path, data):
    J.run_job(J.RunJob(tmp_path / "twin", tiny_cfg()), data=data, **QUIET)
    rec = Recorder({"run": 2})
    res = J.run_job(J.RunJob(tmp_path / "run", tiny_cfg()), data=data, retries=1, callbacks=rec, **QUIET)
    assert (res.outcome, res.attempts) == (J.Outcome.DONE, 2)
    assert rec.of("attempt") == [("run", (1, 0)), ("run", (2, 2))]
    assert rec.of("error") == [("run", "RuntimeError: injected crash")]
    assert rows_without_seconds(tmp_path / "run") == rows_without_seconds(tmp_path / "twin")
    # out of retries: recorded as failed (then a later call resumes it), or raised
    res = J.run_job(J.RunJob(tmp_path / "rec", tiny_cfg()), data=data, record_failures=True,
                    callbacks=Recorder({"rec": 1}), **QUIET)
    assert (res.outcome, res.attempts, res.error) == (J.Outcome.FAILED, 1, "RuntimeError: injected crash")
    assert J.job_state(tmp_path / "rec", 3).state is J.State.PARTIAL
    with pytest.raises(RuntimeError, match="injected"):
        J.run_job(J.RunJob(tmp_path / "raise", tiny_cfg()), data=data, callbacks=Recorder({"raise": 1}), **QUIET)
    assert J.run_job(J.RunJob(tmp_path / "rec", tiny_cfg()), data=data, **QUIET).outcome is J.Outcome.DONE


def test_a_diverged_job_is_recorded_and_never_trained_again(tmp_path, data):
    job = J.RunJob(tmp_path / "run", tiny_cfg(method="sgd", optimizer="sgd", lr=1e30))
    rec = Recorder()
    res = J.run_job(job, data=data, retries=5, callbacks=rec, **QUIET)
    assert (res.outcome, res.attempts) == (J.Outcome.DIVERGED, 1) and "diverged in epoch 1" in res.error
    assert J.read_json(job.run_dir / J.DIVERGED_FILE) == {"message": res.error}
    state = J.job_state(job.run_dir, 3)
    assert state.state is J.State.DIVERGED and state.finished and state.message == res.error
    rec = Recorder()
    again = J.run_job(job, data=data, retries=5, callbacks=rec, **QUIET)
    assert (again.outcome, again.skipped, again.error) == (J.Outcome.DIVERGED, True, res.error)
    assert rec.of("attempt") == [] and rec.of("end") == [("run", ("diverged", 0))]


def test_a_run_of_other_settings_is_refused_and_user_errors_are_not_retried(tmp_path, data):
    J.run_job(J.RunJob(tmp_path / "run", tiny_cfg(epochs=1)), data=data, **QUIET)
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    with pytest.raises(SettingsMismatch) as e:
        J.run_job(J.RunJob(tmp_path / "run", tiny_cfg(epochs=1, lr=0.5)), data=data, **QUIET)
    assert "lr=0.01" in str(e.value) and "0.5" in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before
    # more epochs may be asked for (a setting that may change on resume)
    assert J.run_job(J.RunJob(tmp_path / "run", tiny_cfg(epochs=2)), data=data, **QUIET).attempts == 1
    rec = Recorder()
    bad = {k: v for k, v in data.items() if k != "train_y"}
    with pytest.raises(UserError):
        J.run_job(J.RunJob(tmp_path / "new", tiny_cfg()), data=bad, retries=3, callbacks=rec, **QUIET)
    assert len(rec.of("attempt")) == 1 and rec.of("error") == []


def test_callback_lists_call_each_in_order_and_stop_when_one_says_so(tmp_path, data):
    calls: list[str] = []

    class Stop(J.JobCallbacks):
        def __init__(self, name: str, stop: bool) -> None:
            self.name, self.stop = name, stop

        def on_epoch(self, job: Any, row: dict[str, Any]) -> bool:
            calls.append(f"{self.name}{row['epoch']}")
            return self.stop

    res = J.run_job(J.RunJob(tmp_path / "run", tiny_cfg()), data=data, callbacks=J.CallbackList(
        [Stop("a", False), None, Stop("b", True)]), **QUIET)
    assert calls == ["a1", "b1"] and res.summary["epochs"] == 1


_ORPHAN = r"""
import multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from bbb.runs.jobs import watch_parent

def init(parent):
    watch_parent(parent, "test worker")

def work(_):
    time.sleep(60)

if __name__ == "__main__":
    pool = ProcessPoolExecutor(2, mp_context=mp.get_context("spawn"), initializer=init, initargs=(os.getpid(),))
    futures = [pool.submit(work, i) for i in range(2)]
    print("ready", flush=True)
    time.sleep(120)
"""


@pytest.mark.release_independent
def test_a_pools_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
    """bbb reproduce uci / lora and the sweep start their workers with ``watch_parent``: killed
    with -9 (or by a SIGTERM, which skips the pool's shutdown), the parent leaves no worker
    training on as an orphan."""
    import subprocess
    import sys

    from faultkit import env, kill_9_leaves_no_descendant

    script = tmp_path / "pool.py"
    script.write_text(_ORPHAN)
    proc = subprocess.Popen([sys.executable, str(script)], env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    kill_9_leaves_no_descendant(proc, at_least=2, start=60, settle=0.0, grace=10)

