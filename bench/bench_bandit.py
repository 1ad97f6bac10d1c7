"""Speed of the batched bandit population: updates per second and the full protocol's projection.

Usage:
  python bench/bench_bandit.py [--members-per-agent 5] [--updates 640] [--threads 1] [--workers 1 2]
                               [--optimizer adam|sgd] [--prior gaussian|mixture] [--agents bbb greedy]

Times ``Population.update`` (one training step of every member on its own minibatch: the batched
forward and backward pass of the :class:`bbb.nn.BayesPopulation`, the engine's fused step of the
BBB members and ``torch.optim``'s of the others) and whole interactions (decision +
``updates_per_step`` updates) on the real UCI Mushroom data (or a random stand-in with
--synthetic), then projects the full protocol (4 agents x 5 seeds x 50,000 steps x 64 updates; or
the ``--agents`` given, e.g. one part of a run split by agents, ``bbb bandit --merge``).
The warm-up updates absorb the engine's compilation. With ``--workers N`` the population is
split over N processes, each timing its share concurrently, as ``bbb bandit --workers N`` runs
it. Writes bench/results/bandit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch

from bbb.engine.engine import OptimizerKind
from bbb.experiments.bandit import BanditConfig, Population
from bbb.experiments.bandit.config import DEFAULT_AGENTS
from bbb.experiments.bandit.running import cpu_name, split_members
from bbb.options import PriorKind, values

FULL_STEPS = 50_000


def _data(synthetic: bool):
    if not synthetic:
        try:
            from bbb.data import load_mushroom

            return load_mushroom(download=False)
        except Exception as e:  # noqa: BLE001 - fall back to a stand-in of the same shape
            print(f"(real data unavailable: {e}; using a random stand-in of the same shape)")
    g = torch.Generator().manual_seed(0)
    sizes = torch.tensor([6] * 7 + [5] * 15)  # 22 attributes over 117 one-hot columns, as the real data
    start = torch.cumsum(sizes, 0) - sizes
    pick = (torch.rand(8124, 22, generator=g) * sizes).long() + start
    ctx = torch.zeros(8124, 117)
    ctx[torch.arange(8124).unsqueeze(1), pick] = 1.0
    return ctx, torch.rand(8124, generator=g) < 0.52


def _time_share(members, threads: int, updates: int, steps: int, synthetic: bool, recipe: dict) -> dict:
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # as bbb bandit does
    ctx, edible = _data(synthetic)
    cfg = BanditConfig(steps=10_000, threads=threads, **recipe)
    pop = Population(cfg, members, ctx, edible)
    pop._ensure_env(10_000)
    warm = 4200  # fill the buffer with interactions without training (cheap)
    u = cfg.updates_per_step
    cfg.updates_per_step = 0
    for t in range(warm):
        pop._act_and_learn(t)
    cfg.updates_per_step = u
    pop.step = warm
    for i in range(20):  # includes the engine's compilation
        pop.update(cfg.buffer, warm, i % u)
    reps = []
    n = max(1, updates // 5)
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):
            pop.update(cfg.buffer, warm, i % u)
        reps.append((time.perf_counter() - t0) / n)
    t0 = time.perf_counter()
    for t in range(warm, warm + steps):
        pop._act_and_learn(t)
    step_s = (time.perf_counter() - t0) / steps
    eng = pop.engine
    return {"members": len(members), "update_s_min": min(reps), "update_s_median": statistics.median(reps),
            "step_s": step_s, "engine_fused": eng is not None and eng.fused,
            "engine_compiled": eng is not None and eng.compiled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members-per-agent", type=int, default=5, help="seeds per agent (default 5)")
    ap.add_argument("--agents", nargs="+", default=list(DEFAULT_AGENTS),
                    help="the agents (default: the protocol's four); e.g. bbb greedy for one part of a split run")
    ap.add_argument("--updates", type=int, default=640, help="timed updates (default 640)")
    ap.add_argument("--steps", type=int, default=10, help="timed whole interactions (default 10)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--optimizer", choices=values(OptimizerKind), default="adam")
    ap.add_argument("--prior", choices=values(PriorKind), default="gaussian")
    ap.add_argument("--synthetic", action="store_true", help="random contexts instead of UCI Mushroom")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bandit.json"))
    args = ap.parse_args()
    members = [(a, s) for a in args.agents for s in range(args.members_per_agent)]
    recipe = {"optimizer": args.optimizer, "prior": args.prior}
    updates_total = FULL_STEPS * 64
    results = []
    for w in args.workers:
        groups = split_members(members, w)
        if len(groups) == 1:
            shares = [_time_share(groups[0], args.threads, args.updates, args.steps, args.synthetic, recipe)]
        else:
            with ProcessPoolExecutor(len(groups), mp_context=get_context("spawn")) as ex:
                futs = [ex.submit(_time_share, g, args.threads, args.updates, args.steps, args.synthetic,
                                  recipe) for g in groups]
                shares = [f.result() for f in futs]
        upd = max(s["update_s_median"] for s in shares)
        upd_min = max(s["update_s_min"] for s in shares)
        step = max(s["step_s"] for s in shares)
        r = {"workers": len(groups), "threads_per_worker": args.threads, "population": len(members),
             "shares": shares,
             "batched_update_ms_median": round(upd * 1e3, 3), "batched_update_ms_min": round(upd_min * 1e3, 3),
             "batched_updates_per_s": round(1.0 / upd, 1), "step_ms": round(step * 1e3, 2),
             "projected_full_protocol_min": round(step * FULL_STEPS / 60, 1),
             "projected_from_updates_only_min": round(upd * updates_total / 60, 1)}
        results.append(r)
        print(f"workers={len(groups)} threads={args.threads} P={len(members)}: batched update "
              f"{r['batched_update_ms_median']:.3f} ms (min {r['batched_update_ms_min']:.3f}), "
              f"{r['batched_updates_per_s']:.0f} updates/s; one interaction {r['step_ms']:.1f} ms "
              f"-> full protocol ({FULL_STEPS} steps x 64 updates) ~ {r['projected_full_protocol_min']:.0f} min",
              flush=True)
    load = os.getloadavg()
    info = {"results": results, "torch": torch.__version__, "python": platform.python_version(),
            "cpu": cpu_name(), "cpu_count": os.cpu_count(), "load_average_1_5_15": load,
            "recipe": recipe, "agents": list(args.agents), "synthetic": args.synthetic,
            "note": "timings on a shared machine; the load average shows how busy it was"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(info, indent=2) + "\n")
    print(f"load average {load[0]:.2f}; wrote {out}")


if __name__ == "__main__":
    main()
