"""The settings of ``bbb reproduce lora``: the backbones, tasks, methods, budgets and the grids
that the held-out slice of the few-shot data chooses from. Nothing here is a measured result."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import UserError
from ...options import StrOption

__all__ = ["Arch", "Task", "LoraMethod", "Phase", "LoraBudget", "Schedule", "SCHEDULES", "Setting", "grid_of",
           "LoraExpConfig", "ENSEMBLE_SIZE", "MC_DROPOUT_P", "TEST_SAMPLES", "VAL_FRACTION", "VAL_SEEDS",
           "IVON_GRID", "IVON_HESS_INIT", "IVON_WEIGHT_DECAY", "LAPLACE_HESSIAN", "LAPLACE_PREDICT_BATCH",
           "SETTING_FROM", "default_methods"]


class Arch(StrOption):
    """The pretrained backbones: ``cnn`` (2 conv + fc 128 + 5-way head; LoRA on fc and head) and
    ``vit`` (transformers' ViT, 28x28, patch 7, hidden 64, 2 layers; LoRA on q/v and the head)."""

    CNN = "cnn"
    VIT = "vit"


class Task(StrOption):
    """The few-shot tasks, both through the pretrained 5-way head: ``digits`` (MNIST 5-9 as
    classes 0-4; out-of-distribution: MNIST 0-4 and Fashion-MNIST) and ``fashion`` (Fashion-MNIST
    classes 0-4; out: Fashion-MNIST 5-9 and MNIST)."""

    DIGITS = "digits"
    FASHION = "fashion"


class LoraMethod(StrOption):
    """``mle`` (plain LoRA), ``map`` (LoRA with a Gaussian prior on the adapters: L2), ``mc_dropout``
    (lora_dropout kept on at test), ``ensemble`` (3 adapters), ``bbb_a`` (Bayes by Backprop on
    LoRA's A: BLoB's choice), ``bbb_ab`` (on A and B), ``ivon`` (the same Gaussian posterior on A
    and B as ``bbb_ab``, trained by :class:`bbb.IVON`: IVON-LoRA, not in BLoB's table) and
    ``laplace`` (Laplace-LoRA, Yang et al. 2024: ``map``'s network at ``map``'s chosen prior, then
    a KFAC Laplace over every adapter parameter, :func:`bbb.laplace.fit_laplace`; needs laplace-torch)."""

    MLE = "mle"
    MAP = "map"
    MC_DROPOUT = "mc_dropout"
    ENSEMBLE = "ensemble"
    BBB_A = "bbb_a"
    BBB_AB = "bbb_ab"
    IVON = "ivon"
    LAPLACE = "laplace"


class Phase(StrOption):
    """``validation``: train on 80% of the few-shot set, score the other 20% (chooses the
    settings); ``test``: train on all of it at the chosen setting, score the test sets."""

    VALIDATION = "validation"
    TEST = "test"


class LoraBudget(StrOption):
    """``default`` (the benchmark), ``quick`` (2 seeds, shorter; a look in minutes) and
    ``smoke`` (a few steps on tiny sets: a pipeline test of seconds)."""

    DEFAULT = "default"
    QUICK = "quick"
    SMOKE = "smoke"


@dataclass(frozen=True)
class Schedule:
    """How long everything trains and how much it is scored on."""

    steps: int  #: LoRA training steps (no early stopping)
    batch_size: int
    lr: float
    pretrain_steps: int  #: backbone pretraining steps on MNIST 0-4 (batch 64)
    n_test: int  #: in-distribution test images scored (a fixed seeded subset)
    n_ood: int  #: images of each out-of-distribution set
    n_curve: int  #: test images of the NLL/ECE-against-steps curves
    curve_points: int  #: evaluations along training
    seeds: tuple[int, ...]


SCHEDULES: dict[LoraBudget, Schedule] = {
    LoraBudget.DEFAULT: Schedule(steps=600, batch_size=16, lr=1e-3, pretrain_steps=600, n_test=2000, n_ood=1000,
                                 n_curve=300, curve_points=6, seeds=(0, 1, 2, 3, 4)),
    LoraBudget.QUICK: Schedule(steps=300, batch_size=16, lr=2e-3, pretrain_steps=300, n_test=1000, n_ood=500,
                               n_curve=200, curve_points=4, seeds=(0, 1)),
    LoraBudget.SMOKE: Schedule(steps=4, batch_size=8, lr=1e-3, pretrain_steps=3, n_test=40, n_ood=20,
                               n_curve=20, curve_points=2, seeds=(0,)),
}

ENSEMBLE_SIZE = 3
MC_DROPOUT_P = 0.1  #: BLoB's MC-dropout baseline: LoRA dropout 0.1
TEST_SAMPLES = 10  #: samples of the predictive (MC dropout masks, BBB and IVON adapters), BLoB's N = 10
VAL_FRACTION = 0.2  #: the held-out slice of the few-shot set (at least one image per class)
POOL_PER_CLASS = 200  #: the few-shot pool: the images of each class a few-shot set is drawn from (the most --shots)
VAL_SEEDS = 2  #: the choice pools the held-out slices of the run's first VAL_SEEDS seeds (the budget's cost)


@dataclass(frozen=True)
class Setting:
    """One point of a method's grid: ``kl_weight`` (BBB: the loss per example is NLL/B + kl_weight * KL/(M B),
    M = ceil(N/B) the minibatches of an epoch of B: a temperature; 1 is the ELBO of N rounded up to
    whole minibatches), ``prior_sigma`` (the Gaussian prior's standard deviation on
    the Bayesian adapters; MAP: the L2 of the same prior), and IVON's ``lr`` and ``ess`` (its
    effective sample size: above the few-shot set's size, a cold posterior). A setting left at 0 is
    not the method's (its label leaves it out: the labels of the other methods' settings, the keys
    of their stored results, are those they had before IVON)."""

    kl_weight: float = 0.0
    prior_sigma: float = 0.0
    lr: float = 0.0
    ess: float = 0.0

    def label(self) -> str:
        parts = []
        if self.kl_weight:
            parts.append(f"kl={self.kl_weight:g}")
        if self.prior_sigma:
            parts.append(f"prior={self.prior_sigma:g}")
        if self.lr:
            parts.append(f"lr={self.lr:g}")
        if self.ess:
            parts.append(f"ess={self.ess:g}")
        return " ".join(parts) or "-"

    def record(self) -> dict[str, float]:
        """The setting's values as a result row stores them (IVON's only where set)."""
        out = {"kl_weight": self.kl_weight, "prior_sigma": self.prior_sigma}
        out.update({k: v for k, v in (("lr", self.lr), ("ess", self.ess)) if v})
        return out


#: BBB's grid: the KL weight x the prior's sd. The full ELBO (KL weight 1) swamped the adapter in the
#: pilot (docs/bayesian_lora.md: -16 points of accuracy) and in a one-seed look here (-6): not searched
BBB_GRID = tuple(Setting(kl, p) for kl in (0.1, 0.01) for p in (0.05, 0.2))
#: MAP's grid: the Gaussian prior's sd (its L2 is ||theta||^2 / (2 sd^2 N))
MAP_GRID = tuple(Setting(0.0, p) for p in (0.05, 0.2, 1.0))
#: IVON's grid: its learning rate x its effective sample size, around the published LoRA recipe
#: (lr 0.03, ess 1e6-1e8: cold posteriors; the few-shot sets hold 25-250 images). A one-seed look at
#: the held-out slices (cnn, digits K=10 and 50, fashion K=10; never test) found ess 1e5 and below
#: swamping the adapters with noise at lr 0.1, and lr 0.3 diverging: not searched. One sample a
#: step; the predictive averages TEST_SAMPLES draws, as BBB's
IVON_GRID = tuple(Setting(lr=lr, ess=ess) for lr in (0.03, 0.1) for ess in (1e6, 1e7))
#: IVON's Hessian at the start (the published LoRA range: 3e-4 to 1e-3; sigma at the start is
#: 1 / sqrt(ess (hess_init + weight_decay))) and its weight decay (bbb.IVON's default; the prior's
#: precision is ess times it)
IVON_HESS_INIT = 1e-3
IVON_WEIGHT_DECAY = 1e-4
#: the methods whose setting is another method's choice: Laplace-LoRA is the Laplace of MAP's
#: network at MAP's chosen prior (a posterior mode; the marginal likelihood then chooses the
#: Laplace's own prior precision), so it has no validation jobs of its own
SETTING_FROM = {LoraMethod.LAPLACE: LoraMethod.MAP}
#: Laplace-LoRA's Hessian: KFAC over the adapters (Laplace-LoRA's choice; "all" the adapters:
#: the few-shot sets are small, and the last layer alone would be the head's B)
LAPLACE_HESSIAN = "kron"
#: inputs per GLM predictive call: laplace-torch differentiates each output of a batch through the
#: whole batch, so the cost per input grows with the batch
LAPLACE_PREDICT_BATCH = 8


def default_methods() -> tuple[LoraMethod, ...]:
    """Every method, less ``laplace`` where laplace-torch does not import (it needs the extra)."""
    from ...laplace import laplace_available

    return tuple(m for m in LoraMethod if m is not LoraMethod.LAPLACE or laplace_available())


def grid_of(method: LoraMethod) -> tuple[Setting, ...]:
    """The settings a method's validation chooses from (one point: nothing to choose)."""
    if method in (LoraMethod.BBB_A, LoraMethod.BBB_AB):
        return BBB_GRID
    if method is LoraMethod.MAP:
        return MAP_GRID
    if method is LoraMethod.IVON:
        return IVON_GRID
    return (Setting(),)


@dataclass(frozen=True)
class LoraExpConfig:
    """Everything ``bbb reproduce lora`` was asked for."""

    out: str
    archs: tuple[Arch, ...] = (Arch.CNN, Arch.VIT)
    tasks: tuple[Task, ...] = (Task.DIGITS, Task.FASHION)
    shots: tuple[int, ...] = (5, 10, 50)
    methods: tuple[LoraMethod, ...] = field(default_factory=default_methods)
    seeds: tuple[int, ...] | None = None  #: None: the budget's
    budget: LoraBudget = LoraBudget.DEFAULT
    workers: int = 1
    threads: int = 1
    data_dir: str | None = None
    backbone_seed: int = 0
    quiet: bool = False
    report_only: bool = False
    rank: int = 4
    alpha: int = 8
    #: experiment loggers (``--log``; names of :data:`bbb.runs.loggers.LOGGERS`): OUT/tb/JOB, written
    #: from the job files when the run ends (not in run.json: how it is watched)
    loggers: tuple[str, ...] = ()

    @property
    def schedule(self) -> Schedule:
        return SCHEDULES[self.budget]

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return self.schedule.seeds if self.seeds is None else self.seeds

    def check(self) -> None:
        if any(k < 2 for k in self.shots):
            raise UserError(f"--shots must be >= 2 per class (one is held out for validation), got {list(self.shots)}")
        if any(k > POOL_PER_CLASS for k in self.shots):
            raise UserError(f"--shots must be <= {POOL_PER_CLASS} per class (the few-shot pool each set is drawn "
                            f"from), got {list(self.shots)}")
        for name in ("workers", "threads"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.seeds is not None and any(s < 0 for s in self.seeds):
            raise UserError(f"--seeds must be >= 0, got {list(self.seeds)}")
        from ...runs.loggers import make_loggers

        make_loggers(self.loggers)  # an unknown name or a missing package: one line, before anything trains
        if LoraMethod.LAPLACE in self.methods:
            from ...errors import MissingExtra
            from ...laplace import INSTALL, require_laplace

            try:  # one line naming the extra, before anything trains
                require_laplace()
            except MissingExtra:
                raise MissingExtra(f"the laplace method (Laplace-LoRA) needs laplace-torch: {INSTALL}; or leave "
                                   "laplace out of --methods", "laplace") from None
