"""The engine where the plain loop's habits meet it: DDP, gradient clipping, a step without
``engine.sampling()``, parameters of the ELBO's own, and the fallback to the plain path.

Each either works as with ``torch.optim`` (checked against the plain path fed with the engine's
noise, ``counter_noise``) or is a one-line error or warning.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn as nn

from bbb.convert import bayesianize
from bbb.distributions import GaussianPrior, ScaleMixturePrior
from bbb.elbo import ELBO, Gaussian
from bbb.engine import Engine, counter_noise
from bbb.errors import UserError
from bbb.nn import BayesLinear, BayesMLP
from testkit import run_two_ranks, two_rank_process

MIXTURE = ScaleMixturePrior(0.5, 1.0, math.exp(-2))


def _data(n=8, d=6, seed=1, classes=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=g) if classes else torch.randn(n, generator=g, dtype=torch.float64)
    return x, y


def _net(prior=MIXTURE, deterministic=False, seed=0, out=3):
    """A Bayesian MLP (float64), with a deterministic layer in front when asked (inner parameters)."""
    torch.manual_seed(seed)
    layers = [BayesLinear(6, 7, prior=prior, rho_init=-3.0), nn.Tanh(), BayesLinear(7, out, prior=prior, rho_init=-3.0)]
    if deterministic:
        layers = [nn.Linear(6, 6), nn.Tanh(), *layers]
    return nn.Sequential(*layers).double()


def _run(net, elbo, opt, engine, steps, seed=3, k=None, clip=None, x=None, y=None):
    """``steps`` of the plain loop (the engine's, or torch.optim's on the engine's noise); clip: the
    engine's clip_grad_norm_ arguments, or None. Returns the norms it measured."""
    if x is None:
        x, y = _data()
    norms = []
    for i in range(steps):
        with (opt.sampling() if engine else counter_noise(net, seed, i, k)):
            out = elbo(x, y, batch_index=i % elbo.num_batches)
        opt.zero_grad()
        (out.loss / len(x)).backward()
        if clip is not None:
            norms.append(float(opt.clip_grad_norm_(*clip)))
        opt.step()
    return norms


def _close(a, b, rtol=1e-10, atol=1e-12):
    for u, v in zip(a, b):
        torch.testing.assert_close(u.detach(), v.detach(), rtol=rtol, atol=atol)


# -- 2. gradient clipping --------------------------------------------------------------------------

@pytest.mark.parametrize("prior,kl,opt,k,norm_type", [
    (MIXTURE, "mc", "adam", 1, 2.0),
    (GaussianPrior(0.7), "auto", "sgd", 2, 2.0),
    (MIXTURE, "mc", "sgd", 1, math.inf),
    (MIXTURE, "split", "adam", 1, 2.0),
])
def test_clip_grad_norm_equals_clipping_on_the_plain_path(prior, kl, opt, k, norm_type):
    """engine.clip_grad_norm_ clips dL/dmu and dL/drho (KL included) and the inner parameters
    together, as torch.nn.utils.clip_grad_norm_ on the plain path: same norms, same parameters."""
    results = []
    for engine in (True, False):
        net = _net(prior, deterministic=True)
        elbo = ELBO(net, num_batches=2, num_samples=k, kl=kl)
        if engine:
            o = Engine(net, opt, lr=0.05, kl=kl, num_samples=k, seed=3, compile=False)
            assert o.fused
        else:
            o = (torch.optim.Adam if opt == "adam" else torch.optim.SGD)(net.parameters(), lr=0.05)
        rows = 1 if kl == "split" else 0
        if engine:
            norms = _run(net, elbo, o, True, 3, k=None if k == 1 else k, clip=(0.3, norm_type))
        else:
            x, y = _data()
            norms = []
            for i in range(3):
                with counter_noise(net, 3, i, None if k == 1 else k, kl_rows=rows):
                    out = elbo(x, y, batch_index=i % 2)
                o.zero_grad()
                (out.loss / len(x)).backward()
                norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), 0.3, norm_type)))
                o.step()
        results.append((list(net.parameters()), norms))
    (a, na), (b, nb) = results
    assert na == pytest.approx(nb, rel=1e-10)
    assert min(na) > 0.3  # it clipped
    _close(a, b)


def test_clip_grad_norm_that_does_not_clip_changes_nothing_and_plain_path_engine_clips_too():
    def run(max_norm, fused):
        net = _net(deterministic=True)
        elbo = ELBO(net, num_batches=2, kl="mc")
        o = Engine(net, "adam", lr=0.05, kl="mc", seed=3, compile=False, fused=fused)
        norms = _run(net, elbo, o, True, 2, clip=None if max_norm is None else (max_norm,))
        return list(net.parameters()), norms

    a, _ = run(None, None)
    b, nb = run(1e9, None)
    _close(a, b, rtol=1e-14, atol=0)
    assert nb[0] > 0
    # the plain path (fused=False): the engine clips its torch.optim parameters as torch does
    net = _net(deterministic=True)
    elbo = ELBO(net, num_batches=2, kl="mc")
    eng = Engine(net, "sgd", lr=0.05, kl="mc", fused=False)
    x, y = _data()
    with eng.sampling():
        out = elbo(x, y)
    eng.zero_grad()
    out.loss.backward()
    want = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in net.parameters()]))
    assert float(eng.clip_grad_norm_(0.1)) == pytest.approx(float(want), rel=1e-12)
    assert float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in net.parameters()]))) == \
        pytest.approx(0.1, rel=1e-5)


# -- 3. a step without engine.sampling() ----------------------------------------------------------

def test_step_without_a_forward_under_sampling_is_an_error_or_a_warning():
    net = _net()
    x, y = _data()
    elbo = ELBO(net, kl="mc")
    eng = Engine(net, "adam", lr=0.05, kl="mc", compile=False)
    out = elbo(x, y)  # outside the block: mu and rho get .grad, which the kernel never reads
    eng.zero_grad()
    out.loss.backward()
    with pytest.raises(UserError, match="sampling") as err:
        eng.step()
    assert "\n" not in str(err.value)
    for p in net.parameters():
        p.grad = None
    before = [p.detach().clone() for p in net.parameters()]
    with pytest.warns(UserWarning, match="no forward"):
        eng.step()  # nothing at all since the last step: nothing to apply
    _close(before, list(net.parameters()), rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eng.step()  # once per engine
        with eng.sampling():
            out = elbo(x, y)
        eng.zero_grad()
        out.loss.backward()
        eng.step()
    assert any(not torch.equal(u, v) for u, v in zip(before, net.parameters()))


# -- 4. parameters of the ELBO's own ---------------------------------------------------------------

def _regression(engine_kind):
    net = _net(GaussianPrior(1.0), deterministic=True, out=1)
    lik = Gaussian(0.5, learn_sigma=True).double()
    elbo = ELBO(net, lik, num_batches=2, kl="mc")
    if engine_kind == "elbo":
        o = Engine(elbo, "adam", lr=0.05, kl="mc", seed=3, compile=False)
    elif engine_kind == "params":
        o = Engine(net, "adam", lr=0.05, kl="mc", seed=3, compile=False, params=[{"params": elbo.parameters()}])
    else:
        o = torch.optim.Adam([*net.parameters(), *elbo.parameters()], lr=0.05)
    x, y = _data(classes=0)
    _run(net, elbo, o, engine_kind != "torch", 4, x=x, y=y)
    return [*net.parameters(), *elbo.parameters()], lik


def test_learned_noise_is_trained_as_by_torch_optim():
    ref, lik = _regression("torch")
    assert float(lik.sigma.detach()) != pytest.approx(0.5, abs=1e-3)  # it moved
    for kind in ("elbo", "params"):
        got, _ = _regression(kind)
        _close(got, ref)


def test_an_elbo_parameter_the_engine_does_not_train_is_an_error():
    net = _net(GaussianPrior(1.0), out=1)
    elbo = ELBO(net, Gaussian(learn_sigma=True).double(), kl="mc")
    eng = Engine(net, "adam", kl="mc", compile=False)
    x, y = _data(classes=0)
    with pytest.raises(UserError, match="raw_sigma.*Engine\\(elbo") as err, eng.sampling():
        elbo(x, y)
    assert "\n" not in str(err.value)
    ELBO(net, Gaussian(learn_sigma=True).double(), kl="mc")(x, y)  # outside an engine: the user's optimiser
    with pytest.raises(UserError, match="params"):
        Engine(net, params=[1.0])



def _frozen_step(eng, net):
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    with eng.sampling():
        out = ELBO(net, num_batches=1)(x, y, batch_index=0)
    eng.zero_grad()
    out.loss.backward()
    eng.step()


def test_freezing_or_unfreezing_after_the_engine_is_built_is_an_error_not_ignored():
    # frozen after construction: the fused kernel updated it all the same; unfrozen after
    # construction: it got gradients and never moved (torch.optim trains both as flagged)
    torch.manual_seed(0)
    net = BayesMLP(3, [4], 2)
    eng = Engine(net, "adam", lr=0.1, compile=False)
    _frozen_step(eng, net)
    first = next(m for m in net.modules() if isinstance(m, BayesLinear))
    first.weight_mu.requires_grad_(False)
    before = first.weight_mu.detach().clone()
    with pytest.raises(UserError, match="frozen .*after the Engine was built") as err:
        _frozen_step(eng, net)
    assert "\n" not in str(err.value) and torch.equal(first.weight_mu, before)
    base = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    base[0].requires_grad_(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = bayesianize(base)
        eng = Engine(net, "adam", lr=0.1, compile=False)  # (frozen weights: the plain path)
    net[0].requires_grad_(True)  # gradual unfreezing
    with pytest.raises(UserError, match="unfrozen .*add_param_group"):
        _frozen_step(eng, net)
    eng.add_param_group({"params": list(net[0].parameters())})  # as the error says: now it trains
    before = net[0].weight_mu.detach().clone()
    _frozen_step(eng, net)
    assert not torch.equal(net[0].weight_mu, before)


# -- 5. the fallback -------------------------------------------------------------------------------

def test_fallback_warns_once_raises_with_fused_true_and_is_silent_with_fused_false():
    flip = BayesMLP(6, [5], 3, estimator="flipout", prior=GaussianPrior(1.0))
    with pytest.warns(UserWarning, match="flipout estimator is not fused") as rec:
        eng = Engine(flip, "adam")
    assert len(rec) == 1 and not eng.fused and "flipout" in eng.fallback_reason
    with pytest.raises(UserError, match="flipout") as err:
        Engine(flip, "adam", fused=True)
    assert "\n" not in str(err.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        silent = Engine(flip, "adam", fused=False)
        assert not silent.fused and "flipout" in silent.fallback_reason  # the reason, not only 'fused=False'
        assert Engine(_net(), "adam", kl="mc", fused=True, compile=False).fused
        # a fusable model on the plain path: torch.optim's results
        a, b = _net(), _net()
        x, y = _data()
        eng = Engine(a, "adam", lr=0.05, kl="mc", fused=False)
        opt = torch.optim.Adam(b.parameters(), lr=0.05)
        assert not eng.fused and eng.fallback_reason == "fused=False"
        for net, o in ((a, eng), (b, opt)):
            torch.manual_seed(5)
            with (o.sampling() if o is eng else torch.enable_grad()):
                out = ELBO(net, kl="mc")(x, y)
            o.zero_grad()
            out.loss.backward()
            o.step()
        _close(a.parameters(), b.parameters(), rtol=0, atol=0)
    with pytest.raises(UserError, match="fused"):
        Engine(_net(), fused="yes")


# -- 1. DistributedDataParallel --------------------------------------------------------------------

STEPS = 4


def _ddp_setup(seed, sigma):
    """A converted MLP (a deterministic layer kept) and a regression ELBO with a learned noise."""
    from bbb.convert import bayesianize

    torch.manual_seed(seed)
    base = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deterministic layer kept
        net = bayesianize(base, prior=GaussianPrior(1.0), rho_init=-3.0, skip=["2"]).double()
    return net, Gaussian(sigma, learn_sigma=True).double()


def _ddp_batch(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)


def _flat(net, lik):
    return torch.cat([p.detach().reshape(-1) for p in [*net.parameters(), *lik.parameters()]])


def _ddp_worker(rank, port, out):  # pragma: no cover - runs in the spawned processes
    from torch.nn.parallel import DistributedDataParallel as DDP

    with two_rank_process(rank, port, out) as res:
        for variant in ("before", "after"):
            net, lik = _ddp_setup(seed=rank, sigma=1.0 + rank)  # the ranks start apart
            seed = 3 if rank == 0 else None  # the other rank's noise seed drawn: the first's is taken
            if variant == "before":  # engine first, then DDP (find_unused_parameters)
                eng = Engine(net, "adam", lr=0.05, kl="mc", seed=seed, compile=False, params=lik.parameters())
                elbo = ELBO(DDP(net, find_unused_parameters=True), lik, num_batches=2, kl="mc")
            else:  # DDP first (static_graph), the engine from the ELBO
                elbo = ELBO(DDP(net, static_graph=True), lik, num_batches=2, kl="mc")
                eng = Engine(elbo, "adam", lr=0.05, kl="mc", seed=seed, compile=False)
            for i in range(STEPS):
                x, y = _ddp_batch(i, rank)
                with eng.sampling():
                    o = elbo(x, y, batch_index=i % 2)
                eng.zero_grad()
                (o.loss / len(x)).backward()
                if variant == "after":
                    eng.clip_grad_norm_(0.5)
                eng.step()
            res[variant] = _flat(net, lik)
        net, lik = _ddp_setup(seed=0, sigma=1.0)
        with pytest.raises(UserError, match="find_unused_parameters"):
            Engine(DDP(net), kl="mc", compile=False)  # DDP would fail at its second iteration
        net, lik = _ddp_setup(seed=0, sigma=1.0)
        eng = Engine(net, kl="mc", compile=False)
        elbo = ELBO(DDP(net), "gaussian", kl="mc")
        with pytest.raises(UserError, match="find_unused_parameters"), eng.sampling():
            elbo(*_ddp_batch(0, rank))  # the engine built first: the first forward inside DDP says so
        net, lik = _ddp_setup(seed=0, sigma=1.0)
        eng = Engine(net, "adam", kl="mc", compile=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with eng.sampling():
                o = ELBO(net, "gaussian", kl="mc")(*_ddp_batch(0, rank))
            o.loss.backward()
            eng.step()
        res["warned"] = [str(w.message) for w in caught]


def _reference(clip):
    """One process: the engine on the mean of the two ranks' losses (the mean of their gradients)."""
    net, lik = _ddp_setup(seed=0, sigma=1.0)
    elbo = ELBO(net, lik, num_batches=2, kl="mc")
    eng = Engine(elbo, "adam", lr=0.05, kl="mc", seed=3, compile=False)
    for i in range(STEPS):
        with eng.sampling():
            outs = [elbo(*_ddp_batch(i, r), batch_index=i % 2) for r in (0, 1)]
        eng.zero_grad()
        (sum(o.loss / 5 for o in outs) / 2).backward()
        if clip:
            eng.clip_grad_norm_(0.5)
        eng.step()
    return _flat(net, lik)


def test_ddp_ranks_stay_identical_and_equal_the_averaged_gradient(tmp_path):
    r0, r1 = run_two_ranks(_ddp_worker, tmp_path)
    for variant, clip in (("before", False), ("after", True)):
        assert torch.equal(r0[variant], r1[variant]), variant
        torch.testing.assert_close(r0[variant], _reference(clip), rtol=0, atol=1e-6)
    assert any("DistributedDataParallel" in m for m in r0["warned"]), r0["warned"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_model_trains_on_the_plain_path_whose_kl_is_float32(dtype):
    """The fused kernel drew float16 noise that was not finite and summed the KL in the parameters'
    dtype (float16's overflowed past 65504, bfloat16's rounded to 8 bits): a 16-bit model takes the
    plain path, said in one line (an error with fused=True), and its KL is finite float32."""
    torch.manual_seed(0)
    net = BayesMLP(300, [300], 10, rho_init=-6.0, prior=GaussianPrior(0.1)).to(dtype)
    elbo = ELBO(net, "categorical", num_batches=1, kl="closed")
    with pytest.warns(UserWarning, match=rf"its parameters are {str(dtype)[6:]}: .*KL in float32") as said:
        eng = Engine(elbo, "adam", lr=1e-3, compile=False)
    assert not eng.fused and "\n" not in str(said[0].message)
    x, y = torch.randn(8, 300, dtype=dtype), torch.randint(0, 10, (8,))
    with eng.sampling():
        out = elbo(x, y)
    kl = float(out.kl.detach())
    assert out.kl.dtype == torch.float32 and math.isfinite(kl) and kl > 65504
    with pytest.raises(UserError, match="16 bits"):
        Engine(ELBO(net, "categorical", num_batches=1, kl="closed"), "adam", lr=1e-3, fused=True)


@pytest.mark.parametrize(("opt", "option"), [
    ("adam", {"momentum": 0.9}), ("adam", {"nesterov": True}), ("sgd", {"betas": (0.5, 0.5)}),
    ("sgd", {"eps": 1.0}), ("sgd", {"nesterov": True}),
])
def test_an_option_the_optimiser_would_ignore_is_an_error(opt, option):
    # each trained exactly as without it, silently
    with pytest.raises(UserError, match="ignore|needs a momentum") as excinfo:
        Engine(BayesLinear(3, 2), opt, lr=1e-2, compile=False, **option)
    assert "\n" not in str(excinfo.value)
    Engine(BayesLinear(3, 2), "sgd", lr=1e-2, compile=False, momentum=0.9, nesterov=True)
    Engine(BayesLinear(3, 2), "adam", lr=1e-2, compile=False, betas=(0.5, 0.9), eps=1e-6)


@pytest.mark.parametrize("how", ["assign", "double"])
def test_a_later_layer_replaced_after_the_engine_was_built_is_one_line(how):
    """The check read the first layer alone: a second layer given new tensors (load_state_dict with
    assign=True, or .double()) was trained no more and used stale weights, silently."""
    x, y = _data(d=4)
    net = BayesMLP(4, [8], 3)
    elbo = ELBO(net, num_batches=1)
    eng = Engine(elbo, compile=False)
    if how == "assign":
        net.layers[1].load_state_dict({k: v.clone() for k, v in net.layers[1].state_dict().items()}, assign=True)
    else:
        net.layers[1].double()
    with pytest.raises(UserError, match="parameters were (replaced|moved or converted) .*after the Engine was built"):
        with eng.sampling():
            elbo(x, y)
