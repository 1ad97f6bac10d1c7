"""kill -9 during a BBB training run (fused engine), then resume: the same metrics as a run never
killed, and the same on 1 or 2 threads. The child trains on generated data through
:func:`bbb.train.train`, the code ``bbb train`` runs."""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = r"""
import sys, torch
from bbb.train import TrainConfig, train
out, resume, threads = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
centers = torch.randn(4, 40, generator=g)
def make(n):
    y = torch.randint(0, 4, (n,), generator=g)
    return centers[y] + torch.randn(n, 40, generator=g), y
(a, b), (c, d), (e, f) = make(6000), make(500), make(500)
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


@pytest.mark.slow
def test_kill_9_then_resume_gives_the_metrics_of_an_uninterrupted_run(tmp_path):
    ref = tmp_path / "ref"
    t0 = time.perf_counter()
    p = _run(ref, False)
    assert p.wait(timeout=600) == 0, p.stderr.read()
    full = time.perf_counter() - t0
    expected = _metrics(ref)
    assert len(expected) == 6

    one = tmp_path / "one-thread"
    p = _run(one, False, threads=1)
    assert p.wait(timeout=600) == 0, p.stderr.read()
    assert _metrics(one) == expected

    rng = random.Random(0)
    for trial in range(3):
        out = tmp_path / f"killed{trial}"
        p = _run(out, False, start_new_session=True)
        time.sleep(rng.uniform(0.3, 0.9) * full)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        if not (out / "last.pt").exists():  # killed before the first checkpoint: start again
            p = _run(out, False)
        else:
            p = _run(out, True)
        assert p.wait(timeout=600) == 0, p.stderr.read()
        assert _metrics(out) == expected, trial
