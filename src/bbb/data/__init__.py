"""Data sets of the paper (MNIST, Fashion-MNIST, UCI Mushroom) and the UCI regression benchmark,
and your own data: a CSV or arrays as a run's split (:func:`load_file_splits`, its
:class:`Preprocess`), a folder of images (:func:`load_image_folder`).

Files are found in (or downloaded to) ``<data dir>/<dataset>/<original file name>``; see
:func:`resolve_data_dir`. Every problem with a file raises :class:`bbb.errors.DataError`
with a one-line message that names the file and says what to do.
"""

from __future__ import annotations

from bbb.data.files import Preprocess, load_file_splits
from bbb.data.idx import read_idx, read_idx_pair
from bbb.data.images import load_image_folder
from bbb.data.mnist import MNIST_DATASETS, MNIST_FILES, load_mnist, mnist_splits
from bbb.data.mushroom import MUSHROOM_ATTRIBUTES, MUSHROOM_FILE, load_mushroom, parse_mushroom
from bbb.data.sources import (
    BASE_URLS,
    DATASETS,
    KNOWN_FILES,
    download_dataset,
    ensure_file,
    ensure_files,
    file_md5,
    resolve_data_dir,
    url_for,
    verify_files,
    verify_md5,
)
from bbb.data.tabular import Standardizer
from bbb.data.uci import UCI_DATASETS, UCIData, load_uci

__all__ = [
    "BASE_URLS",
    "DATASETS",
    "KNOWN_FILES",
    "MNIST_DATASETS",
    "MNIST_FILES",
    "MUSHROOM_ATTRIBUTES",
    "MUSHROOM_FILE",
    "Preprocess",
    "Standardizer",
    "UCIData",
    "UCI_DATASETS",
    "download_dataset",
    "ensure_file",
    "ensure_files",
    "file_md5",
    "load_file_splits",
    "load_image_folder",
    "load_mnist",
    "load_mushroom",
    "load_uci",
    "mnist_splits",
    "parse_mushroom",
    "read_idx",
    "read_idx_pair",
    "resolve_data_dir",
    "url_for",
    "verify_files",
    "verify_md5",
]
