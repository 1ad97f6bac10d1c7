"""Search spaces are validated and counted before they are expanded; torch's thread count and
trials held by another process are respected by run_sweep."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

import bbb.sweep as S
from bbb.errors import RunDirBusy, TrainingInterrupted, UserError
from bbb.runs.jobs import JobCallbacks, RunJob, run_job
from bbb.runs.rundir import guard_run_dir
from bbb.sweep.cost import trial_data
from bbb.sweep.trial import finalize_trial, start_trial, trial_dir, trial_lock

TINY = {"dataset": "synthetic", "synthetic_dim": 16, "synthetic_train": 64, "width": 4, "depth": 1,
        "batch_size": 32, "epochs": 1, "device": "cpu", "eval_samples": 1}


def space(**params) -> dict:
    return {"params": {**TINY, **params}}


@pytest.mark.parametrize(("key", "value", "words"), [
    ("epochs", float("inf"), "epochs must be finite"),
    ("epochs", float("nan"), "epochs must be finite"),
    ("epochs", 2.5, "epochs must be an integer"),
    ("epochs", "ten", "epochs must be an integer"),
    ("width", 1e12, "width must be <= 65,536"),
    ("width", {"grid": [400, float("nan")]}, "width (grid) must be finite"),
    ("depth", 10**6, "depth must be <="),
    ("hidden", [400, 1e9], "hidden must be <="),
    ("hidden", {"grid": [[400], [float("inf")]]}, "hidden (grid) must be finite"),
    ("pi", "abc", "pi must be a number"),
    ("pi", None, "pi must be a number"),
    ("lr", float("nan"), "lr must be finite"),
    ("lr", {"choice": [1e-3, float("inf")]}, "lr (choice) must be finite"),
    ("lr", {"uniform": [0, float("inf")]}, "lr: uniform needs [low, high], finite"),
    ("lr", {"loguniform": [float("nan"), 1]}, "lr: loguniform needs"),
    ("samples", {"randint": [1, 2.5]}, "samples (randint bound) must be an integer"),
    ("samples", True, "samples must be an integer"),
    ("neg_log_sigma1", -1000, "neg_log_sigma1 must be >= -700"),
    ("batch_size", 0, "batch_size must be >= 1"),
    ("synthetic_train", 1e12, "synthetic_train must be <="),
])
def test_bad_numeric_values_are_named_before_expansion(key, value, words):
    sp = space(**{key: value})
    if key == "hidden":
        del sp["params"]["width"], sp["params"]["depth"]
    with pytest.raises(UserError) as excinfo:
        S.expand_space(sp)
    msg = str(excinfo.value)
    assert words in msg and "\n" not in msg and "(trial" not in msg


def test_nullable_and_good_values_pass():
    assert len(S.expand_space(space(mu_init_scale={"grid": [None, 0.1]}))) == 2
    assert len(S.expand_space(space(lr={"loguniform": [1e-4, 1e-2]}, epochs=2.0))) == 1
    S.validate_space(S.load_space("paper"))


@pytest.mark.parametrize("key,value", [("val_size", 0), ("val_size", 50), ("scale", 2.0), ("train_size", 10),
                                       ("data_file", "x.csv")])
def test_synthetic_data_refuses_the_data_settings_it_never_reads(key, value):
    with pytest.raises(UserError) as excinfo:
        S.expand_space(space(**{key: value}))
    msg = str(excinfo.value)
    assert f"synthetic never reads {key}" in msg and "leave it out" in msg and "\n" not in msg


def test_top_level_values_are_checked():
    with pytest.raises(UserError, match="num_samples"):
        S.expand_space({**space(), "num_samples": float("inf")})
    with pytest.raises(UserError, match="seed"):
        S.expand_space({**space(), "seed": float("nan")})


def big_space(n_keys: int = 6, per_key: int = 10) -> dict:
    keys = ["lr", "seed", "width", "depth", "samples", "epochs", "batch_size", "split_seed"][:n_keys]
    return space(**{k: {"grid": list(range(1, per_key + 1))} for k in keys})


def test_a_million_trial_grid_is_refused_at_once():
    sp = big_space()
    assert S.count_trials(S.validate_space(sp)) == 10**6
    t0 = time.perf_counter()
    with pytest.raises(UserError) as excinfo:
        S.expand_space(sp)
    assert time.perf_counter() - t0 < 1.0
    msg = str(excinfo.value)
    assert "1,000,000 trials" in msg and "10,000" in msg and "--limit" in msg
    t0 = time.perf_counter()
    assert len(S.expand_space(sp, limit=3)) == 3  # a limit takes the first trials lazily
    assert time.perf_counter() - t0 < 5.0


def test_count_includes_num_samples_and_the_limit_is_adjustable():
    sp = {**space(lr={"grid": [1e-3, 1e-2]}, seed={"choice": [0, 1, 2, 3, 4]}), "num_samples": 3}
    assert S.count_trials(sp) == 6
    with pytest.raises(UserError, match="more than 5"):
        S.expand_space(sp, max_trials=5)
    assert len(S.expand_space(sp, max_trials=None)) <= 6
    S.expand_space(S.load_space("paper"))  # 972 trials: under the limit


def test_run_sweep_restores_torch_threads(tmp_path: Path):
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        rows = S.run_sweep(space(), S.SweepOptions(out=tmp_path / "s", progress=False, cpus_per_trial=1),
                           log=lambda _: None)
        assert rows[0]["status"] == "done"
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_a_sweep_that_would_drop_finished_trials_from_its_out_is_refused(tmp_path: Path):
    out = tmp_path / "s"
    opts = S.SweepOptions(out=out, progress=False)
    S.run_sweep(space(lr={"grid": [1e-3, 1e-2]}), opts, log=lambda _: None)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for other, limit in ((space(lr={"grid": [1e-1]}), None), (space(lr={"grid": [1e-3, 1e-2]}), 1)):
        with pytest.raises(UserError) as excinfo:
            S.run_sweep(other, opts, limit=limit, log=lambda _: None)
        msg = str(excinfo.value)
        assert "finished trial" in msg and "another --out" in msg and "\n" not in msg
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    rows = S.run_sweep(space(lr={"grid": [1e-3, 1e-2, 1e-1]}), opts, log=lambda _: None)  # a superset: fine
    assert [r["status"] for r in rows] == ["done"] * 3
    assert len(S.read_sweep(out)) == 3


def test_a_fraction_of_a_cpu_per_trial_is_one_thread_locally(tmp_path: Path):
    seen: list[int] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        S.run_sweep(space(), S.SweepOptions(out=tmp_path / "s", progress=False, cpus_per_trial=0.5,
                                            epoch_hook=lambda d, row: seen.append(torch.get_num_threads())),
                    log=lambda _: None)
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


def test_a_trial_locked_by_another_holder_is_not_trained(tmp_path: Path):
    out = tmp_path / "s"
    sp = space(seed={"grid": [0, 1]})
    t0, t1 = S.expand_space(sp)
    logged: list[str] = []
    with trial_lock(trial_dir(out, t0.trial_id)) as holder:  # another open file: another holder
        assert holder is None
        rows = S.run_sweep(sp, S.SweepOptions(out=out, progress=False), log=logged.append)
    by_id = {r["trial_id"]: r for r in rows}
    assert by_id[t1.trial_id]["status"] == "done"
    assert by_id[t0.trial_id]["status"] == "pending"
    assert "running in another process" in by_id[t0.trial_id]["error"]
    d0 = trial_dir(out, t0.trial_id)
    assert not (d0 / "last.pt").exists() and not (d0 / "result.json").exists()
    assert any("running in another process" in line for line in logged)
    # released: the next run trains it, and the finished one is skipped
    rows = S.run_sweep(sp, S.SweepOptions(out=out, progress=False), log=lambda _: None)
    assert [r["status"] for r in rows] == ["done", "done"]
    assert len(json.loads((trial_dir(out, t1.trial_id) / "history.json").read_text())) == 1


def test_finalize_trial_takes_the_run_directory_lock(tmp_path: Path):
    """Evaluating a trial ASHA stopped waits for the worker that still holds its run directory's
    lock, refuses after ``lock_wait``, and evaluates a trial only once."""
    [t] = S.expand_space(space(epochs=3))
    d, cfg, spec = start_trial(tmp_path, t)
    data = trial_data(cfg, spec, None)

    class StopAfter2(JobCallbacks):  # a stopped trial: last.pt of epoch 2, no summary
        def on_epoch(self, job, row):
            if row["epoch"] == 2:
                raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        run_job(RunJob(d, cfg), data=data, callbacks=StopAfter2(), quiet=True, log=lambda _: None)
    with guard_run_dir(d, resume=True):  # the stopping worker's lock
        with pytest.raises(RunDirBusy):
            finalize_trial(d, cfg, data, lock_wait=0.2)
    assert not (d / "summary.json").exists()
    held = threading.Event()

    def worker_stops_soon() -> None:
        with guard_run_dir(d, resume=True):
            held.set()
            time.sleep(0.5)

    th = threading.Thread(target=worker_stops_soon)
    th.start()
    held.wait(10)
    try:
        summary = finalize_trial(d, cfg, data, lock_wait=30)
    finally:
        th.join()
    assert summary["epochs"] == 2 and json.loads((d / "summary.json").read_text()) == summary
    stamp = (d / "summary.json").stat().st_mtime_ns
    assert finalize_trial(d, cfg, data, lock_wait=0) == summary  # evaluated once
    assert (d / "summary.json").stat().st_mtime_ns == stamp


def test_a_trial_another_sweep_finished_meanwhile_is_listed_done(tmp_path: Path):
    """Two sweeps on one --out: the trial one left to the other (locked there) and the other finished
    is done in the sweep.csv and best.json this one writes last, not pending."""
    sp = space(seed={"grid": [0, 1]})
    t0, t1 = S.expand_space(sp)
    ref = tmp_path / "ref"
    S.run_sweep(sp, S.SweepOptions(out=ref, progress=False), limit=1, log=lambda _: None)
    out = tmp_path / "s"

    def other_sweep_finishes_t0(d: Path, row: dict) -> None:
        if d.name == t1.trial_id:
            for f in trial_dir(ref, t0.trial_id).iterdir():
                if f.name != "trial.lock":
                    shutil.copy2(f, trial_dir(out, t0.trial_id) / f.name)

    with trial_lock(trial_dir(out, t0.trial_id)) as holder:
        assert holder is None
        rows = S.run_sweep(sp, S.SweepOptions(out=out, progress=False, epoch_hook=other_sweep_finishes_t0),
                           log=lambda _: None)
    assert [r["status"] for r in rows] == ["done", "done"]
    assert {r["trial_id"]: r["status"] for r in S.read_sweep(out)} == {t0.trial_id: "done", t1.trial_id: "done"}
    best = json.loads((out / "best.json").read_text())
    assert best["finished"] == 2
    assert best["val_error"] == min(r["val_error"] for r in rows)
