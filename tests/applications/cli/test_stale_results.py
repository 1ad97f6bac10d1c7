"""A run's results made by other commands (eval.json, the plots, pruning.csv, ood.json, ...) never
outlive the network they describe: a resumed run that trains on removes them and says so,
``--overwrite`` removes them with the run, an eval.json of an earlier network (written by an older
bbb) is refused by ``bbb compare`` and left out by ``bbb report``, compare names the checkpoint
its numbers are of, and a resumed run on its own file refuses the images' settings (and a run's
--out that is a file says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bbb.runs.rundir import RESULT_FILES, RUN_FILES
from testkit import assert_one_line_error, noisy_table, read_csv, run_main

TINY = ["--hidden", "8", "--batch-size", "16", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3", "--quiet",
        "--no-compile", "--threads", "1"]


@pytest.fixture
def run(capsys, tmp_path) -> Path:
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--csv", str(noisy_table(tmp_path / "houses.csv")), "--target", "price",
                          "--task", "regression", "--epochs", "2", "--out", str(out), *TINY)
    assert rc == 0, err
    rc, _, err = run_main(capsys, "evaluate", str(out), "--which", "last", "--samples", "3", "--device", "cpu")
    assert rc == 0, err
    return out


def test_the_result_files_are_the_run_files_the_commands_write():
    assert set(RESULT_FILES) <= set(RUN_FILES) and RUN_FILES[0] == "last.pt"
    assert {"eval.json", "pruning.csv", "ood.json", "uncertain.json", "calibration.png"} <= set(RESULT_FILES)


def test_a_run_that_trains_on_removes_its_results_and_says_so(capsys, run):
    made = {p.name for p in run.iterdir()} & set(RESULT_FILES)
    assert {"eval.json", "calibration.png"} <= made
    (run / "ood.json").write_text("{}")  # any result file of the list, whoever wrote it
    rc, out, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "2", "--quiet")
    assert rc == 0, err
    assert (run / "eval.json").is_file() and (run / "ood.json").is_file()  # nothing trained: still its network's
    # a warning (bbb train: warning: ... on stderr), with --quiet too: a progress line once, silent there
    with pytest.warns(UserWarning, match="^removed ") as said:
        rc, out, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "3", "--quiet")
    assert rc == 0, err
    assert not {p.name for p in run.iterdir()} & set(RESULT_FILES)
    line = str(next(w.message for w in said if str(w.message).startswith("removed ")))
    assert "eval.json" in line and "ood.json" in line and "again" in line
    # compare and report now take the finished run's own numbers, of its best epoch
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(run.parent / "cmp"))
    assert rc == 0, err
    row = read_csv(run.parent / "cmp" / "comparison.csv")[0]
    assert row["metrics_from"] == "summary.json" and row["epochs"] == "3"


def test_overwrite_removes_the_results_with_the_run(capsys, run, tmp_path):
    rc, _, err = run_main(capsys, "train", "--csv", str(tmp_path / "houses.csv"), "--target", "price", "--task",
                          "regression", "--epochs", "1", "--out", str(run), "--overwrite", *TINY)
    assert rc == 0, err
    assert not {p.name for p in run.iterdir()} & set(RESULT_FILES)


def test_an_earlier_networks_eval_json_is_refused_by_compare_and_left_out_by_report(capsys, run, tmp_path):
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    assert read_csv(tmp_path / "cmp" / "comparison.csv")[0]["metrics_from"] == "eval.json (last, epoch 2)"
    old = (run / "eval.json").read_text()
    rc, _, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "3", "--quiet")
    assert rc == 0, err
    (run / "eval.json").write_text(old)  # as an older bbb left it: of epoch 2, the run's last is now epoch 3
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp2"))
    assert_one_line_error(rc, err, "eval.json", "epoch 2", "now epoch 3", "bbb evaluate")
    rc, _, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.html"))
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "its eval.json is left out here" in page and "now epoch 3" in page
    ev = json.loads(old)
    assert f"{ev['test_rmse_mc']:.4f}" not in page  # the earlier network's test RMSE is not shown


def test_resuming_a_run_on_its_own_file_refuses_the_images_settings(capsys, run):
    for flag, value in (("--scale", "3"), ("--data-dir", str(run)), ("--dataset", "mnist"), ("--val-size", "5")):
        rc, _, err = run_main(capsys, "train", "--out", str(run), "--resume", "--epochs", "3", flag, value)
        assert_one_line_error(rc, err, flag, "leave", "own data")
    assert (run / "eval.json").is_file()  # refused before anything changed


def test_a_run_out_that_is_a_file_is_refused_in_words(capsys, tmp_path):
    (tmp_path / "p1.csv").write_text("x\n")
    rc, _, err = run_main(capsys, "train", "--csv", str(noisy_table(tmp_path / "houses.csv")), "--target", "price",
                          "--task", "regression", "--epochs", "1", "--out", str(tmp_path / "p1.csv"), *TINY)
    assert_one_line_error(rc, err, "p1.csv", "is a file, not a folder")
    assert (tmp_path / "p1.csv").read_text() == "x\n"


def test_ood_and_uncertain_refuse_a_run_being_trained(capsys, run, tmp_path):
    """bbb ood and bbb uncertain wrote ood.json and uncertain.json into a run while it trained (bbb evaluate and prune
    were refused): the files scored the best.pt of that moment, and bbb compare showed that network's AUROC beside
    the test numbers of the run's final best epoch. They now hold the run's lock, as evaluate does."""
    from bbb.runs.rundir import lock_run_dir

    before = sorted(p.name for p in run.iterdir())
    with lock_run_dir(run):  # as bbb train holds it
        for argv in (["ood", str(run), "--ood-data", str(tmp_path / "houses.csv")], ["uncertain", str(run)]):
            rc, _, err = run_main(capsys, *argv, "--device", "cpu", "--samples", "2")
            assert_one_line_error(rc, err, "is in use")
        assert sorted(p.name for p in run.iterdir()) == sorted([*before, ".lock"])  # nothing written
    rc, _, err = run_main(capsys, "ood", str(run), "--ood-data", str(tmp_path / "houses.csv"), "--device", "cpu",
                          "--samples", "2")
    assert rc == 0 and (run / "ood.json").is_file(), err


def test_a_damaged_result_file_says_which_command_writes_it_again(capsys, run, tmp_path):
    """bbb compare said only 'cannot read RUN/summary.json: Unterminated string ...'."""
    text = (run / "summary.json").read_text()
    (run / "summary.json").write_text(text[:len(text) // 2])  # a copy of the folder cut short
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp"))
    assert_one_line_error(rc, err, "summary.json", f"bbb train --resume --out {run}")
    rc, _, err = run_main(capsys, "train", "--resume", "--out", str(run), "--quiet")  # as it says
    assert rc == 0, err
    (run / "eval.json").write_text("{")
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp"))
    assert_one_line_error(rc, err, "eval.json", "bbb evaluate")
