"""Fault injection on ``bbb sweep`` through a real subprocess: bad spaces and huge grids give one
line and exit code 2 and create nothing; a sweep killed with -9 leaves no worker running; a
re-run never trains a trial that another live process holds. Of the bad values, the first is
refused in a subprocess, the others by the same ``main`` in this process (a refusal before any
work; a fresh interpreter would cost seconds each)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bbb.sweep as S
from bbb.sweep.trial import LOCK_NAME, epochs_done, trial_dir
from faultkit import alive, assert_one_line_error, bbb, bbb_in_process, descendants, env, snapshot, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

TINY = {"dataset": "synthetic", "synthetic_dim": 16, "synthetic_train": 64, "width": 4, "depth": 1,
        "batch_size": 32, "epochs": 2, "device": "cpu", "eval_samples": 1}


def write_space(path: Path, **params) -> Path:
    path.write_text(json.dumps({"params": {**TINY, **params}}))
    return path


@pytest.mark.parametrize(("setting", "words"), [
    ("width=1e12", "width must be <= 65,536"),
    ("epochs=.inf", "epochs must be finite"),
    ("lr=.nan", "lr must be finite"),
    ("pi=abc", "pi must be a number"),
    ("neg_log_sigma1=-1000", "neg_log_sigma1 must be >= -700"),
])
def test_bad_space_values_are_one_line_and_touch_nothing(tmp_path: Path, setting: str, words: str, capsys) -> None:
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.csv").write_text("an earlier sweep's results\n")
    before = snapshot(out)
    argv = ("sweep", "--space", str(write_space(tmp_path / "s.json")), "--set", setting, "--out", str(out))
    p = bbb(*argv) if setting.startswith("width") else bbb_in_process(capsys, *argv)
    assert_one_line_error(p, words)
    assert snapshot(out) == before


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_that_is_not_here_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    """The local backend's trials run here: a device none of them can use is the one line their
    training would give, before space.json, sweep.csv or a trial's folder is written."""
    out = tmp_path / "sweep"
    argv = ("sweep", "--space", str(write_space(tmp_path / "s.json")), "--set", "device=cuda", "--out", str(out))
    assert_one_line_error(bbb_in_process(capsys, *argv), "no CUDA device")
    assert not out.exists()


def test_a_million_trial_grid_is_refused_quickly(tmp_path: Path) -> None:
    grid = {"grid": list(range(1, 11))}
    f = write_space(tmp_path / "big.json", lr=grid, seed=grid, width=grid, depth=grid, samples=grid, epochs=grid)
    t0 = time.monotonic()
    p = bbb("sweep", "--space", str(f), "--out", str(tmp_path / "o"), timeout=60)
    wall = time.monotonic() - t0
    assert_one_line_error(p, "1,000,000 trials", "--limit")
    assert not (tmp_path / "o").exists()
    assert wall < 30  # the check itself takes well under a millisecond; the rest is Python + torch start-up
    p = bbb("sweep", "--space", str(f), "--limit", "2", "--dry-run", timeout=60)
    assert p.returncode == 0 and "2 trials" in p.stdout, p.stderr


def test_kill_9_of_a_parallel_sweep_leaves_no_worker(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    f = write_space(tmp_path / "s.json", synthetic_train=256, width=16, epochs=100_000,
                    seed={"grid": [0, 1, 2, 3]})
    trials = S.expand_space(json.loads(f.read_text()))
    proc = subprocess.Popen([sys.executable, "-m", "bbb", "sweep", "--space", str(f), "--out", str(out),
                             "--max-concurrent", "2", "--cpus-per-trial", "1", "--quiet"],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    kids: set[int] = set()
    try:
        def two_training() -> bool:
            return sum(epochs_done(trial_dir(out, t.trial_id)) >= 1 for t in trials) >= 2

        assert wait_until(two_training, 240, 0.1), "the workers did not start training"
        kids = descendants(proc.pid)
        assert len(kids) >= 2, kids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        t0 = time.monotonic()
        gone = wait_until(lambda: not any(alive(k) for k in kids), 10)
        survivors = [k for k in kids if alive(k)]
        assert gone, f"still running {time.monotonic() - t0:.1f} s after kill -9 of the sweep: {survivors}"
        # no queued trial was started by an orphan: only the two that were running have files
        started = [t for t in trials if (trial_dir(out, t.trial_id) / "metrics.csv").exists()]
        assert len(started) == 2
        err = proc.stderr.read().decode()
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for k in kids:
            if alive(k):
                os.kill(k, signal.SIGKILL)
        proc.stderr.close()


HOLD = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, f"pid {os.getpid()} on here since now\n".encode())
print("held", flush=True)
time.sleep(600)
"""


def test_rerun_skips_a_trial_still_running_elsewhere(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    f = write_space(tmp_path / "s.json", seed={"grid": [0, 1]})
    t0, t1 = S.expand_space(json.loads(f.read_text()))
    d0 = trial_dir(out, t0.trial_id)
    d0.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(d0 / LOCK_NAME)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        p = bbb("sweep", "--space", str(f), "--out", str(out), "--quiet")
        assert p.returncode == 0, p.stderr
        assert f"running in another process (pid {holder.pid}" in p.stderr
        assert "1 done, 1 pending" in p.stdout
        assert not (d0 / "metrics.csv").exists() and not (d0 / "last.pt").exists()
        assert (trial_dir(out, t1.trial_id) / "result.json").exists()
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()
    p = bbb("sweep", "--space", str(f), "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    assert "2 trials: 2 done" in p.stdout
    assert json.loads((d0 / "result.json").read_text())["status"] == "done"
