"""kill -9 during a BBB training run (fused engine), then resume: the same metrics as a run never
killed, and the same on 1 or 2 threads. The child trains on generated data through
:func:`bbb.train.train`, the code ``bbb train`` runs. Then 50 kills of ``bbb train`` itself at
random instants of its commit sequence (``fork_killer.py``), each resumed to the uninterrupted
run's metrics.csv, summary.json, best.pt and last.pt."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from faultkit import env, fake_mnist

CHILD = r"""
import sys, torch
from bbb.runs import TrainConfig, train
out, resume, threads = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
centers = torch.randn(4, 40, generator=g)
def make(n):
    y = torch.randint(0, 4, (n,), generator=g)
    return centers[y] + torch.randn(n, 40, generator=g), y
(a, b), (c, d), (e, f) = make(2000), make(500), make(500)
data = {"train_x": a, "train_y": b, "val_x": c, "val_y": d, "test_x": e, "test_y": f}
cfg = TrainConfig(method="bbb", hidden=[64, 64], epochs=6, batch_size=32, kl="mc", samples=2,
                  optimizer="adam", lr=2e-3, kl_weighting="blundell", eval_samples=2)
train(cfg, out, data=data, resume=resume, quiet=True, log=lambda s: None)
"""

COLUMNS = ("epoch", "train_loss", "nll", "kl", "val_error")  # every column but the wall time


def _run(out: Path, resume: bool, threads: int = 2, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(out), "1" if resume else "0", str(threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)


def _metrics(out: Path) -> list[tuple[str, ...]]:
    with (out / "metrics.csv").open() as f:
        return [tuple(r[c] for c in COLUMNS) for r in csv.DictReader(f)]


def _wait_for_checkpoint(p: subprocess.Popen, out: Path) -> None:
    """Until ``out/last.pt`` (the first checkpoint) appears; fails if ``p`` ends first."""
    t0 = time.perf_counter()
    while not (out / "last.pt").exists():
        assert p.poll() is None, p.stderr.read() if p.stderr else p.returncode
        assert time.perf_counter() - t0 < 600
        time.sleep(0.005)


@pytest.mark.slow
def test_kill_9_then_resume_gives_the_metrics_of_an_uninterrupted_run(tmp_path):
    """Each of the 2 kills lands at a random instant of the training after the first checkpoint
    (so each is resumed, not started again; kills before it: the 50 kills below), drawn over the
    reference run's training time without the child's start (importing torch)."""
    ref = tmp_path / "ref"
    p = _run(ref, False)
    _wait_for_checkpoint(p, ref)
    t0 = time.perf_counter()
    assert p.wait(timeout=600) == 0, p.stderr.read()
    training = time.perf_counter() - t0  # from the first checkpoint to the end
    expected = _metrics(ref)
    assert len(expected) == 6

    one = tmp_path / "one-thread"
    p = _run(one, False, threads=1)
    assert p.wait(timeout=600) == 0, p.stderr.read()
    assert _metrics(one) == expected

    rng = random.Random(0)
    for trial in range(2):  # (the 50 kills below land at every commit of bbb train)
        out = tmp_path / f"killed{trial}"
        p = _run(out, False, start_new_session=True)
        _wait_for_checkpoint(p, out)
        time.sleep(rng.uniform(0.0, 0.9) * training)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        p = _run(out, True)
        assert p.wait(timeout=600) == 0, p.stderr.read()
        assert _metrics(out) == expected, trial


# --------------------------------------------------------------------------------------------
# 50 kills of `bbb train` at random instants of its commit sequence, then `bbb train --resume`
# --------------------------------------------------------------------------------------------

TRAIN = ["--epochs", "3", "--hidden", "16", "--batch-size", "50", "--val-size", "100", "--samples", "2",
         "--device", "cpu", "--eval-samples", "2", "--quiet", "--threads", "1"]


def _tensors(obj, prefix: str = "") -> dict:
    """Every tensor (and int) in a checkpoint by its path; the metrics' wall-clock seconds left out."""
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() if key != "metrics"
                for k, v in _tensors(val, f"{prefix}/{key}").items()}
    if isinstance(obj, list | tuple):
        return {k: v for i, val in enumerate(obj) for k, v in _tensors(val, f"{prefix}/{i}").items()}
    return {prefix: obj} if isinstance(obj, torch.Tensor | int) else {}


def _same_checkpoint(a: Path, b: Path) -> bool:
    ta, tb = (_tensors(torch.load(p, weights_only=True)) for p in (a, b))
    return ta.keys() == tb.keys() and all(
        torch.equal(x, tb[k]) if isinstance(x, torch.Tensor) else x == tb[k] for k, x in ta.items())


def _summary(out: Path) -> dict:
    return {k: v for k, v in json.loads((out / "summary.json").read_text()).items() if k != "seconds"}


@pytest.mark.slow
def test_50_kills_at_random_commits_then_resume_end_as_the_uninterrupted_run(tmp_path):
    data = fake_mnist(tmp_path / "data", n_train=300, n_test=50)
    root = tmp_path / "runs"
    root.mkdir()
    plan, result = tmp_path / "plan.json", tmp_path / "result.json"
    plan.write_text(json.dumps({"argv": ["--data-dir", str(data), *TRAIN], "root": str(root), "kills": 50,
                                "seed": 19}))
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("fork_killer.py")), str(plan), str(result)],
                       env=env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(result.read_text())
    ref = root / "ref"
    expected, summary = _metrics(ref), _summary(ref)
    assert len(expected) == 3 and res["writes"] >= 3 * 2 + 3
    trials = res["trials"]
    assert len(trials) == 50 and sum(t["killed"] for t in trials) >= 45, [t["kill"] for t in trials]
    at = {t["epoch_at_kill"] for t in trials}
    assert {None, 0, 1, 2, 3} <= at, at  # before the first checkpoint, in every epoch, at the end
    for t in trials:
        out = root / t["dir"]
        assert t["check"] == 0 and t["resume"] == 0, t
        assert _metrics(out) == expected, t
        assert _summary(out) == summary, t
        assert _same_checkpoint(out / "best.pt", ref / "best.pt"), t
        assert _same_checkpoint(out / "last.pt", ref / "last.pt"), t
        assert not [q.name for q in out.iterdir() if q.name.endswith(".tmp")], t
