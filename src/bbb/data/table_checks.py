"""Checks of a CSV table's cells that catch what would otherwise be read silently wrong
(:mod:`bbb.data.files` calls them while it reads a table into a run's split):

* :func:`check_separated_decimal_commas`: a decimal comma in a file separated by semicolons or
  tabs; :func:`formatted_number` and :func:`not_a_number`: a number written with a thousands
  separator, a currency or a percent sign, which ``float`` does not read;
* :func:`check_decimal_commas`: a comma-separated file's quoted number with a decimal comma
  (``"3,5"``) would be read as text, a column of them one-hot categories, a target of them
  classes; a column of such numbers is a one-line error;
* :func:`check_magnitude` and :func:`check_array_magnitude`: a value too large for the
  network's float32 (above :data:`FLOAT32_MAX`) would turn into inf partway through training or
  prediction; a one-line error naming its row and column;
* :func:`check_class_labels`: two class labels that are one number written two ways (``1`` and
  ``1.0``, ``01``) would be two classes; a one-line error;
* :func:`warn_case_variants`: two class labels or categories that differ only in case (``Yes`` and
  ``yes``) are two classes, one word split in two; a warning naming them;
* :func:`check_training_classes`: a class that the split leaves without a training row would be
  one the network never learns; a one-line error naming the options to change;
* :func:`classes_not_held_out`: a class with too few rows for the split to hold any out is never
  scored: the validation (the best epoch, the refer threshold) and the test scores say nothing of it;
* :func:`values_outside`: the values of new inputs outside their column's training range, an
  input predicted by extrapolation (bbb predict flags and refers it);
* :func:`dates_hint`: a column of dates or times is text, one-hot encoded by its distinct values:
  every new date would be a category unseen in training; what to write instead;
* :func:`warn_target_copies`: a feature that is the target under another name (a price in
  thousands beside the price, a 0/1 code of a yes/no target) makes the held-out scores perfect
  and is not known for new rows; a warning naming it;
* :func:`header_hint`: a file without a header row has its first row of data read as the column
  names: what a missing column's error adds;
* :func:`task_of`: a target column of whole numbers (classes or a quantity?) or of numbers with a
  few text cells would be a guess at the task; a one-line error;
* :func:`numbers_the_rows`: whether a numeric column is a row identifier, which as a feature would
  only let the network learn row order (:mod:`bbb.data.files` refuses it unless told to keep it).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from torch import Tensor

from ..errors import DataError, UserError

__all__ = ["DECIMAL_COMMA", "FLOAT32_MAX", "MIN_IDENTIFIER_ROWS", "NUMERIC_SHARE", "check_array_magnitude",
           "check_class_labels", "check_decimal_commas", "check_magnitude", "check_separated_decimal_commas",
           "check_training_classes", "classes_not_held_out", "dates_hint", "formatted_number", "header_hint",
           "not_a_number", "number", "numbers_the_rows", "row_number", "task_of", "values_outside", "arrays_outside",
           "warn_case_variants", "warn_target_copies"]

#: the largest magnitude a float32 holds; a value beyond it becomes inf in the network
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: a number with a decimal comma in a comma-separated file (quoted there): 3,5, -0,25, 1,2345; not
#: 52,000 (three digits after the comma: a thousands separator, an error of its own)
DECIMAL_COMMA = re.compile(r"[+-]?\d+,(\d{1,2}|\d{4,})")


def number(text: str) -> float | None:
    """The finite number a cell holds, or None (text, or a NaN or an inf). Python's own
    literals are not numbers of a table: ``18_25`` (an age band) is text, not 1825."""
    if "_" in text:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


#: a numeric column is taken for a row identifier from this many rows (see :func:`numbers_the_rows`)
MIN_IDENTIFIER_ROWS = 20


def numbers_the_rows(nums: Sequence[float]) -> bool:
    """Whether a numeric column is a row identifier: whole numbers, one per row, a run of
    consecutive integers in some order (0..N-1, 1..N, 1000..1000+N-1). A quantity measured on the
    rows is all but never that; as a feature an identifier only lets the network learn row order.
    A year in a yearly series is the exception that :func:`bbb.data.files.load_file_splits`'s
    ``keep`` allows."""
    if len(nums) < MIN_IDENTIFIER_ROWS or any(v != int(v) for v in nums):
        return False
    return len(set(nums)) == len(nums) and max(nums) - min(nums) == len(nums) - 1


def row_number(numbers: Sequence[int] | None, i: int) -> int:
    """The file's number of the ``i``-th row read (1 = the first): ``numbers[i - 1]`` where
    :func:`bbb.data.files.read_csv` gave them (empty rows counted), else ``i``."""
    return numbers[i - 1] if numbers else i


#: a thousands separator besides the comma: a dot (before a decimal comma), a space, a no-break space
_GROUP = "[. \u00a0\u202f]"
_DECIMAL_COMMA = re.compile(rf"[+-]?(\d+|\d{{1,3}}({_GROUP}\d{{3}})+),\d+")  # 3,5, 1.234,5 and 1 234,5
#: a number bbb does not read, written with a currency sign, a thousands separator or a percent sign
_FORMATTED = re.compile(r"[+-]?(?P<cur>[$€£¥]\s?)?[+-]?(?P<num>\d+(\.\d*)?|\d{1,3}([, \u00a0\u202f]\d{3})+(\.\d*)?)"
                        r"\s?(?P<pct>%)?")
#: a comma that is neither a decimal comma bbb recognises nor thousands grouping: 1234,567
_AMBIGUOUS_COMMA = re.compile(r"[+-]?\d{4,},\d{3}")


def formatted_number(cell: str) -> str | None:
    """What makes ``cell`` a number that ``float`` does not read ("a thousands separator", "a
    currency sign", "a percent sign", an ambiguous comma); None for a plain number or text."""
    if _AMBIGUOUS_COMMA.fullmatch(cell):
        return "a comma that may be a decimal comma or a thousands separator"
    m = _FORMATTED.fullmatch(cell)
    if m is None:
        return None
    return ("a currency sign" if m["cur"] else "a percent sign" if m["pct"] else
            "a thousands separator" if re.search("[, \u00a0\u202f]", m["num"]) else None)


def not_a_number(cell: str) -> str:
    """Why a cell of a numeric column is not read as a number, and what to write instead."""
    what = formatted_number(cell) or ("a decimal comma" if _DECIMAL_COMMA.fullmatch(cell) else None)
    return f"is a number with {what}, which bbb does not read; write a plain number (3.5, 52000)" if what else \
        "is not a number"


def check_separated_decimal_commas(p: str | os.PathLike[str], delimiter: str, header: list[str], rows: list[list[str]],
                          numbers: Sequence[int]) -> None:
    """A file separated by ``;`` or tabs may write numbers with a decimal comma (``3,5``): read as
    text they would be one-hot categories, silently wrong; a one-line error instead."""
    if delimiter == ",":
        return
    for i, row in enumerate(rows, start=1):
        for name, cell in zip(header, row):
            if _DECIMAL_COMMA.fullmatch(cell):
                raise DataError(f"{p}: row {row_number(numbers, i)}, column {name!r}: {cell!r} has a decimal comma; "
                                "bbb reads numbers "
                                f"with a decimal point: convert the file first (e.g. pandas.read_csv(FILE, "
                                f"sep={delimiter!r}, decimal=',').to_csv(NEW, index=False))")


def check_decimal_commas(where: str, name: str, cells: Sequence[str], numbers: Sequence[int]) -> None:
    """A one-line :class:`DataError` where ``cells``, a column of a comma-separated file, hold
    numbers with a decimal comma (:data:`DECIMAL_COMMA`) and plain numbers only: read as text,
    they would be one-hot categories (a target's, classes). A column with other text in it
    (``"Smith, John"``, ``"red, green"``) is text and passes."""
    first = next((i for i, c in enumerate(cells, start=1) if DECIMAL_COMMA.fullmatch(c)), None)
    if first is None:
        return
    if all(DECIMAL_COMMA.fullmatch(c) or number(c) is not None for c in cells):
        raise DataError(f"{where}: row {row_number(numbers, first)}, column {name!r}: {cells[first - 1]!r} has a "
                        "decimal comma; bbb reads numbers with a decimal point: write the column's numbers with "
                        "decimal points (3.5, not \"3,5\") and save the file again")


def check_magnitude(where: str, name: str, values: Sequence[float] | np.ndarray, numbers: Sequence[int] | None,
                    cells: Sequence[str]) -> None:
    """A one-line :class:`UserError` naming the first row of ``values``, the column ``name`` read
    from the text ``cells``, whose magnitude does not fit a float32 (above :data:`FLOAT32_MAX`):
    it would be inf in the network. ``numbers``: each row's number in its file
    (:func:`row_number`)."""
    big = np.nonzero(np.abs(np.asarray(values, dtype=np.float64)) > FLOAT32_MAX)[0]
    if big.size:
        i = int(big[0])
        raise UserError(f"{where}: row {row_number(numbers, i + 1)}, column {name!r}: {cells[i][:40]!r} is too large "
                        f"for bbb's 32-bit numbers (at most {FLOAT32_MAX:.3g} in magnitude); fix the value, or "
                        "rescale the column (other units, or its logarithm)")


def check_array_magnitude(where: str, a: np.ndarray, row: Callable[[int], str]) -> None:
    """:func:`check_magnitude` for an array of rows (N, ...): the first row with a value above
    :data:`FLOAT32_MAX` in magnitude is a one-line :class:`UserError`, the row named by
    ``row(index)`` (0 = the first)."""
    if a.size and np.issubdtype(a.dtype, np.floating):
        big = (np.abs(a.reshape(a.shape[0], -1).astype(np.float64)) > FLOAT32_MAX).any(1)
        if big.any():
            raise UserError(f"{where}: {row(int(np.nonzero(big)[0][0]))} holds a value too large for bbb's 32-bit "
                            f"numbers (at most {FLOAT32_MAX:.3g} in magnitude); fix it, or rescale the feature")


def values_outside(values: np.ndarray, low: Sequence[float], high: Sequence[float], names: Sequence[str],
                   cell: Callable[[int, int], str]) -> list[tuple[int, str, str]]:
    """``(row, column, text)`` for each of ``values`` (N, D) outside its column's training range
    ``[low[j], high[j]]``, in row order (row 1 = the first), the text naming the column, the value
    (``cell(i, j)``: as the input wrote it) and the range."""
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    rows, cols = np.nonzero((values < lo) | (values > hi))
    return [(int(i) + 1, names[j], f"{names[j]} {cell(int(i), int(j))[:40]} outside the training rows' "
             f"{lo[j]:.6g} to {hi[j]:.6g}") for i, j in zip(rows.tolist(), cols.tolist())]


def arrays_outside(values: np.ndarray, low: float, high: float, name: str = "x",
                   trained: str = "arrays") -> list[tuple[int, str, str]]:
    """``(row, name, text)`` for each input (a row of ``values``: an image-shaped array, flat) with a
    value outside the training arrays' range ``[low, high]``, or, where those reach above 1, whose
    values all lie in 0..1, not all 0: an image scaled to 0..1 (or binarised to 0 and 1) given to a
    run of 0..255 arrays, which reads it as nearly black (row 1 = the first). ``name`` and
    ``trained`` word the text (an .npz's ``x`` and arrays; a folder's pixels and images)."""
    lo, hi = values.min(1), values.max(1)
    out = []
    for i in range(values.shape[0]):
        if lo[i] < low or hi[i] > high:
            v = lo[i] if lo[i] < low else hi[i]
            out.append((i + 1, name, f"{name} {v:.6g} outside the training {trained}' {low:.6g} to {high:.6g}"))
        elif high > 1.0 and 0.0 < hi[i] <= 1.0:
            out.append((i + 1, name, f"{name} within 0 to 1 where the training {trained} reach {high:.6g}: scaled "
                                     f"otherwise? (give it as they were, {name} * {high:.6g})"))
    return out


def check_class_labels(where: str, target: str | None, labels: Sequence[str]) -> None:
    """A one-line :class:`UserError` where two of the distinct class ``labels`` are one number
    written two ways (``1`` and ``1.0``, ``01``): compared as text they would be two classes."""
    seen: dict[float, str] = {}
    for label in labels:
        v = number(label)
        if v is None:
            continue
        if v in seen:
            column = f"the target column {target!r}" if target else "the target"
            raise UserError(f"{where}: {column} holds the class labels {seen[v]!r} and {label!r}, one number "
                            "written two ways, which would be two classes; write the label one way in every row")
        seen[v] = label


def warn_case_variants(where: str, name: str, values: Sequence[str], what: str = "categories") -> None:
    """A warning where two of the distinct text ``values`` of column ``name`` (a target's class
    labels, ``what``, or a text feature's categories) differ only in case: ``Yes`` and ``yes`` are two
    classes, silently, where a spreadsheet's entries meant one (``CO`` and ``Co`` may mean two)."""
    seen: dict[str, str] = {}
    for v in values:
        if v.casefold() in seen and number(v) is None:
            warnings.warn(f"{where}: column {name!r} holds {seen[v.casefold()]!r} and {v!r}, one word in two cases, "
                          f"which are two {what}; write it one way in every row if they are one", stacklevel=3)
            return
        seen.setdefault(v.casefold(), v)


def check_training_classes(where: str, classes: Sequence[str], y: Tensor, train_idx: Tensor, val_fraction: float,
                           test_fraction: float, images: bool = False) -> None:
    """A one-line :class:`UserError` where a class of ``y`` (class indices into ``classes``) has no
    row among ``train_idx``: the split held out every row of it, and the network would never learn
    it. ``images``: the rows are a folder's images, a class its subfolder."""
    trained = set(y[train_idx].tolist())
    unit, remove = ("image", "add images to the class, or remove its subfolder") if images else \
        ("row", "or remove the class's rows")
    for k, label in enumerate(classes):
        if k not in trained:
            n = int((y == k).sum())
            raise UserError(f"{where}: class {label!r} has {n} {unit}{'s' if n != 1 else ''}, and --val-fraction "
                            f"{val_fraction:g} with --test-fraction {test_fraction:g} hold "
                            f"{'all of them' if n != 1 else 'it'} out of training; lower --val-fraction or "
                            f"--test-fraction, {remove}")


def classes_not_held_out(classes: Sequence[str], y: Tensor, val_idx: Tensor, test_idx: Tensor, val_fraction: float,
                         test_fraction: float, images: bool = False) -> str | None:
    """What to warn of where a class of ``y`` (class indices into ``classes``) has no row among the
    validation rows ``val_idx`` (while ``val_fraction`` asks for some) or the test rows ``test_idx``:
    a rare class (3 rows of 300) whose shares round to none, so that every row of it trains and the
    held-out scores (a test error of 0% for a network that never predicts it) say nothing of it.
    None where every class is held out in both."""
    unit = "image" if images else "row"
    held = [(f"--val-fraction {val_fraction:g}", "validation", set(y[val_idx].tolist()))] if val_fraction > 0 else []
    held.append((f"--test-fraction {test_fraction:g}", "test", set(y[test_idx].tolist())))
    for k, label in enumerate(classes):
        absent = [(flag, part) for flag, part, seen in held if k not in seen]
        if not absent:
            continue
        n = int((y == k).sum())
        rare = [c for j, c in enumerate(classes) if any(j not in seen for _, _, seen in held)]
        also = f" (and {len(rare) - 1} other class{'es' if len(rare) > 2 else ''})" if len(rare) > 1 else ""
        flags = " and ".join(flag for flag, _ in absent)
        scored = {"validation": "the best epoch, the refer threshold", "test": "the test scores"}
        what = (("all of them training " + unit + "s" if n != 1 else f"a training {unit}") if len(absent) == len(held)
                else f"none of them a {absent[0][1]} {unit}" if n != 1 else f"not a {absent[0][1]} {unit}")
        return (f"class {label!r}{also} has {n} {unit}{'s' if n != 1 else ''}, {what}: {flags} of {n} round"
                f"{'s' if len(absent) == 1 else ''} to none, so {' and '.join(scored[p] for _, p in absent)} never "
                f"see it (a network that never predicts it scores no error there); raise "
                f"{'that fraction' if len(absent) == 1 else 'those fractions'}, or add {unit}s of it, to have it "
                "scored" + (f"; or are its {len(classes)} classes, all numbers, a quantity? say --task regression"
                            if len(classes) > 2 and all(number(c) is not None for c in classes) and not images
                            else ""))
    return None


#: a date or a time as a spreadsheet or a program writes it: 2024-01-31, 31.01.2024, 1/31/24, with a time or
#: without (2024-01-31T09:30:00Z), or a time alone (09:30); not a version number (1.2.3)
_TIME = r"\d{1,2}:\d{2}(:\d{2}([.,]\d+)?)?"
_DATE = re.compile(rf"((\d{{4}}[-/.]\d{{1,2}}[-/.]\d{{1,2}}|\d{{1,2}}[-/.]\d{{1,2}}[-/.]\d{{4}}"
                   rf"|\d{{1,2}}/\d{{1,2}}/\d{{2}})([ T]{_TIME})?|{_TIME})\s*(Z|[+-]\d{{2}}:?\d{{2}})?")


def dates_hint(cells: Sequence[str]) -> str:
    """Where the text ``cells`` of a column are dates or times (:data:`_DATE`, nearly all of them):
    what bbb does with them (one-hot: each date a category of its own, every new one unseen) and
    what to give instead, as a clause to add to a message; else ``""``."""
    if not cells or sum(bool(_DATE.fullmatch(c)) for c in cells) < NUMERIC_SHARE * len(cells):
        return ""
    return ("; it holds dates or times, which bbb reads as text, each distinct one a category (every new date "
            "unseen): give them as numbers in columns of their own (the year, the month, the weekday, a day count)")


def header_hint(header: Sequence[str]) -> str:
    """What an error about a column not found adds where ``header``, a CSV's first row, holds numbers:
    a file without a header row, its first row of data read as the columns' names; else ``""``."""
    nums = [h for h in header if number(h) is not None]
    if not nums:
        return ""
    return (f"; its first row holds numbers ({', '.join(nums[:3])[:60]}{', ...' if len(nums) > 3 else ''}): a file "
            "without a header row? bbb reads the first row as the columns' names: add one")


#: the correlation with a regression target above which a numeric feature is taken for a copy of it
COPY_CORRELATION = 0.9999


def warn_target_copies(where: str, header: Sequence[str], rows: Sequence[Sequence[str]], columns: Sequence[dict],
                       target: str, task: str) -> None:
    """A warning naming each feature column (``columns``, as :mod:`bbb.data.files` describes them) of
    the CSV ``rows`` that is the target under another name: for regression a numeric column whose
    correlation with the target is above :data:`COPY_CORRELATION` in magnitude; for classification a
    column whose values stand one to one for the classes in every row. Trained on, it makes the
    validation and test scores perfect, and new rows, whose target is unknown, would not have it."""
    t = header.index(target)
    for col in columns:
        j = header.index(col["name"])
        if task == "regression":
            if col["kind"] != "numeric":
                continue
            a = np.array([[number(r[j]), number(r[t])] for r in rows], dtype=np.float64)
            if not (a.std(0) > 0).all():
                continue
            corr = float(np.asarray(np.corrcoef(a[:, 0], a[:, 1]))[0, 1])
            if abs(corr) <= COPY_CORRELATION:
                continue
            how = f"correlation {corr:.5f} with it"
        else:
            pairs = {(r[j] if col["kind"] != "numeric" else number(r[j]), r[t]) for r in rows}
            if len(pairs) != len({v for v, _ in pairs}) or len(pairs) != len({c for _, c in pairs}):
                continue
            how = "each of its values always with one class: " + ", ".join(
                f"{v if isinstance(v, str) else f'{v:g}'} with {c!r}" for v, c in sorted(pairs, key=str)[:3]) + \
                (", ..." if len(pairs) > 3 else "")
        warnings.warn(f"{where}: column {col['name']!r} is the target {target!r} under another name? ({how}): "
                      "trained on, the held-out scores are a copy's, and new rows, whose target is unknown, would "
                      f"not have it; leave it out with --ignore {col['name']}", stacklevel=3)


#: a column this share of whose cells are numbers, the others text, is a column of numbers with bad
#: cells (a one-line error naming the first), not text: for a feature and for the target alike
NUMERIC_SHARE = 0.9


def task_of(values: list[str], task: str | None, target: str, where: str, numbers: Sequence[int]) -> str:
    """The task of a CSV target column of cells ``values``: ``task`` where said; else classification
    for text, regression for numbers not all whole; a column of whole numbers (which could be
    either), or of numbers with a few text cells (:data:`NUMERIC_SHARE`), is a one-line error."""
    nums = [number(v) for v in values]
    if any(v is None for v in nums):
        if task == "regression":
            bad = next(v for v, n in zip(values, nums) if n is None)
            raise UserError(f"{where}: --task regression needs a numeric target, but column {target!r} holds "
                            f"{bad[:40]!r}")
        if task is None and sum(v is not None for v in nums) >= NUMERIC_SHARE * len(nums):
            # a column of numbers with a stray text cell ("?", "inf", "12 kg") is no set of class labels:
            # taken for classes, every distinct number would become a class of its own, silently
            i = next(i for i, v in enumerate(nums, start=1) if v is None)
            raise UserError(f"{where}: row {row_number(numbers, i)}, target column {target!r}: "
                            f"{values[i - 1][:40]!r} in a column of "
                            "numbers; fix or drop that row (a missing value?), or say --task classification if "
                            "the column holds class labels")
        return "classification"
    if task is not None:
        return task
    if all(float(v).is_integer() for v in nums if v is not None):
        raise UserError(f"{where}: the target column {target!r} holds whole numbers: say --task classification "
                        "(class labels) or --task regression (a quantity)")
    return "regression"
