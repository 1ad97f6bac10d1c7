"""Small figures for run directories: the learning curve and the SNR histogram (Fig. 4).

matplotlib is optional (``pip install 'bayes-by-backprop[plots]'``): it is imported lazily, and when it is
missing each function warns and returns None instead of a path. Figures are drawn on
``matplotlib.figure.Figure`` objects with the Agg canvas attached directly: pyplot is never
imported and no backend is selected, so a notebook keeps its inline plots and an interactive
session its windows. PNG files are written atomically.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["Figures", "agg_figures", "figures", "learning_curve", "plot_reliability", "save_png", "snr_histogram"]


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
        warnings.warn("matplotlib is not installed; skipping plots "
                      "(pip install 'bayes-by-backprop[plots]')", stacklevel=3)
        return None
    return Figures(Figure, FigureCanvasAgg)


def save_png(fig: Any, path: str | Path, dpi: int = 100) -> Path:
    """Save ``fig`` as PNG through a temporary file and a rename (never half a file)."""
    from .io import atomic_write

    path = Path(path)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    return path


def learning_curve(metrics: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """Validation (and test, when logged) error in % against epochs, and the training loss."""
    plt = figures()
    if plt is None:
        return None
    epochs = [r["epoch"] for r in metrics]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("val_error", "validation"), ("test_error", "test")):
        pts = [(e, 100 * r[key]) for e, r in zip(epochs, metrics) if r.get(key) is not None]
        if pts:
            ax1.plot(*zip(*pts), marker="o", label=label)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("error (%)")
    ax1.set_title("error with the mean weights")
    ax1.grid(alpha=0.3)
    ax1.legend()
    ax2.plot(epochs, [r["train_loss"] for r in metrics], marker="o", label="free energy / N")
    ax2.plot(epochs, [r["nll"] for r in metrics], marker="o", label="NLL / N")
    ax2.set_xlabel("epoch")
    ax2.set_title("training objective (per example)")
    ax2.grid(alpha=0.3)
    ax2.legend()
    fig.tight_layout()
    path = save_png(fig, path)
    plt.close(fig)
    return path


def snr_histogram(snr_db: Tensor, path: str | Path, cutoff: float = 0.75, bins: int = 100) -> Path | None:
    """Density and CDF of the signal-to-noise ratio in dB, with a line at the ``cutoff`` quantile."""
    plt = figures()
    if plt is None:
        return None
    v = snr_db.detach().flatten().double().cpu()
    v = v[torch.isfinite(v)]
    q = float(torch.quantile(v[torch.randperm(v.numel(), generator=torch.Generator().manual_seed(0))[:1_000_000]],
                             cutoff)) if v.numel() else 0.0
    vals = v.numpy()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
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
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = save_png(fig, path)
    plt.close(fig)
    return path


def plot_reliability(bins: dict[str, dict[str, Tensor]], path: str | Path, title: str = "") -> Path | None:
    """Reliability diagram: accuracy against confidence per bin, one panel per prediction."""
    plt = figures()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(bins), figsize=(4.5 * len(bins), 4.2), squeeze=False)
    for ax, (name, b) in zip(axes[0], bins.items()):
        edges = b["edges"].cpu()
        width = float(edges[1] - edges[0])
        centers = (edges[:-1] + width / 2).numpy()
        acc = b["accuracy"].cpu().numpy()
        has = (b["count"] > 0).cpu().numpy()
        ax.bar(centers[has], acc[has], width=width, edgecolor="black", alpha=0.7, label="accuracy")
        ax.bar(centers[has], (b["confidence"].cpu().numpy() - acc)[has], bottom=acc[has], width=width,
               color="red", alpha=0.25, edgecolor="red", label="gap to confidence")
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence")
        ax.set_ylabel("accuracy")
        ece = float((b["count"] / b["count"].sum() * (b["accuracy"] - b["confidence"]).abs()).sum())
        ax.set_title(f"{name}: ECE {100 * ece:.2f}%")
        ax.legend(loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = save_png(fig, path)
    plt.close(fig)
    return path
