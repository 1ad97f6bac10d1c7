"""The ivon agent's posterior along a run (IVON.md, stage 1): every EVERY interactions, per layer,
the range of IVON's Hessian estimate h and of sigma, and the largest |mean|, until the run ends or
a weight is non-finite. One seed, the bandit's defaults otherwise; one thread.

    PYTHONPATH=src python results/bandit/ivon_probe.py --lr 0.1 --hess-init 0.01 --seed 0 --steps 5000
"""

from __future__ import annotations

import argparse
import os

import torch

from bbb.data import load_mushroom
from bbb.distributions import softplus
from bbb.experiments.bandit import BanditConfig, Population


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--hess-init", type=float, required=True)
    ap.add_argument("--beta", type=float, default=1.0, help="--ivon-beta")
    ap.add_argument("--clip", type=float, default=float("inf"), help="--ivon-clip")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--every", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ctx, edible = load_mushroom(os.environ.get("BBB_DATA"))
    cfg = BanditConfig(agents=("ivon",), seeds=(args.seed,), ivon_lr=args.lr, ivon_hess_init=args.hess_init,
                       ivon_beta=args.beta, ivon_clip=args.clip, quiet=True)
    pop = Population(cfg, [("ivon", args.seed)], ctx, edible)
    pop._ensure_env(args.steps)
    assert pop.ivon is not None and pop.ivon_net is not None
    for t in range(args.steps):
        pop._act_and_learn(t)
        pop.step = t + 1
        if (t + 1) % args.every:
            continue
        parts = []
        for i, layer in enumerate(pop.ivon_net.bayes):
            h = pop.ivon.state[layer.weight_mu]["hess"]
            s = softplus(layer.weight_rho.detach())
            parts.append(f"L{i} h[{h.min().item():.2e},{h.max().item():.2e}] s[{s.min().item():.2e},"
                         f"{s.max().item():.2e}] mu{layer.weight_mu.detach().abs().max().item():.2e}")
        print(t + 1, f"regret {pop.cum_regret.item():.0f}", " | ".join(parts), flush=True)
        if not all(bool(torch.isfinite(p).all()) for p in pop.ivon_net.parameters()):
            print("non-finite")
            break


if __name__ == "__main__":
    main()
