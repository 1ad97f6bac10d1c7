"""Test and validation error of trained runs with the inputs scaled as in training (/126) and
unscaled (raw pixels, as JINKEHE's evaluation fed them): the diagnostic quoted in README.md.
With ``--their-protocol K`` (BBB runs), also JINKEHE's whole test protocol: the mean over K weight
samples of the log-softmax outputs (their ``predict_by_sampling``; K = 100 in their
scripts/bayes1.sh), on scaled and on unscaled test pixels.

Usage: python results/mnist-paper/unscaled_test.py RUN_DIR [RUN_DIR ...] [--their-protocol K]
"""

from __future__ import annotations

import argparse

import torch

from bbb import uncertainty as U
from bbb.data import mnist_splits
from bbb.runs import load_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--their-protocol", type=int, default=0, metavar="K")
    args = ap.parse_args()
    d = mnist_splits(scale=126.0, download=False)
    torch.manual_seed(0)
    for run in args.runs:
        for which in ("best", "last"):
            try:
                model, cfg = load_run(run, which)
            except Exception as e:  # noqa: BLE001 - a run without that checkpoint
                print(f"{run} {which}: {e}")
                continue
            with torch.no_grad():
                for split in ("test", "val"):
                    x, y = d[f"{split}_x"], d[f"{split}_y"]
                    scaled = (model(x).argmax(1) != y).float().mean().item()
                    raw = (model(x * cfg.scale).argmax(1) != y).float().mean().item()
                    print(f"{run} {which} {split}: scaled {100 * scaled:.2f}%, unscaled {100 * raw:.2f}%")
                if args.their_protocol and cfg.method == "bbb":
                    x, y = d["test_x"], d["test_y"]
                    for name, xs in (("scaled", x), ("unscaled", x * cfg.scale)):
                        logits = U.predict(model, xs, args.their_protocol, batch_size=1000)
                        pred = torch.log_softmax(logits.float(), -1).mean(0).argmax(1)
                        err = (pred != y).float().mean().item()
                        print(f"{run} {which} test, mean log-softmax of {args.their_protocol} samples, "
                              f"{name}: {100 * err:.2f}%")


if __name__ == "__main__":
    main()
