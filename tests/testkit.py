"""Helpers several test modules share: tiny learnable data and the command line run in-process."""

from __future__ import annotations

import pytest
import torch

from bbb.cli import main


def blobs(n_train: int = 240, n_val: int = 60, n_test: int = 60, d: int = 12, c: int = 3, spread: float = 2.0,
          seed: int = 0) -> dict[str, torch.Tensor]:
    """Gaussian blobs (``c`` classes in ``d`` features, centres ``spread`` x N(0, 1) apart),
    split into train/val/test tensors as ``train(data=...)`` takes them. The defaults are
    learnable in a couple of epochs by a 16-unit network; a small ``spread`` makes the classes
    overlap."""
    g = torch.Generator().manual_seed(seed)
    centers = spread * torch.randn(c, d, generator=g)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, c, (n,), generator=g)
        return centers[y] + torch.randn(n, d, generator=g), y

    (a, b), (e, f), (h, i) = make(n_train), make(n_val), make(n_test)
    return {"train_x": a, "train_y": b, "val_x": e, "val_y": f, "test_x": h, "test_y": i}


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``bbb ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's --help and its own errors
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err
