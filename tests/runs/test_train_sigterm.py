"""``bbb train`` stopped by SIGTERM (a scheduler's stop, ``timeout``) as by Ctrl-C: the completed
epochs that ``--checkpoint-every`` held in memory are written, and one line says how to resume."""
from __future__ import annotations

import csv
import os
import signal

import numpy as np
import torch

import bbb.runs.loop as loop
from testkit import run_main


def test_sigterm_keeps_the_epochs_done_and_says_how_to_resume(capsys, tmp_path, monkeypatch):
    """Before, SIGTERM killed the process with no word: last.pt held epoch 0 though 2 epochs were
    done (``--checkpoint-every 4`` keeps them in memory; Ctrl-C wrote them)."""
    rng = np.random.default_rng(0)
    data = tmp_path / "t.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "y"])
        for _ in range(120):
            x1, x2 = rng.normal(size=2)
            w.writerow([f"{x1:.4f}", f"{x2:.4f}", "a" if x1 > x2 else "b"])
    report = loop.report_epoch

    def report_then_term(loggers, model, row, *a, **kw):
        report(loggers, model, row, *a, **kw)
        if row["epoch"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(loop, "report_epoch", report_then_term)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    argv = ["train", "--csv", str(data), "--target", "y", "--hidden", "8", "--epochs", "4", "--checkpoint-every", "4",
            "--device", "cpu", "--quiet", "--no-compile", "--out", str(out)]
    rc, _, err = run_main(capsys, *argv)
    assert rc == 130 and err.strip().count("\n") == 0, err
    assert f"{out / 'last.pt'} holds epoch 2; resume with: bbb train --resume --out" in err
    assert torch.load(out / "last.pt", weights_only=True)["epoch"] == 2
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is bbb train's only while it trains
    monkeypatch.setattr(loop, "report_epoch", report)
    rc, _, err = run_main(capsys, *argv, "--resume")
    assert rc == 0, err
    assert torch.load(out / "last.pt", weights_only=True)["epoch"] == 4
