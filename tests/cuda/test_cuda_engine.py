"""The engine on CUDA: compiled at any size (no fallback), the CPU's trajectory, the plain path's,
no host sync in a step, a bounded number of kernel launches; bf16 autocast, the estimators and
priors that take the plain path; the device guards (F2, F3)."""

from __future__ import annotations

import pytest
import torch
from cudakit import F32, MILD, MIXTURE, data, engine_step, net, params, sync_errors

from bbb.devices import resolve_device
from bbb.elbo import ELBO
from bbb.engine import COMPILE_MIN_NUMEL, Engine, counter_noise
from bbb.errors import UserError


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    return bool(has_triton())


needs_triton = pytest.mark.skipif(not _has_triton(), reason="Triton is not installed (the engine runs eagerly)")
#: a network of 8,853 Bayesian weights: below COMPILE_MIN_NUMEL, so on the CPU it would not compile
SMALL = (20, [64, 64], 5)


def _cpu_and_cuda(cuda, opt="adam", lr=1e-3, steps=(1, 20), dtype=torch.float32, **engine_kw):
    """The same network trained on the CPU (eager kernels) and on CUDA (compiled): the parameters
    and the KL of both after each count of ``steps``."""
    out = {}
    for dev in ("cpu", cuda):
        model = net(dev, dtype, prior=MILD, sizes=SMALL)
        engine = Engine(model, opt, lr=lr, seed=5, momentum=0.9 if opt == "sgd" else 0.0, **engine_kw)
        elbo = ELBO(model, num_batches=4)
        x, y = data(dev, dtype, n=32, d=20, c=5)
        snaps = []
        for i in range(max(steps)):
            engine_step(engine, elbo, x, y, i)
            if i + 1 in steps:
                snaps.append((params(model), float(engine.kl)))
        out["cpu" if dev == "cpu" else "cuda"] = (engine, snaps)
    return out


@needs_triton
@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_the_engine_compiles_on_cuda_at_any_size_and_follows_the_cpu(cuda, opt):
    """Compiled without a fallback below COMPILE_MIN_NUMEL weights; after 1 and 20 steps every
    parameter within 1e-4 relative + 2e-5 absolute of the CPU's (eager kernels), the KL within 1e-4."""
    runs = _cpu_and_cuda(cuda, opt)
    engine, snaps = runs["cuda"]
    assert engine.layout.numel < COMPILE_MIN_NUMEL
    assert engine.compiled and engine.kernels.failed is None, engine.kernels.failed
    assert engine._on_device and not runs["cpu"][0]._on_device  # hp formed on the GPU, on the host on the CPU
    for (pc, kc), (pg, kg) in zip(runs["cpu"][1], snaps):
        for a, b in zip(pc, pg):
            torch.testing.assert_close(b, a, **F32)
        assert kg == pytest.approx(kc, rel=1e-4)


def _fused_and_plain(cuda, dtype, steps, lr):
    """The engine (compiled where Triton is) against the plain autograd path fed with the same
    counter noise and torch's Adam, both on CUDA (tests/core/test_engine.py's specification)."""
    res = []
    for fused in (True, False):
        model = net(cuda, dtype, prior=MILD)
        elbo = ELBO(model, "categorical", num_batches=4, kl_weighting="blundell", kl="mc")
        x, y = data(cuda, dtype)
        opt = (Engine(model, "adam", lr=lr, kl="mc", seed=3) if fused else torch.optim.Adam(model.parameters(), lr=lr))
        kls = []
        for i in range(steps):
            ctx = opt.sampling() if fused else counter_noise(model, 3, i)
            with ctx:
                out = elbo(x, y, batch_index=i % 4)
            opt.zero_grad()
            (out.loss / len(x)).backward()
            opt.step()
            kls.append(float(out.kl.detach()))
        res.append((params(model), kls))
    return res


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fused_engine_equals_the_plain_path_on_cuda(cuda, dtype):
    """float64: one step to rounding; float32: 20 steps within the stated tolerance."""
    if dtype == torch.float64:
        (a, ka), (b, kb) = _fused_and_plain(cuda, dtype, steps=2, lr=0.05)
        tol = {"rtol": 1e-9, "atol": 1e-11}
    else:
        (a, ka), (b, kb) = _fused_and_plain(cuda, dtype, steps=20, lr=0.01)
        tol = F32
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, **tol)
    assert ka[-1] == pytest.approx(kb[-1], rel=tol["rtol"] if dtype == torch.float64 else 1e-4)


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_engine_steps_do_not_synchronise(cuda, opt):
    """sampling(), the ELBO, backward and step() under torch's sync debug mode "error", with a
    learning rate that a scheduler changes in between (hp is rewritten from pinned memory)."""
    model = net(cuda, prior=MIXTURE, sizes=SMALL)
    engine = Engine(model, opt, lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(engine, 2, 0.5)
    elbo = ELBO(model, num_batches=4)
    x, y = data(cuda, n=32, d=20, c=5)
    for i in range(3):  # compiled in the first
        engine_step(engine, elbo, x, y, i)
    with sync_errors():
        for i in range(3, 9):
            loss = engine_step(engine, elbo, x, y, i)
            sched.step()
    assert torch.isfinite(loss) and engine.counter == 9


#: kernels one compiled step may launch. What Inductor makes of the step: the noise (one pointwise
#: kernel), the optimiser update with the KL gradient (one or two), the next sample with its KL
#: (a pointwise kernel and the two stages of the fixed-order sum), the step counter, keys and Adam's
#: bias corrections (scalars, one kernel), the zeroed gradient and coefficient: about ten, on any
#: network size. The eager kernels launch about 200 (CPU count of operators: ~156, and ~40 more
#: for the counter's keys formed on the device). 24 leaves room for Inductor's choices; copies
#: from the host: none.
LAUNCH_BUDGET = 24


@needs_triton
def test_a_compiled_engine_step_launches_few_kernels_and_copies_nothing_from_the_host(cuda):
    from torch.profiler import ProfilerActivity, profile

    model = net(cuda, prior=MIXTURE, sizes=SMALL)
    engine = Engine(model, "adam", lr=1e-3)
    elbo = ELBO(model, num_batches=4)
    x, y = data(cuda, n=32, d=20, c=5)
    for i in range(3):
        engine_step(engine, elbo, x, y, i)
    with engine.sampling():
        out = elbo(x, y, batch_index=3)
    engine.zero_grad()
    (out.loss / len(x)).backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        engine.step()
        torch.cuda.synchronize()
    events = list(prof.events())
    on_gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    # the kernels as the GPU ran them, else the host's launch calls (runtime or driver API: Triton's)
    kernels = ([e.name for e in on_gpu if not e.name.startswith(("Memcpy", "Memset"))]
               or [e.name for e in events if e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                                          "cuLaunchKernelEx")])
    if not kernels:
        pytest.skip("the profiler saw no CUDA kernels (CUPTI unavailable?)")
    from_host = [e.name for e in on_gpu if "HtoD" in e.name]
    assert from_host == [], from_host
    assert len(kernels) <= LAUNCH_BUDGET, kernels
    assert engine.compiled and engine.kernels.failed is None


def test_bf16_autocast_trains_close_to_float32(cuda):
    """Under bf16 autocast the layers take the engine's sample through F.linear in bf16; the
    losses stay within a bf16 tolerance of float32's over 10 steps."""
    losses = {}
    for bf16 in (False, True):
        model = net(cuda, prior=MILD, sizes=SMALL)
        engine = Engine(model, "adam", lr=1e-3)
        elbo = ELBO(model, num_batches=4)
        x, y = data(cuda, n=32, d=20, c=5)
        ls = []
        for i in range(10):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                ls.append(float(engine_step(engine, elbo, x, y, i)))
        losses[bf16] = ls
        assert all(torch.isfinite(p).all() for p in model.parameters())
    assert losses[True] == pytest.approx(losses[False], rel=5e-2)


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_local_reparameterisation_and_flipout_train_on_cuda(cuda, estimator):
    """The plain path (torch.optim inside the engine): the mean network equals the CPU's, and
    training moves the weights and keeps them finite."""
    cpu_model = net("cpu", prior=MILD, sizes=SMALL, estimator=estimator)
    model = net(cuda, prior=MILD, sizes=SMALL, estimator=estimator)
    x, y = data(cuda, n=32, d=20, c=5)
    torch.testing.assert_close(model.eval()(x).cpu(), cpu_model.eval()(x.cpu()), **F32)
    model.train()
    engine = Engine(model, "adam", lr=1e-2, fused=False)
    elbo = ELBO(model, num_batches=4)
    before = params(model)
    losses = [float(engine_step(engine, elbo, x, y, i)) for i in range(10)]
    assert all(map(lambda v: v == v and abs(v) < float("inf"), losses))
    assert any(not torch.equal(a, b) for a, b in zip(before, params(model)))


def test_a_torch_distributions_prior_on_cuda_gives_the_cpus_objective(cuda):
    """A Laplace prior (Monte Carlo KL through log_prob, the plain path): the ELBO under the same
    counter noise on CUDA and the CPU; then a few engine steps."""
    losses = []
    for dev in ("cpu", cuda):
        prior = torch.distributions.Laplace(torch.tensor(0.0, device=dev), torch.tensor(0.1, device=dev))
        model = net(dev, prior=prior, sizes=SMALL)
        elbo = ELBO(model, num_batches=4, kl="mc")
        x, y = data(dev, n=32, d=20, c=5)
        with counter_noise(model, 2, 7):
            out = elbo(x, y, batch_index=1)
        losses.append((float(out.loss.detach()), float(out.kl.detach())))
        if dev != "cpu":
            engine = Engine(model, "adam", lr=1e-3, fused=False)
            for i in range(3):
                assert torch.isfinite(engine_step(engine, elbo, x, y, i))
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def test_an_engine_built_before_the_model_moved_to_cuda_says_so(cuda):
    """F2: the layers' mu and rho left the engine's buffers: a one-line error, not a failed forward."""
    model = net("cpu", sizes=SMALL)
    engine = Engine(model, "adam", compile=False)
    model.to(cuda)
    with pytest.raises(UserError) as e:
        with engine.sampling():
            pass
    assert "\n" not in str(e.value) and "build the Engine after moving the model" in str(e.value)
    engine = Engine(model, "adam")  # built after the move: trains
    x, y = data(cuda, n=32, d=20, c=5)
    assert torch.isfinite(engine_step(engine, ELBO(model, num_batches=2), x, y, 0))


def test_a_device_beyond_the_count_is_a_one_line_error(cuda):
    """F3: --device cuda:N for a device the machine does not have."""
    n = torch.cuda.device_count()
    assert resolve_device(f"cuda:{n - 1}") == torch.device(f"cuda:{n - 1}")
    with pytest.raises(UserError) as e:
        resolve_device("cuda:99" if n <= 99 else f"cuda:{n}")
    assert "\n" not in str(e.value) and "device" in str(e.value)
