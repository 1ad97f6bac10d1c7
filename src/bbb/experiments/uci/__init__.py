"""The UCI regression benchmark (``bbb reproduce uci``): BBB variants on the 9 datasets and the
standard splits of Hernandez-Lobato & Adams (2015), chosen per split on validation, beside the
published methods (VI, PBP, MC dropout, deep ensembles).

Per dataset and variant (:data:`~bbb.experiments.uci.settings.VARIANTS`) two populations train
(:mod:`~bbb.experiments.uci.train`): one member per split, on 80% of the split's training rows
scored on the other 20% (validation), then on all its training rows scored on its test rows. The
validation scores choose each split's variant, epochs and noise scale
(:mod:`~bbb.experiments.uci.report`); the test scores are read at that choice only.
"""

from __future__ import annotations

from .command import EXAMPLE, add_arguments, main
from .runner import run_uci
from .settings import VARIANTS, UCIConfig

__all__ = ["EXAMPLE", "add_arguments", "main", "run_uci", "UCIConfig", "VARIANTS"]
