"""bbb.runs.train_population: K runs of one recipe trained as one population leave K ordinary run
directories (read by load_run like any), log each member's own numbers, resume bit for bit from the
population's commit point, refuse what they cannot train and a member's lone resume in one line,
and record a member's divergence. Tiny synthetic data (testkit.blobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bbb.errors import UserError
from bbb.runs import TrainConfig, build_model, load_run, read_metrics, train
from bbb.runs.population import POPULATION_FILE, check_population, train_population
from testkit import blobs

QUIET = {"quiet": True, "log": lambda s: None}
SEEDS = (0, 3, 5)


def tiny_cfg(seed: int = 0, **kw) -> TrainConfig:
    base = {"method": "bbb", "hidden": [16, 16], "epochs": 3, "batch_size": 32, "lr": 1e-2, "device": "cpu",
            "eval_samples": 2, "kl_weighting": "uniform", "seed": seed}
    if kw.get("method", "bbb") != "bbb":  # a plain network takes no KL weighting (TrainConfig refuses it)
        del base["kl_weighting"]
    return TrainConfig(**{**base, **kw})


def _train(tmp: Path, epochs: int = 3, seeds=SEEDS, **kw) -> tuple[list, list[Path]]:
    dirs = [tmp / f"run_s{s}" for s in seeds]
    res = train_population([tiny_cfg(s, epochs=epochs, **kw) for s in seeds], dirs, tmp / "pop", data=blobs(),
                           **QUIET)
    return res, dirs


def _rows(d: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in read_metrics(d)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("population")
    return tmp, *_train(tmp)


def test_each_member_is_an_ordinary_run_with_its_own_numbers(trained):
    tmp, summaries, dirs = trained
    n = blobs()["train_x"].shape[0]
    for s, d, summary in zip(SEEDS, dirs, summaries):
        assert summary is not None and summary["epochs"] == 3
        assert json.loads((d / "summary.json").read_text()) == summary
        rows = read_metrics(d)
        assert [r["epoch"] for r in rows] == [1, 2, 3]
        for r in rows:  # uniform KL weighting: the free energy per example = nll + mean KL / N
            assert r["train_loss"] == pytest.approx(r["nll"] + r["kl"] / n, rel=1e-5)
        best = min(rows, key=lambda r: (r["val_error"], r["epoch"]))
        assert summary["best_epoch"] == best["epoch"]
        # the epoch's validation error on the batched population, the summary's on the member alone
        assert summary["val_error"] == pytest.approx(best["val_error"], abs=1.5 / 60)
        model, cfg = load_run(d, "last")
        assert cfg.seed == s and cfg.hidden == [16, 16]
        config = json.loads((d / "config.json").read_text())
        assert config["population"]["member"] == SEEDS.index(s) and config["population"]["seeds"] == list(SEEDS)
    # the members differ from one another (their own seeds, rows and noise)
    a, b = (load_run(d, "last")[0].state_dict() for d in dirs[:2])
    assert not torch.equal(next(iter(a.values())), next(iter(b.values())))
    assert [r["train_loss"] for r in read_metrics(dirs[0])] != [r["train_loss"] for r in read_metrics(dirs[1])]


def test_members_start_from_the_networks_of_their_seeds(tmp_path):
    """Epoch 0 of the population (its first commit) holds each member's bbb-train initialisation:
    torch.manual_seed(seed), then the run's network."""
    cfgs = [tiny_cfg(s, epochs=1) for s in SEEDS]
    dirs = [tmp_path / f"r{s}" for s in SEEDS]
    with pytest.MonkeyPatch.context() as mp:  # stop right after the first commit (epoch 0)
        from bbb.runs.cuda_graph import StepGraphs

        def stop(*a, **k):
            raise KeyboardInterrupt

        mp.setattr(StepGraphs, "begin", stop)  # (the first epoch's first call)
        with pytest.raises(KeyboardInterrupt):
            train_population(cfgs, dirs, tmp_path / "pop", data=blobs(), **QUIET)
    for cfg, d in zip(cfgs, dirs):
        torch.manual_seed(cfg.seed)
        want = build_model(cfg, 12, 3).state_dict()
        got = torch.load(d / "last.pt", weights_only=True)
        assert got["epoch"] == 0
        assert want.keys() == got["model"].keys()
        for key in want:
            assert torch.equal(want[key], got["model"][key]), key


def _stop_after_the_first_commit(mp):
    from bbb.runs.cuda_graph import StepGraphs

    def stop(*a, **k):
        raise KeyboardInterrupt

    mp.setattr(StepGraphs, "begin", stop)  # (the first epoch's first call)


def test_runs_that_differ_in_their_initialisation_train_as_one_population(tmp_path):
    """A grid over where the posterior starts (rho_init, mu_init_scale; the seeds may be equal):
    each member starts from its own run's network, its directory records its own settings, and a
    resume with one member's setting changed is one line."""
    cfgs = [tiny_cfg(0, epochs=2), tiny_cfg(0, epochs=2, rho_init=-2.0), tiny_cfg(4, epochs=2, mu_init_scale=0.3)]
    dirs = [tmp_path / f"r{j}" for j in range(3)]
    with pytest.MonkeyPatch.context() as mp:
        _stop_after_the_first_commit(mp)
        with pytest.raises(KeyboardInterrupt):
            train_population(cfgs, dirs, tmp_path / "pop", data=blobs(), **QUIET)
    for cfg, d in zip(cfgs, dirs):
        torch.manual_seed(cfg.seed)
        want = build_model(cfg, 12, 3).state_dict()
        got = torch.load(d / "last.pt", weights_only=True)["model"]
        assert all(torch.equal(want[k], got[k]) for k in want)
    rho = [torch.load(d / "last.pt", weights_only=True)["model"] for d in dirs[:2]]
    key = next(k for k in rho[0] if k.endswith("_rho"))
    assert float(rho[0][key].mean()) != float(rho[1][key].mean())  # not the first run's start
    summaries = train_population(cfgs, dirs, tmp_path / "pop", data=blobs(), **QUIET)
    assert all(s is not None and s["epochs"] == 2 for s in summaries)
    for cfg, d in zip(cfgs, dirs):
        stored = load_run(d, "last")[1]
        assert (stored.seed, stored.rho_init, stored.mu_init_scale) == (cfg.seed, cfg.rho_init, cfg.mu_init_scale)
    # the members trained apart: the same seed, other starts, other numbers
    assert _rows(dirs[0]) != _rows(dirs[1])
    changed = [cfgs[0], tiny_cfg(0, epochs=2, rho_init=-2.5), cfgs[2]]
    with pytest.raises(UserError, match="run 1's setting 'rho_init' was -2.0, now -2.5") as e:
        train_population(changed, dirs, tmp_path / "pop", data=blobs(), **QUIET)
    assert "\n" not in str(e.value)


def test_a_grid_over_the_learning_rate_and_the_prior_trains_as_one_population(tmp_path):
    """Members with their own learning rate and prior (``MemberPrior``, ``member_lr_scale``): member
    1 of the grid ends bit for bit where member 1 of a population of as many members that all share
    its settings ends (its start, minibatches and noise are the same: the engine reads its prior and
    learning rate from the table, not the first member's; a learning rate twice the first's is
    exact), and every directory records its own settings."""
    import math

    own = {"lr": 2e-2, "pi": 0.75, "sigma2": math.exp(-6)}
    grid = [tiny_cfg(0, epochs=2), tiny_cfg(3, epochs=2, **own), tiny_cfg(5, epochs=2, lr=5e-3, sigma1=0.5)]
    same = [tiny_cfg(s, epochs=2, **own) for s in (0, 3, 5)]
    dirs = [tmp_path / f"g{j}" for j in range(3)]
    ref = [tmp_path / f"s{j}" for j in range(3)]
    summaries = train_population(grid, dirs, tmp_path / "grid", data=blobs(), **QUIET)
    train_population(same, ref, tmp_path / "same", data=blobs(), **QUIET)
    assert all(s is not None and s["epochs"] == 2 for s in summaries)
    assert _rows(dirs[1]) == _rows(ref[1])
    a, b = load_run(dirs[1], "last")[0].state_dict(), load_run(ref[1], "last")[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _rows(dirs[0]) != _rows(ref[0])  # the first member trained at its own settings
    for cfg, d in zip(grid, dirs):
        model, stored = load_run(d, "last")
        assert (stored.lr, stored.pi, stored.sigma1, stored.sigma2) == (cfg.lr, cfg.pi, cfg.sigma1, cfg.sigma2)
        assert model.layers[0].prior == cfg.make_prior()


def test_a_resumed_population_continues_bit_for_bit(trained, tmp_path):
    _, _, full = trained
    _train(tmp_path, epochs=2)
    summaries, dirs = _train(tmp_path, epochs=3)  # the same command with more epochs: resumes
    assert (tmp_path / "pop" / POPULATION_FILE).is_file()
    for a, b in zip(full, dirs):
        assert _rows(a) == _rows(b)
        sa, sb = load_run(a, "last")[0].state_dict(), load_run(b, "last")[0].state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert all(s is not None and s["epochs"] == 3 for s in summaries)


def test_a_population_on_a_cosine_schedule_does_not_resume_with_more_epochs(tmp_path):
    """Before, the resumed population kept the checkpoint's cosine T_max (the first epochs): the
    learning rate climbed back from 0 while each run's config said cosine over the new epochs."""
    _train(tmp_path, epochs=1, lr_schedule="cosine")
    with pytest.raises(UserError, match=r"^cannot resume the population in .* with epochs 2: its --lr-schedule "
                                        r"cosine anneals to 0 over the 1 epochs it started with") as e:
        _train(tmp_path, epochs=2, lr_schedule="cosine")
    assert "\n" not in str(e.value)


def test_a_member_alone_does_not_resume_and_bad_populations_are_one_line(trained):
    _, _, dirs = trained
    with pytest.raises(UserError, match="member 0 of a population") as e:
        train(tiny_cfg(0, epochs=4), dirs[0], data=blobs(), resume=True, **QUIET)
    assert "\n" not in str(e.value)
    for cfgs, match in (([tiny_cfg(0), tiny_cfg(0)], "run 1 of the population repeats run 0"),
                        ([tiny_cfg(0, rho_init=-2.5), tiny_cfg(1), tiny_cfg(0, rho_init=-2.5)],
                         "run 2 .* repeats run 0"),
                        ([tiny_cfg(0), tiny_cfg(1, batch_size=16)], "run 1 \\(seed 1\\) has another batch_size"),
                        ([tiny_cfg(0, lr=0.1), tiny_cfg(0, lr=0.1)], "repeats run 0 .*lr 0.1"),
                        ([tiny_cfg(0), tiny_cfg(1, pi=1.0)], "all have pi below 1, or all pi = 1"),
                        ([tiny_cfg(0), tiny_cfg(0, prior="gaussian")], "has another prior"),
                        ([tiny_cfg(0, method="sgd")], "method sgd"),
                        ([tiny_cfg(0, estimator="flipout")], "flipout estimator"),
                        ([], "at least one")):
        with pytest.raises(UserError, match=match) as e:
            check_population(cfgs)
        assert "\n" not in str(e.value)


def test_a_member_that_diverges_is_recorded_and_the_rest_is_not_written(tmp_path):
    summaries, dirs = _train(tmp_path, epochs=2, lr=1e6)
    for d, s in zip(dirs, summaries):
        assert s is None
        assert "diverged in epoch 1" in json.loads((d / "diverged.json").read_text())["message"]
        assert read_metrics(d) == []  # last.pt keeps epoch 0


def test_cuda_graph_on_the_cpu_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(UserError, match="on a GPU") as e:
        _train(tmp_path, epochs=1, cuda_graph=True)
    assert "\n" not in str(e.value) and not any(tmp_path.iterdir())


def test_a_population_written_before_grids_resumes(tmp_path):
    """population.pt from before the members' settings were stored each (the first run's config
    alone): it resumes, each member's settings taken as the first's with its own seed."""
    _train(tmp_path, epochs=1)
    path = tmp_path / "pop" / POPULATION_FILE
    state = torch.load(path, weights_only=True)
    del state["configs"]
    torch.save(state, path)
    summaries, _ = _train(tmp_path, epochs=2)
    assert all(s is not None and s["epochs"] == 2 for s in summaries)


def test_a_population_started_on_relative_paths_resumes_from_another_working_directory(tmp_path, monkeypatch):
    """Before, config.json recorded the population's folder as it was typed (relative): resumed
    from another working directory, the members were refused as runs that already exist."""
    from bbb.runs.jobs import RunJob
    from bbb.runs.population import population_groups

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    train_population([tiny_cfg(s, epochs=1) for s in SEEDS], [Path("out") / f"s{s}" for s in SEEDS],
                     Path("out") / "pop", data=blobs(), **QUIET)
    monkeypatch.chdir(tmp_path)
    base = Path("work") / "out"
    jobs = [RunJob(base / f"s{s}", tiny_cfg(s, epochs=2)) for s in SEEDS]
    [(pop_dir, members)] = population_groups(jobs, lambda m: base / "another")
    assert pop_dir is not None and pop_dir.resolve() == (base / "pop").resolve()
    summaries = train_population([j.config for j in members], [j.run_dir for j in members], pop_dir, data=blobs(),
                                 **QUIET)
    assert all(s is not None and s["epochs"] == 2 for s in summaries)
    assert not (tmp_path / "out").exists()


def test_a_member_with_no_trained_epoch_says_why_and_what_to_do(tmp_path, monkeypatch):
    """Before, a member that diverged in its first epoch, or whose population was stopped there, was
    called stopped and to be trained on with bbb train --resume, which refuses a member."""
    from bbb.errors import CheckpointError, TrainingInterrupted
    from bbb.runs import population as P

    _, dirs = _train(tmp_path / "diverged", epochs=1, lr=1e6)
    with pytest.raises(CheckpointError, match="holds no trained epoch: training diverged in epoch 1") as e:
        load_run(dirs[0])
    assert "\n" not in str(e.value) and "--resume" not in str(e.value)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(P._Epochs, "run", stop)
    with pytest.raises(TrainingInterrupted):
        _train(tmp_path / "stopped", epochs=1)
    for which in ("best", "last"):
        with pytest.raises(CheckpointError, match="member 0 of the population in .*: resume that population") as e:
            load_run(tmp_path / "stopped" / "run_s0", which)
        assert "\n" not in str(e.value) and "bbb train --resume" not in str(e.value)


def test_a_population_that_trains_on_removes_what_was_made_from_its_members_before(tmp_path):
    """As bbb train --resume does: before, a member's eval.json, pruning.csv and figures stayed
    beside the checkpoints of the epochs trained since."""
    _, dirs = _train(tmp_path, epochs=1)
    for name in ("eval.json", "pruning.csv", "reliability.png"):
        (dirs[1] / name).write_text("{}")
    _train(tmp_path, epochs=1)  # nothing to train: kept
    assert (dirs[1] / "eval.json").is_file()
    with pytest.warns(UserWarning, match=r"removed eval.json, pruning.csv, reliability.png from .*run_s3"):
        summaries, _ = _train(tmp_path, epochs=2)
    assert not any((d / n).exists() for d in dirs for n in ("eval.json", "pruning.csv", "reliability.png"))
    assert all(s is not None and s["epochs"] == 2 for s in summaries)


def test_a_member_replaced_by_a_run_of_its_own_is_not_written_over(tmp_path):
    """Before, bbb train --overwrite into a member's folder, then the population resumed (a sweep or
    reproduce rerun): the population wrote its member over that run, which also trained alone."""
    from bbb.runs.jobs import RunJob
    from bbb.runs.population import population_groups

    _, dirs = _train(tmp_path, epochs=1)
    train(tiny_cfg(SEEDS[1], epochs=2), dirs[1], data=blobs(), overwrite=True, **QUIET)
    own = _rows(dirs[1])
    jobs = [RunJob(d, tiny_cfg(s, epochs=2)) for s, d in zip(SEEDS, dirs)]
    with pytest.raises(UserError, match=r"cannot go on: .*run_s3, one of its runs' folders, holds a run trained "
                                        r"alone since") as e:
        population_groups(jobs, lambda m: tmp_path / "another")
    assert "\n" not in str(e.value) and _rows(dirs[1]) == own
    dirs[1].rename(tmp_path / "moved")  # moved away: the population goes on, its member written there again
    [(pop_dir, members)] = population_groups(jobs, lambda m: tmp_path / "another")  # (not also alone, as before)
    assert pop_dir is not None and [j.run_dir for j in members] == dirs
    summaries = train_population([j.config for j in members], [j.run_dir for j in members], pop_dir, data=blobs(),
                                 **QUIET)
    assert all(s is not None and s["epochs"] == 2 for s in summaries)
