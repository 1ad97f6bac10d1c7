"""Helpers several test modules share: tiny learnable data and the command line run in-process."""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import bbb.engine.engine as engine_module
from bbb.cli import main
from bbb.experiments.bandit import BanditConfig, Population


def blobs(n_train: int = 240, n_val: int = 60, n_test: int = 60, d: int = 12, c: int = 3, spread: float = 2.0,
          seed: int = 0) -> dict[str, torch.Tensor]:
    """Gaussian blobs (``c`` classes in ``d`` features, centres ``spread`` x N(0, 1) apart),
    split into train/val/test tensors as ``train(data=...)`` takes them. The defaults are
    learnable in a couple of epochs by a 16-unit network; a small ``spread`` makes the classes
    overlap."""
    g = torch.Generator().manual_seed(seed)
    centers = spread * torch.randn(c, d, generator=g)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, c, (n,), generator=g)
        return centers[y] + torch.randn(n, d, generator=g), y

    (a, b), (e, f), (h, i) = make(n_train), make(n_val), make(n_test)
    return {"train_x": a, "train_y": b, "val_x": e, "val_y": f, "test_x": h, "test_y": i}


def image_sets() -> dict[str, dict[str, torch.Tensor]]:
    """{dataset: its tensors}: :func:`blobs` standing in for MNIST, and noise of the same shapes
    for Fashion-MNIST (the other set of ``bbb ood``), as ``bbb.runs.model.load_data`` returns them."""
    data = blobs()
    g = torch.Generator().manual_seed(1)
    return {"mnist": data, "fashion-mnist": {k: (0.3 * torch.randn(v.shape, generator=g) if k.endswith("_x") else v)
                                             for k, v in data.items()}}


def noisy_table(path: Path, n: int = 200) -> Path:
    """A CSV of houses (x1, x2, colour, price) whose price noise (sd 3) is most of its spread: no
    share of the predictions can have an RMSE near half the error of all of them."""
    import numpy as np

    rng = np.random.default_rng(0)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "colour", "price"])
        for i in range(n):
            x1, x2 = rng.normal(), rng.normal()
            w.writerow([f"{x1:.5f}", f"{x2:.5f}", ["red", "blue"][i % 2], f"{20 + x1 + 3 * rng.normal():.4f}"])
    return path


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``bbb ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's --help and its own errors
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


# -- bbb reproduce mnist (tests/applications/experiments/test_reproduce_mnist*.py) ------------

D_IN, N_CLASSES = 16, 4
SILENT = {"log": lambda s: None}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_one_line_error(rc: int, err: str, *words: str) -> str:
    """A command's refusal: exit 2, one stderr line (``bbb CMD: error: ...``) that names ``words``,
    no traceback; returns the line."""
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, err)
    return lines[0]


def blobs4(seed: int = 0) -> dict[str, torch.Tensor]:
    """Overlapping Gaussian blobs, 4 classes in 16 features: after one epoch the error is
    neither 0 nor chance."""
    return blobs(256, 128, 128, d=D_IN, c=N_CLASSES, spread=0.6, seed=seed)


@contextlib.contextmanager
def eager_kernels() -> Iterator[None]:
    """The eager BBB kernels: the pipeline is under test here, and torch.compile's one-off
    compilation would cost more than the whole smoke run. The engines made inside take
    ``compile=None``'s eager choice at every size (``bbb.engine.engine.COMPILE_MIN_NUMEL``; on the
    CPU the 2x400+ networks of a reproduction would compile otherwise). Compiled kernels equal to
    the eager ones: tests/core/test_engine.py."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine_module, "COMPILE_MIN_NUMEL", sys.maxsize)
        yield


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def summary(out: Path, run: str) -> dict[str, Any]:
    return json.loads((out / "runs" / run / "summary.json").read_text())


def reference_hash(j: int, keys: tuple[int, int, int]) -> tuple[int, int]:
    """bbb.random's counter hash in Python's exact integers (the definition; no tensor arithmetic)."""
    def mix(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
        return x ^ (x >> 16)
    a = mix((j + keys[0]) & 0xFFFFFFFF)
    return mix(a ^ keys[1]) >> 8, mix(a ^ keys[2]) >> 8


def tiny_mushrooms(n: int = 40, groups: int = 3, values: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot contexts of ``groups`` attributes with ``values`` values each; edibility a rule."""
    g = torch.Generator().manual_seed(seed)
    attr = torch.randint(0, values, (n, groups), generator=g)
    ctx = torch.zeros(n, groups * values)
    ctx[torch.arange(n).unsqueeze(1), attr + values * torch.arange(groups)] = 1.0
    edible = attr[:, 0] != 0
    return ctx, edible


def filled_bandit_population(cfg: BanditConfig, members, ctx, edible, steps: int = 20, **kw: Any) -> Population:
    """A bandit Population whose buffers hold ``steps`` interactions (acting without learning)."""
    pop = Population(cfg, members, ctx, edible, **kw)
    pop._ensure_env(steps)
    u = cfg.updates_per_step
    cfg.updates_per_step = 0
    for t in range(steps):
        pop._act_and_learn(t)
    cfg.updates_per_step = u
    return pop


def stopped_and_uninterrupted_bandit(cfg: BanditConfig, members, ctx, edible, checkpoint, steps: int,
                                     stop_at: int) -> tuple[Population, Population]:
    """A bandit Population stopped after ``stop_at`` of ``steps`` interactions (its checkpoint saved),
    loaded into a new one and run to the end; and one run to the end without a stop."""
    calls = iter(range(10 * steps))
    pop = Population(cfg, members, ctx, edible)
    assert pop.run(steps, checkpoint, stop=lambda: next(calls) >= stop_at) is False
    assert pop.step == stop_at and checkpoint.exists()
    resumed = Population(cfg, members, ctx, edible)
    assert resumed.load(checkpoint) and resumed.step == stop_at
    assert resumed.run(steps, checkpoint) is True
    whole = Population(cfg, members, ctx, edible)
    whole.run(steps)
    return resumed, whole


def tiny_bandit_config(**kw: Any) -> BanditConfig:
    """A bandit config small enough for a test: two seeds, a 8x6 network, 120 steps."""
    base = dict(steps=120, seeds=(0, 1), updates_per_step=2, batch_size=8, buffer=32,
                hidden=(8, 6), log_every=40, quiet=True, checkpoint_every=1e9)
    base.update(kw)
    return BanditConfig(**base)


@contextlib.contextmanager
def two_rank_process(rank: int, port: int, out: str) -> Iterator[dict[str, Any]]:
    """In a process :func:`run_two_ranks` spawned: one CPU thread, the gloo group of 2 on ``port``;
    yields the dict to fill, saved to ``out/rank{rank}.pt`` on the way out (with ``"error"`` where
    the block raised) before the group is destroyed."""
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    res: dict[str, Any] = {}
    try:
        yield res
    except BaseException as e:
        res["error"] = repr(e)
        raise
    finally:
        torch.save(res, os.path.join(out, f"rank{rank}.pt"))
        dist.destroy_process_group()


def run_two_ranks(worker: Any, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Spawn ``worker(rank, port, out)`` on 2 processes (torch.distributed over gloo on the CPU; each
    saves a dict to ``out/rank{rank}.pt``); both dicts, after checking that neither holds an
    ``"error"``. Skips where torch has no distributed support."""
    import socket

    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available():
        pytest.skip("torch without distributed support")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert "error" not in r0 and "error" not in r1, (r0.get("error"), r1.get("error"))
    return r0, r1
