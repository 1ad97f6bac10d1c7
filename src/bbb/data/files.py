"""Your own data: a CSV table or NumPy arrays as a run's train/validation/test split, and the
preprocessing that turns new raw inputs into what the trained network takes.

:func:`load_file_splits` reads ``FILE.csv`` (a header row; one column is the target),
``FILE.npz`` (arrays ``x`` (N, ...) and ``y`` (N,)) or a folder of images, one subfolder per
class (:func:`~bbb.data.arrays.read_image_classes`: grey, resized, then treated as an .npz's
image-shaped ``x`` with the subfolders' names as classes), and returns the six tensors of a run's
split (``train_x`` ... ``test_y``) together with a :class:`Preprocess`, the record of what was
done to the inputs, kept in the run so that new inputs get the same treatment:

* a CSV's cells are separated by commas, or by semicolons or tabs where its first line has no
  comma (:func:`read_csv`; a decimal comma in such a file is a one-line error, and so is a
  feature's or the target's number with a thousands separator, a currency or a percent sign,
  ``"52,000"``, ``$5``, ``12%``, in any file (and ``"1234,567"``: a decimal comma or thousands?),
  and a column of numbers with a decimal comma quoted in a comma-separated file, ``"3,5"``:
  :mod:`bbb.data.table_checks`);
* a CSV column whose every cell is a number is a numeric feature; any other column is text,
  one-hot encoded over the categories of the training rows (sorted; at most :data:`MAX_CATEGORIES`
  in the whole file, else a one-line error naming the column: an identifier or free text is no
  feature); a category found only in validation or test rows is encoded there as an unseen one is
  in new rows, as none of the known ones (its one-hot all zeros); a numeric column's training
  range is recorded, and new inputs outside it can be listed (:meth:`Preprocess.encode_table`);
* the numeric features (and each array feature, flattened) are standardised with the mean and
  standard deviation of the *training* rows (:class:`~bbb.data.Standardizer`); one-hot columns
  stay 0/1;
* an empty cell, or ``NA``, ``N/A``, ``NaN``, ``null``, ``None`` (any case), is a missing value:
  a one-line error naming its row and column; so is a number too large for float32 (in training
  and in new inputs alike). A row is numbered as the file counts it: 1 = the
  first line after the header, an empty row counted though it is skipped (a spreadsheet's row
  number less one, the header being its row 1);
* the task: ``classification`` when the target is text (or an integer array), ``regression``
  when it holds numbers that are not all integers (or a float array); an integer-valued CSV
  target, or a float array of whole numbers, needs ``task`` said, and one of numbers with a few
  text cells (:data:`~bbb.data.table_checks.NUMERIC_SHARE`) is
  a one-line error naming the first, unless ``task`` says classification; two class labels that
  are one number (``1`` and ``1.0``) are a one-line error. A regression target
  is standardised too (its statistics are kept, so predictions come back in the target's units);
* the split: a seeded permutation (``seed``), ``val_fraction`` and ``test_fraction`` of the rows
  held out, per class for classification (stratified: each class in the same proportions; a class
  left with no training row is a one-line error);
  ``train_size`` keeps that many training rows (a seeded subset) for a quick trial.

:meth:`Preprocess.encode_table` and :meth:`Preprocess.encode_array` apply the stored
preprocessing to new raw inputs (a CSV's rows by column name, or an array of the training
feature shape); :meth:`Preprocess.to_dict` / :meth:`Preprocess.from_dict` round-trip it through
plain JSON types (a run's checkpoint holds it).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError, UserError
from ..options import choice
from .arrays import DEFAULT_IMAGE_SIZE, read_image_classes, read_npz, source_md5, split_rows
from .csvfile import DELIMITERS, read_csv
from .table_checks import (
    FLOAT32_MAX,
    MIN_IDENTIFIER_ROWS,
    NUMERIC_SHARE,
    arrays_outside,
    check_array_magnitude,
    check_class_labels,
    check_decimal_commas,
    check_magnitude,
    check_training_classes,
    classes_not_held_out,
    dates_hint,
    formatted_number,
    header_hint,
    not_a_number,
    number,
    numbers_the_rows,
    row_number,
    task_of,
    values_outside,
    warn_case_variants,
    warn_target_copies,
)
from .tabular import Standardizer

__all__ = ["DELIMITERS", "MAX_CATEGORIES", "MISSING", "Preprocess", "TASKS", "load_file_splits", "read_csv",
           "row_number"]

#: the most categories a text column may have to be one-hot encoded
MAX_CATEGORIES = 100
#: cell texts (lower case) that mean "missing"; an empty cell is missing too
MISSING = frozenset({"na", "n/a", "nan", "null", "none", "?"})
TASKS = ("classification", "regression")
def _is_missing(cell: str) -> bool:
    return cell.strip() == "" or cell.strip().lower() in MISSING


def _missing(cell: str) -> str:
    """What the error of a missing cell says: a word such as ``None`` is named, a category so named."""
    word = cell.strip()
    return "missing value" if not word else (f"{word[:20]!r} is read as a missing value (NA, N/A, NaN, "
                                             "null, None and ? all are; a category so named needs another name)")


@dataclass
class Preprocess:
    """What a run did to its raw inputs and targets (see the module's notes).

    ``kind``: ``"table"`` (a CSV: ``columns``, each ``{"name", "kind": "numeric"|"onehot",
    "categories"}``), ``"arrays"`` (an .npz: ``feature_shape``) or ``"image"`` (MNIST-like
    pixels: ``feature_shape`` (1, 28, 28), ``scale``: pixels 0..255 divided by it).
    ``x``: the standardiser of the encoded features (None for images); ``task``; ``classes``
    (the label of each class index, classification) or ``y`` (the target's standardiser,
    regression); ``target``: the CSV's target column; ``source``: the file, its MD5, its rows.
    """

    kind: str
    task: str = "classification"
    columns: list[dict[str, Any]] = field(default_factory=list)
    feature_shape: list[int] = field(default_factory=list)
    #: flat arrays' (an .npz of (N, D) x) training range of each feature: [lows, highs]
    feature_range: list[list[float]] | None = None
    #: image-shaped arrays' (an .npz of (N, H, W) or (N, C, H, W) x) training range of all values: [low, high]
    array_range: list[float] | None = None
    scale: float = 1.0
    x: Standardizer | None = None
    y: Standardizer | None = None
    classes: list[str] | None = None
    target: str | None = None
    source: dict[str, Any] = field(default_factory=dict)

    # -- new inputs ----------------------------------------------------------------------------
    def encode_table(self, header: Sequence[str], rows: Sequence[Sequence[str]], where: str = "input",
                     unseen: list[tuple[int, str, str]] | None = None, numbers: Sequence[int] | None = None,
                     outside: list[tuple[int, str, str]] | None = None) -> Tensor:
        """CSV rows (cells by ``header``'s column names) -> the network's (N, D) float32 inputs.
        Every training feature column must be there (others, like the target, are ignored); a
        missing value or an unseen category is a one-line error naming row and column. Given a
        list ``unseen``, an unseen category is instead encoded as none of the known ones (its
        one-hot all zeros) and ``(row, column, value)`` appended to the list (row 1 = the first
        given). ``numbers``: each row's number in its file, for the errors (:func:`read_csv`'s).
        Given a list ``outside``, each numeric value outside the training rows' range (a column's
        ``range``, recorded by runs since it was added) is appended to it as ``(row, column, text)``,
        the text naming the value and the range: an input unlike any the network was trained on."""
        if self.kind != "table":
            raise UserError(f"{where}: this run was trained on {self.trained_on()}, not on a CSV table")
        index = {h: j for j, h in enumerate(header)}
        absent = [c["name"] for c in self.columns if c["name"] not in index]
        if absent:
            raise UserError(f"{where}: the column {absent[0]!r} that the run was trained with is missing "
                            f"(the run's feature columns: {', '.join(c['name'] for c in self.columns)})"
                            f"{header_hint(header)}")
        n = len(rows)
        parts: list[np.ndarray] = []
        for col in self.columns:
            j = index[col["name"]]
            cells = [r[j] for r in rows]
            for i, cell in enumerate(cells, start=1):
                if _is_missing(cell):
                    raise UserError(f"{where}: row {row_number(numbers, i)}, column {col['name']!r}: "
                                    f"{_missing(cell)}; fill it in or drop the row")
            if col["kind"] == "numeric":
                vals = np.empty(n)
                for i, cell in enumerate(cells):
                    v = number(cell)
                    if v is None:
                        raise UserError(f"{where}: row {row_number(numbers, i + 1)}, column {col['name']!r}: "
                                        f"{cell[:40]!r} {not_a_number(cell)} (the column was numeric in training)")
                    vals[i] = v
                check_magnitude(where, col["name"], vals, numbers, cells)  # (an inf in the float32 network)
                if outside is not None and col.get("range"):
                    lo, hi = col["range"]
                    outside += values_outside(vals[:, None], [lo], [hi], [col["name"]],
                                              lambda i, _, c=cells: c[i])  # type: ignore[misc]
                parts.append(vals[:, None])
            else:
                cats = {c: k for k, c in enumerate(col["categories"])}
                onehot = np.zeros((n, len(cats)))
                for i, cell in enumerate(cells):
                    if cell not in cats and unseen is not None:
                        unseen.append((i + 1, col["name"], cell))
                        continue
                    if cell not in cats:
                        raise UserError(f"{where}: row {row_number(numbers, i + 1)}, column {col['name']!r}: the "
                                        f"category {cell[:40]!r} "
                                        f"was not seen in training (known: {', '.join(col['categories'][:10])}"
                                        f"{', ...' if len(cats) > 10 else ''})")
                    onehot[i, cats[cell]] = 1.0
                parts.append(onehot)
        x = torch.from_numpy(np.concatenate(parts, axis=1) if parts else np.zeros((n, 0)))
        return self._standardise(x, where, lambda i: f"row {row_number(numbers, i + 1)}")

    def encode_array(self, x: Any, where: str = "input") -> Tensor:
        """An array of inputs -> the network's (N, D) float32 inputs.

        ``arrays``: (N, *feature_shape) or (N, D) flat. ``image``: (N, 1, 28, 28), (N, 28, 28) or
        (N, 784) pixels, either uint8 (or integers) in 0..255 or floats in 0..1; floats above 1
        are read as 0..255. ``table``: (N, D) numbers in the CSV's feature columns, in order,
        only where every column is numeric."""
        t = torch.as_tensor(np.require(x, requirements="C")) if not isinstance(x, Tensor) else x.detach().cpu()
        if t.dtype == torch.bool and self.kind != "image":  # as an .npz's bool x trains: 0 and 1
            t = t.to(torch.float64)
        if t.is_complex() or t.dtype == torch.bool:
            raise UserError(f"{where}: inputs must be real numbers, got {t.dtype}")
        if t.dim() < 1 or t.shape[0] == 0:
            raise UserError(f"{where}: no inputs (an array of shape {tuple(t.shape)})")
        d = int(np.prod(self.feature_shape)) if self.feature_shape else len(self.columns)
        shape = tuple(self.feature_shape) if self.feature_shape else (d,)
        ok = tuple(t.shape[1:]) in {shape, (d,)} or (self.kind == "image" and tuple(t.shape[1:]) == shape[-2:])
        if not ok:
            alt = "" if shape == (d,) else f" or (N, {d})"
            one = "; one input? give it as one row, x.reshape(1, -1)" if tuple(t.shape) in {shape, (d,)} else ""
            raise UserError(f"{where}: inputs of shape {tuple(t.shape)} do not fit this run's inputs (N, "
                            f"{', '.join(map(str, shape))}){alt}{one}")
        if self.kind == "table" and any(c["kind"] != "numeric" for c in self.columns):
            raise UserError(f"{where}: this run one-hot encodes text columns; give a CSV with the column names "
                            "instead of an array")
        flat = t.reshape(t.shape[0], -1)
        if self.kind == "image":
            pixels = flat.to(torch.float64)
            if not bool(torch.isfinite(pixels).all()):
                raise UserError(f"{where}: the images contain NaN or inf")
            if flat.is_floating_point() and float(pixels.max()) <= 1.0:
                pixels = pixels * 255.0  # 0..1 -> 0..255, the training pixels' range
            return (pixels / self.scale).to(torch.float32)
        x64 = flat.to(torch.float64)
        if not bool(torch.isfinite(x64).all()):
            bad = int(torch.nonzero(~torch.isfinite(x64).all(1))[0]) + 1
            raise UserError(f"{where}: input {bad} contains NaN or inf")
        check_array_magnitude(where, x64.numpy(), lambda i: f"input {i + 1}")
        return self._standardise(x64, where)

    def outside_range(self, x: Any) -> list[tuple[int, str, str]]:
        """``(row, feature, text)`` for each value of the raw flat-array inputs ``x`` (N, D) outside
        the training rows' range of its feature (``x[j]``, numbered from 0; a table's numeric columns,
        given as an array, by their names; image-shaped arrays: :func:`arrays_outside`), row 1 = the
        first; empty for a run that records no range (MNIST-like images are not checked)."""
        a = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        if self.kind == "table" and self.columns and all(c.get("range") for c in self.columns):
            low, high = [c["range"][0] for c in self.columns], [c["range"][1] for c in self.columns]
            names = [c["name"] for c in self.columns]
        elif self.feature_range is not None:
            (low, high), names = self.feature_range, [f"x[{j}]" for j in range(a.shape[1])]
        elif self.array_range is not None:
            words = ("pixel", "images") if self.source.get("folder") else ("x", "arrays")  # a folder's pixels
            return arrays_outside(a, self.array_range[0], self.array_range[1], *words)
        else:
            return []
        return values_outside(a, low, high, names, lambda i, j: f"{a[i, j]:.6g}")

    def _standardise(self, x: Tensor, where: str = "input", row: Callable[[int], str] | None = None) -> Tensor:
        """The inputs standardised as the training rows were, float32; a value that fits a float32
        but standardises beyond one (far outside the training rows, for a column of tiny spread) is
        a one-line error naming ``row(i)`` (i = 0: the first) and its feature, not an inf."""
        z = self.x.transform(x.to(torch.float64)) if self.x is not None else x
        big = torch.nonzero(z.abs() > FLOAT32_MAX)
        if len(big):
            i, j = (int(v) for v in big[0])
            name = self._feature_names()[j] if self.kind == "table" else f"x[{j}]"
            raise UserError(f"{where}: {row(i) if row else f'input {i + 1}'}, {name}: {float(x[i, j]):.6g} lies "
                            f"{float(z[i, j]):.3g} training standard deviations from the training mean, beyond bbb's "
                            "32-bit numbers; fix the value (its units?)")
        return z.to(torch.float32)

    def _feature_names(self) -> list[str]:
        """A table's encoded features by the column each comes from (a one-hot column's several)."""
        return [f"column {c['name']!r}" for c in self.columns for _ in (c["categories"] if c["kind"] == "onehot"
                                                                      else [None])]

    def trained_on(self) -> str:
        arrays = ("images (a folder)" if self.source.get("folder") else "tensors given in memory"
                  if self.source.get("memory") else "arrays (.npz)")
        return {"table": "a CSV table", "arrays": arrays, "image": "28x28 images"}.get(self.kind, self.kind)

    def target_values(self, y: Tensor) -> Tensor:
        """Standardised regression targets back in the target's units (identity otherwise)."""
        return self.y.inverse(y) if self.y is not None else y

    # -- storage -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "task": self.task, "columns": [dict(c) for c in self.columns],
                "feature_shape": list(self.feature_shape), "scale": self.scale,
                "x": None if self.x is None else self.x.to_dict(), "y": None if self.y is None else self.y.to_dict(),
                "classes": self.classes, "target": self.target, "source": dict(self.source),
                **({"feature_range": self.feature_range} if self.feature_range is not None else {}),
                **({"array_range": self.array_range} if self.array_range is not None else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Preprocess:
        try:
            return cls(kind=str(d["kind"]), task=str(d.get("task", "classification")),
                       columns=[dict(c) for c in d.get("columns", [])],
                       feature_shape=[int(s) for s in d.get("feature_shape", [])], scale=float(d.get("scale", 1.0)),
                       feature_range=d.get("feature_range"), array_range=d.get("array_range"),
                       x=None if d.get("x") is None else Standardizer.from_dict(d["x"]),
                       y=None if d.get("y") is None else Standardizer.from_dict(d["y"]),
                       classes=None if d.get("classes") is None else [str(c) for c in d["classes"]],
                       target=d.get("target"), source=dict(d.get("source", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"the stored preprocessing is damaged ({e})") from None

    @classmethod
    def image(cls, scale: float, classes: list[str] | None = None) -> Preprocess:
        """MNIST / Fashion-MNIST pixels: 0..255 divided by ``scale``, 28x28, one channel."""
        return cls(kind="image", feature_shape=[1, 28, 28], scale=float(scale), classes=classes)


# -- reading a file into a split ----------------------------------------------------------------


def _encode_columns(header: list[str], rows: list[list[str]], target: str, where: str,
                    ignore: Sequence[str] = (), numbers: Sequence[int] = (), keep: Sequence[str] = ()
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """The feature columns' descriptions (numeric or one-hot), checked for missing values;
    the ``ignore`` columns left out (not read at all); a column that numbers the rows is an error
    once every column's cells are checked, unless ``keep`` names it (a ``keep`` column that does
    not number the rows is an error too: the setting would change nothing)."""
    columns = []
    numbering = ""
    for j, name in enumerate(header):
        if name in ignore:
            continue
        cells = [r[j] for r in rows]
        for i, cell in enumerate(cells, start=1):
            if _is_missing(cell):
                raise UserError(f"{where}: row {row_number(numbers, i)}, column {name!r}: {_missing(cell)}; fill "
                                "it in or drop the row")
            what = formatted_number(cell)
            if what:  # read as text: one-hot categories, or a target of classes, silently
                raise UserError(f"{where}: row {row_number(numbers, i)}, column {name!r}: {cell[:40]!r} is a "
                                f"number with {what}, which "
                                "bbb would read as text; write plain numbers first (e.g. pandas.read_csv(FILE, "
                                "thousands=',') for a thousands separator)")
        check_decimal_commas(where, name, cells, numbers)  # quoted "3,5" in a comma-separated file: text, else
        if name == target:
            continue
        nums = [number(c) for c in cells]
        if all(v is not None for v in nums):
            values = [float(v) for v in nums if v is not None]
            if name in keep and not numbers_the_rows(values):
                raise UserError(f"{where}: --keep {name}: that column does not number the rows, and is a feature "
                                "without --keep; leave --keep out")
            if numbers_the_rows(values) and name not in keep and not numbering:
                numbering = f"column {name!r} numbers the rows (each row a different whole number, " \
                            f"{min(values):g} to {max(values):g}: an identifier, not a feature)"
                numbering += f"; leave it out with --ignore {name} (bbb predict then carries it through to its " \
                             f"output), or keep it as a feature with --keep {name} (a year in a yearly series)"
            columns.append({"name": name, "kind": "numeric", "categories": []})
            continue
        if name in keep:
            raise UserError(f"{where}: --keep {name}: that column holds text, not whole numbers that number the "
                            "rows; leave --keep out")
        cats = sorted(set(cells))
        numeric_share = sum(v is not None for v in nums) / len(nums)
        if numeric_share >= NUMERIC_SHARE:
            i = next(i for i, v in enumerate(nums, start=1) if v is None)
            raise UserError(f"{where}: row {row_number(numbers, i)}, column {name!r}: {cells[i - 1][:40]!r} in a "
                            "column of numbers; "
                            "fix or drop that row (a missing value?)")
        if len(cats) == len(cells) >= MIN_IDENTIFIER_ROWS:
            raise UserError(f"{where}: the text column {name!r} holds a different value in each of its {len(cells)} "
                            f"rows (a name or an identifier, not a feature: one-hot, each would be a category of "
                            f"one row, and every new row's unseen); leave it out with --ignore {name} (bbb predict "
                            f"then carries it through to its output){dates_hint(cells)}")
        if len(cats) > MAX_CATEGORIES:
            raise UserError(f"{where}: the text column {name!r} has {len(cats)} distinct values (one-hot encoding "
                            f"takes at most {MAX_CATEGORIES}; an identifier or free text?): leave it out with --ignore "
                            f"{name}{dates_hint(cells)}")
        if dates_hint(cells):  # one-hot, each date a category: said, not silent
            warnings.warn(f"{where}: column {name!r}, one-hot encoded over {len(cats)} values{dates_hint(cells)}; or "
                          f"--ignore {name}", stacklevel=3)
        warn_case_variants(where, name, cats)
        columns.append({"name": name, "kind": "onehot", "categories": cats})
    if numbering:
        raise UserError(f"{where}: {numbering}")
    return columns, [r[header.index(target)] for r in rows]


def load_file_splits(path: str | os.PathLike[str], *, target: str | None = None, task: str | None = None,
                     val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
                     train_size: int | None = None, ignore: Sequence[str] = (), keep: Sequence[str] = (),
                     categories: dict[str, list[str]] | None = None, image_size: Sequence[int] | None = None,
                     image_colour: bool = False) -> tuple[dict[str, Tensor], Preprocess]:
    """A CSV or .npz file, or a folder of images in class subfolders, as a run's split and its
    :class:`Preprocess` (see the module's notes). ``image_size``: (H, W) a folder's images are
    resized to (:data:`~bbb.data.arrays.DEFAULT_IMAGE_SIZE`), ``image_colour``: whether they are read in
    colour (else grey); a file refuses them.
    ``ignore``: CSV columns that are not features (an identifier, a note); not read. ``keep``:
    numeric CSV columns that number the rows (a year in a yearly series) kept as features.
    ``categories``: a run's recorded categories of its text columns, by name, to encode them as the
    run did (else those of the training rows).

    Returns ``({"train_x", "train_y", "val_x", "val_y", "test_x", "test_y"}, preprocess)``:
    inputs float32 (N, D), standardised; targets int64 class indices (classification) or float32
    standardised values (regression)."""
    p = Path(path)
    where = str(p)
    if task is not None:
        choice("task", task, TASKS)
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise UserError(f"--val-fraction {val_fraction} and --test-fraction {test_fraction} must each be in [0, 1) "
                        "and leave rows to train on")
    if (image_size is not None or image_colour) and not p.is_dir():
        raise UserError(f"{where}: --image-size and --colour read a folder of images; a file's arrays are read as "
                        "they are")
    if not p.is_file() and not p.is_dir():
        raise DataError(f"{p}: no such file")
    suffix = p.suffix.lower()
    table: tuple[list[str], list[list[str]], list[int]] | None = None
    image_notes: list[str] = []  # (a folder's: each image's warning, "" for none)
    if p.is_dir():
        if target is not None or ignore or keep or task == "regression":
            flag = "--target" if target is not None else "--ignore" if ignore else "--keep" if keep else "--task"
            raise UserError(f"{where}: {flag} applies to a CSV file, and this is a folder: a folder of images (in "
                            "class subfolders, named by their classes) trains with --images DIR, without " + flag)
        size = (int(image_size[0]), int(image_size[-1])) if image_size else DEFAULT_IMAGE_SIZE
        x_arr, y_arr = read_image_classes(p, size, image_colour, image_notes)
        task = "classification"
        pre = Preprocess(kind="arrays", task=task, feature_shape=list(x_arr.shape[1:]))
        raw_x = torch.from_numpy(x_arr.reshape(x_arr.shape[0], -1).astype(np.float64))
        raw_y = [str(v) for v in y_arr.tolist()]
    elif suffix == ".csv":
        if not target:
            raise UserError(f"{where}: say which column to predict: --target COLUMN")
        numbers: list[int] = []
        header, rows = read_csv(p, numbers=numbers)
        if target not in header:
            raise UserError(f"{where}: no column {target!r}; the columns are {', '.join(header)[:300]}"
                            f"{header_hint(header)}")
        for flag, names in (("--ignore", ignore), ("--keep", keep)):
            for name in names:
                if name not in header or name == target or (flag == "--keep" and name in ignore):
                    raise UserError(f"{where}: {flag} {name}: " + (
                        "that is the target" if name == target else "--ignore leaves it out; give it to one of them"
                        if name in header else
                        f"no such column; the columns are {', '.join(header)[:300]}"))
        columns, raw_y = _encode_columns(header, rows, target, where, ignore, numbers, keep)
        if not columns:
            raise UserError(f"{where}: no feature columns besides the target {target!r}")
        task = task_of(raw_y, task, target, where, numbers)
        if task == "regression":
            check_magnitude(where, target, [float(v) for v in raw_y], numbers, raw_y)
        warn_target_copies(where, header, rows, columns, target, task)
        pre = Preprocess(kind="table", task=task, columns=columns, target=target)
        table = (header, rows, numbers)  # encoded once the training rows are known (their categories)
    elif suffix == ".npz":
        if target is not None or ignore or keep:
            flag = "target" if target is not None else "ignore" if ignore else "keep"
            raise UserError(f"{where}: --{flag} names a CSV column; an .npz file holds arrays x and y")
        x_arr, y_arr = read_npz(p)
        if task is None and np.issubdtype(y_arr.dtype, np.floating) and bool((y_arr == np.round(y_arr)).all()):
            # class labels saved as floats (0.0, 1.0: a torch .float(), a pandas column) would be a Gaussian
            # regression, silently: whole numbers are ambiguous, as a CSV target's are
            raise UserError(f"{where}: y is a float array of whole numbers ({len(np.unique(y_arr))} values): say "
                            "--task classification (class labels saved as floats) or --task regression (a quantity)")
        if task is None:
            task = "regression" if np.issubdtype(y_arr.dtype, np.floating) else "classification"
        pre = Preprocess(kind="arrays", task=task, feature_shape=list(x_arr.shape[1:]))
        raw_x = torch.from_numpy(x_arr.reshape(x_arr.shape[0], -1).astype(np.float64))
        raw_y = [str(v) for v in y_arr.tolist()] if task == "classification" else y_arr.astype(np.float64).tolist()
    else:
        raise UserError(f"{where}: not a .csv or .npz file; give a CSV table (--csv), NumPy arrays x, y (--npz) "
                        "or a folder of images in class subfolders (--images DIR)"
                        + ("; a table separated by tabs or semicolons is read as one: name it .csv"
                           if suffix in (".tsv", ".tab", ".txt") else ""))
    n = len(raw_y)
    if task == "classification":
        cats = sorted(set(map(str, raw_y)), key=lambda c: (number(c) is None, number(c) or 0.0, c))
        if len(cats) < 2:
            raise UserError(f"{where}: the target holds one class ({cats[0]!r}); classification needs two or more")
        check_class_labels(where, pre.target, cats)
        if pre.target is not None:
            warn_case_variants(where, pre.target, cats, "classes")
        index = {c: k for k, c in enumerate(cats)}
        y = torch.tensor([index[str(v)] for v in raw_y], dtype=torch.int64)
        pre.classes = cats
    else:
        y = torch.tensor([float(v) for v in raw_y], dtype=torch.float64)
        if bool((y == y[0]).all()):  # as one class is: trained, it scored as a near-perfect fit, of nothing
            raise UserError(f"{where}: the target holds one value ({float(y[0]):g}) in every row; regression needs "
                            "a target that varies (the wrong column?)")
    train_idx, val_idx, test_idx = split_rows(n, y if task == "classification" else None, val_fraction, test_fraction,
                                          seed)
    if task == "classification" and test_fraction > 0 and test_idx.numel() == 0 and 2 * len(pre.classes or []) > n:
        # per class, every class too small to give a test row: not "too few rows", but too many classes
        raise UserError(f"{where}: the target has {len(pre.classes or [])} classes in {n} rows, too few rows each "
                        "for the split (per class) to hold any out for testing; is it a quantity? say --task "
                        "regression" if not p.is_dir() else
                        f"{where}: {len(pre.classes or [])} class subfolders of {n} images, too few images each for "
                        "the split (per class) to hold any out for testing: add images to each class")
    if task == "classification":
        check_training_classes(where, pre.classes or [], y, train_idx, val_fraction, test_fraction, p.is_dir())
        rare = classes_not_held_out(pre.classes or [], y, val_idx, test_idx, val_fraction, test_fraction, p.is_dir())
        if rare:
            warnings.warn(f"{where}: {rare}", stacklevel=2)
    if train_size is not None:
        if not 1 <= train_size <= train_idx.numel():
            raise UserError(f"--train-size must be in 1..{train_idx.numel()} (the training rows), got {train_size}")
        train_idx = train_idx[:train_size]
        if task == "classification":
            left = [c for k, c in enumerate(pre.classes or []) if not bool((y[train_idx] == k).any())]
            if left:
                unit = "image" if p.is_dir() else "row"
                warnings.warn(f"{where}: --train-size {train_size} keeps no training {unit} of class "
                              f"{', '.join(map(repr, left[:3]))}{' ...' if len(left) > 3 else ''}: the network never "
                              "sees it, and scores it as an error; raise --train-size for a run that learns every "
                              "class", stacklevel=2)
    if table is not None:
        raw_x = _raw_table(pre, *table, train_idx, where, categories)
    pre.x = _fit_features(pre, raw_x[train_idx])
    if pre.kind == "arrays" and len(pre.feature_shape) == 1:  # flat features: the range new inputs are checked
        pre.feature_range = [raw_x[train_idx].amin(0).tolist(), raw_x[train_idx].amax(0).tolist()]  # against
    elif pre.kind == "arrays":  # image-shaped: one range of every value (and its scale: 0..255 or 0..1)
        pre.array_range = [float(raw_x[train_idx].min()), float(raw_x[train_idx].max())]
    if task == "regression":
        pre.y = Standardizer.fit(y[train_idx])
        y = pre.y.transform(y).to(torch.float32)
    pre.source = {"file": p.name, "md5": source_md5(p), "rows": int(n), **({"folder": True} if p.is_dir() else {})}
    if image_notes and 2 * sum(image_notes[i].startswith("a transparent") for i in train_idx.tolist()) >= \
            len(train_idx):
        pre.source["transparent"] = True  # (most training images had one: bbb predict's new ones are not unlike them)
    x = pre._standardise(raw_x)
    data = {"train_x": x[train_idx], "train_y": y[train_idx], "val_x": x[val_idx], "val_y": y[val_idx],
            "test_x": x[test_idx], "test_y": y[test_idx]}
    return data, pre


def _raw_table(pre: Preprocess, header: list[str], rows: list[list[str]], numbers: Sequence[int], train_idx: Tensor,
               where: str, categories: dict[str, list[str]] | None) -> Tensor:
    """The encoded but not yet standardised features of a CSV's rows. A text column's categories
    are those of the training rows ``train_idx`` (or the run's recorded ``categories``): one seen
    only in held-out rows is encoded there as an unseen one in new rows is, as none of them. A
    numeric column's ``range`` is its training rows' smallest and largest value."""
    train = train_idx.tolist()
    for col in pre.columns:
        j = header.index(col["name"])
        if col["kind"] == "onehot":
            col["categories"] = list((categories or {}).get(col["name"]) or sorted({rows[i][j] for i in train}))
        else:  # the range new inputs are checked against (bbb predict flags a value outside it)
            values = [float(rows[i][j]) for i in train]
            col["range"] = [min(values), max(values)]
    x_scaler, pre.x = pre.x, None
    try:
        return pre.encode_table(header, rows, where, unseen=[], numbers=numbers).to(torch.float64)
    finally:
        pre.x = x_scaler


def _fit_features(pre: Preprocess, x: Tensor) -> Standardizer:
    """Standardise the numeric features on the training rows; one-hot columns stay 0/1. Images
    (image-shaped arrays, a folder's) by one mean and sd of all their pixels: per pixel, one that
    never varied in training (a border) took a new image's raw value through, hundreds of sds."""
    if pre.kind == "arrays" and len(pre.feature_shape) > 1:
        return Standardizer.fit(x.reshape(-1))
    s = Standardizer.fit(x)
    if pre.kind != "table":
        return s
    keep = torch.cat([torch.full((len(c["categories"]) if c["kind"] == "onehot" else 1,), c["kind"] == "numeric")
                      for c in pre.columns])
    return Standardizer(torch.where(keep, s.mean, 0.0), torch.where(keep, s.std, 1.0))
