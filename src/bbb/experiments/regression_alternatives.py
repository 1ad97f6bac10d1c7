"""Figure 5 beside the alternatives: ``bbb regression --alternatives``.

The same points, network shape, noise model (fixed at ``--model-sigma``), optimiser and steps as
the BBB and standard networks of :func:`bbb.experiments.regression.run_regression`, fitted by the
methods users pick instead of Bayes by Backprop, each at a setting fixed before any run (not
tuned on this curve):

* ``deep_ensemble``: 5 standard networks from 5 initialisations (Lakshminarayanan et al. 2017;
  the same data, full batch); the predictive is the equal mixture of their N(f_i(x), sigma^2).
* ``mc_dropout``: the standard network with dropout p = 0.1 after each hidden layer (Gal and
  Ghahramani 2016), kept at prediction: ``--samples`` dropout masks.
* ``laplace``: a last-layer Laplace (KFAC, prior precision by the marginal likelihood, the noise
  kept at sigma; :func:`bbb.laplace.fit_last_layer_laplace`) of the standard network of this
  seed, trained again here; its GLM predictive N(f(x), var_f(x) + sigma^2). Needs laplace-torch
  (the ``laplace`` extra); without it the method is left out, with a warning.

Writes ``alternatives.csv`` (per grid point each method's median, quartiles, 2.5/97.5% and
epistemic sd), ``alternatives.json`` (per method the RMSE of the median against the noise-free
curve inside the data, the interquartile width inside the data and at the far end, their ratio,
the epistemic sd at the far end, the share of the grid beyond and before the data where the
noise-free curve is inside the 2.5-97.5% band, and the seconds) and ``alternatives.png`` (BBB, the standard
network and each alternative, on the same axes).
"""

from __future__ import annotations

import csv
import io
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..devices import resolve_device
from ..errors import UserError
from ..io import atomic_write_json, atomic_write_text
from ..uncertainty import gaussian_mixture_quantiles
from .regression import (
    QUANTILES,
    RegressionConfig,
    in_training_range,
    make_data,
    standard_net,
    true_function,
)

__all__ = ["METHODS", "ENSEMBLE_SIZE", "DROPOUT", "OUTPUT_FILES", "run_alternatives", "check_alternatives"]

METHODS = ("deep_ensemble", "mc_dropout", "laplace")
ENSEMBLE_SIZE = 5
DROPOUT = 0.1
OUTPUT_FILES = ("alternatives.csv", "alternatives.json", "alternatives.png")
COLUMNS = ("median", "q25", "q75", "q025", "q975", "epistemic_std")
TITLES = {"bbb": "Bayes by Backprop", "standard": "standard network", "deep_ensemble": "deep ensemble of 5",
          "mc_dropout": "MC dropout (p = 0.1)", "laplace": "last-layer Laplace"}


def check_alternatives(cfg: RegressionConfig) -> None:
    """A one-line error, before anything trains, where the alternatives cannot run as built: a
    device other than the CPU, a learned or input-dependent noise, or their files in ``cfg.out``
    without ``overwrite``."""
    if resolve_device(cfg.device).type != "cpu":
        raise UserError("--alternatives run on the CPU (the networks are tiny): give --device cpu")
    if cfg.learn_noise or cfg.heteroscedastic:
        raise UserError("--alternatives fit the fixed noise of --model-sigma: leave out --learn-noise and "
                        "--heteroscedastic")
    if cfg.out and not cfg.overwrite:
        found = [f for f in OUTPUT_FILES if (Path(cfg.out) / f).exists()]
        if found:
            raise UserError(f"{Path(cfg.out) / found[0]} exists: give --overwrite to replace it, or another --out")


def _fit(cfg: RegressionConfig, net: nn.Module, x: Tensor, y: Tensor) -> nn.Module:
    """Full-batch Adam on the Gaussian NLL with the fixed noise (the standard network's training)."""
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    xin = x.unsqueeze(-1)
    net.train()
    for _ in range(cfg.epochs):
        loss = ((net(xin).squeeze(-1) - y) ** 2).mean() / (2 * cfg.model_sigma ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return net.eval()


def _dropout_net(cfg: RegressionConfig) -> nn.Sequential:
    net = standard_net(cfg, 1)
    layers: list[nn.Module] = []
    for layer in net:
        layers.append(layer)
        if not isinstance(layer, nn.Linear):  # after each hidden activation
            layers.append(nn.Dropout(DROPOUT))
    return nn.Sequential(*layers)


def _mixture_bands(means: Tensor, sigma: float) -> dict[str, Tensor]:
    """Quantiles of the equal mixture of N(means_i, sigma^2) over the rows i of ``means`` (k, G),
    exact (:func:`bbb.uncertainty.gaussian_mixture_quantiles`); the epistemic sd is the sd of the
    means."""
    qs = gaussian_mixture_quantiles(means, sigma, list(QUANTILES.values()))
    res = {name: qs[i] for i, name in enumerate(QUANTILES)}
    res["epistemic_std"] = means.std(0, unbiased=False)
    return res


def _gaussian_bands(mean: Tensor, var_f: Tensor, sigma: float) -> dict[str, Tensor]:
    sd = (var_f + sigma ** 2).sqrt()
    normal = torch.distributions.Normal(0.0, 1.0)
    res = {name: mean + sd * float(normal.icdf(torch.tensor(q))) for name, q in QUANTILES.items()}
    res["epistemic_std"] = var_f.clamp_min(0).sqrt()
    return res


def _method(name: str, cfg: RegressionConfig, x: Tensor, y: Tensor, grid: Tensor) -> dict[str, Tensor] | None:
    g = grid.unsqueeze(-1)
    if name == "deep_ensemble":
        means = []
        for i in range(ENSEMBLE_SIZE):
            torch.manual_seed(cfg.seed + 1000 * (i + 1))
            net = _fit(cfg, standard_net(cfg, 1), x, y)
            with torch.no_grad():
                means.append(net(g).squeeze(-1))
        return _mixture_bands(torch.stack(means), cfg.model_sigma)
    if name == "mc_dropout":
        torch.manual_seed(cfg.seed)
        net = _fit(cfg, _dropout_net(cfg), x, y)
        net.train()  # dropout kept at prediction
        with torch.no_grad():
            masks = torch.stack([net(g).squeeze(-1) for _ in range(cfg.pred_samples)])
        return _mixture_bands(masks, cfg.model_sigma)
    from ..laplace import fit_last_layer_laplace, laplace_available

    if not laplace_available():
        print("regression: laplace-torch is not installed; left out the Laplace (pip install "
              "'bayes-by-backprop[laplace]')", file=sys.stderr)
        return None
    torch.manual_seed(cfg.seed)
    net = _fit(cfg, standard_net(cfg, 1), x, y)
    post = fit_last_layer_laplace(net, (x.unsqueeze(-1), y.unsqueeze(-1)), likelihood="regression",
                                  sigma_noise=cfg.model_sigma)
    mean, var = post.predict(g, noise=False)
    return _gaussian_bands(mean.squeeze(-1).detach(), var.squeeze(-1).detach(), cfg.model_sigma)


def run_alternatives(cfg: RegressionConfig, base: dict[str, Any], methods: tuple[str, ...] = METHODS
                     ) -> dict[str, Any]:
    """Fit ``methods`` on the data of ``cfg`` (the points :func:`run_regression` drew: ``base``
    is its result, whose BBB and standard bands are set beside them) and write
    :data:`OUTPUT_FILES` to ``cfg.out`` when set. Returns ``summary`` and each method's bands."""
    check_alternatives(cfg)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UserError(f"unknown alternative {unknown[0]!r}; expected some of {', '.join(METHODS)}")
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    bands: dict[str, dict[str, Tensor]] = {m: {c: base[m][c] for c in COLUMNS} for m in ("bbb", "standard")}
    seconds: dict[str, float] = {"bbb": base["summary"]["seconds_bbb"], "standard": base["summary"]["seconds_standard"]}
    try:
        with torch.random.fork_rng(devices=[]):
            x, y = make_data(cfg.n_train, cfg.x_low, cfg.x_high, cfg.noise_std, torch.Generator().manual_seed(cfg.seed))
            if not torch.equal(x, base["x_train"]):
                raise UserError("the alternatives' data differ from the BBB run's: give both the same settings")
            grid = base["grid"]
            for m in methods:
                t0 = time.perf_counter()
                got = _method(m, cfg, x, y, grid)
                if got is not None:
                    bands[m] = got
                    seconds[m] = round(time.perf_counter() - t0, 2)
    finally:
        torch.set_num_threads(threads)
    truth = true_function(grid)
    inside = in_training_range(cfg, grid)
    far = int(torch.argmax(grid))
    summary: dict[str, Any] = {"far_end_x": float(grid[far]), "training_range": [cfg.x_low, cfg.x_high],
                               "ensemble_size": ENSEMBLE_SIZE, "dropout": DROPOUT, "methods": {}}
    right, left = grid > cfg.x_high, grid < cfg.x_low

    def covered(b: dict[str, Tensor], where: Tensor) -> float | None:
        """The share of the grid points in ``where`` whose noise-free value is inside the 2.5-97.5% band."""
        if not bool(where.any()):
            return None
        return float(((b["q025"] <= truth) & (truth <= b["q975"]))[where].double().mean())

    for m, b in bands.items():
        iqr = b["q75"] - b["q25"]
        w_in, w_far = float(iqr[inside].mean()), float(iqr[far])
        summary["methods"][m] = {
            "rmse_median_in_data": float(((b["median"] - truth)[inside] ** 2).mean().sqrt()),
            "iqr_mean_in_data": w_in, "iqr_at_far_end": w_far,
            "iqr_ratio_far_to_in_data": w_far / w_in if w_in > 0 else float("inf"),
            "epistemic_std_at_far_end": float(b["epistemic_std"][far]),
            "curve_in_95_band_beyond_data": covered(b, right), "curve_in_95_band_before_data": covered(b, left),
            "seconds": seconds[m]}
    res = {"summary": summary, "bands": bands, "grid": grid, "true_f": truth, "x_train": x, "y_train": y}
    if not cfg.quiet:
        text = "; ".join(f"{m} {v['iqr_ratio_far_to_in_data']:.1f}x" for m, v in summary["methods"].items())
        print(f"regression: interquartile width at x={cfg.grid_high:g} over its mean in the data: {text}", flush=True)
    if cfg.out:
        files = _write(Path(cfg.out), cfg, res)
        if not cfg.quiet:
            print(f"regression: wrote {', '.join(files)} in {cfg.out}", flush=True)
    return res


def _write(out: Path, cfg: RegressionConfig, res: dict[str, Any]) -> list[str]:
    """``out``'s alternatives.csv, .json and (with matplotlib) .png; the names of those written."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = list(res["bands"])
    w.writerow(["x", "true_f", "in_training_range"] + [f"{m}_{c}" for m in names for c in COLUMNS])
    grid = res["grid"]
    inside = in_training_range(cfg, grid)  # (the points of the in-data numbers of alternatives.json)
    for i in range(grid.shape[0]):
        xv = float(grid[i])
        w.writerow([f"{xv:.6g}", f"{float(res['true_f'][i]):.6g}", int(inside[i])]
                   + [f"{float(res['bands'][m][c][i]):.6g}" for m in names for c in COLUMNS])
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "alternatives.csv", buf.getvalue())
    atomic_write_json(out / "alternatives.json", res["summary"])
    try:
        _plot(res, out / "alternatives.png", cfg)
    except ImportError:
        print("regression: matplotlib is not installed; skipped alternatives.png", file=sys.stderr)
        return ["alternatives.csv", "alternatives.json"]
    return ["alternatives.csv", "alternatives.json", "alternatives.png"]


def _plot(res: dict[str, Any], path: Path, cfg: RegressionConfig) -> None:
    from ..plots import agg_figures, canvas, finish

    agg_figures()
    names = list(res["bands"])
    fig, axes = canvas(None, len(names), figsize=(3.3 * len(names), 3.6), dpi=110, sharex=True, sharey=True)
    grid, truth = res["grid"].numpy(), res["true_f"].numpy()
    x, y = res["x_train"].numpy(), res["y_train"].numpy()
    for ax, m in zip(axes, names):
        b = {k: v.numpy() for k, v in res["bands"][m].items()}
        ax.axvspan(cfg.x_low, cfg.x_high, color="0.93", lw=0, zorder=0)
        ax.fill_between(grid, b["q025"], b["q975"], color="tab:purple", alpha=0.15, lw=0)
        ax.fill_between(grid, b["q25"], b["q75"], color="tab:purple", alpha=0.45, lw=0)
        ax.plot(grid, truth, color="0.45", lw=1.0, ls="--")
        ax.plot(grid, b["median"], color="red", lw=1.4)
        ax.plot(x, y, "kx", ms=3, mew=0.8)
        ratio = res["summary"]["methods"][m]["iqr_ratio_far_to_in_data"]
        ax.set_title(f"{TITLES.get(m, m)}\n(IQR at x={cfg.grid_high:g}: {ratio:.1f}x)", fontsize=9)
        ax.set_xlabel("x")
        ax.grid(True, alpha=0.25)
    lo, hi = float(min(y.min(), truth.min())), float(max(y.max(), truth.max()))
    axes[0].set_ylim(lo - 0.35 * (hi - lo), hi + 0.35 * (hi - lo))
    finish(fig, path, new=True, dpi=110)
