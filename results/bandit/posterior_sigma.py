"""How much of BBB's network the posterior uses: its weights' sigma and signal-to-noise ratio.

Loads a `bbb bandit` run's checkpoints (its folder's checkpoint/worker<i>.pt) and prints, for
every BBB member and layer, the 5th / 50th / 95th percentile of the posterior std sigma =
softplus(rho), the median |mu|, the median signal-to-noise ratio 10 log10(|mu| / sigma) in dB, and
the share of weights with sigma above 0.5 (for the N(0, 1) prior: weights left at about the prior,
noise in every Thompson draw).

    .venv/bin/python results/bandit/posterior_sigma.py results/bandit/selection/b6-noise01-seen-blundell
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

#: sigma above this counts as "at the prior" for a N(0, 1) prior
AT_PRIOR = 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a bbb bandit --out folder with its checkpoint/ folder")
    args = ap.parse_args()
    files = sorted((args.run / "checkpoint").glob("worker*.pt"))
    if not files:
        raise SystemExit(f"{args.run}/checkpoint has no worker*.pt: give a bbb bandit --out folder "
                         "with its checkpoints")
    print("| checkpoint | BBB member | layer | sigma 5 / 50 / 95% | median abs(mu) | median SNR (dB) "
          f"| sigma > {AT_PRIOR} |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for ck in files:
        try:
            st = torch.load(ck, map_location="cpu", weights_only=True)
            net, members = st["net"], st["members"]
        except Exception as e:  # noqa: BLE001 - any unreadable file is the same user problem
            raise SystemExit(f"cannot read {ck} as a bbb bandit checkpoint ({type(e).__name__})") from None
        seeds = [int(s) for a, s in members if a == "bbb"]
        q = torch.tensor([0.05, 0.5, 0.95])
        for layer in range(len({k.split(".")[1] for k in net if k.startswith("bayes.")})):
            mu = net[f"bayes.{layer}.weight_mu"]
            sigma = F.softplus(net[f"bayes.{layer}.weight_rho"])
            for j, seed in enumerate(seeds):
                s, m = sigma[j].flatten(), mu[j].abs().flatten()
                lo, med, hi = torch.quantile(s, q).tolist()
                snr = (10 * torch.log10(m / s)).median().item()
                print(f"| {ck.name} (step {st['step']}) | seed {seed} | {layer} | {lo:.3f} / {med:.3f} / {hi:.3f} "
                      f"| {m.median():.3f} | {snr:.1f} | {(s > AT_PRIOR).float().mean():.0%} |")


if __name__ == "__main__":
    main()
