from __future__ import annotations

import math

import pytest
import torch
import torch.distributions as D

import bbb
from bbb.distributions import (
    DiagonalNormal,
    GaussianPrior,
    KLMode,
    ScaleMixturePrior,
    has_closed_form_kl,
    inverse_softplus,
    kl_divergence,
    kl_term,
    mc_kl,
    prior_from_config,
    softplus,
)


def test_softplus_is_stable_at_extremes():
    rho = torch.tensor([-30.0, 0.0, 30.0], requires_grad=True)
    sigma = softplus(rho)
    assert torch.isfinite(sigma).all() and (sigma > 0).all()
    assert sigma[2].item() == pytest.approx(30.0)
    assert sigma[0].item() == pytest.approx(math.exp(-30), rel=1e-4)
    torch.log(sigma).sum().backward()  # log sigma enters log q: its gradient must stay finite
    assert torch.isfinite(rho.grad).all()


def test_inverse_softplus_round_trip():
    for s in [1e-6, 0.01, 1.0, 25.0]:
        assert softplus(torch.tensor(inverse_softplus(s), dtype=torch.float64)).item() == pytest.approx(s, rel=1e-9)
    with pytest.raises(ValueError):
        inverse_softplus(0.0)


def _mixture_reference(w, pi, s1, s2):
    w = w.double()
    n1 = torch.exp(-0.5 * (w / s1) ** 2) / (s1 * math.sqrt(2 * math.pi))
    n2 = torch.exp(-0.5 * (w / s2) ** 2) / (s2 * math.sqrt(2 * math.pi))
    return torch.log(pi * n1 + (1 - pi) * n2)


@pytest.mark.parametrize("pi,s1,s2", [(0.5, 1.0, math.exp(-6)), (0.25, math.exp(-1), math.exp(-8)),
                                      (0.75, math.exp(-2), math.exp(-7)), (1.0, 1.0, 0.1)])
def test_mixture_log_prob_matches_float64_reference(pi, s1, s2):
    prior = ScaleMixturePrior(pi, s1, s2)
    w = torch.cat([torch.linspace(-0.05, 0.05, 201), torch.tensor([0.0, 1e-3, -0.3, 2.0])])
    got = prior.log_prob(w.float())
    ref = _mixture_reference(w, pi, s1, s2)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-4)


def test_mixture_log_prob_finite_at_extremes_float32():
    prior = ScaleMixturePrior(0.5, 1.0, math.exp(-8))
    w = torch.tensor([0.0, 1e3, -1e3, 1e-30], requires_grad=True)
    lp = prior.log_prob(w)
    assert torch.isfinite(lp).all()
    # at |w| = 1e3 the broad component dominates: log(pi) + log N(1e3 | 0, 1)
    expected = math.log(0.5) - 0.5 * 1e6 - 0.5 * math.log(2 * math.pi)
    assert lp[1].item() == pytest.approx(expected, rel=1e-6)
    # at w = 0 both components count: float64 reference
    assert lp[0].item() == pytest.approx(_mixture_reference(torch.zeros(1), 0.5, 1.0, math.exp(-8)).item(), rel=1e-6)
    lp.sum().backward()
    assert torch.isfinite(w.grad).all()


def test_gaussian_prior_log_prob_matches_torch():
    p = GaussianPrior(sigma=0.3, mu=0.1)
    w = torch.randn(50)
    torch.testing.assert_close(p.log_prob(w), D.Normal(0.1, 0.3).log_prob(w))


@pytest.mark.parametrize("kwargs,match", [
    ({"pi": 0.0}, "pi"), ({"pi": 1.5}, "pi"), ({"pi": -0.1}, "pi"),
    ({"sigma1": -1.0}, "sigma1"), ({"sigma2": 0.0}, "sigma2"), ({"sigma1": float("nan")}, "sigma1"),
])
def test_mixture_prior_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScaleMixturePrior(**kwargs)


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("inf")])
def test_gaussian_prior_rejects_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        GaussianPrior(sigma)


def test_errors_are_one_line_value_errors():
    with pytest.raises(bbb.UserError) as e:
        ScaleMixturePrior(pi=2.0)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_prior_config_round_trip_and_equality():
    for p in [GaussianPrior(0.5), ScaleMixturePrior(0.25, 1.0, 0.0009)]:
        q = prior_from_config(p.to_config())
        assert q == p and type(q) is type(p)
    with pytest.raises(ValueError, match="unknown prior"):
        prior_from_config({"type": "laplace"})


def test_prior_samples_have_the_right_spread():
    g = torch.Generator().manual_seed(1)
    s = ScaleMixturePrior(0.25, 1.0, 0.01).sample((200_000,), generator=g)
    # Var = pi s1^2 + (1 - pi) s2^2
    assert s.var().item() == pytest.approx(0.25 * 1.0 + 0.75 * 1e-4, rel=0.03)


@pytest.mark.parametrize("shape", [(3,), (4, 5), (2, 3, 4)])
def test_closed_form_kl_equals_torch(shape):
    mu, rho = torch.randn(shape), torch.randn(shape) - 2
    q = DiagonalNormal.from_rho(mu, rho)
    p = GaussianPrior(sigma=0.7, mu=0.2)
    ours = kl_divergence(q, p)
    ref = D.kl_divergence(D.Normal(mu, softplus(rho)), D.Normal(0.2, 0.7))
    torch.testing.assert_close(ours, ref)
    assert kl_term(q, p).item() == pytest.approx(ref.sum().item(), rel=1e-5)


def test_mc_kl_converges_to_closed_form():
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(6, dtype=torch.float64) * 0.5
    rho = torch.randn(6, dtype=torch.float64) - 1
    q = DiagonalNormal.from_rho(mu, rho)
    p = GaussianPrior(1.0)
    eps = q.sample_eps((100_000,), generator=g)
    mc = kl_term(q, p, KLMode.MC, eps=eps)
    exact = kl_term(q, p, KLMode.CLOSED)
    assert mc.item() == pytest.approx(exact.item(), rel=0.01)


def test_mc_kl_is_log_q_minus_log_p_of_the_given_sample():
    q = DiagonalNormal.from_rho(torch.randn(10), torch.randn(10))
    p = ScaleMixturePrior(0.5, 1.0, 0.01)
    eps = torch.randn(10)
    w = q.rsample(eps)
    torch.testing.assert_close(mc_kl(q, p, eps), q.log_prob(w) - p.log_prob(w), rtol=1e-5, atol=1e-5)


def test_kl_dispatch_by_type_and_fallback():
    q = DiagonalNormal.from_rho(torch.zeros(3), torch.zeros(3))
    assert has_closed_form_kl(q, GaussianPrior())
    assert not has_closed_form_kl(q, ScaleMixturePrior())
    with pytest.raises(NotImplementedError):
        kl_divergence(q, ScaleMixturePrior())
    # auto falls back to Monte Carlo; closed refuses with a clear error
    assert torch.isfinite(kl_term(q, ScaleMixturePrior(), "auto"))
    with pytest.raises(ValueError, match="no closed-form KL"):
        kl_term(q, ScaleMixturePrior(), "closed")


def test_forced_mc_for_gaussian_prior_uses_samples():
    q = DiagonalNormal.from_rho(torch.randn(5), torch.randn(5))
    p = GaussianPrior()
    eps = torch.randn(5)
    torch.testing.assert_close(kl_term(q, p, "mc", eps=eps), mc_kl(q, p, eps).sum())


def test_register_kl_for_a_new_pair():
    class MyPrior(GaussianPrior):
        pass

    # the GaussianPrior rule applies to subclasses through the MRO
    q = DiagonalNormal.from_rho(torch.randn(4), torch.randn(4))
    assert has_closed_form_kl(q, MyPrior(1.0))


# --------------------------------------------------------------------------------------------
# kl="split": the scale mixture's KL with the spike's share from one importance sample
# --------------------------------------------------------------------------------------------


def _quadrature_kl(prior, mu, s):
    """KL[N(mu, s^2) || prior] by dense quadrature (float64), the reference."""
    u = torch.linspace(mu - 12 * s, mu + 12 * s, 400_001, dtype=torch.float64)
    q = torch.exp(-0.5 * ((u - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))
    return float((q * (torch.log(q.clamp_min(1e-300)) - prior.log_prob(u))).sum() * (u[1] - u[0]))


@pytest.mark.parametrize("mu,s", [(0.0, 0.04), (0.03, 0.04), (0.08, 0.04), (-0.05, 0.01)])
def test_split_kl_is_unbiased_for_the_value_and_the_gradients(mu, s):
    """Against quadrature, within 4 standard errors of 20,000 importance samples."""
    from bbb.distributions import ScaleMixturePrior

    p = ScaleMixturePrior(0.75, math.exp(-1), math.exp(-8))
    n = 20_000
    z = torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mus, ss = torch.full((n,), mu, dtype=torch.float64), torch.full((n,), s, dtype=torch.float64)
    kl, dmu, ds = p.kl_split(mus, ss, z)
    h = 1e-4 * s
    ref = (_quadrature_kl(p, mu, s),
           (_quadrature_kl(p, mu + h, s) - _quadrature_kl(p, mu - h, s)) / (2 * h),
           (_quadrature_kl(p, mu, s + h) - _quadrature_kl(p, mu, s - h)) / (2 * h))
    for est, r in zip((kl, dmu, ds), ref):
        se = float(est.std()) / math.sqrt(n)
        assert abs(float(est.mean()) - r) <= 4 * se + 1e-6 * abs(r), (float(est.mean()), r, se)


def test_split_kl_gradient_has_far_less_variance_than_the_monte_carlo_one():
    """sigma >> sigma2: the single-sample Monte Carlo gradient meets the spike on rare draws with
    kicks of order w / sigma2^2; the split keeps the mean and drops that noise."""
    from bbb.distributions import DiagonalNormal, ScaleMixturePrior, inverse_softplus, kl_term

    p = ScaleMixturePrior(0.75, math.exp(-1), math.exp(-8))
    n = 20_000
    mu = torch.full((n,), 0.03, dtype=torch.float64, requires_grad=True)
    rho = torch.full((n,), float(inverse_softplus(0.04)), dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    grads = {}
    for mode in ("mc", "split"):
        mu.grad = None
        kl_term(DiagonalNormal(mu, torch.nn.functional.softplus(rho)), p, mode, generator=g).backward()
        grads[mode] = mu.grad.clone()
    se_mc = float(grads["mc"].std()) / math.sqrt(n)  # the same mean, within the Monte Carlo's error
    assert abs(float(grads["split"].mean()) - float(grads["mc"].mean())) < 4 * se_mc
    assert float(grads["mc"].std()) > 300 * float(grads["split"].std())


def test_split_kl_needs_a_prior_that_splits():
    from bbb.distributions import DiagonalNormal, TorchPrior, kl_term

    q = DiagonalNormal(torch.zeros(3), torch.ones(3))
    with pytest.raises(bbb.UserError, match="split"):
        kl_term(q, TorchPrior(torch.distributions.Laplace(0.0, 1.0)), "split")


def test_split_kl_of_a_mixture_with_pi_1_is_the_gaussian_closed_form():
    from bbb.distributions import GaussianPrior, ScaleMixturePrior

    mu, s = torch.tensor([0.0, 0.3, -1.2]), torch.tensor([0.05, 0.2, 1.0])
    got = ScaleMixturePrior(1.0, 0.5, 0.01).kl_split(mu, s, torch.randn(3))
    want = GaussianPrior(0.5).kl_closed_form(mu, s)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kl", ["closed", "mc", "split"])
def test_the_kl_of_a_16_bit_model_is_summed_in_float32(kl):
    # a model in float16 summed its KL in float16: inf past 65504 (a 300x300 layer's KL is ~5e5),
    # and the ELBO's loss with it
    torch.manual_seed(0)
    prior = bbb.GaussianPrior(1.0) if kl == "closed" else bbb.ScaleMixturePrior(0.5, 1.0, 0.1)
    net = bbb.bayesianize(torch.nn.Linear(300, 300), prior=prior)
    ref = bbb.nn.model_kl(net, kl).detach() if kl == "closed" else None
    for dt in (torch.float16, torch.bfloat16):
        half = bbb.bayesianize(torch.nn.Linear(300, 300), prior=prior).to(dt)
        half.load_state_dict(net.state_dict())
        got = bbb.nn.model_kl(half, kl).detach()
        assert got.dtype == torch.float32 and torch.isfinite(got) and float(got) > 65504
        if ref is not None:
            assert float(got) == pytest.approx(float(ref), rel=1e-2)


@pytest.mark.parametrize("dist", [D.Uniform(-0.1, 0.1), D.Uniform(-0.1, 0.1, validate_args=False), D.Gamma(1.0, 1.0),
                                  D.HalfNormal(1.0), D.LogNormal(0.0, 1.0)])
def test_a_prior_without_a_density_on_every_real_weight_is_refused(dist):
    # the Gaussian posterior's samples fall outside: torch's multi-line support error, or a KL of inf
    with pytest.raises(bbb.UserError, match="support") as excinfo:
        prior_from_config(dist)
    assert "\n" not in str(excinfo.value)
    with pytest.raises(bbb.UserError, match="support"):
        bbb.bayesianize(torch.nn.Linear(3, 2), prior=dist)


def test_priors_on_the_real_line_are_taken():
    mix = D.MixtureSameFamily(D.Categorical(torch.ones(2)), D.Laplace(torch.zeros(2), torch.ones(2)))
    for dist in (D.Laplace(0.0, 1.0), D.StudentT(3.0), D.Cauchy(0.0, 0.1), mix):
        layer = bbb.nn.BayesLinear(3, 2, prior=dist)
        out = bbb.ELBO(layer, kl="mc")(torch.randn(4, 3), torch.randint(0, 2, (4,)))
        assert torch.isfinite(out.kl)


def test_split_kl_of_a_mixture_needs_its_wide_component_first():
    # sigma1 < sigma2: the importance sampler's variance went negative, a NaN KL, said nowhere
    q = DiagonalNormal(torch.zeros(5), torch.full((5,), 0.05))
    swapped = ScaleMixturePrior(0.5, 0.01, 1.0)
    with pytest.raises(bbb.UserError, match="sigma1 <= sigma2") as excinfo:
        kl_term(q, swapped, "split")
    assert "\n" not in str(excinfo.value)
    with pytest.raises(bbb.UserError, match="sigma1 <= sigma2"):
        bbb.ELBO(bbb.BayesMLP(3, [4], 2, prior=swapped), kl="split")(torch.randn(2, 3), torch.tensor([0, 1]))
    assert ScaleMixturePrior(1.0, 0.01, 1.0).has_split  # one component: the closed form
    assert torch.isfinite(kl_term(q, ScaleMixturePrior(0.5, 1.0, 0.01), "split"))
    assert torch.isfinite(kl_term(q, swapped, "mc"))


def test_make_prior_left_to_its_defaults_is_the_librarys_default_prior():
    """make_prior("mixture") without its fields built pi 1/2, sigma2 0.0025 (no point of the paper's
    grid), where ScaleMixturePrior(), bbb.nn.default_prior() and bbb train give pi 1/4, sigma2 e^-7."""
    from bbb.distributions import make_prior
    from bbb.nn import default_prior

    built = make_prior("mixture")
    assert built == ScaleMixturePrior() == default_prior()
    assert built.to_config() == {"type": "mixture", "pi": 0.25, "sigma1": 1.0, "sigma2": math.exp(-7.0)}
