"""What every command shares: the one-line-error parser, one vocabulary of options
(:data:`SHARED_FLAGS`: ``--device``, ``--seed``, ``--out``, ``--samples``, ``--train-samples``,
``--sigma-init``, ``--beta``, ...; the retired spellings kept as hidden aliases,
:data:`RETIRED_FLAGS`) and small text tables."""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from ..options import closest

#: argparse's line for a value outside an option's choices: the value, then the choices
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (exit code 2, as argparse: ``bbb COMMAND: error:
    ...``, the prefix of every error line of a command) and a help in plain text
    (:func:`plain_text`: the descriptions come from docstrings, which the API reference renders)."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(self._argv, namespace)

    def unknown_options(self) -> list[str]:
        """The ``--options`` of the arguments being parsed that this parser does not know (nor
        abbreviates): argparse says a required option is missing before it says these."""
        known = [o for o in self._option_string_actions if o.startswith("--")]
        unknown = []
        for word in getattr(self, "_argv", []):
            if word == "--":
                break
            name = word.split("=")[0]
            if name.startswith("--") and name not in known and not any(k.startswith(name) for k in known):
                unknown.append(name)
        return unknown

    def error(self, message: str) -> NoReturn:
        msg = " ".join(message.split())
        if msg.startswith("unrecognized arguments: ") and (sub := self.chosen_subcommand()) is not None:
            sub.error(message)  # (a subcommand's mistyped option: said by it, with its options' spellings)
        if msg.startswith("the following arguments are required") and (unknown := self.unknown_options()):
            msg = "unrecognized arguments: " + " ".join(unknown)  # (the typo first: --out may be what it hid)
        hint = self.suggestion(msg)
        self.exit(2, f"{self.prog}: error: {msg}{f'; did you mean {hint}?' if hint else ''} "
                     f"(see '{self.prog} --help')\n")

    def chosen_subcommand(self) -> Parser | None:
        """The parser of the subcommand named in the arguments being parsed (``bbb reproduce
        mnist``'s, of ``reproduce``'s), its arguments those after its name; None without one.
        argparse leaves the words a subcommand does not know to its parent to refuse."""
        argv = getattr(self, "_argv", [])
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction):
                for i, word in enumerate(argv):
                    sub = a.choices.get(word)
                    if isinstance(sub, Parser):
                        sub._argv = argv[i + 1:]
                        return sub
        return None

    def suggestion(self, message: str) -> str | None:
        """The closest spelling of a mistyped option (``unrecognized arguments: --imags x``: this
        parser's ``--images``) or choice (``invalid choice: 'trian'``: ``train``), or None."""
        if message.startswith("unrecognized arguments: "):
            words = [w.split("=")[0] for w in message.split(": ", 1)[1].split() if w.startswith("--")]
            known = [o for o in self._option_string_actions if o.startswith("--")]
        elif (m := _INVALID_CHOICE.search(message)) is not None:
            words, known = [m.group(1)], re.findall(r"'([^']*)'", m.group(2))
        else:
            return None
        return next((near for word in words if (near := closest(word, known)) is not None), None)

    def format_help(self) -> str:
        return plain_text(super().format_help())

    def format_usage(self) -> str:
        return plain_text(super().format_usage())


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")  # :func:`~a.b.c`, :doc:`text <x>`
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`")


def plain_text(text: str) -> str:
    """``text`` without reStructuredText's inline markup, as a terminal shows it: ````x```` and
    ```x``` -> x, ``:func:`~bbb.a.f``` -> f, ``:mod:`bbb.cli``` -> bbb.cli."""
    def role(m: re.Match[str]) -> str:
        target = m.group(1)
        return target.rsplit(".", 1)[-1] if m.group(0).split("`", 1)[1].startswith("~") else target

    text = _ROLE.sub(role, text)
    return _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)


def flag_of_setting(parser: argparse.ArgumentParser, setting: str) -> str | None:
    """The option of ``parser`` (or of one of its subcommands) that sets ``setting`` (its dest:
    the configuration's key), as the user types it (``val_size`` -> ``--val-size``); None where
    no option sets it. The one mapping from a setting's name to its flag
    (:class:`~bbb.errors.SettingError`, :func:`bbb.cli.main`)."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                flag = flag_of_setting(sub, setting)
                if flag is not None:
                    return flag
        elif a.dest == setting and not isinstance(a, DeprecatedAlias):
            longs = [o for o in a.option_strings if o.startswith("--")]
            if longs:
                return longs[0]
    return None


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


def weights_text(n: int | None) -> str:
    """A count of weights as a table shows it: 1.20m, 480k, 12; "-" for none."""
    if n is None:
        return "-"
    return f"{n / 1e6:.2f}m" if n >= 1e6 else (f"{n / 1e3:.0f}k" if n >= 1e3 else str(n))


def pct_text(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


# --------------------------------------------------------------------------------------------
# The options every command spells the same way
# --------------------------------------------------------------------------------------------

THREADS_HELP = ("torch threads on the CPU (default: torch's choice; use 1 when other jobs share "
                "the cores)")


def add_device(p: Any, default: str = "auto") -> None:
    """``--device``: auto (CUDA when there is one), cpu, cuda or cuda:N; default auto."""
    p.add_argument("--device", default=default, metavar="DEVICE",
                   help=f"auto (cuda when available), cpu, cuda or cuda:N (default: {default})")


def add_threads(p: Any, default: int | None = None, help: str = THREADS_HELP) -> None:
    """``--threads N``: torch's intra-op threads (applied by :func:`bbb.cli.main`)."""
    p.add_argument("--threads", type=int, default=default, metavar="N", help=help)


def seed_number(text: str) -> int:
    """argparse type of ``--seed`` and ``--seeds``: a whole number >= 0 (numpy's generators, and
    the runs' own configurations, refuse a negative seed; every command refuses it alike), at most
    :data:`bbb.options.MAX_SEED` (torch's generators take no larger one)."""
    from ..options import MAX_SEED

    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is a whole number from 0 to {MAX_SEED}, got {text!r}")
    return v


def add_seed(p: Any, default: int = 0, help: str = "random seed") -> None:
    """``--seed N``: one integer >= 0."""
    p.add_argument("--seed", type=seed_number, default=default, metavar="N",
                   help=f"{help} (default: {default})")


def add_seeds(p: Any, default: list[int] | None, help: str = "random seeds, one run each") -> None:
    """``--seeds N [N ...]``: a list of integers (``default`` None: ``help`` says what then)."""
    p.add_argument("--seeds", nargs="+", type=seed_number, default=None if default is None else list(default),
                   metavar="N",
                   help=help if default is None else f"{help} (default: {' '.join(map(str, default))})")


def describe(p: Any, description: str | None, example: str) -> None:
    """A command's description and its ``Example:`` epilog (unless the parser already has one)."""
    if description is not None:
        p.description = description
    if not p.epilog:
        p.epilog = "Example:\n  " + example


def out_folder(text: str) -> str:
    """An ``--out DIR`` that is not an existing file (argparse's ``type``): refused while the command
    line is read, before any work whose results the folder would hold (else a command trained, then
    failed to write with 'File exists' and lost what it made)."""
    if Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: give a folder's path (created if new)")
    return text


def add_out(p: Any, help: str, default: str | None = None, folder: bool = True) -> None:
    """``--out DIR``: required, or a default under ``runs/`` (never into the committed
    ``results/``); ``folder``: an existing file is refused (:func:`out_folder`); False where
    ``--out`` may name a file (a page)."""
    kind = {"type": out_folder} if folder else {}
    metavar = "DIR" if folder else "PATH"  # (a page's file: --help said DIR for the file it writes)
    if default is None:
        p.add_argument("--out", required=True, metavar=metavar, help=f"{help} (required)", **kind)
    else:
        p.add_argument("--out", default=default, metavar=metavar, help=f"{help} (default: {default})", **kind)


QUIET_HELP = ("no progress output (no progress bars, no per-epoch, per-run or per-trial lines, no compile notice): "
              "print only the "
              "results, warnings and errors")
"""What ``--quiet`` means in every command."""


def add_quiet(p: Any, results: str | None = None) -> None:
    """``--quiet``: :data:`QUIET_HELP`; ``results`` says what this command still prints."""
    p.add_argument("--quiet", action="store_true",
                   help=QUIET_HELP + (f" ({results})" if results else ""))


NO_COMPILE_HELP = ("never torch.compile the training engine's kernels: the eager ones, the same mathematics, "
                   "without a first compile's 10-60 s on a CPU (as BBB_COMPILE=0)")
"""What ``--no-compile`` means in every command."""


def add_no_compile(p: Any) -> None:
    """``--no-compile``: :data:`NO_COMPILE_HELP` (applied by :func:`bbb.cli.main`)."""
    p.add_argument("--no-compile", action="store_true", help=NO_COMPILE_HELP)


#: The options of every command that computes (:attr:`bbb.cli.registry.Command.shared`), each
#: added to a command's parser (to each of its subcommands') that lacks it, and applied by
#: :func:`bbb.cli.main` for the whole process and those it starts: ``--threads`` (torch's
#: threads), ``--quiet`` (also silences the engine's compile notice) and ``--no-compile``.
COMPUTE_FLAGS: dict[str, Any] = {"--quiet": add_quiet, "--threads": add_threads, "--no-compile": add_no_compile}


def add_compute_options(p: argparse.ArgumentParser, flags: Sequence[str] = tuple(COMPUTE_FLAGS)) -> None:
    """Add each of ``flags`` (keys of :data:`COMPUTE_FLAGS`) that ``p`` lacks to ``p``, or to each
    of its subcommands' parsers where it has subcommands (``bbb reproduce mnist|uci``). A parser
    whose ``compute_flags`` attribute names fewer (a subcommand that trains nothing: ``bbb reproduce
    which``) gets only those: an option it would ignore is not offered."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for a in subs:
            for sub in dict.fromkeys(a.choices.values()):
                add_compute_options(sub, flags)
        return
    have = {o for a in p._actions for o in a.option_strings}
    for flag in flags:
        if flag not in have and flag in getattr(p, "compute_flags", flags):
            COMPUTE_FLAGS[flag](p)


def progress_log(args: Any) -> Any:
    """Where a command's progress lines go: nowhere with ``--quiet``, else printed (flushed)."""
    if getattr(args, "quiet", False):
        return lambda line: None
    return lambda line: print(line, flush=True)


LOG_HELP = "experiment logger: tensorboard writes event files"
"""What ``--log`` means in every training command (each says then where and what)."""

LOG_RUN_HELP = (" into RUN/tb/ (ELBO, NLL, KL, error, learning rate each epoch; sigma and SNR histograms per "
                "Bayesian layer; view with tensorboard --logdir RUN/tb)")
LOG_INSTALL = "; needs pip install tensorboard (or '.[tensorboard]' in a clone of bbb)"


def add_log(p: Any, where: str = LOG_RUN_HELP) -> None:
    """``--log NAME``: an experiment logger of :data:`bbb.runs.loggers.LOGGERS` (repeat for several);
    ``where``: where its event files go and what they hold, after :data:`LOG_HELP`."""
    p.add_argument("--log", action="append", choices=["tensorboard"], default=None, metavar="NAME",
                   help=LOG_HELP + where + LOG_INSTALL)


def loggers_of(args: Any) -> list[Any]:
    """The loggers ``--log`` names, made now (a missing package: one line before anything trains)."""
    from ..runs.loggers import make_loggers

    return make_loggers(getattr(args, "log", None))


def add_which(p: Any, default: str | None, help: str) -> None:
    """``--which best|last``: the checkpoint of a run directory to load. ``default`` None: best, or
    for ``bbb laplace`` folders the checkpoint they were fitted to (:func:`resolve_which`)."""
    from ..options import Checkpoint, values

    shown = default or "best; of a bbb laplace folder, the checkpoint it was fitted to"
    p.add_argument("--which", choices=values(Checkpoint), default=default, help=f"{help} (default: {shown})")


def resolve_which(args: Any) -> None:
    """``--which`` left out where its default follows the folders (``add_which(p, None, ...)``):
    the checkpoint that the ``bbb laplace`` folders given were fitted to, where every run
    directory given is one and they agree, else ``best`` (a folder fitted to another is then
    refused in one line that names --which)."""
    if getattr(args, "which", "") is not None:
        return
    from ..errors import BBBError
    from ..runs.trained import is_laplace_folder, laplace_description

    dirs = list(getattr(args, "run_dirs", None) or [getattr(args, "run_dir", None)])
    fitted: set[str] = set()
    for d in dirs:
        if d is None or not is_laplace_folder(d):
            fitted = set()
            break
        try:
            fitted.add(str(laplace_description(Path(d)).get("checkpoint")))
        except BBBError:  # (an unreadable folder: said where it is loaded)
            fitted = set()
            break
    args.which = fitted.pop() if len(fitted) == 1 and fitted <= {"best", "last"} else "best"


def add_data_dir(p: Any, help: str = "data folder (else $BBB_DATA, else ~/.cache/bbb)") -> None:
    p.add_argument("--data-dir", default=None, metavar="DIR", help=help)


@contextlib.contextmanager
def one_line_warnings(command: str) -> Iterator[None]:
    """The library's UserWarnings raised inside as one line each on stderr,
    ``bbb COMMAND: warning: ...`` (after the block), not Python's two-line format."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always", UserWarning)
            try:
                yield
            finally:
                caught = list(recorded)
    finally:  # outside the recording: the others go on as they came
        for w in caught:
            if issubclass(w.category, UserWarning):
                print(f"bbb {command}: warning: {w.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def warn_samples_unused(command: str, samples: int, given: bool, methods: Sequence[str], gives: str) -> None:
    """The one-line warning where ``--samples`` was given (``given``) to runs that are each one
    deterministic network (``--method sgd``): one prediction (``gives``: what it gives), K or not."""
    if given and methods and all(m == "sgd" for m in methods):
        whose = "its" if len(methods) == 1 else "each member's"
        print(f"bbb {command}: warning: --samples {samples} has no effect: {whose} one deterministic network "
              f"(--method sgd) gives one {gives}", file=sys.stderr)


def add_run_dirs_arguments(p: Any, writes: str, which_help: str) -> None:
    """What the commands that read one run or an ensemble of runs share (``bbb evaluate``, ``bbb
    ood``): ``RUN_DIR [RUN_DIR ...]``, ``--out DIR`` (the ensemble's folder for ``writes``; see
    :func:`ensemble_out`), ``--which`` (default best), ``--data-dir``, ``--device`` and ``--threads``."""
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                   help="a directory written by bbb train; several: their ensemble (needs --out)")
    p.add_argument("--out", metavar="DIR", default=None, type=out_folder,
                   help=f"output folder of an ensemble's {writes}, with several RUN_DIRs (required then; not a "
                        "member's directory)")
    add_which(p, None, which_help)
    add_data_dir(p, "data folder (default: the run's)")
    add_device(p)
    add_threads(p)


def ensemble_out(args: Any, writes: str) -> str | None:
    """The ``--out`` of :func:`add_run_dirs_arguments`: required with several RUN_DIRs (the folder of
    their ensemble's ``writes``), refused with one (its files go into its own directory)."""
    from ..errors import UserError

    several = len(args.run_dirs) > 1
    if several and args.out is None:
        raise UserError(f"{len(args.run_dirs)} runs make an ensemble: give --out DIR, the folder for its {writes}")
    if not several and args.out is not None:
        raise UserError(f"--out is the folder of an ensemble's {writes} (several RUN_DIRs); one run's goes into its "
                        "own directory: leave --out out")
    return args.out


def scoring_locked(writes: str) -> Callable[[Callable[[Any], int]], Callable[[Any], int]]:
    """The main function of ``bbb ood`` or ``bbb uncertain`` holding the lock of the one run directory (or Laplace
    posterior's folder) it scores and writes ``writes`` into, as ``bbb evaluate`` holds it
    (:func:`bbb.runs.rundir.lock_run_dir`): a run being trained there is refused, whose best.pt moves on from the
    network the file would score. No lock for an ensemble's --out folder, nor for a path that is no folder (the
    command's own error names it)."""
    def wrap(main: Callable[[Any], int]) -> Callable[[Any], int]:
        @functools.wraps(main)
        def locked(args: Any) -> int:
            from ..runs.rundir import lock_run_dir

            d = Path(args.run_dirs[0])
            if ensemble_out(args, writes) is not None or not d.is_dir():
                return main(args)
            with lock_run_dir(d):
                return main(args)
        return locked
    return wrap


def add_run_dir_arguments(p: Any, what: str, which: str, which_help: str) -> None:
    """What the commands reading a run directory share: ``RUN_DIR`` (``what``), ``--which``
    (default ``which``), ``--data-dir`` (default: the run's), ``--device`` and ``--threads``."""
    p.add_argument("run_dir", metavar="RUN_DIR", help=what)
    add_which(p, which, which_help)
    add_data_dir(p, "data folder (default: the run's)")
    add_device(p)
    add_threads(p)


# --------------------------------------------------------------------------------------------
# One vocabulary: an option means one thing in every command that has it
# --------------------------------------------------------------------------------------------


def std(text: str) -> float:
    """argparse type of a standard deviation (``--sigma-init``): a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"a standard deviation must be a finite number > 0, got {text!r}")
    return v


def std_as_rho(text: str) -> float:
    """argparse type of ``--sigma-init`` where the configuration holds rho (``rho_init`` of
    ``bbb train`` and ``bbb regression``): reads a standard deviation sigma (:func:`std`) and
    returns the rho with softplus(rho) = sigma: the shortest such number, so that the sigma of
    a rho (:func:`sigma_of_rho`) gives that rho back exactly (-3.25, not -3.2500000000000004)."""
    from ..distributions import inverse_softplus

    sigma = std(text)
    rho = float(inverse_softplus(sigma))
    for digits in range(1, 17):
        if sigma_of_rho(round(rho, digits)) == sigma:
            return round(rho, digits)
    return rho


def sigma_of_rho(rho: float) -> float:
    """softplus(rho): the standard deviation a posterior's rho stands for."""
    return rho + math.log1p(math.exp(-rho)) if rho > 0 else math.log1p(math.exp(rho))


class SharedFlag(NamedTuple):
    """What one option means in every command that has it: the words its help starts with
    (``meaning``), the argparse ``type`` that reads it (a tuple: any of these; None: a string, a
    choice or a switch), its ``nargs``, and the library's name for it."""

    meaning: str
    type: Any = None
    nargs: int | str | None = None
    library: str = ""


#: The options that mean one thing in every command that has them: flag -> meaning, type,
#: nargs and the library's name. Every command builds its help from ``meaning``
#: (:func:`shared_help`); tests/applications/cli/test_shared_options.py walks every command's parser against
#: this table. The three sample counts: ``--train-samples`` per training step, ``--samples``
#: per prediction, and ``bbb train --eval-samples`` for the evaluation that ends training
#: (``bbb train --samples`` is the retired spelling of ``--train-samples``: :data:`RETIRED_FLAGS`).
SHARED_FLAGS: dict[str, SharedFlag] = {
    "--train-samples": SharedFlag("weight samples per training step", int,
                                  library="ELBO(num_samples=)"),
    "--samples": SharedFlag("weight samples of the predictive", int,
                            library="bbb.uncertainty.predict(num_samples=)"),
    "--eval-samples": SharedFlag("weight samples of the predictive", int,
                                 library="bbb.uncertainty.predict(num_samples=), at the end of training"),
    "--sigma-init": SharedFlag("initial posterior standard deviation sigma = softplus(rho) of every weight",
                               (std, std_as_rho), library="rho_init = softplus^-1(sigma) of the Bayesian layers"),
    "--beta": SharedFlag("KL scale beta", float, library="ELBO(beta=)"),
    "--kl-weighting": SharedFlag("KL split over the", library="ELBO(kl_weighting=)"),
    "--prior": SharedFlag("BBB prior"),
    "--pi": SharedFlag("mixture prior: weight of the wide component", float, library="ScaleMixturePrior(pi=)"),
    "--sigma1": SharedFlag("mixture prior: std of the wide component", float,
                           library="ScaleMixturePrior(sigma1=)"),
    "--sigma2": SharedFlag("mixture prior: std of the narrow component", float,
                           library="ScaleMixturePrior(sigma2=)"),
    "--prior-sigma": SharedFlag("Gaussian prior: std of every weight", float, library="GaussianPrior(sigma=)"),
    "--hidden": SharedFlag("hidden layer widths", int, "+"),
    "--epochs": SharedFlag("training epochs", int),
    "--lr": SharedFlag("learning rate", float),
    "--optimizer": SharedFlag("the optimiser"),
    "--batch-size": SharedFlag("minibatch size", int),
    "--dataset": SharedFlag("data set"),
    "--data-dir": SharedFlag("data folder"),
    "--out": SharedFlag("output", type=(out_folder, None)),  # "output folder" of a run (an existing file refused);
    # "output file" where one file is written
    "--which": SharedFlag("checkpoint"),
    "--device": SharedFlag("auto (cuda when available), cpu, cuda or cuda:N", library="bbb.devices.resolve_device"),
    "--seed": SharedFlag("random seed", seed_number),
    "--seeds": SharedFlag("random seeds", seed_number, "+"),
    "--threads": SharedFlag("torch threads", int, library="torch.set_num_threads"),
    "--quiet": SharedFlag(QUIET_HELP, nargs=0),
    "--no-compile": SharedFlag(NO_COMPILE_HELP, nargs=0, library="BBB_COMPILE=0, Engine(compile=False)"),
    "--log": SharedFlag(LOG_HELP, library="train(loggers=), bbb.runs.TrainLogger"),
}


def shared_help(flag: str, rest: str = "") -> str:
    """The help of ``flag`` (a key of :data:`SHARED_FLAGS`): its meaning, then ``rest``."""
    return SHARED_FLAGS[flag].meaning + rest


#: Retired spellings -> the option that replaced them. Each is still accepted for one release,
#: as a hidden alias (:func:`add_deprecated_alias`); config.json keys are unchanged.
RETIRED_FLAGS: dict[str, str] = {
    "--rho-init": "--sigma-init",  # a rho, where every command now takes the standard deviation
    "--kl-scale": "--beta",
    "--decision-samples": "--samples",
}

#: Retired in one command only: ``bbb train --samples`` meant the training samples.
RETIRED_IN_COMMAND: dict[str, dict[str, str]] = {"train": {"--samples": "--train-samples"}}


class DeprecatedAlias(argparse.Action):
    """A retired spelling of option ``new``: not in ``--help``, it stores into ``new``'s dest
    and prints one line on stderr that says what to write instead (``shown``: the value as
    ``new`` takes it)."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str,
                 shown: Any = None, **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.new = new
        self.shown = shown

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        v = values if self.shown is None else self.shown(values)
        text = repr(v) if isinstance(v, float) else str(v)  # a float exactly, as the new option reads it
        print(f"{parser.prog}: DeprecationWarning: {option_string} is deprecated and will be removed in "
              f"the next release; use {self.new} {text}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated_alias(p: Any, old: str, new: str, dest: str, type: Any = None, shown: Any = None) -> None:
    """Accept ``old``, the retired spelling of ``new`` (:data:`RETIRED_FLAGS`), for one more
    release: hidden, stored into ``dest`` (``new``'s), one DeprecationWarning line on stderr."""
    p.add_argument(old, dest=dest, type=type, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                   action=DeprecatedAlias, new=new, shown=shown)


#: the test scores of a predictive (an ensemble's, a Laplace posterior's) as the CLI prints them:
#: (label, key in eval.json, format; None: a percentage)
SCORE_ROWS: dict[str, list[tuple[str, str, str | None]]] = {
    "regression": [("test RMSE", "test_rmse_mc", "{:.4g}"), ("log-likelihood", "log_likelihood", "{:.4f}"),
                   ("95% interval coverage", "coverage_95", None)],
    "classification": [("test error", "test_error_mc", None), ("NLL (nats)", "nll", "{:.4f}"),
                       ("ECE (15 bins)", "ece", None), ("Brier", "brier", "{:.4f}")],
}


def score_text(value: float, fmt: str | None) -> str:
    """A score of :data:`SCORE_ROWS` as printed."""
    return pct_text(value) if fmt is None else fmt.format(value)


def scores_table(task: str, title: str, columns: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The scores of :data:`SCORE_ROWS` for ``task``, one column per (name, scores) of ``columns``."""
    rows = [[label, *(score_text(scores[key], fmt) for _, scores in columns)] for label, key, fmt in SCORE_ROWS[task]]
    return text_table(rows, [title, *(name for name, _ in columns)])


def unfinished_warning(command: str, run_dir: str | Path, which: str) -> str | None:
    """The warning line for a run that stopped before its epochs (interrupted, still training or
    diverged: no ``summary.json``), whose ``which`` checkpoint ``bbb evaluate`` or ``bbb predict``
    would otherwise use without a word; None for a finished run or a folder that is no run's."""
    from ..runs.jobs import diverged_message, epochs_done, read_json

    d = Path(run_dir)
    cfg = read_json(d / "config.json")
    epochs = None if cfg is None else cfg.get("epochs")
    if not isinstance(epochs, int) or (d / "summary.json").is_file():
        return None
    done = epochs_done(d)
    if not 0 < done < epochs:
        return None
    why = diverged_message(d)
    if why is not None:
        return (f"bbb {command}: warning: {run_dir} diverged after epoch {done} of {epochs} ({why[:120]}): its "
                f"{which}.pt is from before")
    return (f"bbb {command}: warning: {run_dir} has not finished training (epoch {done} of {epochs}, no "
            f"summary.json): its {which}.pt is from the epochs so far; bbb train --resume --out {run_dir} "
            "finishes it")
