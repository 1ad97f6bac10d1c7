"""A run trained on tensors given in memory that are not its ``dataset``'s (``train(cfg, out, data=...)``,
a sweep's ``dataset: synthetic`` trial) records so (``data_source: memory`` in config.json and the
checkpoint), and every command that would load its data from disk says so in one line, never
MNIST's numbers for a network trained on blobs; MNIST-like tensors and old runs load as before."""

from __future__ import annotations

import json

import pytest
import torch

import bbb.sweep as S
from bbb.errors import UserError
from bbb.runs import TrainConfig, evaluate_run, load_data, train
from bbb.runs.config import IN_MEMORY, resume_conflicts
from bbb.runs.model import data_source_of
from bbb.sweep.trial import run_trial_local, trial_dir
from testkit import blobs, run_main

QUIET = {"quiet": True, "log": lambda s: None}


def tiny_cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"hidden": [8], "epochs": 1, "batch_size": 64, "lr": 1e-2, "device": "cpu",
                          "eval_samples": 2, **kw})


def _one_line_refusal(capsys, *argv: str) -> str:
    rc, out, err = run_main(capsys, *argv)
    assert rc != 0 and "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "given in memory" in lines[0], err
    return lines[0]


def test_a_run_on_tensors_in_memory_is_refused_where_its_data_would_be_loaded(tmp_path, capsys):
    run, data = tmp_path / "run", blobs()
    train(tiny_cfg(), run, data=data, **QUIET)
    config = json.loads((run / "config.json").read_text())
    assert config["dataset"] == "mnist" and config["data_source"] == IN_MEMORY
    for argv in (["evaluate", str(run), "--device", "cpu"], ["prune", str(run), "--device", "cpu"],
                 ["ood", str(run), "--device", "cpu"], ["uncertain", str(run), "--device", "cpu"]):
        _one_line_refusal(capsys, *argv)
    assert not (run / "eval.json").exists()
    # from Python, with the same tensors, it evaluates
    assert evaluate_run(run, samples=2, device="cpu", data=data)["n"] == 60
    # resumed without its tensors: refused, not trained on MNIST
    with pytest.raises(UserError, match="given in memory"):
        train(tiny_cfg(epochs=2), run, resume=True, **QUIET)
    train(tiny_cfg(epochs=2), run, data=data, resume=True, **QUIET)
    # the report names no dataset it was not trained on, and suggests no command that would load one
    rc, out, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "page.html"))
    page = (tmp_path / "page.html").read_text() if (tmp_path / "page.html").exists() else out
    assert rc == 0, err
    assert "tensors given in memory" in page and "of MNIST" not in page and "bbb evaluate" not in page


def test_synthetic_blobs_of_784_features_are_not_taken_for_mnist(tmp_path):
    cfg = tiny_cfg()
    assert data_source_of(cfg, blobs(d=784, c=4)) == IN_MEMORY
    assert data_source_of(cfg, {**blobs(d=784, c=4), "num_classes": 4}) == IN_MEMORY
    g = torch.Generator().manual_seed(0)
    splits = ("train", "val", "test")
    pixels = {f"{s}_x": torch.randint(0, 256, (20, 784), generator=g).float() / cfg.scale for s in splits}
    labels = {f"{s}_y": torch.randint(0, 10, (20,), generator=g) for s in splits}
    # with no MNIST files to compare with, whole pixels and labels 0..9 may be MNIST's images
    assert data_source_of(cfg.replace(data_dir=str(tmp_path)), {**pixels, **labels}) is None


def test_images_that_are_not_the_named_datasets_are_in_memory(data_dir):
    """Fashion-MNIST's tensors (whole pixels, labels 0..9) given under the default ``dataset="mnist"``,
    or random pixels, are not MNIST's test images: ``bbb evaluate`` would score the network on MNIST."""
    from bbb.data import mnist_splits

    cfg = tiny_cfg(data_dir=str(data_dir))
    fashion = mnist_splits("fashion-mnist", data_dir=data_dir)
    assert data_source_of(cfg, fashion) == IN_MEMORY
    assert data_source_of(cfg.replace(dataset="fashion-mnist"), fashion) is None
    mnist = mnist_splits("mnist", data_dir=data_dir)
    assert data_source_of(cfg, {k: v[100:400] for k, v in mnist.items()}) is None  # a part of MNIST
    g = torch.Generator().manual_seed(0)
    relabelled = {**mnist, "test_y": (mnist["test_y"] + 1 + torch.randint(0, 9, (10000,), generator=g)) % 10}
    assert data_source_of(cfg, relabelled) == IN_MEMORY
    noise = {**mnist, "test_x": torch.randint(0, 256, (50, 784), generator=g).float() / cfg.scale,
             "test_y": mnist["test_y"][:50]}
    assert data_source_of(cfg, noise) == IN_MEMORY


def test_a_run_on_mnist_given_in_memory_and_an_old_run_load_as_before(tmp_path, data_dir):
    cfg = tiny_cfg(train_size=256, val_size=100, data_dir=str(data_dir))
    run = tmp_path / "mnist"
    train(cfg, run, data=load_data(cfg), **QUIET)
    assert json.loads((run / "config.json").read_text())["data_source"] is None
    assert evaluate_run(run, samples=2, device="cpu")["n"] == 10000
    old = {k: v for k, v in cfg.to_dict().items() if k != "data_source"}  # a run written before the field
    assert TrainConfig.from_stored(old).data_source is None and resume_conflicts(old, cfg) == []


def test_a_synthetic_sweep_trial_says_where_its_data_came_from(tmp_path, capsys):
    space = {"params": {"dataset": "synthetic", "synthetic_dim": 16, "synthetic_train": 64, "width": 8,
                        "depth": 1, "batch_size": 32, "epochs": 1, "device": "cpu", "eval_samples": 2}}
    trial = S.expand_space(space)[0]
    run_trial_local({"trial": trial.to_dict(), "out": str(tmp_path), "threads": 1})
    d = trial_dir(tmp_path, trial.trial_id)
    assert json.loads((d / "config.json").read_text())["data_source"] == IN_MEMORY
    _one_line_refusal(capsys, "evaluate", str(d), "--device", "cpu")


def test_images_given_in_memory_unflattened_are_one_line(tmp_path):
    # images (N, 1, H, W) were read as N networks' inputs: "the engine draws 1 weight sample(s) per step"
    data = blobs()
    shaped = {k: v.reshape(v.shape[0], 1, 3, 4) if k.endswith("_x") else v for k, v in data.items()}
    with pytest.raises(UserError) as info:
        train(tiny_cfg(), tmp_path / "run", data=shaped, **QUIET)
    assert "\n" not in str(info.value) and "train_x.flatten(1)" in str(info.value)
    narrow = {**data, "val_x": data["val_x"][:, :5]}
    with pytest.raises(UserError, match="val_x has 5 features a row, train_x 12"):
        train(tiny_cfg(), tmp_path / "run2", data=narrow, **QUIET)
    assert not (tmp_path / "run" / "last.pt").exists()


def test_a_run_on_tensors_in_memory_loads_with_their_shape_and_predicts_them_as_given(tmp_path):
    """load_model of a run trained on tensors given in memory (16 features) read it as an MNIST
    image run: encode and sample_outputs refused its own inputs ("do not fit (N, 1, 28, 28)")."""
    from bbb.runs import load_model

    run, data = tmp_path / "run", blobs()
    train(tiny_cfg(), run, data=data, **QUIET)
    model = load_model(run)
    d = data["test_x"].shape[1]
    assert model.preprocess.kind == "arrays" and model.preprocess.feature_shape == [d]
    assert model.preprocess.trained_on() == "tensors given in memory"
    x = data["test_x"][:5]
    assert torch.equal(model.encode(x.numpy()), x.float())  # as given: nothing standardised
    assert model.sample_outputs(x, 3, 0).shape[:2] == (3, 5)


def test_a_run_trained_with_a_relative_data_dir_is_evaluated_from_another_folder(tmp_path, capsys, monkeypatch):
    """config.json kept --data-dir as given ('data'), where it keeps --csv absolute: evaluated or resumed from
    another folder, the run looked for MNIST under that folder's 'data'."""
    from faultkit import fake_mnist

    fake_mnist(tmp_path / "data", n_train=300, n_test=50)
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    monkeypatch.delenv("BBB_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_main(capsys, "train", "--data-dir", "data", "--val-size", "100", "--hidden", "8", "--epochs",
                          "1", "--eval-samples", "2", "--device", "cpu", "--no-compile", "--quiet", "--out", "run")
    assert rc == 0, err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data_dir"] == str((tmp_path / "data").resolve())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    rc, _, err = run_main(capsys, "evaluate", "../run", "--samples", "2", "--device", "cpu")
    assert rc == 0, err
