"""The engine's side of a training step captured as a CUDA graph (:meth:`bbb.engine.Engine.capturing`,
:meth:`~bbb.engine.Engine.replayed`): which engines can be captured, and their host state kept
as it was while a step is captured (capturing runs no kernel)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import UserError

__all__ = ["capture_problem", "capturing"]


def capture_problem(engine: Any) -> str | None:
    """Why ``engine``'s step cannot be captured as a CUDA graph now, or None (see
    :meth:`bbb.engine.Engine.capturing`)."""
    why = None
    if not engine.fused:
        why = f"it runs the plain path ({engine.fallback_reason})"
    elif not engine._on_device:
        why = f"its step numbers are formed on the host ({engine._hp.device.type})"
    elif engine._inner is not None:
        why = "it trains parameters outside the fused kernel with torch.optim"
    elif engine._ddp is not None:
        why = "it runs under DistributedDataParallel"
    elif engine._hyper_key() != engine._hp_key:
        why = "a hyperparameter changed since its last step (run one step eagerly first)"
    return why


@contextlib.contextmanager
def capturing(engine: Any, parity: int) -> Iterator[Any]:
    """:meth:`bbb.engine.Engine.capturing`: check ``engine``, set it to a step of noise parity
    ``parity``, and restore its host state after the block."""
    why = capture_problem(engine)
    if why is None and parity not in (0, 1):
        why = f"parity must be 0 or 1, got {parity!r}"
    if why is not None:
        raise UserError(f"bbb.Engine cannot capture a step for a CUDA graph: {why}")
    sampler = engine._sampler
    saved = (engine._step_count, engine.counter, sampler.cur, sampler.drawn, engine._dist_checked)
    sampler.cur, sampler.drawn = parity, False
    engine._seen, engine._clean = engine._versions(), engine._grads.versions()
    try:
        yield engine
    finally:
        engine._step_count, engine.counter, sampler.cur, sampler.drawn, engine._dist_checked = saved
        engine._seen, engine._clean = engine._versions(), engine._grads.versions()
