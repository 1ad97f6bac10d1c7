"""Few-shot LoRA with uncertainty (``bbb reproduce lora``, issue 63): backbones pretrained here on
MNIST 0-4 (:mod:`~bbb.experiments.lora.backbones`), LoRA adapters (peft) fit to K images per class
of new classes by six methods (:mod:`~bbb.experiments.lora.train`), settings chosen on a held-out
slice of the few-shot data (:mod:`~bbb.experiments.lora.runner`), the tables and figures
(:mod:`~bbb.experiments.lora.report`). Importing this package imports neither peft nor
transformers."""

from __future__ import annotations

from .command import EXAMPLE, add_arguments, main
from .settings import LoraExpConfig

# (its enums, Arch, LoraBudget, LoraMethod and Task, have one address: bbb.experiments.lora.settings)
__all__ = ["EXAMPLE", "add_arguments", "main", "LoraExpConfig"]
