"""Heteroscedastic regression with the aleatoric / epistemic split.

A Bayesian MLP with two outputs (mean and noise) is fitted with the ``"heteroscedastic"``
likelihood to 1-d data whose noise grows with x. On a grid wider than the data,
``bbb.uncertainty.regression_uncertainty`` splits each point's predictive variance into the
aleatoric part (the predicted noise, E_w[sigma^2]) and the epistemic part (disagreement of the
sampled networks, Var_w[mean]): the first follows the data's noise, the second grows away from
the data.

    python examples/heteroscedastic_regression.py --steps 3000
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

import bbb


def data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 2 - 1                 # inputs in [-1, 1]
    noise = 0.05 + 0.25 * (x + 1) / 2                         # noise std grows with x
    y = torch.sin(3 * x) + noise * torch.randn(n, 1, generator=g)
    return x, y.squeeze(-1)


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Example: python examples/heteroscedastic_regression.py --steps 3000")
    p.add_argument("--n", type=int, default=256, metavar="N",
                   help="training points, generated: sin(3x) with noise growing in x (default: 256)")
    p.add_argument("--steps", type=int, default=3000, metavar="N", help="full-batch Adam steps (default: 3000)")
    p.add_argument("--samples", type=int, default=50, metavar="K",
                   help="weight samples of the predictive (default: 50)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default: 0)")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    x, y = data(args.n, args.seed)

    net = bbb.bayesianize(nn.Sequential(nn.Linear(1, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                        nn.Linear(64, 2)), prior=bbb.GaussianPrior(1.0), from_weights=False)
    # full batch: M = 1 minibatch, the KL enters once per step (beta = 1: the paper's free energy)
    elbo = bbb.ELBO(net, "heteroscedastic", num_batches=1, num_samples=4)
    opt = torch.optim.Adam([*net.parameters(), *elbo.parameters()], lr=3e-3)
    for _ in range(args.steps):
        out = elbo(x, y)
        opt.zero_grad()
        (out.loss / len(x)).backward()
        opt.step()

    grid = torch.linspace(-2, 2, 81).unsqueeze(-1)
    outputs = bbb.uncertainty.predict(net, grid, num_samples=args.samples)      # (k, G, 2)
    mean, sigma = elbo.likelihood.split(outputs)                                # each (k, G)
    u = bbb.uncertainty.regression_uncertainty(mean, sigma)
    inside = grid.squeeze(-1).abs() <= 1
    res = {
        "aleatoric_std_left": float(u["aleatoric"][(grid.squeeze(-1) > -1) & (grid.squeeze(-1) < -0.5)].mean().sqrt()),
        "aleatoric_std_right": float(u["aleatoric"][(grid.squeeze(-1) > 0.5) & (grid.squeeze(-1) < 1)].mean().sqrt()),
        "epistemic_std_inside": float(u["epistemic"][inside].mean().sqrt()),
        "epistemic_std_outside": float(u["epistemic"][~inside].mean().sqrt()),
    }
    for k, v in res.items():
        print(f"{k:>22}: {v:.4f}")
    return res


if __name__ == "__main__":
    main()
