"""IVON.md's and ENSEMBLE.md's tables, from finished `bbb bandit` runs (results/bandit/ivon.sh,
results/bandit/ensemble.sh).

    python results/bandit/ivon_tables.py screen results/bandit/ivon/screen
    python results/bandit/ivon_tables.py heldout results/bandit/ivon/heldout results/bandit
    python results/bandit/ivon_tables.py heldout results/bandit/ensemble results/bandit

``screen``: every setting's mean realised regret over its seeds along the way and the choice by
IVON.md's rule (the lowest at the last step; a setting that diverged is named, not chosen).
``heldout``: a run of one agent not in the paper (ivon, ensemble) beside the paper's agents of the
committed run on the same seeds, up to that run's last step: mean cumulative realised regret,
expected regret per step by stretch, every seed's realised regret and the seeds on which the agent
is below each of the paper's. The lowest mean of each row is in bold.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from tables import CHECKPOINTS, at, header, load, name, print_along_the_way, row

SCREEN_STEPS = (1_000, 2_500, 5_000)


def screen(folder: Path) -> int:
    runs = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "regret.csv").is_file())
    failed = sorted(folder.glob("*.failed"))
    if not runs:
        print(f"{folder} holds no finished run", file=sys.stderr)
        return 1
    print("| setting | " + " | ".join(f"mean realised regret at {s:,}" for s in SCREEN_STEPS)
          + " | expected regret per step, 2,500-5,000 | eats, last 1,000 |\n|---|"
          + "---:|" * (len(SCREEN_STEPS) + 2))
    finals = {}
    for run in runs:
        _, curves = load(run)
        seeds = sorted(s for _, s in curves)
        means = [statistics.fmean(at(curves[("ivon", s)], step, 0) for s in seeds) for step in SCREEN_STEPS]
        rate = statistics.fmean((at(curves[("ivon", s)], 5_000, 1) - at(curves[("ivon", s)], 2_500, 1)) / 2_500
                                for s in seeds)
        with (run / "summary.csv").open(newline="") as f:
            eats = float(next(csv.DictReader(f))["eat_rate_last_1000"])
        finals[run.name] = means[-1]
        print(f"| {run.name} | " + " | ".join(f"{m:,.0f}" for m in means) + f" | {rate:.3f} | {eats:.1%} |")
    for f in failed:
        print(f"| {f.stem} | diverged: {f.read_text().strip()} |")
    best = min(finals, key=lambda k: finals[k])
    print(f"\nChosen (the lowest mean realised regret at {SCREEN_STEPS[-1]:,}): {best}")
    return 0


def heldout(new_folder: Path, paper_folder: Path) -> int:
    new_agents, new = load(new_folder)
    if len(new_agents) != 1:
        print(f"{new_folder} holds a run of {len(new_agents)} agents ({', '.join(new_agents)}); give a run of one",
              file=sys.stderr)
        return 1
    agent = new_agents[0]
    agents, paper = load(paper_folder)
    seeds = sorted(s for _, s in new)
    missing = [s for s in seeds if (agents[0], s) not in paper]
    if missing:
        print(f"{paper_folder} has no run of seed(s) {missing}", file=sys.stderr)
        return 1
    curves = {**{k: v for k, v in paper.items() if k[1] in seeds}, **new}
    agents = [*agents, agent]
    last = min(max(c) for c in new.values())
    steps = [s for s in CHECKPOINTS if s <= last]

    print(f"Mean cumulative realised regret, seeds {', '.join(map(str, seeds))} (regret.csv):\n")
    print_along_the_way(curves, agents, seeds, last)

    print(f"\nRealised regret per seed at step {last:,}:\n")
    print(header(agents, "seed"))
    for s in seeds:
        print(row(str(s), [curves[(a, s)][last][0] for a in agents], ",.0f"))

    print(f"\nSeeds (of {len(seeds)}) on which {name(agent)}'s cumulative realised regret is below another "
          "agent's:\n")
    print("| step | " + " | ".join(f"{s:,}" for s in steps) + " |\n|---|" + "---:|" * len(steps))
    for other in (a for a in agents if a != agent):
        wins = [sum(curves[(agent, s)][step][0] < curves[(other, s)][step][0] for s in seeds) for step in steps]
        print(f"| below {name(other)} | " + " | ".join(map(str, wins)) + " |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("screen").add_argument("folder", type=Path)
    h = sub.add_parser("heldout")
    h.add_argument("run", type=Path, help="a finished run of one agent (ivon, ensemble)")
    h.add_argument("paper", type=Path, help="the committed run of the paper's agents (results/bandit)")
    args = ap.parse_args()
    try:
        return screen(args.folder) if args.what == "screen" else heldout(args.run, args.paper)
    except (OSError, KeyError, ValueError) as e:
        print(f"cannot read the runs ({type(e).__name__}: {e})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
