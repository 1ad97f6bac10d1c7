"""Every option a user picks from a list, in one place: str-Enums, the one parse helper
(:func:`choice`, whose error is the one-line ``unknown <what> <value>; choose one of: ...``),
the one list of datasets, the one device resolver and the one prior builder.

Configurations store the option's string value (so ``config.json`` stays plain JSON and
``cfg.method == "bbb"`` reads naturally); the Enums name the values and feed ``argparse``'s
``choices`` through :func:`values`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

import torch

from .distributions import GaussianPrior, KLMode, Prior, ScaleMixturePrior
from .elbo import KLWeighting
from .engine import OptimizerKind
from .errors import UserError
from .nn import Estimator

__all__ = [
    "Backend",
    "Budget",
    "CellMethod",
    "Checkpoint",
    "Dataset",
    "DeviceKind",
    "Estimator",
    "Experiment",
    "IMAGE_DATASETS",
    "KLData",
    "KLMode",
    "KLWeighting",
    "LRSchedule",
    "Method",
    "OptimizerKind",
    "PriorKind",
    "SchedulerKind",
    "SweepDataset",
    "ValueKind",
    "choice",
    "device_name",
    "make_prior",
    "resolve_device",
    "values",
]


class Method(str, Enum):
    """How ``bbb train`` trains the network."""

    BBB = "bbb"
    SGD = "sgd"
    DROPOUT = "dropout"


class PriorKind(str, Enum):
    GAUSSIAN = "gaussian"
    MIXTURE = "mixture"


class KLData(str, Enum):
    """N of the bandit's KL / N weight: every interaction ``seen`` so far, or the replay
    ``buffer``'s fill (its capacity once full)."""

    SEEN = "seen"
    BUFFER = "buffer"


class LRSchedule(str, Enum):
    NONE = "none"
    COSINE = "cosine"
    STEP = "step"


class DeviceKind(str, Enum):
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class Checkpoint(str, Enum):
    """Which checkpoint of a run directory to load."""

    BEST = "best"
    LAST = "last"


class Dataset(str, Enum):
    """Every dataset the package knows (:mod:`bbb.data` downloads and verifies them)."""

    MNIST = "mnist"
    FASHION_MNIST = "fashion-mnist"
    MUSHROOM = "mushroom"


#: the image datasets a classifier run (``bbb train``, ``bbb reproduce``) trains on
IMAGE_DATASETS: tuple[str, ...] = (Dataset.MNIST.value, Dataset.FASHION_MNIST.value)


#: What a sweep's trials train on: an image dataset (the members of :data:`IMAGE_DATASETS`, from
#: the one list, :class:`Dataset`) or a small synthetic problem (``SYNTHETIC``).
SweepDataset = Enum("SweepDataset", [*((d.name, d.value) for d in Dataset if d.value in IMAGE_DATASETS),
                                     ("SYNTHETIC", "synthetic")], type=str, module=__name__)


class Budget(str, Enum):
    """How much ``bbb reproduce`` trains (docs and :data:`bbb.experiments.mnist.BUDGETS`)."""

    SMOKE = "smoke"
    QUICK = "quick"
    PAPER = "paper"


class CellMethod(str, Enum):
    """The methods of the paper's Table 1."""

    SGD = "sgd"
    DROPOUT = "dropout"
    BBB_GAUSSIAN = "bbb_gaussian"
    BBB_MIXTURE = "bbb_mixture"


class Experiment(str, Enum):
    MNIST = "mnist"
    UCI = "uci"


class Backend(str, Enum):
    """Where ``bbb sweep`` runs its trials."""

    LOCAL = "local"
    RAY = "ray"


class SchedulerKind(str, Enum):
    NONE = "none"
    ASHA = "asha"


class ValueKind(str, Enum):
    """How a sweep's search space gives the values of one key."""

    GRID = "grid"
    CHOICE = "choice"
    UNIFORM = "uniform"
    LOGUNIFORM = "loguniform"
    RANDINT = "randint"


def values(options: type[Enum] | Sequence[str]) -> list[str]:
    """The allowed strings of an Enum (or a sequence of strings), in order: ``choices=`` lists."""
    return [e.value for e in options] if isinstance(options, type) else [str(v) for v in options]


def choice(name: str, value: Any, options: type[Enum] | Sequence[str]) -> str:
    """``value`` (a string or an Enum member) as the allowed string it names; any other value
    raises :class:`UserError` ``unknown <name> <value>; choose one of: a, b, c``."""
    allowed = values(options)
    v = value.value if isinstance(value, Enum) else value
    if v not in allowed:
        raise UserError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
    return str(v)


def device_name(device: Any) -> str:
    """A device option as stored in a configuration: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``;
    anything else is the one-line ``unknown device`` error."""
    name = str(device.value if isinstance(device, Enum) else device)
    head, _, index = name.partition(":")
    if name in values(DeviceKind) or (head == DeviceKind.CUDA.value and index.isdigit()):
        return name
    raise UserError(f"unknown device {device!r}; choose one of: auto, cpu, cuda, cuda:N")


def resolve_device(device: Any) -> torch.device:
    """``auto`` (CUDA when there is one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``; asking
    for CUDA where there is none is a :class:`UserError` that says to use ``--device cpu``."""
    name = device_name(device)
    if name == DeviceKind.AUTO.value:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name} was asked for but no CUDA device is available; "
                        "use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise UserError(f"--device {name}: this machine has {n} CUDA device(s), numbered 0 to {n - 1}; "
                        "choose one of them (or --device cuda)")
    return dev


def make_prior(kind: str, *, pi: float = 0.5, sigma1: float = 1.0, sigma2: float = 0.0025,
               prior_sigma: float = 1.0) -> Prior:
    """The prior a configuration's flat fields describe: ``gaussian`` N(0, prior_sigma^2) or the
    scale ``mixture`` pi N(0, sigma1^2) + (1 - pi) N(0, sigma2^2)."""
    kind = choice("prior", kind, PriorKind)
    if kind == PriorKind.GAUSSIAN.value:
        return GaussianPrior(prior_sigma)
    return ScaleMixturePrior(pi, sigma1, sigma2)
