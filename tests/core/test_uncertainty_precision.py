"""The classification metrics of half-precision probabilities and logits, against float64 on the same values."""

from __future__ import annotations

import pytest
import torch

from bbb import uncertainty as U


def _probs(n: int = 3000, c: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.softmax(3 * torch.randn(n, c, generator=g), -1), torch.randint(0, c, (n,), generator=g)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ece_of_half_precision_probabilities_counts_every_example(dtype):
    """A bfloat16 bin count stopped at 256, so the ECE weighed its bins wrongly (0.660 for 0.560)."""
    probs, labels = _probs()
    low = probs.to(dtype)
    bins = U.reliability_bins(low, labels)
    assert bins["count"].sum().item() == labels.numel()
    assert bins["count"].dtype == torch.float32
    exact = U.expected_calibration_error(low.float(), labels)  # the same numbers, in float32
    assert U.expected_calibration_error(low, labels) == pytest.approx(exact, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nll_and_brier_of_half_precision_probabilities(dtype):
    """In float16 the clamp's eps of 1e-12 was 0: a true class of probability 0 gave an infinite NLL."""
    probs, labels = _probs()
    low = probs.to(dtype)
    assert U.negative_log_likelihood(low, labels) == pytest.approx(U.negative_log_likelihood(low.double(), labels))
    assert U.brier_score(low, labels) == pytest.approx(U.brier_score(low.double(), labels))
    zero = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=dtype)
    assert U.negative_log_likelihood(zero, torch.tensor([1, 0])) == pytest.approx(
        U.negative_log_likelihood(zero.double(), torch.tensor([1, 0])))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_mutual_information_of_equal_samples_is_zero(dtype):
    """k = 1, or k equal samples, have no epistemic part: MI was round-off (1e-7 in float32, used to
    rank inputs in eval.json's selective prediction; 0.008 nats in bfloat16)."""
    logits = 3 * torch.randn(1, 500, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(U.mutual_information(logits.to(dtype)), torch.zeros(500))  # (float32 for half precision)
    assert float(U.mutual_information(logits.expand(4, 500, 10).to(dtype)).max()) < 1e-15  # (float64: not 1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mutual_information_of_half_precision_logits(dtype):
    logits = (3 * torch.randn(6, 300, 10, generator=torch.Generator().manual_seed(1))).to(dtype)
    exact = U.mutual_information(logits.double())
    assert U.mutual_information(logits).dtype == torch.float32  # as the entropies' (bfloat16 rounded it by 1e-3)
    assert float((U.mutual_information(logits).double() - exact).abs().max()) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_expected_entropy_of_half_precision_logits_as_predictive_entropy(dtype):
    """expected_entropy of bfloat16 logits was computed and returned in bfloat16, off in the third digit,
    while predictive_entropy works in float32: their difference, the mutual information by hand,
    was noise of the size of the MI itself."""
    logits = (3 * torch.randn(10, 1000, 10, generator=torch.Generator().manual_seed(3))).to(dtype)
    got = U.expected_entropy(logits)
    assert got.dtype == U.predictive_entropy(logits).dtype == torch.float32
    torch.testing.assert_close(got, U.expected_entropy(logits.float()))
    exact = U.expected_entropy(logits.double())
    assert float((got.double() - exact).abs().max()) < 1e-5
    by_hand = U.predictive_entropy(logits) - got
    assert float((by_hand.double() - U.mutual_information(logits.double())).abs().max()) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_entropy_of_half_precision_probabilities_is_of_the_values_given(dtype):
    """entropy of bfloat16 probabilities was summed in bfloat16: off in the second digit from the
    entropy of those very values, where the NLL, Brier and ECE of the same values are exact."""
    probs, _ = _probs(2000, 1000)
    low = probs.to(dtype)
    got = U.entropy(low)
    assert got.dtype == torch.float32
    assert float((got.double() - U.entropy(low.double())).abs().max()) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_predictive_probs_of_half_precision_logits_are_not_rounded(dtype):
    """The mean softmax of bfloat16 logits was rounded to bfloat16: ties and flipped argmaxes, and a
    bfloat16 model's evaluate() reported entropy 2.2656 for 2.2684 (error, ECE off too)."""
    logits = (torch.randn(8, 3000, 10, generator=torch.Generator().manual_seed(2)) / 4).to(dtype)
    probs = U.predictive_probs(logits)
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, U.predictive_probs(logits.float()))


@pytest.mark.parametrize("bins", [10, 15, 25])
def test_a_confidence_on_a_bins_edge_has_one_bin_in_every_dtype(bins):
    """A k-sample average of saturated softmaxes (6/10) lies on an edge of 15 or 25 bins: its
    float32 rounding lay above the edge and its float64 value on it, in different bins (ECE 0.41
    against 0.01 for the same predictions), and a float32 product put it below its own edge."""
    p = torch.tensor([[0.6, 0.4]] * 5 + [[0.62, 0.38]] * 5 + [[0.8, 0.2]] * 4, dtype=torch.float64)
    y = torch.tensor([0] * 5 + [0, 1, 1, 1, 1] + [0, 0, 0, 1])
    want = U.expected_calibration_error(p, y, bins)  # (half precision rounds 0.6 to other numbers: 0.6016)
    assert U.expected_calibration_error(p.float(), y, bins) == pytest.approx(want, abs=1e-6)
    if bins == 25:  # 0.6 in (0.56, 0.6], 0.62 in (0.6, 0.64]: two bins, |1 - 0.6| and |0.2 - 0.62|
        assert want == pytest.approx((5 * 0.4 + 5 * 0.42 + 4 * 0.05) / 14)
