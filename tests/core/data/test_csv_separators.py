"""A CSV separated by semicolons or tabs (a spreadsheet's export in many locales) is read by its
columns, and a decimal comma in it is a one-line error, never a number read as a category
(issue 72, item 12l); so is a column of quoted decimal-comma numbers in a comma-separated file."""

from __future__ import annotations

import csv
import re

import pytest

from bbb.data.files import load_file_splits, read_csv
from bbb.errors import DataError, UserError


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_semicolon_or_tab_separated_table_is_read_by_its_columns(tmp_path, sep):
    path = tmp_path / "t.csv"
    rows = [["x1", "kind", "y"]] + [[f"{i / 10:.1f}", "ab"[i % 2], f"{i * 1.5:.2f}"] for i in range(40)]
    path.write_text("".join(sep.join(r) + "\n" for r in rows))
    header, body = read_csv(path)
    assert header == ["x1", "kind", "y"] and body[3] == ["0.3", "b", "4.50"]
    data, pre = load_file_splits(path, target="y", task="regression")
    assert [c["kind"] for c in pre.columns] == ["numeric", "onehot"] and data["train_x"].shape[1] == 3


def test_a_comma_separated_table_with_semicolons_in_its_cells_stays_comma_separated(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,note\n1,"x;y"\n2,z\n')
    assert read_csv(path) == (["a", "note"], [["1", "x;y"], ["2", "z"]])


@pytest.mark.release_independent  # (bbb's own reading: the torch lanes skip it)
def test_a_row_of_another_length_names_the_separator_read(tmp_path):
    # a tab-separated file whose header names a column "size, m2" is read by commas: the error said
    # only "row 1 has 1 cells but the header has 2 columns", of a file that has 3 in every row
    path = tmp_path / "t.csv"
    path.write_text("size, m2\tage\tprice\n50.5\t3\t100.25\n")
    with pytest.raises(DataError) as info:
        read_csv(path)
    msg = str(info.value)
    assert "\n" not in msg and "row 1 has 1 cells" in msg and "separated by commas" in msg and "first line" in msg


@pytest.mark.release_independent  # (bbb's own reading: the torch lanes skip it)
@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_a_file_not_in_utf8_says_to_save_it_so(tmp_path, encoding):
    # it said "cannot be read as a CSV file ('utf-8' codec can't decode byte 0xff ...)"
    path = tmp_path / "t.csv"
    path.write_text("a,colour\n1,grün\n", encoding=encoding)
    with pytest.raises(DataError) as info:
        read_csv(path)
    msg = str(info.value)
    assert "\n" not in msg and "not UTF-8" in msg and "save it as UTF-8" in msg


@pytest.mark.release_independent  # (bbb's own reading: the torch lanes skip it)
def test_a_separator_ending_every_line_is_named(tmp_path):
    # a spreadsheet's export with a comma at the end of each line: "column 3 of the header row has no name"
    path = tmp_path / "t.csv"
    path.write_text("a,y,\n1,2.5,\n2,3.5,\n")
    with pytest.raises(DataError) as info:
        read_csv(path)
    assert "column 3" in str(info.value) and "remove that empty column" in str(info.value)
    path.write_text("a,y,\n1,2.5,x\n")  # a column with values but no name: only the name is missing
    with pytest.raises(DataError) as info:
        read_csv(path)
    assert "has no name" in str(info.value) and "empty column" not in str(info.value)
    assert "name it in the header row" in str(info.value)  # (it said only "has no name": what to do?)


@pytest.mark.release_independent  # (bbb's own reading: the torch lanes skip it)
def test_a_pandas_index_without_a_name_is_named(tmp_path):
    # DataFrame.to_csv(path) writes its index as a first column without a name: "column 1 of the header row has
    # no name", no more
    path = tmp_path / "t.csv"
    path.write_text(",a,y\n" + "".join(f"{i},{i * 0.37 % 5:.3f},{i * 1.5:.2f}\n" for i in range(30)))
    with pytest.raises(DataError) as info:
        read_csv(path)
    msg = str(info.value)
    assert "column 1 of the header row has no name and numbers the rows" in msg and "index=False" in msg, msg


def test_a_decimal_comma_is_a_one_line_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("x1;y\n1,5;2\n2,25;3\n")
    with pytest.raises(DataError, match="decimal comma") as info:
        read_csv(path)
    msg = str(info.value)
    assert "\n" not in msg and "row 1" in msg and "'x1'" in msg and "decimal=','" in msg


def test_a_decimal_comma_after_thousands_dots_is_an_error_too(tmp_path):
    # "3.100,50" (a German export: thousands dots and a decimal comma) escaped the check: a price column of
    # such cells was read as text, one-hot over its values, silently
    path = tmp_path / "de.csv"
    path.write_text("flaeche;preis\n" + "".join(f"{40 + i};{1 + i % 5}.{i % 3}00,50\n" for i in range(30)))
    with pytest.raises(DataError, match="decimal comma") as info:
        read_csv(path)
    assert "row 1" in str(info.value) and "'preis'" in str(info.value) and "'1.000,50'" in str(info.value)


def test_a_space_as_thousands_separator_is_an_error_too(tmp_path):
    # a French export: "1 234,5" (a space, or a no-break space, between the thousands) escaped the check,
    # and "1 234" without decimals was text: one-hot over its values, silently
    path = tmp_path / "fr.csv"
    path.write_text("surface;prix\n" + "".join(f"{40 + i};{1 + i % 5}\u00a0{i % 3}00,50\n" for i in range(30)))
    with pytest.raises(DataError, match="decimal comma"):
        read_csv(path)
    path.write_text("surface;prix\n" + "".join(f"{40 + i}.5;{1 + i % 5} {i % 3}00\n" for i in range(30)))
    with pytest.raises(UserError, match="row 1, column 'prix': '1 000' is a number with a thousands separator"):
        load_file_splits(path, target="surface")


def test_a_quoted_decimal_comma_in_a_comma_separated_file_is_an_error_not_text(tmp_path):
    # "3,0", "1,5" quoted in a comma-separated file were read as text: a feature one-hot over its values,
    # a target of "0,5", "2,5" classes, silently
    rows = [[f"{i * 0.37:.2f}", ["3,0", "1,5", "-0,25", "1,2345", "2"][i % 5], f"{20 + i * 0.5:.2f}"]
            for i in range(40)]
    path = tmp_path / "q.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["a", "rating", "y"], *rows])
    with pytest.raises(DataError, match="decimal comma") as info:
        load_file_splits(path, target="y")
    msg = str(info.value)
    assert "\n" not in msg and "row 1, column 'rating'" in msg and "'3,0'" in msg and "decimal point" in msg
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["a", "y"], *([r[0], r[1]] for r in rows)])
    with pytest.raises(DataError, match=r"row 1, column 'y': '3,0' has a decimal comma"):
        load_file_splits(path, target="y", task="regression")
    # an ignored column is not read; text with commas stays text
    with pytest.raises(DataError, match="decimal comma"):  # (the target is read whatever --task says)
        load_file_splits(path, target="y", task="classification")
    names = [[r[0], ["Smith, John", "Doe, Jane", "3,5"][i % 3], r[2]] for i, r in enumerate(rows)]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["a", "name", "y"], *names])
    _, pre = load_file_splits(path, target="y")
    assert pre.columns[1] == {"name": "name", "kind": "onehot", "categories": ["3,5", "Doe, Jane", "Smith, John"]}
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["a", "rating", "y"], *rows])
    assert [c["name"] for c in load_file_splits(path, target="y", ignore=["rating"])[1].columns] == ["a"]


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
@pytest.mark.parametrize(("cell", "what"), [("3,5", "a decimal comma"), ("1.234,5", "a decimal comma"),
                                            ("52,000", "a thousands separator"), ("$5", "a currency sign"),
                                            ("12%", "a percent sign")])
def test_new_inputs_with_a_formatted_number_say_what_to_write(tmp_path, cell, what):
    """A numeric column's formatted number in new inputs (bbb predict's CSV) is the training check's
    message, not 'not a number'."""
    path = tmp_path / "t.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["a", "y"], *([f"{i * 0.37:.2f}", f"{i * 1.5:.2f}"] for i in range(40))])
    _, pre = load_file_splits(path, target="y")
    with pytest.raises(UserError, match=rf"row 2, column 'a': '{re.escape(cell)}' is a number with {what}, which "
                       r"bbb does not read; write a plain number"):
        pre.encode_table(["a"], [["1.5"], [cell]])
    with pytest.raises(UserError, match="'abc' is not a number"):
        pre.encode_table(["a"], [["abc"]])


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_a_comma_before_three_digits_after_four_is_an_error_not_text(tmp_path):
    # "1234,567" is neither thousands grouping ("1,234,567") nor a decimal comma bbb can tell from one: it was
    # read as text, a column of them one-hot categories, silently
    path = tmp_path / "t.csv"
    rows = [[f'"{1000 + 37 * i},{i % 10}{i % 7}{i % 3}"', f"{i * 0.25:.2f}", f"{i * 0.5:.1f}"] for i in range(30)]
    path.write_text("a,b,y\n" + "".join(",".join(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=r"row 1, column 'a': '1000,000' is a number with a comma that may be a "
                       "decimal comma or a thousands separator"):
        load_file_splits(path, target="y")
    _, pre = load_file_splits(path, target="y", ignore=["a"])  # (the check reads no ignored column)
    assert pre.columns == [{"name": "b", "kind": "numeric", "categories": [], "range": pre.columns[0]["range"]}]


@pytest.mark.release_independent  # (bbb's own reading: the torch lanes skip it)
def test_a_quoted_comma_in_a_semicolon_separated_header_keeps_the_semicolons(tmp_path):
    # a header '"price, EUR";area;y' was read as comma-separated (a comma in the first line), the whole line
    # one column: "no column 'y'; the columns are price, EUR;area;y"
    path = tmp_path / "t.csv"
    path.write_text('"price, EUR";area;y\n' + "".join(f"{i * 1.5:.2f};{i % 7};{i * 0.25:.2f}\n" for i in range(30)))
    header, body = read_csv(path)
    assert header == ["price, EUR", "area", "y"] and body[2] == ["3.00", "2", "0.50"]


def test_a_file_without_a_header_row_is_said_to_lack_one(tmp_path):
    # its first row of data was read as the names, and the error listed "the columns are 1.5, red, 3.25" only
    rows = [[f"{i * 1.5:.2f}", "ab"[i % 2], f"{i * 0.25 + 0.1:.2f}"] for i in range(1, 40)]
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(UserError) as info:
        load_file_splits(path, target="y")
    msg = str(info.value)
    assert "\n" not in msg and "no column 'y'" in msg and "first row holds numbers (1.50, 0.35)" in msg, msg
    assert "without a header row" in msg
    # a run's new rows without their header, in bbb predict (Preprocess.encode_table)
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["x", "kind", "y"]] + rows)
    _, pre = load_file_splits(path, target="y")
    with pytest.raises(UserError) as info:
        pre.encode_table(rows[0], rows[1:])
    assert "the column 'x' that the run was trained with is missing" in str(info.value)
    assert "without a header row" in str(info.value)
    with pytest.raises(UserError) as info:  # a header of names: nothing to add
        pre.encode_table(["a", "kind", "y"], rows)
    assert "header" not in str(info.value)


@pytest.mark.release_independent  # (bbb's own reading: the torch lanes skip it)
@pytest.mark.parametrize("sep", [";", ",", "\t"])
def test_excels_line_naming_the_separator_is_read_as_such(tmp_path, sep):
    # Excel's 'sep=;' first line was read as the header: "column 2 of the header row has no name"
    path = tmp_path / "t.csv"
    path.write_text(f"sep={sep}\r\n" + "".join(sep.join(r) + "\r\n" for r in [["a", "kind", "y"], ["1.5", "x", "2"],
                                                                              ["", "", ""], ["2.5", "z", "3"]]))
    empty: list[int] = []
    numbers: list[int] = []
    assert read_csv(path, empty, numbers) == (["a", "kind", "y"], [["1.5", "x", "2"], ["2.5", "z", "3"]])
    assert empty == [2] and numbers == [1, 3]  # (rows counted from the header, as without the line)
    path.write_text(f"sep={sep}\na{sep}y\n1{sep}2{sep}3\n")
    with pytest.raises(DataError, match=f"row 1 has 3 cells .* as its line sep={sep} says"):
        read_csv(path)
