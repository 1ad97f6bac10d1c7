"""Adapters of the side-by-side bench: ours and each peer library, one module per library."""

from __future__ import annotations

from . import lib_bayesian_torch, lib_blitz, lib_pyro, lib_torchbnn, ours
from .base import BATCH, N_TRAIN, NUM_BATCHES, PAIR_TEXT, NotInstalled, Pair, System

__all__ = ["BATCH", "N_TRAIN", "NUM_BATCHES", "PAIR_TEXT", "NotInstalled", "Pair", "System", "all_systems"]


def all_systems() -> dict[str, System]:
    """Every system by name, ours first, then the peers (importing nothing of theirs yet)."""
    out: dict[str, System] = {}
    for mod in (ours, lib_bayesian_torch, lib_torchbnn, lib_blitz, lib_pyro):
        out.update(mod.systems())
    return out
