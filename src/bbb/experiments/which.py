"""``bbb reproduce which``: docs/which_method.md, written from the committed results' files (never
typed by hand): for each benchmark, each method's score per task with its standard error, the
winner of each task (methods within two combined standard errors of the best are a tie: a
difference inside the noise is not a win), the methods' costs where the files record them, and the
choice this implies. ``--check`` says whether the committed page is what the files give."""

from __future__ import annotations

import argparse
import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..cli.common import add_out
from ..errors import UserError
from ..io import atomic_write_text
from .ties import same_score

__all__ = ["Score", "Task", "Benchmark", "winners", "load_benchmarks", "render", "add_arguments", "main",
           "EXAMPLE", "TIE_SE"]

EXAMPLE = ("bbb reproduce which --out docs/which_method.md   # the committed page, from results/\n"
           "  bbb reproduce which --check docs/which_method.md   # is it what results/ gives?")

#: two methods tie on a task when their scores differ by at most this many combined standard errors
TIE_SE = 2.0


@dataclass(frozen=True)
class Score:
    mean: float
    se: float | None  #: standard error (over seeds or splits); None: one run, no spread
    #: the values per split or seed when the tasks' methods share them (paired: the comparison of two
    #: methods is then the standard error of their per-unit differences)
    units: dict[str, float] | None = None


@dataclass
class Task:
    name: str
    scores: dict[str, Score]


@dataclass
class Benchmark:
    name: str
    source: str  #: the files it is read from
    score: str  #: what is compared, e.g. "test log-likelihood"
    higher_is_better: bool
    spread: str  #: what the standard errors are over
    tasks: list[Task]
    cost: dict[str, float] = field(default_factory=dict)  #: a method's cost, in ``cost_unit``
    cost_unit: str = ""
    notes: list[str] = field(default_factory=list)


def difference_se(a: Score, b: Score) -> float:
    """The standard error of ``a.mean - b.mean``: of the per-unit differences where both have the
    same units (splits or seeds, at least two: paired), else of independent means."""
    if a.units and b.units and set(a.units) == set(b.units) and len(a.units) > 1:
        d = [a.units[u] - b.units[u] for u in a.units]
        m = sum(d) / len(d)
        return math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))
    return math.sqrt((a.se or 0.0) ** 2 + (b.se or 0.0) ** 2)


def winners(task: Task, higher_is_better: bool, tie_se: float = TIE_SE) -> list[str]:
    """The best method of ``task`` and those tied with it: within ``tie_se`` standard errors of the
    difference from the best (paired over splits or seeds where the files give them; two methods
    with no spread tie only on an equal score, one with none ties within ``tie_se`` of the other's
    standard error), best first."""
    sign = 1.0 if higher_is_better else -1.0
    best = max(task.scores, key=lambda m: sign * task.scores[m].mean)
    b = task.scores[best]
    out = [m for m, s in task.scores.items()
           if sign * (b.mean - s.mean) <= tie_se * difference_se(b, s) or same_score(b.mean, s.mean)]
    return sorted(out, key=lambda m: -sign * task.scores[m].mean)


def _units(path: Path, key: Callable[[dict[str, str]], tuple[str, str]], unit: str, value: str
           ) -> dict[tuple[str, str], dict[str, float]]:
    """Per (task, method): ``{unit: value}`` from a per-split or per-seed CSV (empty when missing)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    if path.is_file():
        for r in _rows(path):
            if (v := _num(r.get(value))) is not None:
                out.setdefault(key(r), {})[r[unit]] = v
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(v: str | None) -> float | None:
    try:
        x = float(v) if v not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


#: what the UCI tables' standard errors are over, and how (bbb.experiments.uci.report's convention)
UCI_SPREAD = "the splits: population sd / sqrt(n), as the published UCI tables"
#: the other benchmarks' standard errors, over seeds
SAMPLE_SE = "the seeds (sample sd / sqrt(n))"
#: where each UCI method's minutes were measured (results/uci/new-methods.md)
UCI_COST_NOTE = ("Cost: each method's minutes are its job files', on the machine that trained it (BBB, MC dropout "
                 "and the deep ensembles the fourth run's, yacht and bostonHousing sharing its cores with other work; "
                 "Laplace an Intel Xeon; IVON and the BBB ensemble an AMD EPYC: results/uci/new-methods.md), so a "
                 "ratio of two costs is a rough one.")


def _uci(root: Path) -> Benchmark | None:
    path = root / "uci" / "methods.csv"
    if not path.is_file():
        return None
    tasks: dict[str, Task] = {}
    cost: dict[str, float] = {}
    units = _units(root / "uci" / "splits.csv", lambda r: (r["dataset"], r["method"]), "split", "ll")
    for r in _rows(path):
        mean = _num(r["ll_mean"])
        if mean is None:
            continue
        tasks.setdefault(r["dataset"], Task(r["dataset"], {})).scores[r["method"]] = Score(
            mean, _num(r["ll_se"]), units.get((r["dataset"], r["method"])))
        cost[r["method"]] = cost.get(r["method"], 0.0) + (_num(r.get("seconds")) or 0.0) / 60.0
    what = "worker-minutes over the 9 datasets, validation grid included"
    if "bbb_ensemble" in cost and "bbb" in cost:  # it trains at BBB's validation choice: BBB's run is part of it
        cost["bbb_ensemble"] += cost["bbb"]
        what += "; bbb_ensemble's includes bbb's, whose validation chooses its setting"
    return Benchmark("UCI regression (9 datasets, standard splits)", "results/uci/methods.csv", "test log-likelihood",
                     True, UCI_SPREAD, list(tasks.values()), cost, what, [UCI_COST_NOTE])


def _uci_calibration(root: Path) -> Benchmark | None:
    """The same UCI runs' intervals: each method's calibration gap (methods.csv, in points), paired
    over the splits by their terms of the gap (splits.csv; :func:`~bbb.experiments.uci.report.gap_terms`)."""
    from .uci.report import gap_terms

    path = root / "uci" / "methods.csv"
    if not path.is_file():
        return None
    rows = [r for r in _rows(path) if _num(r.get("calibration_gap")) is not None]
    if not rows:
        return None
    per_split: dict[tuple[str, str], list[dict[str, str]]] = {}
    split_path = root / "uci" / "splits.csv"
    for r in _rows(split_path) if split_path.is_file() else []:
        per_split.setdefault((r["dataset"], r["method"]), []).append(r)
    tasks: dict[str, Task] = {}
    for r in rows:
        split_rows = per_split.get((r["dataset"], r["method"]), [])
        terms = gap_terms(r, split_rows)
        units = {s["split"]: 100.0 * t for s, t in zip(split_rows, terms)} if terms else None
        se = _num(r.get("calibration_gap_se"))
        tasks.setdefault(r["dataset"], Task(r["dataset"], {})).scores[r["method"]] = Score(
            100.0 * float(r["calibration_gap"]), None if se is None else 100.0 * se, units)
    uci = _uci(root)
    return Benchmark("UCI regression: do the intervals hold their level?", "results/uci/methods.csv",
                     "calibration gap, points: the mean |coverage - level| of the central 50, 90 and 95% intervals",
                     False, UCI_SPREAD, list(tasks.values()), uci.cost if uci else {}, uci.cost_unit if uci else "",
                     ["The same runs as the log-likelihood above, the same cost; each method's noise was chosen on "
                      "validation log-likelihood, never on coverage. Which side a method misses on (too wide or too "
                      "narrow) is in results/uci/README.md, \"Interval calibration\"."])


#: the LoRA runs, the newest first: the page reads the newest one there is
LORA_RUNS = ("lora/second-run", "lora")


def _lora(root: Path, metric: str = "nll") -> Benchmark | None:
    """The newest LoRA run's test NLL (``metric="nll"``) or ECE (``"ece"``) per task and method,
    paired over the seeds (seeds.csv), and each method's cost."""
    folder = next((root / r for r in LORA_RUNS if (root / r / "methods.csv").is_file()), None)
    if folder is None:
        return None
    path = folder / "methods.csv"
    tasks: dict[str, Task] = {}
    units = _units(folder / "seeds.csv", lambda r: (f"{r['arch']} {r['task']} K={r['shots']}", r["method"]),
                   "seed", metric)
    for r in _rows(path):
        mean = _num(r.get(metric))
        if mean is None:
            continue
        name = f"{r['arch']} {r['task']} K={r['shots']}"
        tasks.setdefault(name, Task(name, {})).scores[r["method"]] = Score(mean, _num(r.get(f"{metric}_se")),
                                                                          units.get((name, r["method"])))
    if not tasks:
        return None
    cost: dict[str, float] = {}
    chose: dict[str, float] = {}  # the validation jobs' minutes, by method
    seeds = folder / "seeds.csv"
    for r in _rows(seeds) if seeds.is_file() else []:
        if "seconds" not in r:
            break  # a run reported before the seconds were recorded
        cost[r["method"]] = cost.get(r["method"], 0.0) + ((_num(r["seconds"]) or 0.0)
                                                          + (_num(r.get("validation_seconds")) or 0.0)) / 60.0
        chose[r["method"]] = chose.get(r["method"], 0.0) + (_num(r.get("validation_seconds")) or 0.0) / 60.0
    what = "worker-minutes over the 12 tasks and their seeds, validation grid included"
    if "laplace" in cost and "map" in chose:  # trained at map's validation choice
        cost["laplace"] += chose["map"]
        what += "; laplace's includes map's validation, which chooses its setting"
    notes = [] if cost else ["Cost: not in this run's files (reported before the seconds were recorded)."]
    if metric == "ece":
        notes = ["The same runs as the NLL above, the same cost: the ECE of the averaged probabilities, 15 "
                 "equal-width bins, as a fraction."]
    name = "Few-shot Bayesian LoRA (2 backbones x 2 tasks x K = 5, 10, 50)" + (": calibration" if metric == "ece"
                                                                           else "")
    return Benchmark(name, f"results/{folder.relative_to(root)}/methods.csv", "test NLL" if metric == "nll" else
                     "test ECE", False, SAMPLE_SE, list(tasks.values()), cost, what, notes=notes)


def _lora_calibration(root: Path) -> Benchmark | None:
    return _lora(root, "ece")


def _mnist(root: Path) -> Benchmark | None:
    path = root / "mnist" / "table1.csv"
    if not path.is_file():
        return None
    tasks: dict[str, Task] = {}
    seconds: dict[str, list[float]] = {}
    shared = False
    for r in _rows(path):
        err, n = _num(r["test_error"]), int(_num(r.get("n_seeds")) or 1)
        if err is None or r.get("status", "ok") != "ok":
            continue
        sd = _num(r.get("test_error_sd"))
        name = f"{r['hidden']} units/layer"
        tasks.setdefault(name, Task(name, {})).scores[r["method"]] = Score(err, sd / math.sqrt(n) if sd and n > 1
                                                                          else None)
        if (s := _num(r.get("seconds"))) is not None:  # a run trained in a population: its share of its wall time
            k = _num(r.get("population")) or 1.0
            shared = shared or k > 1
            seconds.setdefault(r["method"], []).append(s / k)
    return Benchmark("MNIST, the paper's MLPs (quick budget)", "results/mnist/table1.csv", "test error %", False,
                     "the seeds where n > 1 (sample sd / sqrt(n))", list(tasks.values()),
                     {m: sum(v) / 60.0 for m, v in seconds.items()},
                     "minutes of one run per cell, summed over the widths"
                     + ("; a run trained in a population of K, its K-th of the population's" if shared else "")
                     + ("; deep_ensemble's its members' sum" if "deep_ensemble" in seconds else "")
                     + ("; laplace's its SGD network's training and its fit" if "laplace" in seconds else ""))


def _run_date(path: Path) -> tuple[str, str]:
    """A run folder's order, oldest first: the date its name ends with (``gpu-2026-11-27``), then its
    name; by name alone ``run-2026-11-28`` would come after a newer ``gpu-...``."""
    found = re.search(r"\d{4}-\d{2}-\d{2}$", path.parent.name)
    return (found.group(0) if found else "", path.parent.name)


def _fashion(root: Path) -> Benchmark | None:
    runs = sorted((root / "fashion").glob("*/methods.csv"), key=_run_date)
    if not runs:
        return None
    path = runs[-1]
    task = Task("LeNet-5", {})
    units = _units(path.parent / "seeds.csv", lambda r: ("LeNet-5", r["method"]), "seed", "nll")
    for r in _rows(path):
        if (mean := _num(r["nll"])) is not None:
            task.scores[r["method"]] = Score(mean, _num(r["nll_se"]), units.get(("LeNet-5", r["method"])))
    return Benchmark("Fashion-MNIST LeNet-5 (the IVON paper's protocol)", f"results/fashion/{path.parent.name}/"
                     "methods.csv", "test NLL", False, SAMPLE_SE, [task] if task.scores else [],
                     notes=["Cost: that run's seconds per epoch were measured with many jobs sharing one GPU, "
                            "some finished on a CPU (its table.md says which): bench/results/ivon-cost*.md has "
                            "each method's step alone."])


#: results/uncertainty's method column -> the name the other benchmarks give the method
UNCERTAINTY_NAMES = {"bbb": "bbb", "dropout": "mc_dropout", "sgd": "sgd", "ivon": "ivon", "laplace": "laplace",
                     "ensemble of 5 runs (sgd x 5)": "deep_ensemble", "ensemble of 5 runs (bbb x 5)": "bbb_ensemble",
                     "ensemble of 5 runs (laplace x 5)": "laplace_ensemble"}


def _uncertainty_rows(root: Path) -> list[dict[str, str]] | None:
    path = root / "uncertainty" / "comparison.csv"
    return _rows(path) if path.is_file() else None


def _uncertainty_benchmark(root: Path, ood: bool) -> Benchmark | None:
    rows = _uncertainty_rows(root)
    if rows is None:
        return None
    metrics = ({"OOD AUROC, predictive entropy": "auroc_entropy", "OOD AUROC, mutual information": "auroc_mi",
                "OOD AUROC, 1 - max probability": "auroc_max_prob"} if ood else
               {"test error %": "test_error", "test NLL": "nll", "ECE %": "ece", "Brier": "brier"})
    tasks = {name: Task(name, {}) for name in metrics}
    cost: dict[str, float] = {}
    for r in rows:
        method = UNCERTAINTY_NAMES.get(r["method"], r["method"])
        for name, column in metrics.items():
            if (v := _num(r.get(column))) is not None:
                tasks[name].scores[method] = Score(v, None)
        if (sec := _num(r.get("seconds"))) is not None:
            cost[method] = sec
    what = "OOD detection of Fashion-MNIST" if ood else "calibration"
    score = "OOD AUROC against the Fashion-MNIST test set" if ood else "test scores of the 10-sample predictive"
    return Benchmark(f"MNIST 2x400, {what} (one run each)", "results/uncertainty/comparison.csv", score, ood,
                     "the seeds (none here: one run each, so only an equal score ties)",
                     [t for t in tasks.values() if t.scores],
                     cost, "seconds of training, 2 runs sharing 2 cores; an ensemble's its members' sum; laplace's "
                     "its SGD network's training and its fit",
                     notes=["One run per method (15 epochs, the budget of results/uncertainty/README.md): differences "
                            "of this size change between runs of one recipe there (BBB's mutual-information AUROC "
                            "0.899 and 0.884 in two earlier runs, scored before the OOD set shared the test set's "
                            "sampled networks, 0.870 in this one)."])


def _uncertainty(root: Path) -> Benchmark | None:
    return _uncertainty_benchmark(root, ood=False)


def _uncertainty_ood(root: Path) -> Benchmark | None:
    return _uncertainty_benchmark(root, ood=True)


#: results/your-data's method column -> the name the other benchmarks give it (one network; its
#: ensemble of 5 is ENSEMBLE_NAMES')
YOUR_DATA_NAMES = {"bbb": "bbb", "sgd": "sgd", "dropout": "mc_dropout", "ivon": "ivon"}
ENSEMBLE_NAMES = {"bbb": "bbb_ensemble", "sgd": "deep_ensemble", "dropout": "mc_dropout_ensemble",
                  "ivon": "ivon_ensemble"}


def _your_data_tasks(root: Path, member: Callable[[str, dict[str, str]], float | None],
                     ensemble: Callable[[str, dict[str, str]], float | None],
                     files: tuple[str, str] = ("ensembles.csv", "members.csv")) -> list[Task] | None:
    """The your-data benchmark's tasks: per table, each method's mean over its seeds (the rows of
    ``files[1]``, members.csv, through ``member``, paired by seed) and each ensemble's one value
    (``files[0]``'s, ensembles.csv's, row through ``ensemble``); None without the files."""
    path, members = root / "your-data" / files[0], root / "your-data" / files[1]
    if not (path.is_file() and members.is_file()):
        return None
    seeds: dict[tuple[str, str], dict[str, float]] = {}
    for r in _rows(members):
        if (v := member(r["table"], r)) is not None:
            seeds.setdefault((r["table"], r["method"]), {})[r["seed"]] = v
    tasks: dict[str, Task] = {}
    for r in _rows(path):
        task = tasks.setdefault(r["table"], Task(r["table"], {}))
        units = seeds.get((r["table"], r["method"]), {})
        if len(units) > 1:
            vals = list(units.values())
            mean = sum(vals) / len(vals)
            sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
            task.scores[YOUR_DATA_NAMES.get(r["method"], r["method"])] = Score(mean, sd / math.sqrt(len(vals)), units)
        if (e := ensemble(r["table"], r)) is not None:
            task.scores[ENSEMBLE_NAMES.get(r["method"], r["method"] + "_ensemble")] = Score(e, None)
    return list(tasks.values())


def _your_data(root: Path) -> Benchmark | None:
    path = root / "your-data" / "ensembles.csv"
    nll = {r["table"] for r in _rows(path) if r.get("fit") == "NLL"} if path.is_file() else set()

    def ll(table: str, v: float | None) -> float | None:  # a classifier's: minus its NLL
        return None if v is None else (-v if table in nll else v)

    tasks = _your_data_tasks(root, lambda t, r: ll(t, _num(r.get("fit"))),
                             lambda t, r: ll(t, _num(r.get("ensemble_fit"))))
    if tasks is None:
        return None
    return Benchmark("Your own tables at the table defaults (5 seeds each, one split)", "results/your-data/"
                     "ensembles.csv, members.csv", "test log-likelihood per row", True,
                     "the seeds (sample sd / sqrt(n); an ensemble of the 5: none)", tasks,
                     notes=["Each method at `bbb train`'s defaults for a table, nothing tuned per table (the UCI "
                            "benchmark above tunes each on validation per split); mushroom's log-likelihood is "
                            "minus its NLL. One split per table, 31 to 819 test rows. An ensemble is one value "
                            "with no spread, so two ensembles a few thousandths apart (Boston, wine) count as a win "
                            "and a loss: "
                            "read them against the single networks' standard errors (0.005-0.15)."])


def _your_data_calibration(root: Path) -> Benchmark | None:
    """The same runs' calibration, in points: a regression table's interval gap (the mean |coverage -
    level| of the central 5-99% intervals), a classifier's ECE."""
    def points(v: float | None) -> float | None:
        return None if v is None else 100.0 * v

    tasks = _your_data_tasks(root, lambda t, r: points(_num(r.get("calibration"))),
                             lambda t, r: points(_num(r.get("ensemble_calibration"))))
    if tasks is None or not any(t.scores for t in tasks):
        return None
    return Benchmark("Your own tables at the table defaults: calibration", "results/your-data/ensembles.csv, "
                     "members.csv", "calibration, points: a regression's interval gap (mean |coverage - level| of "
                     "the central 5-99% intervals), a classifier's ECE (15 bins)", False,
                     "the seeds (sample sd / sqrt(n); an ensemble of the 5: none)", tasks,
                     notes=["The same runs as the log-likelihood above. Which side a method misses on (too wide or "
                            "too narrow) is in results/your-data/README.md."])


def _your_data_ood(root: Path) -> Benchmark | None:
    """results/your-data/ood.py's: how well each method's epistemic sd ranks rows held out from a
    table (above a column's 80th percentile) above the table's own test rows."""
    tasks = _your_data_tasks(root, lambda t, r: _num(r.get("auroc_epistemic_sd")),
                             lambda t, r: _num(r.get("ensemble_epistemic_sd")), ("ood.csv", "ood_members.csv"))
    if tasks is None:
        return None
    return Benchmark("Your own tables: rows from elsewhere (5 regression tables, 5 seeds each)", "results/your-data/"
                     "ood.csv, ood_members.csv", "AUROC of the epistemic sd, the held-out far rows against the "
                     "table's test rows", True, "the seeds (sample sd / sqrt(n); an ensemble of the 5: none)", tasks,
                     notes=["The rows above the 80th percentile of the column most correlated with the target, held "
                            "out, never trained on; each method at the table defaults (results/your-data/README.md, "
                            "\"Rows from elsewhere\"). One deterministic network has no epistemic sd: sgd has only "
                            "its ensemble (the members' disagreement). 26 to 129 test rows per table."])


LOADERS: tuple[Callable[[Path], Benchmark | None], ...] = (
    _uci, _uci_calibration, _lora, _lora_calibration, _mnist, _fashion, _uncertainty, _uncertainty_ood, _your_data,
    _your_data_calibration, _your_data_ood)


def load_benchmarks(results: Path) -> list[Benchmark]:
    """Every benchmark whose files are under ``results``."""
    return [b for load in LOADERS if (b := load(results)) is not None]


def _fmt(s: Score, decimals: int) -> str:
    return f"{s.mean:.{decimals}f}" + ("" if s.se is None else f" +- {s.se:.{decimals}f}")


def render(benchmarks: list[Benchmark], command: str) -> str:
    """The page: per benchmark, the tasks' scores with their winners in bold, each method's count
    of tasks won alone and tied, its cost, and the choice this implies."""
    out = ["# Which method when", "",
           f"Written by `{command}` from the committed results' files (do not edit by hand). A task's winner is "
           f"its best method; methods within {TIE_SE:g} standard errors of their difference from it **tie** (a "
           "difference inside the noise is not a win). The difference's standard error is paired (over the splits "
           "or seeds both methods share: the sample sd of the per-unit differences / sqrt(n)) where the files give "
           "each split's or seed's score, else that of two independent means; two methods with no spread (one run "
           "each) tie only on an equal score; one with no spread ties one with a standard error within 2 of that "
           "error.",
           ""]
    for b in benchmarks:
        methods = list(dict.fromkeys(m for t in b.tasks for m in t.scores))
        decimals = 3 if b.score != "test error %" else 2
        out += [f"## {b.name}", "", f"{b.score} ({'higher' if b.higher_is_better else 'lower'} is better; +- the "
                f"standard error over {b.spread}); from `{b.source}`.", ""]
        if not b.tasks:
            out += ["No finished rows yet.", ""]
            continue
        out += ["| task | " + " | ".join(methods) + " | winner |", "|---|" + "---:|" * len(methods) + "---|"]
        alone: dict[str, int] = dict.fromkeys(methods, 0)
        tied: dict[str, int] = dict.fromkeys(methods, 0)
        for t in b.tasks:
            win = winners(t, b.higher_is_better)
            if len(win) == 1:
                alone[win[0]] += 1
            else:
                for m in win:
                    tied[m] += 1
            cells = [("**" + _fmt(t.scores[m], decimals) + "**" if m in win else _fmt(t.scores[m], decimals))
                     if m in t.scores else "-" for m in methods]
            verdict = win[0] if len(win) == 1 else "tie: " + ", ".join(win)
            out.append(f"| {t.name} | " + " | ".join(cells) + f" | {verdict} |")
        n = len(b.tasks)
        # (no cost in the files: no cost column; an empty cell in the delimiter row is no table at all)
        out += ["", "| method | best alone | tied for best |" + (f" cost ({b.cost_unit}) |" if b.cost else ""),
                "|---|---:|---:|" + ("---:|" if b.cost else "")]
        for m in methods:
            c = (f" {b.cost[m]:.1f} |" if m in b.cost else " - |") if b.cost else ""
            out.append(f"| {m} | {alone[m]} of {n} | {tied[m]} of {n} |{c}")
        out += ["", _choice(methods, alone, tied, n, b), ""]
        out += [*b.notes, ""] if b.notes else []
    return "\n".join(out).rstrip() + "\n"


def _choice(methods: list[str], alone: dict[str, int], tied: dict[str, int], n: int, b: Benchmark) -> str:
    """One sentence: the method best on most tasks (alone, then tied), the others that won any
    alone, and the leader's cost against the cheapest method's. Several methods with the same
    counts share the lead: the sentence names them all, and picks the cheapest of them where
    the benchmark gives each one's cost (else no single choice)."""
    def key(m: str) -> tuple[int, int]:
        return alone[m] + tied[m], alone[m]

    best = max(key(m) for m in methods)
    leads = [m for m in methods if key(m) == best]
    if len(leads) > 1 and not all(m in b.cost for m in leads):
        return (f"**No single choice here:** {', '.join(leads)} share the lead, each best on {best[0]} of {n} "
                f"task{'s' if n != 1 else ''} ({best[1]} alone); no cost in this benchmark's files separates them.")
    lead = min(leads, key=lambda m: b.cost.get(m, 0.0))
    shared = f"; {', '.join(m for m in leads if m != lead)} as often, at a higher cost" if len(leads) > 1 else ""
    text = (f"**Choice here:** {lead}, best on {alone[lead] + tied[lead]} of {n} task{'s' if n != 1 else ''} "
            f"({alone[lead]} alone, {tied[lead]} tied){shared}")
    others = [f"{m} alone on {alone[m]}" for m in methods if m != lead and alone[m]]
    if others:
        text += "; " + ", ".join(others)
    if lead in b.cost and len(b.cost) > 1:
        cheap = min(b.cost, key=b.cost.__getitem__)
        if cheap != lead:
            text += (f"; it costs {b.cost[lead] / b.cost[cheap]:.1f}x the cheapest, {cheap} ({b.cost[lead]:.1f} "
                     f"against {b.cost[cheap]:.1f} {b.cost_unit.split(' ')[0]})")
    return text + "."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("docs/which_method.md from the committed results: each benchmark's winner per task, ties "
                          f"within {TIE_SE:g} combined standard errors, the methods' costs and the choice they imply.")
    parser.add_argument("--results", default="results", metavar="DIR", help="the results folder (default: results)")
    add_out(parser, "output page (Markdown); the committed one is docs/which_method.md", default=DEFAULT_OUT,
            folder=False)
    parser.compute_flags = ("--quiet",)  # type: ignore[attr-defined]  # (it trains nothing: no --threads, --no-compile)
    parser.add_argument("--check", metavar="FILE", default=None,
                        help="write nothing: exit 1 when FILE (e.g. docs/which_method.md) differs from what --results "
                             "gives")


COMMAND = "bbb reproduce which --results results --out docs/which_method.md"
#: where the page goes by default (never into the committed docs/ unless asked)
DEFAULT_OUT = "runs/which_method.md"


def main(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if not results.is_dir():
        raise UserError(f"no results folder {results} (run it from a clone of bbb, or pass "
                        "--results DIR)")
    text = render(load_benchmarks(results), COMMAND)
    if args.check is not None:
        page = Path(args.check)
        same = page.is_file() and page.read_text() == text
        print(f"{page}: " + ("up to date" if same else f"differs from what {results} gives: run {COMMAND}"))
        return 0 if same else 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    print(f"wrote {out}")
    return 0
