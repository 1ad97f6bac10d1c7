"""The regret plot (Fig. 6)."""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from typing import Any

from ...plots import canvas, finish

_COLORS = {"bbb": "tab:red", "greedy": "tab:blue", "egreedy_0.01": "tab:green", "egreedy_0.05": "tab:purple",
           "ivon": "tab:orange", "ensemble": "tab:brown"}


def _label(agent: str, samples: int) -> str:
    """The legend's name of ``agent``; ``samples``: the weight samples of each Thompson decision."""
    if agent.startswith("egreedy_"):
        return f"{float(agent[8:]) * 100:g}% greedy"
    drawn = f"{samples} sample{'s' if samples != 1 else ''}"
    return {"bbb": f"BBB (Thompson, {drawn})", "ivon": f"IVON (Thompson, {drawn})",
            "ensemble": "bootstrapped ensemble", "greedy": "greedy"}.get(agent, agent)


def plot_regret(rows: list[dict[str, Any]], path: str | os.PathLike[str] | None = None,
                agents: Sequence[str] | None = None, expected: bool = False, *, ax: Any = None,
                samples: int = 2) -> Any:
    """Cumulative regret vs step on a log y axis: the mean over seeds and a min-max band (Fig. 6).
    ``samples``: the weight samples of each Thompson decision (``--samples``), named in the legend.

    As the plots of :mod:`bbb.plots`: drawn on ``ax`` (one Axes) when given, else on a new Agg
    figure (no pyplot, no backend switch); returns the PNG's path when ``path`` is given, else
    the Figure (None without matplotlib).
    """
    fig, axes = canvas(ax, 1, figsize=(6.4, 4.4))
    if fig is None:
        return None
    (ax_,) = axes
    col = "cumulative_expected_regret" if expected else "cumulative_regret"
    by: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        by.setdefault(r["agent"], {}).setdefault(int(r["step"]), []).append(float(r[col]))
    for i, a in enumerate(list(agents) if agents else list(by)):
        if a not in by:
            continue
        steps = sorted(by[a])
        vals = [by[a][s] for s in steps]
        mean = [sum(v) / len(v) for v in vals]
        c = _COLORS.get(a, f"C{i}")
        ax_.plot(steps, [max(m, 1e-1) for m in mean], color=c, lw=1.6, label=_label(a, samples))
        ax_.fill_between(steps, [max(min(v), 1e-1) for v in vals], [max(max(v), 1e-1) for v in vals], color=c,
                         alpha=0.18, lw=0)
    ax_.set_yscale("log")
    ax_.set_xlabel("step")
    ax_.set_ylabel("cumulative expected regret" if expected else "cumulative regret")
    nseeds = max((len(v) for d in by.values() for v in d.values()), default=0)
    ax_.set_title(f"Mushroom bandit: mean over {nseeds} seed(s), band = min..max")
    ax_.grid(True, which="both", alpha=0.3)
    ax_.legend(loc="lower right")
    return finish(fig, path, new=ax is None, dpi=120)


def plot_eating(rows: list[dict[str, Any]], path: str | os.PathLike[str] | None = None,
                agents: Sequence[str] | None = None, window: int = 1000, oracle: float | None = None, *,
                ax: Any = None, samples: int = 2) -> Any:
    """Share of mushrooms eaten over the last ``window`` steps vs step, mean over seeds (from the
    ``cumulative_eaten`` column): Figure 6's marks in the open (greedy eats nothing at first, 5%
    greedy keeps eating poison, BBB eats and passes from the start). ``oracle``: the eat rate of
    the agent that eats exactly the edible ones (the edible share), drawn dashed. Drawn and
    returned as :func:`plot_regret`."""
    fig, axes = canvas(ax, 1, figsize=(6.4, 4.0))
    if fig is None:
        return None
    (ax_,) = axes
    series: dict[str, dict[int, list[tuple[int, int]]]] = {}
    for r in rows:
        series.setdefault(r["agent"], {}).setdefault(int(r["seed"]), []).append(
            (int(r["step"]), int(float(r["cumulative_eaten"]))))
    for i, a in enumerate(list(agents) if agents else list(series)):
        if a not in series:
            continue
        by_step: dict[int, list[float]] = {}
        for pts in series[a].values():
            pts = [(0, 0), *sorted(pts)]  # step 0: nothing eaten yet
            logged = [s for s, _ in pts]
            for s, e in pts[1:]:
                # the latest logged point at or before s - window
                s0, e0 = pts[max(bisect.bisect_right(logged, s - window) - 1, 0)]
                by_step.setdefault(s, []).append((e - e0) / max(s - s0, 1))
        steps = sorted(by_step)
        ax_.plot(steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], color=_COLORS.get(a, f"C{i}"),
                 lw=1.4, label=_label(a, samples))
    if oracle is not None:
        ax_.axhline(oracle, color="k", ls="--", lw=1, label="eats exactly the edible ones")
    ax_.set_ylim(-0.02, 1.02)
    ax_.set_xlabel("step")
    ax_.set_ylabel(f"share eaten, last {window} steps")
    ax_.set_title("Mushroom bandit: how often each agent eats (mean over seeds)")
    ax_.grid(True, alpha=0.3)
    ax_.legend(loc="best", fontsize="small")
    return finish(fig, path, new=ax is None, dpi=120)
