"""Each trial of a sweep trains on the data its settings say: an image subset of its own
``train_size``, and your own file loaded as ``bbb train`` loads it (its preprocessing recorded, its
numbers in the target's units)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import bbb.sweep as S
from bbb.errors import UserError
from bbb.runs import TrainConfig, train
from bbb.sweep.trial import trial_dir
from testkit import noisy_table, run_main


def _config(out: Path, tid: str) -> dict:
    return json.loads((trial_dir(out, tid) / "config.json").read_text())


def test_each_train_size_of_a_grid_trains_on_its_own_subset(tmp_path: Path, data_dir: Path):
    space = {"params": {"dataset": "mnist", "hidden": [4], "epochs": 1, "batch_size": 100, "device": "cpu",
                        "eval_samples": 1, "train_size": {"grid": [100, 300]}}}
    out = tmp_path / "sweep"
    rows = S.run_sweep(space, S.SweepOptions(out=out, progress=False, data_dir=str(data_dir), cpus_per_trial=1),
                       log=lambda s: None)
    assert [r["status"] for r in rows] == ["done", "done"]
    for r in rows:
        cfg = _config(out, r["trial_id"])
        assert cfg["num_train"] == r["params"]["train_size"] == cfg["train_size"]


def test_a_trial_on_your_own_csv_is_the_run_bbb_train_makes(tmp_path: Path):
    csv_path = noisy_table(tmp_path / "houses.csv")
    params = {"data_file": str(csv_path), "target": "price", "method": "sgd", "hidden": [8], "epochs": 2,
              "device": "cpu", "lr": {"grid": [0.01]}}
    out = tmp_path / "sweep"
    [row] = S.run_sweep({"params": params}, S.SweepOptions(out=out, progress=False, cpus_per_trial=1),
                        log=lambda s: None)
    alone = tmp_path / "alone"
    trained = train(TrainConfig.from_dict({**params, "lr": 0.01}), alone, quiet=True, log=lambda s: None)
    trial = json.loads((trial_dir(out, row["trial_id"]) / "summary.json").read_text())
    assert trial["test_rmse"] == trained["test_rmse"]  # the price's units, not the standardised target's
    assert _config(out, row["trial_id"])["preprocess"] == json.loads((alone / "config.json").read_text())["preprocess"]


def test_a_regression_sweep_ranks_its_trials_by_validation_nll(tmp_path: Path, capsys):
    """A regression's trials have no validation error: the sweep ranked none and wrote no best.json.
    They are ranked by the validation NLL of their summaries; the test scores are reported beside."""
    csv_path = noisy_table(tmp_path / "houses.csv")
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"params": {"data_file": str(csv_path), "target": "price", "method": "sgd",
                                            "hidden": [8], "epochs": 3, "device": "cpu",
                                            "lr": {"grid": [1e-4, 3e-2, 1e-3]}}}))
    rc, out, err = run_main(capsys, "sweep", "--space", str(space), "--out", str(tmp_path / "s"), "--quiet")
    assert rc == 0 and "3 trials: 3 done" in out, err
    table = S.read_sweep(tmp_path / "s")
    summaries = {r["trial_id"]: json.loads((tmp_path / "s" / r["trial_dir"] / "summary.json").read_text())
                 for r in table}
    for r in table:
        s = summaries[r["trial_id"]]
        assert float(r["val_nll"]) == s["best_val_nll"] and float(r["test_rmse"]) == s["test_rmse"]
        assert float(r["test_log_likelihood"]) == s["test_log_likelihood"] and r["val_error"] == ""
    nlls = [float(r["val_nll"]) for r in table]
    assert nlls == sorted(nlls) and len(set(nlls)) == 3
    best = json.loads((tmp_path / "s" / "best.json").read_text())
    assert best["trial_id"] == table[0]["trial_id"] and best["selected_by"] == "val_nll"
    assert best["test_rmse"] == summaries[best["trial_id"]]["test_rmse"] and "val_error" not in best
    assert f"best by validation NLL: trial {best['trial_id']}" in out and "warning" not in err


def test_a_sweep_without_validation_rows_is_refused(tmp_path: Path):
    csv_path = noisy_table(tmp_path / "houses.csv")
    for params in ({"data_file": str(csv_path), "target": "colour", "val_fraction": 0},
                   {"dataset": "mnist", "val_size": 0}):
        with pytest.raises(UserError, match="selects models on the validation set") as e:
            S.expand_space({"params": {**params, "method": "sgd", "epochs": 1}})
        assert "\n" not in str(e.value)


def test_a_rerun_on_a_changed_file_is_refused(tmp_path: Path):
    """A finished trial's row is its file's: the same --out over an edited file is a one-line error,
    never the old file's numbers ranked beside the new file's."""
    csv_path = noisy_table(tmp_path / "houses.csv")
    params = {"data_file": str(csv_path), "target": "colour", "method": "sgd", "hidden": [4], "epochs": 1,
              "device": "cpu", "seed": {"grid": [0]}}
    out = tmp_path / "sweep"
    opts = S.SweepOptions(out=out, progress=False, cpus_per_trial=1)
    S.run_sweep({"params": params}, opts, log=lambda s: None)
    assert S.run_sweep({"params": params}, opts, log=lambda s: None)[0]["status"] == "done"  # unchanged: skipped
    before = {name: (out / name).read_bytes() for name in ("sweep.csv", "space.json", "best.json")}
    noisy_table(csv_path, n=150)
    with pytest.raises(UserError, match="changed since trial") as e:
        S.run_sweep({"params": {**params, "seed": {"grid": [0, 1]}}}, opts, log=lambda s: None)
    assert "another --out" in str(e.value) and "\n" not in str(e.value)
    assert {name: (out / name).read_bytes() for name in before} == before


def test_the_dry_run_cost_counts_a_subset_s_images():
    from bbb.sweep.cost import epoch_seconds_estimate

    full = epoch_seconds_estimate({"dataset": "mnist", "width": 400})
    assert epoch_seconds_estimate({"dataset": "mnist", "width": 400, "train_size": 5000}) == pytest.approx(
        full * 5000 / 50_000)


def test_the_dry_run_cost_of_a_trial_on_your_file_counts_its_rows_and_columns(tmp_path: Path):
    """A CSV of 200 rows was priced as MNIST's 50,000 images of 784 pixels."""
    from bbb.cli.cost import epoch_seconds
    from bbb.sweep.cost import REF_EPOCH_SECONDS, epoch_seconds_estimate

    csv_path = noisy_table(tmp_path / "houses.csv")
    params = {"data_file": str(csv_path), "target": "price", "method": "bbb", "hidden": [50]}
    got = epoch_seconds_estimate(params, 2 * REF_EPOCH_SECONDS)
    # 160 training rows (80%), 4 inputs (x1, x2, colour one-hot), a heteroscedastic regression's 2 outputs
    assert got == pytest.approx(2 * epoch_seconds("bbb", [50], 1, 160, 4, 2))
    assert got < epoch_seconds_estimate({**params, "data_file": None, "target": None, "dataset": "mnist"}) / 100


def test_a_worker_caches_one_split_at_a_time():
    from bbb.sweep import cost

    first, second = (S.resolve_params({"dataset": "synthetic", "split_seed": s}) for s in (0, 1))
    a = cost.trial_data(*first, None)
    assert cost.trial_data(*first, None) is a  # the same split: cached
    b = cost.trial_data(*second, None)
    assert not torch.equal(a["test_x"], b["test_x"])
    again = cost.trial_data(*first, None)  # loaded again: the second split took its place
    assert again is not a and torch.equal(again["test_x"], a["test_x"])


def test_classifier_trials_that_chose_their_epochs_by_nll_are_ranked_by_it(tmp_path: Path, capsys):
    """A table's classifier picks its best epoch by validation NLL (--select-by's default there), but
    the sweep ranked its trials by validation error: the trial best by its own criterion could rank
    below one that is not. Ranked by NLL now where every classifier trial chose by NLL; by error
    where any chose by error (MNIST's default) or did not record it (an older bbb)."""
    from bbb.sweep.results import write_results
    from bbb.sweep.space import Trial, TrialStatus

    trials = [Trial(f"t{i}", i, {"lr": lr}) for i, lr in enumerate((0.1, 0.01))]
    rows = {"t0": {"trial_id": "t0", "status": TrialStatus.DONE.value, "val_error": 0.10, "val_nll": 0.40,
                   "selected_by": "nll", "epochs_run": 3, "best_epoch": 2, "seconds": 1.0, "trial_dir": "trials/t0",
                   "test_error": 0.11, "test_error_mc": 0.11, "test_nll": 0.41},
            "t1": {"trial_id": "t1", "status": TrialStatus.DONE.value, "val_error": 0.12, "val_nll": 0.30,
                   "selected_by": "nll", "epochs_run": 3, "best_epoch": 3, "seconds": 1.0, "trial_dir": "trials/t1",
                   "test_error": 0.12, "test_error_mc": 0.12, "test_nll": 0.31}}
    out = tmp_path / "s"
    out.mkdir()
    write_results(out, trials, rows, "local")
    best = json.loads((out / "best.json").read_text())
    assert best["trial_id"] == "t1" and best["selected_by"] == "val_nll" and best["val_nll"] == 0.30
    assert [r["trial_id"] for r in S.read_sweep(out)] == ["t1", "t0"]
    for t0 in ({"selected_by": "error"}, {"selected_by": None}):  # by error, as t0's epoch was chosen
        write_results(out, trials, {**rows, "t0": {**rows["t0"], **t0}}, "local")
        best = json.loads((out / "best.json").read_text())
        assert best["trial_id"] == "t0" and best["selected_by"] == "val_error"
    # a classifier sweep on a table, end to end: its trials chose by NLL, best.json says so
    csv_path = noisy_table(tmp_path / "houses.csv")
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"params": {"data_file": str(csv_path), "target": "colour", "method": "sgd",
                                            "hidden": [4], "epochs": 2, "device": "cpu",
                                            "lr": {"grid": [1e-3, 3e-2]}}}))
    rc, text, err = run_main(capsys, "sweep", "--space", str(space), "--out", str(tmp_path / "e2e"), "--quiet")
    assert rc == 0, err
    table = S.read_sweep(tmp_path / "e2e")
    nlls = [float(r["val_nll"]) for r in table]
    best = json.loads((tmp_path / "e2e" / "best.json").read_text())
    assert nlls == sorted(nlls) and best["selected_by"] == "val_nll" and best["trial_id"] == table[0]["trial_id"]
    assert f"best by validation NLL: trial {best['trial_id']}" in text and "val error" in text


def test_a_pending_trials_row_has_the_epochs_its_folder_holds(tmp_path: Path):
    """An interrupted local sweep wrote the row made as the trial started: epochs_run 0 for a trial
    with 7 epochs saved."""
    from bbb.sweep.results import write_results
    from bbb.sweep.space import Trial, TrialStatus

    trials = [Trial("t0", 0, {"lr": 0.1})]
    out = tmp_path / "s"
    (out / "trials" / "t0").mkdir(parents=True)
    (out / "trials" / "t0" / "metrics.csv").write_text("epoch,seconds\n" + "".join(f"{e},0.1\n" for e in range(1, 8)))
    stale = {"t0": {"trial_id": "t0", "status": TrialStatus.PENDING.value, "epochs_run": 0, "trial_dir": "trials/t0",
                    "error": None, "retry": False}}
    write_results(out, trials, stale, "local")
    assert S.read_sweep(out)[0]["epochs_run"] in (7, "7")
