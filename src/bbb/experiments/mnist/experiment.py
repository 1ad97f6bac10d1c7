"""The experiment: plan, train the cells, write tables, figures and the README."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ... import runs as T
from ...cli.common import weights_text
from ...devices import resolve_device
from ...errors import UserError
from ...io import atomic_write_json, atomic_write_text, csv_text
from ...progress import plural
from ...runs.jobs import CallbackList, JobCallbacks, State, read_json
from . import pruning_table, tables
from .ensemble_rows import ensemble_rows
from .figures import FIG2_METHODS, figure2, figure3, figure4
from .jobs import Progress, command_line, limit_data, population_groups, state_of, train_jobs, train_populations
from .laplace_rows import laplace_rows
from .plan import (
    Job,
    ReproduceConfig,
    cell_jobs,
    cells_text,
    estimate_seconds,
    fmt_time,
    make_job,
    method_arg,
    plan_jobs,
    run_name,
)
from .recipes import (
    FIXED_OVERHEAD_S,
    METHOD_NAMES,
    TABLE1_COLUMNS,
    TABLE2_COLUMNS,
    WIDTHS,
    WORK_ORDER,
)


def _manifest(out: Path, cfg: ReproduceConfig) -> dict[str, Any]:
    path = out / "reproduce.json"
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder")
    old = read_json(path) if path.exists() else None
    if path.exists() and old is None:
        raise UserError(f"{path} is unreadable; use another --out")
    if old is not None:
        for k in ("experiment", "budget", "dataset"):
            if old.get(k) != getattr(cfg, k):
                raise UserError(f"{out} holds a {old.get('experiment')} reproduction with {k} "
                                f"{old.get(k)!r}, not {str(getattr(cfg, k))!r}; use another --out or the same --{k}")
    return old or {}


def _job_state(job: Job) -> tuple[str, int]:
    """("done" | "diverged" | "resume after k" | "new", epochs done) of one run on disk."""
    st = state_of(job)
    if st.state is State.DONE:
        return "done", job.config.epochs
    if st.state is State.DIVERGED:
        return "diverged", 0
    return (f"resume after {st.epochs_done}" if st.epochs_done else "new"), st.epochs_done


def _left_seconds(job: Job, n_train: int) -> float:
    state, done = _job_state(job)
    return 0.0 if state in ("done", "diverged") else estimate_seconds(job, n_train, done)


def _plan_text(cfg: ReproduceConfig, first: Sequence[Job], extra: Sequence[Job], n_train: int) -> str:
    """The plan in the order of work: group, cell, its candidates (settings, why, state, time
    left), its extra seeds."""
    lines = [f"plan of the {cfg.budget} budget in the order of work (estimates: a run's own pace once "
             f"it has trained an epoch, else measured seconds per epoch on a quiet 2-core CPU):"]
    total = 0.0
    for title, group in WORK_ORDER:
        cells = [c for c in group if c in cfg.cells]
        if not cells:
            continue
        gjobs = [j for j in [*first, *extra] if j.cell in cells]
        g_est = sum(_left_seconds(j, n_train) for j in gjobs)
        total += g_est
        lines += ["", f"group {title}: {len(gjobs)} run(s), {fmt_time(g_est)} left "
                      f"(--cells {cells_text(cells)})"]
        for m, w in cells:
            cj = [j for j in first if j.cell == (m, w)]
            sj = [j for j in extra if j.cell == (m, w)]
            c_est = sum(_left_seconds(j, n_train) for j in [*cj, *sj])
            n_all = len(cell_jobs(cfg, m, w))
            lines.append(f"  {METHOD_NAMES[m]} 2x{w} (--cells {method_arg(m)}:{w}): "
                         + (f"{len(cj)} of {n_all} candidates" if len(cj) < n_all else f"{len(cj)} candidate(s)")
                         + (f" + {len(sj)} extra seed(s) of the selected one" if sj else "")
                         + f", {plural(cj[0].config.epochs, 'epoch')} each; {fmt_time(c_est)} left")
            for j in cj:
                state, _ = _job_state(j)
                lines.append(f"    {j.name:<24} {state:<18} {fmt_time(_left_seconds(j, n_train)):>9}  "
                             f"{tables.candidate_name(j)}: {tables.hyper_text(m, j.config)}")
                if j.reason:
                    lines.append(f"        why: {j.reason}")
            if cfg.population:
                for pop_dir, members in population_groups(cj, cfg, Path(cfg.out)):
                    if pop_dir is not None:
                        lines.append(f"    --population: {', '.join(j.name for j in members)} train together "
                                     f"({pop_dir.name})")
            for label, why in cfg.spec.screened_at(m, w).items():
                lines.append(f"    not trained here, {label!r}: {why}")
            for j in sj:
                state, _ = _job_state(j)
                lines.append(f"    {f'{m}_{w}[_cN]_s{j.seed}':<24} "
                             f"{state:<18} {fmt_time(_left_seconds(j, n_train)):>9}  seed {j.seed} of "
                             "the candidate selected on validation")
    lines += ["", f"the call's own work beyond its runs (data, pruning, figures): {fmt_time(FIXED_OVERHEAD_S)}",
              f"total left: {fmt_time(total + FIXED_OVERHEAD_S)}"]
    return "\n".join(lines)


def run_reproduce(
    cfg: ReproduceConfig,
    *,
    data: dict[str, Tensor] | None = None,
    log: Callable[[str], None] | None = None,
    plan_only: bool = False,
    report_only: bool = False,
    callbacks: JobCallbacks | None = None,
) -> dict[str, Any]:
    """Train the cells ``cfg.cells`` (default: all of the budget's), select on validation, and write the
    tables and figures of every cell finished so far in ``cfg.out``.

    Args:
        cfg: the settings (budget, output folder, cells, seeds, device, data).
        data: pre-loaded tensors (keys train_x, train_y, val_x, val_y, test_x, test_y), e.g.
            tiny synthetic data in tests; default: ``cfg.dataset`` through
            :func:`bbb.runs.load_data`. The budget's subset limits apply either way.
        log: where the lines go (default: print): the progress (unless ``cfg.quiet``: then only
            the results, the tables and the files written) and the plan.
        plan_only: print the plan (cells in the order of work, candidates and why, time left)
            and return without training.
        report_only: train nothing; write the tables and figures from the runs finished so far
            (a partial table: cells not finished are rows marked as missing), e.g. while
            another process trains other cells into the same ``cfg.out``.
        callbacks: more callbacks of the job runner (:class:`bbb.runs.JobCallbacks`), called
            after the progress lines', e.g. to follow or stop the runs from a notebook.

    Returns a dict with ``table1`` and ``table2`` (the rows written), ``files`` (written, relative
    to ``cfg.out``), ``selected`` (cell -> run name, None for a cell not finished or diverged),
    ``missing`` (cells not finished), ``complete``, ``trained`` (run names trained or resumed by
    this call), ``busy`` (runs skipped because another process was training them),
    ``estimated_seconds`` and ``seconds``.
    """
    if log is None:
        def log(s: str) -> None:
            print(s, flush=True)
    say = (lambda s: None) if cfg.quiet else log  # progress: not with --quiet
    if plan_only and report_only:
        raise UserError("--plan and --report exclude each other: --plan shows what would train, "
                        "--report writes the tables of what has trained")
    t0 = time.perf_counter()
    out = Path(cfg.out)
    spec = cfg.spec
    old = _manifest(out, cfg)
    first, extra = plan_jobs(cfg)
    n_train_full = 50000
    n_train = min(n_train_full, spec.train_limit or n_train_full)
    if data is not None:
        n_train = min(int(data["train_x"].shape[0]), spec.train_limit or n_train_full)
    todo = [] if report_only else [*first, *extra]
    est = sum(_left_seconds(j, n_train) for j in todo) + FIXED_OVERHEAD_S
    if report_only:
        say(f"bbb reproduce mnist --report: budget {cfg.budget}; the tables and figures of the runs "
            f"finished in {out} (cells not finished are marked); trains nothing")
    else:
        what = f"the {len(spec.cells)} cells" if cfg.all_cells else f"{len(cfg.cells)} cell(s): {cells_text(cfg.cells)}"
        say(f"bbb reproduce mnist: budget {cfg.budget} ({spec.description}); dataset {cfg.dataset}; "
            f"{len(todo)} training runs ({len(first)} for {what}"
            + (f", {len(extra)} extra seeds" if extra else "") + f") -> {out}")
        say(f"estimated time left: {fmt_time(est)} (a run's own pace once it has trained an epoch, else "
            "measured seconds per epoch on a quiet 2-core CPU; "
            + ("a GPU is much faster" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
               else "busy cores are slower")
            + "); runs already finished in --out are skipped")
        if cfg.cuda_graph:
            say("--cuda-graph: the runs' steps replay from CUDA graphs (IVON's train eagerly)")
    if plan_only:
        log(_plan_text(cfg, first, extra, n_train))
        return {"table1": [], "table2": [], "files": [], "selected": {}, "trained": [], "busy": [], "missing": [],
                "complete": False, "estimated_seconds": est, "seconds": time.perf_counter() - t0}
    if report_only and not (out / "runs").is_dir():
        raise UserError(f"{out} holds no runs yet, so there is nothing to report; train cells "
                        f"first (see '{command_line(cfg, '--plan')}')")

    if not report_only:  # a device that is not there: refused before the folder or its manifest is written
        resolve_device(cfg.device)
    if data is None:
        data = T.model.load_data(T.TrainConfig(dataset=cfg.dataset, data_dir=cfg.data_dir, device="cpu"))
    missing_keys = [k for k in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y") if k not in data]
    if missing_keys:
        raise UserError(f"data is missing {', '.join(missing_keys)}")
    data = limit_data(data, spec)
    if data["val_x"].shape[0] == 0:
        raise UserError("model selection needs a validation split, but it is empty")
    if data["test_x"].shape[0] == 0:
        raise UserError("the test split is empty")

    out.mkdir(parents=True, exist_ok=True)
    manifest = {**old, "experiment": cfg.experiment, "budget": cfg.budget, "dataset": cfg.dataset,
                "seeds": cfg.seeds if not report_only else old.get("seeds", cfg.seeds),
                "device": cfg.device, "num_train": int(data["train_x"].shape[0]),
                "num_val": int(data["val_x"].shape[0]), "num_test": int(data["test_x"].shape[0])}
    trained: list[str] = []
    busy: list[str] = []
    if not report_only:
        manifest.update({"status": "running", "estimated_seconds": round(est, 1),
                         "cells_last_call": cells_text(cfg.cells)})
        atomic_write_json(out / "reproduce.json", manifest)
        trained = _train_cells(cfg, first, extra, data, n_train, say, out, callbacks, busy)

    res = _write_outputs(cfg, out, data, say)
    seconds = time.perf_counter() - t0
    manifest.update({
        "status": "complete" if res["complete"] else "partial", "files": res["files"],
        "seconds_last_call": round(seconds, 1), "selected": res["selected"],
        "cells_done": res["done"], "cells_missing": res["missing"], "runs": res["runs"],
        "trained_last_call": trained, "busy_last_call": busy,
    })
    atomic_write_json(out / "reproduce.json", manifest)
    _print_summary(res["table1"], res["table2"], log)
    log(f"wrote {', '.join(res['files'])} in {out} ({fmt_time(seconds)})"
        + (f"; not finished yet: {', '.join(res['missing'])}" if res["missing"] else ""))
    if busy:
        log(f"skipped {len(busy)} run(s) that another process is training ({', '.join(busy)}); once it "
            f"has finished, run '{command_line(cfg)}' again for what waits on them (a cell's extra seeds)")
    return {"table1": res["table1"], "table2": res["table2"], "files": res["files"], "trained": trained,
            "busy": busy,
            "selected": res["selected"], "missing": res["missing"], "complete": res["complete"],
            "estimated_seconds": est, "seconds": seconds}


def _train_cells(cfg: ReproduceConfig, first: Sequence[Job], extra: Sequence[Job], data: dict[str, Tensor],
                 n_train: int, log: Callable[[str], None], out: Path, callbacks: JobCallbacks | None,
                 busy: list[str]) -> list[str]:
    """Train (or resume, or skip when finished) every candidate of the requested cells in the
    order of work, then the extra seeds of the candidate each seed cell selected on validation.
    Runs that another process is training are skipped and named in ``busy``. Returns the names
    of the runs trained or resumed."""
    progress = Progress([*first, *extra], n_train, log)
    runner_callbacks = CallbackList([progress, callbacks])
    if cfg.population:  # a cell's candidates that differ only in what a population's members may, together
        train_populations(first, data, cfg, runner_callbacks, log, out, busy)
    else:
        train_jobs(first, data, cfg, runner_callbacks, log, out, busy=busy)
    for name in busy:
        progress.remaining.pop(name, None)
    selected = {c: _selection(cfg, c, out) for c in cfg.cells}
    seeds: list[Job] = []
    for placeholder in extra:
        c = selected[placeholder.cell]
        if isinstance(c, str) and cfg.seeds_of is not None:
            log(f"seed {placeholder.seed} of {cells_text([placeholder.cell])}: a seed of c{cfg.seeds_of} trained ahead "
                f"of the selection (--seeds-of); it counts only if the validation error selects c{cfg.seeds_of} "
                f"({c})")
            c = cfg.seeds_of
        if not isinstance(c, int):
            progress.skip(placeholder)
            if c:
                log(f"seed {placeholder.seed} of {cells_text([placeholder.cell])} not trained: it is a seed of "
                    f"the candidate selected on validation, and {c}")
            continue
        job = make_job(cfg, placeholder.method, placeholder.hidden, c, placeholder.seed)
        progress.remaining[job.name] = progress.remaining.pop(placeholder.name, 0.0)
        seeds.append(job)
    if cfg.population:
        train_populations(seeds, data, cfg, runner_callbacks, log, out, busy)
    else:
        train_jobs(seeds, data, cfg, runner_callbacks, log, out, busy=busy)
    return progress.trained


def _selection(cfg: ReproduceConfig, cell: tuple[str, int], out: Path) -> int | str | None:
    """The candidate of ``cell`` selected on validation among all of its candidates, as found
    in ``out`` (those trained by this call and by earlier ones: ``--candidates``). None: every
    candidate diverged; a text: what is not finished yet."""
    st = tables.cell_state(cfg, cell[0], cell[1], out)
    if st.selected is None and st.status != "diverged":
        return f"not every candidate of the cell has finished ({'; '.join(st.pending)})"
    return st.selected


def _write_outputs(cfg: ReproduceConfig, out: Path, data: dict[str, Tensor],
                   log: Callable[[str], None]) -> dict[str, Any]:
    """Table 1 (every cell: reported, diverged or marked missing), Figures 2 and 3 (the 2x1200
    cells finished so far), Table 2 and Figure 4 (once BBB mixture 2x1200 is finished), all
    read from the runs in ``out``."""
    spec = cfg.spec
    cells = {c: tables.cell_state(cfg, c[0], c[1], out) for c in spec.cells}
    table_cells = [cells[(m, w)] for m in spec.methods for w in WIDTHS]
    table1 = [tables.table1_row(cfg, c.method, c.hidden, c.cands, c.seeds, c.selected, c.summaries,
                          status=c.status, pending=c.pending) for c in table_cells]
    table1 += laplace_rows(cfg, cells, data)  # the SGD cells' networks with a last-layer Laplace
    table1 += ensemble_rows(cfg, cells, data)  # the SGD cells' seeds as one deep ensemble
    files: list[str] = []
    atomic_write_text(out / "table1.csv", csv_text(TABLE1_COLUMNS, table1))
    atomic_write_text(out / "table1.md", tables.table1_md(cfg, table1, [j for c in table_cells for j in c.cands], (
        int(data["train_x"].shape[0]), int(data["val_x"].shape[0]), int(data["test_x"].shape[0]))))
    files += ["table1.csv", "table1.md"]
    log(f"wrote {out / 'table1.md'}")

    top = max(WIDTHS)
    chosen = {m: next(j for j in c.cands if j.candidate == c.selected)
              for (m, w), c in cells.items() if w == top and c.selected is not None}
    # the networks of Figures 3-4 and Table 2: the selected run, or where its checkpoint is not on
    # this machine (a machine lost with it), an extra seed of the same candidate that has one
    # (read from --checkpoints when given: the run directory with the job's checkpoint)
    stored = {m: [replace(j, run_dir=cfg.checkpoint_dir(j)) for j in (job, *cells[(m, top)].seeds)]
              for m, job in chosen.items()}
    trained = {m: next((j for j in js if _has_last(j)), js[0]) for m, js in stored.items()}
    fig_methods = [m for m, _ in FIG2_METHODS if m in spec.methods]
    if any(m in chosen for m in fig_methods):
        files += figure2(out, chosen, spec.log_epochs, methods=fig_methods)
        absent = [j.name for j in trained.values() if not _has_last(j)]
        if absent:
            log(f"Figure 3 not rewritten: {_absent_text(absent, cfg)}")
        else:
            files += figure3(out, trained, methods=fig_methods)
    table2: list[dict[str, Any]] = []
    mix = cells[("bbb_mixture", top)]
    if mix.selected is not None and not _has_last(trained["bbb_mixture"]):
        log(f"Table 2 and Figure 4 not rewritten: {_absent_text([chosen['bbb_mixture'].name], cfg)}")
    elif mix.selected is not None:
        job = trained["bbb_mixture"]
        db = pruning_table.snr_db_of(job)
        snr = pruning_table.snr_stats(db)
        table2 = pruning_table.table2_rows(cfg, job, data)
        atomic_write_text(out / "table2_pruning.csv", csv_text(TABLE2_COLUMNS, table2))
        atomic_write_text(out / "table2_pruning.md", pruning_table.table2_md(
            cfg, table2, job, snr,
            instead_of=None if job.name == chosen["bbb_mixture"].name else chosen["bbb_mixture"]))
        files += ["table2_pruning.csv", "table2_pruning.md"]
        files += figure4(out, job, db)
        log(pruning_table.snr_sentence(snr))
    elif mix.status == "diverged":
        log("the 2x1200 BBB (scale mixture) cell diverged: no Table 2 and no Figure 4")
    else:
        log("the 2x1200 BBB (scale mixture) cell is not finished: no Table 2 and no Figure 4 yet")
    runs = sorted(name for c in cells.values() for name in c.summaries)
    return {
        "table1": table1, "table2": table2, "files": files, "runs": runs,
        "selected": {f"{m}_{w}": (None if c.selected is None else run_name(m, w, c.selected, 0))
                     for (m, w), c in cells.items()},
        "done": [f"{m}_{w}" for (m, w), c in cells.items() if c.complete],
        "missing": [f"{m}_{w}" for (m, w), c in cells.items() if not c.complete],
        "complete": all(c.complete for c in cells.values()),
    }


def _has_last(job: Job) -> bool:
    """Whether ``job``'s final checkpoint is on this machine: a finished run's small files
    (config, metrics, summary) may come from a results folder without the checkpoints."""
    return (job.run_dir / "last.pt").is_file()


def _absent_text(names: Sequence[str], cfg: ReproduceConfig) -> str:
    where = f"in {cfg.checkpoints}" if cfg.checkpoints is not None else "on this machine"
    return (f"the checkpoint (last.pt) of {', '.join(names)} is not {where} (only its config, metrics "
            "and summary are), so the files made from it are kept as they are; --checkpoints DIR "
            "names a folder holding <run>/last.pt")


def _print_summary(table1: Sequence[dict[str, Any]], table2: Sequence[dict[str, Any]],
                   log: Callable[[str], None]) -> None:
    log("")
    width = max([26, *(len(METHOD_NAMES[r["method"]]) for r in table1)])
    log(f"{'method':<{width}} {'units':>5} {'ours':>16} {'paper':>6}")
    for r in table1:
        ours = (f"{r['test_error']:.2f}%" if r.get("status") == "ok"
                else {**tables.MISSING_TEXT, "skipped": "skipped"}.get(r.get("status", ""), "diverged"))
        if r.get("n_seeds", 0) > 1:
            ours += f" +-{r['test_error_sd']:.2f}"
        paper = "-" if r.get("paper_test_error") is None else f"{r['paper_test_error']:.2f}%"
        log(f"{METHOD_NAMES[r['method']]:<{width}} {r['hidden']:>5} {ours:>16} {paper:>6}")
    if table2:
        log("")
        log(f"{'removed':>8} {'#weights':>9} {'ours':>7} {'paper':>6}")
        for r in table2:
            paper = "-" if r["paper_test_error"] is None else f"{r['paper_test_error']:.2f}%"
            log(f"{100 * r['fraction_removed']:>7g}% {weights_text(r['weights_left']):>9} "
                f"{r['test_error']:>6.2f}% {paper:>6}")
