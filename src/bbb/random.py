"""Counter-based Gaussian noise: a run's weight noise is a pure function of (seed, counter, index).

``normal(n, seed, counter)`` returns n standard normal numbers. Nothing but the two integers
``seed`` and ``counter`` is state, so a run is reproducible from its seed, independent of the
number of threads, and resumes bit-exactly from a checkpoint that stores the counter. The same
function serves the training engine (:mod:`bbb.engine`, where it runs compiled) and the plain
autograd path (eager), so the two can be compared trajectory for trajectory.

The construction: the host mixes (seed, counter) with SplitMix64 into three 32-bit keys; each
pair index j gets two 24-bit uniforms from a 32-bit integer hash of (j, keys), and Box-Muller
turns them into two normals, written to positions j and j + n/2 (n is rounded up to an even
count and the last number dropped). The hash uses only 64-bit integer arithmetic on values
below 2^32 multiplied by constants below 2^27, so no product overflows (no undefined behaviour
in generated C++). Uniforms are (h + 1/2) / 2^24, so |z| <= sqrt(2 ln 2^25) ~ 5.9; the
statistical checks (moments, lag correlation, tail quantiles) are in tests/test_random.py.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["counter_keys", "normal", "normal_pairs", "fill_normal_"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_HASH_MUL = 0x45D9F3B  # < 2^27: x * _HASH_MUL < 2^59 for x < 2^32
_TWO_PI_24 = 2.0 * math.pi / 16777216.0
_INV_24 = 1.0 / 16777216.0


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def counter_keys(seed: int, counter: int) -> tuple[int, int, int]:
    """The three 32-bit keys of draw number ``counter`` of a run seeded with ``seed``."""
    if seed < 0 or counter < 0:
        raise ValueError(f"seed and counter must be >= 0, got {seed}, {counter}")
    s = _splitmix64(_splitmix64(seed & _M64) ^ (counter & _M64))
    t = _splitmix64(s)
    return s & _M32, s >> 32, t & _M32


def _mix32(x: Tensor) -> Tensor:
    x = x ^ (x >> 16)
    x = (x * _HASH_MUL) & _M32
    x = x ^ (x >> 16)
    x = (x * _HASH_MUL) & _M32
    return x ^ (x >> 16)


def normal_pairs(index: Tensor, keys: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """Two independent standard normals per pair index (an int64 tensor of values < 2^32).

    ``keys`` is an int64 tensor holding :func:`counter_keys`. Pure tensor arithmetic, so it runs
    eagerly or inside ``torch.compile`` (where it becomes one vectorised loop).
    """
    a = _mix32((index + keys[0]) & _M32)
    h1 = _mix32(a ^ keys[1])
    h2 = _mix32(a ^ keys[2])
    u1 = ((h1 >> 8).to(dtype) + 0.5) * _INV_24
    theta = (h2 >> 8).to(dtype) * _TWO_PI_24
    r = torch.sqrt(-2.0 * torch.log(u1))
    return r * torch.cos(theta), r * torch.sin(theta)


def fill_normal_(out: Tensor, index: Tensor, keys: Tensor) -> None:
    """Fill ``out`` of shape (2, H) with the normals of pair indices ``index`` = arange(H)."""
    z0, z1 = normal_pairs(index, keys, out.dtype)
    out.copy_(torch.stack([z0, z1]))


def normal(n: int, seed: int, counter: int, *, device: torch.device | str | None = None,
           dtype: torch.dtype = torch.float32) -> Tensor:
    """``n`` standard normals, a pure function of (seed, counter): the engine's noise, eagerly."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    half = (n + 1) // 2
    index = torch.arange(half, device=device, dtype=torch.int64)
    keys = torch.tensor(counter_keys(seed, counter), device=device, dtype=torch.int64)
    buf = torch.empty((2, half), device=device, dtype=dtype)
    fill_normal_(buf, index, keys)
    return buf.view(-1)[:n]
