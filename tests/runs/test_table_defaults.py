"""Your own data's defaults (issue 72, items 5, 6, 7, 12n): the best checkpoint chosen by validation
NLL (``select_by``), a table's own defaults beside MNIST's unchanged ones, the split checked before
anything is written, and no torch.compile for a table by default."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bbb.errors import UserError
from bbb.runs import TrainConfig, load_checkpoint, load_run, read_metrics, train
from bbb.runs.checkpoint import improves
from bbb.runs.config import DATA_DEFAULTS, METHOD_DATA_DEFAULTS, METHOD_DEFAULTS, STORED_BEFORE, resume_conflicts
from bbb.runs.model import build_model
from bbb.runs.optim import make_optimizer
from testkit import blobs, run_main

QUIET = {"quiet": True, "log": lambda s: None}
MNIST = {"hidden": [400, 400], "prior": "mixture", "kl_weighting": "blundell", "epochs": 10, "lr": 1e-3,
         "batch_size": 128, "select_by": "error"}


def table(path: Path, n: int = 200, seed: int = 0) -> Path:
    """A classification table: two numbers, a text column, a noisy label (errors tie often)."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "kind", "label"])
        for i in range(n):
            x1, x2, kind = rng.normal(), rng.normal(), ["a", "b", "c"][i % 3]
            w.writerow([f"{x1:.4f}", f"{x2:.4f}", kind, "up" if x1 + x2 + rng.normal() > 0 else "down"])
    return path


# -- item 6: the defaults by kind of data --------------------------------------------------------


def test_mnist_defaults_unchanged_and_a_table_has_its_own():
    cfg = TrainConfig()
    assert {k: getattr(cfg, k) for k in MNIST} == MNIST
    own = TrainConfig(data_file="t.csv").to_dict()
    assert {k: own[k] for k in DATA_DEFAULTS["file"]} == DATA_DEFAULTS["file"]
    assert own["hidden"] != MNIST["hidden"] and own["select_by"] == "nll"
    # an explicit value wins, also where it equals MNIST's default
    given = TrainConfig(data_file="t.csv", hidden=[400, 400], prior="mixture", select_by="error")
    assert given.hidden == [400, 400] and given.prior == "mixture" and given.select_by == "error"
    assert given.epochs == DATA_DEFAULTS["file"]["epochs"]
    with pytest.raises(UserError, match="select_by"):
        TrainConfig(select_by="loss")


def test_ivon_and_dropout_have_a_tables_defaults():
    """MNIST's IVON (lr 0.5, hess-init 0.5) diverges on a table of a few hundred rows and its
    dropout (0.2 / 0.5) did worst on one: a table takes the settings its validation grid chose."""
    ivon = TrainConfig(data_file="t.csv", method="ivon")
    want = METHOD_DATA_DEFAULTS[("ivon", "file")]
    assert (ivon.lr, ivon.hess_init) == (want["lr"], want["hess_init"]) == (0.1, 2.0)
    assert ivon.weight_decay == METHOD_DEFAULTS["ivon"]["weight_decay"]
    mnist_ivon = TrainConfig(method="ivon")
    mnist = METHOD_DEFAULTS["ivon"]
    assert (mnist_ivon.lr, mnist_ivon.hess_init) == (mnist["lr"], mnist["hess_init"])
    assert TrainConfig(data_file="t.csv", method="ivon", lr=0.5, hess_init=0.5).lr == 0.5  # given: wins
    assert TrainConfig(data_file="t.csv", method="bbb").lr == 1e-3  # the other methods keep theirs
    drop = TrainConfig(data_file="t.csv", method="dropout")
    assert (drop.dropout_input, drop.dropout_hidden) == (0.0, 0.05)
    assert (TrainConfig(method="dropout").dropout_input, TrainConfig(method="dropout").dropout_hidden) == (0.2, 0.5)
    assert TrainConfig(data_file="t.csv", method="dropout", dropout_hidden=0.5).dropout_hidden == 0.5


def test_a_table_run_of_the_old_dropout_defaults_resumes_with_them(tmp_path, capsys):
    path = table(tmp_path / "t.csv", n=120)
    out = tmp_path / "r"
    rc, _, err = run_main(capsys, "train", "--csv", str(path), "--target", "label", "--method", "dropout",
                          "--dropout-input", "0.2", "--dropout-hidden", "0.5", "--epochs", "1", "--device", "cpu",
                          "--out", str(out), "--quiet")
    assert rc == 0, err
    rc, _, err = run_main(capsys, "train", "--resume", "--out", str(out), "--epochs", "2", "--quiet")
    assert rc == 0, err
    conf = json.loads((out / "config.json").read_text())
    assert (conf["dropout_input"], conf["dropout_hidden"], conf["epochs"]) == (0.2, 0.5, 2)


def test_cli_table_run_records_the_defaults_used_and_flags_win(tmp_path, capsys):
    path = table(tmp_path / "t.csv", n=120)
    rc, _, err = run_main(capsys, "train", "--csv", str(path), "--target", "label", "--epochs", "2", "--lr", "0.005",
                          "--device", "cpu", "--out", str(tmp_path / "r"), "--quiet")
    assert rc == 0, err
    conf = json.loads((tmp_path / "r" / "config.json").read_text())
    assert conf["epochs"] == 2 and conf["lr"] == 0.005  # the flags win
    for k in ("hidden", "prior", "kl_weighting", "batch_size", "select_by"):  # the table's defaults
        assert conf[k] == DATA_DEFAULTS["file"][k], k
    rc, out, _ = run_main(capsys, "train", "--help")
    assert rc == 0 and "--select-by" in out and "--csv/--npz: gaussian" in " ".join(out.split())


# -- item 5: the best checkpoint ---------------------------------------------------------------


def test_a_nan_validation_number_never_becomes_the_best_epoch():
    """Before, a NaN first epoch (val_nll NaN: outputs that overflowed) stayed best.pt for good, as
    no number compares below NaN, and a NaN later epoch was harmless only by that same accident."""
    nan = float("nan")
    assert improves("nll", {"val_error": 0.5, "val_nll": 0.9}, {"epoch": 1, "val_error": 0.9, "val_nll": nan})
    assert improves("error", {"val_error": 0.5, "val_nll": 0.9}, {"epoch": 1, "val_error": nan, "val_nll": 1.0})
    assert not improves("nll", {"val_error": 0.1, "val_nll": nan}, {"epoch": 1, "val_error": 0.5, "val_nll": 0.9})
    assert not improves("nll", {"val_error": 0.1, "val_nll": nan}, {"epoch": 1, "val_error": 0.5, "val_nll": nan})


def test_improves_by_nll_or_error_ties_to_the_earlier_epoch():
    best = {"epoch": 2, "val_error": 0.1, "val_nll": 0.5}
    assert improves("nll", {"val_error": 0.2, "val_nll": 0.4}, best)
    assert not improves("nll", {"val_error": 0.0, "val_nll": 0.5}, best)  # a tie, an error by luck
    assert not improves("error", {"val_error": 0.1, "val_nll": 0.1}, best)  # a tie: the paper's earlier epoch
    assert improves("error", {"val_error": 0.05, "val_nll": 0.9}, best)
    assert improves("nll", {"val_error": None, "val_nll": None}, best)  # no validation data: the last epoch
    assert improves("nll", {"val_error": 0.3, "val_nll": 0.9}, {"epoch": 4, "val_error": 0.1})  # an older record


@pytest.mark.parametrize("select_by", ["nll", "error"])
def test_best_checkpoint_follows_select_by(tmp_path, select_by):
    path = table(tmp_path / "t.csv")
    cfg = TrainConfig(data_file=str(path), target="label", epochs=12, hidden=[8], lr=0.05, batch_size=16,
                      device="cpu", eval_samples=2, select_by=select_by)
    summary = train(cfg, tmp_path / "r", **QUIET)
    rows = read_metrics(tmp_path / "r")
    key = "val_nll" if select_by == "nll" else "val_error"
    values = [r[key] for r in rows]
    assert all(v is not None for v in values)
    assert summary["best_epoch"] == 1 + values.index(min(values))  # the first of the lowest
    assert summary["selected_by"] == select_by
    assert load_checkpoint(tmp_path / "r" / "best.pt")["epoch"] == summary["best_epoch"]
    # val_nll is the mean-weights cross-entropy per validation row
    model, _ = load_run(tmp_path / "r", "best")
    from bbb.runs.model import load_split
    data, _ = load_split(cfg)
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(model(data["val_x"]), data["val_y"])
    assert summary["best_val_nll"] == pytest.approx(float(nll), rel=1e-4)


def test_regression_val_nll_is_in_the_targets_units(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(150, 2))
    y = 100.0 * (x[:, 0] - x[:, 1]) + 10 * rng.normal(size=150)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    cfg = TrainConfig(data_file=str(tmp_path / "a.npz"), epochs=3, hidden=[8], batch_size=16, device="cpu",
                      eval_samples=2)
    s = train(cfg, tmp_path / "r", **QUIET)
    assert s["selected_by"] == "nll"
    assert read_metrics(tmp_path / "r")[s["best_epoch"] - 1]["val_nll"] == s["best_val_nll"]
    # a Gaussian NLL of a target with sd ~140 is above log(140) - a unit-free one would be near 1
    assert s["best_val_nll"] > 4


def _as_older_bbb(run: Path) -> None:
    """Rewrite a run as a bbb before select_by wrote it: no select_by, no val_nll anywhere."""
    for name in ("last.pt", "best.pt"):
        ckpt = torch.load(run / name, weights_only=True)
        del ckpt["config"]["select_by"]
        ckpt["metrics"] = [{k: v for k, v in r.items() if k != "val_nll"} for r in ckpt["metrics"]]
        ckpt["best"] = {k: v for k, v in ckpt["best"].items() if k != "val_nll"}
        torch.save(ckpt, run / name)
    conf = json.loads((run / "config.json").read_text())
    del conf["select_by"]
    (run / "config.json").write_text(json.dumps(conf))
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("".join(",".join(line.split(",")[:7]) + "\n" for line in lines))


def test_an_older_table_run_loads_and_resumes_by_validation_error(tmp_path, capsys):
    path = table(tmp_path / "t.csv", n=120)
    run = tmp_path / "r"
    rc, _, err = run_main(capsys, "train", "--csv", str(path), "--target", "label", "--epochs", "2", "--hidden", "8",
                          "--device", "cpu", "--out", str(run), "--quiet")
    assert rc == 0, err
    _as_older_bbb(run)
    assert [r["val_nll"] for r in read_metrics(run)] == [None, None]  # the older file still reads
    _, cfg = load_run(run)
    assert cfg.select_by == STORED_BEFORE["select_by"] == "error"
    stored = json.loads((run / "config.json").read_text())
    assert resume_conflicts(stored, cfg) == []
    rc, _, err = run_main(capsys, "train", "--resume", "--out", str(run), "--epochs", "3", "--quiet")
    assert rc == 0, err
    conf = json.loads((run / "config.json").read_text())
    assert conf["select_by"] == "error" and json.loads((run / "summary.json").read_text())["epochs"] == 3
    rows = read_metrics(run)
    assert rows[0]["val_nll"] is None and rows[2]["val_nll"] is not None


@pytest.mark.parametrize("budget", ["smoke", "paper"])
def test_mnist_reproduction_keeps_error_selection(budget):
    """The paper's early stopping: every run of ``bbb reproduce mnist`` keeps the best validation error."""
    from bbb.experiments.mnist import plan

    jobs = [j for part in plan.plan_jobs(plan.ReproduceConfig(budget=budget, out="runs/x")) for j in part]
    assert jobs and {j.config.select_by for j in jobs} == {"error"}


# -- item 7: the split checked before training --------------------------------------------------


@pytest.mark.parametrize("argv, words", [
    (["--test-fraction", "0"], ["0 test rows", "--test-fraction"]),
    (["--val-fraction", "0.02"], ["0 validation", "--val-fraction 0.02"]),
])
def test_a_split_without_rows_is_refused_before_anything_is_written(tmp_path, capsys, argv, words):
    path = table(tmp_path / "t.csv", n=30)
    out = tmp_path / "r"
    cmd = ["train", "--csv", str(path), "--target", "label", "--epochs", "1", "--device", "cpu", "--out", str(out),
           "--quiet"]
    rc, _, err = run_main(capsys, *cmd, *argv)
    assert rc != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert all(w in err for w in words), err
    assert not out.exists()  # no half-written run: the same command may be given again
    rc, _, err = run_main(capsys, *cmd)
    assert rc == 0, err


def test_too_few_rows_is_refused_with_the_sizes(tmp_path):
    path = table(tmp_path / "t.csv", n=8)
    with pytest.raises(UserError, match="training, 0 validation and 0 test rows") as info:
        train(TrainConfig(data_file=str(path), target="label", epochs=1, device="cpu"), tmp_path / "r", **QUIET)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "r").exists()
    with pytest.raises(UserError, match="0 test examples"):  # injected data too
        data = blobs(32, 8, 0, d=4, c=2)
        train(TrainConfig(hidden=[4], epochs=1, device="cpu"), tmp_path / "r2", data=data, **QUIET)


# -- item 12n: no compile for a table by default -------------------------------------------------


def test_a_table_run_does_not_compile_by_default(monkeypatch):
    monkeypatch.delenv("BBB_COMPILE", raising=False)
    big = {"hidden": [400, 400], "device": "cpu"}  # past the CPU's compile threshold
    own = TrainConfig(data_file="t.csv", **big)
    assert not make_optimizer(own, build_model(own, 20, 3, "classification")).compiled
    image = TrainConfig(**big)
    assert make_optimizer(image, build_model(image, 20, 3, "classification")).compiled  # MNIST keeps its default
    monkeypatch.setenv("BBB_COMPILE", "1")  # an explicit switch wins
    assert make_optimizer(own, build_model(own, 20, 3, "classification")).compiled


def test_a_stored_file_run_with_a_data_dir_still_loads(tmp_path):
    """A run written before --data-dir was refused for a file's run may hold both: the folder was
    never read for it, so it loads without it; a new configuration with both is one line."""
    stored = {"data_file": str(tmp_path / "t.csv"), "data_dir": "/somewhere", "target": "y",
              "task": "regression"}
    cfg = TrainConfig.from_stored(stored)
    assert cfg.data_dir is None and cfg.data_file == str((tmp_path / "t.csv").resolve())
    with pytest.raises(UserError, match="--data-dir"):
        TrainConfig(**stored)
