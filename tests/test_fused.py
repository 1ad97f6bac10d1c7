"""The fused sampling + Monte Carlo KL kernel equals the straightforward autograd computation."""

from __future__ import annotations

import math

import pytest
import torch

from bbb.distributions import DiagonalNormal, GaussianPrior, Prior, ScaleMixturePrior, mc_kl
from bbb.elbo import ELBO
from bbb.functional import sample_mc_kl
from bbb.nn import BayesMLP, SampleRecorder, model_kl


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


@pytest.mark.parametrize("prior", PRIORS, ids=lambda p: type(p).__name__)
@pytest.mark.parametrize("k", [None, 3])
def test_fused_value_and_gradients_equal_reference(prior, k):
    torch.manual_seed(0)
    shape = (5, 4)
    mu0, rho0 = torch.randn(shape, dtype=torch.float64) * 0.3, torch.randn(shape, dtype=torch.float64) - 3
    eps = torch.randn(((k,) if k else ()) + shape, dtype=torch.float64)
    upstream = torch.randn_like(eps)  # a data-term gradient flowing into w

    def run(fused: bool):
        mu, rho = mu0.clone().requires_grad_(True), rho0.clone().requires_grad_(True)
        if fused:
            w, kl = sample_mc_kl(mu, rho, eps, prior)
        else:
            q = DiagonalNormal.from_rho(mu, rho)
            w = q.rsample(eps)
            kl = mc_kl(q, prior, eps, w).sum() / (k or 1)
        loss = (w * upstream).sum() + 0.37 * kl
        loss.backward()
        return w.detach(), kl.detach(), mu.grad, rho.grad

    for a, b in zip(run(True), run(False)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("prior,kl", [(ScaleMixturePrior(0.5, 1.0, 0.05), "mc"),
                                      (GaussianPrior(0.8, mu=0.05), "auto")])
def test_elbo_uses_the_fused_kernel_and_matches_the_plain_path(prior, kl):
    """Same eps (seeded generator): the fused ELBO (Monte Carlo KL for the mixture, the closed
    form recorded with the sampling for the Gaussian prior) and a hand-made plain one give the
    same loss and gradients."""
    torch.manual_seed(0)
    net = BayesMLP(5, [6], 3, prior=prior, rho_init=-2.0).double()
    x, y = torch.randn(8, 5, dtype=torch.float64), torch.randint(0, 3, (8,))
    elbo = ELBO(net, "categorical", num_batches=1, num_samples=2, kl=kl)
    out = elbo(x, y, generator=torch.Generator().manual_seed(4))
    out.loss.backward()
    fused = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with SampleRecorder(torch.Generator().manual_seed(4)) as rec:  # no kl_mode: plain autograd path
        output = net(x.expand(2, *x.shape))
    assert all(s.kl is None for r in rec.records.values() for s in r.values())
    nll = torch.nn.functional.cross_entropy(output.reshape(-1, 3), y.repeat(2), reduction="sum") / 2
    loss = nll + model_kl(net, kl, rec)
    torch.testing.assert_close(loss, out.loss)
    loss.backward()
    for a, p in zip(fused, net.parameters()):
        torch.testing.assert_close(a, p.grad)
