"""The compiled single-pass kernels (torch.compile) equal the straightforward autograd code.

Each test forces ``fused_backend("compile")`` on small tensors (``auto`` compiles only large
ones). Float64 pins the mathematics to tight tolerances; one float32 case checks the precision
that training actually runs at. When torch.compile cannot run here, the kernels fall back to
eager with a warning, and these tests still check the same mathematics.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from bbb import functional as BF
from bbb.distributions import DiagonalNormal, GaussianPrior, ScaleMixturePrior, kl_divergence, mc_kl
from bbb.elbo import ELBO
from bbb.errors import UserError
from bbb.nn import BayesMLP

MIXTURES = [ScaleMixturePrior(0.25, 1.0, math.exp(-7)), ScaleMixturePrior(1.0, 0.5, 0.1)]

# torch.compile's own machinery warns about torch.jit deprecations while compiling
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a fallback warning, if compile is unavailable
        with BF.fused_backend("compile"):
            yield


def _params(shape, dtype, rho_shift=-3.0):
    mu = torch.randn(shape, dtype=dtype) * 0.3
    rho = torch.randn(shape, dtype=dtype) + rho_shift
    rho.view(-1)[:3] = torch.tensor([-30.0, 25.0, 0.0], dtype=dtype)  # softplus tails and centre
    return mu, rho


def _reference(mu0, rho0, eps, upstream, c, kl_fn):
    mu, rho = mu0.clone().requires_grad_(True), rho0.clone().requires_grad_(True)
    q = DiagonalNormal.from_rho(mu, rho)
    w = q.rsample(eps)
    kl = kl_fn(q, w)
    ((w * upstream).sum() + c * kl).backward()
    return w.detach(), kl.detach(), mu.grad, rho.grad


def _fused(mu0, rho0, eps, upstream, c, fn, prior):
    mu, rho = mu0.clone().requires_grad_(True), rho0.clone().requires_grad_(True)
    w, kl = fn(mu, rho, eps, prior)
    ((w * upstream).sum() + c * kl).backward()
    return w.detach(), kl.detach(), mu.grad, rho.grad


@pytest.mark.parametrize("prior", MIXTURES, ids=["mixture", "pi=1"])
@pytest.mark.parametrize("k", [None, 3])
def test_compiled_mixture_mc_equals_autograd(compiled, prior, k):
    torch.manual_seed(1)
    shape = (7, 5)
    mu, rho = _params(shape, torch.float64)
    eps = torch.randn(((k,) if k else ()) + shape, dtype=torch.float64)
    up = torch.randn_like(eps)
    ref = _reference(mu, rho, eps, up, 0.37, lambda q, w: mc_kl(q, prior, eps, w).sum() / (k or 1))
    got = _fused(mu, rho, eps, up, 0.37, BF.sample_mc_kl, prior)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", ["eager", "compile"])
@pytest.mark.parametrize("prior", [GaussianPrior(0.7, mu=0.1), GaussianPrior(1.0)], ids=["m=0.1", "m=0"])
@pytest.mark.parametrize("k", [None, 3])
def test_fused_gaussian_closed_form_equals_autograd(backend, prior, k):
    if backend == "compile" and k is not None:
        pytest.skip("one compiled k > 1 case (the mixture's) is enough; compiling costs seconds")
    torch.manual_seed(2)
    shape = (6, 4)
    mu, rho = _params(shape, torch.float64)
    eps = torch.randn(((k,) if k else ()) + shape, dtype=torch.float64)
    up = torch.randn_like(eps)
    ref = _reference(mu, rho, eps, up, 0.5, lambda q, w: kl_divergence(q, prior).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with BF.fused_backend(backend):
            got = _fused(mu, rho, eps, up, 0.5, BF.sample_gaussian_kl, prior)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)


def test_compiled_float32_mixture_gradient_is_accurate(compiled):
    """float32 kernel vs a float64 reference: the mixture gradient keeps its relative precision
    (2 w (h1 r1 + h2 r2) with both responsibilities, no cancellation of h1 - h2 ~ 6e5)."""
    torch.manual_seed(3)
    prior = MIXTURES[0]
    mu, rho = _params((64, 32), torch.float64, rho_shift=-5.0)
    eps = torch.randn_like(mu)
    up = torch.randn_like(eps)
    ref = _reference(mu, rho, eps, up, 1.0, lambda q, w: mc_kl(q, prior, eps, w).sum())
    got = _fused(mu.float(), rho.float(), eps.float(), up.float(), 1.0, BF.sample_mc_kl, prior)
    for a, b in zip(got[2:], ref[2:]):  # the gradients
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-3 * b.abs().max().item())
    torch.testing.assert_close(got[1].double(), ref[1], rtol=1e-5, atol=0.0)


@pytest.mark.parametrize("prior,kl", [(MIXTURES[0], "mc"), (GaussianPrior(1.0), "auto")],
                         ids=["mixture-mc", "gaussian-closed"])
def test_elbo_gradients_same_with_compiled_and_eager_kernels(compiled, prior, kl):
    torch.manual_seed(4)
    net = BayesMLP(6, [5], 3, prior=prior, rho_init=-3.0).double()
    x, y = torch.randn(9, 6, dtype=torch.float64), torch.randint(0, 3, (9,))
    elbo = ELBO(net, "categorical", num_batches=2, num_samples=2, kl=kl)

    def grads(backend):
        net.zero_grad()
        with BF.fused_backend(backend):
            out = elbo(x, y, batch_index=0, generator=torch.Generator().manual_seed(7))
        out.loss.backward()
        return out.loss.detach(), [p.grad.clone() for p in net.parameters()]

    loss_c, g_c = grads("compile")
    loss_e, g_e = grads("eager")
    torch.testing.assert_close(loss_c, loss_e)
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b)


def test_auto_backend_is_eager_on_cpu_and_for_small_tensors():
    mu = torch.zeros(10)
    with BF.fused_backend("auto"):
        assert not BF._use_compiled(mu)
        assert not BF._use_compiled(torch.zeros(BF.COMPILE_MIN_NUMEL))  # CPU: compile is opt-in
        assert BF.sample_gaussian_kl(mu, mu, mu, ScaleMixturePrior()) is None  # not a Gaussian prior
    with BF.fused_backend("compile"):
        assert BF._use_compiled(mu) == (BF._STATE["failed"] is None)
    with BF.fused_backend("eager"):
        assert not BF._use_compiled(torch.zeros(BF.COMPILE_MIN_NUMEL))


def test_unknown_backend_is_a_user_error():
    with pytest.raises(UserError, match="unknown fused backend"):
        BF.set_fused_backend("fast")
    assert BF.get_fused_backend() in set(BF.FusedBackend)


@pytest.mark.parametrize("backend", ["eager", "compile"])
def test_float32_mixture_gradient_keeps_relative_precision(backend):
    """Where the wide component dominates (r1 = 1 in float32), d log p / dw = 2 h1 w to float32
    precision: no cancellation between terms of size |h2| ~ 4e6 (sigma2 = e^-8). Written as
    h2 + (h1 - h2) r1 this had a relative error of 8% for sigma1 = e^-1 (the paper's grid)."""
    prior = ScaleMixturePrior(0.25, math.exp(-1), math.exp(-8))
    w64 = torch.cat([torch.linspace(-1.0, -0.02, 50), torch.linspace(0.02, 1.0, 50)]).double()
    _, g64 = prior.log_prob_and_grad(w64)
    if backend == "eager":
        _, g32 = prior.log_prob_and_grad(w64.float())
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            with BF.fused_backend("compile"):
                mu = w64.float().requires_grad_(True)
                # eps = 0 gives w = mu, and dKL/dmu = -dlogp/dw
                _, kl = BF.sample_mc_kl(mu, torch.full_like(mu, -20.0), torch.zeros_like(mu), prior)
                (g32,) = torch.autograd.grad(kl, mu)
                g32 = -g32
    rel = ((g32.double() - g64) / g64).abs().max().item()
    assert rel < 1e-5, rel
