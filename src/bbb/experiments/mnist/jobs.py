"""Running the jobs through the one job runner (:mod:`bbb.runs.jobs`: skip finished runs,
resume the others, record divergence): the reproduction's progress lines and errors, and the
selection of the candidate with the lowest validation error."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from ...errors import RunDirBusy, SettingsMismatch, TrainingInterrupted, UserError
from ...progress import plural
from ...runs import jobs as runjobs
from ...runs.jobs import JobCallbacks, JobResult, JobState, Outcome, State
from ...runs.loggers import make_loggers
from ...runs.population import population_groups as population_groups_of
from ...runs.population import stored_population, train_population
from .plan import Job, ReproduceConfig, candidates_text, cells_text, estimate_seconds, fmt_time, make_job
from .recipes import METHOD_NAMES, BudgetSpec


def _other_out(e: UserError, out: Path) -> UserError:
    return UserError(f"{e}; use another --out than {out} (or delete that run)")


def check_same_settings(job: Job, out: Path) -> None:
    """Refuse a run in ``out`` trained with other settings than this plan's (one line)."""
    try:
        runjobs.check_settings(job)
    except SettingsMismatch as e:
        raise _other_out(e, out) from None


def state_of(job: Job) -> JobState:
    """What ``job``'s run directory holds: done, diverged, partial or new."""
    return runjobs.job_state(job.run_dir, job.config.epochs)


def limit_data(data: dict[str, Tensor], spec: BudgetSpec) -> dict[str, Tensor]:
    out = dict(data)
    for split, n in (("train", spec.train_limit), ("val", spec.eval_limit), ("test", spec.eval_limit)):
        if n is not None:
            out[f"{split}_x"], out[f"{split}_y"] = data[f"{split}_x"][:n], data[f"{split}_y"][:n]
    return out


def _status(job: Job, state: JobState) -> str:
    if state.state is State.DONE:
        return "done, skipped"
    if state.state is State.DIVERGED:
        return "diverged earlier, skipped"
    if state.epochs_done:
        return f"resuming after epoch {state.epochs_done} of {job.config.epochs}"
    return f"training {plural(job.config.epochs, 'epoch')}"


class Progress(JobCallbacks):
    """The runner's callbacks of a reproduction: one line per run (run i/N, the cell, elapsed
    time and the ETA: estimate x measured pace), the names of the runs trained, a diverged
    run's message."""

    def __init__(self, jobs: Sequence[Job], n_train: int, log: Callable[[str], None]) -> None:
        self.log = log
        self.total = len(jobs)
        self.remaining = {j.name: estimate_seconds(j, n_train, state_of(j).epochs_done) for j in jobs}
        self.t0 = time.perf_counter()
        self.t_job = self.t0
        self.spent_est = 0.0
        self.spent_real = 0.0
        self.i = 0
        self.trained: list[str] = []

    def on_start(self, job: Job, state: JobState) -> None:
        self.i += 1
        pace = self.spent_real / self.spent_est if self.spent_est > 0 else 1.0
        eta = pace * sum(self.remaining.values())
        cell = f"{METHOD_NAMES[job.method]} 2x{job.hidden}"
        extra = []
        if job.n_candidates > 1:
            extra.append(f"candidate {job.candidate + 1}/{job.n_candidates}"
                         + (f" {job.label!r}" if job.label else ""))
        extra.append(f"seed {job.seed}")
        self.log(f"[run {self.i}/{self.total}] {cell} ({', '.join(extra)}; {job.name}): {_status(job, state)}; "
                 f"elapsed {fmt_time(time.perf_counter() - self.t0)}, eta {fmt_time(eta)}")
        self.t_job = time.perf_counter()

    def on_end(self, job: Job, result: JobResult) -> None:
        est = self.remaining.pop(job.name, 0.0)
        if result.skipped:
            return
        self.trained.append(job.name)
        self.spent_est += est
        self.spent_real += time.perf_counter() - self.t_job
        if result.outcome is Outcome.DIVERGED:
            self.log(f"  {job.name}: {result.error}")

    def skip(self, job: Job) -> None:
        """A job that will not run (an extra seed of a cell that selected nothing)."""
        self.remaining.pop(job.name, None)


def train_jobs(jobs: Sequence[Job], data: dict[str, Tensor], cfg: ReproduceConfig, callbacks: JobCallbacks,
               log: Callable[[str], None], out: Path,
               busy: list[str] | None = None) -> dict[str, dict[str, Any] | None]:
    """Train ``jobs`` in turn through the runner (``log``: the training's lines), unless
    finished; each one's summary, or None when it diverged. An interrupt, a run of other
    settings or one that cannot resume is a one-line error that says how to go on.

    A run that another process is training (its run directory's lock) raises
    :class:`~bbb.errors.RunDirBusy`, or, when ``busy`` is a list, is skipped: its name is
    appended there and the next job runs (two processes can then share one plan)."""
    summaries: dict[str, dict[str, Any] | None] = {}
    for job in jobs:
        started = stored_population(job.run_dir)
        if started is not None and state_of(job).state in (State.PARTIAL, State.NEW):  # (not alone: its state)
            raise UserError(f"{job.run_dir} was started in the population in {started.get('dir')}, which holds its "
                            f"state: resume it with '{command_line(cfg, '--population')}'")
        try:
            res = runjobs.run_job(job, data=data, quiet=cfg.quiet, log=log, callbacks=callbacks,
                                  loggers=make_loggers(cfg.loggers))
        except RunDirBusy as e:
            if busy is None:
                raise
            log(f"  skipped {job.name}: another bbb process (pid {e.holder}) is training it")
            busy.append(job.name)
            continue
        except SettingsMismatch as e:
            raise _other_out(e, out) from None
        except TrainingInterrupted as e:
            raise TrainingInterrupted(
                f"interrupted in {job.run_dir} (epoch {e.epoch} is saved); run the same "
                f"'{command_line(cfg)}' to continue", e.run_dir, e.epoch,
            ) from None
        except UserError as e:
            if "cannot resume" in str(e):
                raise UserError(f"{e}; use another --out than {out}") from None
            raise
        summaries[job.name] = res.summary if res.outcome is Outcome.DONE else None
    return summaries


def _population_name(members: Sequence[Job]) -> str:
    """``<cell>[_c<candidate>]_pop_s<seeds>`` (one candidate's seeds), ``<cell>_pop_c<candidates>[_s<seed>]``
    (a cell's candidates, one seed), else ``<cell>_pop_<c<candidate>s<seed>, ...>``."""
    first = members[0]
    cell = f"{first.method}_{first.hidden}"
    if len({j.candidate for j in members}) == 1:
        base = first.name.rsplit("_s", 1)[0] if first.seed else first.name
        return f"{base}_pop_s{'-'.join(str(j.seed) for j in members)}"
    if len({j.seed for j in members}) == 1:
        return f"{cell}_pop_c{'-'.join(str(j.candidate) for j in members)}" + (f"_s{first.seed}" if first.seed else "")
    return f"{cell}_pop_{'-'.join(f'c{j.candidate}s{j.seed}' for j in members)}"


def population_groups(jobs: Sequence[Job], cfg: ReproduceConfig, out: Path) -> list[tuple[Path | None, list[Job]]]:
    """``jobs`` (a cell's candidates, or the extra seeds of its selected one) grouped for
    ``--population`` (:func:`bbb.runs.population.population_groups`): a new population is
    ``runs/<name>`` (:func:`_population_name`); a population started before its members' names were
    stored goes on with ``job``'s candidate at each of its seeds."""

    def by_seeds(job: Job, stored: dict[str, Any]) -> list[Job]:
        return [make_job(cfg, job.method, job.hidden, job.candidate, int(s)) for s in stored["seeds"]]

    return population_groups_of(jobs, lambda members: out / "runs" / _population_name(members), legacy=by_seeds,
                                what="the candidates it was started with")


def train_populations(jobs: Sequence[Job], data: dict[str, Tensor], cfg: ReproduceConfig, callbacks: JobCallbacks,
                      log: Callable[[str], None], out: Path, busy: list[str]) -> None:
    """``--population``: each group of :func:`population_groups` trained together
    (:func:`bbb.runs.train_population`), the others through :func:`train_jobs`; the callbacks see
    each member start and end (not its epochs)."""
    for pop_dir, members in population_groups(jobs, cfg, out):
        if pop_dir is None:
            train_jobs(members, data, cfg, callbacks, log, out, busy=busy)
            continue
        for job in members:
            check_same_settings(job, out)
        log(f"[population] {METHOD_NAMES[members[0].method]} 2x{members[0].hidden}: "
            f"{', '.join(j.name for j in members)} trained together in {pop_dir.name}")
        for job in members:
            callbacks.on_start(job, state_of(job))
        try:
            summaries = train_population([j.config for j in members], [j.run_dir for j in members], pop_dir,
                                         data=data, quiet=cfg.quiet, log=log, resume_hint=f"'{command_line(cfg)}'")
        except RunDirBusy as e:
            log(f"  skipped {pop_dir.name}: another bbb process (pid {e.holder}) is training it or one of its runs")
            busy.extend(j.name for j in members)
            continue
        for job, summary in zip(members, summaries):
            callbacks.on_end(job, JobResult(job, Outcome.DONE, summary=summary, attempts=1) if summary is not None
                             else JobResult(job, Outcome.DIVERGED, error=runjobs.diverged_message(job.run_dir),
                                            attempts=1))


def command_line(cfg: ReproduceConfig, *extra: str) -> str:
    """The command line that runs ``cfg`` again (to resume it)."""
    parts = ["bbb reproduce mnist", f"--budget {cfg.budget}", f"--out {cfg.out}"]
    if cfg.dataset != "mnist":
        parts.append(f"--dataset {cfg.dataset}")
    if not cfg.all_cells and "--report" not in extra:  # a report covers every cell
        parts.append(f"--cells {cells_text(cfg.cells)}")
    if cfg.candidates is not None and "--report" not in extra:
        parts.append(f"--candidates {candidates_text(cfg.candidates)}")
    if cfg.seeds_of is not None and "--report" not in extra:
        parts.append(f"--seeds-of c{cfg.seeds_of}")
    if cfg.seeds != cfg.spec.seeds:
        parts.append("--seeds " + " ".join(str(i) for i in range(int(cfg.seeds or 1))))
    if "--report" not in extra and "--plan" not in extra:
        parts += [f"--log {name}" for name in cfg.loggers]
        if cfg.population:
            parts.append("--population")
        if cfg.cuda_graph:
            parts.append("--cuda-graph")
    return " ".join([*parts, *extra])


def select_candidate(jobs: Sequence[Job], summaries: dict[str, dict[str, Any] | None]) -> int | None:
    """The candidate with the lowest validation error (ties: the earlier one)."""
    best: tuple[float, int] | None = None
    for j in jobs:
        s = summaries.get(j.name)
        if s is None or s.get("val_error") is None:
            continue
        key = (float(s["val_error"]), j.candidate)
        if best is None or key < best:
            best = key
    return None if best is None else best[1]
