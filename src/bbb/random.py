"""Counter-based Gaussian noise: a run's weight noise is a pure function of (seed, counter, index).

``normal(n, seed, counter)`` returns n standard normal numbers. Nothing but the two integers
``seed`` and ``counter`` is state, so a run is reproducible from its seed, independent of the
number of threads, and resumes bit-exactly from a checkpoint that stores the counter. The same
function serves the training engine (:mod:`bbb.engine`, where it runs compiled) and the plain
autograd path (eager), so the two can be compared trajectory for trajectory.

The construction: the host mixes (seed, counter) with SplitMix64 into three 32-bit keys; each
pair index j gets two 24-bit uniforms from a 32-bit integer hash of (j, keys), and Box-Muller
turns them into two normals, written to positions j and j + n/2 (n is rounded up to an even
count and the last number dropped). The hash is arithmetic modulo 2^32 and runs on int32
tensors (the engine's and :func:`normal`'s) or int64 ones, with the same integers: int32 sums
and products wrap by themselves (two's complement; the compiled kernels multiply with
vectorised wrapping instructions) and right shifts are masked to be logical; on int64 the
values stay below 2^32, are multiplied by a constant below 2^27 (no overflow) and masked.
int32 is the fast form where the processor has no 64-bit vector multiply (AVX2). Eagerly on the
CPU the same hash runs in numpy's uint32 (:func:`hash_pairs`), whose integer ops are vectorised
even where torch's are not (``ATEN_CPU_CAPABILITY=default``). Uniforms are
(h + 1/2) / 2^24, so |z| <= sqrt(2 ln 2^25) ~ 5.9; the statistical checks (moments, lag
correlation, tail quantiles) and the check against a pure-Python hash are in
tests/core/test_random.py.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["counter_keys", "hash_pairs", "key_tensor", "normal", "normal_pairs", "fill_normal_", "normal_into_"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_HASH_MUL = 0x45D9F3B  # < 2^27: x * _HASH_MUL < 2^59 for x < 2^32
_HASH_MUL_U32 = np.uint32(_HASH_MUL)
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


def key_tensor(seed: int, counter: int, *, dtype: torch.dtype = torch.int32,
               device: torch.device | str | None = None) -> Tensor:
    """:func:`counter_keys` as a tensor for :func:`normal_pairs`: int32 (two's complement) or int64."""
    keys: tuple[int, ...] = counter_keys(seed, counter)
    if dtype == torch.int32:
        keys = tuple(k - (1 << 32) if k >= 1 << 31 else k for k in keys)
    elif dtype != torch.int64:
        raise ValueError(f"dtype must be torch.int32 or torch.int64, got {dtype}")
    return torch.tensor(keys, dtype=dtype, device=device)


def _wrap(x: Tensor) -> Tensor:
    """``x`` modulo 2^32: int32 arithmetic wraps by itself, int64 is masked."""
    return x if x.dtype == torch.int32 else x & _M32


def _shr(x: Tensor, n: int) -> Tensor:
    """The logical right shift of 32-bit values by ``n`` (int32's ``>>`` is arithmetic)."""
    return (x >> n) & ((1 << (32 - n)) - 1) if x.dtype == torch.int32 else x >> n


def _mix32(x: Tensor) -> Tensor:
    x = x ^ _shr(x, 16)
    x = _wrap(x * _HASH_MUL)
    x = x ^ _shr(x, 16)
    x = _wrap(x * _HASH_MUL)
    return x ^ _shr(x, 16)


def _mix32_numpy(x: np.ndarray) -> np.ndarray:
    """:func:`_mix32` on uint32 in place (numpy's uint32 products wrap, its shifts are logical)."""
    x ^= x >> 16
    x *= _HASH_MUL_U32
    x ^= x >> 16
    x *= _HASH_MUL_U32
    x ^= x >> 16
    return x


def _hash_pairs_numpy(index: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`hash_pairs` on the CPU outside ``torch.compile``: the same integers in numpy's uint32,
    in place, vectorised whatever ``ATEN_CPU_CAPABILITY`` says (torch's integer ops are not under
    ``default``; measured in docs/performance.md). The results are written into tensors torch
    allocates (no tensor made from a host array: the engine's GPU-readiness checks hold on the CPU)."""
    def u32(t: Tensor) -> np.ndarray:
        a = t.numpy()
        return a.view(np.uint32) if t.dtype == torch.int32 else a.astype(np.uint32)

    shape = torch.broadcast_shapes(index.shape, keys.shape[1:])
    h1, h2 = torch.empty(shape, dtype=index.dtype), torch.empty(shape, dtype=index.dtype)
    narrow = index.dtype == torch.int32
    a = h2.numpy().view(np.uint32) if narrow else np.empty(shape, np.uint32)
    b = h1.numpy().view(np.uint32) if narrow else np.empty(shape, np.uint32)
    i, k = u32(index), u32(keys)
    _mix32_numpy(np.add(i, k[0], out=a))
    _mix32_numpy(np.bitwise_xor(a, k[1], out=b))
    _mix32_numpy(np.bitwise_xor(a, k[2], out=a))
    a >>= 8
    b >>= 8
    if not narrow:
        np.copyto(h1.numpy(), b)
        np.copyto(h2.numpy(), a)
    return h1, h2


def hash_pairs(index: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """The two 24-bit integers behind pair ``index``'s normals (see :func:`normal_pairs`); on the
    CPU outside ``torch.compile`` computed by numpy (the same integers)."""
    if (index.device.type == keys.device.type == "cpu" and type(index) is type(keys) is Tensor
            and index.dtype == keys.dtype and not torch.compiler.is_compiling()):
        return _hash_pairs_numpy(index, keys)
    a = _mix32(_wrap(index + keys[0]))
    return _shr(_mix32(a ^ keys[1]), 8), _shr(_mix32(a ^ keys[2]), 8)


def normal_pairs(index: Tensor, keys: Tensor, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """Two independent standard normals per pair index.

    ``index`` holds pair indices (below 2^31 in int32, 2^32 in int64) and ``keys``
    :func:`key_tensor`, both int32 or both int64 (the same numbers either way). Pure tensor
    arithmetic, so it runs eagerly or inside ``torch.compile`` (where it becomes one vectorised
    loop).
    """
    h1, h2 = hash_pairs(index, keys)
    # float16 in float32, then rounded: its own u1 underflowed to 0 (an infinite radius) or its hash
    # overflowed, so its noise was inf and NaN
    work = torch.float32 if dtype == torch.float16 else dtype
    u1 = (h1.to(work) + 0.5) * _INV_24
    theta = h2.to(work) * _TWO_PI_24
    r = torch.sqrt(-2.0 * torch.log(u1))
    return (r * torch.cos(theta)).to(dtype), (r * torch.sin(theta)).to(dtype)


def fill_normal_(out: Tensor, index: Tensor, keys: Tensor) -> None:
    """Fill ``out`` of shape (2, H) with the normals of pair indices ``index`` = arange(H)."""
    z0, z1 = normal_pairs(index, keys, out.dtype)
    out.copy_(torch.stack([z0, z1]))


def normal_into_(out: Tensor, index: Tensor, keys: Tensor) -> None:
    """Fill the flat ``out`` (n,) with :func:`normal`'s n numbers at ``keys``: pair j's two normals
    at j and j + H, ``index`` = arange(H), H = ceil(n / 2) (the last number of an odd n dropped).
    Plain tensor arithmetic, with no n-sized temporary (compiled, :func:`fill_normal_` on a (2, H)
    view is the form that computes each pair's cosine and sine once: docs/bbb_or_ivon.md)."""
    z0, z1 = normal_pairs(index, keys, out.dtype)
    half = index.shape[0]
    out[:half].copy_(z0)
    out[half:].copy_(z1[: out.shape[0] - half])


def normal(n: int, seed: int, counter: int, *, device: torch.device | str | None = None,
           dtype: torch.dtype = torch.float32) -> Tensor:
    """``n`` standard normals, a pure function of (seed, counter): the engine's noise, eagerly."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    half = (n + 1) // 2
    if half >= 1 << 31:
        raise ValueError(f"n must be at most 2^32 - 2 (pair indices below 2^31), got {n}")
    out = torch.empty(n, device=device, dtype=dtype)
    normal_into_(out, torch.arange(half, device=device, dtype=torch.int32), key_tensor(seed, counter, device=device))
    return out
