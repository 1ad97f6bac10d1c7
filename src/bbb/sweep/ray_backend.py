"""The Ray Tune backend: the trainable, checkpoint snapshots of a trial directory."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import atomic_write_json
from ..runs.jobs import JobCallbacks, Outcome, RunJob, run_job
from ..runs.loggers import make_loggers
from .cost import trial_data
from .space import Trial, TrialStatus
from .trial import append_history, epochs_done, silent, start_trial, trial_result

_CKPT_FILES = ("last.pt", "best.pt", "metrics.csv", "summary.json")


def import_ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import tune
    except ImportError as e:
        raise UserError(f"--backend ray needs Ray Tune, which is not installed ({e.name or e}): "
                        "pip install 'ray[tune,client]>=2.41', or pip install '.[ray]' in a clone of bbb") from None
    return ray, tune


def _snapshot(d: Path, epoch: int, files: Iterable[str]) -> Path:
    """A folder of hard links (copies across filesystems) to the trial's checkpoint files."""
    snap = d / f".ray-checkpoint-{epoch}"
    shutil.rmtree(snap, ignore_errors=True)
    snap.mkdir()
    for name in files:
        src = d / name
        if src.is_file():
            try:
                os.link(src, snap / name)
            except OSError:
                shutil.copy2(src, snap / name)
    atomic_write_json(snap / "state.json", {"epoch": epoch})
    return snap


def restore_files(src: Path, d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name in _CKPT_FILES:
        if (src / name).is_file():
            tmp = d / f".{name}.restore"
            shutil.copy2(src / name, tmp)
            os.replace(tmp, d / name)


def checkpoint_epoch(path: Path) -> int:
    try:
        return int(json.loads((path / "state.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return -1


def ray_trainable(config: dict[str, Any], epoch_hook: Any = None) -> None:
    """The Ray Tune function of one trial: the same job runner, reporting after every epoch.

    Each epoch: ``tune.report({"epoch", "val_error", ...}, checkpoint=...)`` with last.pt,
    best.pt and metrics.csv. A retry (``max_failures``) starts from ``tune.get_checkpoint()``
    when that is ahead of the trial directory on this node. ``epoch_hook(trial_dir, row)``
    (:attr:`SweepOptions.epoch_hook`) runs after every epoch's report.
    """
    from ray import tune

    trial = Trial.from_dict(config["trial"])
    out = Path(config["out"])
    if config.get("threads"):
        import torch

        torch.set_num_threads(int(config["threads"]))
    d, cfg, spec = start_trial(out, trial)
    source = "local" if (d / "last.pt").exists() else "fresh"
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as cd:
            if checkpoint_epoch(Path(cd)) > epochs_done(d) or not (d / "last.pt").exists():
                restore_files(Path(cd), d)
                source = "ray-checkpoint"
    append_history(d, "start", from_epoch=epochs_done(d), source=source, backend="ray")

    def report(metrics: dict[str, Any], epoch: int, files: Sequence[str]) -> None:
        snap = _snapshot(d, epoch, files)
        try:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(snap)))
        finally:
            shutil.rmtree(snap, ignore_errors=True)

    class Report(JobCallbacks):  # the job runner's callback: report each epoch to Ray Tune
        def on_epoch(self, job: Any, row: dict[str, Any]) -> None:
            epoch = int(row["epoch"])
            if epoch < cfg.epochs:  # the last epoch is reported with the summary, below
                report({"epoch": epoch, "val_error": row["val_error"], "train_loss": row["train_loss"],
                        "status": TrialStatus.PENDING.value}, epoch, _CKPT_FILES[:3])
            if epoch_hook is not None:
                epoch_hook(d, dict(row))

    # a crash propagates: Ray retries the trial (FailureConfig) from its latest checkpoint
    res = run_job(RunJob(d, cfg), data=lambda _: trial_data(cfg, spec, config.get("data_dir")), quiet=True,
                  log=silent, callbacks=Report(), loggers=make_loggers(config.get("loggers")))
    row = trial_result(trial, res, d)
    if res.outcome is not Outcome.DONE:  # diverged
        atomic_write_json(d / "result.json", row)
        tune.report({"epoch": epochs_done(d), "val_error": 1.0, "status": row["status"], "row": row})
        return
    summary = res.summary or {}
    last = read_last_metrics(d)
    report({"epoch": int(summary["epochs"]), "val_error": last.get("val_error", summary.get("best_val_error")),
            "train_loss": last.get("train_loss"), "status": row["status"], "row": row},
           int(summary["epochs"]), _CKPT_FILES)


def read_last_metrics(d: Path) -> dict[str, Any]:
    from ..runs import read_metrics

    try:
        rows = read_metrics(d)
    except UserError:
        return {}
    return rows[-1] if rows else {}


def ray_dirname(trial: Any) -> str:
    return str(trial.config["trial"]["trial_id"])
