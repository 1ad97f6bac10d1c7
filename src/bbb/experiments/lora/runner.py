"""Running ``bbb reproduce lora``: the backbones (pretrained once, cached), the validation jobs,
the choice of each method's setting, then the test jobs; in worker processes, resumable (one
JSON per finished job under ``<out>/jobs``), with one progress bar; then the tables and figures."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ...io import atomic_torch_save, atomic_write_json
from ...runs.jobs import check_job_options, check_validation_seeds, worker_pool
from ..ties import nan_worst
from ..uci.report import portable_command
from .backbones import Backbone, TaskData, load_or_pretrain, task_data
from .report import SETTING_KEYS
from .settings import (
    ENSEMBLE_SIZE,
    SETTING_FROM,
    VAL_SEEDS,
    Arch,
    LoraExpConfig,
    LoraMethod,
    Phase,
    Setting,
    Task,
    grid_of,
)
from .train import ADAPTERS_KEY, ADAPTERS_SUFFIX, Job, map_job, run_job

__all__ = ["plan", "choose", "run_lora", "write_events"]

_CACHE: dict[tuple[str, str], tuple[Backbone, TaskData]] = {}


def _context(cfg: LoraExpConfig, arch: Arch, task: Task, log: Callable[[str], None] | None = None
             ) -> tuple[Backbone, TaskData]:
    key = (str(arch), str(task))
    if key not in _CACHE:
        sched = cfg.schedule
        bb, _ = load_or_pretrain(arch, Path(cfg.out) / "backbones", sched.pretrain_steps, cfg.backbone_seed,
                                 cfg.data_dir, log)
        _CACHE[key] = (bb, task_data(task, bb, sched.n_test, sched.n_ood, cfg.data_dir))
    return _CACHE[key]


def plan(cfg: LoraExpConfig, phase: Phase, chosen: dict[tuple[str, str, int, str], Setting] | None = None
         ) -> list[Job]:
    """The jobs of one phase: in validation, one per method with a grid (MAP, BBB) and few-shot
    set of the first ``VAL_SEEDS`` seeds, over its grid (MAP's too where only laplace asks for it);
    in test, one per method and few-shot set at the chosen setting (laplace: MAP's choice; a
    method whose validation is not finished has none)."""
    jobs = []
    for arch in cfg.archs:
        for task in cfg.tasks:
            for k in cfg.shots:
                for i, seed in enumerate(cfg.run_seeds):
                    for m in (_validated(cfg) if phase is Phase.VALIDATION else cfg.methods):
                        grid = grid_of(SETTING_FROM.get(m, m))
                        if phase is Phase.VALIDATION:
                            if len(grid) > 1 and i < VAL_SEEDS:
                                jobs.append(Job(arch, task, k, seed, m, phase, grid))
                            continue
                        key = (str(arch), str(task), k, str(SETTING_FROM.get(m, m)))
                        pick = grid[0] if len(grid) == 1 else (chosen or {}).get(key)
                        if pick is not None:
                            jobs.append(Job(arch, task, k, seed, m, phase, (pick,)))
    return jobs


def _validated(cfg: LoraExpConfig) -> list[LoraMethod]:
    """The methods whose grids validation runs: those asked for (less those that take another's
    choice) and the methods whose choice those take."""
    out = [SETTING_FROM.get(m, m) for m in cfg.methods]
    return list(dict.fromkeys(out))


def choose(results: list[dict[str, Any]], grid: tuple[Setting, ...]) -> tuple[Setting, dict[str, float]]:
    """The setting with the lowest held-out NLL, averaged over the seeds' held-out slices (the
    slices of the few-shot data, never the test set); with every setting's mean NLL."""
    means = {s.label(): sum(r["settings"][s.label()]["nll"] for r in results) / len(results) for s in grid}
    best = min(grid, key=lambda s: nan_worst(means[s.label()]))  # (a diverged NaN never chosen)
    return best, means


def _finished(folder: Path, job: Job) -> bool:
    """Whether ``job`` has a result file for its settings (a test job rerun at another choice,
    e.g. after seeds were added, trains again)."""
    r = _load(folder / f"{job.name}.json")
    return r is not None and set(r["settings"]) == {s.label() for s in job.settings}


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _work(job: Job, cfg: LoraExpConfig, queue: Any, adapters: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    bb, data = _context(cfg, job.arch, job.task)
    return run_job(job, bb, data, cfg.schedule, cfg.rank, cfg.alpha, lambda n: queue.put(n), adapters)


def _steps(job: Job, steps: int, cfg: LoraExpConfig | None = None) -> int:
    """The training steps of ``job``: a laplace job trains none where the map job's network is
    there to reuse (its map job asked for too)."""
    if job.method is LoraMethod.LAPLACE and cfg is not None and LoraMethod.MAP in cfg.methods:
        return 0
    return steps * len(job.settings) * (ENSEMBLE_SIZE if job.method is LoraMethod.ENSEMBLE else 1)


def _adapters(folder: Path, job: Job) -> dict[str, torch.Tensor] | None:
    """A laplace job's MAP network: the adapters its map job stored, None where there are none
    (a map job finished before they were stored, or not asked for: the laplace job trains them)."""
    if job.method is not LoraMethod.LAPLACE:
        return None
    path = folder / f"{map_job(job).name}{ADAPTERS_SUFFIX}"
    stored = torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None
    if stored is None or stored.get("setting") != job.settings[0].label():
        return None  # none, or of map at another setting (a choice made again): not this network
    return stored["adapters"]


def _store(folder: Path, job: Job, result: dict[str, Any], cfg: LoraExpConfig) -> None:
    """Write a job's result; a map test job's adapters beside it where laplace asks for them."""
    adapters = result.pop(ADAPTERS_KEY, None)
    if adapters is not None and LoraMethod.LAPLACE in cfg.methods:
        atomic_torch_save(folder / f"{job.name}{ADAPTERS_SUFFIX}",
                          {"setting": job.settings[0].label(), "adapters": adapters})
    atomic_write_json(folder / f"{job.name}.json", result)


def _run_phase(cfg: LoraExpConfig, jobs: list[Job], folder: Path, bar: Any, pool: Any, queue: Any) -> None:
    """Train ``jobs`` (those not finished), the longest first, writing each result on arrival."""
    steps = cfg.schedule.steps
    todo = sorted(jobs, key=lambda j: (j.arch is Arch.VIT, _steps(j, steps)), reverse=True)
    if pool is None:
        for job in todo:
            bb, data = _context(cfg, job.arch, job.task)
            _store(folder, job, run_job(job, bb, data, cfg.schedule, cfg.rank, cfg.alpha,
                                        bar.update if bar is not None else (lambda n: None),
                                        _adapters(folder, job)), cfg)
        return
    running: dict[Future, Job] = {pool.submit(_work, j, cfg, queue, _adapters(folder, j)): j for j in todo}
    try:
        while running:
            finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            while not queue.empty():
                n = queue.get()
                if bar is not None:
                    bar.update(n)
            for f in finished:
                job = running.pop(f)
                _store(folder, job, f.result(), cfg)
    finally:
        for f in running:
            f.cancel()


def run_lora(cfg: LoraExpConfig, command: str = "", log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train what is missing under ``cfg.out`` and write the tables; returns the summary."""
    from .report import write_report

    cfg.check()
    out = Path(cfg.out)
    folder = out / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    if not cfg.report_only:  # a job's file is reused by its name, which the budget is not in
        before = (_load(out / "run.json") or {}).get("config", {})  # (a folder trained before options.json)
        check_job_options(out, "bbb reproduce lora", {"--budget": str(cfg.budget)},
                          {"--budget": before["budget"]} if "budget" in before else None)
    chosen_on = cfg.run_seeds[:VAL_SEEDS]
    check_validation_seeds(out, chosen_on, "the first of --seeds" if len(chosen_on) == 1 else
                           f"the first {len(chosen_on)} of --seeds", record=not cfg.report_only)
    start = time.perf_counter()
    backbones = {}
    for arch in cfg.archs:  # pretrained here, once, before any worker starts
        backbones[str(arch)] = load_or_pretrain(arch, out / "backbones", cfg.schedule.pretrain_steps,
                                                cfg.backbone_seed, cfg.data_dir, log)[1]
    val_jobs = plan(cfg, Phase.VALIDATION)

    def missing(jobs: list[Job]) -> list[Job]:
        return [j for j in jobs if not _finished(folder, j)]

    steps = cfg.schedule.steps
    todo_val = [] if cfg.report_only else missing(val_jobs)
    # the test phase's size before the choices are known: one setting per job
    test_guess = [j for j in plan(cfg, Phase.TEST, _any_choice(cfg)) if not (folder / f"{j.name}.json").is_file()]
    total = 0 if cfg.report_only else sum(_steps(j, steps, cfg) for j in todo_val + test_guess)
    bar = None
    if not cfg.quiet and total:
        from ...progress import progress_bar

        # a bar on a terminal, a plain line a minute in a log
        bar = progress_bar(total=total, desc="lora steps", unit="step", leave=True, lines_every=60.0)
    with contextlib.ExitStack() as stack:
        pool, queue = stack.enter_context(worker_pool(cfg.workers if total else 1, cfg.threads,
                                                      "bbb reproduce lora"))
        if bar is not None:
            stack.callback(bar.close)
        if todo_val:
            _run_phase(cfg, todo_val, folder, bar, pool, queue)
        chosen, sweeps = {}, []
        for key, jobs in _groups(val_jobs).items():
            results = [r for r in (_load(folder / f"{j.name}.json") for j in jobs) if r is not None]
            if len(results) < len(jobs):
                continue
            best, means = choose(results, jobs[0].settings)
            chosen[key] = best
            sweeps += [{"arch": key[0], "task": key[1], "shots": key[2], "method": key[3], "setting": s,
                        "val_nll": v, "chosen": s == best.label()} for s, v in means.items()]
        test_jobs = plan(cfg, Phase.TEST, chosen)
        if not cfg.report_only:  # the laplace jobs after the map jobs whose networks they take
            todo = missing(test_jobs)
            _run_phase(cfg, [j for j in todo if j.method is not LoraMethod.LAPLACE], folder, bar, pool, queue)
            _run_phase(cfg, [j for j in todo if j.method is LoraMethod.LAPLACE], folder, bar, pool, queue)
    done = {j.name: _load(folder / f"{j.name}.json") for j in test_jobs if _finished(folder, j)}
    finished = {k: v for k, v in done.items() if v is not None}
    meta = {"command": portable_command(command)[0], "config": {k: (list(v) if isinstance(v, tuple) else v)
                                           for k, v in asdict(cfg).items() if k != "loggers"},
            "wall_seconds": round(time.perf_counter() - start, 1),
            "job_seconds": round(sum(r.get("seconds", 0.0) for r in finished.values()) + sum(
                r.get("seconds", 0.0) for j in val_jobs if (r := _load(folder / f"{j.name}.json")) is not None), 1),
            "backbones": backbones, "missing": [j.name for j in plan(cfg, Phase.TEST, _any_choice(cfg))
                                                if j.name not in finished]}
    meta["config"]["out"] = "$OUT"  # as a user runs it from a clone (portable_command)
    if meta["config"]["data_dir"] is not None:
        meta["config"]["data_dir"] = "$BBB_DATA"
    prev = _load(out / "run.json")
    if cfg.report_only:
        if prev is not None:  # the tables of a finished run: its own command and times
            meta = {**prev, "missing": meta["missing"], "command": portable_command(prev.get("command", ""))[0],
                    "commands_before": [portable_command(c)[0] for c in prev.get("commands_before", [])],
                    "config": {**prev.get("config", {}), "out": "$OUT"},
                    "report_command": portable_command(command)[0]}  # its options pick the rows
            atomic_write_json(out / "run.json", meta)  # the same record, its commands as run from a clone
    else:
        if prev is not None:
            meta["wall_seconds_before"] = round(prev.get("wall_seconds", 0.0) + prev.get("wall_seconds_before", 0.0), 1)
            meta["commands_before"] = [portable_command(c)[0] for c in
                                       (*prev.get("commands_before", []), prev.get("command", ""))]
        atomic_write_json(out / "run.json", meta)
    val_seconds = {}
    for j in val_jobs:
        r = _load(folder / f"{j.name}.json") if _finished(folder, j) else None
        if r is not None and "seconds" in r:
            val_seconds[j.name] = float(r["seconds"])
    chosen_by = {j.name: val_seconds[v] for j in test_jobs
                 if (v := j.name.removesuffix(f"-{Phase.TEST.value}") + f"-{Phase.VALIDATION.value}") in val_seconds}
    written = write_report(out, test_jobs, finished, sweeps, meta, chosen_by)
    if cfg.loggers and write_events(out, cfg, [j for j in val_jobs + test_jobs if _finished(folder, j)]):
        written.append(out / "tb")
    return {"written": [str(p) for p in written], **meta}


def _any_choice(cfg: LoraExpConfig) -> dict[tuple[str, str, int, str], Setting]:
    """A placeholder choice for every grid (to count the test jobs before validation ends)."""
    return {(str(a), str(t), k, str(m)): grid_of(m)[0] for a in cfg.archs for t in cfg.tasks for k in cfg.shots
            for m in _validated(cfg)}


def _groups(jobs: list[Job]) -> dict[tuple[str, str, int, str], list[Job]]:
    out: dict[tuple[str, str, int, str], list[Job]] = {}
    for j in jobs:
        out.setdefault((*j.group, str(j.method)), []).append(j)
    return out


#: a test row's entries that are not metrics (the setting; the curve and the reliability bins, logged otherwise)
_NOT_METRICS = {*SETTING_KEYS, "curve", "bins"}


def write_events(out: Path, cfg: LoraExpConfig, jobs: list[Job]) -> int:
    """``--log``: the finished ``jobs``' files as event files, replacing each job's earlier ones: a
    test job in ``out/tb/<job>``, its NLL, ECE and accuracy against training steps on the first
    test images (``curve/``, the points it stored) and its final test metrics (``test/``, at the
    last step); a validation job in ``out/tb/<job>/<setting>``, each setting's held-out scores
    (``val/``, at the last step). Returns the folders written."""
    from ...runs.loggers import write_points

    last = cfg.schedule.steps
    n = 0
    for job in jobs:
        r = _load(out / "jobs" / f"{job.name}.json")
        if r is None:
            continue
        shutil.rmtree(out / "tb" / job.name, ignore_errors=True)
        for label, row in r["settings"].items():
            config = {"job": job.name, "arch": str(job.arch), "task": str(job.task), "shots": job.shots,
                      "seed": job.seed, "method": str(job.method), "phase": str(job.phase), "setting": label,
                      "n_train": r["n_train"], "steps": last}
            metrics = {k: v for k, v in row.items() if k not in _NOT_METRICS and isinstance(v, (int, float))}
            if job.phase is Phase.VALIDATION:
                write_points(cfg.loggers, out / "tb" / job.name / label.replace(" ", "_"), config,
                             [(last, {f"val/{k}": v for k, v in metrics.items()})])
            else:
                points = [(p["step"], {f"curve/{k}": v for k, v in p.items() if k != "step"}) for p in row["curve"]]
                write_points(cfg.loggers, out / "tb" / job.name, config,
                             [*points, (last, {f"test/{k}": v for k, v in metrics.items()})])
            n += 1
    return n
