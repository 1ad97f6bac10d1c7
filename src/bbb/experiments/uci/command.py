"""``bbb reproduce uci``: the command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from ...cli.common import add_data_dir, add_log, add_out, add_quiet, add_seed, text_table
from ...data.uci import UCI_DATASETS
from ...errors import UserError
from .report import cell
from .runner import run_uci
from .seeds import seed_runs, with_splits, write_seed_spread
from .settings import ADVERSARIAL_EPS, DEFAULT_METHODS, DEFAULT_OUT, UCIConfig, UCIMethod

__all__ = ["EXAMPLE", "DEFAULT_OUT", "add_arguments", "main", "config_from_args"]

EXAMPLE = (
    "bbb reproduce uci --out runs/uci --workers 2          # the whole benchmark (resumable)\n"
    "  bbb reproduce uci --methods bbb --datasets yacht --out runs/uci-bbb   # one method, one dataset\n"
    "  bbb reproduce uci --datasets yacht bostonHousing --splits 0 1 2 --out runs/uci-small\n"
    "  bbb reproduce uci --out runs/uci --report           # the tables of what is finished\n"
    "  bbb reproduce uci --out runs/uci --report --seed-runs runs/uci-seed1 runs/uci-seed2   # the seed spread"
)



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb reproduce uci`` options on ``parser``."""
    parser.description = (
        "The UCI regression benchmark (Hernandez-Lobato & Adams 2015): 9 datasets, their fixed splits "
        "(20; protein 5), one hidden layer of 50 ReLU units (100 for protein), and the methods in one "
        "protocol: BBB, MC dropout, deep ensembles and, with --methods laplace, a last-layer Laplace of the MAP "
        "network; with --methods bbb,bbb_ensemble, 5 BBB networks (their own seeds) at the variant and grid point "
        "BBB's validation chose, the predictive their mixture; with --methods ivon, BBB's network, prior and "
        "KL weight learned by IVON (bbb.IVON's update). For each split and method the variant, "
        "its grid point (learning rate; BBB's and IVON's KL weight; the dropout rate), the epochs and the "
        "predictive noise (the Laplace's: a multiplier of its GLM predictive's sd) are chosen on a "
        "validation part (20%) of its training rows; test RMSE and "
        "log-likelihood (the predictive Gaussian mixture) in the target's units, mean +- standard error "
        "over the splits, beside the published methods, and the coverage of its central 50/90/95% "
        "intervals with their calibration gap (the mean |coverage - level|). Writes table.csv (BBB), "
        "methods.csv (every method), table.md/.png, splits.csv, variants.csv and run.json to --out; jobs/ holds each "
        "population's scores and, while it trains, its resumable state. Each network's random numbers are "
        "keyed by its identity (dataset, method, variant, phase, split, grid point, copy, --seed), so a split's "
        "rows are the same whatever trains beside it (every digit with ATEN_CPU_CAPABILITY=default in the "
        "environment, on one machine type: another CPU trains other networks; results/uci/README.md).")
    parser.add_argument("--datasets", nargs="+", default=None, metavar="NAME",
                        help="the datasets, folder names under <data dir>/uci (default: all 9; with --report, "
                             "those the folder's run trained)")
    parser.add_argument("--splits", nargs="+", type=int, default=None, metavar="K",
                        help="only these splits of each dataset (default: all; with --report, those the "
                             "folder's run trained)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="jobs trained at once, each in its own process (default: 1)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="torch threads per worker (default: 1)")
    parser.add_argument("--budget", choices=["full", "smoke"], default="full",
                        help="full: the benchmark's schedules; smoke: 4 epochs (a pipeline test) (default: full)")
    parser.add_argument("--methods", default=",".join(m.value for m in DEFAULT_METHODS), metavar="M[,M]",
                        help="the methods, comma-separated: " + ", ".join(m.value for m in UCIMethod)
                        + " (default: " + ",".join(m.value for m in DEFAULT_METHODS) + "; laplace needs the "
                        "laplace extra, laplace-torch; bbb_ensemble needs bbb)")
    parser.add_argument("--samples", type=int, default=100, metavar="K",
                        help="weight samples of the predictive mixture (BBB; MC dropout: dropout masks) "
                             "(default: 100)")
    parser.add_argument("--adversarial-eps", type=float, default=ADVERSARIAL_EPS, metavar="E",
                        help="the deep ensembles' adversarial step, a fraction of each input's range; 0: no "
                             f"adversarial training (default: {ADVERSARIAL_EPS})")
    add_seed(parser)
    add_out(parser, "output folder; rerunning with the same folder resumes (another --budget, --samples, "
                    "--adversarial-eps or --seed there is refused)", default=DEFAULT_OUT)
    add_data_dir(parser)
    parser.add_argument("--report", action="store_true",
                        help="train nothing: write the tables of the datasets finished in --out; table.md names "
                             "the one command that trains them (a folder filled a dataset at a time included) and "
                             "their time over all its invocations")
    parser.add_argument("--seed-runs", nargs="+", default=None, metavar="OUT",
                        help="the folders of finished runs that differ from this one only in --seed: writes "
                             "seeds.csv and seeds.md to --out, each method's test RMSE and log-likelihood (averaged "
                             "over the splits) by seed, their mean and their standard deviation over the seeds")
    add_quiet(parser, "the table and the files written")
    add_log(parser, " when the jobs end (and for jobs finished before, on a resume or with --report), from "
                    "each job's scores in OUT/jobs: one folder per network, OUT/tb/JOB/splitS-SETTING, with "
                    "val/ or test/ RMSE, log-likelihood (at each noise choice) and noise sd at each checkpoint "
                    "epoch, and a test network's metrics at its chosen epoch; not live (the networks train as "
                    "one population per job)")


def config_from_args(args: argparse.Namespace) -> UCIConfig:
    if args.report and (args.datasets is None or args.splits is None):  # the folder's, not all 9 "not finished"
        from ...io import read_json

        was = (read_json(Path(args.out) / "run.json") or {}).get("config") or {}
        args.datasets = args.datasets if args.datasets is not None else was.get("datasets")
        args.splits = args.splits if args.splits is not None else was.get("splits")
    args.datasets = list(UCI_DATASETS) if args.datasets is None else args.datasets
    unknown = [d for d in args.datasets if d not in UCI_DATASETS]
    if unknown:
        raise UserError(f"unknown UCI dataset {unknown[0]!r}; choose from: {', '.join(UCI_DATASETS)}")
    for name in ("workers", "threads", "samples"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(args, name)}")
    methods = [m.strip() for m in str(args.methods).split(",") if m.strip()]
    if not methods:
        raise UserError("--methods names no method; choose from: " + ", ".join(m.value for m in UCIMethod))
    if not args.adversarial_eps >= 0:
        raise UserError(f"--adversarial-eps must be >= 0, got {args.adversarial_eps}")
    if args.adversarial_eps != ADVERSARIAL_EPS and UCIMethod.DEEP_ENSEMBLE.value not in methods:
        raise UserError(f"--adversarial-eps is the deep ensembles' step, and --methods {','.join(methods)} trains "
                        f"none: leave it out, or add {UCIMethod.DEEP_ENSEMBLE.value} to --methods")
    if args.splits is not None and any(s < 0 for s in args.splits):
        raise UserError(f"--splits are numbered from 0, got {args.splits}")
    return UCIConfig(out=args.out, datasets=list(dict.fromkeys(args.datasets)),
                     splits=None if args.splits is None else sorted(set(args.splits)), workers=args.workers,
                     threads=args.threads, data_dir=args.data_dir, budget=args.budget, samples=args.samples,
                     methods=methods, adversarial_eps=args.adversarial_eps,  # type: ignore[arg-type]
                     seed=args.seed, quiet=args.quiet, report_only=args.report, loggers=list(args.log or ()))


def main(args: argparse.Namespace) -> int:
    """``bbb reproduce uci``: returns the exit code."""
    cfg = config_from_args(args)
    import torch

    torch.set_num_threads(cfg.threads)
    res = run_uci(cfg, command="bbb " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    rows = res["method_rows"]
    spread = []
    if args.seed_runs:
        if not rows:
            raise UserError(f"--seed-runs: {cfg.out} holds no finished dataset to compare")
        spread = seed_runs(res["config"], with_splits(Path(cfg.out), rows), [Path(p) for p in args.seed_runs])
        res["written"] += [str(p) for p in write_seed_spread(Path(cfg.out), spread, shlex.join(
            ["bbb", "reproduce", "uci", "--report", "--datasets", *cfg.datasets]
            + (["--splits", *map(str, cfg.splits)] if cfg.splits is not None else [])
            + ["--out", cfg.out, "--seed-runs", *args.seed_runs]))]
        compared = {(r["dataset"], r["method"]) for r in spread}
        left = [f"{r['dataset']}/{r['method']}" for r in rows if (r["dataset"], r["method"]) not in compared]
        if left:
            print(f"not in every seed run (left out of seeds.csv): {', '.join(left)}")

    def gap(r: dict[str, Any]) -> str:  # the intervals' calibration gap in points; "-" without coverages
        if "calibration_gap" not in r:
            return "-"
        se = f" +- {100 * r['calibration_gap_se']:.1f}" if "calibration_gap_se" in r else ""
        return f"{100 * r['calibration_gap']:.1f}{se}"

    if rows:
        print(text_table([[r["dataset"], r["method"], str(r["n_splits"]),
                           cell((r["rmse_mean"], r["rmse_se"]), decimals=3),
                           cell((r["ll_mean"], r["ll_se"]), decimals=3), gap(r)] for r in rows],
                         ["dataset", "method", "splits", "test RMSE", "test LL", "interval gap pp"]))
    if spread:
        print(text_table([[r["dataset"], r["method"], r["seeds"], f"{r['rmse_mean']:.3f} ({r['rmse_sd']:.3f})",
                           f"{r['ll_mean']:.3f} ({r['ll_sd']:.3f})",
                           f"{100 * r['calibration_gap_mean']:.2f} ({100 * r['calibration_gap_sd']:.2f})"
                           if "calibration_gap_mean" in r else "-"] for r in spread],
                         ["dataset", "method", "seeds", "test RMSE: mean (sd)", "test LL: mean (sd)",
                          "interval gap pp: mean (sd)"]))
    if res["missing"]:
        print(f"not finished: {', '.join(res['missing'])}" + (" (rerun without --report)" if cfg.report_only else ""))
    for p in res["written"]:
        print(f"wrote {p}")
    return 0
