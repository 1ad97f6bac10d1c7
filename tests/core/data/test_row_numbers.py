"""A CSV error names the row as the file counts it (1 = the first line after the header), empty
rows counted: it named the n-th filled row, one off for each empty row above the bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bbb.data.files import Preprocess, load_file_splits, read_csv
from bbb.errors import DataError, UserError


def with_gaps(path: Path, bad_row: int, bad: str, column: int = 1) -> Path:
    """A 30-row regression table with an empty row (",,") after data rows 2 and 5 and a blank line
    after row 8, its ``bad_row``-th line after the header (gaps counted) holding ``bad``."""
    lines, k = [], 0
    while len(lines) < 40:
        k += 1
        lines.append([f"{0.1 * k:.2f}", f"{k % 3}.5", f"{k * 0.37:.3f}"])
        if k in (2, 5):
            lines.append(None)
        if k == 8:
            lines.append([])
    lines = lines[:40]
    assert lines[bad_row - 1], "the bad row must be a filled one"
    row = list(lines[bad_row - 1])
    row[column] = bad
    lines[bad_row - 1] = row
    text = ["a,b,y"] + [",," if r is None else ",".join(r) for r in lines]
    path.write_text("\n".join(text) + "\n")
    return path


@pytest.mark.parametrize("bad, column, words", [("", 1, ("missing",)), ("NA", 0, ("missing",)),
                                                 ("$5", 1, ("currency",)), ("?", 2, ("missing",)),
                                                 ("-", 2, ("column of numbers",))])
def test_training_errors_name_the_files_row(tmp_path, bad, column, words):
    path = with_gaps(tmp_path / "t.csv", 12, bad, column)
    header, rows = read_csv(path)
    assert len(rows) == 37  # 40 lines after the header, 3 of them empty
    with pytest.raises(UserError) as info:
        load_file_splits(path, target="y")
    msg = str(info.value)
    assert "row 12," in msg and all(w in msg for w in words), msg


def test_a_short_row_names_the_files_row(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("a,b\n1,2\n\n,\n3\n")
    with pytest.raises(DataError) as info:
        read_csv(path)
    assert "row 4 has 1 cells" in str(info.value)


def test_read_csv_gives_each_rows_number(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("\na,b\n1,2\n,\n3,4\n\n5,6\n\n")
    empty: list[int] = []
    numbers: list[int] = []
    _, rows = read_csv(path, empty, numbers)
    assert rows == [["1", "2"], ["3", "4"], ["5", "6"]] and numbers == [1, 3, 5] and empty == [2, 4]


def test_new_rows_errors_name_the_files_row(tmp_path):
    _, pre = load_file_splits(with_gaps(tmp_path / "t.csv", 1, "0.5"), target="y")
    assert isinstance(pre, Preprocess)
    new = with_gaps(tmp_path / "new.csv", 12, "oops", 0)
    numbers: list[int] = []
    header, rows = read_csv(new, numbers=numbers)
    with pytest.raises(UserError) as info:
        pre.encode_table(header, rows, str(new), numbers=numbers)
    assert "row 12," in str(info.value) and "not a number" in str(info.value)
