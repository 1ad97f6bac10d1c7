"""What every command shares: the one-line-error parser, the shared options (``--device``,
``--seed``, ``--seeds``, ``--out``, ``--quiet``, ``--threads``, ``--data-dir``) and small text tables."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (exit code 2, as argparse)."""

    def error(self, message: str) -> NoReturn:
        msg = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {msg} (see '{self.prog} --help')\n")


def fmt_default(v: Any) -> str:
    if isinstance(v, list):
        return " ".join(str(i) for i in v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def text_table(rows: Sequence[Sequence[str]], header: Sequence[str], left: bool = True) -> str:
    """A plain-text table; the first column left-aligned when ``left``, the others right-aligned."""
    cols = list(zip(header, *rows))
    widths = [max(len(str(c)) for c in col) for col in cols]

    def line(cells: Sequence[Any]) -> str:
        return "  ".join(str(c).ljust(w) if j == 0 and left else str(c).rjust(w)
                         for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def pct_text(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"
