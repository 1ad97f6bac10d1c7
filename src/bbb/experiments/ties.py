"""When two reported scores are one value: the one rule that ``bbb compare``, the UCI tables and
``bbb reproduce which`` apply before calling a method better (:func:`same_score`); and how a
choice on validation ranks a diverged network's score (:func:`nan_worst`)."""

from __future__ import annotations

import math

__all__ = ["same_score", "nan_worst"]


def same_score(a: float, b: float) -> bool:
    """Whether two reported scores are one value: equal up to the last bits that the order of a sum
    leaves (an error rate, a coverage or a calibration gap is a fraction of the same test rows, and
    two methods often share it exactly, each summed in its own order). Such scores tie; neither is
    better."""
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def nan_worst(score: float, higher_is_better: bool = False) -> float:
    """``score`` as a choice on validation compares it: NaN (a diverged network) worse than every
    number (``min`` or ``max`` would otherwise keep a NaN that came first, as no comparison with
    it is true)."""
    if math.isnan(score):
        return -math.inf if higher_is_better else math.inf
    return score
