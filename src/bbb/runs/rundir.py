"""The run directory's guard: what a new or resumed run may find there, and its lock.

* A fresh run (``resume=False``) refuses a directory that holds any file of a previous run
  (:data:`RUN_FILES`) unless ``overwrite``; then those files are first moved into a hidden
  ``.old-run~<pid>`` folder (``last.pt`` first, so a crash midway never leaves a resumable mix of
  old and new) and that folder is deleted; a leftover one is deleted by the next run.
* ``resume=True`` requires ``last.pt``; without it the run refuses and changes nothing. A resumed
  run that trains on removes the results other commands made from its checkpoints before
  (:data:`RESULT_FILES`, :func:`remove_results`): they would describe a network it no longer has.
  ``resume="auto"`` (the sweep, ``bbb reproduce``, ``bbb demo``) resumes when ``last.pt`` exists
  and otherwise starts afresh, replacing what an interrupted start left.
* The process training into the directory holds an exclusive ``flock`` on ``.lock`` (which
  records its pid) for the whole run; a second one is refused with that pid and changes
  nothing. The kernel releases the lock when the process dies; a process that ends removes the
  file, still holding the lock (so a finished run has no ``.lock``), and a process that waited
  on a lock file removed so retries on the file now at ``.lock`` (:func:`_lock`).
* Temporary files of killed writers (``.<name>~<host>~<pid>~<random>.tmp``) are removed when a
  run starts (see :mod:`bbb.io`).
* ``bbb evaluate``, ``bbb prune``, ``bbb ood`` and ``bbb uncertain`` write beside a run (``eval.json``,
  ``pruning.csv``, ``ood.json``, ``uncertain.json``): they hold the same lock while they run
  (:func:`lock_run_dir`), so they never write into a run being trained, nor two of them at once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import RunDirBusy, UserError
from ..io import clean_stale_tmp, read_json
from .checkpoint import other_folder

__all__ = ["LOCK_NAME", "LOG_DIR", "RESULT_FILES", "RUN_FILES", "check_distinct", "guard_run_dir", "keep_started",
           "lock_run_dir", "new_run_id", "remove_results", "run_id_of"]

LOCK_NAME = ".lock"
"""Lock file of the process training into a run directory (not ``trial.lock``, the sweep's)."""

RESULT_FILES = ("eval.json", "pruning.csv", "reliability.png", "risk_coverage.png", "calibration.png", "ood.json",
                "ood.png", "uncertain.json", "uncertain.png", "snr.png", "learning_curve.png")
"""What the commands that read a run's checkpoints write beside them (``bbb evaluate``, ``prune``, ``ood``,
``uncertain``, ``demo``; ``bbb laplace`` into a posterior's folder): stale once the run trains on."""

RUN_FILES = ("last.pt", "best.pt", "config.json", "metrics.csv", "summary.json", *RESULT_FILES)
"""The files of a run (``last.pt`` first: without it nothing can be resumed)."""

LOG_DIR = "tb"
"""The folder of a run's TensorBoard curves (``--log tensorboard``), which a run resumed with it
continues: removed with the :data:`RUN_FILES` by ``--overwrite``, whether or not the new run logs."""

_OLD_PREFIX = ".old-run~"

Resume = bool | Literal["auto"]


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 100).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text.split()[0] if text else "unknown"


def _open(path: Path, create: bool, read_only_dir: bool) -> int | None:
    """The lock file open for writing (created when ``create``); None when it is absent and not
    created. ``read_only_dir``: where it cannot be written, open it read-only (flock works on
    that too), or None when it cannot be created."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, os.O_RDWR | cloexec | (os.O_CREAT if create else 0), 0o666)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as e:
        if not read_only_dir or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
    try:
        return os.open(path, os.O_RDONLY | cloexec)
    except FileNotFoundError:
        return None


def _lock(path: Path, create: bool, wait: float = 0.0, read_only_dir: bool = False,
          advice: str = "wait for it to end or choose another --out") -> int | None:
    """An fd holding an exclusive flock on ``path`` (None: no fcntl, or absent and not created:
    :func:`_open`), waiting up to ``wait`` seconds for a holder to let go."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        return None
    deadline = time.monotonic() + wait
    while True:
        fd = _open(path, create, read_only_dir)
        if fd is None:
            return None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.05)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise RunDirBusy(f"{path.parent} is in use: another bbb process (pid {pid}) is writing there "
                             f"(lock {path}); {advice}", holder=pid) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        # the holder removed the file as it let go, after this process opened it: a lock on it
        # excludes no one (a third process may create and lock a new .lock); take the one at path
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (not removed, nor replaced)."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _release(fd: int | None, path: Path, remove: bool = True) -> None:
    """Let go of the lock ``fd`` on ``path``; with ``remove``, remove the file first, while still
    holding the lock (only a holder removes it, so no other process holds a lock on a removed
    file: one that waited for it sees that it is gone and retries, :func:`_lock`)."""
    if fd is None:
        return
    try:
        if remove and _same_file(fd, path):
            with contextlib.suppress(OSError):  # (a directory this process may not write: it stays)
                path.unlink()
    finally:
        os.close(fd)


def _record_pid(fd: int | None) -> None:
    """Write this process's pid into the lock file it holds (not where it is read-only)."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())


def _run_summary(path: Path) -> bool:
    """Whether the summary.json ``path`` is a bbb train run's (or unreadable: said where it is read)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return True
    return not isinstance(obj, dict) or {"method", "epochs"} <= set(obj)


def _existing(out: Path) -> list[str]:
    return [n for n in RUN_FILES if (out / n).exists()]


def _check(out: Path, resume: Resume, overwrite: bool, data_file: str | os.PathLike[str] | None = None) -> bool:
    """Whether the run resumes; raises UserError where it may not start (read-only)."""
    if data_file is not None and Path(data_file).name in RUN_FILES and Path(data_file).resolve().parent == \
            out.resolve():  # a table called metrics.csv in --out: written over, or removed by --overwrite
        raise UserError(f"the data file {data_file} is in --out {out} under the name of a run's file, which the run "
                        "would write over or remove; move the data file out of that folder, or rename it")
    if resume is True and overwrite:
        raise UserError("--resume and --overwrite exclude each other: --resume continues the run in "
                        f"{out}, --overwrite replaces it")
    has_last = (out / "last.pt").is_file()
    if resume is True and not has_last:
        what = "no such directory" if not out.exists() else "no last.pt there"
        raise UserError(f"cannot resume {out}: {what}, nothing to resume; start a new run without --resume")
    if resume is True or (resume == "auto" and has_last):
        return True
    found = _existing(out)
    if found and not (has_last or (out / "best.pt").is_file()):
        other = other_folder(out)  # its eval.json removed, its posterior or members kept beside a run's files
        if other is not None:
            raise UserError(f"{out} is {other}, not a run's directory: give the run a folder of its own "
                            "(another --out)")
        if "summary.json" in found and not _run_summary(out / "summary.json"):  # --overwrite would replace it
            raise UserError(f"{out / 'summary.json'} is another command's (bbb regression's, bbb bandit's), not a "
                            "run's: give the run a folder of its own (another --out)")
    if found and resume is False and not overwrite:
        if has_last and "summary.json" not in found:  # stopped (Ctrl-C, a kill) before its end
            raise UserError(f"{out} already holds a run that was stopped before its end (last.pt, no summary.json); "
                            "add --resume to the same command to continue it, --overwrite to start it afresh, "
                            "or choose another --out")
        raise UserError(f"{out} already holds a run ({', '.join(found)}); pass --resume to continue it, "
                        "--overwrite to replace it, or choose another --out")
    return False


def _remove_old(out: Path, names: Sequence[str] = RUN_FILES) -> list[str]:
    """Move the files ``names`` of ``out`` aside (in that order: the previous run's, last.pt first),
    then delete them; returns those that were there."""
    trash = out / f"{_OLD_PREFIX}{os.getpid()}"
    trash.mkdir(exist_ok=True)
    moved = []
    for name in names:
        if (out / name).exists():
            os.replace(out / name, trash / name)
            moved.append(name)
    _fsync_dir(out)
    shutil.rmtree(trash, ignore_errors=True)
    return moved


def remove_results(out: str | os.PathLike[str], also: Sequence[str] = ()) -> list[str]:
    """Delete the :data:`RESULT_FILES` of the run in ``out``, and the files ``also`` (a run that trains
    on: they describe its checkpoints before); returns the names removed. Call it holding the run's lock."""
    return _remove_old(Path(out), (*also, *RESULT_FILES))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _clean(out: Path) -> None:
    """Leftovers of killed processes: temporary files of dead writers, old-run folders."""
    for name in RUN_FILES:
        clean_stale_tmp(out / name)
    for entry in out.iterdir():
        if entry.name.startswith(_OLD_PREFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


@contextlib.contextmanager
def guard_run_dir(out: Path, resume: Resume, overwrite: bool = False, lock_wait: float | None = 0.0,
                  data_file: str | os.PathLike[str] | None = None) -> Iterator[bool]:
    """Check ``out``, lock it, clean it; yields whether the run resumes. Holds the lock inside and
    removes ``.lock`` when the body ends, however it ends.
    ``lock_wait``: seconds to wait for another holder of the lock before refusing; None: take
    no lock at all (the sweep's finalisation of a trial Ray is still stopping). ``data_file``: the
    run's data, refused where it is in ``out`` under a name of :data:`RUN_FILES`.

    Nothing in ``out`` changes when this raises before the body.
    """
    if resume not in (True, False, "auto"):
        raise UserError(f"resume must be True, False or 'auto', not {resume!r}")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder: give the run a folder of its own (e.g. runs/NAME)")
    lock = out / LOCK_NAME
    if lock_wait is None:
        resuming = _check(out, resume, overwrite, data_file)
        out.mkdir(parents=True, exist_ok=True)
        if not resuming and _existing(out):
            _remove_old(out, (*RUN_FILES, LOG_DIR))
        yield resuming
        return
    fd = _lock(lock, create=False, wait=lock_wait) if out.is_dir() else None  # busy: refuse before anything else
    made_dir = made_lock = False
    try:
        _check(out, resume, overwrite, data_file)
        if fd is None:
            made_dir = not out.exists()
            out.mkdir(parents=True, exist_ok=True)
            new_lock = not lock.exists()
            fd = _lock(lock, create=True, wait=lock_wait)
            made_lock = new_lock  # (and held: not another process's)
        resuming = _check(out, resume, overwrite, data_file)  # again, under the lock
        _record_pid(fd)
        _clean(out)
        if not resuming and _existing(out):
            _remove_old(out, (*RUN_FILES, LOG_DIR))
        made_lock = True  # the run's from here on: removed however it ends
        yield resuming
    except BaseException:
        _release(fd, lock, remove=made_lock)
        fd = None
        if made_dir:  # a run that failed before writing anything: no empty folder of it either
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty
        raise
    finally:
        _release(fd, lock)



@contextlib.contextmanager
def lock_run_dir(out: Path, lock_wait: float | None = 0.0) -> Iterator[None]:
    """Hold the lock of the existing run directory ``out`` (``bbb evaluate``, ``bbb prune``, the
    output folder of ``bbb bandit``): a process training or writing there makes this raise
    :class:`~bbb.errors.RunDirBusy` with its pid.
    ``lock_wait``: seconds to wait for the holder; None takes no lock. In a directory this process
    may not write, an existing ``.lock`` is locked read-only and none is created, so the command
    can still compute (and report) what it then cannot save. ``.lock`` is removed as it lets go.
    """
    if lock_wait is None:
        yield
        return
    lock = out / LOCK_NAME
    fd = _lock(lock, create=True, wait=lock_wait, read_only_dir=True, advice="wait for it to end")
    try:
        _record_pid(fd)
        yield
    finally:
        _release(fd, lock)


def check_distinct(run_dirs: Sequence[str | Path], why: str) -> None:
    """A one-line :class:`~bbb.errors.UserError` for a run directory given twice among ``run_dirs``
    (the same folder under two spellings too: ``a`` and ``sub/../a``); ``why`` says what the
    command does with its runs (an ensemble's members, a comparison's rows, a report's columns)."""
    seen: dict[Path, str | Path] = {}
    for d in run_dirs:
        key = Path(d).resolve()
        if key in seen:
            raise UserError(f"{d} is given twice (as {seen[key]}): {why}")
        seen[key] = d


#: what ``config.json`` says of the process that started a run, kept when it resumes
STARTED_KEYS = ("argv", "threads", "device_used")


def new_run_id() -> str:
    """A new run's ``run_id`` in its config.json: random, kept when the run resumes, new when
    ``--overwrite`` trains another run into the folder; what an ensemble's files record of each
    member, so that a member replaced by a run of as many epochs is seen (:func:`run_id_of`)."""
    return uuid.uuid4().hex[:16]


def run_id_of(run_dir: str | Path) -> str | None:
    """The ``run_id`` of ``run_dir``'s config.json (None where there is none: a run of an older bbb,
    a population's member, an unreadable file)."""
    got = (read_json(Path(run_dir) / "config.json") or {}).get("run_id")
    return got if isinstance(got, str) else None


def keep_started(out: Path, config: dict[str, Any], after_epoch: int) -> dict[str, Any]:
    """``config`` (a resumed run's config.json) with :data:`STARTED_KEYS` as the run's earlier
    ``out/config.json`` has them (the command that started it, its thread count and device), and
    this process's under ``resumed`` (a list, one entry per resume, with ``after_epoch``); as it is
    where no earlier config.json can be read."""
    try:
        was = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return config
    if isinstance(was, dict) and isinstance(was.get("run_id"), str):
        config = {**config, "run_id": was["run_id"]}  # (the same run, trained on)
    if not isinstance(was, dict) or any(k not in was for k in STARTED_KEYS):
        return config
    now = {"after_epoch": after_epoch, **{k: config[k] for k in STARTED_KEYS}}
    earlier = was.get("resumed")
    return {**config, **{k: was[k] for k in STARTED_KEYS},
            "resumed": [*(earlier if isinstance(earlier, list) else []), now]}
