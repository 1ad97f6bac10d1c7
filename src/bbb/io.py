"""Atomic file writes: a reader never sees a half-written file, a crash never loses the old one.

Each write goes to a temporary file beside the target, ``.<name>~<host>~<pid>~<random>.tmp``,
which is fsynced and then renamed over the target. The temporary file is created with mode
0666 and the kernel applies the process umask itself, so the result has the permissions
``open()`` would give, without reading (and so toggling) the umask, which is not thread-safe.
A writer killed before the rename leaves its temporary file behind; the next write of the same
target removes the temporary files of writers on this host that are no longer running (and
any older than a day). A full disk (``ENOSPC``, ``EDQUOT``; also when ``torch.save`` wraps it
in a ``RuntimeError``) becomes a one-line :class:`bbb.errors.DiskFullError` (an ``OSError``)
saying to free space; the old file is left as it was.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from .errors import DiskFullError

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_torch_save",
    "atomic_write_csv",
    "clean_stale_tmp",
    "csv_text",
    "csv_value",
    "read_json",
]

_STALE_SECONDS = 24 * 3600
"""Temporary files older than this are removed whoever wrote them (another host, an old format)."""

_FULL = (errno.ENOSPC, errno.EDQUOT)
_LEGACY_TMP = re.compile(r"\.[A-Za-z0-9_]{8}\.tmp$")  # mkstemp's names before the pid was recorded


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname() or "host")[:64]


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if os.name == "nt":  # os.kill(pid, 0) would terminate it there: assume alive (age decides)
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return True
    return True


def _clean_stale(path: Path) -> None:
    """Remove temporary files of ``path`` whose writer is gone (best effort, never raises)."""
    prefix = f".{path.name}~"
    legacy = f".{path.name}."
    host = _host()
    now = time.time()
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not name.endswith(".tmp"):
            continue
        stale = False
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if name.startswith(prefix):
            parts = name[len(prefix):-len(".tmp")].split("~")
            if len(parts) == 3 and parts[0] == host and parts[1].isdigit():
                pid = int(parts[1])
                stale = pid != os.getpid() and not _pid_alive(pid)
            stale = stale or age > _STALE_SECONDS
        elif name.startswith(legacy) and _LEGACY_TMP.fullmatch(name[len(legacy) - 1:]):
            stale = age > 600  # an old-style name says nothing about its writer: wait 10 minutes
        if stale:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def clean_stale_tmp(path: str | os.PathLike[str]) -> None:
    """Remove the temporary files of ``path`` left by writers that are gone (best effort)."""
    _clean_stale(Path(path))


def _create_tmp(path: Path) -> tuple[int, Path]:
    """A new temporary file beside ``path``, mode 0666 & ~umask (applied by the kernel)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}~{_host()}~{os.getpid()}~{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(path))


def _disk_full(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT OSError behind ``exc`` (itself, or its cause/context), if any."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL:
            return e
        e = e.__cause__ or e.__context__
    if isinstance(exc, RuntimeError) and "No space left on device" in str(exc):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> Path:
    """Write ``path`` through ``write(fileobj)`` into a temporary file, then rename it into place.

    Raises
    ------
    DiskFullError
        The disk (or quota) is full; the temporary file is removed and ``path`` is unchanged.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _clean_stale(path)
        fd, tmp = _create_tmp(path)
    except OSError as exc:
        if exc.errno in _FULL:
            raise _full_error(path, exc) from None
        raise _naming(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        full = _disk_full(exc) if isinstance(exc, Exception) else None
        if full is not None:
            raise _full_error(path, full) from None
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        if _interrupted(exc):
            raise KeyboardInterrupt from None
        raise
    return path


def _interrupted(exc: BaseException) -> bool:
    """``exc`` is what a Ctrl-C became inside a writer: torch.save's zip writer, closed while the
    interrupt unwinds it, raises its own RuntimeError, the interrupt only its context. It is still
    an interrupt (the old file kept), said as one, not as the writer's traceback."""
    seen: set[int] = set()
    e = exc.__context__
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return not isinstance(exc, KeyboardInterrupt)  # (an interrupt itself goes on as it is)
        seen.add(id(e))
        e = e.__context__
    return False


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` about the file a user asked for, ``path``, where it names its temporary file (the
    name of a temporary file means nothing to the user, and it is gone)."""
    tmp_prefix = f".{path.name}~"
    names = [n for n in (exc.filename, exc.filename2) if n is not None]
    if type(exc).__module__ != "builtins" or exc.errno is None or not any(
            Path(os.fsdecode(n)).name.startswith(tmp_prefix) for n in names):
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def _full_error(path: Path, exc: OSError) -> DiskFullError:
    what = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on the device"
    err = DiskFullError(f"{what} while writing {path}; free some space there (or write elsewhere) and run "
                        f"the command again; {path.name} was left as it was")
    err.errno = exc.errno
    return err


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    def write(f: BinaryIO) -> None:
        f.write(data)

    return atomic_write(path, write)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def atomic_torch_save(path: str | os.PathLike[str], obj: Any) -> Path:
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f))


def csv_value(v: Any) -> Any:
    """A cell of the package's CSV files: empty for None, ``repr`` for floats (every digit)."""
    if v is None:
        return ""
    return repr(v) if isinstance(v, float) else v


def csv_text(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
             value: Callable[[Any], Any] = csv_value) -> str:
    """A CSV table: the header ``columns``, then one line per row (missing keys: empty cells),
    each cell through ``value``; ``\\n`` line ends."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([value(r.get(c)) for c in columns])
    return buf.getvalue()


def atomic_write_csv(path: str | os.PathLike[str], columns: Sequence[str],
                     rows: Sequence[Mapping[str, Any]],
                     value: Callable[[Any], Any] = csv_value) -> Path:
    """Write :func:`csv_text` atomically."""
    return atomic_write_text(path, csv_text(columns, rows, value))
