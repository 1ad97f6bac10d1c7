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

#: ``bbb reproduce mnist --budget quick --threads 2`` with its default seeds on 2 idle CPU cores
#: (the measurement and how it was derived: docs/results.md, "MNIST, quick budget").
QUICK_BUDGET_MINUTES = "28"

#: ``bbb reproduce lora`` at its default budget (2 backbones, 2 tasks, K = 5 10 50, 5 seeds) with
#: ``--workers 2`` on 2 CPU cores: 49.4 minutes wall-clock (results/lora/README.md, run.json).
LORA_MINUTES = "50"
