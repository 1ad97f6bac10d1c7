"""Your own data (bbb.data.files, bbb.data.images): a CSV or arrays as a split, the stored
preprocessing applied to new inputs, and each bad input a one-line error naming where it is."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from bbb.data.files import Preprocess, load_file_splits
from bbb.data.images import load_image_folder
from bbb.errors import DataError, UserError


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def table(path: Path, n: int = 120, seed: int = 0, target: str = "label") -> Path:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a, b = rng.normal(), 10 + 3 * rng.normal()
        colour = ["red", "green", "blue"][i % 3]
        label = "yes" if i % 4 == 0 else "no"  # 1 in 4: a stratified split keeps that share
        rows.append([f"{a:.4f}", f"{b:.4f}", colour, label if target == "label" else f"{a + b:.4f}"])
    return write_csv(path, ["a", "b", "colour", target], rows)


def one_line(info: pytest.ExceptionInfo[BaseException], *words: str) -> None:
    msg = str(info.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_csv_classification_split_encoding_and_stored_preprocessing(tmp_path):
    path = table(tmp_path / "t.csv")
    data, pre = load_file_splits(path, target="label", val_fraction=0.25, test_fraction=0.25, seed=3)
    assert pre.task == "classification" and pre.classes == ["no", "yes"]
    assert [c["kind"] for c in pre.columns] == ["numeric", "numeric", "onehot"]
    assert pre.columns[2]["categories"] == ["blue", "green", "red"]
    assert data["train_x"].shape == (60, 5) and data["val_x"].shape[0] == 30 and data["test_x"].shape[0] == 30
    # numeric columns standardised on the training rows; one-hot columns stay 0/1
    tx = data["train_x"].double()
    torch.testing.assert_close(tx[:, :2].mean(0), torch.zeros(2, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(tx[:, :2].std(0, unbiased=False), torch.ones(2, dtype=torch.float64), atol=1e-5,
                               rtol=0)
    assert set(tx[:, 2:].unique().tolist()) == {0.0, 1.0}
    # stratified: each part keeps the 1-in-4 share of "yes"
    for part in ("train", "val", "test"):
        y = data[f"{part}_y"]
        assert abs(float((y == 1).double().mean()) - 0.25) < 0.04, part
    # the preprocessing survives JSON and encodes the file's rows to the same inputs
    again = Preprocess.from_dict(json.loads(json.dumps(pre.to_dict())))
    with open(path) as f:
        lines = list(csv.reader(f))
    x_all = again.encode_table(lines[0], lines[1:])
    all_rows = torch.cat([data["train_x"], data["val_x"], data["test_x"]])
    assert x_all.shape == (120, 5)
    # every row of the split is one row of the file, encoded the same way
    d = torch.cdist(all_rows.double(), x_all.double()).min(1).values
    assert float(d.max()) < 1e-5
    # the same seed gives the same split; train_size keeps a subset of the training rows
    data2, _ = load_file_splits(path, target="label", val_fraction=0.25, test_fraction=0.25, seed=3, train_size=10)
    torch.testing.assert_close(data2["val_y"], data["val_y"])
    torch.testing.assert_close(data2["val_x"][:, 2:], data["val_x"][:, 2:])  # (the scaling: 10 rows' statistics)
    assert data2["train_x"].shape[0] == 10


def test_csv_regression_standardises_the_target(tmp_path):
    path = table(tmp_path / "r.csv", target="y")
    data, pre = load_file_splits(path, target="y")
    assert pre.task == "regression" and pre.y is not None and data["train_y"].dtype == torch.float32
    assert abs(float(data["train_y"].double().mean())) < 1e-5
    back = pre.target_values(data["train_y"].double())
    assert float(back.mean()) == pytest.approx(float(pre.y.mean), abs=1e-6)


def test_csv_bad_inputs_are_one_line_errors(tmp_path):
    rows = [[str(i), "x" if i % 2 else "z", f"{i * 0.5}"] for i in range(20)]
    missing = [r[:] for r in rows]
    missing[6][1] = ""
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "m.csv", ["n", "kind", "y"], missing), target="y")
    one_line(info, "row 7", "'kind'", "missing")
    na = [r[:] for r in rows]
    na[3][0] = "NA"
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "na.csv", ["n", "kind", "y"], na), target="y")
    one_line(info, "row 4", "'n'", "missing")
    # a class named None (a severity of None, Low, High) is refused as missing: the word is named
    sev = [[str(i), "x" if i % 2 else "z", ["None", "Low", "High"][i % 3]] for i in range(30)]
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "sev.csv", ["n", "kind", "sev"], sev), target="sev")
    one_line(info, "row 1", "'sev'", "'None' is read as a missing value", "a category so named needs another name")
    ids = [[f"id{i}", str(i), f"{i * 0.5}"] for i in range(150)]
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "ids.csv", ["name", "n", "y"], ids), target="y")
    one_line(info, "'name'", "a different value in each of its 150 rows", "--ignore name")
    many = [[f"c{i // 2}", str(i), f"{i * 0.5}"] for i in range(300)]  # 150 categories, two rows each
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "many.csv", ["name", "n", "y"], many), target="y", ignore=["n"])
    one_line(info, "'name'", "150 distinct", "--ignore name")  # (it said "drop it from the file")
    assert "dates" not in str(info.value)
    whole = [[str(2 * i), str(i % 3)] for i in range(30)]  # (2i: not a run of consecutive numbers, an identifier)
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "w.csv", ["n", "k"], whole), target="k")
    one_line(info, "--task")
    data, pre = load_file_splits(tmp_path / "w.csv", target="k", task="classification")
    assert pre.classes == ["0", "1", "2"]
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "w.csv", target="nope")
    one_line(info, "'nope'", "columns are n, k")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b\n1,2\n3\n")
    with pytest.raises(DataError) as info:
        load_file_splits(ragged, target="b")
    one_line(info, "row 2")


def test_new_rows_with_an_unseen_category_or_a_missing_column(tmp_path):
    _, pre = load_file_splits(table(tmp_path / "t.csv"), target="label")
    with pytest.raises(UserError) as info:
        pre.encode_table(["a", "b", "colour"], [["0.1", "10", "purple"]])
    one_line(info, "row 1", "'colour'", "'purple'")
    with pytest.raises(UserError) as info:
        pre.encode_table(["a", "colour"], [["0.1", "red"]])
    one_line(info, "'b'")


def test_npz_arrays_keep_their_feature_shape(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "a.npz", x=rng.normal(size=(50, 2, 3)).astype(np.float32), y=rng.normal(size=50))
    data, pre = load_file_splits(tmp_path / "a.npz")
    assert pre.kind == "arrays" and pre.task == "regression" and pre.feature_shape == [2, 3]
    assert data["train_x"].shape[1] == 6
    raw = rng.normal(size=(4, 2, 3))
    torch.testing.assert_close(pre.encode_array(raw), pre.encode_array(raw.reshape(4, 6)))
    np.savez(tmp_path / "c.npz", x=rng.normal(size=(50, 4)), y=rng.integers(0, 3, 50))
    assert load_file_splits(tmp_path / "c.npz")[1].task == "classification"
    np.savez(tmp_path / "bad.npz", inputs=np.zeros((3, 2)))
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "bad.npz")
    one_line(info, "'x'")
    nan = rng.normal(size=(10, 2))
    nan[4, 1] = np.nan
    np.savez(tmp_path / "nan.npz", x=nan, y=np.arange(10) % 2)
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "nan.npz")
    one_line(info, "x[4]")


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_an_npz_of_one_feature_or_a_column_y_says_how_to_save_it(tmp_path):
    # both were "x must be (N, ...) ... and y (N,)" alone, of arrays one reshape from right
    x = np.random.default_rng(0).normal(size=50)
    for name, arrays, hint in (("flat", {"x": x, "y": x + 0.5}, "x.reshape(-1, 1)"),
                               ("column", {"x": x[:, None], "y": (x + 0.5)[:, None]}, "y.reshape(-1)")):
        np.savez(tmp_path / f"{name}.npz", **arrays)
        with pytest.raises(UserError) as info:
            load_file_splits(tmp_path / f"{name}.npz")
        one_line(info, hint)
    # class names as y were "must hold real numbers" alone: say how to number them
    np.savez(tmp_path / "names.npz", x=x[:, None], y=np.array(["cat", "dog"])[np.arange(50) % 2])
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "names.npz")
    one_line(info, "np.unique(y, return_inverse=True)")


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_a_bool_x_encodes_as_it_trained(tmp_path):
    # a run trained on an .npz of bool x refused that same x in bbb predict ("inputs must be real
    # numbers, got torch.bool"): bool inputs are 0 and 1, as in training
    x = np.random.default_rng(0).normal(size=(60, 3)) > 0
    np.savez(tmp_path / "b.npz", x=x, y=x[:, 0])
    data, pre = load_file_splits(tmp_path / "b.npz")
    torch.testing.assert_close(pre.encode_array(x), pre.encode_array(x.astype(np.float64)))
    torch.testing.assert_close(pre.encode_array(torch.from_numpy(x)), pre.encode_array(x.astype(np.float64)))
    with pytest.raises(UserError) as info:  # one input given as a 1-d array: say how to make it a row
        pre.encode_array(x[0])
    one_line(info, "(3,)", "x.reshape(1, -1)")
    with pytest.raises(UserError) as info:  # images stay pixels: a bool array is no picture of one
        Preprocess.image(126.0).encode_array(torch.zeros(2, 28, 28, dtype=torch.bool))
    one_line(info, "torch.bool")


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_a_constant_regression_target_is_refused(tmp_path):
    # it trained and scored a near-perfect fit (RMSE 0.03, log-likelihood 0.8) of a column that never
    # varies; a target of one class is refused, and so is this
    rng = np.random.default_rng(0)
    (tmp_path / "c.csv").write_text("a,b,y\n" + "".join(f"{a:.3f},{b:.3f},2.5\n" for a, b in rng.normal(size=(40, 2))))
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "c.csv", target="y")
    one_line(info, "one value (2.5)", "varies")
    np.savez(tmp_path / "c.npz", x=rng.normal(size=(40, 2)), y=np.full(40, 7.25))
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "c.npz")
    one_line(info, "one value (7.25)")


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_float_labels_of_an_npz_need_the_task_said(tmp_path):
    # a y of class labels saved as floats (0.0, 1.0) was a Gaussian regression, silently; whole numbers
    # are ambiguous, as a CSV target's are
    x = np.random.default_rng(0).normal(size=(60, 3))
    np.savez(tmp_path / "f.npz", x=x, y=(x[:, 0] > 0).astype(np.float32))
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "f.npz")
    one_line(info, "whole numbers", "--task classification", "--task regression")
    data, pre = load_file_splits(tmp_path / "f.npz", task="classification")
    assert pre.task == "classification" and pre.classes == ["0.0", "1.0"] and data["train_y"].dtype == torch.int64
    assert load_file_splits(tmp_path / "f.npz", task="regression")[1].task == "regression"
    np.savez(tmp_path / "q.npz", x=x, y=x[:, 0] + 0.5)  # a quantity not all whole: regression, as before
    assert load_file_splits(tmp_path / "q.npz")[1].task == "regression"


def test_image_preprocessing_takes_uint8_or_unit_floats():
    pre = Preprocess.image(126.0)
    pixels = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    want = pixels.flatten(1).float() / 126.0
    torch.testing.assert_close(pre.encode_array(pixels), want)
    torch.testing.assert_close(pre.encode_array(pixels.float() / 255.0), want)
    torch.testing.assert_close(pre.encode_array(pixels.numpy()[:, 0]), want)
    with pytest.raises(UserError) as info:
        pre.encode_array(torch.zeros(2, 3, 32, 32))
    one_line(info, "(N, 1, 28, 28)")


def test_image_folder_grey_resized_and_a_corrupt_file_named(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    rgb = np.zeros((56, 56, 3), dtype=np.uint8)
    rgb[:28, :, 0] = 255  # the top half red
    pil.fromarray(rgb).save(tmp_path / "b.png")
    pil.fromarray(np.full((28, 28), 200, dtype=np.uint8)).save(tmp_path / "a.jpg")
    (tmp_path / "notes.txt").write_text("not an image")
    names, pixels, others = load_image_folder(tmp_path)
    assert names == ["a.jpg", "b.png"] and others == ["notes.txt"]
    assert pixels.shape == (2, 1, 28, 28) and pixels.dtype == np.uint8
    assert abs(int(pixels[0, 0, 14, 14]) - 200) <= 2  # JPEG rounding
    assert pixels[1, 0, 2, 14] == 76 and pixels[1, 0, 25, 14] == 0  # red -> luma 0.299 * 255
    (tmp_path / "c.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(DataError) as info:
        load_image_folder(tmp_path)
    one_line(info, "c.png")


def test_a_numeric_target_with_a_stray_text_cell_is_an_error_not_classes(tmp_path):
    # a quantity with one "-" (or "inf") was taken for class labels, each distinct number a class
    rows = [[f"{i * 0.37 % 5:.3f}", f"{100 + i % 5 * 1.5:.1f}"] for i in range(60)]
    for bad in ("-", "inf"):
        stray = [r[:] for r in rows]
        stray[7][1] = bad
        path = write_csv(tmp_path / "stray.csv", ["a", "price"], stray)
        with pytest.raises(UserError) as info:
            load_file_splits(path, target="price")
        one_line(info, "row 8", "'price'", repr(bad), "--task classification")
    stray[7][1] = "?"  # UCI's missing value: said so
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "q.csv", ["a", "price"], stray), target="price")
    one_line(info, "row 8", "'price'", "'?' is read as a missing value")
    # said outright, such a column is class labels; a text column with a few numbers stays one
    _, pre = load_file_splits(path, target="price", task="classification")
    assert pre.task == "classification"
    labels = [[f"{i * 0.37 % 5:.3f}", ["1", "2", "small", "large"][i % 4]] for i in range(60)]
    _, pre = load_file_splits(write_csv(tmp_path / "labels.csv", ["a", "size"], labels), target="size")
    assert pre.classes == ["1", "2", "large", "small"]


def test_a_number_with_a_thousands_separator_currency_or_percent_is_an_error_not_text(tmp_path):
    # "52,000" (quoted in a comma-separated file) was text: an income became one-hot categories, a
    # spend target classes, silently
    rows = [[f"{[40000, 52000, 999][i % 3]:,}", f"{20 + i * 0.3:.1f}", f"{1000 + i * 7.5:,.2f}"] for i in range(60)]
    path = write_csv(tmp_path / "t.csv", ["income", "age", "spend"], rows)
    with pytest.raises(UserError) as info:
        load_file_splits(path, target="age", ignore=["spend"])
    one_line(info, "row 1", "'income'", "'40,000'", "thousands separator")
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "s.csv", ["age", "spend"], [r[1:] for r in rows]), target="spend")
    one_line(info, "'spend'", "'1,000.00'", "thousands separator")
    # so was a currency or a percent: a price one-hot, a share target classes
    signs = [[f"${[5, 12, 30][i % 3]}", f"{20 + i * 0.3:.1f}", f"{[10, 12.5][i % 2]}%"] for i in range(60)]
    path = write_csv(tmp_path / "signs.csv", ["price", "age", "share"], signs)
    with pytest.raises(UserError) as info:
        load_file_splits(path, target="age")
    one_line(info, "row 1", "'price'", "'$5'", "currency sign")
    with pytest.raises(UserError) as info:
        load_file_splits(path, target="share", ignore=["price"])
    one_line(info, "row 1", "'share'", "'10%'", "percent sign")
    # an ignored column is not read; a text cell with commas is no number
    notes = [[str(r[1]), f"{20 + i * 0.5:.2f}", "red, green" if i % 2 else "blue"] for i, r in enumerate(rows)]
    _, pre = load_file_splits(write_csv(tmp_path / "n.csv", ["age", "y", "note"], notes), target="y")
    assert [c["kind"] for c in pre.columns] == ["numeric", "onehot"]


def test_a_class_per_row_or_no_feature_names_the_real_problem(tmp_path):
    # an integer y of 100 values in 100 rows is 100 classes of one row: the split held no test row,
    # and the error said "raise --test-fraction or give more rows"
    x = np.random.default_rng(0).normal(size=(100, 2))
    np.savez(tmp_path / "counts.npz", x=x, y=np.arange(100) * 3)
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "counts.npz")
    one_line(info, "100 classes in 100 rows", "--task regression")
    data, _ = load_file_splits(tmp_path / "counts.npz", task="regression")
    assert data["test_y"].numel() == 10
    np.savez(tmp_path / "empty.npz", x=np.zeros((50, 0)), y=np.arange(50.0))
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "empty.npz")
    one_line(info, "at least one feature", "(50, 0)")


def test_class_labels_that_are_one_number_written_two_ways_are_an_error(tmp_path):
    # a target of 0, 1 and 1.0 (or 01) gave the classes ["0", "1", "1.0"]: one class split in two, silently
    for other in ("1.0", "01"):
        rows = [[f"{i * 0.37 % 5:.3f}", ["0", "1", other][i % 3]] for i in range(60)]
        path = write_csv(tmp_path / "c.csv", ["a", "label"], rows)
        with pytest.raises(UserError) as info:
            load_file_splits(path, target="label", task="classification")
        one_line(info, "'label'", "'1'", repr(other), "one way")
    # labels that are different numbers, or text, are classes as before
    rows = [[f"{i * 0.37 % 5:.3f}", ["0", "1", "1.5", "one"][i % 4]] for i in range(60)]
    _, pre = load_file_splits(write_csv(tmp_path / "ok.csv", ["a", "label"], rows), target="label",
                              task="classification")
    assert pre.classes == ["0", "1", "1.5", "one"]


def test_a_class_the_split_leaves_without_a_training_row_is_an_error(tmp_path):
    # a class of 2 rows with --val-fraction 0.3 --test-fraction 0.3 had one row in validation, one in test
    # and none in training: a class the network never learned, silently
    rows = [[f"{i * 0.37 % 5:.3f}", "rare" if i in (3, 40) else ["a", "b"][i % 2]] for i in range(60)]
    path = write_csv(tmp_path / "rare.csv", ["x", "label"], rows)
    with pytest.raises(UserError) as info:
        load_file_splits(path, target="label", val_fraction=0.3, test_fraction=0.3)
    one_line(info, "class 'rare' has 2 rows", "--val-fraction 0.3", "--test-fraction 0.3", "remove the class")
    # the default fractions keep both of its rows in training, as before
    data, pre = load_file_splits(path, target="label")
    assert pre.classes == ["a", "b", "rare"] and int((data["train_y"] == 2).sum()) == 2
    # a quick trial's --train-size may keep none of them: it trains, and says so
    with pytest.warns(UserWarning, match="--train-size 3 keeps no training row of class 'rare'"):
        data, _ = load_file_splits(path, target="label", train_size=3)
    assert int((data["train_y"] == 2).sum()) == 0


def test_a_column_of_dates_is_said_to_be_read_as_text(tmp_path):
    # a date column was one-hot over its dates without a word (every new date unseen to bbb predict), or refused
    # as "an identifier or free text?" with "drop it from the file"; a version number is no date
    days = [[f"2024-{1 + i // 56:02d}-{1 + i // 2 % 28:02d}", f"{1 + i % 3}.{i % 2}.{i % 5}", f"{i * 0.37 % 5:.3f}",
             f"{i * 0.5:.1f}"] for i in range(300)]  # 150 dates, two rows each
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "days.csv", ["day", "version", "x", "y"], days), target="y")
    one_line(info, "'day'", "distinct values", "--ignore day", "dates or times", "the year, the month")
    few = [[f"2024-01-{1 + i % 20:02d}", *r[1:]] for i, r in enumerate(days)]
    with pytest.warns(UserWarning) as caught:
        _, pre = load_file_splits(write_csv(tmp_path / "few.csv", ["day", "version", "x", "y"], few), target="y")
    assert len(caught) == 1 and "few.csv: column 'day', one-hot encoded over 20 values; " in str(caught[0].message)
    assert "dates or times" in str(caught[0].message) and len(pre.columns[0]["categories"]) == 20
    stamps = [[f"2024-02-03T{i // 60:02d}:{i % 60:02d}:00Z", *r[1:]] for i, r in enumerate(days)]
    with pytest.raises(UserError) as info:
        load_file_splits(write_csv(tmp_path / "stamps.csv", ["at", "version", "x", "y"], stamps), target="y")
    one_line(info, "'at'", "a different value in each", "--ignore at", "dates or times")


def test_a_feature_that_is_the_target_under_another_name_is_named(tmp_path):
    # a price in thousands beside the price, or a 0/1 code of a yes/no target, trained without a word: a test
    # error of 0%, and new rows (whose target is unknown) without that column
    rows = [[f"{i * 0.37 % 5:.3f}", f"{1000 + i * 7.5:.2f}", f"{1 + i * 0.0075:.6f}", "ab"[i % 2],
             ["no", "yes"][i * 7 % 3 == 0], int(i * 7 % 3 == 0)] for i in range(120)]
    path = write_csv(tmp_path / "t.csv", ["x", "price", "price_k", "kind", "answer", "answer01"], rows)
    with pytest.warns(UserWarning) as caught:
        load_file_splits(path, target="price", ignore=["answer"])
    text = [str(w.message) for w in caught]
    assert len(text) == 1 and "column 'price_k' is the target 'price' under another name? (correlation 1.00000" in \
        text[0] and "--ignore price_k" in text[0], text
    with pytest.warns(UserWarning) as caught:
        load_file_splits(path, target="answer", ignore=["price_k"])
    text = [str(w.message) for w in caught]
    assert len(text) == 1 and "column 'answer01' is the target 'answer'" in text[0], text
    assert "0 with 'no', 1 with 'yes'" in text[0] and "--ignore answer01" in text[0]
    with warnings.catch_warnings():  # features that are not the target: nothing to say
        warnings.simplefilter("error")
        load_file_splits(path, target="price", ignore=["price_k", "answer"])
        load_file_splits(path, target="answer", ignore=["price_k", "answer01"])


def test_labels_and_categories_in_two_cases_are_named(tmp_path):
    # 'Yes' and 'yes' were two classes, 'North' and 'north' two categories, without a word
    rows = [[f"{i * 0.37 % 5:.3f}", ["north", "North", "south"][i % 3], ["yes", "Yes", "no"][i // 2 % 3]]
            for i in range(90)]
    path = write_csv(tmp_path / "t.csv", ["x", "region", "answer"], rows)
    with pytest.warns(UserWarning) as caught:
        _, pre = load_file_splits(path, target="answer")
    text = [str(w.message) for w in caught]
    assert any("column 'region' holds 'North' and 'north', one word in two cases, which are two categories" in t
               for t in text), text
    assert any("column 'answer' holds 'Yes' and 'yes'" in t and "two classes" in t for t in text), text
    assert pre.classes == ["Yes", "no", "yes"]  # (still two: a warning, CO and Co may be two)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_file_splits(write_csv(tmp_path / "one.csv", ["x", "region", "answer"],
                                   [[r[0], r[1].lower(), r[2].lower()] for r in rows]), target="answer")


def test_a_class_too_rare_to_be_held_out_is_said_not_to_be_scored(tmp_path):
    # 3 'fraud' rows of 300: a tenth of 3 rounds to none, so every one trained; the run then reported a test
    # error of 0% and a refer threshold that keeps 80% of the validation rows "with error 0" for a network that
    # never predicts fraud, silently
    rows = [[f"{i * 0.37 % 5:.3f}", "fraud" if i % 100 == 0 else "ok"] for i in range(300)]
    path = write_csv(tmp_path / "imbalanced.csv", ["x", "label"], rows)
    with pytest.warns(UserWarning) as caught:
        data, _ = load_file_splits(path, target="label")
    assert int((data["test_y"] == 0).sum()) == int((data["val_y"] == 0).sum()) == 0
    text = " ".join(str(w.message) for w in caught)
    for words in ("class 'fraud' has 3 rows, all of them training rows", "--val-fraction 0.1 and --test-fraction 0.1",
                  "the refer threshold and the test scores never see it"):
        assert words in text
    with pytest.warns(UserWarning, match="none of them a test row: --test-fraction 0.1 of 3 rounds to none"):
        load_file_splits(path, target="label", val_fraction=0.2)
    with warnings.catch_warnings():  # shares that hold one out: scored, nothing to say
        warnings.simplefilter("error")
        data, _ = load_file_splits(path, target="label", val_fraction=0.2, test_fraction=0.2)
    assert int((data["test_y"] == 0).sum()) == int((data["val_y"] == 0).sum()) == 1
    assert "a quantity?" not in text  # (text labels: classes)
    counts = [[f"{i * 0.37 % 5:.3f}", str(i % 12 if i < 288 else 12)] for i in range(291)]  # 12 of 3 rows
    with pytest.warns(UserWarning, match="are its 13 classes, all numbers, a quantity[?] say --task regression"):
        load_file_splits(write_csv(tmp_path / "counts.csv", ["x", "count"], counts), target="count",
                         task="classification")


def test_a_value_too_large_for_float32_is_an_error_naming_its_row_and_column(tmp_path):
    # a feature of 1e39 or a target of 1e200 trained, and failed late ("the data contain NaN or inf") or
    # left a run without summary.json; new rows of 1e300 ended in "logits contain NaN"
    rows = [[f"{i * 0.37 % 5:.3f}", ["red", "blue"][i % 2], f"{i * 1.5:.2f}"] for i in range(40)]
    for column, value in ((0, "1e39"), (2, "-1e200")):
        big = [r[:] for r in rows]
        big[6][column] = value
        with pytest.raises(UserError) as info:
            load_file_splits(write_csv(tmp_path / "big.csv", ["a", "colour", "y"], big), target="y")
        one_line(info, "big.csv", "row 7", f"column {['a', 'colour', 'y'][column]!r}", repr(value), "too large")
    rows[6][0] = "3.4e38"  # (the largest a float32 holds: read as before)
    data, pre = load_file_splits(write_csv(tmp_path / "edge.csv", ["a", "colour", "y"], rows), target="y")
    assert bool(torch.isfinite(data["train_x"]).all())
    with pytest.raises(UserError) as info:
        pre.encode_table(["a", "colour"], [["0.1", "red"], ["1e300", "blue"]], "new.csv", numbers=[1, 3])
    one_line(info, "new.csv", "row 3", "'a'", "'1e300'", "too large")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    np.savez(tmp_path / "a.npz", x=x, y=rng.normal(size=30))
    _, pre = load_file_splits(tmp_path / "a.npz")
    x[4, 2] = 1e39
    with pytest.raises(UserError) as info:
        pre.encode_array(x)
    one_line(info, "input 5", "too large")
    np.savez(tmp_path / "big.npz", x=x, y=rng.normal(size=30))
    with pytest.raises(UserError) as info:
        load_file_splits(tmp_path / "big.npz")
    one_line(info, "x[4]", "too large")


def test_a_category_only_in_held_out_rows_is_unseen_there(tmp_path):
    # the categories were the whole file's: one only in a validation or test row counted as seen in training,
    # and bbb predict neither warned about it nor referred it
    rows = [[f"{0.5 * i + 0.25}", ["red", "blue"][i % 2], f"{i * 0.7 % 3:.2f}"] for i in range(40)]
    plain, pre = load_file_splits(write_csv(tmp_path / "t.csv", ["a", "colour", "y"], rows), target="y")
    held = round(float(pre.x.inverse(plain["test_x"].double())[0, 0] - 0.25) / 0.5)  # a test row's index
    rows[held][1] = "purple"
    data, pre = load_file_splits(write_csv(tmp_path / "p.csv", ["a", "colour", "y"], rows), target="y")
    assert pre.columns[1]["categories"] == ["blue", "red"]
    assert data["test_x"][0, 1:].tolist() == [0.0, 0.0]  # none of the known ones, as bbb predict encodes it
    for k in ("train_x", "train_y", "val_x", "val_y", "test_y"):  # the rest as without it
        assert torch.equal(data[k], plain[k]), k
    assert torch.equal(data["test_x"][1:], plain["test_x"][1:])
    # a run's recorded categories (one trained when they were the whole file's) encode the file as it did
    old, pre = load_file_splits(tmp_path / "p.csv", target="y", categories={"colour": ["blue", "purple", "red"]})
    assert pre.columns[1]["categories"] == ["blue", "purple", "red"] and old["test_x"][0, 1:].tolist() == [0, 1, 0]
