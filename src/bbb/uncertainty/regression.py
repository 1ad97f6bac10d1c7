"""Regression: the predictive of k sampled networks with Gaussian noise, ``means`` (k, B) and
``sigmas``, is their equal-weight mixture (:func:`gaussian_mixture_log_prob`,
:func:`gaussian_mixture_quantiles`, :func:`interval_coverage`); :func:`regression_metrics` reports
RMSE, log-likelihood and interval coverage in the target's original units."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from ..distributions import normal_log_prob
from ..errors import UserError

__all__ = ["CALIBRATION_LEVELS", "coverage_gap", "gaussian_mixture_log_prob", "gaussian_mixture_quantiles",
           "interval_calibration", "interval_coverage", "regression_metrics", "regression_uncertainty"]

# Regression: the equal-weight mixture of k sampled Gaussians
# --------------------------------------------------------------------------------------------

#: iterations of :func:`gaussian_mixture_quantiles` at most (safeguarded Newton steps take a handful;
#: plain bisection of the bracket reaches float64's resolution within 64)
_MAX_ITERATIONS = 100
#: elements of one (q, k, B) block of that search (bounds its memory)
_BLOCK = 1 << 22


def _work_dtype(t: Tensor) -> torch.dtype:
    return torch.float32 if t.device.type == "mps" else torch.float64  # (MPS has no float64)


def _per_component(s: Tensor, k: int, dims: int = 2) -> Tensor:
    """Standard deviations ``s`` as they meet means (k, B, ...) of ``dims`` dimensions: a (k,) tensor
    is one per sampled network, a (k, 1, ...) column (also when k == B); any other shape broadcasts
    as it is."""
    return s.reshape(k, *[1] * (dims - 1)) if s.dim() == 1 and s.shape[0] == k else s


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
    s = _per_component(s, k)
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
    lp = normal_log_prob(t, mu, s)
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


#: the central intervals of :func:`interval_calibration`: 5% to 95% in steps of 5, and 99%
CALIBRATION_LEVELS = tuple(round(0.05 * i, 2) for i in range(1, 20)) + (0.99,)


def interval_calibration(target: Tensor, means: Tensor, sigmas: Tensor | float,
                         levels: Iterable[float] = CALIBRATION_LEVELS) -> dict[str, Any]:
    """A regression's calibration curve (Kuleshov et al., ICML 2018, with central intervals):
    the fraction of ``target`` inside the mixture's central interval of each level
    (:func:`interval_coverage`; arguments as its). Returns ``levels``, ``coverage`` (lists, one
    per level) and ``error``: the mean over the levels of |coverage - level| (0 for a calibrated
    predictive; too narrow intervals cover less than their level, too wide ones more)."""
    cov = interval_coverage(target, means, sigmas, levels)
    lv = list(cov)
    return {"levels": lv, "coverage": [cov[v] for v in lv], "error": coverage_gap(lv, cov.values())["error"]}


def coverage_gap(levels: Iterable[float], coverage: Iterable[float]) -> dict[str, float]:
    """How far central intervals' coverage lies from their levels, ``coverage[i]`` the share of
    targets inside the interval of ``levels[i]`` (as :func:`interval_calibration` or
    :func:`regression_metrics` give them): ``error``, the mean of |coverage - level| (0 for a
    calibrated predictive), and ``bias``, the mean of coverage - level (above 0 the intervals are
    too wide, underconfident; below 0 too narrow, overconfident).

    Example:
        >>> coverage_gap([0.5, 0.9, 0.95], [0.44, 0.81, 0.87])
        {'error': 0.0766..., 'bias': -0.0766...}
    """
    try:
        lv, cov = [float(v) for v in levels], [float(c) for c in coverage]
    except (TypeError, ValueError):
        raise UserError(f"coverage_gap: levels and coverage must be sequences of numbers, one coverage per level, "
                        f"got {levels!r:.80} and {coverage!r:.80}") from None
    if not lv or len(lv) != len(cov):
        raise UserError(f"coverage_gap: one coverage per level is needed, got {len(lv)} level(s) and {len(cov)} "
                        "coverage(s)")
    if not all(0.0 < v < 1.0 for v in lv) or not all(0.0 <= c <= 1.0 for c in cov):
        raise UserError(f"coverage_gap: levels must lie in (0, 1) and coverages in [0, 1], got {lv} and {cov}")
    return {"error": sum(abs(c - v) for v, c in zip(lv, cov)) / len(lv),
            "bias": sum(c - v for v, c in zip(lv, cov)) / len(lv)}


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
    network's predictive mean and noise sd, and ``target`` (B,) the targets; a network's output
    with one unit as :func:`~bbb.uncertainty.predict` returns it, means (k, B, 1), is taken as
    (k, B) (and sigmas (k, B, 1), a target (B, 1) likewise). All in the normalised
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
        >>> regression_metrics(predict(net, x_test, num_samples=20), sigma, y_test)  # (k, B, 1)
    """
    fn = "regression_metrics"
    if isinstance(means, Tensor) and means.dim() == 3:
        if means.shape[-1] != 1:
            raise UserError(f"{fn}: means of shape {tuple(means.shape)}: a (k, B, 1) output of one unit or (k, B) "
                            "means; a heteroscedastic network's (k, B, 2) output splits into means and sigmas "
                            "first (bbb.HeteroscedasticGaussian().split(outputs))")
        means = means[..., 0]
        if isinstance(sigmas, Tensor) and sigmas.dim() == 3 and sigmas.shape[-1] == 1:
            sigmas = sigmas[..., 0]
        if isinstance(target, Tensor) and target.dim() == 2 and target.shape[-1] == 1:
            target = target[:, 0]
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



def regression_uncertainty(means: Tensor, noise_sigma: Tensor | float | None = None) -> dict[str, Tensor]:
    """Split the predictive variance of k sampled regressors into epistemic and aleatoric parts.

    ``means`` (k, B): each network's mean prediction; ``noise_sigma``: each network's noise
    standard deviation, a number, a (k,) tensor (one per network, also when k == B, as
    :func:`gaussian_mixture_log_prob` reads it), (k, B) or a shape that broadcasts to (k, B).
    Returns mean, epistemic variance Var_w[mean], aleatoric variance E_w[sigma^2] and the total
    (their sum, the law of total variance).
    """
    if not isinstance(means, Tensor) or not means.is_floating_point():
        got = means.dtype if isinstance(means, Tensor) else type(means).__name__
        raise UserError(f"regression_uncertainty: means must be a floating-point tensor (k, B), got {got}")
    if means.dim() < 2:
        raise UserError("means must have a leading sample dimension (k, B)")
    if means.shape[0] == 0:
        raise UserError(f"means of shape {tuple(means.shape)} hold no samples (k = 0)")
    epistemic = means.var(0, unbiased=False)
    if noise_sigma is None:
        aleatoric = torch.zeros_like(epistemic)
    else:
        try:
            given = torch.as_tensor(noise_sigma, dtype=means.dtype, device=means.device)
        except (TypeError, ValueError, RuntimeError):
            raise UserError(f"regression_uncertainty: noise_sigma must be a number or a tensor of standard deviations, "
                            f"got {type(noise_sigma).__name__}") from None
        s = _per_component(given, means.shape[0], means.dim())
        try:
            fits = torch.broadcast_shapes(s.shape, means.shape) == means.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise UserError(f"noise_sigma must be a scalar, one per sampled network ({means.shape[0]},) or shaped "
                            f"like means {tuple(means.shape)}, got {tuple(given.shape)}")
        aleatoric = (s * s).expand_as(means).mean(0) if s.dim() else (s * s).expand_as(epistemic)
    return {"mean": means.mean(0), "epistemic": epistemic, "aleatoric": aleatoric,
            "total": epistemic + aleatoric, "std": torch.sqrt(epistemic + aleatoric)}

