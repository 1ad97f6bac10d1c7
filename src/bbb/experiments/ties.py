"""When two reported scores are one value: the one rule that ``bbb compare``, the UCI tables and
``bbb reproduce which`` apply before calling a method better (:func:`same_score`)."""

from __future__ import annotations

import math

__all__ = ["same_score"]


def same_score(a: float, b: float) -> bool:
    """Whether two reported scores are one value: equal up to the last bits that the order of a sum
    leaves (an error rate, a coverage or a calibration gap is a fraction of the same test rows, and
    two methods often share it exactly, each summed in its own order). Such scores tie; neither is
    better."""
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
