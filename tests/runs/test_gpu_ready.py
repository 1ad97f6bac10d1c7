"""What the GPU issue asks that a CPU can check ("bbb on a GPU"; the GPU's own checks: tests/cuda).

F2: an engine whose model was moved or converted after it was built is a one-line error. S1/S2:
the engine's step and the training epoch build no tensor from host values and call nothing that
synchronises with a GPU (a dispatch mode records every operator: ``torch.tensor`` shows as
``lift_fresh``, ``.item()`` / ``float()`` / ``bool()`` as ``_local_scalar_dense``); the engine's
hyperparameters are one tensor updated in place, and where they are formed on the device (a GPU;
forced here on the CPU) the trajectory is the host's, bit for bit. S3: the compile policy. S4:
``--checkpoint-every``.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import bbb.engine.engine as E
import bbb.engine.support as S
import bbb.runs.loop as L
from bbb.distributions import ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.engine import COMPILE_MIN_NUMEL, Engine, counter_noise
from bbb.engine.kernels import counter_keys_tensor, seed_mix
from bbb.errors import TrainingDiverged, TrainingInterrupted, UserError
from bbb.experiments.bandit import Population
from bbb.nn import BayesMLP
from bbb.random import counter_keys
from bbb.runs import TrainConfig, load_checkpoint, train
from bbb.runs.config import resume_conflicts
from testkit import blobs, run_main, tiny_bandit_config, tiny_mushrooms

MIXTURE = ScaleMixturePrior(0.25, 1.0, math.exp(-7))
#: operators that synchronise the host with a GPU, or make a tensor from host values
SYNCING = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten._unique", "aten.unique",
           "aten.is_nonzero", "aten.equal", "aten.lift_fresh")


class OpLog(TorchDispatchMode):
    """Every operator dispatched inside the block, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))

    def syncing(self) -> list[str]:
        return [op for op in self.ops if op.startswith(SYNCING)]


def _net(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return BayesMLP(6, [7, 5], 3, prior=MIXTURE, rho_init=-3.0).to(dtype)


def _data(dtype=torch.float32, n=8):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 6, generator=g, dtype=dtype), torch.randint(0, 3, (n,), generator=g)


def _step(engine, elbo, x, y, i):
    with engine.sampling():
        out = elbo(x, y, batch_index=i % elbo.num_batches)
    engine.zero_grad()
    (out.loss / len(x)).backward()
    engine.step()


# --------------------------------------------------------------------------------------------
# F2: the engine is built after the model moves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("convert", [lambda m: m.to(torch.float64), lambda m: m.to("meta"),
                                     lambda m: m.to(torch.float64).to(torch.float32)],
                         ids=["float64", "meta", "there-and-back"])
def test_a_model_moved_after_its_engine_was_built_is_a_one_line_error(convert):
    net = _net()
    engine = Engine(net, "adam", compile=False)
    convert(net)
    with pytest.raises(UserError) as e:
        with engine.sampling():
            pass
    msg = str(e.value)
    assert "\n" not in msg and "build the Engine after moving the model to its device" in msg, msg


def test_an_engine_built_after_the_move_trains():
    net = _net().to(torch.float64)
    engine = Engine(net, "adam", compile=False)
    x, y = _data(torch.float64)
    _step(engine, ELBO(net, num_batches=2), x, y, 0)
    assert engine._mu.dtype == torch.float64 and all(torch.isfinite(p).all() for p in net.parameters())


# --------------------------------------------------------------------------------------------
# S1: the engine's step
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device_side", [False, True], ids=["host-hp", "device-hp"])
def test_the_engine_step_makes_no_host_tensor_and_no_sync(monkeypatch, device_side):
    if device_side:
        monkeypatch.setattr(E, "HOST_HP_DEVICES", ())
    net = _net()
    engine = Engine(net, "adam", compile=False)
    assert engine._on_device is device_side
    elbo = ELBO(net, num_batches=4)
    x, y = _data()
    _step(engine, elbo, x, y, 0)
    hp, ptr = engine._hp, engine._hp.data_ptr()
    made = []
    real = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: made.append(a) or real(*a, **k))
    for i in range(1, 4):
        before = hp.clone()
        with OpLog() as log:
            _step(engine, elbo, x, y, i)
        assert made == [] and log.syncing() == [], log.syncing()
        assert not torch.equal(hp, before)  # the keys of the next draw, in place
    assert engine._hp is hp and hp.data_ptr() == ptr


def test_device_side_hyperparameters_give_the_host_trajectory_bit_for_bit(monkeypatch):
    """Adam's bias corrections and the noise's keys formed from the counter tensor (a GPU's way)
    against the host's numbers: the same parameters and KL after 12 steps with a learning rate
    that a scheduler halves and a state-dict round trip; hp is rewritten only when lr changes."""
    def run(device_side, opt, momentum, dtype):
        monkeypatch.setattr(E, "HOST_HP_DEVICES", () if device_side else ("cpu",))
        net = _net(dtype)
        engine = Engine(net, opt, lr=0.05, momentum=momentum, seed=3, compile=False)
        writes = []
        real = engine._write_hyper
        monkeypatch.setattr(engine, "_write_hyper", lambda: writes.append(engine.counter) or real())
        sched = torch.optim.lr_scheduler.StepLR(engine, 4, 0.5)
        elbo = ELBO(net, num_batches=4)
        x, y = _data(dtype)
        for i in range(12):
            _step(engine, elbo, x, y, i)
            sched.step()
            if i == 6:
                engine.load_state_dict(engine.state_dict())
        return [p.detach().clone() for p in net.parameters()], engine.kl, writes

    for opt, momentum, dtype in (("adam", 0.0, torch.float32), ("adam", 0.0, torch.float64),
                                 ("sgd", 0.9, torch.float32)):
        host, kl_host, _ = run(False, opt, momentum, dtype)
        dev, kl_dev, writes = run(True, opt, momentum, dtype)
        assert all(torch.equal(a, b) for a, b in zip(host, dev)) and torch.equal(kl_host, kl_dev), (opt, dtype)
        assert writes == [4, 7, 8], writes  # lr changed after steps 4 and 8; the load primes at 7


def test_counter_keys_formed_on_the_device_are_the_hosts():
    counters = [0, 1, 2, 99, (1 << 31) + 5, (1 << 32) + 1, 2**40 + 1, 2**62 + 12345]
    for seed in (0, 7, 2 * 10_007 + 1, 2**40 + 5):
        got = counter_keys_tensor(torch.tensor(seed_mix(seed)), torch.tensor(counters)).tolist()
        assert got == [list(counter_keys(seed, c)) for c in counters]


def test_counter_noise_from_keys_on_the_device_is_the_same_noise():
    net = _net()
    x, _ = _data()
    outs = []
    for keys in (None, counter_keys_tensor(seed_mix(5), torch.tensor(9)),
                 counter_keys_tensor(seed_mix(5), torch.tensor(9)).to(torch.int32)):
        with counter_noise(net, 5, 9, num_samples=2, keys=keys):
            outs.append(net(x.expand(2, *x.shape)))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


# --------------------------------------------------------------------------------------------
# S2: the KL weight on the device, the training epoch without a sync
# --------------------------------------------------------------------------------------------


def test_a_kl_weight_tensor_gives_the_float_weights_loss_and_gradient():
    net = _net()
    x, y = _data()
    elbo = ELBO(net, num_batches=5, kl_weighting="blundell")
    grads = []
    for w in (None, torch.tensor(elbo.kl_weight(3), dtype=torch.float32)):
        with counter_noise(net, 1, 2):
            out = elbo(x, y, batch_index=3 if w is None else None, kl_weight=w)  # (both: an error)
        net.zero_grad()
        out.loss.backward()
        grads.append((out.loss.detach(), [p.grad.clone() for p in net.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0]) and grads[1][0].dtype == torch.float32
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))
    for bad in (torch.ones(2), torch.ones((), dtype=torch.int64)):  # (its value is not read: a sync)
        with pytest.raises(UserError, match="kl_weight"):
            elbo(x, y, kl_weight=bad)


@pytest.mark.parametrize("device_side", [False, True], ids=["host-hp", "device-hp"])
def test_a_training_epoch_calls_nothing_that_synchronises(monkeypatch, device_side):
    if device_side:
        monkeypatch.setattr(E, "HOST_HP_DEVICES", ())
    cfg = TrainConfig(hidden=[16], batch_size=32, lr=1e-2, device="cpu")
    d = blobs()
    model = L.build_model(cfg, 12, 3)
    elbo = ELBO(model, "categorical", num_batches=8, kl_weighting="blundell")
    opt = L.make_optimizer(cfg, model)
    table = L.kl_weight_table(elbo, model, torch.device("cpu"))
    perm = torch.randperm(240, generator=torch.Generator().manual_seed(0))
    L.run_epoch(model, elbo, opt, d["train_x"], d["train_y"], perm, 32, kl_weights=table)  # warm
    with OpLog() as log:
        sums = L.run_epoch(model, elbo, opt, d["train_x"], d["train_y"], perm, 32, kl_weights=table)
    assert log.syncing() == [], sorted(set(log.syncing()))
    assert sums.shape == (3,) and sums.dtype == torch.float64 and bool(torch.isfinite(sums).all())


# --------------------------------------------------------------------------------------------
# S1 in the bandit: the decision noise's keys
# --------------------------------------------------------------------------------------------


def test_the_bandit_reads_its_decision_keys_from_a_device_table():
    ctx, edible = tiny_mushrooms()
    pop = Population(tiny_bandit_config(), [("bbb", 0), ("greedy", 0)], ctx, edible)
    pop._ensure_env(30)
    want = [[k - (1 << 32) if k >= 1 << 31 else k for k in counter_keys(pop.noise_seed + 1, t)] for t in range(30)]
    assert pop.decision_keys.dtype == torch.int32 and pop.decision_keys.tolist() == want
    x = pop.inputs(pop.env_idx[pop._member_seed_pos, 7])
    with_table = pop.values(x, 7)
    pop._env_steps = 0  # values() then forms the keys on the host, as before
    assert torch.equal(with_table, pop.values(x, 7))


def test_a_bandit_step_calls_nothing_that_synchronises():
    ctx, edible = tiny_mushrooms()
    pop = Population(tiny_bandit_config(), [("bbb", 0), ("greedy", 0)], ctx, edible)
    pop._ensure_env(10)
    for t in range(3):
        pop._act_and_learn(t)
    with OpLog() as log:
        pop._act_and_learn(3)
    assert log.syncing() == [], sorted(set(log.syncing()))


# --------------------------------------------------------------------------------------------
# S3: when the engine compiles
# --------------------------------------------------------------------------------------------


def test_cuda_compiles_at_any_size_the_cpu_from_its_threshold(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(S, "has_triton", lambda: True)
    assert S.compile_default(None, cuda, 10, COMPILE_MIN_NUMEL)
    assert not S.compile_default(None, cpu, COMPILE_MIN_NUMEL - 1, COMPILE_MIN_NUMEL)
    assert S.compile_default(None, cpu, COMPILE_MIN_NUMEL, COMPILE_MIN_NUMEL)
    assert not S.compile_default(False, cuda, 10**6, COMPILE_MIN_NUMEL)
    monkeypatch.setattr(S, "has_triton", lambda: False)
    monkeypatch.setattr(S, "_warned_no_triton", False)
    with pytest.warns(RuntimeWarning, match="Triton is not installed"):
        assert not S.compile_default(None, cuda, 10, COMPILE_MIN_NUMEL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not S.compile_default(True, cuda, 10, COMPILE_MIN_NUMEL)  # once a process


# --------------------------------------------------------------------------------------------
# S4: --checkpoint-every
# --------------------------------------------------------------------------------------------


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"hidden": [16], "epochs": 5, "batch_size": 32, "lr": 1e-2, "device": "cpu",
                          "eval_samples": 4, **kw})


QUIET = {"quiet": True, "log": lambda s: None}


def _saves(monkeypatch) -> list[tuple[str, int]]:
    saved: list[tuple[str, int]] = []
    real = L.atomic_torch_save

    def save(path, obj):
        saved.append((Path(path).name, obj["epoch"]))
        real(path, obj)

    monkeypatch.setattr(L, "atomic_torch_save", save)
    return saved


def _same_run(a: Path, b: Path) -> None:
    for name in ("last.pt", "best.pt"):
        x, y = load_checkpoint(a / name), load_checkpoint(b / name)
        assert x["epoch"] == y["epoch"] and x["best"] == y["best"], name
        assert all(torch.equal(v, y["model"][k]) for k, v in x["model"].items()), name
        assert [{k: v for k, v in r.items() if k != "seconds"} for r in x["metrics"]] == \
               [{k: v for k, v in r.items() if k != "seconds"} for r in y["metrics"]]
    assert len((a / "metrics.csv").read_text().splitlines()) == len((b / "metrics.csv").read_text().splitlines())


@pytest.fixture(scope="module")
def every_epoch(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("every") / "run"
    train(_cfg(), run, data=blobs(), **QUIET)
    return run


def test_checkpoint_every_writes_last_pt_every_n_epochs_and_at_the_end(tmp_path, monkeypatch, every_epoch):
    saved = _saves(monkeypatch)
    train(_cfg(checkpoint_every=2), tmp_path / "run", data=blobs(), **QUIET)
    assert [e for name, e in saved if name == "last.pt"] == [0, 2, 4, 5]
    assert all(e in (0, 2, 4, 5) for name, e in saved)  # best.pt goes with a commit
    _same_run(tmp_path / "run", every_epoch)


def test_checkpoint_every_keeps_the_last_epoch_when_interrupted_and_resumes_exactly(tmp_path, monkeypatch,
                                                                                    every_epoch):
    run = tmp_path / "run"
    saved = _saves(monkeypatch)
    real = L.run_epoch
    epochs = iter(range(1, 100))

    def interrupted(*a, **k):
        if next(epochs) == 4:
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(L, "run_epoch", interrupted)
        with pytest.raises(TrainingInterrupted, match="holds epoch 3"):
            train(_cfg(checkpoint_every=3), run, data=blobs(), **QUIET)
    assert [e for name, e in saved if name == "last.pt"] == [0, 3]
    assert load_checkpoint(run / "last.pt")["epoch"] == 3
    train(_cfg(checkpoint_every=3), run, data=blobs(), resume=True, **QUIET)
    _same_run(run, every_epoch)


def test_checkpoint_every_commits_the_held_epoch_on_a_divergence(tmp_path, monkeypatch):
    run = tmp_path / "run"
    real = L.run_epoch
    epochs = iter(range(1, 100))

    def diverging(*a, **k):
        sums = real(*a, **k)
        return sums * math.nan if next(epochs) == 2 else sums

    monkeypatch.setattr(L, "run_epoch", diverging)
    with pytest.raises(TrainingDiverged, match="keeps epoch 1"):
        train(_cfg(checkpoint_every=5), run, data=blobs(), **QUIET)
    assert load_checkpoint(run / "last.pt")["epoch"] == 1


def test_checkpoint_every_is_a_validated_setting_that_may_change_on_resume(capsys):
    with pytest.raises(UserError, match="checkpoint_every"):  # (the command line: --checkpoint-every)
        _cfg(checkpoint_every=0)
    assert resume_conflicts(_cfg().to_dict(), _cfg(checkpoint_every=4)) == []
    rc, out, err = run_main(capsys, "train", "--help")
    assert rc == 0 and "--checkpoint-every" in out
