"""What every command shares: the one-line-error parser, the shared options (``--device``,
``--seed``, ``--seeds``, ``--out``, ``--quiet``, ``--threads``, ``--data-dir``, ``--which``) and
small text tables."""

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


def add_seeds(p: Any, default: list[int] | None, help: str = "seeds, one run each") -> None:
    """``--seeds N [N ...]``: a list of integers (``default`` None: ``help`` says what then)."""
    p.add_argument("--seeds", nargs="+", type=int, default=None if default is None else list(default), metavar="N",
                   help=help if default is None else f"{help} (default: {' '.join(map(str, default))})")


def describe(p: Any, description: str | None, example: str) -> None:
    """A command's description and its ``Example:`` epilog (unless the parser already has one)."""
    if description is not None:
        p.description = description
    if not p.epilog:
        p.epilog = "Example:\n  " + example


def add_out(p: Any, help: str, default: str | None = None) -> None:
    """``--out DIR``: required, or a default under ``runs/`` (never into the committed
    ``results/``)."""
    if default is None:
        p.add_argument("--out", required=True, metavar="DIR", help=f"{help} (required)")
    else:
        p.add_argument("--out", default=default, metavar="DIR", help=f"{help} (default: {default})")


QUIET_HELP = ("no progress output (no progress bars, no per-epoch, per-run or per-trial lines): print only the "
              "results, warnings and errors")
"""What ``--quiet`` means in every command."""


def add_quiet(p: Any, results: str | None = None) -> None:
    """``--quiet``: :data:`QUIET_HELP`; ``results`` says what this command still prints."""
    p.add_argument("--quiet", action="store_true",
                   help=QUIET_HELP + (f" ({results})" if results else ""))


def progress_log(args: Any) -> Any:
    """Where a command's progress lines go: nowhere with ``--quiet``, else printed (flushed)."""
    if getattr(args, "quiet", False):
        return lambda line: None
    return lambda line: print(line, flush=True)


def add_which(p: Any, default: str, help: str) -> None:
    """``--which best|last``: the checkpoint of a run directory to load."""
    from ..options import Checkpoint, values

    p.add_argument("--which", choices=values(Checkpoint), default=default, help=f"{help} (default: {default})")


def add_data_dir(p: Any, help: str = "data folder (else $BBB_DATA, else ~/.cache/bbb)") -> None:
    p.add_argument("--data-dir", default=None, metavar="DIR", help=help)


def add_run_dir_arguments(p: Any, what: str, which: str, which_help: str) -> None:
    """What the commands reading a run directory share: ``RUN_DIR`` (``what``), ``--which``
    (default ``which``), ``--data-dir`` (default: the run's), ``--device`` and ``--threads``."""
    p.add_argument("run_dir", metavar="RUN_DIR", help=what)
    add_which(p, which, which_help)
    add_data_dir(p, "data folder (default: the run's)")
    add_device(p)
    add_threads(p)
