"""``bbb regression``: the command line of Fig. 5 (:mod:`bbb.experiments.regression`) and of the
alternatives beside it (:mod:`bbb.experiments.regression_alternatives`, ``--alternatives``)."""

from __future__ import annotations

import argparse
import shutil
import warnings
from pathlib import Path

from ..cli.common import (
    add_deprecated_alias,
    add_device,
    add_log,
    add_out,
    add_quiet,
    add_seed,
    add_threads,
    describe,
    shared_help,
    sigma_of_rho,
    std_as_rho,
)
from ..errors import ResultsNotSaved, UserError
from ..options import PriorKind, values
from .regression import ACTIVATIONS, RegressionConfig, run_regression
from .regression_alternatives import OUTPUT_FILES as ALTERNATIVES_FILES
from .regression_alternatives import check_alternatives, run_alternatives

__all__ = ["EXAMPLE", "DESCRIPTION", "add_arguments", "config_from_args", "main"]

EXAMPLE = (
    "bbb regression --out runs/regression --epochs 3000 --seed 0   # about 20 s on one thread\n"
    "  bbb regression --out runs/hetero --heteroscedastic --x-range 0 0.6\n"
    "  bbb regression --out runs/regression --alternatives   # beside a deep ensemble, MC dropout, Laplace"
)

DESCRIPTION = (
    "Regression curves (section 5.2, Fig. 5): a BBB network and a standard network fitted to "
    "the same noisy points of x + 0.3 sin(2 pi x) + 0.3 sin(4 pi x); BBB's predictive band widens "
    "away from the data, the standard network's does not. Writes regression.png, regression.csv "
    "(median, quartiles, 2.5/97.5% and the epistemic/aleatoric split per grid point) and "
    "summary.json to --out."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb regression`` options on ``parser`` (``--alternatives`` among them)."""
    d = RegressionConfig()
    describe(parser, DESCRIPTION, EXAMPLE)
    add_out(parser, "output folder (created)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the regression.csv, summary.json and regression.png of an earlier call in --out "
                             "(without it they are an error before anything trains); that call's alternatives.* "
                             "and tb/ go too unless this one writes them again (--alternatives, --log)")
    parser.add_argument("--epochs", type=int, default=d.epochs,
                        help=shared_help("--epochs", f" (full-batch Adam steps) of each network (default: {d.epochs})"))
    add_seed(parser, d.seed, shared_help("--seed", " of data and training"))
    parser.add_argument("--n-train", type=int, default=d.n_train, help=f"training points (default: {d.n_train})")
    parser.add_argument("--x-range", nargs=2, type=float, metavar=("LOW", "HIGH"), default=[d.x_low, d.x_high],
                        help="training inputs ~ U[LOW, HIGH] (default: 0 0.5; the paper does not say)")
    parser.add_argument("--noise-std", type=float, default=d.noise_std,
                        help=f"std of the data noise eps (default: {d.noise_std:g})")
    parser.add_argument("--grid", nargs=2, type=float, metavar=("LOW", "HIGH"), default=[d.grid_low, d.grid_high],
                        help="prediction range (default: -0.2 1.2)")
    parser.add_argument("--hidden", nargs="+", type=int, default=list(d.hidden), metavar="N",
                        help=shared_help("--hidden", " (default: 100 100)"))
    parser.add_argument("--activation", choices=sorted(ACTIVATIONS), default=d.activation,
                        help=f"activation of every network's hidden layers (default: {d.activation})")
    parser.add_argument("--lr", type=float, default=d.lr, help=shared_help("--lr", f" of Adam (default: {d.lr:g})"))
    parser.add_argument("--train-samples", type=int, default=d.train_samples, metavar="K",
                        help=shared_help("--train-samples", f" (BBB; default: {d.train_samples})"))
    parser.add_argument("--prior", choices=values(PriorKind), default=d.prior.value,
                        help=shared_help("--prior", " (default: mixture, Monte Carlo KL; gaussian: closed-form KL)"))
    parser.add_argument("--prior-sigma", type=float, default=d.prior_sigma,
                        help=shared_help("--prior-sigma", f" (default: {d.prior_sigma:g})"))
    parser.add_argument("--pi", type=float, default=d.pi, help=shared_help("--pi", f" (default: {d.pi:g})"))
    parser.add_argument("--sigma1", type=float, default=d.sigma1,
                        help=shared_help("--sigma1", f" (default: {d.sigma1:g})"))
    parser.add_argument("--sigma2", type=float, default=d.sigma2, help=shared_help("--sigma2", " (default: e^-7)"))
    parser.add_argument("--sigma-init", dest="rho_init", type=std_as_rho, default=d.rho_init, metavar="S",
                        help=shared_help("--sigma-init", f" (BBB; default: {sigma_of_rho(d.rho_init):.2g}, "
                                                         f"rho {d.rho_init:g})"))
    add_deprecated_alias(parser, "--rho-init", "--sigma-init", "rho_init", float, sigma_of_rho)
    parser.add_argument("--model-sigma", type=float, default=d.model_sigma,
                        help=f"likelihood noise std (the start value when learned; default: {d.model_sigma:g})")
    parser.add_argument("--learn-noise", action="store_true",
                        help="learn the likelihood noise (starting at --model-sigma) instead of fixing it")
    parser.add_argument("--heteroscedastic", action="store_true",
                        help="learn an input-dependent noise (the networks output mean and noise)")
    parser.add_argument("--samples", dest="pred_samples", type=int, default=d.pred_samples, metavar="K",
                        help=shared_help("--samples", f" quantiles (BBB; default: {d.pred_samples})"))
    add_device(parser)
    add_threads(parser, d.threads, shared_help("--threads", " (default: 1, the nets are tiny)"))
    add_quiet(parser, "its one line of results")
    add_log(parser, " of each network into OUT/tb/bbb/ and OUT/tb/standard/ (ELBO, NLL, KL, noise, learning rate "
                    "each epoch; BBB's sigma and SNR histograms per layer every 1%% of the epochs)")
    parser.add_argument("--alternatives", action="store_true",
                        help="also fit a deep ensemble of 5, MC dropout (p = 0.1) and a last-layer Laplace to the same "
                             "points: alternatives.png, .csv, .json beside Fig. 5")


def config_from_args(args: argparse.Namespace) -> RegressionConfig:
    return RegressionConfig(
        n_train=args.n_train, x_low=args.x_range[0], x_high=args.x_range[1], noise_std=args.noise_std,
        grid_low=args.grid[0], grid_high=args.grid[1], hidden=tuple(args.hidden), activation=args.activation,
        epochs=args.epochs, lr=args.lr, train_samples=args.train_samples, prior=args.prior,
        prior_sigma=args.prior_sigma, pi=args.pi, sigma1=args.sigma1, sigma2=args.sigma2,
        rho_init=args.rho_init, model_sigma=args.model_sigma, learn_noise=args.learn_noise,
        heteroscedastic=args.heteroscedastic, pred_samples=args.pred_samples, seed=args.seed,
        device=args.device, threads=args.threads, out=args.out, overwrite=args.overwrite,
        loggers=tuple(args.log or ()),
        quiet=False)  # --quiet hides progress, and there is none: the result line stays


def main(args: argparse.Namespace) -> int:
    """``bbb regression [--alternatives]``: Fig. 5, and the alternatives beside it when asked."""
    cfg = config_from_args(args)
    try:
        cfg.validate()
        if args.alternatives:
            check_alternatives(cfg)  # before anything trains
        remove_earlier_outputs(cfg, args.alternatives)
        if args.alternatives:
            run_alternatives(cfg, run_regression(cfg))
        else:
            run_regression(cfg)
    except ResultsNotSaved as e:
        raise UserError(f"cannot write {e.path} ({e.reason}); the result printed above was not saved") from None
    return 0


def remove_earlier_outputs(cfg: RegressionConfig, alternatives: bool) -> None:
    """With ``--overwrite``, what an earlier call wrote into ``--out`` and this one will not write
    again goes, with a warning (the alternatives' files without ``--alternatives``, ``tb/`` without
    ``--log``): left there, they sat beside the new figure as if made from its settings."""
    if not (cfg.out and cfg.overwrite):
        return
    out = Path(cfg.out)
    stale = [] if alternatives else [f for f in ALTERNATIVES_FILES if (out / f).is_file()]
    for f in stale:
        (out / f).unlink()
    if not cfg.loggers and (out / "tb").is_dir():
        shutil.rmtree(out / "tb")
        stale.append("tb/")
    if stale:  # a warning, not a progress line: said with --quiet too
        warnings.warn(f"removed {', '.join(stale)} from {out} (an earlier call's, not made again by this one)",
                      UserWarning, stacklevel=2)
