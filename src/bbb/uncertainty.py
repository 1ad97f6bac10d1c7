"""Predictive uncertainty and calibration from Monte Carlo samples.

Conventions: ``logits`` are (k, B, C), one slice per sampled network; ``probs`` are (B, C)
predictive probabilities. The predictive distribution averages *probabilities*, never
log-probabilities (the latter is a geometric mean, a known peer bug).

Entropy decomposition (all in nats): predictive entropy H[E_w p(y|x,w)] = expected entropy
E_w H[p(y|x,w)] (aleatoric) + mutual information I[y; w | x] (epistemic).

Regression: k sampled networks with Gaussian noise give ``means`` (k, B) and ``sigmas``; the
predictive is their equal-weight mixture (:func:`gaussian_mixture_log_prob`,
:func:`gaussian_mixture_quantiles`, :func:`interval_coverage`), and :func:`regression_metrics`
(or :func:`evaluate` with ``likelihood=``) reports RMSE, log-likelihood and interval coverage in
the target's original units.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .elbo import Categorical, Gaussian, HeteroscedasticGaussian, Likelihood, likelihood_from_name
from .errors import UserError
from .nn import SampleRecorder, forward_samples, model_batch_dim, sampling, shared_samples
from .nn.sampling import PROVIDER

__all__ = [
    "predict",
    "evaluate",
    "predictive_probs",
    "entropy",
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "reliability_bins",
    "expected_calibration_error",
    "negative_log_likelihood",
    "brier_score",
    "error_rate",
    "auroc",
    "aupr",
    "regression_uncertainty",
    "gaussian_mixture_log_prob",
    "gaussian_mixture_quantiles",
    "interval_coverage",
    "regression_metrics",
]


def _batches(data: Any) -> Iterator[tuple[Tensor, Tensor | None]]:
    """(inputs, targets or None) per batch of a DataLoader / iterable of tensors or (x, y, ...) tuples."""
    for batch in data:
        if isinstance(batch, Tensor):
            yield batch, None
        elif isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], Tensor):
            y = batch[1] if len(batch) > 1 and isinstance(batch[1], Tensor) else None
            yield batch[0], y
        elif isinstance(batch, dict) and isinstance(x := batch.get("x", batch.get("input")), Tensor):
            y = batch.get("y", batch.get("target", batch.get("label")))
            yield x, y if isinstance(y, Tensor) else None
        else:
            raise UserError("expected batches that are tensors, (inputs, targets) tuples or dicts with 'x'/'y', "
                            f"got {type(batch).__name__}")


def _device(model: nn.Module) -> torch.device | None:
    p = next(model.parameters(), None)
    return None if p is None else p.device


def _as_generator(generator: torch.Generator | int | None, device: torch.device | None,
                  fn: str) -> torch.Generator | None:
    """``generator=``: None, a ``torch.Generator`` on the model's device type, or an int seed (a new
    generator on the model's device, seeded with it)."""
    if generator is None:
        return None
    dev = torch.device("cpu") if device is None else device
    if isinstance(generator, torch.Generator):
        if generator.device.type != dev.type:
            raise UserError(f"{fn}: generator= is a {generator.device.type} generator but the model is on {dev}: "
                            f"use torch.Generator(device={dev.type!r}) or pass an int seed")
        return generator
    if isinstance(generator, bool) or not isinstance(generator, numbers.Integral) or generator < 0:
        raise UserError(f"{fn}: generator= must be a torch.Generator or an int seed >= 0, got {generator!r}")
    return torch.Generator(device=dev).manual_seed(int(generator))


def _rng_states(device: torch.device | None) -> list[Tensor]:
    """torch's global random states that a forward on ``device`` may draw from (CPU, and CUDA's)."""
    states = [torch.get_rng_state()]
    if device is not None and device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _set_rng_states(states: list[Tensor], device: torch.device | None) -> None:
    torch.set_rng_state(states[0])
    if len(states) > 1 and device is not None:
        torch.cuda.set_rng_state(states[1], device)


@torch.no_grad()
def predict(
    model: nn.Module,
    x: Tensor | Iterable,
    num_samples: int = 10,
    mode: str = "sample",
    batch_size: int | None = None,
    return_targets: bool = False,
    generator: torch.Generator | int | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Network outputs for ``x`` (B, ...): (k, B, ...) sampled, or (1, B, ...) with ``mode="mean"``.

    ``x`` is a tensor, or a ``DataLoader`` (any iterable of batches: tensors, ``(inputs, targets)``
    tuples or dicts with ``"x"``/``"y"``), whose batches are moved to the model's device.
    The k networks run batched (the samples folded into the batch dimension, so any network
    works: :func:`bbb.nn.forward_samples`); ``batch_size`` bounds memory by chunking a tensor, and
    every chunk or batch sees the same k networks (weights drawn once,
    :func:`bbb.nn.shared_samples`). ``return_targets=True`` (DataLoader only) also returns the
    concatenated targets: ``(outputs, targets)``.

    ``generator``: a ``torch.Generator`` (on the model's device type) or an int seed. When given,
    all weight noise (reparameterisation, local reparameterisation and Flipout draws) comes from it,
    so equal seeds give equal outputs, and torch's global random state is left exactly as it was
    (it is restored on return, so a DataLoader's own draws are undone too and evaluating does not
    perturb a training run). A layer that draws from the global generator anyway (a custom layer
    that ignores :class:`bbb.nn.SampleRecorder`'s generator) is a one-line :class:`UserError`. None
    (the default): torch's global generator, as before.

    >>> logits, labels = predict(net, test_loader, num_samples=20, return_targets=True)
    >>> expected_calibration_error(predictive_probs(logits), labels)
    >>> torch.equal(predict(net, x, generator=0), predict(net, x, generator=0))
    True
    """
    if mode not in ("sample", "mean"):
        raise UserError(f"mode must be 'sample' or 'mean', got {mode!r}")
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise UserError(f"num_samples must be an integer >= 1, got {num_samples}")
    if not isinstance(x, Tensor) and not isinstance(x, Iterable):
        raise UserError(f"predict takes a tensor or a DataLoader of inputs, got {type(x).__name__}")
    if isinstance(x, Tensor) and return_targets:
        raise UserError("return_targets needs a DataLoader (a tensor of inputs carries no targets)")
    dev = _device(model)
    gen = _as_generator(generator, dev, "predict")
    if gen is not None and PROVIDER.get() is not None:
        raise UserError("predict: generator= has no effect inside engine.sampling() (the engine supplies the "
                        "weights): call predict outside the block")
    saved = None if gen is None else _rng_states(dev)
    was_training = model.training
    model.eval()
    try:
        return _predict(model, x, int(num_samples), mode, batch_size, return_targets, dev, gen, saved)
    finally:
        model.train(was_training)
        if saved is not None:
            _set_rng_states(saved, dev)


def _predict(model: nn.Module, x: Tensor | Iterable, num_samples: int, mode: str, batch_size: int | None,
             return_targets: bool, dev: torch.device | None, gen: torch.Generator | None,
             saved: list[Tensor] | None) -> Tensor | tuple[Tensor, Tensor]:
    d = model_batch_dim(model)  # 1 for a sequence-first model: inputs (T, B, ...)
    batches: Iterable[tuple[Tensor, Tensor | None]]
    if isinstance(x, Tensor):
        batches = [(x, None)] if batch_size is None else [(c, None) for c in torch.split(x, batch_size, dim=d)]
    else:
        batches = _batches(x)
    outs, targets = [], []
    record: AbstractContextManager[Any] = SampleRecorder(gen) if gen is not None else nullcontext()
    with sampling(model, mode), shared_samples(), record:
        sizes = []
        for xc, yc in batches:
            if not isinstance(x, Tensor) and dev is not None:
                xc = xc.to(dev)
            sizes.append(xc.shape[d] if xc.dim() > d else -1)
            before = None if saved is None else _rng_states(dev)
            out = model(xc).unsqueeze(0) if mode == "mean" else forward_samples(model, xc, num_samples)
            if before is not None and any(not torch.equal(a, b) for a, b in zip(before, _rng_states(dev))):
                raise UserError(f"predict: generator= was given, but {type(model).__name__} drew from torch's global "
                                "random generator (a layer that ignores bbb.nn.SampleRecorder's generator), so "
                                "its noise is not reproducible: route that layer's draws through the recorder")
            outs.append(out)
            if return_targets:
                if yc is None:
                    raise UserError("return_targets: the DataLoader's batches carry no targets")
                targets.append(yc.to(out.device))
    if not outs:
        raise UserError("predict: the DataLoader yielded no batches")
    # the outputs' batch: dim 1 after the samples, or 2 for a sequence-first output (k, T, B, ...)
    per_step = d == 1 and all(o.dim() > 2 and o.shape[2] == xs for o, xs in zip(outs, sizes))
    result = torch.cat(outs, dim=2 if per_step else 1)
    return (result, torch.cat(targets)) if return_targets else result


def evaluate(
    model: nn.Module,
    data: Iterable | tuple[Tensor, Tensor],
    num_samples: int = 10,
    num_bins: int = 15,
    *,
    likelihood: Likelihood | str | None = None,
    shift: float | Tensor = 0.0,
    scale: float | Tensor = 1.0,
    generator: torch.Generator | int | None = None,
) -> dict[str, float]:
    """Metrics of the Monte Carlo predictive on a DataLoader or ``(x, targets)``, each a float.

    Classification (integer labels; ``likelihood`` None or categorical): error rate, NLL, Brier
    score, ECE (``num_bins`` bins), mean predictive entropy and mean mutual information (nats).

    Regression: pass the training likelihood, ``likelihood=elbo.likelihood``. A
    :class:`~bbb.elbo.Gaussian` gives every sampled network the noise sd ``likelihood.sigma`` (learned
    or fixed); a :class:`~bbb.elbo.HeteroscedasticGaussian` reads each sampled output's mean and
    noise with its ``split``. The predictive is the equal-weight mixture of the k Gaussians and the
    result is :func:`regression_metrics` (``rmse``, ``log_likelihood``, ``nll``, ``coverage_50`` /
    ``_90`` / ``_95``, ``mean_sd``), in the original units of a target that was standardised as
    ``(y - shift) / scale`` for training (the data's targets are the standardised ones, as the
    network was trained on). Use ``num_samples >= 100`` for regression: the log-likelihood and the
    coverage of a mixture of a few components are noisy. Floating-point targets without a
    likelihood are a :class:`UserError` (say which noise the network was trained with).

    ``generator`` (a ``torch.Generator`` or an int seed): the weight noise, as :func:`predict`'s;
    torch's global random state is left as it was.

    >>> bbb.uncertainty.evaluate(net, test_loader, num_samples=20)["ece"]
    >>> evaluate(net, (x_test, y_test_n), num_samples=100, likelihood=elbo.likelihood,
    ...          shift=ys.mean, scale=ys.std, generator=0)["rmse"]
    """
    if likelihood is not None:
        likelihood = likelihood_from_name(likelihood)
        if not isinstance(likelihood, (Categorical, Gaussian, HeteroscedasticGaussian)):
            raise UserError(f"evaluate: likelihood= must be a Categorical, Gaussian or HeteroscedasticGaussian, got "
                            f"{type(likelihood).__name__}")
    regression = isinstance(likelihood, (Gaussian, HeteroscedasticGaussian))
    if not regression and not (_is_default(shift, 0.0) and _is_default(scale, 1.0)):
        raise UserError("evaluate: shift= and scale= apply to regression only (pass likelihood=, a Gaussian)")
    outputs: Tensor
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, Tensor) for t in data):
        outputs = predict(model, data[0], num_samples, generator=generator)  # type: ignore[assignment]
        targets = data[1].to(outputs.device)
    else:
        outputs, targets = predict(model, data, num_samples, return_targets=True,  # type: ignore[misc]
                                   generator=generator)
    if regression:
        means, sigmas, target = _regression_outputs(likelihood, outputs, targets)  # type: ignore[arg-type]
        return regression_metrics(means, sigmas, target, shift=shift, scale=scale)
    if targets.is_floating_point():
        raise UserError("evaluate: the targets are floating point (regression?): pass likelihood=, a "
                        "bbb.elbo.Gaussian with the noise sd (e.g. elbo.likelihood) or the HeteroscedasticGaussian")
    probs = predictive_probs(outputs)
    return {
        "error": error_rate(probs, targets),
        "nll": negative_log_likelihood(probs, targets),
        "brier": brier_score(probs, targets),
        "ece": expected_calibration_error(probs, targets, num_bins),
        "entropy": float(entropy(probs).mean()),
        "mutual_information": float(mutual_information(outputs).mean()),
    }


def _is_default(v: float | Tensor, default: float) -> bool:
    try:
        return float(v) == default
    except (TypeError, ValueError, RuntimeError):
        return False


def _regression_outputs(likelihood: Gaussian | HeteroscedasticGaussian, outputs: Tensor,
                        targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(means (k, B), sigmas (k, B) or 0-d, targets (B,)) of k sampled regressors' outputs."""
    if targets.dim() == 2 and targets.shape[-1] == 1:
        targets = targets.squeeze(-1)
    if targets.dim() != 1:
        raise UserError(f"evaluate: regression metrics take one target per example, targets (B,), got "
                        f"{tuple(targets.shape)}")
    if isinstance(likelihood, HeteroscedasticGaussian):
        means, sigmas = likelihood.split(outputs)
    else:
        means = outputs.squeeze(-1) if outputs.dim() == 3 and outputs.shape[-1] == 1 else outputs
        sigmas = likelihood.sigma.detach().to(outputs.device)
    if means.dim() != 2 or means.shape[1] != targets.shape[0]:
        raise UserError(f"evaluate: network outputs of shape {tuple(outputs.shape)} do not give one mean per target "
                        f"({targets.shape[0]} targets) for the {type(likelihood).__name__} likelihood")
    return means, sigmas, targets.to(means.dtype if targets.is_floating_point() else torch.float64)


# --------------------------------------------------------------------------------------------
# Regression: the equal-weight mixture of k sampled Gaussians
# --------------------------------------------------------------------------------------------

#: iterations of :func:`gaussian_mixture_quantiles` at most (safeguarded Newton steps take a handful;
#: plain bisection of the bracket reaches float64's resolution within 64)
_MAX_ITERATIONS = 100
#: elements of one (q, k, B) block of that search (bounds its memory)
_BLOCK = 1 << 22


def _work_dtype(t: Tensor) -> torch.dtype:
    return torch.float32 if t.device.type == "mps" else torch.float64  # (MPS has no float64)


def _mixture(fn: str, means: Tensor, sigmas: Tensor | float, target: Tensor | None = None
             ) -> tuple[Tensor, Tensor, Tensor | None]:
    """Checked (means (k, B), sigmas expanded to (k, B), target (B,) or None), in float64."""
    if not isinstance(means, Tensor) or means.dim() != 2 or means.shape[0] == 0:
        got = tuple(means.shape) if isinstance(means, Tensor) else type(means).__name__
        raise UserError(f"{fn}: means must be a (k, B) tensor, one row per sampled network (k >= 1), got {got}")
    if not means.is_floating_point():
        raise UserError(f"{fn}: means must be floating point, got {means.dtype}")
    k, b = means.shape
    dt = _work_dtype(means)
    mu = means.detach().to(dt)
    try:
        s = (sigmas.detach().to(device=means.device, dtype=dt) if isinstance(sigmas, Tensor)
             else torch.as_tensor(sigmas, dtype=dt, device=means.device))
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"{fn}: sigmas must be a number or a tensor of standard deviations, got "
                        f"{type(sigmas).__name__}") from None
    if s.dim() == 1 and s.shape[0] == k:
        s = s[:, None]  # one sd per component
    try:
        s = s.expand(k, b)
    except RuntimeError:
        raise UserError(f"{fn}: sigmas of shape {tuple(s.shape)} do not fit means (k, B) = {(k, b)}: give a number, "
                        "(k,), (k, B) or a shape that broadcasts to (k, B)") from None
    if s.numel() and not bool(((s > 0) & torch.isfinite(s)).all()):
        raise UserError(f"{fn}: sigmas must be finite standard deviations > 0, got values in "
                        f"[{float(s.min()):.4g}, {float(s.max()):.4g}]")
    if mu.numel() and not bool(torch.isfinite(mu).all()):
        raise UserError(f"{fn}: means contain NaN or inf")
    t = None
    if target is not None:
        if not isinstance(target, Tensor) or target.dim() != 1 or target.shape[0] != b:
            got = tuple(target.shape) if isinstance(target, Tensor) else type(target).__name__
            raise UserError(f"{fn}: target must be a (B,) tensor with B = {b} (means are (k, B) = {(k, b)}), got {got}")
        t = target.detach().to(device=means.device, dtype=dt)
        if t.numel() and not bool(torch.isfinite(t).all()):
            raise UserError(f"{fn}: target contains NaN or inf")
    return mu, s, t


def _mixture_cdf(x: Tensor, mu: Tensor, s: Tensor) -> Tensor:
    """CDF of the equal-weight mixture at ``x`` (..., B), components mu, s (k, B)."""
    return torch.special.ndtr((x.unsqueeze(-2) - mu) / s).mean(-2)


def _levels(levels: Iterable[float], fn: str) -> list[float]:
    try:
        out = [float(v) for v in levels]
    except (TypeError, ValueError):
        raise UserError(f"{fn}: levels must be numbers in (0, 1), got {levels!r}") from None
    if not out or not all(0.0 < v < 1.0 for v in out):
        raise UserError(f"{fn}: levels must be one or more numbers in (0, 1), got {out}")
    return out


def gaussian_mixture_log_prob(target: Tensor, means: Tensor, sigmas: Tensor | float) -> Tensor:
    """Log density of ``target`` under the equal-weight mixture (1/k) sum_i N(means[i], sigmas[i]^2).

    ``target`` (B,); ``means`` (k, B), one row per sampled network; ``sigmas`` the components'
    standard deviations: a number, a (k,) tensor (one per component; it wins when k == B), a
    (k, B) tensor or any shape that broadcasts to (k, B). Returns the (B,) per-example log p,
    computed in float64 as ``logsumexp_i log N(target; means[i], sigmas[i]^2) - log k`` (never by
    averaging densities, which underflow far from the means), returned in the floating dtype of
    ``means`` and ``target`` promoted together.

    Example:
        >>> means = torch.tensor([[0.0, 1.0], [0.5, 1.5]])          # k = 2 networks, B = 2
        >>> gaussian_mixture_log_prob(torch.tensor([0.2, 1.0]), means, 0.3)
        tensor([-0.0665, -0.1855])
    """
    mu, s, t = _mixture("gaussian_mixture_log_prob", means, sigmas, target)
    assert t is not None
    z = (t - mu) / s
    lp = -0.5 * z * z - torch.log(s) - 0.5 * math.log(2 * math.pi)
    out = torch.logsumexp(lp, dim=0) - math.log(mu.shape[0])
    return out.to(torch.promote_types(means.dtype, target.dtype) if target.is_floating_point() else means.dtype)


def gaussian_mixture_quantiles(means: Tensor, sigmas: Tensor | float,
                               q: float | Sequence[float] | Tensor) -> Tensor:
    """Quantiles of the equal-weight Gaussian mixture of :func:`gaussian_mixture_log_prob`, per example.

    ``q``: a probability in (0, 1), giving (B,), or a 1-D sequence / tensor of them, giving
    (len(q), B) (``torch.quantile``'s convention). Solves F(x) = q for the mixture's CDF
    F (``torch.special.ndtr``) in float64, vectorised over q and the examples: the root lies
    between the smallest and the largest of the components' own q-quantiles
    (mu_i + sigma_i Phi^-1(q): F is at most q at the first and at least q at the last), a bracket
    that a bisection would halve to float64's resolution; Newton steps inside it (a bisection step
    whenever Newton's would leave it) get there in a few iterations. Returned in the dtype of
    ``means``.

    Example:
        >>> gaussian_mixture_quantiles(torch.zeros(1, 3), 1.0, [0.025, 0.975])   # k = 1: N(0, 1)
        tensor([[-1.9600, -1.9600, -1.9600],
                [ 1.9600,  1.9600,  1.9600]])
    """
    fn = "gaussian_mixture_quantiles"
    mu, s, _ = _mixture(fn, means, sigmas)
    scalar = not isinstance(q, (Tensor, list, tuple))
    try:
        qs = (q.detach().to(device=mu.device, dtype=mu.dtype) if isinstance(q, Tensor)
              else torch.as_tensor(q, dtype=mu.dtype, device=mu.device))
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"{fn}: q must be a probability or a 1-D sequence of probabilities, got {q!r:.80}") from None
    scalar = scalar or qs.dim() == 0
    qs = qs.reshape(-1) if scalar else qs
    if qs.dim() != 1 or qs.numel() == 0:
        raise UserError(f"{fn}: q must be a probability or a non-empty 1-D tensor of them, got shape {tuple(qs.shape)}")
    if not bool(((qs > 0) & (qs < 1)).all()):
        raise UserError(f"{fn}: q must lie in (0, 1), got values in [{float(qs.min()):.4g}, {float(qs.max()):.4g}]")
    k, b = mu.shape
    n = qs.shape[0]
    out = torch.empty(n, b, dtype=mu.dtype, device=mu.device)
    chunk = max(1, _BLOCK // (n * k))
    for start in range(0, b, chunk):
        out[:, start:start + chunk] = _mixture_root(mu[:, start:start + chunk], s[:, start:start + chunk], qs)
    out = out.to(means.dtype)
    return out[0] if scalar else out


def _mixture_root(mu: Tensor, s: Tensor, qs: Tensor) -> Tensor:
    """x (n, B) with F(x) = q for each q of ``qs`` (n,) and each example's mixture (columns of ``mu``,
    ``s``), by Newton steps on log F(x) - log q (on log(1 - F) above the median: nearly linear in
    the tails, and precise there), safeguarded by bisection of a shrinking bracket (Numerical
    Recipes' ``rtsafe``, vectorised); each (q, example) pair leaves the loop once converged."""
    (k, b), n = mu.shape, qs.shape[0]
    col = torch.arange(b, device=mu.device).repeat(n)  # pair p = (quantile p // b, example p % b)
    qq = qs.repeat_interleave(b)
    upper = qq > 0.5
    log_goal = torch.log(torch.where(upper, 1 - qq, qq))  # the log tail probability to match
    comp = mu[:, col] + s[:, col] * torch.special.ndtri(qq)  # (k, P): each component's q-quantile
    lo, hi, x = comp.amin(0), comp.amax(0), comp.mean(0)
    dx = hi - lo  # the last step, and the one before it (rtsafe's test of a slow Newton step)
    dx_old = dx.clone()
    eps = torch.finfo(mu.dtype).eps
    tol = 4 * eps * s.mean(0)[col]
    log_k, half_log_2pi = math.log(k), 0.5 * math.log(2 * math.pi)
    active = torch.arange(col.shape[0], device=mu.device)
    for _ in range(_MAX_ITERATIONS):
        c, up, xa, loa, hia = col[active], upper[active], x[active], lo[active], hi[active]
        sd = s[:, c]
        z = (xa - mu[:, c]) / sd
        log_tail = torch.logsumexp(torch.special.log_ndtr(torch.where(up, -z, z)), 0) - log_k
        log_pdf = torch.logsumexp(-0.5 * z * z - torch.log(sd), 0) - log_k - half_log_2pi
        g = torch.where(up, log_goal[active] - log_tail, log_tail - log_goal[active])  # increasing, 0 at the root
        loa, hia = torch.where(g < 0, xa, loa), torch.where(g < 0, hia, xa)
        step = g * torch.exp(log_tail - log_pdf)  # g / g'
        newton = xa - step
        ok = torch.isfinite(newton) & (newton >= loa) & (newton <= hia) & (2 * step.abs() <= dx_old[active])
        new = torch.where(g == 0, xa, torch.where(ok, newton, 0.5 * (loa + hia)))
        moved = (new - xa).abs()
        slack = tol[active] + 4 * eps * new.abs()
        x[active], lo[active], hi[active] = new, loa, hia
        dx_old[active], dx[active] = dx[active], moved
        active = active[~((g == 0) | (moved <= slack) | (hia - loa <= slack))]
        if active.numel() == 0:
            break
    return x.view(n, b)


def interval_coverage(target: Tensor, means: Tensor, sigmas: Tensor | float,
                      levels: Iterable[float] = (0.5, 0.9, 0.95)) -> dict[float, float]:
    """Fraction of ``target`` (B,) inside the central ``level`` interval of the Gaussian mixture.

    The interval of level l runs from the mixture's (1 - l)/2 to its (1 + l)/2 quantile
    (:func:`gaussian_mixture_quantiles`). The mixture's CDF F is continuous and strictly
    increasing, so a target y lies inside exactly when (1 - l)/2 <= F(y) <= (1 + l)/2, which is
    what is computed (one CDF per target, no bisection). Returns ``{level: fraction}``; a
    calibrated predictive covers about ``level`` of the targets.

    Example:
        >>> interval_coverage(y_n, means, sigmas, levels=(0.9,))    # means (k, B), y_n (B,)
        {0.9: 0.893}
    """
    lv = _levels(levels, "interval_coverage")
    mu, s, t = _mixture("interval_coverage", means, sigmas, target)
    assert t is not None
    if t.numel() == 0:
        raise UserError("interval_coverage: no targets (B = 0); the coverage of an empty set is undefined")
    u = _mixture_cdf(t, mu, s)
    return {lvl: float(((u >= (1 - lvl) / 2) & (u <= (1 + lvl) / 2)).to(mu.dtype).mean()) for lvl in lv}


def _unit(v: float | Tensor, name: str, positive: bool) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"regression_metrics: {name} must be a number or a 0-d tensor, got {v!r:.80}") from None
    if not math.isfinite(f) or (positive and f <= 0):
        raise UserError(f"regression_metrics: {name} must be a finite number{' > 0' if positive else ''}, got {f}")
    return f


def regression_metrics(
    means: Tensor,
    sigmas: Tensor | float,
    target: Tensor,
    *,
    shift: float | Tensor = 0.0,
    scale: float | Tensor = 1.0,
    levels: Iterable[float] = (0.5, 0.9, 0.95),
) -> dict[str, float]:
    """Regression metrics of k sampled Gaussian regressors, in the target's original units.

    ``means`` (k, B) and ``sigmas`` (as :func:`gaussian_mixture_log_prob`'s) are each sampled
    network's predictive mean and noise sd, and ``target`` (B,) the targets, all in the normalised
    units the network was trained on, y_n = (y - shift) / scale (:class:`bbb.data.Standardizer`:
    ``shift=ys.mean, scale=ys.std``; floats or 0-d tensors). The predictive is the equal-weight
    mixture of the k Gaussians. Returns floats:

    * ``rmse``: root mean squared error of the predictive mean (the mean of the k means), in
      original units (``scale`` times the normalised one; ``shift`` cancels);
    * ``log_likelihood``: the mean over examples of the mixture's log density of the original
      target, = the normalised log density - log(scale); ``nll`` = -log_likelihood;
    * ``coverage_50``, ``coverage_90``, ``coverage_95`` (one per level, named
      ``f"coverage_{round(100 * level)}"``): :func:`interval_coverage`, the same in both units;
    * ``mean_sd``: the mean over examples of the predictive standard deviation in original units,
      from the law of total variance: sqrt(Var_i[means_i] + mean_i[sigmas_i^2]) (the variance
      over the k samples with 1/k).

    Example:
        >>> m = regression_metrics(means, sigma, y_n, shift=ys.mean, scale=ys.std)
        >>> m["rmse"], m["log_likelihood"], m["coverage_95"]
    """
    fn = "regression_metrics"
    lv = _levels(levels, fn)
    names = [f"coverage_{round(100 * lvl)}" for lvl in lv]
    if len(set(names)) != len(names):
        raise UserError(f"{fn}: levels {lv} give the same coverage key twice ({names}); use distinct percentages")
    _unit(shift, "shift", positive=False)  # shift cancels in every metric; checked all the same
    sc = _unit(scale, "scale", positive=True)
    mu, s, t = _mixture(fn, means, sigmas, target)
    assert t is not None
    if t.numel() == 0:
        raise UserError(f"{fn}: no targets (B = 0); the metrics of an empty set are undefined")
    rmse = float(torch.sqrt(((mu.mean(0) - t) ** 2).mean())) * sc
    log_lik = float(gaussian_mixture_log_prob(t, mu, s).mean()) - math.log(sc)
    coverage = interval_coverage(t, mu, s, lv)
    sd = torch.sqrt(mu.var(0, unbiased=False) + (s * s).mean(0))
    out = {"rmse": rmse, "log_likelihood": log_lik, "nll": -log_lik}
    out.update({name: coverage[lvl] for name, lvl in zip(names, lv)})
    out["mean_sd"] = float(sd.mean()) * sc
    return out


def _check_logits(logits: Tensor, fn: str) -> None:
    """Logits (k, B, C): a tensor of floats with at least one sample and one class, no NaN."""
    if not isinstance(logits, Tensor):
        raise UserError(f"{fn}: expected a tensor of logits (k, B, C), got {type(logits).__name__}")
    if logits.dim() < 2:
        raise UserError(f"{fn}: expected logits (k, B, C) with a leading sample dimension, "
                        f"got shape {tuple(logits.shape)}")
    if logits.shape[0] == 0 or logits.shape[-1] == 0:
        raise UserError(f"{fn}: empty logits of shape {tuple(logits.shape)} (need >= 1 sample and >= 1 class)")
    if not logits.is_floating_point():
        raise UserError(f"{fn}: logits must be floating point, got {logits.dtype}")
    if logits.numel() and bool((torch.isnan(logits) | (logits == math.inf)).any()):
        raise UserError(f"{fn}: logits contain NaN or +inf")


def _prob_tolerance(dtype: torch.dtype) -> float:
    """Round-off allowed on [0, 1] and on row sums (probabilities may have passed through bf16)."""
    return 1e-2 if dtype in (torch.float32, torch.float64) else 3e-2


def _check_probs(probs: Tensor, fn: str) -> None:
    """Probabilities (..., C): floats in [0, 1] whose rows sum to 1 (logits are refused)."""
    if not isinstance(probs, Tensor):
        raise UserError(f"{fn}: expected a tensor of probabilities, got {type(probs).__name__}")
    if probs.dim() < 1 or probs.shape[-1] == 0:
        raise UserError(f"{fn}: empty probabilities of shape {tuple(probs.shape)} (need >= 1 class)")
    if not probs.is_floating_point():
        raise UserError(f"{fn}: probabilities must be floating point, got {probs.dtype}")
    if probs.numel() == 0:
        return
    tol = _prob_tolerance(probs.dtype)
    lo, hi = float(probs.min()), float(probs.max())
    if math.isnan(lo) or math.isnan(hi) or lo < -tol or hi > 1 + tol:
        raise UserError(
            f"{fn}: probabilities must be in [0, 1], got values in [{lo:.4g}, {hi:.4g}]; if these are "
            "logits, pass torch.softmax(logits, -1) (or predictive_probs(logits) for k samples)")
    worst = float((probs.sum(-1, dtype=torch.float64) - 1).abs().max())
    if worst > tol:
        raise UserError(f"{fn}: each row of probabilities must sum to 1, but one is off by {worst:.3g}; "
                        "normalise them (e.g. torch.softmax(logits, -1))")


def predictive_probs(logits: Tensor) -> Tensor:
    """Mean over samples of the softmax: (k, B, C) -> (B, C)."""
    _check_logits(logits, "predictive_probs")
    return torch.softmax(logits, dim=-1).mean(0)


def entropy(probs: Tensor) -> Tensor:
    """Entropy in nats along the last dim (0 log 0 = 0)."""
    _check_probs(probs, "entropy")
    return -torch.special.xlogy(probs, probs).sum(-1)


def predictive_entropy(logits: Tensor) -> Tensor:
    return entropy(predictive_probs(logits))


def expected_entropy(logits: Tensor) -> Tensor:
    """Mean over samples of each network's entropy (aleatoric part)."""
    _check_logits(logits, "expected_entropy")
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1).mean(0)  # 0 log 0 = 0


def mutual_information(logits: Tensor) -> Tensor:
    """Predictive entropy minus expected entropy (epistemic part), clamped at 0 against round-off."""
    return (predictive_entropy(logits) - expected_entropy(logits)).clamp_min(0.0)


def _check(probs: Tensor, labels: Tensor, fn: str = "metric") -> None:
    """Probabilities (B, C) and class indices (B,): same B >= 1, labels in 0..C-1."""
    if not isinstance(probs, Tensor) or not isinstance(labels, Tensor):
        raise UserError(f"{fn}: expected tensors probs (B, C) and labels (B,), got "
                        f"{type(probs).__name__} and {type(labels).__name__}")
    if probs.dim() != 2 or labels.dim() != 1 or labels.shape[0] != probs.shape[0]:
        raise UserError(f"{fn}: expected probs (B, C) and labels (B,), got {tuple(probs.shape)} "
                        f"and {tuple(labels.shape)}")
    if probs.shape[0] == 0:
        raise UserError(f"{fn}: no examples (probs of shape {tuple(probs.shape)}); "
                        "the metric of an empty set is undefined")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise UserError(f"{fn}: labels must be integer class indices, got {labels.dtype}")
    _check_probs(probs, fn)
    c = probs.shape[1]
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= c:
        raise UserError(f"{fn}: labels must be class indices in 0..{c - 1}, got values in {lo}..{hi}")


def reliability_bins(probs: Tensor, labels: Tensor, num_bins: int = 15) -> dict[str, Tensor]:
    """Equal-width confidence bins: per bin the count, mean confidence and accuracy."""
    _check(probs, labels, "reliability_bins")
    if isinstance(num_bins, bool) or int(num_bins) != num_bins or num_bins < 1:
        raise UserError(f"num_bins must be >= 1, got {num_bins}")
    conf, pred = probs.max(-1)
    correct = (pred == labels).to(probs.dtype)
    # bin b holds confidences in (b/n, (b+1)/n]; confidence 0 falls in bin 0
    idx = (torch.ceil(conf * num_bins) - 1).clamp(0, num_bins - 1).long()
    count = torch.zeros(num_bins, dtype=probs.dtype, device=probs.device).index_add_(0, idx, torch.ones_like(conf))
    conf_sum = torch.zeros_like(count).index_add_(0, idx, conf)
    acc_sum = torch.zeros_like(count).index_add_(0, idx, correct)
    safe = count.clamp_min(1)
    edges = torch.linspace(0, 1, num_bins + 1, dtype=probs.dtype, device=probs.device)
    return {"count": count, "confidence": conf_sum / safe, "accuracy": acc_sum / safe, "edges": edges}


def expected_calibration_error(probs: Tensor, labels: Tensor, num_bins: int = 15) -> float:
    """ECE = sum_b (n_b / N) |accuracy_b - confidence_b| over equal-width confidence bins."""
    _check(probs, labels, "expected_calibration_error")
    bins = reliability_bins(probs, labels, num_bins)
    n = bins["count"].sum()
    return float((bins["count"] / n * (bins["accuracy"] - bins["confidence"]).abs()).sum())


def negative_log_likelihood(probs: Tensor, labels: Tensor, eps: float = 1e-12) -> float:
    """Mean -log p(y | x) of the predictive distribution (probabilities clamped at ``eps``)."""
    _check(probs, labels, "negative_log_likelihood")
    return float(-torch.log(probs.gather(1, labels[:, None]).clamp_min(eps)).mean())


def brier_score(probs: Tensor, labels: Tensor) -> float:
    """Mean over examples of sum_c (p_c - 1[y = c])^2 (0 is perfect, 2 the worst)."""
    _check(probs, labels, "brier_score")
    onehot = torch.nn.functional.one_hot(labels, probs.shape[-1]).to(probs.dtype)
    return float(((probs - onehot) ** 2).sum(-1).mean())


def error_rate(probs: Tensor, labels: Tensor) -> float:
    _check(probs, labels, "error_rate")
    return float((probs.argmax(-1) != labels).to(torch.float64).mean())


def _scores(negative: Tensor, positive: Tensor, fn: str) -> tuple[Tensor, Tensor]:
    neg = torch.as_tensor(negative).detach().flatten().double().cpu()
    pos = torch.as_tensor(positive).detach().flatten().double().cpu()
    if neg.numel() == 0 or pos.numel() == 0:
        raise UserError(f"{fn} needs at least one score in each group")
    if not bool(torch.isfinite(neg).all() and torch.isfinite(pos).all()):
        raise UserError(f"{fn}: scores must be finite (found NaN or inf)")
    return neg, pos


def auroc(scores_negative: Tensor, scores_positive: Tensor) -> float:
    """Area under the ROC curve for "positive scores higher" (Mann-Whitney U, ties count 1/2)."""
    neg, pos = _scores(scores_negative, scores_positive, "AUROC")
    allv = torch.cat([neg, pos])
    # average ranks with ties
    order = torch.argsort(allv, stable=True)
    sorted_v = allv[order]
    ranks = torch.empty_like(allv)
    uniq, inverse, counts = torch.unique_consecutive(sorted_v, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    avg_rank = ends - (counts.double() - 1) / 2  # 1-based average rank of each tie group
    ranks[order] = avg_rank[inverse]
    n_pos, n_neg = pos.numel(), neg.numel()
    u = ranks[neg.numel():].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def aupr(scores_negative: Tensor, scores_positive: Tensor) -> float:
    """Area under the precision-recall curve (average precision) with the positives as targets."""
    neg, pos = _scores(scores_negative, scores_positive, "AUPR")
    scores = torch.cat([pos, neg])
    target = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    order = torch.argsort(scores, descending=True, stable=True)
    s, t = scores[order], target[order]
    tp = torch.cumsum(t, 0)
    fp = torch.cumsum(1 - t, 0)
    # evaluate only at the last index of each group of tied scores
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    tp, fp = tp[last], fp[last]
    precision = tp / (tp + fp)
    recall = tp / pos.numel()
    prev = torch.cat([torch.zeros(1, dtype=recall.dtype), recall[:-1]])
    return float(((recall - prev) * precision).sum())


def regression_uncertainty(means: Tensor, noise_sigma: Tensor | float | None = None) -> dict[str, Tensor]:
    """Split the predictive variance of k sampled regressors into epistemic and aleatoric parts.

    ``means`` (k, B): each network's mean prediction; ``noise_sigma`` scalar or (k, B): each
    network's noise standard deviation. Returns mean, epistemic variance Var_w[mean],
    aleatoric variance E_w[sigma^2] and the total (their sum, the law of total variance).
    """
    if means.dim() < 2:
        raise UserError("means must have a leading sample dimension (k, B)")
    if means.shape[0] == 0:
        raise UserError(f"means of shape {tuple(means.shape)} hold no samples (k = 0)")
    epistemic = means.var(0, unbiased=False)
    if noise_sigma is None:
        aleatoric = torch.zeros_like(epistemic)
    else:
        s = torch.as_tensor(noise_sigma, dtype=means.dtype, device=means.device)
        try:
            fits = torch.broadcast_shapes(s.shape, means.shape) == means.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise UserError(f"noise_sigma must be a scalar or shaped like means {tuple(means.shape)}, "
                            f"got {tuple(s.shape)}")
        aleatoric = (s * s).expand_as(means).mean(0) if s.dim() else (s * s).expand_as(epistemic)
    return {"mean": means.mean(0), "epistemic": epistemic, "aleatoric": aleatoric,
            "total": epistemic + aleatoric, "std": torch.sqrt(epistemic + aleatoric)}
