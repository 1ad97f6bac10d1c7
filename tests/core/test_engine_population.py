"""The fused engine on a population (:class:`bbb.nn.BayesPopulation`: K networks batched on a member
dimension), what ``bench/bench_population.py`` times and ``make gpu-check`` reports: the engine's
step equals the plain autograd path fed with the same noise, as it does for one network
(tests/core/test_engine.py), and the members stay independent under one kernel and one KL
coefficient: a member's trajectory does not depend on what the other members see.
"""

from __future__ import annotations

import math

import pytest
import torch

from bbb.distributions import GaussianPrior, ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.engine import Engine, counter_noise
from bbb.nn import BayesPopulation

MIXTURE = ScaleMixturePrior(0.25, 1.0, math.exp(-7))
K, ROWS, IN, OUT = 3, 5, 6, 4


def _pop(prior, dtype, seed=0):
    torch.manual_seed(seed)
    return BayesPopulation(IN, [7, 5], OUT, bayesian=K, prior=prior, rho_init=-3.0).to(dtype)


def _data(dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, ROWS, IN, generator=g, dtype=dtype), torch.randint(0, OUT, (K, ROWS), generator=g)


def _train(pop, kl, opt, k, steps, engine, x=None, y=None):
    """``steps`` steps of the population's free energy per row of one member (the sum over the
    members: each member's own gradient), with the engine or with torch.optim on counter noise."""
    dtype = next(pop.parameters()).dtype
    if x is None:
        x, y = _data(dtype)
    elbo = ELBO(pop, "categorical", num_batches=4, kl_weighting="blundell", num_samples=k, kl=kl)
    if engine:
        o = Engine(pop, opt, lr=0.05, kl=kl, num_samples=k, seed=3, compile=False)
        assert o.fused, o.fallback_reason
    else:
        o = (torch.optim.Adam if opt == "adam" else torch.optim.SGD)(pop.parameters(), lr=0.05)
    for i in range(steps):
        with (o.sampling() if engine else counter_noise(pop, 3, i, None if k == 1 else k)):
            out = elbo(x, y, batch_index=i % 4)
        o.zero_grad()
        (out.loss / ROWS).backward()
        o.step()
    return {n: p.detach().clone() for n, p in pop.named_parameters()}


@pytest.mark.parametrize("prior,kl", [pytest.param(MIXTURE, "mc", id="mixture-mc"),
                                      pytest.param(GaussianPrior(0.7), "auto", id="gauss-closed")])
@pytest.mark.parametrize("opt", ["adam", "sgd"])
@pytest.mark.parametrize("k", [1, 2])
def test_the_engine_on_a_population_equals_the_plain_path(prior, kl, opt, k):
    a = _train(_pop(prior, torch.float64), kl, opt, k, 3, engine=True)
    b = _train(_pop(prior, torch.float64), kl, opt, k, 3, engine=False)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-12, atol=1e-12, msg=name)


def test_members_train_independently_under_one_engine():
    """Member 1 sees other rows: members 0 and 2 end bit for bit where they would have (the shared
    kernel, KL coefficient and reductions carry nothing across members), member 1 elsewhere."""
    x, y = _data(torch.float32)
    x2, y2 = x.clone(), y.clone()
    x2[1], y2[1] = torch.randn(ROWS, IN), (y[1] + 1) % OUT
    a = _train(_pop(MIXTURE, torch.float32), "mc", "adam", 1, 4, engine=True, x=x, y=y)
    b = _train(_pop(MIXTURE, torch.float32), "mc", "adam", 1, 4, engine=True, x=x2, y=y2)
    for name in a:
        assert torch.equal(a[name][0], b[name][0]) and torch.equal(a[name][2], b[name][2]), name
        assert not torch.equal(a[name][1], b[name][1]), name



@pytest.mark.parametrize("prior,kl", [pytest.param(MIXTURE, "mc", id="mixture-mc"),
                                      pytest.param(GaussianPrior(0.7), "auto", id="gauss-closed")])
@pytest.mark.parametrize("compile", [False, True])
def test_the_kl_member_by_member(prior, kl, compile):
    """engine.kl_members: each member's KL of the sample the forward used, formed from its own
    weights (the Monte Carlo estimate log q(w) - log p(w) at the sample the layers received, or the
    closed form of the member as a BayesMLP), summing to the ELBO's KL; the ELBO's KL itself is the
    plain path's (counter noise); None for a network that is not a population."""
    from torch.distributions import Normal

    from bbb.distributions import softplus
    from bbb.nn import BayesMLP, model_kl

    pop = _pop(prior, torch.float64)
    x, y = _data(torch.float64)
    elbo = ELBO(pop, "categorical", num_batches=4, kl=kl)
    engine = Engine(pop, "adam", lr=0.05, kl=kl, seed=3, compile=compile)
    for i in range(2):
        with engine.sampling():
            out = elbo(x, y, batch_index=i)
            samples = [layer.sample() for layer in pop.bayes]  # the sample the forward used
        parts = engine.kl_members
        assert parts is not None and parts.shape == (K,)
        torch.testing.assert_close(parts.sum(), out.kl.detach(), rtol=1e-12, atol=1e-9)
        with counter_noise(pop, 3, i):
            plain = elbo(x, y, batch_index=i)
        torch.testing.assert_close(plain.kl.detach(), out.kl.detach(), rtol=1e-10, atol=1e-8)
        for j in range(K):
            if kl == "auto":  # closed form: a function of the member's mu and sigma alone
                want = model_kl(pop.member(j)).detach()
            else:
                want = sum(((Normal(layer.mu(n)[j], softplus(layer.rho(n)[j])).log_prob(w[j].detach())
                             - prior.log_prob_and_grad(w[j].detach())[0]).sum()
                            for layer, ws in zip(pop.bayes, samples) for n, w in zip(("weight", "bias"), ws)),
                           torch.zeros((), dtype=torch.float64))
            torch.testing.assert_close(parts[j], want, rtol=1e-10, atol=1e-8)
        engine.zero_grad()
        (out.loss / ROWS).backward()
        engine.step()
    net = BayesMLP(IN, [7], OUT, prior=prior).to(torch.float64)
    assert Engine(net, "adam", kl=kl, compile=False).kl_members is None
