"""Side-by-side table of trained runs: test error, NLL, ECE, Brier and OOD AUROC of classifiers;
test RMSE, log-likelihood, interval coverage and calibration of regression runs.

Reads what ``bbb evaluate`` (``eval.json``; without it, the evaluation that ended ``bbb train``
in ``summary.json``) and ``bbb ood`` (``ood.json``) wrote in each run directory and writes
``NAME.csv`` and its markdown twin ``NAME.md``, one row per run. Percentages (test error, ECE) are
in percent; NLL in nats per example; Brier is the mean squared error of the probability
vector (0-2). Metrics are those of the k-sample predictive distribution (BBB: weight samples,
dropout: MC dropout; SGD: its softmax); the mean-weight error is given beside it. ``hidden`` is
the whole architecture (:func:`architecture`: ``2x400``, ``1x400``, ``400-200``), and "Who wins"
compares BBB only with the runs of its own architecture and dataset (on your own file: of its
target and test rows, :data:`TEST_SET_FIELDS`), trained on as many rows or images (``num_train``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cli.common import add_out, shared_help
from ..errors import UserError
from ..io import atomic_write_csv, atomic_write_text
from ..options import Dataset
from .verdicts import DIGITS, TEST_SET_FIELDS, fmt, fmt_units, regression_verdicts, verdicts

__all__ = ["COLUMNS", "REFERENCES", "REGRESSION_COLUMNS", "add_arguments", "architecture", "check_name",
           "collect", "comparison_rows", "main", "write_comparison", "check_out", "stale_evaluation", "stale_member"]

EXAMPLE = ("bbb compare runs/mnist-bbb-400 runs/mnist-dropout-400 runs/mnist-sgd-400 "
           "--out runs/comparison --name comparison")

#: The CSV's columns, in order (the comparison's metrics first, then context).
COLUMNS = ("method", "hidden", "dataset", "test_error", "nll", "ece", "brier", "auroc_entropy", "auroc_mi",
           "auroc_max_prob", "aupr_entropy", "aupr_mi", "test_error_mean_weights", "reference_test_error",
           "samples", "epochs", "seconds", "run", "metrics_from")

#: The CSV's columns for regression runs: test RMSE of the k-sample predictive (and of the mean
#: weights), its log-likelihood per row, the share of test targets inside its 95% interval, and
#: its calibration (``calibration_gap``: the mean |share inside - level| over central intervals of
#: 5-99%; ``coverage_bias``: the same signed, above 0 too wide intervals), all in the target's units.
REGRESSION_COLUMNS = ("method", "hidden", "dataset", "test_rmse", "log_likelihood", "coverage_95", "calibration_gap",
                      "coverage_bias", "test_rmse_mean_weights", "samples", "epochs", "seconds", "run", "metrics_from")

#: Published numbers to print beside ours: name -> (dataset, method, {architecture: test error %}, source);
#: the architecture as :func:`architecture` writes it ("2x400": two hidden layers of 400 units).
REFERENCES: dict[str, tuple[str, str, dict[str, float], str]] = {
    "fashion-seminar": ("fashion-mnist", "bbb", {"2x200": 12.63, "2x400": 13.2, "2x800": 12.81},
                        "the seminar notebook's BBB on Fashion-MNIST, 10 epochs"),
}


def architecture(hidden: Sequence[int] | None) -> str | None:
    """The hidden layers as one label: ``[400, 400]`` -> ``"2x400"``, ``[400]`` -> ``"1x400"``,
    ``[400, 200]`` -> ``"400-200"``; None for no hidden layer recorded. Runs are compared only
    with runs of the same label (the whole architecture, not its first width)."""
    if not hidden:
        return None
    widths = [int(h) for h in hidden]
    if len(set(widths)) == 1:
        return f"{len(widths)}x{widths[0]}"
    return "-".join(map(str, widths))


#: the command that writes each file compare reads again (of the folder ``{d}``), said when one cannot be read
_WRITTEN_BY = {"summary.json": "bbb train --resume --out {d}", "config.json": "bbb train --resume --out {d}",
               "eval.json": "bbb evaluate", "ood.json": "bbb ood", "laplace.json": "bbb laplace"}


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        again = _WRITTEN_BY.get(path.name)
        how = f"; the command that wrote it writes it again ({again.format(d=path.parent)})" if again else ""
        raise UserError(f"cannot read {path}: {e}{how}") from None


def _training(d: Path, cfg: dict[str, Any] | None = None, summary: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, summary) of the network in ``d``: a run's own (``cfg`` and ``summary`` where read
    already); a Laplace posterior's folder (``bbb laplace RUN --out DIR``) its run's network and
    training, with the fit's seconds added (a one-line error where that run changed since the fit)."""
    from ..runs.trained import LAPLACE_FILE, is_laplace_folder, laplace_base, laplace_run_of

    if not is_laplace_folder(d):
        return (_read_json(d / "config.json") or {} if cfg is None else cfg,
                _read_json(d / "summary.json") or {} if summary is None else summary)
    base = laplace_run_of(d)
    if base.is_dir():  # a run trained on since the fit: its posterior's scores are of another network
        laplace_base(d)
    out = dict(_read_json(base / "summary.json") or {})
    fit = (_read_json(d / LAPLACE_FILE) or {}).get("seconds")
    if out.get("seconds") is not None and fit is not None:
        out["seconds"] = float(out["seconds"]) + float(fit)
    return _read_json(base / "config.json") or {}, out


def _members_value(values: list[Any]) -> Any:
    """An ensemble's members' architecture or epochs as one cell: theirs where they share it, else
    each distinct value in the members' order (``"2x400, 2x800"``): never the first member's alone."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1:
        return distinct[0]
    return ", ".join("-" if v is None else str(v) for v in distinct)


def _members_seconds(members: Sequence[str], seconds: Sequence[Any]) -> float | None:
    """An ensemble's training time: its members' sum, a population's members once (they share its
    wall time); None where a member's is unknown."""
    if any(v is None for v in seconds):
        return None
    from ..runs.population import wall_seconds

    return wall_seconds(list(zip(members, seconds)))


def _dataset(ev: dict[str, Any], cfg: dict[str, Any]) -> Any:
    """The data set's name: a table's or arrays' file name (``--csv``, ``--npz``), else MNIST's kind."""
    from ..runs.config import FILE_DATASET

    if cfg.get("data_source"):  # tensors given in memory (bbb.runs.config.IN_MEMORY): not the dataset it names
        return f"in {cfg['data_source']}"
    name = ev.get("dataset") or cfg.get("dataset")
    return Path(cfg["data_file"]).name if name == FILE_DATASET and cfg.get("data_file") else name


def _test_set(cfg: dict[str, Any]) -> dict[str, Any]:
    """The ``TEST_SET_FIELDS`` of a run on your own file (``data_file``: the file's MD5 where the run
    recorded it, so that a moved copy is the same file and a file changed in place is not; a folder
    of images: the size and colour it read them at, the network's inputs); empty for MNIST's fixed
    test set."""
    from ..data.arrays import DEFAULT_IMAGE_SIZE, data_kind

    if not cfg.get("data_file"):
        return {}
    md5 = ((cfg.get("preprocess") or {}).get("source") or {}).get("md5")
    images = data_kind(cfg["data_file"]) == "folder"
    return {**{k: cfg.get(k) for k in TEST_SET_FIELDS}, **({"data_file": md5} if md5 else {}),
            "image_size": list(cfg.get("image_size") or DEFAULT_IMAGE_SIZE) if images else None,
            "image_colour": bool(cfg.get("image_colour")) if images else None}


def stale_evaluation(ev: dict[str, Any], summary: dict[str, Any]) -> str | None:
    """Why a run's eval.json (``ev``) no longer describes the run whose summary.json is ``summary``:
    the epoch of the checkpoint it evaluated is not that checkpoint's now (the run trained on after
    ``bbb evaluate``; a resumed run removes its eval.json, one of an older bbb did not); else None."""
    which, epoch = ev.get("checkpoint"), ev.get("epoch")
    now = {"best": summary.get("best_epoch"), "last": summary.get("epochs")}.get(str(which))
    if epoch is None or now is None or int(now) == int(epoch):
        return None
    return f"its eval.json evaluated the {which} checkpoint of epoch {epoch}, and the run's {which} is now epoch {now}"


def file_of(command: str) -> str:
    """The file of an ensemble's folder that ``bbb COMMAND`` writes, as its messages name it."""
    return "the ensemble's eval.json" if command == "evaluate" else f"{command}.json"


def missing_member(folder: str | Path, members: Sequence[str | Path], command: str) -> None:
    """A one-line UserError where a member of the ensemble in ``folder`` is not there as its files name it (as the
    command that wrote them was given it: relative to where that command ran), for ``bbb command``. A member is
    a run's folder (its config.json) or a ``bbb laplace`` folder (its laplace.json)."""
    from ..runs.trained import is_laplace_folder

    gone = [m for m in members if not (Path(m) / "config.json").is_file() and not is_laplace_folder(m)]
    if gone:
        raise UserError(f"{folder} is the folder of an ensemble whose member {gone[0]} is not there (its files name "
                        f"the members as the command that wrote them was given them): run bbb {command} where that "
                        "command ran, or put the member back")


def stale_member(folder: str | Path, members: Sequence[str | Path], summaries: Sequence[dict[str, Any]],
                 command: str, scored: dict[str, Any], dirs: Sequence[str | Path] | None = None) -> str | None:
    """Why the file that ``bbb COMMAND RUN RUN ... --out FOLDER`` wrote (``scored``: an ensemble's
    eval.json, ood.json or uncertain.json) is of earlier networks than its members' now (their
    summary.json: ``summaries``; their folders ``dirs``, by default ``members``), naming the first
    member that trained on since, or that another run replaced (``--overwrite``: its config.json's
    run id is not the one scored), and the command that scores them again; else None (also where
    the file names no members' epochs: an older bbb's)."""
    which = scored.get("checkpoint")
    epochs = ([s.get("epoch") for s in scored.get("member_scores") or []] if command == "evaluate"
              else scored.get("member_epochs")) or [None] * len(members)
    ids = ([s.get("run_id") for s in scored.get("member_scores") or []] if command == "evaluate"
           else scored.get("member_run_ids")) or [None] * len(members)
    for m, d, now, epoch, scored_id in zip(members, dirs or members, summaries, epochs, ids):
        stale = stale_evaluation({"checkpoint": which, "epoch": epoch}, now)
        now_id = (_read_json(Path(d) / "config.json") or {}).get("run_id")  # (bbb.runs.rundir.run_id_of's key)
        if stale is None and scored_id is not None and now_id != scored_id:
            stale = f"{file_of(command)} scored another run, which {m} held before a run trained into it again"
        if stale:
            again = " ".join(map(str, members)) + (" --which last" if which == "last" else "")
            how = "was replaced" if now_id != scored_id and scored_id is not None else "trained on"
            return (f"{folder}: its member {m} {how} since `bbb {command}` scored it "
                    f"({stale.replace('its eval.json evaluated', f'{file_of(command)} scored')}); run `bbb {command} "
                    f"{again} --out {folder}` again")
    return None


def collect(run_dir: str | Path) -> dict[str, Any]:
    """One row from a run directory: the metrics of its eval.json (``bbb evaluate``), else of its
    summary.json (the evaluation at the end of ``bbb train``); ood.json is optional. The folder of
    an ensemble's evaluation (``bbb evaluate RUN RUN ... --out DIR``) is a row too: its method the
    ensemble's description, its training time the members' sum, no mean-weights error; so is a
    Laplace posterior's (``bbb laplace RUN --out DIR``): its run's network and training time, and
    the fit's seconds added."""
    d = Path(run_dir)
    if not d.is_dir():
        raise UserError(f"run directory {d} does not exist")
    ev = _read_json(d / "eval.json")
    cfg = _read_json(d / "config.json") or {}
    summary = _read_json(d / "summary.json") or {}
    regression = "regression" in ((ev or {}).get("task"), summary.get("task"), cfg.get("task"))
    stale = None if ev is None else stale_evaluation(ev, summary)
    if stale:
        raise UserError(f"{d}: {stale}; run `bbb evaluate {d}` again")
    # the checkpoint the numbers are of, where eval.json names it (bbb evaluate --which)
    source = (f"eval.json ({ev['checkpoint']}, epoch {ev['epoch']})"
              if ev is not None and ev.get("checkpoint") in ("best", "last") and ev.get("epoch") is not None
              else "eval.json")
    if ev is None and (not cfg or "agents" in cfg):  # (no run's: a bandit run's config.json names its agents)
        from ..runs.checkpoint import ensemble_members, not_a_run_text

        members = ensemble_members(d)
        if members:  # (bbb ood RUN RUN ... --out DIR alone)
            raise UserError(f"{d} is an ensemble's folder without its eval.json: run `bbb evaluate {' '.join(members)} "
                            f"--out {d}` first")
        other = not_a_run_text(d)
        if other is not None:  # (a population's folder)
            raise UserError(other)
    if ev is None and regression:
        if "test_rmse_mc" not in summary:
            raise UserError(f"{d} has neither eval.json nor a finished run's summary.json; run `bbb evaluate {d}` "
                            "first (on a folder `bbb train --out` wrote)")
        source = "summary.json"
        ev = {"method": summary.get("method"), "dataset": summary.get("dataset"), "task": "regression",
              "test_rmse": summary["test_rmse"], "test_rmse_mc": summary["test_rmse_mc"],
              "log_likelihood": summary["test_log_likelihood"], "coverage_95": summary["test_coverage_95"],
              "samples": summary.get("eval_samples")}
    if ev is None:
        if "test_error_mc" not in summary:
            raise UserError(f"{d} has neither eval.json nor a finished run's summary.json; run `bbb evaluate {d}` "
                            "first (on a folder `bbb train --out` wrote)")
        source = "summary.json"
        ev = {"method": summary.get("method"), "dataset": summary.get("dataset"), "test_error": summary["test_error"],
              "test_error_mc": summary["test_error_mc"], "nll": summary["test_nll"], "ece": summary["test_ece"],
              "brier": summary["test_brier"], "samples": summary.get("eval_samples")}
    members = ev.get("members") if ev.get("method") == "ensemble" else None
    if members:  # ``bbb evaluate RUN RUN ... --out DIR``: the members' networks and training
        missing_member(d, members, "compare")  # (not "replaced", with a command that cannot run here)
        infos = [_training(Path(m)) for m in members]
        member_now = [now for _, now in infos]
        stale = stale_member(d, members, member_now, "evaluate", ev)
        if stale:
            raise UserError(stale)
        cfg = infos[0][0]
        summary = {"epochs": _members_value([x.get("epochs") for _, x in infos]),
                   "seconds": _members_seconds(members, [x.get("seconds") for _, x in infos])}
        label = _members_value([architecture(c.get("hidden") or x.get("hidden") or []) for c, x in infos])
        ev = {**ev, "method": ev.get("ensemble", "ensemble"), "test_error": None, "test_rmse": None}
    else:
        cfg, summary = _training(d, cfg, summary)
        label = architecture(cfg.get("hidden") or summary.get("hidden") or [])
    if regression:
        from ..uncertainty.regression import coverage_gap

        cal = ev.get("interval_calibration")
        bias = coverage_gap(cal["levels"], cal["coverage"])["bias"] if cal else None
        return {"method": ev.get("method") or cfg.get("method"), "hidden": label,
                "dataset": _dataset(ev, cfg), "task": "regression",
                "test_rmse": float(ev["test_rmse_mc"]), "log_likelihood": float(ev["log_likelihood"]),
                "coverage_95": 100.0 * float(ev["coverage_95"]),
                "calibration_gap": None if ev.get("calibration_error") is None else 100.0 * ev["calibration_error"],
                "coverage_bias": None if bias is None else 100.0 * bias,
                "test_rmse_mean_weights": None if ev.get("test_rmse") is None else float(ev["test_rmse"]),
                "samples": ev.get("samples"), "epochs": summary.get("epochs"), "seconds": summary.get("seconds"),
                "run": str(d), "metrics_from": source, "test_set": _test_set(cfg), "num_train": cfg.get("num_train")}
    ood = _read_json(d / "ood.json")
    scores = (ood or {}).get("scores", {})
    scored, tested = (ood or {}).get("checkpoint"), ev.get("checkpoint", "best")  # (summary.json: the best)
    if members and ood is not None:  # a member's resume removes its own ood.json, not the ensemble's
        stale = stale_member(d, members, member_now, "ood", ood)
        if stale:
            raise UserError(stale)
    if scored in ("best", "last") and tested in ("best", "last") and scored != tested:
        raise UserError(f"{d}: its ood.json scored the {scored} checkpoint and its test metrics are of the {tested}: "
                        f"run `bbb ood {d} --which {tested}` (or `bbb evaluate {d} --which {scored}`) so that one "
                        "row holds one network")

    def score(name: str, key: str) -> float | None:
        v = scores.get(name, {}).get(key)
        return None if v is None else float(v)

    return {
        "method": ev.get("method") or cfg.get("method"),
        "hidden": label,
        "dataset": _dataset(ev, cfg),
        "task": "classification",
        "test_error": 100.0 * ev["test_error_mc"],
        "nll": ev["nll"],
        "ece": 100.0 * ev["ece"],
        "brier": ev["brier"],
        "auroc_entropy": score("entropy", "auroc"),
        "auroc_mi": score("mutual_information", "auroc"),
        "auroc_max_prob": score("max_prob", "auroc"),
        "aupr_entropy": score("entropy", "aupr"),
        "aupr_mi": score("mutual_information", "aupr"),
        "test_error_mean_weights": None if ev["test_error"] is None else 100.0 * ev["test_error"],
        "reference_test_error": None,
        "samples": ev.get("samples"),
        "epochs": summary.get("epochs"),
        "seconds": summary.get("seconds"),
        "run": str(d),
        "metrics_from": source,
        "ood": (ood or {}).get("ood"),
        "ood_md5": (ood or {}).get("ood_md5"),
        "test_set": _test_set(cfg),
        "num_train": cfg.get("num_train"),
    }


def comparison_rows(run_dirs: Sequence[str | Path], reference: str | None = None) -> list[dict[str, Any]]:
    """One row per run of ``run_dirs`` (:func:`collect`); a run given twice (the same folder under two
    spellings too) is a one-line error, since its two identical rows would compare it with itself."""
    from ..runs.rundir import check_distinct  # (runs imports torch: only when comparing)

    check_distinct(run_dirs, "give each run once")
    rows = [collect(d) for d in run_dirs]
    for name in {r["ood"] for r in rows if r.get("ood")}:  # one name, other inputs (two folders new/, a folder
        same = [r for r in rows if r.get("ood") == name]  # fashion-mnist/ and bbb ood's): other OOD sets, named apart
        if len({r.get("ood_md5") for r in same}) > 1:
            for r in same:
                r["ood"] = f"{name} (MD5 {r['ood_md5'][:8]})" if r.get("ood_md5") else f"{name} (no MD5 recorded)"
    tasks = {r["task"] for r in rows}
    if len(tasks) > 1:
        kinds = {t: next(r["run"] for r in rows if r["task"] == t) for t in sorted(tasks)}
        raise UserError(f"compare classifiers with classifiers and regression runs with regression runs: "
                        f"{kinds['classification']} is a classifier, {kinds['regression']} a regression run")
    if reference is not None:
        if reference not in REFERENCES:
            raise UserError(f"unknown reference {reference!r}; expected one of {', '.join(REFERENCES)}")
        dataset, method, numbers, _ = REFERENCES[reference]
        for r in rows:
            if r["dataset"] == dataset and r["method"] == method:
                r["reference_test_error"] = numbers.get(r["hidden"])
        if all(r.get("reference_test_error") is None for r in rows):  # else the option did nothing
            raise UserError(f"--reference {reference} has published numbers for {method} runs on {dataset} of "
                            f"{', '.join(numbers)}, and none of these runs is one: leave --reference out")
    return rows


def _md_cell(text: str) -> str:
    """A markdown table cell: a ``|`` in it (a folder's name) escaped."""
    return text.replace("|", "\\|")


def _md_head(name: str, command: str | None, rows: list[dict[str, Any]], shown: list[str],
             heads: dict[str, str], digits: dict[str, int]) -> list[str]:
    """The markdown's title, its command and its table of ``rows`` (columns ``shown``)."""
    md = [f"# {name}", ""] + (["Made by:", "", "```", command, "```", ""] if command else [])
    md += ["| " + " | ".join(heads.get(c, c) for c in shown) + " |",
           "|" + "|".join("---" if c in ("run", "method", "dataset") else "---:" for c in shown) + "|"]
    return md + ["| " + " | ".join(_md_cell(fmt(r[c], digits.get(c, 2))) or "-" for c in shown) + " |"
                 for r in rows]


def _write_regression(rows: list[dict[str, Any]], out: Path, name: str, command: str | None) -> list[Path]:
    """``write_comparison`` of regression runs: REGRESSION_COLUMNS."""
    csv_path = out / f"{name}.csv"
    units = ("test_rmse", "test_rmse_mean_weights")  # in the target's units: significant digits where it is small
    atomic_write_csv(csv_path, REGRESSION_COLUMNS, [{**r, **{k: fmt_units(r[k], 6) for k in units}} for r in rows],
                     value=lambda v: fmt(v, 6) if isinstance(v, float) else fmt(v))
    shown = ["run", "method", "hidden", "dataset", "test_rmse", "test_rmse_mean_weights", "log_likelihood",
             "coverage_95", "calibration_gap", "coverage_bias", "samples", "epochs", "seconds"]
    heads = {"test_rmse": "test RMSE", "test_rmse_mean_weights": "RMSE (mean weights)",
             "log_likelihood": "log-likelihood", "coverage_95": "95% coverage %",
             "calibration_gap": "calibration gap pp", "coverage_bias": "coverage bias pp", "seconds": "train s"}
    digits = {"test_rmse": 4, "test_rmse_mean_weights": 4, "log_likelihood": 4, "coverage_95": 1,
              "calibration_gap": 1, "coverage_bias": 1, "seconds": 0}
    md = _md_head(name, command, [{**r, **{k: fmt_units(r[k], 4) for k in units}} for r in rows], shown, heads,
                  digits)
    md += ["", "In the target's units, of the k-sample predictive (the mixture of the sampled networks' Gaussians; "
           "SGD: its one Gaussian; an ensemble: the mixture of its members'): the test RMSE of its mean, its mean "
           "log density per test row, and the share of the test targets inside its central 95% interval. "
           "Calibration gap: the mean over the central intervals of 5%, 10%, ..., 95% and 99% of |share of the test "
           "targets inside - level|, 0 when calibrated; coverage bias the same signed (above 0: intervals too wide, "
           "below: too narrow). \"mean weights\": the posterior-mean or deterministic network's mean."]
    from_summary = [r["run"] for r in rows if r.get("metrics_from") == "summary.json"]
    if from_summary:
        md.append(f"No eval.json in {', '.join(from_summary)}: their metrics are those of the evaluation that ended "
                  "`bbb train` (summary.json), which has no calibration curve: `bbb evaluate` adds it.")
    said = verdicts(rows, regression_verdicts)
    if said:
        md += ["", "## Who wins", ""] + [f"- {v}" for v in said]
    md_path = out / f"{name}.md"
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return [csv_path, md_path]


def check_name(name: str) -> str:
    """``name`` when it is a plain file stem (no folder, not ``.`` or ``..``): else a one-line error, since
    ``NAME.csv`` would land outside ``--out``."""
    if not name or name in (".", "..") or Path(name).name != name or "/" in name or "\\" in name:
        raise UserError(f"--name {name!r} is not a plain file name: give a name without a folder (the files go "
                        "to --out DIR)")
    return name


def check_out(out: str | Path, name: str) -> None:
    """``--name`` a plain file stem (:func:`check_name`), and ``out/NAME.csv`` and ``NAME.md`` new
    or tables of ``bbb compare``: never a file another command wrote there (``--out RUN --name
    metrics`` replaced the run's metrics.csv), a one-line error."""
    check_name(name)
    if Path(out).exists() and not Path(out).is_dir():
        raise UserError(f"--out {out} is a file, not a folder")
    csv_path, md_path = Path(out) / f"{name}.csv", Path(out) / f"{name}.md"
    head = _text(csv_path).split("\n", 1)[0].split(",")
    for path, ours in ((csv_path, head[0] == "method" and "run" in head),
                       (md_path, "\n| run | method |" in _text(md_path))):
        if path.exists() and not (path.is_file() and ours):
            raise UserError(f"{path} exists and is not a table of bbb compare: give another --name or --out")


def _text(path: Path) -> str:
    """``path``'s text, empty where it cannot be read as text."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def write_comparison(rows: list[dict[str, Any]], out: str | Path, name: str = "comparison",
                     command: str | None = None, reference: str | None = None) -> list[Path]:
    check_out(out, name)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if rows and rows[0].get("task") == "regression":
        return _write_regression(rows, out, name, command)
    csv_path = out / f"{name}.csv"  # quoted where a cell holds a comma (a folder's name, an ensemble's methods)
    atomic_write_csv(csv_path, COLUMNS, rows, value=lambda v: fmt(v, 6) if isinstance(v, float) else fmt(v))

    shown = ["run", "method", "hidden", "dataset", "test_error", "test_error_mean_weights", "nll", "ece", "brier",
             "auroc_entropy", "auroc_mi", "auroc_max_prob", "samples", "epochs", "seconds"]
    if any(r["reference_test_error"] is not None for r in rows):
        shown.insert(shown.index("test_error") + 1, "reference_test_error")
    oods = sorted({r["ood"] for r in rows if r.get("ood")})
    if len(oods) > 1:  # each row's AUROCs are against its own OOD set: say which
        shown.insert(shown.index("auroc_max_prob") + 1, "ood")
    heads = {"test_error": "test error %", "test_error_mean_weights": "error % (mean weights)",
             "nll": "NLL", "ece": "ECE %", "brier": "Brier", "auroc_entropy": "AUROC entropy",
             "auroc_mi": "AUROC MI", "auroc_max_prob": "AUROC max-prob", "reference_test_error": "reference %",
             "seconds": "train s", "ood": "OOD set"}
    md = _md_head(name, command, rows, shown, heads, DIGITS)
    md += ["", "Test error, NLL, ECE (15 equal-width bins) and Brier are those of the k-sample predictive "
           "distribution (BBB, IVON: weight samples; dropout: MC dropout; SGD: its softmax, k = 1; an ensemble: "
           "the mean of its members' predictives); \"mean weights\" is the posterior-mean (BBB, IVON) or "
           "deterministic (dropout off) network."]
    from_summary = [r["run"] for r in rows if r.get("metrics_from") == "summary.json"]
    if from_summary:
        md.append(f"No eval.json in {', '.join(from_summary)}: their metrics are those of the evaluation that ended "
                  "`bbb train` (summary.json: the best checkpoint, the run's --eval-samples).")
    if oods:
        sets = [f"the {o} test set" if o in {d.value for d in Dataset} else f"the inputs of {o} (bbb ood --ood-data)"
                for o in oods]
        md.append(f"OOD: the in-distribution test set against {', '.join(sets)} (OOD = positive "
                  "class); mutual information is undefined for SGD (one network)."
                  + (" The AUROCs of runs scored against other OOD sets are not compared." if len(oods) > 1 else ""))
    if reference is not None:
        md.append(f"Reference: {REFERENCES[reference][3]}.")
    said = verdicts(rows)
    if said:
        md += ["", "## Who wins", ""] + [f"- {v}" for v in said]
    md_path = out / f"{name}.md"
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return [csv_path, md_path]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run directories of `bbb train` (eval.json of `bbb evaluate` when there, else summary.json; "
                        "ood.json of `bbb ood` when there)")
    add_out(p, shared_help("--out", " for NAME.csv and NAME.md"))
    p.add_argument("--name", default="comparison", help="file stem (default: comparison)")
    p.add_argument("--reference", default=None, choices=sorted(REFERENCES),
                   help="published numbers to print beside ours")
    p.add_argument("--command", dest="cite", default=None, metavar="TEXT",
                   help="the command to cite as the table's origin (default: this bbb compare command)")


def main(args: argparse.Namespace) -> int:
    check_out(args.out, args.name)  # before reading the runs
    rows = comparison_rows(args.runs, args.reference)
    command = args.cite or ("bbb " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["compare"] else None)
    paths = write_comparison(rows, args.out, args.name, command=command, reference=args.reference)
    print(Path(paths[1]).read_text())
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
