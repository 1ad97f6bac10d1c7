"""Cells of a user's table that were read silently wrong (own data never silently wrong): a
``?`` (UCI's missing marker) made a numeric column one-hot categories of its numbers, ``18_25``
(an age band) was read as 1825 by Python's float, and a value far outside a column of tiny spread
standardised to inf."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import pytest

from bbb.data.files import load_file_splits
from bbb.data.table_checks import number
from bbb.errors import UserError


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_a_question_mark_is_a_missing_value_naming_its_row(tmp_path):
    rng = random.Random(0)
    rows = [[rng.randint(20, 79), rng.gauss(0, 1), rng.gauss(0, 1)] for _ in range(300)]
    for i in range(3, 300, 5):
        rows[i][0] = "?"  # 20% of the ages: not 10% text, so it was read as text
    with pytest.raises(UserError, match=r"row 4, column 'age': '\?' is read as a missing value"):
        load_file_splits(_write(tmp_path / "q.csv", ["age", "x", "y"], rows), target="y")


def test_numbers_with_underscores_are_text():
    assert number("18_25") is None and number("1_0") is None
    assert number("1825") == 1825.0 and number("-2.5e3") == -2500.0


def test_an_age_band_written_with_an_underscore_is_a_category(tmp_path):
    rng = random.Random(0)
    rows = [[rng.choice(["18_25", "26_35", "36_50"]), rng.gauss(0, 1), rng.gauss(0, 1)] for _ in range(60)]
    _, pre = load_file_splits(_write(tmp_path / "b.csv", ["band", "x", "y"], rows), target="y")
    assert pre.columns[0] == {"name": "band", "kind": "onehot", "categories": ["18_25", "26_35", "36_50"]}


def test_a_value_that_standardises_beyond_float32_is_one_line_naming_row_and_column(tmp_path):
    rng = random.Random(0)
    rows = [[rng.gauss(0, 1e-3), rng.gauss(0, 1)] for _ in range(200)]
    _, pre = load_file_splits(_write(tmp_path / "s.csv", ["s", "y"], rows), target="y")
    with pytest.raises(UserError, match=r"new.csv: row 2, column 's': 1e\+37 lies .* training standard deviations"):
        pre.encode_table(["s"], [["0.001"], ["1e37"]], where="new.csv")
    with pytest.raises(UserError, match=r"input 1, column 's'"):
        pre.encode_array(np.array([[-1e37]]))
    assert pre.encode_table(["s"], [["0.001"]], where="new.csv").isfinite().all()
