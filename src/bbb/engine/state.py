"""An engine's checkpoint (:meth:`bbb.engine.Engine.state_dict`, :meth:`~bbb.engine.Engine.load_state_dict`):
what it saves (its settings, noise counter, step count, parameter groups, the fused optimiser's
moments and the inner ``torch.optim`` state) and the check that a saved state fits the engine it
loads into."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import CheckpointError

__all__ = ["ENGINE_FORMAT", "engine_state", "load_engine_state"]

#: the version of the dict :func:`engine_state` writes
ENGINE_FORMAT = 1


def engine_state(engine: Any) -> dict[str, Any]:
    """:meth:`bbb.engine.Engine.state_dict`."""
    return {
        "format": ENGINE_FORMAT,
        "kind": engine.kind.value,
        "fused": engine.fused,
        "seed": engine.seed,
        "counter": engine.counter,
        "step": engine._step_count,
        "num_samples": engine.k,
        "kl_samples": engine.kl_samples,
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in engine.param_groups],
        "shapes": _shapes(engine),
        "state": [t.clone() for t in engine._state] if engine.fused else [],
        "inner": None if engine._inner is None else engine._inner.state_dict(),
        "member_lr_scale": engine.member_lr_scale,
    }


def load_engine_state(engine: Any, state: dict[str, Any]) -> None:
    """:meth:`bbb.engine.Engine.load_state_dict`: a one-line :class:`CheckpointError` when ``state``
    is no engine state or was written by an engine of other settings."""
    if not isinstance(state, dict) or state.get("format") != ENGINE_FORMAT:
        raise CheckpointError("this optimizer state is not a bbb engine state (written by an older "
                              "bbb?); start a new run")
    # a drawn seed gives way to the saved one, and so does any on the plain path (torch's generator draws its noise)
    seed = engine.seed if engine.seed_given and engine.fused else state.get("seed")
    names = ("optimizer", "fused", "seed", "num_samples", "kl_samples", "parameter groups", "member_lr_scale")
    mine = (engine.kind.value, engine.fused, seed, engine.k, engine.kl_samples, len(engine.param_groups),
            engine.member_lr_scale)
    saved_scale = state.get("member_lr_scale")
    theirs = (state["kind"], state["fused"], state["seed"], state["num_samples"], state.get("kl_samples"),
              len(state["groups"]), None if saved_scale is None else tuple(saved_scale))
    if mine != theirs:
        differ = "; ".join(f"{n} {t} saved, {m} here" for n, m, t in zip(names, mine, theirs) if m != t)
        raise CheckpointError(f"engine state does not match this engine ({differ}); build the engine with the "
                              "settings it was saved with")
    _check_shapes(engine, state)
    for g, saved in zip(engine.param_groups, state["groups"]):
        g.update(saved)
    if engine.fused:
        with torch.no_grad():
            for t, s in zip(engine._state, state["state"]):
                t.copy_(s)
    if engine._inner is not None and state["inner"] is not None:
        # torch's load_state_dict puts new group dicts in a new list; the engine's param_groups (and a
        # scheduler through them) hold the old ones: those take the loaded values and stay the inner's
        inner = engine._inner
        kept, dicts = inner.param_groups, list(inner.param_groups)
        inner.load_state_dict(state["inner"])
        for old, new in zip(dicts, inner.param_groups):
            old.update(new)
        kept[:] = dicts
        inner.param_groups = kept
    engine.seed = int(state["seed"])
    engine.counter = int(state["counter"])
    engine._step_count = int(state["step"])
    if engine.fused:
        engine._prime()


def _shapes(engine: Any) -> list[list[list[int]]]:
    """The shape of every parameter the engine trains, group by group."""
    return [[list(p.shape) for p in g["params"]] for g in engine.param_groups]


def _check_shapes(engine: Any, state: dict[str, Any]) -> None:
    """A one-line :class:`CheckpointError` when ``state`` was saved for parameters of other shapes
    (another model), before anything is loaded; a state saved without its shapes is checked by the
    size of the fused optimiser's moments."""
    saved = state.get("shapes")
    if saved is not None and saved != _shapes(engine):
        names = {id(p): n for n, p in engine.model.named_parameters()}
        for i, (g, theirs) in enumerate(zip(engine.param_groups, saved)):
            for j, (p, t) in enumerate(zip(g["params"], [*theirs, *[None] * len(g["params"])])):
                if t != list(p.shape):
                    what = names.get(id(p), f"parameter {j} of group {i}")
                    shape = "none" if t is None else tuple(t)
                    raise CheckpointError(f"engine state is for another model: {what} has shape {tuple(p.shape)} "
                                          f"here, {shape} saved; load the engine state saved with this model")
        raise CheckpointError(f"engine state is for another model: it trains {sum(map(len, saved))} parameters, "
                              f"this engine {sum(len(g['params']) for g in engine.param_groups)}; load the engine "
                              "state saved with this model")
    if engine.fused:
        for t, s in zip(engine._state, state["state"]):
            if tuple(s.shape) != tuple(t.shape):
                raise CheckpointError(f"engine state is for another model: {s.numel()} weights saved, {t.numel()} "
                                      "here; load the engine state saved with this model")
