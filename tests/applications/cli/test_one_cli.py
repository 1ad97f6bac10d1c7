"""One command line (issue 61): bare ``bbb`` prints the help; every error line of a command starts
``bbb COMMAND: error:`` (argparse's and bbb's own); a bad setting is said with the flag the user
typed, not its configuration key; every ``--help`` writes its defaults one way, ``(default: X)``,
in plain text (no reStructuredText); every command that computes takes ``--quiet``, ``--threads``
and ``--no-compile``."""

from __future__ import annotations

import argparse
import os
import re

import pytest

import bbb.engine.engine as engine_module
import bbb.runs.model as RM
from bbb.cli.common import COMPUTE_FLAGS, flag_of_setting
from bbb.cli.entry import command_parser
from bbb.cli.parser import build_parser
from bbb.cli.registry import COMMANDS
from faultkit import fake_mnist
from testkit import blobs, run_main

TINY = ["--hidden", "16", "--batch-size", "32", "--lr", "0.01", "--device", "cpu", "--eval-samples", "2",
        "--epochs", "1"]


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that read a command's options: its own, or its subcommands' (``bbb reproduce``)."""
    subs = [s for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for s in dict.fromkeys(a.choices.values())]
    return [q for s in subs for q in leaves(s)] if subs else [parser]


def every_help() -> list[tuple[str, str]]:
    """(prog, --help text) of ``bbb`` and of every command and subcommand."""
    out = [("bbb", build_parser().format_help())]
    for name in COMMANDS:
        _, parser = command_parser(name)
        # (one order in every process: pytest-xdist's workers must collect the same list)
        out += sorted({(p.prog, p.format_help()) for p in {parser, *leaves(parser)}})
    return out


def test_bare_bbb_prints_the_help(capsys):
    rc, out, err = run_main(capsys)
    assert rc == 0 and err == ""
    assert out.startswith("usage: bbb") and all(name in out for name in COMMANDS) and "Example" in out


@pytest.mark.parametrize("prog, text", every_help(), ids=lambda v: v if v.startswith("bbb") and len(v) < 40 else "")
def test_every_help_is_plain_text_with_its_defaults_written_one_way(prog, text):
    assert not re.search(r"``|:[a-z]+:`|`[^`\s][^`]*`", text), f"{prog} --help: reStructuredText markup"
    text = " ".join(text.split())
    for m in re.finditer(r"\bdefaults?\b", text):
        after = text[m.end():m.end() + 2]
        if text[max(0, m.start() - 1)] == "(" or text[max(0, m.start() - 2):m.start()] in ("; ", ", "):
            assert after == ": ", f"{prog} --help: {text[m.start() - 30:m.end() + 20]!r}: write '(default: X)'"
    assert "default: [" not in text and "%(default)" not in text, prog  # a list as its values, not its repr
    assert not re.search(r"\(default: [^()]*\) \(default", text), f"{prog} --help: a default said twice"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_that_computes_takes_quiet_threads_and_no_compile(name):
    _, parser = command_parser(name)
    shared = COMMANDS[name].shared
    assert set(shared) <= set(COMPUTE_FLAGS)
    for p in leaves(parser):
        flags = {o for a in p._actions for o in a.option_strings}
        wanted = set(shared) & set(getattr(p, "compute_flags", shared))  # (a subcommand that trains nothing)
        assert wanted <= flags, (p.prog, wanted - flags)
        assert not (set(shared) - wanted) & flags, (p.prog, "offers an option it ignores")
    if name not in ("compare", "report", "sweep"):  # compare, report read results; the sweep's trials: --cpus-per-trial
        assert shared == tuple(COMPUTE_FLAGS), name


@pytest.mark.parametrize("argv, flag", [
    (["train", "--out", "X", "--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
    (["train", "--out", "X", "--hidden", "16", "0"], "--hidden must be an integer >= 1, got 0"),
    (["train", "--out", "X", "--kl-samples", "0"], "--kl-samples must be an integer >= 1, got 0"),
    (["bandit", "--out", "X", "--samples", "0"], "--samples must be an integer >= 1, got 0"),
    (["bandit", "--out", "X", "--beta", "-1"], "--beta must be a finite number > 0, got -1.0"),
    (["regression", "--out", "X", "--samples", "0"], "--samples must be an integer >= 1, got 0"),
    (["regression", "--out", "X", "--n-train", "0"], "--n-train must be an integer >= 1, got 0"),
])
def test_errors_name_the_flag_not_the_configuration_key(capsys, tmp_path, monkeypatch, argv, flag):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_main(capsys, *argv)
    assert rc == 2 and err == f"bbb {argv[0]}: error: {flag}\n", err


def test_val_size_beyond_the_data_names_the_flag(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    fake_mnist(tmp_path / "data", 50, 10)
    rc, _, err = run_main(capsys, "train", "--out", str(tmp_path / "r"), "--data-dir", str(tmp_path / "data"),
                          "--val-size", "50", "--quiet", *TINY)
    assert rc == 2 and err == "bbb train: error: --val-size must be in 0..49, got 50\n", err


def test_a_subcommands_errors_say_its_full_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_main(capsys, "reproduce", "uci", "--out", "X", "--workers", "0")
    assert rc == 2 and err == "bbb reproduce uci: error: --workers must be >= 1, got 0\n", err


def test_the_mapping_is_the_parsers_own():
    _, train = command_parser("train")
    assert flag_of_setting(train, "val_size") == "--val-size"
    assert flag_of_setting(train, "samples") == "--train-samples"  # not the retired --samples
    assert flag_of_setting(train, "rho_init") == "--sigma-init"
    assert flag_of_setting(train, "no_such_key") is None
    _, reproduce = command_parser("reproduce")
    assert flag_of_setting(reproduce, "workers") == "--workers"  # (bbb reproduce uci)


@pytest.mark.parametrize("argv", [["train", "--bogus"], ["train", "--out", "X", "--pi", "0"],
                                  ["evaluate", "no-such-run"], ["ood", "no-such-run"], ["sweep", "--limit", "0"],
                                  ["reproduce", "mnist", "--seeds", "x"], ["bandit", "--out", "X", "--steps", "0"]])
def test_one_error_prefix_for_argparse_and_bbb_errors(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_main(capsys, *argv)
    assert rc == 2 and err.count("\n") == 1, err
    assert re.match(rf"bbb {argv[0]}( [a-z]+)?: error: ", err), err


def test_an_option_before_the_command_says_where_it_goes(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # argparse called the run and the input unrecognized arguments too
    rc, _, err = run_main(capsys, "--quiet", "--threads", "1", "predict", "runs/mine", "new.csv")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("bbb: error: --quiet --threads 1 before the command") and "bbb predict ..." in err, err
    assert "runs/mine" not in err and "unrecognized" not in err, err
    rc, out, _ = run_main(capsys, "--help", "predict")  # the top-level help is still the help
    assert rc == 0 and "COMMAND" in out


def test_no_compile_keeps_the_engine_eager_and_quiet_silences_the_notice(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(RM, "load_data", lambda cfg: blobs())
    monkeypatch.setattr(engine_module, "COMPILE_MIN_NUMEL", 0)  # compile=None would compile this tiny net
    chosen = []
    real = engine_module.compile_default
    monkeypatch.setattr(engine_module, "compile_default", lambda *a: chosen.append(real(*a)) or chosen[-1])
    monkeypatch.delenv("BBB_COMPILE", raising=False)
    rc, _, err = run_main(capsys, "train", "--out", str(tmp_path / "r"), "--no-compile", *TINY)
    assert rc == 0 and chosen and not any(chosen), err
    assert "compiling" not in err
    assert "BBB_COMPILE" not in os.environ  # the process's setting is restored after the command
    _, train = command_parser("train")
    args = train.parse_args(["--out", "x", "--quiet"])
    from bbb.cli.entry import compute_settings

    with compute_settings(args):
        assert os.environ["BBB_COMPILE_NOTICE"] == "0"  # (for the engine's notice, and the processes started)
    assert "BBB_COMPILE_NOTICE" not in os.environ or os.environ["BBB_COMPILE_NOTICE"] != "0"


def test_plain_text_drops_restructuredtext_markup():
    from bbb.cli.common import plain_text

    assert plain_text("(``bbb sweep``), :func:`~bbb.runs.load_run`, :mod:`bbb.cli.cost`, `bbb train`, "
                      ":doc:`the guide <guide>`") == "(bbb sweep), load_run, bbb.cli.cost, bbb train, the guide"
    assert plain_text("2^(M-i)/(2^M-1); 'lr={grid: [0.001, 0.01]}'") == "2^(M-i)/(2^M-1); 'lr={grid: [0.001, 0.01]}'"


def test_a_commands_own_shared_option_is_kept():
    _, regression = command_parser("regression")
    threads = [a for a in regression._actions if "--threads" in a.option_strings]
    assert len(threads) == 1 and threads[0].default == 1  # its own default (tiny nets), not added twice


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_help_that_explains_an_options_choices_explains_every_one(name):
    """A help that names two or more of an option's choices names them all (``--kl-weighting`` once
    described blundell and uniform, not blob)."""
    _, parser = command_parser(name)
    missing = []
    for p in {parser, *leaves(parser)}:
        for a in p._actions:
            if not a.choices or isinstance(a, argparse._SubParsersAction) or not a.help or a.help == argparse.SUPPRESS:
                continue
            choices = [str(c) for c in a.choices]
            named = [c for c in choices if re.search(rf"\b{re.escape(c)}\b", a.help)]
            if len(named) >= 2 and len(named) < len(choices):
                missing.append(f"{p.prog} {a.option_strings[0]}: {sorted(set(choices) - set(named))}")
    assert not missing, "a help that leaves out some of its option's choices:\n" + "\n".join(missing)



def test_the_reproduce_help_names_every_experiment():
    """``bbb --help`` and ``bbb reproduce --help`` once said MNIST and UCI only (not lora, fashion, which)."""
    _, parser = command_parser("reproduce")
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "|".join(subs.choices) in " ".join((parser.description or "").split())
    summary = " ".join(COMMANDS["reproduce"].help.split())
    assert all(w in summary for w in ("MNIST", "UCI", "LoRA", "Fashion-MNIST", "which method")), summary
