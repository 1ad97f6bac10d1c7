"""The options every command spells the same way (``bbb.cli.common``): ``--device`` defaults to
auto, ``--seed`` is one int and ``--seeds`` a list, ``--out`` is required or under ``runs/``,
``--which`` lists its choices, and ``--quiet`` means one thing everywhere: no progress output,
only the results (and errors). One vocabulary: every option of the table of shared flags
(``SHARED_FLAGS``) has its meaning's type and help in every command and subcommand that has it,
and a retired spelling (``--rho-init``, ``--kl-scale``, ``--decision-samples``, ``bbb train
--samples``) lives on only as a hidden alias of the option that replaced it."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

import bbb.runs.model as RM
from bbb.cli.common import (
    QUIET_HELP,
    RETIRED_FLAGS,
    RETIRED_IN_COMMAND,
    SHARED_FLAGS,
    DeprecatedAlias,
    seed_number,
    sigma_of_rho,
)
from bbb.cli.entry import command_parser
from bbb.cli.registry import COMMANDS
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


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_speaks_the_one_vocabulary(name):
    retired = {**RETIRED_FLAGS, **RETIRED_IN_COMMAND.get(name, {})}
    for opts in options(name):
        for flag, action in opts.items():
            if isinstance(action, DeprecatedAlias):  # a retired spelling: hidden, into the new option's dest
                assert retired.get(flag) == action.new, (name, flag)
                assert action.help == argparse.SUPPRESS and action.default == argparse.SUPPRESS, (name, flag)
                new = opts[action.new]
                assert new.dest == action.dest and not isinstance(new, DeprecatedAlias), (name, flag)
                continue
            assert flag not in retired, f"bbb {name} {flag}: a retired spelling (now {retired.get(flag)})"
            shared = SHARED_FLAGS.get(flag)
            if shared is None:
                continue
            types = shared.type if isinstance(shared.type, tuple) else (shared.type,)
            assert action.type in types, (name, flag, action.type)
            assert action.nargs == shared.nargs, (name, flag, action.nargs)
            assert flat(action.help).startswith(shared.meaning), (name, flag, action.help)


def test_the_table_names_the_library_where_it_has_a_name():
    assert SHARED_FLAGS["--train-samples"].library.startswith("ELBO(num_samples=")
    assert "predict(num_samples=" in SHARED_FLAGS["--samples"].library
    assert SHARED_FLAGS["--beta"].library == "ELBO(beta=)"
    assert "standard deviation" in SHARED_FLAGS["--sigma-init"].meaning
    assert set(RETIRED_FLAGS.values()) | {"--train-samples"} <= set(SHARED_FLAGS)


def test_docs_cli_md_tabulates_the_vocabulary_and_the_retired_spellings():
    text = (Path(__file__).parents[3] / "docs" / "cli.md").read_text()
    section = text[text.index("## One vocabulary"):]
    for flag in SHARED_FLAGS:
        assert f"`{flag}" in section, flag
    for old in RETIRED_FLAGS:
        assert old in section, old
    for command, flags in RETIRED_IN_COMMAND.items():
        assert all(f"bbb {command} {old}" in section for old in flags), command


def test_docs_cli_md_names_every_command_that_has_a_tabulated_option():
    """A row of the vocabulary that lists its commands lists all of them (its --samples row once
    left out predict and laplace, its --csv row uncertain)."""
    import re

    text = (Path(__file__).parents[3] / "docs" / "cli.md").read_text()
    section = text[text.index("## One vocabulary"):]
    section = section[:section.index("\n\n", section.index("| option |"))]
    have: dict[str, set[str]] = {}
    for name in COMMANDS:
        _, parser = command_parser(name)
        for p in parsers(parser):
            for a in p._actions:
                if a.help is not argparse.SUPPRESS:
                    for opt in a.option_strings:
                        have.setdefault(opt, set()).add(p.prog.removeprefix("bbb "))
    checked = 0
    for row in section.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        flags, commands = re.findall(r"`(--[a-z0-9-]+)", cells[0]), cells[-1]
        if commands.startswith("every") or commands.startswith("train and the experiments"):
            continue  # (a row that names its commands by what they do)
        for flag in flags:
            missing = sorted(c for c in have.get(flag, ()) if not re.search(rf"(^|[ ,]){c}\b", commands))
            assert not missing, f"docs/cli.md: the {flag} row leaves out {', '.join(missing)}"
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("argv, old, new, dest, value", [
    (["train", "--out", "x", "--samples", "3"], "--samples", "--train-samples 3", "samples", 3),
    (["train", "--out", "x", "--rho-init", "-3.25"], "--rho-init", f"--sigma-init {sigma_of_rho(-3.25)!r}",
     "rho_init", -3.25),
    (["regression", "--out", "x", "--rho-init", "-4"], "--rho-init", "--sigma-init", "rho_init", -4.0),
    (["bandit", "--out", "x", "--kl-scale", "1e-4"], "--kl-scale", "--beta 0.0001", "kl_scale", 1e-4),
    (["bandit", "--out", "x", "--decision-samples", "5"], "--decision-samples", "--samples 5", "decision_samples",
     5),
])
def test_a_retired_spelling_still_works_with_one_warning_line(capsys, argv, old, new, dest, value):
    _, parser = command_parser(argv[0])
    args = parser.parse_args(argv[1:])
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "DeprecationWarning" in err and old in err and new in err
    suggested = err.split("; use ")[1].split()  # the new spelling with the value, exactly as before
    assert getattr(parser.parse_args([*argv[1:-2], *suggested]), dest) == value
    rc, out, _ = run_main(capsys, argv[0], "--help")
    assert rc == 0 and f"{old} " not in out


def test_sigma_init_is_a_standard_deviation_everywhere(capsys):
    for name, dest in (("train", "rho_init"), ("regression", "rho_init"), ("bandit", "sigma_init")):
        _, parser = command_parser(name)
        v = getattr(parser.parse_args(["--out", "x", "--sigma-init", "0.05"]), dest)
        assert (sigma_of_rho(v) if dest == "rho_init" else v) == pytest.approx(0.05), name
        with pytest.raises(SystemExit):
            parser.parse_args(["--out", "x", "--sigma-init", "-1"])
        assert "standard deviation" in capsys.readouterr().err


def test_train_records_the_sigma_as_rho_init_in_config_json(capsys, tmp_path, tiny):
    rc, _, err = run_main(capsys, "train", "--out", str(tmp_path / "r"), "--quiet", "--sigma-init", "0.02",
                          "--train-samples", "2", *TRAIN)
    assert rc == 0 and err == ""
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert sigma_of_rho(cfg["rho_init"]) == pytest.approx(0.02) and cfg["samples"] == 2


def check_shared(name: str, opts: dict) -> None:
    if "--device" in opts:
        assert "default: auto" in flat(opts["--device"].help), name
    if "--seed" in opts:
        assert opts["--seed"].type is seed_number and opts["--seed"].nargs is None, name
    if "--seeds" in opts:
        assert opts["--seeds"].type is seed_number and opts["--seeds"].nargs == "+", name
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
    for name in ("train", "demo", "reproduce mnist", "reproduce uci", "reproduce lora", "sweep", "regression"):
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
    q = tmp_path / "q"  # the files it names are those it wrote (space.json was once left out)
    files = ", ".join(str(q / n) for n in ("space.json", "sweep.csv", "best.json"))
    assert out.splitlines()[-1] == f"wrote {files} and a folder per trial in {q / 'trials'}"
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


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_prints_no_doubled_percent(name):
    """argparse %-formats an option's help (where ``%%`` is one ``%``) but prints a description
    as written: ``bbb reproduce uci --help`` once said "20%%"."""
    _, parser = command_parser(name)
    for p in parsers(parser):
        text = p.format_help()
        assert "%%" not in text, f"{p.prog} --help prints '%%'"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_says_what_it_does_in_help(name):
    """An option listed by --help with no line of its own (bbb regression's --activation once
    showed only its choices) leaves its meaning and default to be guessed."""
    _, parser = command_parser(name)
    for p in parsers(parser):
        for a in p._actions:
            if a.option_strings and a.help is not argparse.SUPPRESS:
                assert flat(a.help), f"{p.prog} {a.option_strings[0]} has no help text"


@pytest.mark.parametrize("argv", [["regression", "--epochs", "1"], ["train", "--epochs", "1"], ["sweep"],
                                  ["bandit", "--steps", "5"], ["reproduce", "uci"], ["reproduce", "mnist"],
                                  ["compare", "RUN"], ["evaluate", "RUN", "RUN"], ["laplace", "RUN"]])
def test_an_out_folder_that_is_a_file_is_refused_before_any_work(capsys, tmp_path, argv):
    # bbb regression trained, printed its result, then failed to write it ('File exists': the result not saved)
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    rc, out, err = run_main(capsys, *argv, "--out", str(f))
    assert rc == 2 and f"{f} is a file, not a folder" in err and len(err.strip().splitlines()) == 1
    assert out == "" and f.read_text() == "mine"


def test_an_out_that_may_name_a_file_takes_one(tmp_path):
    """bbb report's --out is a page or a folder, bbb reproduce which's a page: a file is theirs to replace."""
    f = tmp_path / "page.html"
    f.write_text("old")
    assert command_parser("report")[1].parse_args(["RUN", "--out", str(f)]).out == str(f)
    assert command_parser("reproduce")[1].parse_args(["which", "--out", str(f)]).out == str(f)


def test_a_negative_seed_is_refused_by_every_command_alike(capsys):
    """--seed and --seeds are whole numbers >= 0 in every command (check_shared: one argparse type):
    bbb ood and bbb uncertain took --seed -1, where bbb train refused it and numpy's generators do."""
    assert seed_number("0") == 0 and seed_number("12") == 12
    assert seed_number(str(2**64 - 1)) == 2**64 - 1  # the largest torch.manual_seed takes
    for bad in ("-1", "x", "1.5", str(2**64)):  # (one past the largest was a traceback out of torch.manual_seed)
        with pytest.raises(argparse.ArgumentTypeError, match="whole number from 0 to"):
            seed_number(bad)
    rc, _, err = run_main(capsys, "ood", "runs/none", "--seed", "-1")
    assert rc == 2 and "--seed: a seed is a whole number from 0 to 18446744073709551615, got '-1'" in err
    assert len(err.strip().splitlines()) == 1
