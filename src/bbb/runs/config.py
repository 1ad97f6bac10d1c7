"""The settings of one training run: :class:`TrainConfig` (validated, round-trips through
``config.json``) and what may change on resume."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..data.files import TASKS
from ..distributions import KLMode, Prior, make_prior
from ..elbo import KLWeighting
from ..engine.engine import OptimizerKind
from ..errors import SettingError, UserError, check_int
from ..nn import DEFAULT_PI, DEFAULT_RHO_INIT, DEFAULT_SIGMA1, DEFAULT_SIGMA2
from ..nn.base import Estimator
from ..options import IMAGE_DATASETS, Dataset, DeviceKind, LRSchedule, Method, PriorKind, choice, device_name

__all__ = ["FILE_DATASET", "LIKELIHOODS", "RESUME_MUTABLE", "TrainConfig", "resume_conflicts"]

#: the ``dataset`` of a run trained on your own file (``data_file``: a CSV or an .npz)
FILE_DATASET = "file"
#: the Gaussian of a regression run: the network predicts its noise sd per input
#: (heteroscedastic) or learns one sd for all inputs (homoscedastic)
LIKELIHOODS = ("heteroscedastic", "homoscedastic")


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SettingError(name, f"must be a number, got {value!r}") from None
    ok = (v >= 0 if allow_zero else v > 0) and math.isfinite(v)
    if not ok:
        raise SettingError(name, f"must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
    return v


@dataclass
class TrainConfig:
    """Every setting of one training run (the command line's ``bbb train`` options).

    Construction validates and normalises every field; a bad value raises a one-line
    :class:`~bbb.errors.SettingError` that names the field (``val_size must be ...``; the command
    line names its flag instead). A field of a choice holds its Enum member (``cfg.optimizer is
    OptimizerKind.SGD``) whether it was given the member or its string value (``"sgd"``).
    ``to_dict`` / ``from_dict`` round-trip through plain JSON types: ``to_dict`` writes each
    member as its string value, so ``config.json`` and the checkpoint's ``config`` hold strings.
    """

    dataset: str = "mnist"
    method: Method = Method.BBB
    prior: PriorKind = PriorKind.MIXTURE
    pi: float = DEFAULT_PI
    sigma1: float = DEFAULT_SIGMA1
    sigma2: float = DEFAULT_SIGMA2
    prior_sigma: float = 1.0
    hidden: list[int] = field(default_factory=lambda: [400, 400])
    epochs: int = 10
    lr: float = 1e-3
    optimizer: OptimizerKind = OptimizerKind.ADAM
    momentum: float = 0.9
    rho_lr_scale: float = 1.0
    lr_schedule: LRSchedule = LRSchedule.NONE
    lr_step_size: int = 0
    lr_gamma: float = 0.1
    batch_size: int = 128
    samples: int = 1
    kl_samples: int | None = None
    estimator: Estimator = Estimator.REPARAM
    kl_weighting: KLWeighting = KLWeighting.BLUNDELL
    kl: KLMode = KLMode.AUTO
    rho_init: float = DEFAULT_RHO_INIT
    mu_init_scale: float | None = None
    dropout_input: float = 0.2
    dropout_hidden: float = 0.5
    seed: int = 0
    device: str = DeviceKind.AUTO.value
    bf16: bool = False
    scale: float = 126.0
    val_size: int = 10000
    split_seed: int = 0
    eval_samples: int = 10
    test_each_epoch: bool = False
    data_dir: str | None = None
    checkpoint_every: int = 1
    # your own data (--csv / --npz): the file, the CSV's target column, the task, the split
    data_file: str | None = None
    target: str | None = None
    task: str | None = None
    likelihood: str = "heteroscedastic"
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    train_size: int | None = None

    def __post_init__(self) -> None:
        self._check_data_file()
        self.dataset = choice("dataset", self.dataset, (*IMAGE_DATASETS, FILE_DATASET))
        self.method = Method(choice("method", self.method, Method))
        self.prior = PriorKind(choice("prior", self.prior, PriorKind))
        self.optimizer = OptimizerKind(choice("optimizer", self.optimizer, OptimizerKind))
        self.lr_schedule = LRSchedule(choice("lr schedule", self.lr_schedule, LRSchedule))
        self.estimator = Estimator(choice("estimator", self.estimator, Estimator))
        self.kl_weighting = KLWeighting(choice("KL weighting", self.kl_weighting, KLWeighting))
        self.kl = KLMode(choice("KL mode", self.kl, KLMode))
        self.device = device_name(self.device)
        pi = float(self.pi)
        if not (0.0 < pi <= 1.0):
            raise SettingError("pi", f"(the mixture weight) must be in (0, 1], got {self.pi}")
        self.pi = pi
        self.sigma1 = _positive("sigma1", self.sigma1)
        self.sigma2 = _positive("sigma2", self.sigma2)
        self.prior_sigma = _positive("prior_sigma", self.prior_sigma)
        if isinstance(self.hidden, int | float):
            self.hidden = [self.hidden]
        self.hidden = [check_int("hidden", h, 1) for h in self.hidden]
        self.epochs = check_int("epochs", self.epochs, 1)
        self.lr = _positive("lr", self.lr)
        self.momentum = float(self.momentum)
        if not (0.0 <= self.momentum < 1.0):
            raise SettingError("momentum", f"must be in [0, 1), got {self.momentum}")
        self.rho_lr_scale = _positive("rho_lr_scale", self.rho_lr_scale)
        self.lr_step_size = check_int("lr_step_size", self.lr_step_size, 0)
        self.lr_gamma = _positive("lr_gamma", self.lr_gamma)
        self.batch_size = check_int("batch_size", self.batch_size, 1)
        self.samples = check_int("samples", self.samples, 1)
        if self.kl_samples is not None:
            self.kl_samples = check_int("kl_samples", self.kl_samples, self.samples)
        self.rho_init = float(self.rho_init)
        if not math.isfinite(self.rho_init):
            raise SettingError("rho_init", f"must be finite, got {self.rho_init}")
        if self.mu_init_scale is not None:
            self.mu_init_scale = _positive("mu_init_scale", self.mu_init_scale)
        for name in ("dropout_input", "dropout_hidden"):
            p = float(getattr(self, name))
            if not (0.0 <= p < 1.0):
                raise SettingError(name, f"must be in [0, 1), got {p}")
            setattr(self, name, p)
        self.seed = check_int("seed", self.seed, 0)
        self.bf16 = bool(self.bf16)
        self.scale = _positive("scale", self.scale)
        self.val_size = check_int("val_size", self.val_size, 0)
        self.split_seed = check_int("split_seed", self.split_seed, 0)
        self.eval_samples = check_int("eval_samples", self.eval_samples, 1)
        self.test_each_epoch = bool(self.test_each_epoch)
        self.checkpoint_every = check_int("checkpoint_every", self.checkpoint_every, 1)
        if self.data_dir is not None:
            self.data_dir = str(self.data_dir)
        if self.method is Method.BBB and self.prior is PriorKind.MIXTURE and self.kl is KLMode.CLOSED:
            raise UserError("no closed-form KL for the scale-mixture prior; use --kl mc or --kl auto")
        if self.method is Method.BBB and self.kl_samples is not None:
            if self.kl is KLMode.SPLIT:
                raise UserError("--kl-samples averages a Monte Carlo KL; --kl split draws one importance sample "
                                "of its own: leave out --kl-samples, or use --kl mc")
            if self.prior is PriorKind.GAUSSIAN and self.kl is not KLMode.MC:
                raise UserError("--kl-samples averages a Monte Carlo KL, and the Gaussian prior's KL is in closed "
                                "form here; add --kl mc, or leave out --kl-samples")

    def _check_data_file(self) -> None:
        """The settings of a data file (``data_file``; ``dataset`` becomes ``"file"``) and of an
        image dataset exclude each other: one given with the other is a one-line error."""
        if self.data_file is not None:
            self.data_file = str(self.data_file)
            if self.dataset not in (Dataset.MNIST.value, FILE_DATASET):
                raise UserError(f"--dataset {self.dataset} and --csv/--npz exclude each other: give one")
            self.dataset = FILE_DATASET
            if self.val_size != 10000:
                raise UserError("--val-size counts MNIST images held out; for --csv/--npz data use --val-fraction")
            if self.task is not None:
                self.task = choice("task", self.task, TASKS)
            self.likelihood = choice("likelihood", self.likelihood, LIKELIHOODS)
            for name in ("val_fraction", "test_fraction"):
                v = float(getattr(self, name))
                if not (0.0 <= v < 1.0):
                    raise UserError(f"--{name.replace('_', '-')} must be in [0, 1), got {v}")
                setattr(self, name, v)
            if self.val_fraction + self.test_fraction >= 1.0:
                raise UserError(f"--val-fraction {self.val_fraction} and --test-fraction {self.test_fraction} "
                                "leave no rows to train on: make their sum < 1")
        else:
            if self.dataset == FILE_DATASET:
                raise UserError("dataset 'file' needs the file: --csv FILE or --npz FILE")
            given = [f"--{k.replace('_', '-')}" for k in ("target", "task") if getattr(self, k) is not None]
            given += [f"--{k.replace('_', '-')}" for k, d in (("val_fraction", 0.1), ("test_fraction", 0.1),
                                                             ("likelihood", "heteroscedastic"))
                      if getattr(self, k) != d]
            if given:
                raise UserError(f"{given[0]} applies to your own data (--csv FILE or --npz FILE), not to "
                                f"--dataset {self.dataset}")
        if self.train_size is not None:
            self.train_size = check_int("--train-size", self.train_size, 1)

    # -- conversion ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The settings as plain JSON types: an Enum member as its string value (the
        ``config.json`` of every version, and what :func:`resume_conflicts` compares)."""
        return {k: v.value if isinstance(v, Enum) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise UserError(f"unknown setting(s) {', '.join(unknown)}")
        return cls(**d)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def make_prior(self) -> Prior:
        return make_prior(self.prior, pi=self.pi, sigma1=self.sigma1, sigma2=self.sigma2,
                          prior_sigma=self.prior_sigma)


#: settings that may change when a run is resumed (they do not alter the trajectory)
RESUME_MUTABLE = frozenset({"epochs", "device", "data_dir", "test_each_epoch", "eval_samples", "bf16",
                            "checkpoint_every", "data_file"})  # data_file: the same MD5 is checked


def resume_conflicts(stored: dict[str, Any], now: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(setting, stored value, new value) for each setting outside :data:`RESUME_MUTABLE` that
    differs between a run's stored config and ``now``. A setting the stored config lacks (added
    to :class:`TrainConfig` after the run was written) counts as its default, the behaviour the
    run was trained with."""
    defaults = TrainConfig().to_dict()
    return [(k, stored.get(k, defaults[k]), v) for k, v in now.to_dict().items()
            if k not in RESUME_MUTABLE and stored.get(k, defaults[k]) != v]
