"""Small figures for run directories: the learning curve, the SNR histogram (Fig. 4), the
reliability diagram and the risk-coverage curve.

Every plot function draws on ``ax=`` when given (one matplotlib Axes, or a sequence of them
for a plot of several panels: :func:`canvas`), else on a new figure; with a ``path`` it writes
the PNG (atomically) and returns the path, without one it returns the Figure (in a notebook,
it shows). matplotlib is optional (:data:`INSTALL_HINT`): it is imported lazily, and when it is
missing each function warns and returns None. New figures are
``matplotlib.figure.Figure`` objects with the Agg canvas attached directly: pyplot is never
imported and no backend is selected, so a notebook keeps its inline plots and an interactive
session its windows.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .errors import UserError

__all__ = ["INSTALL_HINT", "Figures", "agg_figures", "canvas", "figures", "finish", "learning_curve",
           "plot_interval_calibration", "plot_reliability", "plot_risk_coverage", "save_png", "snr_histogram"]

#: How to get matplotlib, said wherever a plot is skipped without it. bbb is installed from a clone
#: (it is not on PyPI under its distribution name), so the extra is named by path.
INSTALL_HINT = "pip install matplotlib, or pip install '.[plots]' in a clone of bbb"


class Figures:
    """The part of pyplot's interface the package uses (``subplots``, ``figure``, ``close``),
    built on ``Figure`` + ``FigureCanvasAgg``: no global figure registry, no backend switch."""

    def __init__(self, figure_cls: Any, canvas_cls: Any) -> None:
        self._figure_cls = figure_cls
        self._canvas_cls = canvas_cls

    def figure(self, figsize: Any = None, dpi: Any = None, **kw: Any) -> Any:
        fig = self._figure_cls(figsize=figsize, dpi=dpi, **kw)
        self._canvas_cls(fig)
        return fig

    def subplots(self, nrows: int = 1, ncols: int = 1, *, figsize: Any = None, dpi: Any = None,
                 **kw: Any) -> tuple[Any, Any]:
        fig = self.figure(figsize=figsize, dpi=dpi)
        return fig, fig.subplots(nrows, ncols, **kw)

    @staticmethod
    def close(fig: Any = None) -> None:
        """Nothing to release: the figure is not registered anywhere (kept for pyplot parity)."""
        if fig is not None and hasattr(fig, "clear"):
            fig.clear()


def agg_figures() -> Figures:
    """The factory of :func:`figures`; without matplotlib, ImportError (for callers whose
    figure is the point of the call)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return Figures(Figure, FigureCanvasAgg)


def figures() -> Any | None:
    """A pyplot-like factory of Agg figures (see :class:`Figures`), or None without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        warnings.warn(f"matplotlib is not installed; skipping plots ({INSTALL_HINT})", stacklevel=3)
        return None
    return Figures(Figure, FigureCanvasAgg)


def save_png(fig: Any, path: str | os.PathLike[str], dpi: int = 100) -> Path:
    """Save ``fig`` as PNG through a temporary file and a rename (never half a file)."""
    from .io import atomic_write

    path = Path(path)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    return path


def canvas(ax: Any, panels: int, **subplots: Any) -> tuple[Any, list[Any]]:
    """The figure and the ``panels`` Axes a plot draws on: ``ax`` (one Axes, or a sequence or
    array of ``panels`` Axes) and its figure, or a new Agg figure's (``subplots``: its
    ``nrows``, ``ncols``, ``figsize``, ...); (None, []) without matplotlib."""
    if ax is not None:
        axes = list(ax.flat) if hasattr(ax, "flat") else list(ax) if isinstance(ax, list | tuple) else [ax]
        if len(axes) != panels:
            raise UserError(f"ax: this plot has {panels} panel(s), got {len(axes)} Axes")
        return axes[0].figure, axes
    plt = figures()
    if plt is None:
        return None, []
    nrows, ncols = subplots.pop("nrows", 1), subplots.pop("ncols", panels)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, **subplots)
    return fig, list(axes.flat)


def finish(fig: Any, path: str | os.PathLike[str] | None, new: bool, dpi: int = 100) -> Any:
    """The end of a plot function: the figure it drew on, or with a ``path`` that figure's PNG
    (``new``: a figure the function made, laid out first and released after)."""
    if fig is None or path is None:
        return fig
    if new:
        fig.tight_layout()
    out = save_png(fig, path, dpi=dpi)
    if new:
        fig.clear()
    return out


def learning_curve(metrics: Sequence[dict[str, Any]], path: str | Path | None = None, *, ax: Any = None,
                   rmse: bool = False) -> Any:
    """Validation (and test, when logged) error in % against epochs (``rmse``: a regression run's
    metrics, whose ``val_error`` and ``test_error`` are RMSEs, drawn as they are), and the
    training loss. ``ax``: two Axes (error, objective). Returns the PNG's path when ``path`` is
    given, else the Figure (None without matplotlib)."""
    fig, axes = canvas(ax, 2, figsize=(10, 4))
    if fig is None:
        return None
    ax1, ax2 = axes
    epochs = [r["epoch"] for r in metrics]
    for key, label in (("val_error", "validation"), ("test_error", "test")):
        pts = [(e, (1 if rmse else 100) * r[key]) for e, r in zip(epochs, metrics) if r.get(key) is not None]
        if pts:
            ax1.plot(*zip(*pts), marker="o", label=label)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("RMSE" if rmse else "error (%)")
    ax1.set_title(f"{'RMSE' if rmse else 'error'} with the mean weights")
    ax1.grid(alpha=0.3)
    ax1.legend()
    ax2.plot(epochs, [r["train_loss"] for r in metrics], marker="o", label="free energy / N")
    ax2.plot(epochs, [r["nll"] for r in metrics], marker="o", label="NLL / N")
    ax2.set_xlabel("epoch")
    ax2.set_title("training objective (per example)")
    ax2.grid(alpha=0.3)
    ax2.legend()
    return finish(fig, path, new=ax is None)


def snr_histogram(snr_db: Tensor, path: str | Path | None = None, cutoff: float = 0.75, bins: int = 100, *,
                  ax: Any = None) -> Any:
    """Density and CDF of the signal-to-noise ratio in dB, with a line at the ``cutoff`` quantile.
    ``ax``: two Axes (density, CDF). Returns the PNG's path when ``path`` is given, else the
    Figure (None without matplotlib)."""
    fig, axes = canvas(ax, 2, nrows=2, ncols=1, figsize=(6, 6), sharex=True)
    if fig is None:
        return None
    ax1, ax2 = axes
    v = snr_db.detach().flatten().double().cpu()
    v = v[torch.isfinite(v)]
    q = float(torch.quantile(v[torch.randperm(v.numel(), generator=torch.Generator().manual_seed(0))[:1_000_000]],
                             cutoff)) if v.numel() else 0.0
    vals = v.numpy()
    ax1.hist(vals, bins=bins, density=True, color="tab:blue")
    ax1.axvline(q, color="red", label=f"{100 * cutoff:g}% cut-off")
    ax1.set_ylabel("density")
    ax1.set_title("signal-to-noise ratio |mu|/sigma of the weights")
    ax1.legend()
    s = torch.sort(v).values.numpy()
    ax2.plot(s, torch.linspace(0, 1, len(s)).numpy())
    ax2.axvline(q, color="red")
    ax2.set_xlabel("SNR (dB, 10 log10)")
    ax2.set_ylabel("CDF")
    for a in (ax1, ax2):
        a.grid(alpha=0.3)
    return finish(fig, path, new=ax is None)


def plot_reliability(bins: dict[str, dict[str, Tensor]], path: str | Path | None = None, title: str = "", *,
                     ax: Any = None) -> Any:
    """Reliability diagram: accuracy against confidence per bin, one panel per prediction
    (``ax``: as many Axes). Returns the PNG's path when ``path`` is given, else the Figure (None
    without matplotlib)."""
    fig, axes = canvas(ax, len(bins), figsize=(4.5 * len(bins), 4.2))
    if fig is None:
        return None
    for a, (name, b) in zip(axes, bins.items()):
        edges = b["edges"].cpu()
        width = float(edges[1] - edges[0])
        centers = (edges[:-1] + width / 2).numpy()
        acc = b["accuracy"].cpu().numpy()
        has = (b["count"] > 0).cpu().numpy()
        a.bar(centers[has], acc[has], width=width, edgecolor="black", alpha=0.7, label="accuracy")
        a.bar(centers[has], (b["confidence"].cpu().numpy() - acc)[has], bottom=acc[has], width=width,
              color="red", alpha=0.25, edgecolor="red", label="gap to confidence")
        a.plot([0, 1], [0, 1], "k--", lw=1)
        a.set_xlim(0, 1)
        a.set_ylim(0, 1)
        a.set_xlabel("confidence")
        a.set_ylabel("accuracy")
        ece = float((b["count"] / b["count"].sum() * (b["accuracy"] - b["confidence"]).abs()).sum())
        a.set_title(f"{name}: ECE {100 * ece:.2f}%")
        a.legend(loc="upper left")
    if title and ax is None:
        fig.suptitle(title)
    return finish(fig, path, new=ax is None)


def plot_risk_coverage(curves: dict[str, tuple[Sequence[float], Sequence[float]]], path: str | Path | None = None, *,
                       error: float | None = None, title: str = "", ax: Any = None) -> Any:
    """Risk-coverage curves: the error (%) among the kept predictions against the fraction kept,
    when the most uncertain are handed over first; one line per uncertainty (``curves``: name ->
    (coverage, risk), e.g. ``eval.json``'s ``selective``), and ``error``, the error of all, as a
    dashed line (a ranking no better than chance). Returns the PNG's path when ``path`` is
    given, else the Figure (None without matplotlib)."""
    fig, axes = canvas(ax, 1, figsize=(5.5, 4.2))
    if fig is None:
        return None
    a = axes[0]
    for name, (coverage, risk) in curves.items():
        a.plot(list(coverage), [100 * r for r in risk], label=name)
    if error is not None:
        a.axhline(100 * error, color="gray", ls="--", lw=1, label="all kept")
    a.set_xlim(0, 1)
    a.set_ylim(bottom=0)
    a.set_xlabel("coverage (fraction of predictions kept)")
    a.set_ylabel("error among the kept (%)")
    a.set_title(title or "risk-coverage", fontsize=10)
    a.grid(alpha=0.3)
    a.legend()
    return finish(fig, path, new=ax is None)


def plot_interval_calibration(curves: dict[str, tuple[Sequence[float], Sequence[float]]],
                              path: str | Path | None = None, *, title: str = "", ax: Any = None) -> Any:
    """A regression's calibration curve: the fraction of targets inside each central interval
    of the predictive against the interval's level, one line per predictive (``curves``: name ->
    (levels, coverage), e.g. ``eval.json``'s ``interval_calibration``), the diagonal a
    calibrated one; below it the intervals are too narrow (overconfident). Returns the PNG's path
    when ``path`` is given, else the Figure (None without matplotlib)."""
    fig, axes = canvas(ax, 1, figsize=(4.8, 4.4))
    if fig is None:
        return None
    a = axes[0]
    a.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    for name, (levels, coverage) in curves.items():
        gap = sum(abs(c - v) for v, c in zip(levels, coverage)) / max(len(levels), 1)
        a.plot(list(levels), list(coverage), marker="o", ms=3, label=f"{name} (mean gap {100 * gap:.1f} pp)")
    a.set_xlim(0, 1)
    a.set_ylim(0, 1)
    a.set_xlabel("central interval's level")
    a.set_ylabel("fraction of test targets inside")
    a.set_title(title or "interval calibration", fontsize=10)
    a.grid(alpha=0.3)
    a.legend(loc="best", fontsize=8)
    return finish(fig, path, new=ax is None)
