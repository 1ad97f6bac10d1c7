"""Small figures for run directories: the learning curve and the SNR histogram (Fig. 4).

matplotlib is optional (``pip install bbb[plots]``): it is imported lazily with the Agg backend,
and when it is missing each function warns and returns None instead of a path.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["learning_curve", "snr_histogram"]


def _pyplot() -> Any | None:
    try:
        import matplotlib
    except ImportError:
        warnings.warn("matplotlib is not installed; skipping plots (pip install 'bbb[plots]')", stacklevel=3)
        return None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def learning_curve(metrics: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """Validation (and test, when logged) error in % against epochs, and the training loss."""
    plt = _pyplot()
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
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def snr_histogram(snr_db: Tensor, path: str | Path, cutoff: float = 0.75, bins: int = 100) -> Path | None:
    """Density and CDF of the signal-to-noise ratio in dB, with a line at the ``cutoff`` quantile."""
    plt = _pyplot()
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
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
