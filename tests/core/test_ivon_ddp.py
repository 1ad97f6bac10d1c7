"""bbb.IVON under DistributedDataParallel (gloo, 2 processes on the CPU): the ranks start apart
(their own initial weights and noise seeds) and end identical, equal to one process stepping on the
mean of their losses; clipping through a mu's ``.grad`` clips the averaged gradient; DDP without
``find_unused_parameters`` / ``static_graph`` is a one-line error; several processes training
without DDP are warned once."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.errors import UserError
from bbb.ivon import IVON
from testkit import run_two_ranks, two_rank_process

STEPS = 4


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return bbb.bayesianize(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3))).double()


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randint(0, 3, (6,), generator=g)


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _train(net: nn.Module, model: nn.Module, opt: IVON, batches, clip: bool, skipped=None) -> torch.Tensor:
    for step, (x, y) in enumerate(batches):
        if skipped is not None:  # a batch whose step is skipped after clipping (its average discarded)
            with opt.sampling():
                loss = F.cross_entropy(model(skipped[step][0]), skipped[step][1])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
            opt.zero_grad()
        with opt.sampling():
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
        opt.step()
    return _flat(net)


def _worker(rank: int, port: int, out: str) -> None:  # pragma: no cover - runs in the spawned processes
    from torch.nn.parallel import DistributedDataParallel as DDP

    with two_rank_process(rank, port, out) as res:
        for variant, clip, skip in (("unused", False, False), ("static", True, False), ("skipped", True, True)):
            net = _net(seed=rank)  # the ranks start apart, with their own noise seeds
            opt = IVON(net, lr=0.1, ess=50, hess_init=0.5, seed=10 + rank, compile=False)
            model = DDP(net, find_unused_parameters=True) if variant == "unused" else DDP(net, static_graph=True)
            skipped = [_batch(i + 50, rank) for i in range(STEPS)] if skip else None
            res[variant] = _train(net, model, opt, [_batch(i, rank) for i in range(STEPS)], clip, skipped)
            res[variant + " seed"] = opt.seed
        net = _net(seed=0)
        opt = IVON(net, lr=0.1, ess=50, compile=False)
        with pytest.raises(UserError, match="bbb.IVON needs find_unused_parameters"), opt.sampling():
            DDP(net)(_batch(0, rank)[0])
        net = _net(seed=0)
        opt = IVON(net, lr=0.1, ess=50, seed=0, compile=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _train(net, net, opt, [_batch(0, rank)], False)
        res["warned"] = [str(w.message) for w in caught]


def _both(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    (x0, y0), (x1, y1) = _batch(i, 0), _batch(i, 1)
    return torch.cat([x0, x1]), torch.cat([y0, y1])


def _reference(clip: bool, skip: bool) -> torch.Tensor:
    """One process from rank 0's start and seed: each step on both ranks' rows (the mean of their
    mean losses, the batches being the same size)."""
    net = _net(seed=0)
    opt = IVON(net, lr=0.1, ess=50, hess_init=0.5, seed=10, compile=False)
    skipped = [_both(i + 50) for i in range(STEPS)] if skip else None
    return _train(net, net, opt, [_both(i) for i in range(STEPS)], clip, skipped)


def test_ivon_ranks_stay_identical_and_equal_the_averaged_gradient(tmp_path):
    """Also: a batch averaged for clipping, then discarded by zero_grad (its step skipped), leaves
    the next backward's gradient to be averaged again."""
    r0, r1 = run_two_ranks(_worker, tmp_path)
    for variant, clip, skip in (("unused", False, False), ("static", True, False), ("skipped", True, True)):
        assert r0[variant + " seed"] == r1[variant + " seed"] == 10  # the first rank's
        assert torch.equal(r0[variant], r1[variant]), variant
        torch.testing.assert_close(r0[variant], _reference(clip, skip), rtol=0, atol=1e-9)
    assert any("bbb.IVON" in m and "DistributedDataParallel" in m for m in r0["warned"]), r0["warned"]
