"""bbb.nn.BayesEnsemble: M Bayesian MLPs from their own seeds as one population on the same rows
(issue 75): a member trains exactly as the same network alone, the predictive pools the members'
samples (the equal-weight mixture, whose variance is at least the members' mean variance), and
bad input is one line."""

from __future__ import annotations

import re

import pytest
import torch

from bbb.distributions import GaussianPrior
from bbb.elbo import ELBO, HeteroscedasticGaussian
from bbb.errors import UserError
from bbb.nn import BayesEnsemble, BayesPopulation, pool_members
from bbb.uncertainty import gaussian_mixture_log_prob, predict, regression_uncertainty


def _toy(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 4 - 2
    return x, torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(n, generator=g)


def _train(ens: BayesEnsemble, x: torch.Tensor, y: torch.Tensor, steps: int = 30) -> None:
    elbo = ELBO(ens, "heteroscedastic", num_batches=4, kl_weighting="uniform")
    opt = torch.optim.Adam(ens.parameters(), lr=1e-2)
    ens.train()
    for step in range(steps):
        i = step % 4
        rows = slice(16 * i, 16 * i + 16)
        opt.zero_grad()
        elbo(x[rows], y[rows], batch_index=i).loss.backward()
        opt.step()


@pytest.mark.parametrize("estimator", ["reparam", "local"])
def test_a_member_trains_as_the_same_network_alone(estimator):
    x, y = _toy()
    prior = GaussianPrior(1.0)
    ens = BayesEnsemble(1, [16], 2, seeds=[11, 22, 33], prior=prior, rho_init=-3.0, estimator=estimator)
    alone = BayesEnsemble(1, [16], 2, seeds=[22], prior=prior, rho_init=-3.0, estimator=estimator)
    for a, b in zip(ens.member(1).parameters(), alone.member(0).parameters()):
        assert torch.equal(a, b)  # the initialisation is the seed's
    # a member as a BayesMLP keeps the estimator (before, a local ensemble's member drew whole weights)
    assert all(layer.estimator.value == estimator for layer in ens.member(1).layers)
    assert not torch.equal(ens.bayes[0].weight_mu[0], ens.bayes[0].weight_mu[1])
    _train(ens, x, y)
    _train(alone, x, y)
    for a, b in zip(ens.member(1).parameters(), alone.member(0).parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    start = BayesEnsemble(1, [16], 2, seeds=[22], prior=prior, rho_init=-3.0, estimator=estimator)
    assert not torch.allclose(start.bayes[0].weight_mu, alone.bayes[0].weight_mu)  # it trained
    # the predictive's draws are the member's own too
    torch.testing.assert_close(ens.predictive(x, 4).view(3, 4, 64, 2)[1], alone.predictive(x, 4), rtol=1e-5,
                               atol=1e-6)


def test_the_predictive_pools_the_members_samples_and_its_variance_is_at_least_theirs():
    x, y = _toy()
    ens = BayesEnsemble(1, [16], 2, seeds=range(5), prior=GaussianPrior(1.0), rho_init=-3.0)
    _train(ens, x, y, steps=60)
    grid = torch.linspace(-4, 4, 41)[:, None]  # beyond the data too
    out = ens.predictive(grid, num_samples=20)
    assert out.shape == (100, 41, 2)
    mean, sd = HeteroscedasticGaussian().split(out)
    member = [regression_uncertainty(mean[20 * j:20 * j + 20], sd[20 * j:20 * j + 20])["total"] for j in range(5)]
    mixture = regression_uncertainty(mean, sd)
    within = torch.stack(member).mean(0)
    # the law of total variance: the mixture's variance is the members' mean variance plus the
    # variance of their means, never less, and more where the members disagree
    assert torch.all(mixture["total"] >= within - 1e-6)
    assert float((mixture["total"] - within).max()) > 1e-3
    # the mixture's log density is the mean of the members' densities
    target = torch.sin(2 * grid[:, 0])
    lp = gaussian_mixture_log_prob(target, mean, sd)
    parts = torch.stack([gaussian_mixture_log_prob(target, mean[20 * j:20 * j + 20], sd[20 * j:20 * j + 20])
                         for j in range(5)])
    torch.testing.assert_close(lp, torch.logsumexp(parts, 0) - torch.log(torch.tensor(5.0)), rtol=1e-5, atol=1e-5)
    # pooling is member by member
    k = torch.arange(2 * 3).view(2, 3, 1).float()
    assert pool_members(k)[:, 0].tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]


def test_members_read_their_own_rows_and_an_ensemble_is_a_population():
    ens = BayesEnsemble(3, [8], 1, seeds=[4, 5])
    assert isinstance(ens, BayesPopulation) and ens.members == 2 and ens.bayesian == 2
    x = torch.randn(2, 6, 3)
    ens.eval()
    torch.testing.assert_close(ens(x)[1], ens(x[1])[1])
    assert ens(x, num_samples=3).shape == (3, 2, 6, 1)


def test_bad_input_is_one_line():
    for seeds, match in ((3, "list of ints"), ([], "at least one member"), ([1, 1], "must differ"),
                         ([-1], "seed must be")):
        with pytest.raises(UserError, match=match) as e:
            BayesEnsemble(3, [8], 1, seeds=seeds)
        assert "\n" not in str(e.value)
    ens = BayesEnsemble(3, [8], 1, seeds=[0, 1])
    with pytest.raises(UserError, match="members=2"):
        ens(torch.zeros(3, 4, 3))
    with pytest.raises(UserError, match="num_samples"):
        ens.predictive(torch.zeros(4, 3), num_samples=0)
    with pytest.raises(UserError, match="ensemble.predictive"):
        predict(ens, torch.zeros(4, 3), num_samples=5)
    with pytest.raises(UserError, match="ensemble.predictive"):
        predict(ens, torch.zeros(2, 3), num_samples=1)  # as many rows as members: no silent reshape
    with pytest.raises(UserError, match="ELBO\\(num_samples=1\\)"):
        ELBO(ens, "gaussian", num_samples=2, kl_weighting="uniform")(torch.zeros(4, 3), torch.zeros(4))
    with pytest.raises(UserError, match="samples \\(k, members"):
        pool_members(torch.zeros(3, 4))
    # inputs of another width: before, torch's batched product failed with a message of its own
    for x, shape in ((torch.zeros(4, 5), "(4, 5)"), (torch.zeros(2, 4, 5), "(2, 4, 5)")):
        with pytest.raises(UserError, match=f"its inputs have 3 features, got 5 \\(inputs of shape {re.escape(shape)}"):
            ens(x)
    pop = BayesPopulation(3, [8], 1, bayesian=1, deterministic=1)
    for p in (pop, BayesPopulation(3, [8], 1, bayesian=2, estimator="local")):
        with pytest.raises(UserError, match="its inputs have 3 features, got 5"):
            p(torch.zeros(2, 4, 5))
    with pytest.raises(UserError, match="its inputs have 3 features, got 5"):
        pop.forward_weights(torch.zeros(2, 4, 5), num_samples=2)
