"""MNIST and Fashion-MNIST: raw images and labels, and the paper's train/validation/test split."""

from __future__ import annotations

import os

import torch

from bbb.data.idx import read_idx_pair
from bbb.data.sources import ensure_files
from bbb.errors import DataError, SettingError
from bbb.options import IMAGE_DATASETS

__all__ = ["MNIST_DATASETS", "MNIST_FILES", "load_mnist", "mnist_splits"]

MNIST_DATASETS: tuple[str, ...] = IMAGE_DATASETS
"""Data sets in the MNIST file format."""

MNIST_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
"""``(images file, labels file)`` of each split."""

_IMAGE_SHAPE = (28, 28)
_NUM_CLASSES = 10


def load_mnist(
    split: str = "train",
    dataset: str = "mnist",
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    verify: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load one split of MNIST or Fashion-MNIST.

    Parameters
    ----------
    split
        ``"train"`` (60,000 images) or ``"test"`` (10,000).
    dataset
        ``"mnist"`` or ``"fashion-mnist"``.
    data_dir
        Data directory; see :func:`bbb.data.resolve_data_dir`.
    download
        Whether to download missing files.
    verify
        Check the files against their official MD5 (once per file; see
        :func:`bbb.data.verify_files`). ``None``: yes unless ``BBB_DATA_VERIFY=0``.

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor]
        Images ``uint8 (N, 28, 28)`` and labels ``int64 (N,)`` in ``0..9``.

    Raises
    ------
    DataError
        Unknown data set or split, missing files that cannot be downloaded, or damaged files.
    """
    if dataset not in MNIST_DATASETS:
        raise DataError(f"unknown data set {dataset!r}; valid names: {', '.join(MNIST_DATASETS)}")
    if split not in MNIST_FILES:
        raise DataError(f"unknown split {split!r}; valid splits: {', '.join(MNIST_FILES)}")
    images_path, labels_path = ensure_files(
        dataset, MNIST_FILES[split], data_dir=data_dir, download=download, verify=verify
    )
    images, labels = read_idx_pair(images_path, labels_path)
    if tuple(images.shape[1:]) != _IMAGE_SHAPE:
        raise DataError(
            f"{images_path}: images are {'x'.join(map(str, images.shape[1:]))}, expected 28x28; "
            "delete it and re-run to download again, or point --data-dir at a good copy"
        )
    if labels.numel() and int(labels.max()) >= _NUM_CLASSES:
        raise DataError(
            f"{labels_path}: label {int(labels.max())} out of range 0..{_NUM_CLASSES - 1}; "
            "delete it and re-run to download again, or point --data-dir at a good copy"
        )
    return images, labels.long()


def mnist_splits(
    dataset: str = "mnist",
    data_dir: str | os.PathLike[str] | None = None,
    scale: float = 126.0,
    val_size: int = 10000,
    seed: int = 0,
    download: bool = True,
    verify: bool | None = None,
) -> dict[str, torch.Tensor]:
    """Load a data set as flat scaled pixels, with a seeded validation split.

    The training images are split by a permutation from a ``torch.Generator`` seeded with
    ``seed``: ``val_size`` of them become the validation set (10,000 in the paper), the rest
    the training set. The test set is kept apart.

    Parameters
    ----------
    dataset
        ``"mnist"`` or ``"fashion-mnist"``.
    data_dir
        Data directory; see :func:`bbb.data.resolve_data_dir`.
    scale
        Pixels are divided by this (the paper uses 126; 255 maps to ``[0, 1]``). Must be > 0.
    val_size
        Number of training images held out for validation, ``0 <= val_size < 60000``.
    seed
        Seed of the split.
    download
        Whether to download missing files.
    verify
        Check the files against their official MD5; see :func:`load_mnist`.

    Returns
    -------
    dict[str, torch.Tensor]
        ``train_x, val_x, test_x``: ``float32 (N, 784)``; ``train_y, val_y, test_y``:
        ``int64 (N,)``.
    """
    if not scale > 0:
        raise SettingError("scale", f"must be > 0, got {scale}")
    train_images, train_labels = load_mnist("train", dataset, data_dir, download, verify)
    test_images, test_labels = load_mnist("test", dataset, data_dir, download, verify)
    n = train_images.shape[0]
    if not 0 <= val_size < n:
        raise SettingError("val_size", f"must be in 0..{n - 1}, got {val_size}")
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=generator)
    val_idx, train_idx = perm[:val_size], perm[val_size:]

    def flat(images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1).to(torch.float32).div_(scale)

    return {
        "train_x": flat(train_images[train_idx]),
        "train_y": train_labels[train_idx],
        "val_x": flat(train_images[val_idx]),
        "val_y": train_labels[val_idx],
        "test_x": flat(test_images),
        "test_y": test_labels,
    }
