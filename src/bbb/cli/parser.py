"""The ``bbb`` parser and the ``bbb train`` options."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, NamedTuple

from .common import (
    Parser,
    add_data_dir,
    add_deprecated_alias,
    add_device,
    add_log,
    add_out,
    add_quiet,
    add_run_dir_arguments,
    add_run_dirs_arguments,
    add_seed,
    add_threads,
    fmt_default,
    seed_number,
    shared_help,
    sigma_of_rho,
    std_as_rho,
)
from .registry import COMMANDS, DEMO_SETTINGS, PROG

TRAIN_EXAMPLE = """\
Example:
  bbb train --dataset mnist --method bbb --prior mixture --pi 0.25 --sigma1 1 --sigma2 0.0009 \\
      --hidden 400 400 --epochs 10 --lr 1e-3 --train-samples 1 --estimator reparam \\
      --kl-weighting blundell --seed 0 --device auto --out runs/bbb400

  bbb train --method dropout --hidden 1200 1200 --epochs 100 --out runs/dropout1200
  bbb train --method ivon --epochs 10 --out runs/ivon400   # the same 2x400, trained by IVON
  bbb train --resume --out runs/bbb400 --epochs 20      # continue (or extend) a run
  bbb train --csv table.csv --target price --hidden 50 --epochs 40 --out runs/price
  bbb train --images photos/ --image-size 32 --epochs 50 --out runs/photos   # photos/cat/*.jpg, photos/dog/*.jpg

The run directory gets config.json, metrics.csv (one row per epoch), summary.json,
last.pt and best.pt (the best epoch by --select-by). A new run refuses a directory that holds a
previous run's files unless --overwrite is given; --resume refuses one without last.pt.
Your own data (--csv, --npz, --images) has defaults of its own, sized for a table: a default shown as
"X; --csv/--npz: Y" is X for MNIST and Y for your data (docs/defaults.md).
While it trains, the run holds a lock (DIR/.lock, with its pid): a second bbb train on
the same --out is refused."""


def add_train_options(p: argparse.ArgumentParser) -> None:
    """The ``bbb train`` options; every default is SUPPRESS so that --resume can tell what was given."""
    from .. import options as O
    from ..distributions import KLMode
    from ..elbo import KLWeighting
    from ..engine.engine import OptimizerKind
    from ..nn.base import Estimator
    from ..runs import TrainConfig
    from ..runs.config import DATA_DEFAULTS, METHOD_DATA_DEFAULTS, METHOD_DEFAULTS, SELECT_BY

    defaults: dict[str, Any] = {f.name: f.default_factory() if callable(f.default_factory) else f.default
                                for f in dataclasses.fields(TrainConfig)}
    for name, value in DATA_DEFAULTS["image"].items():  # the defaults that depend on the data: both
        defaults[name] = ByData(value, DATA_DEFAULTS["file"][name])
    ivon = METHOD_DEFAULTS[O.Method.IVON.value]
    # the defaults that depend on the method (METHOD_DEFAULTS): the learning rate's, and IVON's own
    bbb_lr = METHOD_DEFAULTS[O.Method.BBB.value]["lr"]
    ivon_file = {**ivon, **METHOD_DATA_DEFAULTS.get((O.Method.IVON.value, "file"), {})}
    defaults["lr"] = (f"{fmt_default(bbb_lr)}; --method ivon: {fmt_default(ivon['lr'])}, with --csv/--npz "
                      f"{fmt_default(ivon_file['lr'])}")
    defaults.update({k: ByData(ivon[k], ivon_file[k]) if ivon[k] != ivon_file[k] else ivon[k]
                     for k in ("hess_init", "weight_decay")})

    g = p.add_argument_group("data")
    add_g = suppressed_adder(g, defaults)
    add_g("--dataset", "dataset", shared_help("--dataset"), choices=O.IMAGE_DATASETS)
    add_g("--data-dir", "data_dir", shared_help("--data-dir", " (else $BBB_DATA, else ~/.cache/bbb)"), metavar="DIR",
          show_default=False)
    add_g("--scale", "scale", "pixels are divided by this (the paper: 126)", type=float)
    add_g("--val-size", "val_size", "training images held out for validation", type=int)
    add_g("--train-size", "train_size", "train on this many training rows/images only (a seeded subset, for a "
          "quick trial; default: all)", type=int, metavar="N", show_default=False)
    add_own_data_options(p, defaults)

    g = p.add_argument_group("model")
    add_g = suppressed_adder(g, defaults)
    add_g("--method", "method", "bbb (Bayes by Backprop), ivon (the same Bayesian network trained by IVON, a "
          "natural-gradient optimiser: --ess, --hess-init, --weight-decay), sgd (plain MLP) or dropout",
          choices=O.values(O.Method))
    add_g("--hidden", "hidden", shared_help("--hidden"), type=int, nargs="+", metavar="N")
    add_g("--prior", "prior", shared_help("--prior", ": mixture (scale mixture, eq. 7) or gaussian"),
          choices=O.values(O.PriorKind))
    add_g("--pi", "pi", shared_help("--pi", ", in (0, 1]"), type=float)
    add_g("--sigma1", "sigma1", shared_help("--sigma1"), type=float)
    add_g("--sigma2", "sigma2", shared_help("--sigma2"), type=float)
    add_g("--prior-sigma", "prior_sigma", shared_help("--prior-sigma", " (--prior gaussian)"), type=float)
    add_g("--estimator", "estimator",
          "reparam (the paper), local (local reparameterisation) or flipout (local and flipout train on the "
          "plain autograd path: the same mathematics, slower than reparam's fused engine)",
          choices=O.values(Estimator))
    rho = defaults["rho_init"]
    add_g("--sigma-init", "rho_init", shared_help("--sigma-init", f" (bbb; default: {sigma_of_rho(rho):.2g}, "
          f"rho {rho:g}; config.json keeps rho_init)"), type=std_as_rho, metavar="S", show_default=False)
    add_deprecated_alias(g, "--rho-init", "--sigma-init", "rho_init", float, sigma_of_rho)
    add_g("--mu-init-scale", "mu_init_scale", "mu ~ U(-b, b) with this b (default: 1/sqrt(fan_in))",
          type=float, show_default=False)
    add_g("--dropout-input", "dropout_input", "dropout rate on the inputs (--method dropout)", type=float)
    add_g("--dropout-hidden", "dropout_hidden", "dropout rate after hidden layers (--method dropout)", type=float)

    g = p.add_argument_group("objective and optimisation")
    add_g = suppressed_adder(g, defaults)
    add_g("--epochs", "epochs", shared_help("--epochs"), type=int)
    add_g("--lr", "lr", shared_help("--lr"), type=float)
    add_g("--optimizer", "optimizer", shared_help("--optimizer", " (the update rule)"), choices=O.values(OptimizerKind))
    add_g("--momentum", "momentum", "momentum of --optimizer sgd", type=float)
    add_g("--rho-lr-scale", "rho_lr_scale", "bbb: rho's learning rate is --lr times this (lets sigma move "
          "under plain SGD)", type=float)
    add_g("--lr-schedule", "lr_schedule", "none, cosine (to 0 over --epochs) or step",
          choices=O.values(O.LRSchedule))
    add_g("--lr-step-size", "lr_step_size", "epochs per step of --lr-schedule step (0: a third of --epochs, at "
          "least 1)", type=int)
    add_g("--lr-gamma", "lr_gamma", "factor per step of --lr-schedule step", type=float)
    add_g("--batch-size", "batch_size", shared_help("--batch-size"), type=int)
    add_g("--train-samples", "samples", shared_help("--train-samples", " (k; config.json: samples)"), type=int,
          metavar="K")
    add_deprecated_alias(g, "--samples", "--train-samples", "samples", int)
    add_g("--kl-samples", "kl_samples", "bbb: weight samples the Monte Carlo KL averages over, >= --train-samples; "
          "the extra ones are drawn for the KL alone (a lower-variance KL gradient, no extra forward pass; "
          "default: the --train-samples of the likelihood, the paper's estimator)", type=int, show_default=False)
    add_g("--kl-weighting", "kl_weighting",
          shared_help("--kl-weighting", " minibatches of an epoch: blundell (2^(M-i)/(2^M-1)), uniform (1/M) or blob "
                     "(blundell reversed, 2^(i-1)/(2^M-1): most of it on the last minibatches)"),
          choices=O.values(KLWeighting))
    add_g("--kl", "kl", "KL estimate: auto (closed form when it exists), closed, mc (the paper's) or split "
          "(closed-form parts + one importance sample for the rest: the mixture's spike without its noise)",
          choices=O.values(KLMode))
    add_g("--ess", "ess", "--method ivon: the effective sample size, the weight of the data against IVON's prior "
          "(default: the training set's size, the Bayesian choice; larger: a colder posterior; config.json's "
          "ess_used holds the value used)", type=float, metavar="N", show_default=False)
    add_g("--hess-init", "hess_init", "--method ivon: the Hessian estimate h at the start (sigma at the start is "
          "1/sqrt(ess (h + weight decay)))", type=float, metavar="H")
    add_g("--weight-decay", "weight_decay", "--method ivon: IVON's L2 penalty per example: its Gaussian prior on "
          "every weight has precision --ess times this", type=float, metavar="D")

    g = p.add_argument_group("run")
    add_g = suppressed_adder(g, defaults)
    add_out(p, shared_help("--out", ": the run directory"))
    add_g("--seed", "seed", shared_help("--seed"), type=seed_number)
    add_g("--device", "device", shared_help("--device"))
    g.add_argument("--bf16", dest="bf16", action="store_true", default=argparse.SUPPRESS,
                   help="bf16 autocast (CUDA only; ignored with a warning on CPU)")
    add_g("--eval-samples", "eval_samples", shared_help("--eval-samples", " average that evaluates the trained "
          "network"), type=int, metavar="K")
    g.add_argument("--test-each-epoch", dest="test_each_epoch", action="store_true",
                   default=argparse.SUPPRESS, help="also log the test error every epoch")
    add_g("--select-by", "select_by", "what picks best.pt (which evaluate and predict use): nll, the epoch of the "
          "lowest validation NLL of the mean weights (a continuous score: on a small validation set the error "
          "moves in steps and an undertrained epoch can win it by luck), or error, the lowest validation error "
          "(RMSE for regression; the paper's early stopping); ties go to the earlier epoch", choices=SELECT_BY)
    add_g("--checkpoint-every", "checkpoint_every", "write last.pt (with best.pt and metrics.csv) every N epochs, "
          "and at the end and when stopped; the epochs between are kept in memory (on a GPU a checkpoint "
          "can cost as much as an epoch)", type=int, metavar="N")
    g.add_argument("--cuda-graph", dest="cuda_graph", action="store_true", default=argparse.SUPPRESS,
                   help="on a GPU, replay the training step from CUDA graphs (bbb, sgd, dropout): one launch "
                        "for the hundreds of small kernels of a step; the same numbers as without it")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last.pt (an error, changing nothing, when "
                        "there is none)")
    g.add_argument("--overwrite", action="store_true",
                   help="replace a previous run in --out (its files are removed first); without it a "
                        "new run refuses a --out that holds one")
    add_quiet(g, "the summary table")
    add_log(g)
    add_threads(g)


def _data_of(flag: str) -> Any:
    """The argparse ``type`` of ``bbb train``'s ``flag`` (--csv, --npz, --images): the path as given,
    refused where it is the other kind of data (a folder given to --npz trained on its images)."""
    def check(value: str) -> str:
        from pathlib import Path

        path, suffix = Path(value), Path(value).suffix.lower()
        other = ("--images" if path.is_dir() else "--npz" if suffix == ".npz" else "--csv" if suffix == ".csv"
                 else None)
        if other is not None and other != flag:
            what = "a folder" if path.is_dir() else f"a {suffix} file"
            raise argparse.ArgumentTypeError(f"{value} is {what}: give it as {other} {value}")
        if flag == "--images" and path.is_file():
            raise argparse.ArgumentTypeError(f"{value} is a file; --images takes a folder with one subfolder per "
                                             "class (a table: --csv, arrays: --npz)")
        return value
    return check


def add_own_data_options(p: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    """``bbb train --csv / --npz / --images``: your own data (docs/your_data.md)."""
    from ..runs.config import LIKELIHOODS, NOISE_LR_SCALE, TASKS

    g = p.add_argument_group("your own data (instead of --dataset; docs/your_data.md)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--csv", dest="data_file", type=_data_of("--csv"), metavar="FILE", default=argparse.SUPPRESS,
                     help="a CSV table with a header row: numeric columns are standardised, text columns one-hot "
                          "encoded; needs --target")
    src.add_argument("--npz", dest="data_file", type=_data_of("--npz"), metavar="FILE", default=argparse.SUPPRESS,
                     help="NumPy arrays x (N, ...) and y (N,) in one .npz file (np.savez)")
    src.add_argument("--images", dest="data_file", type=_data_of("--images"), metavar="DIR", default=argparse.SUPPRESS,
                     help="a folder of images with one subfolder per class, named by its class (DIR/cat/*.png, "
                          "DIR/dog/*.jpg): read grey (--colour: in colour) and resized to --image-size")
    add_g = suppressed_adder(g, defaults)
    add_g("--image-size", "image_size", "--images: the size the images are resized to, one number (square) or "
          "height and width (default: 28, MNIST's)", type=int, nargs="+", metavar="PIXELS", show_default=False)
    g.add_argument("--colour", dest="image_colour", action="store_true", default=argparse.SUPPRESS,
                   help="--images: read them in colour, red, green and blue (default: grey)")
    add_g("--target", "target", "the CSV column to predict", metavar="COLUMN", show_default=False)
    add_g("--ignore", "ignore_columns", "CSV columns that are not features (an identifier, a note): left out of "
          "the inputs; bbb predict carries them through", metavar="COLUMN", nargs="+", show_default=False)
    add_g("--keep", "keep_columns", "numeric CSV columns that number the rows (a different whole number in each, "
          "consecutive: a year in a yearly series) kept as features, where they would be refused as identifiers",
          metavar="COLUMN", nargs="+", show_default=False)
    add_g("--task", "task", "classification or regression (default: text targets are classes, numbers a "
          "quantity; a column of whole numbers must say)", choices=TASKS, show_default=False)
    add_g("--likelihood", "likelihood", "regression: heteroscedastic (the network predicts the noise sd of "
          "each input) or homoscedastic (one noise sd, learned)", choices=LIKELIHOODS)
    add_g("--noise-lr-scale", "noise_lr_scale", "--likelihood homoscedastic: the one noise parameter's learning "
          f"rate is --lr times this (default: {fmt_default(NOISE_LR_SCALE)}; docs/your_data.md)", type=float,
          metavar="X", show_default=False)
    add_g("--val-fraction", "val_fraction", "rows held out for validation (per class for classification)",
          type=float)
    add_g("--test-fraction", "test_fraction", "rows held out for the test set", type=float)


class ByData(NamedTuple):
    """A default that depends on the data (:data:`bbb.runs.config.DATA_DEFAULTS`): MNIST's and your own data's."""

    image: Any
    file: Any


def suppressed_adder(group: Any, defaults: dict[str, Any]) -> Any:
    """An add_argument for ``group`` whose default is SUPPRESS and whose help names the real default
    (both where it depends on the data: :class:`ByData`)."""

    def add(flag: str, dest: str, help: str, show_default: bool = True, **kw: Any) -> None:
        if show_default:
            d = defaults.get(dest)
            shown = (f"{fmt_default(d.image)}; --csv/--npz: {fmt_default(d.file)}" if isinstance(d, ByData)
                     else fmt_default(d))
            help = f"{help} (default: {shown})"
        group.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=help, **kw)
    return add


def build_parser() -> argparse.ArgumentParser:
    """The top-level ``bbb`` parser: ``--help``, ``--version`` and the list of commands (each
    command parses its own options: :func:`bbb.cli.entry.run_command`)."""
    from .. import __version__

    parser = Parser(
        prog=PROG,
        description="Bayes by Backprop (Blundell et al. 2015): train, evaluate and prune Bayesian "
                    "networks, and run the paper's experiments.",
        epilog="Example:\n  bbb demo                      # the main job: MNIST in a few minutes\n"
               "  bbb train --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"bbb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, spec in COMMANDS.items():
        sub.add_parser(name, help=spec.help, add_help=False)
    return parser


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """``bbb train``."""
    p.description = "Train one network (bbb, ivon, sgd or dropout) and write a run directory."
    p.epilog = TRAIN_EXAMPLE
    add_train_options(p)


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    """``bbb evaluate``."""
    p.description = ("Evaluate a run on its test set: error with the mean weights and with the "
                     "k-sample predictive average, NLL, ECE and Brier score, and selective prediction: "
                     "the error among the kept predictions as the most uncertain (by predictive entropy, "
                     "and by mutual information) are handed over, its area (AURC) and the error at 90% "
                     "kept. Writes RUN_DIR/eval.json, reliability.png and risk_coverage.png. A regression run: "
                     "its test RMSE, log-likelihood, interval coverage and calibration in the target's units "
                     "(a homoscedastic run's learned noise_sd too) and the RMSE of the 90% most certain, written "
                     "to RUN_DIR/eval.json and calibration.png.")
    p.description += (" Several run directories are evaluated as their ensemble (the mean of their predictives; "
                      "runs of the same data and split, e.g. other --seed values) beside each member: written to "
                      "--out DIR/eval.json.")
    p.epilog = ("Example:\n  bbb evaluate runs/bbb400 --samples 10 --which best\n"
                "  bbb evaluate runs/bbb-s0 runs/bbb-s1 runs/bbb-s2 --out runs/bbb-ensemble   # an ensemble of 3")
    add_run_dirs_arguments(p, "eval.json", "checkpoint: best (the run's best epoch, by its --select-by) or last")
    p.add_argument("--samples", type=int, default=10, metavar="K",
                   help=shared_help("--samples", " average (default: 10)"))
    from .predict import add_moved_data

    add_moved_data(p)


def add_prune_arguments(p: argparse.ArgumentParser) -> None:
    """``bbb prune``."""
    p.description = ("Remove the weights with the lowest |mu|/sigma (sigma = softplus(rho)), ranked over all "
                     "layers together, biases kept and not counted, and report the test error "
                     "with the mean of the kept weights (Table 2; a regression's test RMSE, in the target's units). "
                     "Writes RUN_DIR/pruning.csv. "
                     "bbb and ivon runs only.")
    p.epilog = "Example:\n  bbb prune runs/bbb400 --fractions 0 0.5 0.75 0.95 0.98"
    add_run_dir_arguments(p, "a directory written by bbb train --method bbb (or ivon)", "last",
                      "checkpoint (last: the paper prunes the end of training)")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.5, 0.75, 0.95, 0.98],
                   metavar="F", help="fractions of the weights (not biases) to remove, floor(F * N) of N "
                   "(default: 0 0.5 0.75 0.95 0.98)")
    from .predict import add_moved_data

    add_moved_data(p)


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    """``bbb demo``."""
    from .timings import DEMO_MINUTES

    p.description = ("Train a scale-mixture BBB 2x400 on MNIST for a short CPU budget (about "
                     f"{DEMO_MINUTES} minutes on 2 cores), then evaluate and prune it: prints the test error and "
                     "the evaluation and pruning tables; writes config.json, metrics.csv, summary.json, last.pt, "
                     "best.pt, eval.json, reliability.png, risk_coverage.png, pruning.csv, learning_curve.png "
                     "and snr.png. Re-running continues/reuses the run in --out.")
    p.epilog = "Example:\n  bbb demo --out runs/demo --epochs 10"
    add_out(p, shared_help("--out", ": the run directory"), default="runs/demo")
    p.add_argument("--epochs", type=int, default=DEMO_SETTINGS["epochs"],
                   help=shared_help("--epochs", f" (default: {DEMO_SETTINGS['epochs']})"))
    add_data_dir(p)
    add_device(p)
    add_threads(p)
    add_seed(p)
    add_quiet(p, "the evaluation, the pruning table and the files written")
    add_log(p)
