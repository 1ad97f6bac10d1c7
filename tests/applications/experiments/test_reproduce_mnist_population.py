"""``bbb reproduce mnist --population``: a cell's candidates (the smoke budget's two scale mixtures,
other pi and sigma2) and a seed cell's extra seeds trained together as populations
(bbb.runs.train_population) into the run directories the tables read, a cell that cannot train as
a population (dropout) trained one by one, a rerun trains nothing. Tiny synthetic data, smoke budget."""

from __future__ import annotations

import json

import pytest

from bbb.errors import UserError
from bbb.experiments.mnist import ReproduceConfig, run_reproduce
from bbb.experiments.mnist.jobs import command_line
from bbb.runs.population import POPULATION_FILE
from testkit import SILENT, blobs4, eager_kernels, read_csv, summary


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("population") / "mnist"
    cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, seeds=3, population=True,
                          cells="bbb-mixture:400,dropout:400")
    lines: list[str] = []
    with eager_kernels():
        first = run_reproduce(cfg, data=blobs4(), log=lines.append)
        again = run_reproduce(cfg, data=blobs4(), **SILENT)
    return out, cfg, first, again, lines


def test_the_extra_seeds_of_a_bayesian_cell_train_as_one_population(reproduced):
    out, cfg, first, again, _ = reproduced
    members = ["bbb_mixture_400_s1", "bbb_mixture_400_s2"]
    assert set(members + ["dropout_400_s1", "dropout_400_s2"]) <= set(first["trained"])
    pop = out / "runs" / "bbb_mixture_400_pop_s1-2"
    assert (pop / POPULATION_FILE).is_file()
    for j, name in enumerate(members):
        config = json.loads((out / "runs" / name / "config.json").read_text())
        assert config["population"] == {"dir": str(pop), "seeds": [1, 2], "runs": members, "member": j}
        assert summary(out, name)["epochs"] == cfg.spec.epochs["bbb_mixture"][400]
    # the cell's two candidates (seed 0), each at its own prior: one population
    grid = out / "runs" / "bbb_mixture_400_pop_c0-1"
    assert (grid / POPULATION_FILE).is_file()
    for j, name in enumerate(["bbb_mixture_400", "bbb_mixture_400_c1"]):
        config = json.loads((out / "runs" / name / "config.json").read_text())
        assert config["population"]["dir"] == str(grid) and config["population"]["member"] == j
        assert config["pi"] == cfg.spec.candidates["bbb_mixture"][j].settings["pi"]
    for name in ("dropout_400_s1", "dropout_400_s2"):  # not Bayesian: one by one
        assert "population" not in json.loads((out / "runs" / name / "config.json").read_text())
    rows = {(r["method"], r["hidden"]): r for r in read_csv(out / "table1.csv")}
    assert int(rows[("bbb_mixture", "400")]["n_seeds"]) == 3
    # the cell's training time counts each population's wall time once (its members share it)
    seconds = {n: summary(out, n)["seconds"] for n in ["bbb_mixture_400", "bbb_mixture_400_c1", *members]}
    want = max(seconds["bbb_mixture_400"], seconds["bbb_mixture_400_c1"]) + max(seconds[m] for m in members)
    assert float(rows[("bbb_mixture", "400")]["seconds_all"]) == pytest.approx(want, abs=2e-3)
    assert rows[("bbb_mixture", "400")]["population"] == "2" and rows[("dropout", "400")]["population"] == ""
    assert "(a population of 2) |" in (out / "table1.md").read_text()
    assert again["trained"] == []  # finished: nothing trains again


def test_the_command_line_and_the_help_name_it(reproduced, capsys):
    _, cfg, *_ = reproduced
    assert command_line(cfg).endswith("--population")
    from testkit import run_main

    rc, out, _ = run_main(capsys, "reproduce", "mnist", "--help")
    assert rc == 0 and "--population" in out


def test_a_population_killed_at_its_start_goes_on_in_the_same_population(tmp_path):
    """Killed after the first population's first commit (the cell's two candidates: their runs hold
    epoch 0 and name their population): the rerun resumes that population, with every run it started
    with, then trains the selected candidate's seeds."""
    from bbb.runs.cuda_graph import StepGraphs

    out = tmp_path / "mnist"
    cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, seeds=3, population=True,
                          cells="bbb-mixture:400")

    def killed(*a, **k):
        raise KeyboardInterrupt

    with eager_kernels():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(StepGraphs, "begin", killed)  # (the population's first epoch, after its first commit)
            with pytest.raises(KeyboardInterrupt):
                run_reproduce(cfg, data=blobs4(), **SILENT)
        pop = out / "runs" / "bbb_mixture_400_pop_c0-1"
        assert (pop / POPULATION_FILE).is_file() and not (out / "runs" / "bbb_mixture_400_c1" / "summary.json").exists()
        # rerun without --population: before, the member's refusal to resume alone ended in "use another --out"
        with pytest.raises(UserError, match=r"started in the population in .*bbb_mixture_400_pop_c0-1.*: resume it "
                                            r"with 'bbb reproduce mnist .* --population'$") as e:
            run_reproduce(ReproduceConfig(**{**cfg.__dict__, "population": False}), data=blobs4(), **SILENT)
        assert "\n" not in str(e.value) and "another --out" not in str(e.value)
        lines: list[str] = []
        res = run_reproduce(ReproduceConfig(**{**cfg.__dict__, "quiet": False, "cells": "bbb-mixture:400"}),
                            data=blobs4(), log=lines.append)
    assert {"bbb_mixture_400", "bbb_mixture_400_c1", "bbb_mixture_400_s1", "bbb_mixture_400_s2"} <= set(res["trained"])
    assert any("resuming the population of 2" in line for line in lines)
    assert summary(out, "bbb_mixture_400_c1")["epochs"] == 1
    assert summary(out, "bbb_mixture_400_s2")["epochs"] == 1


def test_cuda_graph_reaches_all_but_ivon_and_is_refused_on_the_cpu(tmp_path, capsys):
    from bbb.experiments.mnist.plan import make_job

    cfg = ReproduceConfig(budget="smoke", out=str(tmp_path), device="cuda", cuda_graph=True)
    assert make_job(cfg, "bbb_mixture", 400, 0, 0).config.cuda_graph is True
    assert make_job(cfg, "sgd", 400, 0, 0).config.cuda_graph is True
    assert make_job(cfg, "ivon", 400, 0, 0).config.cuda_graph is False
    assert command_line(cfg).endswith("--cuda-graph")
    with pytest.raises(UserError, match="leave it out with --device cpu"):
        ReproduceConfig(budget="smoke", out=str(tmp_path), device="cpu", cuda_graph=True)


def test_the_plan_names_the_runs_that_train_together(tmp_path):
    cfg = ReproduceConfig(budget="smoke", out=str(tmp_path / "mnist"), device="cpu", quiet=True, seeds=3,
                          population=True, cells="bbb-mixture:400,dropout:400")
    lines: list[str] = []
    run_reproduce(cfg, data=blobs4(), log=lines.append, plan_only=True)
    text = "\n".join(lines)
    assert "--population: bbb_mixture_400, bbb_mixture_400_c1 train together (bbb_mixture_400_pop_c0-1)" in text
    assert text.count("--population:") == 1 and not (tmp_path / "mnist" / "runs").exists()
