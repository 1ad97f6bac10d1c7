"""Input checks of the metrics in bbb.uncertainty: clear ValueErrors, never a silent number or NaN."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bbb import uncertainty as U
from bbb.errors import UserError

METRICS = [U.expected_calibration_error, U.negative_log_likelihood, U.brier_score, U.error_rate,
           U.reliability_bins]


def probs_labels(n: int = 8, c: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.softmax(torch.randn(n, c, generator=g), -1), torch.randint(0, c, (n,), generator=g)


def one_line(excinfo: pytest.ExceptionInfo[ValueError]) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("metric", METRICS)
def test_logits_passed_as_probabilities_are_rejected(metric):
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(100, 10, generator=g)
    labels = torch.randint(0, 10, (100,), generator=g)
    with pytest.raises(ValueError, match=r"\[0, 1\]") as excinfo:
        metric(logits, labels)
    assert "softmax" in one_line(excinfo)


@pytest.mark.parametrize("metric", METRICS)
def test_rows_must_sum_to_one(metric):
    p, y = probs_labels()
    with pytest.raises(ValueError, match="sum to 1"):
        metric(p * 0.5, y)


@pytest.mark.parametrize("metric", METRICS)
def test_empty_inputs_are_rejected_not_nan(metric):
    with pytest.raises(ValueError, match="no examples"):
        metric(torch.zeros(0, 10), torch.zeros(0, dtype=torch.long))


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("bad", [-1, 4])
def test_labels_out_of_range(metric, bad):
    p, y = probs_labels()
    y[3] = bad
    with pytest.raises(ValueError, match=r"class indices in 0\.\.3") as excinfo:
        metric(p, y)
    one_line(excinfo)


@pytest.mark.parametrize("metric", METRICS)
def test_shape_mismatch_and_dtypes(metric):
    p, y = probs_labels()
    with pytest.raises(ValueError, match="expected probs"):
        metric(p, y[:-1])
    with pytest.raises(ValueError, match="expected probs"):
        metric(p[None], y)
    with pytest.raises(ValueError, match="integer class indices"):
        metric(p, y.float())
    with pytest.raises(ValueError, match="floating point"):
        metric((p > 0.5).long(), y)
    nan = p.clone()
    nan[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        metric(nan, y)


def test_valid_inputs_still_work_and_small_round_off_is_fine():
    p, y = probs_labels()
    half = p.to(torch.bfloat16)
    for metric in METRICS[:-1]:
        assert metric(p, y) == metric(p, y)  # a number, not NaN
        metric(half.float(), y)
    assert 0 <= U.expected_calibration_error(p * (1 + 1e-5), y) <= 1


def test_logit_functions_reject_empty_and_nan():
    for fn in (U.predictive_probs, U.predictive_entropy, U.expected_entropy, U.mutual_information):
        with pytest.raises(ValueError, match="empty"):
            fn(torch.zeros(0, 3, 4))
        with pytest.raises(ValueError, match="leading sample dimension"):
            fn(torch.zeros(4))
        bad = torch.zeros(2, 3, 4)
        bad[0, 0, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            fn(bad)
    # -inf logits (a masked class) are fine and give no NaN
    masked = torch.tensor([[[0.0, -float("inf")]], [[1.0, -float("inf")]]])
    assert torch.isfinite(U.mutual_information(masked)).all()
    assert U.expected_entropy(masked).item() == 0.0


def test_entropy_checks_probabilities():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        U.entropy(torch.tensor([[2.0, -1.0]]))
    assert U.entropy(torch.tensor([[0.5, 0.5]])).item() == pytest.approx(0.6931, abs=1e-4)


def test_auroc_aupr_reject_nan_scores():
    for fn in (U.auroc, U.aupr):
        with pytest.raises(ValueError, match="finite"):
            fn(torch.tensor([0.1, float("nan")]), torch.tensor([0.5]))


def test_auroc_aupr_refuse_scores_that_are_not_numbers_in_one_line():
    """Text scores were torch's TypeError, where the selective functions give a UserError."""
    for fn in (U.auroc, U.aupr):
        with pytest.raises(UserError, match="numeric"):
            fn(np.array(["low", "high"]), [0.5])


def test_regression_uncertainty_checks():
    with pytest.raises(ValueError, match="no samples"):
        U.regression_uncertainty(torch.zeros(0, 5))
    with pytest.raises(ValueError, match="noise_sigma"):
        U.regression_uncertainty(torch.zeros(3, 5), torch.ones(3, 4))
    with pytest.raises(ValueError, match="noise_sigma"):
        U.regression_uncertainty(torch.zeros(3, 5), torch.ones(2, 3, 5))
    assert U.regression_uncertainty(torch.zeros(3, 5), torch.ones(5))["aleatoric"].shape == (5,)
    # a numpy array, integer means or text noise: one line each, not torch's traceback
    for means, sigma in ((np.zeros((3, 5)), None), (torch.zeros(3, 5, dtype=torch.long), None),
                         (torch.zeros(3, 5), "wide")):
        with pytest.raises(UserError, match="regression_uncertainty"):
            U.regression_uncertainty(means, sigma)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_labels_of_any_integer_dtype_give_the_int64_labels_result(metric, dtype):
    p, y = probs_labels()
    want, got = metric(p, y), metric(p, y.to(dtype))  # numpy's int32 labels, MNIST's uint8
    if isinstance(want, dict):
        for k in want:
            assert torch.equal(want[k], got[k])
    else:
        assert got == want


def test_coverage_gap_refuses_what_is_not_numbers_in_one_line():
    """Text or a bare number raised a ValueError or TypeError with a traceback."""
    for levels, coverage in ((["a"], [0.1]), ([0.5], None), (0.5, [0.4])):
        with pytest.raises(UserError, match="sequences of numbers"):
            U.coverage_gap(levels, coverage)
