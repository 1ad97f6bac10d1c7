"""``bbb prune`` of a regression run (your own CSV's quantity): it was refused ("reports the test
error of a classifier"); it reports the test RMSE of the mean network's mean, in the target's
units, at each fraction removed, and bbb report shows it."""

from __future__ import annotations

import json

import torch

from bbb.experiments.report import report_html
from bbb.prune import prune
from bbb.runs import load_model
from bbb.runs.model import load_split
from testkit import read_csv, run_main

from .test_ensemble_runs import table, train_runs


def test_a_regression_run_prunes_by_its_test_rmse_in_the_targets_units(capsys, tmp_path):
    (run,) = train_runs(capsys, tmp_path, table(tmp_path / "t.csv", regression=True), "regression", ("bbb",))
    rc, out, err = run_main(capsys, "prune", str(run), "--which", "best", "--fractions", "0", "0.5", "0.98")
    assert rc == 0, err
    assert "test RMSE" in out and "test error" not in out
    rows = read_csv(run / "pruning.csv")
    assert [r["test_error"] for r in rows] == ["", "", ""]
    rmse = [float(r["test_rmse"]) for r in rows]
    summary = json.loads((run / "summary.json").read_text())
    assert rmse[0] == summary["test_rmse"]  # nothing removed: the run's own test RMSE of its mean network
    # by hand: the mean network with half of its weights removed, its mean back in the target's units
    model = load_model(run, "best")
    data, pre = load_split(model.config, model.preprocess.to_dict())
    prune(model.network, 0.5)
    with torch.no_grad():
        model.network.eval()
        mean = model.network(data["test_x"]).double()[:, 0]
    want = float(torch.sqrt(((pre.y.inverse(mean) - pre.y.inverse(data["test_y"].double())) ** 2).mean()))
    assert abs(rmse[1] - want) < 1e-6 * max(1.0, want)
    assert rmse[2] != rmse[0]
    page = report_html([run])
    assert "<th>test RMSE</th>" in page and f"{rmse[2]:.4g}" in page
