"""The engine where more habits of a ``torch.optim`` loop meet it (issues 53 and 55): a parameter
group added after the build, the announcement of its first compile, and an embedding's padding row
(not counted in the KL, on the plain path and in the engine).

Each works as with ``torch.optim`` (checked against the plain path fed with the engine's noise,
``counter_noise``) or is a one-line error.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.distributions import GaussianPrior, ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.engine import Engine, counter_noise, kernels
from bbb.errors import UserError
from bbb.nn import BayesEmbedding, BayesLinear

MIXTURE = ScaleMixturePrior(0.5, 1.0, math.exp(-2))


class Scaled(nn.Module):
    """A Bayesian MLP whose output a plain parameter ``scale`` (outside the engine's build) scales."""

    def __init__(self, prior=MIXTURE):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(BayesLinear(6, 7, prior=prior, rho_init=-3.0), nn.Tanh(),
                                  BayesLinear(7, 3, prior=prior, rho_init=-3.0))
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.body(x) * self.scale


def _data(n=8, d=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


# -- a parameter group added after the build ----------------------------------------------------

@pytest.mark.parametrize("opt", ["adam", "sgd"])
@pytest.mark.parametrize("fused", [None, False])
def test_a_parameter_group_added_after_the_build_is_trained_as_by_torch_optim(opt, fused):
    x, y = _data()
    results = []
    for engine in (True, False):
        net = Scaled().double()
        elbo = ELBO(net, num_batches=2, kl="mc")
        bayes = list(net.body.parameters())
        if engine:
            o = Engine(net.body, opt, lr=0.05, kl="mc", seed=3, compile=False, fused=fused)
            assert o.fused is (fused is None)
            o.add_param_group({"params": [net.scale], "lr": 0.2})
            assert o.param_groups[-1]["lr"] == 0.2
        else:
            cls = torch.optim.Adam if opt == "adam" else torch.optim.SGD
            o = cls([{"params": bayes}, {"params": [net.scale], "lr": 0.2}], lr=0.05)
        torch.manual_seed(5)  # the plain path's draws (fused=False): the same on both sides
        for i in range(3):
            plain = counter_noise(net.body, 3, i) if fused is None else contextlib.nullcontext()
            with (o.sampling() if engine else plain):
                out = elbo(x, y, batch_index=i % 2)
            o.zero_grad()
            out.loss.backward()
            o.step()
        results.append([p.detach().clone() for p in net.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert float(results[0][0]) != 1.0  # the added parameter (the first of net.parameters()) moved


def test_adding_a_parameter_the_engine_trains_is_an_error_and_an_engine_without_inner_gets_one():
    net = Scaled().double()
    o = Engine(net.body, "adam", lr=0.05, kl="mc", compile=False)
    assert o._inner is None  # nothing outside the fused layers: no torch.optim inside yet
    with pytest.raises(UserError, match="already trained by this engine"):
        o.add_param_group({"params": [net.body[0].weight_mu]})
    with pytest.raises(UserError, match="already trained by this engine"):
        o.add_param_group({"params": [net.scale, net.scale]})
    o.add_param_group({"params": net.scale})
    assert o._inner is not None and len(o.param_groups) == 2
    assert o.param_groups[-1]["lr"] == 0.05
    state = o.state_dict()
    o2 = Engine(Scaled().double().body, "adam", lr=0.05, kl="mc", compile=False)
    with pytest.raises(Exception, match="does not match"):
        o2.load_state_dict(state)  # a state with the added group needs the group added


# -- the first compile of a process is announced -------------------------------------------------

def test_the_first_compile_of_a_process_is_announced_once_with_its_time(monkeypatch, capsys):
    """Compiling the kernels takes seconds (15-33 s for the 2x1200 network on 2 cores): the process's
    first compile says so on stderr, once, and how long it took (torch.compile is stubbed here: the
    real compile is checked in test_engine.py's subprocess)."""
    monkeypatch.setattr(kernels, "_COMPILED", OrderedDict())
    monkeypatch.setattr(kernels, "_COMPILE_NOTICE", [])
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    x, y = _data()
    for opt in ("adam", "sgd", "adam"):  # a second setting compiles too, silently
        net = Scaled().double()
        elbo = ELBO(net.body, num_batches=2, kl="mc")
        o = Engine(net.body, opt, lr=0.05, kl="mc", compile=True)
        assert o.compiled
        for i in range(2):
            with o.sampling():
                out = elbo(x, y, batch_index=i)
            o.zero_grad()
            out.loss.backward()
            o.step()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("bbb.Engine")]
    assert len(lines) == 2, err
    assert "compiling its kernels" in lines[0] and "compile=False" in lines[0]
    assert re.fullmatch(r"bbb\.Engine: kernels compiled in \d+\.\d s", lines[1])
    assert len(kernels._COMPILED) == 3  # one prime (the optimiser does not enter it), a step for adam and for sgd


# -- an embedding's padding row does not count in the KL -------------------------------------------

class Tokens(nn.Module):
    def __init__(self, prior, padding_idx=0):
        super().__init__()
        torch.manual_seed(0)
        self.emb = BayesEmbedding(10, 4, padding_idx=padding_idx, prior=prior, rho_init=-3.0)
        self.head = BayesLinear(4, 3, prior=prior, rho_init=-3.0)

    def forward(self, t):
        return self.head(self.emb(t).mean(1))


def _tokens(n=8, t=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 10, (n, t), generator=g)
    idx[:, -1] = 0  # padding in every sequence
    return idx, torch.randint(0, 3, (n,), generator=g)


@pytest.mark.parametrize("kl", ["auto", "mc"])
def test_the_padding_row_is_not_in_the_plain_kl(kl):
    from bbb.distributions import DiagonalNormal, kl_term

    prior = GaussianPrior(0.7)
    emb = BayesEmbedding(10, 4, padding_idx=3, prior=prior, rho_init=-3.0).double()
    q = emb.posterior("weight")
    keep = [i for i in range(10) if i != 3]
    want = kl_term(DiagonalNormal(q.mu[keep], q.sigma[keep]), prior, "auto")
    assert float(emb.kl("auto").detach()) == pytest.approx(float(want.detach()), rel=1e-12)
    # Monte Carlo on the forward's samples: the padding row's weights change nothing, and get no gradient
    net = Tokens(prior, padding_idx=3).double()
    x, y = _tokens()
    elbo = ELBO(net, num_batches=1, kl=kl)
    with counter_noise(net, 0, 0):
        a = elbo(x, y)
    with torch.no_grad():
        net.emb.weight_mu[3].add_(0.5)
        net.emb.weight_rho[3].add_(-1.0)
    with counter_noise(net, 0, 0):
        b = elbo(x, y)
    assert float(a.kl) == pytest.approx(float(b.kl), rel=1e-12)
    b.loss.backward()
    assert float(net.emb.weight_mu.grad[3].abs().max()) == 0.0
    assert float(net.emb.weight_rho.grad[3].abs().max()) == 0.0
    assert float(net.emb.weight_rho.grad.abs().sum()) > 0


@pytest.mark.parametrize("prior,kl", [(MIXTURE, "mc"), (GaussianPrior(0.7), "auto"), (MIXTURE, "split")])
@pytest.mark.parametrize("k", [1, 2])
def test_the_engine_leaves_the_padding_row_out_of_the_kl_as_the_plain_path(prior, kl, k):
    x, y = _tokens()
    results = []
    for engine in (True, False):
        net = Tokens(prior).double()
        elbo = ELBO(net, num_batches=2, num_samples=k, kl=kl)
        if engine:
            o = Engine(elbo, "adam", lr=0.05, seed=3, compile=False)
            assert o.fused and o._kl_mask is not None
        else:
            o = torch.optim.Adam(net.parameters(), lr=0.05)
        kls = []
        for i in range(3):
            with (o.sampling() if engine else counter_noise(net, 3, i, None if k == 1 else k,
                                                              kl_rows=1 if kl == "split" else 0)):
                out = elbo(x, y, batch_index=i % 2)
            o.zero_grad()
            (out.loss / len(x)).backward()
            if engine:
                n = float(o.clip_grad_norm_(1e9))  # the norm sees the masked KL gradient too
            else:
                n = float(torch.nn.utils.clip_grad_norm_(net.parameters(), 1e9))
            o.step()
            kls.append((float(out.kl.detach()), n))
        results.append(([p.detach().clone() for p in net.parameters()], kls))
        rho0 = Tokens(prior).double().emb.weight_rho[0]
        assert torch.equal(net.emb.weight_rho[0], rho0)  # no gradient reached the padding row
    (a, ka), (b, kb) = results
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    for (u, nu), (v, nv) in zip(ka, kb):
        assert u == pytest.approx(v, rel=1e-10) and nu == pytest.approx(nv, rel=1e-10)


class TiedTokens(nn.Module):
    """An embedding with a padding row whose table a tied output layer reads (BERT's masked-LM head)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 4, padding_idx=0)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.tanh(self.emb(x))).mean(1)


@pytest.mark.parametrize("engine", [False, True])
def test_a_padding_row_that_a_tied_head_reads_counts_in_the_kl(engine):
    # the head's logit for the padding token meets the data, so the row's posterior is trained by them:
    # it was left out of the KL all the same (its sigma free of the prior), on both paths
    from bbb.distributions import kl_term

    prior = GaussianPrior(0.7)
    net = bbb.bayesianize(TiedTokens().double(), prior=prior, rho_init=-3.0)
    want = float(kl_term(net.emb.posterior("weight"), prior, "auto").detach())  # every row of the table
    assert float(bbb.nn.model_kl(net).detach()) == pytest.approx(want, rel=1e-12)
    x, y = _tokens()
    elbo = ELBO(net, num_batches=1)
    o = Engine(elbo, "adam", lr=0.05, seed=3, compile=False) if engine else torch.optim.Adam(net.parameters(), lr=0.05)
    with (o.sampling() if engine else counter_noise(net, 3, 0)):
        out = elbo(x, y)
    assert float(out.kl.detach()) == pytest.approx(want, rel=1e-12)
    assert not engine or (o.fused and o._kl_mask is None)  # (no per-weight mask leaves the row out)


# -- torch's clipping idiom under the engine ---------------------------------------------------------

def _mlp(prior, deterministic=True):
    torch.manual_seed(0)
    layers = [BayesLinear(6, 7, prior=prior, rho_init=-3.0), nn.Tanh(), BayesLinear(7, 3, prior=prior, rho_init=-3.0)]
    return nn.Sequential(*([nn.Linear(6, 6), nn.Tanh()] if deterministic else []), *layers).double()


@pytest.mark.parametrize("prior,kl,opt,k,norm_type", [
    (MIXTURE, "mc", "adam", 1, 2.0),
    (GaussianPrior(0.7), "auto", "sgd", 2, 2.0),
    (MIXTURE, "mc", "sgd", 1, math.inf),
    (MIXTURE, "split", "adam", 1, 2.0),
])
def test_torch_clip_grad_norm_under_the_engine_clips_the_real_gradient(prior, kl, opt, k, norm_type):
    """torch.nn.utils.clip_grad_norm_(model.parameters()) under the engine: the fused mu's and rho's
    .grad are the engine's gradient (KL included), so the norm and the clipped step are the plain
    path's, and engine.clip_grad_norm_ measures the same norm."""
    x, y = _data()
    results = []
    for engine in (True, False):
        net = _mlp(prior)
        elbo = ELBO(net, num_batches=2, num_samples=k, kl=kl)
        if engine:
            o = Engine(elbo, opt, lr=0.05, seed=3, compile=False)
            assert o.fused
        else:
            o = (torch.optim.Adam if opt == "adam" else torch.optim.SGD)(net.parameters(), lr=0.05)
        norms = []
        for i in range(3):
            rows = 1 if kl == "split" else 0
            with (o.sampling() if engine else counter_noise(net, 3, i, None if k == 1 else k, kl_rows=rows)):
                out = elbo(x, y, batch_index=i % 2)
            o.zero_grad()
            if engine:
                assert net[2].weight_mu.grad is None  # no backward yet: no gradient, as after zero_grad
            (out.loss / len(x)).backward()
            if engine and i == 0:
                assert float(o.clip_grad_norm_(1e9, norm_type)) == pytest.approx(
                    float(torch.nn.utils.clip_grad_norm_(net.parameters(), 1e9, norm_type)), rel=1e-10)
            norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), 0.3, norm_type)))
            o.step()
            if engine:
                assert net[2].weight_mu.grad is None  # the step used it
        results.append(([p.detach().clone() for p in net.parameters()], norms))
    (a, na), (b, nb) = results
    assert na == pytest.approx(nb, rel=1e-10)
    assert min(na) > 0.3  # it clipped
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)


def test_fused_grad_edits_in_place_are_applied_and_assignment_or_ddp_is_an_error():
    x, y = _data()
    results = []
    for engine in (True, False):
        net = _mlp(MIXTURE, deterministic=False)
        elbo = ELBO(net, num_batches=1, kl="mc")
        o = Engine(elbo, "sgd", lr=0.05, seed=3, compile=False) if engine else torch.optim.SGD(net.parameters(), 0.05)
        with (o.sampling() if engine else counter_noise(net, 3, 0)):
            out = elbo(x, y)
        o.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_value_(net.parameters(), 0.01)
        if engine:
            with pytest.raises(UserError, match="edit it in place"):
                net[0].weight_mu.grad = torch.zeros_like(net[0].weight_mu)
            o._ddp = object()  # as under DistributedDataParallel: the gradient is not averaged yet
            with pytest.raises(UserError, match="engine.clip_grad_norm_"):
                net[0].weight_rho.grad  # noqa: B018
            o._ddp = None
        o.step()
        results.append([p.detach().clone() for p in net.parameters()])
    for u, v in zip(*results):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    net.zero_grad()  # model.zero_grad() and the state dict as with any parameter
    assert type(net.state_dict()["0.weight_mu"]) is torch.Tensor


def test_zero_grad_discards_a_skipped_backward_as_torch_optim_does():
    """forward, backward, no step (a skipped batch), zero_grad, then forward, backward, step: the
    step of the second batch alone, as with torch.optim (the fused buffers used to keep the skipped
    backward's gradient and the KL's coefficient)."""
    def run(skip: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        net = nn.Sequential(BayesLinear(4, 16, prior=MIXTURE), nn.ReLU(), BayesLinear(16, 3, prior=MIXTURE))
        elbo = ELBO(net, "categorical", num_batches=4)
        engine = Engine(net, "adam", lr=1e-2, seed=0, compile=False)
        assert engine.fused
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
            if skip:  # the same sample (the engine draws in its step), another batch
                with engine.sampling():
                    out = elbo(torch.randn(16, 4) * 3, torch.zeros(16, dtype=torch.long), batch_index=0)
                engine.zero_grad()
                out.loss.backward()
            with engine.sampling():
                out = elbo(x, y, batch_index=0)
            engine.zero_grad()
            out.loss.backward()
            engine.step()
        return [t.clone() for t in net.state_dict().values()]

    for a, b in zip(run(False), run(True)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _one_step(net, eng):
    with eng.sampling():
        out = net(torch.randn(4, 3))
    eng.zero_grad()
    out.pow(2).mean().backward()
    eng.step()


@pytest.mark.release_independent
@pytest.mark.parametrize("opt,built,edit", [
    ("sgd", {}, {"momentum": 0.9}),                          # no momentum buffer: the kernel stepped without it
    ("sgd", {"momentum": 0.9}, {"nesterov": True}),          # nesterov is built into the kernel
    ("sgd", {}, "onecycle"),                                 # OneCycleLR cycles the (unused) betas of SGD
    ("adam", {}, {"momentum": 0.5}),
    ("adam", {}, {"weight_decay": 1e-4}),                    # a torch.optim option the kernel does not have
    ("sgd", {"momentum": 0.9}, {"maximize": True}),
])
def test_a_param_group_option_the_fused_kernel_cannot_follow_is_a_one_line_error(opt, built, edit):
    net = BayesLinear(3, 2)
    eng = Engine(net, opt, lr=0.01, kl="mc", compile=False, fused=True, **built)
    _one_step(net, eng)
    if edit == "onecycle":
        torch.optim.lr_scheduler.OneCycleLR(eng, max_lr=0.01, total_steps=10)
    else:
        eng.param_groups[0].update(edit)
    with pytest.raises(UserError, match=r"^bbb.Engine.step: param_groups\[0\] was changed") as excinfo:
        _one_step(net, eng)
    assert "\n" not in str(excinfo.value)



@pytest.mark.release_independent
@pytest.mark.parametrize("fused", [True, False])
def test_a_scheduler_still_reaches_the_inner_optimiser_after_load_state_dict(fused):
    """torch's load_state_dict gives the inner optimiser new group dicts: the engine's param_groups
    (what a scheduler edits) must still be the ones it steps with."""
    x, y = torch.randn(8, 6), torch.randn(8, 3)

    def run(net, eng, sched, steps):
        for _ in range(steps):
            with eng.sampling():
                out = net(x)
            eng.zero_grad()
            F.mse_loss(out, y).backward()
            eng.step()
            sched.step()

    def build():
        net = Scaled()
        eng = Engine(net, "sgd", lr=0.05, momentum=0.9, kl="mc", seed=3, compile=False, fused=fused)
        return net, eng, torch.optim.lr_scheduler.StepLR(eng, 2, 0.5)

    net, eng, sched = build()
    run(net, eng, sched, 3)
    buf = io.BytesIO()
    torch.save({"m": net.state_dict(), "o": eng.state_dict(), "s": sched.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    run(net, eng, sched, 3)
    net2, eng2, sched2 = build()
    net2.load_state_dict(saved["m"])
    eng2.load_state_dict(saved["o"])
    sched2.load_state_dict(saved["s"])
    run(net2, eng2, sched2, 3)
    assert all(any(g is h for h in eng2.param_groups) for g in eng2._inner.param_groups)
    assert [g["lr"] for g in eng2._inner.param_groups] == [g["lr"] for g in eng._inner.param_groups]
    if fused:  # (the plain path draws from torch's generator, which this test does not restore)
        for p, q in zip(net.parameters(), net2.parameters()):
            assert torch.equal(p, q)


@pytest.mark.release_independent
@pytest.mark.parametrize("fused", [True, False])
def test_one_cycle_lr_cycles_an_sgd_engines_momentum(fused):
    """OneCycleLR reads the optimiser's defaults: an SGD engine's hold momentum (not Adam's betas,
    which it cycled before, unread, or on the plain path a KeyError)."""
    net = BayesLinear(3, 2)
    eng = Engine(net, "sgd", lr=0.01, momentum=0.9, kl="mc", compile=False, fused=fused)
    sched = torch.optim.lr_scheduler.OneCycleLR(eng, max_lr=0.01, total_steps=10)
    seen = []
    for _ in range(6):
        _one_step(net, eng)
        sched.step()
        seen.append(eng.param_groups[0]["momentum"])
    assert "betas" not in eng.param_groups[0] and len(set(seen)) == len(seen)


@pytest.mark.release_independent
def test_a_params_group_with_options_of_its_own_for_a_fused_weight_is_a_one_line_error():
    net = BayesLinear(3, 2)
    with pytest.raises(UserError, match=r"^bbb.Engine: a params= group with its own lr holds a fused") as excinfo:
        Engine(net, "adam", lr=0.05, kl="mc", compile=False, params=[{"params": [net.weight_mu], "lr": 1.0}])
    assert "\n" not in str(excinfo.value)
    Engine(net, "adam", lr=0.05, kl="mc", compile=False, params=net.parameters())  # no options: trained fused
    plain = Engine(net, "adam", lr=0.05, kl="mc", compile=False, fused=False,
                   params=[{"params": [net.weight_mu], "lr": 1.0}])
    assert any(g["lr"] == 1.0 and any(p is net.weight_mu for p in g["params"]) for g in plain.param_groups)


def _seeded_run(torch_seed, engine_seed=None, steps=3, state=None, start=0):
    """Three steps of an engine built right after ``torch.manual_seed(torch_seed)`` (``state``: the
    network's and the engine's state dicts loaded first); the parameters, the engine."""
    torch.manual_seed(torch_seed)
    net = nn.Sequential(BayesLinear(6, 7, prior=MIXTURE, rho_init=-3.0), nn.Tanh(),
                        BayesLinear(7, 3, prior=MIXTURE, rho_init=-3.0))
    eng = Engine(net, "adam", lr=0.05, kl="mc", seed=engine_seed, compile=False)
    if state is not None:
        net.load_state_dict(state[0])
        eng.load_state_dict(state[1])
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    elbo = ELBO(net, "categorical", num_batches=4, kl="mc")
    for i in range(steps):
        with eng.sampling():
            out = elbo(x, y, batch_index=(start + i) % 4)
        eng.zero_grad()
        (out.loss / 8).backward()
        eng.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]), eng, net


def test_torch_manual_seed_decides_the_noise_of_an_engine_built_without_a_seed():
    """The fused kernel's noise was seed 0's for every engine built without a seed: replicates that
    differed by torch.manual_seed differed in their initialisation but shared one noise stream. The
    seed is now drawn from torch's generator (as the plain path's noise and IVON's are)."""
    a, eng_a, _ = _seeded_run(0)
    b, eng_b, _ = _seeded_run(0)
    assert eng_a.fused and not eng_a.seed_given and eng_a.seed == eng_b.seed and torch.equal(a, b)
    # one initialisation, engines built after two torch seeds: two noise streams
    samples = []
    for torch_seed in (0, 1):
        torch.manual_seed(0)
        net = BayesLinear(6, 7, prior=MIXTURE, rho_init=-3.0)
        torch.manual_seed(torch_seed)
        eng = Engine(net, "adam", kl="mc", compile=False)
        with eng.sampling():
            samples.append((eng.seed, net(torch.ones(1, 6)).detach()))
    assert samples[0][0] != samples[1][0] and not torch.equal(samples[0][1], samples[1][1])
    given, eng_c, _ = _seeded_run(0, engine_seed=7)
    assert eng_c.seed == 7 and eng_c.seed_given and not torch.equal(given, a)


def test_the_fallback_says_that_a_given_seed_does_not_decide_the_plain_paths_noise():
    # flipout falls back to the plain path, whose noise is torch's generator: seed=5 and seed=6 gave
    # the same numbers there, and the fallback's warning did not say that the seed did nothing
    net = bbb.bayesianize(nn.Sequential(nn.Linear(4, 3)), estimator="flipout")
    with pytest.warns(UserWarning, match=r"plain autograd path.*torch's default generator \(torch\.manual_seed\), "
                                         r"not seed=5") as said:
        Engine(net, "adam", seed=5)
    assert len(said) == 1
    with pytest.warns(UserWarning, match="plain autograd path") as said:
        drawn = Engine(net, "adam")
    assert "seed" not in str(said[0].message)
    given = Engine(net, "adam", fused=False, seed=3)  # a seed that does nothing there refuses no checkpoint
    given.load_state_dict(drawn.state_dict())
    assert given.seed == drawn.seed


def test_a_drawn_seed_gives_way_to_the_checkpoints_and_a_given_one_is_checked():
    full, _, _ = _seeded_run(0, steps=6)
    _, eng, net = _seeded_run(0, steps=3)
    state = (net.state_dict(), eng.state_dict())
    resumed, eng2, _ = _seeded_run(5, steps=3, state=state, start=3)  # another torch seed: the saved noise continues
    assert eng2.seed == eng.seed and torch.equal(resumed, full)
    resumed, _, _ = _seeded_run(5, engine_seed=eng.seed, steps=3, state=state, start=3)
    assert torch.equal(resumed, full)
    with pytest.raises(bbb.errors.CheckpointError, match=rf"seed {eng.seed} saved, {eng.seed + 1} here") as e:
        _seeded_run(5, engine_seed=eng.seed + 1, steps=0, state=state)
    assert "\n" not in str(e.value)
