"""bbb.runs.cuda_graph.GraphedEpoch without capture (the CPU): its device-indexed step (the
minibatch and KL weight chosen on the device, the same code for every index) trains exactly as
run_epoch, bit for bit, over epochs with a last smaller minibatch and a learning-rate change;
the engine's capture API refuses what it cannot capture, in one line. The capture itself runs in
tests/cuda/test_cuda_graph.py."""

from __future__ import annotations

import math

import pytest
import torch

from bbb.distributions import ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.engine import Engine
from bbb.errors import UserError
from bbb.nn import BayesMLP
from bbb.runs import kl_weight_table, run_epoch, training_step
from bbb.runs.cuda_graph import GraphedEpoch

N, D, C, B = 200, 10, 3, 32  # 6 full minibatches and one of 8


def _setup(k: int = 1):
    torch.manual_seed(0)
    net = BayesMLP(D, [16, 16], C, prior=ScaleMixturePrior(0.25, 1.0, math.exp(-7)))
    elbo = ELBO(net, "categorical", num_batches=math.ceil(N / B), kl_weighting="blundell", num_samples=k, kl="mc")
    opt = Engine(elbo, "adam", lr=1e-2, seed=4, compile=False)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return net, elbo, opt, sched


@pytest.mark.parametrize("k", [1, 2])
def test_the_device_indexed_steps_equal_run_epoch_bit_for_bit(k):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(N, D, generator=g), torch.randint(0, C, (N,), generator=g)
    results = []
    for graphed in (False, True):
        net, elbo, opt, sched = _setup(k)
        table = kl_weight_table(elbo, net, x.device)
        epoch = GraphedEpoch(net, elbo, opt, x, y, B, table, step=training_step, capture=False) if graphed else None
        shuffle = torch.Generator().manual_seed(2)
        sums = []
        for _ in range(3):
            perm = torch.randperm(N, generator=shuffle)
            s = epoch.run(perm) if epoch is not None else run_epoch(net, elbo, opt, x, y, perm, B, kl_weights=table)
            sums.append(s.clone())
            sched.step()
        results.append(([p.detach().clone() for p in net.parameters()], sums, opt.state_dict()))
    (pa, sa, oa), (pb, sb, ob) = results
    assert all(torch.equal(u, v) for u, v in zip(pa, pb))
    assert all(torch.equal(u, v) for u, v in zip(sa, sb))
    assert (oa["step"], oa["counter"]) == (ob["step"], ob["counter"]) == (21, 21)


def test_the_deterministic_mlps_device_indexed_steps_equal_run_epoch_bit_for_bit():
    """sgd/dropout's step (torch.optim's Adam, no ELBO, dropout's random masks): the same."""
    from bbb.runs import TrainConfig, build_model, make_optimizer

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(N, D, generator=g), torch.randint(0, C, (N,), generator=g)
    cfg = TrainConfig(method="dropout", hidden=[16, 16], lr=1e-2, device="cpu")
    results = []
    for graphed in (False, True):
        torch.manual_seed(0)
        net = build_model(cfg, D, C)
        opt = make_optimizer(cfg, net)
        epoch = GraphedEpoch(net, None, opt, x, y, B, None, step=training_step, capture=False) if graphed else None
        shuffle = torch.Generator().manual_seed(2)
        for _ in range(2):
            perm = torch.randperm(N, generator=shuffle)
            s = epoch.run(perm).clone() if epoch is not None else run_epoch(net, None, opt, x, y, perm, B)
        results.append(([p.detach().clone() for p in net.parameters()], s))
    (pa, sa), (pb, sb) = results
    assert all(torch.equal(u, v) for u, v in zip(pa, pb)) and torch.equal(sa, sb)


def test_the_settings_it_refuses_in_one_line():
    from bbb.runs import TrainConfig

    with pytest.raises(UserError, match="IVON"):
        TrainConfig(method="ivon", cuda_graph=True)
    with pytest.raises(UserError, match="bf16"):
        TrainConfig(method="bbb", cuda_graph=True, bf16=True)


def test_the_engine_refuses_to_capture_what_it_cannot_in_one_line():
    net, elbo, opt, _ = _setup()
    with pytest.raises(UserError, match="formed on the host") as e:
        with opt.capturing(opt.parity):
            pass
    assert "\n" not in str(e.value)
    plain = Engine(elbo, "adam", lr=1e-2, fused=False)
    with pytest.raises(UserError, match="plain path"):
        with plain.capturing(0):
            pass
