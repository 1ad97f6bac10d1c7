"""The counter-based generator: a pure function of (seed, counter), and N(0, 1) by the usual checks."""

from __future__ import annotations

import math

import pytest
import torch

from bbb.random import counter_keys, normal

N = 1 << 20


@pytest.fixture(scope="module")
def z() -> torch.Tensor:
    return normal(N, seed=7, counter=3, dtype=torch.float64)


def test_same_seed_and_counter_give_the_same_numbers_others_differ():
    a = normal(1001, 1, 5)
    assert torch.equal(a, normal(1001, 1, 5))
    assert a.shape == (1001,)
    assert not torch.equal(a, normal(1001, 1, 6))
    assert not torch.equal(a, normal(1001, 2, 5))
    # a prefix of a longer draw is not required, but the first half's pairs are shared
    assert torch.isfinite(a).all()


def test_independent_of_the_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = normal(100_003, 3, 9)
        torch.set_num_threads(2)
        two = normal(100_003, 3, 9)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_moments_match_the_standard_normal(z):
    se = 1.0 / math.sqrt(N)
    assert abs(z.mean().item()) < 5 * se
    assert abs(z.std().item() - 1.0) < 5 * se * math.sqrt(0.5)
    m4 = (z**4).mean().item()
    assert abs(m4 - 3.0) < 5 * math.sqrt(96.0 / N)  # var of z^4 is 105 - 9 = 96
    assert abs((z**3).mean().item()) < 5 * math.sqrt(15.0 / N)


def test_no_serial_correlation_within_or_between_draws(z):
    se = 1.0 / math.sqrt(N)
    for lag in (1, 2, N // 2):  # N // 2: the two numbers made from one Box-Muller pair
        c = (z[:-lag] * z[lag:]).mean().item()
        assert abs(c) < 5 * se * math.sqrt(N / (N - lag)), (lag, c)
    nxt = normal(N, seed=7, counter=4, dtype=torch.float64)
    assert abs((z * nxt).mean().item()) < 5 * se
    other_seed = normal(N, seed=8, counter=3, dtype=torch.float64)
    assert abs((z * other_seed).mean().item()) < 5 * se


def test_tail_quantiles_match_the_standard_normal(z):
    q = torch.tensor([0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999], dtype=torch.float64)
    got = torch.quantile(z[: 1 << 19], q)
    ref = torch.distributions.Normal(0.0, 1.0).icdf(q)
    # sd of a sample quantile: sqrt(q (1 - q) / n) / pdf(x_q)
    pdf = torch.exp(-0.5 * ref**2) / math.sqrt(2 * math.pi)
    tol = 5 * torch.sqrt(q * (1 - q) / (1 << 19)) / pdf
    assert ((got - ref).abs() < tol).all(), (got, ref)
    assert z.abs().max().item() < 6.0


def test_keys_are_validated():
    with pytest.raises(ValueError):
        counter_keys(-1, 0)
    assert counter_keys(0, 0) != counter_keys(0, 1)
