"""Table 1 (test error of every cell) as CSV and markdown (Table 2, pruning, and the SNR
statistics: :mod:`.pruning_table`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import runs as T
from ...cli.common import sigma_of_rho
from ...runs.jobs import State
from ...runs.population import stored_population, wall_seconds
from .ensemble_rows import ENSEMBLE, ensemble_md_line, ensemble_note
from .jobs import check_same_settings, command_line, select_candidate, state_of
from .laplace_rows import LAPLACE, LAPLACE_NOTE, laplace_md_line, laplace_methods
from .plan import Job, ReproduceConfig, cell_jobs, cell_seeds, fmt_time, make_job, train_config
from .recipes import (
    BUDGETS,
    HYPER_BY_METHOD,
    LOSS_BATCH,
    METHOD_NAMES,
    METHODS,
    PAPER_EPOCHS,
    PAPER_GAP_PP,
    PAPER_TABLE1,
    WIDTHS,
    Budget,
    Candidate,
    cell_candidates,
)


def pct(v: float | None) -> float | None:
    return None if v is None else round(100.0 * float(v), 4)


def _neglog(s: float) -> str:
    v = -math.log(s)
    return f"{0.0 if abs(v) < 1e-9 else v:.3g}"


def _e_text(s: float) -> str:
    """1 -> "1", e^-7 -> "e^-7"."""
    v = _neglog(s)
    return "1" if v == "0" else f"e^-{v}"


def hyper_text(method: str, tc: T.TrainConfig) -> str:
    if method == "ivon":
        parts = [f"IVON lr {tc.lr:g}"]
    elif tc.optimizer == "sgd":
        parts = [f"sgd lr {tc.lr:g} (= {tc.lr / LOSS_BATCH:.3g} x 128), momentum {tc.momentum:g}"]
    else:
        parts = [f"{tc.optimizer} lr {tc.lr:g}"]
    if tc.lr_schedule == "step":
        parts.append(f"x{tc.lr_gamma:g} every {tc.lr_step_size or max(1, tc.epochs // 3)} epochs")
    else:
        parts.append(tc.lr_schedule)
    if method == "dropout":
        parts.append(f"dropout {tc.dropout_input:g} in / {tc.dropout_hidden:g} hidden")
    if method == "bbb_gaussian":
        parts += [f"N(0, sigma={_e_text(tc.prior_sigma)})", f"k={tc.samples}", f"{tc.kl_weighting} KL"]
    if method == "bbb_mixture":
        parts += [f"pi={tc.pi:g}, -log s1={_neglog(tc.sigma1)}, -log s2={_neglog(tc.sigma2)}",
                  f"k={tc.samples}", f"{tc.kl_weighting} KL" + ("" if tc.kl == "mc" else f" ({tc.kl})")]
    if method.startswith("bbb"):
        parts.append(_init_text(tc))
    if method == "ivon":
        parts += [f"hess-init {tc.hess_init:g}", f"weight decay {tc.weight_decay:g}",
                  "ess " + ("the number of training images" if tc.ess is None else f"{tc.ess:g}"), f"k={tc.samples}"]
    return ", ".join(parts)


def _init_text(tc: T.TrainConfig) -> str:
    mu = "1/sqrt(fan_in)" if tc.mu_init_scale is None else f"{tc.mu_init_scale:g}"
    return f"rho0 {tc.rho_init:g} (sigma0 {sigma_of_rho(tc.rho_init):.2g}), mu0 ~ U(+-{mu})"


def candidate_name(j: Job) -> str:
    return f"c{j.candidate}" + (f" '{j.label}'" if j.label else "")


def _run_progress(j: Job) -> str:
    done = state_of(j).epochs_done
    return f"epoch {done}/{j.config.epochs}" if done else "not started"


@dataclass
class _Cell:
    """What ``--out`` holds for one cell: its candidates' runs, the selection, extra seeds."""

    method: str
    hidden: int
    cands: list[Job]
    summaries: dict[str, dict[str, Any] | None]  # finished runs; None: diverged
    selected: int | None
    seeds: list[Job]  # the finished extra seeds of the selected candidate
    status: str  # ok, diverged, incomplete, not run
    pending: list[str]  # what is not finished yet, e.g. "c1 'grid prior': epoch 120/600"

    @property
    def complete(self) -> bool:
        return self.status in ("ok", "diverged")

    @property
    def cell(self) -> tuple[str, int]:
        return (self.method, self.hidden)


#: a cell's status in table1 when some of its runs are not finished
MISSING_TEXT = {"incomplete": "incomplete", "not run": "not run yet"}


def cell_state(cfg: ReproduceConfig, method: str, hidden: int, out: Path) -> _Cell:
    """Read one cell's runs from ``out`` (nothing is trained): finished, diverged or pending.

    A cell is selected only when every candidate has finished (or diverged): selection over a
    part of the candidates is not the protocol. Extra seeds are those of the selected candidate
    found on disk, and those ``cfg.seeds`` asks for.
    """
    cands = cell_jobs(cfg, method, hidden)
    summaries: dict[str, dict[str, Any] | None] = {}
    pending: list[str] = []
    started = False
    for j in cands:
        check_same_settings(j, out)
        started = started or j.run_dir.exists()
        st = state_of(j)
        if st.state is State.DONE:
            summaries[j.name] = st.summary
        elif st.state is State.DIVERGED:
            summaries[j.name] = None
        else:
            pending.append(f"{candidate_name(j)}: {_run_progress(j)}")
    if pending:
        return _Cell(method, hidden, cands, summaries, None, [], "incomplete" if started else "not run", pending)
    selected = select_candidate(cands, summaries)
    seeds: list[Job] = []
    if selected is not None:
        wanted = cell_seeds(cfg, method, hidden)
        for s in range(1, 1000):
            job = make_job(cfg, method, hidden, selected, s)
            if s >= wanted and not job.run_dir.exists():
                break
            check_same_settings(job, out)
            st = state_of(job)
            if st.state is State.DONE:
                summaries[job.name] = st.summary
                seeds.append(job)
            elif st.state is State.DIVERGED:
                pending.append(f"seed {s}: diverged")
            else:
                pending.append(f"seed {s}: {_run_progress(job)}")
    return _Cell(method, hidden, cands, summaries, selected, seeds,
                 "ok" if selected is not None else "diverged", pending)


def _candidates_text(cands: Sequence[Job], summaries: dict[str, dict[str, Any] | None],
                     selected: int | None) -> str:
    """Every candidate of a cell with its validation error (what was tried)."""
    parts = []
    for j in cands:
        if j.name not in summaries:
            res = _run_progress(j)
        elif summaries[j.name] is None:
            res = "diverged"
        else:
            res = f"val {pct(summaries[j.name]['val_error']):.2f}%"  # type: ignore[index]
        mark = " (selected)" if j.candidate == selected and len(cands) > 1 else ""
        parts.append(f"{candidate_name(j)} {res}{mark}")
    return "; ".join(parts)


def _seconds_all(jobs: Sequence[Job], summaries: dict[str, dict[str, Any] | None]) -> float:
    """The training time of ``jobs``' finished runs: each run's, but once for the runs trained as one
    population (:func:`bbb.runs.population.wall_seconds`)."""
    done = [(j.run_dir, float(s["seconds"])) for j in jobs if (s := summaries.get(j.name)) is not None]
    return round(wall_seconds(done), 3)


def _population_size(job: Job) -> int | None:
    """The number of runs ``job``'s run trained with as one population (its seconds are theirs), or None."""
    pop = stored_population(job.run_dir)
    runs = None if pop is None else pop.get("runs", pop.get("seeds"))
    return len(runs) if isinstance(runs, list) else None


def table1_row(cfg: ReproduceConfig, method: str, hidden: int, cands: Sequence[Job],
                seeds: Sequence[Job], selected: int | None,
                summaries: dict[str, dict[str, Any] | None], *, status: str | None = None,
                pending: Sequence[str] = ()) -> dict[str, Any]:
    """One row of table1.csv. ``status`` "incomplete" or "not run" marks a missing cell (no
    numbers); otherwise the cell is reported with its ``selected`` candidate."""
    paper = PAPER_TABLE1.get((method, hidden)) if cfg.dataset == "mnist" else None
    row: dict[str, Any] = {"method": method, "hidden": hidden, "paper_test_error": paper,
                           "n_candidates": len(cands),
                           "candidates_val_error": _candidates_text(cands, summaries, selected),
                           "pending": "; ".join(pending) or None}
    row["seconds_all"] = _seconds_all([*cands, *seeds], summaries)
    if status in MISSING_TEXT:
        row.update({"status": status, "n_seeds": 0})
        return row
    if selected is None:
        row.update({"status": "diverged", "n_seeds": 0})
        return row
    chosen = [j for j in cands if j.candidate == selected][0]
    runs = [chosen, *[j for j in seeds if summaries.get(j.name) is not None]]
    s0 = summaries[chosen.name]
    assert s0 is not None
    errs = [100.0 * float(summaries[j.name]["test_error"]) for j in runs]  # type: ignore[index]
    tc = chosen.config
    mean = statistics.fmean(errs)
    row.update({
        "test_error": round(mean, 4),
        "test_error_sd": round(statistics.stdev(errs), 4) if len(errs) > 1 else None,
        "n_seeds": len(errs),
        "test_errors": " ".join(f"{e:.2f}" for e in errs),
        "test_error_mc": pct(s0.get("test_error_mc")),
        "val_error": pct(s0.get("val_error")),
        "epochs": s0.get("epochs"),
        "best_epoch": s0.get("best_epoch"),
        "seconds": round(float(s0.get("seconds", 0.0)), 3),
        "population": _population_size(chosen),
        "candidate": selected,
        "candidate_label": chosen.label or None,
        "gap_vs_paper_pp": None if paper is None else round(mean - paper, 4),
        "weights": s0.get("num_weights"),
        "run": str(Path("runs") / chosen.name),
        "status": "ok",
    })
    for k in HYPER_BY_METHOD[method]:
        row[k] = getattr(tc, k)
    if method == "ivon":
        row["optimizer"] = "ivon"  # IVON is its own optimiser (the config's optimizer is unused)
    elif tc.optimizer == "sgd":
        row["momentum"] = tc.momentum
    if tc.lr_schedule == "step":
        row["lr_step_size"], row["lr_gamma"] = tc.lr_step_size, tc.lr_gamma
    if tc.method == "bbb":
        row["rho_init"], row["mu_init_scale"] = tc.rho_init, tc.mu_init_scale
    return row


SHORT_NAMES = {"sgd": "SGD", "dropout": "dropout", "bbb_gaussian": "BBB Gaussian", "bbb_mixture": "BBB mixture",
               "ivon": "IVON", "laplace": "Laplace", "deep_ensemble": "deep ensemble"}


def _uniq(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _by_method(texts: dict[str, str]) -> str:
    """"a" when every method has the same text, else "SGD: a; dropout: b; ..."."""
    vals = _uniq(list(texts.values()))
    if len(vals) == 1:
        return vals[0]
    groups: dict[str, list[str]] = {}
    for m, t in texts.items():
        groups.setdefault(t, []).append(SHORT_NAMES[m])
    return "; ".join(f"{', '.join(ms)}: {t}" for t, ms in groups.items())


def _budget_configs(budget: str) -> dict[str, list[T.TrainConfig]]:
    """Every candidate's TrainConfig of ``budget`` per method it trains (all widths, seed 0)."""
    c = ReproduceConfig(budget=Budget(budget), out="-")
    return {m: [train_config(c, m, w, cand.settings, 0) for w in WIDTHS
                for cand in cell_candidates(c.spec, m, w)] for m in c.spec.methods}


def _recipe_column(budget: str) -> dict[str, str]:
    """The recipe of one budget, setting by setting (the side-by-side table of table1.md)."""
    spec = BUDGETS[budget]
    confs = _budget_configs(budget)
    allc = [tc for tcs in confs.values() for tc in tcs]
    bbb = [tc for m in ("bbb_gaussian", "bbb_mixture") for tc in confs[m]]

    def lr_text(tcs: list[T.TrainConfig]) -> str:
        lrs = sorted({tc.lr for tc in tcs}, reverse=True)
        if all(tc.optimizer == "sgd" for tc in tcs):
            return ", ".join(f"{v:g}" for v in lrs) + " (= " + ", ".join(f"{v / LOSS_BATCH:.3g}" for v in lrs) \
                + " on the summed loss)"
        return ", ".join(f"{v:g}" for v in lrs)

    def sched(tc: T.TrainConfig) -> str:
        if tc.lr_schedule == "step":
            return f"x{tc.lr_gamma:g} after epoch {tc.lr_step_size} (step)"
        return "cosine decay to 0 over the run" if tc.lr_schedule == "cosine" else "constant"

    n_cands = {(m, w): len(cell_candidates(spec, m, w)) for m, w in spec.cells}
    seed_cells = ", ".join(f"{SHORT_NAMES[m]} 2x{w}" for m, w in spec.seed_cells)
    many = max(n_cands.values()) > 1
    return {
        "optimiser": ", ".join(_uniq([("SGD, momentum " + f"{tc.momentum:g}") if tc.optimizer == "sgd" else "Adam"
                                      for m, tcs in confs.items() if m != "ivon" for tc in tcs]))
                     + (" (IVON: its own)" if "ivon" in confs else ""),
        "learning rate (our per-example loss)": _by_method({m: lr_text(tcs) for m, tcs in confs.items()}),
        "learning-rate schedule": ", ".join(_uniq([sched(tc) for tc in allc])),
        "epochs": _by_method({m: ", ".join(f"{spec.epochs[m][w]}" for w in WIDTHS) + " (2x400, 2x800, 2x1200)"
                              if len({spec.epochs[m][w] for w in WIDTHS}) > 1 else f"{spec.epochs[m][400]}"
                              for m in spec.methods}),
        "candidates per cell": _by_method({m: str(n_cands[(m, 400)]) for m in spec.methods}),
        "seeds": (f"{spec.seeds} for {seed_cells}, 1 elsewhere (--seeds N)" if spec.seeds > 1
                  else f"1 (--seeds N adds seeds to {seed_cells})")
                 + (f"; {spec.ensemble} for SGD (the deep ensembles' members)" if spec.ensemble else ""),
        "selection": ("the best-validation epoch of each run, then the candidate with the lowest "
                      "validation error" if many else "the best-validation epoch of the one run"),
        "BBB samples": ", ".join(_uniq([str(tc.samples) for tc in bbb])),
        "BBB KL": ", ".join(_uniq([f"{tc.kl_weighting} weighting (1/M)" for tc in bbb]))
                  + "; " + ", ".join(_uniq([{"mc": "Monte Carlo", "split": "split (kl=split)"}.get(tc.kl, tc.kl)
                                           for tc in confs["bbb_mixture"]])) + " (mixture), closed form (Gaussian)",
        "BBB initialisation": "; ".join(_uniq([_init_text(tc) for tc in bbb])),
        "scale-mixture prior": "; ".join(_uniq([f"pi={tc.pi:g}, sigma1={_e_text(tc.sigma1)}, "
                                                f"sigma2={_e_text(tc.sigma2)}" for tc in confs["bbb_mixture"]])),
        "Gaussian prior sigma": ", ".join(_uniq([_e_text(tc.prior_sigma) for tc in confs["bbb_gaussian"]])),
        "dropout (input / hidden)": ", ".join(_uniq([f"{tc.dropout_input:g} / {tc.dropout_hidden:g}"
                                                     for tc in confs["dropout"]])),
        "IVON": "; ".join(_uniq([f"lr {tc.lr:g}, hess-init {tc.hess_init:g}, weight decay "
                                                    f"{tc.weight_decay:g}, ess the number of training images, "
                                                    f"{tc.samples} sample per step" for tc in confs["ivon"]]))
                                   if "ivon" in confs else "not trained at this budget",
        "last-layer Laplace": ("the SGD cells' networks, a last-layer KFAC Laplace, prior precision by the marginal "
                               "likelihood, probit predictive (nothing trained)") if spec.laplace
                              else "not trained at this budget",
        "deep ensemble": (f"the SGD cells' {spec.ensemble} seeds, the mean of their softmax outputs"
                          if spec.ensemble else "not trained at this budget"),
    }


def recipes_md() -> list[str]:
    """The quick and the paper budgets' recipes side by side."""
    q, p = _recipe_column("quick"), _recipe_column("paper")
    lines = ["| setting | quick | paper |", "|---|---|---|"]
    lines += [f"| {k} | {q[k]} | {p[k]} |" for k in q]
    return lines


def _candidates_md(cfg: ReproduceConfig) -> list[str]:
    """Every candidate of this budget with the reason it is there (one list per method when
    the widths share it)."""
    spec = cfg.spec
    lines: list[str] = []
    for m in spec.methods:
        lists = {w: cell_candidates(spec, m, w) for w in WIDTHS}
        groups: list[tuple[list[int], list[Candidate]]] = []
        for w, cands in lists.items():
            for g in groups:
                if g[1] == cands:
                    g[0].append(w)
                    break
            else:
                groups.append(([w], cands))
        for widths, cands in groups:
            where = "all widths" if len(widths) == len(WIDTHS) else ", ".join(f"2x{w}" for w in widths)
            eps = ", ".join(_uniq([str(spec.epochs[m][w]) for w in widths]))
            lines.append(f"- {METHOD_NAMES[m]} ({where}; {eps} epochs):")
            for i, c in enumerate(cands):
                tc = train_config(cfg, m, widths[0], c.settings, 0)
                lines.append(f"  - c{i}{f' {c.label!r}' if c.label else ''}: {hyper_text(m, tc)}. "
                             f"Why: {c.reason}.")
            lines += [f"  - not trained here, {label!r}: {why}"
                      for label, why in spec.screened_at(m, widths[0]).items()]
    return lines


def _orderings_md(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Our ordering of the methods at each width beside the paper's: the order of the paper's
    methods compared on the same cells; a method not in the paper (IVON) placed in ours only."""
    ok = {(r["method"], r["hidden"]): r["test_error"] for r in rows if r.get("status") == "ok"}
    lines = []
    for w in WIDTHS:
        ms = [m for m in METHODS if (m, w) in ok and (m, w) in PAPER_TABLE1]
        if len(ms) < 2:
            continue
        ours = sorted([m for m in (*METHODS, LAPLACE, ENSEMBLE) if (m, w) in ok], key=lambda m: ok[(m, w)])
        paper = sorted(ms, key=lambda m: PAPER_TABLE1[(m, w)])
        lines.append(f"- 2x{w}: ours " + " < ".join(f"{SHORT_NAMES[m]} {ok[(m, w)]:.2f}" for m in ours)
                     + "; paper " + " < ".join(f"{SHORT_NAMES[m]} {PAPER_TABLE1[(m, w)]:.2f}" for m in paper)
                     + (" (same order" if [m for m in ours if m in ms] == paper else " (order differs")
                     + (" among the paper's methods)" if len(ours) > len(ms) else ")"))
    for m in METHODS:
        ws = [w for w in WIDTHS if (m, w) in ok]
        if len(ws) < 2:
            continue
        lines.append(f"- {METHOD_NAMES[m]} by width: ours " + ", ".join(f"2x{w} {ok[(m, w)]:.2f}" for w in ws)
                     + ("; paper " + ", ".join(f"2x{w} {PAPER_TABLE1[(m, w)]:.2f}" for w in ws)
                        if all((m, w) in PAPER_TABLE1 for w in ws) else ""))
    return lines


def table1_md(cfg: ReproduceConfig, rows: Sequence[dict[str, Any]], jobs: Sequence[Job],
               counts: tuple[int, int, int]) -> str:
    spec = cfg.spec
    missing = [r for r in rows if r.get("status") in MISSING_TEXT]
    lines = [
        f"# Table 1: {cfg.dataset} test error (budget `{cfg.budget}`)"
        + (f" - partial: {len(rows) - len(missing)} of {len(rows)} cells" if missing else ""),
        "",
        f"Budget `{cfg.budget}`: {spec.description}.",
        "",
        "Test error with the posterior mean weights (BBB, IVON) or the deterministic network (SGD; dropout "
        "at test time), for the checkpoint with the lowest **validation** error; when a cell has "
        "several candidate settings, the one with the lowest validation error is reported. The test "
        "set never selects anything. Where n > 1, mean +- sample standard deviation over n "
        "independent seeds (initialisation, shuffling and noise; same data split).",
        "",
    ]
    if "ivon" in spec.methods:
        lines += ["IVON (`bbb train --method ivon`, Shen et al. 2024) is not in the paper: its rows have no "
                  "paper number; it trains the BBB network's mu and sigma with bbb.IVON (no KL term: its prior, "
                  "a Gaussian of precision weight decay x ess, is in its update).", ""]
    if laplace_methods(rows):
        lines += [LAPLACE_NOTE, ""]
    if spec.ensemble and any(r["method"] == ENSEMBLE for r in rows):
        lines += [ensemble_note(spec.ensemble), ""]
    if missing:
        lines += [f"**Partial table**: {len(missing)} cell(s) are not finished and are marked "
                  "*not run yet* or *incomplete* (their row lists each candidate: its validation error "
                  "once finished, else how far it is); rerun "
                  f"`{command_line(cfg, '--report')}` when they are.", ""]
    lines += [
        "| method | units/layer | test error (ours) | paper | val error | epochs (best) | "
        "selected candidate | hyperparameters | wall time |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    by_name = {(j.method, j.hidden, j.candidate): j for j in jobs}
    for r in rows:
        paper = "-" if r.get("paper_test_error") is None else f"{r['paper_test_error']:.2f}%"
        name = METHOD_NAMES[r["method"]]
        if r["method"] == LAPLACE:
            lines.append(laplace_md_line(name, r, MISSING_TEXT))
            continue
        if r["method"] == ENSEMBLE:
            lines.append(ensemble_md_line(name, r, MISSING_TEXT))
            continue
        if r.get("status") in MISSING_TEXT:
            # every candidate: the validation error of those finished, the progress of the others
            lines.append(f"| {name} | {r['hidden']} | **{MISSING_TEXT[r['status']]}** | {paper} | - | - | - | "
                         f"{r.get('candidates_val_error') or '-'} | - |")
            continue
        if r.get("status") != "ok":
            lines.append(f"| {name} | {r['hidden']} | diverged | {paper} | - | - | - | - | - |")
            continue
        err = f"{r['test_error']:.2f}%"
        if r["n_seeds"] > 1:
            err += f" +- {r['test_error_sd']:.2f} (n={r['n_seeds']})"
        j = by_name[(r["method"], r["hidden"], r["candidate"])]
        cand = f"{candidate_name(j)} of {r['n_candidates']}" if r["n_candidates"] > 1 else (j.label or "-")
        if r.get("pending"):
            cand += f" (pending: {r['pending']})"
        lines.append(f"| {name} | {r['hidden']} | {err} | {paper} | "
                     f"{r['val_error']:.2f}% | {r['epochs']} ({r['best_epoch']}) | {cand} | "
                     f"{hyper_text(r['method'], j.config)} | {fmt_time(r['seconds'])}"
                     + (f" (a population of {r['population']})" if r.get("population") else "") + " |")
    gaps = [r for r in rows if r.get("status") == "ok" and r.get("gap_vs_paper_pp") is not None
            and r["gap_vs_paper_pp"] > PAPER_GAP_PP]
    if gaps:
        lines += ["", f"## Cells more than {PAPER_GAP_PP:g} percentage points above the paper", ""]
        for r in gaps:
            lines.append(f"- {METHOD_NAMES[r['method']]} 2x{r['hidden']}: {r['test_error']:.2f}% vs "
                         f"{r['paper_test_error']:.2f}%, +{r['gap_vs_paper_pp']:.2f} pp. Tried "
                         f"(validation error): {r['candidates_val_error']}.")
    order = _orderings_md(rows)
    if order:
        lines += ["", "## Orderings (test error, %)", "", *order]
    n = counts
    lines += ["", "## Settings", "",
              f"Shared by every run: minibatch 128, pixels / 126, {n[0]:,} training / {n[1]:,} "
              f"validation images (a seeded split of the official training set), {n[2]:,} test "
              "images; test error logged every epoch (Figure 2 only). BBB: reparameterisation (one "
              "weight sample per minibatch and MC sample), Monte Carlo KL for the scale mixture, "
              "closed-form KL for the Gaussian prior. Dropout: PyTorch's inverted dropout, so the "
              "test-time weights are the trained weights. `wall time` is the training time of the "
              "reported run (that of its population where it trained in one, shared by its members); "
              "`seconds_all` in table1.csv adds every candidate and seed (a population's once). The paper "
              "trains for up to 600 epochs; "
              + ("this budget trains far fewer, so the comparison is indicative only."
                 if any(spec.epochs[m][w] < PAPER_EPOCHS for m, w in spec.cells)
                 else "so does this budget."),
              *(["", spec.note] if spec.note else []),
              "", "The two budgets' recipes side by side (learning rates on our loss, the summed "
              "minibatch loss / 128; the paper's grid is {1e-3, 1e-4, 1e-5} on the summed loss):", "",
              *recipes_md(),
              "", f"Candidate settings of the `{cfg.budget}` budget, and why each is there:", "",
              *_candidates_md(cfg)]
    return "\n".join(lines) + "\n"
