"""The Bayesian convolutions of ``bbb.nn.conv``: every ``torch.nn`` convolution (1-, 2-, 3-d, plain
and transposed), every option (padding modes, string padding, groups, stride, dilation,
output_padding) and every estimator, checked against the torch layers."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn

import bbb
from bbb import functional as BF
from bbb.distributions import softplus
from bbb.elbo import ELBO
from bbb.engine import Engine, counter_noise
from bbb.errors import UserError
from bbb.nn import BayesLinear, SampleRecorder
from bbb.nn.conv import (
    BayesConv1d,
    BayesConv2d,
    BayesConv3d,
    BayesConvTranspose1d,
    BayesConvTranspose2d,
    BayesConvTranspose3d,
)
from bbb.nn.samples import forward_samples

ESTIMATORS = ["reparam", "local", "flipout"]
BAYES = {nn.Conv1d: BayesConv1d, nn.Conv2d: BayesConv2d, nn.Conv3d: BayesConv3d,
         nn.ConvTranspose1d: BayesConvTranspose1d, nn.ConvTranspose2d: BayesConvTranspose2d,
         nn.ConvTranspose3d: BayesConvTranspose3d}
SPATIAL = {1: (7,), 2: (5, 6), 3: (4, 5, 3)}
NDIM = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3, nn.ConvTranspose1d: 1, nn.ConvTranspose2d: 2,
        nn.ConvTranspose3d: 3}

PLAIN = [  # (in, out, kernel, options)
    (4, 6, 3, {"padding": 1}),
    (4, 6, 3, {"padding": 1, "padding_mode": "reflect"}),
    (4, 6, 3, {"padding": 2, "padding_mode": "replicate", "stride": 2}),
    (4, 6, 3, {"padding": 1, "padding_mode": "circular", "dilation": 2}),
    (4, 6, 3, {"padding": 2, "stride": 2, "dilation": 2, "groups": 2}),
    (4, 8, 3, {"padding": 1, "groups": 4, "padding_mode": "reflect"}),  # depthwise
    (4, 6, 2, {"padding": "same", "dilation": 1}),  # even kernel: asymmetric 'same'
    (4, 6, 2, {"padding": "same", "padding_mode": "reflect"}),
    (4, 6, 3, {"padding": "same", "dilation": 2, "padding_mode": "circular"}),
    (4, 6, 3, {"padding": "valid", "bias": False}),
]
TRANSPOSED = [
    (4, 6, 3, {"stride": 2, "padding": 1, "output_padding": 1}),
    (4, 6, 3, {"groups": 2, "dilation": 2, "bias": False}),
    (4, 6, 2, {"stride": 3, "dilation": 2, "output_padding": 1, "padding": 1}),
    (4, 4, 3, {"groups": 4, "stride": 2}),
]
CASES = [(t, *c) for t in (nn.Conv1d, nn.Conv2d, nn.Conv3d) for c in PLAIN] + \
        [(t, *c) for t in (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d) for c in TRANSPOSED]
# one demanding case per class for the costlier checks
HARD = {t: (t, 4, 6, 3, {"padding": 1, "padding_mode": "reflect", "groups": 2, "stride": 2}) for t in
        (nn.Conv1d, nn.Conv2d, nn.Conv3d)}
HARD.update({t: (t, 4, 6, 3, {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2, "dilation": 2})
             for t in (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)})


def _id(case):
    t, i, o, k, opts = case
    return f"{t.__name__}-{i}-{o}-{k}-" + "-".join(f"{a}={v}" for a, v in opts.items())


def _make(case, seed=0):
    t, i, o, k, opts = case
    torch.manual_seed(seed)
    layer = t(i, o, k, **opts)
    x = torch.randn(3, i, *SPATIAL[NDIM[t]])
    return layer, x


def _torch_with(layer, weight, bias):
    """A copy of the torch layer with the given weight and bias."""
    ref = copy.deepcopy(layer)
    with torch.no_grad():
        ref.weight.copy_(weight)
        if ref.bias is not None:
            ref.bias.copy_(bias)
    return ref


# ------------------------------------------------------------------ the mean is the torch layer


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_mean_equals_the_torch_layer_and_its_state_dict_loads(case):
    layer, x = _make(case)
    t, i, o, k, opts = case
    cls = BAYES[t]
    b = cls.from_torch(layer, rho_init=-3.0).eval()
    assert type(b) is cls and t in cls.converts
    assert b.weight.shape == layer.weight.shape and b.weight_rho.shape == layer.weight.shape
    assert (b.bias is None) == (layer.bias is None)
    assert b.padding_mode == layer.padding_mode and b.groups == layer.groups
    ref = layer(x)
    out = b(x)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(b(x[0]), layer(x[0]))  # unbatched (C, *spatial)
    # a deterministic state_dict (weight -> weight_mu) loads strictly into a fresh layer
    fresh = cls(i, o, k, **opts, rho_init=-3.0).eval()
    assert float(fresh.weight_rho.detach().max()) == -3.0
    fresh.load_state_dict(layer.state_dict())
    torch.testing.assert_close(fresh.weight_mu, layer.weight)
    torch.testing.assert_close(fresh(x), ref)
    assert set(fresh.state_dict()) == {f"{n}_{p}" for n in ("weight", "bias") if getattr(layer, n) is not None
                                        for p in ("mu", "rho")}
    # from_weights=False: same options and shapes, fresh means, torch's init bound 1/sqrt(fan_in)
    cold = cls.from_torch(layer, from_weights=False)
    fan_in = layer.weight.shape[1] * math.prod(layer.weight.shape[2:])
    assert float(cold.weight_mu.detach().abs().max()) <= 1 / math.sqrt(fan_in)
    assert cold.extra_repr() and cold(x).shape == ref.shape


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_sigma_zero_samples_equal_the_mean_with_torch_shapes(case, estimator):
    layer, x = _make(case)
    b = BAYES[case[0]].from_torch(layer, estimator=estimator, rho_init=-40.0)
    assert b.training and b.is_sampling()
    ref = layer(x).detach()
    atol = 1e-3 if estimator == "local" else 1e-5  # local adds sqrt(LRT_EPS) = 1e-4 of noise
    with torch.no_grad():
        torch.testing.assert_close(b(x), ref, atol=atol, rtol=1e-4)
        out = b(bbb.expand_samples(x, 2))  # an explicit sample dimension
        assert out.shape == (2, *ref.shape)
        torch.testing.assert_close(out, ref.expand(2, *ref.shape), atol=atol, rtol=1e-4)


# ------------------------------------------------------------------ k samples


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("t", list(HARD), ids=lambda t: t.__name__)
def test_forward_samples_gives_different_networks(t, estimator):
    layer, x = _make(HARD[t])
    model = nn.Sequential(BAYES[t].from_torch(layer, estimator=estimator, rho_init=-2.0)).eval()
    with torch.no_grad(), bbb.nn.sampling(model, "sample"):
        y = forward_samples(model, x, 4)
    assert y.shape == (4, *layer(x).shape)
    for n in range(x.shape[0]):
        for i in range(4):
            for j in range(i):
                assert not torch.allclose(y[i, n], y[j, n])
    with torch.no_grad():  # eval, no sampling override: the mean
        torch.testing.assert_close(forward_samples(model, x, 3), layer(x).expand(3, *y.shape[1:]))


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_reparam_batched_samples_equal_one_sample_at_a_time(case):
    layer, x = _make(case)
    b = BAYES[case[0]].from_torch(layer, rho_init=-1.0)
    for run in (lambda: b(bbb.expand_samples(x, 3)), lambda: forward_samples(nn.Sequential(b), x, 3)):
        with torch.no_grad(), SampleRecorder() as rec:
            out = run()
        w, bias = rec.get(b, "weight").w, (rec.get(b, "bias").w if layer.bias is not None else [None] * 3)
        assert w.shape == (3, *layer.weight.shape)
        for j in range(3):
            torch.testing.assert_close(out[j], _torch_with(layer, w[j], bias[j])(x).detach())


@pytest.mark.parametrize("t", list(HARD), ids=lambda t: t.__name__)
def test_flipout_with_unit_signs_is_the_perturbed_convolution(t):
    layer, x = _make(HARD[t])
    _, _, _, _, opts = HARD[t]
    nd = NDIM[t]
    transposed = t.__name__.startswith("ConvTranspose")
    mu, bmu = layer.weight.detach(), layer.bias.detach()
    dw, db = 0.1 * torch.randn(2, *mu.shape), 0.1 * torch.randn(2, *bmu.shape)
    xk = bbb.expand_samples(x, 2)
    ones = (torch.ones(2, *x.shape[:2], *(1,) * nd), torch.ones(2, x.shape[0], layer.out_channels, *(1,) * nd))
    kw = {a: v for a, v in opts.items() if a != "padding_mode"}
    out = BF.conv_flipout(xk, mu, dw, bmu, db, nd=nd, transposed=transposed,
                          padding_mode=opts.get("padding_mode", "zeros"), signs=ones,
                          **kw)
    for j in range(2):
        torch.testing.assert_close(out[j], _torch_with(layer, mu + dw[j], bmu + db[j])(x).detach())


# ------------------------------------------------------------------ moments and gradients


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("t", list(HARD), ids=lambda t: t.__name__)
def test_output_moments_match_the_closed_form(t, estimator):
    """Every estimator's output per example and position is N(conv(x, mu) + b_mu,
    conv(x^2, sigma^2) + b_sigma^2); the variance through the torch layer with squared inputs."""
    layer, x = _make(HARD[t])
    torch.manual_seed(1)
    b = BAYES[t].from_torch(layer, estimator=estimator, rho_init=-1.0)
    with torch.no_grad():
        b.weight_rho.uniform_(-2.0, 0.0)
        b.bias_rho.uniform_(-2.0, 0.0)
        k = 2000
        out = b(bbb.expand_samples(x, k))
        mean = layer(x)
        var = _torch_with(layer, softplus(b.weight_rho) ** 2, softplus(b.bias_rho) ** 2)(x * x)
    assert ((out.mean(0) - mean).abs() < 5 * torch.sqrt(var / k)).all()
    torch.testing.assert_close(out.var(0), var, rtol=0.25, atol=0)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("t", list(HARD), ids=lambda t: t.__name__)
def test_gradients_reach_mu_and_rho(t, estimator):
    layer, x = _make(HARD[t])
    b = BAYES[t].from_torch(layer, estimator=estimator, rho_init=-2.0)
    for xin in (x, bbb.expand_samples(x, 2)):
        b.zero_grad()
        (b(xin) ** 2).sum().backward()
        for name in ("weight_mu", "weight_rho", "bias_mu", "bias_rho"):
            g = getattr(b, name).grad
            assert g is not None and bool(g.abs().sum() > 0) and bool(torch.isfinite(g).all()), name


def test_local_variance_closed_form_on_a_tiny_case():
    """One input channel, one output, a 2-tap kernel, no bias: var = x0^2 s0^2 + x1^2 s1^2."""
    b = BayesConv1d(1, 1, 2, bias=False, estimator="local")
    with torch.no_grad():
        b.weight_mu.copy_(torch.tensor([[[0.5, -1.0]]]))
        b.weight_rho.copy_(torch.tensor([[[0.0, 1.0]]]))
        x = torch.tensor([[[2.0, 3.0, 0.0]]])
        s0, s1 = softplus(torch.tensor(0.0)), softplus(torch.tensor(1.0))
        torch.manual_seed(0)
        out = b(bbb.expand_samples(x, 20000))[:, 0, 0]
    want_mean = torch.tensor([0.5 * 2 - 3.0, 0.5 * 3])
    want_var = torch.stack([4 * s0**2 + 9 * s1**2, 9 * s0**2 + 0 * s1**2])
    torch.testing.assert_close(out.mean(0), want_mean, atol=0.1, rtol=0)
    torch.testing.assert_close(out.var(0), want_var, rtol=0.05, atol=0)


# ------------------------------------------------------------------ options and errors


def test_padding_modes_and_output_size():
    torch.manual_seed(0)
    for mode in ("reflect", "replicate", "circular"):
        conv = nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode)
        b = BayesConv2d.from_torch(conv, estimator="flipout")
        assert b.padding_mode == mode and f"padding_mode='{mode}'" in repr(b)
        x = torch.randn(2, 2, 4, 5)
        assert b(x).shape == conv(x).shape
        torch.testing.assert_close(b.eval()(x), conv(x))
    direct = BayesConv3d(2, 2, 3, padding=1, padding_mode="replicate")
    assert direct(torch.randn(1, 2, 3, 3, 3)).shape == (1, 2, 3, 3, 3)
    # torch's output_size for transposed convolutions
    up = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    b = BayesConvTranspose2d.from_torch(up).eval()
    x = torch.randn(2, 2, 4, 4)
    for size in ((8, 8), (7, 8), (2, 3, 8, 7)):
        torch.testing.assert_close(b(x, output_size=size), up(x, output_size=size))
    b.train()
    assert b(bbb.expand_samples(x, 2), output_size=(8, 7)).shape == (2, 2, 3, 8, 7)
    assert b(x).shape == up(x).shape  # the override does not stick


def test_the_legacy_2d_functions_still_work():
    x, w, bias = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(4)
    torch.testing.assert_close(BF.conv2d(x, w, bias, 1, 1), nn.functional.conv2d(x, w, bias, 1, 1))
    wk = torch.randn(2, 4, 3, 3, 3)
    out = BF.conv2d(x, wk, None, padding=1)
    torch.testing.assert_close(out[1], nn.functional.conv2d(x, wk[1], padding=1))
    assert BF.conv2d_local(x, w, w.abs(), bias, bias.abs(), 1, 1).shape == (2, 4, 5, 5)
    assert BF.conv2d_flipout(x, w, 0.1 * wk[0], padding=1).shape == (2, 4, 5, 5)
    assert BayesConv2d.from_conv(nn.Conv2d(3, 4, 3)).weight.shape == (4, 3, 3, 3)


BAD = {
    "transposed reflect": lambda: BayesConvTranspose2d(2, 2, 3, padding_mode="reflect"),
    "transposed same": lambda: BayesConvTranspose1d(2, 2, 3, padding="same"),
    "unknown padding mode": lambda: BayesConv2d(2, 2, 3, padding_mode="mirror"),
    "unknown padding string": lambda: BayesConv2d(2, 2, 3, padding="full"),
    "strided same": lambda: BayesConv1d(2, 2, 3, stride=2, padding="same"),
    "groups": lambda: BayesConv2d(3, 4, 3, groups=2),
    "kernel rank": lambda: BayesConv3d(2, 2, (3, 3)),
    "negative padding": lambda: BayesConv2d(2, 2, 3, padding=-1),
    "output_padding too large": lambda: BayesConvTranspose2d(2, 2, 3, stride=1, output_padding=1),
    "estimator": lambda: BayesConv2d(2, 2, 3, estimator="bogus"),
    "from_torch type": lambda: BayesConv2d.from_torch(nn.Conv1d(2, 2, 3)),
    "from_torch transposed": lambda: BayesConv2d.from_torch(nn.ConvTranspose2d(2, 2, 3)),
    "from_torch subclass": lambda: BayesConv1d.from_torch(type("MyConv", (nn.Conv1d,), {})(2, 2, 3)),
    "channels": lambda: BayesConv2d(2, 2, 3)(torch.randn(1, 3, 5, 5)),
    "rank": lambda: BayesConv2d(2, 2, 3)(torch.randn(5, 5)),
    "output_size": lambda: BayesConvTranspose2d(2, 2, 3, stride=2)(torch.randn(1, 2, 4, 4), output_size=(20, 20)),
    "functional transposed reflect": lambda: BF.conv(torch.randn(1, 2, 4), torch.randn(2, 2, 3), padding=1,
                                                     nd=1, transposed=True, padding_mode="reflect"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_unsupported_combinations_are_one_line_user_errors(name):
    with pytest.raises(UserError) as err:
        BAD[name]()
    assert "\n" not in str(err.value) and str(err.value)


def test_the_engine_fuses_new_conv_layers_and_equals_the_plain_path():
    def run(engine):
        torch.manual_seed(0)
        net = nn.Sequential(BayesConv3d(1, 2, 2, padding=1, padding_mode="circular"), nn.ReLU(),
                            BayesConvTranspose3d(2, 1, 2, stride=2), nn.Flatten(), BayesLinear(6 ** 3, 2)).double()
        x = torch.randn(4, 1, 2, 2, 2, dtype=torch.float64)
        y = torch.tensor([0, 1, 1, 0])
        elbo = ELBO(net, num_batches=2, kl="mc")
        o = Engine(net, "adam", lr=0.05, kl="mc", seed=1, compile=False) if engine else \
            torch.optim.Adam(net.parameters(), lr=0.05)
        for i in range(2):
            with (o.sampling() if engine else counter_noise(net, 1, i)):
                out = elbo(x, y, batch_index=i % 2)
            o.zero_grad()
            out.loss.backward()
            o.step()
        if engine:
            assert o.fused
        return [p.detach() for p in net.parameters()]
    for u, v in zip(run(True), run(False)):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
