"""Plots leave matplotlib's global state alone (a notebook keeps its backend) and write whole PNGs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("matplotlib")

SRC = str(Path(__file__).resolve().parents[2] / "src")

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
# on the user's own axes: nothing written, the user's figure returned, no figure of ours registered
fig2, axs = plt.subplots(1, 2)
assert plots.learning_curve(metrics, ax=axs) is fig2 and len(axs[0].lines) == 2 and len(axs[1].lines) == 2
assert plots.snr_histogram(torch.randn(1000), ax=list(axs)) is fig2 and axs[1].get_ylabel() == "CDF"
fig3, ax = plt.subplots()
assert EU.plot_reliability({"a": U.reliability_bins(p, y)}, ax=ax) is fig3 and ax.get_title().startswith("a: ECE")
# no path: our own (Agg) figure, not registered with pyplot
made = plots.learning_curve(metrics)
assert isinstance(made, matplotlib.figure.Figure) and made.axes[0].get_xlabel() == "epoch"
assert matplotlib.get_backend().lower() == "svg", matplotlib.get_backend()
assert plt.get_fignums() == [fig_user.number, fig2.number, fig3.number], plt.get_fignums()
print("ok")
"""


@pytest.mark.release_independent
def test_plots_keep_the_users_backend_and_figures(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "MPLBACKEND": ""}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"
    for name in ("curve.png", "snr.png", "rel.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


@pytest.mark.release_independent
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


def figure_axes(panels: int):
    from matplotlib.figure import Figure

    fig = Figure()
    return fig, list(fig.subplots(1, panels, squeeze=False).flat)


def test_plot_functions_draw_on_the_given_axes_or_return_the_figure(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from bbb import plots
    from bbb.errors import UserError
    from bbb.experiments import uncertainty as EU

    scores = {name: torch.rand(40) for name in EU.SCORES}
    report = {name: {"auroc": 0.5} for name in EU.SCORES}
    fig, axes = figure_axes(3)
    assert EU.plot_ood(scores, scores, report, ax=axes) is fig
    assert [a.get_title() for a in axes] == ["predictive entropy: AUROC 0.500", "mutual information: AUROC 0.500",
                                             "1 - max probability: AUROC 0.500"]  # the score it plots
    assert isinstance(EU.plot_ood(scores, scores, report), Figure)
    result = {"uncertain": torch.arange(3), "confident_errors": torch.arange(2), "votes": torch.rand(10, 4),
              "disagreement": torch.rand(10), "dissent": torch.rand(10)}
    assert isinstance(EU.plot_uncertain(torch.rand(10, 16), torch.arange(10) % 4, result, None, 5), Figure)
    assert not list(tmp_path.iterdir())  # nothing was written
    fig, axes = figure_axes(3)
    with pytest.raises(UserError, match="2 panel"):  # one line, naming what the plot needs
        plots.snr_histogram(torch.randn(100), ax=axes)


def test_regression_plot_on_the_given_axes(tmp_path: Path) -> None:
    from bbb.experiments.regression import RegressionConfig, plot_regression, run_regression

    cfg = RegressionConfig(hidden=(4,), epochs=2, n_train=5, pred_samples=4, quiet=True)
    res = run_regression(cfg)
    fig, axes = figure_axes(2)
    assert plot_regression(res, cfg=cfg, ax=axes) is fig
    assert [a.get_title() for a in axes] == ["Bayes by Backprop", "standard neural network"]
    assert plot_regression(res, tmp_path / "r.png", cfg) == tmp_path / "r.png"
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
