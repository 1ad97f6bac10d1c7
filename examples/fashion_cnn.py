"""Your own CNN on Fashion-MNIST, made Bayesian with ``bbb.bayesianize``.

A plain LeNet-style ``nn.Sequential`` (convolutions, max-pooling, ``Flatten``, dropout) is
converted in place; ``ELBO(num_samples=2)`` trains it with two weight samples per step (the
samples travel folded into the batch, so no layer needs wrapping). Afterwards the predictive
entropy on Fashion-MNIST test images is compared with that on MNIST digits, which the network
has never seen: a Bayesian network should be less certain on them.

    python examples/fashion_cnn.py --epochs 1

The data are found where ``bbb`` finds them: ``--data-dir``, else ``$BBB_DATA``, else
``~/.cache/bbb`` (downloaded there when missing); without them it stops with a one-line error.
``--synthetic`` runs on generated images instead, as a smoke test, and says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bbb
from bbb.data import load_mnist
from bbb.errors import BBBError
from bbb.uncertainty import predict, predictive_entropy, predictive_probs


def lenet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def images(dataset: str, split: str, limit: int, data_dir: str | None, seed: int = 0, synthetic: bool = False):
    """(N, 1, 28, 28) floats in [0, 1] and labels: the data set found where ``bbb`` looks
    (``data_dir``, else $BBB_DATA, else ~/.cache/bbb), or generated ones when ``synthetic``."""
    if not synthetic:
        x, y = load_mnist(split, dataset, data_dir)
        return x[:limit].unsqueeze(1).float() / 255.0, y[:limit]
    g = torch.Generator().manual_seed(seed + (dataset == "mnist") * 7 + (split == "test"))
    y = torch.randint(0, 10, (limit,), generator=g)
    proto = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(seed))  # class templates
    x = (proto[y] + 0.3 * torch.rand(limit, 1, 28, 28, generator=g)).clamp(0, 1)
    if dataset == "mnist":  # "unseen" images: other templates
        x = torch.rand(limit, 1, 28, 28, generator=g)
    return x, y


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Example: python examples/fashion_cnn.py --epochs 1")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="data folder with fashion-mnist/ and mnist/ (default: $BBB_DATA, else ~/.cache/bbb, as bbb)")
    p.add_argument("--synthetic", action="store_true",
                   help="generated images instead of the data sets: a smoke test whose numbers mean nothing")
    p.add_argument("--epochs", type=int, default=1, metavar="N", help="training epochs (default: 1)")
    p.add_argument("--train-size", type=int, default=60000, metavar="N",
                   help="Fashion-MNIST training images used (default: 60000)")
    p.add_argument("--test-size", type=int, default=10000, metavar="N",
                   help="test images used, of Fashion-MNIST and of MNIST (default: 10000)")
    p.add_argument("--batch-size", type=int, default=128, metavar="N", help="minibatch size (default: 128)")
    p.add_argument("--train-samples", type=int, default=2, metavar="K",
                   help="weight samples per training step (default: 2)")
    p.add_argument("--eval-samples", type=int, default=10, metavar="K",
                   help="weight samples of the predictive (default: 10)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default: 0)")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.synthetic:
        print("fashion_cnn: --synthetic: generated images, not Fashion-MNIST; a smoke test, the numbers below say "
              "nothing about real data", file=sys.stderr)

    def data(dataset: str, split: str, limit: int):
        return images(dataset, split, limit, args.data_dir, args.seed, args.synthetic)

    x, y = data("fashion-mnist", "train", args.train_size)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    net = bbb.bayesianize(lenet(), from_weights=False)   # a fresh network: no trained weights
    elbo = bbb.ELBO(net, "categorical", num_batches=len(loader), num_samples=args.train_samples)
    opt = torch.optim.Adam([*net.parameters(), *elbo.parameters()], lr=1e-3)
    for epoch in range(args.epochs):
        net.train()
        for i, (xb, yb) in enumerate(loader):
            out = elbo(xb, yb, batch_index=i)
            opt.zero_grad()
            (out.loss / len(xb)).backward()
            opt.step()
        loss = float(out.loss.detach()) / len(xb)
        print(f"epoch {epoch + 1}: loss/example {loss:.4f}  kl {float(out.kl.detach()):.4g}")

    fx, fy = data("fashion-mnist", "test", args.test_size)
    mx, _ = data("mnist", "test", args.test_size)
    fashion = predict(net, DataLoader(TensorDataset(fx, fy), batch_size=1000), args.eval_samples)
    digits = predict(net, DataLoader(mx, batch_size=1000), args.eval_samples)
    res = {
        "fashion_test_error": float((predictive_probs(fashion).argmax(-1) != fy).float().mean()),
        "entropy_fashion_test": float(predictive_entropy(fashion).mean()),
        "entropy_mnist_digits": float(predictive_entropy(digits).mean()),
    }
    for k, v in res.items():
        print(f"{k:>22}: {v:.4f}")
    return res


if __name__ == "__main__":
    try:
        main()
    except BBBError as e:  # missing data, a bad value: one line, as bbb says it
        print(f"{Path(__file__).name}: error: {e}", file=sys.stderr)
        sys.exit(2)
