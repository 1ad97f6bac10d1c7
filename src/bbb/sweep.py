"""Hyperparameter sweeps over a search space, on this machine or on a Ray cluster (``bbb sweep``).

A search space (the paper's MNIST grid by default, or a YAML/JSON file) expands into trials; each
trial is one :func:`bbb.train.train` run in its own directory ``OUT/trials/<trial_id>/``, where
``trial_id`` is a stable hash of the trial's settings. Two backends run the same training
function and write the same files:

- ``local``: ``--max-concurrent`` trials at a time, each in its own process (one trial at a time
  runs in the calling process); no Ray needed.
- ``ray``: every trial is a Ray Tune trial. ``--address auto`` / ``ray://HOST:PORT`` joins a
  running cluster, no address starts a local one; ``--gpus-per-trial`` may be fractional;
  ``--scheduler asha`` stops trials early on the validation error reported every epoch.
  Ray is an optional extra: ``pip install 'bayes-by-backprop[ray]'``.

Fault tolerance. Every epoch ends with ``last.pt`` in the trial directory (atomically written)
and, on Ray, a checkpoint reported through ``tune.report(..., checkpoint=...)``. A failed trial is
retried up to ``--max-failures`` times and resumes from its latest checkpoint (on Ray from
``tune.get_checkpoint()``, so a trial also resumes on another node). Re-running ``bbb sweep``
with the same ``--out`` skips finished trials (``result.json`` written) and resumes unfinished ones
from their ``last.pt``. Locally, a trial being trained holds ``trials/<id>/trial.lock`` (an
``flock`` freed when its process ends), so a second sweep on the same ``--out`` never trains it
twice; worker processes stop as soon as the sweep process is gone (``kill -9`` included).

Spaces are validated before they are expanded (:func:`validate_space`: finite numbers of the right
kind within bounds for every numeric key) and counted without expanding (:func:`count_trials`);
more than :data:`MAX_TRIALS` trials need ``--limit``.

Results: ``OUT/sweep.csv`` (one row per trial, sorted by validation error: every hyperparameter of
the space, epochs run, validation/test error, seconds, status) and ``OUT/best.json`` (the trial
with the lowest validation error; the test error is reported, never used to choose). Both are
rewritten atomically after every finished trial, so a killed sweep never leaves half a file.

Search-space format (YAML or JSON; see docs/scale_out.md)::

    description: free text
    num_samples: 1        # random draws per grid point (when some value is random)
    seed: 0               # seed of the random draws
    params:
      lr: {grid: [1.0e-3, 1.0e-4, 1.0e-5]}     # every value (cartesian product, first key outermost)
      samples: {choice: [1, 2, 5, 10]}         # random: choice, uniform, loguniform, randint
      epochs: 600                              # anything else is a fixed value
      hidden: [400, 400]                       # (a plain list is a fixed value too)

Keys are :class:`bbb.train.TrainConfig` fields plus ``width``/``depth`` (``hidden`` = depth x
width), ``neg_log_sigma1``/``neg_log_sigma2`` (sigma = exp(-value)), ``dataset: synthetic``
(Gaussian blobs: ``synthetic_dim``, ``synthetic_train``, ``synthetic_classes``; for tests and
smoke runs) and ``fail_once_at_epoch`` (testing only: the trial crashes once after that epoch).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import hashlib
import io
import itertools
import json
import math
import os
import random
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .errors import UserError
from .io import atomic_write_json, atomic_write_text

__all__ = [
    "Backend",
    "SchedulerKind",
    "TrialStatus",
    "DatasetKind",
    "Trial",
    "SweepOptions",
    "PAPER_SPACE",
    "SWEEP_KEYS",
    "RESULT_COLUMNS",
    "load_space",
    "apply_overrides",
    "expand_space",
    "validate_space",
    "count_trials",
    "MAX_TRIALS",
    "NUMERIC_KEYS",
    "resolve_params",
    "synthetic_data",
    "epoch_seconds_estimate",
    "run_sweep",
    "read_sweep",
    "add_arguments",
    "main",
    "EXAMPLE",
]

EXAMPLE = (
    "bbb sweep --space paper --set epochs=2 --limit 4 --dry-run\n"
    "  bbb sweep --space paper --backend local --max-concurrent 2 --out runs/grid\n"
    "  bbb sweep --space paper --backend ray --address auto --gpus-per-trial 0.25 --scheduler asha --out runs/grid\n"
    "  bbb sweep --space my_space.yaml --set epochs=20 --set 'seed={grid: [0, 1, 2]}' --out runs/mine"
)


class Backend(str, Enum):
    LOCAL = "local"
    RAY = "ray"


class SchedulerKind(str, Enum):
    NONE = "none"
    ASHA = "asha"


class TrialStatus(str, Enum):
    DONE = "done"          # trained for every epoch asked for
    STOPPED = "stopped"    # stopped early by the scheduler (ASHA); evaluated at its best epoch
    FAILED = "failed"      # diverged, or crashed more than --max-failures times
    PENDING = "pending"    # not finished (yet)


class DatasetKind(str, Enum):
    MNIST = "mnist"
    FASHION_MNIST = "fashion-mnist"
    SYNTHETIC = "synthetic"


class ValueKind(str, Enum):
    GRID = "grid"
    CHOICE = "choice"
    UNIFORM = "uniform"
    LOGUNIFORM = "loguniform"
    RANDINT = "randint"


#: keys of a search space that are not TrainConfig fields
SWEEP_KEYS = ("width", "depth", "neg_log_sigma1", "neg_log_sigma2", "dataset", "synthetic_dim",
              "synthetic_train", "synthetic_classes", "fail_once_at_epoch")
_SYNTHETIC_DEFAULTS = {"synthetic_dim": 64, "synthetic_train": 400, "synthetic_classes": 4}
#: settings that say where or on what a trial runs, not what it computes: not part of the trial id
_NOT_HASHED = frozenset({"data_dir", "device"})
SPACE_KEYS = ("description", "num_samples", "seed", "params")

#: A space with more trials than this is refused unless ``--limit`` says how many to take.
MAX_TRIALS = 10_000
#: Widest hidden layer a space may ask for (the paper's widest: 1200).
MAX_WIDTH = 65_536
_BIG = 2**63 - 1
#: Numeric keys of a space: kind ("int" or "float"), smallest and largest value allowed (None:
#: no bound here; TrainConfig checks the meaning, e.g. pi in (0, 1]). Checked on every value of
#: the space (fixed values, grid and choice lists, uniform/loguniform/randint bounds) before
#: anything is expanded, so a bad value is named by its key, not by the trial it lands in.
NUMERIC_KEYS: dict[str, tuple[str, float | None, float | None]] = {
    "epochs": ("int", 0, 1_000_000),
    "hidden": ("int", 1, MAX_WIDTH),
    "width": ("int", 1, MAX_WIDTH),
    "depth": ("int", 1, 1_000),
    "batch_size": ("int", 1, 100_000_000),
    "samples": ("int", 1, 100_000),
    "eval_samples": ("int", 1, 100_000),
    "seed": ("int", 0, _BIG),
    "split_seed": ("int", 0, _BIG),
    "val_size": ("int", 0, 100_000_000),
    "lr_step_size": ("int", 0, 1_000_000),
    "synthetic_dim": ("int", 1, 1_000_000),
    "synthetic_train": ("int", 4, 100_000_000),
    "synthetic_classes": ("int", 2, 1_000_000),
    "fail_once_at_epoch": ("int", 1, 1_000_000),
    "pi": ("float", None, None),
    "sigma1": ("float", None, None),
    "sigma2": ("float", None, None),
    "prior_sigma": ("float", None, None),
    "neg_log_sigma1": ("float", -700, 700),
    "neg_log_sigma2": ("float", -700, 700),
    "lr": ("float", None, None),
    "momentum": ("float", None, None),
    "lr_gamma": ("float", None, None),
    "rho_init": ("float", None, None),
    "mu_init_scale": ("float", None, None),
    "dropout_input": ("float", None, None),
    "dropout_hidden": ("float", None, None),
    "scale": ("float", None, None),
}
#: numeric keys whose value may be null (their default is None)
_NULLABLE = frozenset({"mu_init_scale", "fail_once_at_epoch"})
_MAX_DEPTH = 1_000

#: The paper's MNIST grid (section 5.1): 3 x 3 x 3 x 3 x 4 x 3 = 972 trials of 600 epochs.
#: Not stated by the paper, so library defaults: Adam (the paper's update rule is SGD-like),
#: Blundell KL weighting (eq. 9), the reparameterisation estimator, natural logarithms for sigma.
PAPER_SPACE: dict[str, Any] = {
    "description": "Blundell et al. (2015), MNIST, section 5.1: BBB with the scale-mixture prior",
    "num_samples": 1,
    "seed": 0,
    "params": {
        "dataset": "mnist",
        "method": "bbb",
        "prior": "mixture",
        "estimator": "reparam",
        "kl_weighting": "blundell",
        "optimizer": "adam",
        "batch_size": 128,
        "epochs": 600,
        "depth": 2,
        "seed": 0,
        "lr": {"grid": [1e-3, 1e-4, 1e-5]},
        "pi": {"grid": [0.25, 0.5, 0.75]},
        "neg_log_sigma1": {"grid": [0, 1, 2]},
        "neg_log_sigma2": {"grid": [6, 7, 8]},
        "samples": {"grid": [1, 2, 5, 10]},
        "width": {"grid": [400, 800, 1200]},
    },
}
BUILTIN_SPACES = {"paper": PAPER_SPACE}

#: result columns of sweep.csv, after trial_id, status and the space's keys
RESULT_COLUMNS = ("epochs_run", "best_epoch", "val_error", "test_error", "test_error_mc", "test_nll",
                  "seconds", "error", "trial_dir")

#: Cost model of --dry-run: seconds per epoch = REF_EPOCH_SECONDS x (FIXED_FRACTION + (1 -
#: FIXED_FRACTION) x weights / REF_WEIGHTS) x (SAMPLE_FIXED + (1 - SAMPLE_FIXED) x samples) x
#: (training examples / 50,000), halved for sgd/dropout (the paper: BBB is about 2x slower than
#: dropout). Measured on 2 idle CPU cores by `make bench` (bench/results/peers.md, 2026-11-21):
#: the paper's configuration (scale mixture, MC KL, 1 sample) 9.2 s/epoch at 2x400 (478k weights)
#: and 32.5 s/epoch at 2x1200 (2.39M), i.e. 3.4 s + 12.2 s per million weights; a step with k
#: samples cost 1.8x, 3.2x, 6.0x one sample's for k = 2, 5, 10 (2x1200, measured on a loaded
#: machine), as 0.4 + 0.6 k: the k samples share one batched matmul.
REF_EPOCH_SECONDS = 9.2
FIXED_FRACTION = 0.367
SAMPLE_FIXED = 0.4
REF_WEIGHTS = 478_410
REF_TRAIN = 50_000


# --------------------------------------------------------------------------------------------
# Search spaces
# --------------------------------------------------------------------------------------------


def _yaml_loader() -> Any:
    """PyYAML's SafeLoader that also reads 1e-3 as a float (YAML 1.1 needs 1.0e-3)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."))
    return Loader


def _parse_value(text: str) -> Any:
    """A --set value: YAML when PyYAML is installed, else JSON, else the string itself."""
    try:
        import yaml
    except ImportError:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise UserError(f"cannot parse --set value {text!r} ({str(e).splitlines()[0]})") from None


def load_space(space: str | Path) -> dict[str, Any]:
    """A built-in space (``paper``) or a YAML/JSON file, checked for its top-level keys."""
    name = str(space)
    if name in BUILTIN_SPACES:
        return json.loads(json.dumps(BUILTIN_SPACES[name]))  # a deep copy
    path = Path(name)
    if not path.is_file():
        raise UserError(f"search space {name!r} is neither a built-in space "
                        f"({', '.join(BUILTIN_SPACES)}) nor a file")
    text = path.read_text()
    if path.suffix.lower() == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"{path} is not valid JSON ({e})") from None
    else:
        try:
            import yaml
        except ImportError:
            raise UserError(f"reading {path} needs PyYAML: pip install 'bayes-by-backprop[yaml]' "
                            "(or write the space as .json)") from None
        try:
            obj = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as e:
            raise UserError(f"{path} is not valid YAML ({' '.join(str(e).split())[:200]})") from None
    return _check_space(obj, str(path))


def _check_space(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("params"), dict):
        raise UserError(f"{where}: a search space is a mapping with a 'params' mapping")
    unknown = sorted(set(obj) - set(SPACE_KEYS))
    if unknown:
        raise UserError(f"{where}: unknown top-level key(s) {', '.join(unknown)}; "
                        f"allowed: {', '.join(SPACE_KEYS)}")
    return obj


def apply_overrides(space: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` overrides: the value (YAML) replaces the key's spec in ``params``."""
    space = json.loads(json.dumps(space))
    for s in sets:
        key, eq, value = s.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UserError(f"--set expects key=value, got {s!r}")
        space["params"][key] = _parse_value(value)
    return space


def _value_kind(spec: Any, key: str) -> ValueKind | None:
    """The kind of a value spec, or None for a fixed value."""
    if isinstance(spec, dict):
        if len(spec) != 1 or next(iter(spec)) not in {k.value for k in ValueKind}:
            raise UserError(f"search space: {key}: a mapping must be one of "
                            f"{', '.join('{' + k.value + ': ...}' for k in ValueKind)}, got {spec!r}")
        kind = ValueKind(next(iter(spec)))
        values = spec[kind.value]
        if not isinstance(values, list) or not values:
            raise UserError(f"search space: {key}: {kind.value} needs a non-empty list, got {values!r}")
        if kind in (ValueKind.UNIFORM, ValueKind.LOGUNIFORM, ValueKind.RANDINT):
            if len(values) != 2 or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                           and math.isfinite(v) for v in values) or values[0] > values[1]:
                raise UserError(f"search space: {key}: {kind.value} needs [low, high], finite numbers with "
                                f"low <= high, got {values!r}")
            if kind == ValueKind.LOGUNIFORM and values[0] <= 0:
                raise UserError(f"search space: {key}: loguniform needs low > 0, got {values!r}")
        return kind
    return None


def _draw(kind: ValueKind, values: list[Any], rng: random.Random) -> Any:
    if kind == ValueKind.CHOICE:
        return values[rng.randrange(len(values))]
    lo, hi = values
    if kind == ValueKind.UNIFORM:
        return rng.uniform(float(lo), float(hi))
    if kind == ValueKind.LOGUNIFORM:
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return rng.randint(int(lo), int(hi))  # randint: inclusive


@dataclass(frozen=True)
class Trial:
    """One point of the space: ``params`` holds every key of the space with its value here."""

    trial_id: str
    index: int
    params: dict[str, Any] = field(hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"trial_id": self.trial_id, "index": self.index, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        return cls(str(d["trial_id"]), int(d["index"]), dict(d["params"]))


@dataclass(frozen=True)
class DataSpec:
    """Where a trial's data come from: MNIST / Fashion-MNIST (TrainConfig) or synthetic blobs."""

    kind: str = DatasetKind.MNIST.value
    dim: int = 64
    n_train: int = 400
    classes: int = 4

    def key(self) -> dict[str, Any]:
        if self.kind != DatasetKind.SYNTHETIC.value:
            return {"dataset": self.kind}
        return {"dataset": self.kind, "dim": self.dim, "n_train": self.n_train, "classes": self.classes}


def _int(key: str, v: Any, minimum: int) -> int:
    if (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or int(v) != v
            or v < minimum):
        raise UserError(f"search space: {key} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _check_number(key: str, v: Any, where: str = "") -> None:
    """One value of a numeric key: a finite number (an integer for "int" keys) within bounds."""
    kind, lo, hi = NUMERIC_KEYS[key]
    at = f" ({where})" if where else ""
    if v is None and key in _NULLABLE:
        return
    if key == "hidden" and isinstance(v, list):
        if not v or len(v) > _MAX_DEPTH:
            raise UserError(f"search space: hidden{at} must list 1 to {_MAX_DEPTH} layer widths, got {len(v)}")
        for w in v:
            _check_number("hidden", w, where)
        return
    if isinstance(v, bool) or not isinstance(v, int | float):
        want = "an integer" if kind == "int" else "a number"
        raise UserError(f"search space: {key}{at} must be {want}, got {v!r}")
    if not math.isfinite(v):
        raise UserError(f"search space: {key}{at} must be finite, got {v!r}")
    if kind == "int" and int(v) != v:
        raise UserError(f"search space: {key}{at} must be an integer, got {v!r}")
    if lo is not None and v < lo:
        raise UserError(f"search space: {key}{at} must be >= {lo:g}, got {v!r}")
    if hi is not None and v > hi:
        raise UserError(f"search space: {key}{at} must be <= {hi:,}, got {v!r}"
                        if kind == "int" else f"search space: {key}{at} must be <= {hi:g}, got {v!r}")


def validate_space(space: dict[str, Any]) -> dict[str, Any]:
    """Check every value of a space without expanding it; returns the space.

    Top-level keys and value specs (:func:`_value_kind`), then every value of a numeric key
    (:data:`NUMERIC_KEYS`): fixed values, each grid/choice entry and uniform/loguniform/randint
    bounds must be finite numbers of the right kind within the key's bounds (``width: 1e12``,
    ``epochs: .inf``, ``lr: .nan``, ``pi: abc`` are refused, the key named).
    """
    space = _check_space(space, "search space")
    _int("num_samples", space.get("num_samples", 1), 1)
    _int("seed", space.get("seed", 0), 0)
    for key, spec in space["params"].items():
        if not isinstance(key, str):
            raise UserError(f"search space: parameter names must be strings, got {key!r}")
        kind = _value_kind(spec, key)
        if key not in NUMERIC_KEYS:
            continue
        if kind is None:
            _check_number(key, spec)
            continue
        values = spec[kind.value]
        if kind in (ValueKind.GRID, ValueKind.CHOICE):
            for v in values:
                _check_number(key, v, kind.value)
        else:
            for v in values:
                _check_number(key, v, f"{kind.value} bound")
            if kind == ValueKind.RANDINT and any(int(v) != v for v in values):
                raise UserError(f"search space: {key}: randint needs integer bounds, got {values!r}")
    return space


def count_trials(space: dict[str, Any]) -> int:
    """Number of trials of a (validated) space before duplicates are dropped: the product of the
    grid lists' lengths times ``num_samples``; computed without expanding anything."""
    params = space["params"]
    n = _int("num_samples", space.get("num_samples", 1), 1)
    for key, spec in params.items():
        if _value_kind(spec, key) == ValueKind.GRID:
            n *= len(spec["grid"])
    return n


def resolve_params(params: dict[str, Any]) -> tuple[Any, DataSpec, int | None]:
    """``(TrainConfig, DataSpec, fail_once_at_epoch)`` of one trial's parameter values."""
    from .train import TrainConfig

    p = dict(params)
    fail = p.pop("fail_once_at_epoch", None)
    if fail is not None:
        fail = _int("fail_once_at_epoch", fail, 1)
    kind = p.pop("dataset", DatasetKind.MNIST.value)
    if kind not in {k.value for k in DatasetKind}:
        raise UserError(f"search space: unknown dataset {kind!r}; choose one of: "
                        f"{', '.join(k.value for k in DatasetKind)}")
    syn = {k: p.pop(k) for k in _SYNTHETIC_DEFAULTS if k in p}
    if syn and kind != DatasetKind.SYNTHETIC.value:
        raise UserError(f"search space: {', '.join(syn)} only apply to dataset: synthetic")
    syn = {**_SYNTHETIC_DEFAULTS, **syn}
    data = DataSpec(kind, _int("synthetic_dim", syn["synthetic_dim"], 1),
                    _int("synthetic_train", syn["synthetic_train"], 4),
                    _int("synthetic_classes", syn["synthetic_classes"], 2))
    width, depth = p.pop("width", None), p.pop("depth", None)
    if width is not None or depth is not None:
        if "hidden" in p:
            raise UserError("search space: give either hidden or width/depth, not both")
        p["hidden"] = [_int("width", 400 if width is None else width, 1)] * _int(
            "depth", 2 if depth is None else depth, 1)
    for i in (1, 2):
        v = p.pop(f"neg_log_sigma{i}", None)
        if v is not None:
            if f"sigma{i}" in p:
                raise UserError(f"search space: give either sigma{i} or neg_log_sigma{i}, not both")
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise UserError(f"search space: neg_log_sigma{i} must be a number, got {v!r}")
            p[f"sigma{i}"] = math.exp(-float(v))
    if kind != DatasetKind.SYNTHETIC.value:
        p["dataset"] = kind
    try:
        cfg = TrainConfig.from_dict(p)
    except UserError as e:
        msg = str(e)
        if msg.startswith("unknown setting"):
            msg += f" (allowed: TrainConfig fields and {', '.join(SWEEP_KEYS)})"
        raise UserError(f"search space: {msg}") from None
    except TypeError as e:
        raise UserError(f"search space: {e}") from None
    if kind != DatasetKind.SYNTHETIC.value and cfg.val_size < 1:
        raise UserError("search space: a sweep selects models on the validation set; val_size must be >= 1")
    return cfg, data, fail


def trial_id_of(params: dict[str, Any]) -> str:
    """Stable id: a hash of what the trial computes (settings that differ from the defaults)."""
    from .train import TrainConfig

    cfg, data, fail = resolve_params(params)
    default = TrainConfig().to_dict()
    train = {k: v for k, v in cfg.to_dict().items() if k not in _NOT_HASHED and v != default[k]}
    train.pop("dataset", None)
    key: dict[str, Any] = {"train": train, "data": data.key()}
    if fail is not None:
        key["fail_once_at_epoch"] = fail
    blob = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def expand_space(space: dict[str, Any], limit: int | None = None,
                 max_trials: int | None = MAX_TRIALS) -> list[Trial]:
    """The trials of ``space``: the grid's cartesian product (first key outermost), each with
    ``num_samples`` random draws of the random keys; duplicates (same id) dropped; first ``limit``.

    The space is validated first (:func:`validate_space`) and its size counted without expanding
    it (:func:`count_trials`): more than ``max_trials`` trials without a ``limit`` is refused."""
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        raise UserError(f"--limit must be >= 1, got {limit}")
    space = validate_space(space)
    total = count_trials(space)
    if limit is None and max_trials is not None and total > max_trials:
        raise UserError(f"the search space has {total:,} trials, more than {max_trials:,}; pass --limit N "
                        "to run (or list) only the first N, or make the grid smaller")
    params: dict[str, Any] = space["params"]
    num_samples = _int("num_samples", space.get("num_samples", 1), 1)
    rng = random.Random(_int("seed", space.get("seed", 0), 0))
    kinds = {k: _value_kind(v, k) for k, v in params.items()}
    grid_keys = [k for k, kind in kinds.items() if kind == ValueKind.GRID]
    random_keys = [k for k, kind in kinds.items() if kind not in (None, ValueKind.GRID)]
    if num_samples > 1 and not random_keys:
        raise UserError("num_samples > 1 needs a random value (choice, uniform, loguniform, randint); "
                        "to repeat a grid with other seeds use seed: {grid: [0, 1, 2]}")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be >= 1, got {limit}")
    trials: list[Trial] = []
    seen: set[str] = set()
    for combo in itertools.product(*(params[k]["grid"] for k in grid_keys)):
        point = dict(zip(grid_keys, combo))
        for _ in range(num_samples):
            values = {}
            for k, spec in params.items():
                kind = kinds[k]
                if kind is None:
                    values[k] = spec
                elif kind == ValueKind.GRID:
                    values[k] = point[k]
                else:
                    values[k] = _draw(kind, spec[kind.value], rng)
            try:
                tid = trial_id_of(values)
            except UserError as e:
                shown = ", ".join(f"{k}={values[k]}" for k in grid_keys + random_keys)
                raise UserError(f"{e} (trial {len(trials) + 1}{': ' + shown if shown else ''})") from None
            if tid in seen:
                continue
            seen.add(tid)
            trials.append(Trial(tid, len(trials), values))
            if limit is not None and len(trials) >= limit:
                return trials
    return trials


def varied_keys(trials: Sequence[Trial]) -> list[str]:
    """Keys whose value differs between trials (space order)."""
    if not trials:
        return []
    keys = list(trials[0].params)
    return [k for k in keys if len({json.dumps(t.params.get(k), sort_keys=True) for t in trials}) > 1]


# --------------------------------------------------------------------------------------------
# Data and cost
# --------------------------------------------------------------------------------------------


def synthetic_data(dim: int = 64, n_train: int = 400, classes: int = 4, seed: int = 0) -> dict[str, Any]:
    """Gaussian blobs (unit noise around ``classes`` random centres): train, and val/test of
    ``n_train // 4`` examples each. Learnable in a few epochs by a small network."""
    import torch

    g = torch.Generator().manual_seed(seed)
    centers = 0.5 * torch.randn(classes, dim, generator=g)

    def make(n: int) -> tuple[Any, Any]:
        y = torch.randint(0, classes, (n,), generator=g)
        return centers[y] + torch.randn(n, dim, generator=g), y

    n_eval = max(1, n_train // 4)
    (a, b), (c, d), (e, f) = make(n_train), make(n_eval), make(n_eval)
    return {"train_x": a, "train_y": b, "val_x": c, "val_y": d, "test_x": e, "test_y": f,
            "num_classes": classes}


_DATA_CACHE: dict[str, dict[str, Any]] = {}


def _trial_data(cfg: Any, data: DataSpec, data_dir: str | None) -> dict[str, Any]:
    """The trial's tensors, cached per process (workers run many trials on the same data)."""
    from .train import load_data

    key = json.dumps({**data.key(), "split": [cfg.val_size, cfg.split_seed, cfg.scale], "dir": data_dir})
    if key not in _DATA_CACHE:
        if data.kind == DatasetKind.SYNTHETIC.value:
            _DATA_CACHE[key] = synthetic_data(data.dim, data.n_train, data.classes, cfg.split_seed)
        else:
            _DATA_CACHE[key] = load_data(cfg.replace(data_dir=data_dir) if data_dir else cfg)
    return _DATA_CACHE[key]


def _shape(cfg: Any, data: DataSpec) -> tuple[int, int, int]:
    """(training examples, input features, classes) without loading the data."""
    if data.kind == DatasetKind.SYNTHETIC.value:
        return data.n_train, data.dim, data.classes
    return 60_000 - cfg.val_size, 784, 10


def epoch_seconds_estimate(params: dict[str, Any], ref_epoch_seconds: float = REF_EPOCH_SECONDS) -> float:
    """Estimated seconds per epoch of a trial (the module's cost model; see REF_EPOCH_SECONDS)."""
    cfg, data, _ = resolve_params(params)
    n, d, c = _shape(cfg, data)
    sizes = [d, *cfg.hidden, c]
    weights = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    factor = SAMPLE_FIXED + (1 - SAMPLE_FIXED) * cfg.samples if cfg.method == "bbb" else 0.5
    size = FIXED_FRACTION + (1 - FIXED_FRACTION) * weights / REF_WEIGHTS
    return ref_epoch_seconds * size * factor * n / REF_TRAIN


# --------------------------------------------------------------------------------------------
# One trial (both backends)
# --------------------------------------------------------------------------------------------


class InjectedFailure(RuntimeError):
    """The crash asked for by ``fail_once_at_epoch`` (tests of the retry path)."""


def _silent(_: str) -> None:
    pass


def trial_dir(out: str | Path, trial_id: str) -> Path:
    return Path(out) / "trials" / trial_id


def _epochs_done(d: Path) -> int:
    """Completed epochs recorded in ``d/metrics.csv`` (0 when there is none)."""
    path = d / "metrics.csv"
    if not path.is_file():
        return 0
    with path.open(newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def _history(d: Path) -> list[dict[str, Any]]:
    path = d / "history.json"
    try:
        return list(json.loads(path.read_text())) if path.is_file() else []
    except (OSError, ValueError):
        return []


def _append_history(d: Path, event: str, **info: Any) -> None:
    """Log an attempt (``start``: from which epoch, restored from where) or an ``error``."""
    hist = _history(d)
    if event == "start":
        info = {"attempt": 1 + sum(1 for h in hist if h.get("event") == "start"), **info}
    hist.append({"event": event, **info, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    atomic_write_json(d / "history.json", hist)


def _row(trial: Trial, status: TrialStatus, summary: dict[str, Any] | None, d: Path,
         epochs_run: int | None = None, error: str | None = None, retry: bool = False) -> dict[str, Any]:
    """A trial's result (result.json, a row of sweep.csv). ``retry``: a crashed trial, which a
    re-run of the sweep runs again (a diverged one is not: it would diverge again)."""
    s = summary or {}
    return {
        "trial_id": trial.trial_id,
        "index": trial.index,
        "status": status.value,
        "params": dict(trial.params),
        "epochs_run": s.get("epochs", epochs_run if epochs_run is not None else _epochs_done(d)),
        "best_epoch": s.get("best_epoch"),
        "val_error": s.get("best_val_error"),
        "test_error": s.get("test_error"),
        "test_error_mc": s.get("test_error_mc"),
        "test_nll": s.get("test_nll"),
        "seconds": s.get("seconds"),
        "error": error,
        "trial_dir": str(Path("trials") / trial.trial_id),
        "retry": retry,
    }


def _finished_row(out: Path, trial: Trial) -> dict[str, Any] | None:
    """The trial's result.json when it is finished (done, stopped, or failed and not to be
    retried), else None."""
    path = trial_dir(out, trial.trial_id) / "result.json"
    if not path.is_file():
        return None
    try:
        row = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if row.get("status") == TrialStatus.FAILED.value and row.get("retry"):
        return None
    if row.get("status") in (TrialStatus.DONE.value, TrialStatus.STOPPED.value, TrialStatus.FAILED.value):
        row["index"] = trial.index
        row["params"] = dict(trial.params)
        return row
    return None


def _start_trial(out: Path, trial: Trial) -> tuple[Path, Any, DataSpec, int | None]:
    cfg, data, fail = resolve_params(trial.params)
    d = trial_dir(out, trial.trial_id)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_json(d / "trial.json", {**trial.to_dict(), "train_config": cfg.to_dict(),
                                         "data": data.key()})
    return d, cfg, data, fail


def _finalize(d: Path, cfg: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Evaluate a trial that stopped before ``cfg.epochs`` (train() with nothing left to run)."""
    from .train import load_checkpoint, train

    done = int(load_checkpoint(d / "last.pt")["epoch"])
    return train(cfg.replace(epochs=done), d, data=data, resume=True, quiet=True, log=_silent)


LOCK_NAME = "trial.lock"
"""Lock file of a trial being trained (``OUT/trials/<id>/trial.lock``): ``flock``-ed by the
process training it, and holding that process's pid and host, for the message of a second one."""


#: Seconds to wait for a trial's lock before calling it busy: a trainer that was just killed
#: (kill -9 of a sweep's process group, then an immediate re-run) frees it within this time.
LOCK_GRACE_SECONDS = 3.0


def _try_flock(fcntl: Any, fd: int, grace: float) -> bool:
    deadline = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def _trial_lock(d: Path, grace: float | None = None) -> Iterator[str | None]:
    """Hold ``d/trial.lock`` while the body runs; yields None, or the holder's description when
    another live process holds it for longer than ``grace`` seconds (default
    :data:`LOCK_GRACE_SECONDS`). The lock goes with its holder: a killed trainer frees it."""
    d.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): no cross-process guard
        yield None
        return
    fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        if not _try_flock(fcntl, fd, LOCK_GRACE_SECONDS if grace is None else grace):
            holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
            yield holder or "another process"
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                          f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)
            yield None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _watch_parent(parent_pid: int, interval: float) -> None:
    while True:
        time.sleep(interval)
        if os.getppid() != parent_pid:
            try:
                sys.stderr.write(f"bbb sweep worker {os.getpid()}: the sweep process {parent_pid} is gone; "
                                 "stopping (a re-run resumes the trial from its last epoch)\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os._exit(3)


def _worker_init(parent_pid: int, interval: float = 0.25) -> None:
    """Initializer of the local backend's worker processes: a daemon thread ends the worker
    (``os._exit``) as soon as the sweep process that started it is gone (killed with -9 too), so
    no worker trains on, or starts a queued trial, as an orphan. Each epoch's checkpoint is
    written atomically, so the trial resumes from its last epoch when the sweep is re-run."""
    if os.getppid() != parent_pid:
        os._exit(3)
    threading.Thread(target=_watch_parent, args=(parent_pid, interval), daemon=True,
                     name="bbb-sweep-parent-watchdog").start()


def run_trial_local(payload: dict[str, Any]) -> dict[str, Any]:
    """Run (or resume) one trial in this process; retries crashes up to ``max_failures`` times.

    ``payload``: ``trial`` (Trial.to_dict()), ``out``, ``data_dir``, ``max_failures``,
    ``threads``, ``parent_pid`` (a worker's sweep process: the trial is not started when that
    is gone). Writes ``result.json`` in the trial directory and returns that row. The trial is
    locked while it runs (``trial.lock``): when another live process is training it, nothing is
    trained and a pending row saying so is returned. Restores torch's thread count.
    """
    import torch

    parent = payload.get("parent_pid")
    if parent is not None and os.getppid() != int(parent):
        os._exit(3)  # an orphaned worker: never start a (queued) trial
    threads_before = torch.get_num_threads()
    trial = Trial.from_dict(payload["trial"])
    out = Path(payload["out"])
    try:
        if payload.get("threads"):
            torch.set_num_threads(int(payload["threads"]))
        with _trial_lock(trial_dir(out, trial.trial_id)) as holder:
            if holder is not None:
                return _row(trial, TrialStatus.PENDING, None, trial_dir(out, trial.trial_id),
                            error=f"running in another process ({holder}); not started here")
            finished = _finished_row(out, trial)  # finished by another process meanwhile
            if finished is not None:
                return finished
            return _run_trial_locked(payload, trial, out)
    finally:
        torch.set_num_threads(threads_before)


def _run_trial_locked(payload: dict[str, Any], trial: Trial, out: Path) -> dict[str, Any]:
    from .train import TrainingDiverged, train

    d, cfg, spec, fail = _start_trial(out, trial)
    data = _trial_data(cfg, spec, payload.get("data_dir"))
    max_failures = int(payload.get("max_failures", 0))
    attempt = 0
    while True:
        attempt += 1
        start = _epochs_done(d)
        _append_history(d, "start", from_epoch=start, backend="local",
                        source="local" if (d / "last.pt").exists() else "fresh")

        def on_epoch(row: dict[str, Any]) -> None:
            if fail is not None and int(row["epoch"]) == fail and not (d / "failed_once").exists():
                atomic_write_text(d / "failed_once", f"epoch {fail}\n")
                raise InjectedFailure(f"fail_once_at_epoch={fail}: injected failure after epoch {fail}")

        try:
            summary = train(cfg, d, data=data, resume=True, quiet=True, log=_silent, on_epoch=on_epoch)
            row = _row(trial, TrialStatus.DONE, summary, d)
            break
        except TrainingDiverged as e:
            row = _row(trial, TrialStatus.FAILED, None, d, error=" ".join(str(e).split()))
            break
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - any crash of a trial is retried, then recorded
            msg = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            _append_history(d, "error", error=msg)
            if attempt > max_failures:
                row = _row(trial, TrialStatus.FAILED, None, d, error=f"{msg} (after {attempt} attempts)",
                           retry=True)
                break
    atomic_write_json(d / "result.json", row)
    return row


# --------------------------------------------------------------------------------------------
# Ray Tune
# --------------------------------------------------------------------------------------------

_CKPT_FILES = ("last.pt", "best.pt", "metrics.csv", "summary.json")


def _import_ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import tune
    except ImportError as e:
        raise UserError(f"--backend ray needs Ray Tune, which is not installed ({e.name or e}): "
                        "pip install 'bayes-by-backprop[ray]'") from None
    return ray, tune


def _snapshot(d: Path, epoch: int, files: Iterable[str]) -> Path:
    """A folder of hard links (copies across filesystems) to the trial's checkpoint files."""
    snap = d / f".ray-checkpoint-{epoch}"
    shutil.rmtree(snap, ignore_errors=True)
    snap.mkdir()
    for name in files:
        src = d / name
        if src.is_file():
            try:
                os.link(src, snap / name)
            except OSError:
                shutil.copy2(src, snap / name)
    atomic_write_json(snap / "state.json", {"epoch": epoch})
    return snap


def _restore_files(src: Path, d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name in _CKPT_FILES:
        if (src / name).is_file():
            tmp = d / f".{name}.restore"
            shutil.copy2(src / name, tmp)
            os.replace(tmp, d / name)


def _checkpoint_epoch(path: Path) -> int:
    try:
        return int(json.loads((path / "state.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return -1


def ray_trainable(config: dict[str, Any]) -> None:
    """The Ray Tune function of one trial: the same train(), reporting after every epoch.

    Each epoch: ``tune.report({"epoch", "val_error", ...}, checkpoint=...)`` with last.pt,
    best.pt and metrics.csv. A retry (``max_failures``) starts from ``tune.get_checkpoint()``
    when that is ahead of the trial directory on this node.
    """
    from ray import tune

    from .train import TrainingDiverged, train

    trial = Trial.from_dict(config["trial"])
    out = Path(config["out"])
    if config.get("threads"):
        import torch

        torch.set_num_threads(int(config["threads"]))
    d, cfg, spec, fail = _start_trial(out, trial)
    source = "local" if (d / "last.pt").exists() else "fresh"
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as cd:
            if _checkpoint_epoch(Path(cd)) > _epochs_done(d) or not (d / "last.pt").exists():
                _restore_files(Path(cd), d)
                source = "ray-checkpoint"
    _append_history(d, "start", from_epoch=_epochs_done(d), source=source, backend="ray")
    data = _trial_data(cfg, spec, config.get("data_dir"))

    def report(metrics: dict[str, Any], epoch: int, files: Sequence[str]) -> None:
        snap = _snapshot(d, epoch, files)
        try:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(snap)))
        finally:
            shutil.rmtree(snap, ignore_errors=True)

    def on_epoch(row: dict[str, Any]) -> None:
        epoch = int(row["epoch"])
        if epoch < cfg.epochs:  # the last epoch is reported with the summary, below
            report({"epoch": epoch, "val_error": row["val_error"], "train_loss": row["train_loss"],
                    "status": TrialStatus.PENDING.value}, epoch, _CKPT_FILES[:3])
        if fail is not None and epoch == fail and not (d / "failed_once").exists():
            # a lost node: the trial's local files go too, so only Ray's checkpoint can resume it
            atomic_write_text(d / "failed_once", f"epoch {fail}\n")
            for name in _CKPT_FILES:
                (d / name).unlink(missing_ok=True)
            raise InjectedFailure(f"fail_once_at_epoch={fail}: injected failure after epoch {fail}")

    try:
        summary = train(cfg, d, data=data, resume=True, quiet=True, log=_silent, on_epoch=on_epoch)
    except TrainingDiverged as e:
        row = _row(trial, TrialStatus.FAILED, None, d, error=" ".join(str(e).split()))
        atomic_write_json(d / "result.json", row)
        tune.report({"epoch": _epochs_done(d), "val_error": 1.0, "status": row["status"], "row": row})
        return
    row = _row(trial, TrialStatus.DONE, summary, d)
    last = read_last_metrics(d)
    report({"epoch": int(summary["epochs"]), "val_error": last.get("val_error", summary["best_val_error"]),
            "train_loss": last.get("train_loss"), "status": row["status"], "row": row},
           int(summary["epochs"]), _CKPT_FILES)


def read_last_metrics(d: Path) -> dict[str, Any]:
    from .train import read_metrics

    try:
        rows = read_metrics(d)
    except UserError:
        return {}
    return rows[-1] if rows else {}


def _ray_dirname(trial: Any) -> str:
    return str(trial.config["trial"]["trial_id"])


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------


@dataclass
class SweepOptions:
    """How to run a sweep (the command line's options)."""

    out: Path
    backend: str = Backend.LOCAL.value
    address: str | None = None
    scheduler: str = SchedulerKind.NONE.value
    max_concurrent: int | None = None
    gpus_per_trial: float = 0.0
    cpus_per_trial: float | None = None
    max_failures: int = 2
    grace_period: int | None = None
    reduction_factor: float = 4.0
    storage: str | None = None
    data_dir: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        for name, enum in (("backend", Backend), ("scheduler", SchedulerKind)):
            v = getattr(self, name)
            v = v.value if isinstance(v, Enum) else v
            if v not in {e.value for e in enum}:
                raise UserError(f"unknown {name} {v!r}; choose one of: {', '.join(e.value for e in enum)}")
            setattr(self, name, v)
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise UserError(f"--max-concurrent must be >= 1, got {self.max_concurrent}")
        if not (self.gpus_per_trial >= 0 and math.isfinite(self.gpus_per_trial)):
            raise UserError(f"--gpus-per-trial must be >= 0, got {self.gpus_per_trial}")
        if self.cpus_per_trial is not None and not self.cpus_per_trial > 0:
            raise UserError(f"--cpus-per-trial must be > 0, got {self.cpus_per_trial}")
        if self.max_failures < 0:
            raise UserError(f"--max-failures must be >= 0, got {self.max_failures}")
        if self.grace_period is not None and self.grace_period < 1:
            raise UserError(f"--grace-period must be >= 1, got {self.grace_period}")
        if not self.reduction_factor > 1:
            raise UserError(f"--reduction-factor must be > 1, got {self.reduction_factor}")
        if self.backend == Backend.LOCAL.value:
            if self.scheduler != SchedulerKind.NONE.value:
                raise UserError(f"--scheduler {self.scheduler} needs --backend ray")
            for flag, v in (("--address", self.address), ("--storage", self.storage)):
                if v is not None:
                    raise UserError(f"{flag} is for --backend ray")
            if self.gpus_per_trial:
                raise UserError("--gpus-per-trial is for --backend ray; the local backend runs its "
                                "trials on the trial's device (auto: cuda:0 when there is one)")


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list | dict):
        return json.dumps(v)
    return v


def _sort_key(row: dict[str, Any]) -> tuple[int, float, int]:
    v = row.get("val_error")
    ok = row["status"] in (TrialStatus.DONE.value, TrialStatus.STOPPED.value) and v is not None
    return (0 if ok else 1, float(v) if ok else math.inf, int(row.get("index", 0)))


def write_results(out: Path, trials: Sequence[Trial], rows: dict[str, dict[str, Any]],
                  backend: str) -> Path:
    """Write sweep.csv (every trial; unfinished ones as pending) and best.json, atomically."""
    keys: list[str] = []
    for t in trials:
        keys += [k for k in t.params if k not in keys]
    table = []
    for t in trials:
        r = rows.get(t.trial_id) or _row(t, TrialStatus.PENDING, None, trial_dir(out, t.trial_id))
        table.append({**r, "index": t.index, "params": dict(t.params)})
    table.sort(key=_sort_key)
    columns = ["trial_id", "status", *keys, *RESULT_COLUMNS]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in table:
        flat = {**r["params"], **{k: r.get(k) for k in ("trial_id", "status", *RESULT_COLUMNS)}}
        w.writerow([_csv_value(flat.get(c)) for c in columns])
    path = atomic_write_text(out / "sweep.csv", buf.getvalue())
    if table and _sort_key(table[0])[0] == 0:
        best = table[0]
        atomic_write_json(out / "best.json", {
            "trial_id": best["trial_id"], "selected_by": "val_error", "backend": backend,
            "val_error": best["val_error"], "test_error": best["test_error"],
            "test_error_mc": best["test_error_mc"], "test_nll": best["test_nll"],
            "status": best["status"], "epochs_run": best["epochs_run"], "best_epoch": best["best_epoch"],
            "seconds": best["seconds"], "params": best["params"], "trial_dir": best["trial_dir"],
            "trials": len(trials),
            "finished": sum(1 for r in table if r["status"] != TrialStatus.PENDING.value)})
    return path


def read_sweep(out: str | Path) -> list[dict[str, str]]:
    """The rows of ``OUT/sweep.csv`` (strings, as written)."""
    path = Path(out) / "sweep.csv"
    if not path.is_file():
        raise UserError(f"{path} not found")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="trials", unit="trial", file=sys.stderr,
                dynamic_ncols=True, disable=None if enabled else True)


def _announce(bar: Any, log: Callable[[str], None], row: dict[str, Any]) -> None:
    """One line per finished trial (through the progress bar when it is shown) and a tick."""
    if bar.disable:
        log(_describe(row))
    else:
        bar.write(_describe(row))
    bar.update(1)


def _describe(row: dict[str, Any]) -> str:
    v = row.get("val_error")
    err = f" ({row['error']})" if row.get("error") else ""
    return (f"trial {row['trial_id']} {row['status']}: {row.get('epochs_run')} epochs, val error "
            f"{'-' if v is None else f'{100 * v:.2f}%'}{err}")


def run_sweep(space: dict[str, Any], opts: SweepOptions, *, limit: int | None = None,
              log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Expand ``space`` and run its unfinished trials on ``opts.backend``; returns every row
    (also ``OUT/sweep.csv`` and ``OUT/best.json``)."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    trials = expand_space(space, limit)
    if not trials:
        raise UserError("the search space has no trials")
    out = opts.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "space.json", {**space, "limit": limit})
    rows: dict[str, dict[str, Any]] = {}
    for t in trials:
        r = _finished_row(out, t)
        if r is not None:
            rows[t.trial_id] = r
    todo = [t for t in trials if t.trial_id not in rows]
    if rows:
        log(f"{len(rows)} of {len(trials)} trials already finished in {out}; running {len(todo)}")
    write_results(out, trials, rows, opts.backend)
    if todo:
        if opts.backend == Backend.LOCAL.value:
            _run_local(todo, trials, rows, out, opts, log)
        else:
            _run_ray(todo, trials, rows, out, opts, log)
    write_results(out, trials, rows, opts.backend)
    return [rows.get(t.trial_id) or _row(t, TrialStatus.PENDING, None, trial_dir(out, t.trial_id))
            for t in trials]


def _run_local(todo: list[Trial], trials: list[Trial], rows: dict[str, dict[str, Any]], out: Path,
               opts: SweepOptions, log: Callable[[str], None]) -> None:
    workers = opts.max_concurrent or 1
    threads = int(opts.cpus_per_trial) if opts.cpus_per_trial else max(1, (os.cpu_count() or 1) // workers)
    payloads = [{"trial": t.to_dict(), "out": str(out), "data_dir": opts.data_dir,
                 "max_failures": opts.max_failures, "threads": threads} for t in todo]
    bar = _progress(len(trials), len(trials) - len(todo), opts.progress)

    def done(row: dict[str, Any]) -> None:
        rows[row["trial_id"]] = row
        write_results(out, trials, rows, opts.backend)
        _announce(bar, log, row)

    try:
        if workers == 1 or len(todo) == 1:
            for p in payloads:
                done(run_trial_local(p))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            ctx = multiprocessing.get_context("spawn")  # no forked torch thread pools
            for p in payloads:
                p["parent_pid"] = os.getpid()
            with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=ctx,
                                     initializer=_worker_init, initargs=(os.getpid(),)) as pool:
                futures = [pool.submit(run_trial_local, p) for p in payloads]
                try:
                    for fut in as_completed(futures):
                        done(fut.result())
                except BaseException:
                    for fut in futures:
                        fut.cancel()
                    raise
    finally:
        bar.close()


def _run_ray(todo: list[Trial], trials: list[Trial], rows: dict[str, dict[str, Any]], out: Path,
             opts: SweepOptions, log: Callable[[str], None]) -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # a forced experiment snapshot per checkpoint is fine at seconds-to-minutes per epoch
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")  # one line per crash instead (below)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray, tune = _import_ray()
    import logging

    from ray.tune.schedulers import ASHAScheduler

    started = False
    if not ray.is_initialized():
        try:
            if opts.address is None:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=True,
                         logging_level=logging.WARNING)
            else:
                ray.init(address=opts.address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = opts.address or "a new local cluster"
            raise UserError(f"cannot start or join Ray ({where}): {' '.join(str(e).split())[:200]}") from None
        started = True
    try:
        cpus = opts.cpus_per_trial or 1.0
        resources = {"cpu": cpus, "gpu": opts.gpus_per_trial}
        epochs = max(resolve_params(t.params)[0].epochs for t in todo)
        scheduler = None
        if opts.scheduler == SchedulerKind.ASHA.value:
            grace = opts.grace_period or max(1, epochs // 10)
            scheduler = ASHAScheduler(time_attr="epoch", max_t=max(epochs, grace),
                                      grace_period=min(grace, epochs), reduction_factor=opts.reduction_factor)
        by_id = {t.trial_id: t for t in todo}
        data_cache: dict[str, Any] = {}
        bar = _progress(len(trials), len(trials) - len(todo), opts.progress)

        def collect(rt: Any, error: str | None = None) -> None:
            tid = rt.config["trial"]["trial_id"]
            if tid in rows or tid not in by_id:
                return
            row = _collect_ray_trial(by_id[tid], rt, out, opts, error, data_cache)
            rows[tid] = row
            atomic_write_json(trial_dir(out, tid) / "result.json", row)
            write_results(out, trials, rows, opts.backend)
            _announce(bar, log, row)

        class Collect(tune.Callback):  # runs in this process, as each trial ends
            def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
                collect(trial)

            def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
                msg = (f"trial {trial.config['trial']['trial_id']} crashed (failure {trial.num_failures} of at "
                       f"most {opts.max_failures}); retrying from its latest checkpoint; see {trial.error_file}")
                if bar.disable:
                    log(msg)
                else:
                    bar.write(msg)

            def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
                collect(trial, error=f"crashed {trial.num_failures} time(s); Ray's error file: {trial.error_file}")

        storage = opts.storage or str(out / "ray")
        name = "sweep-" + time.strftime("%Y%m%d-%H%M%S")
        tuner = tune.Tuner(
            tune.with_resources(ray_trainable, resources),
            param_space={"trial": tune.grid_search([t.to_dict() for t in todo]), "out": str(out),
                         "data_dir": opts.data_dir, "threads": max(1, int(cpus))},
            tune_config=tune.TuneConfig(metric="val_error", mode="min", scheduler=scheduler,
                                        max_concurrent_trials=opts.max_concurrent,
                                        reuse_actors=True,  # one worker (torch import, data) for many trials
                                        trial_dirname_creator=_ray_dirname, trial_name_creator=_ray_dirname),
            run_config=tune.RunConfig(
                name=name, storage_path=storage, verbose=0, callbacks=[Collect()],
                failure_config=tune.FailureConfig(max_failures=opts.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2)),
        )
        try:
            results = tuner.fit()
            for r in results:  # anything the callback did not see
                tid = (r.config or {}).get("trial", {}).get("trial_id")
                if tid in by_id and tid not in rows:
                    rt = SimpleNamespace(config=r.config, last_result=r.metrics or {}, checkpoint=r.checkpoint)
                    collect(rt, error=None if r.error is None else " ".join(str(r.error).split())[:300])
        finally:
            bar.close()
    finally:
        if started:
            ray.shutdown()


def _collect_ray_trial(trial: Trial, rt: Any, out: Path, opts: SweepOptions, error: str | None,
                       data_cache: dict[str, Any]) -> dict[str, Any]:
    """The row of a finished Ray trial; its files are copied here from its Ray checkpoint when
    this machine's copy is behind (another node), and a trial stopped early is evaluated here."""
    d = trial_dir(out, trial.trial_id)
    ckpt = getattr(rt, "checkpoint", None)
    if ckpt is not None:
        with ckpt.as_directory() as cd:
            behind = _checkpoint_epoch(Path(cd)) > _epochs_done(d) or (
                (Path(cd) / "summary.json").is_file() and not (d / "summary.json").is_file())
            if behind:
                _restore_files(Path(cd), d)
    result = rt.last_result or {}
    if isinstance(result.get("row"), dict):
        return {**result["row"], "index": trial.index, "params": dict(trial.params)}
    if error is not None or not (d / "last.pt").exists():
        return _row(trial, TrialStatus.FAILED, None, d, error=error or "no checkpoint was reported",
                    retry=True)
    cfg, spec, _ = resolve_params(trial.params)
    key = json.dumps(spec.key())
    if key not in data_cache:
        data_cache[key] = _trial_data(cfg, spec, opts.data_dir)
    summary = _finalize(d, cfg, data_cache[key])
    status = TrialStatus.STOPPED if int(summary["epochs"]) < cfg.epochs else TrialStatus.DONE
    return _row(trial, status, summary, d)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _dump_space(space: dict[str, Any]) -> str:
    try:
        import yaml
    except ImportError:
        return json.dumps(space, indent=2) + "\n"
    return yaml.safe_dump(space, sort_keys=False, default_flow_style=None)


def dry_run_table(trials: Sequence[Trial], out: Path | None, ref_epoch_seconds: float) -> tuple[str, float]:
    """The ``--dry-run`` listing and the estimated total seconds."""
    keys = varied_keys(trials)
    lines = []
    total = 0.0
    header = ["#", "trial_id", *keys, "epochs", "est_hours", "state"]
    for t in trials:
        cfg, _, _ = resolve_params(t.params)
        sec = epoch_seconds_estimate(t.params, ref_epoch_seconds) * cfg.epochs
        total += sec
        state = "-"
        if out is not None:
            r = _finished_row(out, t)
            done = _epochs_done(trial_dir(out, t.trial_id))
            state = r["status"] if r else (f"epoch {done}" if done else "-")
        lines.append([str(t.index + 1), t.trial_id, *(json.dumps(t.params[k]) if isinstance(
            t.params[k], list | dict) else str(t.params[k]) for k in keys), str(cfg.epochs),
            f"{sec / 3600:.2f}", state])
    widths = [max(len(r[j]) for r in [header, *lines]) for j in range(len(header))]
    text = "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *lines])
    return text, total


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb sweep`` options on ``parser``."""
    if not parser.epilog:
        parser.epilog = "Example:\n  " + EXAMPLE
    parser.epilog += ("\n\nWrites OUT/sweep.csv (one row per trial, sorted by validation error), OUT/best.json "
                      "and OUT/trials/<trial_id>/ (a bbb train run directory each).\n"
                      "Space format and cluster set-up: docs/scale_out.md.")
    parser.add_argument("--space", default="paper", metavar="paper|FILE",
                        help="search space: 'paper' (the paper's MNIST grid, 972 trials) or a YAML/JSON file "
                             "(default paper)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key of the space, e.g. epochs=2 or 'lr={grid: [0.001, 0.01]}' "
                             "(repeatable)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N trials")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the trials and their estimated cost; run nothing")
    parser.add_argument("--show-space", action="store_true",
                        help="print the space (after --set) as YAML, to start a space file from; run nothing")
    parser.add_argument("--out", metavar="DIR", help="sweep folder (required unless --dry-run/--show-space)")
    parser.add_argument("--backend", default=Backend.LOCAL.value, choices=[b.value for b in Backend],
                        help="local: processes on this machine; ray: Ray Tune trials (default local)")
    parser.add_argument("--address", default=None, metavar="ADDRESS",
                        help="ray: 'auto' or ray://HOST:PORT to join a cluster (default: start a local one)")
    parser.add_argument("--scheduler", default=SchedulerKind.NONE.value, choices=[s.value for s in SchedulerKind],
                        help="ray: asha stops poor trials early on the per-epoch validation error (default none)")
    parser.add_argument("--grace-period", type=int, default=None, metavar="EPOCHS",
                        help="asha: epochs before a trial may be stopped (default epochs/10)")
    parser.add_argument("--reduction-factor", type=float, default=4.0,
                        help="asha: keep 1/this of the trials at each rung (default 4)")
    parser.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                        help="trials at a time (local default 1; ray default: as many as resources allow)")
    parser.add_argument("--gpus-per-trial", type=float, default=0.0, metavar="F",
                        help="ray: GPUs per trial, may be fractional (0.25: four trials per GPU; default 0)")
    parser.add_argument("--cpus-per-trial", type=float, default=None, metavar="F",
                        help="CPUs per trial, also torch threads (ray default 1; local default cores/max-concurrent)")
    parser.add_argument("--max-failures", type=int, default=2,
                        help="retries of a crashed trial, each from its latest checkpoint (default 2)")
    parser.add_argument("--storage", default=None, metavar="PATH|URI",
                        help="ray: storage of Ray's checkpoints (default OUT/ray; on a multi-node cluster a "
                             "shared folder or s3://... URI)")
    parser.add_argument("--data-dir", default=None, metavar="DIR", help="MNIST data folder (else $BBB_DATA ...)")
    parser.add_argument("--ref-epoch-seconds", type=float, default=REF_EPOCH_SECONDS, metavar="S",
                        help="dry-run cost model: seconds per epoch of BBB 2x400 with 1 sample on your hardware "
                             f"(default {REF_EPOCH_SECONDS:g}, measured on 2 CPU cores)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    """``bbb sweep``: expand the space, then list it (--dry-run) or run it."""
    space = apply_overrides(load_space(args.space), args.sets)
    if args.show_space:
        sys.stdout.write(_dump_space(space))
        return 0
    if args.dry_run:
        trials = expand_space(space, args.limit)
        if not args.ref_epoch_seconds > 0:
            raise UserError(f"--ref-epoch-seconds must be > 0, got {args.ref_epoch_seconds}")
        text, total = dry_run_table(trials, Path(args.out) if args.out else None, args.ref_epoch_seconds)
        print(text)
        epochs = sum(resolve_params(t.params)[0].epochs for t in trials)
        print(f"\n{len(trials)} trials, {epochs} epochs; estimated {total / 3600:.1f} machine-hours "
              f"({total / 86400:.1f} days) at {args.ref_epoch_seconds:g} s per epoch of BBB 2x400 "
              "(scaled by weights and samples; see docs/scale_out.md)")
        return 0
    if not args.out:
        raise UserError("--out DIR is required (or use --dry-run)")
    opts = SweepOptions(out=Path(args.out), backend=args.backend, address=args.address,
                        scheduler=args.scheduler, max_concurrent=args.max_concurrent,
                        gpus_per_trial=args.gpus_per_trial, cpus_per_trial=args.cpus_per_trial,
                        max_failures=args.max_failures, grace_period=args.grace_period,
                        reduction_factor=args.reduction_factor, storage=args.storage,
                        data_dir=args.data_dir, progress=not args.quiet)
    t0 = time.perf_counter()
    try:
        rows = run_sweep(space, opts, limit=args.limit)
    except KeyboardInterrupt:
        print(f"bbb: sweep interrupted; finished trials are in {opts.out}/sweep.csv; run the same "
              "command again to resume", file=sys.stderr)
        return 130
    counts = {s.value: sum(1 for r in rows if r["status"] == s.value) for s in TrialStatus}
    print(f"{len(rows)} trials: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
          + f" ({time.perf_counter() - t0:.0f} s)")
    best_path = opts.out / "best.json"
    if best_path.is_file():
        best = json.loads(best_path.read_text())
        print(f"best by validation: trial {best['trial_id']} val error {100 * best['val_error']:.2f}%, "
              f"test error {100 * best['test_error']:.2f}%")
    print(f"wrote {opts.out / 'sweep.csv'}, {best_path}")
    return 0

