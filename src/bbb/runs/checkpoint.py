"""The run directory's files: checkpoints (``last.pt``, ``best.pt``; their format version is
checked on load), rebuilding a trained model, and ``metrics.csv``.

A run directory (docs/design.md)::

    config.json    every setting, the seed, library versions, the thread count
    metrics.csv    one row per epoch: :data:`METRIC_COLUMNS`
    summary.json   final test/validation error (mean weights and k-sample average), timings
    last.pt        checkpoint of the last completed epoch (written atomically every epoch)
    best.pt        checkpoint of the best epoch: the lowest validation NLL or error (``select_by``)

``last.pt`` is the run's one commit point: it carries the metrics history and the best epoch so
far. ``best.pt`` and ``metrics.csv`` are derived from it and written after it, so a process killed
between the writes leaves them one epoch behind: :func:`repair_derived` rewrites them when the run
resumes, and the readers here (:func:`load_run`, :func:`read_metrics`) take the committed state
meanwhile (``best.pt`` one epoch behind is replaced by ``last.pt`` when that records itself as the
best; ``metrics.csv`` is checked against the history in ``last.pt``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..devices import resolve_device
from ..errors import CheckpointError, UserError, reason_of
from ..io import atomic_write_bytes, atomic_write_text, csv_text, read_json
from ..options import Checkpoint, choice
from .config import TrainConfig
from .model import build_model

__all__ = ["CHECKPOINT_FORMAT", "METRIC_COLUMNS", "PRUNING_COLUMNS", "committed_checkpoint", "diverged_text",
           "improves", "load_checkpoint", "load_last", "load_run", "metrics_text", "model_from_checkpoint",
           "read_metrics", "repair_derived", "run_dir_of"]

CHECKPOINT_FORMAT = 1
METRIC_COLUMNS = ("epoch", "seconds", "train_loss", "nll", "kl", "val_error", "test_error", "val_nll")
#: the columns of the metrics.csv an older bbb wrote (before ``val_nll``); still read
_COLUMNS_BEFORE_VAL_NLL = METRIC_COLUMNS[:7]
PRUNING_COLUMNS = ("fraction_removed", "weights_left", "weights_total", "snr_threshold",
                   "test_error", "checkpoint", "test_rmse")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False,
                    ) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; any problem is a one-line CheckpointError.

    ``mmap=True`` maps the tensors instead of reading them: a cheap look at the epoch, the best
    epoch and the metrics history of a large checkpoint (read whole where mapping fails).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    try:
        try:
            ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
        except Exception:  # noqa: BLE001 - a file system without mmap, say: read it whole
            if not mmap:
                raise
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to read is the same user problem
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({reason_of(e)})") from None
    need = ("model", "config", "epoch", "model_info")
    if not isinstance(ckpt, dict) or any(k not in ckpt for k in need):
        raise CheckpointError(f"checkpoint {path} is not a bbb training checkpoint")
    fmt = ckpt.get("format", CHECKPOINT_FORMAT)
    if not isinstance(fmt, int) or fmt > CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {fmt!r}, newer than this bbb reads "
                              f"({CHECKPOINT_FORMAT}); upgrade bbb")
    return ckpt


def load_last(run_dir: str | Path, mmap: bool = False) -> dict[str, Any]:
    """``run_dir/last.pt`` as :func:`load_checkpoint` reads it; a damaged one (a copy of the folder cut
    short, a disk fault: bbb's own writes are atomic) is a one-line CheckpointError that says what
    the run's ``best.pt`` still offers."""
    d = Path(run_dir)
    try:
        return load_checkpoint(d / "last.pt", mmap=mmap)
    except CheckpointError as e:
        if not (d / "last.pt").is_file():
            raise
        try:
            epoch = load_checkpoint(d / "best.pt", mmap=True)["epoch"]
        except CheckpointError:
            raise CheckpointError(f"{e}; nothing else holds its state: restore the folder from a copy, or start "
                                  "afresh (bbb train --overwrite)") from None
        raise CheckpointError(f"{e}; {d / 'best.pt'} (epoch {epoch}) is whole: copy it over last.pt to use that "
                              "epoch or resume from it") from None


def model_from_checkpoint(ckpt: dict[str, Any], path: Path) -> tuple[nn.Module, TrainConfig]:
    try:
        cfg = TrainConfig.from_stored(ckpt["config"])
    except UserError as e:
        raise CheckpointError(f"checkpoint {path} has an invalid config: {e}") from None
    info = ckpt["model_info"]
    model = build_model(cfg, int(info["in_features"]), int(info["num_classes"]),
                        str(info.get("task", "classification")))
    try:
        model.load_state_dict(ckpt["model"])
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path} does not match its model ({reason_of(e)})") from None
    return model, cfg


def ensemble_members(folder: str | Path) -> list[str] | None:
    """The members of the ensemble whose evaluation ``folder`` holds (``bbb evaluate RUN RUN ...
    --out DIR``, ``bbb ood ... --out DIR``), else None."""
    for name in ("eval.json", "ood.json"):
        try:
            data = json.loads((Path(folder) / name).read_text())
        except (OSError, ValueError):
            continue
        members = data.get("members") if isinstance(data, dict) else None
        if isinstance(members, list) and members:
            return [str(m) for m in members]
    return None


def other_folder(d: Path) -> str | None:
    """What ``d`` is where it is the folder of a Laplace posterior, of an ensemble or of a population, not a run
    directory ("the folder of a Laplace posterior (bbb laplace RUN --out D)"), else None."""
    if (d / "laplace.json").is_file():
        return f"the folder of a Laplace posterior (bbb laplace RUN --out {d})"
    if ensemble_members(d) is not None:
        return f"an ensemble's folder (bbb evaluate/ood RUN RUN ... --out {d})"
    if (d / "population.pt").is_file():  # (bbb.runs.population.POPULATION_FILE)
        return "the folder of a population's state (population.pt: runs trained together, each in its own directory)"
    if (d / "sweep.csv").is_file() or (d / "trials").is_dir():
        return f"a sweep's folder (bbb sweep --out {d}: each of its trials, {d}/trials/ID, is a run)"
    command = str((read_json(d / "run.json") or read_json(d / "options.json") or {}).get("command", ""))
    if "agents" in (read_json(d / "config.json") or {}):  # (a bandit run's config.json has no command)
        command = "bbb bandit"
    if command.startswith("bbb reproduce") or command.startswith("bbb bandit") or command.startswith("bbb regression"):
        return f"the folder of {' '.join(command.split()[:3])} (its tables and figures hold its results)"
    return None



def not_a_run_text(d: Path, one_run: str | None = None) -> str | None:
    """What to say when ``d`` is an ensemble's folder, a Laplace posterior's or a population's, not a run directory
    (else None); ``one_run``: the command, which takes one run (``bbb prune``), that was given it."""
    what = other_folder(d)
    if what is None:
        return None
    if (d / "laplace.json").is_file() and one_run == "bbb prune":  # (its run is an sgd run's: nothing to prune)
        return (f"{d} is {what}, the last layer of a deterministic run: bbb prune prunes a Bayesian run's weights "
                "(--method bbb or ivon) by their signal-to-noise ratio, which neither has")
    if (d / "laplace.json").is_file():
        return (f"{d} is {what}: bbb predict, evaluate, ood, uncertain, compare and report take it; for this, give "
                "its run")
    if (d / "sweep.csv").is_file() or (d / "trials").is_dir():
        return f"{d} is {what}, not a run: give its trials, {d}/trials/ID (bbb compare takes several)"
    if not (d / "population.pt").is_file() and ensemble_members(d) is None:  # an experiment's folder
        return f"{d} is {what}, not a run"
    if ensemble_members(d) is None:  # a population's folder
        return (f"{d} is {what}, not a run: give its runs' directories (each run's config.json names this folder "
                "as its population's dir)")
    members = ensemble_members(d) or []
    shown = " ".join(members[:6]) + (" ..." if len(members) > 6 else "")
    give = f"give its runs, {shown}" if one_run is None else f"{one_run} takes one run: give each of its runs, {shown}"
    return f"{d} is {what}, not a run: {give} (bbb compare and report take the folder)"


def run_dir_of(run_dir: str | Path, one_run: str | None = None) -> Path:
    """``run_dir`` as a Path, where it holds a run's checkpoint; else a one-line
    :class:`CheckpointError` (``one_run``: as in :func:`not_a_run_text`)."""
    d = Path(run_dir)
    if not d.is_dir():
        raise CheckpointError(f"run directory {d} not found")
    if not ((d / "last.pt").is_file() or (d / "best.pt").is_file()):
        ensemble = not_a_run_text(d, one_run)
        if ensemble is not None:
            raise CheckpointError(ensemble)
        raise CheckpointError(f"{d} is not a run directory: it holds no last.pt or best.pt (a run of `bbb train` "
                              "does); give the folder that `bbb train --out` wrote")
    return d


def _untrained(d: Path, last: dict[str, Any]) -> CheckpointError:
    """The error for a run with no trained epoch (``last.pt`` at epoch 0, no ``best.pt``): stopped
    during its first epoch, or diverged there (a population's member records it in diverged.json)."""
    try:
        diverged = json.loads((d / "diverged.json").read_text()).get("message")  # (bbb.runs.jobs.DIVERGED_FILE)
    except (OSError, ValueError, AttributeError):
        diverged = None
    if diverged:
        return CheckpointError(f"{d} holds no trained epoch: {diverged}")
    group = last.get("population")
    if isinstance(group, dict):  # its state is its population's: bbb train --resume refuses a member
        return CheckpointError(f"{d} holds no trained epoch yet (it was stopped during epoch 1: no best.pt); it trains "
                               f"as member {group.get('member')} of the population in {group.get('dir')}: resume "
                               "that population (the command that trained it)")
    return CheckpointError(f"{d} holds no trained epoch yet (it was stopped during epoch 1: no best.pt); "
                           f"train it with: bbb train --resume --out {shlex.quote(str(d))}")


def committed_checkpoint(run_dir: str | Path, which: str = "best", mmap: bool = False,
                         ) -> tuple[Path, dict[str, Any]]:
    """The checkpoint of a run directory that its commit point ``last.pt`` names: ``(path, ckpt)``.

    ``which="last"``: ``last.pt`` (at epoch 0, a run stopped during its first epoch, a one-line error
    that says how to train it, as for ``which="best"``: its weights are the untrained ones).
    ``which="best"``: ``best.pt`` when it holds the best epoch that ``last.pt`` records; when it
    does not (a process killed between the two writes, or a reader between them), ``last.pt`` itself if it records
    itself as the best, else ``best.pt`` read again (the trainer may have moved on meanwhile).
    Without ``last.pt``, ``best.pt`` as it is.
    """
    which = choice("checkpoint", which, Checkpoint)
    d = run_dir_of(run_dir)
    last_path, best_path = d / "last.pt", d / "best.pt"
    if which == "last":
        last = load_last(d, mmap=mmap)
        if int(last["epoch"]) == 0:  # stopped during its first epoch: its weights are the initial ones
            raise _untrained(d, last)
        return last_path, last
    if not last_path.is_file():  # best.pt alone: nothing to check it against
        return best_path, load_checkpoint(best_path, mmap=mmap)
    best = None
    for _ in range(3):
        try:
            best = load_checkpoint(best_path, mmap=mmap) if best_path.is_file() else None
            damaged = None
        except CheckpointError as e:  # last.pt may hold the same epoch: read below
            best, damaged = None, e
        last = load_last(d, mmap=True)
        want = dict(last.get("best") or {}).get("epoch")
        if damaged is not None and want != last["epoch"]:
            held = f"the best epoch {want}" if want else "the best epoch"
            raise CheckpointError(f"{damaged}; it held {held}: --which last uses the last epoch, {last['epoch']}"
                                  ) from None
        if best is not None and (want is None or best["epoch"] == want):
            return best_path, best
        if want == last["epoch"] and want > 0:
            return last_path, last
    if best is None:
        if int(last["epoch"]) == 0:  # stopped during its first epoch
            raise _untrained(d, last)
        raise CheckpointError(f"checkpoint {best_path} not found (removed or moved away?); --which last uses the last "
                              f"epoch, {last['epoch']}")
    return best_path, best


def load_run(run_dir: str | Path, which: str = "best", device: str | torch.device = "cpu",
             ) -> tuple[nn.Module, TrainConfig]:
    """Rebuild the trained model of a run directory: ``which`` is ``"best"`` or ``"last"``
    (the committed one: :func:`committed_checkpoint`).

    Returns ``(model, config)``; the model is in eval mode on ``device`` (``"auto"``, ``"cpu"``, ``"cuda"``: a
    one-line error where there is no CUDA device).
    """
    device = resolve_device(device)
    path, ckpt = committed_checkpoint(run_dir, which)
    model, cfg = model_from_checkpoint(ckpt, path)
    return model.to(device).eval(), cfg


def metrics_text(rows: list[dict[str, Any]], columns: tuple[str, ...] = METRIC_COLUMNS) -> str:
    """``metrics.csv`` of these history rows, byte for byte as the run writes it (``columns``:
    those of an older bbb's file, to compare it)."""
    return csv_text(columns, rows)


def _metric_value(column: str, text: str | None) -> Any:
    if text in ("", None):
        return None
    return int(text) if column == "epoch" else float(text)


def _parse_metrics(path: Path, text: str) -> list[dict[str, Any]]:
    lines = list(csv.reader(io.StringIO(text)))
    if not lines or tuple(lines[0]) not in (METRIC_COLUMNS, _COLUMNS_BEFORE_VAL_NLL):
        got = ",".join(lines[0]) if lines else "nothing"
        raise CheckpointError(f"{path} is damaged: its header is {got[:120]!r}, not {','.join(METRIC_COLUMNS)}")
    columns = tuple(lines[0])
    rows = []
    for n, cells in enumerate(lines[1:], start=1):
        try:
            if len(cells) != len(columns):
                raise ValueError(f"{len(cells)} cells")
            row = {c: _metric_value(c, v) for c, v in zip(columns, cells)}
            row.setdefault("val_nll", None)
            if row["epoch"] != n:
                raise ValueError(f"epoch {row['epoch']}")
        except ValueError as e:
            raise CheckpointError(f"{path} is damaged: row {n} is not a metrics row ({e})") from None
        rows.append(row)
    return rows


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.csv`` as dicts of floats (None for empty cells), checked.

    The file must have the columns :data:`METRIC_COLUMNS` (or those before ``val_nll``, an
    older bbb's: ``val_nll`` is None then) and one row per epoch. Where
    ``last.pt`` can be read, the file must be its metrics history byte for byte, or a prefix of
    it (a process killed, or a reader, between the two writes; or no file yet): then the history
    in ``last.pt`` is returned. A damaged file is a one-line :class:`CheckpointError` naming it.
    """
    d = Path(run_dir)
    path = d / "metrics.csv"
    try:
        text: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} cannot be read ({e})") from None
    rows = _parse_metrics(path, text) if text is not None else []
    columns = METRIC_COLUMNS if text is None or text.startswith(",".join(METRIC_COLUMNS)) else _COLUMNS_BEFORE_VAL_NLL
    try:  # read after metrics.csv: the trainer writes last.pt first, so it is never behind the file
        history = load_checkpoint(d / "last.pt", mmap=True).get("metrics") if (d / "last.pt").is_file() else None
    except CheckpointError:
        history = None
    if not isinstance(history, list):
        if text is None:
            raise CheckpointError(f"{path} not found")
        return rows
    history = [{c: r.get(c) for c in METRIC_COLUMNS} for r in history]
    if text is not None and text != metrics_text(history[:len(rows)], columns):
        raise CheckpointError(f"{path} is damaged: it does not match the {len(history)}-epoch history in "
                              f"{d / 'last.pt'}; 'bbb train --resume --out {d}' rewrites it")
    return [{c: None if r[c] is None else (int(r[c]) if c == "epoch" else float(r[c])) for c in METRIC_COLUMNS}
            for r in history]


def diverged_text(epoch: int, loss: float, last_path: Path, advice: str = "try a lower --lr") -> str:
    """The one line of a run (or a population's member) whose epoch ``epoch`` diverged: its loss sum
    (a finite one: the epoch's last step made the weights inf or NaN), the epoch ``last_path`` keeps
    and ``advice``."""
    weights = ", weights not finite" if math.isfinite(loss) else ""
    return f"training diverged in epoch {epoch} (loss {loss}{weights}); {last_path} keeps epoch {epoch - 1}; {advice}"


def improves(select_by: str, row: dict[str, Any], best: dict[str, Any]) -> bool:
    """Whether the epoch of metrics ``row`` becomes the best so far (``best``, the record a
    checkpoint carries): a strictly lower validation NLL (``select_by="nll"``) or error
    (``"error"``), so ties go to the earlier epoch; every epoch without validation data; the
    first epoch after a record without that number (a run resumed from an older bbb's). A NaN
    (outputs that overflowed) is worse than any number: it never improves on a best, and any
    number improves on it."""
    key = "val_nll" if select_by == "nll" else "val_error"
    now, was = row.get(key), best.get(key)
    if now is None or was is None:
        return True
    return not math.isnan(now) and (math.isnan(was) or now < was)


def repair_derived(out: Path, ckpt: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    """Bring the files derived from the committed ``out/last.pt`` (``ckpt``) up to it when a run
    resumes: ``best.pt`` rewritten (a copy of ``last.pt``) when ``last.pt`` records itself as the
    best and ``best.pt`` holds another epoch; ``metrics.csv`` rewritten from the history.

    Returns the best-so-far record to continue with: the one in ``ckpt``, or, where ``best.pt``
    cannot be brought up to it (a run interrupted by an older bbb between the two writes and
    continued since), the epoch ``best.pt`` does hold, said in one log line.
    """
    last_path, best_path = out / "last.pt", out / "best.pt"
    epoch = int(ckpt["epoch"])
    best = dict(ckpt.get("best") or {"epoch": 0, "val_error": None, "val_nll": None})
    want = best.get("epoch")
    try:
        held = load_checkpoint(best_path, mmap=True) if best_path.is_file() else None
    except CheckpointError as e:
        if want != epoch or epoch == 0:  # the best epoch's weights are in no other file: the user decides
            was = f"the best epoch {want}" if want else "the best epoch"
            raise CheckpointError(f"{e}; it held {was}, which no other file holds: move it out of {out} to resume "
                                  "(the next epoch becomes the best so far)") from None
        log(f"{best_path} is damaged; rewritten from {last_path}, which holds the same best epoch {want}")
        held = None
    if epoch > 0 and (held is None or held["epoch"] != want):
        if want == epoch:
            atomic_write_bytes(best_path, last_path.read_bytes())
        elif held is not None:
            held_best = dict(held.get("best") or {})
            best = {"epoch": held["epoch"], "val_error": held_best.get("val_error"),
                    "val_nll": held_best.get("val_nll")}
            log(f"{best_path} holds epoch {best['epoch']}, not the best epoch {want} that {last_path} records "
                f"(an interrupted write); epoch {best['epoch']} stays the best so far")
        else:
            best = {"epoch": 0, "val_error": None, "val_nll": None}
            log(f"{best_path} is missing (best epoch {want}); the next epoch becomes the best so far")
    atomic_write_text(out / "metrics.csv", metrics_text([dict(r) for r in ckpt.get("metrics", [])]))
    return best
