"""``bbb reproduce fashion``: Fashion-MNIST LeNet-5 in the IVON paper's protocol (issue 73, item 4):
AdamW, IVON (bbb's, and the published package where installed), Bayes by Backprop at a recipe
chosen on a validation split, MC dropout and a deep ensemble, each over seeds; accuracy, NLL, ECE,
Brier, OOD AUROC against MNIST and seconds per epoch, beside the published rows."""

from .settings import FashionBudget, FashionConfig, FashionMethod

__all__ = ["FashionBudget", "FashionConfig", "FashionMethod"]
