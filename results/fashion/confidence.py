"""Over- or underconfidence of the Fashion-MNIST rows (results/fashion/README.md): per seed, the
mean top probability of the test predictive against its accuracy, for one network and for the
ensemble of ENSEMBLE_SIZE (the mean of the members' saved predictives), from the jobs' probs.pt.

Usage: python results/fashion/confidence.py OUT JOB_PREFIX [JOB_PREFIX ...]
  e.g. python results/fashion/confidence.py runs/fashion test-bbb-beta1_reparam test-adamw-wd0.2
(OUT: the folder of `bbb reproduce fashion`; a prefix names a method's chosen setting's test jobs,
OUT/jobs/PREFIX-sSEED/probs.pt.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from bbb.experiments.fashion.settings import ensemble_member_seed

ENSEMBLE_SIZE = 5
SEEDS = (0, 1, 2)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    jobs = Path(argv[0]) / "jobs"
    print("| jobs | seed | one network: mean top probability / accuracy | ensemble of 5: mean top probability / "
          "accuracy |")
    print("|---|---:|---:|---:|")
    for prefix in argv[1:]:
        for seed in SEEDS:
            parts = [torch.load(jobs / f"{prefix}-s{ensemble_member_seed(seed, j)}" / "probs.pt", weights_only=True)
                     for j in range(ENSEMBLE_SIZE)]
            y = parts[0]["labels"]
            cells = []
            for probs in (parts[0]["eval"], torch.stack([p["eval"] for p in parts]).mean(0)):
                conf, pred = probs.max(1)
                cells.append(f"{float(conf.mean()):.3f} / {float((pred == y).float().mean()):.3f}")
            print(f"| {prefix} | {seed} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
