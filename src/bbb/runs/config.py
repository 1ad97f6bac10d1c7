"""The settings of one training run: :class:`TrainConfig` (validated, round-trips through
``config.json``) and what may change on resume."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..distributions import KLMode, Prior, make_prior
from ..elbo import KLWeighting
from ..engine.engine import OptimizerKind
from ..errors import UserError, check_int
from ..nn import DEFAULT_PI, DEFAULT_RHO_INIT, DEFAULT_SIGMA1, DEFAULT_SIGMA2
from ..nn.base import Estimator
from ..options import IMAGE_DATASETS, DeviceKind, LRSchedule, Method, PriorKind, choice, device_name

__all__ = ["RESUME_MUTABLE", "TrainConfig", "resume_conflicts"]


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {value!r}") from None
    ok = (v >= 0 if allow_zero else v > 0) and math.isfinite(v)
    if not ok:
        raise UserError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
    return v


@dataclass
class TrainConfig:
    """Every setting of one training run (the command line's ``bbb train`` options).

    Construction validates and normalises every field; a bad value raises :class:`UserError`
    with a one-line message. A field of a choice holds its Enum member (``cfg.optimizer is
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

    def __post_init__(self) -> None:
        self.dataset = choice("dataset", self.dataset, IMAGE_DATASETS)
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
            raise UserError(f"pi (mixture weight) must be in (0, 1], got {self.pi}")
        self.pi = pi
        self.sigma1 = _positive("sigma1", self.sigma1)
        self.sigma2 = _positive("sigma2", self.sigma2)
        self.prior_sigma = _positive("prior-sigma", self.prior_sigma)
        if isinstance(self.hidden, int | float):
            self.hidden = [self.hidden]
        self.hidden = [check_int("hidden width", h, 1) for h in self.hidden]
        self.epochs = check_int("epochs", self.epochs, 1)
        self.lr = _positive("lr", self.lr)
        self.momentum = float(self.momentum)
        if not (0.0 <= self.momentum < 1.0):
            raise UserError(f"momentum must be in [0, 1), got {self.momentum}")
        self.rho_lr_scale = _positive("rho-lr-scale", self.rho_lr_scale)
        self.lr_step_size = check_int("lr step size", self.lr_step_size, 0)
        self.lr_gamma = _positive("lr gamma", self.lr_gamma)
        self.batch_size = check_int("batch size", self.batch_size, 1)
        self.samples = check_int("samples", self.samples, 1)
        if self.kl_samples is not None:
            self.kl_samples = check_int("kl-samples", self.kl_samples, self.samples)
        self.rho_init = float(self.rho_init)
        if not math.isfinite(self.rho_init):
            raise UserError(f"rho-init must be finite, got {self.rho_init}")
        if self.mu_init_scale is not None:
            self.mu_init_scale = _positive("mu-init-scale", self.mu_init_scale)
        for name in ("dropout_input", "dropout_hidden"):
            p = float(getattr(self, name))
            if not (0.0 <= p < 1.0):
                raise UserError(f"{name.replace('_', '-')} must be in [0, 1), got {p}")
            setattr(self, name, p)
        self.seed = check_int("seed", self.seed, 0)
        self.bf16 = bool(self.bf16)
        self.scale = _positive("scale", self.scale)
        self.val_size = check_int("val size", self.val_size, 0)
        self.split_seed = check_int("split seed", self.split_seed, 0)
        self.eval_samples = check_int("eval samples", self.eval_samples, 1)
        self.test_each_epoch = bool(self.test_each_epoch)
        self.checkpoint_every = check_int("checkpoint-every", self.checkpoint_every, 1)
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
                            "checkpoint_every"})


def resume_conflicts(stored: dict[str, Any], now: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(setting, stored value, new value) for each setting outside :data:`RESUME_MUTABLE` that
    differs between a run's stored config and ``now``. A setting the stored config lacks (added
    to :class:`TrainConfig` after the run was written) counts as its default, the behaviour the
    run was trained with."""
    defaults = TrainConfig().to_dict()
    return [(k, stored.get(k, defaults[k]), v) for k, v in now.to_dict().items()
            if k not in RESUME_MUTABLE and stored.get(k, defaults[k]) != v]
