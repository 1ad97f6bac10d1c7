"""Table 2 (pruning the BBB 2x1200 network by signal-to-noise ratio) and the weights' SNR
statistics beside the paper's Figure 4, as CSV and markdown."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ... import runs as T
from ...cli.common import weights_text
from ...progress import plural
from .plan import Job, ReproduceConfig
from .recipes import METHOD_NAMES, PAPER_SNR_RANGE_DB, PAPER_TABLE2, PRUNE_FRACTIONS
from .tables import pct

__all__ = ["table2_rows", "table2_md", "snr_db_of", "snr_stats", "snr_sentence", "quantile"]


def table2_rows(cfg: ReproduceConfig, job: Job, data: dict[str, Tensor]) -> list[dict[str, Any]]:
    rows = T.prune_run(job.run_dir, PRUNE_FRACTIONS, which="last", device=cfg.device, data=data)
    paper = {f: (w, e) for f, w, e in PAPER_TABLE2} if cfg.dataset == "mnist" else {}
    base = next((float(r["test_error"]) for r in rows if r["fraction_removed"] == 0.0), None)
    paper_base = paper.get(0.0, (None, None))[1]
    out = []
    for r in rows:
        pw, pe = paper.get(r["fraction_removed"], (None, None))
        thr = float(r["snr_threshold"])
        out.append({
            "fraction_removed": r["fraction_removed"], "weights_left": r["weights_left"],
            "weights_total": r["weights_total"], "snr_threshold": thr,
            "snr_threshold_db": round(10.0 * math.log10(thr), 4) if thr > 0 else None,
            "test_error": pct(r["test_error"]), "paper_weights_left": pw, "paper_test_error": pe,
            # what pruning costs: the test error minus the unpruned network's, in points
            "cost_pp": None if base is None else round(100.0 * (float(r["test_error"]) - base), 4),
            "paper_cost_pp": None if pe is None or paper_base is None else round(pe - paper_base, 4),
        })
    return out


def table2_md(cfg: ReproduceConfig, rows: Sequence[dict[str, Any]], job: Job,
               snr: dict[str, Any] | None = None, instead_of: Job | None = None) -> str:
    """Table 2 of ``job``; ``instead_of``: the selected run, whose checkpoint ``job`` (an extra
    seed of the same candidate) stands in for."""
    lines = [
        f"# Table 2: pruning BBB 2x1200 by signal-to-noise ratio (budget `{cfg.budget}`)",
        "",
        f"Run `runs/{job.name}` ({METHOD_NAMES[job.method]}, {plural(job.config.epochs, 'epoch')}), end of "
        "training (`last.pt`), as in the paper. The weights with the lowest |mu|/sigma are set to 0, "
        "the others to mu; biases are kept. Test error with the remaining mean weights.",
        "",
        "| proportion removed | #weights (ours) | test error (ours) | cost (ours, pp) | #weights (paper) | "
        "test error (paper) | cost (paper, pp) | SNR threshold (dB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if instead_of is not None:
        lines[4:4] = [f"The selected run `runs/{instead_of.name}` has no checkpoint here (only its config, "
                      f"metrics and summary were kept), so this is seed {job.seed} of the same candidate: "
                      "the same settings, another seed.", ""]

    def pp(v: float | None) -> str:
        return "-" if v is None else f"{v:+.2f}"

    for r in rows:
        pe = "-" if r["paper_test_error"] is None else f"{r['paper_test_error']:.2f}%"
        db = "-" if r["snr_threshold_db"] is None else f"{r['snr_threshold_db']:.2f}"
        lines.append(f"| {100 * r['fraction_removed']:g}% | {weights_text(r['weights_left'])} | "
                     f"{r['test_error']:.2f}% | {pp(r.get('cost_pp'))} | {weights_text(r['paper_weights_left'])} | "
                     f"{pe} | {pp(r.get('paper_cost_pp'))} | {db} |")
    lines += ["", "cost: the test error minus that of the unpruned network (0% removed), in percentage points."]
    lines += ["", "SNR in dB is 10 log10(|mu|/sigma) (the paper does not state its convention; "
              "20 log10 would double every dB value)."]
    if snr is not None:
        lines += ["", snr_sentence(snr)]
    if "ivon" in cfg.spec.methods:
        lines += ["", "IVON's 2x1200 network (not in the paper) is not pruned here: Table 2 and Figure 4 are "
                  "the paper's, of the BBB network; IVON's posterior has mu and sigma too, so `bbb prune "
                  "runs/ivon_1200 --which last` prunes it by the same |mu|/sigma."]
    return "\n".join(lines) + "\n"


def snr_db_of(job: Job) -> Tensor:
    """10 log10(|mu|/sigma) of every weight of ``job``'s last checkpoint (all, finite or not)."""
    from ...prune import signal_to_noise, snr_db

    model, _cfg = T.load_run(job.run_dir, "last", device="cpu")
    return snr_db(signal_to_noise(model)).double()


def snr_stats(db_all: Tensor) -> dict[str, Any]:
    """The weights' SNR range in dB beside the paper's Figure 4 (about -7.5 to 0 dB): the 5th
    and 95th percentiles and the share inside the paper's range, under our 10 log10 convention
    and under 20 log10 (the paper does not state which it used)."""
    db = db_all[torch.isfinite(db_all)]
    lo, hi = PAPER_SNR_RANGE_DB
    if db.numel() == 0:
        return {"n_finite": 0}
    return {
        "q05_db": quantile(db, 0.05), "q95_db": quantile(db, 0.95),
        "paper_range_db": [lo, hi],
        "fraction_in_paper_range": float(((db >= lo) & (db <= hi)).double().mean()),
        # 20 log10(x) in [lo, hi]  <=>  10 log10(x) in [lo / 2, hi / 2]
        "fraction_in_paper_range_20log10": float(((db >= lo / 2) & (db <= hi / 2)).double().mean()),
        "q05_db_20log10": 2 * quantile(db, 0.05), "q95_db_20log10": 2 * quantile(db, 0.95),
        "n_finite": int(db.numel()),
    }


def snr_sentence(st: dict[str, Any]) -> str:
    lo, hi = PAPER_SNR_RANGE_DB
    if not st.get("n_finite"):
        return "No finite signal-to-noise ratio."
    return (f"SNR of the weights: 5th-95th percentile {st['q05_db']:.2f} to {st['q95_db']:.2f} dB "
            f"(paper's Figure 4: about {lo:g} to {hi:g} dB); {100 * st['fraction_in_paper_range']:.1f}% of "
            f"the weights lie within [{lo:g}, {hi:g}] dB. Read as 20 log10 (the paper does not say): "
            f"{st['q05_db_20log10']:.2f} to {st['q95_db_20log10']:.2f} dB, "
            f"{100 * st['fraction_in_paper_range_20log10']:.1f}% within that range.")


def quantile(v: Tensor, q: float) -> float:
    """The ``q`` quantile of all of ``v`` (numpy's partition: no sort, no size limit)."""
    import numpy as np

    return float(np.quantile(v.detach().double().cpu().numpy(), q))
