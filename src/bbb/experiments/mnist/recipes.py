"""What ``bbb reproduce mnist`` trains: the paper's tables and protocol, and the recipes read
from recipes.json (the data file beside this module): the settings every run shares, the
methods' settings, and per budget the epochs, the candidates of each cell and the reason each is
there, the seeds and the screen between widths."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from typing import Any, NoReturn

from ...cli.cost import epoch_costs
from ...options import IMAGE_DATASETS, StrOption
from ...runs.config import TrainConfig


class Budget(StrOption):
    """How much ``bbb reproduce mnist`` trains (docs and :data:`BUDGETS`)."""

    SMOKE = "smoke"
    QUICK = "quick"
    PAPER = "paper"


class CellMethod(str, Enum):
    """The methods of Table 1: the paper's four, and IVON (``bbb train --method ivon``, not in the
    paper: the smoke and quick budgets train it, the paper budget does not)."""

    SGD = "sgd"
    DROPOUT = "dropout"
    BBB_GAUSSIAN = "bbb_gaussian"
    BBB_MIXTURE = "bbb_mixture"
    IVON = "ivon"


WIDTHS: tuple[int, ...] = (400, 800, 1200)


METHODS: tuple[str, ...] = tuple(m.value for m in CellMethod)


#: the methods of the paper's Table 1, which every budget trains (a budget may add others: IVON)
PAPER_METHODS: tuple[str, ...] = ("sgd", "dropout", "bbb_gaussian", "bbb_mixture")


DATASETS: tuple[str, ...] = IMAGE_DATASETS


#: the cells that get ``--seeds`` independent seeds at the smoke and quick budgets
HEADLINE_CELLS: tuple[tuple[str, int], ...] = (
    ("bbb_mixture", 400), ("bbb_mixture", 1200), ("dropout", 400), ("dropout", 1200))


#: The order of work, so that the headline lands first: (group title, its cells).
#: ``--plan`` and a training call follow it; ``--cells`` picks a subset.
WORK_ORDER: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = (
    ("1. BBB scale mixture 2x1200: the headline cell, Table 2, Figures 2 and 4",
     (("bbb_mixture", 1200),)),
    ("2. SGD and dropout 2x1200: Figures 2 and 3",
     (("sgd", 1200), ("dropout", 1200))),
    ("3. BBB scale mixture 2x400 and 2x800",
     (("bbb_mixture", 400), ("bbb_mixture", 800))),
    ("4. BBB Gaussian prior at three widths, SGD and dropout 2x400 and 2x800",
     (("bbb_gaussian", 400), ("bbb_gaussian", 800), ("bbb_gaussian", 1200),
      ("sgd", 400), ("sgd", 800), ("dropout", 400), ("dropout", 800))),
    ("5. IVON at three widths (not in the paper: the smoke and quick budgets only)",
     (("ivon", 400), ("ivon", 800), ("ivon", 1200))),
)


CELL_ORDER: tuple[tuple[str, int], ...] = tuple(c for _, cells in WORK_ORDER for c in cells)


#: Paper Table 1, test error in percent (MNIST only)
PAPER_TABLE1: dict[tuple[str, int], float] = {
    ("sgd", 400): 1.83, ("sgd", 800): 1.84, ("sgd", 1200): 1.88,
    ("dropout", 400): 1.51, ("dropout", 800): 1.33, ("dropout", 1200): 1.36,
    ("bbb_gaussian", 400): 1.82, ("bbb_gaussian", 800): 1.99, ("bbb_gaussian", 1200): 2.04,
    ("bbb_mixture", 400): 1.36, ("bbb_mixture", 800): 1.34, ("bbb_mixture", 1200): 1.32,
}


#: a cell whose test error is more than this many percentage points above the paper's is
#: listed in table1.md with the gap and the candidates tried
PAPER_GAP_PP = 0.1


#: Paper Table 2 (BBB 2x1200): (fraction removed, weights left as printed, test error in percent)
PAPER_TABLE2: tuple[tuple[float, int, float], ...] = (
    (0.0, 2_400_000, 1.24), (0.5, 1_200_000, 1.24), (0.75, 600_000, 1.24),
    (0.95, 120_000, 1.29), (0.98, 48_000, 1.39))


PRUNE_FRACTIONS: tuple[float, ...] = tuple(f for f, _, _ in PAPER_TABLE2)


SNR_CUTOFF = 0.75


#: where most of the mass of the paper's Figure 4 lies, in dB, as read from its axis (about
#: -7.5 to 0 dB; the paper does not say whether dB is 10 or 20 log10 of |mu|/sigma)
PAPER_SNR_RANGE_DB: tuple[float, float] = (-7.5, 0.0)


METHOD_NAMES = {"sgd": "SGD (no regularisation)", "dropout": "SGD, dropout",
                "bbb_gaussian": "BBB, Gaussian prior", "bbb_mixture": "BBB, scale mixture prior",
                "ivon": "IVON (not in the paper)", "laplace": "Last-layer Laplace (not in the paper)",
                "deep_ensemble": "Deep ensemble of SGD networks (not in the paper)"}


@dataclass(frozen=True)
class Candidate:
    """One candidate setting of a cell: TrainConfig fields laid over the budget's and the
    method's settings, a short label, and the reason it is in the list (printed by ``--plan``
    and in table1.md)."""

    settings: dict[str, Any]
    label: str
    reason: str


@dataclass(frozen=True)
class BudgetSpec:
    """One budget: epochs per cell, candidate settings per method (or per cell), seeds, data
    subset, and the settings it lays over :data:`COMMON_SETTINGS`."""

    description: str
    epochs: dict[str, dict[int, int]]
    #: keyed by method (every width) or by (method, width); see :func:`cell_candidates`
    candidates: dict[Any, list[Candidate]]
    seeds: int = 1
    train_limit: int | None = None
    eval_limit: int | None = None
    eval_samples: int = 10
    common: dict[str, Any] = field(default_factory=dict)
    #: the cells that get ``--seeds`` independent seeds
    seed_cells: tuple[tuple[str, int], ...] = HEADLINE_CELLS
    #: Figure 2 with a log-scale epoch axis
    log_epochs: bool = False
    #: candidates removed at some widths by a screen on validation: method -> label -> why
    screened: dict[str, dict[str, str]] = field(default_factory=dict)
    screened_widths: tuple[int, ...] = ()
    #: a paragraph on how the budget's recipes were fixed (table1.md)
    note: str = ""
    #: Table 1 has last-layer Laplace rows (not in the paper): the SGD cells' networks with a
    #: last-layer Laplace (:mod:`bbb.experiments.mnist.laplace_rows`; nothing trains for them)
    laplace: bool = False
    #: Table 1 has deep-ensemble rows (not in the paper) of this many members: the SGD cells
    #: trained with this many seeds (:mod:`bbb.experiments.mnist.ensemble_rows`); 0: none
    ensemble: int = 0

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods this budget trains, in the order of :data:`METHODS`: the paper's four and
        any other it has epochs and candidates for (IVON at the smoke and quick budgets)."""
        return tuple(m for m in METHODS if m in self.epochs)

    @property
    def cells(self) -> tuple[tuple[str, int], ...]:
        """The cells of this budget in the order of work (:data:`CELL_ORDER`)."""
        return tuple(c for c in CELL_ORDER if c[0] in self.methods)

    def screened_at(self, method: str, hidden: int) -> dict[str, str]:
        """The candidates of ``method`` the screen removed at width ``hidden`` (label -> why)."""
        return dict(self.screened.get(method, {})) if hidden in self.screened_widths else {}

    def cell_candidates(self, method: str, hidden: int) -> list[Candidate]:
        """The candidates of one cell: ``candidates[(method, hidden)]``, else ``[method]``, less
        those the screen removed at this width (:meth:`screened_at`), in order."""
        cands = self.candidates.get((method, hidden))
        if cands is None:
            cands = self.candidates[method]
        drop = self.screened_at(method, hidden)
        return [c for c in cands if c.label not in drop]

    def candidates_per_cell(self) -> str:
        """How many candidates a cell has, over the budget's cells: ``"1"`` or a range, ``"1-6"``.
        The budget's description says it as ``{candidates_per_cell}`` (``--help``, table1.md)."""
        counts = [len(self.cell_candidates(m, w)) for m, w in self.cells]
        return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


#: The paper's learning-rate grid. The paper's updates (eqs. 5-6) are steps on the summed
#: minibatch free energy; our loss is that sum divided by the minibatch size (128), so the same
#: step needs a learning rate 128 times larger (:func:`paper_lr`).
PAPER_LR_GRID: tuple[float, ...] = (1e-3, 1e-4, 1e-5)


LOSS_BATCH = 128


PAPER_EPOCHS = 600


PAPER_LR_STEP = 300


def paper_lr(lr_sum: float) -> float:
    """Our learning rate for the paper's ``lr_sum`` on the summed minibatch loss (x128)."""
    return LOSS_BATCH * lr_sum


# --------------------------------------------------------------------------------------------
# The recipes are data (recipes.json beside this module), read and checked here
# --------------------------------------------------------------------------------------------

RECIPES_FILE = "recipes.json"

_SETTINGS = frozenset(f.name for f in dataclasses.fields(TrainConfig))


class _Reader:
    """Reads recipes.json; a key it does not know, a setting that is no TrainConfig field, a
    method or width outside the paper's is an error that names where it is."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.screen_pp: float | None = None
        self.recipes = {name: self.settings(f"recipes.{name}", self.keys(f"recipes.{name}", r, {"settings"})[
            "settings"]) for name, r in data.get("recipes", {}).items()}

    @staticmethod
    def fail(where: str, why: str) -> NoReturn:
        raise ValueError(f"{RECIPES_FILE}, {where}: {why}")

    def keys(self, where: str, obj: Any, allowed: set[str], required: set[str] | None = None) -> dict[str, Any]:
        """``obj`` (an object) without its ``about`` (documentation): keys among ``allowed``, and
        all of ``required`` (default: all of ``allowed``)."""
        if not isinstance(obj, dict):
            self.fail(where, f"expected an object, got {obj!r}")
        out = {k: v for k, v in obj.items() if k != "about"}
        need = allowed if required is None else required
        if set(out) - allowed:
            self.fail(where, f"unknown key(s) {sorted(set(out) - allowed)}; known: {sorted(allowed)}")
        if need - set(out):
            self.fail(where, f"missing key(s) {sorted(need - set(out))}")
        return out

    def settings(self, where: str, obj: Any) -> dict[str, Any]:
        """TrainConfig fields; a value ``"exp(X)"`` is e^X."""
        if not isinstance(obj, dict):
            self.fail(where, f"expected an object of settings, got {obj!r}")
        out = {}
        for k, v in obj.items():
            if k not in _SETTINGS:
                self.fail(where, f"{k!r} is not a setting of bbb train (TrainConfig)")
            if isinstance(v, str) and v.startswith("exp(") and v.endswith(")"):
                v = math.exp(float(v[4:-1]))
            out[k] = v
        return out

    def candidate(self, where: str, obj: Any) -> Candidate:
        c = self.keys(where, obj, {"label", "reason", "base", "without", "settings"}, {"label", "reason"})
        settings: dict[str, Any] = {}
        if "base" in c:
            if c["base"] not in self.recipes:
                self.fail(where, f"no recipe {c['base']!r}; recipes: {sorted(self.recipes)}")
            settings = {k: v for k, v in self.recipes[c["base"]].items() if k not in c.get("without", ())}
        settings.update(self.settings(where, c.get("settings", {})))
        return Candidate(settings, str(c["label"]), str(c["reason"]))

    def epochs(self, where: str, obj: Any) -> dict[str, dict[int, int]]:
        """Per method (the paper's four, and any other of :data:`METHODS`): one number for every
        width, or width -> epochs."""
        out = {}
        for m, e in self.keys(where, obj, set(METHODS), set(PAPER_METHODS)).items():
            if isinstance(e, int):
                out[m] = {w: e for w in WIDTHS}
            else:
                by_width = self.keys(f"{where}.{m}", e, {str(w) for w in WIDTHS})
                out[m] = {w: int(by_width[str(w)]) for w in WIDTHS}
        return out

    def budget(self, name: str, budgets: dict[str, Any]) -> BudgetSpec:
        where = f"budgets.{name}"
        b = self.keys(where, budgets[name], {"description", "epochs", "candidates", "seeds", "train_limit",
                                              "eval_limit", "eval_samples", "common", "seed_cells", "log_epochs",
                                              "screen", "note", "laplace", "ensemble"},
                      {"description", "epochs", "candidates"})
        cands: dict[Any, list[Candidate]] = {}
        for m, lst in self.keys(f"{where}.candidates", b["candidates"], set(METHODS), set(PAPER_METHODS)).items():
            if isinstance(lst, str):  # another budget's list of this method
                other = self.keys(f"budgets.{lst}.candidates", budgets.get(lst, {}).get("candidates"), set(METHODS),
                                  set(PAPER_METHODS))
                if m not in other:
                    self.fail(f"{where}.candidates.{m}", f"budget {lst!r} has no candidates of {m}")
                lst = other[m]
            cands[m] = [self.candidate(f"{where}.candidates.{m}[{i}]", c) for i, c in enumerate(lst)]
        extra: dict[str, Any] = {k: b[k] for k in ("seeds", "train_limit", "eval_limit", "eval_samples",
                                                   "log_epochs", "note", "laplace", "ensemble") if k in b}
        if not isinstance(extra.get("laplace", False), bool):
            self.fail(f"{where}.laplace", f"expected true or false, got {extra['laplace']!r}")
        k = extra.get("ensemble", 0)
        if isinstance(k, bool) or not isinstance(k, int) or k == 1 or k < 0:
            self.fail(f"{where}.ensemble", f"expected 0 (none) or a number of members >= 2, got {k!r}")
        if "common" in b:
            extra["common"] = self.settings(f"{where}.common", b["common"])
        if "seed_cells" in b:
            extra["seed_cells"] = tuple((str(m), int(w)) for m, w in b["seed_cells"])
            if not set(extra["seed_cells"]) <= set(CELL_ORDER):
                self.fail(f"{where}.seed_cells", f"not cells of Table 1: {b['seed_cells']}")
        if "screen" in b:
            s = self.keys(f"{where}.screen", b["screen"], {"pp", "widths", "dropped"})
            rule = f"the screen: more than {s['pp']:g} pp behind its cell's best validation error at 2x400"
            dropped = self.keys(f"{where}.screen.dropped", s["dropped"], set(METHODS), set())
            extra["screened"] = {m: {label: f"{why} ({rule})" for label, why in d.items()} for m, d in dropped.items()}
            extra["screened_widths"] = tuple(int(w) for w in s["widths"])
            self.screen_pp = float(s["pp"])
        epochs = self.epochs(f"{where}.epochs", b["epochs"])
        if set(epochs) != set(cands):
            self.fail(where, f"epochs and candidates name other methods: {sorted(epochs)} and {sorted(cands)}")
        spec = BudgetSpec(description=str(b["description"]), epochs=epochs, candidates=cands, **extra)
        return dataclasses.replace(spec, description=spec.description.replace(
            "{candidates_per_cell}", spec.candidates_per_cell()))


def load_recipes(text: str | None = None) -> dict[str, Any]:
    """The recipes of ``text`` (default: recipes.json shipped with the package): ``common`` and
    ``methods`` (settings), ``recipes`` (name -> settings), ``budgets`` (name ->
    :class:`BudgetSpec`) and ``screen_pp`` (the paper budget's screen, percentage points)."""
    data = json.loads(resources.files(__package__).joinpath(RECIPES_FILE).read_text() if text is None else text)
    r = _Reader(data)
    top = r.keys("top level", data, {"common", "methods", "recipes", "budgets"})
    budgets = r.keys("budgets", top["budgets"], {b.value for b in Budget})
    return {
        "common": r.settings("common", top["common"]),
        "methods": {m: r.settings(f"methods.{m}", s)
                    for m, s in r.keys("methods", top["methods"], set(METHODS)).items()},
        "recipes": r.recipes,
        "budgets": {name: r.budget(name, budgets) for name in budgets},
        "screen_pp": r.screen_pp,
    }


_RECIPES = load_recipes()


#: settings every run shares (the paper: minibatch 128, pixels / 126, 10,000 validation images);
#: a budget's :attr:`BudgetSpec.common` and the candidates override them
COMMON_SETTINGS: dict[str, Any] = _RECIPES["common"]


#: what makes each of the four methods (TrainConfig fields)
METHOD_SETTINGS: dict[str, dict[str, Any]] = _RECIPES["methods"]


#: The recipe of the public reproduction at the paper's level (recipes.json says whose and
#: what it measured), the base of every BBB candidate of the paper budget. Plain SGD, momentum
#: 0 and StepLR(300, 0.1) come from the budget's common settings.
PUBLIC_REPRODUCTION_RECIPE: dict[str, Any] = _RECIPES["recipes"]["public-reproduction"]


#: The budgets (recipes.json). ``--plan`` estimates the time from the cost model
#: (:func:`bbb.cli.cost.epoch_seconds`).
BUDGETS: dict[str, BudgetSpec] = _RECIPES["budgets"]


#: what the paper budget lays over :data:`COMMON_SETTINGS` for every run: the paper's plain
#: gradient steps (eqs. 5-6: SGD, momentum 0) and the learning rate x0.1 after epoch 300 of 600
PAPER_COMMON: dict[str, Any] = BUDGETS[Budget.PAPER.value].common


#: the paper budget's cells with a second seed (recipes.json says why these)
PAPER_SEED_CELLS: tuple[tuple[str, int], ...] = BUDGETS[Budget.PAPER.value].seed_cells


#: The screen between widths: a candidate of the paper budget whose best validation error at
#: 2x400 was this many percentage points behind its cell's best is not trained at
#: :data:`SCREENED_WIDTHS` (the candidates it removed and why: recipes.json)
SCREEN_PP: float = _RECIPES["screen_pp"]


SCREENED_WIDTHS: tuple[int, ...] = BUDGETS[Budget.PAPER.value].screened_widths


def cell_candidates(spec: BudgetSpec, method: str, hidden: int) -> list[Candidate]:
    """The candidates of one cell: ``spec.candidates[(method, hidden)]``, else ``[method]``, less
    those the budget's screen removed at this width (:meth:`BudgetSpec.screened_at`), in order."""
    return spec.cell_candidates(method, hidden)


#: seconds of one ``bbb reproduce mnist`` call beyond its runs: data, pruning, figures (the cost
#: model's, :mod:`bbb.cli.cost`)
FIXED_OVERHEAD_S: float = float(epoch_costs()["reproduce"]["fixed_seconds"])


TABLE1_COLUMNS = (
    "method", "hidden", "test_error", "paper_test_error", "test_error_sd", "n_seeds", "test_errors",
    "test_error_mc", "val_error", "epochs", "best_epoch", "seconds", "seconds_all", "candidate",
    "n_candidates", "lr", "optimizer", "lr_schedule", "batch_size", "samples", "kl_weighting",
    "prior", "prior_sigma", "pi", "sigma1", "sigma2", "dropout_input", "dropout_hidden", "weights",
    "run", "status", "candidate_label", "gap_vs_paper_pp", "momentum", "lr_step_size", "lr_gamma",
    "rho_init", "mu_init_scale", "candidates_val_error", "pending", "hess_init", "weight_decay",
    # the last-layer Laplace rows' (laplace_rows.py): its test NLL and ECE beside the SGD network's
    "test_nll", "test_ece", "map_test_nll", "map_test_ece", "prior_precision", "fit_seconds", "of_run",
    # the deep-ensemble rows' (ensemble_rows.py): its members' mean scores, and the members' runs
    "members_test_error", "members_test_nll", "members_test_ece", "members",
    # the runs the reported one trained beside as one population (--population; its seconds is theirs)
    "population")


TABLE2_COLUMNS = ("fraction_removed", "weights_left", "weights_total", "snr_threshold",
                  "snr_threshold_db", "test_error", "paper_weights_left", "paper_test_error",
                  "cost_pp", "paper_cost_pp")


HYPER_BY_METHOD = {
    "sgd": ("lr", "optimizer", "lr_schedule", "batch_size"),
    "dropout": ("lr", "optimizer", "lr_schedule", "batch_size", "dropout_input", "dropout_hidden"),
    "bbb_gaussian": ("lr", "optimizer", "lr_schedule", "batch_size", "samples", "kl_weighting",
                     "prior", "prior_sigma"),
    "bbb_mixture": ("lr", "optimizer", "lr_schedule", "batch_size", "samples", "kl_weighting",
                    "prior", "pi", "sigma1", "sigma2"),
    # IVON's optimiser is IVON itself (table1.csv's optimizer column says "ivon")
    "ivon": ("lr", "lr_schedule", "batch_size", "samples", "hess_init", "weight_decay"),
}
