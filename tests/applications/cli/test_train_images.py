"""``bbb train --images DIR``: a folder of your own images, one subfolder per class, as a run's data:
each image read as ``bbb predict`` reads a folder (upright, grey, resized), so that a new image
reaches the network as the training images did; the classes by the subfolders' names; the
folder's MD5 checked as a file's; a folder unlike that, one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bbb.cli.predict import read_inputs
from bbb.data.arrays import read_image_classes, source_md5
from bbb.experiments.report import report_html
from bbb.runs import load_model
from bbb.runs.model import load_split
from testkit import assert_one_line_error, read_csv, run_main

PIL = pytest.importorskip("PIL.Image")

CLASSES = ("blob", "horizontal", "vertical")


def pattern(kind: str, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A noisy grey image of bars across, bars down, or a disc."""
    h, w = size
    a = rng.uniform(0, 60, (h, w))
    if kind == "horizontal":
        for r in range(int(rng.integers(0, 4)), h, 6):
            a[r:r + 2] = 230
    elif kind == "vertical":
        for c in range(int(rng.integers(0, 4)), w, 6):
            a[:, c:c + 2] = 230
    else:
        cy, cx = int(rng.integers(h // 4, 3 * h // 4)), int(rng.integers(w // 4, 3 * w // 4))
        yy, xx = np.ogrid[:h, :w]
        a[(yy - cy) ** 2 + (xx - cx) ** 2 < (h // 5) ** 2] = 230
    return a.clip(0, 255).astype(np.uint8)


def image_folder(root: Path, n: int, seed: int = 0) -> Path:
    """``root/<class>/*.png|jpg``: ``n`` images a class of three sizes, some saved in colour."""
    rng = np.random.default_rng(seed)
    for kind in CLASSES:
        (root / kind).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            im = PIL.fromarray(pattern(kind, [(28, 28), (40, 40), (32, 48)][i % 3], rng))
            name = f"{kind}_{i:03d}.{'jpg' if i % 5 == 0 else 'png'}"
            (im.convert("RGB") if i % 4 == 1 else im).save(root / kind / name)
    return root


def train(capsys, tmp_path: Path, *extra: str) -> Path:
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--hidden", "32", "--epochs", "8",
                          "--device", "cpu", "--out", str(run), "--quiet", *extra)
    assert rc == 0, err
    return run


@pytest.fixture()
def folder_run(capsys, tmp_path):
    image_folder(tmp_path / "imgs", 24)
    image_folder(tmp_path / "new", 6, seed=5)
    return train(capsys, tmp_path)


def test_a_folder_trains_a_classifier_of_its_subfolders_and_new_images_reach_it_as_the_training_ones(
        capsys, tmp_path, folder_run):
    cfg = json.loads((folder_run / "config.json").read_text())
    assert cfg["data_file"] == str((tmp_path / "imgs").resolve()) and cfg["dataset"] == "file"
    model = load_model(folder_run)
    pre = model.preprocess
    assert pre.classes == list(CLASSES) and pre.feature_shape == [1, 28, 28] and pre.task == "classification"
    assert pre.source["folder"] and pre.source["rows"] == 72 and pre.source["md5"] == source_md5(tmp_path / "imgs")
    # every training image, read again as bbb predict reads a folder, is one of the split's rows, bit for bit
    data, _ = load_split(model.config, pre.to_dict())
    rows = {r.numpy().tobytes() for k in ("train_x", "val_x", "test_x") for r in data[k]}
    for kind in CLASSES:
        x = read_inputs(model, tmp_path / "imgs" / kind)
        assert x.shape == (24, 784) and all(r.numpy().tobytes() in rows for r in x)
    # bbb predict of a folder of new images names the classes by the subfolders' names
    for kind in CLASSES:
        out = tmp_path / f"p_{kind}.csv"
        rc, _, err = run_main(capsys, "predict", str(folder_run), str(tmp_path / "new" / kind), "--samples", "5",
                              "--out", str(out))
        assert rc == 0, err
        got = read_csv(out)
        assert [r["file"] for r in got] == sorted(p.name for p in (tmp_path / "new" / kind).iterdir())
        assert {"p_" + c for c in CLASSES} <= set(got[0]) and "warning" not in got[0]
        assert sum(r["prediction"] == kind for r in got) >= 5, got
    # one image file: refused, saying how (it said to give a folder of images, as if the file were none)
    one = tmp_path / "new" / "blob" / "blob_001.png"
    assert_one_line_error(*run_main(capsys, "predict", str(folder_run), str(one), "--out", str(tmp_path / "1.csv"))
                          [::2], "one image is read from a folder", f"{one.parent}/")


def test_the_folder_is_checked_as_a_file_is_and_found_where_it_moved(capsys, tmp_path, folder_run):
    (tmp_path / "imgs" / "blob" / "blob_000.jpg").rename(tmp_path / "imgs" / "blob" / "blob_x.jpg")
    assert_one_line_error(*run_main(capsys, "evaluate", str(folder_run))[::2], "is not the folder this run was trained "
                          "on", "renamed")
    (tmp_path / "imgs" / "blob" / "blob_x.jpg").rename(tmp_path / "imgs" / "blob" / "blob_000.jpg")
    (tmp_path / "imgs").rename(tmp_path / "moved")
    assert_one_line_error(*run_main(capsys, "evaluate", str(folder_run))[::2], "is not there", "--images DIR",
                          "ood, laplace")  # (every command that takes --images DIR: these two were left out)
    assert_one_line_error(*run_main(capsys, "evaluate", str(folder_run), "--csv", str(tmp_path / "x.csv"))[::2],
                          "not a folder of images", "--images DIR")
    rc, _, err = run_main(capsys, "evaluate", str(folder_run), "--images", str(tmp_path / "moved"))
    assert rc == 0, err
    ev = json.loads((folder_run / "eval.json").read_text())
    assert ev["n"] == json.loads((folder_run / "config.json").read_text())["num_test"]
    # the page speaks of images and suggests a folder of new ones
    text = report_html([folder_run])
    assert "imgs/ (classification, 72 images)" in text and "new_imgs/" in text and "new_imgs.csv" not in text


def test_image_size_resizes_every_image_and_predict_resizes_new_ones_alike(capsys, tmp_path):
    image_folder(tmp_path / "imgs", 6)
    run = train(capsys, tmp_path, "--image-size", "12", "20", "--epochs", "1")
    model = load_model(run)
    assert model.config.image_size == [12, 20] and model.preprocess.feature_shape == [1, 12, 20]
    x, _ = read_image_classes(tmp_path / "imgs", (12, 20))
    assert torch.equal(read_inputs(model, tmp_path / "imgs" / "blob"), model.encode(x[:6]))
    assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--image-size", "1", "2", "3",
                                    "--out", str(tmp_path / "r3"))[::2], "one number (square) or two")
    # a run of the default size resumed with that size said: was None, now [28, 28], and refused
    default = train(capsys, tmp_path, "--epochs", "1", "--overwrite")
    rc, _, err = run_main(capsys, "train", "--resume", "--out", str(default), "--epochs", "2", "--image-size", "28",
                          "--quiet")
    assert rc == 0, err
    assert_one_line_error(*run_main(capsys, "train", "--resume", "--out", str(default), "--epochs", "3",
                                    "--image-size", "28", "29")[::2], "setting 'image_size' was [28, 28], now [28, 29]")


def test_an_npz_run_of_grey_images_predicts_a_folder_and_flags_pixels_outside_its_range(capsys, tmp_path):
    image_folder(tmp_path / "imgs", 6)
    x, y = read_image_classes(tmp_path / "imgs")
    np.savez(tmp_path / "a.npz", x=(x / 255.0).astype(np.float32), y=np.unique(y, return_inverse=True)[1])
    run = tmp_path / "npz"
    assert run_main(capsys, "train", "--npz", str(tmp_path / "a.npz"), "--epochs", "1", "--hidden", "8", "--out",
                    str(run), "--quiet")[0] == 0
    out = tmp_path / "p.csv"
    rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "imgs" / "blob"), "--out", str(out))
    assert rc == 0, err
    got = read_csv(out)
    assert len(got) == 6 and all("outside" in r["warning"] for r in got) and all(r["refer"] == "true" for r in got)
    # named by their files, the output's file column (row numbers were a table's words, left to count)
    line = next(ln for ln in err.splitlines() if "outside the training" in ln)
    assert "6 image(s)" in line and "blob_000.jpg, blob_001.png" in line and "row" not in line, line
    assert "outside the training images' range" in line and got[0]["file"] in line


@pytest.mark.parametrize(("layout", "words"), [
    ("flat", ("no subfolders", "one subfolder per class", "found 2 image(s)")),
    ("loose", ("beside the class subfolders", "a.png")),
    ("empty", ("a class subfolder without", "empty")),
    ("one", ("one class subfolder", "two or more")),
])
def test_a_folder_not_laid_out_by_class_is_one_line(capsys, tmp_path, layout, words):
    d = tmp_path / "d"
    d.mkdir()
    img = PIL.fromarray(np.zeros((8, 8), np.uint8))
    if layout == "flat":
        img.save(d / "a.png"), img.save(d / "b.png")
    else:
        for c in ("one",) if layout == "one" else ("one", "two", "empty"):
            (d / c).mkdir()
            if c != "empty":
                img.save(d / c / "x.png")
        if layout == "loose":
            img.save(d / "a.png")
        if layout != "empty":
            (d / "empty").rmdir() if (d / "empty").exists() else None
    rc, _, err = run_main(capsys, "train", "--images", str(d), "--out", str(tmp_path / "r"))
    assert_one_line_error(rc, err, *words)
    assert not (tmp_path / "r" / "config.json").exists()


@pytest.mark.parametrize(("per_class", "words", "not_said"), [
    (1, ("30 class subfolders of 30 images", "add images to each class"), "--task regression"),
    (2, ("0 test images", "now 0.1; a classifier's is taken of each class", "more images"), "(e.g. 0.1)"),
])
def test_classes_too_small_to_hold_out_a_test_image_say_what_helps(capsys, tmp_path, per_class, words, not_said):
    """A folder of 30 classes of one image was told to say --task regression (which a folder refuses), one of
    two images a class to raise --test-fraction (e.g. 0.1) where it was 0.1: each class rounds 0.2 to none."""
    rng = np.random.default_rng(0)
    for c in range(30):
        (tmp_path / "d" / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            PIL.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(tmp_path / "d" / f"c{c}" / f"{i}.png")
    line = assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "d"), "--out",
                                           str(tmp_path / "r"))[::2], *words)
    assert not_said not in line


def test_a_class_held_out_whole_or_left_out_by_train_size_speaks_of_images(capsys, tmp_path):
    """Said of a folder: 'class 'b' has 2 rows ... remove the class's rows', '--train-size keeps no training row'."""
    image_folder(tmp_path / "imgs", 2)
    line = assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--val-fraction",
                                           "0.3", "--test-fraction", "0.3", "--out", str(tmp_path / "r"))[::2],
                                 "has 2 images", "add images to the class, or remove its subfolder")
    assert "rows" not in line
    from bbb.data.files import load_file_splits

    with pytest.warns(UserWarning, match="keeps no training image of class"):
        load_file_splits(tmp_path / "imgs", val_fraction=0.0, test_fraction=0.5, train_size=1)


def test_settings_of_a_file_or_of_mnist_refuse_a_folder_and_image_size_a_file(capsys, tmp_path):
    image_folder(tmp_path / "imgs", 3)
    assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--target", "y", "--out",
                                    str(tmp_path / "r"))[::2], "--target applies to a CSV file")
    (tmp_path / "t.csv").write_text("a,y\n1,x\n2,y\n")
    assert_one_line_error(*run_main(capsys, "train", "--csv", str(tmp_path / "t.csv"), "--target", "y",
                                    "--image-size", "8", "--out", str(tmp_path / "r"))[::2],
                          "--image-size reads a folder")
    assert_one_line_error(*run_main(capsys, "train", "--image-size", "8", "--out", str(tmp_path / "r"))[::2],
                          "--image-size applies to your own data")
    # the option names the kind of data: a folder given to --npz (or --csv) trained on its images, a table given to
    # --images was read as a table, without a word
    for flag, path, words in (("--npz", tmp_path / "imgs", "give it as --images"),
                              ("--csv", tmp_path / "imgs", "give it as --images"),
                              ("--images", tmp_path / "t.csv", "give it as --csv"),
                              ("--images", tmp_path / "imgs" / "blob" / "blob_000.jpg", "takes a folder")):
        assert_one_line_error(*run_main(capsys, "train", flag, str(path), "--out", str(tmp_path / "r"))[::2], words)
    assert not (tmp_path / "r").exists()
    # MNIST's --data-dir on a folder's run: the moved data's option is --images DIR (it said --csv or --npz FILE)
    line = assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--data-dir",
                                           str(tmp_path), "--out", str(tmp_path / "r"))[::2], "leave --data-dir out")
    assert "--images DIR" in line and "--csv FILE" not in line
    for extra, words in ((("--val-size", "10"), "(--csv, --npz, --images) use --val-fraction"),
                         (("--scale", "255"), "a run on your own data (--csv, --npz, --images)")):
        assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "imgs"), *extra, "--out",
                                        str(tmp_path / "r"))[::2], words)


@pytest.mark.parametrize("given, words", [(("--scale", "255"), ("--images", "pixels")),
                                          (("--val-size", "5"), ("--images", "--val-fraction")),
                                          (("--data-dir", "."), ("--images DIR",))])
def test_mnists_settings_given_with_a_folder_speak_of_images(capsys, tmp_path, given, words):
    """--scale, --val-size and --data-dir with --images were refused with a table's words (its
    columns, --csv/--npz data, give --csv FILE or --npz FILE): the line names the images' own."""
    image_folder(tmp_path / "imgs", 3)
    assert_one_line_error(*run_main(capsys, "train", "--images", str(tmp_path / "imgs"), *given, "--out",
                                    str(tmp_path / "r"))[::2], *words)


def test_a_resumed_folder_run_given_mnists_settings_names_images_dir(capsys, tmp_path, folder_run):
    """--resume of a run on a folder with --data-dir said to give a moved file with --csv FILE or
    --npz FILE, not the --images DIR that finds it."""
    assert_one_line_error(*run_main(capsys, "train", "--resume", "--out", str(folder_run), "--data-dir", ".",
                                    "--epochs", "9")[::2], "--images DIR")


def test_an_image_outside_a_folder_runs_range_is_named_by_its_pixels(capsys, tmp_path):
    """A run on a folder of images named a new image's pixel outside the training range in an
    .npz's words, 'x 255 outside the training arrays' ...': the warning says pixel and images."""
    rng = np.random.default_rng(0)
    for kind in ("dim", "mid"):
        (tmp_path / "imgs" / kind).mkdir(parents=True)
        for i in range(10):
            a = rng.integers(60, 120, (28, 28)) + (60 if kind == "mid" else 0)
            PIL.fromarray(a.astype(np.uint8)).save(tmp_path / "imgs" / kind / f"{i}.png")
    run = train(capsys, tmp_path)
    (tmp_path / "far").mkdir()
    bright = np.full((28, 28), 255, np.uint8)
    bright[::4] = 120
    PIL.fromarray(bright).save(tmp_path / "far" / "bright.png")
    out = tmp_path / "far.csv"
    rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "far"), "--out", str(out))
    assert rc == 0, err
    (row,) = read_csv(out)
    assert row["warning"].startswith("pixel 255 outside the training images'") and row["refer"] == "true"
    assert "arrays" not in row["warning"]


def test_a_sweep_over_a_folder_trains_on_it_and_refuses_it_once_an_image_changed(tmp_path):
    import bbb.sweep as S
    from bbb.errors import UserError

    image_folder(tmp_path / "imgs", 6)
    params = {"data_file": str(tmp_path / "imgs"), "image_size": [10, 10], "method": "sgd", "hidden": [4],
              "epochs": 1, "device": "cpu", "seed": {"grid": [0]}}
    opts = S.SweepOptions(out=tmp_path / "sweep", progress=False, cpus_per_trial=1)
    (row,) = S.run_sweep({"params": params}, opts, log=lambda s: None)
    assert row["status"] == "done"
    (trial,) = [p for p in (tmp_path / "sweep").rglob("config.json")]
    pre = json.loads(trial.read_text())["preprocess"]
    assert pre["feature_shape"] == [1, 10, 10] and pre["classes"] == list(CLASSES) and pre["source"]["folder"]
    PIL.fromarray(np.full((28, 28), 200, np.uint8)).save(tmp_path / "imgs" / "blob" / "blob_000.png")
    with pytest.raises(UserError, match="changed since trial"):
        S.run_sweep({"params": {**params, "seed": {"grid": [0, 1]}}}, opts, log=lambda s: None)


def test_colour_keeps_what_grey_loses(capsys, tmp_path):
    """Red and green images of one brightness (ITU-R 601 luma: red 255 -> 76, green 129 -> 76) are the same
    grey picture: a grey run cannot tell them apart, a --colour run can, and predicts new ones in colour."""
    rng = np.random.default_rng(0)
    for name, rgb in (("red", (255, 0, 0)), ("green", (0, 129, 0))):
        for d, n in (("imgs", 30), ("new", 6)):
            (tmp_path / d / name).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                a = np.zeros((16, 16, 3), np.uint8)
                r0, c0 = rng.integers(0, 8, 2)
                a[r0:r0 + 8, c0:c0 + 8] = rgb
                PIL.fromarray(a).save(tmp_path / d / name / f"{i}.png")
    grey, _ = read_image_classes(tmp_path / "imgs", (16, 16))
    by_class = grey.reshape(2, 30, -1)
    assert {int(v) for v in np.unique(by_class)} <= {0, 75, 76}  # the two classes' grey pictures: one brightness
    colour_run = train(capsys, tmp_path, "--colour", "--image-size", "16", "--epochs", "30", "--hidden", "16")
    model = load_model(colour_run)
    assert model.config.image_colour and model.preprocess.feature_shape == [3, 16, 16]
    x, y = read_image_classes(tmp_path / "imgs", (16, 16), colour=True)
    assert x.shape == (60, 3, 16, 16) and set(y) == {"red", "green"}
    # a folder of grey images read in colour: three equal channels, said (it trained on them without a word)
    image_folder(tmp_path / "grey", 2)
    with pytest.warns(UserWarning, match="every image is grey"):
        read_image_classes(tmp_path / "grey", (16, 16), colour=True)
    for name in ("red", "green"):
        out = tmp_path / f"{name}.csv"
        rc, _, err = run_main(capsys, "predict", str(colour_run), str(tmp_path / "new" / name), "--out", str(out))
        assert rc == 0, err
        assert [r["prediction"] for r in read_csv(out)] == [name] * 6
    text = report_html([colour_run])
    assert "colour images resized to 16x16" in text
    assert_one_line_error(*run_main(capsys, "train", "--colour", "--out", str(tmp_path / "r2"))[::2],
                          "--colour applies to your own data")


def test_a_folder_laid_out_by_class_is_predicted_whole_with_each_images_label(capsys, tmp_path, folder_run):
    """bbb predict of a folder of class subfolders (a new set laid out as the training one) said its
    subfolders are not read; it reads each one's images, labelled by the subfolder's name."""
    (tmp_path / "new" / "notes").mkdir()
    (tmp_path / "new" / "README.txt").write_text("new images")
    out = tmp_path / "p.csv"
    rc, _, err = run_main(capsys, "predict", str(folder_run), str(tmp_path / "new"), "--samples", "4", "--out",
                          str(out))
    assert rc == 0, err
    got = read_csv(out)
    want = [f"{c}/{p.name}" for c in CLASSES for p in sorted((tmp_path / "new" / c).iterdir())]
    assert [r["file"] for r in got] == want and [r["label"] for r in got] == [f.split("/")[0] for f in want]
    assert sum(r["prediction"] == r["label"] for r in got) >= 15
    assert "2 file(s) or folder(s)" in err and "README.txt" in err and "notes/" in err
    # the same pixels as the subfolder read alone
    model = load_model(folder_run)
    assert torch.equal(read_inputs(model, tmp_path / "new")[:6], read_inputs(model, tmp_path / "new" / "blob"))
    # a folder with images of its own is read as before: its images, its subfolders named as not read
    PIL.fromarray(np.zeros((28, 28), np.uint8)).save(tmp_path / "new" / "loose.png")
    rc, _, err = run_main(capsys, "predict", str(folder_run), str(tmp_path / "new"), "--out", str(tmp_path / "q.csv"))
    assert rc == 0 and [r["file"] for r in read_csv(tmp_path / "q.csv")] == ["loose.png"] and "blob/" in err


def test_bbb_uncertain_draws_a_folder_runs_test_images_and_names_their_files(capsys, tmp_path, folder_run):
    """bbb uncertain refused a run on your own images (MNIST's grids only): it draws its test images as
    they are and lists each one's file and class names, the file being the test row's own."""
    assert "<span>uncertain</span>" in report_html([folder_run])  # suggested before it ran
    rc, _, err = run_main(capsys, "uncertain", str(folder_run), "--n", "5", "--samples", "3")
    assert rc == 0, err
    got = json.loads((folder_run / "uncertain.json").read_text())
    model = load_model(folder_run)
    data, _ = load_split(model.config, model.preprocess.to_dict())
    for row in got["digits"]:
        cls, name = row["file"].split("/")
        assert row["label_name"] == cls == CLASSES[row["label"]]
        assert row["prediction_name"] == CLASSES[row["prediction"]]
        files = sorted(p.name for p in (tmp_path / "imgs" / cls).iterdir())
        assert torch.equal(read_inputs(model, tmp_path / "imgs" / cls)[files.index(name)], data["test_x"][row["index"]])
    assert (folder_run / "uncertain.png").stat().st_size > 1000
    page = report_html([folder_run])
    assert "<h2>Uncertain inputs" in page and "drawn for image runs" not in page
    (tmp_path / "imgs").rename(tmp_path / "moved")
    assert run_main(capsys, "uncertain", str(folder_run), "--n", "2", "--images", str(tmp_path / "moved"))[0] == 0


def test_transparent_images_of_a_run_trained_on_transparent_ones_are_not_called_unlike_them(capsys, tmp_path):
    """A run on icons (every training image on a transparent background) called every new icon 'unlike the
    training images' and referred it; a run on opaque images still names a transparent one."""
    rng = np.random.default_rng(0)
    for root in ("icons", "new"):
        for kind in CLASSES[:2]:
            (tmp_path / root / kind).mkdir(parents=True)
            for i in range(10 if root == "icons" else 3):
                rgba = np.zeros((16, 16, 4), np.uint8)
                rgba[..., :3] = pattern(kind, (16, 16), rng)[..., None]
                rgba[4:12, 4:12, 3] = 255
                PIL.fromarray(rgba).save(tmp_path / root / kind / f"{i}.png")
    image_folder(tmp_path / "imgs", 10)
    for data, warned in (("icons", False), ("imgs", True)):
        run = tmp_path / f"run_{data}"
        rc, _, err = run_main(capsys, "train", "--images", str(tmp_path / data), "--epochs", "1", "--hidden", "8",
                              "--out", str(run), "--quiet")
        assert rc == 0, err
        assert bool(json.loads((run / "config.json").read_text())["preprocess"]["source"].get("transparent")) \
            is not warned
        rc, _, err = run_main(capsys, "predict", str(run), str(tmp_path / "new" / "blob"), "--out",
                              str(tmp_path / f"p_{data}.csv"))
        assert rc == 0, err
        got = read_csv(tmp_path / f"p_{data}.csv")
        assert ("warning" in got[0] and all("transparent" in r["warning"] for r in got)) is warned, got
        assert ("unlike the training images" in err) is warned


def test_image_runs_standardise_by_one_mean_and_sd_so_a_pixel_constant_in_training_stays_in_scale(capsys, tmp_path):
    """Per pixel, a pixel that never varied in training (a black border: sd 1 by convention) took a new
    image's raw value through: a white border reached the network at 255 sds. One mean and sd of all
    the training pixels keeps every input within the training pixels' scale."""
    rng = np.random.default_rng(0)
    x = np.zeros((60, 1, 12, 12), np.uint8)
    x[:, :, 2:10, 2:10] = rng.integers(0, 256, (60, 1, 8, 8))
    np.savez(tmp_path / "a.npz", x=x, y=np.arange(60) % 2)
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--npz", str(tmp_path / "a.npz"), "--epochs", "1", "--hidden", "8", "--out",
                    str(run), "--quiet")[0] == 0
    model = load_model(run)
    white = np.full((1, 1, 12, 12), 255, np.uint8)
    enc = model.encode(white)
    pre = model.preprocess  # one mean and sd, of the training rows' pixels (the split's 80%)
    assert pre.x is not None and pre.x.mean.dim() == 0 and 50 < float(pre.x.mean) < 65 and 70 < float(pre.x.std) < 90
    assert torch.allclose(enc, torch.full_like(enc, (255 - float(pre.x.mean)) / float(pre.x.std)), rtol=1e-5)
    assert float(enc.abs().max()) < 5  # (per pixel: the border's 255)


def test_hidden_files_of_a_folder_copied_from_a_mac_are_not_images(capsys, tmp_path, folder_run):
    """macOS writes ``._name.png`` (its resource fork, not a PNG) beside each image copied to another
    disk; they were read as images: `bbb train --images` and `bbb predict` of such a folder stopped
    at the first one ("not a readable image"). Hidden files (a name starting with ".") are no
    images anywhere: read, listed or hashed (a hidden valid PNG, a viewer's thumbnail, neither)."""
    apple_double = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(4000)
    md5 = source_md5(tmp_path / "imgs")
    model = load_model(folder_run)
    for root in (tmp_path / "imgs", tmp_path / "new"):
        for kind in CLASSES:
            for p in sorted((root / kind).iterdir()):
                (p.parent / f"._{p.name}").write_bytes(apple_double)
            PIL.fromarray(np.full((28, 28), 255, np.uint8)).save(root / kind / ".thumbnail.png")
    assert source_md5(tmp_path / "imgs") == md5  # the run's data are the same images
    rc, _, err = run_main(capsys, "evaluate", str(folder_run))
    assert rc == 0, err
    x, y = read_image_classes(tmp_path / "imgs")
    assert len(x) == len(y) == 72
    run = tmp_path / "again"
    rc, _, err = run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--hidden", "8", "--epochs", "1",
                          "--device", "cpu", "--out", str(run), "--quiet")
    assert rc == 0 and "not read" not in err, err
    out = tmp_path / "p.csv"
    rc, _, err = run_main(capsys, "predict", str(folder_run), str(tmp_path / "new" / "blob"), "--out", str(out))
    assert rc == 0 and "not read" not in err, err
    assert [r["file"] for r in read_csv(out)] == [f"blob_{i:03d}.{'jpg' if i % 5 == 0 else 'png'}" for i in range(6)]
    assert read_inputs(model, tmp_path / "new").shape == (18, 784)


def test_an_image_size_too_large_to_train_is_refused_naming_it(capsys, tmp_path):
    """--image-size sets the input layer's width (a photo's own 1000x1000 is a million inputs, each
    with its row of weights): the refusal before allocating names it first, not only --hidden."""
    image_folder(tmp_path / "imgs", 10)
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--image-size", "1000",
                          "--hidden", "100000", "--epochs", "1", "--device", "cpu", "--out", str(out), "--quiet")
    assert_one_line_error(rc, err, "out of memory", "1,000,000 inputs", "a smaller --image-size, --hidden")
    assert not (out / "last.pt").exists()


def test_images_too_many_for_memory_at_their_size_are_refused_before_reading(capsys, tmp_path, monkeypatch):
    """Reading a folder at an --image-size whose pixels outgrow the machine's memory ended in the
    system's kill, with no word, after reading for minutes: one line before any image is read."""
    import bbb.data.arrays as A
    import bbb.data.images as I

    image_folder(tmp_path / "imgs", 2)
    monkeypatch.setattr(A, "device_memory", lambda device: 100_000)  # 6 images at 64x64: 122,880 bytes

    def never(*a, **k):
        raise AssertionError("an image was read")

    monkeypatch.setattr(I, "load_image_folder", never)
    for extra, words in (((), ("6 images at 64x64 need at least", "use a smaller --image-size")),
                         (("--colour",), ("in colour", "or leave out --colour"))):
        rc, _, err = run_main(capsys, "train", "--images", str(tmp_path / "imgs"), "--image-size", "64", *extra,
                              "--epochs", "1", "--device", "cpu", "--out", str(tmp_path / "run"), "--quiet")
        assert_one_line_error(rc, err, "GiB", *words)
