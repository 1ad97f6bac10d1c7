"""The data a trial trains on (a dataset split or a small synthetic problem) and the
estimated seconds per epoch of a trial, for ``--dry-run``."""

from __future__ import annotations

import json
from typing import Any

from ..cli.cost import epoch_seconds, reference_epoch_seconds
from .space import DataSpec, SweepDataset, resolve_params

#: The unit of ``--ref-epoch-seconds``: the cost model's seconds per epoch of BBB 2x400 with one
#: sample on MNIST (:mod:`bbb.cli.cost`, the one cost model, with ``bbb reproduce mnist --plan``)
REF_EPOCH_SECONDS = reference_epoch_seconds()


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


def trial_data(cfg: Any, data: DataSpec, data_dir: str | None) -> dict[str, Any] | None:
    """The trial's tensors, cached per process (workers run many trials on the same data) under
    every setting the split reads, the last split only (a grid over ``train_size`` or ``split_seed``
    would otherwise hold a copy of the dataset per value); None for a trial on your own file
    (``data_file``), which loads its split itself, as ``bbb train`` does: its preprocessing (the
    columns' scaling, the target's units, the class names) and the file's MD5 are then the run's,
    for its numbers and for ``bbb predict``."""
    from ..runs import load_data

    if cfg.data_file is not None:
        return None
    key = json.dumps({**data.key(), "split": [cfg.val_size, cfg.split_seed, cfg.scale, cfg.train_size],
                      "dir": data_dir})
    if key not in _DATA_CACHE:
        _DATA_CACHE.clear()
        if data.kind == SweepDataset.SYNTHETIC.value:
            _DATA_CACHE[key] = synthetic_data(data.dim, data.n_train, data.classes, cfg.split_seed)
        else:
            _DATA_CACHE[key] = load_data(cfg.replace(data_dir=data_dir) if data_dir else cfg)
    return _DATA_CACHE[key]


_FILE_SHAPES: dict[str, tuple[int, int, int]] = {}


def _shape(cfg: Any, data: DataSpec) -> tuple[int, int, int]:
    """(training examples, input features, classes) without loading an image dataset (its first
    ``train_size`` training images where that is given); a trial on your own file or folder
    (``data_file``) by its split, read once per split setting (a table of 500 rows is not priced as
    MNIST's 50,000 images)."""
    if data.kind == SweepDataset.SYNTHETIC.value:
        return data.n_train, data.dim, data.classes
    if cfg.data_file is not None:
        from ..runs.model import load_split

        key = json.dumps([cfg.data_file, cfg.target, cfg.task, cfg.val_fraction, cfg.test_fraction, cfg.split_seed,
                          cfg.train_size, cfg.ignore_columns, cfg.keep_columns, cfg.image_size, cfg.image_colour])
        if key not in _FILE_SHAPES:
            split, pre = load_split(cfg, new_run=True)
            x = split["train_x"]
            _FILE_SHAPES[key] = (int(x.shape[0]), int(x[0].numel()), len(pre.classes or [])
                                 or (2 if cfg.likelihood == "heteroscedastic" else 1))
        return _FILE_SHAPES[key]
    n = 60_000 - cfg.val_size
    return (n if cfg.train_size is None else min(n, cfg.train_size)), 784, 10


def epoch_seconds_estimate(params: dict[str, Any], ref_epoch_seconds: float = REF_EPOCH_SECONDS) -> float:
    """Estimated seconds per epoch of a trial: the cost model's (:func:`bbb.cli.cost.epoch_seconds`),
    rescaled so that BBB 2x400 with one sample on MNIST takes ``ref_epoch_seconds``."""
    cfg, data = resolve_params(params)
    n, d, c = _shape(cfg, data)
    return epoch_seconds(cfg.method, cfg.hidden, cfg.samples, n, d, c) * ref_epoch_seconds / REF_EPOCH_SECONDS
