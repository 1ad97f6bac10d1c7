"""Reproduce the paper's MNIST results (section 5.1): Table 1, Figures 2-4 and Table 2.

``bbb reproduce mnist --budget smoke|quick|paper --out DIR`` trains the 12 cells of Table 1
(SGD, dropout, BBB with a Gaussian prior and BBB with the scale-mixture prior, each with two
hidden ReLU layers of 400, 800 and 1200 units), at the smoke and quick budgets three cells of
IVON too (``bbb train --method ivon``, not in the paper: rows without a paper number, curves in
Figures 2-3, not pruned in Table 2) and three last-layer Laplace rows (the SGD cells' networks
with :func:`bbb.laplace.fit_last_layer_laplace`, nothing trained: ``laplace_rows``), at the quick
budget three deep ensembles too (the SGD cells trained with 5 seeds, the mean of their softmax
outputs: ``ensemble_rows``), and writes into DIR::

    table1.csv, table1.md        our test error beside the paper's, per cell, with the epochs,
                                 the selected candidate and hyperparameters and the wall time;
                                 cells not finished yet are rows marked as missing
    fig2_curves.png / .csv       test error against epochs for 2x1200 BBB, dropout and SGD
                                 (log-scale epoch axis at the paper budget)
    fig3_weights.png / .csv      density of the trained weights (BBB: one sample from q)
    table2_pruning.csv, .md      pruning the 2x1200 BBB network by |mu|/sigma, beside the paper,
                                 with the weights' SNR range in dB beside the paper's Figure 4
    fig4_snr.png / .csv / .json  density and CDF of the signal-to-noise ratio in dB,
                                 10 log10(|mu|/sigma), with the 75% cut-off marked
    reproduce.json               the budget, the plan, the selected runs and the files written
    runs/<cell>/                 one ordinary ``bbb train`` run directory per training run

Protocol. Pixels / 126; 50,000 training, 10,000 validation (a seeded split of the official
training set) and 10,000 test images; minibatches of 128. Model selection uses the validation
split only: within a run, the checkpoint with the lowest validation error (``best.pt``) is the
one tested; across a cell's candidate settings, the one with the lowest validation error is
reported. The test error is logged every epoch for Figure 2 only; it never chooses anything.
Table 2, Figure 3 and Figure 4 use the end of training (``last.pt``), as the paper's Table 2
does.

Budgets (the module-level dict :data:`BUDGETS`, read from recipes.json): ``smoke`` trains every cell for one epoch on
a 1,024-image subset (seconds; for tests); ``quick`` trains one fixed recipe per cell, chosen
beforehand and not tuned, with Adam and a cosine learning-rate decay, epochs sized for minutes on a
quiet 2-core CPU (``--plan`` estimates them); ``paper`` follows the paper's protocol: plain SGD (eqs. 5-6,
momentum 0) at the paper's learning rates {1e-3, 1e-4} on the summed minibatch loss (x128 on
our per-example loss), 600 epochs with the learning rate x0.1 after epoch 300, and a small list
of candidates per cell (:class:`Candidate`, each with the reason it is there) chosen on the
validation error. Where the paper states nothing (the rate's drop, momentum, the initial mu and
sigma) the settings are those of the public reproduction the candidates start from
(:data:`PUBLIC_REPRODUCTION_RECIPE`). Every budget trains BBB with uniform minibatch KL weighting (1/M): Blundell's
weighting gives lower error after few epochs but leaves sigma near its initial value, so pruning
by |mu|/sigma fails.

The paper budget takes days on a CPU, so it runs in parts: ``--cells`` trains a subset of the
cells (the plan follows :data:`WORK_ORDER`: the headline BBB 2x1200 cell first), every call
writes the tables for the cells finished so far (the others are rows marked as missing), and
``--report`` writes them without training, e.g. while another process trains. Runs are
resumable: a killed ``reproduce`` continues where it stopped (finished runs are skipped, a
half-trained run continues from its last epoch); ``--seeds N`` adds independent seeds to the
budget's seed cells (:attr:`BudgetSpec.seed_cells`) and can be raised later on the same
``--out``.
"""

from __future__ import annotations

from .command import (  # noqa: F401
    EXAMPLE,
    add_arguments,
    main,
)
from .experiment import (  # noqa: F401
    run_reproduce,
)
from .figures import (  # noqa: F401
    weight_sample,
)
from .plan import (  # noqa: F401
    Job,
    ReproduceConfig,
    estimate_seconds,
    parse_candidates,
    parse_cells,
    plan_jobs,
)
from .recipes import (  # noqa: F401
    BUDGETS,
    CELL_ORDER,
    HEADLINE_CELLS,
    PAPER_LR_GRID,
    PAPER_TABLE1,
    PAPER_TABLE2,
    PUBLIC_REPRODUCTION_RECIPE,
    TABLE1_COLUMNS,
    TABLE2_COLUMNS,
    WIDTHS,
    WORK_ORDER,
    BudgetSpec,
    Candidate,
    cell_candidates,
    paper_lr,
)

__all__ = [
    "BudgetSpec",
    "Candidate",
    "BUDGETS",
    "WIDTHS",
    "HEADLINE_CELLS",
    "WORK_ORDER",
    "CELL_ORDER",
    "PAPER_LR_GRID",
    "PUBLIC_REPRODUCTION_RECIPE",
    "paper_lr",
    "cell_candidates",
    "parse_candidates",
    "parse_cells",
    "PAPER_TABLE1",
    "PAPER_TABLE2",
    "TABLE1_COLUMNS",
    "TABLE2_COLUMNS",
    "ReproduceConfig",
    "Job",
    "plan_jobs",
    "estimate_seconds",
    "run_reproduce",
    "weight_sample",
    "add_arguments",
    "main",
    "EXAMPLE",
]
