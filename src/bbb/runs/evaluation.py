"""Evaluation of a model and of a run directory: the error of the mean network
(:func:`mean_network_error`), the k-sample predictive metrics (:func:`classifier_metrics`),
``bbb evaluate`` (``eval.json``, ``reliability.png``) and ``bbb prune`` (``pruning.csv``, the
paper's Table 2).

Both run-directory commands hold the run directory's lock (:func:`bbb.runs.rundir.lock_run_dir`)
and, where their file cannot be written, raise :class:`~bbb.errors.ResultsNotSaved` carrying what
they computed. :class:`~bbb.errors.OutOfMemory` is the one-line refusal of a size that cannot fit
(:func:`check_memory`, a lower bound checked before allocating).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import uncertainty as U
from ..data.files import Preprocess
from ..data.tabular import Standardizer
from ..devices import device_memory, resolve_device
from ..elbo import HeteroscedasticGaussian
from ..errors import DiskFullError, OutOfMemory, ResultsNotSaved, UserError, check_int
from ..io import atomic_write_json, atomic_write_text, csv_text
from ..nn import shared_samples
from ..nn.model import modes_kept
from ..options import Method, choice, is_bayesian
from ..plots import plot_interval_calibration, plot_reliability, plot_risk_coverage
from ..prune import prune, unprune
from . import model as runmodel
from .checkpoint import PRUNING_COLUMNS, committed_checkpoint, model_from_checkpoint, run_dir_of
from .config import TrainConfig
from .model import infer_method, noise_sd
from .rundir import lock_run_dir

__all__ = ["EVAL_CHUNK", "SELECTIVE_COVERAGE", "check_memory", "classifier_metrics", "device_memory",
           "draw_calibration_figure", "draw_classifier_figures", "error_count", "evaluate_run", "mc_dropout",
           "mc_outputs", "mean_logits", "mean_network_error", "predictive_scores", "prune_run", "regressor_metrics",
           "run_data", "save_results", "selective_prediction", "squared_error_sum"]

EVAL_CHUNK = 2048
#: the coverage at which eval.json reports the error among the kept predictions (``risk_at_90``)
SELECTIVE_COVERAGE = 0.9


def check_memory(need: int, device: torch.device, what: str, reduce: str) -> None:
    """Raise :class:`OutOfMemory` when ``need`` bytes (a lower bound of what ``what`` allocates)
    exceed the memory of ``device`` (:func:`device_memory`); ``reduce`` says what to make smaller."""
    have = device_memory(device)
    if have is not None and need > have:
        raise OutOfMemory(f"out of memory: {what} needs at least {need / 2**30:,.1f} GiB, more than the "
                          f"{have / 2**30:,.1f} GiB of {device.type}; use {reduce}")


def _check_eval_memory(model: nn.Module, x: Tensor, method: str, samples: int, chunk: int) -> None:
    """One chunk of ``samples`` networks holds at least one (samples, chunk, width) activation."""
    if _one_network(model, method):
        return
    width = max([int(x.shape[-1])] + [max(p.shape) for p in model.parameters() if p.dim() == 2])
    check_memory(4 * samples * min(chunk, int(x.shape[0])) * width, x.device,
                 f"evaluating {samples} samples of the network", "fewer --samples (--eval-samples when training)")


@contextlib.contextmanager
def mc_dropout(model: nn.Module) -> Iterator[None]:
    """Eval mode everywhere except the dropout layers (Monte Carlo dropout)."""
    with modes_kept(model):
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.train()
        yield


def _one_network(model: nn.Module, method: str) -> bool:
    """Whether ``method``'s samples of ``model`` are one network repeated: sgd, or a dropout run
    without a dropout layer of rate > 0 (``--dropout-input 0 --dropout-hidden 0`` builds none),
    whose k "samples" were k copies of the deterministic network."""
    return method == Method.SGD.value or (method == Method.DROPOUT.value and not any(
        isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()))


@contextlib.contextmanager
def _seeded(seed: int | None, dev: torch.device) -> Iterator[None]:
    """The block's draws from torch's generator seeded with ``seed`` (the caller's generator state
    restored after it); None: the generator as it is."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


@torch.no_grad()
def mean_logits(model: nn.Module, x: Tensor, chunk: int = EVAL_CHUNK) -> Tensor:
    with modes_kept(model):
        return torch.cat([model(xc) for xc in torch.split(x, chunk)]) if x.shape[0] else x.new_zeros(0, 0)


@torch.no_grad()
def error_count(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """The misclassified examples with the posterior mean / deterministic network, as an int64
    tensor on the device, unread (no sync: the training loop reads it with the epoch's sums)."""
    if x.shape[0] == 0:
        return torch.zeros((), dtype=torch.int64, device=x.device)
    return (mean_logits(model, x).argmax(-1) != y).sum()


@torch.no_grad()
def squared_error_sum(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """A regression network's summed squared error of its mean output (output 0) on ``(x, y)``
    with the posterior mean / deterministic network, a device tensor, unread (as :func:`error_count`)."""
    if x.shape[0] == 0:
        return torch.zeros((), dtype=torch.float64, device=x.device)
    return ((mean_logits(model, x)[:, 0].double() - y.double()) ** 2).sum()


@torch.no_grad()
def mc_outputs(model: nn.Module, x: Tensor, method: str, samples: int, chunk: int = EVAL_CHUNK) -> Tensor:
    """(k, N, C) network outputs: bbb and ivon ``samples`` weight samples (:func:`bbb.uncertainty.predict`,
    the same k networks for every chunk), dropout MC dropout, sgd (or dropout without a dropout
    layer) the one network (k = 1). Draws from torch's global RNG (fork it for reproducible draws,
    as :func:`classifier_metrics` does)."""
    method = choice("method", method, Method)
    if _one_network(model, method):
        return mean_logits(model, x, chunk).unsqueeze(0)
    _check_eval_memory(model, x, method, samples, chunk)
    if is_bayesian(method):
        with shared_samples():
            return torch.cat([U.predict(model, xc, samples) for xc in torch.split(x, chunk)], 1)
    with mc_dropout(model):
        return torch.cat([model(xc.unsqueeze(0).expand(samples, *xc.shape)) for xc in torch.split(x, chunk)], 1)


@torch.no_grad()
def regressor_metrics(model: nn.Module, x: Tensor, y: Tensor, method: str | None = None, samples: int = 10,
                      target: Standardizer | None = None, seed: int | None = 0) -> dict[str, Any]:
    """Regression metrics of a run's network (outputs (mean, noise) of a Gaussian,
    :class:`bbb.HeteroscedasticGaussian`) on ``(x, y)``, ``y`` standardised by ``target`` (None:
    in its own units): ``rmse`` of the mean network's mean, and of the ``samples``-sample
    predictive (``rmse_mc``), its ``log_likelihood`` and interval coverage
    (:func:`bbb.uncertainty.regression_metrics`, the mixture of the k Gaussians, in the target's
    units), and per input the predictive ``mean`` and ``sd`` (tensors, target units)."""
    method = infer_method(model) if method is None else choice("method", method, Method)
    if x.shape[0] == 0:
        raise UserError("cannot evaluate on an empty set")
    samples = check_int("samples", samples)
    with _seeded(seed, x.device):
        out = mc_outputs(model, x, method, samples).double()
    lik = HeteroscedasticGaussian()
    means, sigmas = lik.split(out)
    shift = 0.0 if target is None else float(target.mean)
    scale = 1.0 if target is None else float(target.std)
    y = y.to(means.device).double()
    res: dict[str, Any] = dict(U.regression_metrics(means, sigmas, y, shift=shift, scale=scale))
    res.update(_calibration(y, means, sigmas))
    res["rmse_mc"] = res.pop("rmse")
    res["rmse"] = mean_network_rmse(model, x, y, target)
    unc = U.regression_uncertainty(means, sigmas)
    res["mean"], res["sd"] = unc["mean"] * scale + shift, unc["std"] * scale
    res["samples"], res["n"] = int(out.shape[0]), int(x.shape[0])
    return res


def _calibration(y: Tensor, means: Tensor, sigmas: Tensor) -> dict[str, Any]:
    """eval.json's ``interval_calibration`` (levels, coverage: :func:`bbb.uncertainty.interval_calibration`)
    and ``calibration_error`` (its mean |coverage - level|) of the mixture of k Gaussians."""
    cal = U.interval_calibration(y, means, sigmas)
    return {"interval_calibration": {"levels": cal["levels"], "coverage": cal["coverage"]},
            "calibration_error": float(cal["error"])}


@torch.no_grad()
def mean_network_error(model: nn.Module, x: Tensor, y: Tensor) -> float | None:
    """Error rate of the posterior mean / deterministic network on ``(x, y)`` (one sync); None if
    empty. Not :func:`bbb.uncertainty.error_rate`, which scores given probabilities.

    Example: ``mean_network_error(model, data["test_x"], data["test_y"])``.
    """
    if x.shape[0] == 0:
        return None
    return float((mean_logits(model, x).argmax(-1) != y).double().mean())


def mean_network_rmse(model: nn.Module, x: Tensor, y: Tensor, target: Standardizer | None = None) -> float | None:
    """RMSE of the posterior mean network's predicted mean on ``(x, y)``, in the target's units
    (``y`` standardised by ``target``; None: in its own); None if empty (:func:`regressor_metrics`'s
    ``rmse``)."""
    if x.shape[0] == 0:
        return None
    scale = 1.0 if target is None else float(target.std)
    mean = mean_logits(model, x).double()[:, 0]
    return float(torch.sqrt(((mean - y.double()) ** 2).mean())) * scale


@torch.no_grad()
def classifier_metrics(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    method: str | None = None,
    samples: int = 10,
    chunk: int = EVAL_CHUNK,
    seed: int | None = 0,
    return_probs: bool = False,
) -> dict[str, Any]:
    """Classification metrics of ``model`` on ``(x, y)``.

    Returns ``error`` with the posterior mean weights (bbb) or the deterministic network (sgd;
    dropout in eval mode), ``error_mc`` of the ``samples``-sample predictive average (bbb: weight
    samples via :func:`bbb.uncertainty.predict`; dropout: MC dropout; sgd, and dropout without a
    dropout layer of rate > 0: one network, ``samples`` 1, equal to ``error``),
    and ``nll``, ``ece``, ``brier`` of that predictive distribution (``nll_mean``, ``ece_mean``,
    ``brier_mean`` for the mean network, so the value of averaging is visible). With
    ``return_probs`` the (N, C) probabilities come back too, as ``probs`` and ``mean_probs``,
    and ``mi``, the (N,) mutual information of the samples (None for one network: sgd, dropout
    without a dropout layer, or ``samples`` 1, where it is 0 for every input and ranks nothing).
    Examples are processed in chunks of ``chunk``. With ``seed`` set, the Monte Carlo
    draws come from a forked RNG, so the result is reproducible and the caller's RNG untouched.
    The library's :func:`bbb.uncertainty.evaluate` is the method-agnostic Monte Carlo predictive;
    this is the run layer's, for the three training methods of a run.

    Example: ``classifier_metrics(model, x, y, "bbb", samples=10)["error_mc"]``.
    """
    method = infer_method(model) if method is None else choice("method", method, Method)
    if x.shape[0] == 0:
        raise UserError("cannot evaluate on an empty set")
    samples = check_int("samples", samples)
    one = _one_network(model, method)  # k = 1, as sgd's, for a dropout run without dropout
    _check_eval_memory(model, x, method, samples, chunk)
    y = y.to(x.device)
    with _seeded(seed, x.device):
        logits_mean = mean_logits(model, x, chunk).float()
        mean_probs = torch.softmax(logits_mean, -1)
        # the NLLs from the logits (log-sum-exp): probabilities underflow for a confident error
        ll_mean = U.predictive_log_likelihood(logits_mean[None], y)
        mi: list[Tensor] = []  # the mutual information of each input (return_probs; bbb, dropout)
        lls: list[Tensor] = []
        if is_bayesian(method):
            parts = []
            with shared_samples():  # the same k networks score every chunk
                for xc, yc in zip(torch.split(x, chunk), torch.split(y, chunk)):
                    logits = U.predict(model, xc, samples).float()
                    parts.append(U.predictive_probs(logits))
                    lls.append(U.predictive_log_likelihood(logits, yc))
                    if return_probs:
                        mi.append(U.mutual_information(logits))
            probs = torch.cat(parts)
        elif not one:  # MC dropout
            parts = []
            with mc_dropout(model):
                for xc, yc in zip(torch.split(x, chunk), torch.split(y, chunk)):
                    logits = model(xc.unsqueeze(0).expand(samples, *xc.shape)).float()
                    parts.append(torch.softmax(logits, -1).mean(0))
                    lls.append(U.predictive_log_likelihood(logits, yc))
                    if return_probs:
                        mi.append(U.mutual_information(logits))
            probs = torch.cat(parts)
        else:
            probs = mean_probs
    y = y.to(probs.device)
    ll = torch.cat(lls) if lls else ll_mean
    res: dict[str, Any] = {
        "error": U.error_rate(mean_probs, y),
        "error_mc": U.error_rate(probs, y),
        "nll": float(-ll.mean()) + 0.0,
        "ece": U.expected_calibration_error(probs, y),
        "brier": U.brier_score(probs, y),
        "nll_mean": float(-ll_mean.mean()) + 0.0,
        "ece_mean": U.expected_calibration_error(mean_probs, y),
        "brier_mean": U.brier_score(mean_probs, y),
        "samples": 1 if one else int(samples),
        "n": int(x.shape[0]),
    }
    if return_probs:
        res["probs"], res["mean_probs"] = probs, mean_probs
        res["mi"] = torch.cat(mi) if mi and samples > 1 else None  # (k = 1: no epistemic part to rank by)
    return res


def selective_prediction(probs: Tensor, y: Tensor, mi: Tensor | None, points: int = 100) -> dict[str, Any]:
    """Selective prediction with the predictive ``probs`` (N, C): the risk-coverage curve of its
    errors as the most uncertain inputs are handed over, ranked by the predictive entropy and
    (``mi`` given: the samples' mutual information, (N,)) by MI (:mod:`bbb.uncertainty.selective`).

    Returns ``error`` (all kept), ``oracle_aurc`` (the errors handed over first: the least AURC
    any ranking reaches), ``coverage`` (``points`` coverages up to 1) and, per uncertainty,
    ``aurc``, ``risk_at_90`` (the error among the :data:`SELECTIVE_COVERAGE` most certain) and
    ``risk`` (the curve at ``coverage``). Lists of plain floats, for eval.json.
    """
    errors = (probs.argmax(-1) != y.to(probs.device)).double().cpu()
    n = errors.numel()
    idx = sorted({min(n, max(1, math.ceil(j * n / points))) for j in range(1, points + 1)})
    scores = {"entropy": U.entropy(probs.double())} if mi is None else \
        {"entropy": U.entropy(probs.double()), "mi": mi}
    out: dict[str, Any] = {"error": float(errors.mean()), "oracle_aurc": U.aurc(errors, errors),
                           "coverage": [m / n for m in idx]}
    for name, u in scores.items():
        _, risk = U.risk_coverage(u, errors)
        out[name] = {"aurc": float(risk.mean()),
                     "risk_at_90": U.risk_at_coverage(u, errors, SELECTIVE_COVERAGE),
                     "risk": [float(risk[m - 1]) for m in idx]}
    return out


def run_data(cfg: TrainConfig, data_dir: str | None, data: dict[str, Tensor] | None,
             stored: dict[str, Any] | None = None, data_file: str | None = None) -> dict[str, Tensor]:
    """``data``, else the split of ``cfg`` (``data_dir`` instead of its own folder, ``data_file``
    instead of its own file: :func:`bbb.runs.model.point_data`); ``stored``: the run's recorded
    preprocessing (a data file must have its MD5: :func:`bbb.runs.model.load_split`)."""
    if data is not None:
        return data
    return runmodel.load_split(runmodel.point_data(cfg, data_dir, data_file), stored)[0]


def save_results(path: Path, result: Any, write: Any) -> None:
    """``write()`` the file ``path`` of ``result``; where that fails (an unwritable directory, a
    full disk), :class:`ResultsNotSaved` with the result."""
    try:
        write()
    except DiskFullError:
        raise ResultsNotSaved(path, "no space left on the device", result) from None
    except OSError as e:
        raise ResultsNotSaved(path, e.strerror or type(e).__name__, result) from None


def _load(d: Path, which: str, device: str) -> tuple[nn.Module, TrainConfig, int, torch.device, dict[str, Any]]:
    """The committed ``which`` checkpoint of ``d``: (model in eval mode, config, epoch, device,
    the checkpoint's ``model_info``)."""
    dev = resolve_device(device)
    path, ckpt = committed_checkpoint(d, which)
    model, cfg = model_from_checkpoint(ckpt, path)
    return model.to(dev).eval(), cfg, int(ckpt["epoch"]), dev, dict(ckpt["model_info"])


def evaluate_run(
    run_dir: str | Path,
    samples: int = 10,
    which: str = "best",
    data_dir: str | None = None,
    device: str = "auto",
    data: dict[str, Tensor] | None = None,
    reliability: bool = True,
    lock_wait: float | None = 0.0,
    data_file: str | None = None,
) -> dict[str, Any]:
    """Evaluate a run's checkpoint on its test set and write ``run_dir/eval.json`` (and, with
    ``reliability`` and matplotlib installed, the figures ``run_dir/reliability.png``: one
    reliability diagram for the mean/deterministic network and one for the k-sample predictive
    average, and ``run_dir/risk_coverage.png``: the risk-coverage curves of ``selective``).

    ``selective`` in the result: selective prediction with the k-sample predictive
    (:func:`selective_prediction`): its AURC and its error at 90% coverage when the inputs of
    the highest predictive entropy, or mutual information (not for sgd), are handed over.

    ``data_dir``: the folder of an MNIST-like run's data; ``data_file``: the moved file of a run on
    your own data (its MD5 must be the run's); each refused for the other kind of run.

    Holds the run directory's lock (``lock_wait``: as :func:`bbb.runs.train`); another process
    writing there is a :class:`~bbb.errors.RunDirBusy`. Where the files cannot be written,
    :class:`ResultsNotSaved` carries the result.
    """
    d = run_dir_of(run_dir)
    samples = check_int("--samples", samples)
    with lock_run_dir(d, lock_wait):
        model, cfg, epoch, dev, info = _load(d, which, device)
        data = run_data(cfg, data_dir, data, info.get("preprocess"), data_file)
        x, y = data["test_x"].to(dev), data["test_y"].to(dev)
        data_name = Path(cfg.data_file).name if cfg.data_file else cfg.dataset  # (never a local folder)
        if info.get("task") == "regression":
            reg = _evaluate_regression(d, which, epoch, cfg, info, model, x, y, samples)
            unsaved = draw_calibration_figure(d, reg, {f"{reg['samples']}-sample average": reg},
                                              f"{cfg.method} on {data_name} test") if reliability else None
            save_results(d / "eval.json", reg, lambda: atomic_write_json(d / "eval.json", reg))
            if unsaved is not None:
                raise unsaved
            return reg
        res = classifier_metrics(model, x, y, cfg.method, samples=samples, return_probs=True)
        result = {"run": str(d), "checkpoint": which, "epoch": epoch, "method": cfg.method,
                  "dataset": cfg.dataset, "test_error": res["error"], "test_error_mc": res["error_mc"],
                  "samples": res["samples"], "nll": res["nll"], "ece": res["ece"], "brier": res["brier"],
                  "nll_mean": res["nll_mean"], "ece_mean": res["ece_mean"], "brier_mean": res["brier_mean"],
                  "ece_bins": 15, "n": res["n"],
                  "selective": selective_prediction(res["probs"], y, res["mi"])}

        panels = {"mean weights" if is_bayesian(cfg.method) else "deterministic": res["mean_probs"]}
        if not _one_network(model, cfg.method):  # (one MC dropout sample, k = 1, is not the network either)
            panels[f"{res['samples']}-sample average"] = res["probs"]
        unsaved = None
        if reliability:
            unsaved = draw_classifier_figures(d, result, panels, y, f"{cfg.method} on {data_name} test",
                                              f"{res['samples']}-sample average")
        save_results(d / "eval.json", result, lambda: atomic_write_json(d / "eval.json", result))
        if unsaved is not None:
            raise unsaved
    return result


def draw_classifier_figures(d: Path, result: dict[str, Any], panels: dict[str, Tensor], y: Tensor, title: str,
                            predictive: str) -> ResultsNotSaved | None:
    """A classifier's ``d/reliability.png`` (one reliability diagram per entry of ``panels``: a
    name and its class probabilities (N, C) against the labels ``y``) and ``d/risk_coverage.png``
    (``result["selective"]``'s curves, the predictive named ``predictive``), each drawn listed in
    ``result["plots"]`` (none without matplotlib). The first that cannot be written is returned,
    not raised: the caller writes ``eval.json``, the results, first."""
    y = y.to(next(iter(panels.values())).device)

    def reliability() -> None:
        bins = {name: U.reliability_bins(probs, y) for name, probs in panels.items()}
        if plot_reliability(bins, d / "reliability.png", title=title) is not None:
            result.setdefault("plots", []).append("reliability.png")

    def risk() -> None:
        sel = result["selective"]
        curves = {k: (sel["coverage"], sel[k]["risk"]) for k in ("entropy", "mi") if k in sel}
        if plot_risk_coverage(curves, d / "risk_coverage.png", error=sel["error"],
                              title=f"{title}, {predictive}") is not None:
            result.setdefault("plots", []).append("risk_coverage.png")

    unsaved = None
    for name, draw in (("reliability.png", reliability), ("risk_coverage.png", risk)):
        try:
            save_results(d / name, result, draw)
        except ResultsNotSaved as e:
            unsaved = unsaved or e  # the plot, while eval.json, the results, may still be written
    return unsaved


def draw_calibration_figure(d: Path, result: dict[str, Any], curves: dict[str, dict[str, Any]],
                            title: str) -> ResultsNotSaved | None:
    """A regression's ``d/calibration.png``: the calibration curve (``interval_calibration``) of
    each scores' dict in ``curves`` by its name, listed in ``result["plots"]`` (not drawn without
    matplotlib); a file that cannot be written is returned, not raised, as by
    :func:`draw_classifier_figures`."""
    def draw() -> None:
        lines = {name: (c["interval_calibration"]["levels"], c["interval_calibration"]["coverage"])
                 for name, c in curves.items()}
        if plot_interval_calibration(lines, d / "calibration.png", title=title) is not None:
            result.setdefault("plots", []).append("calibration.png")

    try:
        save_results(d / "calibration.png", result, draw)
    except ResultsNotSaved as e:
        return e
    return None


def predictive_scores(task: str, target: Any, outputs: Tensor, y: Tensor, selective: bool = False
                      ) -> dict[str, Any]:
    """The test scores of k sampled outputs (k, N, C) of a predictive (an ensemble's, a Laplace
    posterior's) against the encoded targets ``y``: a classifier's error, NLL, ECE (15 bins) and
    Brier of the mean predictive (and with ``selective`` its selective prediction by entropy and
    mutual information, where k > 1); a regressor's RMSE, log-likelihood, NLL and 95% interval coverage in the
    target's units (``target``: the run's target standardisation, None for none)."""
    if task == "regression":
        means, sigmas = HeteroscedasticGaussian().split(outputs.double())
        shift, scale = (0.0, 1.0) if target is None else (float(target.mean), float(target.std))
        y = y.to(means.device).double()
        res = U.regression_metrics(means, sigmas, y, shift=shift, scale=scale)
        return {"test_rmse_mc": float(res["rmse"]), "log_likelihood": float(res["log_likelihood"]),
                "nll": float(res["nll"]), "coverage_95": float(res["coverage_95"]), **_calibration(y, means, sigmas)}
    probs = U.predictive_probs(outputs.double()).float()
    y = y.to(probs.device)
    nll = float(-U.predictive_log_likelihood(outputs, y).mean()) + 0.0  # (from the logits: no floor)
    scores: dict[str, Any] = {"test_error_mc": U.error_rate(probs, y), "nll": nll,
                              "ece": U.expected_calibration_error(probs, y), "brier": U.brier_score(probs, y)}
    if selective:  # one sample (k = 1) has no mutual information to rank by
        mi = U.mutual_information(outputs.double()) if outputs.shape[0] > 1 else None
        scores["selective"] = selective_prediction(probs, y, mi)
    return scores


def _evaluate_regression(d: Path, which: str, epoch: int, cfg: TrainConfig, info: dict[str, Any], model: nn.Module,
                         x: Tensor, y: Tensor, samples: int) -> dict[str, Any]:
    """eval.json of a regression run: RMSE (mean network and k-sample predictive), log-likelihood
    and interval coverage in the target's units, and selective prediction by the predictive sd
    (the squared error kept as the most uncertain inputs are handed over: AURC and the RMSE of
    the 90% most certain)."""
    pre = Preprocess.from_dict(info["preprocess"]) if info.get("preprocess") else None
    res = regressor_metrics(model, x, y, cfg.method, samples=samples, target=None if pre is None else pre.y)
    y_units = y.double().cpu() if pre is None or pre.y is None else pre.y.inverse(y.double().cpu())
    sq = (res["mean"].cpu() - y_units) ** 2
    return {"run": str(d), "checkpoint": which, "epoch": epoch, "method": cfg.method, "dataset": cfg.dataset,
            "task": "regression", "test_rmse": res["rmse"], "test_rmse_mc": res["rmse_mc"],
            "log_likelihood": res["log_likelihood"], "nll": res["nll"], "coverage_50": res["coverage_50"],
            "coverage_90": res["coverage_90"], "coverage_95": res["coverage_95"], "mean_sd": res["mean_sd"],
            "interval_calibration": res["interval_calibration"], "calibration_error": res["calibration_error"],
            "aurc_sd": U.aurc(res["sd"], sq), "rmse_at_90_coverage": U.risk_at_coverage(res["sd"], sq, 0.9) ** 0.5,
            "samples": res["samples"], "n": res["n"],
            **({"noise_sd": sd} if (sd := noise_sd(model, pre)) is not None else {})}


def prune_run(
    run_dir: str | Path,
    fractions: Sequence[float] = (0.0, 0.5, 0.75, 0.95, 0.98),
    which: str = "last",
    data_dir: str | None = None,
    device: str = "auto",
    data: dict[str, Tensor] | None = None,
    lock_wait: float | None = 0.0,
    data_file: str | None = None,
) -> list[dict[str, Any]]:
    """The paper's Table 2 for a BBB run (or an ivon run: the same posterior): prune by
    |mu|/sigma and test with the mean weights: a classifier's test error, a regression's test
    RMSE of the mean network's mean in the target's units (``test_rmse``; ``test_error`` empty).

    Writes ``run_dir/pruning.csv`` (columns :data:`PRUNING_COLUMNS`, ``checkpoint`` the pruned
    ``which``) and returns its rows. The lock, an unwritable directory, ``data_dir`` and
    ``data_file`` (a moved file) as in :func:`evaluate_run`.
    """
    d = run_dir_of(run_dir, "bbb prune")
    for f in fractions:
        if not (0.0 <= float(f) <= 1.0):
            raise UserError(f"fractions must be in [0, 1], got {f}")
    with lock_run_dir(d, lock_wait):
        model, cfg, _, dev, info = _load(d, which, device)
        if not is_bayesian(cfg.method):
            raise UserError(f"pruning by signal-to-noise needs a bbb run (or an ivon run); {d} was trained with "
                            f"--method {cfg.method}")
        regression = info.get("task") == "regression"
        data = run_data(cfg, data_dir, data, info.get("preprocess"), data_file)
        x, y = data["test_x"].to(dev), data["test_y"].to(dev)
        pre = Preprocess.from_dict(info["preprocess"]) if regression and info.get("preprocess") else None
        rows = []
        for f in fractions:
            r = prune(model, float(f))
            score = ({"test_error": None, "test_rmse": mean_network_rmse(model, x, y, None if pre is None else pre.y)}
                     if regression else {"test_error": mean_network_error(model, x, y), "test_rmse": None})
            rows.append({"fraction_removed": float(f), "weights_left": r.kept, "weights_total": r.total,
                         "snr_threshold": r.threshold, **score, "checkpoint": which})
        unprune(model)
        path = d / "pruning.csv"
        save_results(path, rows, lambda: atomic_write_text(path, csv_text(PRUNING_COLUMNS, rows)))
    return rows
