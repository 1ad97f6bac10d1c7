"""Checks on the real data sets; run with ``BBB_DATA`` pointing at a folder that holds them.

Skipped (with the reason) when ``BBB_DATA`` is unset or lacks the files. Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from bbb.data import KNOWN_FILES, load_mnist, load_mushroom, mnist_splits, verify_md5

pytestmark = pytest.mark.slow


def data_root(dataset: str) -> Path:
    """The ``BBB_DATA`` folder, or skip when it does not hold every file of ``dataset``."""
    env = os.environ.get("BBB_DATA", "")
    if not env:
        pytest.skip(
            "real-data test: set BBB_DATA to a folder holding mnist/, fashion-mnist/, mushroom/"
        )
    root = Path(env)
    missing = [f"{dataset}/{n}" for n in KNOWN_FILES[dataset] if not (root / dataset / n).is_file()]
    if missing:
        pytest.skip(f"real-data test: BBB_DATA={root} lacks {', '.join(missing)}")
    return root


@pytest.fixture(scope="module")
def mnist_root() -> Path:
    return data_root("mnist")


def test_md5_table_matches_md5sums_file() -> None:
    root = data_root("mnist")
    sums = root / "md5sums"
    if not sums.is_file():
        pytest.skip(f"real-data test: {sums} not present")
    listed = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            listed[name] = digest
    table = {f"{d}/{n}": m for d, files in KNOWN_FILES.items() for n, m in files.items()}
    assert table == listed


def test_small_files_match_official_md5() -> None:
    root = data_root("mushroom")
    verify_md5(
        root / "mushroom" / "agaricus-lepiota.data",
        KNOWN_FILES["mushroom"]["agaricus-lepiota.data"],
    )
    for dataset in ("mnist", "fashion-mnist"):
        name = "t10k-labels-idx1-ubyte.gz"
        verify_md5(data_root(dataset) / dataset / name, KNOWN_FILES[dataset][name])


def test_mnist_shapes_and_labels(mnist_root: Path) -> None:
    for split, n in (("train", 60000), ("test", 10000)):
        x, y = load_mnist(split, "mnist", download=False)
        assert x.shape == (n, 28, 28) and x.dtype == torch.uint8
        assert y.shape == (n,) and y.dtype == torch.int64
        assert int(y.min()) == 0 and int(y.max()) == 9
        assert int(x.max()) == 255
        assert torch.bincount(y, minlength=10).min() > n // 20  # every class is present


def test_mnist_splits(mnist_root: Path) -> None:
    d = mnist_splits(seed=0, download=False)
    assert d["train_x"].shape == (50000, 784) and d["train_y"].shape == (50000,)
    assert d["val_x"].shape == (10000, 784) and d["val_y"].shape == (10000,)
    assert d["test_x"].shape == (10000, 784) and d["test_y"].shape == (10000,)
    assert d["train_x"].dtype == torch.float32 and d["train_y"].dtype == torch.int64
    assert float(d["train_x"].max()) == pytest.approx(255 / 126)
    assert float(d["test_x"].min()) == 0.0

    same = mnist_splits(seed=0, download=False)
    assert torch.equal(same["val_y"], d["val_y"]) and torch.equal(same["train_x"], d["train_x"])
    other = mnist_splits(seed=1, download=False)
    assert not torch.equal(other["val_y"], d["val_y"])
    assert torch.equal(other["test_x"], d["test_x"])  # the test set does not depend on the seed
    # the split is a partition: same label histogram as the whole training set
    total = torch.bincount(torch.cat([d["train_y"], d["val_y"]]), minlength=10)
    _, y = load_mnist("train", download=False)
    assert torch.equal(total, torch.bincount(y, minlength=10))


def test_fashion_mnist_shapes() -> None:
    data_root("fashion-mnist")
    for split, n in (("train", 60000), ("test", 10000)):
        x, y = load_mnist(split, "fashion-mnist", download=False)
        assert x.shape == (n, 28, 28) and y.shape == (n,)
        assert torch.equal(torch.bincount(y), torch.full((10,), n // 10))  # balanced classes


def test_mushroom() -> None:
    data_root("mushroom")
    contexts, edible = load_mushroom(download=False)
    assert contexts.shape == (8124, 117) and contexts.dtype == torch.float32
    assert edible.shape == (8124,) and edible.dtype == torch.bool
    assert int(edible.sum()) == 4208
    assert torch.equal(contexts.sum(dim=1), torch.full((8124,), 22.0))
