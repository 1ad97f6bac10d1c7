"""Stage 3 of the bandit recipe search (SELECTION.md): the screens' table and the choice.

    python results/bandit/stage3.py results/bandit/selection --step 10000   # the screens
    python results/bandit/stage3.py results/bandit/selection --step 20000   # confirmations, choice

For every run folder ``h*`` (and b6, the defaults it starts from) with a BBB agent logged at
``--step``: BBB's realised regret per seed (seeds 0-2), its mean and sd, its expected regret per
step over the second half of the steps, and greedy's realised regret on the same learner and seed:
the folder's own greedy agent where it ran one, else stage 1's run of that learner (Adam 1e-3:
``learner-adam-1e-3``, which ran at noise 1: Adam's steps do not depend on it; plain SGD at the
same lr / noise^2: ``learner-sgd-1e-2`` at noise 1 for 1e-4 at 0.1). The choice (at 20,000
steps): the lowest mean of BBB - greedy per seed, ties by BBB's regret. Reads only regret.csv and
config.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

BASE = "b6-noise01-seen-blundell"
CHOICE_STEP = 20_000  # the rule's step: the choice among b6 and the confirmed screens
LEARNERS = ("learner-adam-1e-3", "learner-sgd-1e-2", "learner-sgd-1e-3", "learner-adam-1e-4")


def regret_at(folder: Path, agent: str, step: int, column: str = "cumulative_regret") -> dict[int, float]:
    """{seed: the column at ``step``} of ``agent`` in ``folder``/regret.csv ({} if not logged)."""
    with open(folder / "regret.csv", newline="") as f:
        return {int(r["seed"]): float(r[column]) for r in csv.DictReader(f)
                if r["agent"] == agent and int(r["step"]) == step}


def learner_of(cfg: dict) -> tuple[str, float]:
    """Runs with the same pair take the same greedy steps: Adam's step does not depend on the
    loss's scale 1 / noise^2 (up to its eps), plain SGD's does (lr / noise^2)."""
    scale = 1.0 if cfg["optimizer"] == "adam" else cfg["noise_sigma"] ** -2
    return cfg["optimizer"], round(cfg["lr"] * scale, 12)


def greedy_for(root: Path, folder: Path, cfg: dict, step: int) -> tuple[dict[int, float], str]:
    own = regret_at(folder, "greedy", step)
    if own:
        return own, folder.name
    for name in LEARNERS:
        ref = root / name
        if (ref / "config.json").exists() and learner_of(json.loads((ref / "config.json").read_text())) == \
                learner_of(cfg) and cfg.get("likelihood", "gaussian") == "gaussian":
            return regret_at(ref, "greedy", step), name
    return {}, "none"


def rows(root: Path, step: int) -> list[dict]:
    out = []
    for folder in [root / BASE, *sorted(root.glob("h*"))]:
        if not (folder / "regret.csv").exists():
            continue
        cfg = json.loads((folder / "config.json").read_text())
        bbb = regret_at(folder, "bbb", step)
        if not bbb:
            continue
        half = step // 2
        e1, e0 = (regret_at(folder, "bbb", s, "cumulative_expected_regret") for s in (step, half))
        late = statistics.mean((e1[s] - e0[s]) / (step - half) for s in e1)
        greedy, source = greedy_for(root, folder, cfg, step)
        seeds = sorted(bbb)
        diff = [bbb[s] - greedy[s] for s in seeds] if set(seeds) <= set(greedy) else None
        out.append(dict(run=folder.name, seeds=seeds, bbb=[bbb[s] for s in seeds],
                        mean=statistics.mean(bbb.values()),
                        sd=statistics.stdev(bbb.values()) if len(bbb) > 1 else 0.0, late=late,
                        greedy=[greedy.get(s) for s in seeds], source=source,
                        diff=None if diff is None else statistics.mean(diff)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="the selection folder (results/bandit/selection)")
    ap.add_argument("--step", type=int, default=20_000, help="the step read (default 20000)")
    args = ap.parse_args()
    table = rows(args.root, args.step)
    if not table:
        print(f"no run under {args.root} is logged at step {args.step}", file=sys.stderr)
        return 1
    half = args.step // 2
    print(f"| run | BBB regret at {args.step:,} per seed | mean +- sd | late ({half:,}-{args.step:,}) | "
          f"greedy per seed (run) | BBB - greedy |")
    print("|---|---:|---:|---:|---|---:|")
    for r in table:
        per = " / ".join(f"{v:,.0f}" for v in r["bbb"])
        gr = " / ".join("-" if v is None else f"{v:,.0f}" for v in r["greedy"])
        diff = "-" if r["diff"] is None else f"{r['diff']:+,.0f}"
        print(f"| {r['run']} | {per} | {r['mean']:,.0f} +- {r['sd']:,.0f} | {r['late']:.3f} | {gr} "
              f"({r['source']}) | {diff} |")
    base = next((r for r in table if r["run"] == BASE), None)
    if base is not None:
        beat = [r["run"] for r in table if r["run"] != BASE and r["mean"] < base["mean"]]
        print(f"\nbelow b6's mean at {args.step:,}: {', '.join(beat) or 'none'}")
    ranked = [r for r in table if r["diff"] is not None]
    if ranked:
        best = min(ranked, key=lambda r: (r["diff"], r["mean"]))
        print(f"lowest BBB - greedy at {args.step:,}: {best['run']} ({best['diff']:+,.0f}; BBB {best['mean']:,.0f})")
        if args.step == CHOICE_STEP:
            print(f"the choice: {best['run']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
