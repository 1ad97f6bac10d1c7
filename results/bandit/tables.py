"""The README's tables of a finished `bbb bandit` run, from its regret.csv and summary.csv.

    python results/bandit/tables.py results/bandit            # the reported run
    python results/bandit/tables.py results/bandit/selection/b6-noise01-seen-blundell

Prints markdown: the final regret per agent (mean +- sd over seeds), the mean cumulative realised
regret along the way, the expected regret per step by stretch, and every seed's final realised
regret, the number of seeds on which BBB is below greedy along the way and at the end (the target:
4 of 5).
The lowest mean of each row is in bold.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

CHECKPOINTS = (1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 40_000, 50_000)
STRETCHES = ((0, 1_000), (1_000, 5_000), (5_000, 10_000), (10_000, 20_000), (20_000, 30_000),
             (30_000, 40_000), (40_000, 50_000))
NAMES = {"bbb": "BBB, Thompson, 2 samples", "greedy": "greedy", "ivon": "IVON, Thompson, 2 samples",
         "ensemble": "bootstrapped ensemble"}


def name(agent: str) -> str:
    if agent in NAMES:
        return NAMES[agent]
    return f"{float(agent.split('_')[1]) * 100:g}% greedy" if agent.startswith("egreedy_") else agent


def load(folder: Path) -> tuple[list[str], dict[tuple[str, int], dict[int, tuple[float, float]]]]:
    """Agents in file order, and (agent, seed) -> step -> (realised, expected) cumulative regret."""
    curves: dict[tuple[str, int], dict[int, tuple[float, float]]] = defaultdict(dict)
    agents: list[str] = []
    with (folder / "regret.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            a = r["agent"]
            if a not in agents:
                agents.append(a)
            curves[(a, int(r["seed"]))][int(r["step"])] = (float(r["cumulative_regret"]),
                                                           float(r["cumulative_expected_regret"]))
    return agents, curves


def row(label: str, values: list[float], fmt: str) -> str:
    best = min(values)
    cells = [f"**{v:{fmt}}**" if v == best and len(values) > 1 else f"{v:{fmt}}" for v in values]
    return f"| {label} | " + " | ".join(cells) + " |"


def at(curve: dict[int, tuple[float, float]], step: int, which: int) -> float:
    return 0.0 if step == 0 else curve[step][which]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a finished bbb bandit --out folder")
    args = ap.parse_args()
    if not (args.folder / "summary.csv").is_file():
        print(f"{args.folder} has no summary.csv: the run is not finished", file=sys.stderr)
        return 1
    try:
        return report(args.folder)
    except (OSError, KeyError, ValueError) as e:  # a missing file or column, an older run's format
        print(f"{args.folder}: cannot read its regret.csv / summary.csv ({type(e).__name__}: {e}); "
              "give a folder written by this version of bbb bandit", file=sys.stderr)
        return 1


def header(agents: list[str], first: str) -> str:
    """A markdown table's header: ``first``, then one column per agent."""
    return f"| {first} | " + " | ".join(name(a) for a in agents) + " |\n|---|" + "---:|" * len(agents)


def print_along_the_way(curves: dict[tuple[str, int], dict[int, tuple[float, float]]], agents: list[str],
                        seeds: list[int], last: int) -> None:
    """The mean cumulative realised regret at each checkpoint up to ``last``, then (after its
    title) the expected regret per step by stretch: the lowest of each row in bold."""
    print(header(agents, "step"))
    for step in (s for s in CHECKPOINTS if s <= last):
        print(row(f"{step:,}", [statistics.fmean(at(curves[(a, s)], step, 0) for s in seeds) for a in agents], ",.0f"))
    print("\nExpected regret per step, by stretch (mean over seeds):\n")
    print(header(agents, "steps"))
    for lo, hi in ((lo, hi) for lo, hi in STRETCHES if hi <= last):
        rates = [statistics.fmean((at(curves[(a, s)], hi, 1) - at(curves[(a, s)], lo, 1)) / (hi - lo) for s in seeds)
                 for a in agents]
        print(row(f"{lo:,}-{hi:,}", rates, ".2f"))


def report(folder: Path) -> int:
    agents, curves = load(folder)
    seeds = sorted({s for _, s in curves})
    last = min(max(c) for c in curves.values())
    print(f"Final regret at {last:,} steps (summary.csv; mean +- sd over {len(seeds)} seeds):\n")
    print("| agent | realised regret | expected regret | expected regret per step, last 10,000 | "
          "eats, first / last 1,000 steps |\n|---|---:|---:|---:|---:|")
    with (folder / "summary.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            realised = f"{float(r['final_regret_mean']):,.0f} +- {float(r['final_regret_sd']):,.0f}"
            print(f"| {name(r['agent'])} | {realised} | "
                  f"{float(r['final_expected_regret_mean']):,.0f} +- {float(r['final_expected_regret_sd']):,.0f} | "
                  f"{float(r['expected_regret_per_step_late']):.3f} | "
                  f"{float(r['eat_rate_first_1000']):.1%} / {float(r['eat_rate_last_1000']):.1%} |")

    print("\nMean cumulative realised regret (regret.csv):\n")
    print_along_the_way(curves, agents, seeds, last)

    print(f"\nFinal realised regret per seed (step {last:,}):\n")
    print(header(agents, "seed"))
    for s in seeds:
        print(row(str(s), [curves[(a, s)][last][0] for a in agents], ",.0f"))
    if "bbb" in agents and "greedy" in agents:
        def below(step: int) -> int:
            return sum(curves[("bbb", s)][step][0] < curves[("greedy", s)][step][0] for s in seeds)
        steps = [s for s in CHECKPOINTS if s <= last]
        print(f"\nSeeds (of {len(seeds)}) on which BBB's cumulative realised regret is below greedy's:\n")
        print("| step | " + " | ".join(f"{s:,}" for s in steps) + " |\n|---|" + "---:|" * len(steps))
        print("| seeds | " + " | ".join(str(below(s)) for s in steps) + " |")
        print(f"\nBBB ends below greedy on {below(last)} of {len(seeds)} seeds.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
