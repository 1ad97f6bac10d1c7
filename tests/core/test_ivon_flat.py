"""bbb.IVON's one pass over flat buffers (issue 73, items 1 and 5): the noise drawn at once over the
flat vector, counter based; one update per dtype; the per-tensor path where a layer is left out or
used twice; old checkpoints; hyperparameters edited in param_groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.errors import UserError
from bbb.ivon import IVON

from .ivonkit import toy_data, toy_mlp, train_steps

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
    train_steps(net, opt, 2, x, y)
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
    x, y = toy_data(32)
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


class _Tied(nn.Module):
    """A cell applied at every step of a loop (the same weights each time), or applied once and its
    output doubled (``once``): with one sample of the cell's weights both are the same function."""

    def __init__(self, once: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.cell, self.head, self.once = bbb.BayesLinear(4, 4), bbb.BayesLinear(4, 3), once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = 2 * torch.tanh(self.cell(x)) if self.once else torch.tanh(self.cell(x)) + torch.tanh(self.cell(x))
        return self.head(h)


@pytest.mark.parametrize("blocks", [1, 2])
def test_a_layer_used_twice_in_a_block_uses_one_sample_of_its_weights(blocks):
    """IVON's theta is one sample of the weights per Monte Carlo sample (ivon-opt's sampled_params
    block): a cell called twice in one sampling() block uses the same weights both times (as the
    ELBO's forward does), in the step's first block and in a second one; the steps equal those of
    the network that calls it once."""
    x, y = toy_data(32)
    nets = [_Tied(once) for once in (False, True)]
    opts = [IVON(n, lr=0.1, ess=32, hess_init=0.5, seed=3, compile=False) for n in nets]
    for _ in range(3):
        for net, opt in zip(nets, opts):
            for _ in range(blocks):
                with opt.sampling():
                    loss = F.cross_entropy(net(x), y)
                loss.backward()
            if blocks == 1:
                assert net.cell.weight_mu.grad is not None  # one sample: one gradient, clip_grad_norm_ reads it
            opt.step()
    for a, b in zip(nets[0].state_dict().values(), nets[1].state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(nets[0].cell.weight_mu, _Tied(False).cell.weight_mu)


def test_gradient_accumulation_in_one_block_is_the_whole_minibatchs_step():
    """Micro-batches in one sampling() block, each mean loss divided by their number (the docs'
    accumulation): one sample of the weights, the step of the whole minibatch."""
    x, y = toy_data(64)
    states = []
    for chunks in (1, 4):
        net = toy_mlp()
        opt = IVON(net, lr=0.1, ess=64, hess_init=0.5, seed=1, compile=False)
        for _ in range(3):
            with opt.sampling():
                for xb, yb in zip(x.chunk(chunks), y.chunk(chunks)):
                    (F.cross_entropy(net(xb), yb) / chunks).backward()
            opt.step()
        states.append(net.state_dict())
    for k, v in states[0].items():
        torch.testing.assert_close(states[1][k], v, rtol=1e-5, atol=1e-6, msg=k)


def test_a_model_moved_after_ivon_was_built_is_a_one_line_error():
    """The trained mu and rho are views of IVON's buffers: converting the model afterwards would leave
    IVON updating tensors the model no longer reads."""
    net = toy_mlp()
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

    net = toy_mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    step(opt, net)
    first = next(m for m in net.modules() if isinstance(m, bbb.nn.BayesModule))
    first.weight_mu.requires_grad_(False)
    before = first.weight_mu.detach().clone()
    frozen = r"IVON.step: 1 parameter\(s\) frozen \(requires_grad=False\) after IVON was built"
    with pytest.raises(UserError, match=frozen) as e:
        step(opt, net)
    assert "\n" not in str(e.value) and torch.equal(first.weight_mu, before)
    net = toy_mlp()
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
    train_steps(net, opt, 3, x, (x[:, 0] > 0).long())
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
    x, y = toy_data(16)
    opt = IVON(net, lr=0.1, ess=16, seed=0, compile=False)
    before = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    train_steps(net, opt, 2, x, y)
    assert calls == {"flat": 4, "each": 0}
    assert net.b.weight_mu.dtype == torch.float64 and opt.state[net.b.weight_mu]["hess"].dtype == torch.float64
    assert all(not torch.equal(p, b) for p, b in zip(opt.param_groups[0]["params"], before))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_keep_h_and_the_momentum_in_float32(dtype):
    """beta2 near 1 rounds to 1 in half precision, and h's step is below its resolution: h kept in
    the weights' dtype never moved (sigma never learned). In float32 it learns as a float32 net's."""
    x, y = toy_data(32)
    hs = []
    for dt in (torch.float32, dtype):
        net = toy_mlp().to(dt)
        opt = IVON(net, lr=0.1, ess=32, hess_init=0.5, beta2=0.9999, seed=0, compile=False)
        for _ in range(10):
            with opt.sampling():
                loss = F.cross_entropy(net(x.to(dt)).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        st = opt.state[net.layers[0].weight_mu]
        assert st["hess"].dtype == st["momentum"].dtype == torch.float32 and net.layers[0].weight_mu.dtype == dt
        hs.append(st["hess"])
    assert float((hs[1] - 0.5).abs().max()) > 2e-4
    torch.testing.assert_close(hs[1], hs[0], rtol=0, atol=1e-4)


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
    train_steps(net, opt, 2, torch.randn(8, 3), torch.randint(0, 2, (8,)))
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
    x, y = toy_data()
    net = toy_mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    train_steps(net, opt, 2, x, y)
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
    x, y = toy_data()
    net = toy_mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    train_steps(net, opt, 1, x, y)
    opt.param_groups[0][name] = value
    with pytest.raises(UserError, match=rf"^IVON: param_groups\[0\]'s {name} must be"):
        train_steps(net, opt, 1, x, y)


@pytest.mark.release_independent
def test_a_scheduler_may_set_lr_to_zero_m_stays_h_moves():
    x, y = toy_data()
    net = toy_mlp()
    opt = IVON(net, lr=0.1, ess=64, seed=0, compile=False)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.0)
    mus = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    hess = [opt.state[p]["hess"].clone() for p in opt.param_groups[0]["params"]]
    train_steps(net, opt, 1, x, y)
    assert all(torch.equal(a, p) for a, p in zip(mus, opt.param_groups[0]["params"]))
    assert not all(torch.equal(h, opt.state[p]["hess"]) for h, p in zip(hess, opt.param_groups[0]["params"]))


@pytest.mark.parametrize("first", ["engine", "ivon"])
def test_a_layer_taken_over_by_a_second_optimiser_is_said_so(first):
    """Two models sharing a layer, an optimiser each: the second's buffers take the shared layer over, and
    the first said its model had been moved or converted (on the same device and dtype) and to move it first."""
    from bbb import ELBO, Engine

    def build(kind, model):
        return Engine(ELBO(model), "sgd", lr=0.1, compile=False) if kind == "engine" else IVON(model, lr=0.1, ess=8)

    shared = bbb.nn.BayesLinear(3, 4)
    a, b = nn.Sequential(shared, nn.ReLU(), bbb.nn.BayesLinear(4, 2)), nn.Sequential(shared, bbb.nn.BayesLinear(4, 2))
    opt = build(first, a)
    build("ivon" if first == "engine" else "engine", b)
    with pytest.raises(UserError, match=r"replaced .*another bbb.Engine or IVON .*a layer that two models share") as e:
        with opt.sampling():
            pass
    assert "\n" not in str(e.value) and "moved or converted" not in str(e.value)
