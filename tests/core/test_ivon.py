"""bbb.IVON: the natural-gradient update on bbb's layers (issue 73), its posterior in the layers,
its state, its refusals, and step for step against the published implementation (``ivon-opt``,
GPL: compared against, never imported by the library) where that is installed (the bench extra)."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.errors import UserError
from bbb.ivon import IVON, inverse_softplus


def _data(n: int = 64, d: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, ((x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def _train(net: nn.Module, opt: IVON, steps: int, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    losses = []
    for _ in range(steps):
        with opt.sampling():
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return bbb.BayesMLP(4, [16], 3)


def test_ivon_learns_and_its_posterior_lives_in_the_layers():
    x, y = _data(256)
    net = _mlp()
    opt = IVON(net, lr=0.1, ess=256, hess_init=0.1, weight_decay=1e-3, seed=0)
    losses = _train(net, opt, 150, x, y)
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
    for m in bbb.nn.bayes_modules(net):
        for n in m.param_names():
            st = opt.state[m.mu(n)]
            want = 1.0 / torch.sqrt(256 * (st["hess"] + 1e-3))
            torch.testing.assert_close(F.softplus(m.rho(n)), want, rtol=1e-5, atol=0)
            assert st["step"] == 150
    # the layers' own tools read it: sampled predictions differ, the mean is deterministic
    net.eval()
    p = bbb.uncertainty.predict(net, x[:8], num_samples=16)
    assert p.shape == (16, 8, 3) and float(p.std(0).mean()) > 0


def test_a_resumed_ivon_continues_bit_for_bit(tmp_path):
    x, y = _data()
    a = _mlp()
    opt_a = IVON(a, lr=0.05, ess=64, hess_init=0.5, seed=3)
    _train(a, opt_a, 5, x, y)
    buf = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, buf)
    _train(a, opt_a, 5, x, y)

    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    b = _mlp(seed=1)  # other initial weights: everything comes from the checkpoint
    opt_b = IVON(b, lr=0.05, ess=64, hess_init=0.5, seed=99)
    b.load_state_dict(saved["model"])
    opt_b.load_state_dict(saved["opt"])
    _train(b, opt_b, 5, x, y)
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(u, v), k


def test_the_start_sets_sigma_from_hess_init_and_lr_is_rescaled_by_it():
    net = _mlp()
    IVON(net, lr=0.1, ess=100.0, hess_init=0.25, weight_decay=0.0)
    sigma = F.softplus(net.layers[0].weight_rho)
    torch.testing.assert_close(sigma, torch.full_like(sigma, 1 / math.sqrt(100 * 0.25)))


def test_inverse_softplus_round_trips():
    s = torch.tensor([1e-6, 1e-3, 0.5, 3.0, 25.0], dtype=torch.float64)
    torch.testing.assert_close(F.softplus(inverse_softplus(s)), s)


def test_ivon_refuses_what_it_cannot_train():
    with pytest.raises(UserError, match="estimator='reparam'"):
        IVON(bbb.BayesMLP(4, [8], 2, estimator="local"), lr=0.1, ess=10)
    with pytest.raises(UserError, match="not Bayesian.*requires_grad_"):
        IVON(nn.Sequential(bbb.BayesMLP(4, [8], 2), nn.LayerNorm(2)), lr=0.1, ess=10)
    with pytest.raises(UserError, match="no Bayesian weights"):
        IVON(nn.Linear(3, 2).requires_grad_(False), lr=0.1, ess=10)
    with pytest.raises(UserError, match="ess must be a positive"):
        IVON(_mlp(), lr=0.1, ess=0)
    net = _mlp()
    opt = IVON(net, lr=0.1, ess=10)
    with pytest.raises(UserError, match="one group"):  # its settings would be ignored
        opt.add_param_group({"params": [torch.zeros(2, requires_grad=True)], "lr": 1.0})
    x, y = _data(8)
    F.cross_entropy(net(x), y).backward()  # outside sampling(): the layers drew their own weights
    with pytest.raises(UserError, match="sampling"):
        opt.step()


def test_an_elbo_loss_trains_on_its_nll_and_says_its_kl_is_ivons_prior():
    x, y = _data()
    net = _mlp()
    opt = IVON(net, lr=0.05, ess=64, seed=0)
    elbo = bbb.ELBO(net, num_batches=1)
    with opt.sampling(), pytest.warns(UserWarning, match="IVON's prior"):
        out = elbo(x, y)
    assert float(out.kl) == 0.0
    torch.testing.assert_close(out.loss, out.nll.sum() if out.nll.dim() else out.nll)


def test_a_frozen_layer_is_left_alone():
    net = _mlp()
    first = net.layers[0]
    for p in first.parameters():
        p.requires_grad_(False)
    before = {k: v.clone() for k, v in first.state_dict().items()}
    opt = IVON(net, lr=0.1, ess=64, seed=0)
    x, y = _data()
    _train(net, opt, 3, x, y)
    for k, v in first.state_dict().items():
        assert torch.equal(v, before[k]), k


# -- against the published implementation -----------------------------------------------------

def _reference_steps(plain: nn.Module, kw: dict, x: torch.Tensor, y: torch.Tensor, steps: int):
    """ivon-opt on ``plain``: each step's sampled weights and the means after it."""
    ivon = pytest.importorskip("ivon", reason="ivon-opt (the bench extra) is the reference")
    opt = ivon.IVON(plain.parameters(), **kw)
    sampled, means = [], []
    for _ in range(steps):
        with opt.sampled_params(train=True):
            opt.zero_grad()
            sampled.append([p.detach().clone() for p in plain.parameters()])
            F.cross_entropy(plain(x), y).backward()
        opt.step()
        means.append([p.detach().clone() for p in plain.parameters()])
    return sampled, means


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_each_step_is_ivon_opts_step(kind):
    """The same initial mean, h and noise (ivon-opt's sampled weights read back as our eps): the
    means after each of 5 steps agree to float32 rounding."""
    torch.manual_seed(0)
    if kind == "mlp":
        plain = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        x, y = _data(32)
    else:
        plain = nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 3))
        x = torch.randn(16, 1, 6, 6)
        y = torch.randint(0, 3, (16,))
    net = bbb.bayesianize(copy.deepcopy(plain))
    kw = {"lr": 0.05, "ess": 100.0, "hess_init": 0.3, "weight_decay": 1e-3, "beta1": 0.9, "beta2": 0.999}
    sampled, means = _reference_steps(plain, kw, x, y, 5)
    ours = IVON(net, **kw)
    mus = [m.mu(n) for m in bbb.nn.bayes_modules(net) for n in m.param_names()]
    for step in range(5):
        queue = [((s - mu.detach()) / ours._sigma(mu)) for s, mu in zip(sampled[step], mus)]
        ours.normal = lambda shape, like, q=queue: q.pop(0).reshape(shape)  # type: ignore[method-assign]
        with ours.sampling():
            loss = F.cross_entropy(net(x), y)
        ours.zero_grad()
        loss.backward()
        ours.step()
        for mu, ref in zip(mus, means[step]):
            torch.testing.assert_close(mu.detach(), ref, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_the_compiled_step_gives_the_eager_steps_numbers():
    x, y = _data()
    a, b = _mlp(), _mlp()
    opt_a = IVON(a, lr=0.05, ess=64, hess_init=0.5, seed=1, compile=False)
    opt_b = IVON(b, lr=0.05, ess=64, hess_init=0.5, seed=1, compile=True)
    _train(a, opt_a, 4, x, y)
    _train(b, opt_b, 4, x, y)
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-7, msg=k)
