"""bbb.nn.BayesPopulation: members batched on a leading dimension are the BayesMLPs they stand
for (forward, one-hot inputs, KL, import/export); training them is tested member by member in
tests/applications/experiments/test_bandit.py, through the bandit's own update."""

from __future__ import annotations

import pytest
import torch

from bbb.distributions import GaussianPrior, ScaleMixturePrior
from bbb.errors import UserError
from bbb.nn import BayesMLP, BayesPopulation, OneHot, model_kl, population_linear, sampling
from bbb.nn.population import DENSE_ONE_HOT_RATIO


def _pop(prior=None, bayesian=3, deterministic=2, **kw) -> BayesPopulation:
    return BayesPopulation(10, [8, 6], 2, bayesian=bayesian, deterministic=deterministic,
                           prior=prior or GaussianPrior(0.5), rho_init=-2.0, **kw)


def _rows(p: int, r: int = 7, d: int = 10, density: float = 0.3) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return (torch.rand(p, r, d, generator=g) < density).float()


def test_one_hot_rows_round_trip_and_drop_the_values_of_one_hot_codes():
    x = _rows(4)
    x[0, 0] = 0.0  # an empty row
    x[1, 1, 3] = 2.5  # a value other than 1
    oh = OneHot.from_dense(x)
    assert oh.value is not None and oh.index.shape[:2] == (4, 7)
    torch.testing.assert_close(oh.to_dense(), x)
    codes = torch.zeros(3, 5, 10)
    codes[..., 2] = 1
    codes[..., 7] = 1
    oh = OneHot.from_dense(codes)
    assert oh.value is None and oh.index.shape == (3, 5, 2) and oh.index[0, 0].tolist() == [2, 7]
    torch.testing.assert_close(oh.to_dense(), codes)


def test_sparse_first_layer_equals_the_dense_product():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(4, 10, 3, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    x = _rows(4).double()
    x[2, 3, 4] = -1.5
    dense = population_linear(x, w, b)
    torch.testing.assert_close(dense, torch.einsum("mri,mio->mro", x, w) + b.unsqueeze(1))
    torch.testing.assert_close(population_linear(OneHot.from_dense(x), w, b), dense)
    with pytest.raises(UserError, match="one-hot rows"):
        population_linear(OneHot.from_dense(x[:3]), w, b)
    # wide, sparse rows take embedding_bag, narrow ones the dense product (DENSE_ONE_HOT_RATIO):
    # the same values and gradients both ways
    for features in (10, 200):
        xs = (torch.rand(4, 7, features, generator=g) < 4 / features).double()
        ws = torch.randn(4, features, 3, generator=g, dtype=torch.float64, requires_grad=True)
        oh = OneHot.from_dense(xs)
        assert (features <= DENSE_ONE_HOT_RATIO * oh.index.shape[-1]) == (features == 10)
        (gs,) = torch.autograd.grad(population_linear(oh, ws, b).square().sum(), ws)
        (gd,) = torch.autograd.grad(population_linear(xs, ws, b).square().sum(), ws)
        torch.testing.assert_close(gs, gd)


def test_members_are_the_bayes_mlps_they_export_in_mean_and_sampled_forward():
    pop = _pop()
    x = _rows(5)
    with sampling(pop, "mean"):
        y = pop(x)
        torch.testing.assert_close(pop(OneHot.from_dense(x)), y)
    for j in range(5):
        net = pop.member(j)
        with sampling(net, "mean"):
            torch.testing.assert_close(net(x[j]), y[j])
    # sampling: Bayesian members differ from their means, deterministic ones never sample
    ys = pop(x)
    assert not torch.allclose(ys[:3], y[:3]) and torch.equal(ys[3:], y[3:])
    k = pop(x, num_samples=3)
    assert k.shape == (3, 5, 7, 2)
    assert not torch.allclose(k[0, :3], k[1, :3]) and torch.equal(k[0, 3:], k[2, 3:])
    torch.testing.assert_close(k[1, 3:], y[3:])


def test_load_member_round_trips_and_reset_member_depends_on_the_generator_only():
    pop = _pop()
    donor = BayesMLP(10, [8, 6], 2, prior=GaussianPrior(0.5), rho_init=-4.0)
    pop.load_member(1, donor)
    back = pop.member(1)
    for a, b in zip(back.parameters(), donor.parameters()):
        assert torch.equal(a, b)
    pop.load_member(4, donor)
    assert torch.equal(pop.member(4).layers[0].weight_mu, donor.layers[0].weight_mu)
    pop.reset_member(0, torch.Generator().manual_seed(5))
    pop.reset_member(3, torch.Generator().manual_seed(5))
    pop.reset_member(4, torch.Generator().manual_seed(6))
    assert torch.equal(pop.bayes[0].weight_mu[0], pop.det[0].weight[0])
    assert torch.equal(pop.bayes[2].bias_mu[0], pop.det[2].bias[0])
    assert not torch.equal(pop.det[0].weight[0], pop.det[0].weight[1])
    assert (pop.bayes[1].weight_rho[0] == -2.0).all()
    with pytest.raises(UserError, match="BayesMLP of sizes"):
        pop.load_member(0, BayesMLP(10, [8], 2))
    with pytest.raises(UserError, match="member index"):
        pop.member(5)


@pytest.mark.parametrize("prior", [GaussianPrior(0.5), ScaleMixturePrior(0.5, 1.0, 0.05)], ids=["gauss", "mixture"])
def test_the_kl_is_the_sum_of_the_members_kls(prior):
    pop = _pop(prior)
    for j in range(3):
        pop.load_member(j, BayesMLP(10, [8, 6], 2, prior=prior, rho_init=-1.0 - j))
    closed = model_kl(pop, "closed") if prior.has_closed_form else None
    members = [pop.member(j) for j in range(3)]
    if closed is not None:
        torch.testing.assert_close(closed, sum(model_kl(m, "closed") for m in members))
    # Monte Carlo on a common sample: the members' estimates on their slices of it add up
    g = torch.Generator().manual_seed(0)
    eps = {(i, n): torch.randn(getattr(layer, f"{n}_mu").shape, generator=g)
           for i, layer in enumerate(pop.bayes) for n in ("weight", "bias")}
    from bbb.distributions import kl_term

    total = sum(kl_term(layer.posterior(n), prior, "mc", eps=eps[i, n]) for i, layer in enumerate(pop.bayes)
                for n in ("weight", "bias"))
    parts = 0.0
    for j, m in enumerate(members):
        for i, layer in enumerate(m.layers):
            parts = parts + kl_term(layer.posterior("weight"), prior, "mc", eps=eps[i, "weight"][j].T)
            parts = parts + kl_term(layer.posterior("bias"), prior, "mc", eps=eps[i, "bias"][j])
    torch.testing.assert_close(total, parts, rtol=1e-5, atol=1e-3)


def test_deterministic_or_bayesian_only_populations_and_bad_inputs():
    x = _rows(2)
    assert _pop(bayesian=0, deterministic=2)(x).shape == (2, 7, 2)
    assert _pop(bayesian=2, deterministic=0)(x, num_samples=2).shape == (2, 2, 7, 2)
    with pytest.raises(UserError, match="members=2"):
        _pop(bayesian=1, deterministic=1)(_rows(3))
    with pytest.raises(UserError, match="num_samples"):
        _pop(bayesian=1, deterministic=1)(x, num_samples=0)
    with pytest.raises(UserError, match="at least one member"):
        BayesPopulation(10, [8], 2, bayesian=0)


def test_the_layers_alone_take_one_or_k_draws_per_member():
    from bbb.nn import PopulationBayesLinear, PopulationLinear

    layer = PopulationBayesLinear(3, 10, 4, prior=GaussianPrior(1.0), rho_init=-2.0)
    x = _rows(3)
    with sampling(layer, "mean"):
        torch.testing.assert_close(layer(x), population_linear(x, layer.weight_mu, layer.bias_mu))
    y = layer(OneHot.from_dense(x).repeat(2))
    assert y.shape == (2, 3, 7, 4) and not torch.allclose(y[0], y[1])
    det = PopulationLinear(3, 10, 4)
    torch.testing.assert_close(det(x.expand(2, *x.shape))[1], det(x))


def test_a_sample_provider_supplies_the_local_estimators_noise():
    """``SampleProvider.preactivation_noise``: the local estimator's pre-activations are
    mean + sd * the provider's noise (here zeros: the mean; then ones)."""
    from bbb.nn import PopulationBayesLinear, SampleProvider, providing_samples

    class Given(SampleProvider):
        def __init__(self, value: float) -> None:
            self.value, self.shapes = value, []

        def preactivation_noise(self, module, shape):
            self.shapes.append(shape)
            return torch.full(shape, self.value)

    layer = PopulationBayesLinear(3, 10, 4, prior=GaussianPrior(1.0), rho_init=-2.0, estimator="local")
    x = _rows(3)
    mean = population_linear(x, layer.weight_mu, layer.bias_mu)
    with providing_samples(zero := Given(0.0)):
        torch.testing.assert_close(layer(x), mean)
    assert zero.shapes == [(3, 7, 4)]
    sd = torch.sqrt(population_linear(x * x, torch.nn.functional.softplus(layer.weight_rho) ** 2,
                                      torch.nn.functional.softplus(layer.bias_rho) ** 2) + 1e-16)
    with providing_samples(Given(1.0)):
        torch.testing.assert_close(layer(x), mean + sd, rtol=1e-4, atol=1e-5)


def test_one_member_predicts_as_it_does_beside_others():
    """k samples of a population of one go through the same batched product as of several (a
    broadcast input would take another kernel and round differently): every digit the same."""
    g = torch.Generator().manual_seed(3)
    three = BayesPopulation(50, [2], 1, bayesian=3, prior=GaussianPrior(1.0))
    one = BayesPopulation(50, [2], 1, bayesian=1, prior=GaussianPrior(1.0))
    one.load_member(0, three.member(2))
    x = torch.randn(3, 30, 50, generator=g)
    with sampling(three, "mean"), sampling(one, "mean"):
        assert torch.equal(one(x[2:], num_samples=4)[:, 0], three(x, num_samples=4)[:, 2])


@pytest.mark.parametrize("estimator", ["reparam", "local"])
def test_forward_samples_hands_a_population_its_k_copies(estimator):
    """bbb.nn.forward_samples (what the ELBO's k samples call) gives a population its k copies as
    (k, members, R, in) inside leading_samples(): the same numbers as num_samples=k under the same
    noise; outside that block a 4-d input is still the one-line error."""
    from bbb.engine import counter_noise
    from bbb.nn import forward_samples

    det = 0 if estimator == "local" else 2
    pop = _pop(bayesian=3, deterministic=det, estimator=estimator)
    x = _rows(pop.members)
    outs = []
    for call in (lambda: forward_samples(pop, x, 4), lambda: pop(x, num_samples=4)):
        torch.manual_seed(0)  # the local estimator's pre-activation noise (counter_noise draws weights)
        with counter_noise(pop, 5, 0, 4):
            outs.append(call())
    a, b = outs
    assert a.shape == (4, pop.members, 7, 2) and torch.equal(a, b)
    with pytest.raises(UserError, match="num_samples=k"):
        pop(x.expand(4, *x.shape))
