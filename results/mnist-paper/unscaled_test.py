"""Test and validation error of trained runs with the inputs scaled as in training (/126) and
unscaled (raw pixels, as JINKEHE's evaluation fed them): the diagnostic quoted in README.md.

Usage: python results/mnist-paper/unscaled_test.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import sys

import torch

from bbb.data import mnist_splits
from bbb.runs import load_run


def main() -> None:
    d = mnist_splits(scale=126.0, download=False)
    for run in sys.argv[1:]:
        for which in ("best", "last"):
            model, cfg = load_run(run, which)
            with torch.no_grad():
                for split in ("test", "val"):
                    x, y = d[f"{split}_x"], d[f"{split}_y"]
                    scaled = (model(x).argmax(1) != y).float().mean().item()
                    raw = (model(x * cfg.scale).argmax(1) != y).float().mean().item()
                    print(f"{run} {which} {split}: scaled {100 * scaled:.2f}%, unscaled {100 * raw:.2f}%")


if __name__ == "__main__":
    main()
