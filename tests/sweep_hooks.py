"""Fault injection for the sweep's tests: an epoch hook (``SweepOptions.epoch_hook``) that crashes
each trial once. A module of its own so that worker processes and Ray can import it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

#: the files a lost node takes with it
TRIAL_FILES = ("last.pt", "best.pt", "metrics.csv", "summary.json")


class FailOnce:
    """Crash every trial once, after ``epoch``; with ``lose_files`` the trial's local files go
    too (a lost node: only Ray's checkpoint can resume it). ``failed_once`` in the trial
    directory remembers the crash, so the retry runs through."""

    def __init__(self, epoch: int, lose_files: bool = False) -> None:
        self.epoch = epoch
        self.lose_files = lose_files

    def __call__(self, trial_dir: Path, row: dict[str, Any]) -> None:
        marker = Path(trial_dir) / "failed_once"
        if int(row["epoch"]) != self.epoch or marker.exists():
            return
        marker.write_text(f"epoch {self.epoch}\n")
        if self.lose_files:
            for name in TRIAL_FILES:
                (Path(trial_dir) / name).unlink(missing_ok=True)
        raise RuntimeError(f"injected failure after epoch {self.epoch}")


class InterruptDriver:
    """Ctrl-C of the sweep's process ``driver_pid`` after ``epoch`` of the first trial to reach it;
    that trial then waits (as a long epoch would) for the sweep to stop it."""

    def __init__(self, epoch: int, driver_pid: int) -> None:
        self.epoch = epoch
        self.driver_pid = driver_pid

    def __call__(self, trial_dir: Path, row: dict[str, Any]) -> None:
        marker = Path(trial_dir).parent / "interrupted"
        if int(row["epoch"]) != self.epoch or marker.exists():
            return
        marker.write_text(f"epoch {self.epoch}\n")
        os.kill(self.driver_pid, signal.SIGINT)
        time.sleep(60)
