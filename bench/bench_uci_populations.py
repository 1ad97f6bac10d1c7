"""CPU and wall time of ``bbb reproduce uci``'s validation populations on one dataset, a short
schedule: each variant's population (``--splits`` splits x its grid) trains ``--epochs`` epochs
and is scored once (``--samples`` predictive samples).

Usage (BBB_DATA set; 1 thread):
  OMP_NUM_THREADS=1 python bench/bench_uci_populations.py --dataset yacht --splits 20 --epochs 30

Compare two trees by running it with each on ``PYTHONPATH`` (``<tree>/src``), interleaved, and
compare the CPU time (the wall time follows the machine's load). Prefix
``ATEN_CPU_CAPABILITY=default`` to time torch's unvectorised kernels (results/uci/README.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from bbb.data.uci import load_uci
from bbb.experiments.uci import train as TR
from bbb.experiments.uci.settings import DEFAULT_METHODS, Phase, Schedule, UCIConfig, variants_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="yacht")
    ap.add_argument("--splits", type=int, default=20, help="splits 0 .. N-1 (default: 20)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--data-dir", default=os.environ.get("BBB_DATA"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = load_uci(args.dataset, args.data_dir, dtype=torch.float64)
    cfg = UCIConfig(out="unused", datasets=[args.dataset], data_dir=args.data_dir, samples=args.samples, quiet=True)
    wall_total = cpu_total = 0.0
    for v in variants_of(DEFAULT_METHODS):  # the Laplace (the laplace extra) is not timed here
        members = tuple((s, g) for g in range(len(v.grid)) for s in range(args.splits))
        job = TR.Job(args.dataset, v, Phase.VALIDATION, members, Schedule(32, args.epochs, (args.epochs,)))
        with tempfile.TemporaryDirectory() as folder:
            wall, cpu = time.perf_counter(), time.process_time()
            TR.run_job(job, data, cfg, Path(folder))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        wall_total, cpu_total = wall_total + wall, cpu_total + cpu
        print(f"{v.name:16s} members={len(members):4d} epochs={args.epochs} {wall:7.2f} s wall {cpu:7.2f} s cpu",
              flush=True)
    print(f"total {wall_total:.2f} s wall {cpu_total:.2f} s cpu (torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()})")


if __name__ == "__main__":
    main()
