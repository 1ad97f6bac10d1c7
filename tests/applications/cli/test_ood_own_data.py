"""``bbb ood RUN --ood-data PATH``: a run on your own table scored against your own rows from
elsewhere (read as ``bbb predict`` reads them) by the same k sampled networks as its test split; a
classifier by entropy, MI and 1 - max probability, a regression by its predictive and epistemic
sd; an ensemble's into --out, which ``bbb compare`` and ``bbb report`` read."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bbb.cli.predict import read_inputs
from bbb.experiments.report import report_html
from bbb.experiments.uncertainty import SCORES, ood_report
from bbb.runs import load_model
from bbb.runs.referral import split_outputs
from testkit import assert_one_line_error, read_csv, run_main

from .test_ensemble_runs import table, train_runs


def far_rows(path: Path, n: int = 40, shift: float = 50.0) -> Path:
    """Rows of the table's columns (no target) far outside its range."""
    rng = np.random.default_rng(2)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "colour"])
        for i in range(n):
            w.writerow([f"{shift + rng.normal():.4f}", f"{-shift + rng.normal():.4f}", ["red", "blue"][i % 2]])
    return path


def test_a_classifier_is_scored_against_your_rows_by_the_networks_of_its_test_split(capsys, tmp_path):
    (run,) = train_runs(capsys, tmp_path, table(tmp_path / "t.csv"), "classification", ("bbb",))
    far = far_rows(tmp_path / "far.csv")
    rc, out, err = run_main(capsys, "ood", str(run), "--ood-data", str(far), "--samples", "4", "--device", "cpu")
    assert rc == 0, err
    got = json.loads((run / "ood.json").read_text())
    assert (got["dataset"], got["ood"], got["samples"], got["n_out"]) == ("t.csv", "far.csv", 4, 40)
    # the same numbers from the library: the test split and the rows through the same 4 sampled networks
    model = load_model(run)
    out_in, _ = split_outputs(model, "test", 4, 0)
    out_out = model.sample_outputs(read_inputs(model, far), 4, 0)
    want = ood_report(*(torch.softmax(o.double(), -1).float() for o in (out_in, out_out)))
    assert got["n_in"] == out_in.shape[1]
    for name in SCORES:
        assert got["scores"][name]["auroc"] == pytest.approx(want[name]["auroc"]), name
        assert got["scores"][name]["score"] in out
    assert (run / "ood.png").is_file()
    # bbb compare and bbb report read it
    assert run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp"))[0] == 0
    row = read_csv(tmp_path / "cmp" / "comparison.csv")[0]
    assert float(row["auroc_entropy"]) == pytest.approx(got["scores"]["entropy"]["auroc"], abs=1e-6)
    # its note called your own rows "the far.csv test set", a split they do not have
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "the inputs of far.csv" in md and "far.csv test set" not in md
    text = report_html([run])
    assert "<h2>Out-of-distribution detection" in text and "OOD AUROC by entropy (vs far.csv)" in text


def test_a_regressions_epistemic_sd_tells_far_rows_apart(capsys, tmp_path):
    data = table(tmp_path / "t.csv", regression=True)
    runs = train_runs(capsys, tmp_path, data, "regression", ("bbb", "sgd"))
    far = far_rows(tmp_path / "far.csv")
    rc, _, err = run_main(capsys, "ood", str(runs[0]), "--ood-data", str(far), "--samples", "8", "--device", "cpu")
    assert rc == 0, err
    scores = json.loads((runs[0] / "ood.json").read_text())["scores"]
    assert set(scores) == {"sd", "epistemic_sd"}
    # the sampled networks' spread grows with the inputs' distance (sigma * |x|): the far rows score higher
    epistemic = scores["epistemic_sd"]
    assert epistemic["auroc"] > 0.9 and epistemic["mean_out"] > epistemic["mean_in"]
    rc, _, err = run_main(capsys, "ood", str(runs[1]), "--ood-data", str(far), "--device", "cpu")
    assert rc == 0, err  # one network: no spread between networks to score by
    assert json.loads((runs[1] / "ood.json").read_text())["scores"]["epistemic_sd"]["auroc"] is None
    assert "OOD AUROC by epistemic sd (vs far.csv)" in report_html([runs[0]])


def test_an_ensemble_writes_into_its_folder_which_compare_and_report_read(capsys, tmp_path):
    runs = train_runs(capsys, tmp_path, table(tmp_path / "t.csv"), "classification", ("sgd", "sgd"))
    far, ens = far_rows(tmp_path / "far.csv"), tmp_path / "ens"
    for command in ("evaluate", "ood"):
        extra = ["--ood-data", str(far)] if command == "ood" else []
        rc, _, err = run_main(capsys, command, *map(str, runs), "--out", str(ens), "--device", "cpu", *extra)
        assert rc == 0, err
    got = json.loads((ens / "ood.json").read_text())
    assert got["members"] == [str(r) for r in runs] and got["member_epochs"] == [2, 2]
    assert run_main(capsys, "compare", str(ens), "--out", str(tmp_path / "cmp"))[0] == 0
    assert "OOD AUROC by entropy (vs far.csv)" in report_html([ens])


def test_what_is_not_read_of_the_other_inputs_is_said(capsys, tmp_path):
    # bbb predict names a CSV's empty rows it skips (and a folder's other files); bbb ood scored without them, silently
    (run,) = train_runs(capsys, tmp_path, table(tmp_path / "t.csv"), "classification", ("sgd",))
    far = far_rows(tmp_path / "far.csv")
    far.write_text(far.read_text().replace("\n", "\n,,\n", 3))
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(far), "--device", "cpu")
    assert rc == 0, err
    assert "bbb ood: note: 3 empty row(s)" in err and "bbb predict" not in err
    assert json.loads((run / "ood.json").read_text())["n_out"] == 40
    # the run's ood.json against another set is replaced: said, where it went without a word
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(far_rows(tmp_path / "other.csv")), "--device",
                          "cpu")
    assert rc == 0 and "held the scores against far.csv; they are replaced by these against other.csv" in err, err
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(tmp_path / "other.csv"), "--device", "cpu")
    assert rc == 0 and "held the scores" not in err, err


def test_what_does_not_fit_is_one_line(capsys, tmp_path):
    (run,) = train_runs(capsys, tmp_path, table(tmp_path / "t.csv"), "classification", ("sgd",))
    far = far_rows(tmp_path / "far.csv")
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(far), "--ood", "mnist")
    assert rc == 2 and "not allowed with argument" in err, err
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(tmp_path / "nowhere.csv"))
    assert_one_line_error(rc, err, "nowhere.csv")
    rc, _, err = run_main(capsys, "ood", str(run), "--csv", str(tmp_path / "t.csv"))
    assert_one_line_error(rc, err, "--csv/--npz", "--ood-data")
    assert not (run / "ood.json").exists()
