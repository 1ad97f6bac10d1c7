"""How to parameterise and initialise the posterior sigma of a Bayesian LoRA adapter (issue 63).

Few-shot LoRA on a frozen MLP pretrained on MNIST digits 0-4, adapted to digits 5-9 (K examples per
class, through the pretrained 5-way head); bbb.bayesianize on the peft model (A Bayesian, B a point
estimate), the ELBO (prior N(0, 0.2^2), KL weight beta) with AdamW. The arms differ only in sigma:
softplus(rho) at bbb's sigma0 (0.0067) or at BLoB's (~0.002), rho's step x10, and BLoB's sigma = G^2
with G0 ~ U(eps/sqrt2, eps), eps = 0.05 (a torch parametrization of rho). Metrics on a validation
slice of the MNIST training split (digits 5-9, not the few-shot examples; the test split is not
read): accuracy, NLL and ECE (15 bins) of 10 averaged samples, and the mean sigma of A at the end.

    python bench/lora_sigma.py --seeds 3      # MNIST through $BBB_DATA
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize

import bbb
from bbb.data.mnist import load_mnist
from bbb.uncertainty.classification import expected_calibration_error


class _RhoOfG(nn.Module):
    """rho = inverse_softplus(G^2): the layer's sigma = softplus(rho) = G^2 (BLoB's)."""

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        s = g * g
        return torch.where(s > 20, s, torch.log(torch.expm1(s.clamp_min(1e-12))))

    def right_inverse(self, rho: torch.Tensor) -> torch.Tensor:
        return F.softplus(rho).sqrt()


def _data(k: int, seed: int, n_val: int):
    x, y = load_mnist("train")
    x = x.float().div(255).flatten(1)
    g = torch.Generator().manual_seed(seed)
    old = y < 5
    new_idx = torch.nonzero(~old).squeeze(1)
    new_idx = new_idx[torch.randperm(len(new_idx), generator=g)]
    shots = torch.cat([new_idx[y[new_idx] == c][:k] for c in range(5, 10)])
    rest = new_idx[~torch.isin(new_idx, shots)][:n_val]
    return (x[old], y[old]), (x[shots], y[shots] - 5), (x[rest], y[rest] - 5)


def _pretrain(xy, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 5))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = xy
    for _ in range(1):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 128):
            b = perm[i:i + 128]
            opt.zero_grad()
            F.cross_entropy(net(x[b]), y[b]).backward()
            opt.step()
    return net


def _arm(base: nn.Module, arm: str, train, val, steps: int, lr: float, beta: float, seed: int) -> dict[str, float]:
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["0", "2"]))
    mle = arm == "mle"
    rho_scale = 1.0
    if not mle:
        rho_init = {"softplus-0.0067": -5.0, "softplus-0.002": math.log(math.expm1(0.0019)),
                    "softplus-0.0067-rho-lr-x10": -5.0, "G^2-blob": -5.0}[arm]
        bbb.bayesianize(model, prior=bbb.GaussianPrior(0.2), rho_init=rho_init)
        if arm.startswith("G^2"):
            for m in bbb.nn.bayes_modules(model):
                g0 = torch.empty_like(m.weight_rho).uniform_(0.05 / math.sqrt(2), 0.05)
                parametrize.register_parametrization(m, "weight_rho", _RhoOfG())
                with torch.no_grad():
                    m.parametrizations.weight_rho.original.copy_(g0)
        if arm.endswith("x10"):
            rho_scale = 10.0
    rhos = [p for n, p in model.named_parameters() if p.requires_grad and ("_rho" in n)]
    others = [p for n, p in model.named_parameters() if p.requires_grad and ("_rho" not in n)]
    opt = torch.optim.AdamW([{"params": others}, {"params": rhos, "lr": lr * rho_scale}], lr=lr, weight_decay=0.0)
    x, y = train
    elbo = None if mle else bbb.ELBO(model, num_batches=1, kl_weighting="uniform", beta=beta)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        if elbo is None:
            loss = F.cross_entropy(model(x), y, reduction="sum")
        else:
            loss = elbo(x, y).loss
        (loss / len(x)).backward()
        opt.step()
    xv, yv = val
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = bbb.uncertainty.predict(model, xv, num_samples=1 if mle else 10, generator=seed)
    probs = logits.softmax(-1).mean(0)
    sig = [float(F.softplus(m.weight_rho.detach()).mean()) for m in bbb.nn.bayes_modules(model)] if not mle else [0.0]
    return {"acc": float((probs.argmax(-1) == yv).float().mean()),
            "nll": float(F.nll_loss(probs.clamp_min(1e-12).log(), yv)),
            "ece": float(expected_calibration_error(probs, yv, num_bins=15)),
            "sigma": sum(sig) / len(sig)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--shots", type=int, default=10, help="examples per class (default 10)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--beta", type=float, default=0.01, help="the KL weight (ELBO's beta; default 0.01)")
    ap.add_argument("--val", type=int, default=2000, help="validation examples (default 2000)")
    args = ap.parse_args()
    arms = ["mle", "softplus-0.0067", "softplus-0.002", "softplus-0.0067-rho-lr-x10", "G^2-blob"]
    rows: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
    t0 = time.time()
    for seed in range(args.seeds):
        old, train, val = _data(args.shots, seed, args.val)
        base = _pretrain(old, seed)
        for p in base.parameters():
            p.requires_grad_(False)
        for a in arms:
            rows[a].append(_arm(base, a, train, val, args.steps, args.lr, args.beta, seed))
    print(f"K={args.shots}, {args.steps} steps, lr {args.lr}, beta {args.beta}, {args.seeds} seeds, "
          f"{time.time() - t0:.0f} s")
    print("| arm | acc | NLL | ECE | mean sigma(A) |\n|---|---|---|---|---|")
    for a in arms:
        m = {k: sum(r[k] for r in rows[a]) / len(rows[a]) for k in rows[a][0]}
        print(f"| {a} | {m['acc']:.3f} | {m['nll']:.3f} | {m['ece']:.3f} | {m['sigma']:.4f} |")


if __name__ == "__main__":
    main()
