"""``--log tensorboard`` on the commands that train runs through the job runner: ``bbb sweep``
(each trial's events in its own run directory, made in the process that trains it) and ``bbb
reproduce mnist`` (each run's); the command to resume says --log again; a missing package is one
line before anything trains."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import bbb.sweep as S
from bbb.errors import UserError
from bbb.experiments.mnist import ReproduceConfig, run_reproduce
from bbb.experiments.mnist.jobs import command_line
from testkit import SILENT, blobs4, eager_kernels, run_main

SPACE = {"params": {"dataset": "synthetic", "synthetic_dim": 16, "synthetic_train": 128, "width": 8, "depth": 1,
                    "batch_size": 64, "epochs": 2, "device": "cpu", "eval_samples": 2, "seed": {"grid": [0, 1]}}}


def steps(run_dir: Path, tag: str = "train/elbo") -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_sweep_log_tensorboard_writes_each_trials_events(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPACE))
    out = tmp_path / "sweep"
    rc, stdout, err = run_main(capsys, "sweep", "--space", str(space), "--out", str(out), "--quiet",
                               "--log", "tensorboard")
    assert rc == 0, err
    dirs = [out / r["trial_dir"] for r in S.read_sweep(out)]
    assert len(dirs) == 2
    for d in dirs:
        assert steps(d) == [1, 2], d


def test_reproduce_log_tensorboard_writes_each_runs_events(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "o"
    cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, cells="sgd:400",
                          loggers=("tensorboard",))
    with eager_kernels():
        res = run_reproduce(cfg, data=blobs4(), **SILENT)
    assert res["trained"]
    for name in res["trained"]:
        assert steps(out / "runs" / name, "val/error"), name
    assert command_line(cfg).endswith("--log tensorboard") and "--log" not in command_line(cfg, "--report")


def test_without_tensorboard_sweep_and_reproduce_refuse_in_one_line(tmp_path, monkeypatch, capsys):
    for mod in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, mod, None)
    with pytest.raises(UserError, match="tensorboard"):
        ReproduceConfig(out=str(tmp_path / "o"), loggers=("tensorboard",))
    with pytest.raises(UserError, match="tensorboard"):
        S.SweepOptions(out=tmp_path / "s", loggers=("tensorboard",))
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPACE))
    rc, _, err = run_main(capsys, "sweep", "--space", str(space), "--out", str(tmp_path / "s"), "--log",
                          "tensorboard")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pip install" in err, err
    assert not (tmp_path / "s").exists()
