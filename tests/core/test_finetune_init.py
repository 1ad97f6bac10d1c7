"""Fine-tuning a trained network (issue 53): the posterior's sigma relative to each weight
(``sigma_init=RelativeSigma``, MOPED) and a prior centred on the trained weights
(``CenteredPrior``, empirical Bayes), through ``bayesianize`` and ``from_torch``."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.distributions import CenteredPrior, DiagonalNormal, GaussianPrior, ScaleMixturePrior, kl_term, softplus
from bbb.nn import BayesLinear, BayesModule, RelativeSigma, bayes_modules, model_kl


def trained() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 8), nn.ReLU(),
                        nn.Linear(8, 2))
    with torch.no_grad():
        net[3].bias.zero_()  # a weight of exactly 0
    return net


def test_relative_sigma_starts_each_sigma_at_delta_times_the_weight():
    det = trained()
    net = bbb.bayesianize(copy.deepcopy(det), sigma_init=RelativeSigma(delta=0.2, min_sigma=1e-4))
    for (name, p) in det.named_parameters():
        layer, part = name.rsplit(".", 1)
        m = net.get_submodule(layer)
        assert torch.equal(m.mu(part), p)
        want = (0.2 * p.abs()).clamp_min(1e-4)
        torch.testing.assert_close(softplus(m.rho(part)), want, rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(softplus(net[3].rho("bias")).detach(), torch.full((8,), 1e-4))  # w = 0: min_sigma
    assert torch.isfinite(net[3].rho("bias")).all()
    assert "sigma_init=RelativeSigma(delta=0.2" in repr(net[3])


def test_relative_sigma_is_checked_and_exclusive_with_rho_init():
    for bad in [dict(delta=0.0), dict(delta=float("nan")), dict(min_sigma=-1.0), dict(delta=True)]:
        with pytest.raises(bbb.UserError, match="RelativeSigma"):
            RelativeSigma(**bad)
    with pytest.raises(bbb.UserError, match="rho_init and sigma_init"):
        bbb.bayesianize(trained(), rho_init=-3.0, sigma_init=RelativeSigma())
    with pytest.raises(bbb.UserError, match="RelativeSigma"):
        bbb.bayesianize(trained(), sigma_init=0.1)
    with pytest.raises(bbb.UserError, match="rho_init and sigma_init"):
        BayesLinear.from_torch(nn.Linear(3, 2), rho_init=-3.0, sigma_init=RelativeSigma())


def test_relative_sigma_reaches_every_layer_type():
    net = bbb.bayesianize(nn.Sequential(nn.Embedding(5, 4), nn.LSTM(4, 3, batch_first=True)),
                          sigma_init=RelativeSigma(0.5))
    mha = bbb.bayesianize(nn.MultiheadAttention(4, 2), sigma_init=RelativeSigma(0.5))
    mods = [*bayes_modules(net), *bayes_modules(mha)]
    assert len(mods) == 4  # the attention layer holds a Bayesian out_proj of its own
    for m in mods:
        assert isinstance(m, BayesModule)
        for n in m.param_names():
            torch.testing.assert_close(softplus(m.rho(n)), (0.5 * m.mu(n).abs()).clamp_min(1e-5), rtol=1e-4,
                                       atol=1e-9)


def test_a_converter_without_sigma_init_is_a_clear_error():
    class MyLinear(nn.Linear):
        pass

    bbb.register_conversion(MyLinear, lambda layer, prior, estimator, rho_init, from_weights: BayesLinear(3, 2))
    try:
        bbb.bayesianize(nn.Sequential(MyLinear(3, 2)))  # without sigma_init: the old contract
        with pytest.raises(bbb.UserError, match="takes no sigma_init"):
            bbb.bayesianize(nn.Sequential(MyLinear(3, 2)), sigma_init=RelativeSigma())
    finally:
        bbb.convert.CONVERTIBLE.pop(MyLinear)


def test_centered_prior_kl_closed_form_and_monte_carlo():
    torch.manual_seed(0)
    w0 = torch.randn(5, 3, dtype=torch.float64)
    mu = w0 + 0.1 * torch.randn_like(w0)
    sigma = 0.05 + 0.1 * torch.rand_like(w0)
    p = CenteredPrior(0.3, mean=w0)
    want = torch.distributions.kl_divergence(torch.distributions.Normal(mu, sigma), torch.distributions.Normal(w0, 0.3))
    q = DiagonalNormal(mu, sigma)
    torch.testing.assert_close(kl_term(q, p), want.sum())
    torch.testing.assert_close(kl_term(q, p, "closed"), want.sum())
    w = torch.randn(4, 5, 3, dtype=torch.float64)
    torch.testing.assert_close(p.log_prob(w), torch.distributions.Normal(w0, 0.3).log_prob(w))
    eps = torch.randn(20000, 5, 3, dtype=torch.float64)
    assert kl_term(q, p, "mc", eps=eps).item() == pytest.approx(want.sum().item(), rel=0.02)
    # the derivatives of the closed form are those of autograd
    kl, dmu, dsig = p.kl_closed_form(mu, sigma)
    m, s = mu.clone().requires_grad_(), sigma.clone().requires_grad_()
    gm, gs = torch.autograd.grad(p.kl_closed_form(m, s)[0].sum(), (m, s))
    torch.testing.assert_close(dmu, gm)
    torch.testing.assert_close(dsig, gs)
    # a mixture base: no closed form, Monte Carlo through the shifted log density
    pm = CenteredPrior(ScaleMixturePrior(0.5, 1.0, 0.01), mean=w0)
    assert not pm.has_closed_form and pm.has_split
    torch.testing.assert_close(pm.log_prob(w), ScaleMixturePrior(0.5, 1.0, 0.01).log_prob(w - w0))
    s = CenteredPrior(0.2, mean=w0).sample((4000, 5, 3), dtype=torch.float64)
    torch.testing.assert_close(s.mean(0), w0, atol=0.02, rtol=0)


def test_centered_prior_without_a_mean_and_its_config():
    p = CenteredPrior(0.1)
    assert p.base == GaussianPrior(0.1) and not p.has_closed_form
    with pytest.raises(bbb.UserError, match="no mean"):
        p.log_prob(torch.zeros(3))
    assert bbb.distributions.prior_from_config(p.to_config()) == p
    assert p == CenteredPrior(GaussianPrior(0.1)) and hash(p) == hash(CenteredPrior(0.1))
    for bad in ["a", CenteredPrior(0.1)]:
        with pytest.raises(bbb.UserError, match="base"):
            CenteredPrior(bad)
    with pytest.raises(bbb.UserError, match="takes no mean"):
        BayesLinear(3, 2, prior=CenteredPrior(0.1, mean=torch.zeros(2, 3)))


def test_bayesianize_centres_the_prior_on_the_trained_weights():
    det = trained()
    net = bbb.bayesianize(copy.deepcopy(det), prior=CenteredPrior(0.1), sigma_init=RelativeSigma(0.1))
    for name, p in det.named_parameters():
        assert torch.equal(net.state_dict()[name.replace(".weight", ".weight_prior_mean")
                                              .replace(".bias", ".bias_prior_mean")], p)
    # the KL is the closed form against N(w0, 0.1^2), summed over every weight
    want = sum(torch.distributions.kl_divergence(torch.distributions.Normal(m.mu(n), softplus(m.rho(n))),
                                                 torch.distributions.Normal(getattr(m, f"{n}_prior_mean"), 0.1)).sum()
               for m in bayes_modules(net) for n in m.param_names())
    torch.testing.assert_close(model_kl(net), want)
    # the centres are buffers: they follow the posterior means nowhere
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss = bbb.ELBO(net, "categorical", num_batches=1)(torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 0, 1])).loss
    loss.backward()
    opt.step()
    assert not torch.equal(net[3].mu("weight"), det[3].weight) and torch.equal(net[3].weight_prior_mean, det[3].weight)
    # a state_dict round trip, and a deterministic checkpoint centres a fresh model on its weights
    other = bbb.bayesianize(trained(), prior=CenteredPrior(0.1))
    other.load_state_dict(net.state_dict())
    torch.testing.assert_close(model_kl(other), model_kl(net))
    fresh = trained()
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)
    fresh = bbb.bayesianize(fresh, prior=CenteredPrior(0.1))
    fresh.load_state_dict(det.state_dict())
    assert torch.equal(fresh[3].weight_prior_mean, det[3].weight)


class _TiedHead(nn.Module):
    """An embedding and an output layer with a bias of its own, tied to the table (GPT-2, BERT's MLM head)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = nn.Embedding(6, 4), nn.Linear(4, 6)
        self.head.weight = self.emb.weight
        with torch.no_grad():
            self.head.bias.copy_(torch.linspace(-0.5, 0.5, 6))

    def forward(self, x):
        return self.head(torch.tanh(self.emb(x))).mean(1)


def test_a_tied_head_keeps_the_centred_prior_and_relative_sigma_of_its_bias():
    # the tied head's bias was neither centred (its KL a UserError: "not centred yet") nor given sigma_init
    # (a deterministic checkpoint loaded later started its sigma at rho_init's)
    det = _TiedHead()
    net = bbb.bayesianize(copy.deepcopy(det), prior=CenteredPrior(0.1))
    assert torch.equal(net.head.bias_prior_mean, det.head.bias)
    want = sum(torch.distributions.kl_divergence(torch.distributions.Normal(m.mu(n), softplus(m.rho(n))),
                                                 torch.distributions.Normal(getattr(m, f"{n}_prior_mean"), 0.1)).sum()
               for m in bayes_modules(net) for n in m.param_names())
    torch.testing.assert_close(model_kl(net), want)
    rel = bbb.bayesianize(_TiedHead(), sigma_init=RelativeSigma(0.5))
    rel.load_state_dict(det.state_dict())
    torch.testing.assert_close(softplus(rel.head.bias_rho), (0.5 * det.head.bias.abs()).clamp_min(1e-5))


def test_centered_prior_needs_the_trained_weights_and_a_centre():
    with pytest.raises(bbb.UserError, match="from_weights=False"):
        bbb.bayesianize(trained(), prior=CenteredPrior(0.1), from_weights=False)
    layer = BayesLinear(3, 2, prior=CenteredPrior(0.1))
    with pytest.raises(bbb.UserError, match="not centred yet"):
        layer.kl()
    layer.center_prior()  # on its current means
    assert torch.equal(layer.weight_prior_mean, layer.mu("weight"))
    assert layer.kl().item() > 0
    with pytest.raises(bbb.UserError, match="needs a layer with a CenteredPrior"):
        BayesLinear(3, 2).center_prior()


def test_the_engine_trains_a_centred_prior_on_its_plain_path():
    from bbb.engine.support import unsupported_reason

    net = bbb.bayesianize(trained(), prior=CenteredPrior(0.1), sigma_init=RelativeSigma(0.1))
    for kl in ["auto", "mc"]:
        assert "centred per weight (CenteredPrior) is not fused" in unsupported_reason(net, bbb.KLMode(kl))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        engine = bbb.Engine(net, lr=1e-2)
    assert any("CenteredPrior" in str(w.message) for w in rec)
    elbo = bbb.ELBO(net, "categorical", num_batches=1)
    before = net[3].mu("weight").detach().clone()
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 2, (8,))
    with engine.sampling():
        loss = elbo(x, y).loss
    loss.backward()
    engine.step()
    assert not torch.equal(net[3].mu("weight"), before)


def _fine_tune_sigma_change(recipe: bool) -> float:
    """Median |log(sigma_after / sigma_before)| over one epoch (32 steps) of fine-tuning a trained MLP."""
    torch.manual_seed(0)
    x = torch.randn(1024, 10)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    det = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.Adam(det.parameters(), lr=1e-2)
    for _ in range(50):
        loss = nn.functional.cross_entropy(det(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if recipe:  # the documented recipe (docs/your_network.md, "Fine-tuning a trained network")
        net = bbb.bayesianize(det, prior=CenteredPrior(0.1), sigma_init=RelativeSigma(1.0))
        elbo = bbb.ELBO(net, "categorical", num_batches=32, kl_weighting="uniform")
        scale = 10.0
    else:  # the defaults, which say so
        net = bbb.bayesianize(det)  # (det was trained above)
        with pytest.warns(UserWarning, match="barely moves sigma: pass kl_weighting='uniform'"):
            elbo = bbb.ELBO(net, "categorical", num_batches=32)
        scale = 1.0
    rhos = [p for n, p in net.named_parameters() if n.endswith("_rho")]
    mus = [p for n, p in net.named_parameters() if not n.endswith("_rho")]
    before = torch.cat([softplus(r).detach().flatten() for r in rhos])
    opt = torch.optim.Adam([{"params": mus}, {"params": rhos, "lr": 1e-3 * scale}], lr=1e-3)
    net.train()
    for i, idx in enumerate(torch.randperm(1024).split(32)):
        out = elbo(x[idx], y[idx], batch_index=i)
        opt.zero_grad()
        (out.loss / len(idx)).backward()
        opt.step()
    after = torch.cat([softplus(r).detach().flatten() for r in rhos])
    return float((after / before).log().abs().median())


def test_the_fine_tuning_recipe_moves_sigma_where_the_defaults_do_not():
    assert _fine_tune_sigma_change(recipe=False) < 0.02
    assert _fine_tune_sigma_change(recipe=True) > 0.08  # (Adam's steps on rho add up to 0.32 at most)


def stepped(net: nn.Module, steps: int = 1) -> nn.Module:
    """``net`` after ``steps`` Adam steps on random data: weights that left their initialisation."""
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net(torch.randn(16, 1, 6, 6)), torch.randint(0, 2, (16,))).backward()
        opt.step()
    return net


def test_the_default_kl_weighting_warns_once_on_a_model_converted_from_weights():
    net = bbb.bayesianize(stepped(trained()))  # from_weights=True, the default: the means at its weights
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        elbo = bbb.ELBO(net, "categorical", num_batches=10)
    said = [str(w.message) for w in rec]
    assert len(said) == 1 and "from_weights=True" in said[0] and "kl_weighting='uniform'" in said[0], said
    assert "docs/your_network.md" in said[0] and "\n" not in said[0]
    assert elbo.kl_weighting == "blundell" and elbo.kl_weight(0) == pytest.approx(0.5 / (1 - 2.0 ** -10))
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 2, (8,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(3):  # once per ELBO, at its construction: nothing in forward
            elbo(x, y, batch_index=i).loss.backward()
        bbb.ELBO(net, num_batches=10, kl_weighting="blundell")  # chosen: no warning
        bbb.ELBO(net, num_batches=10, kl_weighting="uniform")
        bbb.ELBO(net, num_batches=1)  # one minibatch: the two weightings are the same
        bbb.ELBO(bbb.bayesianize(trained(), from_weights=False), num_batches=10)  # fresh means
        bbb.ELBO(nn.Sequential(nn.Flatten(), BayesLinear(36, 2)), num_batches=10)  # built Bayesian
        bbb.ELBO(bbb.nn.BayesMLP(4, [8], 2), num_batches=10)
    # the marker is a plain attribute: not in the state_dict, kept by deepcopy
    fresh = bbb.bayesianize(trained(), from_weights=False)
    assert not any(m.from_weights for m in bayes_modules(fresh))
    fresh.load_state_dict(net.state_dict())  # (strict: the same keys)
    copied = copy.deepcopy(net)
    assert all(m.from_weights for m in bayes_modules(copied)) and len(list(bayes_modules(copied))) == 3
    with pytest.warns(UserWarning, match="from_weights=True"):
        bbb.ELBO(copied, num_batches=10)


def test_a_freshly_built_network_and_the_elbo_defaults_print_nothing():
    """The getting-started path: a network just built, bayesianize's and the ELBO's defaults."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for net in (trained(),  # (freshly initialised; one bias zeroed: still inside its range)
                    nn.Sequential(nn.Flatten(), nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 10)),
                    nn.Sequential(nn.Embedding(20, 8), nn.Flatten(), nn.Linear(40, 3)),  # an embedding abstains
                    nn.LSTM(4, 6), nn.MultiheadAttention(8, 2), nn.Conv1d(3, 4, 5).double()):
            net = bbb.bayesianize(net)
            assert not any(m.from_weights for m in bayes_modules(net)), net
            bbb.ELBO(net, num_batches=100)
    # one step of training is enough to count as trained, for every layer type with a known range
    for net in (nn.LSTM(4, 6), nn.MultiheadAttention(8, 2), nn.ConvTranspose2d(2, 3, 3), nn.Linear(50, 20)):
        assert bbb.convert.at_initialisation(net) is True
        with torch.no_grad():
            p = next(net.parameters())
            p.view(-1)[0] = 2 * p.abs().max() + 1e-6  # outside the range the initialisation draws from
        assert bbb.convert.at_initialisation(net) is False, net
    net = stepped(trained())  # one step: the linear layer's 384 weights leave the range, the convolution's 30 may not
    assert bbb.convert.at_initialisation(net[3]) is False
    assert all(m.from_weights for m in bayes_modules(bbb.bayesianize(net)))
    assert bbb.convert.at_initialisation(nn.Embedding(5, 3)) is None
    # a network whose layers' ranges are all unknown counts as trained: the warning is said
    with pytest.warns(UserWarning, match="trained network's weights"):
        bbb.ELBO(bbb.bayesianize(nn.Sequential(nn.Embedding(20, 8))), num_batches=10)


def test_the_centred_kl_is_a_function_of_parameters_and_buffers():
    net = bbb.bayesianize(trained(), prior=CenteredPrior(0.1))
    state = {f"net.{k}": v.detach().clone() for k, v in net.state_dict().items()}
    moved = {k: (v + 1.0 if k.endswith("_prior_mean") else v) for k, v in state.items()}
    base = torch.func.functional_call(_KL(net), state, ())
    shifted = torch.func.functional_call(_KL(net), moved, ())
    torch.testing.assert_close(base, model_kl(net))
    assert shifted > base  # the centres it was handed, not ones captured at conversion


class _KL(nn.Module):
    """The model's KL as a module's forward (for torch.func.functional_call)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self) -> torch.Tensor:
        return model_kl(self.net)


def test_centred_prior_on_an_embedding_leaves_the_padding_row_out_with_its_centre():
    """The padding row's KL is left out (issue 55) and the centres of the rows that count stay
    aligned with their rows: the closed form equals the sum over the other rows by hand."""
    torch.manual_seed(0)
    emb = nn.Embedding(6, 4, padding_idx=2)
    with torch.no_grad():
        emb.weight[2].zero_()
    net = bbb.bayesianize(nn.Sequential(emb), prior=CenteredPrior(0.3), sigma_init=RelativeSigma(0.2))
    layer = net[0]
    with torch.no_grad():
        layer.weight_mu.add_(0.05 * torch.randn_like(layer.weight_mu))  # away from the centres
    rows = torch.tensor([0, 1, 3, 4, 5])
    mu, sigma = layer.weight_mu[rows], softplus(layer.weight_rho)[rows]
    w0 = layer.weight_prior_mean[rows]
    by_hand = (torch.log(0.3 / sigma) + (sigma ** 2 + (mu - w0) ** 2) / (2 * 0.3 ** 2) - 0.5).sum()
    assert float(model_kl(net, "closed").detach()) == pytest.approx(float(by_hand.detach()), rel=1e-5)
