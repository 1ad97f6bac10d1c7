"""A grid as one population on the GPU (issue 74, item 3): each member its own prior and learning
rate (``MemberPrior``, ``Engine(member_lr_scale=...)``, the table the compiled kernel indexes by each
weight's member). Member j ends where member j of a population that shares its settings ends, and
the grid replayed from CUDA graphs ends where it ends eagerly (to the float32 tolerance of
tests/core/test_engine.py; whether bit for bit is printed). tests/core/test_member_settings.py
checks the same on the CPU, bit for bit."""

from __future__ import annotations

import math

import torch
from cudakit import F32, QUIET

from bbb.runs import TrainConfig, load_checkpoint
from bbb.runs.population import train_population
from testkit import blobs

N, B = 240, 32
OWN = {"lr": 2e-2, "pi": 0.75, "sigma2": math.exp(-3)}


def _cfg(seed: int, graphed: bool, **kw) -> TrainConfig:
    base = {"method": "bbb", "prior": "mixture", "sigma2": math.exp(-2), "pi": 0.5, "hidden": [32, 32], "epochs": 3,
            "batch_size": B, "lr": 1e-2, "device": "cuda", "seed": seed, "cuda_graph": graphed}
    return TrainConfig(**{**base, **kw})


def _train(tmp, name: str, cfgs: list[TrainConfig]) -> list[dict]:
    dirs = [tmp / name / f"m{j}" for j in range(len(cfgs))]
    train_population(cfgs, dirs, tmp / name / "pop", data=blobs(N), **QUIET)
    return [load_checkpoint(d / "last.pt")["model"] for d in dirs]


def test_a_grid_member_trains_as_among_members_of_its_own_settings_eager_and_replayed(tmp_path):
    grids = {}
    for graphed in (False, True):
        grid = grids[graphed] = _train(tmp_path, f"grid-{graphed}", [_cfg(0, graphed), _cfg(1, graphed, **OWN),
                                                                     _cfg(2, graphed, lr=5e-3, sigma1=0.5)])
        same = _train(tmp_path, f"same-{graphed}", [_cfg(s, graphed, **OWN) for s in (0, 1, 2)])
        exact = True
        for k in grid[1]:
            torch.testing.assert_close(grid[1][k], same[1][k], **F32)
            exact = exact and torch.equal(grid[1][k], same[1][k])
        assert any(not torch.equal(grid[0][k], same[0][k]) for k in grid[0])  # member 0 at its own settings
        print(f"cuda_graph={graphed}: member 1 of the grid, bit for bit:", exact)
    for a, b in zip(grids[False], grids[True]):  # the grid replayed from CUDA graphs ends as it does eagerly
        for k in a:
            torch.testing.assert_close(a[k], b[k], **F32)
