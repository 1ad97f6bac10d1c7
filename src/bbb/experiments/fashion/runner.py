"""Running ``bbb reproduce fashion``: the validation jobs (BBB's and MC dropout's grids, on the
first seed), the choice of each grid's setting by validation NLL, then the test jobs; in worker
processes (several may share one GPU), resumable (each job checkpoints every epoch under
``<out>/jobs/<job>/``, and a finished job is one JSON beside it), with one progress bar; then the
tables."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

import torch

from ...devices import resolve_device
from ...errors import UserError
from ...io import atomic_write_json
from ...runs.jobs import check_job_options, check_validation_seeds, worker_pool
from ..ties import nan_worst
from ..uci.report import portable_command
from .laplace import laplace_rows
from .settings import (
    ENSEMBLE_OF,
    ENSEMBLE_SIZE,
    FashionConfig,
    FashionMethod,
    Phase,
    Setting,
    ensemble_member_seed,
    grid_of,
    validated,
)
from .train import Job, run_job

__all__ = ["plan", "choose", "run_fashion"]

#: a job's relative cost, to start the longest first
_COST = {FashionMethod.BBB: 3.0, FashionMethod.IVON_OPT: 2.0, FashionMethod.IVON: 2.0, FashionMethod.MC_DROPOUT: 1.0,
         FashionMethod.ADAMW: 1.0}


def plan(cfg: FashionConfig, phase: Phase, chosen: dict[str, Setting] | None = None) -> list[Job]:
    """The jobs of one phase. Validation: each setting of a method with a grid (BBB, MC dropout,
    AdamW: also for the ensembles and Laplace, made of their networks), on the first seed. Test:
    each method and seed at its chosen setting (none yet: no job), for an ensemble the networks of
    its members at their method's chosen setting (``ENSEMBLE_OF``: AdamW's for ``ensemble``, BBB's
    for ``bbb_ensemble``; seed + 1000 j, member 0 the seed's own row's), for ``laplace`` the AdamW
    row's networks (:mod:`~bbb.experiments.fashion.laplace` fits it after them)."""
    jobs: dict[str, Job] = {}
    if phase is Phase.VALIDATION:
        for m in validated(cfg.methods):
            for s in grid_of(m):
                j = Job(m, cfg.seeds[0], phase, s)
                jobs[j.name] = j
        return list(jobs.values())
    for m in cfg.methods:
        grid = grid_of(m)
        if m is FashionMethod.LAPLACE or m in ENSEMBLE_OF:
            member = ENSEMBLE_OF.get(m, FashionMethod.ADAMW)
            setting = (chosen or {}).get(str(member))
            if setting is None:  # the members' setting not chosen yet: no job
                continue
            size = ENSEMBLE_SIZE if m in ENSEMBLE_OF else 1
            for seed in cfg.seeds:
                for k in range(size):
                    j = Job(member, ensemble_member_seed(seed, k), phase, setting)
                    jobs[j.name] = j
            continue
        pick = grid[0] if len(grid) == 1 else (chosen or {}).get(str(m))
        if pick is not None:
            for seed in cfg.seeds:
                j = Job(m, seed, phase, pick)
                jobs[j.name] = j
    return list(jobs.values())


def choose(results: list[dict[str, Any]], grid: tuple[Setting, ...]) -> tuple[Setting, dict[str, float]]:
    """The setting with the lowest validation NLL (the validation images, never the test set); with
    every setting's NLL."""
    nll = {r["setting"]: r["nll"] for r in results}
    best = min(grid, key=lambda s: nan_worst(nll[s.label()]))  # (a diverged NaN never chosen)
    return best, nll


def _choices(cfg: FashionConfig, folder: Path, val_jobs: list[Job]) -> tuple[dict[str, Setting], list[dict[str, Any]]]:
    """Each validated method's chosen setting, where its whole grid is finished, and the sweep's rows."""
    chosen: dict[str, Setting] = {}
    sweeps: list[dict[str, Any]] = []
    for m in validated(cfg.methods):
        grid = grid_of(m)
        val_res = [r for j in val_jobs if j.method is m and (r := load_result(folder, j)) is not None]
        if len(val_res) < len(grid):
            continue
        best, nll = choose(val_res, grid)
        chosen[str(m)] = best
        sweeps += [{"method": str(m), "setting": s, "val_nll": v, "val_acc": next(
            r["acc"] for r in val_res if r["setting"] == s), "chosen": s == best.label()} for s, v in nll.items()]
    return chosen, sweeps


def load_result(folder: Path, job: Job) -> dict[str, Any] | None:
    path = folder / f"{job.name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _work(job: Job, cfg: FashionConfig, folder: Path, queue: Any) -> dict[str, Any]:
    return run_job(job, cfg.schedule, cfg.data_dir, resolve_device(cfg.device), folder, lambda n: queue.put(n),
                   allow_device_change=cfg.allow_device_change)


def _run_phase(cfg: FashionConfig, jobs: list[Job], folder: Path, bar: Any, pool: Any, queue: Any,
               log: Callable[[str], None]) -> list[str]:
    """Train ``jobs`` (the longest first), writing each result on arrival; returns the failures
    (one line each: the others go on)."""
    todo = sorted(jobs, key=lambda j: (j.phase is Phase.VALIDATION, _COST.get(j.method, 1.0)
                                       * (2 if j.setting.estimator == "flipout" else 1)), reverse=True)
    failed = []

    def done(job: Job, res: dict[str, Any]) -> None:
        atomic_write_json(folder / f"{job.name}.json", res)
        log(f"{job.name}: acc {res['acc']:.2f}% NLL {res['nll']:.4f} ECE {res['ece']:.4f} "
            f"({res['seconds_per_epoch']:.2f} s/epoch)")

    if pool is None:
        for job in todo:
            try:
                done(job, run_job(job, cfg.schedule, cfg.data_dir, resolve_device(cfg.device), folder,
                                  bar.update if bar is not None else (lambda n: None),
                                  allow_device_change=cfg.allow_device_change))
            except UserError as e:
                failed.append(f"{job.name}: {e}")
                log(failed[-1])
        return failed
    running: dict[Future, Job] = {pool.submit(_work, j, cfg, folder, queue): j for j in todo}
    try:
        while running:
            finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            while not queue.empty():
                n = queue.get()
                if bar is not None:
                    bar.update(n)
            for f in finished:
                job = running.pop(f)
                try:
                    done(job, f.result())
                except Exception as e:  # one job's failure (a bad setting, a crash): the others go on
                    failed.append(f"{job.name}: {type(e).__name__}: {e}".splitlines()[0])
                    log(failed[-1])
    finally:
        for f in running:
            f.cancel()
    return failed


def run_fashion(cfg: FashionConfig, command: str = "", log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train what is missing under ``cfg.out`` and write the tables; returns the summary (with
    ``failed``: the jobs that raised, one line each)."""
    from .report import write_report

    cfg.check()
    out = Path(cfg.out)
    folder = out / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    epochs = cfg.schedule.epochs

    def missing(jobs: list[Job]) -> list[Job]:
        return [j for j in jobs if not (folder / f"{j.name}.json").is_file()]

    dev = resolve_device(cfg.device)
    prev_path = out / "run.json"
    prev = json.loads(prev_path.read_text()) if prev_path.is_file() else None
    meta: dict[str, Any] = {"command": portable_command(command)[0], "budget": str(cfg.budget), "epochs": epochs,
                            "methods": [str(m) for m in cfg.methods], "seeds": list(cfg.seeds),
                            "device": dev.type + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda"
                                                  else ""), "workers": cfg.workers, "threads": cfg.threads}
    if not cfg.report_only:  # a job's file is reused by its name, which the budget is not in
        check_job_options(out, "bbb reproduce fashion", {"--budget": str(cfg.budget)},
                          {"--budget": prev["budget"]} if prev is not None and "budget" in prev else None)
    elif prev is not None and prev.get("budget") not in (None, str(cfg.budget)):  # (its tables labelled another's)
        raise UserError(f"{out} holds jobs trained with --budget {prev['budget']}, not {cfg.budget}: give --budget "
                        f"{prev['budget']} with --report")
    check_validation_seeds(out, cfg.seeds[:1], "the first of --seeds", record=not cfg.report_only)
    if not cfg.report_only:
        if prev is not None:
            meta["commands_before"] = [*prev.get("commands_before", []), prev.get("command", "")]
            meta["wall_seconds_before"] = round(prev.get("wall_seconds", 0.0) + prev.get("wall_seconds_before", 0.0),
                                                1)
        # written now too: a run killed before its end leaves its command, device and workers
        atomic_write_json(prev_path, {**meta, "wall_seconds": 0.0, "running": True})
    val_jobs = plan(cfg, Phase.VALIDATION)
    placeholder = {str(m): grid_of(m)[0] for m in (*cfg.methods, FashionMethod.ADAMW, *ENSEMBLE_OF.values())}
    todo_val = [] if cfg.report_only else missing(val_jobs)
    # the test jobs as far as they are known now: the choices validation has made, a guess for the others
    todo_guess = [] if cfg.report_only else missing(plan(cfg, Phase.TEST, {**placeholder,
                                                                         **_choices(cfg, folder, val_jobs)[0]}))
    total = epochs * (len(todo_val) + len(todo_guess))
    bar = None
    if not cfg.quiet and total:
        from ...progress import progress_bar

        bar = progress_bar(total=total, desc="fashion epochs", unit="epoch", leave=True, lines_every=60.0)
    quiet_log = (lambda s: None) if cfg.quiet else log
    failed: list[str] = []
    with contextlib.ExitStack() as stack:
        pool, queue = stack.enter_context(worker_pool(cfg.workers if total else 1, cfg.threads,
                                                      "bbb reproduce fashion"))
        if bar is not None:
            stack.callback(bar.close)
        fixed = [j for j in todo_guess if len(grid_of(j.method)) == 1]  # need no choice: beside validation
        if todo_val or fixed:
            failed += _run_phase(cfg, todo_val + fixed, folder, bar, pool, queue, quiet_log)
        chosen, sweeps = _choices(cfg, folder, val_jobs)
        test_jobs = plan(cfg, Phase.TEST, chosen)
        if not cfg.report_only:
            tried = {f.split(":", 1)[0] for f in failed}  # a job failed beside validation is not tried twice
            todo = [j for j in missing(test_jobs) if j.name not in tried]
            if bar is not None:  # the guess made before validation chose: the bar's end is now known
                bar.total = bar.n + epochs * len(todo)
            failed += _run_phase(cfg, todo, folder, bar, pool, queue, quiet_log)
    results = {j.name: r for j in test_jobs if (r := load_result(folder, j)) is not None}
    extra: list[dict[str, Any]] = []
    if FashionMethod.LAPLACE in cfg.methods:
        from ...laplace import INSTALL, laplace_available

        if laplace_available():
            extra = laplace_rows(cfg, folder, results, chosen.get(str(FashionMethod.ADAMW)))
        else:  # a report without the laplace extra (a run stops before training: the command's check)
            quiet_log(f"laplace: no rows (laplace-torch is not installed here: {INSTALL})")
    val_results = [r for j in val_jobs if (r := load_result(folder, j)) is not None]
    meta.update({"wall_seconds": round(time.perf_counter() - start, 1),
                 "job_seconds": round(sum(r["train_seconds"] + r["eval_seconds"]
                                          for r in [*results.values(), *val_results]), 1),
                 "missing": [j.name for j in plan(cfg, Phase.TEST, {**placeholder, **chosen}) if j.name not in results],
                 "failed": failed})
    if cfg.report_only and prev is not None:  # the tables of an earlier run: its own command, device and times
        meta = {**prev, "missing": meta["missing"], "failed": prev.get("failed", []),
                "job_seconds": meta["job_seconds"],
                "report_command": portable_command(command)[0]}  # its --seeds and --methods pick the rows
        meta.pop("running", None)
    atomic_write_json(prev_path, meta)
    written = write_report(out, cfg, test_jobs, results, sweeps, meta, extra, chosen)
    return {"written": [str(p) for p in written], **meta}
