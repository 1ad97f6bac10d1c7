"""The ``bbb`` command line: help texts, one-line errors with exit code 2, and the run commands.

Commands run in-process through ``bbb.cli.main`` with tiny synthetic data patched in for
``bbb.runs.load_data``; two checks go through a real ``python -m bbb`` subprocess.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bbb
import bbb.runs.loop as L
import bbb.runs.model as RM
from bbb.cli import DEMO_SETTINGS
from bbb.cli.registry import LAZY_COMMANDS
from bbb.runs import PRUNING_COLUMNS, TrainConfig
from testkit import assert_one_line_error, blobs, run_main

TINY = ["--hidden", "16", "--batch-size", "32", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3",
        "--quiet"]


@pytest.fixture
def tiny(monkeypatch) -> dict[str, torch.Tensor]:
    """Every data load returns the tiny synthetic set."""
    data = blobs()
    monkeypatch.setattr(RM, "load_data", lambda cfg: data)
    return data




# --------------------------------------------------------------------------------------------
# help
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["train", "evaluate", "prune", "demo", *LAZY_COMMANDS])
def test_help_of_every_subcommand(capsys, command):
    if command in LAZY_COMMANDS and importlib.util.find_spec(LAZY_COMMANDS[command][0]) is None:
        pytest.skip(f"{LAZY_COMMANDS[command][0]} is not there yet")
    rc, out, _ = run_main(capsys, command, "--help")
    assert rc == 0 and "Example" in out and f"bbb {command}" in out
    # a real example, not the bare command name: before, regression's and report's --help showed
    # "bbb regression" and "bbb report" (which need --out, RUN_DIR), their own examples lost
    first = out.split("Example:")[1].strip().splitlines()[0].split("#")[0].split()
    assert first[0] == "bbb" and len(first) > 2, first


def test_prune_help_says_what_is_ranked(capsys):
    """Before, bbb prune's --help said neither that the biases are kept nor that the ranking is global."""
    rc, out, _ = run_main(capsys, "prune", "--help")
    text = " ".join(out.split())
    assert rc == 0 and "biases kept" in text and "all layers together" in text and "softplus(rho)" in text


def test_top_level_help_lists_commands(capsys):
    rc, out, _ = run_main(capsys, "--help")
    assert rc == 0 and "Example" in out
    for c in ("train", "evaluate", "prune", "demo", "regression", "bandit"):
        assert c in out


def test_train_help_names_the_contract_options(capsys):
    _, out, _ = run_main(capsys, "train", "--help")
    for opt in ("--dataset", "--method", "--prior", "--pi", "--sigma1", "--sigma2", "--hidden", "--epochs",
                "--lr", "--train-samples", "--estimator", "--kl-weighting", "--seed", "--device", "--out",
                "--data-dir", "--batch-size", "--optimizer", "--momentum", "--kl", "--sigma-init",
                "--prior-sigma", "--dropout-input", "--dropout-hidden", "--scale", "--test-each-epoch",
                "--resume", "--quiet", "--bf16", "--eval-samples"):
        assert opt in out, opt
    for retired in ("--rho-init", " --samples"):  # hidden aliases (tests/applications/cli/test_shared_options.py)
        assert retired not in out, retired


# --------------------------------------------------------------------------------------------
# one-line errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--sigma1", "-1"], ["sigma1"]),
    (["--sigma2", "0"], ["sigma2"]),
    (["--prior-sigma", "-2", "--prior", "gaussian"], ["prior-sigma"]),
    (["--pi", "0"], ["pi"]),
    (["--pi", "1.5"], ["pi"]),
    (["--hidden", "400", "0"], ["hidden"]),
    (["--dataset", "cifar10"], ["dataset", "mnist"]),
    (["--method", "hmc"], ["method"]),
    (["--estimator", "nope"], ["estimator"]),
    (["--lr", "abc"], ["--lr"]),
    (["--epochs", "-3"], ["epochs"]),
])
def test_bad_train_arguments(capsys, tmp_path, args, words):
    rc, _, err = run_main(capsys, "train", "--out", str(tmp_path / "r"), *args)
    assert_one_line_error(rc, err, *words)
    assert not (tmp_path / "r" / "last.pt").exists()


def test_threads_option(capsys, tmp_path, tiny):
    before = torch.get_num_threads()
    try:
        rc, _, err = run_main(capsys, "train", "--epochs", "1", "--out", str(tmp_path / "r"), "--threads", "1", *TINY)
        assert rc == 0, err
        assert torch.get_num_threads() == 1
        assert json.loads((tmp_path / "r" / "config.json").read_text())["threads"] == 1  # restored on --resume
    finally:
        torch.set_num_threads(before)
    rc, _, err = run_main(capsys, "evaluate", str(tmp_path / "r"), "--threads", "0")
    assert_one_line_error(rc, err, "--threads")


def test_missing_out_and_unknown_command(capsys):
    assert_one_line_error(*run_main(capsys, "train")[::2], "--out")
    assert_one_line_error(*run_main(capsys, "fly")[::2], "fly")


@pytest.mark.parametrize("argv, words", [
    (["trian"], ["'trian'", "did you mean train?"]),
    (["--versoin"], ["--versoin", "did you mean --version?"]),  # (argparse said a COMMAND is required)
    (["-q"], ["unrecognized arguments: -q"]),
    (["train", "--out", "r", "--imags", "x"], ["--imags", "did you mean --images?"]),
    (["train", "--imags", "x"], ["--imags", "did you mean --images?"]),  # (argparse: --out is required)
    (["train", "--out", "r", "--method", "bbbb"], ["'bbbb'", "did you mean bbb?"]),
    (["evaluate", "r", "--smaples", "2"], ["--smaples", "did you mean --samples?"]),
    # a subcommand's: said by it, with its options' spellings (once 'bbb reproduce: error:', no suggestion)
    (["reproduce", "mnist", "--budgte", "smoke"],
     ["bbb reproduce mnist: error:", "--budgte", "did you mean --budget?", "(see 'bbb reproduce mnist --help')"]),
    (["reproduce", "uci", "--methdos", "bbb"], ["bbb reproduce uci: error:", "did you mean --methods?"]),
])
def test_a_mistyped_command_option_or_choice_is_named_with_the_closest_spelling(capsys, argv, words):
    line = assert_one_line_error(*run_main(capsys, *argv)[::2], *words)
    assert "(see 'bbb" in line


def test_a_word_nothing_resembles_gets_no_suggestion(capsys):
    line = assert_one_line_error(*run_main(capsys, "train", "--out", "r", "--zzz", "1")[::2], "--zzz")
    assert "did you mean" not in line
    # an abbreviation argparse accepts is not unknown: the missing --out is what is said
    assert_one_line_error(*run_main(capsys, "train", "--epoch", "3")[::2], "required", "--out")


def test_missing_run_dir(capsys, tmp_path):
    for cmd in ("evaluate", "prune"):
        rc, _, err = run_main(capsys, cmd, str(tmp_path / "nowhere"))
        assert_one_line_error(rc, err, "not found")


def test_corrupt_checkpoint(capsys, tmp_path, tiny):
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--epochs", "1", "--out", str(run), *TINY)[0] == 0
    (run / "best.pt").write_bytes(b"\x00garbage" * 10)
    (run / "last.pt").write_bytes(b"")
    for argv in (["evaluate", str(run)], ["prune", str(run)], ["train", "--resume", "--out", str(run)]):
        rc, _, err = run_main(capsys, *argv)
        assert_one_line_error(rc, err, "corrupt")


def test_missing_data(capsys, tmp_path, monkeypatch):
    """No data files and no network: a one-line message naming the files and BBB_DATA."""
    import bbb.data.sources as S
    from bbb.errors import NetworkError

    def offline(url, *a, **k):
        raise NetworkError(OSError("network is unreachable"))

    monkeypatch.setattr(S, "_download", offline)
    rc, _, err = run_main(capsys, "train", "--data-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "r"),
                          "--device", "cpu")
    assert_one_line_error(rc, err, "not found", "BBB_DATA")


def test_missing_experiment_module(capsys, monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "bbb.experiments.bandit":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    rc, _, err = run_main(capsys, "bandit", "--help")
    assert_one_line_error(rc, err, "bandit")


def test_lazy_command_dispatch(capsys, monkeypatch):
    """regression/bandit: the module's add_arguments builds the parser, its main gets the args."""
    import types

    mod = types.ModuleType("bbb.experiments.regression_command")
    seen = {}
    mod.add_arguments = lambda p: p.add_argument("--steps", type=int, default=5)
    mod.main = lambda args: seen.setdefault("steps", args.steps) and 0
    monkeypatch.setitem(sys.modules, "bbb.experiments.regression_command", mod)
    rc, _, _ = run_main(capsys, "regression", "--steps", "7")
    assert rc == 0 and seen == {"steps": 7}


def test_subprocess_errors_are_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    for argv in (["train", "--sigma1", "-1", "--out", str(tmp_path / "r")], ["evaluate", str(tmp_path / "no")]):
        p = subprocess.run([sys.executable, "-m", "bbb", *argv], capture_output=True, text=True, env=env,
                           timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"bbb {argv[0]}: error: ") and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "Traceback" not in p.stderr


# --------------------------------------------------------------------------------------------
# the run commands on tiny data
# --------------------------------------------------------------------------------------------


def test_train_evaluate_prune(capsys, tmp_path, tiny):
    run = tmp_path / "run"
    rc, out, err = run_main(capsys, "train", "--epochs", "2", "--out", str(run), *TINY)
    assert rc == 0, err
    assert "test error" in out
    summary = json.loads((run / "summary.json").read_text())
    assert 0 <= summary["test_error"] <= 1

    rc, out, err = run_main(capsys, "evaluate", str(run), "--samples", "4", "--which", "last", "--device", "cpu")
    assert rc == 0, err
    ev = json.loads((run / "eval.json").read_text())
    assert {"test_error", "test_error_mc", "nll", "ece", "brier"} <= set(ev) and ev["samples"] == 4
    assert "ECE" in out and "Brier" in out

    rc, out, err = run_main(capsys, "prune", str(run), "--fractions", "0", "0.5", "0.75", "--device", "cpu")
    assert rc == 0, err
    with (run / "pruning.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == PRUNING_COLUMNS and [float(r["fraction_removed"]) for r in rows] == [0, 0.5, 0.75]
    assert "proportion removed" in out and "75%" in out
    # the checkpoint pruned (prune's default last, evaluate's best), which bbb report says above its table
    assert [r["checkpoint"] for r in rows] == ["last"] * 3
    rc, _, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.html"))
    assert rc == 0, err
    assert "the last checkpoint, its mean weights" in (tmp_path / "r.html").read_text()


def test_train_resume_via_cli(capsys, tmp_path, tiny):
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--epochs", "1", "--out", str(run), *TINY)[0] == 0
    rc, _, err = run_main(capsys, "train", "--epochs", "1", "--out", str(run), *TINY)
    assert_one_line_error(rc, err, "--resume")
    # --resume takes the stored settings; only what is given (here --epochs) changes
    rc, _, err = run_main(capsys, "train", "--resume", "--epochs", "2", "--out", str(run), "--quiet")
    assert rc == 0, err
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2
    rc, _, err = run_main(capsys, "train", "--resume", "--lr", "0.5", "--out", str(run))
    assert_one_line_error(rc, err, "lr")


def test_prune_rejects_non_bbb_run(capsys, tmp_path, tiny):
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--method", "sgd", "--epochs", "1", "--out", str(run), *TINY)[0] == 0
    assert_one_line_error(*run_main(capsys, "prune", str(run))[::2], "bbb run")


def test_ctrl_c_exits_130_with_resume_hint(capsys, tmp_path, tiny, monkeypatch):
    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(L, "batch_objective", interrupt)
    rc, _, err = run_main(capsys, "train", "--epochs", "2", "--out", str(tmp_path / "r"), *TINY)
    assert rc == 130 and len(err.strip().splitlines()) == 1
    assert "bbb train --resume --out" in err and "Traceback" not in err
    assert torch.load(tmp_path / "r" / "last.pt", weights_only=True)["epoch"] == 0


def test_demo_pipeline_on_tiny_data(capsys, tmp_path, tiny, monkeypatch):
    """The demo's steps (train, evaluate, prune, plots) end to end, on tiny data and a tiny net."""
    import bbb.cli as C

    monkeypatch.setitem(C.DEMO_SETTINGS, "hidden", [16])
    monkeypatch.setitem(C.DEMO_SETTINGS, "batch_size", 32)
    monkeypatch.setitem(C.DEMO_SETTINGS, "lr", 1e-2)
    run = tmp_path / "demo"
    rc, out, err = run_main(capsys, "demo", "--out", str(run), "--epochs", "2", "--device", "cpu", "--quiet")
    assert rc == 0, err
    for name in ("metrics.csv", "summary.json", "eval.json", "pruning.csv"):
        assert (run / name).is_file(), name
    if importlib.util.find_spec("matplotlib") is not None:
        assert (run / "learning_curve.png").stat().st_size > 0 and (run / "snr.png").stat().st_size > 0
    assert "test error" in out and "proportion removed" in out
    # its last line names every file it wrote (it once left out the evaluation's figures)
    last = out.strip().splitlines()[-1]
    names = {p.name for p in run.iterdir() if p.suffix in (".json", ".csv", ".png")}
    assert last.startswith("wrote ") and set(last[len("wrote "):].rsplit(" in ", 1)[0].split(", ")) == names, last
    # running it again reuses the finished run instead of failing
    rc, _, err = run_main(capsys, "demo", "--out", str(run), "--epochs", "2", "--device", "cpu", "--quiet")
    assert rc == 0, err


def test_demo_settings_are_valid_and_the_papers_network():
    cfg = TrainConfig(**DEMO_SETTINGS)
    assert cfg.method == "bbb" and cfg.prior == "mixture" and cfg.hidden == [400, 400]
    assert cfg.dataset == "mnist" and cfg.batch_size == 128


# --------------------------------------------------------------------------------------------
# evaluate's reliability diagram; ood and uncertain (issue: uncertainty users can check)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_with_ood(monkeypatch) -> dict[str, dict[str, torch.Tensor]]:
    """mnist -> the tiny blobs; fashion-mnist -> inputs near the origin, about equally far from
    every blob centre (far-away inputs would not do: ReLU nets extrapolate them confidently)."""
    data = blobs()
    g = torch.Generator().manual_seed(1)
    far = {k: (0.3 * torch.randn(v.shape, generator=g) if k.endswith("_x") else v) for k, v in data.items()}
    sets = {"mnist": data, "fashion-mnist": far}
    monkeypatch.setattr(RM, "load_data", lambda cfg: sets[cfg.dataset])
    return sets


def test_evaluate_reports_mean_and_averaged_calibration_with_reliability_png(capsys, tmp_path, tiny):
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--epochs", "2", "--out", str(run), *TINY)[0] == 0
    rc, out, err = run_main(capsys, "evaluate", str(run), "--samples", "5", "--device", "cpu")
    assert rc == 0, err
    ev = json.loads((run / "eval.json").read_text())
    for key in ("nll", "ece", "brier", "nll_mean", "ece_mean", "brier_mean"):
        assert math.isfinite(ev[key]) and ev[key] >= 0, key
    assert ev["ece_bins"] == 15 and ev["samples"] == 5
    assert (run / "reliability.png").stat().st_size > 1000
    assert "mean weights" in out and "5-sample average" in out and "reliability.png" in out


def test_evaluate_of_one_mc_dropout_sample_is_not_called_the_same_network(capsys, tmp_path, tiny, monkeypatch):
    # --samples 1 of a dropout run: one dropout mask, whose scores differ from the network's (dropout off)
    import bbb.runs.evaluation as E

    drawn: list[list[str]] = []
    monkeypatch.setattr(E, "plot_reliability", lambda bins, path, title: drawn.append(list(bins)))
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--method", "dropout", "--epochs", "2", "--out", str(run), *TINY)[0] == 0
    rc, out, err = run_main(capsys, "evaluate", str(run), "--samples", "1", "--device", "cpu")
    assert rc == 0, err
    ev = json.loads((run / "eval.json").read_text())
    assert ev["samples"] == 1 and ev["nll"] != ev["nll_mean"]
    assert "(same network)" not in out and "1-sample average" in out
    assert drawn[-1] == ["deterministic", "1-sample average"]  # both reliability diagrams: they differ


@pytest.mark.parametrize("method", ["bbb", "ivon", "dropout", "sgd"])
def test_ood_and_uncertain_for_each_method(capsys, tmp_path, tiny_with_ood, method):
    run = tmp_path / method
    assert run_main(capsys, "train", "--method", method, "--epochs", "3", "--out", str(run), *TINY)[0] == 0
    rc, out, err = run_main(capsys, "ood", str(run), "--ood", "fashion-mnist", "--samples", "6")
    assert rc == 0, err
    rep = json.loads((run / "ood.json").read_text())
    assert rep["method"] == method and rep["ood"] == "fashion-mnist"
    assert rep["samples"] == (1 if method == "sgd" else 6)
    assert rep["n_in"] == 60 and rep["n_out"] == 60
    # inputs between the blobs: every score that is defined separates them from the blobs
    assert rep["scores"]["entropy"]["auroc"] > 0.7
    assert rep["scores"]["max_prob"]["auroc"] > 0.7
    if method == "sgd":
        assert rep["scores"]["mutual_information"]["auroc"] is None
    else:
        assert 0.0 <= rep["scores"]["mutual_information"]["auroc"] <= 1.0
    assert (run / "ood.png").exists() and "AUROC" in out

    rc, out, err = run_main(capsys, "uncertain", str(run), "--n", "8", "--samples", "5")
    assert rc == 0, err
    # --samples given to one deterministic network is said to change nothing (as bbb predict says it)
    assert ("--samples 5 has no effect" in err) == (method == "sgd"), err
    unc = json.loads((run / "uncertain.json").read_text())
    assert unc["method"] == method  # an ivon run is sampled as a bbb one, and named ivon
    assert unc["samples"] == (1 if method == "sgd" else 5)
    groups = [d["group"] for d in unc["digits"]]
    assert groups.count("uncertain") == 8
    for d in unc["digits"]:
        assert abs(sum(d["votes"]) - 1.0) < 1e-3 and len(d["votes"]) == 3
    assert (run / "uncertain.png").exists()


def test_ood_of_another_checkpoint_than_the_evaluation(capsys, tmp_path, tiny_with_ood):
    """ood.json names its checkpoint: bbb compare refuses a row whose OOD AUROCs are of another
    checkpoint than its test metrics, and bbb report says which checkpoint the OOD scores are of."""
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--epochs", "2", "--out", str(run), *TINY)[0] == 0
    assert run_main(capsys, "evaluate", str(run), "--samples", "3")[0] == 0
    assert run_main(capsys, "ood", str(run), "--ood", "fashion-mnist", "--which", "last", "--samples", "3")[0] == 0
    assert json.loads((run / "ood.json").read_text())["checkpoint"] == "last"
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp"))
    assert_one_line_error(rc, err, "ood.json scored the last checkpoint", "--which best")
    rc, _, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.html"))
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "(vs fashion-mnist, its last checkpoint)" in page and "k=3, the last checkpoint" in page
    assert run_main(capsys, "ood", str(run), "--ood", "fashion-mnist", "--samples", "3")[0] == 0
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err


@pytest.mark.parametrize("command", ["ood", "uncertain"])
def test_an_ensemble_given_with_trailing_slashes_runs_again(capsys, tmp_path, tiny_with_ood, command):
    # runs/a/ (a shell's completion) names runs/a: the second run is the same ensemble's, not refused
    runs = [tmp_path / f"sgd{seed}" for seed in (0, 1)]
    for seed, run in enumerate(runs):
        assert run_main(capsys, "train", "--method", "sgd", "--seed", str(seed), "--epochs", "1", "--out", str(run),
                        *TINY)[0] == 0
    given = [f"{r}/" for r in runs]
    extra = ["--ood", "fashion-mnist"] if command == "ood" else ["--n", "4"]
    for _ in range(2):
        rc, _, err = run_main(capsys, command, *given, "--out", str(tmp_path / "ens"), *extra)
        assert rc == 0, err
    assert json.loads((tmp_path / "ens" / f"{command}.json").read_text())["members"] == [str(r) for r in runs]


def test_compare_refuses_an_ensembles_ood_json_whose_member_trained_on_since(capsys, tmp_path, tiny_with_ood):
    """A member resumed after ``bbb ood RUN RUN --out DIR`` removes its own ood.json, not the
    ensemble's: with the ensemble evaluated again, compare showed the new test scores beside the
    old members' AUROCs as one row."""
    runs = [tmp_path / f"sgd{seed}" for seed in (0, 1)]
    for seed, run in enumerate(runs):
        assert run_main(capsys, "train", "--method", "sgd", "--seed", str(seed), "--epochs", "2", "--out", str(run),
                        *TINY)[0] == 0
    ens, cmp = tmp_path / "ens", str(tmp_path / "cmp")
    for command, extra in (("ood", ["--ood", "fashion-mnist"]), ("evaluate", [])):
        rc, _, err = run_main(capsys, command, *map(str, runs), "--which", "last", "--out", str(ens), *extra)
        assert rc == 0, err
    assert json.loads((ens / "ood.json").read_text())["member_epochs"] == [2, 2]
    assert run_main(capsys, "compare", str(ens), "--out", cmp)[0] == 0
    assert run_main(capsys, "train", "--resume", "--epochs", "3", "--out", str(runs[1]), "--quiet", *TINY)[0] == 0
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs), "--which", "last", "--out", str(ens))
    assert rc == 0, err  # the ensemble's eval.json is current again; its ood.json is not
    rc, _, err = run_main(capsys, "compare", str(ens), "--out", cmp)
    assert_one_line_error(rc, err, f"member {runs[1]} trained on since `bbb ood`", "last is now epoch 3",
                          f"bbb ood {runs[0]} {runs[1]} --which last --out {ens}")


def test_ood_of_an_ensemble(capsys, tmp_path, tiny_with_ood):
    """Several runs: their ensemble's ood.json in --out DIR; a deep ensemble's mutual information
    is the members' disagreement; a Bayesian member's k samples and a deterministic member's one
    (repeated k times) weigh the same; bbb compare reads the folder with its AUROCs."""
    from bbb.experiments.uncertainty import ood_report, sample_probs

    runs = []
    for method, seed in (("sgd", 0), ("sgd", 1), ("bbb", 2)):
        runs.append(tmp_path / f"{method}{seed}")
        assert run_main(capsys, "train", "--method", method, "--seed", str(seed), "--epochs", "3", "--out",
                        str(runs[-1]), *TINY)[0] == 0
    rc, _, err = run_main(capsys, "ood", *map(str, runs[:2]), "--ood", "fashion-mnist")
    assert_one_line_error(rc, err, "--out DIR")
    rc, _, err = run_main(capsys, "ood", str(runs[0]), "--out", str(tmp_path / "x"))
    assert_one_line_error(rc, err, "leave --out out")
    rc, _, err = run_main(capsys, "ood", *map(str, runs[:2]), "--out", str(runs[1]))
    assert_one_line_error(rc, err, "a folder of its own")
    deep = tmp_path / "deep"
    rc, out, err = run_main(capsys, "ood", *map(str, runs[:2]), "--ood", "fashion-mnist", "--out", str(deep))
    assert rc == 0, err
    rep = json.loads((deep / "ood.json").read_text())
    assert rep["samples"] == 2 and rep["method"] == "ensemble of 2 runs (sgd x 2)"
    assert rep["members"] == [str(r) for r in runs[:2]]
    assert rep["scores"]["mutual_information"]["auroc"] is not None  # the members disagree
    nets = [bbb.runs.load_run(r)[0] for r in runs[:2]]
    p_in = torch.cat([sample_probs(n, tiny_with_ood["mnist"]["test_x"], "sgd", 1) for n in nets])
    p_out = torch.cat([sample_probs(n, tiny_with_ood["fashion-mnist"]["test_x"], "sgd", 1) for n in nets])
    want = ood_report(p_in, p_out)
    for score in ("entropy", "mutual_information", "max_prob"):
        assert rep["scores"][score]["auroc"] == pytest.approx(want[score]["auroc"])
    mixed = tmp_path / "mixed"
    rc, _, err = run_main(capsys, "ood", str(runs[0]), str(runs[2]), "--ood", "fashion-mnist", "--samples", "4",
                          "--out", str(mixed))
    assert rc == 0, err
    assert json.loads((mixed / "ood.json").read_text())["samples"] == 8
    rc, _, err = run_main(capsys, "ood", str(runs[0]), str(runs[2]), "--ood", "fashion-mnist", "--out", str(deep))
    assert_one_line_error(rc, err, "not this ensemble's")  # the deep ensemble's ood.json stays
    assert json.loads((deep / "ood.json").read_text()) == rep
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs[:2]), "--out", str(deep))
    assert rc == 0, err
    rc, _, err = run_main(capsys, "compare", str(runs[0]), str(deep), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    with open(tmp_path / "cmp" / "comparison.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[1]["auroc_mi"]) == pytest.approx(rep["scores"]["mutual_information"]["auroc"], abs=1e-6)
    # bbb uncertain of the same ensembles: the members vote (a deterministic one as often as the
    # other's samples), into --out; the ranking is that of the pooled samples
    from bbb.experiments.uncertainty import most_uncertain

    rc, _, err = run_main(capsys, "uncertain", str(runs[0]), str(runs[2]), "--samples", "4", "--n", "8",
                          "--out", str(mixed))
    assert rc == 0, err
    got = json.loads((mixed / "uncertain.json").read_text())
    assert got["samples"] == 8 and got["members"] == [str(runs[0]), str(runs[2])]
    probs = torch.cat([sample_probs(bbb.runs.load_run(runs[0])[0], tiny_with_ood["mnist"]["test_x"], "sgd", 1)
                       .expand(4, -1, -1),
                       sample_probs(bbb.runs.load_run(runs[2])[0], tiny_with_ood["mnist"]["test_x"], "bbb", 4,
                                    seed=2)])
    want = most_uncertain(probs, tiny_with_ood["mnist"]["test_y"], 8)
    assert [d["index"] for d in got["digits"] if d["group"] == "uncertain"] == want["uncertain"].tolist()
    rc, _, err = run_main(capsys, "uncertain", *map(str, runs[:2]), "--n", "8")
    assert_one_line_error(rc, err, "--out DIR")


def test_ood_and_uncertain_bad_input(capsys, tmp_path, tiny_with_ood):
    run = tmp_path / "run"
    assert run_main(capsys, "train", "--epochs", "1", "--out", str(run), *TINY)[0] == 0
    rc, _, err = run_main(capsys, "ood", str(run), "--ood", "mnist")
    assert_one_line_error(rc, err, "own dataset")
    rc, _, err = run_main(capsys, "ood", str(run), "--samples", "0")
    assert_one_line_error(rc, err, "samples")
    rc, _, err = run_main(capsys, "uncertain", str(run), "--n", "0")
    assert_one_line_error(rc, err, "--n")
    rc, _, err = run_main(capsys, "ood", str(tmp_path / "missing"))
    assert_one_line_error(rc, err)
    rc, _, err = run_main(capsys, "ood", str(run), "--ood", "cifar")
    assert_one_line_error(rc, err, "cifar")


def test_unwritable_output_is_a_one_line_error(capsys, tmp_path):
    """An OSError (here: --out under a regular file) is the user's to fix: one line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").write_text(json.dumps({"method": "sgd", "test_error": 0.1, "test_error_mc": 0.1,
                                               "nll": 0.3, "ece": 0.01, "brier": 0.1}))
    rc, _, err = run_main(capsys, "compare", str(run), "--out", str(blocker / "sub"))
    assert_one_line_error(rc, err, str(blocker / "sub"))


def test_the_command_line_flushes_denormals_on_every_torch_thread():
    """bbb's entry point sets FTZ/DAZ before torch starts its threads, so a denormal float is
    zero on the main thread and on the OpenMP workers alike (a trained network's denormal
    gradients slow an x86 CPU down many times; docs/engine.md). Set once a command's options are
    parsed: `bbb --help` and `--version` end without loading torch (2.6 s -> 0.1 s here)."""
    code = (
        "import sys\n"
        "from bbb.cli import entry\n"
        "calls = []\n"
        "real = entry.flush_denormals\n"
        "entry.flush_denormals = lambda: (calls.append(1), real())\n"
        "for argv in (['--version'], ['--help']):\n"
        "    try:\n"
        "        entry.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert calls == [] and 'torch' not in sys.modules, (calls, argv)\n"
        "assert entry.main(['evaluate', 'no-such-run']) == 2\n"  # (parsed, then refused: torch is set up first)
        "assert calls == [1], calls\n"
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "x = torch.full((1 << 20,), 1e-39)\n"
        "print(int((x * 1.0 != 0).sum()), int((x.view(2, -1).sum(1) != 0).sum()))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["0", "0"]


def test_predict_and_evaluate_say_alike_which_checkpoint_best_is(capsys):
    """Before, bbb predict's --help said best.pt was chosen "by validation error"; it is the epoch of
    the run's --select-by (NLL for a table's run by default), as bbb evaluate's --help says."""
    from testkit import run_main

    helps = []
    for command in ("predict", "evaluate"):
        rc, out, _ = run_main(capsys, command, "--help")
        assert rc == 0
        text = " ".join(out.split())
        helps.append(text[text.index("--which {best,last} "):].split(" (default: best")[0])
    assert helps[0] == helps[1] and "--select-by" in helps[0]


def test_a_library_warning_of_bbb_train_is_one_line(tmp_path):
    """Before, ``bbb train --bf16`` on a CPU printed Python's two-line warning (the path and a line
    of bbb's source: 'src/bbb/runs/loop.py:348: UserWarning: ...'), not 'bbb train: warning: ...'.
    (A subprocess: pytest records the warnings of the tests it runs instead of printing them.)"""
    data = tmp_path / "t.csv"
    data.write_text("x,y\n" + "".join(f"{i / 40:.3f},{'ab'[i % 2]}\n" for i in range(40)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    env.pop("PYTHONWARNINGS", None)
    p = subprocess.run([sys.executable, "-m", "bbb", "train", "--csv", str(data), "--target", "y", "--epochs", "1",
                        "--hidden", "4", "--device", "cpu", "--bf16", "--quiet", "--no-compile",
                        "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["bbb train: warning: --bf16 is ignored on CPU (bf16 autocast is used on CUDA "
                                     "only)"], p.stderr


def test_the_command_line_hands_its_name_to_the_processes_it_starts():
    import warnings

    from bbb.cli.entry import warnings_in_one_line
    from bbb.errors import WARNINGS_PROG_ENV

    before = os.environ.get(WARNINGS_PROG_ENV)
    with warnings_in_one_line("bbb sweep"):
        assert os.environ[WARNINGS_PROG_ENV] == "bbb sweep"
        assert warnings.formatwarning("x", UserWarning, "f.py", 1) == "bbb sweep: warning: x\n"
    assert os.environ.get(WARNINGS_PROG_ENV) == before
