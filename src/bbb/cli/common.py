"""What every command shares: the one-line-error parser, the shared options (``--device``,
``--seed``, ``--seeds``, ``--out``, ``--quiet``, ``--threads``, ``--data-dir``) and small text
tables."""

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


# --------------------------------------------------------------------------------------------
# The options every command spells the same way
# --------------------------------------------------------------------------------------------

THREADS_HELP = ("CPU threads for torch (default: torch's choice; use 1 when other jobs share "
                "the cores)")


def add_device(p: Any, default: str = "auto") -> None:
    """``--device``: auto (CUDA when there is one), cpu, cuda or cuda:N; default auto."""
    p.add_argument("--device", default=default, metavar="DEVICE",
                   help=f"auto (cuda when available), cpu, cuda or cuda:N (default: {default})")


def add_threads(p: Any, default: int | None = None, help: str = THREADS_HELP) -> None:
    """``--threads N``: torch's intra-op threads (applied by :func:`bbb.cli.main`)."""
    p.add_argument("--threads", type=int, default=default, metavar="N", help=help)


def add_seed(p: Any, default: int = 0, help: str = "random seed") -> None:
    """``--seed N``: one integer."""
    p.add_argument("--seed", type=int, default=default, metavar="N",
                   help=f"{help} (default: {default})")


def add_seeds(p: Any, default: list[int], help: str = "seeds, one run each") -> None:
    """``--seeds N [N ...]``: a list of integers."""
    p.add_argument("--seeds", nargs="+", type=int, default=list(default), metavar="N",
                   help=f"{help} (default: {' '.join(map(str, default))})")


def add_out(p: Any, help: str, default: str | None = None) -> None:
    """``--out DIR``: required, or a default under ``runs/`` (never into the committed
    ``results/``)."""
    if default is None:
        p.add_argument("--out", required=True, metavar="DIR", help=f"{help} (required)")
    else:
        p.add_argument("--out", default=default, metavar="DIR", help=f"{help} (default: {default})")


def add_quiet(p: Any, help: str = "no progress bars: plain log lines only") -> None:
    p.add_argument("--quiet", action="store_true", help=help)


def add_data_dir(p: Any, help: str = "data folder (else $BBB_DATA, else ~/.cache/bbb)") -> None:
    p.add_argument("--data-dir", default=None, metavar="DIR", help=help)
