"""The three methods of ``bbb reproduce uci`` (bbb.experiments.uci.models) against direct float64
computations: the per-member Adam, BBB's per-member KL and free energy, MC dropout's masks and
predictive, the deep ensembles' networks, adversarial step and mixture."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bbb.errors import UserError
from bbb.experiments.uci import models as M
from bbb.experiments.uci.settings import VARIANTS, Setting
from bbb.experiments.uci.streams import MemberStreams, eval_stream
from bbb.experiments.uci.train import JobData, score

V = {v.name: v for v in VARIANTS}


def _jd(y: torch.Tensor) -> JobData:
    """A JobData scoring ``y`` (members, R) with shift 1 and scale 2 per member."""
    m = y.shape[0]
    return JobData(torch.zeros(m, 1, 1), torch.zeros(m, 1), torch.zeros(m, y.shape[1], 1), y.float(),
                   torch.ones(m, dtype=torch.float64), torch.full((m,), 2.0, dtype=torch.float64))


def _mixture_ll(y: torch.Tensor, means: torch.Tensor, sds: torch.Tensor) -> torch.Tensor:
    """Mean log density of the equal mixture over dim 0, in the target's units (scale 2)."""
    dens = torch.exp(-0.5 * ((y - means) / sds) ** 2) / (sds * math.sqrt(2 * math.pi))
    return torch.log(dens.mean(0)).mean(-1) - math.log(2.0)


def test_member_adam_is_adam_per_member_with_its_own_rate():
    torch.manual_seed(0)
    w = torch.randn(3, 4, 2, requires_grad=True)
    lrs = torch.tensor([1e-3, 1e-2, 3e-2])
    ref = [w[i].detach().clone().requires_grad_(True) for i in range(3)]
    opts = [torch.optim.Adam([r], lr=float(lrs[i])) for i, r in enumerate(ref)]
    opt = M.MemberAdam([w], lrs)
    for t in range(5):
        target = torch.randn(3, 4, 2)
        opt.zero_grad()
        ((w - target) ** 2 * (t + 1)).sum().backward()
        opt.step()
        for i in range(3):
            opts[i].zero_grad()
            ((ref[i] - target[i]) ** 2 * (t + 1)).sum().backward()
            opts[i].step()
    for i in range(3):
        assert torch.allclose(w[i], ref[i], rtol=1e-5, atol=1e-7)


def test_bbb_kl_and_free_energy_per_member():
    grid = [Setting(1e-3, prior_sigma=0.5, beta=0.3), Setting(1e-3, prior_sigma=1.0, beta=1.0)]
    model = M.build_regressor(V["heteroscedastic"], grid, 3, 5)
    assert isinstance(model, M.BBBRegressor)
    kl = model.kl()
    for j, s in enumerate((0.5, 1.0)):
        direct = 0.0
        for layer in model.pop.bayes:
            for name in ("weight", "bias"):
                mu = getattr(layer, f"{name}_mu")[j].detach().double()
                sd = F.softplus(getattr(layer, f"{name}_rho")[j].detach().double())
                direct += float((math.log(s) - sd.detach().log() + (sd**2 + mu**2) / (2 * s * s) - 0.5).sum())
        assert math.isclose(float(kl[j]), direct, rel_tol=1e-5)
    # the loss: NLL + beta KL B / N, each member's own (their gradients never mix)
    x, y = torch.randn(2, 4, 3), torch.randn(2, 4)
    torch.manual_seed(3)
    loss = model.loss(x, y, 40)
    torch.manual_seed(3)
    mean, sd = model.mean_sd(model.pop(x))
    nll = -torch.distributions.Normal(mean, sd).log_prob(y).sum()
    assert torch.allclose(loss, nll + (torch.tensor([0.3, 1.0]) * kl).sum() * 4 / 40, rtol=1e-5)


def test_mc_dropout_masks_predictive_and_score_in_float64():
    grid = [Setting(1e-3, dropout=0.1), Setting(1e-3, dropout=0.5)]
    streams = MemberStreams([11, 12])
    model = M.build_regressor(V["mc_dropout"], grid, 3, 6, streams=streams)
    assert isinstance(model, M.MCDropoutRegressor)
    x = torch.randn(2, 5, 3)
    k = 7
    means, sds = model.predict(x, k, streams, eval_stream(4))
    assert means.shape == (k, 2, 5) and torch.all(sds == 1)
    # the masks: sample i's uniforms are row i of the stream, inputs' masks then the hidden units'
    u = streams.uniform(eval_stream(4), 0, k, model.noise_width(5)).values
    xs = x.unsqueeze(1).expand(2, k, 5, 3).reshape(2, k * 5, 3)
    keep = torch.tensor([0.9, 0.5]).view(2, 1, 1)
    m1 = (u[:, :, :15].reshape(2, k * 5, 3) < keep).double()
    w1, b1, w2, b2 = (t.detach().double() for t in (model.net.l1.weight, model.net.l1.bias,
                                                      model.net.l2.weight, model.net.l2.bias))
    h = torch.relu(torch.einsum("mri,mio->mro", xs.double() * m1 / keep, w1) + b1[:, None])
    m2 = (u[:, :, 15:].reshape(2, k * 5, 6) < keep).double()
    out = (torch.einsum("mri,mio->mro", h * m2 / keep, w2) + b2[:, None])[..., 0]
    direct = out.view(2, k, 5).transpose(0, 1)
    assert torch.allclose(means, direct, atol=1e-5)
    assert 0.3 < float((m1 == 0).double()[1].mean()) < 0.7 and float((m1 == 0).double()[0].mean()) < 0.2
    y = torch.randn(2, 5, dtype=torch.float64)
    got = score(means, sds, _jd(y), scales=(0.3, 1.0))
    for ci, c in enumerate((0.3, 1.0)):
        want = _mixture_ll(y, direct, torch.full_like(direct, c))
        assert torch.allclose(torch.tensor([r[ci] for r in got["ll"]], dtype=torch.float64), want, atol=1e-5)
    # the loss: squared error + l^2 (1 - p) / (2 N) ||W||^2 per member
    torch.manual_seed(5)
    loss = model.loss(x, y.float(), 50)
    torch.manual_seed(5)
    pred = model.forward(x)
    reg = 1e-4 * torch.tensor([0.9, 0.5]) / 100
    sq = model.net.l1.weight.pow(2).sum((1, 2)) + model.net.l2.weight.pow(2).sum((1, 2))
    assert torch.allclose(loss, (((pred - y.float()) ** 2).mean(1) + reg * sq).sum(), rtol=1e-6)


def test_deep_ensemble_networks_adversarial_step_and_mixture():
    grid = [Setting(1e-3), Setting(3e-3)]
    x_range = torch.rand(2 * M.ENSEMBLE_SIZE, 3) + 1
    model = M.build_regressor(V["deep_ensemble"], grid, 3, 4, adversarial_eps=0.01, x_range=x_range)
    assert isinstance(model, M.DeepEnsembleRegressor) and model.copies == 5
    assert torch.equal(model.opt.lr, torch.tensor([1e-3, 3e-3] * 5))  # network e*2+m has member m's rate
    x = torch.randn(2, 6, 3)
    means, sds = model.predict(x, 100)
    assert means.shape == sds.shape == (5, 2, 6)
    w1, b1, w2, b2 = (t.detach().double() for t in (model.net.l1.weight, model.net.l1.bias,
                                                      model.net.l2.weight, model.net.l2.bias))
    for e in range(5):
        for m in range(2):
            n = e * 2 + m
            h = torch.relu(x[m].double() @ w1[n] + b1[n])
            o = h @ w2[n] + b2[n]
            assert torch.allclose(means[e, m], o[:, 0], atol=1e-5)
            assert torch.allclose(sds[e, m], torch.sqrt(F.softplus(o[:, 1]) ** 2 + 1e-6 ** 2), atol=1e-5)
    y = torch.randn(2, 6, dtype=torch.float64)
    got = score(means, sds, _jd(y), scales=(1.0,))
    assert torch.allclose(torch.tensor([r[0] for r in got["ll"]], dtype=torch.float64), _mixture_ll(y, means, sds))
    # adversarial training: the NLL at x plus at x + eps * range * sign(d NLL / dx)
    xb, yb = torch.randn(10, 4, 3), torch.randn(10, 4)
    xg = xb.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model._nll(xg, yb), xg)  # noqa: SLF001 - the method's own NLL
    want = model._nll(xb, yb) + model._nll(xb + 0.01 * x_range.unsqueeze(1) * g.sign(), yb)  # noqa: SLF001
    assert torch.allclose(model.loss(xb, yb, 40), want, rtol=1e-6)
    with pytest.raises(UserError, match="x_range"):  # never an adversarial step silently skipped
        M.build_regressor(V["deep_ensemble"], grid, 3, 4, adversarial_eps=0.01, x_range=None)
    plain = M.build_regressor(V["deep_ensemble"], grid, 3, 4, adversarial_eps=0.0, x_range=x_range)
    assert torch.allclose(plain.loss(xb, yb, 40), model._nll(xb, yb))  # noqa: SLF001


def test_prediction_memory_is_bounded_by_chunks(monkeypatch):
    """A prediction holds at most CHUNK_ELEMENTS activations a chunk (protein's local estimator
    once needed 15 GB at 25 samples a chunk): fewer samples per chunk, the same number in all."""
    assert M.chunk_size(40, 7317, 100) * 40 * 7317 * 100 <= M.CHUNK_ELEMENTS
    assert M.chunk_size(1, 10, 5) == M.CHUNK and M.chunk_size(10**4, 10**4, 10**3) == 1
    x = torch.randn(3, 4, 2)
    for name, grid in (("local", V["local"].grid[:3]), ("heteroscedastic", V["heteroscedastic"].grid[:3]),
                       ("mc_dropout", [Setting(1e-3, dropout=0.5)] * 3)):
        streams = MemberStreams([1, 2, 3])
        model = M.build_regressor(V[name], grid, 2, 5, streams=streams)
        whole = model.predict(x, 7, streams, 5)  # one chunk
        with monkeypatch.context() as mp:
            mp.setattr(M, "CHUNK_ELEMENTS", 2 * 3 * 4 * 5)  # 2 samples a chunk
            means, sds = model.predict(x, 7, streams, 5)
        assert means.shape == sds.shape == (7, 3, 4)
        assert not torch.equal(means[0], means[1]) and not torch.equal(means[1], means[2])  # drawn per sample
        assert torch.equal(means, whole[0]) and torch.equal(sds, whole[1])  # a sample's noise is its own
        # each chunk's numbers drawn when it is reached, not all at once (the fourth run's protein,
        # local estimator: 100 samples' noise drawn up front held 13 GB, and a worker was killed)
        drawn: list[int] = []
        with monkeypatch.context() as mp:
            mp.setattr(M, "CHUNK_ELEMENTS", 2 * 3 * 4 * 5)
            mp.setattr(model, "draw", lambda *a, _d=model.draw, _n=drawn: _n.append(a[2]) or _d(*a))
            chunks = model._chunks(x, 7, 5, streams, 5)  # noqa: SLF001
            assert drawn == []
            for i, (k, _) in enumerate(chunks):
                assert drawn == [0, 2, 4, 6][: i + 1] and k == min(2, 7 - 2 * i)


def test_bbbs_grid_reaches_below_the_third_runs_edge():
    """The third run chose beta = 0.3, its grid's smallest, on 119 of 165 splits: the grid now
    crosses both learning rates with beta down to 0.03, still 8 points (results/uci/README.md)."""
    from bbb.experiments.uci.settings import BBB_GRID

    assert len(BBB_GRID) == 8 == len(set(BBB_GRID))
    assert {(s.lr, s.beta) for s in BBB_GRID} == {(lr, b) for lr in (1e-3, 3e-3) for b in (0.03, 0.1, 0.3, 1.0)}
    assert {s.prior_sigma for s in BBB_GRID} == {1.0} and V["heteroscedastic"].grid == V["local"].grid == BBB_GRID
