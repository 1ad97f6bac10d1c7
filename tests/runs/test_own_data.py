"""Runs on your own data (TrainConfig.data_file): the run directory contract (resume exactly,
evaluate), regression runs, and bbb.runs.load_model taking raw inputs as the run's evaluation does."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import bbb
from bbb import uncertainty as U
from bbb.errors import UserError
from bbb.runs import TrainConfig, evaluate_run, load_run, read_metrics, train
from bbb.runs.model import load_split

SMALL = {"hidden": [8], "batch_size": 16, "lr": 0.01, "device": "cpu", "eval_samples": 3}


def regression_csv(path: Path, n: int = 160, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "kind", "y"])
        for i in range(n):
            x1, x2, kind = rng.normal(), rng.normal(), ["a", "b"][i % 2]
            w.writerow([f"{x1:.5f}", f"{x2:.5f}", kind, f"{3 * x1 - x2 + (kind == 'a') + 0.1 * rng.normal():.5f}"])
    return path


def classification_csv(path: Path, n: int = 160, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "kind", "label"])
        for i in range(n):
            x1, x2, kind = rng.normal(), rng.normal(), ["a", "b", "c"][i % 3]
            w.writerow([f"{x1:.5f}", f"{x2:.5f}", kind, "up" if x1 + x2 > 0 else "down"])
    return path


def test_regression_run_resumes_exactly_and_evaluates(tmp_path):
    path = regression_csv(tmp_path / "t.csv")
    cfg = TrainConfig(data_file=str(path), target="y", epochs=3, **SMALL)
    full = train(cfg, tmp_path / "full", quiet=True, log=lambda s: None)
    train(cfg.replace(epochs=2), tmp_path / "part", quiet=True, log=lambda s: None)
    resumed = train(cfg, tmp_path / "part", resume=True, quiet=True, log=lambda s: None)
    assert read_metrics(tmp_path / "full")[-1]["val_error"] == read_metrics(tmp_path / "part")[-1]["val_error"]
    assert resumed["test_rmse"] == full["test_rmse"] and full["task"] == "regression"
    conf = json.loads((tmp_path / "full" / "config.json").read_text())
    assert conf["preprocess"]["task"] == "regression" and conf["preprocess"]["target"] == "y"
    ev = evaluate_run(tmp_path / "full", samples=4, device="cpu")
    assert ev["task"] == "regression" and ev["test_rmse"] > 0 and 0 <= ev["coverage_95"] <= 1
    assert ev["aurc_sd"] > 0 and json.loads((tmp_path / "full" / "eval.json").read_text())["n"] == 16
    # the calibration curve: the coverage of each central interval (its 95% is coverage_95), drawn
    cal = ev["interval_calibration"]
    assert cal["levels"] == list(bbb.uncertainty.CALIBRATION_LEVELS) and len(cal["coverage"]) == len(cal["levels"])
    assert cal["coverage"][cal["levels"].index(0.95)] == ev["coverage_95"]
    assert all(a <= b for a, b in zip(cal["coverage"], cal["coverage"][1:]))  # nested intervals
    assert ev["calibration_error"] == pytest.approx(
        sum(abs(c - v) for v, c in zip(cal["levels"], cal["coverage"])) / len(cal["levels"]))
    assert ev["plots"] == ["calibration.png"] and (tmp_path / "full" / "calibration.png").stat().st_size > 1000
    # the val_error column is the validation RMSE in the target's units
    model = bbb.runs.load_model(tmp_path / "full")
    data, pre = load_split(cfg)
    with torch.no_grad():
        mean = pre.target_values(model.network(data["val_x"])[:, 0].double())
    rmse = float(((mean - pre.target_values(data["val_y"].double())) ** 2).mean().sqrt())
    best = json.loads((tmp_path / "full" / "summary.json").read_text())["best_epoch"]
    assert read_metrics(tmp_path / "full")[best - 1]["val_error"] == pytest.approx(rmse, rel=1e-4)


def test_a_changed_file_is_refused_on_resume(tmp_path):
    path = regression_csv(tmp_path / "t.csv")
    cfg = TrainConfig(data_file=str(path), target="y", epochs=1, **SMALL)
    train(cfg, tmp_path / "run", quiet=True, log=lambda s: None)
    regression_csv(path, seed=1)
    with pytest.raises(UserError) as info:
        train(cfg.replace(epochs=2), tmp_path / "run", resume=True, quiet=True, log=lambda s: None)
    assert "MD5" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(UserError):
        evaluate_run(tmp_path / "run", device="cpu")


@pytest.mark.parametrize("method", ["bbb", "sgd"])
def test_homoscedastic_regression_learns_one_noise_sd(tmp_path, method):
    path = regression_csv(tmp_path / "t.csv")
    cfg = TrainConfig(data_file=str(path), target="y", epochs=2, likelihood="homoscedastic", method=method, **SMALL)
    train(cfg, tmp_path / "run", quiet=True, log=lambda s: None)
    model = bbb.runs.load_model(tmp_path / "run")
    raw = model.network[-1].raw
    assert float(raw.detach()) != 0.0  # trained (it starts at 0)
    data, _ = load_split(cfg)
    with torch.no_grad():
        out = model.network(data["test_x"])
    assert out.shape[-1] == 2 and torch.all(out[:, 1] == out[0, 1])
    assert evaluate_run(tmp_path / "run", samples=2, device="cpu")["task"] == "regression"


def test_settings_of_a_file_and_of_mnist_exclude_each_other():
    for bad in ({"target": "y"}, {"val_fraction": 0.2}, {"likelihood": "homoscedastic"}):
        with pytest.raises(UserError) as info:
            TrainConfig(**bad)
        assert "--csv" in str(info.value)
    with pytest.raises(UserError):
        TrainConfig(data_file="t.csv", val_size=100)
    with pytest.raises(UserError):
        TrainConfig(data_file="t.csv", val_fraction=0.6, test_fraction=0.5)
    assert TrainConfig(data_file="t.csv").dataset == "file"


def test_scale_of_mnist_pixels_is_refused_for_a_file():
    # --scale divides MNIST's pixels; a --csv/--npz run never read it, yet config.json recorded it
    with pytest.raises(UserError) as info:
        TrainConfig(data_file="t.csv", scale=100)
    assert "--scale" in str(info.value) and "leave --scale out" in str(info.value)
    # a run stored before the check loads (as its training did: without the scale)
    stored = {**TrainConfig(data_file="t.csv").to_dict(), "scale": 100.0}
    assert TrainConfig.from_stored(stored).scale == 126.0


def test_load_model_takes_raw_csv_rows_and_arrays(tmp_path):
    path = classification_csv(tmp_path / "c.csv")
    cfg = TrainConfig(data_file=str(path), target="label", epochs=2, **SMALL)
    train(cfg, tmp_path / "run", quiet=True, log=lambda s: None)
    model = bbb.runs.load_model(tmp_path / "run")
    assert model.classes == ["down", "up"] and model.task == "classification" and not model.training
    x, header, rows = model.encode_csv(path)
    assert x.shape == (160, 5) and header[-1] == "label"
    net, _ = load_run(tmp_path / "run")
    data, _ = load_split(cfg)
    with torch.no_grad():  # the encoded file holds the split's test rows, scored alike
        d = torch.cdist(data["test_x"].double(), x.double())
        idx = d.argmin(1)
        assert float(d.min(1).values.max()) < 1e-5
        torch.testing.assert_close(net(data["test_x"]), net(x[idx]))
    # arrays: a table of numbers only goes in as an array
    np.savez(tmp_path / "a.npz", x=np.random.default_rng(0).normal(size=(80, 3)).astype(np.float32),
             y=np.arange(80) % 2)
    cfg2 = TrainConfig(data_file=str(tmp_path / "a.npz"), epochs=1, **SMALL)
    train(cfg2, tmp_path / "arr", quiet=True, log=lambda s: None)
    m2 = bbb.runs.load_model(tmp_path / "arr")
    raw = torch.from_numpy(np.random.default_rng(1).normal(size=(5, 3)))
    torch.testing.assert_close(U.predict(m2, raw, 4, generator=0), U.predict(m2.network, m2.encode(raw), 4,
                                                                             generator=0))


def test_load_model_of_an_image_run_takes_raw_pixels(tmp_path):
    g = torch.Generator().manual_seed(0)
    pixels = {s: torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
              for s, n in (("train", 64), ("val", 16), ("test", 16))}
    data = {f"{s}_x": p.flatten(1).float() / 126.0 for s, p in pixels.items()}
    data.update({f"{s}_y": torch.randint(0, 10, (p.shape[0],), generator=g) for s, p in pixels.items()})
    data["num_classes"] = torch.tensor(10)
    cfg = TrainConfig(epochs=1, **SMALL)
    train(cfg, tmp_path / "run", data=data, quiet=True, log=lambda s: None)
    model = bbb.runs.load_model(tmp_path / "run")
    net, _ = load_run(tmp_path / "run")
    images = pixels["test"]
    with torch.no_grad():
        want = net(data["test_x"])  # the run's evaluation path: flat pixels / scale
        torch.testing.assert_close(model(images), want)
        torch.testing.assert_close(model(images.float() / 255.0), want)
        torch.testing.assert_close(model(images.numpy()), want)
        torch.manual_seed(0)
        a = U.predict(model, images, 3)  # the library's predict takes the raw images too
        torch.manual_seed(0)
        torch.testing.assert_close(a, U.predict(net, data["test_x"], 3))
    assert model.classes == [str(c) for c in range(10)]


def test_a_run_reads_its_file_again_for_the_task_it_was_trained_for(tmp_path):
    # an .npz's float y of whole numbers now needs the task said; a run whose task was inferred (config
    # task None, as a bbb before that rule wrote it) must still read its file: load_split takes the
    # task from the run's recorded preprocessing
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 3))
    np.savez(tmp_path / "counts.npz", x=x, y=np.round(5 + 3 * x[:, 0]))
    cfg = TrainConfig(data_file=str(tmp_path / "counts.npz"), task="regression", epochs=1, **SMALL)
    train(cfg, tmp_path / "r", quiet=True, log=lambda s: None)
    _, stored = load_run(tmp_path / "r")
    older = stored.replace(task=None)
    pre = json.loads((tmp_path / "r" / "config.json").read_text())["preprocess"]
    data, again = load_split(older, pre)
    assert again.task == "regression" and data["test_y"].dtype == torch.float32
    with pytest.raises(UserError, match="whole numbers"):  # a new run must still say
        load_split(older, None, new_run=True)


def test_resuming_with_the_task_the_run_inferred_is_the_same_run(tmp_path):
    # "cannot resume: setting 'task' was None, now 'regression'" of a run trained for regression
    path = regression_csv(tmp_path / "t.csv", n=80)
    cfg = TrainConfig(data_file=str(path), target="y", epochs=1, **SMALL)
    train(cfg, tmp_path / "r", quiet=True, log=lambda s: None)
    s = train(cfg.replace(task="regression", epochs=2), tmp_path / "r", resume=True, quiet=True, log=lambda s: None)
    assert s["epochs"] == 2 and s["task"] == "regression"
    with pytest.raises(UserError, match="'task'"):  # another task is another run
        train(cfg.replace(task="classification", epochs=3), tmp_path / "r", resume=True, quiet=True,
              log=lambda s: None)


def test_the_order_of_ignored_columns_changes_nothing(tmp_path):
    # --ignore b a was refused against --ignore a b: on resume ("setting 'ignore_columns' was ['x2',
    # 'kind'], now ['kind', 'x2']") and as an ensemble's members ("share their data and split")
    path = regression_csv(tmp_path / "t.csv", n=80)
    cfg = TrainConfig(data_file=str(path), target="y", epochs=1, ignore_columns=["x2", "kind"], **SMALL)
    train(cfg, tmp_path / "a", quiet=True, log=lambda s: None)
    other = cfg.replace(ignore_columns=["kind", "x2", "kind"], epochs=2)
    assert train(other, tmp_path / "a", resume=True, quiet=True, log=lambda s: None)["epochs"] == 2
    train(other.replace(seed=1), tmp_path / "b", quiet=True, log=lambda s: None)
    assert len(bbb.load_ensemble([tmp_path / "a", tmp_path / "b"]).members) == 2
    with pytest.raises(UserError, match="ignore_columns"):  # other columns are another split
        train(cfg.replace(ignore_columns=["x2"], epochs=3), tmp_path / "a", resume=True, quiet=True,
              log=lambda s: None)


def test_runs_of_one_file_in_two_places_are_an_ensemble(tmp_path):
    # a copy of the table (or the table moved between the runs) was "trained with data_file ... and ...:
    # an ensemble's members share their data and split", though its rows and split are the same
    path = regression_csv(tmp_path / "t.csv", n=80)
    (tmp_path / "moved").mkdir()
    copy = tmp_path / "moved" / "copy.csv"
    copy.write_bytes(path.read_bytes())
    cfg = TrainConfig(data_file=str(path), target="y", epochs=1, **SMALL)
    train(cfg, tmp_path / "a", quiet=True, log=lambda s: None)
    train(cfg.replace(data_file=str(copy), seed=1), tmp_path / "b", quiet=True, log=lambda s: None)
    ens = bbb.load_ensemble([tmp_path / "a", tmp_path / "b"])
    x, _, _ = ens.encode_csv(copy)
    assert ens.sample_outputs(x, 2).shape[1] == 80
    other = regression_csv(tmp_path / "other.csv", n=80, seed=1)  # another file's rows: refused
    train(cfg.replace(data_file=str(other), seed=2), tmp_path / "c", quiet=True, log=lambda s: None)
    with pytest.raises(UserError, match="data_file"):
        bbb.load_ensemble([tmp_path / "a", tmp_path / "c"])
