"""Issue 72, "your own data, never silently wrong": ``bbb predict --out`` never loses a file and
carries the input's columns (item 4); a noisy regression's ``refer`` keeps a reachable share by
default (item 8); a run whose data moved is pointed at it with ``--csv`` on evaluate and predict,
its stored path is absolute from the CLI and from Python, and ``--data-dir`` on a file run is an
error (item 9); one unseen category no longer refuses the whole file (item 12k)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import bbb
from bbb.data.files import load_file_splits
from bbb.runs import TrainConfig, train
from bbb.runs.referral import refer_threshold
from bbb.uncertainty import threshold_for_coverage
from testkit import assert_one_line_error as one_line_error
from testkit import noisy_table, read_csv, run_main

TINY = ["--hidden", "8", "--batch-size", "16", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3", "--quiet"]




def new_rows(path: Path, colours: list[str]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["customer", "x1", "x2", "colour"])
        for i, c in enumerate(colours):
            w.writerow([f"c{100 + i}", f"{0.1 * i:.2f}", "0.5", c])
    return path


@pytest.fixture
def run(capsys, tmp_path) -> Path:
    data = noisy_table(tmp_path / "houses.csv")
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "price", "--task", "regression",
                          "--epochs", "3", "--out", str(out), *TINY)
    assert rc == 0, err
    return out


# -- item 4: --out ------------------------------------------------------------------------------


def test_out_refuses_an_existing_file_and_never_replaces_the_input(capsys, tmp_path, run):
    new = new_rows(tmp_path / "new.csv", ["red", "blue", "red"])
    before = new.read_text()
    rc, _, err = run_main(capsys, "predict", str(run), str(new), "--out", str(new), "--overwrite")
    one_line_error(rc, err, "is the input")
    assert new.read_text() == before
    (tmp_path / "p.csv").write_text("keep me\n")
    rc, _, err = run_main(capsys, "predict", str(run), str(new), "--out", str(tmp_path / "p.csv"))
    one_line_error(rc, err, "exists", "--overwrite")
    assert (tmp_path / "p.csv").read_text() == "keep me\n"
    for kept in (run / "config.json", tmp_path / "houses.csv"):  # the run's files and its data: never
        was = kept.read_bytes()
        rc, _, err = run_main(capsys, "predict", str(run), str(new), "--out", str(kept), "--overwrite")
        assert rc == 2 and kept.read_bytes() == was, err
    other = tmp_path / "other-run"  # another run's files: never either
    other.mkdir()
    for name, text in (("last.pt", "weights"), ("eval.json", "{}")):
        (other / name).write_text(text)
    rc, _, err = run_main(capsys, "predict", str(run), str(new), "--out", str(other / "eval.json"), "--overwrite")
    one_line_error(rc, err, "another run's", "outside it")
    assert (other / "eval.json").read_text() == "{}"
    rc, _, err = run_main(capsys, "predict", str(run), str(new), "--out", str(tmp_path / "p.csv"), "--overwrite")
    assert rc == 0, err
    rows = read_csv(tmp_path / "p.csv")
    assert list(rows[0])[:4] == ["customer", "x1", "x2", "colour"]  # the input's columns, to join on
    assert [r["customer"] for r in rows] == ["c100", "c101", "c102"]


def test_id_carries_one_column_and_the_target(capsys, tmp_path, run):
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "houses.csv"), "--id", "x1", "--no-refer")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert list(rows[0])[:3] == ["x1", "price", "prediction"] and len(rows) == 200
    rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "houses.csv"), "--id", "nope")
    one_line_error(rc, err, "--id nope", "x1")


def test_an_input_column_named_like_an_output_is_carried_renamed(capsys, tmp_path, run):
    # it was refused, the error suggesting --id, which carried the target, named so, no better
    (tmp_path / "clash.csv").write_text("x1,x2,colour,sd\n0.1,0.2,red,1\n")
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "clash.csv"), "--no-refer")
    assert rc == 0 and "'sd' as 'input_sd'" in err, err
    row = next(csv.DictReader(out.splitlines()))
    assert row["input_sd"] == "1" and float(row["sd"]) > 0


# -- item 12k: an unseen category -----------------------------------------------------------------


def test_an_unseen_category_flags_its_row_and_predicts_the_others(capsys, tmp_path, run):
    new = new_rows(tmp_path / "new.csv", ["red", "green", "blue", "green"])
    rc, out, err = run_main(capsys, "predict", str(run), str(new))
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert len(rows) == 4 and all(math.isfinite(float(r["prediction"])) for r in rows)
    assert [r["warning"] for r in rows] == ["", "category 'green' of column 'colour' unseen in training", "",
                                            "category 'green' of column 'colour' unseen in training"]
    assert rows[1]["refer"] == rows[3]["refer"] == "true"  # unlike anything seen: handed over
    assert "2 row(s)" in err and "row 2, 4" in err and "--unseen error" in err
    # a known row is predicted as it is without the unseen ones beside it
    rc, out2, _ = run_main(capsys, "predict", str(run), str(new_rows(tmp_path / "ok.csv", ["red"])))
    ok = list(csv.DictReader(out2.splitlines()))
    assert rc == 0 and (ok[0]["prediction"], ok[0]["sd"]) == (rows[0]["prediction"], rows[0]["sd"])
    rc, _, err = run_main(capsys, "predict", str(run), str(new), "--unseen", "error")
    one_line_error(rc, err, "row 2", "'colour'", "green")
    # one in another case (a spreadsheet's TRUE for true) is unseen too, and the warning names the known spelling
    rc, out, err = run_main(capsys, "predict", str(run), str(new_rows(tmp_path / "case.csv", ["Red"])))
    assert rc == 0 and list(csv.DictReader(out.splitlines()))[0]["warning"] == (
        "category 'Red' of column 'colour' unseen in training (training had 'red', in another case)"), out


def test_a_category_only_in_held_out_rows_is_unseen_to_predict(capsys, tmp_path):
    # the categories were the whole file's: a colour only in a validation row was "seen in training", and
    # predict gave it no warning and refer false
    lines = noisy_table(tmp_path / "houses.csv").read_text().splitlines()
    data, pre = load_file_splits(tmp_path / "houses.csv", target="price", task="regression")
    assert pre.x is not None
    x1 = float(pre.x.inverse(data["val_x"].double())[0, 0])
    held = min(range(1, len(lines)), key=lambda i: abs(float(lines[i].split(",")[0]) - x1))  # (float32 inputs)
    lines[held] = lines[held].replace(",red,", ",green,").replace(",blue,", ",green,")
    (tmp_path / "houses.csv").write_text("\n".join(lines) + "\n")
    rc, _, err = run_main(capsys, "train", "--csv", str(tmp_path / "houses.csv"), "--target", "price", "--task",
                          "regression", "--epochs", "1", "--out", str(tmp_path / "run"), *TINY)
    assert rc == 0, err
    colour = json.loads((tmp_path / "run" / "config.json").read_text())["preprocess"]["columns"][2]
    assert colour["categories"] == ["blue", "red"]
    (tmp_path / "new.csv").write_text(f"{lines[0]}\n{lines[held]}\n")
    rc, out, err = run_main(capsys, "predict", str(tmp_path / "run"), str(tmp_path / "new.csv"), "--samples", "2")
    assert rc == 0, err
    row = next(csv.DictReader(out.splitlines()))
    assert row["warning"] == "category 'green' of column 'colour' unseen in training" and row["refer"] == "true"


# -- item 8: refer on a noisy regression ------------------------------------------------------------


def test_refer_on_a_noisy_regression_keeps_a_reachable_share(capsys, tmp_path, run):
    model = bbb.runs.load_model(run)
    ref = refer_threshold(model, None, 5, 0)
    assert ref.default and ref.target_coverage == 0.8
    assert ref.coverage == pytest.approx(0.8, abs=1 / ref.n) and math.isfinite(ref.threshold)
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "houses.csv"), "--samples", "5")
    assert rc == 0, err
    refer = [r["refer"] for r in csv.DictReader(out.splitlines())]
    assert 0 < refer.count("true") < len(refer)  # neither every input nor none
    assert "to keep 80% of them" in err and "no share" not in err  # (held-out rows outside the training
    # range are flagged: the file's own rows are predicted as new ones)
    # an error target below the noise is unreachable: every input referred, and said so
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "houses.csv"), "--target-error", "0.01",
                            "--samples", "5")
    assert rc == 0 and "warning: no share of the validation predictions reaches RMSE <= 0.01" in err, err
    assert {r["refer"] for r in csv.DictReader(out.splitlines())} == {"true"}
    rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "houses.csv"), "--coverage", "1.5")
    one_line_error(rc, err, "--coverage")


def test_tied_uncertainties_that_refer_everything_say_so(capsys, tmp_path):
    # a deterministic network with one noise sd has one sd for every input: the default coverage keeps
    # none, and the warning spoke of an RMSE target of 0 and a larger --target-error, never given
    data = noisy_table(tmp_path / "houses.csv")
    out = tmp_path / "sgd"
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "price", "--task", "regression",
                          "--method", "sgd", "--likelihood", "homoscedastic", "--epochs", "1", "--out", str(out),
                          *TINY)
    assert rc == 0, err
    rc, _, err = run_main(capsys, "predict", str(out), str(data))
    line = next((x for x in err.splitlines() if "tie at one sd" in x), "")
    assert rc == 0 and "holds more than 80%" in line and "--coverage 1" in line, err
    assert "--target-error" not in line and "no share of the validation predictions" not in err


def test_threshold_for_coverage():
    u = np.array([0.3, 0.1, 0.2, 0.4, 0.5])
    assert threshold_for_coverage(u, 0.8) == 0.4
    assert threshold_for_coverage(u, 1.0) == 0.5
    assert threshold_for_coverage(u, 0.1) == -math.inf  # less than one input
    ties = np.array([0.2, 0.2, 0.2, 0.9])
    assert threshold_for_coverage(ties, 0.5) == -math.inf  # a tie group is kept or referred whole
    assert threshold_for_coverage(ties, 0.75) == 0.2
    with pytest.raises(bbb.errors.UserError, match="coverage"):
        threshold_for_coverage(u, 0)


# -- item 9: the stored path, a moved file, --data-dir ------------------------------------------------


def test_the_stored_path_is_absolute_from_python_and_from_the_cli(capsys, tmp_path, monkeypatch, run):
    monkeypatch.chdir(tmp_path)
    cfg = TrainConfig(data_file="houses.csv", target="price", task="regression", hidden=[4], epochs=1,
                      device="cpu", eval_samples=2)
    train(cfg, "py-run", quiet=True, log=lambda line: None)
    stored = json.loads((tmp_path / "py-run" / "config.json").read_text())["data_file"]
    assert stored == str((tmp_path / "houses.csv").resolve())
    assert json.loads((run / "config.json").read_text())["data_file"] == stored


def test_a_moved_file_is_named_by_csv_on_evaluate_and_predict(capsys, tmp_path, run):
    new = new_rows(tmp_path / "new.csv", ["red"])
    moved = tmp_path / "elsewhere.csv"
    (tmp_path / "houses.csv").rename(moved)
    rc, _, err = run_main(capsys, "evaluate", str(run), "--samples", "2", "--device", "cpu")
    one_line_error(rc, err, "houses.csv", "is not there", "--csv FILE")
    rc, _, err = run_main(capsys, "predict", str(run), str(new))
    one_line_error(rc, err, "--csv FILE", "--no-refer")
    # bbb ood said to give --csv FILE to evaluate, prune, predict and train --resume, but not to itself,
    # which takes it too (as laplace does)
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(new), "--device", "cpu")
    advice = one_line_error(rc, err, "is not there", "--csv FILE").split("give its new place")[1]
    assert "ood" in advice and "laplace" in advice
    rc, _, err = run_main(capsys, "evaluate", str(run), "--samples", "2", "--device", "cpu", "--csv", str(moved))
    assert rc == 0 and (run / "eval.json").exists(), err
    rc, out, err = run_main(capsys, "predict", str(run), str(new), "--csv", str(moved))
    assert rc == 0 and "refer" in out.splitlines()[0], err
    # the training file where --csv says it is now is the run's data as much as its recorded place:
    # --out onto it with --overwrite wrote the predictions over it
    was = moved.read_bytes()
    rc, _, err = run_main(capsys, "predict", str(run), str(new), "--csv", str(moved), "--out", str(moved),
                          "--overwrite")
    one_line_error(rc, err, "is the file the run was trained on")
    assert moved.read_bytes() == was
    # another file is refused by its MD5, before its columns are read
    rc, _, err = run_main(capsys, "evaluate", str(run), "--csv", str(new), "--device", "cpu")
    one_line_error(rc, err, "not the file this run was trained on")
    rc, _, err = run_main(capsys, "evaluate", str(run), "--npz", str(tmp_path / "x.npz"), "--device", "cpu")
    one_line_error(rc, err, "not a .csv file", "--csv FILE")


def test_a_new_run_on_a_file_that_is_not_there_says_so(capsys, tmp_path):
    # a fresh run's missing --csv was "the file this run was trained on, is not there (moved or deleted?)"
    (tmp_path / "folder").mkdir()
    for given, words in ((tmp_path / "nonexist.csv", ("nonexist.csv does not exist", "--csv")),
                         (tmp_path / "folder", ("folder is a folder: give it as --images",)),
                         (Path("/dev/null"), ("/dev/null is not a regular file",))):
        rc, _, err = run_main(capsys, "train", "--csv", str(given), "--target", "y", "--out", str(tmp_path / "r"),
                              *TINY)
        line = one_line_error(rc, err, *words)
        assert "trained on" not in line and "moved" not in line
        assert not (tmp_path / "r").exists()


def test_a_value_too_large_for_float32_is_named_before_anything_is_written(capsys, tmp_path, run):
    # training ran and failed late (best.pt, last.pt, config.json, metrics.csv and no summary.json), and
    # predict said "logits contain NaN", naming neither row nor column
    rows = noisy_table(tmp_path / "houses.csv").read_text().splitlines()
    rows[5] = "1e39," + rows[5].split(",", 1)[1]
    (tmp_path / "big.csv").write_text("\n".join(rows) + "\n")
    rc, _, err = run_main(capsys, "train", "--csv", str(tmp_path / "big.csv"), "--target", "price", "--task",
                          "regression", "--epochs", "1", "--out", str(tmp_path / "r"), *TINY)
    one_line_error(rc, err, "big.csv: row 5, column 'x1': '1e39' is too large")
    assert not (tmp_path / "r").exists()
    (tmp_path / "new.csv").write_text("x1,x2,colour\n0.1,0.5,red\n0.2,1e300,blue\n")
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.csv"), "--no-refer")
    one_line_error(rc, err, "new.csv: row 2, column 'x2': '1e300' is too large")
    assert out == ""


def test_data_dir_on_a_file_run_is_an_error(capsys, tmp_path, run):
    for argv in (("evaluate", str(run), "--data-dir", str(tmp_path)),
                 ("predict", str(run), str(tmp_path / "houses.csv"), "--data-dir", str(tmp_path)),
                 ("predict", str(run), str(tmp_path / "houses.csv"), "--no-refer", "--data-dir", str(tmp_path)),
                 ("train", "--csv", str(tmp_path / "houses.csv"), "--target", "price", "--data-dir", str(tmp_path),
                  "--out", str(tmp_path / "r2"), *TINY)):
        rc, _, err = run_main(capsys, *argv)
        one_line_error(rc, err, "--data-dir")
    assert not (tmp_path / "r2").exists()


def test_a_target_far_from_zero_keeps_the_digits_of_its_sd(capsys, tmp_path):
    # an odometer near 1,234,000 with noise sd 0.2: 6 significant digits wrote 1.23403e+06, a rounding of
    # up to 5 against an RMSE below 1, and an interval's two ends as one number
    rng = np.random.default_rng(0)
    data = tmp_path / "odometer.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "odometer"])
        for _ in range(120):
            a = rng.uniform(0, 10)
            w.writerow([f"{a:.3f}", f"{1234000 + 3 * a + 0.2 * rng.normal():.2f}"])
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "odometer", "--task", "regression",
                          "--epochs", "3", "--out", str(tmp_path / "run"), *TINY)
    assert rc == 0, err
    rc, out, err = run_main(capsys, "predict", str(tmp_path / "run"), str(data), "--no-refer", "--samples", "3")
    assert rc == 0, err
    model = bbb.runs.load_model(tmp_path / "run")
    x, _, _ = model.encode_csv(data)
    pred = model.regression(model.sample_outputs(x, 3, 0))
    rows = list(csv.DictReader(out.splitlines()))
    for i, r in enumerate(rows):
        sd = float(r["sd"])
        assert float(r["lower_95"]) < float(r["prediction"]) < float(r["upper_95"])
        assert abs(float(r["prediction"]) - float(pred["mean"][i])) <= sd / 50
    assert "e+06" not in out


def test_empty_rows_between_rows_are_named_not_dropped_silently(capsys, tmp_path, run):
    # a spreadsheet's empty row (",,,") or a blank line between rows was skipped without a word: an output
    # joined back by position shifted by one past it
    path = tmp_path / "gaps.csv"
    path.write_text("x1,x2,colour\n0.1,0.5,red\n,,\n0.2,0.5,blue\n\n0.3,0.5,red\n,,\n")
    rc, out, err = run_main(capsys, "predict", str(run), str(path), "--no-refer", "--samples", "2")
    assert rc == 0, err
    assert [r["x1"] for r in csv.DictReader(out.splitlines())] == ["0.1", "0.2", "0.3"]
    assert "2 empty row(s)" in err and "(row 2, 4;" in err  # the trailing one shifts nothing
    path.write_text("x1,x2,colour\n0.1,0.5,red\n0.2,0.5,blue\n,,\n\n")
    rc, out, err = run_main(capsys, "predict", str(run), str(path), "--no-refer", "--samples", "2")
    assert rc == 0 and "empty row" not in err, err


def test_unseen_error_with_an_input_that_is_no_csv_is_refused(capsys, tmp_path, run):
    """Before, ``--unseen error`` with an .npy input was accepted in silence (an array has no text
    columns whose categories it could refuse), as ``--id`` is refused there."""
    arrays = tmp_path / "x.npy"
    np.save(arrays, np.zeros((3, 4), dtype=np.float32))
    rc, _, err = run_main(capsys, "predict", str(run), str(arrays), "--unseen", "error")
    one_line_error(rc, err, "--unseen error applies to the text columns of a CSV input", "not a .csv file")



def test_a_tab_separated_table_named_tsv_says_to_name_it_csv(capsys, tmp_path, run):
    # "give a .csv, .npy or .npz file": a .tsv is read as a CSV (by its tabs) once named so
    (tmp_path / "new.tsv").write_text("x1\tx2\tcolour\n0.1\t0.5\tred\n")
    rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.tsv"), "--no-refer")
    one_line_error(rc, err, "name it .csv")
    (tmp_path / "new.tsv").rename(tmp_path / "new.csv")
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.csv"), "--no-refer")
    assert rc == 0 and len(list(csv.DictReader(out.splitlines()))) == 1, err
    (tmp_path / "houses.tsv").write_bytes((tmp_path / "houses.csv").read_bytes())
    rc, _, err = run_main(capsys, "train", "--csv", str(tmp_path / "houses.tsv"), "--target", "price", "--out",
                          str(tmp_path / "r"))
    one_line_error(rc, err, "name it .csv")


def test_predict_names_a_row_as_the_file_counts_it(capsys, tmp_path, run):
    # the row an error or the unseen note named was the n-th filled row, one off per empty row above it
    path = tmp_path / "gaps.csv"
    path.write_text("x1,x2,colour\n0.1,0.5,red\n,,\n0.2,0.5,green\n\n0.3,0.5,red\n0.4,0.5,green\n")
    rc, out, err = run_main(capsys, "predict", str(run), str(path), "--no-refer", "--samples", "2")
    assert rc == 0, err
    assert "2 row(s)" in err and "(row 3, 6;" in err, err  # the lines after the header, empty ones counted
    rc, _, err = run_main(capsys, "predict", str(run), str(path), "--unseen", "error")
    one_line_error(rc, err, "row 3,", "'colour'", "green")
    path.write_text("x1,x2,colour\n0.1,0.5,red\n,,\n\n0.2,,blue\n")
    rc, _, err = run_main(capsys, "predict", str(run), str(path))
    one_line_error(rc, err, "row 4,", "'x2'", "missing")


def test_a_target_named_like_an_output_column_is_carried_renamed(capsys, tmp_path):
    # a target called "prediction" could not be carried even with --id, though the error said --id would do
    data = tmp_path / "t.csv"
    data.write_text(noisy_table(tmp_path / "houses.csv").read_text().replace(",price\n", ",prediction\n", 1))
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "prediction", "--task", "regression",
                          "--epochs", "1", "--out", str(run), *TINY)
    assert rc == 0, err
    new = tmp_path / "new.csv"
    new.write_text("customer,x1,x2,colour,prediction,input_prediction\nc1,0.1,0.5,red,20.5,x\nc2,0.2,0.5,blue,19,y\n")
    # every column carried, the input's own input_prediction too: the target takes the next free name
    for extra, name in (([], "input_input_prediction"), (["--id", "customer"], "input_prediction")):
        rc, out, err = run_main(capsys, "predict", str(run), str(new), "--no-refer", "--samples", "2", *extra)
        assert rc == 0, err
        rows = list(csv.DictReader(out.splitlines()))
        assert [r[name] for r in rows] == ["20.5", "19"], rows[0]
        assert rows[0]["customer"] == "c1" and float(rows[0]["prediction"]) != 20.5
        assert f"'prediction' as {name!r}" in err and err.count("\n") == 1, err


def test_a_value_outside_the_training_range_is_named_and_referred(capsys, tmp_path, run):
    # far outside the data a ReLU network's outputs grow without bound and its samples agree: an input of
    # 1e12 was predicted with a small entropy and kept (refer false), silently extrapolated
    pre = json.loads((run / "config.json").read_text())["preprocess"]
    lo, hi = next(c["range"] for c in pre["columns"] if c["name"] == "x1")
    assert lo < hi
    new = tmp_path / "new.csv"
    with open(new, "w", newline="") as f:
        csv.writer(f).writerows([["customer", "x1", "x2", "colour"], ["a", f"{(lo + hi) / 2:.6g}", "0.5", "red"],
                                 ["b", "1e12", "0.5", "red"], ["c", f"{lo - (hi - lo):.6g}", "0.5", "blue"]])
    rc, out, err = run_main(capsys, "predict", str(run), str(new))
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert rows[0]["warning"] == "" and rows[1]["warning"].startswith("x1 1e12 outside the training rows' ")
    assert rows[2]["warning"].startswith("x1 ") and rows[1]["refer"] == rows[2]["refer"] == "true"
    assert "2 row(s)" in err and "row 2, 3" in err and "outside the training rows' range" in err
    # the recorded range is the training rows' own
    x1 = load_file_splits(tmp_path / "houses.csv", target="price", task="regression")[1]
    assert next(c["range"] for c in x1.columns if c["name"] == "x1") == [lo, hi]


def test_the_first_row_flagged_is_the_one_the_line_calls_first(capsys, tmp_path, run):
    # the line listed "row 2, 3; first: x2 ..." of row 3: the values were gathered column by column, and the
    # first of them was the first column's, not the first row's; the same for unseen categories
    pre = json.loads((run / "config.json").read_text())["preprocess"]
    (lo1, hi1), (lo2, hi2) = (next(c["range"] for c in pre["columns"] if c["name"] == n) for n in ("x1", "x2"))
    new = tmp_path / "new.csv"
    with open(new, "w", newline="") as f:
        csv.writer(f).writerows([["customer", "x1", "x2", "colour"],
                                 ["a", f"{(lo1 + hi1) / 2:.6g}", f"{hi2 + 1000:.6g}", "teal"],
                                 ["b", f"{hi1 + 1000:.6g}", f"{(lo2 + hi2) / 2:.6g}", "purple"]])
    rc, _, err = run_main(capsys, "predict", str(run), str(new))
    assert rc == 0, err
    assert f"row 1, 2; first: x2 {hi2 + 1000:.6g} outside" in err, err
    assert "(row 1, 2; first: 'teal' in column 'colour')" in err, err


def test_a_run_without_the_recorded_range_says_its_inputs_are_not_checked(capsys, tmp_path, run):
    import torch

    for ckpt in ("last.pt", "best.pt"):  # a run written before the range was recorded
        state = torch.load(run / ckpt, weights_only=True)
        for c in state["model_info"]["preprocess"]["columns"]:
            c.pop("range", None)
        torch.save(state, run / ckpt)
    new = new_rows(tmp_path / "new.csv", ["red"])
    rc, out, err = run_main(capsys, "predict", str(run), str(new))
    assert rc == 0, err
    assert "does not record its training rows' range of column 'x1'" in err and "not flagged" in err


def test_a_run_that_stopped_part_way_is_named_by_predict_and_evaluate(capsys, tmp_path, run):
    new = new_rows(tmp_path / "new.csv", ["red"])
    for command in (["predict", str(run), str(new)], ["evaluate", str(run)]):  # finished: no word
        rc, _, err = run_main(capsys, *command, "--quiet")
        assert rc == 0 and "not finished" not in err, err
    # as an interrupted run of 10 epochs leaves it after 3: last.pt, best.pt and metrics.csv, no summary.json
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "epochs": 10}))
    (run / "summary.json").unlink()
    for command in (["predict", str(run), str(new), "--which", "last"], ["evaluate", str(run)]):
        rc, _, err = run_main(capsys, *command, "--quiet")
        assert rc == 0, err
        which = "last" if "last" in command else "best"
        assert (f"warning: {run} has not finished training (epoch 3 of 10, no summary.json): its {which}.pt"
                in err and f"bbb train --resume --out {run}" in err), err
