"""The one cost model of the command line: the estimated seconds per epoch of ``bbb train`` that
``bbb reproduce mnist --plan`` and ``bbb sweep --dry-run`` print.

The measurements are data, ``epoch_seconds.json`` beside this module: seconds per epoch of each
method at the paper's widths on a quiet 2-core CPU. Another network is interpolated linearly in
its number of weights, k weight samples cost ``fixed + (1 - fixed) k`` times one, and the time
scales with the number of training images. Where it comes from: docs/notes.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

__all__ = ["COSTED_AS", "epoch_costs", "epoch_seconds", "mlp_weights", "reference_epoch_seconds"]

#: methods without measurements of their own, costed as another's: ivon trains the same network as
#: bbb with one (or k) weight samples per step, and its update is of the same order of arithmetic as
#: the engine's (a guess, not a measurement, for ``bbb sweep --dry-run``'s estimate)
COSTED_AS = {"ivon": "bbb"}


@functools.cache
def epoch_costs() -> dict[str, Any]:
    """The cost data (``epoch_seconds.json``), read once."""
    return json.loads(resources.files(__package__).joinpath("epoch_seconds.json").read_text())


def mlp_weights(inputs: int, hidden: Sequence[int], outputs: int) -> int:
    """Weights and biases of the MLP ``inputs``-``hidden``-``outputs``."""
    sizes = [int(inputs), *(int(h) for h in hidden), int(outputs)]
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def _interpolate(points: list[tuple[int, float]], x: int) -> float:
    """The piecewise-linear function through ``points`` (sorted by x) at ``x``, extended by its
    first and last pieces; a point's own value exactly."""
    for px, py in points:
        if px == x:
            return py
    i = next((i for i in range(1, len(points) - 1) if x < points[i][0]), len(points) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(0.0, y0 + (x - x0) * (y1 - y0) / (x1 - x0))


def epoch_seconds(method: str, hidden: Sequence[int], samples: int = 1, images: int | None = None,
                  inputs: int | None = None, outputs: int | None = None) -> float:
    """Estimated seconds per epoch of ``bbb train --method method`` on a quiet 2-core CPU: the
    measured seconds of the network 784-W-W-10 (:func:`epoch_costs`) interpolated to this one
    (``inputs``-``hidden``-``outputs``, default MNIST's) by its number of weights, x (fixed +
    (1 - fixed) ``samples``) for BBB, x ``images`` / 50,000 training images."""
    costs = epoch_costs()
    net = costs["network"]
    method = COSTED_AS.get(str(method), str(method))
    try:
        table = costs["seconds_per_epoch"][str(method)]
    except KeyError:
        raise ValueError(f"no cost data for method {method!r}; known: "
                         f"{', '.join(costs['seconds_per_epoch'])}") from None
    points = sorted((mlp_weights(net["inputs"], [int(w)] * 2, net["outputs"]), float(s)) for w, s in table.items())
    base = _interpolate(points, mlp_weights(net["inputs"] if inputs is None else inputs, hidden,
                                            net["outputs"] if outputs is None else outputs))
    fixed = float(costs["samples"]["fixed"])
    factor = fixed + (1.0 - fixed) * samples if method == "bbb" else 1.0
    return base * factor * (net["images"] if images is None else images) / net["images"]


def reference_epoch_seconds() -> float:
    """Seconds per epoch of BBB 2x400 with one sample on MNIST: the unit ``bbb sweep
    --ref-epoch-seconds`` rescales."""
    return epoch_seconds("bbb", [400, 400])
