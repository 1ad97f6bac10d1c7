"""The commands that live in their own modules (imported only when they run) and the
demo's recipe."""

from __future__ import annotations

import math
from typing import Any

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
