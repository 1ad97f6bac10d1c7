"""Signal-to-noise summary of trained bbb runs (the numbers quoted in README.md before Figure 4).

Usage: python results/mnist-paper/snr_stats.py RUN_DIR [RUN_DIR ...] [--which best|last]

Per run: the 5th / 50th / 95th percentiles of SNR = 10 log10(|mu|/sigma) over the Bayesian
weights (biases excluded, as ``bbb prune`` ranks them), the share in the paper's Figure 4 range
of about -7.5 to 0 dB, the percentiles of sigma, the median |mu| and the share of means within
+-0.01 (Figure 3's measure).
"""

from __future__ import annotations

import argparse

import torch

from bbb.nn import BayesModule
from bbb.prune import signal_to_noise, snr_db
from bbb.runs import load_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--which", choices=("best", "last"), default="best")
    args = ap.parse_args()
    q = torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)
    for run in args.runs:
        model, _ = load_run(run, args.which)
        snr = signal_to_noise(model).double()
        db = snr_db(snr)
        mods = [m for m in model.modules() if isinstance(m, BayesModule)]
        mu = torch.cat([m.weight_mu.detach().flatten() for m in mods]).double()
        sigma = mu.abs() / snr
        in_range = ((db >= -7.5) & (db <= 0.0)).double().mean().item()
        near_zero = (mu.abs() < 0.01).double().mean().item()
        print(
            f"{run} ({args.which}): {db.numel()} weights; SNR dB p5/p50/p95 "
            f"{' / '.join(f'{v:.1f}' for v in _quantiles(db, q))}; in [-7.5, 0] dB {100 * in_range:.1f}%; "
            f"sigma p5/p50/p95 {' / '.join(f'{v:.3f}' for v in _quantiles(sigma, q))}; "
            f"median |mu| {mu.abs().median().item():.3f}; |mu| < 0.01 {100 * near_zero:.1f}%"
        )


def _quantiles(x: torch.Tensor, q: torch.Tensor) -> list[float]:
    # torch.quantile is limited to 16M elements; sort once instead
    s = x.sort().values
    return [s[min(int(round(float(p) * (len(s) - 1))), len(s) - 1)].item() for p in q]


if __name__ == "__main__":
    main()
