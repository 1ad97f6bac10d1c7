"""The run directory's files: checkpoints (``last.pt``, ``best.pt``; their format version is
checked on load), rebuilding a trained model, and ``metrics.csv``.

A run directory (docs/design.md)::

    config.json    every setting, the seed, library versions
    metrics.csv    one row per epoch: :data:`METRIC_COLUMNS`
    summary.json   final test/validation error (mean weights and k-sample average), timings
    last.pt        checkpoint of the last completed epoch (written atomically every epoch)
    best.pt        checkpoint of the epoch with the lowest validation error
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..errors import CheckpointError, UserError
from ..options import Checkpoint, choice
from .config import TrainConfig
from .model import build_model

__all__ = ["CHECKPOINT_FORMAT", "METRIC_COLUMNS", "PRUNING_COLUMNS", "load_checkpoint", "load_run",
           "model_from_checkpoint", "read_metrics", "run_dir_of"]

CHECKPOINT_FORMAT = 1
METRIC_COLUMNS = ("epoch", "seconds", "train_loss", "nll", "kl", "val_error", "test_error")
PRUNING_COLUMNS = ("fraction_removed", "weights_left", "weights_total", "snr_threshold",
                   "test_error")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; any problem is a one-line CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to read is the same user problem
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({reason[:160]})") from None
    need = ("model", "config", "epoch", "model_info")
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in need):
        raise CheckpointError(f"checkpoint {path} is not a bbb training checkpoint")
    fmt = ckpt.get("format", CHECKPOINT_FORMAT)
    if not isinstance(fmt, int) or fmt > CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {fmt!r}, newer than this bbb reads "
                              f"({CHECKPOINT_FORMAT}); upgrade bbb")
    return ckpt


def model_from_checkpoint(ckpt: dict[str, Any], path: Path) -> tuple[nn.Module, TrainConfig]:
    try:
        cfg = TrainConfig.from_dict(ckpt["config"])
    except UserError as e:
        raise CheckpointError(f"checkpoint {path} has an invalid config: {e}") from None
    info = ckpt["model_info"]
    model = build_model(cfg, int(info["in_features"]), int(info["num_classes"]))
    try:
        model.load_state_dict(ckpt["model"])
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path} does not match its model ({str(e).splitlines()[0][:160]})") from None
    return model, cfg


def run_dir_of(run_dir: str | Path) -> Path:
    d = Path(run_dir)
    if not d.is_dir():
        raise CheckpointError(f"run directory {d} not found")
    return d


def load_run(run_dir: str | Path, which: str = "best", device: str | torch.device = "cpu",
             ) -> tuple[nn.Module, TrainConfig]:
    """Rebuild the trained model of a run directory: ``which`` is ``"best"`` or ``"last"``.

    Returns ``(model, config)``; the model is in eval mode on ``device``.
    """
    which = choice("checkpoint", which, Checkpoint)
    d = run_dir_of(run_dir)
    path = d / f"{which}.pt"
    model, cfg = model_from_checkpoint(load_checkpoint(path), path)
    return model.to(device).eval(), cfg


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.csv`` as dicts of floats (None for empty cells)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise CheckpointError(f"{path} not found")
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            rows.append({k: (None if v in ("", None) else (int(v) if k == "epoch" else float(v)))
                         for k, v in r.items()})
    return rows
