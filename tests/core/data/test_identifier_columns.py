"""A column that numbers the rows is not a feature (issue 72, own data never silently wrong): one
line that names it and the flag, ``--ignore COL`` to leave it out, carried through by predict."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from bbb.data.files import load_file_splits
from bbb.errors import UserError
from bbb.runs import TrainConfig


def _table(path: Path, n: int = 60, start: int = 1, id_name: str = "id") -> Path:
    rng = random.Random(0)
    ids = list(range(start, start + n))
    rng.shuffle(ids)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([id_name, "income", "plan", "label"])
        for i in ids:
            w.writerow([i, rng.randint(20_000, 90_000), rng.choice(["a", "b"]), rng.choice(["yes", "no"])])
    return path


@pytest.mark.parametrize("start", [0, 1, 1000])
def test_a_column_numbering_the_rows_is_one_line_naming_ignore(tmp_path, start):
    with pytest.raises(UserError, match=r"column 'id' numbers the rows.*--ignore id") as e:
        load_file_splits(_table(tmp_path / "t.csv", start=start), target="label")
    assert "\n" not in str(e.value)


def test_ignore_leaves_the_column_out(tmp_path):
    data, pre = load_file_splits(_table(tmp_path / "t.csv"), target="label", ignore=["id"])
    assert [c["name"] for c in pre.columns] == ["income", "plan"]
    assert data["train_x"].shape[1] == 1 + 2


def test_unique_whole_numbers_that_are_not_a_run_stay_a_feature(tmp_path):
    """Incomes in whole euros are distinct in every row but not consecutive: a quantity."""
    _, pre = load_file_splits(_table(tmp_path / "t.csv", n=19), target="label")  # too few rows to judge
    assert "id" in [c["name"] for c in pre.columns]
    _, pre = load_file_splits(_table(tmp_path / "t.csv"), target="label", ignore=["id"])
    assert "income" in [c["name"] for c in pre.columns]


def test_ignore_refuses_what_it_cannot_leave_out(tmp_path):
    t = _table(tmp_path / "t.csv")
    with pytest.raises(UserError, match="--ignore nope: no such column"):
        load_file_splits(t, target="label", ignore=["nope"])
    with pytest.raises(UserError, match="--ignore label: that is the target"):
        load_file_splits(t, target="label", ignore=["label", "id"])
    with pytest.raises(UserError, match="--ignore applies to your own data"):
        TrainConfig(ignore_columns=["id"])


def _train(capsys, t: Path, out: Path, *flags: str) -> None:
    """``bbb train`` on the table ``t`` (target ``label``) with ``flags``, into ``out``."""
    from testkit import run_main

    rc, _, err = run_main(capsys, "train", "--csv", str(t), "--target", "label", *flags, "--out", str(out), "--quiet",
                          "--device", "cpu")
    assert rc == 0, err


def test_a_run_records_its_ignored_columns_and_predict_carries_them(tmp_path, capsys):
    from testkit import run_main

    t = _table(tmp_path / "t.csv", n=120)
    out = tmp_path / "run"
    _train(capsys, t, out, "--ignore", "id", "--epochs", "2")
    assert json.loads((out / "config.json").read_text())["ignore_columns"] == ["id"]
    rc, _, err = run_main(capsys, "predict", str(out), str(t), "--out", str(tmp_path / "p.csv"))
    assert rc == 0, err
    with (tmp_path / "p.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 120 and "id" in rows[0]


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_keep_holds_a_year_as_a_feature(tmp_path):
    """A yearly series' year numbers the rows too: --keep makes it a standardised feature, the
    same values as any numeric column's, and the run records it."""
    t = _table(tmp_path / "t.csv", start=1990, id_name="year")
    with pytest.raises(UserError, match=r"column 'year' numbers the rows.*--keep year"):
        load_file_splits(t, target="label")
    data, pre = load_file_splits(t, target="label", keep=["year"])
    assert [c["name"] for c in pre.columns] == ["year", "income", "plan"]
    assert pre.columns[0]["kind"] == "numeric"
    # the training rows' years come back from their standardised column, each a distinct year of the file
    years = pre.x.inverse(data["train_x"].double())[:, 0].round()
    assert abs(float(data["train_x"][:, 0].mean())) < 1e-5
    assert set(years.tolist()) <= set(map(float, range(1990, 2050))) and len(set(years.tolist())) == len(years)


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_keep_refuses_what_it_would_not_change(tmp_path):
    t = _table(tmp_path / "t.csv")
    for keep, message in ((["income"], "--keep income: that column does not number the rows"),
                          (["plan"], "--keep plan: that column holds text"),
                          (["nope"], "--keep nope: no such column"),
                          (["label"], "--keep label: that is the target")):
        with pytest.raises(UserError, match=message):
            load_file_splits(t, target="label", keep=keep)
    with pytest.raises(UserError, match="--keep id: --ignore leaves it out"):
        load_file_splits(t, target="label", keep=["id"], ignore=["id"])
    with pytest.raises(UserError, match="--keep applies to your own data"):
        TrainConfig(keep_columns=["id"])


@pytest.mark.release_independent  # (bbb's own reading and settings: the torch lanes skip it)
def test_a_run_records_its_kept_columns_and_resumes_only_with_them(tmp_path, capsys):
    from testkit import run_main

    t = _table(tmp_path / "t.csv", n=120, start=1900, id_name="year")
    out = tmp_path / "run"
    _train(capsys, t, out, "--keep", "year", "--epochs", "1")
    assert json.loads((out / "config.json").read_text())["keep_columns"] == ["year"]
    rc, _, err = run_main(capsys, "predict", str(out), str(t), "--out", str(tmp_path / "p.csv"))
    assert rc == 0, err
    rc, _, err = run_main(capsys, "train", "--out", str(out), "--resume", "--epochs", "2", "--keep", "income",
                          "--quiet")
    assert rc != 0 and "keep_columns" in err.replace("--keep", "keep_columns") and "\n" not in err.strip()


def _named(path: Path, n: int, distinct: bool = True) -> Path:
    rng = random.Random(1)
    names = [f"C{i:04d}" for i in rng.sample(range(10_000), n)] if distinct else \
        [rng.choice(["north", "south", "east"]) for _ in range(n)]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["customer", "x", "y"])
        for name in names:
            x = rng.gauss(0, 1)
            w.writerow([name, x, 2 * x + rng.gauss(0, 0.1)])
    return path


def test_a_text_column_different_in_every_row_is_one_line_naming_ignore(tmp_path):
    """A customer name in each row was one-hot encoded below 100 rows: a category of one row each,
    every new row's unseen."""
    with pytest.raises(UserError, match=r"text column 'customer' holds a different value in each of its 80 rows.*"
                                        r"--ignore customer") as e:
        load_file_splits(_named(tmp_path / "t.csv", 80), target="y")
    assert "\n" not in str(e.value)
    _, pre = load_file_splits(_named(tmp_path / "t.csv", 80), target="y", ignore=["customer"])
    assert [c["name"] for c in pre.columns] == ["x"]
    _, pre = load_file_splits(_named(tmp_path / "c.csv", 80, distinct=False), target="y")  # a category
    assert pre.columns[0]["kind"] == "onehot"
    _, pre = load_file_splits(_named(tmp_path / "s.csv", 19), target="y")  # too few rows to judge
    assert pre.columns[0]["kind"] == "onehot"
