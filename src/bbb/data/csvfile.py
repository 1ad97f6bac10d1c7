"""Reading a CSV file's cells: :func:`read_csv` (its header and rows, cells stripped), the
separator found from the first line (:data:`DELIMITERS`), and the one-line errors of a file that
is no table (not UTF-8, no header, an unnamed or repeated column, a row of another length)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from ..errors import DataError
from .table_checks import check_separated_decimal_commas, number, numbers_the_rows

__all__ = ["DELIMITERS", "read_csv"]

#: the cell separators a CSV may use: a comma, or (a first line without commas) a semicolon or a tab
DELIMITERS = (",", ";", "\t")


def _delimiter(first: str) -> str:
    """The cell separator of a CSV whose first line is ``first``: a comma, unless that line has
    none (outside quotes: a name ``"price, EUR"``) but has semicolons or tabs (a spreadsheet's
    export in a locale with decimal commas)."""
    try:
        counts = {d: len(next(csv.reader([first.rstrip("\r\n")], delimiter=d), [])) - 1 for d in DELIMITERS}
    except csv.Error:  # (a line break inside quotes: counted as written)
        counts = {d: first.count(d) for d in DELIMITERS}
    if counts[","]:
        return ","
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def read_csv(path: str | os.PathLike[str], empty: list[int] | None = None, numbers: list[int] | None = None
             ) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a CSV file, every row as long as the header; cells stripped. An empty
    row (a blank line, or cells all empty: ``,,,``) is no row; given a list ``empty``, the position
    of each one between rows (1 = the first line after the header) is appended to it; given a list
    ``numbers``, the position of each row returned, counted the same way (empty rows included: the
    row an error names, :func:`row_number`).

    The cells are separated by commas, or by semicolons or tabs where the first line has no
    comma but has those (:data:`DELIMITERS`), or as a first line ``sep=;`` says (Excel's); such
    a file with a decimal comma in a number (``3,5``) is a one-line error. A file that cannot be
    read, has no header or no rows, a repeated column name, or a row of another length is a
    one-line :class:`DataError` naming the file (and the row)."""
    p = Path(path)
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:
            first = f.readline()
            said = first.rstrip("\r\n") if first.rstrip("\r\n") in {f"sep={d}" for d in DELIMITERS} else None
            if said is None:  # (else Excel's line naming the separator, sep=;, read as no header, skipped)
                f.seek(0)
            delimiter = said[-1] if said else _delimiter(first)
            lines = list(csv.reader(f, delimiter=delimiter))
    except FileNotFoundError:
        raise DataError(f"{p}: no such file") from None
    except UnicodeDecodeError as e:  # a spreadsheet's "Unicode text" (UTF-16) or a Latin-1 export
        raise DataError(f"{p}: not UTF-8 text (byte {e.object[e.start]:#04x} at position {e.start}); save it as "
                        "UTF-8 (a spreadsheet's \"CSV UTF-8\")") from None
    except (OSError, csv.Error) as e:
        raise DataError(f"{p}: cannot be read as a CSV file ({' '.join(str(e).split())[:120]})") from None
    filled = [any(c.strip() for c in row) for row in lines]
    where: list[int] = []  # each row's number: 1 = the first line after the header, empty ones counted
    if True in filled:
        top, bottom = filled.index(True), len(filled) - 1 - filled[::-1].index(True)  # the header, the last row
        where = [i - top for i in range(top + 1, len(filled)) if filled[i]]
        if empty is not None:
            empty += [i - top for i in range(top + 1, bottom) if not filled[i]]
    lines = [row for row, ok in zip(lines, filled) if ok]  # blank lines are not rows
    if not lines:
        raise DataError(f"{p}: empty file; a CSV needs a header row and at least one row of data")
    header = [c.strip() for c in lines[0]]
    if any(not h for h in header):
        j = header.index("")
        blank = all(len(r) <= j or not r[j].strip() for r in lines[1:])  # a separator ending every line
        cells = [number(r[j]) if len(r) > j else None for r in lines[1:]]
        index = None not in cells and numbers_the_rows([float(v) for v in cells if v is not None])
        raise DataError(f"{p}: column {j + 1} of the header row has no name" + (
            " and no values (a separator at the end of every line?): remove that empty column" if blank else
            " and numbers the rows (pandas' index, written by to_csv without index=False?): remove that column"
            if index else ": name it in the header row (then --ignore it, if it is no feature), or remove it"))
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise DataError(f"{p}: the column name {dup[0]!r} appears more than once in the header row")
    rows = []
    for i, row in enumerate(lines[1:], start=1):
        if len(row) != len(header):
            why = (f"as its line {said} says" if said else "as the first line has a comma" if delimiter == "," else
                   "the first line having no comma")
            seps = {",": "commas", ";": "semicolons", "\t": "tabs"}
            raise DataError(f"{p}: row {where[i - 1]} has {len(row)} cells but the header has {len(header)} columns "
                            f"(cells read as separated by {seps[delimiter]}, {why})")
        rows.append([c.strip() for c in row])
    if not rows:
        raise DataError(f"{p}: a header row but no rows of data")
    check_separated_decimal_commas(p, delimiter, header, rows, where)
    if numbers is not None:
        numbers += where
    return header, rows
