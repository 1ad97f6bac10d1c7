"""``bbb reproduce uci --methods ...,ivon`` (issue 75): BBB's heteroscedastic network, prior and
tempered objective learned by IVON, one member per (split, grid point), each with its own learning
rate, effective sample size n / beta and prior precision beta / (prior_sigma^2 n)."""

from __future__ import annotations

import math

import pytest
import torch

import bbb
from bbb.distributions import normal_log_prob
from bbb.experiments.uci import models as M
from bbb.experiments.uci.optim import MemberIVON
from bbb.experiments.uci.runner import run_uci
from bbb.experiments.uci.settings import (
    DEFAULT_METHODS,
    IVON_GRID,
    IVON_HESS_INIT,
    OPT_IN_METHODS,
    VARIANTS,
    Setting,
    UCIMethod,
)
from bbb.experiments.uci.streams import TRAIN, MemberStreams
from testkit import read_csv

from .test_reproduce_uci import smoke_cfg, write_dataset

IVON_VARIANT = next(v for v in VARIANTS if v.method is UCIMethod.IVON)


def _reference_step(mu, m, h, g, eps, sigma, t, lr, ess, wd, h0, b1=0.9, b2=0.99999):
    """One IVON step as ../shared/reference/ivon.md states it (float64, the learning rate rescaled
    by h0 + wd as the published package and bbb.IVON do)."""
    h_hat = g * eps / sigma
    m = b1 * m + (1 - b1) * g
    h = b2 * h + (1 - b2) * h_hat + 0.5 * (1 - b2) ** 2 * (h - h_hat) ** 2 / (h + wd)
    mu = mu - lr * (h0 + wd) * (m / (1 - b1 ** t) + wd * mu) / (h + wd)
    return mu, m, h, 1 / torch.sqrt(ess * (h + wd))


def test_member_ivon_is_the_reference_update_per_member_with_its_own_settings():
    torch.manual_seed(0)
    lr, ess, wd = torch.tensor([0.01, 0.1]), torch.tensor([100.0, 5000.0]), torch.tensor([1e-3, 0.5])
    mu = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    rho = torch.zeros(2, 3, 4, dtype=torch.float64)
    opt = MemberIVON([(mu, rho)], lr, ess, wd, hess_init=0.2)
    sig0 = (ess.double() * (0.2 + wd.double())).rsqrt()
    assert torch.allclose(opt.sigma[0], sig0.view(2, 1, 1).expand(2, 3, 4))
    assert torch.allclose(torch.nn.functional.softplus(rho), opt.sigma[0])  # written into the layers' rho
    ref = [mu.detach().clone(), torch.zeros_like(rho), torch.full_like(rho, 0.2), opt.sigma[0].clone()]
    for t in (1, 2, 3):
        g, eps = torch.randn_like(rho), torch.randn_like(rho)
        mu.grad = g.clone()
        opt.step([eps])
        for j in range(2):
            want = _reference_step(ref[0][j], ref[1][j], ref[2][j], g[j], eps[j], ref[3][j], t,
                                   float(lr[j]), float(ess[j]), float(wd[j]), 0.2)
            for got, w in zip((mu[j], opt.m[0][j], opt.h[0][j], opt.sigma[0][j]), want):
                assert torch.allclose(got.detach(), w, rtol=1e-10, atol=1e-12), (got.detach() - w).abs().max()
        ref = [mu.detach().clone(), opt.m[0].clone(), opt.h[0].clone(), opt.sigma[0].clone()]
        assert torch.allclose(torch.nn.functional.softplus(rho), opt.sigma[0], rtol=1e-10)


def test_member_ivon_matches_bbb_ivon_on_a_layer():
    """The same update as the library's optimiser: a BayesLinear trained by bbb.IVON and its
    weights trained by MemberIVON as one member, the same noise and data, step for step."""
    torch.manual_seed(1)
    net = bbb.BayesLinear(3, 2)
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    kw = dict(lr=0.05, ess=200.0, hess_init=0.3, weight_decay=0.01)
    pairs = [(net.weight_mu.detach()[None].clone().requires_grad_(True), net.weight_rho.detach()[None].clone()),
             (net.bias_mu.detach()[None].clone().requires_grad_(True), net.bias_rho.detach()[None].clone())]
    opt = bbb.IVON(net, compile=False, **kw)
    mine = MemberIVON(pairs, torch.tensor([kw["lr"]]), torch.tensor([kw["ess"]]), torch.tensor([kw["weight_decay"]]),
                      hess_init=kw["hess_init"], beta2=0.99999)
    for _ in range(4):
        noise = [torch.randn(2, 3), torch.randn(2)]
        queue = list(noise)
        opt.normal = lambda shape, like, q=queue: q.pop(0).reshape(shape)  # type: ignore[method-assign]
        with opt.sampling():
            loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        (wm, _), (bm, _) = pairs
        w = wm[0] + mine.sigma[0][0] * noise[0]
        b = bm[0] + mine.sigma[1][0] * noise[1]
        mine.zero_grad()
        ((x @ w.T + b - y) ** 2).mean().backward()
        mine.step([noise[0][None], noise[1][None]])
        assert torch.allclose(wm[0], net.weight_mu, atol=1e-6) and torch.allclose(bm[0], net.bias_mu, atol=1e-6)
        assert torch.allclose(pairs[0][1][0], net.weight_rho, atol=1e-5)
        assert torch.allclose(pairs[1][1][0], net.bias_rho, atol=1e-5)


def test_the_regressor_sets_ess_and_prior_precision_from_beta_and_trains_without_a_kl():
    settings = [Setting(0.03, beta=0.1), Setting(0.01, prior_sigma=0.5, beta=1.0)]
    n = 40
    model = M.build_regressor(IVON_VARIANT, settings, 3, 8, streams=MemberStreams([11, 12]), n_fit=n)
    assert isinstance(model, M.IVONRegressor)
    ess = torch.tensor([n / 0.1, n / 1.0], dtype=torch.float64)
    wd = torch.tensor([0.1 / n, 1.0 / (0.25 * n)], dtype=torch.float64)
    assert torch.allclose(model.opt.ess, ess) and torch.allclose(model.opt.wd, wd)
    first = model.opt.sigma[0][:, 0, 0].double()
    assert torch.allclose(first, (ess * (IVON_HESS_INIT + wd)).rsqrt(), rtol=1e-6)
    assert all(not rho.requires_grad for _, rho in model.opt.pairs)
    with pytest.raises(ValueError, match="n_fit"):
        M.build_regressor(IVON_VARIANT, settings, 3, 8)
    torch.manual_seed(2)
    x, y = torch.randn(2, n, 3), torch.randn(2, n)
    streams = MemberStreams([11, 12])
    draw = model.draw(streams, TRAIN, 0, 1, n)
    # the loss is each member's mean NLL at the step's sample: no KL term
    provider = M._IVONNoise(draw, model.opt)
    with bbb.nn.providing_samples(provider):
        out = model.bbb.pop(x)
    mean, sd = model.mean_sd(out)
    assert torch.allclose(model.loss(x, y, n, model.draw(streams, TRAIN, 0, 1, n)),
                          -normal_log_prob(y, mean, sd).mean(-1).sum())
    before = [mu.detach().clone() for mu in model.params]
    for step in range(5):
        model.train_step(x, y, n, model.draw(streams, TRAIN, step, 1, n))
    assert all(not torch.equal(a, b.detach()) for a, b in zip(before, model.params))
    for (_, rho), s in zip(model.opt.pairs, model.opt.sigma):  # the layers hold IVON's sigma
        assert torch.allclose(torch.nn.functional.softplus(rho), s, rtol=1e-5)
    means, sds = model.predict(x, 4, streams, 0)
    assert means.shape == sds.shape == (4, 2, n) and means.dtype == torch.float64


def test_ivon_is_opt_in_and_its_rows_come_from_its_own_validation(tmp_path):
    assert UCIMethod.IVON not in DEFAULT_METHODS and UCIMethod.IVON in OPT_IN_METHODS
    assert len(IVON_GRID) == 8 and all(s.prior_sigma == 1.0 for s in IVON_GRID)
    root = write_dataset(tmp_path / "data")
    out = tmp_path / "o"
    res = run_uci(smoke_cfg(root, out, methods=["ivon"]))
    assert [r["method"] for r in res["method_rows"]] == ["ivon"] and not res["missing"]
    rows = read_csv(out / "splits.csv")
    assert rows and all(r["method"] == "ivon" and r["variant"] == "ivon" for r in rows)
    assert all(math.isfinite(float(r["ll"])) for r in rows)
    assert "IVON (ours)" in (out / "table.md").read_text()
