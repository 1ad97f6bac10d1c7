"""The mushroom bandit from the command line: a clean stop on SIGTERM and Ctrl-C that the same
command resumes exactly, and user errors as one-line messages. Small synthetic data only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bbb.errors import UserError
from bbb.experiments import bandit as B
from bbb.experiments.bandit import Population, parse_agent, run_bandit
from bbb.experiments.bandit.command import config_from_args
from testkit import read_csv, tiny_bandit_config, tiny_mushrooms

# --------------------------------------------------------------------------------------------
# SIGTERM through the command line, Ctrl-C in process
# --------------------------------------------------------------------------------------------

CHILD = r"""
import dataclasses, sys, torch
import bbb.data
import bbb.experiments.bandit.command as C
from bbb.cli.entry import main
g = torch.Generator().manual_seed(0)
attr = torch.randint(0, 3, (40, 3), generator=g)
ctx = torch.zeros(40, 9)
ctx[torch.arange(40).unsqueeze(1), attr + 3 * torch.arange(3)] = 1.0
bbb.data.load_mushroom = lambda *a, **k: (ctx, attr[:, 0] != 0)
plain = C.config_from_args
C.config_from_args = lambda a: dataclasses.replace(plain(a), progress_every=0.0)  # a line every step
sys.exit(main(sys.argv[1:]))
"""

ARGS = ["bandit", "--steps", "200", "--seeds", "0", "1", "--agents", "bbb", "greedy", "--hidden", "8", "6",
        "--updates-per-step", "2", "--batch-size", "8", "--buffer", "32", "--log-every", "10", "--device", "cpu"]


def _child(out: Path) -> subprocess.Popen:
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", CHILD, *ARGS, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _stop_at(p: subprocess.Popen, step: int, sig: int) -> tuple[int, str]:
    """Send ``sig`` once the child reports ``step`` or later; its exit code and stderr."""
    for line in p.stdout:
        if line.startswith("bandit: step ") and int(line.split()[2].split("/")[0]) >= step:
            p.send_signal(sig)
            break
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def test_sigterm_saves_says_what_was_kept_and_the_same_command_resumes_exactly(tmp_path):
    ref = _child(tmp_path / "ref")
    assert ref.wait(timeout=300) == 0, ref.stderr.read()
    out = tmp_path / "stopped"
    rc, err = _stop_at(_child(out), 60, signal.SIGTERM)
    lines = err.strip().splitlines()
    assert rc == 130 and len(lines) == 1, err
    assert "stopped by SIGTERM at step" in lines[0] and "worker0.pt" in lines[0] and "resume" in lines[0]
    assert 60 <= int(lines[0].split("at step ")[1].split()[0]) < 200
    last = _child(out)
    assert last.wait(timeout=300) == 0, last.stderr.read()
    assert (out / "regret.csv").read_bytes() == (tmp_path / "ref" / "regret.csv").read_bytes()
    drop = [c for c in B.SUMMARY_COLUMNS if c != "seconds"]
    assert [[r[c] for c in drop] for r in read_csv(out / "summary.csv")] == \
        [[r[c] for c in drop] for r in read_csv(tmp_path / "ref" / "summary.csv")]


def test_ctrl_c_stops_after_the_current_step_and_resumes_exactly(tmp_path, monkeypatch):
    """SIGINT while run_bandit runs: the step finishes, the checkpoint is saved, the one-line
    TrainingInterrupted names what was kept; the same call resumes to the uninterrupted result."""
    from bbb.errors import TrainingInterrupted

    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=80, agents=("bbb", "greedy"), log_every=10)
    whole = run_bandit(cfg, contexts=ctx, edible=edible)
    act = Population._act_and_learn

    def act_then_interrupt(self, t):
        act(self, t)
        if t == 30:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Population, "_act_and_learn", act_then_interrupt)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted, match="stopped by SIGINT at step 31 of 80; kept") as e:
        run_bandit(cfg, contexts=ctx, edible=edible, out=str(tmp_path))
    assert signal.getsignal(signal.SIGINT) is before and "worker0.pt" in str(e.value)
    monkeypatch.setattr(Population, "_act_and_learn", act)
    resumed = run_bandit(cfg, contexts=ctx, edible=edible, out=str(tmp_path))
    assert resumed["regret_rows"] == whole["regret_rows"]


# --------------------------------------------------------------------------------------------
# User errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["thompson", "egreedy_2", "egreedy_x", ""])
def test_bad_agent_names(name):
    with pytest.raises(UserError):
        parse_agent(name)


def test_agent_names():
    assert parse_agent("BBB").bayesian
    assert parse_agent("egreedy_0.05").epsilon == 0.05
    assert not parse_agent("greedy").bayesian


def test_one_epsilon_is_one_agent_whatever_its_spelling():
    # egreedy_.05 ran beside egreedy_0.05 as a second agent, under its own name in the outputs and
    # out of merges with runs that spelled it egreedy_0.05
    assert [parse_agent(a).name for a in ("egreedy_.05", "egreedy_0.050", "EGREEDY_5e-2", "egreedy_0.05")] == [
        "egreedy_0.05"] * 4
    assert parse_agent("egreedy_0.123456789").name == "egreedy_0.123456789"
    with pytest.raises(UserError, match="agents must be distinct"):
        tiny_bandit_config(agents=("egreedy_0.05", "egreedy_.05")).validate()
    # an epsilon of 0 never explores: the greedy agent (it ran as a second greedy agent beside greedy)
    assert parse_agent("egreedy_0").name == parse_agent("egreedy_0.0").name == "greedy"
    with pytest.raises(UserError, match="agents must be distinct"):
        tiny_bandit_config(agents=("greedy", "egreedy_0")).validate()


@pytest.mark.parametrize("kw", [dict(steps=0), dict(seeds=(0, 0)), dict(seeds=()), dict(lr=-1.0),
                                dict(batch_size=0), dict(buffer=0), dict(hidden=()), dict(agents=("bbb", "bbb")),
                                dict(noise_sigma=0.0), dict(seeds=(-1,)), dict(device="tpu"),
                                dict(prior="laplace"), dict(pi=1.0), dict(kl_data="fill"), dict(kl_scale=0.0),
                                dict(optimizer="rmsprop"), dict(kl_weighting="linear"), dict(sigma_init=float("nan")),
                                dict(lr=float("inf")), dict(weight_decay=-0.1), dict(weight_decay=float("nan"))])
def test_bad_settings_raise_user_error(kw):
    ctx, edible = tiny_mushrooms()
    with pytest.raises(UserError):
        run_bandit(tiny_bandit_config(**kw), contexts=ctx, edible=edible)


def test_bad_data_raises_user_error():
    ctx, edible = tiny_mushrooms()
    with pytest.raises(UserError):
        Population(tiny_bandit_config(), [("bbb", 0)], ctx, edible[:-1])


def test_cli_parser_and_errors(tmp_path, capsys, monkeypatch):
    import argparse

    parser = argparse.ArgumentParser()
    B.add_arguments(parser)
    assert "Example" in (parser.epilog or "")
    args = parser.parse_args(["--out", str(tmp_path), "--seeds", "3", "--steps", "5", "--quiet",
                              "--data-dir", str(tmp_path), "--device", "cpu", "--optimizer", "sgd",
                              "--kl-data", "seen", "--kl-weighting", "blundell", "--prior", "mixture",
                              "--weight-decay", "0.001"])
    cfg = config_from_args(args)
    assert cfg.weight_decay == 0.001 and cfg.training_key()["weight_decay"] == 0.001
    assert "weight_decay" not in B.BanditConfig().training_key()  # checkpoints from before the option resume
    assert cfg.seeds == (3,) and cfg.steps == 5 and cfg.quiet and cfg.data_dir == str(tmp_path)
    assert (cfg.optimizer, cfg.kl_data, cfg.kl_weighting, cfg.prior) == ("sgd", "seen", "blundell", "mixture")
    cli = pytest.importorskip("bbb.cli")
    for argv, word in ((["--steps", "0"], "steps"), (["--optimizer", "rmsprop"], "optimizer"),
                       (["--kl-data", "fill"], "kl-data"), (["--lr", "nan"], "lr")):
        try:
            rc = cli.main(["bandit", "--out", str(tmp_path / "x"), *argv])
        except SystemExit as e:  # argparse's own one-line error (choices)
            rc = e.code
        assert rc == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and word in err[0], err
    # a data problem is a one-line error too
    import bbb.data
    from bbb.errors import DataError

    def missing(*a, **k):
        raise DataError("mushroom/agaricus-lepiota.data not found")

    monkeypatch.setattr(bbb.data, "load_mushroom", missing)
    rc = cli.main(["bandit", "--out", str(tmp_path / "y"), "--steps", "3"])
    assert rc == 2
    assert "agaricus" in capsys.readouterr().err


@pytest.mark.parametrize("argv, flag", [(["--pi", "0.3"], "--pi"),  # the default prior: gaussian
                                        (["--sigma2", "0.01"], "--sigma2"),
                                        (["--prior", "mixture", "--prior-sigma", "2"], "--prior-sigma")])
def test_a_parameter_of_the_other_prior_is_refused(tmp_path, capsys, argv, flag):
    """Before, ``bbb bandit --pi 0.3`` ran the BBB agents with the Gaussian prior and recorded pi
    0.3 in config.json."""
    from testkit import run_main

    out = tmp_path / "b"
    rc, _, err = run_main(capsys, "bandit", "--out", str(out), "--steps", "5", "--seeds", "0", *argv)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag} applies to --prior " in err and not (out / "config.json").exists()


def test_an_out_holding_another_commands_files_is_refused(tmp_path):
    """Before, ``bbb bandit --out RUN`` wrote its config.json and summary.json over a ``bbb train``
    run's (or ``bbb regression``'s summary.json); a bandit run's own are replaced (--fresh)."""
    ctx, edible = tiny_mushrooms()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"method": "bbb", "hidden": [8]}')
    (run / "summary.json").write_text('{"epochs": 2}')
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    with pytest.raises(UserError, match="config.json is not a bbb bandit run's.*give another --out"):
        run_bandit(tiny_bandit_config(steps=10, out=str(run)), contexts=ctx, edible=edible)
    (run / "config.json").unlink()
    with pytest.raises(UserError, match="summary.json is not a bbb bandit run's"):
        run_bandit(tiny_bandit_config(steps=10, out=str(run)), contexts=ctx, edible=edible)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == {k: v for k, v in before.items() if k != "config.json"}
    own = tmp_path / "bandit"
    run_bandit(tiny_bandit_config(steps=10, out=str(own)), contexts=ctx, edible=edible)
    run_bandit(tiny_bandit_config(steps=10, out=str(own), resume=False), contexts=ctx, edible=edible)
    assert (own / "summary.csv").is_file()


def test_the_help_describes_every_kl_weighting():
    import argparse

    from bbb.elbo import KLWeighting

    parser = argparse.ArgumentParser()
    B.add_arguments(parser)
    (action,) = [a for a in parser._actions if "--kl-weighting" in a.option_strings]
    assert action.choices == [k.value for k in KLWeighting]
    for k in KLWeighting:  # "blob" was a choice that the help left out
        assert f"{k.value} (" in (action.help or "")


def test_a_worker_killed_by_the_system_is_one_line_that_says_to_resume(tmp_path, monkeypatch):
    # a worker process killed (kill -9, the system's out-of-memory killer) ended in concurrent.futures'
    # BrokenProcessPool traceback
    import concurrent.futures
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from bbb.errors import OutOfMemory

    class DyingPool:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self) -> DyingPool:
            return self

        def __exit__(self, *exc) -> None:
            return None

        def submit(self, *args, **kwargs) -> Future:
            f: Future = Future()
            f.set_exception(BrokenProcessPool("A process in the process pool was terminated abruptly"))
            return f

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", DyingPool)
    ctx, edible = tiny_mushrooms()
    out = tmp_path / "r"
    with pytest.raises(OutOfMemory, match=r"worker process died.*kept in .*checkpoint; run the same command again"):
        run_bandit(tiny_bandit_config(out=str(out), workers=2), contexts=ctx, edible=edible)
