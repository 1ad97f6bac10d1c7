"""``bbb reproduce fashion`` on fake MNIST-format data: the LeNet-5, the plan, the choice on the
validation split, a smoke run end to end with its files, resume (a finished job is not trained
again; a job stopped mid-way goes on to the same bits), the ensemble from its members, and
one-line errors."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest
import torch

from bbb.errors import UserError
from bbb.experiments.fashion import runner as RU
from bbb.experiments.fashion.settings import (
    ADAMW_GRID,
    BBB_GRID,
    DROPOUT_GRID,
    ENSEMBLE_SIZE,
    SCHEDULES,
    FashionBudget,
    FashionConfig,
    FashionMethod,
    Phase,
    Schedule,
    Setting,
)
from bbb.experiments.fashion.train import NUM_WEIGHTS, Job, lenet5, run_job
from faultkit import fake_mnist
from testkit import run_main

spec = importlib.util.find_spec
SMALL = Schedule(epochs=2, n_train=300, n_test=100, test_samples=2, val_size=200)


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = fake_mnist(tmp_path_factory.mktemp("data"), n_train=1200, n_test=200)
    shutil.copytree(root / "mnist", root / "fashion-mnist")
    return root


@pytest.fixture
def no_verify(monkeypatch):
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")


def test_lenet5_is_the_published_network():
    net = lenet5()
    assert sum(p.numel() for p in net.parameters()) == NUM_WEIGHTS == 44_426
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert sum(isinstance(m, torch.nn.Dropout) for m in lenet5(0.25).modules()) == 3


def test_plan_validates_the_grids_on_the_first_seed_and_builds_ensembles_of_adamw_members():
    cfg = FashionConfig(out="x", seeds=(3, 4))
    val = RU.plan(cfg, Phase.VALIDATION)
    assert {j.seed for j in val} == {3} and len(val) == len(BBB_GRID) + len(DROPOUT_GRID) + len(ADAMW_GRID)
    test = RU.plan(cfg, Phase.TEST)  # nothing chosen yet: no BBB, MC dropout or AdamW test job
    methods = [j.method for j in test]
    assert not {FashionMethod.BBB, FashionMethod.MC_DROPOUT, FashionMethod.ADAMW} & set(methods)
    chosen = {"bbb": BBB_GRID[3], "mc_dropout": DROPOUT_GRID[0], "adamw": ADAMW_GRID[2]}
    test = RU.plan(cfg, Phase.TEST, chosen)
    assert {j.setting for j in test if j.method is FashionMethod.BBB} == {BBB_GRID[3]}
    adamw = [j for j in test if j.method is FashionMethod.ADAMW]
    assert {j.setting for j in adamw} == {ADAMW_GRID[2]}  # the row's, the members' and Laplace's networks
    assert sorted(j.seed for j in adamw) == sorted(s + 1000 * k for s in (3, 4) for k in range(ENSEMBLE_SIZE))
    bbb = [j for j in test if j.method is FashionMethod.BBB]  # the BBB row's and the BBB ensemble's networks
    assert sorted(j.seed for j in bbb) == sorted(s + 1000 * k for s in (3, 4) for k in range(ENSEMBLE_SIZE))
    # the BBB ensemble alone validates BBB's grid and trains nothing else
    only = FashionConfig(out="x", methods=(FashionMethod.BBB_ENSEMBLE,), seeds=(0,))
    assert {j.method for j in RU.plan(only, Phase.VALIDATION)} == {FashionMethod.BBB}
    assert {j.method for j in RU.plan(only, Phase.TEST, chosen)} == {FashionMethod.BBB}
    # the ensemble or Laplace alone still validate AdamW's weight decay: their networks are AdamW's
    alone = FashionConfig(out="x", methods=(FashionMethod.LAPLACE,), seeds=(0,))
    assert {j.method for j in RU.plan(alone, Phase.VALIDATION)} == {FashionMethod.ADAMW}
    assert [j.name for j in RU.plan(alone, Phase.TEST, chosen)] == ["test-adamw-wd0.05-s0"]


def test_choose_takes_the_lowest_validation_nll():
    results = [{"setting": s.label(), "nll": nll} for s, nll in zip(BBB_GRID, (0.5, 0.4, 0.3, 0.35, 0.6, 0.7))]
    best, nll = RU.choose(results, BBB_GRID)
    assert best == BBB_GRID[2] and nll[BBB_GRID[5].label()] == 0.7
    # a diverged setting (NaN) first in the grid is never the choice
    results[0]["nll"] = float("nan")
    assert RU.choose(results, BBB_GRID)[0] == BBB_GRID[2]


@pytest.mark.parametrize("method, setting", [(FashionMethod.ADAMW, Setting()), (FashionMethod.IVON, Setting()),
                                             (FashionMethod.BBB, Setting(beta=0.1, estimator="reparam")),
                                             (FashionMethod.MC_DROPOUT, Setting(dropout=0.25)),
                                             pytest.param(FashionMethod.IVON_OPT, Setting(), marks=pytest.mark.skipif(
                                                 spec("ivon") is None, reason="ivon-opt (the bench extra) absent"))])
def test_a_job_stopped_after_an_epoch_goes_on_to_the_same_bits(fake_data, no_verify, tmp_path, method, setting):
    """ivon-opt's step count (its momentum's debiasing) is not in its state_dict: set from the epoch."""
    job = Job(method, 0, Phase.TEST, setting)
    whole = run_job(job, SMALL, str(fake_data), torch.device("cpu"), tmp_path / "a")

    def stop_after_one(n):
        raise KeyboardInterrupt  # as a kill after the first epoch's checkpoint

    with pytest.raises(KeyboardInterrupt):
        run_job(job, SMALL, str(fake_data), torch.device("cpu"), tmp_path / "b", stop_after_one)
    assert torch.load(tmp_path / "b" / job.name / "last.pt", weights_only=True)["epoch"] == 1
    resumed = run_job(job, SMALL, str(fake_data), torch.device("cpu"), tmp_path / "b")
    same = ("acc", "nll", "ece", "brier", "ood_auroc", "final_train_loss", "epochs")
    assert {k: resumed[k] for k in same} == {k: whole[k] for k in same}
    a = torch.load(tmp_path / "a" / job.name / "probs.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / job.name / "probs.pt", weights_only=True)
    assert torch.equal(a["eval"], b["eval"]) and torch.equal(a["ood"], b["ood"])
    # the fake OOD images are the test images (fashion-mnist/ is a copy of mnist/): the same sampled
    # networks score both sets, so the two predictives are one (the OOD set's own draws, seed + 1,
    # gave each set a Monte Carlo predictive of its own)
    assert torch.equal(a["eval"], a["ood"]) and whole["ood_auroc"] == 0.5


def test_a_job_trains_and_predicts_with_cudnns_deterministic_algorithms(fake_data, no_verify, tmp_path, monkeypatch):
    """On CUDA cuDNN's default convolutions add the weight gradient by atomics in no fixed order:
    a resumed job, or the same job run twice, would end with other weights (tests/cuda/test_cuda_fashion.py
    checks the bits on a GPU). Every forward pass of the job sees the deterministic flags; after it
    the caller's are back."""
    import bbb.experiments.fashion.train as T

    seen = []

    def recording_lenet5(dropout=0.0):
        net = lenet5(dropout)
        net[0].register_forward_pre_hook(
            lambda m, a: seen.append((torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)))
        return net

    monkeypatch.setattr(T, "lenet5", recording_lenet5)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    run_job(Job(FashionMethod.ADAMW, 0, Phase.TEST, Setting()), SMALL, str(fake_data), torch.device("cpu"), tmp_path)
    assert len(seen) > 2 * 3 and set(seen) == {(True, False)}  # 3 minibatches an epoch, then the scores
    assert (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) == (False, True)


def _started_on_cuda(job, data, folder):
    """``job`` stopped after its first epoch, its checkpoint marked as a GPU's."""
    with pytest.raises(KeyboardInterrupt):
        run_job(job, SMALL, data, torch.device("cpu"), folder, lambda n: (_ for _ in ()).throw(KeyboardInterrupt))
    path = folder / job.name / "last.pt"
    state = torch.load(path, weights_only=True)
    torch.save({**{k: v for k, v in state.items() if k != "segments"}, "device": "cuda"}, path)  # as before segments


def test_a_job_started_on_another_device_is_one_line_or_goes_on_when_allowed(fake_data, no_verify, tmp_path):
    job = Job(FashionMethod.ADAMW, 0, Phase.TEST, Setting())
    _started_on_cuda(job, str(fake_data), tmp_path)
    with pytest.raises(UserError, match="started on cuda.*--device cuda.*--allow-device-change"):
        run_job(job, SMALL, str(fake_data), torch.device("cpu"), tmp_path)
    row = run_job(job, SMALL, str(fake_data), torch.device("cpu"), tmp_path, allow_device_change=True)
    assert row["epochs"] == SMALL.epochs and row["devices"] == "cuda (epochs 1-1), cpu (epochs 2-2)"
    # the data order is the host's generator, AdamW draws nothing else: the same numbers as on one device
    alone = run_job(job, SMALL, str(fake_data), torch.device("cpu"), tmp_path / "alone")
    assert alone["devices"] == "cpu (epochs 1-2)" and alone["final_train_loss"] == row["final_train_loss"]


def test_the_command_reports_a_job_that_cannot_go_on_once(fake_data, no_verify, capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(SCHEDULES, FashionBudget.SMOKE, SMALL)
    job = Job(FashionMethod.ADAMW, 0, Phase.TEST, Setting())
    _started_on_cuda(job, str(fake_data), tmp_path / "jobs")
    argv = ["reproduce", "fashion", "--budget", "smoke", "--methods", "adamw", "--seeds", "0", "--out", str(tmp_path),
            "--data-dir", str(fake_data), "--device", "cpu"]
    code, out, err = run_main(capsys, *argv)
    assert code != 0 and "1 job(s) failed" in err and (out + err).count("--allow-device-change") == 2
    code, out, err = run_main(capsys, *argv, "--allow-device-change", "--quiet")
    assert code == 0, err
    row = json.loads((tmp_path / "jobs" / f"{job.name}.json").read_text())
    assert row["devices"] == "cuda (epochs 1-1), cpu (epochs 2-2)"
    assert "1 job(s) ran on more than one device" in (tmp_path / "table.md").read_text()
    assert "cuda (epochs 1-1)" in (tmp_path / "seeds.csv").read_text()


@pytest.mark.skipif(spec("laplace") is None, reason="laplace-torch (the laplace extra) absent")
def test_the_laplace_rows_are_fitted_on_the_adamw_networks_once(fake_data, no_verify, capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(SCHEDULES, FashionBudget.SMOKE, SMALL)
    argv = ["reproduce", "fashion", "--budget", "smoke", "--methods", "laplace", "--seeds", "0", "1", "--out",
            str(tmp_path), "--data-dir", str(fake_data), "--device", "cpu", "--quiet"]
    code, _, err = run_main(capsys, *argv)
    assert code == 0, err
    jobs = tmp_path / "jobs"
    tag = next(line.split(",")[1] for line in (tmp_path / "sweep.csv").read_text().splitlines()
               if line.startswith("adamw,") and line.endswith(",True")).replace("=", "")
    assert len(list(jobs.glob("validation-adamw-*.json"))) == len(ADAMW_GRID)  # AdamW's weight decay chosen
    assert sorted(p.name for p in jobs.glob("test-*.json")) == [  # the AdamW networks trained for it, nothing else
        f"test-adamw-{tag}-s0.json", f"test-adamw-{tag}-s1.json", "test-laplace-s0.json", "test-laplace-s1.json"]
    rows = {r["seed"]: r for r in (json.loads((jobs / f"test-laplace-s{s}.json").read_text())["row"] for s in (0, 1))}
    adamw = json.loads((jobs / f"test-adamw-{tag}-s0.json").read_text())
    assert rows[0]["of_job"] == f"test-adamw-{tag}-s0" and rows[0]["prior_precision"] > 0
    assert rows[0]["nll"] != adamw["nll"] and 0.0 <= rows[0]["ood_auroc"] <= 1.0
    methods = (tmp_path / "methods.csv").read_text()
    lines = methods.splitlines()
    assert len(lines) == 2 and lines[1].startswith("laplace,") and f"(adamw {tag.replace('wd', 'wd=')})" in lines[1]
    assert "train nothing" in (tmp_path / "table.md").read_text()
    stamp = (jobs / "test-laplace-s0.json").stat().st_mtime_ns
    code, _, _ = run_main(capsys, *argv[:-1], "--report")
    assert code == 0 and (jobs / "test-laplace-s0.json").stat().st_mtime_ns == stamp  # not fitted again
    monkeypatch.setattr("bbb.laplace.laplace_available", lambda: False)
    code, _, err = run_main(capsys, "reproduce", "fashion", "--methods", "adamw", "laplace", "--out",
                            str(tmp_path / "other"), "--data-dir", str(fake_data), "--quiet")
    assert code != 0 and "laplace-torch" in err and len(err.strip().splitlines()) == 1


def test_the_default_methods_leave_out_those_whose_package_is_missing_with_one_line(monkeypatch, capsys):
    import argparse

    from bbb.experiments.fashion.command import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ivon" else spec(name, *a))
    monkeypatch.setattr("bbb.laplace.laplace_available", lambda: False)
    cfg = config_from_args(parser.parse_args(["--out", "x"]))
    assert FashionMethod.IVON_OPT not in cfg.methods and FashionMethod.LAPLACE not in cfg.methods
    assert FashionMethod.BBB in cfg.methods and len(cfg.methods) == len(FashionMethod) - 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ivon_opt (needs ivon-opt" in err and "laplace (needs" in err
    assert len(config_from_args(parser.parse_args(["--out", "x", "--report"])).methods) == len(FashionMethod)


def test_the_ivon_opt_row_without_its_package_is_one_line(fake_data, no_verify, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ivon", None)  # import ivon raises ImportError
    with pytest.raises(UserError, match="pip install ivon-opt"):  # a job that imports it
        run_job(Job(FashionMethod.IVON_OPT, 0, Phase.TEST, Setting()), SMALL, str(fake_data), torch.device("cpu"),
                tmp_path)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ivon" else spec(name, *a))
    code, _, err = run_main(capsys, "reproduce", "fashion", "--budget", "smoke", "--methods", "adamw", "ivon_opt",
                            "--out", str(tmp_path / "run"), "--data-dir", str(fake_data), "--quiet")
    assert code != 0 and "pip install ivon-opt" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "jobs").exists()  # before anything trains


def test_smoke_run_writes_the_tables_and_resumes(fake_data, no_verify, capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(SCHEDULES, FashionBudget.SMOKE, SMALL)
    out = tmp_path / "fashion"
    argv = ["reproduce", "fashion", "--budget", "smoke", "--methods", "adamw", "ivon", "bbb", "mc_dropout",
            "ensemble", "bbb_ensemble", "--seeds", "0", "1", "--out", str(out), "--data-dir", str(fake_data), "--quiet"]
    code, stdout, err = run_main(capsys, *argv)
    assert code == 0, err
    for name in ("methods.csv", "seeds.csv", "sweep.csv", "table.md", "run.json"):
        assert (out / name).is_file(), name
    rows = {r.split(",")[0]: r for r in (out / "methods.csv").read_text().splitlines()[1:]}
    assert set(rows) == {"adamw", "ivon", "bbb", "mc_dropout", "ensemble", "bbb_ensemble"}
    sweep = (out / "sweep.csv").read_text().splitlines()
    assert len(sweep) == 1 + len(BBB_GRID) + len(DROPOUT_GRID) + len(ADAMW_GRID)
    chosen = [line.split(",")[1] for line in sweep if line.endswith(",True") and line.startswith("bbb")]
    assert len(chosen) == 1 and chosen[0] in rows["bbb"]  # the row is trained at the validation's choice
    firsts = [line.split(",")[0] for line in (out / "seeds.csv").read_text().splitlines()]
    assert firsts.count("ensemble") == 2 and firsts.count("adamw") == 2  # members are not rows of their own
    assert firsts.count("bbb_ensemble") == 2 and firsts.count("bbb") == 2
    # the BBB ensemble's row scores the mean of its members' posterior predictives (member 0: the BBB row's network)
    setting = next(S for S in BBB_GRID if S.label() == chosen[0])
    members = [Job(FashionMethod.BBB, 1 + 1000 * k, Phase.TEST, setting) for k in range(ENSEMBLE_SIZE)]
    probs = [torch.load(out / "jobs" / j.name / "probs.pt", weights_only=True) for j in members]
    mean = torch.stack([q["eval"] for q in probs]).mean(0)
    acc = 100.0 * float((mean.double().argmax(-1) == probs[0]["labels"]).double().mean())
    seed_rows = [line.split(",") for line in (out / "seeds.csv").read_text().splitlines()]
    row = next(r for r in seed_rows if r[0] == "bbb_ensemble" and r[1] == "1")
    assert float(row[3]) == pytest.approx(acc) and f"{ENSEMBLE_SIZE} x bbb" in row[2]
    table = (out / "table.md").read_text()
    assert "IVON (published)" in table and "91.1" in table and str(tmp_path) not in table
    assert f"Validation ({SMALL.val_size:,} training images held out;" in table  # the budget's, not the paper's
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.json")}
    assert len(stamps) == len(BBB_GRID) + len(DROPOUT_GRID) + len(ADAMW_GRID) + 2 * (2 * ENSEMBLE_SIZE + 2)
    code, _, _ = run_main(capsys, *argv)  # resume: nothing trains again
    assert code == 0 and {p.name: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.json")} == stamps
    run = json.loads((out / "run.json").read_text())
    monkeypatch.setattr(sys, "argv", ["bbb", *argv[:-1], "--report"])  # (the command line the tables name)
    code, stdout, _ = run_main(capsys, *argv[:-1], "--report")
    assert code == 0 and "deep ensemble of 5" in stdout
    assert json.loads((out / "run.json").read_text())["command"] == run["command"]
    # and the --report that picked the rows (another --seeds or --methods there shows other rows)
    tables = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith("Tables: "))
    assert "`bbb reproduce fashion " in tables and "--report" in tables and str(tmp_path) not in tables
    # settings are chosen on the first of --seeds: a --report (or a longer run) starting at another
    # seed found no choice and wrote empty tables over these (or trained validation again)
    written = {n: (out / n).read_bytes() for n in ("methods.csv", "seeds.csv", "sweep.csv")}
    seeds_at = argv.index("--seeds")
    for extra in (["--report"], []):
        other = [*argv[:seeds_at + 1], "1", *argv[seeds_at + 3:-1], *extra]
        code, _, err = run_main(capsys, *other)
        assert code == 2 and "chose its settings on seed(s) 0 (the first of --seeds), not 1" in err, err
        assert len(err.strip().splitlines()) == 1
        assert {n: (out / n).read_bytes() for n in written} == written
    # a --report of another --budget labelled the smoke jobs' tables with it
    budget_at = argv.index("--budget")
    other = [*argv[:budget_at + 1], "paper", *argv[budget_at + 2:-1], "--report"]
    code, _, err = run_main(capsys, *other)
    assert code == 2 and "trained with --budget smoke, not paper: give --budget smoke with --report" in err, err
    assert {n: (out / n).read_bytes() for n in written} == written


@pytest.mark.parametrize("bad, what", [(["--seeds", "1000"], "seeds"), (["--workers", "0"], "--workers"),
                                       (["--methods", "nope"], "--methods"), (["--budget", "big"], "--budget")])
def test_bad_input_is_one_line(bad, what, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("bbb.laplace.laplace_available", lambda: False)  # as without the extras: no notice first
    code, _, err = run_main(capsys, "reproduce", "fashion", "--out", str(tmp_path), *bad)
    assert code in (1, 2) and what in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_rerun_after_validation_counts_the_chosen_test_jobs_not_the_guess(tmp_path, monkeypatch):
    """Validation finished (AdamW chose weight decay 0.2), the recipe's test job of an earlier plan
    done: the jobs left are the chosen ones, so the workers and the progress bar are sized for them
    (before, the guess counted nothing left: one worker, no bar)."""
    import contextlib

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for s in ADAMW_GRID:
        j = Job(FashionMethod.ADAMW, 0, Phase.VALIDATION, s)
        (jobs / f"{j.name}.json").write_text(json.dumps({"setting": s.label(), "acc": 90.0,
                                                         "nll": 0.3 if s.weight_decay == 0.2 else 0.9,
                                                         "train_seconds": 1.0, "eval_seconds": 1.0}))
    (jobs / "test-adamw-recipe-s0.json").write_text("{}")
    sizes, trained = [], []

    @contextlib.contextmanager
    def pool(workers, threads, who):
        sizes.append(workers)
        yield None, None

    def train(job, *a, **k):
        trained.append(job.name)
        raise UserError("stop here")

    monkeypatch.setattr(RU, "worker_pool", pool)
    monkeypatch.setattr(RU, "run_job", train)
    cfg = FashionConfig(out=str(tmp_path), methods=(FashionMethod.ADAMW,), seeds=(0,), budget=FashionBudget.SMOKE,
                        device="cpu", workers=2, quiet=True)
    RU.run_fashion(cfg)
    assert sizes == [2] and trained == ["test-adamw-wd0.2-s0"]


def test_a_run_killed_before_its_end_leaves_its_command_for_the_report(fake_data, no_verify, tmp_path, monkeypatch):
    """run.json is written before the first job too: the tables of a killed run (``--report``) name
    the command, device and worker count it ran with, not the report's own."""
    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(RU, "run_job", killed)
    cfg = FashionConfig(out=str(tmp_path), methods=(FashionMethod.ADAMW,), seeds=(0,), budget=FashionBudget.SMOKE,
                        device="cpu", workers=1, threads=1, data_dir=str(fake_data), quiet=True)
    with pytest.raises(KeyboardInterrupt):
        RU.run_fashion(cfg, command="bbb reproduce fashion --workers 1 --threads 1")
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["running"] and run["command"] == "bbb reproduce fashion --workers 1 --threads 1"
    report = FashionConfig(**{**cfg.__dict__, "report_only": True, "workers": 7})
    RU.run_fashion(report, command="bbb reproduce fashion --report")
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["command"].endswith("--threads 1") and run["workers"] == 1 and "running" not in run
    assert "with 1 job(s) at once" in (tmp_path / "table.md").read_text()


def test_a_rerun_at_another_budget_is_refused_before_anything_trains(fake_data, no_verify, tmp_path, monkeypatch):
    """A job's file is reused by its name, which the budget is not in: a smoke run's jobs would be
    reported as the quick budget's. The rerun is one line (SettingsMismatch) before any job."""
    from bbb.errors import SettingsMismatch

    trained = []

    def killed(job, *a, **k):
        trained.append(job.name)
        raise KeyboardInterrupt

    monkeypatch.setattr(RU, "run_job", killed)
    cfg = FashionConfig(out=str(tmp_path), methods=(FashionMethod.ADAMW,), seeds=(0,), budget=FashionBudget.SMOKE,
                        device="cpu", data_dir=str(fake_data), quiet=True)
    with pytest.raises(KeyboardInterrupt):
        RU.run_fashion(cfg)
    quick = FashionConfig(**{**cfg.__dict__, "budget": FashionBudget.QUICK})
    with pytest.raises(SettingsMismatch, match="--budget smoke, not quick: use another --out"):
        RU.run_fashion(quick)
    assert len(trained) == 1
    (tmp_path / "options.json").unlink()  # a folder trained before options.json: its run.json's budget
    with pytest.raises(SettingsMismatch, match="--budget smoke, not quick"):
        RU.run_fashion(quick)
    assert len(trained) == 1
