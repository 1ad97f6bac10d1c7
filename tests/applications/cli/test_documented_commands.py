"""What a newcomer copies from the README, the docs and ``--help`` (issue 72, items 12 and 4):
nothing documented writes into the committed ``results/`` folders, the extras the README lists are
the package's, and a second call of a one-shot command does not replace the first's files silently.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from bbb.cli.registry import COMMANDS
from testkit import run_main

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``--out results/...`` except the placeholder NAME of the sentence that says where results/ came from
INTO_RESULTS = re.compile(r"--out\s+['\"]?results/(?!NAME)")


def _help_texts(capsys) -> dict[str, str]:
    texts = {}
    for name in COMMANDS:
        rc, out, _ = run_main(capsys, name, "--help")
        assert rc == 0, name
        texts[name] = out
    for sub in ("mnist", "uci", "lora"):
        rc, out, _ = run_main(capsys, "reproduce", sub, "--help")
        assert rc == 0, sub
        texts[f"reproduce {sub}"] = out
    return texts


def test_no_documented_command_writes_into_the_committed_results(capsys):
    """A command copied from the README, a docs page or an example in ``--help`` writes into
    ``runs/`` (git-ignored), never over the committed ``results/`` tables (``bbb regression --out
    results/regression``, the README's own words, once replaced them without a word)."""
    found = []
    for page in PAGES:
        for i, line in enumerate(page.read_text().splitlines(), 1):
            if INTO_RESULTS.search(line):
                found.append(f"{page.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
            if page.name == "README.md" and "bash results/" in line and "RESULTS=" not in line:
                found.append(f"README.md:{i}: a results/ script without RESULTS=: {line.strip()[:100]}")
    for name, text in _help_texts(capsys).items():
        for line in text.splitlines():
            if INTO_RESULTS.search(line):
                found.append(f"bbb {name} --help: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_no_command_defaults_to_a_results_folder():
    from bbb.experiments.lora.command import DEFAULT_OUT as LORA
    from bbb.experiments.mnist.command import DEFAULT_OUT as MNIST
    from bbb.experiments.uci.settings import DEFAULT_OUT as UCI
    from bbb.experiments.uci.settings import UCIConfig

    for out in (LORA, MNIST, UCI, UCIConfig().out):
        assert not Path(out).parts[0] == "results", out


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_readme_names_every_extra_of_the_package(page):
    """docs/index.md's list lacked images, lora, tensorboard and laplace."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = (ROOT / page).read_text()
    listed = text[text.index("Extras:"):].split("\n\n")[0]
    missing = [e for e in extras if f"`{e}`" not in listed]
    assert not missing, f"{page}'s extras list lacks {missing}"


def test_the_help_of_evaluate_and_ood_names_what_they_take(capsys):
    """bbb evaluate --help described a classifier's scores and figures only (a regression run's
    are its RMSE, log-likelihood, coverage and calibration.png); bbb ood --help named bbb, dropout
    and sgd runs, not the ivon runs and bbb laplace folders it scores too."""
    texts = _help_texts(capsys)
    for words in ("regression", "RMSE", "log-likelihood", "calibration.png", "noise_sd"):
        assert words in texts["evaluate"], words
    ood = " ".join(texts["ood"].split())
    assert "ivon" in ood and "laplace" in ood


def test_a_second_regression_call_refuses_to_replace_the_first_ones_files(capsys, tmp_path):
    """``bbb regression`` writes regression.csv, summary.json and the figure: a second call into the
    same folder is one line before anything trains, unless ``--overwrite``."""
    out = tmp_path / "reg"
    tiny = ["regression", "--out", str(out), "--epochs", "2", "--n-train", "20", "--samples", "8",
            "--hidden", "8"]
    rc, _, err = run_main(capsys, *tiny)
    assert rc == 0, err
    before = (out / "summary.json").read_bytes()
    rc, out_text, err = run_main(capsys, *tiny, "--seed", "1")
    assert rc != 0 and "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert "regression:" not in out_text  # nothing trained
    assert (out / "summary.json").read_bytes() == before
    rc, _, err = run_main(capsys, *tiny, "--seed", "1", "--overwrite")
    assert rc == 0, err
    assert (out / "summary.json").read_bytes() != before


@pytest.mark.parametrize("line", ["bbb regression --out results/regression",
                                  "bbb reproduce uci --out 'results/uci' --workers 2"])
def test_the_results_pattern_catches_what_it_should(line):
    assert INTO_RESULTS.search(line)
    assert not INTO_RESULTS.search("the same commands with `--out results/NAME`")
