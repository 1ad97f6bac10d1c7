"""bbb.IVON on CUDA (issue 73 item 1, issue 74's GPU suite): the step's arithmetic (``ivon_update``,
compiled on CUDA where Triton is) equal to the CPU's; a small MLP and a small CNN trained a few
steps (finite, the means move, sigma = 1 / sqrt(ess (h + weight_decay)) in the layers, the CPU's
trajectory under the same noise); which parts of a step synchronise with the host; a resume bit
for bit (the noise's seed and counter in the optimiser's state); the counter-based noise the CPU's;
``bbb train --method ivon --device cuda``
through the runs API and its run predicting on CUDA; step for step against ivon-opt where it is
importable (tests/core/test_ivon.py's comparison, on CUDA)."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cudakit import F32, QUIET, data, net, params, sync_errors, tiny_cfg

import bbb
from bbb.engine.support import COMPILE_ENV, has_triton
from bbb.ivon import IVON, ivon_update
from bbb.nn import bayes_modules
from bbb.runs import load_checkpoint, load_run, train
from bbb.uncertainty import predict

needs_triton = pytest.mark.skipif(not has_triton(), reason="Triton is not installed (bbb.IVON runs eagerly)")
#: a network of 8,853 Bayesian weights (tests/cuda/test_cuda_engine.py's SMALL)
SMALL = (20, [64, 64], 5)
SETTINGS = {"lr": 0.05, "ess": 100.0, "hess_init": 0.5, "weight_decay": 1e-3, "beta2": 0.999}


def _cnn(device: torch.device | str, seed: int = 0) -> nn.Module:
    """A bayesianized CNN of 10x10 one-channel images, 5 classes (the same weights on every device)."""
    torch.manual_seed(seed)
    plain = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 2 * 2, 5))
    return bbb.bayesianize(plain).to(device)


def _model_and_batch(kind: str, device: torch.device | str, seed: int = 0):
    if kind == "mlp":
        x, y = data(device, n=32, d=20, c=5)
        return net(device, sizes=SMALL, seed=seed), x, y
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(16, 1, 10, 10, generator=g), torch.randint(0, 5, (16,), generator=g)
    return _cnn(device, seed), x.to(device), y.to(device)


def _ivon_step(model: nn.Module, opt: IVON, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with opt.sampling():
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


# -- the step's arithmetic ----------------------------------------------------------------------

def _update_inputs(n: int, clip: float, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(mu, momentum, hess, g, gz, sigma) of ``n`` weights and the step's hp, on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    ess, wd, b1, step = 100.0, 1e-3, 0.9, 3
    hess = 0.1 + 0.9 * torch.rand(n, generator=gen)
    sigma = torch.rsqrt(ess * (hess + wd))
    grad = 0.1 * torch.randn(n, generator=gen)
    eps = torch.randn(n, generator=gen)
    mu, momentum = 0.3 * torch.randn(n, generator=gen), 0.01 * torch.randn(n, generator=gen)
    hp = torch.tensor([b1, 0.999, wd, 0.05 * (0.5 + wd), 1.0 - b1 ** step, ess, clip], dtype=torch.float64)
    return [mu, momentum, hess, grad, grad * eps, sigma], hp


def _apply(update, tensors: list[torch.Tensor], hp: torch.Tensor, device: torch.device | str,
           dynamic: bool) -> list[torch.Tensor]:
    """``update`` on copies of the inputs on ``device`` (marked dynamic as bbb.IVON marks them for
    its compiled update): the updated mu, momentum, hess and the returned sigma, rho, on the CPU."""
    ins = [t.to(device).clone() for t in tensors]
    if dynamic:
        for t in ins:
            torch._dynamo.mark_dynamic(t, 0)
    sigma, rho = update(*ins, hp.to(device))
    return [t.cpu() for t in (*ins[:3], sigma, rho)]


@pytest.mark.parametrize("clip", [math.inf, 0.02])
def test_ivon_update_on_cuda_equals_the_cpu(cuda, clip):
    """The eager update on CUDA, and the compiled one (torch.compile(dynamic=True), bbb.IVON's on
    CUDA) where Triton is, against the CPU's eager update: every output within 1e-4 relative +
    2e-5 absolute, on three sizes (one compiled loop for every weight tensor's length)."""
    compiled = torch.compile(ivon_update, dynamic=True) if has_triton() else None
    for n in (1000, 37, 4099):
        tensors, hp = _update_inputs(n, clip, seed=n)
        want = _apply(ivon_update, tensors, hp, "cpu", dynamic=False)
        runs = {"eager": _apply(ivon_update, tensors, hp, cuda, dynamic=False)}
        if compiled is not None:
            runs["compiled"] = _apply(compiled, tensors, hp, cuda, dynamic=True)
        for how, got in runs.items():
            for name, a, b in zip(("mu", "momentum", "hess", "sigma", "rho"), got, want):
                where = f"{how} {name} n={n}"
                torch.testing.assert_close(a, b, **F32, msg=lambda m, where=where: f"{where}: {m}")
        if clip < math.inf:  # the clip bit: some direction reached the radius
            direction = (tensors[0] - want[0]) / float(hp[3])
            assert float(direction.abs().max()) == pytest.approx(clip, rel=1e-2)  # (mu's rounding / lr)


@needs_triton
def test_bbb_ivon_compiles_its_update_on_cuda_by_default(cuda, monkeypatch):
    """compile=None on CUDA: compiled at any size (as the engine decides); compile=False: eager."""
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    model = net(cuda, sizes=(4, [3], 2))
    assert IVON(model, lr=0.1, ess=10)._update is not ivon_update
    assert IVON(net(cuda, sizes=(4, [3], 2)), lr=0.1, ess=10, compile=False)._update is ivon_update


# -- training -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_ivon_trains_on_cuda_with_its_posterior_in_the_layers(cuda, kind):
    """8 steps: finite losses, every mean moved, step counts, and softplus(rho) = 1 / sqrt(ess
    (h + weight_decay)) in every layer (within 1e-5 relative, as on the CPU); the noise drawn on
    the GPU."""
    model, x, y = _model_and_batch(kind, cuda)
    opt = IVON(model, **SETTINGS, seed=0)
    assert opt._flats[0].index.is_cuda
    before = params(model)
    losses = [_ivon_step(model, opt, x, y) for _ in range(8)]
    assert all(bool(torch.isfinite(v)) for v in losses)
    ess, wd = SETTINGS["ess"], SETTINGS["weight_decay"]
    for m in bayes_modules(model):
        for n in m.param_names():
            mu, st = m.mu(n), opt.state[m.mu(n)]
            assert mu.is_cuda and st["hess"].is_cuda and st["step"] == 8
            assert bool(torch.isfinite(mu).all()) and bool(torch.isfinite(st["hess"]).all())
            want = torch.rsqrt(ess * (st["hess"] + wd))
            torch.testing.assert_close(F.softplus(m.rho(n)), want, rtol=1e-5, atol=0)
    mus = [mu for mu, (name, _) in zip(params(model), model.named_parameters()) if name.endswith("_mu")]
    old = [b for b, (name, _) in zip(before, model.named_parameters()) if name.endswith("_mu")]
    assert mus and all(not torch.equal(a, b) for a, b in zip(mus, old))


def test_ivon_on_cuda_follows_the_cpus_trajectory_under_the_same_noise(cuda):
    """The MLP on the CPU and on CUDA, the noise of both drawn from one seeded CPU generator: the
    parameters and the optimiser's h after 1 and 10 steps within 1e-4 relative + 2e-5 absolute."""
    snaps = {}
    for dev in ("cpu", cuda):
        model, x, y = _model_and_batch("mlp", dev)
        opt = IVON(model, **SETTINGS, seed=0)
        noise = torch.Generator().manual_seed(7)
        opt.normal = lambda shape, like, g=noise: (  # type: ignore[method-assign]
            torch.randn(shape, generator=g, dtype=like.dtype).to(like.device))
        out = []
        for i in range(10):
            _ivon_step(model, opt, x, y)
            if i + 1 in (1, 10):
                out.append(params(model) + [opt.state[p]["hess"].cpu().clone() for p in opt.param_groups[0]["params"]])
        snaps[str(dev)] = out
    for a, b in zip(snaps["cpu"], snaps[str(cuda)]):
        for u, v in zip(a, b):
            torch.testing.assert_close(v, u, **F32)


def _forward_backward(model: nn.Module, opt: IVON, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with opt.sampling():
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    return loss.detach()


def test_ivon_sampling_forward_and_backward_do_not_synchronise(cuda):
    """The noise (counter-based, drawn on the GPU), theta = m + sigma eps, the loss and its
    gradient under torch's sync debug mode "error" (after two steps: compiled)."""
    model, x, y = _model_and_batch("mlp", cuda)
    opt = IVON(model, **SETTINGS, seed=0)
    for _ in range(2):
        _ivon_step(model, opt, x, y)
    for _ in range(3):
        with sync_errors():
            loss = _forward_backward(model, opt, x, y)
        opt.step()
    assert bool(torch.isfinite(loss))


def test_an_ivon_step_does_not_synchronise(cuda):
    """IVON.step under torch's sync debug mode "error", with a learning rate a scheduler changes."""
    model, x, y = _model_and_batch("mlp", cuda)
    opt = IVON(model, **SETTINGS, seed=0)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    for _ in range(2):
        _ivon_step(model, opt, x, y)
    for _ in range(4):
        loss = _forward_backward(model, opt, x, y)
        with sync_errors():
            opt.step()
            sched.step()
    assert bool(torch.isfinite(loss)) and opt.state[opt.param_groups[0]["params"][0]]["step"] == 6


# -- resume -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_a_resumed_ivon_on_cuda_continues_bit_for_bit(cuda, kind, monkeypatch):
    """4 steps, the model's and the optimiser's state_dict (the noise's seed and counter with it)
    saved; the run goes on 4 steps, and fresh copies (other initial weights, another seed) load the
    checkpoint and take the same 4: every tensor of both models and h, the momentum and the
    noise's counter equal bit for bit (cuDNN's deterministic algorithms for the CNN)."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    a, x, y = _model_and_batch(kind, cuda)
    opt_a = IVON(a, **SETTINGS, seed=3)
    for _ in range(4):
        _ivon_step(a, opt_a, x, y)
    buf = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, buf)
    for _ in range(4):
        _ivon_step(a, opt_a, x, y)

    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    b, _, _ = _model_and_batch(kind, cuda, seed=1)
    opt_b = IVON(b, **SETTINGS, seed=99)
    b.load_state_dict(saved["model"])
    opt_b.load_state_dict(saved["opt"])
    for _ in range(4):
        _ivon_step(b, opt_b, x, y)
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
        assert u.is_cuda and torch.equal(u, v), k
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    for i, st in sa["state"].items():
        for k in ("momentum", "hess"):
            assert torch.equal(st[k], sb["state"][i][k]), (i, k)
    assert sa["noise"] == sb["noise"] == {"seed": 3, "counter": 8}


# -- the runs API (bbb train --method ivon --device cuda) ----------------------------------------------

def _blobs(n_train: int = 240, n_eval: int = 60, d: int = 12, c: int = 3) -> dict[str, torch.Tensor]:
    """Gaussian blobs split as ``train(data=...)`` takes them (tests/testkit.py's ``blobs``)."""
    g = torch.Generator().manual_seed(0)
    centers = 2.0 * torch.randn(c, d, generator=g)
    out = {}
    for split, n in (("train", n_train), ("val", n_eval), ("test", n_eval)):
        yy = torch.randint(0, c, (n,), generator=g)
        out[f"{split}_x"], out[f"{split}_y"] = centers[yy] + torch.randn(n, d, generator=g), yy
    return out


def test_train_method_ivon_on_cuda_and_its_run_predicts_on_cuda(tmp_path):
    """``bbb train --method ivon --device cuda`` as the runs API runs it, 2 epochs on blobs: a
    finite summary that learned; the checkpoint holds the noise's seed and counter; the run loaded
    on CUDA samples predictions there, and its mean network's outputs are the CPU-loaded run's."""
    d = _blobs()
    run = tmp_path / "ivon"
    s = train(tiny_cfg(method="ivon", lr=0.1, epochs=2), run, data=d, **QUIET)
    assert s["method"] == "ivon" and math.isfinite(s["test_nll"]) and s["test_error"] < 0.5
    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt["epoch"] == 2 and ckpt["optimizer"]["noise"]["counter"] > 0
    model, _ = load_run(run, "last", device="cuda")
    cpu_model, _ = load_run(run, "last", device="cpu")
    assert all(p.is_cuda for p in model.parameters())
    x = d["test_x"]
    samples = predict(model, x.cuda(), num_samples=5)
    assert samples.shape == (5, x.shape[0], 3) and samples.is_cuda
    assert bool(torch.isfinite(samples).all()) and float(samples.std(0).max()) > 0
    torch.testing.assert_close(predict(model, x.cuda(), mode="mean").cpu(), predict(cpu_model, x, mode="mean"), **F32)


# -- against the published implementation ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_each_step_on_cuda_is_ivon_opts_step(cuda, kind):
    """tests/core/test_ivon.py's comparison on CUDA: the same initial mean, h and noise (ivon-opt's
    sampled weights read back as our eps); the means after each of 5 steps within 1e-4 relative +
    2e-5 absolute (our compiled update against ivon-opt's eager arithmetic)."""
    ivon = pytest.importorskip("ivon", reason="ivon-opt (the bench extra) is the reference")
    torch.manual_seed(0)
    if kind == "mlp":
        plain = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).to(cuda)
        x, y = data(cuda, n=32, d=4, c=3)
    else:
        plain = nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 3)).to(cuda)
        x, y = torch.randn(16, 1, 6, 6).to(cuda), torch.randint(0, 3, (16,)).to(cuda)
    ours_net = bbb.bayesianize(copy.deepcopy(plain))
    kw = {"lr": 0.05, "ess": 100.0, "hess_init": 0.3, "weight_decay": 1e-3, "beta1": 0.9, "beta2": 0.999}
    ref = ivon.IVON(plain.parameters(), **kw)
    sampled, means = [], []
    for _ in range(5):
        with ref.sampled_params(train=True):
            ref.zero_grad()
            sampled.append([p.detach().clone() for p in plain.parameters()])
            F.cross_entropy(plain(x), y).backward()
        ref.step()
        means.append([p.detach().clone() for p in plain.parameters()])
    ours = IVON(ours_net, **kw)
    mus = [m.mu(n) for m in bayes_modules(ours_net) for n in m.param_names()]
    assert len(mus) == len(sampled[0]) and all(mu.is_cuda for mu in mus)
    for step in range(5):
        queue = [(s - mu.detach()) / ours._sigma(mu) for s, mu in zip(sampled[step], mus)]
        ours.normal = lambda shape, like, q=queue: q.pop(0).reshape(shape)  # type: ignore[method-assign]
        _ivon_step(ours_net, ours, x, y)
        for mu, want in zip(mus, means[step]):
            torch.testing.assert_close(mu.detach(), want, **F32)


def test_the_flat_noise_on_cuda_is_the_cpus(cuda):
    """Counter-based: the first flat draw of an IVON on CUDA is bbb.random.normal's numbers on the
    CPU (the same integers; Box-Muller's float rounding within 1e-5)."""
    model, x, y = _model_and_batch("mlp", cuda)
    opt = IVON(model, **SETTINGS, seed=5)
    _forward_backward(model, opt, x, y)
    f = opt._flats[0]
    torch.testing.assert_close(f.eps.cpu(), bbb.random.normal(f.numel, 5, 0), rtol=0, atol=1e-5)
