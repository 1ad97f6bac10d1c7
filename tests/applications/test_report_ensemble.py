"""``bbb report`` of an ensemble's folder (``bbb evaluate RUN RUN ... --out DIR``) beside a run
(bbb.experiments.report_files): the ensemble's own scores, its members' settings, commands and
training time; the commands it suggests run as written; a score of earlier members' networks is
left out with the command that scores them again, as ``bbb compare`` refuses it."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch

import bbb.runs.model as RM
from bbb.cli import main
from testkit import image_sets, run_main

from .test_report_page import Page, page

TINY = ["--hidden", "8", "--batch-size", "64", "--epochs", "2", "--device", "cpu", "--eval-samples", "2", "--quiet",
        "--train-size", "240"]


@pytest.fixture(scope="module")
def sets() -> dict[str, dict[str, torch.Tensor]]:
    return image_sets()


@pytest.fixture()
def image_data(monkeypatch, sets):
    monkeypatch.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, sets) -> Path:
    """A folder with a bbb run and two sgd runs (seeds 0 and 1), only trained."""
    root = tmp_path_factory.mktemp("report-ensemble")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])
        for argv in (["train", "--out", str(root / "bbb"), *TINY],
                     *(["train", "--method", "sgd", "--seed", str(s), "--out", str(root / f"sgd{s}"), *TINY]
                       for s in (0, 1))):
            mp.setattr(sys, "argv", ["bbb", *argv])  # (what config.json records as the command)
            assert main(argv) == 0, argv
    return root


def rows(p: Page, last_head: str) -> dict[str, list[str]]:
    """The table whose header ends in ``last_head``, as {first cell: the other cells}."""
    table = next(t for t in p.tables if t and t[0][-1] == last_head)
    return {r[0]: r[1:] for r in table[1:]}


def test_an_ensemble_is_a_column_with_its_own_scores_and_its_members_settings(trained, tmp_path, monkeypatch,
                                                                              capsys, image_data):
    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    monkeypatch.chdir(root)  # the members as a user names them: relative to where the commands run
    for command in ("evaluate", "ood"):
        rc, _, err = run_main(capsys, command, "sgd0", "sgd1", "--out", "ens", "--samples", "2", "--device", "cpu")
        assert rc == 0, err
    ev = json.loads((root / "ens" / "eval.json").read_text())
    ood = json.loads((root / "ens" / "ood.json").read_text())
    text, p = page(["bbb", "ens"])
    assert str(tmp_path) not in text
    results = rows(p, "what it means")
    assert results["test error (k-sample average)"][1] == f"{100 * ev['test_error_mc']:.2f}% (k={ev['samples']})"
    assert results["test NLL (nats)"][1] == f"{ev['nll']:.4g}"
    assert results["test error (mean weights)"][1] == "-"  # (an ensemble has no mean weights)
    auroc = ood["scores"]["entropy"]["auroc"]
    assert any(label.startswith("OOD AUROC by entropy") and cells[1] == f"{auroc:.4g}"
               for label, cells in results.items())
    epochs = [m["epoch"] for m in ev["member_scores"]]
    assert results["model"][1] == f"the best of each of its 2 members (epochs {epochs[0]}, {epochs[1]})"
    seconds = sum(json.loads((root / m / "summary.json").read_text())["seconds"] for m in ("sgd0", "sgd1"))
    assert results["training time"][1] == f"{seconds:.1f} s (its members' sum)"
    settings = rows(p, "ens")
    assert settings["members"] == ["-", "sgd0, sgd1"]
    assert settings["seed"][1] == "0, 1"  # each member's, not the first's
    assert [c.count("bbb train --method sgd --seed") for c in settings["command"]] == [0, 2]
    assert "an ensemble of 2 runs (sgd x 2): sgd0, sgd1, each a plain network (SGD), trained" in text
    # what it lacks: the uncertain inputs of its members, --out its folder (never bbb prune or predict)
    assert [c for c in p.commands if "ens" in c.split()] == ["bbb uncertain sgd0 sgd1 --out ens"]
    rc, _, err = run_main(capsys, *shlex.split(p.commands[-1])[1:], "--n", "4", "--samples", "2", "--device", "cpu")
    assert rc == 0, err
    text, p = page(["bbb", "ens"])
    assert not [c for c in p.commands if "ens" in c.split()] and 'alt="most uncertain inputs of ens"' in text
    assert "an ensemble is pruned member by member" in text


def test_an_ensemble_score_of_earlier_members_is_left_out_as_compare_refuses_it(trained, tmp_path, monkeypatch,
                                                                                capsys, image_data):
    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    monkeypatch.chdir(root)
    rc, _, err = run_main(capsys, "evaluate", "sgd0", "sgd1", "--which", "last", "--out", "ens", "--device", "cpu")
    assert rc == 0, err
    assert "test error (k-sample average)" in rows(page(["ens"])[1], "what it means")
    rc, _, err = run_main(capsys, "train", "--resume", "--epochs", "3", "--out", "sgd1", "--quiet", "--device", "cpu")
    assert rc == 0, err
    text, p = page(["ens"])
    assert "test error (k-sample average)" not in rows(p, "what it means")
    why = "its member sgd1 trained on since `bbb evaluate` scored it"
    assert why in text and "bbb evaluate sgd0 sgd1 --which last --out ens" in p.commands
    rc, _, err = run_main(capsys, "compare", "ens", "--out", "cmp")
    assert rc != 0 and why in err, err


def test_an_ensemble_score_of_a_member_since_replaced_is_left_out(trained, tmp_path, monkeypatch, capsys, image_data):
    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    monkeypatch.chdir(root)
    assert run_main(capsys, "evaluate", "sgd0", "sgd1", "--out", "ens", "--device", "cpu")[0] == 0
    assert "test error (k-sample average)" in rows(page(["ens"])[1], "what it means")  # (its own paths: no false alarm)
    config = json.loads((root / "sgd0" / "config.json").read_text())
    config["run_id"] = "0123456789abcdef"  # what --overwrite's new run of as many epochs writes: another id
    (root / "sgd0" / "config.json").write_text(json.dumps(config))
    text, p = page(["ens"])
    assert "test error (k-sample average)" not in rows(p, "what it means")
    assert "its member sgd0 was replaced since `bbb evaluate` scored it" in text


def test_an_ensemble_whose_member_is_not_there_is_one_line(trained, tmp_path, monkeypatch, capsys, image_data):
    root = tmp_path / "runs"
    shutil.copytree(trained, root)
    monkeypatch.chdir(root)
    assert run_main(capsys, "evaluate", "sgd0", "sgd1", "--out", "ens", "--device", "cpu")[0] == 0
    monkeypatch.chdir(tmp_path)  # the members' names are relative to runs/
    rc, _, err = run_main(capsys, "report", "runs/ens", "--out", "r.html")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "member sgd0 is not there" in err and "run bbb report where that command ran" in err
    monkeypatch.chdir(root)
    rc, _, err = run_main(capsys, "report", "bbb", "ens", "--out", "r.html")
    assert rc == 0, err
