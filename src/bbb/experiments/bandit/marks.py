"""Figure 6's qualitative marks, measured on a finished run: which of them hold.

The paper (section 5.3) says: the greedy agent eats nothing at first and then does much better;
5% greedy over-explores; BBB explores from the start and converges to an almost flat regret
curve, the lowest of the agents. Each mark is a comparison of numbers from the summary (and the
per-seed finals of regret.csv); a mark whose agents were not run is left out. A mark measured on
a window (the first :data:`EARLY_WINDOW` steps, the last :data:`LATE_WINDOW`) is not judged on a
run shorter than twice its window, where the window would be most or all of the run: ``holds``
is then None (printed as :data:`NOT_JUDGED`) and ``measured`` says why.
"""

from __future__ import annotations

from typing import Any

from .config import EARLY_WINDOW, EXPECTED_POISON, LATE_WINDOW, REWARD_EDIBLE, REWARD_PASS, parse_agent

#: the share of seeds on which BBB must end below greedy (4 of the paper's 5)
SEED_SHARE = 0.8

#: how far above its floor an epsilon-greedy agent's late rate may lie (the learner check)
LEARNER_CHECK_MARGIN = 0.1

#: how a mark not judged (``holds`` None: a run too short for its window) is printed
NOT_JUDGED = "not judged"


def mark_word(holds: bool | None) -> str:
    """How a mark's verdict is printed: holds, fails, or not judged (None)."""
    return NOT_JUDGED if holds is None else "holds" if holds else "fails"


def exploration_floor(epsilon: float, edible_share: float) -> float:
    """Expected regret per step of uniformly random actions taken with probability ``epsilon``
    by an agent that is otherwise perfect (the wrong action half the time: 5 for passing an edible
    mushroom, 15 for eating a poisonous one)."""
    miss_edible = REWARD_EDIBLE - REWARD_PASS
    miss_poison = REWARD_PASS - EXPECTED_POISON
    return epsilon * 0.5 * (edible_share * miss_edible + (1.0 - edible_share) * miss_poison)


def _finals(rows: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """The realised regret of every (agent, seed) at its last logged step."""
    last: dict[tuple[str, int], tuple[int, float]] = {}
    for r in rows:
        key = (r["agent"], int(r["seed"]))
        if key not in last or r["step"] >= last[key][0]:
            last[key] = (r["step"], float(r["cumulative_regret"]))
    return {k: v[1] for k, v in last.items()}


def figure6_marks(summary: list[dict[str, Any]], rows: list[dict[str, Any]],
                  edible_share: float) -> list[dict[str, Any]]:
    """The marks that the run's agents allow: dicts with ``mark`` (the claim), ``holds`` (bool)
    and ``measured`` (the numbers compared, in words). Among the paper's agents: an ``ivon`` or
    ``ensemble`` agent (not in the paper) is left out of every mark."""
    by = {s["agent"]: s for s in summary if parse_agent(s["agent"]).in_paper}
    marks: list[dict[str, Any]] = []
    steps = max((int(s["steps"]) for s in summary if s.get("steps") is not None), default=None)

    def add(mark: str, holds: bool, measured: str, window: int = 0) -> None:
        if steps is not None and steps < 2 * window:
            marks.append({"mark": mark, "holds": None,
                          "measured": f"a {steps:,}-step run is shorter than twice its {window:,}-step window; "
                                      f"run at least {2 * window:,} steps"})
            return
        marks.append({"mark": mark, "holds": bool(holds), "measured": measured})

    late = {a: s["expected_regret_per_step_late"] for a, s in by.items()}
    if "bbb" in by and len(by) > 1:
        others = {a: s["final_regret_mean"] for a, s in by.items() if a != "bbb"}
        best = min(others, key=others.get)  # type: ignore[arg-type]
        add("BBB has the lowest mean realised regret", by["bbb"]["final_regret_mean"] < others[best],
            f"bbb {by['bbb']['final_regret_mean']:.0f}, the lowest of the others {best} {others[best]:.0f}")
    if "bbb" in by and "greedy" in by:
        finals = _finals(rows)
        seeds = sorted({s for a, s in finals if a == "bbb"} & {s for a, s in finals if a == "greedy"})
        wins = sum(finals[("bbb", s)] < finals[("greedy", s)] for s in seeds)
        add(f"BBB below greedy on at least {SEED_SHARE:.0%} of the seeds",
            bool(seeds) and wins >= SEED_SHARE * len(seeds), f"{wins} of {len(seeds)} seeds")
        add("greedy is reluctant to eat early, BBB explores from the start",
            by["greedy"]["eat_rate_first_1000"] < by["bbb"]["eat_rate_first_1000"],
            f"eaten in the first 1,000 steps: greedy {by['greedy']['eat_rate_first_1000']:.1%}, "
            f"bbb {by['bbb']['eat_rate_first_1000']:.1%}", EARLY_WINDOW)
        add("BBB flattens: its regret per step over the late window is below greedy's",
            late["bbb"] < late["greedy"], f"bbb {late['bbb']:.3f}, greedy {late['greedy']:.3f}", LATE_WINDOW)
    for a in by:
        eps = parse_agent(a).epsilon
        if eps <= 0:
            continue
        floor = exploration_floor(eps, edible_share)
        rest = {b: v for b, v in late.items() if b != a}
        if rest:
            add(f"{a} over-explores: the highest regret per step over the late window",
                all(late[a] > v for v in rest.values()),
                f"{a} {late[a]:.3f}; " + ", ".join(f"{b} {v:.3f}" for b, v in rest.items()), LATE_WINDOW)
        add(f"{a} within {LEARNER_CHECK_MARGIN} per step of its exploration floor {floor:.4f} (learner check)",
            late[a] - floor <= LEARNER_CHECK_MARGIN, f"{late[a]:.3f} per step, {late[a] - floor:+.3f} over the floor",
            LATE_WINDOW)
    return marks
