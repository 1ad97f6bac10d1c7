from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def data_dir() -> Path:
    """The real-data folder from BBB_DATA; skips the test with a reason when it is not there."""
    d = os.environ.get("BBB_DATA")
    if not d or not (Path(d) / "mnist" / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("real MNIST not available: set BBB_DATA to a folder with mnist/ (e.g. ../shared/data)")
    return Path(d)
