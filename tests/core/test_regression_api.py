"""The regression API (issue 43): mixture log-likelihood, quantiles and coverage, regression metrics in
original units, evaluate's regression path, predict's generator, Standardizer, a learned noise under
the Engine. Synthetic data only."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn as nn

from bbb import uncertainty as U
from bbb.data import Standardizer
from bbb.elbo import ELBO, Gaussian, HeteroscedasticGaussian
from bbb.engine import Engine
from bbb.errors import UserError
from bbb.nn import BayesConv2d, BayesLinear, BayesMLP


def _direct_log_prob(t: torch.Tensor, mu: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """log((1/k) sum_i N(t; mu_i, s_i^2)), the densities summed directly in float64."""
    t, mu, s = t.double(), mu.double(), s.double()
    dens = torch.exp(-0.5 * ((t - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))
    return torch.log(dens.sum(0) / mu.shape[0])


# --------------------------------------------------------------------------------------------
# mixture log-likelihood, quantiles, coverage
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k,b", [(1, 5), (3, 7), (20, 64)])
@pytest.mark.parametrize("shape", ["float", "0d", "k", "kb", "1b"])
def test_mixture_log_prob_matches_a_direct_float64_computation(k, b, shape):
    g = torch.Generator().manual_seed(k * 100 + b)
    mu = torch.randn(k, b, generator=g, dtype=torch.float64)
    t = torch.randn(b, generator=g, dtype=torch.float64)
    full = {"float": torch.full((k, b), 0.7, dtype=torch.float64),
            "0d": torch.full((k, b), 0.4, dtype=torch.float64),
            "k": (torch.rand(k, 1, generator=g, dtype=torch.float64) + 0.2).expand(k, b),
            "kb": torch.rand(k, b, generator=g, dtype=torch.float64) + 0.2,
            "1b": (torch.rand(1, b, generator=g, dtype=torch.float64) + 0.2).expand(k, b)}[shape]
    given = {"float": 0.7, "0d": torch.tensor(0.4, dtype=torch.float64), "k": full[:, 0].clone(),
             "kb": full, "1b": full[:1].clone()}[shape]
    got = U.gaussian_mixture_log_prob(t, mu, given)
    assert got.shape == (b,) and got.dtype == torch.float64
    torch.testing.assert_close(got, _direct_log_prob(t, mu, full), rtol=1e-12, atol=1e-12)
    # float32 inputs: computed in float64, returned in float32
    got32 = U.gaussian_mixture_log_prob(t.float(), mu.float(), given if isinstance(given, float) else given.float())
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), _direct_log_prob(t.float(), mu.float(), full.float()),
                               rtol=1e-5, atol=1e-5)


def test_mixture_log_prob_is_finite_far_in_the_tails():
    # 60 sd from both components: each density underflows to 0 in float64, the logsumexp does not
    mu = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    lp = U.gaussian_mixture_log_prob(torch.tensor([61.0], dtype=torch.float64), mu, 1.0)
    assert _direct_log_prob(torch.tensor([61.0]), mu, torch.ones(2, 1)).isinf().all()
    expect = math.log(0.5 * (math.exp(-0.5 * 61**2 + 0.5 * 60**2) + 1)) - 0.5 * 60**2 - 0.5 * math.log(2 * math.pi)
    assert float(lp[0]) == pytest.approx(expect, rel=1e-12)


def test_mixture_functions_check_their_arguments():
    mu = torch.zeros(3, 4)
    with pytest.raises(UserError, match="sigmas must be finite standard deviations > 0"):
        U.gaussian_mixture_log_prob(torch.zeros(4), mu, torch.tensor([1.0, 0.0, 1.0]))
    with pytest.raises(UserError, match="do not fit means"):
        U.gaussian_mixture_log_prob(torch.zeros(4), mu, torch.ones(2, 4))
    with pytest.raises(UserError, match=r"target must be a \(B,\) tensor"):
        U.gaussian_mixture_log_prob(torch.zeros(5), mu, 1.0)
    with pytest.raises(UserError, match=r"means must be a \(k, B\) tensor"):
        U.gaussian_mixture_log_prob(torch.zeros(4), torch.zeros(4), 1.0)
    with pytest.raises(UserError, match=r"q must lie in \(0, 1\)"):
        U.gaussian_mixture_quantiles(mu, 1.0, [0.5, 1.0])
    with pytest.raises(UserError, match=r"levels must be one or more numbers in \(0, 1\)"):
        U.interval_coverage(torch.zeros(4), mu, 1.0, levels=(0.0,))


def test_quantiles_of_one_component_are_the_normal_quantiles():
    g = torch.Generator().manual_seed(1)
    mu = torch.randn(1, 50, generator=g, dtype=torch.float64) * 3
    s = torch.rand(1, 50, generator=g, dtype=torch.float64) * 2 + 0.05
    q = torch.tensor([1e-6, 0.025, 0.1, 0.5, 0.9, 0.975, 1 - 1e-6], dtype=torch.float64)
    got = U.gaussian_mixture_quantiles(mu, s, q)
    assert got.shape == (7, 50)
    expect = torch.distributions.Normal(mu, s).icdf(q[:, None])
    torch.testing.assert_close(got, expect, rtol=1e-6, atol=1e-6)
    one = U.gaussian_mixture_quantiles(mu, s, 0.975)  # a number: (B,)
    assert one.shape == (50,)
    torch.testing.assert_close(one, expect[5], rtol=1e-6, atol=1e-6)


def test_quantiles_of_a_two_component_mixture_invert_its_cdf():
    g = torch.Generator().manual_seed(2)
    mu = torch.randn(2, 40, generator=g, dtype=torch.float64) * 4  # often well separated: bimodal
    s = torch.rand(2, 40, generator=g, dtype=torch.float64) + 0.01
    q = torch.tensor([0.001, 0.05, 0.25, 0.5, 0.75, 0.95, 0.999], dtype=torch.float64)
    x = U.gaussian_mixture_quantiles(mu, s, q)
    cdf = torch.special.ndtr((x[:, None, :] - mu) / s).mean(1)
    torch.testing.assert_close(cdf, q[:, None].expand_as(cdf), rtol=0, atol=1e-12)
    assert bool((x[1:] >= x[:-1]).all())  # monotone in q
    assert U.gaussian_mixture_quantiles(mu.float(), s.float(), q).dtype == torch.float32


def _mixture_draws(mu: torch.Tensor, s: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """One draw per example from its equal-weight mixture (a uniformly chosen component)."""
    k, b = mu.shape
    pick = torch.randint(0, k, (b,), generator=g)
    cols = torch.arange(b)
    return mu[pick, cols] + s[pick, cols] * torch.randn(b, generator=g, dtype=mu.dtype)


def test_coverage_of_draws_from_the_model_is_near_the_level():
    g = torch.Generator().manual_seed(3)
    k, b = 5, 4000
    mu = torch.randn(k, b, generator=g, dtype=torch.float64)
    s = torch.rand(k, b, generator=g, dtype=torch.float64) * 0.5 + 0.1
    y = _mixture_draws(mu, s, g)
    levels = (0.5, 0.8, 0.9, 0.95)
    cov = U.interval_coverage(y, mu, s, levels)
    assert set(cov) == set(levels)
    for lvl in levels:
        assert abs(cov[lvl] - lvl) < 4 * math.sqrt(lvl * (1 - lvl) / b), (lvl, cov[lvl])
    # the same as counting the targets between the (1-l)/2 and (1+l)/2 quantiles
    for lvl in (0.5, 0.9):
        lo, hi = U.gaussian_mixture_quantiles(mu, s, [(1 - lvl) / 2, (1 + lvl) / 2])
        assert cov[lvl] == pytest.approx(float(((y >= lo) & (y <= hi)).double().mean()), abs=1 / b)
    # an overconfident predictive (noise halved) covers too little
    assert U.interval_coverage(y, mu, s / 4, (0.9,))[0.9] < 0.8


def test_coverage_gap_is_the_mean_distance_and_its_sign_and_interval_calibration_s_error():
    gap = U.coverage_gap([0.5, 0.9, 0.95], [0.44, 0.81, 0.87])  # too narrow at every level
    assert gap["error"] == pytest.approx((0.06 + 0.09 + 0.08) / 3) and gap["bias"] == pytest.approx(-gap["error"])
    wide_and_narrow = U.coverage_gap((0.5, 0.9), (0.6, 0.8))  # the errors add, the signs cancel
    assert wide_and_narrow["error"] == pytest.approx(0.1) and wide_and_narrow["bias"] == pytest.approx(0.0)
    mu, s, y = _normalised_problem()
    cal = U.interval_calibration(y, mu, s)
    assert cal["error"] == U.coverage_gap(cal["levels"], cal["coverage"])["error"]
    for levels, coverage in (([], []), ([0.5, 0.9], [0.5]), ([1.0], [0.9]), ([0.5], [1.2])):
        with pytest.raises(UserError, match="coverage_gap"):
            U.coverage_gap(levels, coverage)


# --------------------------------------------------------------------------------------------
# regression_metrics
# --------------------------------------------------------------------------------------------


def _normalised_problem(seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    k, b = 8, 300
    mu = torch.randn(k, b, generator=g, dtype=torch.float64) * 0.3 + torch.randn(b, generator=g, dtype=torch.float64)
    s = torch.rand(k, b, generator=g, dtype=torch.float64) * 0.4 + 0.2
    y = _mixture_draws(mu, s, g)
    return mu, s, y


def test_regression_metrics_are_those_of_the_original_units():
    mu, s, y = _normalised_problem()
    shift, scale = 12.5, 3.7
    got = U.regression_metrics(mu, s, y, shift=shift, scale=scale)
    assert set(got) == {"rmse", "log_likelihood", "nll", "coverage_50", "coverage_90", "coverage_95", "mean_sd"}
    assert all(isinstance(v, float) for v in got.values())
    # the same problem stated in the original units, with shift 0 and scale 1
    orig = U.regression_metrics(mu * scale + shift, s * scale, y * scale + shift)
    for key in got:
        assert got[key] == pytest.approx(orig[key], rel=1e-9, abs=1e-12), key
    base = U.regression_metrics(mu, s, y)
    assert got["rmse"] == pytest.approx(base["rmse"] * scale, rel=1e-12)
    assert got["log_likelihood"] == pytest.approx(base["log_likelihood"] - math.log(scale), rel=1e-12)
    assert got["nll"] == -got["log_likelihood"]
    assert got["mean_sd"] == pytest.approx(base["mean_sd"] * scale, rel=1e-12)
    for key in ("coverage_50", "coverage_90", "coverage_95"):
        assert got[key] == base[key]
    # by hand: the predictive mean's RMSE, the law of total variance, the mixture log density
    assert base["rmse"] == pytest.approx(float(((mu.mean(0) - y) ** 2).mean().sqrt()), rel=1e-12)
    sd = (mu.var(0, unbiased=False) + (s * s).mean(0)).sqrt()
    assert base["mean_sd"] == pytest.approx(float(sd.mean()), rel=1e-12)
    assert base["log_likelihood"] == pytest.approx(float(_direct_log_prob(y, mu, s).mean()), rel=1e-12)
    # 0-d tensors for shift and scale; other levels name their keys
    t = U.regression_metrics(mu, s, y, shift=torch.tensor(shift), scale=torch.tensor(scale, dtype=torch.float64),
                             levels=(0.8,))
    assert set(t) == {"rmse", "log_likelihood", "nll", "coverage_80", "mean_sd"}
    assert t["rmse"] == pytest.approx(got["rmse"], rel=1e-12)


def test_regression_metrics_check_scale_and_shapes():
    mu, s, y = _normalised_problem()
    with pytest.raises(UserError, match="scale must be a finite number > 0"):
        U.regression_metrics(mu, s, y, scale=0.0)
    with pytest.raises(UserError, match="shift must be a finite number"):
        U.regression_metrics(mu, s, y, shift=float("nan"))
    with pytest.raises(UserError, match="target must be"):
        U.regression_metrics(mu, s, y[:-1])
    with pytest.raises(UserError, match="same coverage key twice"):
        U.regression_metrics(mu, s, y, levels=(0.9, 0.901))


def test_regression_metrics_take_predicts_one_unit_output():
    mu, s, y = _normalised_problem()
    want = U.regression_metrics(mu, s, y, shift=1.0, scale=2.0)
    assert U.regression_metrics(mu[..., None], s, y, shift=1.0, scale=2.0) == want  # (k, B, 1)
    assert U.regression_metrics(mu[..., None], s[..., None], y[:, None], shift=1.0, scale=2.0) == want
    assert U.regression_metrics(mu[..., None], 0.3, y) == U.regression_metrics(mu, 0.3, y)
    with pytest.raises(UserError, match=r"\(k, B, 2\) output splits"):
        U.regression_metrics(torch.stack([mu, s], -1), 0.3, y)
    # a network's own output, as predict returns it
    torch.manual_seed(0)
    x, yy = _regression_data()
    net = BayesMLP(3, [8], 1)
    out = U.predict(net, x, num_samples=4, generator=0)
    assert out.shape == (4, len(x), 1)
    assert U.regression_metrics(out, 0.5, yy) == U.regression_metrics(out[..., 0], 0.5, yy)


# --------------------------------------------------------------------------------------------
# evaluate's regression path and predict's generator
# --------------------------------------------------------------------------------------------


def _regression_data(n: int = 40, d: int = 3):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, d, generator=g)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


def test_evaluate_regression_equals_metrics_from_predict_with_the_same_generator():
    x, y = _regression_data()
    net = BayesMLP(3, [8], 1, rho_init=-2.0)
    lik = Gaussian(sigma=0.3, learn_sigma=True)
    got = U.evaluate(net, (x, y), num_samples=16, likelihood=lik, shift=2.0, scale=5.0, generator=7)
    out = U.predict(net, x, num_samples=16, generator=7)
    assert out.shape == (16, 40, 1)
    by_hand = U.regression_metrics(out.squeeze(-1), lik.sigma.detach(), y, shift=2.0, scale=5.0)
    assert got == pytest.approx(by_hand, rel=1e-12)
    assert got["log_likelihood"] == pytest.approx(
        float(_direct_log_prob(y, out.squeeze(-1), torch.full((16, 40), 0.3)).mean()) - math.log(5.0), rel=1e-5)
    # a DataLoader gives the same (its batches see the same 16 networks)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    assert U.evaluate(net, loader, num_samples=16, likelihood=lik, shift=2.0, scale=5.0,
                      generator=7) == pytest.approx(got, rel=1e-6)


def test_evaluate_regression_with_a_heteroscedastic_likelihood():
    x, y = _regression_data()
    net = BayesMLP(3, [8], 2, rho_init=-2.0)
    lik = HeteroscedasticGaussian()
    got = U.evaluate(net, (x, y[:, None]), num_samples=12, likelihood=lik, generator=3)
    out = U.predict(net, x, num_samples=12, generator=3)
    means, sigmas = lik.split(out)
    assert got == pytest.approx(U.regression_metrics(means, sigmas, y), rel=1e-12)
    assert U.evaluate(net, (x, y), num_samples=12, likelihood="heteroscedastic", generator=3) == got


def test_evaluate_float_targets_without_likelihood_is_a_one_line_error():
    x, y = _regression_data()
    net = BayesMLP(3, [8], 1)
    with pytest.raises(UserError, match="likelihood=") as e:
        U.evaluate(net, (x, y), num_samples=2)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="regression only"):
        U.evaluate(net, (x, y.long()), num_samples=2, scale=2.0)
    # classification is unchanged, and reproducible with a generator
    labels = (y > 0).long()
    clf = BayesMLP(3, [8], 2, rho_init=-2.0)
    a = U.evaluate(clf, (x, labels), num_samples=4, generator=1)
    assert set(a) == {"error", "nll", "brier", "ece", "entropy", "mutual_information"}
    assert U.evaluate(clf, (x, labels), num_samples=4, generator=1) == a


def _conv_net(estimator: str) -> nn.Module:
    return nn.Sequential(BayesConv2d(1, 3, 3, estimator=estimator, rho_init=-2.0), nn.ReLU(), nn.Flatten(),
                         BayesLinear(3 * 4 * 4, 2, estimator=estimator, rho_init=-2.0))


@pytest.mark.parametrize("estimator", ["reparam", "local", "flipout"])
@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_predict_generator_is_reproducible_and_leaves_the_global_rng_alone(estimator, kind):
    torch.manual_seed(0)
    if kind == "mlp":
        net: nn.Module = BayesMLP(3, [6], 2, estimator=estimator, rho_init=-2.0)
        x = torch.randn(5, 3)
    else:
        net = _conv_net(estimator)
        x = torch.randn(5, 1, 6, 6)
    state = torch.get_rng_state()
    a = U.predict(net, x, num_samples=4, generator=11)
    assert torch.equal(torch.get_rng_state(), state)
    b = U.predict(net, x, num_samples=4, generator=11)
    c = U.predict(net, x, num_samples=4, generator=12)
    d = U.predict(net, x, num_samples=4, generator=torch.Generator().manual_seed(11))
    chunked = U.predict(net, x, num_samples=4, generator=11, batch_size=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b) and torch.equal(a, d)
    assert not torch.allclose(a, c)
    assert not torch.allclose(a[0], a[1])  # k different networks
    if estimator == "reparam":  # chunks share the k weight draws (local and flipout draw per example)
        torch.testing.assert_close(chunked, a)
    # without a generator: torch's global one, as before
    U.predict(net, x, num_samples=4)
    assert not torch.equal(torch.get_rng_state(), state)


def test_predict_generator_restores_the_global_rng_after_a_shuffling_dataloader():
    x, y = _regression_data()
    net = BayesMLP(3, [6], 1, rho_init=-2.0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True)
    state = torch.get_rng_state()
    U.predict(net, loader, num_samples=3, return_targets=True, generator=0)
    assert torch.equal(torch.get_rng_state(), state)


class _GlobalNoise(nn.Module):
    """A layer that ignores bbb's generator: draws from torch's global one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


def test_predict_generator_refuses_a_layer_that_draws_from_the_global_rng():
    net = nn.Sequential(BayesLinear(3, 2), _GlobalNoise())
    x = torch.randn(4, 3)
    state = torch.get_rng_state()
    with pytest.raises(UserError, match="global random generator") as e:
        U.predict(net, x, num_samples=2, generator=0)
    assert "\n" not in str(e.value)
    assert torch.equal(torch.get_rng_state(), state)  # restored all the same
    with pytest.raises(UserError, match="int seed"):
        U.predict(net, x, generator=-1)


# --------------------------------------------------------------------------------------------
# Standardizer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_standardizer_round_trip(dtype, tol):
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(200, 4, generator=g, dtype=torch.float64) * torch.tensor([1.0, 10.0, 0.01, 3.0])
         + torch.tensor([5.0, -40.0, 0.0, 1e3])).to(dtype)
    s = Standardizer.fit(x)
    z = s.transform(x)
    assert z.dtype == dtype and s.mean.shape == (4,)
    torch.testing.assert_close(z.double().mean(0), torch.zeros(4, dtype=torch.float64), rtol=0, atol=1e-4)
    torch.testing.assert_close(z.double().std(0, unbiased=False), torch.ones(4, dtype=torch.float64),
                               rtol=1e-4, atol=0)
    torch.testing.assert_close(s.inverse(z), x, rtol=tol, atol=tol * float(x.abs().max()))
    y = x[:, 1].clone()
    sy = Standardizer.fit(y)
    assert sy.mean.dim() == 0 and sy.std.dim() == 0
    assert float(sy.std) == pytest.approx(float(y.double().std(unbiased=False)), rel=1e-12)  # ddof 0
    torch.testing.assert_close(sy.inverse(sy.transform(y)), y, rtol=tol, atol=tol * float(y.abs().max()))
    # k sampled predictions (k, N) in standardised units back to the original ones
    preds = torch.randn(3, 200, generator=g, dtype=torch.float64).to(dtype)
    torch.testing.assert_close(sy.inverse(preds), preds * sy.std.to(dtype) + sy.mean.to(dtype))
    assert float(sy.scale_std(0.5)) == pytest.approx(0.5 * float(sy.std), rel=1e-12)
    torch.testing.assert_close(s.scale_std(torch.ones(4, dtype=dtype)), s.std.to(dtype))


def test_standardizer_constant_column_gets_sd_one():
    x = torch.stack([torch.arange(10.0), torch.full((10,), 0.1), torch.full((10,), 7.0)], 1)
    s = Standardizer.fit(x)
    assert s.std[1:].tolist() == [1.0, 1.0]  # 0.1 ten times: the mean's round-off leaves no tiny sd
    z = s.transform(x)
    assert torch.equal(z[:, 1:], torch.zeros(10, 2))
    assert torch.equal(Standardizer.fit(torch.full((5,), 3.0)).std, torch.tensor(1.0, dtype=torch.float64))


def test_standardizer_serialises_to_plain_json_and_back():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(50, 3, generator=g) * 2 + 1
    xt = x.T.contiguous()
    for data, s in ((x, Standardizer.fit(x)), (x[:, 0], Standardizer.fit(x[:, 0])), (xt, Standardizer.fit(xt, dim=1))):
        back = Standardizer.from_dict(json.loads(json.dumps(s.to_dict())))
        assert back == s
        assert torch.equal(back.transform(data), s.transform(data))
    assert Standardizer.fit(x) != Standardizer.fit(x * 2)
    # dim=1: the same statistics as the transposed data along dim 0
    torch.testing.assert_close(Standardizer.fit(xt, dim=1).transform(xt).T, Standardizer.fit(x).transform(x))
    with pytest.raises(UserError, match="does not end with the fitted columns"):
        Standardizer.fit(x).transform(torch.zeros(4, 5))
    with pytest.raises(UserError, match="from_dict"):
        Standardizer.from_dict({"mean": 1.0})


# --------------------------------------------------------------------------------------------
# The noise: fixed by "gaussian", learned by Gaussian(learn_sigma=True), under the Engine too
# --------------------------------------------------------------------------------------------


def test_gaussian_by_name_is_a_fixed_unit_noise():
    elbo = ELBO(BayesLinear(1, 1), "gaussian")
    assert float(elbo.likelihood.sigma) == pytest.approx(1.0)
    assert list(elbo.parameters()) == []


def test_learned_noise_trains_under_the_engine_built_from_the_elbo():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(256, 1, generator=g)
    y = 2.0 * x[:, 0] + 0.1 * torch.randn(256, generator=g)  # the true noise sd: 0.1
    torch.manual_seed(0)
    net = BayesLinear(1, 1)
    lik = Gaussian(learn_sigma=True)
    elbo = ELBO(net, lik, num_batches=1, kl_weighting="uniform")
    engine = Engine(elbo, "adam", lr=0.05, seed=0)
    raw0 = float(lik.raw_sigma.detach())
    for _ in range(200):
        with engine.sampling():
            out = elbo(x, y)
        engine.zero_grad()
        (out.loss / len(x)).backward()
        engine.step()
    assert float(lik.raw_sigma.detach()) != raw0
    assert 0.08 < float(lik.sigma.detach()) < 0.13  # from 1 toward the true 0.1
    # an engine built from the network alone would not train it: refused, not silently kept at 1
    other = ELBO(BayesLinear(1, 1), Gaussian(learn_sigma=True))
    plain = Engine(other.model, "adam", lr=0.05, seed=0)
    with pytest.raises(UserError, match="not trained by the Engine"), plain.sampling():
        other(x, y)


def test_the_calibration_curve_follows_the_diagonal_for_a_calibrated_predictive_and_falls_below_for_a_narrow_one():
    """interval_calibration: targets drawn from the predictive itself cover each central interval
    at about its level; with every sd halved, less than its level (overconfident)."""
    from bbb.uncertainty import CALIBRATION_LEVELS, interval_calibration

    g = torch.Generator().manual_seed(0)
    k, n = 5, 20000
    means = torch.randn(k, n, generator=g, dtype=torch.float64)
    sigmas = 0.5 + torch.rand(k, n, generator=g, dtype=torch.float64)
    pick = torch.randint(0, k, (n,), generator=g)  # a target from one component of its mixture
    y = means[pick, torch.arange(n)] + sigmas[pick, torch.arange(n)] * torch.randn(n, generator=g, dtype=torch.float64)
    cal = interval_calibration(y, means, sigmas)
    assert cal["levels"] == list(CALIBRATION_LEVELS) and cal["error"] < 0.01
    assert all(abs(c - v) < 0.015 for v, c in zip(cal["levels"], cal["coverage"]))
    narrow = interval_calibration(y, means, sigmas / 2)
    assert narrow["error"] > 0.05 and all(c < v for v, c in zip(narrow["levels"], narrow["coverage"]))
    assert interval_calibration(y, means, sigmas, levels=(0.5,))["levels"] == [0.5]
