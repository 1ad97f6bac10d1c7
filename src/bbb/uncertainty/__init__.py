"""Predictive uncertainty and calibration from Monte Carlo samples.

Conventions: ``logits`` are (k, B, C), one slice per sampled network; ``probs`` are (B, C)
predictive probabilities. The predictive distribution averages *probabilities*, never
log-probabilities (the latter is a geometric mean, a known peer bug).

Entropy decomposition (all in nats): predictive entropy H[E_w p(y|x,w)] = expected entropy
E_w H[p(y|x,w)] (aleatoric) + mutual information I[y; w | x] (epistemic).

Regression: k sampled networks with Gaussian noise give ``means`` (k, B) and ``sigmas``; the
predictive is their equal-weight mixture (:func:`gaussian_mixture_log_prob`,
:func:`gaussian_mixture_quantiles`, :func:`interval_coverage`, :func:`interval_calibration`: the
calibration curve; :func:`coverage_gap`: its error and sign), and :func:`regression_metrics`
(or :func:`evaluate` with ``likelihood=``) reports RMSE, log-likelihood and interval coverage in
the target's original units.

The functions live in :mod:`~bbb.uncertainty.prediction` (``predict``, ``evaluate``),
:mod:`~bbb.uncertainty.classification`, :mod:`~bbb.uncertainty.regression` and
:mod:`~bbb.uncertainty.selective` (risk-coverage curve, AURC, the threshold for a coverage or a
target error).
"""

from __future__ import annotations

from .classification import (
    NLL_FLOOR,
    aupr,
    auroc,
    brier_score,
    entropy,
    error_rate,
    expected_calibration_error,
    expected_entropy,
    mutual_information,
    negative_log_likelihood,
    predictive_entropy,
    predictive_log_likelihood,
    predictive_probs,
    reliability_bins,
)
from .prediction import evaluate, predict
from .regression import (
    CALIBRATION_LEVELS,
    coverage_gap,
    gaussian_mixture_log_prob,
    gaussian_mixture_quantiles,
    interval_calibration,
    interval_coverage,
    regression_metrics,
    regression_uncertainty,
)
from .selective import (
    aurc,
    risk_at_coverage,
    risk_coverage,
    threshold_for_coverage,
    threshold_for_target_error,
)

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
    "NLL_FLOOR",
    "predictive_log_likelihood",
    "brier_score",
    "error_rate",
    "auroc",
    "aupr",
    "regression_uncertainty",
    "gaussian_mixture_log_prob",
    "gaussian_mixture_quantiles",
    "CALIBRATION_LEVELS",
    "interval_calibration",
    "coverage_gap",
    "interval_coverage",
    "regression_metrics",
    "risk_coverage",
    "aurc",
    "risk_at_coverage",
    "threshold_for_coverage",
    "threshold_for_target_error",
]

