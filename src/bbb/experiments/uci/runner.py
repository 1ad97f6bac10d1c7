"""Running ``bbb reproduce uci``: the jobs in order (validation before test), in worker
processes, resumable, with one progress bar; then the tables."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ...data.uci import UCIData, load_uci
from ...devices import cpu_model
from ...errors import OutOfMemory, UserError, adopt_warnings_format
from ...io import atomic_write_json
from ...progress import progress_bar
from ...runs.jobs import check_job_options, watch_parent, watched_manager
from .report import RESULT_OPTIONS, select, select_variant, summarise, training_command, write_tables
from .settings import VARIANTS, Phase, Setting, UCIConfig, UCIMethod, copies_of, schedule_for, variants_of
from .train import Job, run_job

__all__ = ["run_uci", "plan_jobs", "bbb_choices", "write_events"]

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


def bbb_choices(vals: dict[str, dict[str, Any]], splits: tuple[int, ...]) -> dict[int, tuple[str, int]] | None:
    """Each split's (BBB variant, grid point) as BBB's validation chose them (``vals``: the
    validation results by variant), or None while a BBB variant's validation is not in."""
    bbb = variants_of([UCIMethod.BBB])
    if any(v.name not in vals for v in bbb):
        return None
    return {s: select(vals, s, bbb)[:2] for s in splits}


def plan_jobs(cfg: UCIConfig, name: str, phase: Phase, vals: dict[str, dict[str, Any]] | None = None) -> list[Job]:
    """The jobs of one dataset and phase, one per variant of ``cfg.methods``: in validation every
    split with every grid point; in test each split once at its validation choice (given
    ``vals``, the variants' validation results; a variant without one has no test job).

    A BBB ensemble's variant (``of``) validates, once BBB's validation is in (``vals``), on the
    splits where BBB chose its variant, at BBB's grid point, and tests on those splits; it has no
    job where BBB chose no split for it."""
    data = _data(name, cfg.data_dir)
    splits = _splits(cfg, data)
    sched = schedule_for(data.train[0].numel(), cfg.budget)
    jobs = []
    for v in cfg.variants:
        if phase is Phase.VALIDATION and v.of:
            chosen = None if vals is None else bbb_choices(vals, splits)
            members = () if chosen is None else tuple((s, g) for s, (b, g) in chosen.items() if b == v.of)
            if members:
                jobs.append(Job(name, v, phase, members, sched))
            continue
        if phase is Phase.VALIDATION:
            jobs.append(Job(name, v, phase, tuple((s, g) for g in range(len(v.grid)) for s in splits), sched))
            continue
        if vals is None or v.name not in vals:
            continue
        own = [s for s in splits if s in vals[v.name]["splits"]]  # every split but a BBB ensemble's
        picks = {s: select_variant(vals[v.name], s) for s in own}
        jobs.append(Job(name, v, phase, tuple((s, picks[s][1]) for s in own), sched,
                        {s: [picks[s][2:]] for s in own}))
    return jobs


def _worker_init(threads: int, parent_pid: int) -> None:
    adopt_warnings_format()  # the command's one-line UserWarnings
    torch.set_num_threads(threads)
    watch_parent(parent_pid, "bbb reproduce uci worker")  # no orphan trains on when this process is killed


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
    """The epochs' progress: a bar on a terminal, a line a minute in a log (no carriage returns)."""
    if quiet:
        return None
    return progress_bar(total=total, desc="uci epochs", unit="epoch", leave=True, lines_every=60.0)


def _work_estimate(job: Job, n_train: int, hidden: int) -> float:
    """A job's work, roughly: its networks x training rows x epochs x hidden units, times 2.5
    for the local estimator (two products per layer, and its sampled evaluation)."""
    copies = copies_of(job.variant)
    local = 2.5 if job.variant.estimator == "local" else 1.0
    return float(len(job.members) * copies * job.schedule.epochs * n_train * hidden) * local


def _matches(result: dict[str, Any] | None, job: Job) -> bool:
    """Whether a finished job's file is this job's (the same members, and every test target)."""
    if result is None or result.get("members") != [list(m) for m in job.members]:
        return False
    return all(f"{s}:{e}:{c:g}" in result["full"] for s, picks in job.targets.items() for e, c in picks)


def run_uci(cfg: UCIConfig, command: str = "") -> dict[str, Any]:
    """Train what is missing under ``cfg.out/jobs`` and write the tables; returns the summary."""
    if cfg.splits is not None:  # a split some datasets lack is skipped there; one that every dataset lacks: refused
        counts = {d: _data(d, cfg.data_dir).num_splits for d in cfg.datasets}
        beyond = [s for s in cfg.splits if s >= max(counts.values())]
        if beyond:
            have = ", ".join(f"{d} 0..{n - 1}" for d, n in counts.items())
            raise UserError(f"--splits {' '.join(map(str, beyond))}: no dataset asked for has it (splits: {have}); "
                            "name splits that exist")
    out = Path(cfg.out)
    folder = out / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    if not cfg.report_only:  # a job's file is reused by its name, which these options are not in
        before = (_load(out / "run.json") or {}).get("config", {})  # (a folder trained before options.json)
        check_job_options(out, "bbb reproduce uci",
                          {flag: getattr(cfg, key).value if key == "budget" else getattr(cfg, key)
                           for key, flag in RESULT_OPTIONS.items()},
                          {flag: before[key] for key, flag in RESULT_OPTIONS.items() if key in before})
    start = time.perf_counter()
    vals: dict[str, dict[str, dict[str, Any]]] = {d: {} for d in cfg.datasets}
    tests: dict[str, dict[str, dict[str, Any]]] = {d: {} for d in cfg.datasets}
    pending: list[Job] = []
    for d in cfg.datasets:
        for job in plan_jobs(cfg, d, Phase.VALIDATION):
            got = _load(folder / f"{job.name}.json")
            if _matches(got, job):
                assert got is not None
                vals[d][job.variant.name] = got
            elif not cfg.report_only:
                pending.append(job)
    epochs = {d: schedule_for(_data(d, cfg.data_dir).train[0].numel(), cfg.budget).epochs for d in cfg.datasets}
    total = 0 if cfg.report_only else sum(epochs[j.dataset] for j in pending) + sum(
        epochs[d] for d in cfg.datasets for v in cfg.variants
        if not v.of and not (folder / f"{d}-{v.name}-{Phase.TEST.value}.json").is_file())
    bar = _bar(total, cfg.quiet)  # (a BBB ensemble's jobs are added once BBB's validation plans them)
    planned: set[str] = set()
    inline = cfg.workers <= 1
    pool = None if inline else ProcessPoolExecutor(cfg.workers, mp_context=mp.get_context("spawn"),
                                                   initializer=_worker_init, initargs=(cfg.threads, os.getpid()))
    manager = None if inline else watched_manager(mp.get_context("spawn"), "bbb reproduce uci's progress queue")
    queue = None if manager is None else manager.Queue()
    running: dict[Future, Job] = {}

    def progress(n: int) -> None:
        if bar is not None:
            bar.update(n)

    def submit(job: Job) -> None:
        if inline:
            done(job, run_job(job, _data(job.dataset, cfg.data_dir), cfg, folder, progress))
        else:
            assert pool is not None
            running[pool.submit(_work, job, cfg, str(folder), queue)] = job

    def ready(d: str, variant: str) -> None:
        """Submit a variant's test job once its validation job is in."""
        for job in plan_jobs(cfg, d, Phase.TEST, {variant: vals[d][variant]}):
            got = _load(folder / f"{job.name}.json")
            if _matches(got, job):
                assert got is not None
                tests[d][variant] = got
            elif not cfg.report_only:
                submit(job)

    def ensemble_ready(d: str) -> None:
        """Submit (or load) the BBB ensemble's validation jobs once BBB's validation is in."""
        for job in plan_jobs(cfg, d, Phase.VALIDATION, vals[d]):
            if not job.variant.of or job.name in planned:
                continue
            planned.add(job.name)
            got = _load(folder / f"{job.name}.json")
            if _matches(got, job):
                assert got is not None
                vals[d][job.variant.name] = got
                if bar is not None and not (folder / f"{d}-{job.variant.name}-{Phase.TEST.value}.json").is_file():
                    bar.total += epochs[d]
                ready(d, job.variant.name)
            elif not cfg.report_only:
                if bar is not None:
                    bar.total += 2 * epochs[d]  # its validation and its test
                submit(job)

    def done(job: Job, result: dict[str, Any]) -> None:
        (vals if job.phase is Phase.VALIDATION else tests)[job.dataset][job.variant.name] = result
        if job.phase is Phase.VALIDATION:
            ready(job.dataset, job.variant.name)
            if job.variant.method is UCIMethod.BBB and UCIMethod.BBB_ENSEMBLE in cfg.methods:
                ensemble_ready(job.dataset)

    try:
        for d in cfg.datasets:
            for v in list(vals[d]):
                ready(d, v)
            if UCIMethod.BBB_ENSEMBLE in cfg.methods:
                ensemble_ready(d)
        rows_of = {d: _data(d, cfg.data_dir).train[0].numel() for d in cfg.datasets}
        for job in sorted(pending, key=lambda j: _work_estimate(j, rows_of[j.dataset], cfg.hidden_for(j.dataset)),
                          reverse=True):  # the longest first
            submit(job)
        while running:
            finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            while queue is not None and not queue.empty():
                progress(queue.get())
            for f in finished:
                job = running.pop(f)
                try:
                    result = f.result()
                except BrokenProcessPool:
                    raise OutOfMemory(
                        f"a worker died while training {job.name} (killed by the system, most often for "
                        "memory): the finished jobs and every job's last checkpoint are kept; run the same "
                        "command again to resume, with fewer --workers if memory is short") from None
                done(job, result)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if manager is not None:
            manager.shutdown()
        if bar is not None:
            bar.close()
    rows, method_rows, per_split, variants = [], [], [], []
    missing = []
    for d in cfg.datasets:
        splits = _splits(cfg, _data(d, cfg.data_dir))
        planned_here = {j.variant.name for j in plan_jobs(cfg, d, Phase.VALIDATION, vals[d])}
        for m in cfg.methods:
            vs = tuple(v for v in variants_of([m]) if v.name in planned_here)  # (a BBB ensemble's: BBB's choices)
            if not vs or any(v.name not in tests[d] for v in vs):
                missing.append(f"{d}:{m.value}")
                continue
            row, sp, va = summarise(d, vals[d], tests[d], splits, vs)
            method_rows.append(row)
            if m is UCIMethod.BBB:
                rows.append(row)
            per_split += sp
            variants += va
    tb = write_events(out, cfg, [r for ph in (vals, tests) for dd in ph.values() for r in dd.values()]) \
        if cfg.loggers else 0
    job_seconds = sum(r.get("seconds", 0.0) for ph in (vals, tests) for dd in ph.values() for r in dd.values())
    meta = {"command": command, "config": {k: v for k, v in asdict(cfg).items() if k != "loggers"},  # (how watched)
            "wall_seconds": round(time.perf_counter() - start, 1),
            "job_seconds": round(job_seconds, 1), "workers": cfg.workers, "missing": missing,
            # what a row's last digits depend on (results/uci/README.md, checking one number)
            "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu": cpu_model()}
    if not cfg.report_only:
        prev = _load(out / "run.json")
        if prev is not None and prev.get("config", {}).get("out") == cfg.out:
            meta["wall_seconds_before"] = round(prev.get("wall_seconds", 0.0) + prev.get("wall_seconds_before", 0.0), 1)
        atomic_write_json(out / "run.json", meta)
    else:  # --report: what trained (run.json, when there is one) and the one command that trains these tables
        prev = _load(out / "run.json") or {}
        shown = list(dict.fromkeys(r["dataset"] for r in method_rows))
        config = {**prev.get("config", meta["config"]), "splits": cfg.splits, "methods": cfg.methods, "out": cfg.out}
        meta = {**meta, **prev, "missing": meta["missing"], "job_seconds": meta["job_seconds"],
                "command": (training_command(config, shown) if shown else None) or prev.get("command", "")}
        if not prev:  # how it trained is unknown: no run.json
            for key in ("wall_seconds", "workers", "torch", "cpu_capability", "cpu"):
                del meta[key]
    written = write_tables(out, rows, per_split, variants, meta, method_rows) if method_rows else []
    if tb:
        written.append(out / "tb")
    return {"rows": rows, "method_rows": method_rows, "written": [str(p) for p in written], **meta}


def write_events(out: Path, cfg: UCIConfig, results: list[dict[str, Any]]) -> int:
    """``--log``: each finished job's scores (``results``: the files under ``out/jobs``) as event
    files, one folder per member, ``out/tb/<job>/split<S>-<grid point>``, replacing the job's
    earlier ones. At each checkpoint epoch, on the part it scores (``val/``: the held-out 20%
    of the split's training rows; ``test/``: the test rows): ``rmse``, ``noise_sd`` and ``ll`` (the
    noise as trained) in the target's units, and the log-likelihood at each noise choice
    (``ll_noise_xC``: the noise times C; MC dropout's ``ll_noise_sdC``: noise sd C, standardised);
    a test member also its every metric at its validation's choice (``test/selected/...``, at the
    chosen epoch). Returns the member folders written."""
    from ...runs.loggers import write_points

    fixed = {v.name for v in VARIANTS if v.likelihood == "fixed"}
    n = 0
    for r in results:
        job = f"{r['dataset']}-{r['variant']}-{r['phase']}"
        part = "val" if r["phase"] == Phase.VALIDATION.value else "test"
        noise = "ll_noise_sd" if r["variant"] in fixed else "ll_noise_x"
        shutil.rmtree(out / "tb" / job, ignore_errors=True)
        for j, (split, g) in enumerate(r["members"]):
            setting = r["grid"][g]
            label = Setting(**setting).label()
            points = []
            for epoch, sc in zip(r["epochs"], r["scores"]):
                got = {f"{part}/rmse": sc["rmse"][j], f"{part}/noise_sd": sc["noise_sd"][j]}
                for c, ll in zip(r["noise_scales"], sc["ll"][j]):
                    got[f"{part}/{noise}{c:g}"] = ll
                    if c == 1.0 and r["variant"] not in fixed:
                        got[f"{part}/ll"] = ll
                points.append((epoch, got))
            for key, metrics in r["full"].items():
                s, e, _ = key.split(":")
                if int(s) == split:
                    points.append((int(e), {f"test/selected/{k}": v for k, v in metrics.items()
                                            if isinstance(v, (int, float))}))
            config = {"job": job, "dataset": r["dataset"], "method": r["method"], "variant": r["variant"],
                      "phase": r["phase"], "split": split, "setting": setting, "batch_size": r["batch_size"],
                      "samples": cfg.samples, "seed": cfg.seed}
            write_points(cfg.loggers, out / "tb" / job / f"split{split}-{label.replace(' ', '_')}", config, points)
            n += 1
    return n
