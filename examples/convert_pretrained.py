"""Convert a trained deterministic network and compare calibration.

1. Train an ordinary ``nn.Sequential`` MLP on MNIST (a few epochs of Adam).
2. ``bbb.bayesianize(net, from_weights=True)``: every ``nn.Linear`` becomes a ``BayesLinear``
   whose posterior mean starts at the trained weights (a deterministic ``state_dict`` also loads
   into the converted model), with a small sigma.
3. Fine-tune it with the ELBO for an epoch or two, and compare test error, NLL, ECE and Brier
   score of the deterministic network and of the Bayesian one's Monte Carlo predictive.

    python examples/convert_pretrained.py --data-dir ../shared/data

Without the data (no --data-dir, no $BBB_DATA) it runs on generated data, as a smoke test.
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import bbb
from bbb.data import load_mnist


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(),
                         nn.Linear(400, 10))


def load(split: str, limit: int, data_dir: str | None, seed: int = 0):
    if data_dir:
        x, y = load_mnist(split, "mnist", data_dir, download=False)
        return x[:limit].float() / 255.0, y[:limit]
    g = torch.Generator().manual_seed(seed + (split == "test"))
    centers = torch.rand(10, 28, 28, generator=torch.Generator().manual_seed(seed))
    y = torch.randint(0, 10, (limit,), generator=g)
    return (centers[y] + 2.0 * torch.randn(limit, 28, 28, generator=g)), y


def scores(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    u = bbb.uncertainty
    return {"error": u.error_rate(probs, labels), "nll": u.negative_log_likelihood(probs, labels),
            "ece": u.expected_calibration_error(probs, labels), "brier": u.brier_score(probs, labels)}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("BBB_DATA"))
    p.add_argument("--train-size", type=int, default=60000)
    p.add_argument("--test-size", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=3, help="deterministic training epochs")
    p.add_argument("--bbb-epochs", type=int, default=1, help="Bayesian fine-tuning epochs")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--eval-samples", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    x, y = load("train", args.train_size, args.data_dir, args.seed)
    tx, ty = load("test", args.test_size, args.data_dir, args.seed)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)

    # 1. an ordinary network, trained as usual
    det = mlp()
    opt = torch.optim.Adam(det.parameters(), lr=1e-3)
    for _ in range(args.epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(det(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    det.eval()
    with torch.no_grad():
        det_probs = torch.softmax(det(tx), -1)

    # 2. the same network, Bayesian, warm-started at the trained weights
    net = bbb.bayesianize(copy.deepcopy(det), prior=bbb.GaussianPrior(1.0), from_weights=True)
    net.load_state_dict(det.state_dict())  # (a deterministic checkpoint loads just as well)

    # 3. fine-tune with the ELBO
    elbo = bbb.ELBO(net, "categorical", num_batches=len(loader), num_samples=1)
    opt = torch.optim.Adam([*net.parameters(), *elbo.parameters()], lr=1e-3)
    net.train()
    for _ in range(args.bbb_epochs):
        for i, (xb, yb) in enumerate(loader):
            out = elbo(xb, yb, batch_index=i)
            opt.zero_grad()
            (out.loss / len(xb)).backward()
            opt.step()
    logits = bbb.uncertainty.predict(net, tx, num_samples=args.eval_samples, batch_size=2000)
    res = {"deterministic": scores(det_probs, ty),
           "bayesian": scores(bbb.uncertainty.predictive_probs(logits), ty)}
    print(f"{'':>14} {'error':>8} {'NLL':>8} {'ECE':>8} {'Brier':>8}")
    for name, m in res.items():
        print(f"{name:>14} {m['error']:8.4f} {m['nll']:8.4f} {m['ece']:8.4f} {m['brier']:8.4f}")
    return res


if __name__ == "__main__":
    main()
