"""The one registry of ``bbb`` commands (each imported only when it runs) and the demo's
recipe."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

PROG = "bbb"


class Command(NamedTuple):
    """One ``bbb`` command: the module that holds it (imported only when the command runs), its
    one-line help, the names of its add-arguments and main functions in that module, and the
    options of a command that computes it takes (:data:`bbb.cli.common.COMPUTE_FLAGS`: added where
    its parser lacks them; a command that computes nothing takes none)."""

    module: str
    help: str
    add: str = "add_arguments"
    main: str = "main"
    shared: tuple[str, ...] = ("--quiet", "--threads", "--no-compile")


#: Every command, in the order ``bbb --help`` lists them.
COMMANDS: dict[str, Command] = {
    "train": Command("bbb.cli.commands", "train a network on MNIST / Fashion-MNIST or your own CSV / arrays",
                     "add_train_arguments", "cmd_train"),
    "predict": Command("bbb.cli.predict", "predictions with uncertainty of a trained run on new inputs (CSV, "
                       "arrays, images), and which to refer to a person"),
    "evaluate": Command("bbb.cli.commands", "test error, NLL, ECE, Brier of a trained run",
                        "add_evaluate_arguments", "cmd_evaluate"),
    "laplace": Command("bbb.cli.laplace", "a last-layer Laplace posterior of a run trained with --method sgd, "
                       "fitted without training again; predicts wherever a run goes"),
    "prune": Command("bbb.cli.commands", "the paper's Table 2: prune by signal-to-noise ratio",
                     "add_prune_arguments", "cmd_prune"),
    "demo": Command("bbb.cli.commands",
                    "the main job: train, evaluate and prune a BBB 2x400 on MNIST",
                    "add_demo_arguments", "cmd_demo"),
    "regression": Command("bbb.experiments.regression_command",  # Fig. 5 (experiments.regression) and more
                          "Regression curves with BBB (section 5.2 of the paper)"),
    "bandit": Command("bbb.experiments.bandit",
                      "Contextual bandit on UCI Mushroom with Thompson sampling (section 5.3 of "
                      "the paper)"),
    "sweep": Command("bbb.sweep",
                     "Hyperparameter sweep over a search space, locally or on a Ray cluster",
                     shared=("--quiet", "--no-compile")),  # (the trials' threads: --cpus-per-trial)
    "reproduce": Command("bbb.experiments.reproduce",
                         "Reproduce the paper's MNIST Table 1, Figures 2-4 and Table 2 (section "
                         "5.1 of the paper), the UCI regression benchmark, few-shot Bayesian LoRA, "
                         "Fashion-MNIST beside IVON, and which method wins where"),
    "ood": Command("bbb.experiments.uncertainty",
                   "Out-of-distribution detection of a trained run (AUROC/AUPR of entropy, MI, "
                   "max-prob)", "add_ood_arguments", "main_ood"),
    "uncertain": Command("bbb.experiments.uncertainty",
                         "Grids of the most disputed test digits and the most confident errors "
                         "(vote shares)", "add_uncertain_arguments", "main_uncertain"),
    "compare": Command("bbb.experiments.comparison",  # (reads the runs' results: computes nothing)
                       "Side-by-side table of runs: classifiers' error, NLL, ECE, Brier, OOD AUROC, or "
                       "regression runs' RMSE, log-likelihood, coverage, calibration (CSV + markdown)", shared=()),
    "report": Command("bbb.experiments.report",
                      "One self-contained HTML page of runs side by side: configuration, results, curves, "
                      "reliability, risk-coverage, pruning, OOD, uncertain inputs", shared=()),  # reads results only
}

#: the commands whose module lies outside :mod:`bbb.cli` (the experiments, the sweep)
LAZY_COMMANDS: dict[str, Command] = {n: c for n, c in COMMANDS.items()
                                     if not c.module.startswith("bbb.cli.")}


#: The demo's recipe: scale-mixture BBB 2x400 on MNIST, tuned for a short CPU budget (why
#: uniform KL weighting: docs/notes.md).
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
