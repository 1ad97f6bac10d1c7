"""The paper's small experiments, each a Python API plus a ``bbb`` subcommand.

* :mod:`bbb.experiments.regression`: regression curves with honest uncertainty (Fig. 5).
* :mod:`bbb.experiments.bandit`: Thompson sampling on UCI Mushroom (Fig. 6).

Both modules import matplotlib only when they plot (Agg backend), and are imported by the
command line only when their subcommand runs.
"""

from __future__ import annotations

__all__ = ["regression", "bandit"]
