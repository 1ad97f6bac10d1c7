"""``bbb report``: one self-contained HTML file of runs side by side (bbb.experiments.report).

Two tiny runs on synthetic data: a bbb run through every command that writes beside it
(train, evaluate, prune, ood, uncertain) and an sgd run that was only trained. The page is read
as text (every section, both names, the settings that differ marked, nothing outside the file)
and opened in a real headless chromium (tests/browserkit.py; skipped when there is none: .ci/run
installs it): every image decodes, the page requests nothing but itself and its data: URIs, and
the console stays empty.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import bbb.runs.model as RM
from bbb.cli import main
from bbb.errors import UserError
from bbb.experiments.report import report_html, write_report
from browserkit import INSTALL, chromium, open_page
from testkit import blobs, run_main

TINY = ["--hidden", "8", "--batch-size", "64", "--lr", "0.01", "--device", "cpu", "--eval-samples", "2", "--quiet"]


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory) -> Path:
    """A regression run trained on a CSV and evaluated."""
    root = tmp_path_factory.mktemp("report-regression")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(150, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(150, generator=g)
    table = root / "t.csv"
    table.write_text("a,b,c,y\n" + "".join(f"{r[0]:.5f},{r[1]:.5f},{r[2]:.5f},{t:.5f}\n"
                                            for r, t in zip(x.tolist(), y.tolist())))
    run = root / "regression"
    for argv in (["train", "--csv", str(table), "--target", "y", "--task", "regression", "--epochs", "2",
                  "--out", str(run), *TINY],
                 ["evaluate", str(run), "--samples", "3", "--device", "cpu"]):
        assert main(argv) == 0, argv
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """(a bbb run with every file, an sgd run with only its training)."""
    root = tmp_path_factory.mktemp("report")
    data = blobs()
    g = torch.Generator().manual_seed(1)
    sets = {"mnist": data,
            "fashion-mnist": {k: (0.3 * torch.randn(v.shape, generator=g) if k.endswith("_x") else v)
                              for k, v in data.items()}}
    full, bare = root / "bbb", root / "sgd"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])
        for argv in (["train", "--epochs", "2", "--out", str(full), *TINY],
                     ["evaluate", str(full), "--samples", "3", "--device", "cpu"],
                     ["prune", str(full), "--fractions", "0", "0.5", "--device", "cpu"],
                     ["ood", str(full), "--samples", "3", "--device", "cpu"],
                     ["uncertain", str(full), "--n", "4", "--samples", "3", "--device", "cpu"],
                     ["train", "--method", "sgd", "--epochs", "1", "--out", str(bare), *TINY]):
            assert main(argv) == 0, argv
    return full, bare


class Refs(html.parser.HTMLParser):
    """Every tag and every attribute that can refer to something (src, href, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "action", "data", "poster")]


def parse(text: str) -> Refs:
    p = Refs()
    p.feed(text)
    return p


def test_the_page_has_every_section_of_each_run_side_by_side(runs):
    full, bare = runs
    text = report_html([full, bare])
    for heading in ("Settings", "Results", "Learning curves", "Reliability", "risk-coverage", "Pruning",
                    "Out-of-distribution", "Uncertain inputs", "Next steps"):
        assert heading in text, heading
    assert text.count("<h3>bbb</h3>") == 6 and text.count("<h3>sgd</h3>") == 6  # one column per run and section
    assert "AURC by entropy" in text and "OOD AUROC by entropy (vs fashion-mnist)" in text
    # what differs is marked
    assert '<tr class=diff><td>method</td><td>Bayes by Backprop (--method bbb)</td><td>a plain network (SGD) ' \
           '(--method sgd)</td>' in text
    # what the bare run lacks: the command that writes it, by the run's name (no path); pruning is bbb's
    assert "none yet: <code><span>bbb</span> <span>evaluate</span> <span>sgd</span></code> writes it" in text
    assert "pruning by signal-to-noise needs a bbb run" in text and str(bare) not in text
    refs = parse(text)
    # bbb: learning curve (drawn from metrics.csv), reliability, risk-coverage, ood, uncertain; sgd: learning curve
    assert refs.tags.count("img") == 6
    assert all(r.startswith("data:image/png;base64,") for r in refs.refs)


def test_nothing_refers_outside_the_file(runs):
    text = report_html(list(runs))
    refs = parse(text)
    assert not {"script", "link", "iframe", "object", "embed", "base"} & set(refs.tags)
    assert all(r.startswith("data:") for r in refs.refs)
    assert "url(" not in text and "@import" not in text and "http" not in text.replace("http-equiv", "")


def test_a_regression_run_shows_its_rmse_and_aurc(runs, regression_run):
    text = report_html([runs[0], regression_run])
    for row in ("test RMSE (mean weights)", "test log-likelihood", "AURC (squared error, by predictive sd)"):
        assert row in text, row
    assert "<td>predictive sd</td>" in text
    assert parse(text).tags.count("img") == 7  # bbb's 5, the regression run's learning and calibration curves
    assert 'alt="calibration curve of' in text and "mean gap to the diagonal" in text
    # the evaluated classifier's interval-calibration cell said "none: bbb has no evaluate output"
    assert "has no evaluate output" not in text and "a classifier has no intervals" in text


def test_the_page_renders_in_a_real_browser(runs, regression_run, tmp_path):
    exe = chromium()
    if exe is None and os.environ.get("BBB_REQUIRE_CHROMIUM"):
        pytest.fail(f"BBB_REQUIRE_CHROMIUM is set but there is no chromium ({INSTALL})")
    if exe is None:
        pytest.skip(f"chromium is not installed ({INSTALL}; .ci/run installs it)")
    page_file = write_report([*runs, regression_run], tmp_path / "report.html")
    with open_page(page_file, exe) as page:
        images = page.evaluate("[...document.images].map(i => [i.alt, i.complete, i.naturalWidth])")
        assert len(images) == 8  # (the regression run's calibration curve among them)
        for alt, complete, width in images:
            assert complete and width > 0, alt
        outside = [u for u in page.requests if not (u.startswith("data:") or u == page_file.resolve().as_uri())]
        assert outside == []
        assert page.errors == []
        assert page.evaluate("document.title") == ("Bayes by Backprop vs a plain network (SGD) on MNIST (digit "
                                                   "classification, 240 training images); Bayes by Backprop on t.csv "
                                                   "(regression, 150 rows)")


def test_cli_writes_one_file_or_into_a_folder(runs, tmp_path, capsys):
    full, bare = runs
    rc, out, err = run_main(capsys, "report", str(full), str(bare), "--out", str(tmp_path / "r.html"))
    assert rc == 0, err
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>") and "wrote" in out
    rc, _, err = run_main(capsys, "report", str(full), "--out", str(tmp_path / "folder"), "--title", "mine")
    assert rc == 0, err
    assert "<title>mine</title>" in (tmp_path / "folder" / "report.html").read_text()
    # an existing file that is not .html (a run's eval.json, say) is neither the page nor its folder
    (tmp_path / "eval.json").write_text("{}")
    rc, _, err = run_main(capsys, "report", str(full), "--out", str(tmp_path / "eval.json"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "give FILE.html, or a folder" in err, err
    assert (tmp_path / "eval.json").read_text() == "{}"
    # a page of the user's own is not replaced; one bbb report wrote is
    (tmp_path / "mine.html").write_text("<html>my notes</html>")
    rc, _, err = run_main(capsys, "report", str(full), "--out", str(tmp_path / "mine.html"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "not a page bbb report wrote" in err, err
    assert (tmp_path / "mine.html").read_text() == "<html>my notes</html>"
    assert run_main(capsys, "report", str(bare), "--out", str(tmp_path / "r.html"))[0] == 0


def test_not_a_run_directory_is_one_line(runs, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "empty", tmp_path / "nowhere"):
        rc, _, err = run_main(capsys, "report", str(runs[0]), str(bad), "--out", str(tmp_path / "r.html"))
        assert rc == 2 and len(err.strip().splitlines()) == 1 and str(bad) in err, err
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(UserError, match="at least one"):
        report_html([])


def test_runs_of_the_same_name_are_told_apart(runs, tmp_path):
    for parent in ("a", "b"):
        shutil.copytree(runs[1], tmp_path / parent / "run")
    for parent, argv in (("a", ["train", "--epochs", "1", "--out", "a/run"]), ("b", ["-q", "my_script.py"])):
        config = tmp_path / parent / "run" / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "argv": argv}))
    text = report_html([tmp_path / "a" / "run", tmp_path / "b" / "run"])
    assert "<h3>a/run</h3>" in text and "<h3>b/run</h3>" in text
    # the command that trained each: bbb's, or a program calling the library
    assert "<code><span>bbb</span> <span>train</span> <span>--epochs</span> <span>1</span> <span>--out</span> " \
           "<span>run</span></code>" in text
    assert "from Python (arguments: <code>-q my_script.py</code>)" in text


def test_a_resumed_run_names_each_command_and_an_unfinished_one_says_so(runs, tmp_path):
    """The page named only the command that started a run resumed to more epochs (which reproduces
    another run), and said "trained 3 epochs" of a run stopped after 2 of them."""
    run = tmp_path / "run"
    shutil.copytree(runs[1], run)  # an sgd run of 1 epoch, resumed to 3 and stopped after epoch 2:
    config = json.loads((run / "config.json").read_text())
    first = ["train", "--method", "sgd", "--epochs", "1", "--out", "run"]
    again = ["train", "--resume", "--out", "run", "--epochs", "3"]
    config.update(argv=first, epochs=3, resumed=[{"after_epoch": 1, "argv": again}])
    (run / "config.json").write_text(json.dumps(config))
    (run / "summary.json").unlink()  # (removed as it trained on; written at its end)
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join([*lines, lines[-1].replace("1,", "2,", 1)]) + "\n")
    text = report_html([run])
    assert "then, after epoch 1, <code><span>bbb</span> <span>train</span> <span>--resume</span>" in text
    assert "2 of 3 epochs (stopped before its end: resumable)" in text and "trained 3 epochs" not in text
    assert ("<span>train</span> <span>--resume</span> <span>--out</span> <span>run</span></code>: finishes its "
            "training: it stopped after epoch 2 of 3") in text


def test_the_learning_curve_of_a_regression_run_is_in_its_units():
    pytest.importorskip("matplotlib")
    from bbb import plots

    fig = plots.learning_curve([{"epoch": 1, "val_error": 0.5, "train_loss": 1.0, "nll": 1.0}], rmse=True)
    assert fig.axes[0].get_ylabel() == "RMSE" and list(fig.axes[0].lines[0].get_ydata()) == [0.5]
