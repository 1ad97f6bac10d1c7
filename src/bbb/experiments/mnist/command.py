"""``bbb reproduce``: the command line."""

from __future__ import annotations

import argparse

from ...cli.common import (
    add_data_dir,
    add_device,
    add_log,
    add_out,
    add_quiet,
    add_seeds,
    add_threads,
    shared_help,
)
from ...cli.timings import QUICK_BUDGET_MINUTES
from ...errors import UserError
from .experiment import run_reproduce
from .plan import CANDIDATES_HELP, CELLS_HELP, ReproduceConfig
from .recipes import BUDGETS, DATASETS, Budget

EXAMPLE = (
    "bbb reproduce mnist --budget quick --out runs/mnist --threads 2\n"
    "  bbb reproduce mnist --budget quick --out runs/mnist --seeds 0 1 2  # rerun: adds seeds 1, 2\n"
    "  bbb reproduce mnist --budget quick --out runs/mnist --plan      # the plan and time estimate only\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --plan  # candidates, reasons, time (days)\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --cells bbb-mixture:1200\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --cells sgd:1200,dropout:1200\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --cells bbb-mixture:1200 --candidates c2\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --cells bbb-mixture:1200 --seeds 0 1 2 3 4 5 6 7 "
    "--population --device cuda\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --report  # tables of the cells done so far\n"
    "  bbb reproduce mnist --budget paper --out runs/mnist-paper --report --checkpoints ~/paper-runs/runs"
)

#: where ``bbb reproduce`` writes by default (never into the committed ``results/``)
DEFAULT_OUT = "runs/reproduce-mnist"


def seed_count(seeds: list[int] | None) -> int | None:
    """``--seeds 0 1 2`` as the number of seeds (3); the list must be 0, 1, ..., N-1 because
    seed 0 selects each seed cell's candidate and the extra seeds follow in order."""
    if seeds is None:
        return None
    if list(seeds) != list(range(len(seeds))):
        raise UserError("--seeds lists the seeds of the budget's seed cells, numbered from 0 "
                        f"('0', '0 1', '0 1 2', ...); got {' '.join(map(str, seeds))}")
    return len(seeds)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb reproduce`` options on ``parser``."""
    parser.description = (
        "Reproduce the paper's MNIST results (section 5.1): train the 12 cells of Table 1 (SGD, "
        "dropout, BBB Gaussian prior, BBB scale mixture; 2x400, 2x800, 2x1200), and at the smoke and "
        "quick budgets 3 of IVON (bbb train --method ivon, not in the paper) and 3 rows of a last-layer "
        "Laplace of the SGD cells' networks (laplace-torch; nothing trained), at the quick budget 3 deep "
        f"ensembles (the SGD cells trained with {BUDGETS['quick'].ensemble} seeds, their softmax averaged), "
        "select on the "
        "validation split only, and write table1.csv/.md, fig2_curves.png, fig3_weights.png, "
        "table2_pruning.csv/.md and fig4_snr.png (with CSV/JSON beside each figure) to --out. "
        "Resumable: rerun the same command to continue. Several processes may share one --out "
        "(e.g. one per core): each skips the runs another is training. --cells trains a subset (the paper "
        "budget takes days on a CPU: run it cell by cell, headline first); every call writes the "
        "tables of the cells finished so far, the others marked as missing. Budgets: "
        + "; ".join(f"{b}: {s.description}" for b, s in BUDGETS.items()) + ".")
    parser.add_argument("--budget", choices=[b.value for b in Budget], default=Budget.SMOKE.value,
                        help=f"smoke (seconds, a pipeline test), quick (about {QUICK_BUDGET_MINUTES} minutes on "
                             f"2 CPU cores) or paper (plain SGD, 600 epochs, {BUDGETS['paper'].candidates_per_cell()} "
                             "candidates per cell chosen on validation) (default: smoke)")
    add_out(parser, "output folder; rerunning with the same folder resumes",
            default=DEFAULT_OUT)
    parser.add_argument("--cells", default=None, metavar="CELLS",
                        help=f"train only these cells: {CELLS_HELP}; default: all of the budget's (12, "
                             "and IVON's 3 at smoke and quick), in the order of work (BBB mixture 2x1200 "
                             "first; see --plan)")
    parser.add_argument("--candidates", default=None, metavar="CANDS",
                        help=f"train only these candidates of those cells: {CANDIDATES_HELP}; a cell is "
                             "selected (and its extra seeds trained) once all its candidates have "
                             "finished, so a time slot too short for a whole cell can train one candidate; "
                             "default: all")
    parser.add_argument("--seeds-of", default=None, metavar="CAND",
                        help="train the extra seeds of this one candidate (e.g. c0) now, before the cell's "
                             "selection is final, so that a free core need not wait for the other "
                             "candidates (training elsewhere); they count only if the validation error "
                             "then selects it; default: wait for the selection")
    parser.add_argument("--dataset", choices=list(DATASETS), default="mnist",
                        help=shared_help("--dataset", ": mnist or fashion-mnist (paper numbers for mnist only) "
                                                      "(default: mnist)"))
    add_seeds(parser, None, shared_help("--seeds", " of the budget's seed cells, numbered from 0: '0', '0 1', "
                                                   "'0 1 2', ... (smoke, quick: BBB mixture and dropout at 2x400 "
                                                   "and 2x1200, default: 0; paper: BBB mixture 2x1200, default: 0 1)"))
    add_device(parser)
    add_data_dir(parser)
    add_threads(parser)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--plan", action="store_true",
                      help="print the runs in the order of work, each candidate with why it is there, "
                           "and the time left; train nothing")
    what.add_argument("--report", action="store_true",
                      help="train nothing: write the tables and figures of the runs finished so far "
                           "in --out (a partial table marks the missing cells), e.g. while another "
                           "process trains")
    parser.add_argument("--checkpoints", default=None, metavar="DIR",
                        help="the folder holding <run name>/last.pt of the finished runs (e.g. the "
                             "--out/runs of the machine that trained them): Table 2 and Figures 3-4 are "
                             "made from these checkpoints; without them those files are kept as they "
                             "are and the rest is rebuilt from the runs' CSV/JSON (default: --out/runs)")
    parser.add_argument("--population", action="store_true",
                        help="train a cell's candidates that differ only in their learning rate, prior numbers "
                             "or initialisation, and each seed cell's extra seeds, together as populations (one "
                             "network of batched matrix products under one engine: on a GPU about the time of "
                             "one run; bbb.runs.train_population): each run keeps its own settings, "
                             "initialisation and minibatches, its weight noise is the population's; Bayesian "
                             "cells only, the others train one by one; resume with --population too")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="on a GPU, replay the runs' training steps from CUDA graphs (bbb train "
                             "--cuda-graph: the same numbers, several times faster; a --population too); "
                             "IVON's runs train eagerly")
    add_quiet(parser, "Table 1, Table 2 and the files written")
    add_log(parser)


def main(args: argparse.Namespace) -> int:
    """``bbb reproduce mnist``: returns the exit code."""
    cfg = ReproduceConfig(experiment=args.experiment, budget=args.budget, out=args.out,
                          dataset=args.dataset, seeds=seed_count(args.seeds), device=args.device,
                          data_dir=args.data_dir, quiet=args.quiet, cells=args.cells,
                          candidates=args.candidates, seeds_of=args.seeds_of,
                          checkpoints=args.checkpoints, loggers=tuple(args.log or ()),
                          population=args.population, cuda_graph=args.cuda_graph)
    run_reproduce(cfg, plan_only=args.plan, report_only=args.report)
    return 0
