"""The settings of ``bbb reproduce uci``: the variants that compete, the training schedules and
the grid that validation chooses from. Nothing here is a measured result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from ...data.uci import UCI_DATASETS
from ...options import (
    StrOption,
    choice,
)

__all__ = ["Phase", "UCIBudget", "Variant", "VARIANTS", "NOISE_SCALES", "Schedule", "schedule_for", "UCIConfig",
           "SMOKE_EPOCHS"]


class Phase(str, Enum):
    """``validation``: fit on 80% of a split's training rows, score the other 20% (chooses the
    settings); ``test``: fit on all its training rows, score its test rows."""

    VALIDATION = "validation"
    TEST = "test"


class UCIBudget(StrOption):
    """How long ``bbb reproduce uci`` trains: ``full`` (the benchmark's schedules,
    :func:`schedule_for`) or ``smoke`` (:data:`SMOKE_EPOCHS` epochs, a pipeline test)."""

    FULL = "full"
    SMOKE = "smoke"


@dataclass(frozen=True)
class Variant:
    """One BBB training recipe (one population trained per dataset and phase).

    ``likelihood``: ``"learned"`` (homoscedastic Gaussian, its noise sd learned with the weights)
    or ``"heteroscedastic"`` (the network predicts its noise, :class:`bbb.elbo.HeteroscedasticGaussian`);
    ``estimator``: ``"reparam"`` or ``"local"``."""

    name: str
    likelihood: str
    estimator: str
    doc: str


#: the recipes that compete; validation chooses among them (and their epochs and noise scale)
VARIANTS: tuple[Variant, ...] = (
    Variant("learned", "learned", "reparam", "learned homoscedastic noise, reparameterisation"),
    Variant("heteroscedastic", "heteroscedastic", "reparam", "the network predicts its noise sd"),
    Variant("local", "learned", "local", "learned homoscedastic noise, local reparameterisation"),
)

#: multipliers of the predictive noise sd that validation chooses from (1: the noise as trained);
#: the MC-dropout protocol chooses its noise precision tau on validation the same way
NOISE_SCALES: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)

#: epochs of the smoke budget (a pipeline test, seconds)
SMOKE_EPOCHS = 4


@dataclass(frozen=True)
class Schedule:
    """How one dataset trains: minibatch size, epochs, and the epochs at which validation scores
    the networks (the choice of epochs is among these)."""

    batch_size: int
    epochs: int
    checkpoints: tuple[int, ...]


def schedule_for(n_train: int, budget: UCIBudget | str = UCIBudget.FULL) -> Schedule:
    """The schedule of a dataset with ``n_train`` training rows: about the same number of
    gradient steps for every dataset (the small ones many epochs, the large ones few; between
    ``MIN_EPOCHS`` and ``MAX_EPOCHS``),
    checkpoints at 1/16, 1/8, 1/4, 1/2, 3/4 and all of the epochs."""
    batch = 32 if n_train < 2000 else 128
    if budget == UCIBudget.SMOKE:
        epochs = SMOKE_EPOCHS
    else:
        steps_per_epoch = math.ceil(n_train / batch)
        epochs = int(min(MAX_EPOCHS, max(MIN_EPOCHS, round(STEPS / steps_per_epoch, -1))))
    marks = sorted({max(1, round(epochs * f)) for f in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1.0)})
    return Schedule(batch, epochs, tuple(marks))


#: the gradient steps a schedule aims at, and its bounds in epochs
STEPS = 18_000
MIN_EPOCHS, MAX_EPOCHS = 150, 2000


@dataclass
class UCIConfig:
    """One ``bbb reproduce uci`` invocation. ``budget`` holds its :class:`UCIBudget` member,
    given the member or its string value (``run.json`` stores the string); another value is a
    one-line :class:`~bbb.errors.UserError`."""

    out: str = "results/uci"
    datasets: list[str] = field(default_factory=lambda: list(UCI_DATASETS))
    splits: list[int] | None = None
    workers: int = 1
    threads: int = 1
    data_dir: str | None = None
    budget: UCIBudget = UCIBudget.FULL
    samples: int = 100
    hidden: int = 50
    #: the protocol's wider layer for the largest dataset (its n_hidden.txt)
    hidden_overrides: dict[str, int] = field(default_factory=lambda: {"protein-tertiary-structure": 100})

    def hidden_for(self, dataset: str) -> int:
        """Hidden units of ``dataset``'s network: 50, 100 for protein (the benchmark's protocol)."""
        return self.hidden_overrides.get(dataset, self.hidden)
    lr: float = 1e-3
    prior_sigma: float = 1.0
    noise_init: float = 1.0
    seed: int = 0
    quiet: bool = False
    report_only: bool = False

    def __post_init__(self) -> None:
        self.budget = UCIBudget(choice("budget", self.budget, UCIBudget))
