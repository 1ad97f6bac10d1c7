"""The reproduction's configuration and plan: which cells, which runs (jobs), how long."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import runs as T
from ...cli.cost import COSTED_AS, epoch_costs, epoch_seconds
from ...errors import UserError, check_int
from ...options import (
    DeviceKind,
    StrOption,
    choice,
    device_name,
)
from ...runs.loggers import make_loggers
from .recipes import (
    BUDGETS,
    CELL_ORDER,
    COMMON_SETTINGS,
    DATASETS,
    METHOD_SETTINGS,
    METHODS,
    WIDTHS,
    Budget,
    BudgetSpec,
    cell_candidates,
)


def method_arg(m: str) -> str:
    return m.replace("_", "-")


CELLS_HELP = (
    "METHOD or METHOD:WIDTH, comma-separated, or all; methods: "
    + ", ".join(method_arg(m) for m in METHODS) + "; widths: " + ", ".join(map(str, WIDTHS))
    + " (e.g. bbb-mixture:1200,sgd:1200); laplace:WIDTH trains the SGD cell its last-layer Laplace row is of, "
    "ensemble:WIDTH the SGD cell and the seeds its deep-ensemble row is of")


def parse_cells(cells: str | Sequence[Any] | None, budget: Budget | str | None = None,
                ) -> tuple[tuple[str, int], ...]:
    """The cells named by ``--cells`` in the order of work (:data:`CELL_ORDER`).

    ``cells``: None or ``"all"`` (every cell of ``budget``; without a budget, every cell), or
    comma-separated items ``METHOD`` (its three widths) or ``METHOD:WIDTH``, e.g.
    ``"bbb-mixture:1200,sgd:1200"`` (``-`` or ``_`` in the method's name), or a sequence of such
    items or of ``(method, width)`` pairs. A bad item, or a method the budget does not train
    (IVON at the paper budget), raises a one-line :class:`UserError` that says what to use.
    ``laplace`` names the SGD cells (the last-layer Laplace rows' networks; none at the paper budget),
    ``ensemble`` too (the deep-ensemble rows' members: the SGD cells' seeds; the quick budget's).
    """
    every = CELL_ORDER if budget is None else BUDGETS[Budget(budget)].cells
    if cells is None:
        return every
    items: list[Any] = cells.split(",") if isinstance(cells, str) else list(cells)
    chosen: set[tuple[str, int]] = set()
    for item in items:
        if isinstance(item, tuple | list) and len(item) == 2:
            name, width = str(item[0]), str(item[1])
            text = f"{name}:{width}"
        else:
            text = str(item).strip()
            if not text:
                continue
            name, sep, width = text.partition(":")
            if text.lower() == "all":
                chosen.update(every)
                continue
            if not sep:
                width = ""
        method = name.strip().lower().replace("-", "_")
        if method == "laplace":  # the last-layer Laplace rows: the SGD cells' networks (nothing of their own)
            if budget is not None and not BUDGETS[Budget(budget)].laplace:
                raise UserError(f"--cells {text}: the {Budget(budget).value} budget has no last-layer Laplace rows "
                                "(not in the paper's Table 1); use --budget quick or smoke for them")
            method = "sgd"
        if method == "ensemble":  # the deep-ensemble rows: the SGD cells and their seeds
            if budget is not None and not BUDGETS[Budget(budget)].ensemble:
                raise UserError(f"--cells {text}: the {Budget(budget).value} budget has no deep-ensemble rows "
                                "(not in the paper's Table 1); use --budget quick for them")
            method = "sgd"
        if method not in METHODS:
            raise UserError(f"--cells: unknown method {name.strip()!r} in {text!r}; use {CELLS_HELP}")
        if budget is not None and method not in BUDGETS[Budget(budget)].methods:
            trains = [b.value for b in (Budget.QUICK, Budget.SMOKE, Budget.PAPER) if method in BUDGETS[b].methods]
            raise UserError(f"--cells {text}: the {Budget(budget).value} budget does not train {method_arg(method)} "
                            f"(not in the paper's Table 1); use --budget {' or '.join(trains)} for it")
        if not width.strip():
            chosen.update((method, w) for w in WIDTHS)
            continue
        try:
            w = int(width)
        except ValueError:
            w = -1
        if w not in WIDTHS:
            raise UserError(f"--cells: unknown width {width.strip()!r} in {text!r}; use {CELLS_HELP}")
        chosen.add((method, w))
    if not chosen:
        raise UserError(f"--cells names no cell; use {CELLS_HELP}")
    return tuple(c for c in CELL_ORDER if c in chosen)


CANDIDATES_HELP = ("candidates by number, comma-separated: c0,c2 (or 0,2); --plan lists each cell's "
                   "candidates")


def parse_candidates(candidates: str | Sequence[Any] | None, option: str = "--candidates",
                     ) -> tuple[int, ...] | None:
    """The candidate numbers named by ``--candidates`` (``"c0,c2"``, ``"0,2"`` or a sequence of
    ints), sorted; None: every candidate. A bad item is a one-line :class:`UserError` that names
    ``option``."""
    if candidates is None:
        return None
    items = candidates.split(",") if isinstance(candidates, str) else list(candidates)
    chosen: set[int] = set()
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        digits = text[1:] if text[:1] in ("c", "C") else text
        if not digits.isdigit():
            raise UserError(f"{option}: {text!r} is not a candidate; use {CANDIDATES_HELP}")
        chosen.add(int(digits))
    if not chosen:
        raise UserError(f"{option} names no candidate; use {CANDIDATES_HELP}")
    return tuple(sorted(chosen))


def candidates_text(candidates: Sequence[int]) -> str:
    return ",".join(f"c{c}" for c in candidates)


def cells_text(cells: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{method_arg(m)}:{w}" for m, w in cells)


class Experiment(StrOption):
    """Which experiment a :class:`ReproduceConfig` describes (stored in ``reproduce.json``)."""

    MNIST = "mnist"
    UCI = "uci"


@dataclass
class ReproduceConfig:
    """Settings of :func:`run_reproduce` (the ``bbb reproduce mnist`` options).

    ``budget`` and ``experiment`` hold their Enum member, given the member or its string value;
    ``reproduce.json`` stores the string value."""

    budget: Budget = Budget.SMOKE
    out: str = "runs/reproduce-mnist"
    dataset: str = "mnist"
    seeds: int | None = None  # None: the budget's default
    device: str = DeviceKind.AUTO.value
    data_dir: str | None = None
    quiet: bool = False
    experiment: Experiment = Experiment.MNIST
    #: the cells to train (``--cells``; see :func:`parse_cells`); None: all of the budget's
    cells: Any = None
    #: the candidates of those cells to train (``--candidates``; see :func:`parse_candidates`), so
    #: that one call can train one candidate of a cell; None: all. A cell is selected, and its
    #: extra seeds trained, only once all of its candidates have finished.
    candidates: Any = None
    #: the one candidate whose extra seeds are trained before its cell's selection is final
    #: (``--seeds-of``), so that a free core need not wait for the other candidates; those seeds
    #: count only if the validation error then selects this candidate. None: wait.
    seeds_of: Any = None
    #: where the finished runs' checkpoints are (``--checkpoints``): a folder holding
    #: ``<run name>/last.pt`` (as ``--out``'s ``runs/`` does where the runs trained). Table 2 and
    #: Figures 3-4 are made from them; a run whose checkpoint is not there keeps those files as
    #: committed. None: ``--out``'s ``runs/``.
    checkpoints: str | None = None
    #: experiment loggers of every run trained (``--log``; names of :data:`bbb.runs.loggers.LOGGERS`)
    loggers: tuple[str, ...] = ()
    #: train a cell's candidates (those that differ only in a population's member settings) and each
    #: seed cell's extra seeds together as populations (``--population``:
    #: :func:`bbb.runs.train_population`; a Bayesian cell's, the others one by one)
    population: bool = False
    #: the runs' steps replayed from CUDA graphs (``--cuda-graph``: :mod:`bbb.runs.cuda_graph`, the
    #: populations' too; a GPU; IVON's runs train eagerly)
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        self.experiment = Experiment(choice("experiment", self.experiment, Experiment))
        self.budget = Budget(choice("budget", self.budget, Budget))
        self.dataset = choice("dataset", self.dataset, DATASETS)
        self.device = device_name(self.device)
        if self.seeds is None:
            self.seeds = BUDGETS[self.budget].seeds
        self.seeds = check_int("--seeds", self.seeds)
        if not str(self.out):
            raise UserError("--out must name a folder")
        if self.data_dir is not None:
            self.data_dir = str(self.data_dir)
        self.loggers = tuple(self.loggers or ())
        self.cuda_graph = bool(self.cuda_graph)
        if self.cuda_graph and self.device == DeviceKind.CPU.value:
            raise UserError("--cuda-graph captures the training step on a GPU; leave it out with --device cpu")
        make_loggers(self.loggers)  # an unknown name or a missing package: one line, before anything runs
        if self.checkpoints is not None:
            self.checkpoints = str(self.checkpoints)
            if not Path(self.checkpoints).is_dir():
                raise UserError(f"--checkpoints {self.checkpoints}: no such folder; name the folder that "
                                "holds <run name>/last.pt for each run (e.g. the --out/runs of the machine "
                                "that trained them)")
        if not isinstance(self.cells, str | type(None)) and any(
                {tuple(c) for c in self.cells} == set(b.cells) for b in BUDGETS.values()):
            self.cells = None  # every cell of another budget (dataclasses.replace(cfg, budget=...)): every cell
        self.cells = parse_cells(self.cells, self.budget)
        self.candidates = parse_candidates(self.candidates)
        for m, w in self.cells if self.candidates is not None else ():
            n = len(cell_candidates(self.spec, m, w))
            if self.candidates[-1] >= n:
                raise UserError(f"--candidates: {method_arg(m)}:{w} has {n} candidate(s) at the {self.budget.value} "
                                f"budget ({candidates_text(range(n))}), not c{self.candidates[-1]}; "
                                "choose --cells and --candidates that match (see --plan)")
        if self.seeds_of is not None:
            one = [self.seeds_of] if isinstance(self.seeds_of, int) else self.seeds_of  # after replace()
            picked = parse_candidates(one, "--seeds-of") or ()
            if len(picked) != 1:
                raise UserError(f"--seeds-of names one candidate, got {candidates_text(picked)}")
            self.seeds_of = picked[0]
            if self.seeds < 2:
                raise UserError("--seeds-of trains extra seeds, but --seeds asks for seed 0 only; "
                                "add them: --seeds 0 1")
            cells = [c for c in self.cells if c in self.spec.seed_cells]
            if not cells:
                raise UserError(f"--seeds-of: none of the cells {cells_text(self.cells)} has extra seeds at the "
                                f"{self.budget.value} budget; its seed cells: "
                                f"{cells_text(sorted(self.spec.seed_cells))}")
            for m, w in cells:
                n = len(cell_candidates(self.spec, m, w))
                if self.seeds_of >= n:
                    raise UserError(f"--seeds-of: {method_arg(m)}:{w} has {n} candidate(s) at the {self.budget.value} "
                                    f"budget ({candidates_text(range(n))}), not c{self.seeds_of}")

    @property
    def spec(self) -> BudgetSpec:
        return BUDGETS[self.budget]

    @property
    def all_cells(self) -> bool:
        return set(self.cells) == set(self.spec.cells)

    def checkpoint_dir(self, job: Job) -> Path:
        """The folder whose ``last.pt`` holds ``job``'s trained network: ``--checkpoints/<run>``
        when given, else the run's own directory."""
        return job.run_dir if self.checkpoints is None else Path(self.checkpoints) / job.name


@dataclass
class Job:
    """One training run: a cell's candidate with one seed."""

    method: str
    hidden: int
    candidate: int
    seed: int
    config: T.TrainConfig
    run_dir: Path
    n_candidates: int = 1
    label: str = ""
    reason: str = ""

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def cell(self) -> tuple[str, int]:
        return (self.method, self.hidden)


def run_name(method: str, hidden: int, candidate: int, seed: int) -> str:
    return f"{method}_{hidden}" + (f"_c{candidate}" if candidate else "") + (f"_s{seed}" if seed else "")


def train_config(cfg: ReproduceConfig, method: str, hidden: int, settings: dict[str, Any],
                  seed: int) -> T.TrainConfig:
    spec = cfg.spec
    merged = {**COMMON_SETTINGS, **spec.common, **METHOD_SETTINGS[method], **settings}
    return T.TrainConfig(**{
        **merged, "epochs": spec.epochs[method][hidden], "hidden": [hidden, hidden], "seed": seed,
        "dataset": cfg.dataset, "device": cfg.device, "data_dir": cfg.data_dir,
        "eval_samples": spec.eval_samples, "cuda_graph": cfg.cuda_graph and merged.get("method") != "ivon",
        # the budget's first train_limit training images (limit_data), recorded as the run's own
        # setting, so that a command given the run later (bbb laplace, evaluate) reads those too
        **({"train_size": spec.train_limit} if spec.train_limit is not None else {}),
    })


def make_job(cfg: ReproduceConfig, method: str, hidden: int, candidate: int, seed: int) -> Job:
    cands = cell_candidates(cfg.spec, method, hidden)
    c = cands[candidate]
    return Job(method, hidden, candidate, seed,
               train_config(cfg, method, hidden, c.settings, seed),
               Path(cfg.out) / "runs" / run_name(method, hidden, candidate, seed), len(cands),
               c.label, c.reason)


def cell_jobs(cfg: ReproduceConfig, method: str, hidden: int) -> list[Job]:
    """Every candidate of one cell, seed 0."""
    return [make_job(cfg, method, hidden, c, 0) for c in range(len(cell_candidates(cfg.spec, method, hidden)))]


def plan_jobs(cfg: ReproduceConfig) -> tuple[list[Job], list[Job]]:
    """The runs of ``cfg.cells`` in the order of work (:data:`CELL_ORDER`): (the selection
    runs: every candidate of every cell (those of ``cfg.candidates``) with seed 0; the extra
    seeds of the budget's seed cells, with their first candidate as a placeholder until
    selection is done)."""
    first = [j for m, w in cfg.cells for j in cell_jobs(cfg, m, w)
             if cfg.candidates is None or j.candidate in cfg.candidates]
    extra = [make_job(cfg, m, w, 0, s) for (m, w) in cfg.cells for s in range(1, cell_seeds(cfg, m, w))]
    return first, extra


def cell_seeds(cfg: ReproduceConfig, method: str, hidden: int) -> int:
    """The seeds one cell trains (its selected candidate's): ``cfg.seeds`` for the budget's seed
    cells, else 1; an SGD cell at least the members of the budget's deep ensembles."""
    n = int(cfg.seeds or 1) if (method, hidden) in cfg.spec.seed_cells else 1
    return max(n, cfg.spec.ensemble) if method == "sgd" else n


def _epoch_seconds(job: Job, n_train: int) -> float:
    """The cost model's seconds per epoch of ``job`` (:func:`bbb.cli.cost.epoch_seconds`)."""
    return epoch_seconds(job.config.method, job.config.hidden, job.config.samples, n_train)


def _measured_epoch_seconds(job: Job) -> float | None:
    """The median seconds per epoch of the last (up to) 20 epochs ``job`` has trained, from its
    metrics.csv (None before its first epoch)."""
    path = job.run_dir / "metrics.csv"
    if not path.is_file():
        return None
    try:
        secs = [float(r["seconds"]) for r in T.read_metrics(job.run_dir)[-20:] if r.get("seconds") is not None]
    except (UserError, ValueError, OSError, KeyError, TypeError):
        return None
    return statistics.median(secs) if secs else None


def estimate_seconds(job: Job, n_train: int = 50000, epochs_done: int = 0, measured: bool = True) -> float:
    """Estimated seconds of ``job`` (training plus final evaluation): the run's own measured
    pace when it has trained an epoch already (``measured``), else the cost model's (a quiet
    2-core CPU: :func:`bbb.cli.cost.epoch_seconds`)."""
    per_epoch = (_measured_epoch_seconds(job) if measured else None) or _epoch_seconds(job, n_train)
    method = COSTED_AS.get(job.config.method, job.config.method)  # ivon: costed as bbb (the same network)
    evals = epoch_costs()["reproduce"]["final_evaluation_epochs"][method]  # in epochs
    return per_epoch * (max(0, job.config.epochs - epochs_done) + evals)


def fmt_time(s: float) -> str:
    s = max(0.0, float(s))
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 48 * 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{s / 86400:.1f} days"
