"""Last-layer Laplace (MacKay 1992; Daxberger et al., "Laplace Redux", NeurIPS 2021) of a trained
deterministic network, through laplace-torch (MIT): ``pip install '.[laplace]'`` in a clone of bbb.

Post hoc: the network trains as usual (its MAP weights), then one pass over the training data
gives the curvature of the loss in the last ``nn.Linear`` layer's weights (a Kronecker-factored
GGN by default), the prior precision (and, for regression, the observation noise) is chosen by
maximising the Laplace approximation to the marginal likelihood, and the predictive is the
linearised (GLM) one: for regression a Gaussian per output, for classification the probit
approximation of the softmax. Nothing is retrained and the network is not changed (laplace-torch
works on a copy of it; with ``weights="all"`` on the network itself, so the predictive follows
later changes of its weights; it predicts in eval mode, and the network's mode is left as it was). ::

    from bbb.laplace import fit_last_layer_laplace

    post = fit_last_layer_laplace(net, (x_train, y_train), likelihood="regression")
    mean, var = post.predict(x_test)          # var: the network's variance plus sigma_noise^2
    post.prior_precision, post.sigma_noise    # both chosen by the marginal likelihood

:func:`fit_laplace` with ``weights="all"`` covers every parameter that requires a gradient
instead (a peft LoRA model's adapters: Laplace-LoRA). Works with a ``DataLoader`` of ``(x, y)``
batches too. The network's output must come from an
``nn.Linear`` (logits for classification, not probabilities), and it must be deterministic: a
Bayesian bbb network has its posterior already (:class:`bbb.errors.UserError` otherwise).
"""

from __future__ import annotations

import importlib
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from .errors import MissingExtra, UserError, check_float, check_int
from .nn import BayesModule
from .nn.model import modes_kept
from .options import choice

__all__ = ["LIKELIHOODS", "HESSIANS", "WEIGHTS", "INSTALL", "LastLayerLaplace", "fit_laplace",
           "fit_last_layer_laplace", "laplace_available", "log_marginal_likelihood", "require_laplace"]

#: what a network's output is: a regression's mean (Gaussian noise), or a classifier's logits
LIKELIHOODS = ("regression", "classification")
#: the last layer's Hessian: Kronecker-factored (KFAC), diagonal, or full
HESSIANS = ("kron", "diag", "full")
#: which weights the posterior covers: the last ``nn.Linear`` layer's, or every parameter that
#: requires a gradient (a LoRA model's adapters: Laplace-LoRA, Yang et al. 2024)
WEIGHTS = ("last_layer", "all")
#: how to install what this module needs
INSTALL = "pip install 'bayes-by-backprop[laplace]' (or '.[laplace]' in a clone of bbb)"




def laplace_available() -> bool:
    """Whether laplace-torch imports here."""
    try:
        require_laplace()
    except UserError:
        return False
    return True


def require_laplace() -> Any:
    """laplace-torch's ``Laplace``; where it does not import, a one-line error that says how to
    install it (:class:`bbb.errors.MissingExtra`) or which torchvision stops it."""
    try:
        with warnings.catch_warnings():  # its requirements' own deprecations (torch.jit.script), not the caller's
            warnings.simplefilter("ignore", DeprecationWarning)
            laplace_torch = importlib.import_module("laplace")  # the optional extra (mypy: untyped either way)
    except ImportError:
        raise MissingExtra(f"last-layer Laplace needs laplace-torch: {INSTALL}", "laplace") from None
    except RuntimeError as e:  # a torchvision built for another torch (torchmetrics imports it)
        if "torchvision" not in str(e):
            raise
        raise UserError(f"laplace-torch could not be imported: the installed torchvision does not match torch "
                        f"{torch.__version__}; install the torchvision built for it, or `pip uninstall "
                        f"torchvision` (the last-layer Laplace does not use it)") from None
    return laplace_torch.Laplace


@dataclass
class LastLayerLaplace:
    """A fitted last-layer Laplace approximation (:func:`fit_last_layer_laplace`).

    ``prior_precision``: the Gaussian prior's precision on the last layer's weights;
    ``sigma_noise``: the observation noise sd of a regression (None for classification), in the
    target's units; ``*_from``: ``"marglik"`` (chosen by the marginal likelihood) or ``"given"``;
    ``log_marginal_likelihood`` at those values; ``la``: laplace-torch's object (its own API);
    ``weights``: ``"last_layer"`` or ``"all"`` (every parameter that requires a gradient)."""

    likelihood: str
    hessian: str
    prior_precision: float
    prior_precision_from: str
    sigma_noise: float | None
    sigma_noise_from: str | None
    log_marginal_likelihood: float
    n_data: int
    n_params: int
    la: Any = field(repr=False)
    weights: str = "last_layer"

    @torch.no_grad()
    def predict(self, x: Tensor, *, noise: bool = True, batch_size: int = 4096) -> Any:
        """The GLM predictive at inputs ``x``.

        Regression: ``(mean, variance)``, each (n, outputs): the MAP network's output and the
        variance of the linearised network's output under the posterior, plus ``sigma_noise ** 2``
        unless ``noise=False`` (the variance of the function alone). Classification: the class
        probabilities (n, classes), the probit approximation."""
        if not isinstance(x, Tensor):
            raise UserError(f"predict takes a tensor of inputs, got {type(x).__name__}")
        batch_size = check_int("batch_size", batch_size)
        param = next(self.la.model.parameters())
        x = x.to(device=param.device, dtype=param.dtype if x.is_floating_point() else x.dtype)
        model = self.la.model  # weights="all": the caller's network itself, in whatever mode it is now
        with modes_kept(model):  # the MAP network (no dropout), as fitted
            return self._predict(x, noise, batch_size)

    def _predict(self, x: Tensor, noise: bool, batch_size: int) -> Any:
        closed_form = self.weights == "last_layer" and self.hessian == "kron"
        if self.likelihood == "classification" and not closed_form:
            return torch.cat([self.la(xb, pred_type="glm", link_approx="probit") for xb in x.split(batch_size)])
        means, variances = [], []
        factors = self.kron_factors() if closed_form else []  # (once, not per batch)
        for xb in x.split(batch_size):
            if closed_form:
                f_mu, f_var = self._kron_glm(xb, factors)
            else:
                f_mu, f_cov = self.la(xb, pred_type="glm")
                f_var = torch.diagonal(f_cov, dim1=-2, dim2=-1)
            means.append(f_mu)
            variances.append(f_var)
        f_mu, var = torch.cat(means), torch.cat(variances)
        if self.likelihood == "classification":  # the probit approximation (MacKay 1992), as laplace-torch's
            return torch.softmax(f_mu / torch.sqrt(1.0 + math.pi / 8 * var), dim=-1)
        if noise:
            var = var + float(self.sigma_noise or 0.0) ** 2
        return f_mu, var

    def _kron_glm(self, x: Tensor, factors: list[dict[str, Tensor]]) -> tuple[Tensor, Tensor]:
        """The linearised network's output at ``x`` and its variance under a last layer's KFAC
        posterior, per output (n, outputs), in closed form from ``factors`` (:meth:`kron_factors`):
        O(n H^2) for H features, where laplace-torch forms each row's Jacobian over every weight
        (O(n C^2 H^2) time, n C^2 H memory; docs/laplace.md)."""
        f_mu, phi = self.la.model.forward_with_features(x)
        var = torch.zeros(f_mu.shape, dtype=torch.float64, device=f_mu.device)
        for block in factors:
            if "q" in block:  # the bias: its output's Jacobian is the identity
                var = var + ((block["q"] * block["scale"]) ** 2).sum(1)
            else:  # the weight (C, H), row-major: J = I (x) phi, J kron(q1, q2) diag(s) = q1 (x) (phi q2) s
                proj = (phi.double() @ block["q2"]) ** 2  # (n, H)
                var = var + (proj @ (block["scale"] ** 2).T) @ (block["q1"] ** 2).T
        return f_mu, var.to(f_mu.dtype)

    def kron_factors(self) -> list[dict[str, Tensor]]:
        """A KFAC posterior's covariance (``hessian="kron"``) as laplace-torch's eigendecomposition
        of its factors, float64, one block per parameter in its order (the weight, then the bias):
        a weight's ``q1`` (outputs x outputs), ``q2`` (inputs x inputs) and ``scale`` (outputs x
        inputs: its precision's eigenvalues, ``outer(l1, l2) + prior``, to the power -1/2), whose
        covariance is ``F F^T`` for ``F = kron(q1, q2) diag(scale)`` (row-major); a bias's ``q``
        and ``scale``, ``F = q diag(scale)``. Laplace-torch's damping is folded in."""
        if self.hessian != "kron":
            raise UserError(f"kron_factors are those of a KFAC posterior (hessian='kron'), not {self.hessian!r}")
        prec = self.la.posterior_precision
        blocks: list[dict[str, Tensor]] = []
        tiny = torch.finfo(torch.float64).tiny
        for qs, ls, delta in zip(prec.eigenvectors, prec.eigenvalues, prec.deltas, strict=True):
            delta = delta.detach().double()
            if len(ls) == 1:
                lam = ls[0].detach().double() + delta
                blocks.append({"q": qs[0].detach().double(), "scale": lam.clamp_min(tiny).rsqrt()})
                continue
            l1, l2 = (v.detach().double() for v in ls)
            lam = torch.outer(l1 + delta.sqrt(), l2 + delta.sqrt()) if prec.damping else torch.outer(l1, l2) + delta
            blocks.append({"q1": qs[0].detach().double(), "q2": qs[1].detach().double(),
                           "scale": lam.clamp_min(tiny).rsqrt()})
        return blocks

    def state(self) -> dict[str, Any]:
        """What was fitted, as plain numbers and strings (JSON-ready; not the curvature)."""
        return {"likelihood": self.likelihood, "hessian": self.hessian, "prior_precision": self.prior_precision,
                "prior_precision_from": self.prior_precision_from, "sigma_noise": self.sigma_noise,
                "sigma_noise_from": self.sigma_noise_from, "log_marginal_likelihood": self.log_marginal_likelihood,
                "n_data": self.n_data, "n_params": self.n_params, "weights": self.weights}


def log_marginal_likelihood(la: Any, prior_precision: Tensor | None = None,
                            sigma_noise: Tensor | None = None) -> Tensor:
    """laplace-torch's Laplace approximation to the log marginal likelihood of the fitted ``la`` at
    ``prior_precision`` and ``sigma_noise`` (None: the current; both are set on ``la``, as its
    own ``log_marginal_likelihood`` does), differentiable in both. A KFAC posterior's
    log-determinant is formed here: laplace-torch 0.3 scales the Kronecker factors by
    ``math.pow`` of 1/sigma_noise^2, a Python float, so its value is right but its gradient in
    sigma_noise leaves the log-determinant out (the noise then converges to the residuals' rms)."""
    if prior_precision is not None:
        la.prior_precision = prior_precision
    if sigma_noise is not None:
        la.sigma_noise = sigma_noise
    H = la.H
    if not (hasattr(H, "eigenvalues") and hasattr(H, "deltas")):  # not a (decomposed) KFAC
        return la.log_marginal_likelihood()
    factor = 1.0 / (la.sigma_noise.square() * la.temperature)  # what scales the loss's curvature
    logdet = torch.zeros((), dtype=la.sigma_noise.dtype, device=la.sigma_noise.device)
    for ls, delta in zip(H.eigenvalues, H.deltas + la.prior_precision, strict=True):
        if len(ls) == 1:
            logdet = logdet + torch.log(ls[0] * factor + delta).sum()
        elif getattr(la, "damping", False):
            root = factor.sqrt()
            logdet = logdet + torch.log(torch.outer(ls[0] * root + delta.sqrt(), ls[1] * root + delta.sqrt())).sum()
        else:
            logdet = logdet + torch.log(torch.outer(ls[0], ls[1]) * factor + delta).sum()
    return la.log_likelihood - 0.5 * (logdet - la.log_det_prior_precision + la.scatter)


def _hyper(name: str, value: Any) -> float | None:
    """None for ``"marglik"``, else a positive finite number."""
    if isinstance(value, str):
        if value != "marglik":
            raise UserError(f"{name} must be 'marglik' (chosen by the marginal likelihood) or a number > 0, "
                            f"got {value!r}")
        return None
    return check_float(name, value, 0.0, above=True)


def _last_leaf(model: nn.Module, x: Tensor) -> nn.Module | None:
    """The last module without children that one forward pass of ``x`` runs; refused in one line
    where it is an nn.Linear whose output the forward changes before returning it (scaled, a
    residual added, a function of torch applied): a last-layer posterior would be of another scale,
    or of another layer."""
    order: list[tuple[nn.Module, Any]] = []
    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(lambda mod, _i, o: order.append((mod, o))) for m in leaves]
    try:
        with torch.no_grad(), modes_kept(model):
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    if not order:
        return None
    last, last_out = order[-1]
    same = isinstance(out, Tensor) and isinstance(last_out, Tensor) and out.numel() == last_out.numel() and \
        torch.equal(out.reshape(-1), last_out.reshape(-1))
    if isinstance(last, nn.Linear) and isinstance(out, Tensor) and not same:  # (no tensor: said after)
        name = next((n for n, m in model.named_modules() if m is last), type(last).__name__)
        raise UserError(f"the network's output is not its last nn.Linear's ({name}) output as that layer gives it: "
                        "the forward scales it, adds to it or transforms it after, so a last-layer posterior would "
                        "be at another scale or of another layer; end the forward with the linear layer, or use "
                        "weights='all'")
    return last


def _loader(data: Any, likelihood: str, batch_size: int, dtype: torch.dtype,
            device: torch.device) -> tuple[DataLoader, Tensor]:
    """A loader of ``data`` ((x, y) tensors or a DataLoader) and one batch of its inputs."""
    if isinstance(data, DataLoader):
        if not hasattr(data.dataset, "__len__"):
            raise UserError("the DataLoader's dataset must have a length (laplace-torch counts the training rows)")
        first = next(iter(data), None)
        if not isinstance(first, (tuple, list)) or len(first) != 2:
            raise UserError("the DataLoader must give (inputs, targets) batches")
        return data, first[0].to(device=device, dtype=dtype if first[0].is_floating_point() else None)
    if not (isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, Tensor) for t in data)):
        raise UserError(f"data must be (inputs, targets) tensors or a DataLoader of them, got {type(data).__name__}")
    x, y = data
    if x.shape[0] == 0 or x.shape[0] != y.shape[0]:
        raise UserError(f"inputs and targets must have the same number of rows (> 0), got {x.shape[0]} and "
                        f"{y.shape[0]}")
    x = x.to(device=device, dtype=dtype if x.is_floating_point() else None)  # (token ids stay integers)
    if not torch.isfinite(x).all():
        raise UserError("the inputs hold NaN or infinite values")
    if likelihood == "classification":
        if y.is_floating_point() or y.dim() != 1:
            raise UserError(f"classification targets must be class indices, an integer tensor of shape (n,); got "
                            f"{y.dtype} of shape {tuple(y.shape)}")
        y = y.to(device=device, dtype=torch.long)
    else:
        y = y.to(device=device, dtype=dtype)
        if not torch.isfinite(y).all():
            raise UserError("the targets hold NaN or infinite values")
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False), x[:batch_size]


def _check_batch_targets(y: Any, likelihood: str, outputs: int) -> None:
    """A one-line error for a DataLoader batch's targets that do not fit a network of ``outputs``
    outputs: a regression's must be (rows, outputs) as the network's, a classifier's class indices."""
    if not isinstance(y, Tensor):
        raise UserError(f"the DataLoader's targets must be tensors, got {type(y).__name__}")
    if likelihood == "regression" and (y.dim() != 2 or y.shape[1] != outputs or not y.is_floating_point()):
        raise UserError(f"a DataLoader's regression targets must be shaped as the network's outputs, (rows, "
                        f"{outputs}) floating point; got {y.dtype} of shape {tuple(y.shape)}")
    if likelihood == "classification" and (y.is_floating_point() or y.dim() != 1):
        raise UserError(f"a DataLoader's classification targets must be class indices, an integer tensor of shape "
                        f"(rows,); got {y.dtype} of shape {tuple(y.shape)}")


def fit_last_layer_laplace(model: nn.Module, data: Any, *, likelihood: str = "regression", hessian: str = "kron",
                           prior: float | str = "marglik", sigma_noise: float | str | None = None,
                           batch_size: int = 256, marglik_steps: int = 300, marglik_lr: float = 0.1,
                           ) -> LastLayerLaplace:
    """Fit a last-layer Laplace approximation of the trained deterministic ``model``: :func:`fit_laplace`
    with ``weights="last_layer"`` (its arguments, errors and result)."""
    return fit_laplace(model, data, weights="last_layer", likelihood=likelihood, hessian=hessian, prior=prior,
                       sigma_noise=sigma_noise, batch_size=batch_size, marglik_steps=marglik_steps,
                       marglik_lr=marglik_lr)


def fit_laplace(model: nn.Module, data: Any, *, weights: str = "last_layer", likelihood: str = "regression",
                hessian: str = "kron", prior: float | str = "marglik", sigma_noise: float | str | None = None,
                batch_size: int = 256, marglik_steps: int = 300, marglik_lr: float = 0.1) -> LastLayerLaplace:
    """Fit a Laplace approximation of the trained deterministic ``model`` over ``weights``:
    ``"last_layer"`` (the last ``nn.Linear``'s weights and bias) or ``"all"`` (every parameter
    with ``requires_grad``: freeze the rest first, e.g. a peft LoRA model, whose adapters are
    then the Bayesian part: Laplace-LoRA).

    ``data``: the training data, ``(inputs, targets)`` tensors (regression targets (n,) or
    (n, outputs); classification targets class indices (n,)) or a ``DataLoader`` of such batches
    (targets shaped as the network's outputs for a regression). ``likelihood``: ``"regression"``
    (Gaussian noise) or ``"classification"`` (the network gives logits). ``hessian``: ``"kron"``
    (KFAC), ``"diag"`` or ``"full"``. ``prior``: the prior precision, ``"marglik"`` (chosen by
    the marginal likelihood) or a number. ``sigma_noise`` (regression only): the observation
    noise sd, None or ``"marglik"`` (chosen jointly with the prior by the marginal likelihood) or
    a number (kept). The marginal likelihood is maximised by Adam on the log of each chosen
    value (``marglik_steps`` steps of ``marglik_lr``, from 1), as laplace-torch does.

    Bad input (an unknown option, a Bayesian network, a network whose output is not an
    ``nn.Linear``'s, mismatched rows, a missing laplace-torch) is a one-line
    :class:`bbb.errors.UserError`."""
    weights = choice("weights", weights, WEIGHTS)
    likelihood = choice("likelihood", likelihood, LIKELIHOODS)
    hessian = choice("hessian", hessian, HESSIANS)
    fixed_prior = _hyper("prior", prior)
    if sigma_noise is not None and likelihood == "classification":
        raise UserError("sigma_noise is the noise of a regression; leave it out for classification")
    fixed_sigma = _hyper("sigma_noise", "marglik" if sigma_noise is None else sigma_noise)
    batch_size = check_int("batch_size", batch_size)
    marglik_steps = check_int("marglik_steps", marglik_steps, 0)
    marglik_lr = check_float("marglik_lr", marglik_lr, 0.0, above=True)
    if not isinstance(model, nn.Module):
        raise UserError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if any(isinstance(m, BayesModule) for m in model.modules()):
        raise UserError("the Laplace approximation is of a deterministic network; this one has Bayesian layers "
                        "(its posterior is already learned)")
    param = next(model.parameters(), None)
    if param is None:
        raise UserError("the model has no parameters")
    if weights == "all" and not any(p.requires_grad for p in model.parameters()):
        raise UserError("weights='all' covers the parameters that require a gradient, and this model has none: "
                        "set requires_grad on those the posterior should cover")
    if weights == "all" and hessian == "kron":
        for name, mod in model.named_modules():
            own = [p.requires_grad for p in mod.parameters(recurse=False)]
            if any(own) and not all(own):
                raise UserError(f"KFAC over weights='all' needs each layer's parameters all trainable or all frozen; "
                                f"{name or 'the model'} has some of each: freeze it whole, or use hessian='diag'")
            if any(own) and not isinstance(mod, (nn.Linear, nn.Conv2d)):  # (laplace-torch's KFAC raised its own)
                raise UserError(f"KFAC over weights='all' covers nn.Linear and nn.Conv2d layers; {name or 'the model'} "
                                f"is a trainable {type(mod).__name__}: freeze it (requires_grad_(False)), or use "
                                "hessian='diag'")
    Laplace = require_laplace()
    loader, x0 = _loader(data, likelihood, batch_size, param.dtype, param.device)
    last = _last_leaf(model, x0) if weights == "last_layer" else None
    if weights == "last_layer" and not isinstance(last, nn.Linear):
        raise UserError(f"the network's output must come from an nn.Linear (its last layer), not "
                        f"{type(last).__name__}: leave a final activation out of the model (logits for "
                        "classification)")
    with torch.no_grad(), modes_kept(model):
        out = model(x0)
    if not isinstance(out, Tensor):  # (laplace-torch calls the model and reads a tensor)
        raise UserError(f"the network must return a tensor of outputs, got a {type(out).__name__} (a Hugging Face "
                        "model's ModelOutput: wrap it in a module whose forward returns model(input_ids=x).logits)")
    if out.dim() != 2:
        raise UserError(f"the network's output must be (rows, outputs), got shape {tuple(out.shape)}")
    if likelihood == "classification" and out.shape[1] < 2:
        raise UserError(f"a classifier must give one logit per class (2 or more), got {out.shape[1]}")
    if likelihood == "regression" and not isinstance(data, DataLoader):
        x, y = loader.dataset.tensors  # type: ignore[attr-defined]
        if y.dim() == 1 and out.shape[1] == 1:
            y = y.unsqueeze(1)
        if tuple(y.shape[1:]) != tuple(out.shape[1:]):
            shapes = "(n,) or (n, 1)" if out.shape[1] == 1 else f"(n, {out.shape[1]}), one per output"
            raise UserError(f"regression targets must be {shapes} for this network of {out.shape[1]} output(s), "
                            f"got {tuple(y.shape)}")
        loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)
    if isinstance(data, DataLoader):  # its first batch's targets (laplace-torch broadcasts a regression's)
        _check_batch_targets(next(iter(data))[1], likelihood, out.shape[1])
    if likelihood == "classification" and not isinstance(data, DataLoader):
        y = loader.dataset.tensors[1]  # type: ignore[attr-defined]
        if int(y.min()) < 0 or int(y.max()) >= out.shape[1]:
            raise UserError(f"class indices must be in 0..{out.shape[1] - 1}, got {int(y.min())}..{int(y.max())}")
    noise = fixed_sigma if likelihood == "regression" else 0.0  # (a classifier has no noise to choose)
    chosen = [n for n, v in (("prior", fixed_prior), ("sigma_noise", noise)) if v is None]
    if chosen and marglik_steps == 0:  # (recorded as chosen by the marginal likelihood, left at the start of 1)
        raise UserError(f"marglik_steps=0 chooses nothing by the marginal likelihood: give {' and '.join(chosen)} a "
                        "number, or marglik_steps >= 1")
    kwargs = {"sigma_noise": fixed_sigma} if likelihood == "regression" and fixed_sigma is not None else {}
    la = Laplace(model, likelihood, subset_of_weights=weights, hessian_structure=hessian, **kwargs)
    with warnings.catch_warnings():  # torch's forward-mode decompositions (the full GGN) load through torch.jit.script
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        with modes_kept(model, eval=False):
            la.fit(loader)  # (in eval mode; weights="all" fits the caller's network itself)
    log_prior = torch.zeros(1, requires_grad=True) if fixed_prior is None else None
    log_sigma = torch.zeros(1, requires_grad=True) if likelihood == "regression" and fixed_sigma is None else None
    free = [t for t in (log_prior, log_sigma) if t is not None]
    if fixed_prior is not None:
        la.prior_precision = fixed_prior
    if free:
        opt = torch.optim.Adam(free, lr=marglik_lr)
        for _ in range(marglik_steps):
            opt.zero_grad()
            neg = -log_marginal_likelihood(la, None if log_prior is None else log_prior.exp(),
                                           None if log_sigma is None else log_sigma.exp())
            neg.backward()
            opt.step()
        with torch.no_grad():
            if log_prior is not None:
                la.prior_precision = log_prior.exp().detach()
            if log_sigma is not None:
                la.sigma_noise = log_sigma.exp().detach()
    with torch.no_grad():
        lml = float(log_marginal_likelihood(la))
    prior_precision = float(la.prior_precision.reshape(-1)[0])
    sigma = float(la.sigma_noise) if likelihood == "regression" else None
    if not (math.isfinite(prior_precision) and prior_precision > 0 and (sigma is None or math.isfinite(sigma))
            and math.isfinite(lml)):
        raise UserError(f"the marginal likelihood's optimum is not finite (prior precision {prior_precision:g}, "
                        f"sigma_noise {sigma}); pass prior= and sigma_noise= numbers, or fewer marglik_steps")
    return LastLayerLaplace(likelihood, hessian, prior_precision, "marglik" if fixed_prior is None else "given",
                            sigma, None if sigma is None else "marglik" if fixed_sigma is None else "given",
                            lml, int(la.n_data), int(la.n_params), la, weights)
