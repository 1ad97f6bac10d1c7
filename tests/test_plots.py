"""Plots leave matplotlib's global state alone (a notebook keeps its backend) and write whole PNGs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

SRC = str(Path(__file__).resolve().parents[1] / "src")

SCRIPT = r"""
import sys, warnings
import matplotlib
matplotlib.use("svg")            # the user's choice (a notebook would have its inline backend)
import matplotlib.pyplot as plt
fig_user = plt.figure()          # an open figure of the user's
import torch
from pathlib import Path
from bbb import plots
from bbb.experiments import uncertainty as EU
out = Path(sys.argv[1])
metrics = [{"epoch": e, "val_error": 0.1 / e, "test_error": 0.11 / e, "train_loss": 1.0 / e, "nll": 0.5 / e}
           for e in range(1, 4)]
assert plots.learning_curve(metrics, out / "curve.png") is not None
assert plots.snr_histogram(torch.randn(1000), out / "snr.png") is not None
from bbb import uncertainty as U
p = torch.softmax(torch.randn(50, 3), -1); y = torch.randint(0, 3, (50,))
assert EU.plot_reliability({"a": U.reliability_bins(p, y)}, out / "rel.png") is not None
assert matplotlib.get_backend().lower() == "svg", matplotlib.get_backend()
assert plt.get_fignums() == [fig_user.number], plt.get_fignums()
print("ok")
"""


def test_plots_keep_the_users_backend_and_figures(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "MPLBACKEND": ""}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"
    for name in ("curve.png", "snr.png", "rel.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_plots_do_not_import_pyplot(tmp_path: Path) -> None:
    code = ("import sys, torch; from bbb import plots; "
            "plots.snr_histogram(torch.randn(100), sys.argv[1]); "
            "print('matplotlib.pyplot' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.png")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_in_process_plot(tmp_path: Path) -> None:
    from bbb import plots

    assert plots.snr_histogram(torch.randn(500), tmp_path / "s.png") == tmp_path / "s.png"
