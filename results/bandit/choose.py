"""The selection's two criteria (SELECTION.md), applied to the finished runs under a folder.

    python results/bandit/choose.py results/bandit/selection            # the table and both choices
    python results/bandit/choose.py results/bandit/selection --learner  # only stage 1's flags

Stage 1 (folders learner-*): the learner whose 5%-greedy agent's expected regret per step over
the last 10,000 steps is closest to its floor of 0.2455; ties by greedy's mean regret.
Stage 2 (folders b*): among the BBB runs whose late rate is below stage 1's chosen greedy agent's,
the lowest mean realised regret at the end; if none is (the fallback, fixed in SELECTION.md before
b3-b7 had finished), the lowest mean realised regret of all of them. Reads only summary.json and
config.json; the held-out seeds are never in these folders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FLOOR = 0.2455
#: the recipe's flags, as `bbb bandit` spells them (config.json key -> flag)
RECIPE = {"optimizer": "--optimizer", "lr": "--lr", "noise_sigma": "--noise-sigma", "prior": "--prior",
          "prior_sigma": "--prior-sigma", "pi": "--pi", "sigma1": "--sigma1", "sigma2": "--sigma2",
          "sigma_init": "--sigma-init", "kl_scale": "--beta", "kl_data": "--kl-data",
          "kl_weighting": "--kl-weighting", "weight_decay": "--weight-decay"}


def finished(root: Path, pattern: str) -> list[tuple[str, dict, dict]]:
    """(name, agents by name, config) of every finished run matching ``pattern``."""
    out = []
    for f in sorted(root.glob(f"{pattern}/summary.json")):
        agents = {a["agent"]: a for a in json.loads(f.read_text())["agents"]}
        out.append((f.parent.name, agents, json.loads((f.parent / "config.json").read_text())))
    return out


def choose_learner(runs: list[tuple[str, dict, dict]]) -> tuple[str, dict, dict]:
    return min(runs, key=lambda r: (abs(r[1]["egreedy_0.05"]["expected_regret_per_step_late"] - FLOOR),
                                    r[1]["greedy"]["final_regret_mean"]))


def flags(cfg: dict, keys: tuple[str, ...]) -> str:
    return " ".join(f"{RECIPE[k]} {cfg[k]:g}" if isinstance(cfg[k], float) else f"{RECIPE[k]} {cfg[k]}"
                    for k in keys if k in cfg)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="the selection folder (results/bandit/selection)")
    ap.add_argument("--learner", action="store_true", help="print only stage 1's flags (select.sh)")
    args = ap.parse_args()
    learners = finished(args.root, "learner-*")
    if not learners:
        print(f"no finished learner-* run under {args.root}", file=sys.stderr)
        return 1
    name, agents, cfg = choose_learner(learners)
    learner_flags = flags(cfg, ("optimizer", "lr"))
    if args.learner:
        print(learner_flags)
        return 0
    bar = agents["greedy"]["expected_regret_per_step_late"]
    print("| run | agent | seeds | regret at the end (mean) | sd | expected regret per step, last 10k |")
    print("|---|---|---:|---:|---:|---:|")
    for run, ags, _ in finished(args.root, "*"):
        for a in ags.values():
            print(f"| {run} | {a['agent']} | {a['seeds']} | {a['final_regret_mean']:.0f} | "
                  f"{a['final_regret_sd']:.0f} | {a['expected_regret_per_step_late']:.3f} |")
    print(f"\nstage 1 chose {name} ({learner_flags}): 5% greedy's late rate "
          f"{agents['egreedy_0.05']['expected_regret_per_step_late']:.3f} (floor {FLOOR}; learner check "
          f"{'passed' if agents['egreedy_0.05']['expected_regret_per_step_late'] - FLOOR <= 0.1 else 'missed'}), "
          f"greedy's {bar:.3f}")
    bbb = [r for r in finished(args.root, "b*") if "bbb" in r[1]]
    if not bbb:
        print("stage 2: no finished run yet")
        return 0
    flat = [r for r in bbb if r[1]["bbb"]["expected_regret_per_step_late"] < bar]
    if flat:
        run, ags, c = min(flat, key=lambda r: r[1]["bbb"]["final_regret_mean"])
        how = f"{len(flat)} below greedy's late rate {bar:.3f}"
    else:  # the fallback: no run flattens below greedy, so the lowest regret of all
        run, ags, c = min(bbb, key=lambda r: r[1]["bbb"]["final_regret_mean"])
        how = f"none below greedy's late rate {bar:.3f}: the fallback, the lowest regret of all"
    print(f"stage 2 chose {run} of {len(bbb)} finished ({how}): regret "
          f"{ags['bbb']['final_regret_mean']:.0f}, late rate {ags['bbb']['expected_regret_per_step_late']:.3f}")
    unused = ("pi", "sigma1", "sigma2") if c.get("prior") == "gaussian" else ("prior_sigma",)
    print("the recipe: " + flags(c, tuple(k for k in RECIPE if k not in unused)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
