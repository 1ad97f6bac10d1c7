"""``bbb report`` read as the person it is sent to reads it (issue 72, item 11).

Three tiny runs, one of each kind: a classification and a regression run on a CSV, and an image
run (synthetic blobs standing in for MNIST). For each: the title names the data (the file's base
name, or the dataset) and the task; no absolute path is anywhere on the page; each metric shown
has its line of explanation; the settings are the ones that matter and apply; and every command
the page suggests is run, on that run, and succeeds (then the page suggests it no more).
"""

from __future__ import annotations

import html.parser
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

import bbb.errors as bbb_errors
import bbb.runs.evaluation as EV
import bbb.runs.model as RM
from bbb.cli import main
from bbb.experiments import report_text as RT
from bbb.experiments.report import read_run, report_html, result_rows
from testkit import image_sets

TINY = ["--hidden", "8", "--batch-size", "64", "--epochs", "2", "--device", "cpu", "--eval-samples", "2", "--quiet"]


def _table(path: Path, n: int = 200) -> Path:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    score = x @ torch.tensor([1.0, -2.0, 0.5])
    plans = ["basic", "plus", "pro"]
    path.write_text("age,income,plan,churn,spend\n" + "".join(
        f"{r[0]:.4f},{r[1]:.4f},{plans[i % 3]},{'yes' if s > 0 else 'no'},{s + 0.1 * r[2]:.4f}\n"
        for i, (r, s) in enumerate(zip(x.tolist(), score.tolist()))))
    return path


@pytest.fixture(scope="module")
def sets() -> dict[str, dict[str, torch.Tensor]]:
    return image_sets()


@pytest.fixture(scope="module")
def kinds(tmp_path_factory, sets) -> dict[str, Path]:
    """{kind: a run only trained}: ``table`` and ``regression`` on customers.csv, ``image`` on MNIST
    (blobs)."""
    root = tmp_path_factory.mktemp("report-page")
    table = _table(root / "customers.csv")
    runs = {"table": root / "churn", "regression": root / "spend", "image": root / "digits"}
    for argv in (["train", "--csv", str(table), "--target", "churn", "--task", "classification",
                  "--out", str(runs["table"]), *TINY],
                 ["train", "--csv", str(table), "--target", "spend", "--task", "regression",
                  "--out", str(runs["regression"]), *TINY]):
        assert main(argv) == 0, argv
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])
        assert main(["train", "--train-size", "240", "--out", str(runs["image"]), *TINY]) == 0
    return runs


class Page(html.parser.HTMLParser):
    """The text of the page's title, its results rows (cells) and the commands of its list items."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.title = ""
        self.tables: list[list[list[str]]] = []
        self.commands: list[str] = []
        self._li_code: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "code" and "li" in self.stack:
            self._li_code = []

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "code" and self._li_code is not None:
            self.commands.append(" ".join("".join(self._li_code).split()))
            self._li_code = None

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "title":
            self.title += data
        if self._cell is not None:
            self._cell.append(data)
        if self._li_code is not None:
            self._li_code.append(data)


def page(run_dirs) -> tuple[str, Page]:
    text = report_html(run_dirs)
    p = Page()
    p.feed(text)
    return text, p


def results_table(p: Page) -> list[list[str]]:
    return next(t for t in p.tables if t and t[0][-1] == "what it means")


def test_the_title_names_the_data_the_task_and_the_size(kinds):
    assert page([kinds["table"]])[1].title == "Bayes by Backprop on customers.csv (classification, 200 rows)"
    assert page([kinds["regression"]])[1].title == "Bayes by Backprop on customers.csv (regression, 200 rows)"
    assert page([kinds["image"]])[1].title == "Bayes by Backprop on MNIST (digit classification, 240 training images)"


def test_no_absolute_path_is_on_the_page(kinds, tmp_path):
    root = kinds["table"].parent
    typed = tmp_path / "typed"  # a run trained by the bbb command, its paths typed in full
    shutil.copytree(kinds["table"], typed)
    config = json.loads((typed / "config.json").read_text())
    config["argv"] = ["train", "--csv", str(root / "customers.csv"), "--target", "churn", f"--out={typed}"]
    (typed / "config.json").write_text(json.dumps(config))
    text, _ = page([*kinds.values(), typed])
    for path in (root, *kinds.values(), root / "customers.csv", typed):
        assert str(path) not in text, path
    assert str(root.parent) not in text and "/tmp" not in text and str(Path.home()) not in text
    # the command that trained it: the data file and the run folder by their base names
    assert "<span>--csv</span> <span>customers.csv</span>" in text and "<span>--out=typed</span>" in text
    assert RT.command_text(["x", "/a/b c/d.csv", "~/e", "rel/f"]) == "bbb x d.csv e f"


def test_each_metric_shown_has_its_explanation(kinds, sets, tmp_path, monkeypatch):
    runs = {k: tmp_path / k for k in kinds}
    for k, d in kinds.items():
        shutil.copytree(d, runs[k])
    monkeypatch.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])
    for d in runs.values():
        assert main(["evaluate", str(d), "--samples", "3", "--device", "cpu"]) == 0
    assert main(["ood", str(runs["image"]), "--samples", "3", "--device", "cpu"]) == 0
    for kind, d in runs.items():
        rows = results_table(page([d])[1])[1:]
        labels = [r[0] for r in rows]
        assert len(rows) >= 8, (kind, labels)
        for label, *_, means in rows:
            assert len(means) > 20, (kind, label)
        explained = " ".join(r[-1] for r in rows).lower()
        # each term a label uses is spelled out in the explanations
        terms = {"ECE": "expected calibration error", "AURC": "area under the risk-coverage curve",
                 "MI": "mutual information", "NLL": "negative log-likelihood", "Brier": "squared distance",
                 "RMSE": "root mean squared error", "mean weights": "mean of its distribution",
                 "k-sample": "k networks", "90%": "referral", "log-likelihood": "log density",
                 "sd": "standard deviation", "OOD": "out-of-distribution"}
        used = [t for t in terms if any(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", label) for label in labels)]
        assert {"AURC", "mean weights", "k-sample", "90%"} <= set(used), (kind, used)
        if kind != "regression":
            assert {"ECE", "MI", "NLL", "Brier"} <= set(used), (kind, used)
        for term in used:
            assert terms[term] in explained, (kind, term)
    # every row a run can show has its line (not only the rows these runs filled)
    assert {key for key, _, _ in result_rows(read_run(runs["table"]))} <= set(RT.EXPLAIN)
    assert {key for key, _, _ in result_rows(read_run(runs["regression"]))} <= set(RT.EXPLAIN)


def suggestions(run: Path) -> list[str]:
    return page([run])[1].commands


def test_each_suggested_command_runs_on_that_kind_of_run(kinds, sets, tmp_path, monkeypatch, capsys):
    want = {"table": ["evaluate", "prune", "ood", "predict"], "regression": ["evaluate", "prune", "ood", "predict"],
            "image": ["evaluate", "prune", "ood", "uncertain"]}
    monkeypatch.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])
    for kind, original in kinds.items():
        run = tmp_path / kind / original.name
        shutil.copytree(original, run)
        commands = suggestions(run)
        assert [shlex.split(c)[1] for c in commands] == want[kind], (kind, commands)
        monkeypatch.chdir(run.parent)  # the commands name the run by its folder, as the column heads do
        shutil.copy(original.parent / "customers.csv", run.parent / "new_customers.csv")
        for command in commands:
            argv = shlex.split(command)
            assert argv[0] == "bbb" and argv[2] == run.name, command
            rc = main(argv[1:])
            out, err = capsys.readouterr()
            assert rc == 0, (kind, command, err)
        # what they wrote is on the page now, and they are suggested no more (bbb predict, for new
        # rows, stays)
        text, p = page([run])
        assert [shlex.split(c)[1] for c in p.commands] == (["predict"] if kind != "image" else []), p.commands
        assert "none yet" not in text
        # a regression's interval calibration (bbb evaluate's calibration.png), a classifier's reliability
        assert ('alt="calibration curve of' in text) == (kind == "regression"), kind
        assert ('alt="reliability diagram of' in text) == (kind != "regression"), kind


def test_the_settings_are_the_ones_that_matter_and_apply(kinds, tmp_path):
    rows = dict(RT.settings_rows(read_run(kinds["table"]).config, False))
    for key in ("data", "target", "inputs", "rows", "method", "network", "prior", "epochs", "seed"):
        assert key in rows, key
    assert rows["target"] == "churn (2 classes: no, yes)" and rows["inputs"] == "4 columns: age, income, plan, spend"
    # settings of another kind of data, another method, or the machine: never
    for absent in ("scale", "val size", "dropout", "data dir", "device", "threads", "likelihood", "momentum",
                   "lr step size", "checkpoint every", "preprocess", "versions", "argv"):
        assert absent not in rows, absent
    assert len(rows) < 20
    image = dict(RT.settings_rows(read_run(kinds["image"]).config, False))
    assert "target" not in image and "val fraction" not in image and image["images"].startswith("240 to train")
    # bbb train's k, named as such: the results' k is bbb evaluate's --samples where it ran (it said "for the test")
    assert image["networks sampled by bbb train's test (--eval-samples)"] == str(read_run(kinds["image"]).config[
        "eval_samples"]) and "networks sampled for the test (k)" not in image
    # a setting changed from its default is shown; left at its default, it is not
    table = _table(tmp_path / "t.csv")
    for out, extra in (("lr", ["--lr", "0.05"]), ("plain", [])):
        assert main(["train", "--csv", str(table), "--target", "churn", "--task", "classification", "--method", "sgd",
                     "--out", str(tmp_path / out), *TINY, *extra]) == 0
    changed = dict(RT.settings_rows(read_run(tmp_path / "lr").config, False))
    plain = dict(RT.settings_rows(read_run(tmp_path / "plain").config, False))
    assert changed["lr"] == "0.05" and "lr" not in plain
    assert "prior" not in plain and "weight samples per training step" not in plain  # bbb's only
    assert "kl weighting" not in changed  # not for an sgd run, whatever its value


def test_sections_that_cannot_apply_are_left_out(kinds):
    text, _ = page([kinds["regression"]])
    for heading in ("Reliability", "Out-of-distribution", "Uncertain inputs"):
        assert f"<h2>{heading}" not in text, heading
    assert "<h2>Pruning" in text  # (a bbb regression's: its test RMSE as weights are removed)
    text, _ = page([kinds["table"]])
    assert "<h2>Pruning" in text and "<h2>Out-of-distribution" not in text and "bbb ood" not in text
    text, _ = page([kinds["table"], kinds["image"]])  # side by side: the table's column says why
    assert "bbb ood RUN --ood-data FILE" in text and "drawn for image runs" in text


def test_the_plots_name_the_data_file_not_file(kinds, tmp_path, monkeypatch):
    titles = []
    real = EV.plot_reliability
    monkeypatch.setattr(EV, "plot_reliability", lambda *a, **kw: titles.append(kw.get("title")) or real(*a, **kw))
    run = tmp_path / "churn"
    shutil.copytree(kinds["table"], run)
    assert main(["evaluate", str(run), "--samples", "2", "--device", "cpu"]) == 0
    assert titles == ["bbb on customers.csv test"]


def test_the_labels_of_the_uncertain_digits_are_readable():
    pytest.importorskip("matplotlib")
    from bbb.experiments import uncertainty as UE

    probs = torch.softmax(torch.randn(5, 40, 4, generator=torch.Generator().manual_seed(0)), -1)
    labels = torch.arange(40) % 4
    fig = UE.plot_uncertain(torch.rand(40, 16), labels, UE.most_uncertain(probs, labels, n=8), None, 5)
    titles = [ax.title for sf in fig.subfigs for ax in sf.axes if ax.get_title()]
    assert titles and all(t.get_fontsize() >= 10 for t in titles)
    # two short lines: the true class and the disagreement, then the top classes' vote shares
    assert all(re.fullmatch(r"y=\d, MI \d\.\d{3}\n\d:\d+%(, \d:\d+%)?", t.get_text()) for t in titles), \
        [t.get_text() for t in titles]


def test_the_model_row_names_the_checkpoint_of_eval_json(kinds, tmp_path):
    """bbb evaluate --which last: the test numbers, the model row and the validation error are the
    last epoch's, not summary.json's best one."""
    run = shutil.copytree(kinds["table"], tmp_path / "churn")
    s = json.loads((run / "summary.json").read_text())
    s.update(model="best", best_epoch=1, epochs=2, val_error=0.5, last_val_error=0.25)
    (run / "summary.json").write_text(json.dumps(s))
    (run / "eval.json").write_text(json.dumps({"checkpoint": "last", "epoch": 2, "samples": 3, "test_error": 0.125,
                                               "test_error_mc": 0.125, "nll": 0.3, "n": 40}))
    rows = {label: v for _, label, v in result_rows(read_run(run))}
    assert rows["model"] == "last (epoch 2 of 2)"
    # labelled as the last epoch's: "validation error" is explained as that of the epoch these rows chose
    assert rows["validation error (last epoch)"] == "25.00%" and rows["validation error"] == "-"
    assert rows["test error (mean weights)"] == "12.50%"
    (run / "eval.json").unlink()
    rows = {label: v for _, label, v in result_rows(read_run(run))}
    assert rows["model"] == "best (epoch 1 of 2)" and rows["validation error"] == "50.00%"
    assert rows["validation error (last epoch)"] == "-"


def test_a_run_given_twice_is_refused_in_one_line(kinds, tmp_path, capsys):
    # before, `bbb report RUN RUN` drew two identical columns, a run compared with itself
    run = kinds["table"]
    again = run.parent / "x" / ".." / run.name  # the same folder, spelled otherwise
    with pytest.raises(bbb_errors.UserError, match="given twice"):
        report_html([run, again])
    rc = main(["report", str(run), str(run), "--out", str(tmp_path / "page.html")])
    err = capsys.readouterr().err
    assert rc == 2 and "given twice" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "page.html").exists()


def test_the_uncertain_caption_of_one_network_says_entropy_not_sampled_networks(kinds, tmp_path):
    """An sgd run's grid is ranked by its one network's entropy (bbb uncertain, k = 1): the caption
    spoke of "the 1 sampled networks" disagreeing and of vote shares."""
    run = tmp_path / "sgd-digits"
    shutil.copytree(kinds["image"], run)
    digits = [{"group": "uncertain"}] * 3 + [{"group": "confident_errors"}] * 2
    for k, says, never in ((1, "3 most uncertain (the highest entropy of the one network)", "sampled networks"),
                           (30, "MI, how much the 30 sampled networks disagree", "the one network")):
        (run / "uncertain.json").write_text(json.dumps({"samples": k, "digits": digits}))
        text = " ".join(re.sub(r"<[^>]+>", " ", report_html([run]).split("Uncertain inputs", 1)[1]).split())
        caption = text.split("sgd-digits", 1)[1].split("Settings")[0]  # (the run's, after the section's)
        assert says in caption and never not in caption, caption
