"""``--log tensorboard`` on the experiments that train outside bbb.runs.train: ``bbb regression``
(each network's curves in OUT/tb/bbb and OUT/tb/standard, live each epoch) and ``bbb bandit``
(each agent and seed's regret and arm pulls in OUT/tb/AGENT-seedS, written when the run ends or a
``--merge`` writes the merged run); without the tensorboard package the flag is one line before
anything trains. ``bbb reproduce uci`` and ``lora`` (written from their job files at the end):
tests/applications/experiments/test_reproduce_uci.py and test_reproduce_lora.py. Tiny sizes only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bbb.errors import UserError
from bbb.experiments.bandit import run_bandit
from bbb.experiments.regression import RegressionConfig
from testkit import read_csv, run_main, tiny_bandit_config, tiny_mushrooms

REGRESSION = ["regression", "--epochs", "12", "--n-train", "16", "--hidden", "8", "--samples", "8",
              "--device", "cpu", "--log", "tensorboard"]


def accumulator(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def test_regression_logs_each_network_each_epoch(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    rc, _, err = run_main(capsys, *REGRESSION, "--out", str(out))
    assert rc == 0, err
    bbb, std = accumulator(out / "tb" / "bbb"), accumulator(out / "tb" / "standard")
    assert {"train/elbo", "train/nll", "train/kl", "train/noise_sigma", "lr"} <= set(bbb.Tags()["scalars"])
    assert [e.step for e in bbb.Scalars("train/elbo")] == list(range(1, 13))
    assert all(e.value < 0 for e in bbb.Scalars("train/elbo")) and bbb.Scalars("lr")[0].value == pytest.approx(1e-2)
    assert {"sigma/layers.0.weight", "snr_db/layers.1.weight"} <= set(bbb.Tags()["histograms"])
    # the standard network has no KL and no weight posteriors
    assert set(std.Tags()["scalars"]) == {"train/nll", "train/noise_sigma", "lr"} and not std.Tags()["histograms"]
    assert [e.step for e in std.Scalars("train/nll")] == list(range(1, 13))
    # a rerun into the same folder (--overwrite) replaces the curves, not doubles them
    assert run_main(capsys, *REGRESSION, "--out", str(out), "--epochs", "3", "--overwrite")[0] == 0
    assert [e.step for e in accumulator(out / "tb" / "bbb").Scalars("train/nll")] == [1, 2, 3]


def test_bandit_logs_each_member_when_the_run_ends(tmp_path):
    pytest.importorskip("tensorboard")
    ctx, edible = tiny_mushrooms()
    out = tmp_path / "b"
    cfg = tiny_bandit_config(steps=40, agents=("bbb", "greedy"), log_every=10, loggers=("tensorboard",))
    run_bandit(cfg, contexts=ctx, edible=edible, out=str(out))
    rows = read_csv(out / "regret.csv")
    assert sorted(p.name for p in (out / "tb").iterdir()) == ["bbb-seed0", "bbb-seed1", "greedy-seed0",
                                                             "greedy-seed1"]
    acc = accumulator(out / "tb" / "greedy-seed1")
    assert set(acc.Tags()["scalars"]) == {"regret/cumulative", "regret/cumulative_expected", "arms/eat_pulls",
                                          "arms/pass_pulls"}
    mine = [r for r in rows if r["agent"] == "greedy" and r["seed"] == "1"]
    assert [e.step for e in acc.Scalars("regret/cumulative")] == [int(r["step"]) for r in mine] == [10, 20, 30, 40]
    assert [e.value for e in acc.Scalars("regret/cumulative")] == pytest.approx(
        [float(r["cumulative_regret"]) for r in mine])
    eat = [e.value for e in acc.Scalars("arms/eat_pulls")]
    assert [a + b.value for a, b in zip(eat, acc.Scalars("arms/pass_pulls"))] == [10, 20, 30, 40]


def test_bandit_merge_writes_the_merged_rows_events(tmp_path, capsys, monkeypatch):
    """``bbb bandit --merge ... --log tensorboard``: the merged run's curves, as a run writes them."""
    pytest.importorskip("tensorboard")
    ctx, edible = tiny_mushrooms()
    parts = []
    for agents in (("greedy",), ("egreedy_0.05",)):
        parts.append(tmp_path / agents[0])
        run_bandit(tiny_bandit_config(steps=40, agents=agents, log_every=10, out=str(parts[-1])),
                   contexts=ctx, edible=edible)
    monkeypatch.setattr("bbb.data.load_mushroom", lambda data_dir=None: (ctx, edible))
    out = tmp_path / "merged"
    rc, _, err = run_main(capsys, "bandit", "--out", str(out), "--merge", *map(str, parts), "--log", "tensorboard")
    assert rc == 0, err
    assert sorted(p.name for p in (out / "tb").iterdir()) == ["egreedy_0.05-seed0", "egreedy_0.05-seed1",
                                                             "greedy-seed0", "greedy-seed1"]
    mine = [r for r in read_csv(out / "regret.csv") if r["agent"] == "egreedy_0.05" and r["seed"] == "0"]
    acc = accumulator(out / "tb" / "egreedy_0.05-seed0")
    assert [(e.step, e.value) for e in acc.Scalars("regret/cumulative")] == [
        (int(r["step"]), pytest.approx(float(r["cumulative_regret"]))) for r in mine]
    assert [int(r["step"]) for r in mine] == [10, 20, 30, 40]


def test_without_tensorboard_the_experiments_refuse_in_one_line(tmp_path, monkeypatch, capsys):
    for mod in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, mod, None)
    with pytest.raises(UserError, match="pip install tensorboard"):
        RegressionConfig(out=str(tmp_path / "r"), loggers=("tensorboard",)).validate()
    rc, _, err = run_main(capsys, *REGRESSION, "--out", str(tmp_path / "r"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pip install tensorboard" in err, err
    assert not (tmp_path / "r").exists()
    ctx, edible = tiny_mushrooms()
    with pytest.raises(UserError, match="pip install tensorboard"):
        run_bandit(tiny_bandit_config(loggers=("tensorboard",)), contexts=ctx, edible=edible, out=str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()
    rc, _, err = run_main(capsys, "bandit", "--out", str(tmp_path / "b"), "--log", "tensorboard")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pip install tensorboard" in err, err
    rc, _, err = run_main(capsys, "reproduce", "uci", "--out", str(tmp_path / "u"), "--log", "tensorboard")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pip install tensorboard" in err, err
    assert not (tmp_path / "u").exists()


def test_log_needs_an_output_folder():
    with pytest.raises(UserError, match="give --out"):
        RegressionConfig(loggers=("tensorboard",)).validate()
    with pytest.raises(UserError, match="give --out"):
        tiny_bandit_config(loggers=("tensorboard",)).validate()
