"""The settings of ``bbb reproduce uci``: the variants that compete, the training schedules and
the grid that validation chooses from. Nothing here is a measured result."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from ...data.uci import UCI_DATASETS
from ...errors import UserError
from ...options import (
    StrOption,
    choice,
)

__all__ = ["DEFAULT_OUT", "Phase", "UCIBudget", "UCIMethod", "DEFAULT_METHODS", "Setting", "Variant", "VARIANTS",
           "NOISE_SCALES", "DROPOUT_NOISE_SDS", "LAPLACE_NOISE_SCALES", "ENSEMBLE_SIZE", "IVON_GRID",
           "IVON_HESS_INIT", "IVON_BETA2", "Schedule", "schedule_for",
           "UCIConfig", "SMOKE_EPOCHS", "variants_of", "copies_of", "OPT_IN_METHODS"]


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


class UCIMethod(StrOption):
    """The methods ``bbb reproduce uci`` compares in one protocol: ``bbb`` (Bayes by Backprop),
    ``mc_dropout`` (Gal & Ghahramani 2016), ``deep_ensemble`` (Lakshminarayanan et al. 2017),
    ``laplace`` (a last-layer Laplace of the MAP network, Daxberger et al. 2021; the ``laplace``
    extra) and ``bbb_ensemble`` (:data:`ENSEMBLE_SIZE` BBB networks at BBB's validation choice, the
    predictive their mixture: "MultiBBB", Seligmann et al. 2023) and ``ivon`` (BBB's network and
    tempered objective learned by IVON, Shen et al. 2024); the last three are opt-in
    (:data:`OPT_IN_METHODS`)."""

    BBB = "bbb"
    MC_DROPOUT = "mc_dropout"
    DEEP_ENSEMBLE = "deep_ensemble"
    LAPLACE = "laplace"
    BBB_ENSEMBLE = "bbb_ensemble"
    IVON = "ivon"


#: the methods of ``bbb reproduce uci`` without ``--methods``: those that need no extra package
DEFAULT_METHODS: tuple[UCIMethod, ...] = (UCIMethod.BBB, UCIMethod.MC_DROPOUT, UCIMethod.DEEP_ENSEMBLE)
#: the methods trained only when ``--methods`` names them: the Laplace needs the laplace extra; the
#: BBB ensemble trains 5 networks per split on validation and 5 on test after BBB's validation (a
#: fraction of BBB's own training: results/uci/README.md) and needs ``bbb`` beside it; IVON was
#: added after the fourth run (results/uci/new-methods.md)
OPT_IN_METHODS: tuple[UCIMethod, ...] = (UCIMethod.LAPLACE, UCIMethod.BBB_ENSEMBLE, UCIMethod.IVON)


@dataclass(frozen=True)
class Setting:
    """One point of a variant's validation grid: Adam's learning rate, and for BBB the prior's
    standard deviation and the KL weight ``beta`` (the free energy's KL times beta), for MC
    dropout the dropout rate."""

    lr: float
    prior_sigma: float = 1.0
    beta: float = 1.0
    dropout: float = 0.0

    def label(self) -> str:
        parts = [f"lr={self.lr:g}"]
        if self.dropout:
            parts.append(f"p={self.dropout:g}")
        if self.prior_sigma != 1.0 or self.beta != 1.0:
            parts += [f"prior={self.prior_sigma:g}", f"beta={self.beta:g}"]
        return " ".join(parts)


#: BBB's grid (stated before the run, results/uci/README.md): learning rate x beta, prior N(0, 1).
#: The third run's grid had beta in {0.3, 1} and validation chose 0.3, its edge, on 119 of 165
#: splits: beta now goes two half-decades below (0.1, 0.03); the prior sd 0.5 is dropped to keep 8
#: points (chosen on 81 of 165 splits, 84 for 1: validation could not tell them apart, and a
#: smaller prior sd is a stronger pull of the means towards 0, as a larger beta is)
BBB_BETAS: tuple[float, ...] = (0.03, 0.1, 0.3, 1.0)
BBB_GRID: tuple[Setting, ...] = tuple(Setting(lr, prior_sigma=1.0, beta=b) for lr in (1e-3, 3e-3) for b in BBB_BETAS)
#: MC dropout's grid: the dropout rates of Gal & Ghahramani's UCI code (its precision tau is
#: chosen on validation as the noise sd of :data:`DROPOUT_NOISE_SDS`)
DROPOUT_GRID: tuple[Setting, ...] = tuple(Setting(1e-3, dropout=p) for p in (0.005, 0.01, 0.05, 0.1))
#: the deep ensembles' grid: the learning rate
ENSEMBLE_GRID: tuple[Setting, ...] = (Setting(1e-3), Setting(3e-3))
#: the Laplace's MAP network's grid: the learning rate, as the deep ensembles'
LAPLACE_GRID: tuple[Setting, ...] = (Setting(1e-3), Setting(3e-3))
#: IVON's grid (results/uci/new-methods.md, stated before its test numbers): IVON's learning rate
#: x beta, prior N(0, 1), as BBB's: beta sets the effective sample size n / beta and the prior
#: precision beta / n (the same tempered objective as BBB's at that beta). Set from a probe on
#: yacht's validation rows only (results/uci/new-methods.md says what it found)
IVON_GRID: tuple[Setting, ...] = tuple(Setting(lr, prior_sigma=1.0, beta=b) for lr in (0.01, 0.03)
                                       for b in (0.01, 0.03, 0.1, 0.3))
#: IVON's Hessian estimate at the start (sigma at the start is 1 / sqrt(ess (h0 + prior precision)))
IVON_HESS_INIT = 0.1
#: IVON's Hessian momentum: its horizon, 1 / (1 - beta2) = 10,000 steps, inside the schedules'
#: 18,000 (IVON's default 0.99999 would leave h at 80% of its start after them)
IVON_BETA2 = 0.9999


@dataclass(frozen=True)
class Variant:
    """One training recipe of one method (one population trained per dataset and phase), with
    the grid its validation chooses from.

    ``likelihood``: ``"learned"`` (homoscedastic Gaussian, its noise sd learned with the weights),
    ``"heteroscedastic"`` (the network predicts its noise, :class:`bbb.elbo.HeteroscedasticGaussian`)
    or ``"fixed"`` (MC dropout: the noise sd tau^-1/2 is chosen on validation) or ``"laplace"``
    (homoscedastic, its noise sd chosen by the Laplace's marginal likelihood);
    ``estimator``: ``"reparam"`` or ``"local"`` for BBB, ``"dropout"``, ``"ensemble"``, ``"laplace"``.
    ``of``: for the BBB ensemble, the BBB variant whose splits it trains: on each split BBB's
    validation chose (variant, grid point); the ensemble variant of that variant trains there, at
    that grid point (its ``grid`` is BBB's, so the point keeps its index)."""

    name: str
    method: UCIMethod
    likelihood: str
    estimator: str
    doc: str
    grid: tuple[Setting, ...] = ()
    of: str = ""


#: the recipes that compete within their method; validation chooses among them (and their grid
#: point, epochs and noise scale)
VARIANTS: tuple[Variant, ...] = (
    Variant("heteroscedastic", UCIMethod.BBB, "heteroscedastic", "reparam", "the network predicts its noise sd",
            BBB_GRID),
    Variant("local", UCIMethod.BBB, "learned", "local", "learned homoscedastic noise, local reparameterisation",
            BBB_GRID),
    Variant("mc_dropout", UCIMethod.MC_DROPOUT, "fixed", "dropout",
            "dropout on the inputs and the hidden layer, weight decay as Gal & Ghahramani", DROPOUT_GRID),
    Variant("deep_ensemble", UCIMethod.DEEP_ENSEMBLE, "heteroscedastic", "ensemble",
            "5 networks each predicting a mean and a noise sd, Gaussian NLL, adversarial training", ENSEMBLE_GRID),
    Variant("laplace", UCIMethod.LAPLACE, "laplace", "laplace",
            "MC dropout's network and loss without dropout (the MAP network), then a last-layer KFAC Laplace: "
            "prior precision and noise sd by the marginal likelihood, GLM predictive", LAPLACE_GRID),
    Variant("ensemble_heteroscedastic", UCIMethod.BBB_ENSEMBLE, "heteroscedastic", "reparam",
            "5 heteroscedastic BBB networks, each its own seed, on the splits where BBB chose its heteroscedastic "
            "variant, at BBB's grid point; the predictive their mixture", BBB_GRID, of="heteroscedastic"),
    Variant("ensemble_local", UCIMethod.BBB_ENSEMBLE, "learned", "local",
            "5 BBB networks with the local estimator, each its own seed, on the splits where BBB chose its local "
            "variant, at BBB's grid point; the predictive their mixture", BBB_GRID, of="local"),
    Variant("ivon", UCIMethod.IVON, "heteroscedastic", "reparam",
            "BBB's heteroscedastic network, prior and tempered objective, learned by IVON (natural gradients, "
            "one weight sample a step, no KL term: the prior is in the update)", IVON_GRID),
)


def variants_of(methods: Sequence[UCIMethod | str]) -> tuple[Variant, ...]:
    """The variants of ``methods``, in :data:`VARIANTS` order."""
    chosen = {UCIMethod(m) for m in methods}
    return tuple(v for v in VARIANTS if v.method in chosen)


#: networks in a deep ensemble and in a BBB ensemble; the predictive is the equal mixture of theirs
ENSEMBLE_SIZE = 5


def copies_of(variant: Variant) -> int:
    """Networks per member of ``variant``'s population: :data:`ENSEMBLE_SIZE` for the ensembles
    (deep or BBB), else 1."""
    return ENSEMBLE_SIZE if variant.estimator == "ensemble" or variant.of else 1


#: the adversarial perturbation of the deep ensembles: this fraction of each input's range
ADVERSARIAL_EPS = 0.01
#: MC dropout's weight decay is l^2 (1 - p) / (2 N tau) (Gal & Ghahramani's code) with this
#: prior lengthscale l and tau = 1 (standardised targets)
DROPOUT_LENGTHSCALE = 1e-2

#: multipliers of the predictive noise sd that validation chooses from (1: the noise as trained);
#: the MC-dropout protocol chooses its noise precision tau on validation the same way
NOISE_SCALES: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)

#: the Laplace's: multipliers of its GLM predictive's sd (the network's variance and the noise sd the
#: marginal likelihood fits, together: docs/laplace.md), chosen on validation as every other
#: method's noise is (the marginal likelihood's sd follows the MAP network's training residuals
#: down as it trains: validation alone guards against it)
LAPLACE_NOISE_SCALES: tuple[float, ...] = NOISE_SCALES

#: MC dropout's predictive noise sd (standardised units, tau^-1/2) that validation chooses from:
#: 0.01 ... 1, geometric
DROPOUT_NOISE_SDS: tuple[float, ...] = tuple(round(10 ** (-2 + i / 10), 5) for i in range(21))

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


#: where ``bbb reproduce uci`` writes by default (never into the committed ``results/``)
DEFAULT_OUT = "runs/reproduce-uci"


@dataclass
class UCIConfig:
    """One ``bbb reproduce uci`` invocation. ``budget`` holds its :class:`UCIBudget` member,
    given the member or its string value (``run.json`` stores the string); another value is a
    one-line :class:`~bbb.errors.UserError`."""

    out: str = DEFAULT_OUT
    datasets: list[str] = field(default_factory=lambda: list(UCI_DATASETS))
    splits: list[int] | None = None
    workers: int = 1
    threads: int = 1
    data_dir: str | None = None
    budget: UCIBudget = UCIBudget.FULL
    samples: int = 100
    methods: list[UCIMethod] = field(default_factory=lambda: list(DEFAULT_METHODS))
    #: the deep ensembles' adversarial training (0: none)
    adversarial_eps: float = ADVERSARIAL_EPS
    hidden: int = 50
    #: the protocol's wider layer for the largest dataset (its n_hidden.txt)
    hidden_overrides: dict[str, int] = field(default_factory=lambda: {"protein-tertiary-structure": 100})

    def hidden_for(self, dataset: str) -> int:
        """Hidden units of ``dataset``'s network: 50, 100 for protein (the benchmark's protocol)."""
        return self.hidden_overrides.get(dataset, self.hidden)
    noise_init: float = 1.0
    seed: int = 0
    quiet: bool = False
    report_only: bool = False
    #: experiment loggers (``--log``; names of :data:`bbb.runs.loggers.LOGGERS`): OUT/tb/JOB/MEMBER,
    #: written from the job files when the run ends (not in run.json: how it is watched)
    loggers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from ...runs.loggers import make_loggers

        make_loggers(self.loggers)  # an unknown name or a missing package: one line, before anything trains
        self.budget = UCIBudget(choice("budget", self.budget, UCIBudget))
        if not self.methods:
            raise UserError("--methods names no method; choose from: " + ", ".join(m.value for m in UCIMethod))
        self.methods = [UCIMethod(choice("method", m, UCIMethod)) for m in dict.fromkeys(self.methods)]
        if UCIMethod.BBB_ENSEMBLE in self.methods and UCIMethod.BBB not in self.methods:
            raise UserError("--methods bbb_ensemble trains at BBB's validation choice: name bbb too "
                            "(e.g. --methods bbb,bbb_ensemble)")
        if UCIMethod.LAPLACE in self.methods and not self.report_only:
            from ...errors import MissingExtra
            from ...laplace import INSTALL, require_laplace

            try:
                require_laplace()  # before anything trains
            except MissingExtra:
                raise MissingExtra(f"--methods laplace needs laplace-torch: {INSTALL}", "laplace") from None

    @property
    def variants(self) -> tuple[Variant, ...]:
        """The variants of the chosen methods."""
        return variants_of(self.methods)
