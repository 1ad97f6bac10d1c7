"""Who wins, in plain statements computed from ``bbb compare``'s rows (never asserted in advance):
each Bayesian run (BBB, IVON, a Laplace posterior) against the SGD and dropout runs of its own
architecture and dataset, of one test set (:data:`TEST_SET_FIELDS`) and as many training rows."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .ties import same_score

#: the settings of a run on your own file that make its test rows and what it predicts: runs that
#: differ in one were scored on other rows, other inputs (a folder's images read at another size or
#: in colour) or another target, and "Who wins" gives them no verdict
TEST_SET_FIELDS = ("data_file", "target", "val_fraction", "test_fraction", "split_seed", "image_size", "image_colour")


def fmt(v: Any, digits: int = 2) -> str:
    """A table cell: empty for None, a float to ``digits`` places."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def fmt_units(v: Any, digits: int) -> str:
    """A table cell of a number in the target's units (a regression's RMSE): ``digits`` places as
    :func:`fmt`, or ``digits`` significant digits where the places would keep fewer (a target in
    units of 1e-4, whose RMSE of 2.1e-06 was 0.0000)."""
    if not isinstance(v, float) or not math.isfinite(v) or v == 0 or abs(v) >= 0.1:  # (places keep them all)
        return fmt(v, digits)
    return f"{v:.{digits}g}"


#: the decimal places of a metric in the tables and verdicts (2 for the others)
DIGITS = {"nll": 4, "brier": 4, "auroc_entropy": 4, "auroc_mi": 4, "auroc_max_prob": 4, "aupr_entropy": 4,
           "aupr_mi": 4, "seconds": 0}


#: the Bayesian methods whose runs the verdicts compare with SGD and dropout, and their names there
BAYESIAN_LABELS = {"bbb": "BBB", "ivon": "IVON", "laplace": "Laplace"}


def verdicts(rows: list[dict[str, Any]], method_verdicts: Callable[..., list[str]] | None = None) -> list[str]:
    """Plain statements of who wins, computed from the rows (never asserted in advance). BBB (and
    IVON, a Laplace posterior) is compared with the SGD and dropout runs of its own architecture
    and dataset (``method_verdicts``: a classifier's by default, :func:`regression_verdicts` for
    regression runs); where one of these has two runs or more, the verdict names them instead of
    picking one."""
    method_verdicts = method_verdicts or classifier_verdicts
    out = []
    datasets = {r["dataset"] for r in rows}
    groups: dict[tuple[Any, Any], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["hidden"]), {}).setdefault(r["method"], []).append(r)

    def order(key: tuple[Any, Any]) -> tuple[str, list[int], str]:
        dataset, arch = key
        if not arch:
            return str(dataset), [], ""
        first = arch.split(", ")[0]  # (an ensemble of several architectures: by its first member's)
        n, x, w = first.partition("x")
        return str(dataset), [int(w)] * int(n) if x else [int(v) for v in first.split("-")], arch

    for key in sorted(groups, key=order):
        dataset, hidden = key
        by = groups[key]
        bayes = [m for m in BAYESIAN_LABELS if m in by]
        if not bayes:
            continue
        where = f"{hidden or 'no hidden layer'}" + (f" on {dataset}" if len(datasets) > 1 else "")
        members = [r for runs in by.values() for r in runs]
        differ = [k for k in TEST_SET_FIELDS if len({repr(r.get("test_set", {}).get(k)) for r in members}) > 1]
        if differ:
            runs = ", ".join(r["run"] for r in members)
            out.append(f"{where}: no verdict: the runs ({runs}) differ in {differ[0].replace('_', ' ')}, so their "
                       "test scores are of other rows, inputs or another target; compare runs of one file, target, "
                       "split and image size")
            continue
        judged = [r for m in (*bayes, "sgd", "dropout") for r in by.get(m, [])]
        sizes = sorted({r.get("num_train") for r in judged}, key=str)
        if len(sizes) > 1:  # (--train-size, --val-size, --val-fraction: a win may be the data's, not the method's)
            runs = ", ".join(f"{r['run']} {r.get('num_train')}" for r in judged)
            out.append(f"{where}: no verdict: the runs trained on different numbers of rows or images ({runs}); "
                       "compare runs trained on the same data")
            continue
        several = [m for m in (*BAYESIAN_LABELS, "sgd", "dropout") if len(by.get(m, [])) > 1]
        if several:
            runs = ", ".join(r["run"] for m in several for r in by[m])
            out.append(f"{where}: no verdict: several {' and '.join(several)} runs ({runs}); give one run per "
                       "method and architecture")
            continue
        sgd, drop = (by[m][0] if m in by else None for m in ("sgd", "dropout"))
        for method in bayes:
            out += method_verdicts(where, BAYESIAN_LABELS[method], by[method][0], sgd, drop)
    return out


def _ranked(r: float, other: float, better: bool, other_method: str, among: str) -> str:
    """``best of AMONG``, ``tied for the best of AMONG with M`` or ``not the best of AMONG (M wins)``:
    ``among`` names the runs compared (the run and its SGD and dropout rivals), since the table
    beside it has other rows (another Bayesian method, an ensemble) that may score better."""
    if same_score(r, other):
        return f"tied for the best of {among} with {other_method}"
    return f"best of {among}" if better else f"not the best of {among} ({other_method} wins)"


def _among(label: str, rivals: list[dict[str, Any]]) -> str:
    """``BBB and sgd`` or ``BBB, sgd and dropout``: the run and the rivals it is ranked against."""
    names = [label, *(str(o["method"]) for o in rivals)]
    return ", ".join(names[:-1]) + " and " + names[-1]


def classifier_verdicts(where: str, label: str, r: dict[str, Any], sgd: dict[str, Any] | None,
                        drop: dict[str, Any] | None) -> list[str]:
    """The verdicts of one Bayesian run ``r`` (``label``: BBB, IVON, Laplace) against the SGD and dropout
    runs of its architecture and dataset."""
    out = []
    if sgd is not None:
        word = "the same as" if same_score(r["ece"], sgd["ece"]) else "lower than" if r["ece"] < sgd["ece"] \
            else "NOT lower than"
        out.append(f"{where}: {label}'s ECE ({r['ece']:.2f}%) is {word} SGD's ({sgd['ece']:.2f}%).")
    if drop is not None and r["auroc_mi"] is not None and drop["auroc_mi"] is not None and \
            r.get("ood") == drop.get("ood"):  # (AUROCs against other OOD sets do not rank the runs)
        word = "the same as" if same_score(r["auroc_mi"], drop["auroc_mi"]) else "higher than" \
            if r["auroc_mi"] > drop["auroc_mi"] else "NOT higher than"
        out.append(f"{where}: {label}'s OOD AUROC by mutual information ({r['auroc_mi']:.4f}) is {word} "
                   f"MC dropout's ({drop['auroc_mi']:.4f}).")
    for name, text in (("test_error", "test error"), ("nll", "NLL"), ("brier", "Brier score"),
                       ("auroc_entropy", "OOD AUROC by entropy")):
        others = [o for o in (sgd, drop) if o is not None and o[name] is not None
                  and (not name.startswith("auroc") or o.get("ood") == r.get("ood"))]
        if not others or r[name] is None:
            continue
        better = (lambda a, b: a > b) if name.startswith("auroc") else (lambda a, b: a < b)
        best_other = max(others, key=lambda o: o[name]) if name.startswith("auroc") else \
            min(others, key=lambda o: o[name])
        word = _ranked(r[name], best_other[name], better(r[name], best_other[name]), best_other["method"],
                       _among(label, others))
        out.append(f"{where}: {label}'s {text} is {word}: {fmt(r[name], DIGITS.get(name, 2))} against "
                   f"{fmt(best_other[name], DIGITS.get(name, 2))}.")
    if r["reference_test_error"] is not None:
        word = "beats" if r["test_error"] < r["reference_test_error"] else "does NOT beat"
        out.append(f"{where}: our {r['test_error']:.2f}% {word} the reference {r['reference_test_error']:.2f}%.")
    return out


def regression_verdicts(where: str, label: str, r: dict[str, Any], sgd: dict[str, Any] | None,
                        drop: dict[str, Any] | None) -> list[str]:
    """The verdicts of one Bayesian regression run ``r`` against the SGD and dropout runs of its
    architecture and dataset: test log-likelihood, RMSE and calibration gap."""
    out = []
    others = [o for o in (sgd, drop) if o is not None]
    for key, text, higher in (("log_likelihood", "test log-likelihood", True), ("test_rmse", "test RMSE", False),
                              ("calibration_gap", "calibration gap (pp)", False)):
        rivals = [o for o in others if o[key] is not None]
        if not rivals or r[key] is None:
            continue
        best = (max if higher else min)(rivals, key=lambda o: o[key])
        word = _ranked(r[key], best[key], r[key] > best[key] if higher else r[key] < best[key], best["method"],
                       _among(label, rivals))
        out.append(f"{where}: {label}'s {text} is {word}: {r[key]:.4g} against {best[key]:.4g}.")
    return out
