"""A/B timing of the bandit population's update: this tree against another bbb tree, in one process.

Usage:
  python bench/bench_bandit_ab.py --ref-src ../main/src/bbb [--rounds 8] [--updates 64] [--steps 2]
                                  [--worker 0] [--profile N] [--fill 4200] [--warmup 40]

On a shared machine absolute timings drift with the load, so both trees run in the same process
on 1 thread, interleaved (A, B, A, B...): the reference tree is copied into a temporary folder as
the package ``bbb_ref`` (its absolute ``bbb.`` imports rewritten), each tree builds the
population of one worker of ``--workers 2`` (P = 10: ``--worker`` 0 or 1) on UCI Mushroom, fills
its buffer, warms up (the engine's compilation), then each round times ``--updates`` batched
updates and ``--steps`` whole interactions (a decision + 64 updates) of each tree. Prints the
median of the per-round ratios new/ref. ``--profile N`` adds a torch.profiler table of N updates
of this tree.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def _copy_as_ref(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest / "bbb_ref", ignore=shutil.ignore_patterns("__pycache__"))
    for f in (dest / "bbb_ref").rglob("*.py"):
        text = f.read_text()
        f.write_text(re.sub(r"\b(from|import) bbb(\.| )", r"\1 bbb_ref\2", text))


def _population(pkg: str, worker: int, fill: int = 4200, warmup: int = 40):
    bandit = importlib.import_module(pkg + ".experiments.bandit")
    config = importlib.import_module(pkg + ".experiments.bandit.config")
    running = importlib.import_module(pkg + ".experiments.bandit.running")
    data = importlib.import_module(pkg + ".data")
    ctx, edible = data.load_mushroom(download=False)
    members = [(a, s) for a in config.DEFAULT_AGENTS for s in range(5)]
    cfg = bandit.BanditConfig(steps=10_000, threads=1)
    pop = bandit.Population(cfg, running.split_members(members, 2)[worker], ctx, edible)
    pop._ensure_env(10_000)
    u, cfg.updates_per_step = cfg.updates_per_step, 0
    for t in range(fill):  # fill the buffer, acting without training
        pop._act_and_learn(t)
    cfg.updates_per_step, pop.step = u, fill
    for i in range(warmup):  # includes the engine's compilation
        pop.update(cfg.buffer, pop.step, i % u)
    return pop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref-src", required=True, help="the reference tree's package folder (.../src/bbb)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--updates", type=int, default=64, help="timed updates per round and tree")
    ap.add_argument("--steps", type=int, default=2, help="timed interactions per round and tree")
    ap.add_argument("--worker", type=int, choices=(0, 1), default=0)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--fill", type=int, default=4200, help="interactions that fill the buffer before timing")
    ap.add_argument("--warmup", type=int, default=40, help="untimed updates (the engine's compilation)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as bbb bandit does
    tmp = Path(tempfile.mkdtemp(prefix="bbb_ref_"))
    try:
        _copy_as_ref(Path(args.ref_src), tmp)
        sys.path.insert(0, str(tmp))
        pops = {n: _population(pkg, args.worker, args.fill, args.warmup)
                for n, pkg in (("ref", "bbb_ref"), ("new", "bbb"))}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    upd: dict[str, list[float]] = {n: [] for n in pops}
    inter: dict[str, list[float]] = {n: [] for n in pops}
    for _ in range(args.rounds):
        for n, pop in pops.items():
            t0 = time.perf_counter()
            for i in range(args.updates):
                pop.update(pop.cfg.buffer, pop.step, i % 64)
            upd[n].append((time.perf_counter() - t0) / args.updates)
            t0 = time.perf_counter()
            for t in range(pop.step, pop.step + args.steps):
                pop._act_and_learn(t)
            pop.step += args.steps
            inter[n].append((time.perf_counter() - t0) / args.steps / 64)
    for what, d in (("update", upd), ("interaction / 64", inter)):
        ratios = [b / a for a, b in zip(d["ref"], d["new"])]
        print(f"{what}: ref {statistics.median(d['ref']) * 1e3:.3f} ms, new {statistics.median(d['new']) * 1e3:.3f} ms;"
              f" new/ref {statistics.median(ratios):.3f} (per-round ratios {min(ratios):.3f} .. {max(ratios):.3f})")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        pop = pops["new"]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(args.profile):
                pop.update(pop.cfg.buffer, pop.step, i % 64)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=50))


if __name__ == "__main__":
    main()
