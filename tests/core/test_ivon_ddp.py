"""bbb.IVON under DistributedDataParallel (gloo, 2 processes on the CPU): the ranks start apart
(their own initial weights and noise seeds) and end identical, equal to one process stepping on the
mean of their losses; clipping through a mu's ``.grad`` clips the averaged gradient; DDP without
``find_unused_parameters`` / ``static_graph`` is a one-line error; several processes training
without DDP are warned once."""

from __future__ import annotations

import os
import socket
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.errors import UserError
from bbb.ivon import IVON

STEPS = 4


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return bbb.bayesianize(nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3))).double()


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randint(0, 3, (6,), generator=g)


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _train(net: nn.Module, model: nn.Module, opt: IVON, batches, clip: bool) -> torch.Tensor:
    for x, y in batches:
        with opt.sampling():
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
        opt.step()
    return _flat(net)


def _worker(rank: int, port: int, out: str) -> None:  # pragma: no cover - runs in the spawned processes
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    res: dict = {}
    try:
        for variant, clip in (("unused", False), ("static", True)):
            net = _net(seed=rank)  # the ranks start apart, with their own noise seeds
            opt = IVON(net, lr=0.1, ess=50, hess_init=0.5, seed=10 + rank, compile=False)
            model = DDP(net, find_unused_parameters=True) if variant == "unused" else DDP(net, static_graph=True)
            res[variant] = _train(net, model, opt, [_batch(i, rank) for i in range(STEPS)], clip)
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
    except BaseException as e:
        res["error"] = repr(e)
        raise
    finally:
        torch.save(res, os.path.join(out, f"rank{rank}.pt"))
        dist.destroy_process_group()


def _reference(clip: bool) -> torch.Tensor:
    """One process from rank 0's start and seed: each step on both ranks' rows (the mean of their
    mean losses, the batches being the same size)."""
    net = _net(seed=0)
    opt = IVON(net, lr=0.1, ess=50, hess_init=0.5, seed=10, compile=False)
    batches = []
    for i in range(STEPS):
        (x0, y0), (x1, y1) = _batch(i, 0), _batch(i, 1)
        batches.append((torch.cat([x0, x1]), torch.cat([y0, y1])))
    return _train(net, net, opt, batches, clip)


def test_ivon_ranks_stay_identical_and_equal_the_averaged_gradient(tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available():
        pytest.skip("torch without distributed support")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert "error" not in r0 and "error" not in r1, (r0.get("error"), r1.get("error"))
    for variant, clip in (("unused", False), ("static", True)):
        assert r0[variant + " seed"] == r1[variant + " seed"] == 10  # the first rank's
        assert torch.equal(r0[variant], r1[variant]), variant
        torch.testing.assert_close(r0[variant], _reference(clip), rtol=0, atol=1e-9)
    assert any("bbb.IVON" in m and "DistributedDataParallel" in m for m in r0["warned"]), r0["warned"]
