"""Figures 2-4: test error against epochs, weight histograms, the SNR density."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ... import runs as T
from ...distributions import softplus
from ...errors import UserError
from ...io import atomic_write_json, atomic_write_text, csv_text
from ...nn import bayes_modules
from ...options import is_bayesian
from ...plots import canvas, save_png
from .plan import Job
from .pruning_table import quantile, snr_db_of, snr_sentence, snr_stats
from .recipes import PAPER_METHODS, PAPER_SNR_RANGE_DB, SNR_CUTOFF
from .tables import pct

#: the methods of Figures 2 and 3: the paper's three, and IVON (not in the paper) where the budget
#: trains it
FIG2_METHODS = (("sgd", "SGD"), ("dropout", "dropout"), ("bbb_mixture", "BBB (scale mixture)"), ("ivon", "IVON"))


def _fig_methods(runs: dict[str, Job], methods: Sequence[str] | None) -> list[tuple[str, str]]:
    """The (method, label) pairs of :data:`FIG2_METHODS` a figure covers: ``methods`` (those of the
    budget), default the paper's three and any other in ``runs``."""
    keep = [m for m, _ in FIG2_METHODS if m in PAPER_METHODS or m in runs] if methods is None else methods
    return [(m, label) for m, label in FIG2_METHODS if m in keep]


FIG2_LOG_TICKS = (1, 2, 5, 10, 20, 50, 100, 200, 300, 600)


def figure2(out: Path, runs: dict[str, Job], log_epochs: bool = False, *, ax: Any = None,
            methods: Sequence[str] | None = None) -> list[str]:
    """Figure 2: the test error per epoch of the selected 2x1200 runs (logged for this figure
    only; nothing is selected on it). ``log_epochs``: a log-scale epoch axis (the paper
    budget's 600 epochs), with the first epochs' high errors above the plotted range.
    ``methods``: those of the budget (:func:`_fig_methods`); one of them without a run is named
    as not finished. Writes fig2_curves.csv and .png, or draws on ``ax`` (a matplotlib Axes)
    instead of the PNG; returns the files written."""
    pairs = _fig_methods(runs, methods)
    curves: dict[str, list[dict[str, Any]]] = {m: T.read_metrics(runs[m].run_dir) for m, _ in pairs if m in runs}
    by_epoch = {m: {r["epoch"]: r for r in rows} for m, rows in curves.items()}
    epochs = sorted({e for rows in by_epoch.values() for e in rows})
    table = []
    for e in epochs:
        row: dict[str, Any] = {"epoch": e}
        for m, rows in by_epoch.items():
            r = rows.get(e)
            row[f"{m}_test_error"] = None if r is None else pct(r.get("test_error"))
            row[f"{m}_val_error"] = None if r is None else pct(r.get("val_error"))
        table.append(row)
    cols = ["epoch", *[f"{m}_{k}" for m, _ in pairs for k in ("test_error", "val_error")]]
    atomic_write_text(out / "fig2_curves.csv", csv_text(cols, table))
    return ["fig2_curves.csv", *draw(out / "fig2_curves.png", ax, 1,
                                     lambda axes: _draw_figure2(axes[0], table, runs, log_epochs, pairs),
                                     figsize=(6.5, 4.2))]


def _draw_figure2(ax: Any, table: list[dict[str, Any]], runs: dict[str, Job], log_epochs: bool,
                  pairs: list[tuple[str, str]]) -> None:
    errs: list[tuple[int, float]] = []
    for m, label in pairs:
        pts = [(r["epoch"], r[f"{m}_test_error"]) for r in table if r.get(f"{m}_test_error") is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o" if len(pts) < 30 else None, ms=3, label=label)
            errs += pts
    shown = {m: j for m, j in runs.items() if m in dict(pairs)}
    drops = sorted({j.config.lr_step_size for j in shown.values() if j.config.lr_schedule == "step"
                    and 0 < j.config.lr_step_size < j.config.epochs})
    for i, d in enumerate(drops):
        ax.axvline(d, color="grey", ls="--", lw=0.8,
                   label=f"learning rate x{shown[next(iter(shown))].config.lr_gamma:g}" if i == 0 else None)
    last = max((e for e, _ in errs), default=1)
    if log_epochs:
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ticks = [t for t in FIG2_LOG_TICKS if t <= last]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(1, max(2, last))
        late = [v for e, v in errs if e >= 10]
        if late:  # the paper's axis is about 0.8-2.0%: the first epochs' errors are cut
            ax.set_ylim(max(0.0, 0.9 * min(v for _, v in errs)), max(2.0, 1.05 * max(late)))
        ax.set_xlabel("epoch (log scale)")
    else:
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("epoch")
    ax.set_ylabel("test error (%)")
    missing = [label for m, label in pairs if m not in runs]
    ax.set_title("Figure 2: test error of 2x1200 networks (mean weights)"
                 + (f"\nnot finished yet: {', '.join(missing)}" if missing else ""))
    ax.grid(alpha=0.3, which="both" if log_epochs else "major")
    ax.legend()


@torch.no_grad()
def weight_sample(model: nn.Module, generator: torch.Generator | None = None) -> Tensor:
    """The weights of ``model`` as one flat CPU tensor, biases excluded.

    BBB: one sample w = mu + softplus(rho) * eps from q for every weight (Figure 3's "samples
    from q"); a deterministic network: its ``nn.Linear`` weights (for dropout, the weights used
    at test time: PyTorch's inverted dropout scales during training, not at test time).
    """
    parts: list[Tensor] = []
    bayes = list(bayes_modules(model))
    if bayes:
        for m in bayes:
            mu, sigma = m.mu("weight").detach().float().cpu(), softplus(m.rho("weight").detach().float().cpu())
            eps = torch.randn(mu.shape, generator=generator)
            parts.append((mu + sigma * eps).flatten())
    else:
        parts = [m.weight.detach().float().cpu().flatten() for m in model.modules() if isinstance(m, nn.Linear)]
    if not parts:
        raise UserError("the model has no weights to plot")
    return torch.cat(parts)


FIG3_BINS = 240


def _fig3_range(samples: dict[str, Tensor]) -> float:
    """Half-width of the plotted window: 1.1x the largest 99.9% quantile of |w|, rounded up to
    0.05 (the paper's axis is +-0.2), at most 1."""
    r = max(quantile(v.abs(), 0.999) for v in samples.values()) * 1.1
    return min(1.0, max(0.05, math.ceil(r / 0.05) * 0.05))


def figure3(out: Path, runs: dict[str, Job], *, ax: Any = None, methods: Sequence[str] | None = None) -> list[str]:
    """Figure 3: the density of the weights of the selected 2x1200 runs (BBB and IVON: one
    sample from q), of ``methods`` (as :func:`figure2`'s). Writes fig3_weights.csv, .json and
    .png, or draws on ``ax`` (a matplotlib Axes) instead of the PNG; returns the files written."""
    g = torch.Generator().manual_seed(0)
    samples: dict[str, Tensor] = {}
    for m, _ in _fig_methods(runs, methods):
        if m in runs:
            model, _cfg = T.load_run(runs[m].run_dir, "last", device="cpu")
            samples[m] = weight_sample(model, g)
    rng = _fig3_range(samples)
    edges = torch.linspace(-rng, rng, FIG3_BINS + 1, dtype=torch.float64)
    width = float(edges[1] - edges[0])
    dens = {m: torch.histc(v.double(), bins=FIG3_BINS, min=-rng, max=rng) / (v.numel() * width)
            for m, v in samples.items()}
    rows = [{"bin_left": round(float(edges[i]), 6), "bin_right": round(float(edges[i + 1]), 6),
             **{m: float(d[i]) for m, d in dens.items()}} for i in range(FIG3_BINS)]
    atomic_write_text(out / "fig3_weights.csv", csv_text(["bin_left", "bin_right", *dens], rows))
    stats = {m: {"n": int(v.numel()), "std": float(v.std()), "mean_abs": float(v.abs().mean()),
                 "fraction_abs_below_0.01": float((v.abs() < 0.01).double().mean()),
                 "fraction_outside_plot": float((v.abs() > rng).double().mean()),
                 "q01": quantile(v, 0.01), "q99": quantile(v, 0.99),
                 "run": f"runs/{runs[m].name}", "checkpoint": "last"}
             for m, v in samples.items()}
    atomic_write_json(out / "fig3_weights.json", {
        "what": "density of the weights (biases excluded) of the 2x1200 networks; BBB and IVON: one "
                "sample from q; SGD/dropout: the trained (test-time) weights", "plot_range": rng, "methods": stats})
    return ["fig3_weights.csv", "fig3_weights.json", *draw(out / "fig3_weights.png", ax, 1,
                                                            lambda axes: _draw_figure3(axes[0], edges, dens, rng),
                                                            figsize=(6.5, 4.2))]


def _draw_figure3(ax: Any, edges: Tensor, dens: dict[str, Tensor], rng: float) -> None:
    centers = ((edges[:-1] + edges[1:]) / 2).numpy()
    for m, label in FIG2_METHODS:
        if m in dens:
            ax.plot(centers, dens[m].numpy(), label=label + (" (samples from q)" if _bayesian(m) else ""))
    ax.set_xlabel("weight")
    ax.set_ylabel("density")
    ax.set_xlim(-rng, rng)
    ax.set_title("Figure 3: weights of the 2x1200 networks")
    ax.grid(alpha=0.3)
    ax.legend()


FIG4_BINS = 100


FIG4_LOW_QUANTILE = 0.005  # the histogram starts here: a few near-zero |mu| would squash it


def _bayesian(cell_method: str) -> bool:
    """Whether a cell's method trains a posterior (BBB's two priors, IVON)."""
    return is_bayesian(cell_method.split("_")[0])


def figure4(out: Path, job: Job, db: Tensor | None = None, *, ax: Any = None) -> list[str]:
    """Figure 4: density and CDF of the weights' SNR in dB (``db``: from :func:`snr_db_of`),
    the 75% cut-off and the paper's range marked; fig4_snr.json states our range beside the
    paper's. Writes fig4_snr.csv, .json and .png, or draws on ``ax`` (two matplotlib Axes:
    density, CDF) instead of the PNG; returns the files written."""
    if db is None:
        db = snr_db_of(job)
    stats = snr_stats(db)
    n_all = db.numel()
    db = db[torch.isfinite(db)]
    if db.numel() == 0:
        raise UserError(f"{job.run_dir}: no finite signal-to-noise ratio to plot")
    n = db.numel()
    qs = {f"q{round(100 * q):02d}": quantile(db, q) for q in (0.05, 0.25, 0.5, SNR_CUTOFF, 0.95)}
    cut = quantile(db, SNR_CUTOFF)
    lo, hi = quantile(db, FIG4_LOW_QUANTILE), float(db.max())
    hi = hi if hi > lo else lo + 1.0
    edges = torch.linspace(lo, hi, FIG4_BINS + 1, dtype=torch.float64)
    width = (hi - lo) / FIG4_BINS
    counts = torch.histc(db.clamp(lo, hi), bins=FIG4_BINS, min=lo, max=hi)
    below = int((db < lo).sum())
    counts[0] -= below  # clamped values below the window are not density inside it
    cdf = (below + torch.cumsum(counts, 0)) / n
    rows = [{"bin_left": float(edges[i]), "bin_right": float(edges[i + 1]),
             "density": float(counts[i]) / (n * width), "cdf": float(cdf[i])} for i in range(FIG4_BINS)]
    atomic_write_text(out / "fig4_snr.csv", csv_text(["bin_left", "bin_right", "density", "cdf"], rows))
    atomic_write_json(out / "fig4_snr.json", {
        "convention": "SNR in dB = 10 log10(|mu| / sigma) (the paper does not state it; 20 log10 "
                      "doubles every value)",
        "cutoff_fraction": SNR_CUTOFF, "cutoff_db": cut, "quantiles_db": qs,
        "fraction_below_plot": below / n, "n_weights": int(n_all), "n_finite": int(n),
        "range_5_95_db": [stats["q05_db"], stats["q95_db"]],
        "paper_range_db": list(PAPER_SNR_RANGE_DB),
        "paper_range_note": "where most of the paper's Figure 4 lies, read from its axis",
        "fraction_in_paper_range": stats["fraction_in_paper_range"],
        "fraction_in_paper_range_20log10": stats["fraction_in_paper_range_20log10"],
        "range_5_95_db_20log10": [stats["q05_db_20log10"], stats["q95_db_20log10"]],
        "summary": snr_sentence(stats),
        "run": f"runs/{job.name}", "checkpoint": "last"})
    return ["fig4_snr.csv", "fig4_snr.json", *draw(
        out / "fig4_snr.png", ax, 2, lambda axes: _draw_figure4(axes, job, stats, edges, counts, cdf, cut, n, width),
        nrows=2, ncols=1, figsize=(6.5, 6), sharex=True)]


def _draw_figure4(axes: list[Any], job: Job, stats: dict[str, Any], edges: Tensor, counts: Tensor, cdf: Tensor,
                  cut: float, n: int, width: float) -> None:
    ax1, ax2 = axes
    ax1.stairs((counts / (n * width)).numpy(), edges.numpy(), fill=True, alpha=0.7)
    ax1.axvline(cut, color="red", label=f"{100 * SNR_CUTOFF:g}% cut-off ({cut:.2f} dB)")
    plo, phi = PAPER_SNR_RANGE_DB
    ax1.axvspan(plo, phi, color="green", alpha=0.12, label=f"paper's range, about {plo:g} to {phi:g} dB")
    ax1.set_ylabel("density")
    ax1.set_title(f"Figure 4: SNR of the {n:,} weights of {job.name}\n5th-95th percentile "
                  f"{stats['q05_db']:.1f} to {stats['q95_db']:.1f} dB; "
                  f"{100 * stats['fraction_in_paper_range']:.0f}% within the paper's range", fontsize=10)
    ax1.legend(fontsize=8)
    ax2.plot(edges[1:].numpy(), cdf.numpy())
    ax2.axvspan(plo, phi, color="green", alpha=0.12)
    ax2.axvline(cut, color="red")
    ax2.axhline(SNR_CUTOFF, color="red", ls=":", lw=0.8)
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("CDF")
    ax2.set_xlabel("signal-to-noise ratio (dB) = 10 log10(|mu| / sigma)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)


def draw(path: Path, ax: Any, panels: int, plot: Callable[[list[Any]], None], **subplots: Any) -> list[str]:
    """Draw one figure with ``plot(axes)``: on ``ax`` (the caller's Axes; nothing is written), or
    on a new figure saved as ``path``. Returns ``[path.name]`` when the PNG was written."""
    fig, axes = canvas(ax, panels, **subplots)
    if fig is None:
        return []
    plot(axes)
    if ax is not None:
        return []
    fig.tight_layout()
    savefig(fig, path)
    fig.clear()
    return [path.name]


def savefig(fig: Any, path: Path) -> None:
    """Save through a temporary file and rename (a reader never sees half a PNG)."""
    save_png(fig, path, dpi=100)
