"""Each prior's written-out log-density gradient (what the engine fuses) equals autograd's."""

from __future__ import annotations

import math

import pytest
import torch

from bbb.distributions import GaussianPrior, Prior, ScaleMixturePrior


class _LaplacePrior(Prior):
    """A prior without a closed-form gradient: exercises the autograd default."""

    name = "laplace"

    def log_prob(self, w):
        return -w.abs() - math.log(2.0)

    def to_config(self):
        return {"type": self.name}


PRIORS = [GaussianPrior(0.7, mu=0.1), ScaleMixturePrior(0.25, 1.0, math.exp(-7)),
          ScaleMixturePrior(1.0, 0.5, 0.1), _LaplacePrior()]


@pytest.mark.parametrize("prior", PRIORS, ids=lambda p: type(p).__name__)
def test_log_prob_and_grad_matches_autograd(prior):
    w = torch.cat([torch.linspace(-3, 3, 101), torch.tensor([0.0, 1e-4, -1e3, 1e3])]).double()
    lp, g = prior.log_prob_and_grad(w)
    wd = w.clone().requires_grad_(True)
    ref = prior.log_prob(wd)
    (gref,) = torch.autograd.grad(ref.sum(), wd)
    torch.testing.assert_close(lp, ref.detach())
    torch.testing.assert_close(g, gref)



@pytest.mark.parametrize("neg_log_sigma2", [20, 36, 40])
def test_mixture_gradient_of_a_very_narrow_spike_is_the_wide_components(neg_log_sigma2):
    """Away from the spike the gradient is the wide component's, -w / sigma1^2. The responsibility of
    the spike was floored at exp(-cap) and multiplied by 1 / sigma2^2: the written-out gradient, the
    one the engine fuses, was twice the true one at a narrow enough spike (autograd's was right)."""
    prior = ScaleMixturePrior(0.25, 1.0, math.exp(-neg_log_sigma2))
    w = torch.tensor([0.5, 1.0, 3.0, -2.0], dtype=torch.float64)
    lp, g = prior.log_prob_and_grad(w)
    torch.testing.assert_close(g, -w, rtol=1e-12, atol=0)
    torch.testing.assert_close(lp, prior.log_prob(w))
    _, g32 = prior.log_prob_and_grad(w.float())
    torch.testing.assert_close(g32, -w.float())


def test_float32_mixture_gradient_keeps_relative_precision():
    """Where the wide component dominates (r1 = 1 in float32), d log p / dw = 2 h1 w to float32
    precision: no cancellation between terms of size |h2| ~ 4e6 (sigma2 = e^-8). Written as
    h2 + (h1 - h2) r1 this had a relative error of 8% for sigma1 = e^-1 (the paper's grid)."""
    prior = ScaleMixturePrior(0.25, math.exp(-1), math.exp(-8))
    w64 = torch.cat([torch.linspace(-1.0, -0.02, 50), torch.linspace(0.02, 1.0, 50)]).double()
    _, g64 = prior.log_prob_and_grad(w64)
    _, g32 = prior.log_prob_and_grad(w64.float())
    rel = ((g32.double() - g64) / g64).abs().max().item()
    assert rel < 1e-5, rel


@pytest.mark.parametrize("prior", [GaussianPrior(0.7, mu=0.1), GaussianPrior(2.0)], ids=["m=0.1", "m=0"])
def test_closed_form_kl_and_its_derivatives_match_autograd(prior):
    mu = (torch.randn(50, dtype=torch.float64) * 0.5).requires_grad_(True)
    sigma = (torch.rand(50, dtype=torch.float64) + 0.01).requires_grad_(True)
    kl, dmu, dsig = prior.kl_closed_form(mu, sigma)
    ref = torch.distributions.kl_divergence(torch.distributions.Normal(mu, sigma),
                                            torch.distributions.Normal(prior.mu, prior.sigma))
    torch.testing.assert_close(kl, ref)
    gmu, gsig = torch.autograd.grad(ref.sum(), (mu, sigma))
    torch.testing.assert_close(dmu, gmu)
    torch.testing.assert_close(dsig, gsig)
