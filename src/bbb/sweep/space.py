"""Search spaces: loading (JSON, YAML, the built-in ``paper`` space), ``--set`` overrides,
validation, and expansion into trials with stable ids."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import SettingError, UserError, check_int
from ..options import Dataset, closest


class SweepDataset(str, Enum):
    """What a sweep's trials train on: an image dataset (the members of
    :data:`bbb.options.IMAGE_DATASETS`, from the one list, :class:`bbb.options.Dataset`) or a small
    synthetic problem (``SYNTHETIC``)."""

    MNIST = Dataset.MNIST.value
    FASHION_MNIST = Dataset.FASHION_MNIST.value
    SYNTHETIC = "synthetic"


class ValueKind(str, Enum):
    """How a sweep's search space gives the values of one key."""

    GRID = "grid"
    CHOICE = "choice"
    UNIFORM = "uniform"
    LOGUNIFORM = "loguniform"
    RANDINT = "randint"


class TrialStatus(str, Enum):
    DONE = "done"          # trained for every epoch asked for
    STOPPED = "stopped"    # stopped early by the scheduler (ASHA); evaluated at its best epoch
    FAILED = "failed"      # diverged, or crashed more than --max-failures times
    PENDING = "pending"    # not finished (yet)


#: keys of a search space that are not TrainConfig fields
SWEEP_KEYS = ("width", "depth", "neg_log_sigma1", "neg_log_sigma2", "dataset", "synthetic_dim",
              "synthetic_train", "synthetic_classes")


_SYNTHETIC_DEFAULTS = {"synthetic_dim": 64, "synthetic_train": 400, "synthetic_classes": 4}


#: TrainConfig settings of an image dataset's or a file's data that synthetic data never read
#: (its split is fixed: ``synthetic_train // 4`` validation and test examples, seeded by ``split_seed``)
_NOT_SYNTHETIC = ("val_size", "scale", "train_size", "data_file")


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
    "pi": ("float", None, None),
    "sigma1": ("float", None, None),
    "sigma2": ("float", None, None),
    "prior_sigma": ("float", None, None),
    "neg_log_sigma1": ("float", -700, 700),
    "neg_log_sigma2": ("float", -700, 700),
    "lr": ("float", None, None),
    "momentum": ("float", None, None),
    "rho_lr_scale": ("float", None, None),
    "lr_gamma": ("float", None, None),
    "rho_init": ("float", None, None),
    "mu_init_scale": ("float", None, None),
    "dropout_input": ("float", None, None),
    "dropout_hidden": ("float", None, None),
    "scale": ("float", None, None),
    "ess": ("float", None, None),
    "hess_init": ("float", None, None),
    "weight_decay": ("float", None, None),
}


#: numeric keys whose value may be null (their default is None; ess: the training set's size)
_NULLABLE = frozenset({"mu_init_scale", "ess"})


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
                  "val_nll", "val_rmse", "test_rmse", "test_log_likelihood", "seconds", "error", "trial_dir")
#: what ranks a sweep's finished trials: a classifier's validation error (its validation NLL where
#: every classifier trial chose its best epoch by NLL, a table's default), else (a regression, which
#: has none) its validation NLL, the Gaussian's, which scores the predicted noise as well as the mean
RANK_BY = ("val_error", "val_nll")


def yaml_loader() -> Any:
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
        return yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise UserError(f"cannot parse --set value {text!r} ({str(e).splitlines()[0]})") from None


def load_space(space: str | Path) -> dict[str, Any]:
    """A built-in space (``paper``) or a YAML/JSON file, checked for its top-level keys."""
    name = str(space)
    if name in BUILTIN_SPACES:
        return json.loads(json.dumps(BUILTIN_SPACES[name]))  # a deep copy
    path = Path(name)
    if not path.is_file():
        near = closest(name, list(BUILTIN_SPACES))
        raise UserError(f"search space {name!r} is neither a built-in space "
                        f"({', '.join(BUILTIN_SPACES)}) nor a file" + (f"; did you mean {near}?" if near else ""))
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
            raise UserError(f"reading {path} needs PyYAML: pip install pyyaml "
                            "(or write the space as .json)") from None
        try:
            obj = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a SafeLoader subclass
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

    kind: str = SweepDataset.MNIST.value
    dim: int = 64
    n_train: int = 400
    classes: int = 4

    def key(self) -> dict[str, Any]:
        if self.kind != SweepDataset.SYNTHETIC.value:
            return {"dataset": self.kind}
        return {"dataset": self.kind, "dim": self.dim, "n_train": self.n_train, "classes": self.classes}


def _int(key: str, v: Any, minimum: int) -> int:
    return check_int(f"search space: {key}", v, minimum)


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


def resolve_params(params: dict[str, Any]) -> tuple[Any, DataSpec]:
    """``(TrainConfig, DataSpec)`` of one trial's parameter values."""
    from ..runs import TrainConfig

    p = dict(params)
    kind = p.pop("dataset", SweepDataset.MNIST.value)
    if kind not in {k.value for k in SweepDataset}:
        raise UserError(f"search space: unknown dataset {kind!r}; choose one of: "
                        f"{', '.join(k.value for k in SweepDataset)}")
    syn = {k: p.pop(k) for k in _SYNTHETIC_DEFAULTS if k in p}
    if syn and kind != SweepDataset.SYNTHETIC.value:
        raise UserError(f"search space: {', '.join(syn)} only apply to dataset: synthetic")
    unread = [k for k in _NOT_SYNTHETIC if k in p]
    if unread and kind == SweepDataset.SYNTHETIC.value:
        raise UserError(f"search space: dataset: synthetic never reads {', '.join(unread)} (its split is "
                        "synthetic_train examples to train on and a quarter of that each to validate and "
                        f"test); leave {'it' if len(unread) == 1 else 'them'} out, or sweep an image dataset")
    syn = {**_SYNTHETIC_DEFAULTS, **syn}
    data = DataSpec(kind, _int("synthetic_dim", syn["synthetic_dim"], 1),
                    _int("synthetic_train", syn["synthetic_train"], 4),
                    _int("synthetic_classes", syn["synthetic_classes"], 2))
    named = {k: k for k in p}  # a TrainConfig setting -> the space's key that gave it
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
            named[f"sigma{i}"] = f"neg_log_sigma{i}"
    if kind != SweepDataset.SYNTHETIC.value:
        p["dataset"] = kind
    try:
        cfg = TrainConfig.from_dict(p)
    except UserError as e:  # a setting the trial's method does not read: named as the space names it
        msg = _in_space(f"{named.get(e.setting, e.setting)} {e.problem}" if isinstance(e, SettingError) else str(e))
        if msg.startswith("unknown setting"):
            msg += f" (allowed: TrainConfig fields and {', '.join(SWEEP_KEYS)})"
        raise UserError(f"search space: {msg}") from None
    except TypeError as e:
        raise UserError(f"search space: {e}") from None
    _refuse_unused(cfg, [n for n in p if n != "dataset"], named)
    if cfg.data_file is not None and cfg.val_fraction == 0:
        raise UserError("search space: a sweep selects models on the validation set; val_fraction must be > 0")
    if kind != SweepDataset.SYNTHETIC.value and cfg.data_file is None and cfg.val_size < 1:
        raise UserError("search space: a sweep selects models on the validation set; val_size must be >= 1")
    return cfg, data


def _in_space(problem: str) -> str:
    """TrainConfig's line for a setting its method does not read, as said of a space."""
    if "leave it out" not in problem:
        return problem
    return (problem.replace("leave it out", "leave it out of the space")
            + " (to sweep several methods, give each a space of its own)")


def _refuse_unused(cfg: Any, given: list[str], named: dict[str, str]) -> None:
    """A setting of the space that the trial's method does not read (IVON's ``ess``, ``hess_init``,
    ``weight_decay`` with another method; Bayes by Backprop's prior, KL and optimiser settings with
    ``method: ivon``) is a one-line error naming the space's key, even at its default value (as
    ``bbb train`` refuses one given at all): never a value listed in sweep.csv that trained nothing."""
    for name in given:
        try:
            cfg.refuse_unused([name])
        except SettingError as e:
            raise UserError(f"search space: {named.get(name, name)} {_in_space(e.problem)}") from None


def trial_id_of(params: dict[str, Any]) -> str:
    """Stable id: a hash of what the trial computes (settings that differ from the defaults)."""
    from ..runs import TrainConfig

    cfg, data = resolve_params(params)
    default = TrainConfig().to_dict()
    train = {k: v for k, v in cfg.to_dict().items() if k not in _NOT_HASHED and v != default[k]}
    train.pop("dataset", None)
    key: dict[str, Any] = {"train": train, "data": data.key()}
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
