"""The defects a newcomer met in the first hour (issue 61, item 6), each fixed and held here.

Commands run in-process through ``bbb.cli.main`` on tiny synthetic data (``load_data`` patched,
as in test_cli.py); every run is a 16-unit network trained for one epoch.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bbb.runs.loop as L
import bbb.runs.model as RM
from bbb.progress import LineProgress, progress_bar
from testkit import assert_one_line_error as one_line_error
from testkit import blobs, run_main, tiny_bandit_config, tiny_mushrooms

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
TINY = ["--hidden", "16", "--batch-size", "32", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3",
        "--quiet"]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture
def datasets(monkeypatch) -> list[str]:
    """Every data load returns tiny blobs (another set for each data set); the data sets asked for
    are recorded in the returned list."""
    asked: list[str] = []

    def load(cfg):
        asked.append(cfg.dataset)
        return blobs(seed=0 if cfg.dataset == "mnist" else 1)

    monkeypatch.setattr(RM, "load_data", load)
    return asked


def train_run(capsys, out: Path, *more: str) -> Path:
    rc, _, err = run_main(capsys, "train", "--epochs", "1", "--out", str(out), *TINY, *more)
    assert rc == 0, err
    return out




@pytest.fixture
def no_matplotlib(monkeypatch):
    """matplotlib absent: importing it (or its parts) fails as on a machine without it."""
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)


# -- 1. without matplotlib: no "wrote X.png" for a file not written; an installable hint -----------


def test_without_matplotlib_ood_and_uncertain_claim_no_png_and_hint_an_installable_package(
        capsys, tmp_path, datasets, no_matplotlib):
    run = train_run(capsys, tmp_path / "run")
    for argv, png, kept in ((["ood", str(run), "--samples", "3"], "ood.png", "ood.json"),
                            (["uncertain", str(run), "--samples", "3", "--n", "4"], "uncertain.png", "uncertain.json")):
        with pytest.warns(UserWarning, match="matplotlib is not installed") as warned:
            rc, out, err = run_main(capsys, *argv)
        assert rc == 0, err
        assert not (run / png).exists() and (run / kept).is_file()
        wrote = [line for line in out.splitlines() if line.startswith("wrote")]
        assert len(wrote) == 1 and png not in wrote[0] and kept in wrote[0], out
        hint = str(warned[0].message)
        assert "bayes-by-backprop" not in hint and "pip install matplotlib" in hint and "'.[plots]'" in hint


# -- 2. bbb compare: a run column; a run without eval.json read from its summary.json ---------------


def test_compare_names_each_run_and_reads_a_run_without_eval_json_from_its_summary(capsys, tmp_path, datasets):
    a, b = train_run(capsys, tmp_path / "a"), train_run(capsys, tmp_path / "b", "--method", "sgd")
    assert not (a / "eval.json").exists()
    assert run_main(capsys, "evaluate", str(b), "--samples", "3", "--device", "cpu")[0] == 0
    rc, out, err = run_main(capsys, "compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert table[0].startswith("| run | method")
    summary = json.loads((a / "summary.json").read_text())
    row_a = next(line for line in table if line.startswith(f"| {a} |"))
    assert f"{100 * summary['test_error_mc']:.2f}" in row_a
    assert any(line.startswith(f"| {b} |") for line in table)
    assert f"No eval.json in {a}" in md and f"No eval.json in {b}" not in md
    # a folder with neither: one line that says what to run
    (tmp_path / "empty").mkdir()
    one_line_error(*run_main(capsys, "compare", str(tmp_path / "empty"), "--out", str(tmp_path / "c2"))[::2],
                   "bbb evaluate")


# -- 3. bbb ood's default out-of-distribution set is the other data set --------------------------


def test_ood_defaults_to_the_other_dataset_of_the_run(capsys, tmp_path, datasets):
    run = train_run(capsys, tmp_path / "fashion", "--dataset", "fashion-mnist")
    datasets.clear()
    rc, out, err = run_main(capsys, "ood", str(run), "--samples", "3")
    assert rc == 0, err
    assert datasets == ["fashion-mnist", "mnist"]
    assert json.loads((run / "ood.json").read_text())["ood"] == "mnist"
    assert "fashion-mnist (in) vs mnist (out)" in out
    mnist = train_run(capsys, tmp_path / "mnist")
    assert run_main(capsys, "ood", str(mnist), "--samples", "3")[0] == 0
    assert json.loads((mnist / "ood.json").read_text())["ood"] == "fashion-mnist"


# -- 4. no trace of a failed run; no .lock written into a folder that is not a run -----------------


def test_a_train_that_fails_before_writing_leaves_no_folder_and_no_lock(capsys, tmp_path, monkeypatch):
    from bbb.errors import DataError

    def missing(cfg):
        raise DataError("mnist/train-images-idx3-ubyte.gz not found")

    monkeypatch.setattr(RM, "load_data", missing)
    one_line_error(*run_main(capsys, "train", "--out", str(tmp_path / "new"), *TINY)[::2], "not found")
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # the user's folder stays, empty
    one_line_error(*run_main(capsys, "train", "--out", str(tmp_path / "mine"), *TINY)[::2], "not found")
    assert (tmp_path / "mine").is_dir() and list((tmp_path / "mine").iterdir()) == []


def test_evaluate_and_prune_refuse_a_folder_that_is_not_a_run_and_write_nothing_there(capsys, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"x")
    for cmd in ("evaluate", "prune"):
        one_line_error(*run_main(capsys, cmd, str(folder))[::2], "not a run directory", "last.pt")
    assert sorted(p.name for p in folder.iterdir()) == ["cat.jpg"]


# -- 5. bbb train --epochs 0 is an error --------------------------------------------------------


def test_train_zero_epochs_is_a_one_line_error(capsys, tmp_path, datasets):
    one_line_error(*run_main(capsys, "train", "--epochs", "0", "--out", str(tmp_path / "r"), *TINY)[::2],
                   "epochs", ">= 1")
    assert not (tmp_path / "r").exists()


# -- 6. an interrupted bbb demo says how to resume the demo, not a bare bbb train ---------------


def test_an_interrupted_demo_prints_the_demo_command_that_resumes_it(capsys, tmp_path, datasets, monkeypatch):
    import bbb.cli as C

    monkeypatch.setitem(C.DEMO_SETTINGS, "hidden", [16])
    monkeypatch.setitem(C.DEMO_SETTINGS, "batch_size", 32)
    real, calls = L.run_epoch, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(L, "run_epoch", interrupted)
    run = tmp_path / "my demo"
    rc, _, err = run_main(capsys, "demo", "--out", str(run), "--epochs", "3", "--device", "cpu", "--quiet")
    assert rc == 130, err
    assert f"resume with: bbb demo --out '{run}' --epochs 3 --device cpu" in err and "bbb train" not in err
    assert "evaluates, prunes and plots" in err
    monkeypatch.setattr(L, "run_epoch", real)
    rc, out, err = run_main(capsys, "demo", "--out", str(run), "--epochs", "3", "--device", "cpu", "--quiet")
    assert rc == 0, err
    assert (run / "eval.json").is_file() and (run / "pruning.csv").is_file()


# -- 7. Figure 6's windowed marks are not judged on a run shorter than twice the window ----------


def test_bandit_marks_on_windows_longer_than_the_run_are_not_judged(capsys):
    from bbb.experiments.bandit import run_bandit
    from bbb.experiments.bandit.config import EARLY_WINDOW, LATE_WINDOW

    ctx, edible = tiny_mushrooms()
    res = run_bandit(tiny_bandit_config(steps=300, seeds=(0,), agents=("bbb", "greedy", "egreedy_0.05")), contexts=ctx,
                     edible=edible)
    out = capsys.readouterr().out
    marks = {m["mark"]: m for m in res["marks"]}
    windowed = [m for name, m in marks.items() if "early" in name or "late window" in name or "learner" in name]
    assert len(windowed) == 4
    for m in windowed:
        assert m["holds"] is None and m["measured"].startswith("a 300-step run is shorter than twice its")
        assert f"{EARLY_WINDOW:,}-step" in m["measured"] or f"{LATE_WINDOW:,}-step" in m["measured"]
        assert f"not judged: {m['mark']}" in out
    assert marks["BBB has the lowest mean realised regret"]["holds"] in (True, False)  # the whole run: judged
    assert "of the first 300 and" in out and "first 1000" not in out


# -- 8. the examples: one line without the data, --synthetic said loudly, every flag with its help


def _example(name: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *argv], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})})


def test_an_example_without_data_stops_with_one_line_where_bbb_looks(tmp_path):
    empty = tmp_path / "no-data"
    p = _example("fashion_cnn", "--epochs", "1",
                 env={"BBB_DATA": str(empty), "BBB_DATA_URL": f"file://{tmp_path}/none"})
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fashion_cnn.py: error:") and str(empty) in lines[0], p.stderr
    assert "not found" in lines[0] and "Traceback" not in p.stderr and p.stdout == ""


@pytest.mark.parametrize("name", ["convert_pretrained", "lightning_module"])
def test_the_other_examples_on_mnist_look_where_bbb_looks_too(tmp_path, monkeypatch, name):
    from bbb.errors import DataError

    monkeypatch.setenv("BBB_DATA", str(tmp_path / "no-data"))
    monkeypatch.setenv("BBB_DATA_URL", f"file://{tmp_path}/none")
    spec = importlib.util.spec_from_file_location(f"bbb_example_nodata_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:  # an optional extra (lightning) not installed here
        pytest.skip(f"{name}: {e}")
    with pytest.raises(DataError, match="not found in .*no-data"):
        mod.main(["--train-size", "64", "--test-size", "16"])


def test_fashion_cnn_with_synthetic_data_says_so(capsys):
    spec = importlib.util.spec_from_file_location("bbb_example_fashion_cnn_synthetic", EXAMPLES / "fashion_cnn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--synthetic", "--train-size", "64", "--test-size", "16", "--batch-size", "32", "--eval-samples", "2"])
    err = capsys.readouterr().err
    assert "--synthetic: generated images, not Fashion-MNIST" in err


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py")))
def test_every_example_flag_has_help_and_its_default(name, monkeypatch):
    import argparse

    class Parsed(Exception):
        pass

    def capture(self, *a, **k):
        raise Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    spec = importlib.util.spec_from_file_location(f"bbb_example_help_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:  # an optional extra (lightning, transformers) not installed here
        pytest.skip(f"{name}: {e}")
    with pytest.raises(Parsed) as got:
        mod.main([])
    parser = got.value.args[0]
    assert "Example" in (parser.epilog or ""), name
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"{name} {flag}: no help"
        if action.default not in (None, False) and action.default != argparse.SUPPRESS:
            assert "(default" in action.help or "default:" in action.help, f"{name} {flag}: default not said"


# -- 9, 10. the plots say what they show ------------------------------------------------------------


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_ood_plot_labels_one_minus_max_prob_and_uncertain_titles_say_how_they_rank():
    import bbb.experiments.uncertainty as UE

    probs = torch.softmax(torch.randn(5, 40, 3, generator=torch.Generator().manual_seed(0)), -1)
    s_in, s_out = UE.ood_scores(probs), UE.ood_scores(probs.flip(1))
    fig = UE.plot_ood(s_in, s_out, UE.ood_report(probs, probs.flip(1)))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[2].startswith("1 - max probability") and fig.axes[2].get_xlabel() == "1 - max probability"
    mean_max = probs.mean(0).max(-1).values
    assert torch.allclose(s_in["max_prob"], 1 - mean_max)  # the data are what the label says

    res = UE.most_uncertain(probs, torch.zeros(40, dtype=torch.long), n=4)
    fig = UE.plot_uncertain(torch.rand(40, 16), torch.zeros(40, dtype=torch.long), res, None, 5)
    heads = [sf._suptitle.get_text() for sf in fig.subfigs]
    assert "mutual information between 5 sampled networks" in heads[0]
    assert "ranked by the predicted class's mean probability over 5 samples" in heads[1]
    disputed, _ = UE.ranking_titles(1)
    assert "predictive entropy" in disputed


def test_uncertain_json_says_how_it_ranks(capsys, tmp_path, datasets):
    run = train_run(capsys, tmp_path / "run", "--method", "sgd")
    rc, out, err = run_main(capsys, "uncertain", str(run), "--n", "3")
    assert rc == 0, err
    ranking = json.loads((run / "uncertain.json").read_text())["ranking"]
    assert "predictive entropy" in ranking["uncertain"] and "wrong predictions" in ranking["confident_errors"]
    # the checkpoint it scored, which bbb report names beside the grids (they may be of another than the results)
    rc, out, err = run_main(capsys, "uncertain", str(run), "--n", "3", "--which", "last")
    assert rc == 0, err
    assert json.loads((run / "uncertain.json").read_text())["checkpoint"] == "last"
    from bbb.experiments.report import report_html

    assert "<p>the last checkpoint</p>" in report_html([run]).split("Uncertain inputs", 1)[1]


# -- 11. bbb regression: the result line stays, and the error names the file -------------------


def test_regression_whose_summary_cannot_be_written_prints_its_result_and_names_the_file(capsys, tmp_path):
    out = tmp_path / "r"
    (out / "summary.json").mkdir(parents=True)  # where the file should go: a folder
    rc, stdout, err = run_main(capsys, "regression", "--out", str(out), "--epochs", "3", "--n-train", "10",
                               "--hidden", "4", "--samples", "10")
    line = one_line_error(rc, err, str(out / "summary.json"), "printed above")
    assert ".tmp" not in line and "~" not in line
    assert stdout.startswith("regression: BBB median RMSE")


def test_atomic_write_errors_name_the_file_not_its_temporary(tmp_path):
    from bbb.io import atomic_write_text

    (tmp_path / "x.json").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        atomic_write_text(tmp_path / "x.json", "{}")
    assert e.value.filename == str(tmp_path / "x.json")
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary file left


# -- 12. progress: no carriage returns in a log; a bar on a terminal, also one that reports no width


class FakeStderr(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_in_a_log_has_no_carriage_returns(monkeypatch, capsys, tmp_path, datasets):
    log = FakeStderr(tty=False)
    monkeypatch.setattr(sys, "stderr", log)
    for _ in progress_bar(range(50), desc="silent"):
        pass
    lines = LineProgress(total=4, desc="uci epochs", unit="epoch", every=0.0)
    for _ in range(4):
        lines.update(1)
    lines.close()
    rc, _, _ = run_main(capsys, "train", "--epochs", "2", "--out", str(tmp_path / "r"),
                        *[a for a in TINY if a != "--quiet"])
    assert rc == 0
    text = log.getvalue()
    assert "\r" not in text and "silent" not in text
    assert "uci epochs: 4/4 epoch (100%)" in text and text.count("uci epochs:") == 4
    assert "epoch 1/2  loss" in text and "epoch 2/2  loss" in text  # one line per epoch


def test_a_terminal_gets_a_bar_within_the_epoch_even_when_it_reports_no_width(monkeypatch):
    import bbb.progress as P

    term = FakeStderr(tty=True)
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(P, "_terminal_size", lambda: (0, 0))  # what tqdm would draw as nothing at all
    bar = progress_bar(range(30), desc="epoch 1/1", unit="batch", mininterval=0)
    for _ in bar:
        pass
    bar.close()
    assert (bar.ncols, bar.nrows) == (P.FALLBACK_COLUMNS, P.FALLBACK_ROWS)
    assert "epoch 1/1:" in term.getvalue() and "30/30" in term.getvalue()


# -- more of the same: the UCI report without matplotlib (it crashed at the end of a long run) --


def _results_csv(name: str) -> list[dict]:
    import csv

    def cell(v: str):
        try:
            return float(v) if v != "" else None
        except ValueError:
            return v

    with (ROOT / "results" / "uci" / name).open(newline="") as f:
        return [{k: cell(v) for k, v in r.items()} for r in csv.DictReader(f)]


def test_the_uci_report_without_matplotlib_writes_its_tables_and_skips_the_plot(tmp_path, no_matplotlib):
    from bbb.experiments.uci.report import write_tables

    meta = json.loads((ROOT / "results" / "uci" / "run.json").read_text())
    with pytest.warns(UserWarning, match="matplotlib is not installed"):
        written = write_tables(tmp_path, _results_csv("table.csv"), _results_csv("splits.csv"),
                               _results_csv("variants.csv"), meta, _results_csv("methods.csv"))
    assert [p.name for p in written] == ["table.csv", "methods.csv", "splits.csv", "variants.csv", "table.md"]
    assert not (tmp_path / "table.png").exists()
