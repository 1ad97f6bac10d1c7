from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
import torch.distributions as D
import torch.nn.functional as F

import bbb
from bbb.distributions import GaussianPrior, ScaleMixturePrior
from bbb.elbo import ELBO, Categorical, Gaussian, HeteroscedasticGaussian, kl_weights
from bbb.nn import BayesLinear, BayesMLP, model_kl


@pytest.mark.parametrize("m", [1, 2, 469, 10000])
def test_blundell_weights_are_finite_and_sum_to_one(m):
    w = kl_weights(m, "blundell")
    assert w.shape == (m,) and torch.isfinite(w).all() and (w >= 0).all()
    assert w.double().sum().item() == pytest.approx(1.0, abs=1e-6)
    assert (w[:-1] >= w[1:]).all()  # the first minibatches carry most of the complexity cost


def test_blundell_weights_equal_the_paper_formula_exactly():
    m = 12
    exact = [Fraction(2 ** (m - i), 2**m - 1) for i in range(1, m + 1)]
    got = kl_weights(m, "blundell", dtype=torch.float64).tolist()
    assert got == pytest.approx([float(e) for e in exact], rel=1e-14)


def test_uniform_and_custom_weights():
    torch.testing.assert_close(kl_weights(4, "uniform"), torch.full((4,), 0.25))
    w = kl_weights(3, lambda m: torch.arange(1, m + 1))
    torch.testing.assert_close(w, torch.tensor([1 / 6, 2 / 6, 3 / 6]))


@pytest.mark.parametrize("args,match", [((0, "uniform"), "num_batches"), ((2.5, "uniform"), "num_batches"),
                                        ((3, "graves"), "KL weighting"), ((3, lambda m: [1.0]), "custom")])
def test_kl_weights_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        kl_weights(*args)


def test_kl_is_summed_over_every_weight_never_averaged():
    net = BayesMLP(5, [4], 3, prior=GaussianPrior(1.0))
    terms = []
    for layer in net.layers:
        for name in ("weight", "bias"):
            q = layer.posterior(name)
            terms.append(D.kl_divergence(D.Normal(q.mu, q.sigma), D.Normal(0.0, 1.0)).flatten())
    total = torch.cat(terms)
    kl = model_kl(net, "closed")
    torch.testing.assert_close(kl, total.sum())
    assert kl.item() > 10 * total.mean().item()


def test_loss_is_kl_weight_times_kl_plus_summed_nll():
    torch.manual_seed(0)
    net = BayesMLP(5, [8], 3, prior=GaussianPrior(1.0))
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    m = 7
    elbo = ELBO(net, "categorical", num_batches=m, kl_weighting="blundell", kl="closed")
    g = torch.Generator().manual_seed(3)
    out = elbo(x, y, batch_index=2, generator=g)
    assert out.kl_weight == pytest.approx(2 ** (m - 3) / (2**m - 1))
    nll = F.cross_entropy(out.output, y, reduction="sum")  # a sum over the minibatch, not a mean
    torch.testing.assert_close(out.nll, nll)
    torch.testing.assert_close(out.kl, model_kl(net, "closed"))
    torch.testing.assert_close(out.loss, nll + out.kl_weight * out.kl)
    # the KL weight is 1/M (uniform), independent of the batch size
    uni = ELBO(net, "categorical", num_batches=m, kl_weighting="uniform", kl="closed")
    assert uni(x[:4], y[:4]).kl_weight == pytest.approx(1 / m)


def test_epoch_of_minibatch_losses_adds_up_to_the_full_free_energy():
    """Sum over i of (pi_i KL + NLL_i) = KL + NLL(D), for any weighting that sums to 1."""
    net = BayesMLP(5, [8], 3, prior=GaussianPrior(1.0)).eval()  # mean weights: deterministic NLL
    x, y = torch.randn(20, 5), torch.randint(0, 3, (20,))
    for scheme in ("uniform", "blundell"):
        elbo = ELBO(net, "categorical", num_batches=4, kl_weighting=scheme, kl="closed")
        with torch.no_grad():  # scored, not trained: no eval-mode warning
            total = sum(elbo(xb, yb, batch_index=i).loss for i, (xb, yb) in
                        enumerate(zip(x.split(5), y.split(5))))
            full = ELBO(net, "categorical", num_batches=1, kl="closed")(x, y)
        torch.testing.assert_close(total, full.loss)


def test_mc_kl_uses_the_forward_pass_samples_and_averages_k():
    torch.manual_seed(0)
    net = BayesMLP(5, [8], 3, prior=ScaleMixturePrior(0.5, 1.0, 0.01), rho_init=-1.0)
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    k = 4
    elbo = ELBO(net, "categorical", num_batches=1, num_samples=k, kl="mc")
    out = elbo(x, y, generator=torch.Generator().manual_seed(11))
    assert out.output.shape == (k, 6, 3)
    # redo by hand with the same generator: same eps, so the same weights and KL
    g = torch.Generator().manual_seed(11)
    kl = 0.0
    outs = x.expand(k, *x.shape)
    samples = []
    for layer in net.layers:
        ws = []
        for name in ("weight", "bias"):
            q = layer.posterior(name)
            eps = q.sample_eps((k,), generator=g)
            w = q.rsample(eps)
            kl = kl + (q.log_prob(w) - layer.prior.log_prob(w)).sum() / k
            ws.append(w)
        samples.append(ws)
    h = outs
    for i, (w, b) in enumerate(samples):
        h = torch.baddbmm(b[:, None, :], h, w.transpose(1, 2))
        if i < len(samples) - 1:
            h = torch.relu(h)
    torch.testing.assert_close(out.output, h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.kl, kl, rtol=1e-4, atol=1e-3)
    nll = sum(F.cross_entropy(h[j], y, reduction="sum") for j in range(k)) / k
    torch.testing.assert_close(out.nll, nll, rtol=1e-5, atol=1e-5)


def test_kl_samples_average_the_forward_samples_and_draws_of_their_own():
    """kl_samples K > k: the Monte Carlo KL averages the k samples of the forward pass (common
    random numbers) and K - k drawn for the KL alone, after the forward's, from the same generator;
    the likelihood still sees k samples."""
    torch.manual_seed(0)
    net = BayesMLP(5, [8], 3, prior=ScaleMixturePrior(0.5, 1.0, 0.01), rho_init=-1.0)
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    k, big_k = 2, 5
    elbo = ELBO(net, "categorical", num_batches=1, num_samples=k, kl="mc", kl_samples=big_k)
    out = elbo(x, y, generator=torch.Generator().manual_seed(11))
    plain = ELBO(net, "categorical", num_batches=1, num_samples=k, kl="mc")(
        x, y, generator=torch.Generator().manual_seed(11))
    assert out.output.shape == (k, 6, 3)
    torch.testing.assert_close(out.nll, plain.nll)
    g = torch.Generator().manual_seed(11)
    params = [(layer, name) for layer in net.layers for name in ("weight", "bias")]
    eps = {(id(m), n): m.posterior(n).sample_eps((k,), generator=g) for m, n in params}
    kl = 0.0
    for m, n in params:
        q = m.posterior(n)
        e = torch.cat([eps[(id(m), n)], q.sample_eps((big_k - k,), generator=g)])
        w = q.rsample(e)
        kl = kl + (q.log_prob(w) - m.prior.log_prob(w)).sum() / big_k
    torch.testing.assert_close(out.kl, kl, rtol=1e-4, atol=1e-3)
    assert "kl_samples=5" in repr(elbo)


def test_more_kl_samples_lower_the_variance_of_the_kl_gradient():
    """The point of kl_samples: the KL's gradient with respect to mu, over repeated draws, has
    about 1/K the variance (the spike of a scale mixture: rare large kicks)."""
    torch.manual_seed(0)
    layer = BayesLinear(20, 10, prior=ScaleMixturePrior(0.75, 0.4, math.exp(-3)), rho_init=-3.0)
    g = torch.Generator().manual_seed(3)

    def grad_var(big_k):
        grads = []
        for _ in range(300):
            layer.zero_grad()
            layer.kl("mc", bbb.SampleRecorder(g), num_samples=big_k).backward()
            grads.append(layer.weight_mu.grad.clone())
        return torch.stack(grads).var(0).mean().item()

    ratio = grad_var(1) / grad_var(8)
    assert 5.0 < ratio < 12.0, ratio


def test_kl_samples_fewer_than_the_likelihoods_or_not_an_integer_are_user_errors():
    net = BayesMLP(5, [8], 3)
    with pytest.raises(bbb.UserError, match="at least"):
        ELBO(net, num_samples=3, kl_samples=2)
    for bad in (0, 2.5, "4", True):
        with pytest.raises(bbb.UserError, match="kl_samples"):
            ELBO(net, kl_samples=bad)


def test_a_closed_form_kl_ignores_kl_samples():
    net = BayesMLP(5, [8], 3, prior=GaussianPrior(0.5))
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    a = ELBO(net, kl="auto", kl_samples=7)(x, y).kl
    torch.testing.assert_close(a, model_kl(net, "closed"))


@pytest.mark.parametrize("estimator", ["reparam", "local", "flipout"])
def test_elbo_backward_through_every_estimator(estimator):
    net = BayesMLP(5, [8], 3, estimator=estimator)
    elbo = ELBO(net, "categorical", num_batches=3, num_samples=2, kl="mc")
    out = elbo(torch.randn(4, 5), torch.randint(0, 3, (4,)), batch_index=1)
    out.loss.backward()
    for p in net.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


def test_gaussian_likelihood_fixed_and_learned():
    lik = Gaussian(sigma=0.3)
    out, y = torch.randn(5, 1), torch.randn(5)
    torch.testing.assert_close(lik.log_prob(out, y), D.Normal(out.squeeze(-1), 0.3).log_prob(y))
    assert not list(lik.parameters())
    learned = Gaussian(sigma=0.3, learn_sigma=True)
    assert learned.sigma.item() == pytest.approx(0.3)
    assert [n for n, _ in learned.named_parameters()] == ["raw_sigma"]
    # k samples on the output broadcast against per-example targets
    assert lik.log_prob(torch.randn(4, 5, 1), y).shape == (4, 5)
    with pytest.raises(ValueError, match="sigma"):
        Gaussian(sigma=-1.0)


def test_heteroscedastic_likelihood():
    lik = HeteroscedasticGaussian(min_sigma=0.0)
    out = torch.tensor([[0.5, 0.0], [1.0, 2.0]])
    y = torch.tensor([0.0, 1.0])
    sig = F.softplus(out[:, 1])
    torch.testing.assert_close(lik.log_prob(out, y), D.Normal(out[:, 0], sig).log_prob(y))
    with pytest.raises(ValueError, match="2 network outputs"):
        lik.log_prob(torch.randn(3, 1), torch.randn(3))


def test_regression_elbo_with_learned_noise_trains_the_noise():
    net = BayesMLP(1, [8], 1, prior=GaussianPrior(1.0))
    elbo = ELBO(net, Gaussian(sigma=1.0, learn_sigma=True), num_batches=1)
    names = [n for n, _ in elbo.named_parameters()]
    assert "likelihood.raw_sigma" in names
    elbo(torch.randn(10, 1), torch.randn(10)).loss.backward()
    assert elbo.likelihood.raw_sigma.grad is not None


def test_elbo_rejects_bad_arguments():
    net = BayesLinear(2, 2)
    with pytest.raises(ValueError, match="num_samples"):
        ELBO(net, num_samples=0)
    with pytest.raises(ValueError, match="KL mode"):
        ELBO(net, kl="exact")
    with pytest.raises(ValueError, match="likelihood"):
        ELBO(net, "poisson")
    with pytest.raises(ValueError, match="batch_index"):
        ELBO(net, num_batches=2)(torch.randn(1, 2), torch.zeros(1, dtype=torch.long), batch_index=2)


def test_categorical_likelihood_is_per_example():
    logits, y = torch.randn(3, 6, 4), torch.randint(0, 4, (6,))
    lp = Categorical().log_prob(logits, y)
    assert lp.shape == (3, 6)
    torch.testing.assert_close(lp[1], -F.cross_entropy(logits[1], y, reduction="none"))


def test_top_level_exports():
    assert bbb.kl_weights is kl_weights and bbb.ELBO is ELBO
    assert math.isclose(float(bbb.kl_weights(2, "blundell")[0]), 2 / 3, rel_tol=1e-6)
