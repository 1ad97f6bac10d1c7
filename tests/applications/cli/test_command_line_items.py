"""The smaller command-line defects of issue 72 ("your own data, never silently wrong"), each held
here: a closed stdout (``bbb ... | head``) ends a command quietly; ``bbb uncertain``'s disputed
grid ranks and labels by what its title says; an interrupted ``bbb train`` says the command that
continues it, and its same command, refused, says the flag to add; "1 epoch", not "1 epochs";
``bbb train`` prints ECE in percent, as every other command does.

Commands run in-process through ``bbb.cli.main`` on tiny synthetic data (``load_data`` patched);
one runs in a subprocess, on a real pipe whose reader is gone.
"""

from __future__ import annotations

import errno
import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bbb.runs.loop as L
import bbb.runs.model as RM
from bbb.cli.entry import BROKEN_PIPE_EXIT
from bbb.progress import plural
from faultkit import env
from testkit import blobs, run_main

TINY = ["--hidden", "16", "--batch-size", "32", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3",
        "--quiet"]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture
def datasets(monkeypatch) -> None:
    """Every data load returns tiny blobs (another set for each data set)."""
    monkeypatch.setattr(RM, "load_data", lambda cfg: blobs(seed=0 if cfg.dataset == "mnist" else 1))


def train_run(capsys, out: Path, *more: str) -> Path:
    rc, _, err = run_main(capsys, "train", "--epochs", "1", "--out", str(out), *TINY, *more)
    assert rc == 0, err
    return out


# -- a closed stdout: the command ends quietly, exit 141, no line about a path ----------------------


class ClosedPipe(io.TextIOBase):
    """stdout whose reader is gone: every write fails as a pipe's does (EPIPE)."""

    def write(self, s: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


def test_a_closed_stdout_ends_every_printing_command_quietly(capsys, tmp_path, datasets, monkeypatch):
    run = train_run(capsys, tmp_path / "run")
    commands = [
        [],  # bare bbb: its help
        ["sweep", "--space", "paper", "--set", "epochs=2", "--limit", "3", "--dry-run"],
        ["sweep", "--space", "paper", "--show-space"],
        ["train", "--epochs", "1", "--out", str(tmp_path / "new"), *TINY],
        ["evaluate", str(run), "--samples", "2", "--device", "cpu"],
        ["prune", str(run), "--fractions", "0", "0.5", "--device", "cpu"],
        ["uncertain", str(run), "--samples", "3", "--n", "4"],
        ["ood", str(run), "--samples", "3"],
        ["compare", str(run), "--out", str(tmp_path / "cmp")],
        ["regression", "--out", str(tmp_path / "reg"), "--epochs", "3", "--n-train", "10", "--hidden", "4",
         "--samples", "10"],
    ]
    for argv in commands:
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", ClosedPipe())
            rc, _, err = run_main(capsys, *argv)
        # (argparse's help, the bare bbb, drops a write that fails itself: exit 0, as Unix tools may)
        assert rc in ({0, BROKEN_PIPE_EXIT} if not argv else {BROKEN_PIPE_EXIT}), (argv, rc, err)
        assert "error" not in err and "path" not in err and "Traceback" not in err, (argv, err)


def test_bbb_sweep_into_a_pipe_whose_reader_is_gone_ends_quietly():
    assert BROKEN_PIPE_EXIT == 141  # (what a shell gives a process that SIGPIPE ended)
    read, write = os.pipe()
    os.close(read)  # `| head -2` that has read its lines
    try:
        p = subprocess.run([sys.executable, "-m", "bbb", "sweep", "--space", "paper", "--set", "epochs=2",
                            "--dry-run"], stdout=write, stderr=subprocess.PIPE, text=True, env=env(), timeout=300)
    finally:
        os.close(write)
    assert p.returncode == 141 and p.stderr == "", (p.returncode, p.stderr)


# -- bbb uncertain: the disputed grid is ranked by the votes, and says the votes and the MI ---------


def test_the_disputed_digits_are_those_the_networks_vote_apart_on_then_by_mutual_information():
    import bbb.experiments.uncertainty as UE

    k = 6
    probs = torch.zeros(k, 3, 3)
    probs[:, 0] = torch.tensor([0.98, 0.01, 0.01])  # unanimous and sure
    probs[:3, 1] = torch.tensor([0.99, 0.005, 0.005])  # unanimous votes for 0, probabilities far apart:
    probs[3:, 1] = torch.tensor([0.40, 0.35, 0.25])  # the highest mutual information
    probs[:3, 2] = torch.tensor([0.51, 0.49, 0.0])  # the votes split 3:3, nearly the same probabilities
    probs[3:, 2] = torch.tensor([0.49, 0.51, 0.0])
    res = UE.most_uncertain(probs, torch.zeros(3, dtype=torch.long), n=3)
    assert res["disagreement"][1] > res["disagreement"][2]  # (the grid ranked by MI put 1 first)
    assert res["uncertain"].tolist() == [2, 1, 0]  # split votes first; then, all unanimous, by MI
    assert res["dissent"].tolist() == pytest.approx([0.0, 0.0, 0.5])


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_each_disputed_digit_is_labelled_with_its_votes_and_its_mutual_information():
    import bbb.experiments.uncertainty as UE

    probs = torch.softmax(torch.randn(5, 40, 3, generator=torch.Generator().manual_seed(0)), -1)
    res = UE.most_uncertain(probs, torch.zeros(40, dtype=torch.long), n=4)
    fig = UE.plot_uncertain(torch.rand(40, 16), torch.zeros(40, dtype=torch.long), res, None, 5)
    head = fig.subfigs[0]._suptitle.get_text().replace("\n", " ")
    assert "votes against the majority class" in head and "mutual information" in head
    titles = [ax.get_title() for ax in fig.subfigs[0].axes if ax.get_title()]
    assert len(titles) == 4
    for i, title in zip(res["uncertain"].tolist(), titles):
        assert f"MI {float(res['disagreement'][i]):.3f}" in title and "%" in title, title


# -- an interrupted bbb train: the command that continues it, the flag its same command needs -------


def test_an_interrupted_train_says_how_to_continue_and_its_same_command_says_the_flag(
        capsys, tmp_path, datasets, monkeypatch):
    real, calls = L.run_epoch, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(L, "run_epoch", interrupted)
    out = tmp_path / "my run"  # (a space: the command printed must still be one to paste)
    argv = ["train", "--epochs", "3", "--out", str(out), *TINY]
    rc, _, err = run_main(capsys, *argv)
    assert rc == 130 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("bbb train: interrupted during epoch 2;"), err
    command = err.split("resume with: ", 1)[1].strip()
    assert shlex.split(command) == ["bbb", "train", "--resume", "--out", str(out)], command
    monkeypatch.setattr(L, "run_epoch", real)
    rc, _, err = run_main(capsys, *argv)  # the same command again: one line saying which flag to add
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("bbb train: error: "), err
    assert "stopped before its end" in lines[0] and "add --resume to the same command" in lines[0], err
    rc, _, err = run_main(capsys, *shlex.split(command)[1:])  # the printed command continues it to its end
    assert rc == 0, err
    assert json.loads((out / "summary.json").read_text())["epochs"] == 3


# -- "1 epoch", not "1 epochs" --------------------------------------------------------------------


def test_counts_of_one_are_singular(capsys):
    assert (plural(1, "epoch"), plural(0, "epoch"), plural(2, "trial")) == ("1 epoch", "0 epochs", "2 trials")
    rc, out, err = run_main(capsys, "sweep", "--space", "paper", "--set", "epochs=1", "--limit", "1", "--dry-run")
    assert rc == 0, err
    assert "\n1 trial, 1 epoch; estimated" in out, out


# -- ECE: in percent wherever a person reads it ------------------------------------------------------


def test_bbb_train_prints_ece_in_percent_as_evaluate_does(capsys, tmp_path, datasets):
    rc, out, err = run_main(capsys, "train", "--epochs", "1", "--out", str(tmp_path / "run"), *TINY)
    assert rc == 0, err
    ece = json.loads((tmp_path / "run" / "summary.json").read_text())["test_ece"]  # (the file: a fraction)
    row = next(line for line in out.splitlines() if line.startswith("test NLL / ECE / Brier"))
    assert row.split("/")[-2].strip() == f"{100 * ece:.2f}%", row
    rc, out, err = run_main(capsys, "evaluate", str(tmp_path / "run"), "--samples", "3", "--device", "cpu")
    assert rc == 0, err
    assert "%" in next(line for line in out.splitlines() if line.startswith("ECE"))


def test_evaluate_prints_the_intervals_gap_in_points_not_percent(capsys):
    """The gap between the intervals' coverage and their level is a difference of two shares: it
    printed as a percent, where bbb compare and bbb report say points."""
    from bbb.cli.commands import print_eval

    r = {"run": "runs/r", "checkpoint": "best", "epoch": 3, "method": "bbb", "samples": 10, "task": "regression",
         "test_rmse": 1.5, "test_rmse_mc": 1.4, "log_likelihood": -1.2, "coverage_95": 0.9,
         "calibration_error": 0.075, "rmse_at_90_coverage": 1.1}
    print_eval(r, saved=False)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "mean gap to their level" in ln)
    assert line.split()[-2:] == ["7.50", "points"]
    print_eval({**r, "calibration_error": None}, saved=False)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "mean gap to their level" in ln)
    assert line.split()[-1] == "-"
