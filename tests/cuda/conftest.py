"""The GPU tests: every test in this folder is skipped where CUDA is not available.

Run on a machine with a GPU and torch >= 2.8, from the repository root, without installing bbb:

    PYTHONPATH=src python -m pytest tests/cuda -q

They import torch, numpy, pytest and bbb only (their helpers: ``cudakit.py`` here), not the
other tests' helpers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

_HERE = Path(__file__).resolve().parent
_NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(_NEEDS_CUDA)


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda")


@pytest.fixture(autouse=True)
def _no_sync_debug_left_on():
    """A test that fails inside ``set_sync_debug_mode("error")`` must not leave it on for the next."""
    yield
    if torch.cuda.is_available():
        torch.cuda.set_sync_debug_mode(0)
