"""bbb.IVON: the natural-gradient update on bbb's layers (issue 73), its posterior in the layers,
its state, its refusals, and step for step against the published implementation (``ivon-opt``,
GPL: compared against, never imported by the library) where that is installed (the bench extra)."""

from __future__ import annotations

import copy
import io
import json
import math
from pathlib import Path

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
    losses = _train(net, opt, 300, x, y)  # long enough that the margin does not hinge on the noise drawn
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
    for m in bbb.nn.bayes_modules(net):
        for n in m.param_names():
            st = opt.state[m.mu(n)]
            want = 1.0 / torch.sqrt(256 * (st["hess"] + 1e-3))
            torch.testing.assert_close(F.softplus(m.rho(n)), want, rtol=1e-5, atol=0)
            assert st["step"] == 300
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

def _reference_steps(plain: nn.Module, kw: dict, x: torch.Tensor, y: torch.Tensor, steps: int, samples: int = 1):
    """ivon-opt on ``plain`` (``samples`` sampled_params blocks a step, its README's train_samples
    loop): each block's sampled weights and the means after each step."""
    ivon = pytest.importorskip("ivon", reason="ivon-opt (the bench extra) is the reference")
    opt = ivon.IVON(plain.parameters(), **kw)
    sampled, means = [], []
    for _ in range(steps):
        for _ in range(samples):
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


def test_several_samples_a_step_are_ivon_opts_train_samples():
    """ivon-opt's loop of 2 sampled_params blocks a step (each its backward) and bbb's 2 sampling()
    blocks (each its backward), the same noise: the step averages the blocks' gradients and their
    products with the noise as ivon-opt does; the means agree after each of 4 steps."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = _data(32)
    net = bbb.bayesianize(copy.deepcopy(plain))
    kw = {"lr": 0.05, "ess": 100.0, "hess_init": 0.3, "weight_decay": 1e-3, "beta1": 0.9, "beta2": 0.999}
    sampled, means = _reference_steps(plain, kw, x, y, 4, samples=2)
    ours = IVON(net, **kw)
    mus = [m.mu(n) for m in bbb.nn.bayes_modules(net) for n in m.param_names()]
    for step in range(4):
        for block in range(2):
            queue = [((s - mu.detach()) / ours._sigma(mu)) for s, mu in zip(sampled[2 * step + block], mus)]
            ours.normal = lambda shape, like, q=queue: q.pop(0).reshape(shape)  # type: ignore[method-assign]
            with ours.sampling():
                ours.zero_grad()  # where ivon-opt's README calls it: the blocks' gradients are kept apart
                loss = F.cross_entropy(net(x), y)
            loss.backward()
        ours.step()
        for mu, ref in zip(mus, means[step]):
            torch.testing.assert_close(mu.detach(), ref, rtol=1e-5, atol=1e-7)


def test_grad_norm_clipping_is_ivon_opts_clipping_inside_sampled_params():
    """torch.nn.utils.clip_grad_norm_(model.parameters(), c) between backward and step clips the
    gradient the step applies (a mu's .grad is the view of IVON's flat gradient), as clipping
    p.grad inside ivon-opt's sampled_params block does: the same means after 4 steps."""
    ivon = pytest.importorskip("ivon", reason="ivon-opt (the bench extra) is the reference")
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = _data(32)
    net = bbb.bayesianize(copy.deepcopy(plain))
    kw = {"lr": 0.05, "ess": 100.0, "hess_init": 0.3, "weight_decay": 1e-3, "beta1": 0.9, "beta2": 0.999}
    ref = ivon.IVON(plain.parameters(), **kw)
    ours = IVON(net, **kw)
    mus = [m.mu(n) for m in bbb.nn.bayes_modules(net) for n in m.param_names()]
    for _ in range(4):
        with ref.sampled_params(train=True):
            ref.zero_grad()
            sampled = [p.detach().clone() for p in plain.parameters()]
            F.cross_entropy(plain(x), y).backward()
            want = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.05)
        ref.step()
        queue = [((s - mu.detach()) / ours._sigma(mu)) for s, mu in zip(sampled, mus)]
        ours.normal = lambda shape, like, q=queue: q.pop(0).reshape(shape)  # type: ignore[method-assign]
        with ours.sampling():
            loss = F.cross_entropy(net(x), y)
        ours.zero_grad()
        loss.backward()
        got = torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
        ours.step()
        for mu, p in zip(mus, plain.parameters()):
            torch.testing.assert_close(mu.detach(), p.detach(), rtol=1e-5, atol=1e-7)


def test_a_mus_grad_is_the_step_gradient_and_one_line_errors_where_it_is_not_one_tensor():
    net = _mlp()
    x, y = _data(32)
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    mus = [p for n, p in net.named_parameters() if n.endswith("_mu")]
    assert all(p.grad is None for p in mus)
    with opt.sampling():
        loss = F.cross_entropy(net(x), y)
    assert all(p.grad is None for p in mus)  # no backward yet
    loss.backward()
    flat = opt._flats[0].g
    norm = torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf)
    torch.testing.assert_close(norm, torch.linalg.vector_norm(flat))
    assert all(p.grad is not None and p.grad.shape == p.shape for p in mus)
    with pytest.raises(UserError, match="do not assign it"):
        mus[0].grad = torch.zeros_like(mus[0])
    opt.step()
    assert all(p.grad is None for p in mus)  # after a step, as after zero_grad
    with opt.sampling():  # two blocks: each weight drawn twice, no single gradient
        l1 = F.cross_entropy(net(x), y)
    with opt.sampling():
        l2 = F.cross_entropy(net(x), y)
    (l1 + l2).backward()
    with pytest.raises(UserError, match="drawn more than once.*clip_radius"):
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()  # the step itself averages the two blocks
    state = io.BytesIO()
    torch.save(net.state_dict(), state)  # the parameters' class is not in the state
    assert all(type(v) is torch.Tensor for v in torch.load(io.BytesIO(state.getvalue()), weights_only=True).values())


def test_a_grad_scaler_unscales_ivons_gradient_and_steps_it():
    """torch.amp.GradScaler (mixed precision's loss scaling) finds IVON's gradient through the mu's
    .grad, unscales it in place and steps: the same parameters as without it (a power-of-two scale
    is exact). It used to stop at "No inf checks were recorded for this optimizer"."""
    def run(scaled: bool) -> list[torch.Tensor]:
        net = _mlp()
        opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
            with opt.sampling():
                loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            if scaled:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        return [t.clone() for t in net.state_dict().values()]

    for a, b in zip(run(False), run(True)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("k", [None, 2])
def test_a_compiled_network_trains_under_ivon_as_the_eager_one(k):
    """torch.compile(net) under IVON (AOTAutograd, as inductor's): the same trajectory as eager, the
    draw counter advanced (the flat draw runs outside the graph, which must not write its own
    inputs; a forward's notes live on a plain object, since Dynamo drops attribute writes on an
    optimiser). It used to fail ("non-differentiable view input mutations") or skip every step."""
    def run(compiled: bool) -> tuple[list[torch.Tensor], int]:
        net = _mlp()
        opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
        model = torch.compile(net, backend="aot_eager") if compiled else net
        x, y = _data(32)
        for _ in range(3):
            with opt.sampling():
                out = model(x) if k is None else bbb.forward_samples(model, x, k)
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.repeat(k or 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [t.clone() for t in net.state_dict().values()], opt.counter

    try:
        (eager, c_eager), (comp, c_comp) = run(False), run(True)
    finally:
        torch._dynamo.reset()
    assert c_eager == c_comp > 0
    for a, b in zip(eager, comp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(eager[0], _mlp().state_dict()["layers.0.weight_mu"])


def test_a_step_without_a_backward_warns_once_and_changes_nothing():
    net = _mlp()
    x, y = _data(32)
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.warns(UserWarning, match="no backward pass reached"):
        with opt.sampling():
            F.cross_entropy(net(x), y)
        opt.step()
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    assert all(st["step"] == 0 for st in opt.state.values())


def test_blocks_of_the_same_noise_step_as_one_block():
    """Two sampling() blocks a step drawing the same noise give the step of one block (the mean of
    two equal gradients, not their sum); a block whose draws no backward reaches (a sampled
    prediction between steps) is not a sample of the step's loss."""
    torch.manual_seed(0)
    x, y = _data(32)
    nets = [_mlp() for _ in range(3)]
    for net in nets[1:]:
        net.load_state_dict(nets[0].state_dict())
    opts = [IVON(n, lr=0.1, ess=64, seed=0, compile=False) for n in nets]
    for _ in range(3):
        ref = {tuple(m.mu(n).shape): torch.randn(m.mu(n).shape) for m in bbb.nn.bayes_modules(nets[0])
               for n in m.param_names()}
        assert len(ref) == 4  # the shapes tell the weight tensors apart
        for net, opt, blocks in zip(nets, opts, (1, 2, 1)):
            opt.normal = lambda shape, like, r=ref: r[tuple(shape)].clone()  # type: ignore[method-assign]
            opt.zero_grad()
            if opt is opts[2]:
                with opt.sampling():
                    net(x)  # drawn, never backward: not a sample of the loss
            for _ in range(blocks):
                with opt.sampling():
                    loss = F.cross_entropy(net(x), y)
                loss.backward()
            opt.step()
        for other in nets[1:]:
            for a, b in zip(nets[0].state_dict().values(), other.state_dict().values()):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_zero_grad_discards_a_skipped_backward_as_torchs_does():
    """forward, backward, no step (a skipped batch), zero_grad, forward, backward, step: the step of
    the second sample alone (torch's zero_grad semantics); the docs' loop (zero_grad between the
    forward and the backward) is unchanged."""
    torch.manual_seed(0)
    x, y = _data(32)
    nets = [_mlp() for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opts = [IVON(n, lr=0.1, ess=64, seed=0, compile=False) for n in nets]
    for _ in range(2):
        ref = {tuple(m.mu(n).shape): torch.randn(m.mu(n).shape) for m in bbb.nn.bayes_modules(nets[0])
               for n in m.param_names()}
        skipped = {k: torch.randn(k) for k in ref}
        for net, opt, skip in ((nets[0], opts[0], False), (nets[1], opts[1], True)):
            if skip:
                opt.normal = lambda shape, like, r=skipped: r[tuple(shape)].clone()  # type: ignore[method-assign]
                with opt.sampling():
                    loss = F.cross_entropy(net(x), y)
                loss.backward()
                opt.zero_grad()
            opt.normal = lambda shape, like, r=ref: r[tuple(shape)].clone()  # type: ignore[method-assign]
            with opt.sampling():
                loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        for a, b in zip(nets[0].state_dict().values(), nets[1].state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


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


# -- one pass over flat buffers (issue 73, items 1 and 5) -------------------------------------

def _counting(monkeypatch) -> dict[str, int]:
    """Count the calls of the flat update and of the per-tensor one (of IVONs built afterwards)."""
    calls = {"flat": 0, "each": 0}
    for key, name in (("flat", "ivon_flat_update"), ("each", "ivon_update")):
        real = getattr(bbb.ivon, name)

        def counted(*a, real=real, key=key):
            calls[key] += 1
            return real(*a)
        monkeypatch.setattr(bbb.ivon, name, counted)
    return calls


def test_a_step_draws_the_flat_noise_at_once_and_runs_one_update_over_flat_buffers(monkeypatch):
    """The noise of every weight is one counter-based draw over the flat vector (bbb.random.normal at
    the optimiser's seed and its draw counter; the weight tensors in the model's order); one update
    call a step; the layers' mu and rho, and the
    momentum and h in ``optimizer.state``, are views of one buffer each."""
    calls = _counting(monkeypatch)
    torch.manual_seed(0)
    net = bbb.BayesMLP(3, [5], 2)  # tensors of 15, 5, 10 and 2 weights
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    opt = IVON(net, lr=0.1, ess=8, seed=5, compile=False)
    pairs = [(m, n) for m in bbb.nn.bayes_modules(net) for n in m.param_names()]
    want = bbb.random.normal(32, 5, 0)
    with opt.sampling(), bbb.nn.SampleRecorder() as rec:
        loss = F.cross_entropy(net(x), y)
    assert torch.equal(torch.cat([rec.get(m, n).eps.reshape(-1) for m, n in pairs]), want)
    loss.backward()
    opt.step()
    _train(net, opt, 2, x, y)
    assert calls == {"flat": 3, "each": 0}
    for tensors in ([m.mu(n) for m, n in pairs], [m.rho(n) for m, n in pairs],
                    [opt.state[m.mu(n)]["momentum"] for m, n in pairs], [opt.state[m.mu(n)]["hess"] for m, n in pairs]):
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    st = opt.state[net.layers[0].weight_mu]
    assert st["step"] == 3 and float(st["momentum"].abs().sum()) > 0  # the views are the state the step updates


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.a, self.b = bbb.BayesLinear(4, 8), bbb.BayesLinear(8, 3), bbb.BayesLinear(8, 3)

    def forward(self, x: torch.Tensor, head: str = "a", twice: bool = False) -> torch.Tensor:
        h = torch.relu(self.body(x))
        if twice:
            h = torch.relu(self.body(x)) + h
        return (self.a if head == "a" else self.b)(h)


def test_a_layer_left_out_or_used_twice_steps_weight_tensor_by_weight_tensor(monkeypatch):
    """A head not used in the forward is left as it is (its step count too); a layer used twice gets
    both samples' gradients; those steps go weight tensor by weight tensor (on views of the same
    buffers), and the sigma in the layers is still the one of h."""
    calls = _counting(monkeypatch)
    net = _TwoHeads()
    x, y = _data(32)
    opt = IVON(net, lr=0.1, ess=32, seed=0, compile=False)
    b_before = net.b.weight_mu.detach().clone()
    for twice in (False, True):
        with opt.sampling():
            loss = F.cross_entropy(net(x, "a", twice), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.equal(net.b.weight_mu, b_before) and opt.state[net.b.weight_mu]["step"] == 0
    assert opt.state[net.a.weight_mu]["step"] == 2 and not torch.equal(net.a.weight_mu, _TwoHeads().a.weight_mu)
    assert calls == {"flat": 0, "each": 2 * 4}
    for m in (net.body, net.a, net.b):
        want = torch.rsqrt(32 * (opt.state[m.weight_mu]["hess"] + 1e-4))
        torch.testing.assert_close(F.softplus(m.weight_rho), want, rtol=1e-5, atol=0)


def test_a_model_moved_after_ivon_was_built_is_a_one_line_error():
    """The trained mu and rho are views of IVON's buffers: converting the model afterwards would leave
    IVON updating tensors the model no longer reads."""
    net = _mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0)
    net.double()
    with pytest.raises(UserError, match=r"build IVON after moving the model") as e:
        with opt.sampling():
            pass
    assert "\n" not in str(e.value)



def test_freezing_or_unfreezing_after_ivon_was_built_is_a_one_line_error():
    """A mean frozen after IVON was built was still updated; one unfrozen after it never was."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))

    def step(opt, net):
        with opt.sampling():
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    net = _mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    step(opt, net)
    first = next(m for m in net.modules() if isinstance(m, bbb.nn.BayesModule))
    first.weight_mu.requires_grad_(False)
    before = first.weight_mu.detach().clone()
    frozen = r"IVON.step: 1 parameter\(s\) frozen \(requires_grad=False\) after IVON was built"
    with pytest.raises(UserError, match=frozen) as e:
        step(opt, net)
    assert "\n" not in str(e.value) and torch.equal(first.weight_mu, before)
    net = _mlp()
    first = next(m for m in net.modules() if isinstance(m, bbb.nn.BayesModule))
    first.requires_grad_(False)
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    first.requires_grad_(True)
    with pytest.raises(UserError, match=r"parameter\(s\) unfrozen .*after IVON was built .*which it does not train"):
        step(opt, net)


def test_a_checkpoint_of_the_per_tensor_ivon_loads_and_continues():
    """tests/core/ivon_state_before_flat.json was written by bbb.IVON before the flat buffers (git
    2dda3a1; the numbers of its tensors, float32, as lists): a BayesMLP(3, [5], 2) after 3 steps (lr
    0.05, ess 16, hess_init 0.5, seed 3) on 16 rows, its model state and its optimiser state (one
    standalone tensor per parameter: momentum, hess, step; the generator's state left out), then 3
    more steps with the noise of ``normal`` from ``torch.Generator().manual_seed(11)`` and the
    model and h after them. Loaded into today's IVON (built with other weights and seed), the same
    3 steps give the same numbers; the loaded momentum and h are views of the buffers they update."""
    saved = json.loads(Path(__file__).with_name("ivon_state_before_flat.json").read_text())
    torch.manual_seed(1)
    net = bbb.BayesMLP(3, [5], 2)
    opt = IVON(net, lr=0.05, ess=16, hess_init=0.5, seed=99)
    params = opt.param_groups[0]["params"]
    shapes = {k: v.shape for k, v in net.state_dict().items()}

    def tensors(d: dict) -> dict:
        return {k: torch.tensor(v).reshape(shapes[k]) for k, v in d.items()}
    state = {int(i): {"step": st["step"], **{k: torch.tensor(st[k]).reshape(p.shape) for k in ("momentum", "hess")}}
             for (i, st), p in zip(saved["opt_state"].items(), params)}
    net.load_state_dict(tensors(saved["model"]))
    opt.load_state_dict({"state": state, "param_groups": saved["param_groups"]})
    assert [opt.state[p]["step"] for p in params] == [3] * 4
    for key in ("momentum", "hess"):
        assert len({opt.state[p][key].untyped_storage().data_ptr() for p in params}) == 1
        for p, st in zip(params, state.values()):
            assert torch.equal(opt.state[p][key], st[key])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 3, generator=g)
    noise = torch.Generator().manual_seed(11)
    opt.normal = lambda shape, like: torch.randn(shape, generator=noise, dtype=like.dtype)  # type: ignore[method-assign]
    _train(net, opt, 3, x, (x[:, 0] > 0).long())
    for (k, got), want in zip(net.state_dict().items(), tensors(saved["after"]).values()):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8, msg=k)
    for p, want in zip(params, saved["after_hess"]):
        torch.testing.assert_close(opt.state[p]["hess"], torch.tensor(want).reshape(p.shape), rtol=1e-6, atol=1e-8)


def test_weights_of_two_dtypes_step_in_one_pass_each(monkeypatch):
    """A float32 layer and a float64 one: two flat buffers, one update of each a step."""
    calls = _counting(monkeypatch)

    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = bbb.BayesLinear(4, 8), bbb.BayesLinear(8, 3).double()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.relu(self.a(x)).double())

    torch.manual_seed(0)
    net = Mixed()
    x, y = _data(16)
    opt = IVON(net, lr=0.1, ess=16, seed=0, compile=False)
    before = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    _train(net, opt, 2, x, y)
    assert calls == {"flat": 4, "each": 0}
    assert net.b.weight_mu.dtype == torch.float64 and opt.state[net.b.weight_mu]["hess"].dtype == torch.float64
    assert all(not torch.equal(p, b) for p, b in zip(opt.param_groups[0]["params"], before))


def test_the_noise_is_counter_based_the_same_compiled_eager_and_on_any_thread_count():
    """Draw c of the flat noise is bbb.random.normal(n, seed, c): compiled or eager, on 1 or 2
    threads, the same numbers (to the Box-Muller's float rounding compiled); the state holds the
    seed and the counter, not a generator."""
    torch.manual_seed(0)
    draws = {}
    threads = torch.get_num_threads()
    try:
        for compiled, nthreads in ((False, 1), (False, 2), (True, 2)):
            torch.set_num_threads(nthreads)
            net = bbb.BayesMLP(3, [5], 2)
            opt = IVON(net, lr=0.1, ess=8, seed=7, compile=compiled)
            x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
            got = []
            for _ in range(2):
                with opt.sampling(), bbb.nn.SampleRecorder() as rec:
                    loss = F.cross_entropy(net(x), y)
                got.append(torch.cat([rec.get(m, n).eps.reshape(-1) for m in bbb.nn.bayes_modules(net)
                                      for n in m.param_names()]))
                opt.zero_grad()
                loss.backward()
                opt.step()
            draws[(compiled, nthreads)] = got
            assert opt.state_dict()["noise"] == {"seed": 7, "counter": 2} and "generator" not in opt.state_dict()
    finally:
        torch.set_num_threads(threads)
    want = [bbb.random.normal(32, 7, c) for c in (0, 1)]
    for (compiled, _), got in draws.items():
        for g, w in zip(got, want):
            if compiled:
                torch.testing.assert_close(g, w, rtol=0, atol=1e-5)
            else:
                assert torch.equal(g, w)


def test_a_state_saved_with_a_torch_generator_loads_and_says_the_noise_changes():
    """An IVON state of the bbb before the counter-based noise held the torch generator's state: it
    loads (the momentum, h and steps), and a warning says the noise goes on from another stream."""
    torch.manual_seed(0)
    net = bbb.BayesMLP(3, [5], 2)
    opt = IVON(net, lr=0.1, ess=8, seed=3, compile=False)
    _train(net, opt, 2, torch.randn(8, 3), torch.randint(0, 2, (8,)))
    old = opt.state_dict()
    del old["noise"]
    old["generator"] = torch.Generator().get_state()
    other = IVON(bbb.BayesMLP(3, [5], 2), lr=0.1, ess=8, seed=4, compile=False)
    with pytest.warns(UserWarning, match="counter-based noise"):
        other.load_state_dict(old)
    assert other.seed == 4 and all(st["step"] == 2 for st in other.state.values())


def test_a_draw_of_its_own_is_the_next_counter_based_draw():
    """A weight drawn k at a time (or used twice) takes its noise from the next counter value."""
    net = bbb.BayesMLP(3, [5], 2)
    opt = IVON(net, lr=0.1, ess=8, seed=11, compile=False)
    like = net.layers[0].weight_mu
    a, b = opt.normal((4, 5, 3), like), opt.normal((2,), like)
    assert torch.equal(a, bbb.random.normal(60, 11, 0).view(4, 5, 3)) and torch.equal(b, bbb.random.normal(2, 11, 1))
    assert opt.counter == 2


@pytest.mark.release_independent
def test_ess_or_weight_decay_edited_in_param_groups_sets_the_next_steps_sigma():
    x, y = _data()
    net = _mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    _train(net, opt, 2, x, y)
    opt.param_groups[0].update(ess=6400.0, weight_decay=1e-2)  # as a scheduler of ess would
    with opt.sampling():
        loss = F.cross_entropy(net(x), y)
    f = opt._flats[0]
    want = torch.rsqrt(6400.0 * (f.hess + 1e-2))  # sigma = 1 / sqrt(ess (h + weight_decay)), the new values
    torch.testing.assert_close(f.w, f.mu + want * f.eps)  # the sample this step's update reads
    layer = next(bbb.nn.model.bayes_modules(net))
    torch.testing.assert_close(F.softplus(layer.weight_rho).detach().reshape(-1),
                               want[: layer.weight_rho.numel()])
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.release_independent
@pytest.mark.parametrize("name,value", [("ess", 0.0), ("weight_decay", -1.0), ("beta2", 1.0), ("lr", -0.1)])
def test_a_hyperparameter_edited_out_of_range_is_a_one_line_error_not_nans(name, value):
    x, y = _data()
    net = _mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    _train(net, opt, 1, x, y)
    opt.param_groups[0][name] = value
    with pytest.raises(UserError, match=rf"^IVON: param_groups\[0\]'s {name} must be"):
        _train(net, opt, 1, x, y)


@pytest.mark.release_independent
def test_a_scheduler_may_set_lr_to_zero_m_stays_h_moves():
    x, y = _data()
    net = _mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.0)
    mus = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    hess = [opt.state[p]["hess"].clone() for p in opt.param_groups[0]["params"]]
    _train(net, opt, 1, x, y)
    assert all(torch.equal(a, p) for a, p in zip(mus, opt.param_groups[0]["params"]))
    assert not all(torch.equal(h, opt.state[p]["hess"]) for h, p in zip(hess, opt.param_groups[0]["params"]))
