"""Selective prediction: keep the most certain predictions, hand the rest to a person.

Given a per-input ``uncertainty`` (e.g. predictive entropy or mutual information; larger means
less certain) and a per-input ``errors`` (0/1 for classification, or any finite per-input loss
such as a squared error for regression), the inputs are ranked from the most to the least
certain and kept in that order.

* :func:`risk_coverage` gives the risk-coverage curve: for m = 1..N kept inputs, the coverage
  m / N and the *risk*, the mean error among the m kept.
* :func:`aurc` is the area under that curve (the mean of the N risks; lower is better).
* :func:`risk_at_coverage` is the risk when a given fraction of the inputs is kept.
* :func:`threshold_for_target_error` chooses the uncertainty threshold that keeps the most
  inputs while the error among the kept stays at or below a target (e.g. on a validation set);
  new inputs whose uncertainty is above it are referred.
* :func:`threshold_for_coverage` chooses the threshold that keeps a given share of the inputs
  (:data:`DEFAULT_COVERAGE`, 80%, is ``bbb predict``'s default). A coverage target is always
  reachable; an error target is not where the noise is irreducible (a regression's RMSE cannot
  fall below the noise sd, whatever is kept), which is why selective prediction is usually
  stated at a coverage (the risk at 80% or 90% kept).

Ties: inputs of equal uncertainty cannot be told apart, so the curve does not depend on the
order in which they happen to be stored. Where m stops inside a group of tied inputs, the risk
is its expectation over the orders of that group (the group counts with its mean error), so
the curve, the AURC and the risk at a coverage are the same for every order of the inputs. A
*threshold*, by contrast, keeps or refers a whole tie group, so
:func:`threshold_for_target_error` considers only the coverages that a threshold can reach.

All computation is in float64 on the CPU.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError, check_float

__all__ = ["DEFAULT_COVERAGE", "risk_coverage", "aurc", "risk_at_coverage", "threshold_for_coverage",
           "threshold_for_target_error"]

#: the share of the inputs that ``bbb predict`` keeps by default (the rest are referred)
DEFAULT_COVERAGE = 0.8


def _coverage(value: Any, fn: str) -> float:
    """``value`` as a float in (0, 1] (a numpy scalar or a one-element tensor too), else a one-line error."""
    v = check_float(f"{fn}: coverage", value, 0.0, above=True)
    if v > 1:
        raise UserError(f"{fn}: coverage must be a number in (0, 1], got {value!r}")
    return v


def _inputs(uncertainty: Any, errors: Any, fn: str) -> tuple[Tensor, Tensor]:
    """Both as flat float64 CPU tensors of one length >= 1, finite."""
    try:
        u = torch.as_tensor(uncertainty).detach().flatten().to("cpu", torch.float64)
        e = torch.as_tensor(errors).detach().flatten().to("cpu", torch.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise UserError(f"{fn}: uncertainty and errors must be numeric arrays or tensors ({exc})") from None
    if u.numel() != e.numel():
        raise UserError(f"{fn}: uncertainty has {u.numel()} values but errors has {e.numel()}; "
                        "pass one of each per input")
    if u.numel() == 0:
        raise UserError(f"{fn}: no inputs (the risk of an empty set is undefined)")
    if not bool(torch.isfinite(u).all()):
        raise UserError(f"{fn}: uncertainty must be finite (found NaN or inf)")
    if not bool(torch.isfinite(e).all()):
        raise UserError(f"{fn}: errors must be finite (found NaN or inf)")
    return u, e


def _sorted(u: Tensor, e: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sort by uncertainty (most certain first); per tie group its values, sizes and error sums."""
    order = torch.argsort(u, stable=True)
    su, se = u[order], e[order]
    values, inverse, counts = torch.unique_consecutive(su, return_inverse=True, return_counts=True)
    sums = torch.zeros(values.numel(), dtype=torch.float64).index_add_(0, inverse, se)
    return values, inverse, counts, sums


def risk_coverage(uncertainty: Any, errors: Any) -> tuple[Tensor, Tensor]:
    """The risk-coverage curve: ``(coverage, risk)``, each (N,) float64.

    ``coverage[m-1] = m / N`` and ``risk[m-1]`` is the mean error among the m most certain
    inputs (ties in expectation over their orders, see the module's notes). ``risk[-1]`` is
    the mean error of all inputs.
    """
    u, e = _inputs(uncertainty, errors, "risk_coverage")
    n = u.numel()
    _, inverse, counts, sums = _sorted(u, e)
    ends = torch.cumsum(counts, 0)
    starts = ends - counts
    before = torch.cumsum(sums, 0) - sums  # error of the groups entirely kept before each group
    m = torch.arange(1, n + 1, dtype=torch.float64)
    g = inverse
    kept_in_group = m - starts[g].double()
    expected = before[g] + kept_in_group * sums[g] / counts[g].double()
    return m / n, expected / m


def aurc(uncertainty: Any, errors: Any) -> float:
    """Area under the risk-coverage curve: the mean over m = 1..N of the risk among the m most
    certain inputs (Geifman et al. 2019). Lower is better; a ranking no better than chance gives
    about the overall mean error."""
    _, risk = risk_coverage(uncertainty, errors)
    return float(risk.mean())


def risk_at_coverage(uncertainty: Any, errors: Any, coverage: float) -> float:
    """The mean error among the ceil(coverage * N) most certain inputs (at least one)."""
    coverage = _coverage(coverage, "risk_at_coverage")
    _, risk = risk_coverage(uncertainty, errors)
    n = risk.numel()
    m = min(n, max(1, math.ceil(coverage * n - 1e-9)))
    return float(risk[m - 1])


def threshold_for_target_error(uncertainty: Any, errors: Any, target_error: float) -> float:
    """The uncertainty threshold that keeps the most inputs with mean error <= ``target_error``.

    A threshold t keeps the inputs with ``uncertainty <= t`` and refers the rest, so it keeps
    or refers each group of tied inputs whole. Among the distinct uncertainty values t, this
    returns the one whose kept inputs are the most numerous while their mean error is at most
    ``target_error`` (up to 1e-12 of round-off; the risk need not grow with the coverage, so every t is checked, not
    just the first that fails). When even the most certain group errs more than the target,
    it returns ``-inf``: every input is referred. When all inputs meet the target, it returns
    the largest uncertainty seen, so a new input more uncertain than all of them is referred.
    """
    target_error = check_float("threshold_for_target_error: target_error", target_error, 0.0)
    u, e = _inputs(uncertainty, errors, "threshold_for_target_error")
    values, _, counts, sums = _sorted(u, e)
    risk = torch.cumsum(sums, 0) / torch.cumsum(counts, 0).double()
    ok = torch.nonzero(risk <= target_error + 1e-12).flatten()
    if ok.numel() == 0:
        return -math.inf
    return float(values[int(ok[-1])])


def threshold_for_coverage(uncertainty: Any, coverage: float) -> float:
    """The uncertainty threshold that keeps the largest share of the inputs that is at most
    ``coverage`` (in (0, 1]): inputs with ``uncertainty <= t`` are kept, the rest referred.

    A threshold keeps or refers each group of tied inputs whole, so the share kept is the
    largest one a threshold can reach without exceeding ``coverage`` (up to 1e-12 of round-off).
    When even the most certain tie group is a larger share, it returns ``-inf``: every input is
    referred. ``coverage`` 1 returns the largest uncertainty seen, so a new input more uncertain
    than all of them is referred.
    """
    coverage = _coverage(coverage, "threshold_for_coverage")
    u, _ = _inputs(uncertainty, uncertainty, "threshold_for_coverage")
    values, _, counts, _ = _sorted(u, u)
    share = torch.cumsum(counts, 0).double() / u.numel()
    ok = torch.nonzero(share <= coverage + 1e-12).flatten()
    if ok.numel() == 0:
        return -math.inf
    return float(values[int(ok[-1])])
