"""Your own CNN on Fashion-MNIST, made Bayesian with ``bbb.bayesianize``.

A plain LeNet-style ``nn.Sequential`` (convolutions, max-pooling, ``Flatten``, dropout) is
converted in place; ``ELBO(num_samples=2)`` trains it with two weight samples per step (the
samples travel folded into the batch, so no layer needs wrapping). Afterwards the predictive
entropy on Fashion-MNIST test images is compared with that on MNIST digits, which the network
has never seen: a Bayesian network should be less certain on them.

    python examples/fashion_cnn.py --data-dir $BBB_DATA --epochs 1

Without the data (no --data-dir, no $BBB_DATA) it runs on generated images, as a smoke test.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bbb
from bbb.data import load_mnist
from bbb.uncertainty import predict, predictive_entropy, predictive_probs


def lenet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def images(dataset: str, split: str, limit: int, data_dir: str | None, seed: int = 0):
    """(N, 1, 28, 28) floats in [0, 1] and labels; generated ones when there is no data folder."""
    if data_dir:
        x, y = load_mnist(split, dataset, data_dir, download=False)
        return x[:limit].unsqueeze(1).float() / 255.0, y[:limit]
    g = torch.Generator().manual_seed(seed + (dataset == "mnist") * 7 + (split == "test"))
    y = torch.randint(0, 10, (limit,), generator=g)
    proto = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(seed))  # class templates
    x = (proto[y] + 0.3 * torch.rand(limit, 1, 28, 28, generator=g)).clamp(0, 1)
    if dataset == "mnist":  # "unseen" images: other templates
        x = torch.rand(limit, 1, 28, 28, generator=g)
    return x, y


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("BBB_DATA"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-size", type=int, default=60000)
    p.add_argument("--test-size", type=int, default=10000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--train-samples", type=int, default=2, help="weight samples per training step")
    p.add_argument("--eval-samples", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)

    x, y = images("fashion-mnist", "train", args.train_size, args.data_dir, args.seed)
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

    fx, fy = images("fashion-mnist", "test", args.test_size, args.data_dir, args.seed)
    mx, _ = images("mnist", "test", args.test_size, args.data_dir, args.seed)
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
    main()
