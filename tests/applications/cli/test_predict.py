"""``bbb train --csv/--npz`` and ``bbb predict``: predictions equal to the library's own
``bbb.uncertainty.predict`` on the same inputs, the refer column as chosen on the validation set,
and each bad input a one-line error (exit 2) that names it, with nothing written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import bbb
import bbb.runs.model as RM
from bbb import uncertainty as U
from bbb.data.files import load_file_splits
from bbb.runs import TrainConfig, train
from bbb.runs.referral import refer_threshold
from testkit import assert_one_line_error, read_csv, run_main

TINY = ["--hidden", "8", "--batch-size", "16", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3", "--quiet"]




def table(path: Path, n: int = 150, regression: bool = False) -> Path:
    rng = np.random.default_rng(0)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "kind", "target"])
        for i in range(n):
            x1, x2, kind = rng.normal(), rng.normal(), ["a", "b", "c"][i % 3]
            y = f"{2 * x1 + x2 + 0.1 * rng.normal():.5f}" if regression else ("hi" if x1 + x2 > 0 else "lo")
            w.writerow([f"{x1:.5f}", f"{x2:.5f}", kind, y])
    return path


def test_train_on_a_csv_and_predict_equals_the_library(capsys, tmp_path):
    path = table(tmp_path / "t.csv")
    run = tmp_path / "run"
    rc, out, err = run_main(capsys, "train", "--csv", str(path), "--target", "target", "--epochs", "3",
                            "--out", str(run), *TINY)
    assert rc == 0, err
    assert "test error" in out
    rc, out, err = run_main(capsys, "train", "--resume", "--out", str(run), "--epochs", "4", "--quiet")
    assert rc == 0 and "of 4)" in out, err  # the model line: best (epoch E of 4)
    rc, _, err = run_main(capsys, "predict", str(run), str(path), "--out", str(tmp_path / "p.csv"),
                          "--samples", "5", "--seed", "3", "--device", "cpu")
    assert rc == 0, err
    assert "refer" in err and "validation inputs" in err
    rows = read_csv(tmp_path / "p.csv")
    assert len(rows) == 150 and list(rows[0]) == ["x1", "x2", "kind", "target", "prediction", "p_hi", "p_lo",
                                                  "entropy", "mutual_information", "warning", "refer"]
    model = bbb.runs.load_model(run)
    x, _, _ = model.encode_csv(path)
    probs = U.predictive_probs(U.predict(model.network, x, 5, generator=3).double())
    got = torch.tensor([[float(r["p_hi"]), float(r["p_lo"])] for r in rows], dtype=torch.float64)
    torch.testing.assert_close(got, probs, atol=1e-5, rtol=0)
    assert [r["prediction"] for r in rows] == [model.classes[i] for i in probs.argmax(-1).tolist()]
    ent = torch.tensor([float(r["entropy"]) for r in rows], dtype=torch.float64)
    torch.testing.assert_close(ent, U.entropy(probs), atol=1e-5, rtol=0)
    assert rows[0]["target"] in ("hi", "lo")
    # refer: the entropy above the threshold chosen on the validation set for the default coverage
    ref = refer_threshold(model, None, 5, 3)
    assert ref.default and ref.target_coverage == 0.8 and ref.target_error is None
    want = [("true" if e > ref.threshold else "false") for e in U.entropy(probs).tolist()]
    assert [r["refer"] for r in rows] == want
    # an explicit --target-error of 1 refers nothing seen on validation; the CSV goes to stdout
    rc, out, err = run_main(capsys, "predict", str(run), str(path), "--target-error", "1", "--device", "cpu")
    assert rc == 0 and out.startswith("x1,x2,kind,target,prediction") and "--target-error" in err


def test_regression_from_arrays_and_predict_on_npy(capsys, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 2, 2)).astype(np.float32)
    np.savez(tmp_path / "a.npz", x=x, y=(x.reshape(120, -1).sum(1) + 0.1 * rng.normal(size=120)))
    run = tmp_path / "run"
    rc, out, err = run_main(capsys, "train", "--npz", str(tmp_path / "a.npz"), "--epochs", "2", "--out", str(run),
                            "--train-size", "50", *TINY)
    assert rc == 0 and "test RMSE" in out, err
    np.save(tmp_path / "new.npy", x[:7])
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.npy"), "--samples", "4",
                            "--device", "cpu", "--no-refer")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert len(rows) == 7 and list(rows[0]) == ["row", "prediction", "sd", "lower_95", "upper_95", "epistemic_sd",
                                                "aleatoric_sd", "warning"]  # (checked against array_range)
    model = bbb.runs.load_model(run)
    reg = model.regression(U.predict(model, torch.from_numpy(x[:7]), 4, generator=0))
    torch.testing.assert_close(torch.tensor([float(r["prediction"]) for r in rows], dtype=torch.float64),
                               reg["mean"], atol=1e-4, rtol=1e-5)
    for r in rows:
        assert float(r["lower_95"]) < float(r["prediction"]) < float(r["upper_95"]) and float(r["sd"]) > 0
    assert "num_train" in (run / "config.json").read_text() and '"num_train": 50' in (run / "config.json").read_text()
    rc, _, err = run_main(capsys, "evaluate", str(run), "--device", "cpu", "--samples", "3")
    assert rc == 0 and (run / "eval.json").exists(), err
    # an .npz whose y does not fit x: the rows past the shorter were dropped (or y's first column taken)
    for bad in (np.arange(4.0), np.ones((7, 2))):
        np.savez(tmp_path / "bad.npz", x=x[:7], y=bad)
        rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "bad.npz"), "--no-refer")
        assert_one_line_error(rc, err, "y of shape", "7 inputs")
    np.savez(tmp_path / "good.npz", x=x[:7], y=np.arange(7.0)[:, None])
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "good.npz"), "--no-refer")
    assert rc == 0 and [r["target"] for r in csv.DictReader(out.splitlines())] == [str(float(i)) for i in range(7)]


def test_flat_arrays_outside_the_training_range_are_named_and_referred(capsys, tmp_path):
    """A flat .npz's features are checked as a table's columns: a value outside a feature's training
    range is named in the warning column and referred (image-shaped arrays against the range of all
    their values: the next test)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(120, 3))
    np.savez(tmp_path / "a.npz", x=x, y=x.sum(1) + 0.1 * rng.normal(size=120))
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--npz", str(tmp_path / "a.npz"), "--epochs", "1", "--out", str(run), *TINY)
    assert rc == 0, err
    low, high = json.loads((run / "config.json").read_text())["preprocess"]["feature_range"]
    model = bbb.runs.load_model(run)
    data, _ = load_file_splits(tmp_path / "a.npz")
    train_x = model.preprocess.x.inverse(data["train_x"].double())  # the training rows, raw
    np.testing.assert_allclose(low, train_x.amin(0).numpy(), rtol=1e-6)
    np.testing.assert_allclose(high, train_x.amax(0).numpy(), rtol=1e-6)
    new = np.array([[0.0, 0.0, 0.0], [high[0] + 1, 0.0, 0.0], [0.0, low[1] - 1, 1e6]])
    np.save(tmp_path / "new.npy", new)
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.npy"), "--samples", "2")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert rows[0]["warning"] == "" and rows[1]["warning"].startswith("x[0] ")
    assert rows[2]["warning"].startswith("x[1] ") and "; x[2] 1e+06 outside the training rows' " in rows[2]["warning"]
    assert [r["refer"] for r in rows][1:] == ["true", "true"] and "2 row(s)" in err and "row 2, 3" in err
    rc, out, _ = run_main(capsys, "predict", str(run), str(tmp_path / "new.npy"), "--samples", "2", "--no-refer")
    rows = list(csv.DictReader(out.splitlines()))
    assert rc == 0 and "refer" not in rows[0] and rows[1]["warning"].startswith("x[0] ")


def test_images_scaled_otherwise_than_the_training_arrays_are_named_and_referred(capsys, tmp_path):
    """An .npz of 0..255 images given the same images as floats in 0..1 predicted every one as a
    nearly black image, without a word (30 of 30 class 0, none referred): image-shaped arrays are
    checked against the training arrays' range of all values, and an input in 0..1 where those
    reach 255 is named in the warning column and referred; so is one beyond the range."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, size=150)
    x = np.clip(rng.normal(60 + 70 * y[:, None, None], 30, size=(150, 4, 4)), 0, 255).astype(np.uint8)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--npz", str(tmp_path / "a.npz"), "--epochs", "1", "--out", str(run), *TINY)
    assert rc == 0, err
    low, high = json.loads((run / "config.json").read_text())["preprocess"]["array_range"]
    assert 0 <= low < high <= 255
    new = np.concatenate([x[:3].astype(np.float64), x[:2] / 255.0, (x[2:3] >= x[2].max()).astype(np.float64),
                          np.full((1, 4, 4), 2.0 * high)])  # 0..1, 0..1, binarised to 0 and 1, beyond the range
    np.save(tmp_path / "new.npy", new)
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.npy"), "--samples", "2")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [r["warning"] == "" for r in rows[:3]] == [bool(low <= v.min() and v.max() <= high) for v in x[:3]]
    assert all(f"x within 0 to 1 where the training arrays reach {high:.6g}" in r["warning"] for r in rows[3:6])
    assert rows[6]["warning"].startswith(f"x {2 * high:.6g} outside the training arrays'")
    assert all(r["refer"] == "true" for r in rows[3:])


def test_a_tables_columns_given_as_an_array_are_checked_against_their_ranges(capsys, tmp_path):
    """A numeric table's run takes its columns as a .npy array too; a value outside a column's
    training range was not flagged there (an empty warning column), as it is in a CSV: now named
    by the column, and referred."""
    rng = np.random.default_rng(2)
    with open(tmp_path / "t.csv", "w") as f:
        f.write("size,age,price\n" + "".join(f"{a:.3f},{b:.3f},{a - b + 0.1 * rng.normal():.3f}\n"
                                             for a, b in rng.normal(size=(120, 2))))
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--csv", str(tmp_path / "t.csv"), "--target", "price", "--epochs", "1",
                          "--out", str(run), *TINY)
    assert rc == 0, err
    np.save(tmp_path / "new.npy", np.array([[0.0, 0.0], [0.0, 1e6]]))
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.npy"), "--samples", "2")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert rows[0]["warning"] == "" and rows[1]["warning"].startswith("age 1e+06 outside the training rows' ")
    assert rows[1]["refer"] == "true" and "1 row(s)" in err


def test_image_shaped_arrays_are_flattened_for_the_mlp(capsys, tmp_path):
    """An (N, 28, 28) npz trains the command line's MLP on 784 flattened features, and predict
    takes the same (n, 28, 28) arrays (docs/your_data.md)."""
    rng = np.random.default_rng(1)
    x = rng.random(size=(90, 28, 28)).astype(np.float32)
    y = (x[:, :14].mean((1, 2)) > x[:, 14:].mean((1, 2))).astype(np.int64)
    np.savez(tmp_path / "img.npz", x=x, y=y)
    run = tmp_path / "run"
    rc, out, err = run_main(capsys, "train", "--npz", str(tmp_path / "img.npz"), "--epochs", "1", "--out", str(run),
                            *TINY)
    assert rc == 0 and "test error" in out, err
    assert next(m for m in bbb.runs.load_model(run).modules() if hasattr(m, "in_features")).in_features == 28 * 28
    np.save(tmp_path / "new.npy", x[:5])
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.npy"), "--samples", "3",
                            "--device", "cpu", "--no-refer")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert len(rows) == 5 and all(r["prediction"] in ("0", "1") for r in rows)
    # colour images for a grey run: the error named "input", not the file given
    np.save(tmp_path / "rgb.npy", np.repeat(x[:5, None], 3, 1))
    rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "rgb.npy"), "--device", "cpu")
    assert_one_line_error(rc, err, "rgb.npy: inputs of shape (5, 3, 28, 28) do not fit")


def image_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    data = {}
    for s, n in (("train", 64), ("val", 32), ("test", 16)):
        data[f"{s}_x"] = torch.randint(0, 256, (n, 784), generator=g).float() / 126.0
        data[f"{s}_y"] = torch.randint(0, 10, (n,), generator=g)
    monkeypatch.setattr(RM, "load_data", lambda cfg: data)
    train(TrainConfig(hidden=[8], epochs=1, device="cpu", eval_samples=2), tmp_path / "run", quiet=True,
          log=lambda s: None)
    return tmp_path / "run", data


def test_predict_on_a_folder_of_images(capsys, tmp_path, monkeypatch):
    pil = pytest.importorskip("PIL.Image")
    run, _ = image_run(tmp_path, monkeypatch)
    folder = tmp_path / "digits"
    folder.mkdir()
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, 28, 28)).astype(np.uint8)
    for i, p in enumerate(pixels):
        pil.fromarray(p).save(folder / f"d{i}.png")
    pil.fromarray(np.repeat(pixels[0][:, :, None], 3, 2)).resize((56, 56)).save(folder / "big_rgb.png")
    rc, out, err = run_main(capsys, "predict", str(run), str(folder), "--samples", "3", "--device", "cpu")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [r["file"] for r in rows] == ["big_rgb.png", "d0.png", "d1.png", "d2.png"]
    assert {"p_0", "p_9", "entropy", "mutual_information", "refer"} <= set(rows[0])
    model = bbb.runs.load_model(run)
    probs = U.predictive_probs(U.predict(model, torch.from_numpy(pixels[:, None]), 3, generator=0).double())
    got = torch.tensor([[float(r[f"p_{c}"]) for c in range(10)] for r in rows[1:]], dtype=torch.float64)
    torch.testing.assert_close(got, probs, atol=1e-5, rtol=0)
    # --out an image of the input folder: --overwrite wrote the CSV over it
    before = (folder / "d1.png").read_bytes()
    rc, _, err = run_main(capsys, "predict", str(run), str(folder), "--out", str(folder / "d1.png"), "--overwrite")
    assert_one_line_error(rc, err, "is an image of the input folder")
    assert (folder / "d1.png").read_bytes() == before
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    rc, out, err = run_main(capsys, "predict", str(run), str(folder), "--out", str(tmp_path / "p.csv"),
                            "--device", "cpu")
    assert_one_line_error(rc, err, "broken.jpg")
    assert not (tmp_path / "p.csv").exists()


def test_images_unlike_the_training_ones_are_named_and_referred(capsys, tmp_path, monkeypatch):
    # a black stroke on a transparent background became an all-black image, and a dark digit on white
    # paper MNIST's opposite: both predicted as any other image, silently
    pil = pytest.importorskip("PIL.Image")
    draw = pytest.importorskip("PIL.ImageDraw")
    run, _ = image_run(tmp_path, monkeypatch)
    folder = tmp_path / "digits"
    folder.mkdir()
    digit = np.zeros((28, 28), dtype=np.uint8)
    digit[4:24, 12:16] = 255
    pil.fromarray(digit).save(folder / "a_light_on_black.png")
    pil.fromarray(255 - digit).save(folder / "b_paper.png")
    clear = pil.new("RGBA", (56, 56), (0, 0, 0, 0))
    draw.Draw(clear).line([(28, 8), (28, 48)], fill=(0, 0, 0, 255), width=6)
    clear.save(folder / "c_transparent.png")
    rc, out, err = run_main(capsys, "predict", str(run), str(folder), "--samples", "2", "--device", "cpu")
    assert rc == 0, err
    rows = {r["file"]: r for r in csv.DictReader(out.splitlines())}
    assert rows["a_light_on_black.png"]["warning"] == ""
    assert "light background" in rows["b_paper.png"]["warning"] and rows["b_paper.png"]["refer"] == "true"
    assert "transparent" in rows["c_transparent.png"]["warning"] and rows["c_transparent.png"]["refer"] == "true"
    assert "warning: 2 image(s)" in err and "b_paper.png" in err


def test_bad_inputs_are_one_line_errors_and_write_nothing(capsys, tmp_path, monkeypatch):
    path = table(tmp_path / "t.csv")
    lines = path.read_text().splitlines()
    lines[5] = ",".join(["0.1", "", "a", "hi"])
    (tmp_path / "missing.csv").write_text("\n".join(lines) + "\n")
    rc, _, err = run_main(capsys, "train", "--csv", str(tmp_path / "missing.csv"), "--target", "target",
                          "--epochs", "1", "--out", str(tmp_path / "r1"), *TINY)
    assert_one_line_error(rc, err, "row 5", "'x2'", "missing")
    assert not (tmp_path / "r1" / "last.pt").exists()
    rc, _, err = run_main(capsys, "train", "--csv", str(path), "--epochs", "1", "--out", str(tmp_path / "r2"),
                          *TINY)
    assert_one_line_error(rc, err, "--target")
    rc, _, err = run_main(capsys, "train", "--target", "y", "--epochs", "1", "--out", str(tmp_path / "r3"), *TINY)
    assert_one_line_error(rc, err, "--target", "--csv")
    rc, _, err = run_main(capsys, "train", "--csv", str(path), "--target", "target", "--epochs", "1",
                          "--out", str(tmp_path / "run"), *TINY)
    assert rc == 0, err
    (tmp_path / "no_x2.csv").write_text("x1,kind\n0.5,a\n")
    rc, _, err = run_main(capsys, "predict", str(tmp_path / "run"), str(tmp_path / "no_x2.csv"),
                          "--out", str(tmp_path / "p.csv"))
    assert_one_line_error(rc, err, "'x2'")
    rc, _, err = run_main(capsys, "predict", str(tmp_path / "run"), str(tmp_path / "nothing.csv"))
    assert_one_line_error(rc, err, "nothing.csv")
    (tmp_path / "folder").mkdir()
    rc, _, err = run_main(capsys, "predict", str(tmp_path / "run"), str(tmp_path / "folder"))
    assert_one_line_error(rc, err, "folder of images", "CSV table")
    rc, _, err = run_main(capsys, "predict", str(tmp_path / "run"), str(path), "--target-error", "-1")
    assert_one_line_error(rc, err, "--target-error")
    for command in ("ood", "uncertain"):  # image commands: a table run is refused, not drawn as digits
        rc, _, err = run_main(capsys, command, str(tmp_path / "run"), "--device", "cpu")
        assert_one_line_error(rc, err, "trained on MNIST or Fashion-MNIST", "t.csv")
        # what to run instead: bbb ood takes any run given --ood-data, and bbb predict ranks any run's inputs
        assert ("--ood-data" if command == "ood" else "bbb predict") in err and "bbb ood and bbb uncertain" not in err
    assert not (tmp_path / "p.csv").exists()
    # a name bbb writes in the run's folder, not there yet: a later bbb evaluate would replace (or read) it
    for name in ("eval.json", "summary.json"):
        (tmp_path / "run" / name).unlink(missing_ok=True)
        rc, _, err = run_main(capsys, "predict", str(tmp_path / "run"), str(path), "--out",
                              str(tmp_path / "run" / name))
        assert_one_line_error(rc, err, f"({name}, which bbb writes there)")
        assert not (tmp_path / "run" / name).exists()
    for shape in ((2, 2), (2, 3)):  # an array for a run with a text column: the CSV, whatever its shape
        np.save(tmp_path / "a.npy", np.zeros(shape))
        rc, _, err = run_main(capsys, "predict", str(tmp_path / "run"), str(tmp_path / "a.npy"), "--no-refer")
        assert_one_line_error(rc, err, "one-hot encodes the text column kind", "as a CSV file with the column names")


def test_an_npz_target_is_written_as_the_class_label_it_is(capsys, tmp_path):
    """A run trained on float labels (classes '1.0', '3.0') given a y of ints wrote target 3 beside
    prediction 3.0: every row compared as a mistake."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3))
    y = np.where(x[:, 0] > 0, 3.0, 1.0)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--npz", str(tmp_path / "a.npz"), "--task", "classification",
                          "--epochs", "1", "--out", str(run), *TINY)
    assert rc == 0, err
    np.savez(tmp_path / "new.npz", x=x[:6], y=np.array([3, 1, 3, 1, 5, 3]))  # 5: no class, written as it is
    rc, out, err = run_main(capsys, "predict", str(run), str(tmp_path / "new.npz"), "--no-refer")
    assert rc == 0, err
    rows = list(csv.DictReader(out.splitlines()))
    assert [r["target"] for r in rows] == ["3.0", "1.0", "3.0", "1.0", "5", "3.0"]
    assert {r["prediction"] for r in rows} <= {"1.0", "3.0"}


def test_samples_given_for_a_deterministic_run_is_said_to_change_nothing(capsys, tmp_path):
    path = table(tmp_path / "t.csv")
    run = tmp_path / "sgd"
    rc, _, err = run_main(capsys, "train", "--csv", str(path), "--target", "target", "--method", "sgd", "--epochs", "1",
                          "--out", str(run), *[a for a in TINY if a not in ("--eval-samples", "3")])
    assert rc == 0, err
    rc, _, err = run_main(capsys, "predict", str(run), str(path), "--samples", "5", "--no-refer")
    assert rc == 0 and "--samples 5 has no effect: its one deterministic network" in err, err
    rc, _, err = run_main(capsys, "predict", str(run), str(path), "--no-refer")
    assert rc == 0 and "has no effect" not in err, err
