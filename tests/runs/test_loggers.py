"""Experiment loggers (bbb.runs.loggers): the TrainLogger protocol that train() calls each epoch,
TensorBoard's event files in RUN/tb/ read back with tensorboard's own EventAccumulator, a resumed
run's curves without duplicates, and ``--log tensorboard`` without the package: one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import bbb.runs.model as RM
from bbb.cli.common import add_log
from bbb.errors import UserError
from bbb.runs import TensorBoardLogger, TrainConfig, TrainLogger, train
from bbb.runs.loggers import LOGGERS, SCALARS, make_loggers
from testkit import blobs, run_main

QUIET = {"quiet": True, "log": lambda s: None}


def tiny_cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"hidden": [8], "epochs": 2, "batch_size": 64, "lr": 1e-2, "device": "cpu",
                          "eval_samples": 2, **kw})


class Recorder(TrainLogger):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, run_dir, epoch, config):
        self.calls.append(("start", Path(run_dir), epoch, config["hidden"]))

    def log_epoch(self, epoch, scalars, histograms):
        self.calls.append(("epoch", epoch, dict(scalars), {k: v.shape for k, v in histograms.items()}))

    def close(self):
        self.calls.append(("close",))


def accumulator(run: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def test_train_calls_every_logger_each_epoch(tmp_path):
    rec = Recorder()
    train(tiny_cfg(test_each_epoch=True), tmp_path / "r", data=blobs(), loggers=[rec], **QUIET)
    assert rec.calls[0] == ("start", tmp_path / "r", 0, [8]) and rec.calls[-1] == ("close",)
    epochs = [c for c in rec.calls if c[0] == "epoch"]
    assert [c[1] for c in epochs] == [1, 2]
    scalars = epochs[0][2]
    assert set(scalars) == set(SCALARS)
    assert scalars["lr"] == pytest.approx(1e-2) and scalars["train/kl"] > 0 and scalars["train/elbo"] < 0
    # 12 features -> 8 -> 3 classes: one sigma and one SNR histogram per posterior of each layer
    assert epochs[0][3]["sigma/layers.0.weight"] == (8 * 12,)
    assert epochs[0][3]["snr_db/layers.1.bias"] == (3,)


def test_a_network_without_bayesian_layers_logs_no_histograms(tmp_path):
    rec = Recorder()
    train(tiny_cfg(method="sgd", epochs=1), tmp_path / "r", data=blobs(), loggers=[rec], **QUIET)
    (_, _, scalars, hists), = [c for c in rec.calls if c[0] == "epoch"]
    assert hists == {} and scalars["train/kl"] == 0 and "test/error" not in scalars


def test_tensorboard_events_are_written_and_readable(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "r"
    train(tiny_cfg(epochs=2), run, data=blobs(), loggers=[TensorBoardLogger()], **QUIET)
    acc = accumulator(run)
    tags = acc.Tags()
    assert {"train/elbo", "train/nll", "train/kl", "val/error", "lr"} <= set(tags["scalars"])
    assert [e.step for e in acc.Scalars("train/elbo")] == [1, 2]
    assert {"sigma/layers.0.weight", "snr_db/layers.0.weight", "sigma/layers.1.weight"} <= set(tags["histograms"])
    h = acc.Histograms("sigma/layers.0.weight")[0].histogram_value
    assert h.num == 8 * 12 and h.min > 0
    # the written numbers are the run's: metrics.csv's loss with the sign of the ELBO
    import csv
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert acc.Scalars("train/elbo")[1].value == pytest.approx(-float(rows[1]["train_loss"]), rel=1e-5)


def test_a_resumed_run_continues_the_same_curves(tmp_path):
    pytest.importorskip("tensorboard")
    run, data = tmp_path / "r", blobs()
    train(tiny_cfg(epochs=1), run, data=data, loggers=[TensorBoardLogger()], **QUIET)
    train(tiny_cfg(epochs=3), run, data=data, resume=True, loggers=[TensorBoardLogger()], **QUIET)
    assert [e.step for e in accumulator(run).Scalars("train/nll")] == [1, 2, 3]


def test_a_run_started_anew_replaces_the_old_curves(tmp_path):
    pytest.importorskip("tensorboard")
    run, data = tmp_path / "r", blobs()
    train(tiny_cfg(epochs=2), run, data=data, loggers=[TensorBoardLogger()], **QUIET)
    train(tiny_cfg(epochs=1, lr=5e-3), run, data=data, overwrite=True, loggers=[TensorBoardLogger()], **QUIET)
    assert [e.step for e in accumulator(run).Scalars("train/nll")] == [1]
    assert len(list((run / "tb").iterdir())) == 1


def test_cli_log_tensorboard(capsys, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    monkeypatch.setattr(RM, "load_data", lambda cfg: blobs())
    run = tmp_path / "r"
    rc, _, err = run_main(capsys, "train", "--epochs", "1", "--hidden", "8", "--device", "cpu", "--eval-samples",
                          "2", "--quiet", "--log", "tensorboard", "--out", str(run))
    assert rc == 0, err
    assert [e.step for e in accumulator(run).Scalars("val/error")] == [1]
    assert "log" not in json.loads((run / "config.json").read_text())  # not a training setting


def test_without_tensorboard_the_flag_is_one_line_saying_how_to_install(capsys, tmp_path, monkeypatch):
    for mod in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError
    with pytest.raises(UserError, match=r"pip install tensorboard"):
        TensorBoardLogger()
    run = tmp_path / "r"
    rc, _, err = run_main(capsys, "train", "--epochs", "1", "--out", str(run), "--log", "tensorboard")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "pip install tensorboard" in err
    assert not run.exists()  # refused before anything was written


def test_the_cli_names_every_logger_and_an_unknown_name_is_refused():
    import argparse

    p = argparse.ArgumentParser()
    add_log(p)
    (action,) = [a for a in p._actions if a.dest == "log"]
    assert list(action.choices) == list(LOGGERS)
    with pytest.raises(UserError, match="unknown logger 'wandb'"):
        make_loggers(["wandb"])
    assert make_loggers(None) == []


def test_a_logger_error_stops_training_with_the_epoch_kept(tmp_path):
    class Broken(TrainLogger):
        def log_epoch(self, epoch, scalars, histograms):
            if epoch == 2:
                raise RuntimeError("tracker down")

    run = tmp_path / "r"
    with pytest.raises(RuntimeError, match="tracker down"):
        train(tiny_cfg(epochs=3), run, data=blobs(), loggers=[Broken()], **QUIET)
    assert torch.load(run / "last.pt", weights_only=True)["epoch"] == 2


def test_every_number_of_a_metrics_row_is_a_scalar():
    from bbb.runs.loggers import epoch_scalars

    row = {"epoch": 3, "seconds": 1.5, "train_loss": 2.0, "nll": 1.5, "kl": 40.0, "val_error": None,
           "test_error": 0.1, "val_rmse": 0.7, "grad_norm": 3.0}
    assert epoch_scalars(row, 0.1) == {"train/elbo": -2.0, "train/nll": 1.5, "train/kl": 40.0, "lr": 0.1,
                                       "time/epoch_seconds": 1.5, "test/error": 0.1, "val/rmse": 0.7,
                                       "metrics/grad_norm": 3.0}
    assert epoch_scalars(row, None, "rmse")["test/rmse"] == 0.1  # a regression run's error


def test_a_regression_run_logs_its_rmse(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(120, generator=g)
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("a,b,c,y\n" + "".join(f"{r[0]:.5f},{r[1]:.5f},{r[2]:.5f},{t:.5f}\n"
                                              for r, t in zip(x.tolist(), y.tolist())))
    rec = Recorder()
    train(tiny_cfg(data_file=str(csv_file), target="y", task="regression"), tmp_path / "r", loggers=[rec], **QUIET)
    (_, _, scalars, hists), *_ = [c for c in rec.calls if c[0] == "epoch"]
    assert "val/rmse" in scalars and "val/error" not in scalars and scalars["val/rmse"] > 0
    assert any(k.startswith("sigma/") for k in hists)


def test_demo_log_tensorboard(capsys, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    import bbb.cli as C

    monkeypatch.setattr(RM, "load_data", lambda cfg: blobs())
    for key, value in (("hidden", [8]), ("batch_size", 64), ("lr", 1e-2)):
        monkeypatch.setitem(C.DEMO_SETTINGS, key, value)
    run = tmp_path / "demo"
    rc, _, err = run_main(capsys, "demo", "--out", str(run), "--epochs", "2", "--device", "cpu", "--quiet",
                          "--log", "tensorboard")
    assert rc == 0, err
    acc = accumulator(run)
    assert [e.step for e in acc.Scalars("test/error")] == [1, 2]  # the demo tests each epoch
    assert "snr_db/layers.1.weight" in acc.Tags()["histograms"]
