"""Every exception bbb raises, and the checks of its arguments.

Each class derives from :class:`BBBError` (``except BBBError`` catches anything bbb raises on
purpose) and from the builtin it is an instance of: a bad value is a ``ValueError``
(:class:`UserError`), a full disk an ``OSError`` (:class:`DiskFullError`), an allocation that
cannot fit a ``MemoryError`` (:class:`OutOfMemory`), Ctrl-C during training a
``KeyboardInterrupt`` (:class:`TrainingInterrupted`). The command line turns every
:class:`BBBError` into one line on stderr, never a traceback: exit code 130 for an interrupt,
2 for the others.

:func:`check_int` and :func:`check_float` are the one check of a numeric argument: they return
the number, or raise a one-line :class:`SettingError` (a :class:`UserError`) that names the
argument; :func:`check_bool` that of a switch (True or False, never a string read by its truth).
:func:`one_line_warnings_format` is the command line's form of a UserWarning, which the
processes a command starts take too (:func:`adopt_warnings_format`).
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "BBBError",
    "UserError",
    "SettingError",
    "DataError",
    "CheckpointError",
    "SettingsMismatch",
    "TrainingDiverged",
    "RunDirBusy",
    "MissingExtra",
    "DiskFullError",
    "ResultsNotSaved",
    "NetworkError",
    "OutOfMemory",
    "TrainingInterrupted",
    "check_int",
    "check_float",
    "check_bool",
    "reason_of",
    "WARNINGS_PROG_ENV",
    "one_line_warnings_format",
    "adopt_warnings_format",
]


class BBBError(BaseException):
    """The base of every bbb exception: ``except BBBError`` catches them all.

    It derives from ``BaseException`` only, so that :class:`TrainingInterrupted` can be one and
    stay a ``KeyboardInterrupt`` (``except Exception`` does not catch Ctrl-C); every other class
    here is also an ``Exception`` through its builtin. Never raised by itself.
    """


class UserError(BBBError, ValueError):
    """A mistake in what the user asked for (bad argument, missing file, corrupt input)."""


class SettingError(UserError):
    """A bad value of one named setting (an argument, a configuration key such as ``val_size``):
    ``setting`` names it, ``problem`` says what is wrong (``"must be an integer >= 1, got 0"``); the
    message is the two joined. The command line says it with the flag that sets the value
    (``--val-size must be ...``)."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting} {problem}")
        self.setting, self.problem = setting, problem

    def __reduce__(self) -> tuple[Any, ...]:  # (pickled across processes: the sweep's workers)
        return type(self), (self.setting, self.problem)


class DataError(UserError):
    """A data file is missing, truncated, corrupt or does not match its checksum."""


class CheckpointError(UserError):
    """A run directory or checkpoint is missing or cannot be read."""


class SettingsMismatch(UserError):
    """The run directory holds a run of other settings than the job's."""


class TrainingDiverged(UserError):
    """The loss became NaN or infinite (settings that diverge); the last good checkpoint is kept."""


class RunDirBusy(UserError):
    """Another process is training into the run directory; ``holder``: its pid as its lock file
    records it (text, "unknown" where it could not be read)."""

    def __init__(self, message: str, holder: str = "unknown") -> None:
        super().__init__(message)
        self.holder = holder


class MissingExtra(UserError, ModuleNotFoundError):
    """An optional package a feature needs is not installed (e.g. laplace-torch for
    :mod:`bbb.laplace`): the one-line error names the extra to install; ``name`` is the missing
    module's (``except ImportError`` catches it too)."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:  # (pickled across processes: the sweep's workers)
        return type(self), (str(self), self.name)


class DiskFullError(BBBError, OSError):
    """No space left (or quota exceeded) while writing a file; the old file is unchanged.
    ``errno`` is the ``ENOSPC`` or ``EDQUOT`` behind it (None where unknown)."""


class ResultsNotSaved(BBBError, OSError):
    """Results were computed but their file could not be written: ``result`` holds them,
    ``path`` is the file, ``reason`` why (one line)."""

    def __init__(self, path: Path, reason: str, result: Any) -> None:
        super().__init__(f"cannot write {path} ({reason}); the results were computed but not saved")
        self.path, self.reason, self.result = path, reason, result

    def __reduce__(self) -> tuple[Any, ...]:  # (pickled across processes: the sweep's workers)
        return type(self), (self.path, self.reason, self.result)


class NetworkError(BBBError, ConnectionError):
    """A failure talking to a download server (as opposed to writing the local file)."""


class OutOfMemory(BBBError, MemoryError):
    """A computation needs more memory than the device has; the message says what to reduce."""


class TrainingInterrupted(BBBError, KeyboardInterrupt):
    """Ctrl-C during training; ``last.pt`` holds the last completed epoch (``epoch``, in
    ``run_dir``). A ``KeyboardInterrupt``: ``except Exception`` does not catch it."""

    def __init__(self, message: str, run_dir: Path, epoch: int) -> None:
        super().__init__(message)
        self.message = message
        self.run_dir = run_dir
        self.epoch = epoch

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.run_dir, self.epoch)


def reason_of(e: BaseException, limit: int = 160) -> str:
    """What the exception ``e`` (torch's, a library's) says, as one line for a bbb message: its lines
    joined (torch puts the details of a state_dict mismatch after a first line that names none), cut
    at the last sentence that fits within ``limit`` characters, else at ``limit``; its type's name
    where it says nothing."""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
    if not text:
        return type(e).__name__
    if len(text) <= limit:
        return text
    end = text.rfind(". ", 0, limit)
    return text[:end + 1] if end > 0 else text[:limit].rstrip() + " ..."


def check_int(name: str, value: Any, minimum: int | None = 1) -> int:
    """``value`` as an ``int`` when it is an integer >= ``minimum`` (None: any integer).

    Integers are ``int`` (not ``bool``), numpy integers, one-element integer tensors, and
    floats with an integral value (``2.0``). Anything else (a bool, a string, None, ``1.5``,
    NaN) and a value below ``minimum`` raise ``UserError("NAME must be an integer >= MINIMUM,
    got VALUE")``.
    """
    n: int | None = None
    if not isinstance(value, bool):
        try:
            n = operator.index(value)
        except TypeError:
            f = float(value) if isinstance(value, numbers.Real) else math.nan
            if math.isfinite(f) and f.is_integer():
                n = int(f)
    if n is None or (minimum is not None and n < minimum):
        at_least = "" if minimum is None else f" >= {minimum}"
        raise SettingError(name, f"must be an integer{at_least}, got {value!r}")
    return n


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a ``bool`` when it is one (a numpy bool, or the integer 0 or 1); anything else
    (the string ``"false"``, which ``bool()`` reads as True, None, 2) raises
    ``UserError("NAME must be True or False, got VALUE")``."""
    if isinstance(value, bool):
        return value
    if str(getattr(value, "dtype", "")) == "bool" and getattr(value, "ndim", None) == 0:  # numpy's, a 0-d tensor's
        return bool(value)
    if not isinstance(value, str | bytes):
        try:
            n = operator.index(value)
        except TypeError:
            n = None
        if n in (0, 1):
            return bool(n)
    raise SettingError(name, f"must be True or False, got {value!r}")


def check_float(name: str, value: Any, minimum: float | None = None, *, above: bool = False,
                finite: bool = True) -> float:
    """``value`` as a ``float`` when it is a real number >= ``minimum`` (> ``minimum`` with
    ``above``; None: no bound), finite unless ``finite=False`` (NaN is always refused).

    Numbers are ``int``, ``float``, numpy scalars and one-element tensors, not ``bool`` nor
    strings; anything else raises ``UserError("NAME must be a finite number > 0, got VALUE")``
    (the words follow the bounds).
    """
    v: float | None = None
    if not isinstance(value, bool | str | bytes):
        try:
            v = float(value)
        except (TypeError, ValueError, RuntimeError):
            v = None
    ok = (v is not None and not math.isnan(v) and (math.isfinite(v) or not finite)
          and (minimum is None or (v > minimum if above else v >= minimum)))
    if not ok or v is None:
        bound = "" if minimum is None else f" {'>' if above else '>='} {minimum:g}"
        raise SettingError(name, f"must be a {'finite ' if finite else ''}number{bound}, got {value!r}")
    return v


#: the environment variable in which a ``bbb`` command names itself to the processes it starts (its
#: pools' workers), so that their UserWarnings are one line too (:func:`adopt_warnings_format`)
WARNINGS_PROG_ENV = "BBB_WARNINGS_PROG"


def one_line_warnings_format(prog: str, fallback: Callable[..., str]) -> Callable[..., str]:
    """A ``warnings.formatwarning`` that gives a UserWarning as one line, ``PROG: warning: ...``,
    not Python's two (a file name, a line of bbb's source); other warnings as ``fallback``."""

    def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 line: str | None = None) -> str:
        if issubclass(category, UserWarning):
            return f"{prog}: warning: {message}\n"
        return fallback(message, category, filename, lineno, line)

    return one_line


def adopt_warnings_format() -> None:
    """In a process a ``bbb`` command started (its pool's worker, in the pool's initializer): the
    command's one-line form of a UserWarning, named as the command (:data:`WARNINGS_PROG_ENV`);
    Python's own where no command set it."""
    prog = os.environ.get(WARNINGS_PROG_ENV, "").strip()
    if prog:
        warnings.formatwarning = one_line_warnings_format(prog, warnings.formatwarning)
