"""The options a user picks from a list that more than one part of the package reads: str-Enums,
the one list of datasets, and the one parse helper (:func:`choice`, whose error is the one-line
``unknown <what> <value>; choose one of: ...``).

A leaf: this module imports the standard library only (no torch, no other ``bbb`` module at import
time), so a data loader or the command line can read the vocabulary without loading the library.
Each Enum has one address, the module that defines it: the core's own (``KLMode`` in
:mod:`bbb.distributions`, ``KLWeighting`` in :mod:`bbb.elbo`, ``Estimator`` in :mod:`bbb.nn.base`,
``OptimizerKind`` in :mod:`bbb.engine.engine`) live beside the code they configure, and the
options of a single application (the sweep, ``bbb reproduce mnist``, the bandit) in that
application's package.

Configurations store the option's string value (so ``config.json`` stays plain JSON and
``cfg.method == "bbb"`` reads naturally); the Enums name the values and feed ``argparse``'s
``choices`` through :func:`values`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from enum import Enum
from typing import Any

__all__ = [
    "BAYESIAN_METHODS",
    "Checkpoint",
    "Dataset",
    "DeviceKind",
    "IMAGE_DATASETS",
    "LRSchedule",
    "MAX_SEED",
    "Method",
    "PriorKind",
    "StrOption",
    "choice",
    "closest",
    "device_name",
    "is_bayesian",
    "values",
]


#: the largest seed torch's generators take (an unsigned long long): a larger one was a traceback
MAX_SEED = 2**64 - 1


class StrOption(str, Enum):
    """A str-Enum whose ``str()`` and ``format()`` are its string value (as ``enum.StrEnum`` of
    Python 3.11): a configuration's field holds the member, and an f-string, a CSV cell, a
    path or a log line shows ``"sgd"``, never ``"OptimizerKind.SGD"``."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class Method(StrOption):
    """How ``bbb train`` trains the network."""

    BBB = "bbb"
    SGD = "sgd"
    DROPOUT = "dropout"
    IVON = "ivon"


#: the methods whose network is Bayesian (a posterior over every weight, in ``*_mu`` / ``*_rho``):
#: Bayes by Backprop, and IVON (:class:`bbb.IVON`) on the same network
BAYESIAN_METHODS: tuple[str, ...] = (Method.BBB.value, Method.IVON.value)


def is_bayesian(method: Any) -> bool:
    """Whether a run of ``method`` (a :class:`Method` or its string) learns a posterior over its
    weights, which evaluation samples, ``bbb prune`` ranks by |mu|/sigma and ``bbb predict`` draws
    networks from: ``bbb`` and ``ivon``. The one test of it (every ``bbb`` command asks here)."""
    return str(method.value if isinstance(method, Enum) else method) in BAYESIAN_METHODS


class PriorKind(StrOption):
    """The prior of a configuration's flat fields (:func:`bbb.distributions.make_prior`)."""

    GAUSSIAN = "gaussian"
    MIXTURE = "mixture"


class LRSchedule(StrOption):
    NONE = "none"
    COSINE = "cosine"
    STEP = "step"


class DeviceKind(StrOption):
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class Checkpoint(StrOption):
    """Which checkpoint of a run directory to load."""

    BEST = "best"
    LAST = "last"


class Dataset(StrOption):
    """Every dataset the package knows (:mod:`bbb.data` downloads and verifies them)."""

    MNIST = "mnist"
    FASHION_MNIST = "fashion-mnist"
    MUSHROOM = "mushroom"


#: the image datasets a classifier run (``bbb train``, ``bbb reproduce``) trains on
IMAGE_DATASETS: tuple[str, ...] = (Dataset.MNIST.value, Dataset.FASHION_MNIST.value)


def values(options: type[Enum] | Sequence[str]) -> list[str]:
    """The allowed strings of an Enum (or a sequence of strings), in order: ``choices=`` lists."""
    return [e.value for e in options] if isinstance(options, type) else [str(v) for v in options]


def closest(word: str, options: Sequence[str]) -> str | None:
    """The option ``word`` most likely misspells (``difflib``'s ratio at least 0.75), or None: the
    "did you mean" of :func:`choice` and of the command line's errors."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.75)
    return close[0] if close else None


def _user_error(message: str) -> Exception:
    """The one-line :class:`bbb.errors.UserError`, imported only when there is one to raise (so
    this module imports nothing of ``bbb``)."""
    from .errors import UserError

    return UserError(message)


def choice(name: str, value: Any, options: type[Enum] | Sequence[str]) -> str:
    """``value`` (a string or an Enum member) as the allowed string it names; any other value
    raises :class:`bbb.errors.UserError` ``unknown <name> <value>; choose one of: a, b, c`` (and
    ``; did you mean b?`` where it is one's misspelling: :func:`closest`)."""
    allowed = values(options)
    v = value.value if isinstance(value, Enum) else value
    if v not in allowed:
        near = closest(v, allowed) if isinstance(v, str) else None
        raise _user_error(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}"
                          + (f"; did you mean {near}?" if near else ""))
    return str(v)


def device_name(device: Any) -> str:
    """A device option as stored in a configuration: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``;
    anything else is the one-line ``unknown device`` error (:func:`bbb.devices.resolve_device`
    turns it into a ``torch.device``)."""
    name = str(device.value if isinstance(device, Enum) else device)
    head, _, index = name.partition(":")
    if name in values(DeviceKind) or (head == DeviceKind.CUDA.value and index.isdigit()):
        return name
    raise _user_error(f"unknown device {device!r}; choose one of: auto, cpu, cuda, cuda:N")
