"""Regression curves with honest uncertainty (section 5.2, Fig. 5 of the paper).

Data: y = x + 0.3 sin(2 pi (x + eps)) + 0.3 sin(4 pi (x + eps)) + eps with eps ~ N(0, 0.02^2).
The paper writes N(0, 0.02) without saying whether 0.02 is a variance or a standard deviation;
we read it as a standard deviation, as public reproductions do. The training inputs are drawn
from U[0, 0.5] (the paper does not state the range; ``--x-range`` changes it); predictions
cover [-0.2, 1.2].

Two networks of the same shape are fitted to the same points by minimising a conditional
Gaussian loss: a BBB network (:class:`bbb.nn.BayesMLP`, the full-data variational free energy
with :class:`bbb.ELBO`, ``num_batches=1``) and a standard network (the Gaussian negative
log-likelihood; with a fixed noise this is the squared error). Both share the noise model.
By default it is fixed at 0.05: since eps also enters the sines, the conditional std of y is
about 0.06 on average over [0, 0.5], not 0.02. ``--learn-noise`` learns it instead, and
``--heteroscedastic`` learns an input-dependent noise (the network then has two outputs,
:class:`bbb.HeteroscedasticGaussian`, with the noise output's bias started at the
``--model-sigma`` value); results/regression/README.md says what the learned noise did.

Predictive bands are quantiles of the predictive distribution of y. For BBB it is the equal
mixture of the noise model around each weight sample's output, whose quantiles are exact
(:func:`bbb.uncertainty.gaussian_mixture_quantiles`), and the predictive variance is split
into its epistemic part Var_w[f(x, w)] and aleatoric part E_w[sigma(x, w)^2]
(:func:`bbb.uncertainty.regression_uncertainty`). A standard network has no weight uncertainty:
its band is only its noise model, N(f(x), sigma^2), so its epistemic part is 0 and its band
has the same width far from the data as inside it (the over-confidence of Fig. 5, right).

Writes ``regression.png`` (BBB left, standard right, same axes: training points as black
crosses, median as a red line, interquartile range as a band, the 2.5-97.5% range lighter),
``regression.csv`` (one row per grid point) and ``summary.json``. ``--log tensorboard`` writes
each network's curves into ``OUT/tb/bbb`` and ``OUT/tb/standard`` (ELBO, NLL, KL, learning rate
and the learned noise each epoch; BBB's sigma and SNR histograms every 1% of the epochs).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..devices import resolve_device
from ..distributions import inverse_softplus, make_prior
from ..elbo import ELBO, Gaussian, HeteroscedasticGaussian
from ..errors import DiskFullError, ResultsNotSaved, SettingError, UserError, check_float, check_int
from ..io import atomic_write_json, atomic_write_text
from ..nn import DEFAULT_PI, DEFAULT_SIGMA1, DEFAULT_SIGMA2, BayesLinear, BayesMLP, sampling
from ..options import PriorKind, choice
from ..plots import INSTALL_HINT
from ..runs.config import PRIOR_ONLY
from ..runs.jobs import read_json
from ..runs.loggers import TrainLogger, log_step, make_loggers, opened_loggers
from ..uncertainty import gaussian_mixture_quantiles, regression_uncertainty

__all__ = [
    "RegressionConfig",
    "true_function",
    "make_data",
    "prediction_grid",
    "in_training_range",
    "run_regression",
    "standard_net",
    "QUANTILES",
    "plot_regression",
    "CSV_COLUMNS",
    "ACTIVATIONS",
]

QUANTILES = {"q025": 0.025, "q25": 0.25, "median": 0.5, "q75": 0.75, "q975": 0.975}
_MODEL_COLUMNS = ["median", "q25", "q75", "q025", "q975", "mean", "epistemic_std", "aleatoric_std"]
CSV_COLUMNS = ["x", "true_f", "in_training_range"] + [
    f"{m}_{c}" for m in ("bbb", "standard") for c in _MODEL_COLUMNS]

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


@dataclass
class RegressionConfig:
    """Settings of :func:`run_regression`.

    ``noise_std`` generates the data; ``model_sigma`` is the likelihood's noise std (the
    initial value when ``learn_noise``). ``prior`` is ``"gaussian"`` (``prior_sigma``,
    closed-form KL) or ``"mixture"`` (the paper's scale mixture with ``pi``, ``sigma1``,
    ``sigma2``; Monte Carlo KL): a :class:`~bbb.options.PriorKind` after construction, given
    the member or its string value (``summary.json`` stores the string).
    """

    n_train: int = 200
    x_low: float = 0.0
    x_high: float = 0.5
    noise_std: float = 0.02
    grid_low: float = -0.2
    grid_high: float = 1.2
    n_grid: int = 281
    hidden: tuple[int, ...] = (100, 100)
    activation: str = "relu"
    epochs: int = 3000
    lr: float = 1e-2
    train_samples: int = 4
    prior: PriorKind = PriorKind.MIXTURE
    prior_sigma: float = 1.0
    pi: float = DEFAULT_PI
    sigma1: float = DEFAULT_SIGMA1
    sigma2: float = DEFAULT_SIGMA2
    rho_init: float = -5.0
    model_sigma: float = 0.05
    learn_noise: bool = False
    heteroscedastic: bool = False
    pred_samples: int = 1000
    seed: int = 0
    device: str = "cpu"
    threads: int = 1
    out: str | None = None
    #: replace the files of an earlier call in ``out`` (else they are a one-line error before anything trains)
    overwrite: bool = False
    quiet: bool = False
    #: experiment loggers (``--log``; names of :data:`bbb.runs.loggers.LOGGERS`): OUT/tb/bbb, OUT/tb/standard
    loggers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.prior = PriorKind(choice("prior", self.prior, PriorKind))
        self.loggers = tuple(self.loggers or ())

    def validate(self) -> None:
        for name in ("n_train", "n_grid", "epochs", "train_samples", "pred_samples", "threads"):
            check_int(name, getattr(self, name))  # (the command line names the flag)
        for name in ("noise_std", "lr", "prior_sigma", "sigma1", "sigma2", "model_sigma"):
            check_float(name, getattr(self, name), 0.0, above=True)
        for name in ("x_low", "x_high", "grid_low", "grid_high", "rho_init"):
            if not math.isfinite(getattr(self, name)):
                raise SettingError(name, "must be finite")
        if not self.x_low < self.x_high:
            raise UserError(f"the training range needs low < high, got [{self.x_low}, {self.x_high}]")
        if not self.grid_low < self.grid_high:
            raise UserError(f"the prediction grid needs low < high, got [{self.grid_low}, {self.grid_high}]")
        if not bool(in_training_range(self, prediction_grid(self)).any()):  # else every in-data number is NaN
            raise UserError(f"the prediction grid [{self.grid_low:g}, {self.grid_high:g}] has no point inside the "
                            f"training range [{self.x_low:g}, {self.x_high:g}]: give a --grid that overlaps "
                            "--x-range")
        self.activation = choice("activation", self.activation, list(ACTIVATIONS))
        self.prior = PriorKind(choice("prior", self.prior, PriorKind))
        if not (0 < self.pi <= 1):
            raise UserError(f"pi must be in (0, 1], got {self.pi}")
        defaults = RegressionConfig()
        for name, kind in PRIOR_ONLY.items():  # a parameter of the other prior: never read
            if kind is not self.prior and getattr(self, name) != getattr(defaults, name):
                raise SettingError(name, f"applies to --prior {kind.value}, not to --prior {self.prior.value}; "
                                   f"leave it out, or give --prior {kind.value}")
        if self.heteroscedastic and self.learn_noise:  # (the noise is then an output: never read)
            raise SettingError("learn_noise", "does not apply to --heteroscedastic (whose noise the network "
                               "learns as an output of each input): leave one out")
        if not self.hidden or any(int(h) != h or h < 1 for h in self.hidden):
            raise UserError(f"hidden sizes must be positive integers, got {list(self.hidden)}")
        if int(self.seed) != self.seed or self.seed < 0:
            raise UserError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.loggers and not self.out:
            raise UserError("--log writes its event files into OUT/tb: give --out")
        out = Path(self.out) if self.out else None
        if out is not None and any((out / f).is_file() for f in ("last.pt", "best.pt")):  # (--overwrite too)
            raise UserError(f"--out {out} is the directory of a bbb train run, whose summary.json (and tb/) this "
                            "would replace: give the regression a folder of its own")
        if out is not None and (out / "summary.json").is_file() and \
                "rmse_bbb_median_in_data" not in (read_json(out / "summary.json") or {}):  # (a bandit's, say)
            raise UserError(f"{out / 'summary.json'} is not a bbb regression's, and this would replace it: give "
                            "another --out")
        held = [f for f in OUTPUT_FILES if self.out and (Path(self.out) / f).is_file()]
        if held and not self.overwrite:
            raise UserError(f"{self.out} already holds {', '.join(held)} of an earlier call: give another --out, "
                            "or --overwrite to replace them")
        if self.loggers and out is not None and (out / "tb").exists() and not self.overwrite:  # (removed whole)
            raise UserError(f"{out} already holds tb/, which --log replaces with this call's event files: give "
                            "another --out, or --overwrite to replace it")
        make_loggers(self.loggers)  # an unknown name or a missing package: one line, before anything trains


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def prediction_grid(cfg: RegressionConfig, device: torch.device | str = "cpu") -> Tensor:
    """The inputs the curves are predicted at: ``n_grid`` points over [grid_low, grid_high]."""
    return torch.linspace(cfg.grid_low, cfg.grid_high, cfg.n_grid, device=device)


def in_training_range(cfg: RegressionConfig, grid: Tensor) -> Tensor:
    """Which grid points lie inside the training range [x_low, x_high] (the in-data numbers' points)."""
    return (grid >= cfg.x_low) & (grid <= cfg.x_high)


def true_function(x: Tensor) -> Tensor:
    """The noise-free curve x + 0.3 sin(2 pi x) + 0.3 sin(4 pi x)."""
    return x + 0.3 * torch.sin(2 * math.pi * x) + 0.3 * torch.sin(4 * math.pi * x)


def make_data(n: int, x_low: float = 0.0, x_high: float = 0.5, noise_std: float = 0.02,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """n points: x ~ U[x_low, x_high], y = x + 0.3 sin(2pi(x+e)) + 0.3 sin(4pi(x+e)) + e, e ~ N(0, noise_std^2)."""
    x = x_low + (x_high - x_low) * torch.rand(n, generator=generator, dtype=torch.float64)
    e = noise_std * torch.randn(n, generator=generator, dtype=torch.float64)
    y = x + 0.3 * torch.sin(2 * math.pi * (x + e)) + 0.3 * torch.sin(4 * math.pi * (x + e)) + e
    return x.float(), y.float()


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def _prior(cfg: RegressionConfig):
    return make_prior(cfg.prior, pi=cfg.pi, sigma1=cfg.sigma1, sigma2=cfg.sigma2,
                      prior_sigma=cfg.prior_sigma)


def _likelihood(cfg: RegressionConfig) -> Gaussian | HeteroscedasticGaussian:
    if cfg.heteroscedastic:
        return HeteroscedasticGaussian()
    return Gaussian(sigma=cfg.model_sigma, learn_sigma=cfg.learn_noise)


def standard_net(cfg: RegressionConfig, out: int) -> nn.Sequential:
    """The standard network of ``cfg``'s shape: Linear and activation layers, ``out`` outputs."""
    sizes = [1, *cfg.hidden]
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), ACTIVATIONS[cfg.activation]()]
    layers.append(nn.Linear(sizes[-1], out))
    return nn.Sequential(*layers)


def _noise_bias(cfg: RegressionConfig) -> float:
    """Initial bias of the noise output, so the learned noise starts near ``model_sigma``.

    From the default start (softplus(0) ~ 0.69, ten times the data's noise) the BBB network
    explains the data as noise and never leaves that optimum: a flat median, a huge band.
    """
    return float(inverse_softplus(cfg.model_sigma))


def _noise_sigma(lik: Gaussian | HeteroscedasticGaussian, output: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, noise std) of the predictive per network output (..., B, out)."""
    if isinstance(lik, HeteroscedasticGaussian):
        return lik.split(output)
    mean = output.squeeze(-1)
    return mean, lik.sigma.detach().expand_as(mean)


def _log_epoch(cfg: RegressionConfig, loggers: list[TrainLogger], epoch: int, scalars: dict[str, float],
               lik: Gaussian | HeteroscedasticGaussian, net: nn.Module | None = None) -> None:
    """One full-batch epoch's scalars (and every 1% of the epochs BBB's histograms) to ``loggers``."""
    if isinstance(lik, Gaussian):
        scalars["train/noise_sigma"] = float(lik.sigma.detach())
    due = epoch % max(1, cfg.epochs // 100) == 0 or epoch == cfg.epochs
    log_step(loggers, epoch, {**scalars, "lr": cfg.lr}, net if due else None)


def _train_bbb(cfg: RegressionConfig, x: Tensor, y: Tensor, gen: torch.Generator, dev: torch.device,
               loggers: list[TrainLogger]):
    out_dim = 2 if cfg.heteroscedastic else 1
    net = BayesMLP(1, cfg.hidden, out_dim, activation=cfg.activation, prior=_prior(cfg),
                   rho_init=cfg.rho_init, device=dev)
    if cfg.heteroscedastic:
        head = net.layers[-1]
        assert isinstance(head, BayesLinear)
        with torch.no_grad():
            head.mu("bias")[1] = _noise_bias(cfg)
    lik = _likelihood(cfg).to(dev)
    elbo = ELBO(net, lik, num_batches=1, num_samples=cfg.train_samples,
                kl="auto" if cfg.prior is PriorKind.GAUSSIAN else "mc")
    opt = torch.optim.Adam(list(net.parameters()) + list(lik.parameters()), lr=cfg.lr)
    n = x.shape[0]
    xin = x.unsqueeze(-1)
    net.train()
    for epoch in range(1, cfg.epochs + 1):
        res = elbo(xin, y, generator=gen)
        opt.zero_grad(set_to_none=True)
        (res.loss / n).backward()  # per-example scale; the KL weight is 1 (one full batch)
        opt.step()
        if loggers:
            _log_epoch(cfg, loggers, epoch, {"train/elbo": -float(res.loss.detach()) / n,
                                             "train/nll": float(res.nll.detach()) / n,
                                             "train/kl": float(res.kl.detach())}, lik, net)
    return net, lik, {"final_nll": float(res.nll.detach()) / n, "final_kl": float(res.kl.detach())}


def _train_standard(cfg: RegressionConfig, x: Tensor, y: Tensor, dev: torch.device, loggers: list[TrainLogger]):
    out_dim = 2 if cfg.heteroscedastic else 1
    net = standard_net(cfg, out_dim).to(dev)
    if cfg.heteroscedastic:
        head = net[-1]
        assert isinstance(head, nn.Linear)
        with torch.no_grad():
            head.bias[1] = _noise_bias(cfg)
    lik = _likelihood(cfg).to(dev)
    opt = torch.optim.Adam(list(net.parameters()) + list(lik.parameters()), lr=cfg.lr)
    xin = x.unsqueeze(-1)
    for epoch in range(1, cfg.epochs + 1):
        loss = -lik.log_prob(net(xin), y).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loggers:
            _log_epoch(cfg, loggers, epoch, {"train/nll": float(loss.detach())}, lik)
    return net, lik, {"final_nll": float(loss.detach())}


# --------------------------------------------------------------------------------------------
# Predictions
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def _bbb_predict(cfg: RegressionConfig, net: BayesMLP, lik: Gaussian | HeteroscedasticGaussian, grid: Tensor,
                 gen: torch.Generator) -> dict[str, Tensor]:
    net.eval()
    k = cfg.pred_samples
    from ..functional import expand_samples
    from ..nn import SampleRecorder

    with sampling(net, "sample"), SampleRecorder(gen):
        out = net(expand_samples(grid.unsqueeze(-1), k))  # (k, G, out)
    means, sig = _noise_sigma(lik, out)  # (k, G)
    parts = regression_uncertainty(means, sig)
    # the predictive of y is the k networks' equal mixture of N(mean, sigma^2): its quantiles exact,
    # as the alternatives' (regression_alternatives), not of a few noise draws per network
    qs = gaussian_mixture_quantiles(means, sig, list(QUANTILES.values()))
    res = {name: qs[i] for i, name in enumerate(QUANTILES)}
    res.update(mean=parts["mean"], epistemic_std=parts["epistemic"].sqrt(),
               aleatoric_std=parts["aleatoric"].sqrt())
    return res


@torch.no_grad()
def _standard_predict(net: nn.Module, lik: Gaussian | HeteroscedasticGaussian, grid: Tensor) -> dict[str, Tensor]:
    """Exact quantiles of N(f(x), sigma(x)^2): a plain network's only uncertainty is its noise."""
    net.eval()
    mean, sig = _noise_sigma(lik, net(grid.unsqueeze(-1)))
    normal = torch.distributions.Normal(0.0, 1.0)
    res = {name: mean + sig * float(normal.icdf(torch.tensor(q))) for name, q in QUANTILES.items()}
    res.update(mean=mean, epistemic_std=torch.zeros_like(mean), aleatoric_std=sig)
    return res


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def run_regression(config: RegressionConfig | None = None, **overrides: Any) -> dict[str, Any]:
    """Fit the BBB and the standard network; write the outputs when ``config.out`` is set.

    Returns ``summary`` (as in summary.json), ``grid``, ``x_train``, ``y_train``, ``bbb`` and
    ``standard`` (dicts of (G,) tensors: median, q25, q75, q025, q975, mean, epistemic_std,
    aleatoric_std) and ``files``.
    """
    cfg = dataclasses.replace(config or RegressionConfig(), **overrides)
    cfg.hidden = tuple(int(h) for h in cfg.hidden)
    cfg.validate()
    dev = resolve_device(cfg.device)
    t_start = time.perf_counter()
    threads_before = torch.get_num_threads()
    # these networks are tiny: one thread is fastest, and far more robust on a busy CPU
    torch.set_num_threads(cfg.threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            gen = torch.Generator(device=dev).manual_seed(cfg.seed + 1)
            data_gen = torch.Generator().manual_seed(cfg.seed)
            x, y = make_data(cfg.n_train, cfg.x_low, cfg.x_high, cfg.noise_std, data_gen)
            x, y = x.to(dev), y.to(dev)
            grid = prediction_grid(cfg, dev)

            tb = Path(cfg.out or ".") / "tb"
            if cfg.loggers:
                shutil.rmtree(tb, ignore_errors=True)  # an earlier run's curves in this folder go
            settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
            t0 = time.perf_counter()
            with opened_loggers(cfg.loggers, tb / "bbb", settings) as loggers:
                bbb_net, bbb_lik, bbb_info = _train_bbb(cfg, x, y, gen, dev, loggers)
            bbb = _bbb_predict(cfg, bbb_net, bbb_lik, grid, gen)
            t_bbb = time.perf_counter() - t0

            t0 = time.perf_counter()
            with opened_loggers(cfg.loggers, tb / "standard", settings) as loggers:
                std_net, std_lik, std_info = _train_standard(cfg, x, y, dev, loggers)
            std = _standard_predict(std_net, std_lik, grid)
            t_std = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads_before)

    grid, x, y = grid.cpu(), x.cpu(), y.cpu()
    bbb = {k: v.cpu() for k, v in bbb.items()}
    std = {k: v.cpu() for k, v in std.items()}
    truth = true_function(grid)
    inside = in_training_range(cfg, grid)
    summary = _summary(cfg, grid, truth, inside, bbb, std)
    summary.update({
        "bbb_train": bbb_info, "standard_train": std_info,
        "bbb_noise_sigma": None if cfg.heteroscedastic else float(bbb_lik.sigma.detach()),
        "standard_noise_sigma": None if cfg.heteroscedastic else float(std_lik.sigma.detach()),
        "seconds_bbb": round(t_bbb, 2), "seconds_standard": round(t_std, 2),
        "seconds": round(time.perf_counter() - t_start, 2),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()
                   if k not in ("loggers", "overwrite")},  # (how it was watched or written, not what it computed)
        "torch": torch.__version__, "python": platform.python_version(),
        "torch_threads": cfg.threads,
    })
    res = {"summary": summary, "grid": grid, "true_f": truth, "x_train": x, "y_train": y,
           "bbb": bbb, "standard": std, "files": []}
    if not cfg.quiet:  # the result first: a file that cannot be written then loses nothing of it
        s = summary
        print(f"regression: BBB median RMSE vs the noise-free curve in the data "
              f"{s['rmse_bbb_median_in_data']:.4f} (standard {s['rmse_standard_median_in_data']:.4f}); "
              f"BBB interquartile width {s['bbb_iqr_mean_in_data']:.3f} in the data, "
              f"{s['bbb_iqr_at_far_end']:.3f} at x={cfg.grid_high:g} "
              f"({s['bbb_iqr_ratio_far_to_in_data']:.1f}x); standard {s['standard_iqr_mean_in_data']:.3f} and "
              f"{s['standard_iqr_at_far_end']:.3f}; {s['seconds']:.1f} s", flush=True)
    if cfg.out:
        try:
            files = _write_outputs(Path(cfg.out), cfg, res)
        except DiskFullError:  # (its one line names the file and what to do)
            raise
        except OSError as e:
            where = Path(os.fsdecode(e.filename)) if e.filename is not None else Path(cfg.out)
            raise ResultsNotSaved(where, e.strerror or str(e), res) from None
        if not cfg.quiet:
            print(f"regression: wrote {', '.join(files)} in {cfg.out}", flush=True)
        res["files"] = files
    return res


def _summary(cfg: RegressionConfig, grid: Tensor, truth: Tensor, inside: Tensor,
             bbb: dict[str, Tensor], std: dict[str, Tensor]) -> dict[str, Any]:
    def rmse(pred: Tensor) -> float:
        return float(((pred - truth)[inside] ** 2).mean().sqrt())

    def iqr(m: dict[str, Tensor]) -> Tensor:
        return m["q75"] - m["q25"]

    far = int(torch.argmax(grid))
    b_in = float(iqr(bbb)[inside].mean())
    b_far = float(iqr(bbb)[far])
    return {
        "rmse_bbb_median_in_data": rmse(bbb["median"]),
        "rmse_standard_median_in_data": rmse(std["median"]),
        "bbb_iqr_mean_in_data": b_in,
        "bbb_iqr_at_far_end": b_far,
        "bbb_iqr_ratio_far_to_in_data": b_far / b_in if b_in > 0 else float("inf"),
        "standard_iqr_mean_in_data": float(iqr(std)[inside].mean()),
        "standard_iqr_at_far_end": float(iqr(std)[far]),
        "bbb_epistemic_std_mean_in_data": float(bbb["epistemic_std"][inside].mean()),
        "bbb_epistemic_std_at_far_end": float(bbb["epistemic_std"][far]),
        "far_end_x": float(grid[far]),
        "training_range": [cfg.x_low, cfg.x_high],
        "n_train": cfg.n_train,
        "noise_std_of_data": cfg.noise_std,
        "noise_std_reading": f"{cfg.noise_std:g} read as a standard deviation (the paper's N(0, 0.02) is ambiguous)",
    }


#: what a call writes into ``out``
OUTPUT_FILES = ("regression.csv", "summary.json", "regression.png")


def _write_outputs(out: Path, cfg: RegressionConfig, res: dict[str, Any]) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    grid, truth = res["grid"], res["true_f"]
    inside = in_training_range(cfg, grid)  # (the points of summary.json's in-data numbers)
    for i in range(grid.shape[0]):
        xv = float(grid[i])
        row = [f"{xv:.6g}", f"{float(truth[i]):.6g}", int(inside[i])]
        for m in ("bbb", "standard"):
            row += [f"{float(res[m][c][i]):.6g}" for c in _MODEL_COLUMNS]
        w.writerow(row)
    atomic_write_text(out / "regression.csv", buf.getvalue())
    atomic_write_json(out / "summary.json", res["summary"])
    files = ["regression.csv", "summary.json"]
    try:
        plot_regression(res, out / "regression.png", cfg)
        files.append("regression.png")
    except ImportError:
        import sys

        print(f"regression: matplotlib is not installed; skipped regression.png ({INSTALL_HINT})",
              file=sys.stderr)
    return files


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------


def plot_regression(res: dict[str, Any], path: str | os.PathLike[str] | None = None,
                    cfg: RegressionConfig | None = None, *, ax: Any = None) -> Any:
    """Fig. 5: BBB (left) and the standard network (right) on the same axes (``ax``: two
    matplotlib Axes). Returns the PNG's path when ``path`` is given, else the Figure. Raises
    ImportError without matplotlib."""
    from ..plots import agg_figures, canvas, finish

    agg_figures()  # ImportError without matplotlib; Agg figures without pyplot: the caller's backend stays
    cfg = cfg or RegressionConfig()
    grid = res["grid"].numpy()
    x, y = res["x_train"].numpy(), res["y_train"].numpy()
    fig, axes = canvas(ax, 2, figsize=(10, 4.2), dpi=120, sharex=True, sharey=True)
    titles = {"bbb": "Bayes by Backprop", "standard": "standard neural network"}
    for ax, name in zip(axes, ("bbb", "standard")):
        m = {k: v.numpy() for k, v in res[name].items()}
        ax.axvspan(cfg.x_low, cfg.x_high, color="0.93", lw=0, zorder=0)
        ax.fill_between(grid, m["q025"], m["q975"], color="tab:purple", alpha=0.15, lw=0,
                        label="2.5-97.5%")
        ax.fill_between(grid, m["q25"], m["q75"], color="tab:purple", alpha=0.45, lw=0,
                        label="interquartile range")
        ax.plot(grid, res["true_f"].numpy(), color="0.45", lw=1.0, ls="--", label="noise-free curve")
        ax.plot(grid, m["median"], color="red", lw=1.6, label="median")
        ax.plot(x, y, "kx", ms=4, mew=0.9, label="training data")
        ax.set_title(titles[name])
        ax.set_xlabel("x")
        ax.set_xlim(float(grid.min()), float(grid.max()))
        ax.grid(True, alpha=0.25)
    lo = float(min(y.min(), res["true_f"].min()))
    hi = float(max(y.max(), res["true_f"].max()))
    pad = 0.35 * (hi - lo)
    axes[0].set_ylim(lo - pad, hi + pad)
    axes[0].set_ylabel("y")
    axes[1].legend(loc="upper left", fontsize=8)
    return finish(fig, path, new=ax is None, dpi=120)
