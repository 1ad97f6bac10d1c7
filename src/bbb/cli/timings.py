"""The wall-clock times that ``--help`` states, in one place: README.md and docs/ state the same
numbers, and tests/applications/test_stated_numbers.py holds them equal. Each is a measurement on
a 2-core CPU, not the cost model's estimate (:mod:`bbb.cli.cost`, what ``--plan`` prints); the
runs behind them are in docs/results.md.
"""

from __future__ import annotations

__all__ = ["DEMO_MINUTES", "LORA_MINUTES", "QUICK_BUDGET_MINUTES"]

#: ``bbb demo`` (15 epochs of BBB 2x400 on MNIST, then evaluation and pruning) on 2 idle CPU cores
#: once the environment exists: 65 s, 2 min 11 s and 2 min 43 s on three machines
#: (docs/results.md, "The demo, measured"); a machine shared with other jobs takes longer.
DEMO_MINUTES = "1-3"

#: ``bbb reproduce mnist --budget quick --threads 2`` with its default seeds (27 training runs: the
#: paper's 12 cells, IVON's 3 and 4 more seeds of each SGD cell for the deep ensembles, then the
#: last-layer Laplace of the 3 SGD networks) on 2 idle CPU cores: 27 min 40 s, the committed
#: table's ``--seeds 0 1 2`` (39 min 05 s, an Intel Xeon, 2026-11-28) less the training of its 8
#: extra seeds (11 min 25 s; docs/results.md). Before the ensembles: 13 min 26 s on an AMD EPYC.
QUICK_BUDGET_MINUTES = "28"

#: ``bbb reproduce lora`` at its default budget (2 backbones, 2 tasks, K = 5 10 50, 5 seeds) with
#: ``--workers 2`` on 2 CPU cores: 49.4 minutes wall-clock (results/lora/README.md, run.json).
LORA_MINUTES = "50"
