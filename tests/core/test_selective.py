"""Selective prediction (bbb.uncertainty.selective) against brute-force float64 computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bbb import uncertainty as U
from bbb.errors import UserError


def _brute_curve(u: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Risk at m = 1..N averaged over every order of the inputs sorted by uncertainty."""
    n = len(u)
    total = np.zeros(n)
    count = 0
    for perm in itertools.permutations(range(n)):
        if all(u[perm[i]] <= u[perm[i + 1]] for i in range(n - 1)):
            kept = e[list(perm)]
            total += np.cumsum(kept) / np.arange(1, n + 1)
            count += 1
    return total / count


def _brute_threshold(u: np.ndarray, e: np.ndarray, target: float) -> float:
    best, best_cov = -math.inf, -1
    for t in np.unique(u):
        kept = u <= t
        if e[kept].mean() <= target + 1e-12 and kept.sum() > best_cov:
            best, best_cov = float(t), int(kept.sum())
    return best


def test_curve_without_ties_is_the_running_mean_of_sorted_errors():
    rng = np.random.default_rng(0)
    u = rng.random(300)
    e = (rng.random(300) < 0.2 + 0.6 * u).astype(float)
    cov, risk = U.risk_coverage(torch.tensor(u), torch.tensor(e))
    sorted_e = e[np.argsort(u)]
    np.testing.assert_allclose(risk.numpy(), np.cumsum(sorted_e) / np.arange(1, 301), rtol=0, atol=1e-12)
    np.testing.assert_allclose(cov.numpy(), np.arange(1, 301) / 300)
    assert risk.dtype == torch.float64
    assert U.aurc(u, e) == pytest.approx(float(np.mean(np.cumsum(sorted_e) / np.arange(1, 301))), abs=1e-12)
    # an informative ranking has a lower AURC than the overall error (a chance ranking's)
    assert U.aurc(u, e) < e.mean()
    assert U.risk_at_coverage(u, e, 0.9) == pytest.approx(sorted_e[:270].mean(), abs=1e-12)
    assert U.risk_at_coverage(u, e, 1.0) == pytest.approx(e.mean(), abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_ties_equal_the_average_over_every_order(seed):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 3, 7).astype(float)          # few values: many ties
    e = rng.random(7) if seed % 2 else (rng.random(7) < 0.5).astype(float)  # losses or 0/1
    _, risk = U.risk_coverage(u, e)
    brute = _brute_curve(u, e)
    np.testing.assert_allclose(risk.numpy(), brute, rtol=0, atol=1e-12)
    assert U.aurc(u, e) == pytest.approx(brute.mean(), abs=1e-12)
    # the stored order does not matter
    p = rng.permutation(7)
    np.testing.assert_allclose(U.risk_coverage(u[p], e[p])[1].numpy(), risk.numpy(), atol=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_threshold_is_the_largest_coverage_meeting_the_target(seed):
    rng = np.random.default_rng(seed)
    n = 60
    u = np.round(rng.random(n), 1)  # ties
    e = (rng.random(n) < 0.1 + 0.5 * u).astype(float)
    for target in (0.0, 0.05, 0.1, 0.2, 0.3, 1.0):
        t = U.threshold_for_target_error(u, e, target)
        assert t == _brute_threshold(u, e, target)
        kept = u <= t
        assert not kept.any() or e[kept].mean() <= target + 1e-12


def test_threshold_edge_cases():
    u = torch.tensor([0.1, 0.2, 0.3, 0.4])
    # the most certain input is wrong: nothing can be kept
    assert U.threshold_for_target_error(u, torch.tensor([1.0, 0, 0, 0]), 0.2) == -math.inf
    # all right: keep everything seen; a more uncertain new input is referred
    assert U.threshold_for_target_error(u, torch.zeros(4), 0.0) == pytest.approx(0.4)
    # the risk is not monotone: 1 wrong of 4 kept meets 0.25 though 1 of 2 does not
    assert U.threshold_for_target_error(u, torch.tensor([0.0, 1, 0, 0]), 0.25) == pytest.approx(0.4)
    # a tie group is kept or referred whole
    assert U.threshold_for_target_error([0.1, 0.2, 0.2], [0.0, 0.0, 1.0], 0.34) == pytest.approx(0.2)
    assert U.threshold_for_target_error([0.1, 0.2, 0.2], [0.0, 0.0, 1.0], 0.3) == pytest.approx(0.1)


@pytest.mark.parametrize("call", [
    lambda: U.risk_coverage([], []),
    lambda: U.risk_coverage([0.1, 0.2], [1.0]),
    lambda: U.aurc([float("nan"), 0.2], [1.0, 0.0]),
    lambda: U.aurc([0.1, 0.2], [1.0, float("inf")]),
    lambda: U.risk_at_coverage([0.1], [1.0], 0.0),
    lambda: U.risk_at_coverage([0.1], [1.0], 1.5),
    lambda: U.threshold_for_target_error([0.1], [1.0], -0.1),
    lambda: U.threshold_for_target_error([0.1], [1.0], float("nan")),
])
def test_bad_inputs_are_one_line_errors(call):
    with pytest.raises(UserError) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("number", [np.float32(0.5), torch.tensor(0.5), 0.5])
def test_a_numpy_or_tensor_number_is_a_number(number):
    # np.float32(0.5) was "coverage must be a number in (0, 1], got np.float32(0.5)"
    u, e = [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 1.0, 1.0]
    assert U.risk_at_coverage(u, e, number) == 0.0
    assert U.threshold_for_coverage(u, number) == pytest.approx(0.2)
    assert U.threshold_for_target_error(u, e, number) == pytest.approx(0.4)
    with pytest.raises(UserError, match=r"coverage must be a number in \(0, 1\]"):
        U.threshold_for_coverage(u, number * 3)
