"""``bbb compare``: rows from eval.json / ood.json, the CSV contract, computed verdicts."""

from __future__ import annotations

import csv
import json

import pytest

from bbb.cli import main
from bbb.experiments.comparison import COLUMNS, comparison_rows, write_comparison
from testkit import run_main


def _run(tmp_path, method, hidden, ece, mi, err=0.02, dataset="mnist"):
    d = tmp_path / f"{method}-{hidden}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"method": method, "hidden": [hidden, hidden], "dataset": dataset}))
    (d / "summary.json").write_text(json.dumps({"epochs": 3, "seconds": 12.5}))
    (d / "eval.json").write_text(json.dumps({
        "method": method, "dataset": dataset, "test_error": err + 0.001, "test_error_mc": err, "nll": 0.07,
        "ece": ece, "brier": 0.03, "samples": 1 if method == "sgd" else 10}))
    scores = {"entropy": {"auroc": 0.9, "aupr": 0.8}, "mutual_information": {"auroc": mi, "aupr": mi},
              "max_prob": {"auroc": 0.88, "aupr": 0.8}}
    (d / "ood.json").write_text(json.dumps({"ood": "fashion-mnist", "scores": scores}))
    return d


def test_rows_units_and_verdicts(tmp_path):
    runs = [_run(tmp_path, "bbb", 400, 0.004, 0.95), _run(tmp_path, "dropout", 400, 0.006, 0.97),
            _run(tmp_path, "sgd", 400, 0.012, None)]
    rows = comparison_rows(runs)
    assert [r["method"] for r in rows] == ["bbb", "dropout", "sgd"]
    assert rows[0]["test_error"] == pytest.approx(2.0) and rows[0]["ece"] == pytest.approx(0.4)
    assert rows[0]["test_error_mean_weights"] == pytest.approx(2.1) and rows[2]["auroc_mi"] is None
    csv_path, md_path = write_comparison(rows, tmp_path / "out", "comparison", command="bash run.sh")
    with csv_path.open() as f:
        got = list(csv.DictReader(f))
    assert tuple(got[0]) == COLUMNS and len(got) == 3 and got[2]["auroc_mi"] == ""
    md = md_path.read_text()
    assert "bash run.sh" in md
    assert "BBB's ECE (0.40%) is lower than SGD's (1.20%)" in md
    # dropout's MI AUROC is higher here: the table must say BBB does not win
    assert "is NOT higher than MC dropout's" in md


def test_aurocs_against_other_ood_sets_are_not_ranked(tmp_path):
    # BBB scored against a folder of one's own images, dropout against Fashion-MNIST: "BBB's OOD AUROC by
    # mutual information is NOT higher than MC dropout's", of two different questions
    bbb, drop = _run(tmp_path, "bbb", 400, 0.004, 0.5), _run(tmp_path, "dropout", 400, 0.006, 0.97)
    scored = json.loads((bbb / "ood.json").read_text())
    (bbb / "ood.json").write_text(json.dumps({**scored, "ood": "my_photos"}))
    md = write_comparison(comparison_rows([bbb, drop]), tmp_path / "out")[1].read_text()
    assert "OOD AUROC" not in md and "not compared" in md
    assert "| OOD set |" in md and "| my_photos |" in md and "| fashion-mnist |" in md
    assert "BBB's test error" in md  # the other verdicts stay


def test_two_ood_sets_of_one_name_are_told_apart(tmp_path):
    """bbb ood --ood-data a/new and --ood-data b/new both recorded the set as 'new': compare ranked the two
    runs' AUROCs against each other and showed no OOD set column; ood.json records the inputs' MD5 now."""
    from bbb.data.arrays import inputs_md5

    (tmp_path / "a" / "new").mkdir(parents=True)
    (tmp_path / "b" / "new").mkdir(parents=True)
    (tmp_path / "a" / "new" / "x.png").write_bytes(b"one")
    (tmp_path / "b" / "new" / "x.png").write_bytes(b"two")
    (tmp_path / "b" / "new" / "notes.txt").write_text("not read")
    md5s = [inputs_md5(tmp_path / d / "new") for d in "ab"]
    assert md5s[0] != md5s[1]
    (tmp_path / "b" / "new" / "notes.txt").write_text("still not read")  # (only the images read count)
    assert inputs_md5(tmp_path / "b" / "new") == md5s[1]
    bbb, drop = _run(tmp_path, "bbb", 400, 0.004, 0.5), _run(tmp_path, "dropout", 400, 0.006, 0.97)
    for d, md5 in zip((bbb, drop), md5s):
        scored = json.loads((d / "ood.json").read_text())
        (d / "ood.json").write_text(json.dumps({**scored, "ood": "new", "ood_md5": md5}))
    md = write_comparison(comparison_rows([bbb, drop]), tmp_path / "out")[1].read_text()
    assert "OOD AUROC" not in md and "not compared" in md
    assert f"| new (MD5 {md5s[0][:8]}) |" in md and f"| new (MD5 {md5s[1][:8]}) |" in md


def test_an_equal_score_is_a_tie_not_a_loss(tmp_path):
    """Error rates and ECEs are fractions of the same test rows, so two runs often score the same:
    the verdict says tied (it said "not the best (sgd wins)", "NOT lower" on equal numbers)."""
    runs = [_run(tmp_path, "bbb", 400, 0.012, 0.95, err=0.017), _run(tmp_path, "sgd", 400, 0.012, None, err=0.017)]
    md = write_comparison(comparison_rows(runs), tmp_path / "out")[1].read_text()
    assert "BBB's test error is tied for the best of BBB and sgd with sgd: 1.70 against 1.70." in md
    assert "BBB's ECE (1.20%) is the same as SGD's (1.20%)." in md and "wins)" not in md


def test_reference_numbers_and_cli(tmp_path, capsys):
    runs = [_run(tmp_path, "bbb", h, 0.01, 0.9, err=e, dataset="fashion-mnist")
            for h, e in ((200, 0.12), (400, 0.14))]
    rc = main(["compare", *map(str, runs), "--out", str(tmp_path / "o"), "--name", "fm",
               "--reference", "fashion-seminar", "--command", "bash results/x.sh"])
    assert rc == 0
    with (tmp_path / "o" / "fm.csv").open() as f:
        got = list(csv.DictReader(f))
    assert [float(r["reference_test_error"]) for r in got] == [12.63, 13.2]
    md = (tmp_path / "o" / "fm.md").read_text()
    assert "```\nbash results/x.sh\n```" in md
    assert "our 12.00% beats the reference 12.63%" in md and "our 14.00% does NOT beat the reference 13.20%" in md


def test_missing_eval_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    assert main(["compare", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bbb evaluate" in err and len(err.strip().splitlines()) == 1


def _table_run(tmp_path, name, method, target, rmse, test_fraction=0.1):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "method": method, "hidden": [100, 100], "dataset": "file", "data_file": "/data/houses.csv",
        "task": "regression", "target": target, "val_fraction": 0.1, "test_fraction": test_fraction, "split_seed": 0}))
    (d / "summary.json").write_text(json.dumps({"epochs": 3, "seconds": 1.0}))
    (d / "eval.json").write_text(json.dumps({
        "method": method, "dataset": "file", "task": "regression", "test_rmse": rmse, "test_rmse_mc": rmse,
        "log_likelihood": -rmse, "coverage_95": 0.95, "samples": 10}))
    return d


def test_runs_of_another_target_or_test_split_get_no_verdict(tmp_path):
    # the same file's name, but one run predicts the price and the other the area (another unit):
    # "Who wins" declared BBB best on RMSE 0.5 against 20
    price, area = _table_run(tmp_path, "p", "bbb", "price", 0.5), _table_run(tmp_path, "a", "sgd", "area", 20.0)
    _, md = write_comparison(comparison_rows([price, area]), tmp_path / "o1")
    text = md.read_text()
    assert "no verdict" in text and "differ in target" in text and "is best" not in text
    wider = _table_run(tmp_path, "w", "sgd", "price", 0.7, test_fraction=0.3)
    text = write_comparison(comparison_rows([price, wider]), tmp_path / "o2")[1].read_text()
    assert "differ in test fraction" in text and "is best" not in text
    changed = _table_run(tmp_path, "c", "sgd", "price", 0.7)  # the same path, the file changed since
    config = json.loads((changed / "config.json").read_text())
    config["preprocess"] = {"source": {"md5": "another"}}
    (changed / "config.json").write_text(json.dumps(config))
    text = write_comparison(comparison_rows([price, changed]), tmp_path / "o4")[1].read_text()
    assert "differ in data file" in text and "is best" not in text
    same = _table_run(tmp_path, "s", "sgd", "price", 0.7)
    text = write_comparison(comparison_rows([price, same]), tmp_path / "o3")[1].read_text()
    assert "BBB's test RMSE is best of BBB and sgd: 0.5 against 0.7" in text and "no verdict" not in text
    for run, path in ((price, "/data/houses.csv"), (same, "/moved/houses.csv")):  # a moved copy: the same MD5
        config = json.loads((run / "config.json").read_text())
        config.update(data_file=path, preprocess={"source": {"md5": "m"}})
        (run / "config.json").write_text(json.dumps(config))
    text = write_comparison(comparison_rows([price, same]), tmp_path / "o5")[1].read_text()
    assert "BBB's test RMSE is best" in text and "no verdict" not in text


@pytest.mark.parametrize("name", ["../x", "sub/x", "ABS", "..", ""])
def test_name_that_is_not_a_file_name_is_refused(tmp_path, capsys, name):
    name = str(tmp_path / "x") if name == "ABS" else name
    run = _run(tmp_path, "bbb", 400, 0.01, 0.9)
    out = tmp_path / "o" / "p"
    assert main(["compare", str(run), "--out", str(out), "--name", name]) == 2
    err = capsys.readouterr().err
    assert "--name" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.csv"))


def test_the_same_run_twice_is_refused(tmp_path, capsys):
    run = _run(tmp_path, "bbb", 400, 0.01, 0.9)
    again = tmp_path / "sub" / ".." / run.name
    (tmp_path / "sub").mkdir()
    assert main(["compare", str(run), str(again), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "twice" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "comparison.csv").exists()


def test_a_file_compare_did_not_write_is_never_replaced(tmp_path, capsys):
    """Before, ``bbb compare RUN --out RUN --name metrics`` wrote its table over the run's
    metrics.csv (its epochs, what --resume counts). A table of bbb compare is replaced."""
    run = _run(tmp_path, "bbb", 400, 0.01, 0.9)
    (run / "metrics.csv").write_text("epoch,seconds,train_loss\n1,0.5,2.0\n")
    (run / "notes.md").write_text("# notes\n\nmine\n")
    for name in ("metrics", "notes"):
        assert main(["compare", str(run), "--out", str(run), "--name", name]) == 2
        err = capsys.readouterr().err
        assert "exists and is not a table of bbb compare" in err and len(err.strip().splitlines()) == 1, err
    assert (run / "metrics.csv").read_text() == "epoch,seconds,train_loss\n1,0.5,2.0\n"
    assert (run / "notes.md").read_text() == "# notes\n\nmine\n" and not (run / "metrics.md").exists()
    out = tmp_path / "o"
    assert main(["compare", str(run), "--out", str(out)]) == 0
    assert main(["compare", str(run), "--out", str(out)]) == 0  # its own table: replaced
    with pytest.raises(SystemExit) as exit_:  # (refused while the command line is read: argparse's exit)
        main(["compare", str(run), "--out", str(run / "config.json")])
    assert exit_.value.code == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_a_verdict_names_the_runs_it_ranks_against(tmp_path):
    """BBB and IVON are each ranked against the SGD and dropout runs only: "BBB's NLL is best" and
    "IVON's NLL is best" stood in one list beside a table where IVON's NLL was below BBB's. Each
    verdict now names the runs it ranks."""
    runs = [_run(tmp_path, "bbb", 400, 0.004, 0.87, err=0.015), _run(tmp_path, "ivon", 400, 0.004, 0.92, err=0.012),
            _run(tmp_path, "sgd", 400, 0.010, None, err=0.0164),
            _run(tmp_path, "dropout", 400, 0.018, 0.90, err=0.0189)]
    md = write_comparison(comparison_rows(runs), tmp_path / "out")[1].read_text()
    assert "BBB's test error is best of BBB, sgd and dropout: 1.50 against 1.64." in md
    assert "IVON's test error is best of IVON, sgd and dropout: 1.20 against 1.64." in md
    assert "is best:" not in md and "is not the best (" not in md


def _image_run(tmp_path, name, method, error, **image):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "method": method, "hidden": [100], "dataset": "file", "data_file": "/data/photos", "val_fraction": 0.1,
        "test_fraction": 0.1, "split_seed": 0, "preprocess": {"source": {"md5": "m", "folder": True}}, **image}))
    (d / "summary.json").write_text(json.dumps({"epochs": 3, "seconds": 1.0}))
    (d / "eval.json").write_text(json.dumps({
        "method": method, "dataset": "file", "test_error": error, "test_error_mc": error, "nll": 0.3, "ece": 0.01,
        "brier": 0.1, "samples": 10}))
    return d


@pytest.mark.parametrize("other, words", [({"image_size": [56, 56]}, "differ in image size"),
                                          ({"image_colour": True}, "differ in image colour")])
def test_runs_of_one_folder_read_at_another_size_or_in_colour_get_no_verdict(tmp_path, other, words):
    """The same images at 56x56 or in colour are other inputs: a win may be the inputs', not the
    method's (the test-set key held the folder, target and split only)."""
    bbb = _image_run(tmp_path, "b", "bbb", 5.0)  # the default size, not recorded: 28x28, grey
    text = write_comparison(comparison_rows([bbb, _image_run(tmp_path, "s", "sgd", 6.0, **other)]),
                            tmp_path / "o1")[1].read_text()
    assert "no verdict" in text and words in text and "is best" not in text
    same = _image_run(tmp_path, "s28", "sgd", 6.0, image_size=[28, 28], image_colour=False)
    text = write_comparison(comparison_rows([bbb, same]), tmp_path / "o2")[1].read_text()
    assert "no verdict" not in text and "is best" in text


def test_an_experiments_folder_is_named_not_sent_to_bbb_evaluate(tmp_path, capsys):
    """A sweep's, a bbb reproduce's or a bandit run's folder was told to run `bbb evaluate` on it."""
    sweep, uci, bandit = tmp_path / "sw", tmp_path / "uci", tmp_path / "bandit"
    (sweep / "trials").mkdir(parents=True)
    (sweep / "sweep.csv").write_text("trial\n")
    uci.mkdir()
    (uci / "options.json").write_text('{"command": "bbb reproduce uci", "--budget": "smoke"}')
    bandit.mkdir()
    (bandit / "config.json").write_text('{"agents": ["bbb", "greedy"]}')
    for folder, words in ((sweep, "a sweep's folder"), (uci, "the folder of bbb reproduce uci"),
                          (bandit, "the folder of bbb bandit")):
        rc, _, err = run_main(capsys, "compare", str(folder), "--out", str(tmp_path / "cmp"))
        assert rc == 2 and words in err and "bbb evaluate" not in err and len(err.strip().splitlines()) == 1, err


def test_an_rmse_in_small_units_keeps_its_digits(tmp_path):
    # a target in units of 1e-4: the table wrote its test RMSE 2.087e-06 as 0.0000 (the CSV as 0.000002), two
    # runs of 2.1e-06 and 2.4e-06 as one number
    small, other = _table_run(tmp_path, "s", "bbb", "y", 2.0868e-06), _table_run(tmp_path, "o", "sgd", "y", 2.4e-06)
    big = _table_run(tmp_path, "b", "sgd", "price", 28653.11240)
    csv_path, md = write_comparison(comparison_rows([small, other, big]), tmp_path / "o")
    text = md.read_text()
    assert "| 2.087e-06 | 2.087e-06 |" in text and "| 2.4e-06 | 2.4e-06 |" in text, text
    assert "| 28653.1124 |" in text  # (places where they keep the digits, as before)
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["test_rmse"] for r in rows] == ["2.0868e-06", "2.4e-06", "28653.112400"]
