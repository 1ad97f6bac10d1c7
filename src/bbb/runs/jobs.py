"""A run directory as a job runner sees it: how many epochs it has, whether it finished.

The sweep (:mod:`bbb.sweep.trial`) and ``bbb reproduce`` (:mod:`bbb.experiments.mnist.jobs`)
both skip finished runs and resume the others from these answers.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

__all__ = ["epochs_done", "finished_summary", "read_json"]


def read_json(path: str | Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def epochs_done(run_dir: str | Path) -> int:
    """Completed epochs recorded in ``run_dir/metrics.csv`` (0 when there is none)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return 0
    try:
        with path.open(newline="") as f:
            return sum(1 for _ in csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return 0


def finished_summary(run_dir: str | Path, epochs: int) -> dict[str, Any] | None:
    """The run's ``summary.json`` when it has finished ``epochs`` epochs, else None."""
    s = read_json(Path(run_dir) / "summary.json")
    if s is None or s.get("epochs") != epochs:
        return None
    return s
