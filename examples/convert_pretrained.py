"""Fine-tune a trained network into a Bayesian one, and compare calibration and OOD detection.

1. Train an ordinary ``nn.Sequential`` MLP on MNIST (3 epochs of Adam).
2. ``bbb.bayesianize(net)``: every ``nn.Linear`` becomes a ``BayesLinear`` whose posterior mean
   starts at the trained weights w0 (``--delta``: sigma starts at delta * |w0|,
   ``bbb.RelativeSigma``, MOPED; ``--prior-sigma s``: the prior N(w0, s^2) centred on the trained
   weights, ``bbb.CenteredPrior``, empirical Bayes). Converted in eval mode, it stays in eval mode.
3. Fine-tune it with the ELBO for one epoch of Adam, the KL spread evenly over the epoch
   (``kl_weighting="uniform"``), rho at ``--rho-lr-scale`` times the learning rate (its own
   parameter group; ``bbb.Engine(..., rho_lr_scale=)`` does the same).
4. Compare the deterministic network and the Bayesian one's Monte Carlo predictive: test error,
   NLL, ECE, Brier score, and how well each tells MNIST test digits from Fashion-MNIST test images
   (out of distribution): AUROC by predictive entropy for both, by mutual information (the
   epistemic part) for the Bayesian one; and how far sigma moved.

    OMP_NUM_THREADS=1 python examples/convert_pretrained.py --data-dir "$BBB_DATA"

What it printed, for several seeds and settings, and what holds: docs/your_network.md,
"Fine-tuning a trained network".

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


def load(split: str, limit: int, data_dir: str | None, seed: int = 0, dataset: str = "mnist"):
    if data_dir:
        x, y = load_mnist(split, dataset, data_dir, download=False)
        return x[:limit].float() / 255.0, y[:limit]
    # generated: 10 noisy class templates; the out-of-distribution set has templates of its own
    g = torch.Generator().manual_seed(seed + (split == "test") + 2 * (dataset != "mnist"))
    centers = torch.rand(10, 28, 28, generator=torch.Generator().manual_seed(seed + 10 * (dataset != "mnist")))
    y = torch.randint(0, 10, (limit,), generator=g)
    return (centers[y] + 2.0 * torch.randn(limit, 28, 28, generator=g)), y


def scores(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    u = bbb.uncertainty
    return {"error": u.error_rate(probs, labels), "nll": u.negative_log_likelihood(probs, labels),
            "ece": u.expected_calibration_error(probs, labels), "brier": u.brier_score(probs, labels)}


def sigmas(net: nn.Module) -> torch.Tensor:
    """Every posterior sigma of the network, flattened."""
    return torch.cat([m.posterior(n).sigma.detach().flatten() for m in bbb.nn.bayes_modules(net)
                      for n in m.param_names()])


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=os.environ.get("BBB_DATA"))
    p.add_argument("--train-size", type=int, default=60000)
    p.add_argument("--test-size", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=3, help="deterministic training epochs")
    p.add_argument("--bbb-epochs", type=int, default=1, help="Bayesian fine-tuning epochs")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--delta", type=float, default=0.0,
                   help="initial sigma = delta * |w| (MOPED); 0: bbb's default, sigma = softplus(-5) for all")
    p.add_argument("--prior-sigma", type=float, default=0.0,
                   help="s > 0: the prior N(w0, s^2) centred on the trained weights w0; 0: N(0, 1)")
    p.add_argument("--rho-lr-scale", type=float, default=7.0, help="rho's learning rate is --lr times this")
    p.add_argument("--kl-weighting", choices=["uniform", "blundell"], default="uniform",
                   help="how an epoch's KL is spread over its minibatches (blundell: half on the first)")
    p.add_argument("--eval-samples", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    x, y = load("train", args.train_size, args.data_dir, args.seed)
    tx, ty = load("test", args.test_size, args.data_dir, args.seed)
    ox, _ = load("test", args.test_size, args.data_dir, args.seed, dataset="fashion-mnist")  # out of distribution
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    u = bbb.uncertainty

    # 1. an ordinary network, trained as usual
    det = mlp()
    opt = torch.optim.Adam(det.parameters(), lr=args.lr)
    for _ in range(args.epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(det(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    det.eval()
    with torch.no_grad():
        det_probs, det_ood = torch.softmax(det(tx), -1), torch.softmax(det(ox), -1)

    # 2. the same network, Bayesian: means at the trained weights, sigma relative to them, the
    #    prior centred on them (converted in eval mode, it stays in eval mode until train())
    prior = bbb.CenteredPrior(args.prior_sigma) if args.prior_sigma > 0 else bbb.GaussianPrior(1.0)
    init = bbb.RelativeSigma(args.delta) if args.delta > 0 else None
    net = bbb.bayesianize(copy.deepcopy(det), prior=prior, sigma_init=init, from_weights=True)
    sigma_before = sigmas(net)

    # 3. fine-tune with the ELBO, the KL spread evenly over the epoch's minibatches; rho in a
    #    parameter group of its own, at a larger step
    elbo = bbb.ELBO(net, "categorical", num_batches=len(loader), num_samples=1, kl_weighting=args.kl_weighting)
    rhos = [q for name, q in net.named_parameters() if name.endswith("_rho")]
    mus = [q for name, q in net.named_parameters() if not name.endswith("_rho")]
    opt = torch.optim.Adam([{"params": mus}, {"params": rhos, "lr": args.lr * args.rho_lr_scale}], lr=args.lr)
    net.train()
    for _ in range(args.bbb_epochs):
        for i, (xb, yb) in enumerate(loader):
            out = elbo(xb, yb, batch_index=i)
            opt.zero_grad()
            (out.loss / len(xb)).backward()
            opt.step()
    sigma_after = sigmas(net)

    # 4. calibration on the test set, and MNIST test digits (in) against the OOD images (out)
    logits = u.predict(net, tx, num_samples=args.eval_samples, batch_size=2000, generator=args.seed)
    ood = u.predict(net, ox, num_samples=args.eval_samples, batch_size=2000, generator=args.seed)
    probs = u.predictive_probs(logits)
    res = {"deterministic": scores(det_probs, ty), "bayesian": scores(probs, ty),
           "ood_auroc": {"deterministic_entropy": u.auroc(u.entropy(det_probs), u.entropy(det_ood)),
                         "bayesian_entropy": u.auroc(u.predictive_entropy(logits), u.predictive_entropy(ood)),
                         "bayesian_mutual_information": u.auroc(u.mutual_information(logits),
                                                                u.mutual_information(ood))},
           "sigma": {"median_before": float(sigma_before.median()), "median_after": float(sigma_after.median()),
                     "median_abs_log_change": float((sigma_after / sigma_before).log().abs().median())}}
    a = res["ood_auroc"]
    print(f"{'':>14} {'error':>8} {'NLL':>8} {'ECE':>8} {'Brier':>8} {'AUROC entropy':>14} {'AUROC MI':>9}")
    for name, m in (("deterministic", res["deterministic"]), ("bayesian", res["bayesian"])):
        ent = a["deterministic_entropy"] if name == "deterministic" else a["bayesian_entropy"]
        mi = f"{a['bayesian_mutual_information']:9.4f}" if name == "bayesian" else f"{'-':>9}"
        print(f"{name:>14} {m['error']:8.4f} {m['nll']:8.4f} {m['ece']:8.4f} {m['brier']:8.4f} {ent:14.4f} {mi}")
    s = res["sigma"]
    print(f"sigma (median): {s['median_before']:.4g} before the fine-tune, {s['median_after']:.4g} after "
          f"(median |log change| {s['median_abs_log_change']:.3f})")
    return res


if __name__ == "__main__":
    main()
