"""``bbb laplace RUN --out DIR``: a last-layer Laplace posterior of a deterministic run, fitted post
hoc on its own training rows (:mod:`bbb.runs.laplace`), then tested beside the run's own network.
``DIR`` predicts as a run does: ``bbb predict DIR INPUT``, ``bbb evaluate DIR``, ensembles."""

from __future__ import annotations

import argparse

from .common import (
    add_data_dir,
    add_device,
    add_out,
    add_threads,
    add_which,
    one_line_warnings,
    scores_table,
    shared_help,
)

EXAMPLE = """Example:
  bbb train --csv houses.csv --target price --method sgd --out runs/houses-sgd
  bbb laplace runs/houses-sgd --out runs/houses-laplace
  bbb predict runs/houses-laplace new_houses.csv      # the mean, sd and interval of each row"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..laplace import HESSIANS
    from ..runs.laplace import DENSE_LIMIT

    p.description = ("Fit a last-layer Laplace posterior (laplace-torch; the 'laplace' extra) to a run trained with "
                     "--method sgd: its last layer's weights get a Gaussian posterior from the curvature of the "
                     "loss on the run's own training rows, the prior precision chosen by the marginal likelihood; "
                     "nothing trains again. A regression's posterior covers the mean's weights, with the noise the "
                     "run predicts. Writes DIR/laplace.json and posterior.pt, then tests the posterior beside the "
                     "run's own network (DIR/eval.json). DIR then goes wherever a run goes: bbb predict, bbb "
                     "evaluate, bbb ood, bbb compare, ensembles.")
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by bbb train --method sgd")
    add_out(p, shared_help("--out", " folder of the posterior (not the run's own directory)"))
    p.add_argument("--hessian", choices=HESSIANS, default="kron",
                   help="the curvature of the last layer: kron (KFAC, laplace-torch's default), full or diag "
                        "(default: kron; a regression's is exact with kron or full, diag keeps the diagonal; full "
                        f"takes a last layer of at most {DENSE_LIMIT:,} weights)")
    p.add_argument("--prior-precision", type=float, default=None, metavar="X",
                   help="fix the prior precision (default: chosen by the marginal likelihood)")
    add_which(p, "best", shared_help("--which", " of the run to fit to: best or last"))
    p.add_argument("--samples", type=int, default=10, metavar="K",
                   help=shared_help("--samples", " of the test evaluation (default: 10)"))
    from .predict import add_moved_data

    add_moved_data(p)
    add_data_dir(p, "data folder of an MNIST-like run (default: the run's)")
    add_device(p)
    add_threads(p)


def main(args: argparse.Namespace) -> int:
    from ..errors import UserError
    from ..runs.laplace import evaluate_laplace, fit_run_laplace

    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    prior = "marglik" if args.prior_precision is None else args.prior_precision
    with one_line_warnings("laplace"):
        fitted = fit_run_laplace(args.run_dir, args.out, hessian=args.hessian, which=args.which, prior=prior,
                                 device=args.device, data_dir=args.data_dir, data_file=args.data_file)
        print(f"fitted the last layer's posterior ({fitted['n_params']:,} weights, {args.hessian}) on "
              f"{fitted['n_data']:,} training rows in {fitted['seconds']:.1f} s: prior precision "
              f"{fitted['prior_precision']:.4g} ({fitted['prior_precision_from']})", flush=True)
        ev = evaluate_laplace(args.out, samples=args.samples, which=args.which, device=args.device,
                              data_dir=args.data_dir, data_file=args.data_file)
    print(scores_table(ev["task"], f"test ({ev['n']:,} rows)",
                       [(f"laplace ({ev['samples']} samples)", ev), ("the run's network", ev["map"])]))
    print(f"wrote {args.out}/laplace.json, " + ", ".join(["posterior.pt", "eval.json", *ev.get("plots", [])]))
    return 0
