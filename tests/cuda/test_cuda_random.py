"""The counter-based noise on CUDA: the same integers as the definition, the CPU's normals."""

from __future__ import annotations

import pytest
import torch

from bbb.engine.kernels import counter_keys_tensor, seed_mix
from bbb.random import counter_keys, hash_pairs, key_tensor, normal
from testkit import reference_hash

# indices at both ends of int32, and draws whose keys have the top bit set (negative in int32)
INDICES = [0, 1, 2, 12345, (1 << 31) - 2, (1 << 31) - 1]
DRAWS = [(0, 0), (7, 3), (5, 9), (11, 2**40 + 1)]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_hash_on_cuda_is_the_pure_python_reference(cuda, dtype):
    for seed, counter in DRAWS:
        keys = counter_keys(seed, counter)
        h1, h2 = hash_pairs(torch.tensor(INDICES, dtype=dtype, device=cuda),
                            key_tensor(seed, counter, dtype=dtype, device=cuda))
        assert h1.device.type == "cuda" and h1.dtype == dtype
        assert list(zip(h1.tolist(), h2.tolist())) == [reference_hash(j, keys) for j in INDICES]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_normals_on_cuda_are_the_cpus_within_1e_5(cuda, dtype):
    for seed, counter in DRAWS:
        got = normal(100_003, seed, counter, device=cuda, dtype=dtype).cpu()
        want = normal(100_003, seed, counter, dtype=dtype)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_the_counter_keys_formed_on_cuda_are_the_hosts(cuda):
    """The engine's kernel and the bandit form their noise keys on the device (no host copy)."""
    counters = [0, 1, 2, 99, (1 << 31) + 5, (1 << 32) + 1, 2**40 + 1, 2**62 + 12345]
    for seed in (0, 7, 2 * 10_007 + 1, 2**40 + 5):
        got = counter_keys_tensor(torch.tensor(seed_mix(seed), device=cuda),
                                  torch.tensor(counters, device=cuda)).cpu().tolist()
        assert got == [list(counter_keys(seed, c)) for c in counters]
