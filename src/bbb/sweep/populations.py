"""``bbb sweep --population N``: the local backend's trials that differ only in what a population's
members may (:data:`bbb.runs.population.MEMBER_SETTINGS`: the seed, the learning rate, the prior's
numbers, the initialisation; the paper's grid is 12 such groups of 81) trained up to N at a time as
one :class:`~bbb.nn.BayesPopulation` (:func:`bbb.runs.train_population`): one network of batched
matrix products under one engine, which pays where one network's step is launch-bound, on a GPU.

Each trial keeps its own directory (``OUT/trials/<id>``: an ordinary run directory, its
``result.json`` and ``history.json``); the population's state is ``OUT/populations/<first trial
id>-k<members>/population.pt``, so a killed sweep resumes each population with the trials it was
started with. A trial that cannot join one (other settings, a trial already started alone, the
only one left of its recipe) trains alone, as without ``--population``."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BBBError, RunDirBusy, TrainingInterrupted
from ..io import atomic_write_json
from ..runs.jobs import RunJob, State, diverged_message, job_state
from ..runs.population import population_groups, train_population
from .cost import trial_data
from .space import Trial, TrialStatus, resolve_params
from .trial import append_history, result_row, run_trial_local, silent, start_trial, trial_dir, trial_lock

__all__ = ["POPULATIONS_DIR", "population_plan", "run_populations"]

#: the populations' folder in a sweep's output folder
POPULATIONS_DIR = "populations"


def _groups(todo: list[Trial], out: Path, size: int) -> list[tuple[Path | None, list[RunJob]]]:
    """``todo``'s trials as jobs, grouped into populations of up to ``size`` (the rest alone)."""
    jobs, spec_of = [], {}
    for t in todo:
        cfg, spec = resolve_params(t.params)
        jobs.append(RunJob(trial_dir(out, t.trial_id), cfg))
        spec_of[t.trial_id] = spec
    return population_groups(
        jobs, lambda members: out / POPULATIONS_DIR / f"{members[0].run_dir.name}-k{len(members)}",
        size=size, key=lambda job: spec_of[job.run_dir.name].key(),
        what="the trials it was started with (the same space, --limit and --population)")


def population_plan(trials: list[Trial], out: Path | None, size: int) -> str:
    """``--dry-run --population N``: how the trials would train (in ``out``, where trials may have
    started; else as new)."""
    groups = _groups(trials, out or Path("/nonexistent-bbb-sweep"), size)
    pops = [m for d, m in groups if d is not None]
    rest = [j for d, m in groups if d is None for j in m]
    finished = sum(job_state(j.run_dir, j.config.epochs).state in (State.DONE, State.DIVERGED) for j in rest)
    sizes = ", ".join(f"{n} of {k}" for k, n in sorted(Counter(len(m) for m in pops).items(), reverse=True))
    return (f"with --population {size}: {len(pops)} population(s) ({sizes or 'none'}) and {len(rest) - finished} "
            "trial(s) alone" + (f", {finished} finished already" if finished else "")
            + " (it pays on a GPU, where one network's step is launch-bound, not on a CPU: docs/performance.md has "
            "the measurements)")


def run_populations(todo: list[Trial], payloads: list[dict[str, Any]], out: Path, opts: Any,
                    done: Callable[[dict[str, Any]], None]) -> None:
    """Train ``todo`` (their ``payloads`` as :func:`~bbb.sweep.trial.run_trial_local` takes them) in
    populations of up to ``opts.population``, the rest alone; ``done(row)`` for each trial's row."""
    import torch

    trial_of = {t.trial_id: t for t in todo}
    payload_of = {t.trial_id: p for t, p in zip(todo, payloads)}
    groups = _groups(todo, out, int(opts.population))
    threads_before = torch.get_num_threads()
    try:
        for pop_dir, members in groups:
            if pop_dir is None:
                for job in members:
                    done(run_trial_local(payload_of[job.run_dir.name]))
                continue
            trials = [trial_of[j.run_dir.name] for j in members]
            if payload_of[trials[0].trial_id].get("threads"):
                torch.set_num_threads(int(payload_of[trials[0].trial_id]["threads"]))
            for row in _train_one(trials, pop_dir, out, opts):
                done(row)
    finally:
        torch.set_num_threads(threads_before)


def _train_one(trials: list[Trial], pop_dir: Path, out: Path, opts: Any) -> list[dict[str, Any]]:
    """One population's trials, locked, trained together; their rows (result.json written)."""
    dirs = [trial_dir(out, t.trial_id) for t in trials]
    with contextlib.ExitStack() as stack:
        for t, d in zip(trials, dirs):
            holder = stack.enter_context(trial_lock(d))
            if holder is not None:
                return [result_row(u, TrialStatus.PENDING, None, e,
                                   error=f"its population's trial {t.trial_id} runs in another process ({holder}); "
                                         "not started here") for u, e in zip(trials, dirs)]
        started = [start_trial(out, t) for t in trials]
        cfgs = [cfg for _, cfg, _ in started]
        attempts = 1 + int(opts.max_failures)
        for attempt in range(1, attempts + 1):  # a crash resumes from population.pt, as a trial from last.pt
            for d in dirs:
                append_history(d, "start", backend="local", population=str(pop_dir),
                               source="population" if (pop_dir / "population.pt").exists() else "fresh")
            try:
                data = trial_data(cfgs[0], started[0][2], opts.data_dir)
                summaries = train_population(cfgs, dirs, pop_dir, data=data, quiet=True, log=silent)
                break
            except TrainingInterrupted:  # Ctrl-C: the sweep stops (population.pt holds the last epoch)
                raise
            except RunDirBusy as e:
                return [result_row(t, TrialStatus.PENDING, None, d, error=f"its population runs in another "
                                   f"process (pid {e.holder}); not started here") for t, d in zip(trials, dirs)]
            except (BBBError, RuntimeError) as e:  # a crash: retried; after the last, failed (a re-run retries)
                why = " ".join(str(e).split())[:300] or type(e).__name__
                for d in dirs:
                    append_history(d, "error", error=why)
                if attempt == attempts:
                    rows = []
                    for t, d in zip(trials, dirs):
                        row = result_row(t, TrialStatus.FAILED, None, d, retry=True,
                                         error=f"its population crashed: {why} (after {attempts} attempts)")
                        atomic_write_json(d / "result.json", row)
                        rows.append(row)
                    return rows
        rows = []
        for t, d, summary in zip(trials, dirs, summaries):
            row = (result_row(t, TrialStatus.DONE, summary, d) if summary is not None else
                   result_row(t, TrialStatus.FAILED, None, d, error=" ".join(str(diverged_message(d)).split())))
            atomic_write_json(d / "result.json", row)
            rows.append(row)
        return rows
