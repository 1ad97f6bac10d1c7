"""The entry point of the ``bbb`` console script and ``python -m bbb``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import BBBError, TrainingInterrupted, UserError
from .common import Parser
from .parser import build_parser
from .registry import COMMANDS, PROG


def run_command(name: str, argv: Sequence[str]) -> int:
    """Import command ``name``'s module (:data:`bbb.cli.registry.COMMANDS`), build its parser
    with the module's add-arguments function, parse ``argv`` and run its main function."""
    mod, parser = command_parser(name)
    args = parser.parse_args(list(argv))
    args.command = name
    set_threads(getattr(args, "threads", None))
    rc = getattr(mod, COMMANDS[name].main)(args)
    return 0 if rc is None else int(rc)


def command_parser(name: str) -> tuple[Any, argparse.ArgumentParser]:
    """Command ``name``'s module (imported now) and its parser."""
    spec = COMMANDS[name]
    try:
        mod = importlib.import_module(spec.module)
    except ModuleNotFoundError as e:
        if e.name and spec.module.startswith(e.name):
            raise UserError(f"the {name} experiment is not available in this installation "
                            f"({spec.module} not found)") from None
        raise
    example = getattr(mod, "EXAMPLE", None) or f"bbb {name}"
    parser = Parser(prog=f"{PROG} {name}",
                    description=(mod.__doc__ or spec.help).strip().split("\n\n")[0],
                    epilog=f"Example:\n  {example}",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    getattr(mod, spec.add)(parser)
    return mod, parser


def set_threads(n: int | None) -> None:
    """Apply ``--threads`` (torch's intra-op threads) when given."""
    if n is None:
        return
    if n < 1:
        raise UserError(f"--threads must be >= 1, got {n}")
    import torch

    torch.set_num_threads(n)


def flush_denormals() -> None:
    """Flush denormal floats to zero (FTZ/DAZ) on this thread and on the threads it starts.

    A network that fits its training set drives many softmax outputs and gradients below
    float32's smallest normal number, and x86 CPUs compute on such denormals many times more
    slowly: a long run's steps slow down as it trains (docs/engine.md, "Denormals"). New threads
    inherit the caller's floating-point environment, so this runs before torch starts its
    OpenMP threads (its first parallel operation); set later, it would reach this thread only.
    """
    import torch

    torch.set_flush_denormal(True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bbb`` console script and ``python -m bbb``; returns the exit code."""
    # Passive OpenMP waiting: spinning threads slow torch down badly on shared cores
    # (docs/notes.md). libgomp reads this when torch loads, so it is set here, before anything
    # imports torch (``import bbb`` does not); an explicit setting by the user wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    argv = list(sys.argv[1:] if argv is None else argv)
    # MKL's strict conditional-numerical-reproducibility mode: its GEMMs give the same bits on
    # 1 or 2 threads, so a run's metrics do not depend on --threads (read at MKL's first call;
    # its cost: docs/engine.md). An explicit setting by the user wins.
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
    from ..engine import tune_malloc

    tune_malloc()  # steadier and faster training steps (bbb.engine.malloc)
    flush_denormals()
    try:
        if argv and argv[0] in COMMANDS:
            return run_command(argv[0], argv[1:])
        args = build_parser().parse_args(argv)  # --help, --version, or a one-line error
        return run_command(args.command, [])
    except TrainingInterrupted as e:  # (a BBBError too: first)
        print(f"{PROG}: {e}", file=sys.stderr)
        return 130
    except BBBError as e:  # a bad value, a full disk, out of memory...: the one line bbb wrote
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable --out, a file that vanished: the user's to fix
        where = f" ({e.filename})" if e.filename else ""
        print(f"{PROG}: error: {e.strerror or e}{where}; check the path and its permissions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
