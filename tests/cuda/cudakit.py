"""Helpers of the GPU tests; the data and reference helpers they share with the CPU tests come from tests/testkit.py."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from bbb.distributions import ScaleMixturePrior
from bbb.elbo import ELBO
from bbb.nn import BayesMLP
from bbb.runs import TrainConfig

MIXTURE = ScaleMixturePrior(0.25, 1.0, math.exp(-7))
#: a mixture whose narrow component is wide enough for a multi-step float32 comparison (with
#: sigma2 = e^-7 the spike's gradient makes tiny runs chaotic: see tests/core/test_engine.py)
MILD = ScaleMixturePrior(0.5, 1.0, math.exp(-2))
QUIET: dict[str, Any] = {"quiet": True, "log": lambda s: None}
#: the stated tolerance of a float32 trajectory against another (tests/core/test_engine.py)
F32 = {"rtol": 1e-4, "atol": 2e-5}


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


@contextlib.contextmanager
def sync_errors() -> Iterator[None]:
    """Inside the block any host-device synchronisation is an error (torch's sync debug mode)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)
