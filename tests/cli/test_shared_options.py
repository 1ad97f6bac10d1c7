"""The options every command spells the same way (``bbb.cli.common``): ``--device`` defaults to
auto, ``--seed`` is one int and ``--seeds`` a list, ``--out`` is required or under ``runs/``,
``--which`` lists its choices, and ``--quiet`` means one thing everywhere: no progress output,
only the results (and errors)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

import bbb.runs.model as RM
from bbb.cli import COMMANDS
from bbb.cli.common import QUIET_HELP
from bbb.cli.entry import command_parser
from testkit import blobs, run_main


def parsers(parser) -> list:
    """A command's parser and those of its subcommands (``bbb reproduce mnist|uci``)."""
    out = [parser]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                out += parsers(sub)
    return out


def options(name: str) -> list[dict[str, object]]:
    """The options of each parser of command ``name`` (one dict per parser)."""
    _, parser = command_parser(name)
    return [{opt: a for a in p._actions for opt in a.option_strings} for p in parsers(parser)]


def flat(text: str | None) -> str:
    return " ".join((text or "").split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_shared_options_mean_the_same_in_every_command(name):
    for opts in options(name):
        check_shared(name, opts)


def check_shared(name: str, opts: dict) -> None:
    if "--device" in opts:
        assert "default: auto" in flat(opts["--device"].help), name
    if "--seed" in opts:
        assert opts["--seed"].type is int and opts["--seed"].nargs is None, name
    if "--seeds" in opts:
        assert opts["--seeds"].type is int and opts["--seeds"].nargs == "+", name
    if "--out" in opts:
        out = opts["--out"]
        assert out.required or out.default is None or str(out.default).startswith("runs/"), name
        assert not str(out.default or "").startswith("results"), name
    if "--quiet" in opts:
        assert flat(opts["--quiet"].help).startswith(QUIET_HELP), name
    if "--which" in opts:
        assert list(opts["--which"].choices) == ["best", "last"], name
    if "--threads" in opts:
        assert opts["--threads"].type is int, name


def test_quiet_is_documented_in_the_help_of_the_commands_that_print_progress(capsys):
    for name in ("train", "demo", "reproduce mnist", "reproduce uci", "sweep", "regression"):
        rc, out, _ = run_main(capsys, *name.split(), "--help")
        assert rc == 0 and QUIET_HELP in flat(out), name


@pytest.fixture
def tiny(monkeypatch):
    data = blobs()
    monkeypatch.setattr(RM, "load_data", lambda cfg: data)
    return data


TRAIN = ["--hidden", "16", "--batch-size", "32", "--lr", "0.01", "--device", "cpu", "--eval-samples", "2",
         "--epochs", "2"]


def test_quiet_train_prints_only_its_summary(capsys, tmp_path, tiny):
    rc, out, err = run_main(capsys, "train", "--out", str(tmp_path / "q"), "--quiet", *TRAIN)
    assert rc == 0 and err == ""
    assert out.splitlines()[0].startswith("run ") and "test error" in out and "epoch 1/" not in out
    rc, out, err = run_main(capsys, "train", "--out", str(tmp_path / "p"), *TRAIN)
    assert rc == 0 and "epoch 1/2" in err and "epoch 2/2" in err  # progress, one line per epoch
    assert "test error" in out


def test_quiet_sweep_prints_only_its_counts(capsys, tmp_path):
    space = {"params": {"dataset": "synthetic", "synthetic_dim": 16, "synthetic_train": 64, "width": 4, "depth": 1,
                        "batch_size": 32, "epochs": 1, "device": "cpu", "eval_samples": 1,
                        "seed": {"grid": [0, 1]}}}
    f = tmp_path / "space.json"
    f.write_text(json.dumps(space))
    rc, out, err = run_main(capsys, "sweep", "--space", str(f), "--out", str(tmp_path / "q"), "--quiet")
    assert rc == 0 and err == ""
    assert out.splitlines()[0].startswith("2 trials: 2 done") and "best by validation" in out
    rc, out, err = run_main(capsys, "sweep", "--space", str(f), "--out", str(tmp_path / "p"))
    assert rc == 0 and len(re.findall(r"trial [0-9a-f]{12} done", err)) == 2  # one progress line per trial


def test_quiet_reproduce_prints_only_its_tables(capsys, tmp_path, tiny):
    argv = ["reproduce", "mnist", "--budget", "smoke", "--cells", "sgd:400", "--device", "cpu"]
    rc, out, err = run_main(capsys, *argv, "--out", str(tmp_path / "q"), "--quiet")
    assert rc == 0 and err == ""
    assert "[run " not in out and "epoch 1/" not in out and "estimated time" not in out
    assert re.search(r"^method +units +ours +paper$", out, re.M) and "wrote table1.csv" in out
    rc, out, err = run_main(capsys, *argv, "--out", str(tmp_path / "p"))
    assert rc == 0 and "[run 1/1]" in out and "estimated time" in out and "epoch 1/1" in err
