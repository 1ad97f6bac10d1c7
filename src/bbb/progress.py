"""Progress bars that behave both in a terminal and in a log file.

On a terminal (stderr is a TTY) :func:`progress_bar` is a tqdm bar on stderr; where the terminal
reports no size (0 columns or 0 rows: some IDE consoles, ``script``, ``docker exec -t``), tqdm
would draw nothing at all, so the bar gets a fixed size instead. Elsewhere (stderr a file or a pipe) nothing
writes carriage returns into the log: a bar is either silent, or, for long work that asks for it
(``lines_every``), one plain line at most every so many seconds (:class:`LineProgress`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["LineProgress", "plural", "progress_bar", "stderr_is_terminal"]

#: the bar's width where the terminal reports fewer columns than :data:`MIN_COLUMNS`, and the
#: rows tqdm is told of where it reports none (tqdm draws nothing on a screen of 0 rows)
FALLBACK_COLUMNS = 100
MIN_COLUMNS = 20
FALLBACK_ROWS = 24


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` and the noun, singular for one: ``1 epoch``, ``3 epochs`` (``nouns``: a plural that
    is not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def stderr_is_terminal() -> bool:
    """Whether ``sys.stderr`` is a terminal (False when it is closed, replaced or absent)."""
    stream = sys.stderr
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _terminal_size() -> tuple[int, int]:
    """(columns, rows) of the terminal on stderr; (0, 0) where it reports none."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        return 0, 0
    return size.columns, size.lines


class LineProgress:
    """A progress report for logs: one line on stderr at most every ``every`` seconds (and one at
    the end), ``DESC: N/TOTAL UNIT (P%), S s``; no carriage returns. The part of tqdm's interface
    the package uses: iteration, ``update``, ``write``, ``set_postfix`` (ignored), ``close``."""

    disable = False

    def __init__(self, iterable: Iterable[Any] | None = None, total: int | None = None, desc: str = "",
                 unit: str = "it", every: float = 60.0, initial: int = 0) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.n = self.shown = initial
        self.start = self.last = time.monotonic()

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None
        for item in self.iterable:
            yield item
            self.update(1)

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.every:
            self._line()

    def _line(self) -> None:
        now = time.monotonic()
        done = f"{self.n}/{self.total}" if self.total else str(self.n)
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        print(f"{self.desc}: {done} {self.unit}{pct}, {now - self.start:.0f} s", file=sys.stderr, flush=True)
        self.last, self.shown = now, self.n

    def write(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        """(the per-epoch lines say it in a log)"""

    def close(self) -> None:
        if self.n != self.shown:
            self._line()


def progress_bar(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", leave: bool = False, lines_every: float | None = None, **kwargs: Any) -> Any:
    """A progress bar on stderr over ``iterable`` (or updated by hand up to ``total``).

    On a terminal: a tqdm bar (``kwargs`` go to tqdm), of a fixed size where the terminal reports
    none. Not on a terminal: with ``lines_every``, a :class:`LineProgress` (a plain line at most
    every ``lines_every`` seconds), else a disabled tqdm (silent; it iterates and counts as usual).
    """
    from tqdm import tqdm

    if stderr_is_terminal():
        columns, rows = _terminal_size()
        if columns < MIN_COLUMNS or rows < 2:  # (a terminal of no size: tqdm would draw nothing)
            kwargs.pop("dynamic_ncols", None)
            kwargs.setdefault("ncols", max(columns, FALLBACK_COLUMNS) if columns < MIN_COLUMNS else columns)
            kwargs.setdefault("nrows", rows if rows >= 2 else FALLBACK_ROWS)
        else:
            kwargs.setdefault("dynamic_ncols", True)
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr, **kwargs)
    if lines_every is not None:
        return LineProgress(iterable, total=total, desc=desc, unit=unit, every=lines_every,
                            initial=int(kwargs.get("initial", 0)))
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=sys.stderr, disable=True, **kwargs)
