"""The regret plot (Fig. 6)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_COLORS = {"bbb": "tab:red", "greedy": "tab:blue", "egreedy_0.01": "tab:green", "egreedy_0.05": "tab:purple"}


def plot_regret(rows: list[dict[str, Any]], path: str | os.PathLike[str], agents: Sequence[str] | None = None,
                expected: bool = False) -> Path:
    """Cumulative regret vs step on a log y axis: the mean over seeds and a min-max band (Fig. 6)."""
    from ...plots import agg_figures

    plt = agg_figures()  # Agg figures without pyplot: the caller's backend stays

    col = "cumulative_expected_regret" if expected else "cumulative_regret"
    by: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        by.setdefault(r["agent"], {}).setdefault(int(r["step"]), []).append(float(r[col]))
    agents = list(agents) if agents else list(by)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for i, a in enumerate(agents):
        if a not in by:
            continue
        steps = sorted(by[a])
        vals = [by[a][s] for s in steps]
        mean = [sum(v) / len(v) for v in vals]
        lo = [min(v) for v in vals]
        hi = [max(v) for v in vals]
        c = _COLORS.get(a, f"C{i}")
        label = {"bbb": "BBB (Thompson, 2 samples)", "greedy": "greedy"}.get(
            a, a.replace("egreedy_", "") + " greedy" if a.startswith("egreedy_") else a)
        if a.startswith("egreedy_"):
            label = f"{float(a[8:]) * 100:g}% greedy"
        ax.plot(steps, [max(m, 1e-1) for m in mean], color=c, lw=1.6, label=label)
        ax.fill_between(steps, [max(v, 1e-1) for v in lo], [max(v, 1e-1) for v in hi], color=c, alpha=0.18, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative expected regret" if expected else "cumulative regret")
    nseeds = max((len(v) for d in by.values() for v in d.values()), default=0)
    ax.set_title(f"Mushroom bandit: mean over {nseeds} seed(s), band = min..max")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    from ...io import atomic_write_bytes

    atomic_write_bytes(path, buf.getvalue())
    return path
