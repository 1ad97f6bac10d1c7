"""A last-layer Laplace posterior of a deterministic run on its own data: :func:`fit_run_laplace`
(``bbb laplace RUN --out DIR``) and :func:`load_laplace` (what ``bbb.load_model(DIR)`` returns).

The run (``bbb train ... --method sgd``) keeps its network; its last ``nn.Linear`` layer gets a
Gaussian posterior fitted post hoc on the run's own training rows (nothing trains again, the
validation and test rows are not used): laplace-torch (:func:`bbb.laplace.fit_laplace`) computes
the curvature of the loss in that layer's weights and chooses the prior precision by the marginal
likelihood. The folder ``DIR`` then predicts as a run does, wherever a run goes (``bbb predict``,
``bbb evaluate``, ``bbb ood``, ensembles, :func:`bbb.load_model`): its k sampled outputs are the
network's features through k draws of the last layer's weights. The network's output is linear in
those weights, so these samples are exactly the linearised (GLM) predictive's.

- A classifier: the posterior covers the output layer (``hessian``: ``"kron"``, KFAC, laplace-torch's
  default; ``"full"``; ``"diag"``).
- A regression run predicts a mean and a noise sd per row (or one learned sd: ``--likelihood
  homoscedastic``). The posterior covers the mean's row of the last layer with the noise at the
  run's own values: the loss in those weights is then exactly quadratic (Bayesian linear
  regression on the features, each row weighted by its 1/sd^2), which laplace-torch fits as a
  linear model of the features scaled by 1/sd with unit noise (``"kron"`` and ``"full"``: exact, the
  layer having one output; ``"diag"`` keeps the diagonal of that precision).

``DIR`` holds ``laplace.json`` (the run, its checkpoint and a digest of the last layer, the
fitted numbers) and ``posterior.pt`` (the posterior's mean and a square root of its covariance:
lower-triangular, or the sd per weight for ``diag``). Predictions need neither laplace-torch nor
the training data: only the fit does. A run that trained further, or another checkpoint, is a
one-line error: fit again. A dense covariance is stored for at most :data:`DENSE_LIMIT` weights
(a classifier's last layer of 400 inputs and 10 classes has 4,010); above, ``kron`` keeps the
eigendecomposition of each Kronecker factor instead (a 1,200-unit layer's: 6 MB, the same
posterior), and ``full`` is refused (``diag`` or ``kron`` then).

The fit's writes and an evaluation hold the folder's lock (:func:`bbb.runs.rundir.lock_run_dir`,
as ``bbb evaluate`` a run's): a second ``bbb laplace`` into a folder being written is refused with
the holder's pid, so the folder never pairs one fit's ``posterior.pt`` with another's
``laplace.json``.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import laplace as core_laplace
from ..devices import resolve_device
from ..elbo import HeteroscedasticGaussian
from ..errors import UserError, check_float, check_int
from ..io import atomic_torch_save, atomic_write_json
from ..options import Method, choice
from ..uncertainty import predictive_probs
from . import model as runmodel
from .evaluation import draw_calibration_figure, draw_classifier_figures, predictive_scores, save_results
from .referral import split_outputs
from .rundir import RESULT_FILES, lock_run_dir, remove_results
from .trained import (
    LAPLACE_FILE,
    LAPLACE_FORMAT,
    LAPLACE_POSTERIOR,
    TrainedLaplace,
    TrainedModel,
    forward_with_features,
    is_laplace_folder,
    laplace_description,
    laplace_run_of,
    last_linear,
    layer_digest,
    load_laplace,
    load_model,
)

__all__ = ["DENSE_LIMIT", "TrainedLaplace", "evaluate_laplace", "fit_run_laplace", "is_laplace_folder",
           "laplace_run_of", "load_laplace"]

#: the most last-layer weights whose posterior covariance is stored dense (``kron``, ``full``):
#: 5,000 weights are 100 MB in float32
DENSE_LIMIT = 5000


def _covered_rows(model: TrainedModel, layer: nn.Linear, out: Tensor, feats: Tensor) -> list[int]:
    """The network's outputs that equal the last layer's own (the mean's, for a regression)."""
    rows = [0] if model.task == "regression" else list(range(out.shape[1]))
    direct = torch.nn.functional.linear(feats, layer.weight, layer.bias)
    if any(r >= direct.shape[1] for r in rows) or not torch.allclose(out[:, rows], direct[:, rows], rtol=1e-5,
                                                                      atol=1e-5):
        raise UserError("the network's output is not its last linear layer's: a last-layer Laplace cannot cover it")
    return rows


def _out_folder(out: str | Path, run_dir: Path) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a folder for the Laplace posterior")
    if out.resolve() == run_dir.resolve() or (out / "last.pt").exists() or (out / "best.pt").exists():
        raise UserError(f"--out {out} is a run directory: give the Laplace posterior a folder of its own")
    if is_laplace_folder(out) and laplace_run_of(out).resolve() != run_dir.resolve():
        raise UserError(f"{out / LAPLACE_FILE} is the Laplace posterior of another run, {laplace_run_of(out)}: give "
                        "another --out folder")
    held = [name for name in RESULT_FILES if (out / name).exists()]
    if held and not is_laplace_folder(out):  # (an ensemble's eval.json, ood.json: a refit would delete them)
        raise UserError(f"--out {out} holds {held[0]}, not a Laplace posterior's (an ensemble's?): give the Laplace "
                        "posterior a folder of its own")
    return out


def _square_root(post: core_laplace.LastLayerLaplace, hessian: str) -> Tensor:
    """A square root of the fitted posterior's covariance: the sd per weight (``diag``), else the
    lower-triangular Cholesky factor (from an eigendecomposition where the factorisation fails)."""
    la = post.la
    if hessian == "diag":
        return la.posterior_variance.detach().double().clamp_min(0).sqrt().cpu()
    if hessian == "kron":  # (laplace-torch's Kronecker factors, made dense: the layer is small)
        cov = la.posterior_precision.to_matrix(exponent=-1).detach().double().cpu()
    else:
        cov = la.posterior_covariance.detach().double().cpu()
    cov = (cov + cov.T) / 2
    factor, info = torch.linalg.cholesky_ex(cov)
    if int(info) == 0:
        return factor
    vals, vecs = torch.linalg.eigh(cov)
    # a square root that is not triangular; its product is the covariance all the same
    return vecs * vals.clamp_min(0).sqrt()


def fit_run_laplace(run_dir: str | Path, out: str | Path, *, hessian: str = "kron", which: str = "best",
                    prior: float | str = "marglik", device: str | torch.device = "cpu",
                    data_dir: str | None = None, data_file: str | None = None) -> dict[str, Any]:
    """Fit the last-layer Laplace posterior of the deterministic run ``run_dir`` (its ``which``
    checkpoint) on its training rows and write it to ``out`` (see the module's notes): returns
    the description written to ``out/laplace.json``. ``hessian``: ``"kron"``, ``"full"`` or
    ``"diag"`` (a regression's is exact with kron and full: it covers one output). ``prior``:
    the prior precision, ``"marglik"`` (chosen by the marginal likelihood) or a number."""
    hessian = choice("hessian", hessian, core_laplace.HESSIANS)
    if prior != "marglik":
        prior = check_float("--prior-precision", prior, 0.0, above=True)
    run_dir = Path(run_dir)
    if is_laplace_folder(run_dir):
        raise UserError(f"{run_dir} is a Laplace posterior already (of {laplace_run_of(run_dir)}): give a run "
                        "directory of bbb train --method sgd")
    start = time.perf_counter()
    model = load_model(run_dir, which, resolve_device(device))
    if model.config.method != Method.SGD.value:
        raise UserError(f"bbb laplace fits a posterior to a deterministic run (--method sgd); {run_dir} was trained "
                        f"with --method {model.config.method}"
                        + (", whose posterior is learned already" if model.config.method in ("bbb", "ivon") else ""))
    core_laplace.require_laplace()
    out = _out_folder(out, run_dir)
    cfg = runmodel.point_data(model.config, data_dir, data_file)
    data, _ = runmodel.load_split(cfg, model.preprocess.to_dict() if model.preprocess.kind != "image" else None)
    x, y = data["train_x"].to(model.device()), data["train_y"].to(model.device())
    name, layer = last_linear(model.network)
    outs, feats = zip(*(forward_with_features(model.network, layer, xb) for xb in x.split(4096)))
    out_all, phi = torch.cat(outs), torch.cat(feats)
    rows = _covered_rows(model, layer, out_all, phi)
    n_params = len(rows) * (phi.shape[1] + 1)
    if hessian == "full" and n_params > DENSE_LIMIT:
        raise UserError(f"the last layer has {n_params:,} weights: its full posterior covariance would take "
                        f"{n_params ** 2 * 4 / 1e6:,.0f} MB; use --hessian kron or diag (at most {DENSE_LIMIT:,} "
                        "weights take full)")
    w = layer.weight.detach()[rows]
    b = layer.bias.detach()[rows] if layer.bias is not None else torch.zeros(len(rows), device=w.device)
    if model.task == "regression":
        _, sd = HeteroscedasticGaussian().split(out_all.double())
        sd = sd.reshape(-1)
        z = torch.cat([phi.double(), torch.ones_like(phi[:, :1], dtype=torch.float64)], 1) / sd[:, None]
        head = nn.Linear(z.shape[1], 1, bias=False, dtype=torch.float64, device=w.device)
        with torch.no_grad():
            head.weight.copy_(torch.cat([w[0], b]).double()[None])
        post = core_laplace.fit_laplace(head, (z, y.double().reshape(-1) / sd), weights="all",
                                        likelihood="regression", hessian=hessian, prior=prior, sigma_noise=1.0)
        mean = head.weight.detach().reshape(-1)
    else:
        head = nn.Linear(phi.shape[1], len(rows), dtype=torch.float64, device=w.device)
        with torch.no_grad():
            head.weight.copy_(w.double())
            head.bias.copy_(b.double())
        post = core_laplace.fit_laplace(head, (phi.double(), y.long()), weights="all", likelihood="classification",
                                        hessian=hessian, prior=prior)
        mean = torch.cat([head.weight.detach().reshape(-1), head.bias.detach()])
    n_params = mean.numel()
    stored: dict[str, Any] = {"format": LAPLACE_FORMAT, "mean": mean.double().cpu(), "diag": hessian == "diag",
                              "rows": list(rows), "in_features": int(phi.shape[1])}
    if hessian == "kron" and n_params > DENSE_LIMIT:  # the factors' eigendecomposition, not the dense matrix
        stored["kron"] = [{k: v.float().cpu() for k, v in b.items()} for b in post.kron_factors()]
    else:
        stored["root"] = _square_root(post, hessian).float()
    out.mkdir(parents=True, exist_ok=True)  # (once the run's data are read and fitted: a refusal leaves no folder)
    with lock_run_dir(out):  # a second fit into this folder is refused with this one's pid
        _out_folder(out, run_dir)  # again, under the lock: another process may have written here since
        removed = remove_results(out)  # another posterior's results
        if removed:  # a warning, as bbb train's when a run trains on: said with --quiet too
            warnings.warn(f"removed {', '.join(removed)} from {out} (made from the posterior fitted there before; "
                          "run the commands that wrote them again)", UserWarning, stacklevel=2)
        # the old description goes first: a refit stopped before its own is written leaves no folder that
        # pairs this posterior with the checkpoint and numbers of the one fitted before
        (out / LAPLACE_FILE).unlink(missing_ok=True)
        atomic_torch_save(out / LAPLACE_POSTERIOR, stored)
        description = {
            "run": str(run_dir.resolve()), "run_relative": os.path.relpath(run_dir.resolve(), out.resolve()),
            "checkpoint": which, "epoch": model.epoch, "layer": name, "layer_digest": layer_digest(layer),
            "task": model.task, "hessian": hessian, "rows": list(rows), "n_params": n_params,
            "n_data": int(post.n_data), "prior_precision": post.prior_precision,
            "prior_precision_from": post.prior_precision_from, "log_marginal_likelihood": post.log_marginal_likelihood,
            "seconds": time.perf_counter() - start,
            "noise": None if model.task != "regression" else (
                "the run's own (per row)" if runmodel.noise_sd(model.network, model.preprocess) is None
                else "the run's own (one sd, learned, for every row)"),
        }
        atomic_write_json(out / LAPLACE_FILE, description)
    return description


def evaluate_laplace(folder: str | Path, samples: int = 10, which: str | None = None, seed: int = 0,
                     device: str | torch.device = "cpu", data_dir: str | None = None,
                     data_file: str | None = None) -> dict[str, Any]:
    """The test scores of the Laplace posterior in ``folder`` (its ``samples``-sample predictive)
    beside the run's own network's (``map``), written atomically to ``folder/eval.json``: a
    classifier's error, NLL, ECE, Brier and selective prediction, a regressor's RMSE,
    log-likelihood, NLL and 95% interval coverage (target units). ``which``: the checkpoint it was
    fitted to (None: the one it names). Holds the folder's lock: a fit or evaluation writing there is
    a :class:`~bbb.errors.RunDirBusy` with its pid."""
    folder = Path(folder)
    samples = check_int("--samples", samples)
    laplace_description(folder)  # (a folder that holds none: its one-line error before any lock)
    with lock_run_dir(folder):
        data = laplace_description(folder)
        model = load_laplace(folder, str(data.get("checkpoint")) if which is None else which, device)
        with torch.no_grad():
            outputs, y = split_outputs(model, "test", samples, seed, data_dir, data_file)
            if y.shape[0] == 0:
                raise UserError(f"{model.base_run} has no test set to evaluate its Laplace posterior on")
            map_outputs, _ = split_outputs(model.map_model, "test", 1, seed, data_dir, data_file)
        target = model.preprocess.y
        scores = predictive_scores(model.task, target, outputs, y, selective=model.task == "classification")
        map_scores = predictive_scores(model.task, target, map_outputs, y)
        result: dict[str, Any] = {
            "run": str(folder), "method": "laplace", "laplace_of": str(model.base_run),
            "checkpoint": data["checkpoint"], "epoch": model.epoch, "dataset": model.config.dataset,
            "task": model.task, "hessian": data["hessian"], "prior_precision": data["prior_precision"],
            "samples": samples, "n": int(y.shape[0]), **scores,
            "map": map_scores,
        }
        cfg = model.config
        data_name = Path(cfg.data_file).name if cfg.data_file else cfg.dataset
        title = f"last-layer Laplace on {data_name} test"
        if model.task == "regression":
            result["test_rmse"] = map_scores["test_rmse_mc"]  # the posterior mean's: the run's network
            if (sd := runmodel.noise_sd(model.network, model.preprocess)) is not None:
                result["noise_sd"] = sd  # a homoscedastic run's, which the posterior predicts with (as a run's)
            unsaved = draw_calibration_figure(folder, result, {"the run's network": map_scores,
                                                               f"{samples}-sample average": scores}, title)
        else:
            result["test_error"] = map_scores["test_error_mc"]  # the posterior mean's: the run's network
            panels = {"the run's network": predictive_probs(map_outputs.double()),
                      f"{samples}-sample average": predictive_probs(outputs.double())}
            unsaved = draw_classifier_figures(folder, result, panels, y, title, f"{samples}-sample average")
        save_results(folder / "eval.json", result, lambda: atomic_write_json(folder / "eval.json", result))
        if unsaved is not None:
            raise unsaved
    return result
