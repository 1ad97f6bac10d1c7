"""``bbb reproduce fashion``: Fashion-MNIST LeNet-5 in the IVON paper's protocol (issue 73, item 4):
AdamW, IVON (bbb's, and the published package where installed), Bayes by Backprop at a recipe
chosen on a validation split, MC dropout and a deep ensemble, each over seeds; accuracy, NLL, ECE,
Brier, OOD AUROC against MNIST and seconds per epoch, beside the published rows. The settings are
in :mod:`bbb.experiments.fashion.settings`."""

from __future__ import annotations

from .command import EXAMPLE, add_arguments, main
from .settings import FashionConfig

# (its enums, FashionBudget, FashionMethod and Phase, have one address: bbb.experiments.fashion.settings)
__all__ = ["EXAMPLE", "add_arguments", "main", "FashionConfig"]
