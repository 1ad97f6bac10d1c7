"""Running a sweep: skip finished trials, run the rest locally or on Ray, write the results."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import DiskFullError, OutOfMemory, UserError
from ..io import atomic_write_json
from ..progress import plural
from .cost import trial_data
from .populations import run_populations
from .ray_backend import checkpoint_epoch, import_ray, ray_dirname, ray_trainable, restore_files
from .results import Backend, SchedulerKind, SweepOptions, read_sweep, write_results
from .space import SweepDataset, Trial, TrialStatus, expand_space, resolve_params
from .trial import (
    epochs_done,
    finalize_trial,
    finished_row,
    result_row,
    run_trial_local,
    trial_dir,
    worker_init,
)


def _progress(total: int, initial: int, enabled: bool) -> Any:
    """The trials' bar: on a terminal when ``enabled`` (:func:`bbb.progress.progress_bar`), else a
    disabled one (the finished trials are then logged one line each)."""
    from tqdm import tqdm

    from ..progress import progress_bar

    if enabled:
        return progress_bar(total=total, initial=initial, desc="trials", unit="trial", leave=True)
    return tqdm(total=total, initial=initial, file=sys.stderr, disable=True)


def _announce(bar: Any, log: Callable[[str], None], warn: Callable[[str], None], row: dict[str, Any]) -> None:
    """One line per finished trial (through the progress bar when it is shown) and a tick; a
    trial left pending (another process trains it) goes to ``warn``."""
    line = _describe(row)
    if not bar.disable:
        bar.write(line)
    elif row.get("status") == TrialStatus.PENDING.value and row.get("error"):
        warn(line)
    else:
        log(line)
    bar.update(1)


def _describe(row: dict[str, Any]) -> str:
    v, nll = row.get("val_error"), row.get("val_nll")
    err = f" ({row['error']})" if row.get("error") else ""
    n = row.get("epochs_run")
    epochs = plural(n, "epoch") if isinstance(n, int) else f"{n} epochs"
    score = f"val NLL {nll:.4f}" if v is None and nll is not None else \
        f"val error {'-' if v is None else f'{100 * v:.2f}%'}"
    return f"trial {row['trial_id']} {row['status']}: {epochs}, {score}{err}"


def _refuse_what_no_trial_can_use(trials: list[Trial], opts: SweepOptions) -> None:
    """On the local backend (this machine's devices and files), a trial's device that is not here or
    its image dataset's files that are not there (nor to be downloaded): the one-line error its
    training would give, before the sweep writes anything, once for each device and data folder.
    (Ray's trials run where its workers are: their devices and files, not the driver's.)"""
    if opts.backend != Backend.LOCAL.value:
        return
    from ..data import MNIST_FILES, ensure_files
    from ..devices import resolve_device

    seen: set[tuple[Any, ...]] = set()
    for t in trials:
        key = tuple(str(t.params.get(k)) for k in ("device", "dataset", "data_dir"))
        if key in seen:
            continue
        seen.add(key)
        cfg, data = resolve_params(t.params)
        resolve_device(cfg.device)
        if data.kind in (SweepDataset.MNIST.value, SweepDataset.FASHION_MNIST.value) and cfg.data_file is None:
            ensure_files(cfg.dataset, [*MNIST_FILES["train"], *MNIST_FILES["test"]], data_dir=cfg.data_dir)


def run_sweep(space: dict[str, Any], opts: SweepOptions, *, limit: int | None = None,
              log: Callable[[str], None] | None = None,
              warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Expand ``space`` and run its unfinished trials on ``opts.backend``; returns every row
    (also ``OUT/sweep.csv`` and ``OUT/best.json``). ``log``: where the progress lines go
    (default: stderr); ``warn``: where a trial left to another process that trains it is
    reported (default: ``log``)."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    warn = warn or log
    trials = expand_space(space, limit)
    if not trials:
        raise UserError("the search space has no trials")
    out = opts.out.resolve()
    _refuse_dropping_results(out, trials)
    rows: dict[str, dict[str, Any]] = {}
    for t in trials:
        r = finished_row(out, t)
        if r is not None:
            rows[t.trial_id] = r
    _refuse_changed_files(out, [t for t in trials if t.trial_id in rows])
    _refuse_what_no_trial_can_use([t for t in trials if t.trial_id not in rows], opts)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "space.json", {**space, "limit": limit})
    todo = [t for t in trials if t.trial_id not in rows]
    if rows:
        log(f"{len(rows)} of {len(trials)} trials already finished in {out}; running {len(todo)}")
    write_results(out, trials, rows, opts.backend)
    if todo:
        if opts.backend == Backend.LOCAL.value:
            _run_local(todo, trials, rows, out, opts, log, warn)
        else:
            _run_ray(todo, trials, rows, out, opts, log, warn)
    for t in trials:  # finished meanwhile by another process on this --out (its trial was locked here)
        if rows.get(t.trial_id, {}).get("status") in (None, TrialStatus.PENDING.value):
            r = finished_row(out, t)
            if r is not None:
                rows[t.trial_id] = r
    write_results(out, trials, rows, opts.backend)
    return [rows.get(t.trial_id) or result_row(t, TrialStatus.PENDING, None, trial_dir(out, t.trial_id))
            for t in trials]


def _refuse_dropping_results(out: Path, trials: list[Trial]) -> None:
    """A one-line error when ``OUT/sweep.csv`` lists finished trials that ``trials`` leave out (an
    earlier sweep of another space, or a smaller ``--limit``, in the same ``--out``): running would
    rewrite sweep.csv and best.json without them (best.json no longer the best of the folder)."""
    if not (out / "sweep.csv").is_file():
        return
    ids = {t.trial_id for t in trials}
    try:
        earlier = read_sweep(out)
    except (OSError, UnicodeDecodeError, csv.Error):
        return  # not a sweep.csv this command can read: nothing listed to lose
    dropped = [r["trial_id"] for r in earlier if r.get("trial_id") and r["trial_id"] not in ids
               and r.get("status") not in (None, TrialStatus.PENDING.value)]
    if dropped:
        raise UserError(f"{out / 'sweep.csv'} lists {plural(len(dropped), 'finished trial')} that this space "
                        f"does not hold (e.g. {dropped[0]}: an earlier sweep of another space or --limit); "
                        "running here would drop them from sweep.csv and best.json: give another --out, or "
                        f"the earlier space ({out / 'space.json'}) or a superset of it")


def _refuse_changed_files(out: Path, finished: list[Trial]) -> None:
    """A one-line error when a finished trial's own file or folder (``data_file``) is not, by its MD5, the file
    it was trained on: its row would be the old file's numbers, ranked beside new trials' on the new."""
    from ..data.arrays import source_md5

    now: dict[str, str] = {}
    for t in finished:
        if t.params.get("data_file") is None:
            continue
        path = resolve_params(t.params)[0].data_file
        try:
            was = json.loads((trial_dir(out, t.trial_id) / "config.json").read_text())["preprocess"]["source"]["md5"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # (a trial that failed before training: nothing of the file in its row)
        if path is None or not (Path(path).is_file() or Path(path).is_dir()):  # (a folder of images: --images)
            continue
        if path not in now:
            now[path] = source_md5(path)
        if now[path] != was:
            raise UserError(f"{path} changed since trial {t.trial_id} in {out} was trained on it (its MD5 was {was}, "
                            f"is {now[path]}): its results are the old file's; give the new file another --out, or "
                            "put the old one back")


def _run_local(todo: list[Trial], trials: list[Trial], rows: dict[str, dict[str, Any]], out: Path,
               opts: SweepOptions, log: Callable[[str], None], warn: Callable[[str], None]) -> None:
    workers = opts.max_concurrent or 1
    # at least one thread, as on Ray (int(0.5) = 0 would leave torch's own count, every core)
    threads = max(1, int(opts.cpus_per_trial) if opts.cpus_per_trial else (os.cpu_count() or 1) // workers)
    payloads = [{"trial": t.to_dict(), "out": str(out), "data_dir": opts.data_dir,
                 "max_failures": opts.max_failures, "threads": threads,
                 "epoch_hook": opts.epoch_hook, "loggers": list(opts.loggers)} for t in todo]
    bar = _progress(len(trials), len(trials) - len(todo), opts.progress)

    def done(row: dict[str, Any]) -> None:
        rows[row["trial_id"]] = row
        write_results(out, trials, rows, opts.backend)
        _announce(bar, log, warn, row)

    try:
        if opts.population:
            run_populations(todo, payloads, out, opts, done)
        elif workers == 1 or len(todo) == 1:
            for p in payloads:
                done(run_trial_local(p))
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            ctx = multiprocessing.get_context("spawn")  # no forked torch thread pools
            for p in payloads:
                p["parent_pid"] = os.getpid()
            with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=ctx,
                                     initializer=worker_init, initargs=(os.getpid(),)) as pool:
                futures = [pool.submit(run_trial_local, p) for p in payloads]
                try:
                    for fut in as_completed(futures):
                        done(fut.result())
                except BaseException:
                    for fut in futures:
                        fut.cancel()
                    raise
    finally:
        bar.close()


def _run_ray(todo: list[Trial], trials: list[Trial], rows: dict[str, dict[str, Any]], out: Path,
             opts: SweepOptions, log: Callable[[str], None], warn: Callable[[str], None]) -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # a forced experiment snapshot per checkpoint is fine at seconds-to-minutes per epoch
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")  # one line per crash instead (below)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray, tune = import_ray()
    import logging

    from ray.tune.schedulers import ASHAScheduler

    started = False
    if not ray.is_initialized():
        try:
            if opts.address is None:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=True,
                         logging_level=logging.WARNING)
            else:
                ray.init(address=opts.address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = opts.address or "a new local cluster"
            raise UserError(f"cannot start or join Ray ({where}): {' '.join(str(e).split())[:200]}") from None
        started = True
    try:
        cpus = opts.cpus_per_trial or 1.0
        resources = {"cpu": cpus, "gpu": opts.gpus_per_trial}
        if opts.address is None:  # a Ray on this machine alone: what it lacks, no node will bring
            _refuse_unplaceable(ray.cluster_resources(), cpus, opts.gpus_per_trial)
        epochs = max(resolve_params(t.params)[0].epochs for t in todo)
        scheduler = None
        if opts.scheduler == SchedulerKind.ASHA.value:
            grace = opts.grace_period or max(1, epochs // 10)
            scheduler = ASHAScheduler(time_attr="epoch", max_t=max(epochs, grace),
                                      grace_period=min(grace, epochs), reduction_factor=opts.reduction_factor)
        by_id = {t.trial_id: t for t in todo}
        bar = _progress(len(trials), len(trials) - len(todo), opts.progress)

        stopped: set[str] = set()  # ASHA stopped them: evaluated once fit() has returned
        # Tune ended them unfinished, never completed (Ctrl-C): left to a re-run, which resumes them
        unfinished: set[str] = set()

        def collect(rt: Any, error: str | None = None, completed: bool = True) -> None:
            tid = rt.config["trial"]["trial_id"]
            if tid in rows or tid not in by_id or tid in stopped or tid in unfinished:
                return
            row = _collect_ray_trial(by_id[tid], rt, out, error)  # (its files copied here from Ray's checkpoint)
            if not completed and error is None and not isinstance((rt.last_result or {}).get("row"), dict):
                unfinished.add(tid)  # ended by Tune before its end, started or not
            elif row is None:
                stopped.add(tid)
            else:
                record(tid, row)

        def record(tid: str, row: dict[str, Any]) -> None:
            rows[tid] = row
            atomic_write_json(trial_dir(out, tid) / "result.json", row)
            write_results(out, trials, rows, opts.backend)
            _announce(bar, log, warn, row)

        callback: Any = tune.Callback  # (tune, imported at run time, is untyped here)

        class Collect(callback):  # runs in this process, as each trial ends
            def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
                collect(trial)

            def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
                msg = (f"trial {trial.config['trial']['trial_id']} crashed (failure {trial.num_failures} of at "
                       f"most {opts.max_failures}); retrying from its latest checkpoint; see {trial.error_file}")
                if bar.disable:
                    log(msg)
                else:
                    bar.write(msg)

            def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
                collect(trial, error=f"crashed {trial.num_failures} time(s); Ray's error file: {trial.error_file}")

        storage = opts.storage or str(out / "ray")
        name = "sweep-" + time.strftime("%Y%m%d-%H%M%S")
        trainable = (ray_trainable if opts.epoch_hook is None
                     else tune.with_parameters(ray_trainable, epoch_hook=opts.epoch_hook))
        tuner = tune.Tuner(
            tune.with_resources(trainable, resources),
            param_space={"trial": tune.grid_search([t.to_dict() for t in todo]), "out": str(out),
                         "data_dir": opts.data_dir, "threads": max(1, int(cpus)), "loggers": list(opts.loggers)},
            tune_config=tune.TuneConfig(metric="val_error", mode="min", scheduler=scheduler,
                                        max_concurrent_trials=opts.max_concurrent,
                                        reuse_actors=True,  # one worker (torch import, data) for many trials
                                        trial_dirname_creator=ray_dirname, trial_name_creator=ray_dirname),
            run_config=tune.RunConfig(
                name=name, storage_path=storage, verbose=0, callbacks=[Collect()],
                failure_config=tune.FailureConfig(max_failures=opts.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2)),
        )
        try:
            results = tuner.fit()
            for r in results:  # anything the callback did not see
                tid = (r.config or {}).get("trial", {}).get("trial_id")
                if tid in by_id and tid not in rows:
                    rt = SimpleNamespace(config=r.config, last_result=r.metrics or {}, checkpoint=r.checkpoint)
                    collect(rt, error=None if r.error is None else " ".join(str(r.error).split())[:300],
                            completed=False)
            # a stopped trial's worker held its run directory's lock, and waiting for it inside
            # Ray's callbacks would hold up the stop: the evaluation takes the lock now
            for tid in sorted(stopped, key=lambda t: by_id[t].index):
                record(tid, _finalize_stopped(by_id[tid], out, opts))
            if unfinished:
                write_results(out, trials, rows, opts.backend)  # (their rows: pending, at their last epoch)
                raise KeyboardInterrupt(f"Ray Tune ended with {plural(len(unfinished), 'trial')} unfinished")
        finally:
            bar.close()
    finally:
        if started:
            ray.shutdown()


def _refuse_unplaceable(have: dict[str, float], cpus: float, gpus: float) -> None:
    """A one-line error where one trial asks for more CPUs or GPUs than the local Ray has: Tune would
    wait for them for ever (a warning a minute, nothing trained)."""
    for key, flag, want in (("CPU", "--cpus-per-trial", cpus), ("GPU", "--gpus-per-trial", gpus)):
        if want > float(have.get(key, 0.0)):
            raise UserError(f"{flag} {want:g} asks for more than this machine's Ray has ({float(have.get(key, 0.0)):g} "
                            f"{key}s), so no trial could start: lower {flag}, or join a cluster that has them "
                            "(--address)")


def _collect_ray_trial(trial: Trial, rt: Any, out: Path, error: str | None) -> dict[str, Any] | None:
    """The row of a finished Ray trial, or None for a trial stopped early (to be evaluated by
    :func:`_finalize_stopped`); its files are copied here from its Ray checkpoint when this
    machine's copy is behind (another node)."""
    d = trial_dir(out, trial.trial_id)
    ckpt = getattr(rt, "checkpoint", None)
    if ckpt is not None:
        with ckpt.as_directory() as cd:
            behind = checkpoint_epoch(Path(cd)) > epochs_done(d) or (
                (Path(cd) / "summary.json").is_file() and not (d / "summary.json").is_file())
            if behind:
                restore_files(Path(cd), d)
    result = rt.last_result or {}
    if isinstance(result.get("row"), dict):
        return {**result["row"], "index": trial.index, "params": dict(trial.params)}
    if error is not None or not (d / "last.pt").exists():
        return result_row(trial, TrialStatus.FAILED, None, d, error=error or "no checkpoint was reported",
                          retry=True)
    return None


def _finalize_stopped(trial: Trial, out: Path, opts: SweepOptions) -> dict[str, Any]:
    """Evaluate a trial ASHA stopped early (under its run directory's lock), on its own split
    (:func:`~bbb.sweep.cost.trial_data`, cached per split)."""
    d = trial_dir(out, trial.trial_id)
    cfg, spec = resolve_params(trial.params)
    try:
        summary = finalize_trial(d, cfg, trial_data(cfg, spec, opts.data_dir))
    except (UserError, DiskFullError, OutOfMemory) as e:  # e.g. still locked: a re-run of the sweep trains it again
        return result_row(trial, TrialStatus.FAILED, None, d, error=" ".join(str(e).split()), retry=True)
    status = TrialStatus.STOPPED if int(summary["epochs"]) < cfg.epochs else TrialStatus.DONE
    return result_row(trial, status, summary, d)
