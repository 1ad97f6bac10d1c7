"""The fused engine equals the plain autograd path fed with the same noise.

The plain path (``bbb.engine.counter_noise`` + ``torch.optim``) is the specification: w = mu +
softplus(rho) * eps with autograd, the KL by ``kl_term``, torch's own Adam/SGD. The engine must
give the same parameters after one step (float64: to rounding) and stay with it over 50 steps
(float32), for every combination it fuses; the rest must take the plain path by itself.
"""

from __future__ import annotations

import logging
import math
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

from bbb.distributions import GaussianPrior, Prior, ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.engine import Engine, counter_noise
from bbb.errors import CheckpointError, UserError
from bbb.nn import BayesConv2d, BayesLinear, BayesMLP
from bbb.prune import prune

MIXTURE = ScaleMixturePrior(0.25, 1.0, math.exp(-7))
CASES = [  # (prior, kl)
    pytest.param(MIXTURE, "mc", id="mixture-mc"),
    pytest.param(GaussianPrior(0.7, mu=0.05), "auto", id="gauss-closed"),
    pytest.param(GaussianPrior(1.0), "mc", id="gauss-mc"),
]
OPTS = [pytest.param("adam", 0.0, id="adam"), pytest.param("sgd", 0.0, id="sgd"),
        pytest.param("sgd", 0.9, id="sgd-momentum")]


def _net(prior, dtype, bias=True, seed=0):
    torch.manual_seed(seed)
    return BayesMLP(6, [7, 5], 3, prior=prior, rho_init=-3.0, bias=bias).to(dtype)


def _data(dtype, n=8):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 6, generator=g, dtype=dtype), torch.randint(0, 3, (n,), generator=g)


def _groups(net, lr, rho_scale):
    """torch.optim's parameter groups for rho's learning rate lr * rho_scale (the specification)."""
    named = list(net.named_parameters())
    return [{"params": [p for n, p in named if not n.endswith("_rho")]},
            {"params": [p for n, p in named if n.endswith("_rho")], "lr": lr * rho_scale}]


def _train(net, kl, opt, momentum, k, steps, engine, lr=0.05, seed=3, sched=False, rho_scale=1.0, kl_samples=None):
    x, y = _data(next(net.parameters()).dtype)
    elbo = ELBO(net, "categorical", num_batches=4, kl_weighting="blundell", num_samples=k, kl=kl,
                kl_samples=kl_samples)
    kls = []
    if engine:
        o = Engine(net, opt, lr=lr, momentum=momentum, kl=kl, num_samples=k, seed=seed, compile=False,
                   rho_lr_scale=rho_scale, kl_samples=kl_samples)
        assert o.fused, o.fallback_reason
    elif opt == "adam":
        o = torch.optim.Adam(_groups(net, lr, rho_scale), lr=lr)
    else:
        o = torch.optim.SGD(_groups(net, lr, rho_scale), lr=lr, momentum=momentum)
    s = torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5) if sched else None
    for i in range(steps):
        if engine:
            ctx = o.sampling()
        else:
            rows = 1 if kl == "split" else 0 if kl_samples is None else kl_samples - k
            ctx = counter_noise(net, seed, i, None if k == 1 else k, kl_rows=rows)
        with ctx:
            out = elbo(x, y, batch_index=i % 4)
        o.zero_grad()
        (out.loss / len(x)).backward()
        o.step()
        if s is not None:
            s.step()
        kls.append(float(out.kl.detach()))
    return [p.detach().clone() for p in net.parameters()], kls


@pytest.mark.parametrize("prior,kl", CASES)
@pytest.mark.parametrize("opt,momentum", OPTS)
@pytest.mark.parametrize("k", [1, 3])
def test_one_step_equals_the_plain_path(prior, kl, opt, momentum, k):
    a, kla = _train(_net(prior, torch.float64), kl, opt, momentum, k, 2, engine=True)
    b, klb = _train(_net(prior, torch.float64), kl, opt, momentum, k, 2, engine=False)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    assert kla == pytest.approx(klb, rel=1e-12)


@pytest.mark.parametrize("prior,kl", [CASES[0], CASES[2]])
@pytest.mark.parametrize("opt,momentum", OPTS[:2])
@pytest.mark.parametrize("k,kl_samples", [(1, 4), (2, 5)])
def test_kl_samples_of_their_own_equal_the_plain_path(prior, kl, opt, momentum, k, kl_samples):
    """K > k KL samples: the engine's kernel and the plain path (kl_term averaging the k
    likelihood samples and the K - k of the KL's own, the same counter noise) agree, and the
    extra samples change the trajectory."""
    a, kla = _train(_net(prior, torch.float64), kl, opt, momentum, k, 3, engine=True, kl_samples=kl_samples)
    b, klb = _train(_net(prior, torch.float64), kl, opt, momentum, k, 3, engine=False, kl_samples=kl_samples)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    assert kla == pytest.approx(klb, rel=1e-12)
    c, klc = _train(_net(prior, torch.float64), kl, opt, momentum, k, 3, engine=True)
    assert kla[0] != pytest.approx(klc[0], rel=1e-6)
    assert any(not torch.allclose(u, v) for u, v in zip(a, c))


@pytest.mark.parametrize("opt,momentum", OPTS)
@pytest.mark.parametrize("k", [1, 2])
def test_split_kl_equals_the_plain_path(opt, momentum, k):
    """kl="split": the kernel's split estimate (its importance sample from the row after the k)
    and the plain path's (Prior.kl_split through autograd, the same counter noise) agree."""
    a, kla = _train(_net(MIXTURE, torch.float64), "split", opt, momentum, k, 3, engine=True)
    b, klb = _train(_net(MIXTURE, torch.float64), "split", opt, momentum, k, 3, engine=False)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    assert kla == pytest.approx(klb, rel=1e-12)


def test_split_kl_of_a_gaussian_prior_is_its_closed_form():
    a, kla = _train(_net(GaussianPrior(0.7), torch.float64), "split", "sgd", 0.0, 1, 3, engine=True)
    b, klb = _train(_net(GaussianPrior(0.7), torch.float64), "closed", "sgd", 0.0, 1, 3, engine=True)
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    assert kla == klb


def test_kl_samples_the_same_as_the_likelihoods_change_nothing():
    """kl_samples = k is the paper's estimator (common random numbers), bit for bit."""
    a, kla = _train(_net(MIXTURE, torch.float64), "mc", "sgd", 0.0, 2, 3, engine=True, kl_samples=2)
    b, klb = _train(_net(MIXTURE, torch.float64), "mc", "sgd", 0.0, 2, 3, engine=True)
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    assert kla == klb


#: a mixture whose narrow component is wide enough for a 50-step float32 comparison: with
#: sigma2 = e^-7 the spike's gradient (~1e6 w) makes these tiny runs chaotic, so that float32 and
#: float64 runs of the *plain* path already part by O(1) within 10 steps
MILD = ScaleMixturePrior(0.5, 1.0, math.exp(-2))


@pytest.mark.parametrize("prior,kl", [pytest.param(MILD, "mc", id="mixture-mc"), *CASES[1:]])
@pytest.mark.parametrize("opt,momentum", OPTS)
def test_fifty_step_float32_trajectory_stays_with_the_plain_path(prior, kl, opt, momentum):
    """Stated tolerance: every parameter within 1e-4 relative + 2e-5 absolute after 50 steps."""
    lr = 0.01 if opt == "adam" else 0.05
    a, kla = _train(_net(prior, torch.float32), kl, opt, momentum, 1, 50, engine=True, lr=lr)
    b, klb = _train(_net(prior, torch.float32), kl, opt, momentum, 1, 50, engine=False, lr=lr)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-4, atol=2e-5)
    assert kla[-1] == pytest.approx(klb[-1], rel=1e-4)


@pytest.mark.parametrize("opt,momentum", OPTS)
@pytest.mark.parametrize("kl", ["mc", "auto"])
def test_rho_lr_scale_equals_a_parameter_group_for_rho(opt, momentum, kl):
    """rho steps at lr * rho_lr_scale, mu at lr, through a learning-rate schedule; and it matters."""
    prior = MIXTURE if kl == "mc" else GaussianPrior(0.7)
    a, kla = _train(_net(prior, torch.float64), kl, opt, momentum, 2, 3, engine=True, sched=True, rho_scale=30.0)
    b, klb = _train(_net(prior, torch.float64), kl, opt, momentum, 2, 3, engine=False, sched=True, rho_scale=30.0)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-11, atol=1e-12)
    assert kla == pytest.approx(klb, rel=1e-11)
    c, _ = _train(_net(prior, torch.float64), kl, opt, momentum, 2, 3, engine=True, sched=True)
    names = [n for n, _ in _net(prior, torch.float64).named_parameters()]
    for n, u, v in zip(names, a, c):  # the scale changes the trajectory of every rho
        if n.endswith("_rho"):
            assert not torch.allclose(u, v)


def test_rho_lr_scale_on_the_plain_path_and_in_the_state_dict():
    """Where the kernel does not apply, rho gets a torch.optim group of its own; the scale is saved."""
    def run(engine, steps=3):
        torch.manual_seed(0)
        net = BayesMLP(6, [7], 3, prior=MIXTURE, rho_init=-3.0, estimator="local").double()
        x, y = _data(torch.float64)
        elbo = ELBO(net, num_batches=4, kl="mc")
        o = (Engine(net, "sgd", lr=0.05, kl="mc", seed=3, rho_lr_scale=10.0, compile=False) if engine
             else torch.optim.SGD(_groups(net, 0.05, 10.0), lr=0.05))
        if engine:
            assert not o.fused
        for i in range(steps):
            torch.manual_seed(100 + i)
            out = elbo(x, y, batch_index=i % 4)
            o.zero_grad()
            (out.loss / len(x)).backward()
            o.step()
        return [p.detach().clone() for p in net.parameters()], o

    (a, _), (b, _) = run(True), run(False)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    fused = Engine(_net(MIXTURE, torch.float32), "sgd", kl="mc", rho_lr_scale=7.0, compile=False)
    assert fused.state_dict()["groups"][0]["rho_lr_scale"] == 7.0
    old = fused.state_dict()
    del old["groups"][0]["rho_lr_scale"]  # a state saved before the option existed
    again = Engine(_net(MIXTURE, torch.float32), "sgd", kl="mc", compile=False)
    again.load_state_dict(old)
    assert again.param_groups[0]["rho_lr_scale"] == 1.0
    with pytest.raises(UserError, match="rho_lr_scale"):
        Engine(_net(MIXTURE, torch.float32), "sgd", kl="mc", rho_lr_scale=0.0)


def test_no_bias_pruned_model_and_lr_schedule_equal_the_plain_path():
    nets = []
    for engine in (True, False):
        net = _net(MIXTURE, torch.float64, bias=False)
        prune(net, 0.5)
        nets.append(_train(net, "mc", "adam", 0.0, 1, 6, engine=engine, sched=True))
    for u, v in zip(nets[0][0], nets[1][0]):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


def test_conv_layers_are_fused_and_equal_the_plain_path():
    def run(engine):
        torch.manual_seed(0)
        net = nn.Sequential(BayesConv2d(1, 3, 3, prior=MIXTURE), nn.ReLU(), nn.Flatten(),
                            BayesLinear(3 * 4 * 4, 2, prior=MIXTURE)).double()
        x = torch.randn(4, 1, 6, 6, dtype=torch.float64)
        y = torch.tensor([0, 1, 1, 0])
        elbo = ELBO(net, num_batches=2, kl="mc")
        o = Engine(net, "adam", lr=0.05, kl="mc", seed=1, compile=False) if engine else \
            torch.optim.Adam(net.parameters(), lr=0.05)
        for i in range(3):
            with (o.sampling() if engine else counter_noise(net, 1, i)):
                out = elbo(x, y, batch_index=i % 2)
            o.zero_grad()
            out.loss.backward()
            o.step()
        if engine:
            assert o.fused
        return [p.detach() for p in net.parameters()]
    for u, v in zip(run(True), run(False)):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


def test_state_dict_keys_unchanged_and_noise_free():
    net = _net(MIXTURE, torch.float32)
    keys = list(net.state_dict())
    Engine(net, "adam", kl="mc")
    assert list(net.state_dict()) == keys
    assert all(k.endswith(("_mu", "_rho")) for k in keys)


def test_resume_from_state_dicts_continues_exactly():
    full, _ = _train(_net(MIXTURE, torch.float32), "mc", "adam", 0.0, 1, 6, engine=True)
    net = _net(MIXTURE, torch.float32)
    x, y = _data(torch.float32)
    elbo = ELBO(net, num_batches=4, kl_weighting="blundell", kl="mc")
    eng = Engine(net, "adam", lr=0.05, kl="mc", seed=3, compile=False)

    def steps(e, n, start):
        for i in range(start, start + n):
            with e.sampling():
                out = elbo(x, y, batch_index=i % 4)
            e.zero_grad()
            (out.loss / len(x)).backward()
            e.step()

    steps(eng, 3, 0)
    model_state, engine_state = net.state_dict(), eng.state_dict()
    net2 = _net(MIXTURE, torch.float32, seed=5)  # other initial values: overwritten below
    elbo = ELBO(net2, num_batches=4, kl_weighting="blundell", kl="mc")
    eng2 = Engine(net2, "adam", lr=0.05, kl="mc", seed=3, compile=False)
    net2.load_state_dict(model_state)
    eng2.load_state_dict(engine_state)
    steps(eng2, 3, 3)
    for u, v in zip(full, net2.parameters()):
        assert torch.equal(u, v.detach())


def test_loading_weights_from_outside_resamples():
    net = _net(MIXTURE, torch.float32)
    eng = Engine(net, "adam", kl="mc", compile=False)
    before = eng.kl.clone()
    with torch.no_grad():
        net.layers[0].weight_mu.add_(1.0)
    with eng.sampling():
        pass
    assert not torch.equal(before, eng.kl)


def test_mismatched_state_is_a_checkpoint_error():
    eng = Engine(_net(MIXTURE, torch.float32), "adam", kl="mc", compile=False)
    with pytest.raises(CheckpointError):
        eng.load_state_dict({"state": {}, "param_groups": []})  # a torch.optim state
    other = Engine(_net(MIXTURE, torch.float32), "sgd", kl="mc", compile=False).state_dict()
    with pytest.raises(CheckpointError):
        eng.load_state_dict(other)


def test_a_state_saved_for_other_shapes_is_a_checkpoint_error_naming_the_parameter():
    # the fused moments of another model: of another size a raw RuntimeError from copy_ (after the
    # groups had taken the saved values), of the same size (the same weights, other shapes) loaded silently
    import bbb

    def engine(sizes, lr):
        torch.manual_seed(0)
        net = bbb.bayesianize(nn.Sequential(*(nn.Linear(a, b, bias=False) for a, b in zip(sizes, sizes[1:]))))
        return Engine(net, "adam", lr=lr, seed=0, compile=False)

    saved = engine((2, 3, 2), 0.1).state_dict()
    for sizes in ((2, 2, 4), (2, 4, 2)):  # 12 weights as saved, other shapes; 16 weights
        eng = engine(sizes, 0.5)
        said = r"another model: 0\.weight_mu has shape \(\d, 2\) here, \(3, 2\) saved"
        with pytest.raises(CheckpointError, match=said):
            eng.load_state_dict(saved)
        assert eng.param_groups[0]["lr"] == 0.5  # nothing loaded
    same = engine((2, 3, 2), 0.5)
    same.load_state_dict(saved)
    assert same.param_groups[0]["lr"] == 0.1


class _Laplace(Prior):
    name = "laplace"

    def log_prob(self, w):
        return -w.abs() - math.log(2.0)

    def to_config(self):
        return {"type": self.name}


@pytest.mark.parametrize("what", ["flipout", "local", "custom-prior"])
def test_what_is_not_fused_takes_the_plain_path_with_the_same_results(what, caplog):
    def build():
        torch.manual_seed(0)
        if what == "custom-prior":
            return BayesMLP(6, [5], 3, prior=_Laplace())
        return BayesMLP(6, [5], 3, estimator=what, prior=GaussianPrior(1.0))
    x, y = _data(torch.float32)
    results = []
    for engine in (True, False):
        net = build()
        elbo = ELBO(net, num_batches=1)
        if engine:
            with caplog.at_level(logging.DEBUG, logger="bbb.engine"):
                o = Engine(net, "adam", lr=0.01)
            assert not o.fused and o.fallback_reason
            assert any("plain path" in r.message for r in caplog.records)
        else:
            o = torch.optim.Adam(net.parameters(), lr=0.01)
        torch.manual_seed(1)
        for _ in range(3):
            with (o.sampling() if engine else torch.enable_grad()):
                out = elbo(x, y)
            o.zero_grad()
            out.loss.backward()
            o.step()
        results.append([p.detach().clone() for p in net.parameters()])
    for u, v in zip(*results):
        assert torch.equal(u, v)


def test_deterministic_parameters_beside_bayesian_layers_are_updated():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), BayesLinear(5, 3, prior=MIXTURE))
    eng = Engine(net, "sgd", lr=0.1, kl="mc", compile=False)
    assert eng.fused and len(eng.param_groups) == 2
    w0 = net[0].weight.detach().clone()
    mu0 = net[2].weight_mu.detach().clone()
    x, y = _data(torch.float32)
    elbo = ELBO(net, kl="mc")
    with eng.sampling():
        out = elbo(x, y)
    eng.zero_grad()
    out.loss.backward()
    eng.step()
    assert not torch.equal(w0, net[0].weight) and not torch.equal(mu0, net[2].weight_mu)
    sched = torch.optim.lr_scheduler.StepLR(eng, 1, gamma=0.5)
    eng.step()
    sched.step()
    assert [g["lr"] for g in eng.param_groups] == [0.05, 0.05]


def test_mismatched_samples_or_kl_mode_are_user_errors():
    net = _net(MIXTURE, torch.float32)
    x, y = _data(torch.float32)
    eng = Engine(net, "adam", kl="mc", num_samples=2, compile=False)
    with pytest.raises(UserError, match="num_samples"), eng.sampling():
        ELBO(net, num_samples=1, kl="mc")(x, y)
    net = _net(GaussianPrior(1.0), torch.float32)
    eng = Engine(net, "adam", kl="closed", compile=False)
    with pytest.raises(UserError, match="kl="), eng.sampling():
        ELBO(net, kl="mc")(x, y)
    net = _net(MIXTURE, torch.float32)
    eng = Engine(net, "sgd", kl="mc", kl_samples=4, compile=False)
    with pytest.raises(UserError, match="kl_samples"), eng.sampling():
        ELBO(net, kl="mc")(x, y)
    for bad in (0, 1.5, True):
        with pytest.raises(UserError, match="kl_samples"):
            Engine(net, "sgd", kl="mc", kl_samples=bad)
    with pytest.raises(UserError, match="at least"):
        Engine(net, "sgd", kl="mc", num_samples=3, kl_samples=2)
    with pytest.raises(UserError):
        Engine(net, "rmsprop")
    for bad in ({"lr": float("nan")}, {"lr": float("inf")}, {"betas": (0.9, 1.0)},
                {"betas": (float("nan"), 0.9)}, {"eps": 0.0}, {"momentum": 1.0}, {"seed": -1},
                {"num_samples": 0}):
        with pytest.raises(UserError):
            Engine(net, "adam", **bad)


def test_an_engine_built_from_the_elbo_takes_its_settings():
    """The ELBO owns num_samples, kl and kl_samples: Engine(elbo) takes them, so the two cannot
    disagree; a different value given to the engine too is a one-line error when it is built."""
    net = _net(MIXTURE, torch.float32)
    x, y = _data(torch.float32)
    elbo = ELBO(net, num_batches=2, num_samples=2, kl="mc", kl_samples=3)
    eng = Engine(elbo, "adam", compile=False)
    assert (eng.k, eng.kl_mode.value, eng.kl_samples) == (2, "mc", 3) and eng.fused
    with eng.sampling():
        out = elbo(x, y)
    eng.zero_grad()
    out.loss.backward()
    eng.step()
    assert Engine(elbo, num_samples=2, kl="mc", kl_samples=3, compile=False).k == 2  # the same values: fine
    for bad, words in (({"num_samples": 1}, "num_samples=1) but the ELBO has num_samples=2"),
                       ({"kl": "closed"}, "kl='closed') but the ELBO has kl='mc'"),
                       ({"kl_samples": 4}, "kl_samples=4) but the ELBO has kl_samples=3")):
        with pytest.raises(UserError, match=re.escape(words)) as e:
            Engine(elbo, "adam", compile=False, **bad)
        assert "\n" not in str(e.value) and "leave" in str(e.value)
    plain = ELBO(net)
    assert (Engine(plain, compile=False).k, Engine(plain, compile=False).kl_mode.value) == (1, "auto")
    with pytest.raises(UserError, match="kl_samples=2\\) but the ELBO has kl_samples=None"):
        Engine(plain, kl_samples=2, compile=False)
    # built from the network, the engine keeps its own arguments (defaults: 1 sample, kl auto)
    eng = Engine(net, "adam", num_samples=3, kl="mc", kl_samples=4, compile=False)
    assert (eng.k, eng.kl_mode.value, eng.kl_samples) == (3, "mc", 4)
    eng = Engine(net, compile=False)
    assert (eng.k, eng.kl_mode.value, eng.kl_samples) == (1, "auto", None)


def test_kl_left_out_of_the_loss_gets_no_kl_gradient():
    """The KL coefficient comes from autograd: a loss without the KL trains on the data alone."""
    net = _net(MIXTURE, torch.float64)
    x, y = _data(torch.float64)
    eng = Engine(net, "sgd", lr=0.1, kl="mc", seed=2, compile=False)
    ref = _net(MIXTURE, torch.float64)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for model, o, engine in ((net, eng, True), (ref, opt, False)):
        elbo = ELBO(model, kl="mc")
        with (o.sampling() if engine else counter_noise(model, 2, 0)):
            out = elbo(x, y)
        o.zero_grad()
        out.nll.backward()
        o.step()
    for u, v in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


_SUBPROCESS = textwrap.dedent("""
    import math, warnings, torch
    from bbb.nn import BayesMLP
    from bbb.elbo import ELBO
    from bbb.distributions import ScaleMixturePrior, GaussianPrior
    from bbb.engine import Engine
    {patch}
    def run(prior, kl, opt, compile, k, scale, kls_n=None):
        torch.manual_seed(0)
        net = BayesMLP(20, [16], 4, prior=prior, rho_init=-3.0)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(16, 20, generator=g), torch.randint(0, 4, (16,), generator=g)
        elbo = ELBO(net, num_batches=4, num_samples=k, kl=kl, kl_weighting="uniform", kl_samples=kls_n)
        eng = Engine(net, opt, lr=0.02, kl=kl, seed=4, num_samples=k, compile=compile, rho_lr_scale=scale,
                     kl_samples=kls_n)
        kls = []
        for i in range(5):
            with eng.sampling():
                out = elbo(x, y, batch_index=i % 4)
            eng.zero_grad(); (out.loss / 16).backward(); eng.step()
            kls.append(float(out.kl.detach()))
        return [p.detach() for p in net.parameters()], kls, eng.compiled
    for prior, kl, opt, k, scale, kls_n in [(ScaleMixturePrior(0.25, 1.0, math.exp(-7)), "mc", "adam", 1, 1.0, None),
                                            (GaussianPrior(1.0), "auto", "sgd", 2, 20.0, None),
                                            (ScaleMixturePrior(0.75, 0.4, math.exp(-2)), "mc", "sgd", 1, 1.0, 4),
                                            (ScaleMixturePrior(0.75, 0.4, math.exp(-6)), "split", "sgd", 1, 1.0, None)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a, kla, was_compiled = run(prior, kl, opt, True, k, scale, kls_n)
        b, klb, _ = run(prior, kl, opt, False, k, scale, kls_n)
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)
        assert all(abs(p - q) <= 1e-4 * abs(q) for p, q in zip(kla, klb)), (kla, klb)
        print("compiled" if was_compiled else "fell back", len([w for w in caught if "eager" in str(w.message)]))
""")


@pytest.mark.slow
def test_compiled_kernels_equal_eager_in_a_subprocess():
    """torch.compile'd kernels against the eager ones, in a child process (a crash fails one test)."""
    r = subprocess.run([sys.executable, "-c", _SUBPROCESS.format(patch="")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["compiled", "0"] * 4, r.stdout + r.stderr[-2000:]


_MANY_ENGINES = textwrap.dedent("""
    import math, warnings, torch
    # 8 by default: three engines are enough to tell (named cache_size_limit before torch 2.6)
    c = torch._dynamo.config
    setattr(c, "recompile_limit" if hasattr(c, "recompile_limit") else "cache_size_limit", 2)
    # the limit is Dynamo's, whatever compiles the graphs: Dynamo and AOTAutograd without
    # Inductor's C++ build (aot_eager), 33 s -> 8 s of CI's time
    _compile = torch.compile
    torch.compile = lambda fn, **kw: _compile(fn, **{k: v for k, v in kw.items() if k != "options"},
                                              backend="aot_eager")
    from bbb.nn import BayesMLP
    from bbb.elbo import ELBO
    from bbb.distributions import ScaleMixturePrior
    from bbb.engine import Engine
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 20, generator=g), torch.randint(0, 4, (16,), generator=g)
    compiled = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in (0, 1, 2, 0):  # each run of a sweep: its own prior and width; the last as the first
            net = BayesMLP(20, [16 + i], 4, prior=ScaleMixturePrior(0.25 + 0.1 * i, 1.0, math.exp(-7)))
            elbo = ELBO(net, num_batches=4, kl="mc")
            eng = Engine(net, "adam", lr=0.02, kl="mc", seed=4, compile=True)
            for _ in range(2):
                with eng.sampling():
                    out = elbo(x, y, batch_index=0)
                eng.zero_grad(); (out.loss / 16).backward(); eng.step()
            compiled.append(eng.compiled)
    from bbb.engine import kernels
    print(*compiled, len([w for w in caught if "eager" in str(w.message)]), len(kernels._COMPILED))
""")


@pytest.mark.slow
def test_every_engine_of_a_process_stays_compiled():
    """Dynamo's recompile limit counts per code object: engines that shared one kernel function
    recompiled it for each new prior, and past the limit fell back to eager (a reproduction's
    ninth run). Each setting's kernels have their own code object, so none falls back; an engine
    with the settings of an earlier one reuses its compiled kernels (2 kernels x 3 settings)."""
    r = subprocess.run([sys.executable, "-c", _MANY_ENGINES], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "True", "True", "True", "0", "6"], r.stdout + r.stderr[-2000:]
    # the process's first compile is announced, once, and its time said once (issue 53)
    assert r.stderr.count("bbb.Engine: compiling its kernels") == 1, r.stderr[-2000:]
    assert len(re.findall(r"bbb\.Engine: kernels compiled in \d+\.\d s", r.stderr)) == 1, r.stderr[-2000:]


def test_testkit_eager_kernels_keeps_a_reproductions_network_eager():
    """The reproduction tests train 2x400-2x1200 networks inside ``testkit.eager_kernels()``: there
    the engine keeps its eager kernels, where on the CPU a network that large would compile."""
    import bbb.engine.engine
    import bbb.engine.support as S
    from testkit import D_IN, N_CLASSES, eager_kernels

    net = BayesMLP(D_IN, [400, 400], N_CLASSES)  # the smallest of a reproduction test's networks
    cpu, numel = torch.device("cpu"), sum(p.numel() for n, p in net.named_parameters() if n.endswith("_mu"))
    assert S.compile_default(None, cpu, numel, bbb.engine.engine.COMPILE_MIN_NUMEL)
    with eager_kernels():
        eng = Engine(net, "adam", kl="mc")
        assert eng.fused and not eng.compiled
    assert bbb.engine.engine.COMPILE_MIN_NUMEL == 1 << 15  # restored


def test_failing_compile_falls_back_to_eager_with_one_warning():
    patch = ("def _broken(fn, **kw):\n"
             "    def run(*a, **k):\n"
             "        raise RuntimeError('inductor exploded')\n"
             "    return run\n"
             "torch.compile = _broken")
    r = subprocess.run([sys.executable, "-c", _SUBPROCESS.format(patch=patch)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["fell", "back", "1"] * 4, r.stdout + r.stderr[-2000:]


def test_the_kl_sum_is_the_float64_sum_rounded_and_the_same_on_one_or_two_threads():
    """The step's KL terms are added in float64 (one reduction, fused into the pass that computes
    them) and rounded: the thread split moves the float64 sum far below float32's rounding step."""
    from bbb.engine.kernels import fixed_order_sum, kl_sum

    g = torch.Generator().manual_seed(0)
    t = (torch.rand(2_395_210, generator=g) * torch.logspace(-6, 2, 2_395_210)).float()
    threads = torch.get_num_threads()
    try:
        sums = []
        for n in (1, 2):
            torch.set_num_threads(n)
            sums.append(kl_sum(t))
            sums.append(torch.compile(kl_sum)(t))
    finally:
        torch.set_num_threads(threads)
    exact = float(t.double().sum())
    assert all(u.dtype == torch.float32 and float(u) == float(torch.tensor(exact, dtype=torch.float32))
               for u in sums)
    d = t.double()
    assert torch.equal(kl_sum(d), fixed_order_sum(d))  # float64 terms: the fixed order, bit for bit


def test_threads_do_not_change_the_trajectory():
    threads = torch.get_num_threads()
    out = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.append(_train(_net(MIXTURE, torch.float32), "mc", "adam", 0.0, 1, 10, engine=True))
    finally:
        torch.set_num_threads(threads)
    for u, v in zip(out[0][0], out[1][0]):
        assert torch.equal(u, v)
    assert out[0][1] == out[1][1]
