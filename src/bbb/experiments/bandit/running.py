"""Running the bandit (optionally over several worker processes), stopping it cleanly on Ctrl-C
or SIGTERM, and writing its tables."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import platform
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...devices import resolve_device
from ...errors import OutOfMemory, TrainingInterrupted, UserError, adopt_warnings_format
from ...io import atomic_write_json, atomic_write_text, csv_text
from ...runs import lock_run_dir
from ...runs.jobs import read_json
from .config import (
    AGENT_SETTINGS,
    EARLY_WINDOW,
    LATE_WINDOW,
    REGRET_COLUMNS,
    SUMMARY_COLUMNS,
    BanditConfig,
    parse_agent,
)
from .marks import figure6_marks, mark_word
from .plot import plot_eating, plot_regret
from .population import Population, fmt_seconds, read_checkpoint

#: the signals that stop a run cleanly (its state saved first)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def split_members(members: list[tuple[str, int]], workers: int) -> list[list[tuple[str, int]]]:
    """Round-robin over the member list (grouped by agent), so each worker gets a similar mix."""
    groups = [members[i::workers] for i in range(workers)]
    return [g for g in groups if g]


class StopRequest:
    """Set by SIGINT/SIGTERM (see :func:`stopping_on_signals`) or another process's event."""

    def __init__(self, event: Any = None) -> None:
        self.signal: int | None = None
        self.event = event  # a multiprocessing Event shared with the worker processes

    def __call__(self) -> bool:
        if self.signal is None and self.event is not None and self.event.is_set():
            self.signal = signal.SIGTERM
        return self.signal is not None

    def handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop at once
        self.signal = signum
        if self.event is not None:
            self.event.set()

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else "a stop request"


@contextlib.contextmanager
def stopping_on_signals(stop: StopRequest) -> Iterator[StopRequest]:
    """While the block runs, SIGINT and SIGTERM set ``stop`` instead of killing the process (the
    loop then saves and returns); the previous handlers come back afterwards. Only the main
    thread can install handlers: elsewhere the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, stop.handle)
    try:
        yield stop
    finally:
        for s, h in before.items():
            signal.signal(s, h)


_WORKER_EVENT: Any = None


def _init_worker(event: Any) -> None:
    """Pool initializer: the parent's stop event, shared by inheritance; the command's one-line
    UserWarnings."""
    global _WORKER_EVENT
    adopt_warnings_format()
    _WORKER_EVENT = event


def _worker(cfg: BanditConfig, members: list[tuple[str, int]], contexts: Tensor, edible: Tensor,
            worker_id: int, checkpoint: str | None, progress: bool,
            parent_pid: int | None = None, request: StopRequest | None = None) -> dict[str, Any]:
    """One share of the population: in this process (``request``: the caller's stop request,
    its signal handlers installed by the caller) or in a pool worker (``parent_pid``: stop when
    the parent dies or sets the shared event; SIGINT/SIGTERM stop this worker cleanly)."""
    threads_before = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    # Adam's first moments of weights without gradient (features absent from a minibatch, dead
    # units) decay by 0.9 per update into subnormal floats, which slow every update down
    flushed = torch.set_flush_denormal(True)
    own_handlers = request is None
    if request is None:
        request = StopRequest(_WORKER_EVENT)
    try:
        dev = resolve_device(cfg.device)
        pop = Population(cfg, members, contexts, edible, dev, train_seed=worker_id)
        ck = Path(checkpoint) if checkpoint else None
        resumed = pop.load(ck) if (ck is not None and cfg.resume) else False
        if resumed and progress:
            print(f"bandit: resumed worker {worker_id} from {ck} at step {pop.step}", flush=True)
        label = f"[w{worker_id}]" if cfg.workers > 1 else ""

        def stop() -> bool:
            return request() or (parent_pid is not None and os.getppid() != parent_pid)

        with stopping_on_signals(request) if own_handlers else contextlib.nullcontext():
            done = pop.run(cfg.steps, ck, progress=progress, label=label, stop=stop)
        if not done and not request():
            # the parent died; the pool would catch SystemExit and keep this process waiting
            print(f"bandit worker {worker_id}: the parent process ended; saved {ck}", file=sys.stderr, flush=True)
            os._exit(3)
        res = pop.results()
        res.update(stopped=not done, step=pop.step, checkpoint=checkpoint)
        return res
    finally:
        torch.set_num_threads(threads_before)
        if flushed:
            torch.set_flush_denormal(False)


def run_bandit(config: BanditConfig | None = None, contexts: Tensor | None = None,
               edible: Tensor | None = None, **overrides: Any) -> dict[str, Any]:
    """Run the bandit experiment; write its files when ``config.out`` is set.

    ``contexts``/``edible`` default to UCI Mushroom (:func:`bbb.data.load_mushroom`). Returns a
    dict with ``regret_rows`` (the rows of regret.csv), ``summary`` (rows of summary.csv),
    ``seconds`` and the written ``files``. Ctrl-C or SIGTERM (in the main thread) stops every
    worker after its current step, saves its checkpoint and raises
    :class:`~bbb.errors.TrainingInterrupted`, whose message says what was kept; the same call
    then resumes exactly where it stopped.
    """
    cfg = dataclasses.replace(config or BanditConfig(), **overrides)
    cfg.agents = tuple(parse_agent(a).name for a in cfg.agents)
    cfg.seeds = tuple(int(s) for s in cfg.seeds)
    cfg.hidden = tuple(int(h) for h in cfg.hidden)
    cfg.validate()
    dev = resolve_device(cfg.device)
    if contexts is None or edible is None:
        from ...data import load_mushroom

        contexts, edible = load_mushroom(cfg.data_dir)
    contexts = torch.as_tensor(contexts, dtype=torch.float32)
    edible = torch.as_tensor(edible).bool()
    members = [(a, s) for a in cfg.agents for s in cfg.seeds]
    workers = min(cfg.workers, len(members))
    if dev.type == "cuda":
        workers = 1
    groups = split_members(members, workers)
    out = Path(cfg.out) if cfg.out else None
    if out is not None:
        _refuse_foreign(out)
        out.mkdir(parents=True, exist_ok=True)
    # one process per --out: a second one is refused in one line naming the holder's pid, instead
    # of two processes training the same checkpoints (the workers write under the parent's lock)
    with lock_run_dir(out) if out is not None else contextlib.nullcontext():
        ckdir = None
        if out is not None:
            ckdir = out / "checkpoint"
            ckdir.mkdir(exist_ok=True)
            if not cfg.resume:
                for f in ckdir.glob("worker*.pt"):
                    f.unlink()
            else:  # every worker's file before any trains: one that cannot resume stops the run here
                for i, g in enumerate(groups):
                    read_checkpoint(ckdir / f"worker{i}.pt", cfg, g, dev)
        progress = not cfg.quiet
        t0 = time.perf_counter()
        paths = [None if ckdir is None else str(ckdir / f"worker{i}.pt") for i in range(len(groups))]
        if len(groups) == 1:
            request = StopRequest()
            # in this process: the caller's global random streams (which the local estimator seeds and
            # draws from, and module initialisation draws from) come back as they were
            with stopping_on_signals(request), torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
                _announce(cfg, dev, len(groups), progress)
                results = [_worker(cfg, groups[0], contexts, edible, 0, paths[0], progress, request=request)]
        else:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor
            from concurrent.futures.process import BrokenProcessPool

            ctx = mp.get_context("spawn")
            request = StopRequest(ctx.Event())
            with stopping_on_signals(request), ProcessPoolExecutor(
                    len(groups), mp_context=ctx, initializer=_init_worker, initargs=(request.event,)) as ex:
                _announce(cfg, dev, len(groups), progress)
                futs = [ex.submit(_worker, cfg, g, contexts, edible, i, paths[i], progress and i == 0, os.getpid())
                        for i, g in enumerate(groups)]
                try:
                    try:
                        results = [f.result() for f in futs]
                    except BaseException:  # (one worker's error: the others stop and save, not train on)
                        request.event.set()
                        raise
                except BrokenProcessPool:
                    where = f"in {ckdir}" if ckdir is not None else "nowhere (no --out)"
                    raise OutOfMemory(
                        "a bandit worker process died (killed by the system, most often for memory); every "
                        f"worker's last checkpoint (saved periodically and on stopping) is kept {where}; "
                        "run the same command again to resume") from None
        if any(r["stopped"] for r in results):
            raise TrainingInterrupted(_stopped_message(cfg, request, results), out or Path("."),
                                      min(r["step"] for r in results))
        wall = time.perf_counter() - t0
        seconds = max(r["seconds"] for r in results)
        rows, summary = _tabulate(cfg, results, seconds)
        edible_share = float(edible.float().mean())
        marks = figure6_marks(summary, rows, edible_share)
        res: dict[str, Any] = {"regret_rows": rows, "summary": summary, "marks": marks, "seconds": seconds,
                               "wall_seconds": wall, "config": cfg, "files": []}
        if out is not None:
            res["files"] = _write_outputs(out, cfg, rows, summary, seconds, len(groups),
                                          oracle_eat=edible_share, marks=marks)
            if cfg.loggers:
                _write_events(out, cfg, rows)
        # the results: printed with --quiet too (QUIET_HELP: no progress, only results, warnings, errors)
        first = min(EARLY_WINDOW, cfg.steps)  # (the summary's columns keep their names)
        for s in summary:
            spread = "(one seed)" if s["seeds"] == 1 else f"+- {s['final_regret_sd']:.0f}"  # (no spread to measure)
            print(f"  {s['agent']:>14s}: regret {s['final_regret_mean']:.0f} {spread}"
                  f" (expected {s['final_expected_regret_mean']:.0f}), eats {s['eat_rate_first_1000']:.1%}"
                  f" of the first {first} and {s['eat_rate_last_1000']:.1%} of the last {first}")
        for m in marks:
            print(f"  {mark_word(m['holds'])}: {m['mark']} ({m['measured']})")
        print(f"bandit: {fmt_seconds(seconds)} of training" + (f"; wrote {out}" if out else ""), flush=True)
        return res


def _announce(cfg: BanditConfig, dev: torch.device, workers: int, progress: bool) -> None:
    if progress:
        print(f"bandit: {len(cfg.agents)} agents x {len(cfg.seeds)} seeds x {cfg.steps} steps, "
              f"{cfg.updates_per_step} updates of {cfg.batch_size} per step, buffer {cfg.buffer}; "
              f"{workers} worker(s) x {cfg.threads} thread(s) on {dev}", flush=True)


def _stopped_message(cfg: BanditConfig, request: StopRequest, results: list[dict[str, Any]]) -> str:
    steps = sorted({r["step"] for r in results})
    at = f"step {steps[0]}" if len(steps) == 1 else "steps " + ", ".join(map(str, steps))
    kept = [r["checkpoint"] for r in results if r["checkpoint"]]
    if not kept:
        return f"bandit stopped by {request.name} at {at} of {cfg.steps}; nothing kept (no --out)"
    return (f"bandit stopped by {request.name} at {at} of {cfg.steps}; kept every agent and seed up to "
            f"there in {', '.join(kept)}; run the same command to resume")


def _sd(t: Tensor) -> float:
    return float(t.std(unbiased=True)) if t.numel() > 1 else 0.0


def _late_rate(steps: list[int], expected: Tensor) -> float:
    """Expected regret per step over the last LATE_WINDOW logged steps (all of them if fewer)."""
    final = steps[-1]
    start, base = 0, 0.0
    for i, st in enumerate(steps):
        if st <= final - LATE_WINDOW:
            start, base = st, float(expected[i])
    return (float(expected[-1]) - base) / max(final - start, 1)


def _early_eat_rate(steps: list[int], eaten: Tensor) -> float:
    """Fraction eaten over the first EARLY_WINDOW steps (a run logs that step whatever its
    ``log_every``; an older run's rows: at the first logged step from there on; the whole run if
    it is shorter)."""
    end = min(EARLY_WINDOW, steps[-1])
    i = next(i for i, st in enumerate(steps) if st >= end)
    return float(eaten[i]) / max(steps[i], 1)


def _tabulate(cfg: BanditConfig, results: list[dict[str, Any]], seconds: float):
    rows: list[dict[str, Any]] = []
    final: dict[str, list[tuple[float, float, float, float, float]]] = {}
    for r in results:
        steps = r["log_steps"]
        for j, (agent, seed) in enumerate(r["members"]):
            for i, st in enumerate(steps):
                rows.append({"step": st, "agent": agent, "seed": seed,
                             "cumulative_regret": float(r["log_regret"][i, j]),
                             "cumulative_expected_regret": float(r["log_expected"][i, j]),
                             "cumulative_eaten": int(r["log_eaten"][i, j])})
            if steps:
                final.setdefault(agent, []).append((float(r["log_regret"][-1, j]),
                                                    float(r["log_expected"][-1, j]),
                                                    _late_rate(steps, r["log_expected"][:, j]),
                                                    float(r["eat_rate"][j]),
                                                    _early_eat_rate(steps, r["log_eaten"][:, j])))
    order = {a: i for i, a in enumerate(cfg.agents)}
    rows.sort(key=lambda d: (d["step"], order[d["agent"]], d["seed"]))
    summary = [_agent_summary(agent, cfg.steps, final[agent], seconds) for agent in cfg.agents if final.get(agent)]
    return rows, summary


def _agent_summary(agent: str, steps: int, vals: list[tuple[float, float, float, float, float]],
                   seconds: float) -> dict[str, Any]:
    """summary.csv's row of ``agent`` from each seed's (final regret, final expected regret, late
    rate, eat rate of the last 1,000, eat rate of the first 1,000)."""
    reg = torch.tensor([v[0] for v in vals], dtype=torch.float64)
    exp_ = torch.tensor([v[1] for v in vals], dtype=torch.float64)
    return {"agent": agent, "steps": steps, "seeds": len(vals),
            "final_regret_mean": float(reg.mean()), "final_regret_sd": _sd(reg),
            "final_expected_regret_mean": float(exp_.mean()),
            "final_expected_regret_sd": _sd(exp_),
            "expected_regret_per_step_late": sum(v[2] for v in vals) / len(vals),
            "eat_rate_first_1000": sum(v[4] for v in vals) / len(vals),
            "eat_rate_last_1000": sum(v[3] for v in vals) / len(vals),
            "seconds": round(seconds, 1)}


def _seed_split_summary(agent: str, steps: int, rows: list[dict[str, Any]],
                        parts: list[tuple[list[int], dict[str, Any]]]) -> dict[str, Any]:
    """The summary row of an agent whose seeds ran in several parts (``parts``: each one's seeds and
    summary row of the agent), from its regret rows; the eat rate of the last 1,000 steps (the
    parts' own count, not in the rows) is each part's mean weighted by its seeds, and the seconds
    the parts' sum."""
    vals = []
    for seeds, row in parts:
        for seed in seeds:
            mine = sorted((r for r in rows if r["agent"] == agent and r["seed"] == seed), key=lambda r: r["step"])
            at = [r["step"] for r in mine]
            expected = torch.tensor([r["cumulative_expected_regret"] for r in mine], dtype=torch.float64)
            eaten = torch.tensor([r["cumulative_eaten"] for r in mine], dtype=torch.float64)
            vals.append((mine[-1]["cumulative_regret"], mine[-1]["cumulative_expected_regret"],
                         _late_rate(at, expected), float(row["eat_rate_last_1000"]), _early_eat_rate(at, eaten)))
    return _agent_summary(agent, steps, vals, sum(float(row.get("seconds") or 0.0) for _, row in parts))


def _write_events(out: Path, cfg: BanditConfig, rows: list[dict[str, Any]]) -> None:
    """``--log``: each member's curves of regret.csv (every ``log_every`` steps) into
    ``OUT/tb/AGENT-seedS``: cumulative regret, cumulative expected regret, and the arm pulls (eat,
    pass) so far. Written once the run ends (the members train in worker processes)."""
    from ...runs.loggers import log_step, opened_loggers

    shutil.rmtree(out / "tb", ignore_errors=True)  # rewritten whole: a resumed run's curves are not doubled
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    for agent in cfg.agents:
        for seed in cfg.seeds:
            mine = [r for r in rows if r["agent"] == agent and r["seed"] == seed]
            with opened_loggers(cfg.loggers, out / "tb" / f"{agent}-seed{seed}", config) as loggers:
                for r in mine:
                    log_step(loggers, r["step"], {
                        "regret/cumulative": r["cumulative_regret"],
                        "regret/cumulative_expected": r["cumulative_expected_regret"],
                        "arms/eat_pulls": r["cumulative_eaten"], "arms/pass_pulls": r["step"] - r["cumulative_eaten"]})


def _cell(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v)


def _refuse_foreign(out: Path) -> None:
    """A one-line error where ``out`` holds a config.json or summary.json that is not a bandit
    run's (a ``bbb train`` run's, ``bbb regression``'s): writing the run there would replace it."""
    for name, key in (("config.json", "agents"), ("summary.json", "late_window")):
        path = out / name
        if path.exists() and key not in (read_json(path) or {}):
            raise UserError(f"{path} is not a bbb bandit run's, and the run would replace it: give another --out")


def _write_outputs(out: Path, cfg: BanditConfig, rows, summary, seconds: float, workers: int,
                   oracle_eat: float | None = None, marks: list[dict[str, Any]] | None = None,
                   extra: dict[str, Any] | None = None) -> list[str]:
    files = []
    atomic_write_text(out / "regret.csv", csv_text(REGRET_COLUMNS, rows, _cell))
    files.append("regret.csv")
    atomic_write_text(out / "summary.csv", csv_text(SUMMARY_COLUMNS, summary, _cell))
    files.append("summary.csv")
    meta = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    meta.update({"seconds": round(seconds, 1), "workers_used": workers, "torch": torch.__version__,
                 "python": platform.python_version(), "machine": platform.machine(),
                 "processor": cpu_name(), "cpu_count": os.cpu_count()})
    meta.update(extra or {})
    atomic_write_json(out / "config.json", meta)
    files.append("config.json")
    atomic_write_json(out / "summary.json", {"late_window": LATE_WINDOW, "agents": summary,
                                             "marks": marks or [], "seconds": round(seconds, 1)})
    files.append("summary.json")
    samples = cfg.decision_samples  # (None from a plot: no matplotlib, warned)
    if plot_regret(rows, out / "regret.png", agents=list(cfg.agents), samples=samples) is not None:
        files.append("regret.png")
    if plot_eating(rows, out / "eating.png", agents=list(cfg.agents), oracle=oracle_eat, samples=samples) is not None:
        files.append("eating.png")
    return files


#: config.json entries that may differ between the parts of one merged run (how and where each ran)
_PART_FREE = {"agents", "out", "seconds", "workers", "workers_used", "threads", "quiet", "resume", "data_dir",
              "loggers", "device", "torch", "python", "machine", "processor", "cpu_count", "checkpoint_every",
              "progress_every", "parts"}



def _read_part(part: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(config, regret rows, summary rows) of a finished run folder; UserError if it is not one."""
    files = [part / f for f in ("config.json", "summary.json", "regret.csv")]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise UserError(f"{part} is not a finished bbb bandit run (no {', '.join(missing)}); finish it first "
                        "(run its command again to resume)")
    try:
        cfg = json.loads(files[0].read_text())
        summary = json.loads(files[1].read_text())["agents"]
        with open(files[2], newline="") as f:
            rows = [{"step": int(r["step"]), "agent": r["agent"], "seed": int(r["seed"]),
                     "cumulative_regret": float(r["cumulative_regret"]),
                     "cumulative_expected_regret": float(r["cumulative_expected_regret"]),
                     "cumulative_eaten": int(float(r["cumulative_eaten"]))} for r in csv.DictReader(f)]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"cannot read the run in {part} ({type(e).__name__}: {e})") from None
    return cfg, rows, summary


def merge_runs(parts: list[str | os.PathLike[str]], out: str | os.PathLike[str],
               data_dir: str | None = None, edible: Tensor | None = None,
               loggers: tuple[str, ...] = ()) -> dict[str, Any]:
    """One run's outputs in ``out`` from finished runs of the same settings that split the agents
    or the seeds between them (e.g. ``--agents bbb greedy`` and ``--agents egreedy_0.01
    egreedy_0.05`` run on two machines or days, or ``--seeds 8 9`` and ``--seeds 10 11 12``): every
    agent must end with every seed, each once. The rows are copied as they are, and the summary of
    an agent run whole in one part; an agent whose seeds are split has its summary computed again
    from its rows (the eat rate of the last 1,000 steps: the parts' means weighted by their seeds).
    Agents never interact (each has its own network, buffer and optimiser state, and every
    agent of a seed faces the same mushrooms), though which random draws a member gets depends on
    the population it ran in, as with ``--workers``. Figure 6's marks are measured on the whole
    (``edible``: the contexts' edibility, for the oracle's eat rate; default UCI Mushroom's), and
    config.json lists the parts (``parts``: each one's folder, agents and seconds). ``loggers``
    (``--log``): the merged rows' event files in ``out/tb/AGENT-seedS``, as a run writes them at its
    end. UserError when a part is unfinished, another settings' run, repeats an agent's seed of
    another part, or leaves an agent without a seed of the others."""
    if len(parts) < 2:
        raise UserError("--merge needs at least two finished runs")
    if any(Path(p).resolve() == Path(out).resolve() for p in parts):
        raise UserError(f"--out {out} is one of the runs to merge: write the merged run to another folder")
    _refuse_foreign(Path(out))
    was = read_json(Path(out) / "config.json")
    merged_before = [Path(q["out"]).resolve() for q in (was or {}).get("parts") or [] if isinstance(q, dict)]
    if was is not None and merged_before != [Path(p).resolve() for p in parts]:  # (a merge of these again: fine)
        raise UserError(f"--out {out} holds another bandit run (its config.json"
                        f"{', a merge of other parts' if merged_before else ', a run of its own'}), which the merge "
                        "would replace: give another folder")
    read = [(Path(p), *_read_part(Path(p))) for p in parts]
    first = read[0][1]
    agents: list[str] = []

    def reading(key: str) -> list[tuple[Path, dict[str, Any]]]:
        """The parts whose agents read setting ``key`` (AGENT_SETTINGS: the others ran with its default)."""
        kinds = AGENT_SETTINGS.get(key)
        return [(p, c) for p, c, _, _ in read
                if kinds is None or any(parse_agent(a).kind in kinds for a in c["agents"])]

    settings = sorted({k for _, c, _, _ in read for k in c} - _PART_FREE - {"seeds"})
    for key in settings:
        readers = reading(key)
        for path, part_cfg in readers[1:]:
            if part_cfg.get(key) != readers[0][1].get(key):
                raise UserError(f"{path} ran with {key}={part_cfg.get(key)!r} and {readers[0][0]} with "
                                f"{readers[0][1].get(key)!r}: only runs of the same settings and seeds merge")
    seeds: list[int] = []
    ran: dict[tuple[str, int], Path] = {}
    for path, part_cfg, _, _ in read:
        for a in part_cfg["agents"]:
            for s in map(int, part_cfg["seeds"]):
                if (a, s) in ran:
                    raise UserError(f"{path} repeats agent {a} on seed {s} of {ran[(a, s)]}: each agent and seed once")
                ran[(a, s)] = path
        agents += [a for a in part_cfg["agents"] if a not in agents]
        seeds += [s for s in map(int, part_cfg["seeds"]) if s not in seeds]
    gap = next(((a, s) for a in agents for s in seeds if (a, s) not in ran), None)
    if gap is not None:
        raise UserError(f"the runs leave agent {gap[0]} without seed {gap[1]}: a merged run gives every agent "
                        f"every seed ({', '.join(map(str, seeds))}); add the missing run")
    fields = {f.name for f in dataclasses.fields(BanditConfig)}
    kept = {k: v for k, v in first.items() if k in fields}
    for key in settings:  # from a part whose agents read it (else the first part's: the default)
        found = [c[key] for _, c in reading(key) if key in c]
        if key in fields and found:
            kept[key] = found[0]
    kept.update(agents=tuple(agents), seeds=tuple(seeds), hidden=tuple(first["hidden"]), out=str(out),
                data_dir=data_dir, loggers=tuple(loggers))  # (how the merge is watched, not a part's)
    cfg = BanditConfig(**kept)
    cfg.validate()
    order = {a: i for i, a in enumerate(agents)}
    rows = sorted((r for _, _, rs, _ in read for r in rs), key=lambda d: (d["step"], order[d["agent"]], d["seed"]))
    summary = []
    for a in agents:
        mine = [([int(s) for s in c["seeds"]], row) for _, c, _, ss in read for row in ss if row["agent"] == a]
        if len(mine) != sum(a in c["agents"] for _, c, _, _ in read):
            raise UserError(f"a run to merge has no summary row of agent {a} (its summary.json is not its run's); "
                            "run it again")
        summary.append(mine[0][1] if len(mine) == 1 else _seed_split_summary(a, cfg.steps, rows, mine))
    if edible is None:
        from ...data import load_mushroom

        _, edible = load_mushroom(data_dir)
    edible_share = float(torch.as_tensor(edible).float().mean())
    marks = figure6_marks(summary, rows, edible_share)
    seconds = sum(float(c.get("seconds", 0.0)) for _, c, _, _ in read)
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    parts_meta = [{"out": str(p), "agents": c["agents"], "seeds": c["seeds"], "seconds": c.get("seconds")}
                  for p, c, _, _ in read]
    with lock_run_dir(outp):
        files = _write_outputs(outp, cfg, rows, summary, seconds, int(first.get("workers_used", 1)),
                               oracle_eat=edible_share, marks=marks, extra={"parts": parts_meta})
        if cfg.loggers:
            _write_events(outp, cfg, rows)
    for m in marks:
        print(f"  {mark_word(m['holds'])}: {m['mark']} ({m['measured']})")
    print(f"bandit: merged {len(read)} runs ({', '.join(' '.join(c['agents']) for _, c, _, _ in read)}); "
          f"wrote {outp}", flush=True)
    return {"regret_rows": rows, "summary": summary, "marks": marks, "seconds": seconds, "files": files,
            "config": cfg}


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
