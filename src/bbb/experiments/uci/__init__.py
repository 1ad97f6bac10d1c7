"""The UCI regression benchmark (``bbb reproduce uci``): BBB, MC dropout, deep ensembles and (with
``--methods ...,laplace``, the laplace extra) a last-layer Laplace of the MAP network, and (with
``--methods bbb,bbb_ensemble``) an ensemble of 5 BBB networks at BBB's choice, and (with ``--methods
...,ivon``) BBB's network and objective learned by IVON, in one
protocol on the 9 datasets and the standard splits of Hernandez-Lobato & Adams (2015), each
chosen per split on validation, beside the published methods (VI, PBP, MC dropout, deep ensembles).

Per dataset and variant (:data:`~bbb.experiments.uci.settings.VARIANTS`) two populations train
(:mod:`~bbb.experiments.uci.train`, the methods in :mod:`~bbb.experiments.uci.models`): one
member per split and grid point on 80% of the split's training rows scored on the other 20%
(validation), then one member per split at its chosen grid point on all its training rows scored
on its test rows. The validation scores choose each split's variant, grid point, epochs and
noise (:mod:`~bbb.experiments.uci.report`); the test scores are read at that choice only.
"""

from __future__ import annotations

from .command import EXAMPLE, add_arguments, main
from .models import (
    BBBEnsembleRegressor,
    BBBRegressor,
    DeepEnsembleRegressor,
    IVONRegressor,
    LaplaceRegressor,
    MCDropoutRegressor,
    build_regressor,
)
from .optim import MemberAdam, MemberIVON
from .runner import run_uci
from .settings import VARIANTS, Setting, UCIConfig

__all__ = ["EXAMPLE", "add_arguments", "main", "run_uci", "UCIConfig", "VARIANTS", "Setting",
           "BBBRegressor", "BBBEnsembleRegressor",
           "MCDropoutRegressor", "DeepEnsembleRegressor", "LaplaceRegressor", "IVONRegressor", "MemberAdam",
           "MemberIVON", "build_regressor"]
