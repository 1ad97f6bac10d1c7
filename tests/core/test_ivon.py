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

from .ivonkit import toy_data, toy_mlp, train_steps


def test_ivon_learns_and_its_posterior_lives_in_the_layers():
    x, y = toy_data(256)
    net = toy_mlp()
    opt = IVON(net, lr=0.1, ess=256, hess_init=0.1, weight_decay=1e-3, seed=0)
    losses = train_steps(net, opt, 300, x, y)  # long enough that the margin does not hinge on the noise drawn
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
    x, y = toy_data()
    a = toy_mlp()
    opt_a = IVON(a, lr=0.05, ess=64, hess_init=0.5, seed=3)
    train_steps(a, opt_a, 5, x, y)
    buf = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, buf)
    train_steps(a, opt_a, 5, x, y)

    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    b = toy_mlp(seed=1)  # other initial weights: everything comes from the checkpoint
    opt_b = IVON(b, lr=0.05, ess=64, hess_init=0.5, seed=99)
    b.load_state_dict(saved["model"])
    opt_b.load_state_dict(saved["opt"])
    train_steps(b, opt_b, 5, x, y)
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(u, v), k


def test_the_start_sets_sigma_from_hess_init_and_lr_is_rescaled_by_it():
    net = toy_mlp()
    IVON(net, lr=0.1, ess=100.0, hess_init=0.25, weight_decay=0.0)
    sigma = F.softplus(net.layers[0].weight_rho)
    torch.testing.assert_close(sigma, torch.full_like(sigma, 1 / math.sqrt(100 * 0.25)))


def test_others_leave_gives_the_deterministic_parameters_to_an_optimiser_of_your_own():
    """A converted network with a LayerNorm (or a BatchNorm: bayesianize leaves them deterministic)
    could not be trained by IVON but with the LayerNorm frozen; others='leave' hands them to an
    optimiser of your own, and IVON's step is the same as with them frozen until they first move."""
    def net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(bbb.BayesMLP(4, [8], 3), nn.LayerNorm(3))

    x, y = toy_data()
    with pytest.raises(UserError, match="others='leave'"):
        IVON(net(), lr=0.1, ess=64)
    with pytest.raises(UserError, match="choose 'refuse' or 'leave'"):
        IVON(net(), lr=0.1, ess=64, others="adam")
    model = net()
    opt = IVON(model, lr=0.1, ess=64, seed=3, others="leave")
    norm = model[1]
    assert [id(p) for p in opt.other_parameters()] == [id(norm.weight), id(norm.bias)]
    adam = torch.optim.Adam(opt.other_parameters(), lr=0.05)
    frozen = net()
    frozen[1].requires_grad_(False)
    ref = IVON(frozen, lr=0.1, ess=64, seed=3)
    assert IVON(toy_mlp(), lr=0.1, ess=10).other_parameters() == []
    means = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    for step in range(3):
        for o, m, extra in ((opt, model, adam), (ref, frozen, None)):
            with o.sampling():
                loss = F.cross_entropy(m(x), y)
            o.zero_grad()
            if extra is not None:
                extra.zero_grad()
            loss.backward()
            o.step()
            if extra is not None:
                extra.step()
        if step == 0:  # the same draws and gradients before the LayerNorm first moved
            for a, b in zip(opt.param_groups[0]["params"], ref.param_groups[0]["params"]):
                torch.testing.assert_close(a.detach().clone(), b.detach().clone())
    assert not torch.equal(norm.weight, torch.ones(3)) and torch.equal(frozen[1].weight, torch.ones(3))
    assert all(not torch.equal(a.detach().clone(), b) for a, b in zip(opt.param_groups[0]["params"], means))


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
    half = toy_mlp()
    half.layers[0].weight_mu.requires_grad_(False)  # its rho left trainable: said so, not called "not Bayesian"
    with pytest.raises(UserError, match=r"layers\.0\.weight_rho trainable, but the mean of each is frozen"):
        IVON(half, lr=0.1, ess=10)
    fixed = toy_mlp()
    fixed.layers[0].weight_rho.requires_grad_(False)  # its mean trained: IVON would overwrite the frozen rho
    before = fixed.layers[0].weight_rho.clone()
    with pytest.raises(UserError, match=r"layers\.0\.weight_rho frozen, but the mean of each is trained"):
        IVON(fixed, lr=0.1, ess=10)
    assert torch.equal(fixed.layers[0].weight_rho, before)
    with pytest.raises(UserError, match="ess must be a positive"):
        IVON(toy_mlp(), lr=0.1, ess=0)
    for bad in ({"beta1": "0.9"}, {"beta2": None}, {"clip_radius": "1"}):  # not numbers: one line, no TypeError
        with pytest.raises(UserError, match=rf"{next(iter(bad))} must be"):
            IVON(toy_mlp(), lr=0.1, ess=10, **bad)
    import numpy as np  # numpy's numbers are numbers (a count from numpy, ess=np.int64): not refused
    assert IVON(toy_mlp(), lr=np.float32(0.5), ess=np.int64(10)).param_groups[0]["ess"] == 10.0
    net = toy_mlp()
    opt = IVON(net, lr=0.1, ess=10)
    with pytest.raises(UserError, match="one group"):  # its settings would be ignored
        opt.add_param_group({"params": [torch.zeros(2, requires_grad=True)], "lr": 1.0})
    x, y = toy_data(8)
    F.cross_entropy(net(x), y).backward()  # outside sampling(): the layers drew their own weights
    with pytest.raises(UserError, match="sampling"):
        opt.step()
    net.eval()  # inside sampling() but in eval(): the layers use their means, and the error says why
    with opt.sampling():
        loss = F.cross_entropy(net(x), y)
    loss.backward()
    with pytest.raises(UserError, match=r"BayesMLP is in eval\(\) mode.*model\.train\(\)"):
        opt.step()
    net.train()
    net.layers[0].eval()  # one layer in eval(): it uses its mean, a gradient reaches it, IVON would drop it
    opt.zero_grad()
    with opt.sampling():
        loss = F.cross_entropy(net(x), y)
    loss.backward()
    with pytest.raises(UserError, match=r"BayesLinear's weight_mu was not sampled.*eval\(\) mode.*model\.train"):
        opt.step()
    net.train()
    opt.zero_grad()
    with opt.sampling():  # a penalty on the parameters themselves: its gradient is on the means, not the sample
        loss = F.cross_entropy(net(x), y) + 1e-3 * sum(p.pow(2).sum() for p in net.parameters())
    loss.backward()
    with pytest.raises(UserError, match=r"reached BayesLinear's weight_mu itself.*weight_decay"):
        opt.step()


def test_an_elbo_loss_trains_on_its_nll_and_says_its_kl_is_ivons_prior():
    x, y = toy_data()
    net = toy_mlp()
    opt = IVON(net, lr=0.05, ess=64, seed=0)
    elbo = bbb.ELBO(net, num_batches=1)
    with opt.sampling(), pytest.warns(UserWarning, match="IVON's prior"):
        out = elbo(x, y)
    assert float(out.kl) == 0.0
    torch.testing.assert_close(out.loss, out.nll.sum() if out.nll.dim() else out.nll)


def test_a_frozen_layer_is_left_alone():
    net = toy_mlp()
    first = net.layers[0]
    for p in first.parameters():
        p.requires_grad_(False)
    before = {k: v.clone() for k, v in first.state_dict().items()}
    opt = IVON(net, lr=0.1, ess=64, seed=0)
    x, y = toy_data()
    train_steps(net, opt, 3, x, y)
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
        x, y = toy_data(32)
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
    x, y = toy_data(32)
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
    x, y = toy_data(32)
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
    net = toy_mlp()
    x, y = toy_data(32)
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
        net = toy_mlp()
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
        net = toy_mlp()
        opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
        model = torch.compile(net, backend="aot_eager") if compiled else net
        x, y = toy_data(32)
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
    assert not torch.equal(eager[0], toy_mlp().state_dict()["layers.0.weight_mu"])


def test_a_compiled_deep_network_under_ivon_compiles_once_per_layer_shape():
    """The draw's record of the weights drawn this step (a Python set) was traced: Dynamo guarded its
    contents, so every layer of a deep network compiled again at each position of the step, and past
    the recompile limit its forward ran eager."""
    from torch._dynamo.testing import CompileCounter

    layers: list[nn.Module] = []
    for _ in range(10):
        layers += [bbb.nn.BayesLinear(4, 4), nn.ReLU()]
    net = nn.Sequential(*layers, bbb.nn.BayesLinear(4, 2))
    opt = IVON(net, lr=0.1, ess=8, seed=0, compile=False)
    counter = CompileCounter()
    loss_of = torch.compile(lambda x, y: F.cross_entropy(net(x), y), backend=counter)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    try:
        for _ in range(2):
            with opt.sampling():
                loss = loss_of(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch._dynamo.reset()
    assert counter.frame_count <= 6, counter.frame_count


def test_a_step_without_a_backward_warns_once_and_changes_nothing():
    net = toy_mlp()
    x, y = toy_data(32)
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
    x, y = toy_data(32)
    nets = [toy_mlp() for _ in range(3)]
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
    x, y = toy_data(32)
    nets = [toy_mlp() for _ in range(2)]
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
    x, y = toy_data()
    a, b = toy_mlp(), toy_mlp()
    opt_a = IVON(a, lr=0.05, ess=64, hess_init=0.5, seed=1, compile=False)
    opt_b = IVON(b, lr=0.05, ess=64, hess_init=0.5, seed=1, compile=True)
    train_steps(a, opt_a, 4, x, y)
    train_steps(b, opt_b, 4, x, y)
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-7, msg=k)
