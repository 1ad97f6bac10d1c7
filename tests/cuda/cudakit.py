"""Helpers of the GPU tests (torch and bbb only: the GPU machine has no test extras)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from bbb.distributions import ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.experiments.bandit import BanditConfig
from bbb.nn import BayesMLP
from bbb.runs import TrainConfig

MIXTURE = ScaleMixturePrior(0.25, 1.0, math.exp(-7))
#: a mixture whose narrow component is wide enough for a multi-step float32 comparison (with
#: sigma2 = e^-7 the spike's gradient makes tiny runs chaotic: see tests/test_engine.py)
MILD = ScaleMixturePrior(0.5, 1.0, math.exp(-2))
QUIET: dict[str, Any] = {"quiet": True, "log": lambda s: None}
#: the stated tolerance of a float32 trajectory against another (tests/test_engine.py)
F32 = {"rtol": 1e-4, "atol": 2e-5}


def reference_hash(j: int, keys: tuple[int, int, int]) -> tuple[int, int]:
    """bbb.random's hash in Python's exact integers (the definition, as tests/test_random.py)."""
    def mix(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
        return x ^ (x >> 16)
    a = mix((j + keys[0]) & 0xFFFFFFFF)
    return mix(a ^ keys[1]) >> 8, mix(a ^ keys[2]) >> 8


def blobs(n_train: int = 240, n_val: int = 60, n_test: int = 60, d: int = 12, c: int = 3, spread: float = 2.0,
          seed: int = 0) -> dict[str, torch.Tensor]:
    """Gaussian blobs split into the tensors ``bbb.runs.train(data=...)`` takes (as tests/testkit.py)."""
    g = torch.Generator().manual_seed(seed)
    centers = spread * torch.randn(c, d, generator=g)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, c, (n,), generator=g)
        return centers[y] + torch.randn(n, d, generator=g), y

    (a, b), (e, f), (h, i) = make(n_train), make(n_val), make(n_test)
    return {"train_x": a, "train_y": b, "val_x": e, "val_y": f, "test_x": h, "test_y": i}


def tiny_cfg(**kw: Any) -> TrainConfig:
    base = {"hidden": [16], "epochs": 3, "batch_size": 32, "lr": 1e-2, "device": "cuda", "eval_samples": 4}
    return TrainConfig(**{**base, **kw})


def net(device: torch.device | str, dtype: torch.dtype = torch.float32, prior: Any = MIXTURE,
        sizes: tuple[int, list[int], int] = (6, [7, 5], 3), seed: int = 0, **kw: Any) -> BayesMLP:
    """A BayesMLP with the same initial weights on every device (drawn on the CPU, then moved)."""
    torch.manual_seed(seed)
    return BayesMLP(*sizes, prior=prior, rho_init=-3.0, **kw).to(device, dtype)


def data(device: torch.device | str, dtype: torch.dtype = torch.float32, n: int = 8, d: int = 6,
         c: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(n, d, generator=g, dtype=dtype), torch.randint(0, c, (n,), generator=g)
    return x.to(device), y.to(device)


def engine_step(engine: Any, elbo: ELBO, x: torch.Tensor, y: torch.Tensor, i: int) -> torch.Tensor:
    """One step under the engine (the loop of its docstring); returns the loss, detached."""
    with engine.sampling():
        out = elbo(x, y, batch_index=i % elbo.num_batches)
    engine.zero_grad()
    (out.loss / len(x)).backward()
    engine.step()
    return out.loss.detach()


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().cpu().clone() for p in model.parameters()]


def tiny_mushrooms(n: int = 40, groups: int = 3, values: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot contexts of ``groups`` attributes with ``values`` values each; edibility a rule (as tests/testkit.py)."""
    g = torch.Generator().manual_seed(seed)
    attr = torch.randint(0, values, (n, groups), generator=g)
    ctx = torch.zeros(n, groups * values)
    ctx[torch.arange(n).unsqueeze(1), attr + values * torch.arange(groups)] = 1.0
    edible = attr[:, 0] != 0
    return ctx, edible


def tiny_bandit_config(**kw: Any) -> BanditConfig:
    """A bandit config small enough for a test: two seeds, a 8x6 network, 120 steps."""
    base: dict[str, Any] = dict(steps=120, seeds=(0, 1), updates_per_step=2, batch_size=8, buffer=32,
                                hidden=(8, 6), log_every=40, quiet=True, checkpoint_every=1e9)
    base.update(kw)
    return BanditConfig(**base)


@contextlib.contextmanager
def sync_errors() -> Iterator[None]:
    """Inside the block any host-device synchronisation is an error (torch's sync debug mode)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)
