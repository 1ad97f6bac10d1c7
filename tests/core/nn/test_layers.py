from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb import functional as BF
from bbb.distributions import GaussianPrior, ScaleMixturePrior, softplus
from bbb.errors import UserError
from bbb.nn import BayesConv2d, BayesLinear, BayesMLP, SampleRecorder, leading_samples, model_kl, sampling

ESTIMATORS = ["reparam", "local", "flipout"]


def _f(layer, x, y, rec):
    """f(w, theta) = log q(w|theta) - log P(w) - log P(D|w) on the recorded sample (eq. 2)."""
    out = layer(x)
    nll = 0.5 * ((out - y) ** 2).sum()
    return nll + model_kl(layer, "mc", rec)


def test_gradients_match_equations_3_and_4():
    torch.manual_seed(0)
    layer = BayesLinear(4, 3, bias=False, prior=ScaleMixturePrior(0.5, 1.0, 0.05), rho_init=-2.0).double()
    layer.weight_mu.data.normal_()
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    with SampleRecorder() as rec:
        f = _f(layer, x, y, rec)
    f.backward()
    eps = rec.get(layer, "weight").eps
    mu, rho = layer.weight_mu.detach(), layer.weight_rho.detach()
    sigma = softplus(rho)

    # df/dw: gradient of log q(w|theta) - log P(w) - log P(D|w) in w, theta held fixed
    w = (mu + sigma * eps).requires_grad_(True)
    log_q = (-torch.log(sigma) - 0.5 * math.log(2 * math.pi) - 0.5 * ((w - mu) / sigma) ** 2).sum()
    f_w = log_q - layer.prior.log_prob(w).sum() + 0.5 * ((x @ w.T - y) ** 2).sum()
    (df_dw,) = torch.autograd.grad(f_w, w)
    w = w.detach()
    df_dmu = (w - mu) / sigma**2  # partial derivative of log q in mu, w fixed
    df_dsigma = -1 / sigma + (w - mu) ** 2 / sigma**3
    df_drho = df_dsigma * torch.sigmoid(rho)
    delta_mu = df_dw + df_dmu  # eq. (3)
    delta_rho = df_dw * eps / (1 + torch.exp(-rho)) + df_drho  # eq. (4)
    torch.testing.assert_close(layer.weight_mu.grad, delta_mu)
    torch.testing.assert_close(layer.weight_rho.grad, delta_rho)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_output_moments_match_weight_sampling(estimator):
    """Each example's pre-activation has mean x mu^T + b and variance x^2 sigma^2 + b_sigma^2."""
    torch.manual_seed(1)
    layer = BayesLinear(5, 3, estimator=estimator, rho_init=-1.0)
    x = torch.randn(4, 5)
    k = 40_000
    with torch.no_grad(), leading_samples():
        out = layer(bbb.expand_samples(x, k))  # (k, 4, 3): k independent networks
        mean = F.linear(x, layer.weight_mu, layer.bias_mu)
        var = F.linear(x * x, softplus(layer.weight_rho) ** 2, softplus(layer.bias_rho) ** 2)
    se = torch.sqrt(var / k)
    assert ((out.mean(0) - mean).abs() < 5 * se).all()
    # sample variance has relative sd sqrt(2/k) ~ 0.7%; allow 5%
    torch.testing.assert_close(out.var(0), var, rtol=0.05, atol=0)


def test_a_sequence_is_one_sample_and_a_leading_sample_dimension_is_explicit():
    """(B, T, in) is a sequence for a linear layer (one weight sample, as nn.Linear reads it);
    k samples on a leading dimension need leading_samples() (or BayesMLP, forward_samples), and
    expand_samples outside it is a one-line error, not k copies of one network."""
    torch.manual_seed(0)
    layer = BayesLinear(5, 3, rho_init=-1.0)
    x = torch.randn(4, 6, 5)
    with SampleRecorder() as rec:
        layer(x)
    assert rec.get(layer, "weight").w.shape == (3, 5)  # one weight sample for the whole batch
    with pytest.raises(bbb.UserError, match=r"outside bbb.nn.leading_samples\(\)"):
        layer(bbb.expand_samples(x[:, 0], 4))
    with leading_samples():
        out = layer(bbb.expand_samples(x[:, 0], 4))
    assert not torch.allclose(out[0], out[1])


def test_flipout_perturbs_by_sigma_eps_only():
    x = torch.randn(3, 4)
    mu, delta = torch.randn(2, 4), torch.randn(2, 4)
    b_mu, b_delta = torch.randn(2), torch.randn(2)
    ones_in, ones_out = torch.ones(3, 4), torch.ones(3, 2)
    # all signs +1: flipout is exactly weight sampling with w = mu + delta
    plus = BF.linear_flipout(x, mu, delta, b_mu, b_delta, signs=(ones_in, ones_out))
    torch.testing.assert_close(plus, F.linear(x, mu + delta, b_mu + b_delta))
    # flipped output signs: only the perturbation changes sign, the mean weights never do
    minus = BF.linear_flipout(x, mu, delta, b_mu, b_delta, signs=(ones_in, -ones_out))
    torch.testing.assert_close(minus, F.linear(x, mu, b_mu) - F.linear(x, delta, b_delta))


def test_flipout_with_zero_noise_is_the_mean_network():
    layer = BayesLinear(6, 4, estimator="flipout", rho_init=-200.0)  # sigma underflows to 0
    x = torch.randn(5, 6)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))


def test_local_reparam_sqrt_never_sees_zero():
    layer = BayesLinear(3, 2, bias=False, estimator="local")
    x = torch.zeros(4, 3)
    x[1] = torch.randn(3)
    x.requires_grad_(True)
    layer(x).sum().backward()
    for t in (x.grad, layer.weight_mu.grad, layer.weight_rho.grad):
        assert torch.isfinite(t).all()


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_k_samples_are_batched_and_independent(estimator):
    net = BayesMLP(7, [5], 3, estimator=estimator, rho_init=-1.0)
    x = torch.randn(4, 7)
    out = net(bbb.expand_samples(x, 6))
    assert out.shape == (6, 4, 3)
    assert not torch.allclose(out[0], out[1])


def test_batched_samples_equal_a_loop_over_recorded_weights():
    net = BayesMLP(7, [5, 5], 3, rho_init=-1.0)
    x = torch.randn(4, 7)
    k = 5
    with SampleRecorder() as rec:
        out = net(bbb.expand_samples(x, k))
    for j in range(k):
        h = x
        for i, layer in enumerate(net.layers):
            w = rec.get(layer, "weight").w[j]
            b = rec.get(layer, "bias").w[j]
            h = F.linear(h, w, b)
            if i < len(net.layers) - 1:
                h = torch.relu(h)
        torch.testing.assert_close(out[j], h)


def test_functional_linear_batched_shapes():
    w, b = torch.randn(3, 4, 5), torch.randn(3, 4)
    x2, x3 = torch.randn(6, 5), torch.randn(3, 6, 5)
    for x in (x2, x3, bbb.expand_samples(x2, 3)):
        out = BF.linear(x, w, b)
        for j in range(3):
            xj = x if x.dim() == 2 else x[j]
            torch.testing.assert_close(out[j], F.linear(xj, w[j], b[j]))


def test_state_dict_holds_only_variational_parameters_and_round_trips():
    net = BayesMLP(6, [4], 2)
    keys = set(net.state_dict())
    assert keys == {f"layers.{i}.{p}_{s}" for i in range(2) for p in ("weight", "bias") for s in ("mu", "rho")}
    n_weights = sum(lyr.weight_mu.numel() + lyr.bias_mu.numel() for lyr in net.layers)
    assert sum(p.numel() for p in net.parameters()) == 2 * n_weights  # no duplicated parameters
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    buf.seek(0)
    other = BayesMLP(6, [4], 2)
    other.load_state_dict(torch.load(buf, weights_only=True))
    net.eval()
    other.eval()
    x = torch.randn(3, 6)
    torch.testing.assert_close(net(x), other(x), rtol=0, atol=0)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_nothing_is_written_on_modules_during_forward(estimator):
    net = BayesMLP(6, [4], 2, estimator=estimator)

    def snapshot():
        return [(dict(m.__dict__), dict(m._parameters), dict(m._buffers)) for m in net.modules()]

    before = snapshot()
    with SampleRecorder() as rec:
        net(torch.randn(3, 6))
    model_kl(net, "mc", rec)
    after = snapshot()
    for (d0, p0, b0), (d1, p1, b1) in zip(before, after):
        assert d0.keys() == d1.keys() and all(d0[k] is d1[k] for k in d0)
        assert p0 == p1 and b0 == b1


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_seeded_sampling_is_reproducible(estimator):
    net = BayesMLP(6, [4], 2, estimator=estimator, rho_init=-1.0)
    x = torch.randn(3, 6)
    torch.manual_seed(5)
    a = net(x)
    torch.manual_seed(5)
    b = net(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    with SampleRecorder(g1):
        c = net(x)
    with SampleRecorder(g2):
        d = net(x)
    torch.testing.assert_close(c, d, rtol=0, atol=0)
    assert not torch.equal(a, c)


def test_eval_mode_is_deterministic_and_sampling_context_switches():
    net = BayesMLP(6, [4], 2, rho_init=-1.0)
    x = torch.randn(3, 6)
    net.eval()
    a, b = net(x), net(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    mean = F.linear(torch.relu(F.linear(x, net.layers[0].weight_mu, net.layers[0].bias_mu)),
                    net.layers[1].weight_mu, net.layers[1].bias_mu)
    torch.testing.assert_close(a, mean)
    with sampling(net, "sample"):
        c, d = net(x), net(x)
        assert not torch.equal(c, d)
    torch.testing.assert_close(net(x), a, rtol=0, atol=0)  # restored
    net.train()
    with sampling(net, "mean"):
        torch.testing.assert_close(net(x), a, rtol=0, atol=0)
    with pytest.raises(ValueError, match="sampling mode"):
        with sampling(net, "median"):
            pass


def test_functional_call_works():
    net = BayesMLP(6, [4], 2).eval()
    params = {k: torch.zeros_like(v) for k, v in net.named_parameters()}
    out = torch.func.functional_call(net, params, (torch.randn(3, 6),))
    torch.testing.assert_close(out, torch.zeros(3, 2))


def test_initialisation_defaults_and_options():
    layer = BayesLinear(100, 50)
    assert layer.weight_mu.abs().max() <= 1 / math.sqrt(100)
    torch.testing.assert_close(layer.weight_sigma, torch.full((50, 100), math.log1p(math.exp(-5.0))))
    layer = BayesLinear(100, 50, mu_init_scale=0.01, rho_init=-3.0, dtype=torch.float64)
    assert layer.weight_mu.dtype == torch.float64 and layer.weight_mu.abs().max() <= 0.01
    assert layer.weight_rho.unique().tolist() == [-3.0]
    r = repr(layer)
    assert "estimator=reparam" in r and "ScaleMixturePrior" in r and "in_features=100" in r


def test_bias_false_has_no_bias_parameters():
    layer = BayesLinear(3, 2, bias=False)
    assert set(dict(layer.named_parameters())) == {"weight_mu", "weight_rho"}
    assert layer(torch.randn(4, 3)).shape == (4, 2)


@pytest.mark.parametrize("kwargs,match", [
    ({"estimator": "mcmc"}, "estimator"), ({"out_features": 0}, "positive"),
    ({"mu_init_scale": -1.0}, "mu_init_scale"), ({"prior": {"type": "cauchy"}}, "prior"),
])
def test_layer_rejects_bad_arguments(kwargs, match):
    args = {"in_features": 3, "out_features": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        BayesLinear(**args)


def test_mlp_rejects_bad_widths():
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        BayesMLP(784, [400, 0], 10)
    with pytest.raises(ValueError, match="activation"):
        BayesMLP(784, [400], 10, activation="swish2")


# ------------------------------------------------------------------ convolutions


def test_conv_batched_samples_equal_a_loop():
    conv = BayesConv2d(2, 3, 3, padding=1, rho_init=-1.0)
    x = torch.randn(4, 2, 6, 6)
    with SampleRecorder() as rec:
        out = conv(bbb.expand_samples(x, 3))
    assert out.shape == (3, 4, 3, 6, 6)
    for j in range(3):
        ref = F.conv2d(x, rec.get(conv, "weight").w[j], rec.get(conv, "bias").w[j], padding=1)
        torch.testing.assert_close(out[j], ref)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_conv_output_moments(estimator):
    torch.manual_seed(2)
    conv = BayesConv2d(2, 2, 3, estimator=estimator, rho_init=-1.0)
    x = torch.randn(2, 2, 4, 4)
    k = 20_000
    with torch.no_grad():
        out = conv(bbb.expand_samples(x, k))
        mean = F.conv2d(x, conv.weight_mu, conv.bias_mu)
        var = F.conv2d(x * x, softplus(conv.weight_rho) ** 2, softplus(conv.bias_rho) ** 2)
    assert ((out.mean(0) - mean).abs() < 5 * torch.sqrt(var / k)).all()
    torch.testing.assert_close(out.var(0), var, rtol=0.07, atol=0)


def test_conv_mean_mode_and_per_sample_wrapper():
    net = torch.nn.Sequential(BayesConv2d(1, 4, 3, padding=1), bbb.nn.PerSample(torch.nn.MaxPool2d(2)),
                              torch.nn.Flatten(-3), BayesLinear(16, 2))
    x = torch.randn(5, 1, 4, 4)
    assert net(bbb.expand_samples(x, 3)).shape == (3, 5, 2)
    net.eval()
    assert net(x).shape == (5, 2)
    with pytest.raises(ValueError, match="divisible"):
        BayesConv2d(3, 4, 3, groups=2)


def test_gaussian_prior_layer_closed_form_kl():
    layer = BayesLinear(4, 3, prior=GaussianPrior(0.5))
    q_w, q_b = layer.posterior("weight"), layer.posterior("bias")
    ref = sum(torch.distributions.kl_divergence(torch.distributions.Normal(q.mu, q.sigma),
                                                torch.distributions.Normal(0.0, 0.5)).sum() for q in (q_w, q_b))
    torch.testing.assert_close(model_kl(layer, "closed"), ref)


def test_assigning_the_mean_is_a_one_line_error_saying_what_to_set():
    """``layer.weight = nn.Parameter(w)`` (torch's habit) met torch's bare KeyError: a bbb error
    names weight_mu/weight_rho; the recurrent layers' names too; other attributes set as usual."""
    layer = BayesLinear(3, 2)
    for name, value in (("weight", nn.Parameter(torch.zeros(2, 3))), ("bias", torch.zeros(2)), ("bias", None)):
        with pytest.raises(UserError, match=rf"BayesLinear\.{name} is the posterior mean .* set {name}_mu"):
            setattr(layer, name, value)
    lstm = bbb.nn.BayesLSTM(3, 4)
    with pytest.raises(UserError, match=r"set weight_ih_l0_mu"):
        lstm.weight_ih_l0 = nn.Parameter(torch.zeros(16, 3))
    layer.extra = nn.Parameter(torch.zeros(1))  # other names: torch's behaviour
    assert "extra" in dict(layer.named_parameters())


def test_functional_call_with_the_deterministic_name_says_which_key_to_pass():
    # torch.func.functional_call(layer, {"weight": w}) met the message for an assignment, which named
    # in-place copies and load_state_dict but not the key functional_call takes
    with pytest.raises(UserError, match=r"functional_call: the key 'weight_mu'"):
        torch.func.functional_call(BayesLinear(3, 2), {"weight": torch.zeros(2, 3)}, (torch.ones(1, 3),))


@pytest.mark.parametrize("cls", [bbb.BayesMLP, bbb.nn.BayesPopulation])
def test_mlp_widths_are_checked_not_cut(cls):
    extra = {"bayesian": 2} if cls is bbb.nn.BayesPopulation else {}
    with pytest.raises(bbb.UserError, match=r"hidden_sizes is a list of widths.*got 400"):
        cls(3, 400, 2, **extra)  # was: TypeError 'int' object is not iterable
    with pytest.raises(bbb.UserError, match="a hidden width must be an integer >= 1, got 400.7"):
        cls(3, [400.7], 2, **extra)  # was: a width of 400, silently
    with pytest.raises(bbb.UserError, match="a hidden width must be an integer >= 1, got 0"):
        cls(3, [0], 2, **extra)
    x = torch.randn(2, 2, 3) if extra else torch.randn(2, 3)  # (a population: members, rows, features)
    assert cls(3, (4, 5.0), 2, **extra)(x).shape[-1] == 2


@pytest.mark.parametrize(("option", "bad"), [("rho_init", "-5"), ("rho_init", None), ("rho_init", float("inf")),
                                             ("mu_init_scale", "0.1"), ("mu_init_scale", 0.0)])
def test_a_layer_s_initial_numbers_are_checked_in_one_line(option, bad):
    with pytest.raises(bbb.UserError, match=option):  # a string or None: a TypeError of math.isfinite
        bbb.nn.BayesLinear(3, 2, **{option: bad})


class _Checkpointed(nn.Module):
    """A first layer inside torch.utils.checkpoint (reentrant: its first pass runs under no_grad)."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.l1, self.l2 = BayesLinear(3, 4, rho_init=-1.0), BayesLinear(4, 2, rho_init=-1.0)
        self.checkpointed = checkpointed

    def forward(self, x):
        h = (torch.utils.checkpoint.checkpoint(self.l1, x, use_reentrant=True) if self.checkpointed else self.l1(x))
        return self.l2(torch.relu(h))


@pytest.mark.parametrize("estimator", ["reparam", "flipout"])
def test_a_reentrant_checkpoint_gives_the_gradient_of_the_loss(estimator):
    # the weights drawn under the checkpoint's no_grad entered the Monte Carlo KL detached: log P(w) gave
    # mu and rho no gradient, silently
    x, y = torch.randn(5, 3, requires_grad=True), torch.randint(0, 2, (5,))
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        net = _Checkpointed(checkpointed)
        for m in (net.l1, net.l2):
            m.estimator = bbb.nn.base.Estimator(estimator)
        torch.manual_seed(4)
        bbb.ELBO(net, num_batches=1, kl="mc")(x, y).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("how", ["samples", "generator"])
def test_a_reentrant_checkpoint_refuses_what_its_recompute_would_draw_otherwise(how):
    net = _Checkpointed(True)
    elbo = bbb.ELBO(net, num_batches=1, kl="mc", num_samples=3 if how == "samples" else 1)
    x, y = torch.randn(5, 3, requires_grad=True), torch.randint(0, 2, (5,))
    with pytest.raises(UserError, match="use_reentrant=True.*another network's"):
        elbo(x, y, generator=torch.Generator().manual_seed(0) if how == "generator" else None)
