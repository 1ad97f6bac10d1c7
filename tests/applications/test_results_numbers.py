"""The numbers that results/mnist-paper/README.md and results/regression/README.md state are those
of the files committed beside them: each run's summary.json and pruning.csv, table1.csv, and the
regression's summary.json and alternatives.json (a rerun that changes a file and not the page, or
a page edited by hand, fails here)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.release_independent  # (reads committed files only)

RESULTS = Path(__file__).resolve().parents[2] / "results"
PAPER = RESULTS / "mnist-paper"
REGRESSION = RESULTS / "regression"


def table_rows(text: str, first: str) -> list[list[str]]:
    """The cells of the markdown table rows of ``text`` whose first cell starts with ``first``
    (bold marks removed)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
            if cells[0].startswith(first):
                rows.append(cells)
    return rows


def numbers(cell: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", cell)]


def groups(cell: str) -> list[list[str]]:
    """'a / b; c / d' -> [['a', 'b'], ['c', 'd']]."""
    return [[p.strip() for p in g.split(" / ")] for g in cell.split(";")]


def run_names(cell: str) -> list[str]:
    """'bbb_mixture_800 / _c1 / _c2' -> the three runs (a suffix continues its group's first name);
    groups separated by ';'."""
    names = []
    for g in groups(cell):
        names += [g[0], *(g[0] + s for s in g[1:])]
    return names


def flat(cell: str) -> list[str]:
    return [p for g in groups(cell) for p in g]


def pct(v: float) -> float:
    return round(100.0 * v, 2)


def test_every_run_row_of_the_paper_budget_readme_is_its_summary_and_pruning_csv():
    text = (PAPER / "README.md").read_text().split("## Table 1 and every candidate", 1)[1].split("\n## ", 1)[0]
    checked = 0
    for cells in table_rows(text, ("bbb_", "sgd_", "dropout_")):
        names = run_names(cells[0])
        for col, key in ((2, "val"), (3, "test_error"), (4, "test_error_mc"), (5, "last_test_error")):
            values = flat(cells[col])
            if len(values) != len(names):  # (an empty cell: not stated)
                assert cells[col] == "", (cells[0], col, cells[col])
                continue
            for name, stated in zip(names, values):
                s = json.loads((PAPER / "runs" / name / "summary.json").read_text())
                got = numbers(stated)
                if key == "val":
                    assert got == [pct(s["best_val_error"]), s["best_epoch"]], (name, stated)
                else:
                    assert got == [pct(s[key])], (name, key, stated)
                checked += 1
        pruning = PAPER / "runs" / names[0] / "pruning.csv"
        if len(names) == 1 and pruning.is_file() and cells[6]:
            rows = {float(r["fraction_removed"]): pct(float(r["test_error"]))
                    for r in csv.DictReader(pruning.open())}
            stated = [None if v.strip(" %") == "-" else numbers(v)[0] for v in cells[6].split(" / ")]
            want = [rows[0.0], rows[0.95], rows[0.98]]
            assert [w for s, w in zip(stated, want) if s is not None] == [s for s in stated if s is not None], \
                (names[0], cells[6], want)
            checked += 1
    assert checked > 100  # every run of the plan, each with its four numbers


def test_the_paper_budget_readmes_table1_is_table1_csv():
    text = (PAPER / "README.md").read_text().split("## Table 1 and every candidate", 1)[1]
    rows = {(r["method"], int(r["hidden"])): r for r in csv.DictReader((PAPER / "table1.csv").open())}
    methods = ("sgd", "dropout", "bbb_gaussian", "bbb_mixture")
    found = table_rows(text, ("400", "800", "1200"))[:3]
    assert [c[0] for c in found] == ["400", "800", "1200"]
    for cells in found:
        for method, cell in zip(methods, cells[1:]):
            r = rows[(method, int(cells[0]))]
            want = [float(f"{float(r['test_error']):.2f}")]  # (as table1.md writes it)
            if r["test_error_sd"]:
                want.append(round(100 * float(r["test_error_sd"])) / 100)
            assert numbers(cell) == [*want, float(r["paper_test_error"])], (method, cells[0], cell)


def test_the_regression_readme_states_summary_json_and_alternatives_json():
    text = (REGRESSION / "README.md").read_text()
    s = json.loads((REGRESSION / "summary.json").read_text())
    main = {c[0]: c[1:] for c in table_rows(text, ("RMSE", "mean interquartile", "interquartile width at",
                                                     "epistemic std"))}
    assert numbers(main["RMSE of the median vs the noise-free curve, x in [0, 0.5]"][0]) == \
        [round(s["rmse_bbb_median_in_data"], 3)]
    assert numbers(main["RMSE of the median vs the noise-free curve, x in [0, 0.5]"][1]) == \
        [round(s["rmse_standard_median_in_data"], 3)]
    assert numbers(main["mean interquartile width, x in [0, 0.5]"][0]) == [round(s["bbb_iqr_mean_in_data"], 3)]
    assert numbers(main["interquartile width at x = 1.2"][0]) == [
        round(s["bbb_iqr_at_far_end"], 2), round(s["bbb_iqr_ratio_far_to_in_data"], 1)]
    assert numbers(main["epistemic std: in the data / at x = 1.2"][0]) == [
        round(s["bbb_epistemic_std_mean_in_data"], 3), round(s["bbb_epistemic_std_at_far_end"], 2)]

    alt = json.loads((REGRESSION / "alternatives.json").read_text())["methods"]
    names = {"Bayes by Backprop": "bbb", "standard network": "standard", "deep ensemble of 5": "deep_ensemble",
             "MC dropout, p = 0.1": "mc_dropout", "last-layer Laplace": "laplace"}
    found = {c[0]: c for c in table_rows(text, tuple(names))}
    assert set(found) == set(names)
    for label, key in names.items():
        m, cells = alt[key], found[label]
        assert numbers(cells[1]) == [round(m["rmse_median_in_data"], 3)], label
        assert numbers(cells[2]) == [round(m["iqr_mean_in_data"], 3)], label
        assert numbers(cells[3])[0] == pytest.approx(m["iqr_at_far_end"], abs=0.0051), label
        assert numbers(cells[4]) == [round(m["iqr_ratio_far_to_in_data"], 1)], label
        assert numbers(cells[5])[0] == pytest.approx(m["epistemic_std_at_far_end"], abs=0.0051), label
        assert numbers(cells[6]) == [round(100 * m["curve_in_95_band_beyond_data"]),
                                     round(100 * m["curve_in_95_band_before_data"])], label
        assert numbers(cells[7]) == [round(m["seconds"], 1)], label
