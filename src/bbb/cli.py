"""The ``bbb`` command line: train, evaluate, prune, demo, ood, uncertain, regression, bandit, ...

Every user mistake (bad argument, missing run directory or data, corrupt checkpoint) ends with
one line on stderr, ``bbb: error: ...``, and exit code 2; Ctrl-C during training ends with exit
code 130 and a line saying how to resume. ``regression`` and ``bandit`` import their experiment
module only when they run.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .errors import UserError

__all__ = ["main", "build_parser", "DEMO_SETTINGS"]

PROG = "bbb"
#: name -> (module, one-line help[, add_arguments function, main function]); the module is
#: imported only when the command runs. Default function names: add_arguments / main.
LAZY_COMMANDS: dict[str, tuple[str, ...]] = {
    "regression": ("bbb.experiments.regression",
                   "Regression curves with BBB (section 5.2 of the paper)."),
    "bandit": ("bbb.experiments.bandit",
               "Contextual bandit on UCI Mushroom with Thompson sampling (section 5.3 of the paper)."),
    "sweep": ("bbb.sweep", "Hyperparameter sweep over a search space, locally or on a Ray cluster."),
    "reproduce": ("bbb.experiments.mnist",
                  "Reproduce the paper's MNIST Table 1, Figures 2-4 and Table 2 (section 5.1 of the paper)."),
    "ood": ("bbb.experiments.uncertainty",
            "Out-of-distribution detection of a trained run (AUROC/AUPR of entropy, MI, max-prob).",
            "add_ood_arguments", "main_ood"),
    "uncertain": ("bbb.experiments.uncertainty",
                  "Grids of the most disputed test digits and the most confident errors (vote shares).",
                  "add_uncertain_arguments", "main_uncertain"),
    "compare": ("bbb.experiments.comparison",
                "Side-by-side table of runs: error, NLL, ECE, Brier, OOD AUROC (CSV + markdown)."),
}

#: The demo's recipe: scale-mixture BBB 2x400 on MNIST, tuned for a short CPU budget.
#: Measured on 2 CPU cores (about 12-14 s per epoch when the cores are free; 10 epochs, cosine
#: learning-rate decay): Blundell KL weighting reaches 1.79% test error but barely optimises the
#: KL (its weight is ~0 after the first few minibatches of an epoch), so sigma stays near its
#: initial value and pruning fails (75% removed: 2.24%, 95%: 32%); uniform weighting (1/M) reaches
#: 2.04%, lowers the free energy from 51 to 35 nats per example, and prunes like the paper
#: (75% removed: no change). The demo uses uniform; the local estimator was no better per epoch.
DEMO_SETTINGS: dict[str, Any] = {
    "dataset": "mnist",
    "method": "bbb",
    "prior": "mixture",
    "pi": 0.25,
    "sigma1": 1.0,
    "sigma2": math.exp(-7.0),
    "hidden": [400, 400],
    "epochs": 15,
    "lr": 1e-3,
    "optimizer": "adam",
    "lr_schedule": "cosine",
    "batch_size": 128,
    "samples": 1,
    "estimator": "reparam",
    "kl_weighting": "uniform",
    "kl": "mc",
    "test_each_epoch": True,
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (exit code 2, as argparse)."""

    def error(self, message: str) -> NoReturn:
        msg = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {msg} (see '{self.prog} --help')\n")


def _fmt_default(v: Any) -> str:
    if isinstance(v, list):
        return " ".join(str(i) for i in v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


# --------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------

TRAIN_EXAMPLE = """\
Example:
  bbb train --dataset mnist --method bbb --prior mixture --pi 0.25 --sigma1 1 --sigma2 0.0009 \\
      --hidden 400 400 --epochs 10 --lr 1e-3 --samples 1 --estimator reparam \\
      --kl-weighting blundell --seed 0 --device auto --out runs/bbb400

  bbb train --method dropout --hidden 1200 1200 --epochs 100 --out runs/dropout1200
  bbb train --resume --out runs/bbb400 --epochs 20      # continue (or extend) a run

The run directory gets config.json, metrics.csv (one row per epoch), summary.json,
last.pt and best.pt (by validation error)."""


def _add_train_options(p: argparse.ArgumentParser) -> None:
    """The ``bbb train`` options; every default is SUPPRESS so that --resume can tell what was given."""
    from .runs import TrainConfig

    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())  # type: ignore[misc]
                for f in dataclasses.fields(TrainConfig)}

    g = p.add_argument_group("data")
    add_g = _adder(g, defaults)
    add_g("--dataset", "dataset", "data set: mnist or fashion-mnist")
    add_g("--data-dir", "data_dir", "data folder (else $BBB_DATA, else ~/.cache/bbb)", metavar="DIR",
          show_default=False)
    add_g("--scale", "scale", "pixels are divided by this (the paper: 126)", type=float)
    add_g("--val-size", "val_size", "training images held out for validation", type=int)

    g = p.add_argument_group("model")
    add_g = _adder(g, defaults)
    add_g("--method", "method", "bbb (Bayes by Backprop), sgd (plain MLP) or dropout")
    add_g("--hidden", "hidden", "hidden layer widths", type=int, nargs="+", metavar="N")
    add_g("--prior", "prior", "bbb prior: mixture (scale mixture, eq. 7) or gaussian")
    add_g("--pi", "pi", "mixture weight of the wide component, in (0, 1]", type=float)
    add_g("--sigma1", "sigma1", "std of the wide mixture component", type=float)
    add_g("--sigma2", "sigma2", "std of the narrow mixture component", type=float)
    add_g("--prior-sigma", "prior_sigma", "std of the Gaussian prior (--prior gaussian)", type=float)
    add_g("--estimator", "estimator", "reparam (the paper), local (local reparameterisation) or flipout")
    add_g("--rho-init", "rho_init", "initial rho (sigma = softplus(rho))", type=float)
    add_g("--mu-init-scale", "mu_init_scale", "mu ~ U(-b, b) with this b (default 1/sqrt(fan_in))",
          type=float, show_default=False)
    add_g("--dropout-input", "dropout_input", "dropout rate on the inputs (--method dropout)", type=float)
    add_g("--dropout-hidden", "dropout_hidden", "dropout rate after hidden layers (--method dropout)", type=float)

    g = p.add_argument_group("objective and optimisation")
    add_g = _adder(g, defaults)
    add_g("--epochs", "epochs", "training epochs", type=int)
    add_g("--lr", "lr", "learning rate", type=float)
    add_g("--optimizer", "optimizer", "adam or sgd")
    add_g("--momentum", "momentum", "momentum of --optimizer sgd", type=float)
    add_g("--lr-schedule", "lr_schedule", "none, cosine (to 0 over --epochs) or step")
    add_g("--lr-step-size", "lr_step_size", "epochs per step of --lr-schedule step (0: epochs // 3)", type=int)
    add_g("--lr-gamma", "lr_gamma", "factor per step of --lr-schedule step", type=float)
    add_g("--batch-size", "batch_size", "minibatch size", type=int)
    add_g("--samples", "samples", "Monte Carlo weight samples per step (k)", type=int)
    add_g("--kl-weighting", "kl_weighting", "minibatch KL weights: blundell (2^(M-i)/(2^M-1)) or uniform (1/M)")
    add_g("--kl", "kl", "KL estimate: auto (closed form when it exists), closed or mc")

    g = p.add_argument_group("run")
    add_g = _adder(g, defaults)
    p.add_argument("--out", required=True, metavar="DIR", help="run directory (required)")
    add_g("--seed", "seed", "random seed", type=int)
    add_g("--device", "device", "auto (cuda when available), cpu or cuda")
    g.add_argument("--bf16", dest="bf16", action="store_true", default=argparse.SUPPRESS,
                   help="bf16 autocast (CUDA only; ignored with a warning on CPU)")
    add_g("--eval-samples", "eval_samples", "samples of the final predictive evaluation", type=int)
    g.add_argument("--test-each-epoch", dest="test_each_epoch", action="store_true",
                   default=argparse.SUPPRESS, help="also log the test error every epoch")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from last.pt")
    g.add_argument("--quiet", action="store_true", help="one line per epoch instead of a progress bar")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads for torch (default: torch's choice; use 1 when other jobs share the cores)")


def _adder(group: Any, defaults: dict[str, Any]) -> Any:
    """An add_argument for ``group`` whose default is SUPPRESS and whose help names the real default."""

    def add(flag: str, dest: str, help: str, show_default: bool = True, **kw: Any) -> None:
        if show_default:
            help = f"{help} (default: {_fmt_default(defaults.get(dest))})"
        group.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=help, **kw)
    return add


def build_parser() -> argparse.ArgumentParser:
    """The full ``bbb`` parser (``regression`` and ``bandit`` only as names; see :func:`main`)."""
    from . import __version__

    parser = _Parser(
        prog=PROG,
        description="Bayes by Backprop (Blundell et al. 2015): train, evaluate and prune Bayesian "
                    "networks, and run the paper's experiments.",
        epilog="Example:\n  bbb demo                      # the main job: MNIST in a few minutes\n"
               "  bbb train --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"bbb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    raw = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("train", help="train a network on MNIST / Fashion-MNIST",
                       description="Train one network (bbb, sgd or dropout) and write a run directory.",
                       epilog=TRAIN_EXAMPLE, formatter_class=raw)
    _add_train_options(p)

    p = sub.add_parser(
        "evaluate", help="test error, NLL, ECE, Brier of a trained run",
        description="Evaluate a run on its test set: error with the mean weights and with the "
                    "k-sample predictive average, NLL, ECE and Brier score. Writes RUN_DIR/eval.json.",
        epilog="Example:\n  bbb evaluate runs/bbb400 --samples 10 --which best", formatter_class=raw)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by bbb train")
    p.add_argument("--samples", type=int, default=10, help="Monte Carlo samples (default: 10)")
    p.add_argument("--which", choices=("best", "last"), default="best",
                   help="checkpoint: best (by validation error) or last (default: best)")
    p.add_argument("--data-dir", default=None, metavar="DIR", help="data folder (default: the run's)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads for torch (default: torch's choice; use 1 when other jobs share the cores)")

    p = sub.add_parser(
        "prune", help="the paper's Table 2: prune by signal-to-noise ratio",
        description="Remove the weights with the lowest |mu|/sigma and report the test error with the "
                    "mean of the kept weights (Table 2). Writes RUN_DIR/pruning.csv. bbb runs only.",
        epilog="Example:\n  bbb prune runs/bbb400 --fractions 0 0.5 0.75 0.95 0.98", formatter_class=raw)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by bbb train --method bbb")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.5, 0.75, 0.95, 0.98],
                   metavar="F", help="fractions of weights to remove (default: 0 0.5 0.75 0.95 0.98)")
    p.add_argument("--which", choices=("best", "last"), default="last",
                   help="checkpoint (default: last, as the paper prunes the end of training)")
    p.add_argument("--data-dir", default=None, metavar="DIR", help="data folder (default: the run's)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads for torch (default: torch's choice; use 1 when other jobs share the cores)")

    p = sub.add_parser(
        "demo", help="the main job: train, evaluate and prune a BBB 2x400 on MNIST",
        description="Train a scale-mixture BBB 2x400 on MNIST for a short CPU budget (about 5 minutes "
                    "on 2 cores), then evaluate and prune it: prints the test error and the pruning "
                    "table; writes metrics.csv, summary.json, eval.json, pruning.csv, "
                    "learning_curve.png and snr.png. Re-running continues/reuses the run in --out.",
        epilog="Example:\n  bbb demo --out runs/demo --epochs 10", formatter_class=raw)
    p.add_argument("--out", default="runs/demo", metavar="DIR", help="run directory (default: runs/demo)")
    p.add_argument("--epochs", type=int, default=DEMO_SETTINGS["epochs"],
                   help=f"training epochs (default: {DEMO_SETTINGS['epochs']})")
    p.add_argument("--data-dir", default=None, metavar="DIR", help="data folder (else $BBB_DATA, else ~/.cache/bbb)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads for torch (default: torch's choice; use 1 when other jobs share the cores)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--quiet", action="store_true", help="one line per epoch instead of a progress bar")

    for name, spec in LAZY_COMMANDS.items():
        sub.add_parser(name, help=spec[1].split(" (")[0].rstrip("."), add_help=False)
    return parser


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]], header: Sequence[str], left: bool = True) -> str:
    """A plain-text table; the first column left-aligned when ``left``, the others right-aligned."""
    cols = list(zip(header, *rows))
    widths = [max(len(str(c)) for c in col) for col in cols]

    def line(cells: Sequence[Any]) -> str:
        return "  ".join(str(c).ljust(w) if j == 0 and left else str(c).rjust(w)
                         for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _cmd_train(args: argparse.Namespace) -> int:
    from .runs import TrainConfig, load_checkpoint, train

    given = {k: v for k, v in vars(args).items() if k not in ("command", "out", "resume", "quiet", "threads")}
    out = Path(args.out)
    if args.resume and (out / "last.pt").exists():
        stored = load_checkpoint(out / "last.pt")["config"]
        cfg = TrainConfig.from_dict({**stored, **given})
    else:
        cfg = TrainConfig(**given)
    summary = train(cfg, out, resume=args.resume, quiet=args.quiet)
    _print_summary(summary, out)
    return 0


def _print_summary(s: dict[str, Any], out: Path) -> None:
    rows = [
        ["test error (mean weights)", _pct(s["test_error"])],
        [f"test error ({s['eval_samples']}-sample average)", _pct(s["test_error_mc"])],
        ["validation error", _pct(s["val_error"])],
        ["test NLL / ECE / Brier", f"{s['test_nll']:.4f} / {s['test_ece']:.4f} / {s['test_brier']:.4f}"],
        ["model", f"{s['model']} (epoch {s['best_epoch']} of {s['epochs']})"],
        ["training time", f"{s['seconds']:.1f} s"],
    ]
    print(_table(rows, ["run " + str(out), ""]))


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .runs import evaluate_run

    r = evaluate_run(args.run_dir, samples=args.samples, which=args.which, data_dir=args.data_dir,
                     device=args.device)
    _print_eval(r)
    return 0


def _print_eval(r: dict[str, Any]) -> None:
    mean = "mean weights" if r["method"] == "bbb" else "deterministic"
    avg = f"{r['samples']}-sample average" if r["method"] != "sgd" else "(same network)"
    rows = [["test error", _pct(r["test_error"]), _pct(r["test_error_mc"])],
            ["NLL (nats)", f"{r['nll_mean']:.4f}", f"{r['nll']:.4f}"],
            ["ECE (15 bins)", _pct(r["ece_mean"]), _pct(r["ece"])],
            ["Brier", f"{r['brier_mean']:.4f}", f"{r['brier']:.4f}"]]
    print(_table(rows, [f"{r['run']} ({r['checkpoint']}.pt, epoch {r['epoch']})", mean, avg]))
    files = ["eval.json"] + list(r.get("plots", []))
    print(f"wrote {', '.join(str(Path(r['run']) / f) for f in files)}")


def _cmd_prune(args: argparse.Namespace) -> int:
    from .runs import prune_run

    rows = prune_run(args.run_dir, args.fractions, which=args.which, data_dir=args.data_dir,
                     device=args.device)
    _print_pruning(rows)
    print(f"wrote {Path(args.run_dir) / 'pruning.csv'}")
    return 0


def _weights(n: int) -> str:
    return f"{n / 1e6:.2f}m" if n >= 1e6 else (f"{n / 1e3:.0f}k" if n >= 1e3 else str(n))


def _print_pruning(rows: Sequence[dict[str, Any]]) -> None:
    print(_table([[f"{100 * r['fraction_removed']:g}%", _weights(r["weights_left"]), _pct(r["test_error"])]
                  for r in rows], ["proportion removed", "#weights", "test error"], left=False))


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import plots
    from .prune import signal_to_noise, snr_db
    from .runs import (
        TrainConfig,
        evaluate_run,
        load_run,
        prune_run,
        read_metrics,
        train,
    )
    from .runs import model as runmodel

    t0 = time.perf_counter()
    out = Path(args.out)
    cfg = TrainConfig(**{**DEMO_SETTINGS, "epochs": args.epochs, "seed": args.seed,
                         "device": args.device, "data_dir": args.data_dir})
    print(f"bbb demo: BBB 2x400, scale-mixture prior (pi={cfg.pi}, sigma1={cfg.sigma1}, "
          f"sigma2=e^-7), {cfg.epochs} epochs on MNIST (50k train / 10k validation) -> {out}", flush=True)
    data = runmodel.load_data(cfg)
    summary = train(cfg, out, data=data, resume=True, quiet=args.quiet)
    ev = evaluate_run(out, samples=cfg.eval_samples, which="best", device=args.device, data=data)
    print()
    _print_eval(ev)
    rows = prune_run(out, (0.0, 0.5, 0.75, 0.95, 0.98), which="last", device=args.device, data=data)
    print()
    print("Pruning by signal-to-noise |mu|/sigma (last epoch, mean weights of the kept weights):")
    _print_pruning(rows)
    written = ["config.json", "metrics.csv", "summary.json", "eval.json", "pruning.csv"]
    model, _ = load_run(out, "last")
    for name, make in (("learning_curve.png", lambda p: plots.learning_curve(read_metrics(out), p)),
                       ("snr.png", lambda p: plots.snr_histogram(snr_db(signal_to_noise(model)), p))):
        if make(out / name) is not None:
            written.append(name)
    total = time.perf_counter() - t0
    print()
    print(f"test error {_pct(ev['test_error'])} (mean weights), {_pct(ev['test_error_mc'])} "
          f"({ev['samples']}-sample average); training {summary['seconds']:.0f} s, total {total:.0f} s")
    print(f"wrote {', '.join(written)} in {out}")
    return 0


def _run_lazy(name: str, argv: Sequence[str]) -> int:
    module_name, desc, *funcs = LAZY_COMMANDS[name]
    add_name, main_name = funcs if funcs else ("add_arguments", "main")
    try:
        mod = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise UserError(f"the {name} experiment is not available in this installation "
                            f"({module_name} not found)") from None
        raise
    example = getattr(mod, "EXAMPLE", None) or f"bbb {name}"
    parser = _Parser(prog=f"{PROG} {name}", description=(mod.__doc__ or desc).strip().split("\n\n")[0],
                     epilog=f"Example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)
    getattr(mod, add_name)(parser)
    args = parser.parse_args(list(argv))
    args.command = name
    _set_threads(getattr(args, "threads", None))
    rc = getattr(mod, main_name)(args)
    return 0 if rc is None else int(rc)


def _set_threads(n: int | None) -> None:
    """Apply ``--threads`` (torch's intra-op threads) when given."""
    if n is None:
        return
    if n < 1:
        raise UserError(f"--threads must be >= 1, got {n}")
    import torch

    torch.set_num_threads(n)


COMMANDS = {"train": _cmd_train, "evaluate": _cmd_evaluate, "prune": _cmd_prune, "demo": _cmd_demo}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bbb`` console script and ``python -m bbb``; returns the exit code."""
    # OpenMP threads that spin while waiting make torch 8-11x slower when other processes share
    # the cores (docs/design.md). libgomp reads this when torch loads, so it is set here, before
    # anything imports torch (``import bbb`` does not); an explicit setting by the user wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from .runs import TrainingInterrupted

    argv = list(sys.argv[1:] if argv is None else argv)
    # MKL's strict conditional-numerical-reproducibility mode: its GEMMs give the same bits on
    # 1 or 2 threads, so a run's metrics do not depend on --threads (read at MKL's first call;
    # measured at no cost on 2x400 and 2x1200 steps). An explicit setting by the user wins.
    os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
    from .engine import tune_malloc

    tune_malloc()  # steadier and faster training steps (bbb.engine.malloc)
    try:
        if argv and argv[0] in LAZY_COMMANDS:
            return _run_lazy(argv[0], argv[1:])
        args = build_parser().parse_args(argv)
        _set_threads(getattr(args, "threads", None))
        return COMMANDS[args.command](args)
    except UserError as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable --out, a full disk, a file that vanished: the user's to fix
        where = f" ({e.filename})" if e.filename else ""
        print(f"{PROG}: error: {e.strerror or e}{where}; check the path and its permissions", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
