"""Why an epsilon-greedy agent misses its regret floor: what its final network decides.

Loads a finished `bbb bandit` run's checkpoints (its folder's checkpoint/worker<i>.pt, one per
worker, members split as the run split them) and prints, for every member: the share of
poisonous mushrooms its network would eat and of edible ones it would pass (over all 8,124,
greedy decisions; a BBB member decides with its Thompson draws), the expected regret per step of
those decisions, the poisonous eats in its replay buffer (+5 and -35), and how far (in differing
attributes) the poisonous mushrooms it wrongly eats lie from a buffered poisonous eat that paid
+5 or -35, against the same distances for every poisonous mushroom.

    PYTHONPATH=src python results/bandit/learner_diagnosis.py \\
        results/bandit/selection/learner-adam-1e-3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import torch

from bbb.data import load_mushroom
from bbb.errors import UserError
from bbb.experiments.bandit.config import EAT, PASS, BanditConfig
from bbb.experiments.bandit.population import Population
from bbb.experiments.bandit.running import split_members


def _nearest(ci: torch.Tensor, targets: torch.Tensor, sources: torch.Tensor, width: int) -> torch.Tensor:
    """Differing attributes from each target mushroom to its nearest source mushroom."""
    if len(sources) == 0:
        return torch.full((len(targets),), float("nan"))
    a = torch.zeros(len(targets), width).scatter_(1, ci[targets], 1.0)
    b = torch.zeros(len(sources), width).scatter_(1, ci[sources], 1.0)
    return ci.shape[1] - (a @ b.T).max(1).values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished bbb bandit --out folder with its checkpoint/ folder")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not (args.run / "config.json").is_file():
        raise SystemExit(f"{args.run} has no config.json: give the --out folder of a finished bbb bandit run")
    c = json.loads((args.run / "config.json").read_text())
    names = {f.name for f in dataclasses.fields(BanditConfig)}
    cfg = BanditConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items() if k in names})
    ctx, edible = load_mushroom(data_dir=os.environ.get("BBB_DATA"))[:2]
    e = edible.bool()
    members = [(a, s) for a in cfg.agents for s in cfg.seeds]
    groups = split_members(members, min(int(c.get("workers_used", cfg.workers)), len(members)))
    printed = False
    for i, group in enumerate(groups):
        pop = Population(cfg, group, ctx, edible, train_seed=i)  # as the run built worker i
        if not pop.load(args.run / "checkpoint" / f"worker{i}.pt"):
            raise SystemExit(f"{args.run}/checkpoint/worker{i}.pt not found: give a run folder with its checkpoints")
        _report(args.run, pop, ctx, e, header=not printed)
        printed = True


def _report(run: Path, pop: Population, ctx: torch.Tensor, e: torch.Tensor, header: bool) -> None:
    """Print one worker's members (with the table header first if ``header``)."""
    n, p = ctx.shape[0], len(pop.members)
    with torch.no_grad():
        values = torch.stack([pop.values(pop.inputs(torch.full((p,), i)), 0) for i in range(n)], 1)
    eats = values[:, :, EAT] > values[:, :, PASS]  # (P, n)
    ci = pop.ctx_index
    lookup = {tuple(r): i for i, r in enumerate(ci.tolist())}
    eat_code = pop.num_features - 2 + EAT
    poisonous = torch.nonzero(~e).flatten()
    if header:
        print(f"{run} at step {pop.step}")
        print("| member | poisonous eaten | edible passed | expected regret/step of these decisions | "
              "buffered poisonous eats +5 / -35 | wrongly eaten: nearest buffered +5 / -35 (median attributes; "
              "identical to a +5) | every poisonous: nearest +5 / -35 |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for j, m in enumerate(pop.members):
        pe = eats[j][~e].float().mean().item()
        ep = (~eats[j][e]).float().mean().item()
        rate = (~e).float().mean().item() * pe * 15 + e.float().mean().item() * ep * 5
        rows, reward = pop.buf_index[j], pop.buf_reward[j]
        ate = rows[:, -1] == eat_code
        mush = torch.tensor([lookup[tuple(r)] for r in rows[ate][:, :ci.shape[1]].tolist()], dtype=torch.long)
        bad = ~e[mush]
        plus, minus = mush[bad & (reward[ate] == 5)], mush[bad & (reward[ate] == -35)]
        wrong = torch.nonzero(eats[j] & ~e).flatten()
        dp, dm = (_nearest(ci, wrong, s, pop.num_features) for s in (plus, minus))
        ap_, am = (_nearest(ci, poisonous, s, pop.num_features) for s in (plus, minus))
        print(f"| {m.agent.name} seed {m.seed} | {pe:.1%} | {ep:.1%} | {rate:.3f} | {len(plus)} / {len(minus)} | "
              f"{dp.median():.0f} / {dm.median():.0f} ({int((dp == 0).sum())} of {len(wrong)}) | "
              f"{ap_.median():.0f} / {am.median():.0f} |")


if __name__ == "__main__":
    try:
        main()
    except UserError as e:  # an unreadable or mismatched checkpoint: one line, exit 1
        raise SystemExit(f"error: {e}") from None
