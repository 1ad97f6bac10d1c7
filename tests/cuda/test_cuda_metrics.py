"""The calibration metrics on CUDA: the same bits every time, and the CPU's numbers."""

from __future__ import annotations

import torch

from bbb.uncertainty import expected_calibration_error, reliability_bins


def test_ece_on_cuda_is_the_same_bits_each_time_and_the_cpus(cuda):
    """CUDA's index_add_ adds floats by atomics in no fixed order: the bins' sums are made on the CPU
    (a resumed run's test ECE differed from the whole run's in the 8th digit before)."""
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(200_000, 10, generator=g), -1)
    labels = torch.randint(0, 10, (200_000,), generator=g)
    on_cpu = expected_calibration_error(probs, labels)
    p, y = probs.to(cuda), labels.to(cuda)
    values = {expected_calibration_error(p, y) for _ in range(20)}
    assert values == {on_cpu}
    bins = reliability_bins(p, y)
    assert all(v.device.type == "cuda" for v in bins.values())
    for k, v in reliability_bins(probs, labels).items():
        assert torch.equal(bins[k].cpu(), v)
