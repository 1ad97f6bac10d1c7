"""Running ``bbb reproduce uci``: the jobs in order (validation before test), in worker
processes, resumable, with one progress bar; then the tables."""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ...data.uci import UCIData, load_uci
from ...errors import UserError
from ...io import atomic_write_json
from .report import select, select_variant, summarise, write_tables
from .settings import VARIANTS, Phase, UCIConfig, schedule_for
from .train import Job, run_job

__all__ = ["run_uci", "plan_jobs"]

_DATA: dict[tuple[str, str | None], UCIData] = {}


def _data(name: str, data_dir: str | None) -> UCIData:
    key = (name, data_dir)
    if key not in _DATA:
        _DATA[key] = load_uci(name, data_dir, dtype=torch.float64)  # standardised and scored in float64
    return _DATA[key]


def _splits(cfg: UCIConfig, data: UCIData) -> tuple[int, ...]:
    if cfg.splits is None:
        return tuple(range(data.num_splits))
    chosen = tuple(s for s in cfg.splits if s < data.num_splits)
    if not chosen:
        raise UserError(f"{data.name} has splits 0..{data.num_splits - 1}; --splits {cfg.splits} names none")
    return chosen


def plan_jobs(cfg: UCIConfig, name: str, phase: Phase, vals: dict[str, dict[str, Any]] | None = None) -> list[Job]:
    """The jobs of one dataset and phase; a test job's targets are each split's choices."""
    data = _data(name, cfg.data_dir)
    splits = _splits(cfg, data)
    sched = schedule_for(data.train[0].numel(), cfg.budget)
    jobs = []
    for v in VARIANTS:
        targets: dict[int, list[tuple[int, float]]] = {}
        if phase is Phase.TEST and vals is not None:
            for s in splits:
                picks = {select_variant(vals[v.name], s)[1:]}
                chosen = select(vals, s)
                if chosen[0] == v.name:
                    picks.add(chosen[1:])
                targets[s] = sorted(picks)
        jobs.append(Job(name, v, phase, splits, sched, targets))
    return jobs


def _worker_init(threads: int) -> None:
    torch.set_num_threads(threads)


def _work(job: Job, cfg: UCIConfig, folder: str, queue: Any) -> dict[str, Any]:
    def progress(n: int) -> None:
        if queue is not None:
            queue.put(n)
    return run_job(job, _data(job.dataset, cfg.data_dir), cfg, Path(folder), progress)


def _load(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _bar(total: int, quiet: bool) -> Any:
    if quiet:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="uci epochs", unit="epoch", file=sys.stderr, dynamic_ncols=True)


def run_uci(cfg: UCIConfig, command: str = "") -> dict[str, Any]:
    """Train what is missing under ``cfg.out/jobs`` and write the tables; returns the summary."""
    out = Path(cfg.out)
    folder = out / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    vals: dict[str, dict[str, dict[str, Any]]] = {d: {} for d in cfg.datasets}
    tests: dict[str, dict[str, dict[str, Any]]] = {d: {} for d in cfg.datasets}
    pending: list[Job] = []
    for d in cfg.datasets:
        for job in plan_jobs(cfg, d, Phase.VALIDATION):
            got = _load(folder / f"{job.name}.json")
            if got is not None and list(got["splits"]) == list(job.splits):
                vals[d][job.variant.name] = got
            elif not cfg.report_only:
                pending.append(job)
    total = 0 if cfg.report_only else sum(j.schedule.epochs for j in pending) + sum(
        j.schedule.epochs for d in cfg.datasets for j in plan_jobs(cfg, d, Phase.TEST)
        if not (folder / f"{j.name}.json").is_file())
    bar = _bar(total, cfg.quiet)
    inline = cfg.workers <= 1
    pool = None if inline else ProcessPoolExecutor(cfg.workers, mp_context=mp.get_context("spawn"),
                                                   initializer=_worker_init, initargs=(cfg.threads,))
    queue = None if inline else mp.get_context("spawn").Manager().Queue()
    running: dict[Future, Job] = {}
    tested: set[str] = set()

    def progress(n: int) -> None:
        if bar is not None:
            bar.update(n)

    def submit(job: Job) -> None:
        if inline:
            done(job, run_job(job, _data(job.dataset, cfg.data_dir), cfg, folder, progress))
        else:
            assert pool is not None
            running[pool.submit(_work, job, cfg, str(folder), queue)] = job

    def ready(d: str) -> None:
        """Submit a dataset's test jobs once its validation jobs are all in."""
        if d in tested or len(vals[d]) < len(VARIANTS):
            return
        tested.add(d)
        for job in plan_jobs(cfg, d, Phase.TEST, vals[d]):
            got = _load(folder / f"{job.name}.json")
            if got is not None and list(got["splits"]) == list(job.splits) and _covers(got, job):
                tests[d][job.variant.name] = got
            elif not cfg.report_only:
                submit(job)

    def done(job: Job, result: dict[str, Any]) -> None:
        (vals if job.phase is Phase.VALIDATION else tests)[job.dataset][job.variant.name] = result
        if job.phase is Phase.VALIDATION:
            ready(job.dataset)

    try:
        for d in cfg.datasets:
            ready(d)
        for job in pending:
            submit(job)
        while running:
            finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            while queue is not None and not queue.empty():
                progress(queue.get())
            for f in finished:
                job = running.pop(f)
                done(job, f.result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if bar is not None:
            bar.close()
    rows, per_split, variants = [], [], []
    for d in cfg.datasets:
        if len(tests[d]) < len(VARIANTS):
            continue
        row, sp, va = summarise(d, vals[d], tests[d], _splits(cfg, _data(d, cfg.data_dir)))
        rows.append(row)
        per_split += sp
        variants += va
    job_seconds = sum(r.get("seconds", 0.0) for ph in (vals, tests) for dd in ph.values() for r in dd.values())
    meta = {"command": command, "config": asdict(cfg), "wall_seconds": round(time.perf_counter() - start, 1),
            "job_seconds": round(job_seconds, 1), "workers": cfg.workers,
            "missing": [d for d in cfg.datasets if len(tests[d]) < len(VARIANTS)]}
    if not cfg.report_only:
        atomic_write_json(out / "run.json", meta)
    elif (out / "run.json").is_file():
        meta = {**json.loads((out / "run.json").read_text()), "missing": meta["missing"]}
    written = write_tables(out, rows, per_split, variants, meta) if rows else []
    return {"rows": rows, "written": [str(p) for p in written], **meta}


def _covers(result: dict[str, Any], job: Job) -> bool:
    """Whether a finished test job holds the full metrics at every target of ``job``."""
    return all(f"{s}:{e}:{c:g}" in result["full"] for s, picks in job.targets.items() for e, c in picks)
