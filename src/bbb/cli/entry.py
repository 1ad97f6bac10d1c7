"""The entry point of the ``bbb`` console script and ``python -m bbb``."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import WARNINGS_PROG_ENV, BBBError, SettingError, TrainingInterrupted, UserError, one_line_warnings_format
from .common import Parser, add_compute_options, flag_of_setting, resolve_which
from .parser import build_parser
from .registry import COMMANDS, PROG


def run_command(name: str, argv: Sequence[str]) -> int:
    """Import command ``name``'s module (:data:`bbb.cli.registry.COMMANDS`), build its parser
    with the module's add-arguments function, parse ``argv`` and run its main function (under
    the shared options' settings: :func:`compute_settings`). A bad setting
    (:class:`~bbb.errors.SettingError`) is said with the flag that sets it
    (:func:`bbb.cli.common.flag_of_setting`), not its name in the configuration."""
    mod, parser = command_parser(name)
    args = parser.parse_args(list(argv))
    args.command = name
    # (after parsing: --help, --version and a misspelt option end without loading torch; before the
    # command computes, so that torch's threads inherit FTZ/DAZ)
    from ..engine.malloc import tune_malloc

    tune_malloc()  # steadier and faster training steps (bbb.engine.malloc)
    flush_denormals()
    try:
        resolve_which(args)
        with compute_settings(args), warnings_in_one_line(leaf_prog(parser, argv)):
            rc = getattr(mod, COMMANDS[name].main)(args)
    except SettingError as e:
        flag = flag_of_setting(parser, e.setting)
        err = e if flag is None else UserError(f"{flag} {e.problem}")
        err.prog = leaf_prog(parser, argv)  # type: ignore[attr-defined]
        raise err from None
    except BaseException as e:  # (main's line about it names the subcommand too)
        with contextlib.suppress(AttributeError):
            e.prog = leaf_prog(parser, argv)  # type: ignore[attr-defined]
        raise
    return 0 if rc is None else int(rc)


@contextlib.contextmanager
def warnings_in_one_line(prog: str) -> Iterator[None]:
    """While a command runs, a UserWarning of the library (``--bf16`` on a CPU, a moot setting) is
    one line on stderr when it happens, ``bbb COMMAND: warning: ...``, not Python's two lines
    (a file name, a line of bbb's source); other warnings as Python says them. (The format only:
    a caller that records warnings, ``warnings.catch_warnings(record=True)``, still gets them.)
    The processes it starts take the same form (:func:`bbb.errors.adopt_warnings_format`)."""
    formatted, named = warnings.formatwarning, os.environ.get(WARNINGS_PROG_ENV)
    warnings.formatwarning = one_line_warnings_format(prog, formatted)
    os.environ[WARNINGS_PROG_ENV] = prog
    try:
        yield
    finally:
        warnings.formatwarning = formatted
        if named is None:
            os.environ.pop(WARNINGS_PROG_ENV, None)
        else:
            os.environ[WARNINGS_PROG_ENV] = named


def leaf_prog(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str:
    """The name of the (sub)command ``argv`` ran, as its own errors give it: ``bbb reproduce
    mnist``, where argparse says ``bbb reproduce mnist: error:``."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for i, word in enumerate(argv):
                if word in a.choices:
                    return leaf_prog(a.choices[word], argv[i + 1:])
    return parser.prog


@contextlib.contextmanager
def compute_settings(args: argparse.Namespace) -> Iterator[None]:
    """The shared options of a command that computes, for the command's process and those it
    starts: ``--threads`` (torch's threads), ``--no-compile`` (``BBB_COMPILE=0``) and ``--quiet``
    (``BBB_COMPILE_NOTICE=0``: no compile notice); the environment restored afterwards."""
    from ..engine.kernels import COMPILE_NOTICE_ENV
    from ..engine.support import COMPILE_ENV

    set_threads(getattr(args, "threads", None))
    env = {COMPILE_ENV: "0" if getattr(args, "no_compile", False) else None,
           COMPILE_NOTICE_ENV: "0" if getattr(args, "quiet", False) else None}
    before = {k: os.environ.get(k) for k, v in env.items() if v is not None}
    os.environ.update({k: v for k, v in env.items() if v is not None})
    try:
        yield
    finally:
        for k, old in before.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


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
    example = getattr(mod, "EXAMPLE", None)
    parser = Parser(prog=f"{PROG} {name}",
                    description=(mod.__doc__ or spec.help).strip().split("\n\n")[0],
                    epilog=f"Example:\n  {example}" if example else None,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    getattr(mod, spec.add)(parser)  # (its describe() gives the example where the module has no EXAMPLE)
    if not parser.epilog:
        parser.epilog = f"Example:\n  bbb {name}"
    add_compute_options(parser, spec.shared)
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


#: the exit code of a command whose output pipe closed, as the shell gives one that SIGPIPE ended
BROKEN_PIPE_EXIT = 128 + 13


def closed_pipe() -> int:
    """A command's stdout (or stderr) was closed by its reader (``bbb sweep --dry-run | head``):
    end quietly, as Unix tools do, with the exit code the shell gives one that SIGPIPE ended. No
    line is printed (there is no one to read it), and stdout is pointed at the null device so that
    Python's flush at exit does not say the same thing as a traceback."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # (not a real file: nothing to flush)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    return BROKEN_PIPE_EXIT


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
    # every line bbb writes about a command starts "bbb COMMAND:", as argparse's own errors do
    prog = f"{PROG} {argv[0]}" if argv and argv[0] in COMMANDS else PROG
    try:
        try:
            if not argv:  # bare bbb: what it can do
                build_parser().print_help()
                return 0
            if argv[0] in COMMANDS:
                return run_command(argv[0], argv[1:])
            command = next((a for a in argv if a in COMMANDS), None)
            if command is not None and argv[0] not in ("-h", "--help", "--version"):
                # (argparse called every word after the command unrecognized, the run and the input too)
                before = argv[:argv.index(command)]
                raise UserError(f"{' '.join(before)} before the command: a command's options go after its name, "
                                f"bbb {command} ... {' '.join(before)}")
            parser = build_parser()
            if argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
                # (argparse said a COMMAND is required: the option is what is wrong)
                parser.error(f"unrecognized arguments: {argv[0]}")
            args = parser.parse_args(argv)  # --help, --version, or a one-line error
            return run_command(args.command, [])
        finally:
            sys.stdout.flush()  # (what is left to print: a closed pipe raises here, not at exit)
    except BrokenPipeError:  # (an OSError: first) `bbb ... | head`: the reader has what it wanted
        return closed_pipe()
    except TrainingInterrupted as e:  # (a BBBError too: first)
        print(f"{getattr(e, 'prog', prog)}: {e}", file=sys.stderr)
        return 130
    except BBBError as e:  # a bad value, a full disk, out of memory...: the one line bbb wrote
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"{getattr(e, 'prog', prog)}: error: {msg}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable --out, a file that vanished: the user's to fix
        where = f" ({e.filename})" if e.filename else ""
        print(f"{getattr(e, 'prog', prog)}: error: {e.strerror or e}{where}; check the path and its permissions",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"{getattr(e, 'prog', prog)}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
