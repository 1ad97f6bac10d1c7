"""A population whose members have their own prior (:class:`bbb.distributions.MemberPrior`) and
learning rate (``Engine(member_lr_scale=...)``): a grid over them trains as one population. Member j
computes what its own prior computes (the ``*_with`` functions on its row of constants), the fused
engine equals the plain path fed with the same noise, and member j ends bit for bit where member j
of a population that shares its settings ends; every misuse is a one-line UserError."""

from __future__ import annotations

import math

import pytest
import torch

from bbb.distributions import GaussianPrior, MemberPrior, ScaleMixturePrior, kl_term, prior_from_config
from bbb.elbo import ELBO
from bbb.engine import Engine, counter_noise
from bbb.errors import CheckpointError, UserError
from bbb.nn import BayesLinear, BayesMLP, BayesPopulation, model_kl

K, ROWS, IN, OUT = 3, 5, 6, 4
MIXTURES = [ScaleMixturePrior(0.25, 1.0, math.exp(-7)), ScaleMixturePrior(0.5, math.exp(-1), math.exp(-6)),
            ScaleMixturePrior(0.75, 1.0, math.exp(-8))]
GAUSSIANS = [GaussianPrior(0.7), GaussianPrior(0.2), GaussianPrior(1.5, mu=0.1)]


def _pop(prior, dtype=torch.float64):
    torch.manual_seed(0)
    return BayesPopulation(IN, [7, 5], OUT, bayesian=K, prior=prior, rho_init=-3.0).to(dtype)


def _train(pop, kl, opt, steps=3, *, engine=True, lr=0.05, scale=None, compile=False, k=1):
    dtype = next(pop.parameters()).dtype
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(K, ROWS, IN, generator=g, dtype=dtype), torch.randint(0, OUT, (K, ROWS), generator=g)
    elbo = ELBO(pop, "categorical", num_batches=4, kl_weighting="blundell", num_samples=k, kl=kl)
    if engine:
        o = Engine(pop, opt, lr=lr, kl=kl, num_samples=k, seed=3, compile=compile, member_lr_scale=scale)
        assert o.fused, o.fallback_reason
    else:
        o = (torch.optim.Adam if opt == "adam" else torch.optim.SGD)(pop.parameters(), lr=lr)
    kls = []
    for i in range(steps):
        with (o.sampling() if engine else counter_noise(pop, 3, i, None if k == 1 else k)):
            out = elbo(x, y, batch_index=i % 4)
            if engine:
                kls.append(o.kl_members)
        o.zero_grad()
        (out.loss / ROWS).backward()
        o.step()
    return {n: p.detach().clone() for n, p in pop.named_parameters()}, kls


@pytest.mark.parametrize("priors", [MIXTURES, GAUSSIANS], ids=["mixture", "gauss"])
def test_each_member_computes_its_own_priors_numbers(priors):
    p = MemberPrior(priors)
    assert prior_from_config(p.to_config()) == p and p.members == K and p.member(1) is priors[1]
    w = torch.randn(4, K, 5, 3, dtype=torch.float64) * 0.1  # (samples, members, in, out)
    mu, sigma = torch.randn(K, 5, 3, dtype=torch.float64) * 0.1, torch.rand(K, 5, 3, dtype=torch.float64) * 0.1 + 1e-3
    z = torch.randn(K, 5, 3, dtype=torch.float64)
    lp, g = p.at(3).log_prob_and_grad(w)
    for j, prior in enumerate(priors):
        lpj, gj = prior.log_prob_and_grad(w[:, j])
        assert torch.equal(lp[:, j], lpj) and torch.equal(g[:, j], gj)
        assert torch.equal(p.at(3).log_prob(w)[:, j], prior.log_prob(w[:, j]))
        for mine, theirs in zip(p.at(3).kl_split(mu, sigma, z), prior.kl_split(mu[j], sigma[j], z[j])):
            assert torch.equal(mine[j], theirs)
    assert p.at(3).sample((2, K, 5, 3)).shape == (2, K, 5, 3)
    for call in (lambda: p.log_prob(w), lambda: p.at(3).log_prob(torch.zeros(K + 1, 5, 3))):
        with pytest.raises(UserError) as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("priors", [MIXTURES, GAUSSIANS], ids=["mixture", "gauss"])
def test_a_populations_kl_is_the_sum_of_its_members_own(priors):
    pop = _pop(MemberPrior(priors))
    members = [pop.member(j) for j in range(K)]
    assert [m.layers[0].prior for m in members] == priors
    if priors is GAUSSIANS:
        torch.testing.assert_close(model_kl(pop, "closed"), sum(model_kl(m, "closed") for m in members))
    eps = {(i, n): torch.randn(getattr(layer, f"{n}_mu").shape, dtype=torch.float64)
           for i, layer in enumerate(pop.bayes) for n in ("weight", "bias")}
    total = sum(kl_term(layer.posterior(n), layer.prior_for(n), "mc", eps=eps[i, n])
                for i, layer in enumerate(pop.bayes) for n in ("weight", "bias"))
    parts = sum(kl_term(layer.posterior("weight"), priors[j], "mc", eps=eps[i, "weight"][j].T)
                + kl_term(layer.posterior("bias"), priors[j], "mc", eps=eps[i, "bias"][j])
                for j, m in enumerate(members) for i, layer in enumerate(m.layers))
    torch.testing.assert_close(total, parts)


@pytest.mark.parametrize("priors,kl", [pytest.param(MIXTURES, "mc", id="mixture-mc"),
                                       pytest.param(GAUSSIANS, "auto", id="gauss-closed")])
@pytest.mark.parametrize("opt", ["adam", "sgd"])
@pytest.mark.parametrize("k", [1, 2])
def test_the_engine_with_a_prior_per_member_equals_the_plain_path(priors, kl, opt, k):
    a, _ = _train(_pop(MemberPrior(priors)), kl, opt, k=k)
    b, _ = _train(_pop(MemberPrior(priors)), kl, opt, k=k, engine=False)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("priors,kl,compile,members", [
    pytest.param(MIXTURES, "mc", False, range(K), id="mixture-mc"),
    pytest.param(MIXTURES, "split", False, range(K), id="mixture-split"),
    pytest.param(GAUSSIANS, "auto", False, range(K), id="gauss-closed"),
    pytest.param(MIXTURES, "mc", True, [1], id="mixture-mc-compiled"),
    pytest.param(GAUSSIANS, "auto", True, [K - 1], id="gauss-closed-compiled")])
def test_member_j_of_a_grid_ends_where_it_ends_among_members_of_its_own_settings(priors, kl, compile, members):
    """float32, the eager and the compiled kernels: member j of the grid (its prior from the table,
    a learning rate 0.5x or 2x the first's) equals member j of a population whose members all have
    its prior and learning rate, bit for bit, and so does its KL. Compiled, one member each (a
    middle one and the last): each population of other constants is a compile of its own."""
    scale = (1.0, 0.5, 2.0)
    grid, grid_kl = _train(_pop(MemberPrior(priors), torch.float32), kl, "adam", scale=scale, compile=compile)
    for j in members:
        alone, alone_kl = _train(_pop(priors[j], torch.float32), kl, "adam", lr=0.05 * scale[j], compile=compile)
        for name in grid:
            assert torch.equal(grid[name][j], alone[name][j]), (j, name)
        assert all(torch.equal(a[j], b[j]) for a, b in zip(grid_kl, alone_kl))


def test_a_learning_rate_per_member_scales_each_members_step():
    """Any multiple (0.3 is not a power of two: the step rounds once more), Adam and SGD with
    momentum; the state dict keeps the multiples, and an engine of other multiples refuses it."""
    scale = (1.0, 0.3, 1.7)
    for opt in ("adam", "sgd"):
        grid, _ = _train(_pop(MIXTURES[0]), "mc", opt, scale=scale)
        for j in range(K):
            alone, _ = _train(_pop(MIXTURES[0]), "mc", opt, lr=0.05 * scale[j])
            for name in grid:
                torch.testing.assert_close(grid[name][j], alone[name][j], rtol=1e-12, atol=1e-13)
    pop = _pop(MIXTURES[0])
    e = Engine(pop, "adam", kl="mc", compile=False, member_lr_scale=scale)
    state = e.state_dict()
    Engine(pop, "adam", kl="mc", compile=False, member_lr_scale=scale).load_state_dict(state)
    with pytest.raises(CheckpointError):
        Engine(pop, "adam", kl="mc", compile=False).load_state_dict(state)


def test_settings_per_member_where_they_cannot_apply_are_one_line_errors():
    net = BayesMLP(IN, [7], OUT)
    cases = [
        (lambda: Engine(net, "adam", compile=False, member_lr_scale=(1.0,)), "not a population"),
        (lambda: Engine(_pop(MIXTURES[0]), "adam", kl="mc", compile=False, member_lr_scale=(1.0, 2.0)),
         "2 numbers for a population of 3"),
        (lambda: Engine(_pop(MIXTURES[0]), "adam", kl="mc", compile=False, member_lr_scale=(1.0, -1.0, 1.0)),
         "member_lr_scale"),
        (lambda: Engine(_pop(MIXTURES[0]), "adam", kl="mc", fused=False, member_lr_scale=(1.0, 1.0, 1.0)),
         "fused=False"),
        (lambda: BayesLinear(IN, OUT, prior=MemberPrior(MIXTURES)), "for a population's layers"),
        (lambda: _pop(MemberPrior(MIXTURES[:2])), "MemberPrior of 2 members"),
        (lambda: MemberPrior([MIXTURES[0], GAUSSIANS[0]]), "one family"),
        (lambda: MemberPrior([MIXTURES[0], ScaleMixturePrior(1.0)]), "pi below 1"),
        (lambda: MemberPrior([]), "at least one"),
    ]
    for call, match in cases:
        with pytest.raises(UserError, match=match) as e:
            call()
        assert "\n" not in str(e.value)


def test_the_clipped_gradient_norm_reads_each_members_prior():
    """engine.clip_grad_norm_ forms dL/dmu and dL/drho outside the step (each member's prior
    constants: the closed form's derivatives): the norm of the plain path's gradient on the same noise."""
    norms = []
    for engine in (True, False):
        pop = _pop(MemberPrior(GAUSSIANS))
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(K, ROWS, IN, generator=g, dtype=torch.float64), torch.randint(0, OUT, (K, ROWS), generator=g)
        elbo = ELBO(pop, "categorical", num_batches=4, kl="closed")
        o = Engine(pop, "adam", kl="closed", seed=3, compile=False) if engine else None
        with (o.sampling() if o is not None else counter_noise(pop, 3, 0)):
            out = elbo(x, y, batch_index=0)
        (out.loss / ROWS).backward()
        norms.append(o.clip_grad_norm_(1e9) if o is not None else torch.nn.utils.clip_grad_norm_(pop.parameters(), 1e9))
    torch.testing.assert_close(norms[0], norms[1], rtol=1e-12, atol=0.0)


def test_the_members_table_is_made_once_and_serves_training_after_inference():
    p = MemberPrior(MIXTURES)
    pop = _pop(p, torch.float32)
    elbo = ELBO(pop, "categorical", num_batches=2, kl="mc")
    x, y = torch.randn(K, ROWS, IN), torch.randint(0, OUT, (K, ROWS))
    with torch.inference_mode():
        elbo(x, y, batch_index=0)
    out = elbo(x, y, batch_index=0)
    out.loss.backward()  # the table made under inference_mode is an ordinary tensor
    assert p.at(2).table() is p.table()  # one tensor per device and dtype, shared by the bound copies
