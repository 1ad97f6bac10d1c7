"""``bbb compare`` keys a run on its whole architecture (issue 72, item 3): a 1-layer 400-unit run
is "1x400", never "2x400", and the real 2x400 runs are the ones compared."""

from __future__ import annotations

import csv
import json

from bbb.experiments.comparison import architecture, comparison_rows, write_comparison


def _run(tmp_path, name, method, hidden, ece, err=0.02, dataset="mnist"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"method": method, "hidden": hidden, "dataset": dataset}))
    (d / "eval.json").write_text(json.dumps({
        "method": method, "dataset": dataset, "test_error": err, "test_error_mc": err, "nll": 0.07,
        "ece": ece, "brier": 0.03, "samples": 10}))
    return d


def test_architecture_labels():
    assert architecture([400, 400]) == "2x400"
    assert architecture([400]) == "1x400"
    assert architecture([50]) == "1x50"
    assert architecture([400, 200]) == "400-200"
    assert architecture([]) is None and architecture(None) is None


def test_one_layer_and_two_layer_runs_are_told_apart(tmp_path):
    runs = [_run(tmp_path, "bbb1", "bbb", [400], 0.030),          # 1 layer: its ECE is worse than SGD's
            _run(tmp_path, "bbb2", "bbb", [400, 400], 0.004),     # the real 2x400: better than SGD's
            _run(tmp_path, "sgd2", "sgd", [400, 400], 0.012),
            _run(tmp_path, "sgd1", "sgd", [400], 0.010),
            _run(tmp_path, "bbb50", "bbb", [50], 0.02)]
    rows = comparison_rows(runs)
    assert [r["hidden"] for r in rows] == ["1x400", "2x400", "2x400", "1x400", "1x50"]
    csv_path, md_path = write_comparison(rows, tmp_path / "out")
    with csv_path.open() as f:
        assert [r["hidden"] for r in csv.DictReader(f)] == ["1x400", "2x400", "2x400", "1x400", "1x50"]
    md = md_path.read_text()
    table = [line for line in md.splitlines() if line.startswith(f"| {tmp_path / 'bbb1'} |")]
    assert len(table) == 1 and "| 1x400 |" in table[0]
    assert "2x400: BBB's ECE (0.40%) is lower than SGD's (1.20%)." in md  # the 2-layer runs, not bbb1
    assert "1x400: BBB's ECE (3.00%) is NOT lower than SGD's (1.00%)." in md
    assert "2x50" not in md and "1x50" in md


def test_several_runs_of_one_method_name_them_instead_of_dropping_one(tmp_path):
    runs = [_run(tmp_path, "bbb-a", "bbb", [400, 400], 0.004), _run(tmp_path, "bbb-b", "bbb", [400, 400], 0.02),
            _run(tmp_path, "sgd", "sgd", [400, 400], 0.012),
            _run(tmp_path, "fm-bbb", "bbb", [400, 400], 0.01, dataset="fashion-mnist"),
            _run(tmp_path, "fm-sgd", "sgd", [400, 400], 0.02, dataset="fashion-mnist")]
    md = write_comparison(comparison_rows(runs), tmp_path / "out")[1].read_text()
    verdicts = md.split("## Who wins")[1]
    assert f"2x400 on mnist: no verdict: several bbb runs ({tmp_path / 'bbb-a'}, {tmp_path / 'bbb-b'})" \
        in verdicts
    assert "2x400 on fashion-mnist: BBB's ECE (1.00%) is lower than SGD's (2.00%)." in verdicts
    assert "on mnist: BBB's" not in verdicts


def test_reference_numbers_only_beside_their_architecture(tmp_path):
    runs = [_run(tmp_path, "one", "bbb", [400], 0.01, err=0.12, dataset="fashion-mnist"),
            _run(tmp_path, "two", "bbb", [400, 400], 0.01, err=0.12, dataset="fashion-mnist")]
    rows = comparison_rows(runs, reference="fashion-seminar")
    assert [r["reference_test_error"] for r in rows] == [None, 13.2]


def test_a_reference_beside_no_run_it_has_numbers_for_is_refused(tmp_path):
    """Before, ``bbb compare MNIST-RUN --reference fashion-seminar`` wrote the table with no
    reference number in it (none of its runs is a Fashion-MNIST BBB 2x200/2x400/2x800), exit 0."""
    import pytest

    from bbb.errors import UserError

    runs = [_run(tmp_path, "mnist", "bbb", [400, 400], 0.01), _run(tmp_path, "one", "bbb", [400], 0.01,
                                                                   dataset="fashion-mnist")]
    with pytest.raises(UserError, match="^--reference fashion-seminar has published numbers for bbb runs on "
                                        "fashion-mnist of 2x200, 2x400, 2x800, and none of these runs is one"):
        comparison_rows(runs, reference="fashion-seminar")


def test_runs_trained_on_different_amounts_of_data_get_no_verdict(tmp_path):
    """A BBB run on 2,000 MNIST images beside an SGD run on 50,000 (``--train-size``, ``--val-size``)
    was judged as if the methods alone differed: "sgd wins"."""
    runs = [_run(tmp_path, "bbb", "bbb", [400, 400], 0.03, err=0.1), _run(tmp_path, "sgd", "sgd", [400, 400], 0.01)]
    for d, n in zip(runs, (2000, 50000)):
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "num_train": n}))
    verdicts = write_comparison(comparison_rows(runs), tmp_path / "out")[1].read_text().split("## Who wins")[1]
    assert f"2x400: no verdict: the runs trained on different numbers of rows or images ({tmp_path / 'bbb'} 2000, " \
           f"{tmp_path / 'sgd'} 50000)" in verdicts
    assert "SGD's" not in verdicts and "sgd wins" not in verdicts
    (runs[0] / "config.json").write_text(json.dumps({**json.loads((runs[0] / "config.json").read_text()),
                                                     "num_train": 50000}))
    verdicts = write_comparison(comparison_rows(runs), tmp_path / "out")[1].read_text().split("## Who wins")[1]
    assert "BBB's ECE (3.00%) is NOT lower than SGD's (1.00%)." in verdicts
