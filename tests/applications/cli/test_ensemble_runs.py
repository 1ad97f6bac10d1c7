"""Several runs of one data split as one model: ``bbb.load_ensemble`` (the mean of the members'
predictives, every member weighing the same), ``bbb predict RUN RUN ... INPUT`` and ``bbb evaluate
RUN RUN ... --out DIR``; runs that do not share their data and split are refused, a network counted
twice is a warning, and no member's files are overwritten."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import bbb
from bbb.cli import main
from bbb.runs.referral import refer_threshold, split_outputs, uncertainty_scores
from bbb.uncertainty import threshold_for_coverage
from testkit import assert_one_line_error as one_line_error
from testkit import read_csv, run_main

TINY = ["--hidden", "8", "--batch-size", "16", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3", "--quiet"]




def table(path: Path, n: int = 240, regression: bool = False) -> Path:
    rng = np.random.default_rng(1)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x1", "x2", "colour", "y"])
        for i in range(n):
            x1, x2 = rng.normal(), rng.normal()
            y = f"{x1 - x2 + 0.3 * rng.normal():.4f}" if regression else ("a" if x1 + 0.5 * rng.normal() > 0 else "b")
            w.writerow([f"{x1:.5f}", f"{x2:.5f}", ["red", "blue"][i % 2], y])
    return path


def new_rows(path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "x1", "x2", "colour"])
        for i in range(6):
            w.writerow([f"r{i}", f"{0.4 * i - 1:.2f}", "0.3", ["red", "blue"][i % 2]])
    return path


def train_runs(capsys, tmp_path: Path, data: Path, task: str, methods: tuple[str, ...], *extra: str) -> list[Path]:
    runs = []
    for seed, method in enumerate(methods):
        out = tmp_path / f"{task}-{method}-{seed}"
        rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "y", "--task", task, "--method",
                              method, "--epochs", "2", "--seed", str(seed), "--out", str(out), *TINY, *extra)
        assert rc == 0, err
        runs.append(out)
    return runs


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory) -> tuple[Path, list[Path]]:
    tmp = tmp_path_factory.mktemp("ens")
    data = table(tmp / "t.csv")
    runs = []
    for seed, method in enumerate(("bbb", "bbb", "sgd")):
        out = tmp / f"c-{method}-{seed}"
        rc = main(["train", "--csv", str(data), "--target", "y", "--task", "classification", "--method", method,
                   "--epochs", "2", "--seed", str(seed), "--out", str(out), *TINY])
        assert rc == 0
        runs.append(out)
    return data, runs


def test_the_ensemble_predictive_is_the_mean_of_the_members_predictives(classifiers):
    data, runs = classifiers
    ens = bbb.load_ensemble(runs)
    assert ens.task == "classification" and ens.methods == ["bbb", "bbb", "sgd"]
    x, _, _ = ens.encode_csv(new_rows(data.parent / "new.csv"))
    out = ens.sample_outputs(x, 4, seed=7)
    assert out.shape == (12, 6, 2)
    members = [bbb.load_model(r) for r in runs]
    probs = []
    for i, m in enumerate(members):
        o = m.sample_outputs(x, 4, 7 + i)
        probs.append(torch.softmax(o.double(), -1).mean(0))
        if m.config.method == "sgd":  # one network: its output as many times as the others' samples
            assert o.shape[0] == 1 and torch.equal(out[8:], o.expand(4, -1, -1))
        else:
            assert torch.equal(out[4 * i:4 * (i + 1)], o)
    assert not torch.equal(out[0:4], out[4:8])  # two members, two networks
    s = uncertainty_scores(ens, out)
    torch.testing.assert_close(s["probs"], torch.stack(probs).mean(0))
    assert bool((s["mutual_information"] >= -1e-9).all())


def test_the_referral_threshold_is_chosen_on_the_ensembles_scores(classifiers):
    _, runs = classifiers
    ens = bbb.load_ensemble(runs)
    outputs, y = split_outputs(ens, "val", 5, 0)
    assert outputs.shape[0] == 15 and outputs.shape[1] == y.shape[0] > 0
    want = threshold_for_coverage(uncertainty_scores(ens, outputs)["entropy"].cpu(), 0.8)
    got = refer_threshold(ens, samples=5, seed=0)
    assert got.threshold == pytest.approx(want)
    assert got.threshold != pytest.approx(refer_threshold(bbb.load_model(runs[0]), samples=5, seed=0).threshold)


def test_runs_of_another_split_or_data_are_refused(capsys, classifiers, tmp_path):
    data, runs = classifiers
    other = tmp_path / "other-split"
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "y", "--task", "classification",
                          "--epochs", "1", "--val-fraction", "0.2", "--out", str(other), *TINY)
    assert rc == 0, err
    rc, _, err = run_main(capsys, "predict", str(runs[0]), str(other), str(new_rows(tmp_path / "n.csv")))
    one_line_error(rc, err, "val_fraction", "share their data and split")
    moved = table(tmp_path / "t2.csv", n=200)
    elsewhere = tmp_path / "other-data"
    rc, _, err = run_main(capsys, "train", "--csv", str(moved), "--target", "y", "--task", "classification",
                          "--epochs", "1", "--out", str(elsewhere), *TINY)
    assert rc == 0, err
    rc, _, err = run_main(capsys, "evaluate", str(runs[0]), str(elsewhere), "--out", str(tmp_path / "e"))
    one_line_error(rc, err, "data_file")
    rc, _, err = run_main(capsys, "predict", str(runs[0]), str(runs[0]), str(tmp_path / "n.csv"))
    one_line_error(rc, err, "given twice")
    rc, _, err = run_main(capsys, "predict", str(runs[0]), str(runs[1]))  # the inputs forgotten
    one_line_error(rc, err, f"{runs[1]} is a run directory, not inputs")
    with pytest.raises(bbb.UserError, match="at least 2"):
        bbb.load_ensemble(runs[:1])


def test_the_same_network_twice_is_a_warning(capsys, classifiers, tmp_path):
    _, runs = classifiers
    copy = tmp_path / "copy"
    shutil.copytree(runs[0], copy)
    with pytest.warns(UserWarning, match="same network"):
        bbb.load_ensemble([runs[0], copy])
    rc, _, err = run_main(capsys, "predict", str(runs[0]), str(copy), str(new_rows(tmp_path / "n.csv")), "--no-refer")
    assert rc == 0, err
    assert err.strip() == (f"bbb predict: warning: {copy} and {runs[0]} hold the same network (the same --seed, or a "
                           "copy): the ensemble counts it twice")


def test_bbb_predict_with_several_runs(capsys, classifiers, tmp_path):
    data, runs = classifiers
    new = new_rows(tmp_path / "new.csv")
    out = tmp_path / "p.csv"
    rc, _, err = run_main(capsys, "predict", *map(str, runs), str(new), "--out", str(out), "--id", "id",
                          "--samples", "4", "--seed", "7")
    assert rc == 0, err
    assert "the 3 runs' shared" in err and "validation inputs" in err
    rows = read_csv(out)
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(6)]
    ens = bbb.load_ensemble(runs)
    x, _, _ = ens.encode_csv(new)
    s = uncertainty_scores(ens, ens.sample_outputs(x, 4, 7))
    for i, r in enumerate(rows):
        assert float(r["p_a"]) == pytest.approx(float(s["probs"][i, 0]), rel=1e-5)
        assert r["refer"] in ("true", "false")
    before = {p: p.read_bytes() for r in runs for p in r.iterdir() if p.is_file()}
    rc, _, err = run_main(capsys, "predict", *map(str, runs), str(new), "--out", str(runs[1] / "config.json"),
                          "--overwrite")
    one_line_error(rc, err, "a file of the run directory")
    assert all(p.read_bytes() == b for p, b in before.items())


def test_bbb_evaluate_with_several_runs(capsys, classifiers, tmp_path, monkeypatch):
    _, runs = classifiers
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs))
    one_line_error(rc, err, "--out DIR")
    rc, _, err = run_main(capsys, "evaluate", str(runs[0]), "--out", str(tmp_path / "x"))
    one_line_error(rc, err, "leave --out out")
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs), "--out", str(runs[2]))
    one_line_error(rc, err, "a folder of its own")
    out = tmp_path / "ens"
    rc, so, err = run_main(capsys, "evaluate", *map(str, runs), "--out", str(out), "--samples", "5")
    assert rc == 0, err
    assert "members (mean)" in so and "ensemble" in so
    r = json.loads((out / "eval.json").read_text())
    assert r["members"] == [str(d) for d in runs] and r["member_methods"] == ["bbb", "bbb", "sgd"]
    ens = bbb.load_ensemble(runs)
    outputs, y = split_outputs(ens, "test", 5, 0)
    probs = torch.softmax(outputs.double(), -1).mean(0)
    nll = float(-torch.log(probs[torch.arange(len(y)), y.long()]).mean())
    assert r["nll"] == pytest.approx(nll, rel=1e-4)
    assert len(r["member_scores"]) == 3
    assert r["member_mean"]["nll"] == pytest.approx(sum(m["nll"] for m in r["member_scores"]) / 3)
    assert set(r["selective"]) >= {"entropy", "mi"}
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs[:2]), "--out", str(out))  # other members: refused
    one_line_error(rc, err, "not this ensemble's")
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs), "--out", str(out))  # the same ensemble: again
    assert rc == 0, err
    rc, _, err = run_main(capsys, "compare", str(runs[0]), str(out), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    rows = read_csv(tmp_path / "cmp" / "comparison.csv")
    assert rows[1]["method"] == "ensemble of 3 runs (bbb x 2, sgd x 1)"
    again = json.loads((out / "eval.json").read_text())
    assert again["samples"] == 10 and float(rows[1]["nll"]) == pytest.approx(again["nll"], abs=1e-6)
    assert rows[1]["test_error_mean_weights"] == ""
    seconds = sum(json.loads((d / "summary.json").read_text())["seconds"] for d in runs)
    assert float(rows[1]["seconds"]) == pytest.approx(seconds, abs=1e-6)  # (the CSV keeps 6 decimals)
    # the ensemble's folder given where a run goes: the one line names its runs
    for argv in (("predict", str(out), str(new_rows(tmp_path / "n.csv"))), ("evaluate", str(out))):
        rc, _, err = run_main(capsys, *argv)
        one_line_error(rc, err, "an ensemble's folder", f"give its runs, {runs[0]} {runs[1]} {runs[2]}")
    # bbb report takes it as a column (tests/applications/test_report_ensemble.py)
    assert run_main(capsys, "report", str(out), "--out", str(tmp_path / "r.html"))[0] == 0
    monkeypatch.chdir(runs[0].parent)  # the same runs named from here: the same ensemble, not another's
    rc, _, err = run_main(capsys, "evaluate", *(d.name for d in runs), "--out", str(out))
    assert rc == 0, err


def test_compare_refuses_an_ensemble_whose_member_trained_on_since(capsys, classifiers, tmp_path):
    """A member resumed after ``bbb evaluate RUN RUN --out DIR`` (its own eval.json removed, not the
    ensemble's): compare showed the old ensemble's scores as current."""
    runs = [tmp_path / d.name for d in classifiers[1][:2]]
    for d, copy in zip(classifiers[1], runs):
        shutil.copytree(d, copy)
    out = tmp_path / "ens"
    assert run_main(capsys, "evaluate", *map(str, runs), "--which", "last", "--out", str(out))[0] == 0
    assert run_main(capsys, "compare", str(out), "--out", str(tmp_path / "cmp"))[0] == 0
    rc, _, err = run_main(capsys, "train", "--resume", "--epochs", "3", "--out", str(runs[1]), "--quiet")
    assert rc == 0, err
    rc, _, err = run_main(capsys, "compare", str(out), "--out", str(tmp_path / "cmp"))
    one_line_error(rc, err, str(runs[1]), "last is now epoch 3", "--which last")


def test_compare_refuses_an_ensemble_whose_member_was_replaced_by_another_run(capsys, classifiers, tmp_path):
    """A member trained again into its folder with --overwrite, to as many epochs: compare and the
    ensemble's ood.json showed the old members' scores as the new ones'."""
    runs = [tmp_path / d.name for d in classifiers[1][:2]]
    for d, copy in zip(classifiers[1], runs):
        shutil.copytree(d, copy)
    out = tmp_path / "ens"
    assert run_main(capsys, "evaluate", *map(str, runs), "--out", str(out))[0] == 0
    scored = json.loads((out / "eval.json").read_text())["member_scores"]
    assert [s["run_id"] for s in scored] == [json.loads((d / "config.json").read_text())["run_id"] for d in runs]
    assert run_main(capsys, "compare", str(out), "--out", str(tmp_path / "cmp"))[0] == 0
    rc, _, err = run_main(capsys, "train", "--csv", str(classifiers[0]), "--target", "y", "--task", "classification",
                          "--epochs", "2", "--seed", "1", "--out", str(runs[1]), *TINY, "--lr", "0.02",
                          "--overwrite")  # as many epochs: another run
    assert rc == 0, err
    new_id = json.loads((runs[1] / "config.json").read_text())["run_id"]
    assert new_id != scored[1]["run_id"]
    rc, _, err = run_main(capsys, "compare", str(out), "--out", str(tmp_path / "cmp"))
    one_line_error(rc, err, str(runs[1]), "was replaced", "scored another run", f"--out {out}` again")
    rc, _, err = run_main(capsys, "train", "--resume", "--epochs", "3", "--out", str(runs[1]), "--quiet")
    assert rc == 0, err
    assert json.loads((runs[1] / "config.json").read_text())["run_id"] == new_id  # the same run, trained on


def test_an_ensemble_of_deterministic_runs_says_one_network_each(capsys, classifiers, tmp_path):
    # each sgd member gives its one network: eval.json's samples is 1 (as one sgd run's), not --samples
    data, _ = classifiers
    runs = train_runs(capsys, tmp_path, data, "classification", ("sgd", "sgd"))
    out = tmp_path / "ens"
    rc, so, err = run_main(capsys, "evaluate", *map(str, runs), "--out", str(out), "--samples", "5")
    assert rc == 0, err
    assert "one network each" in so and "5 samples" not in so
    assert json.loads((out / "eval.json").read_text())["samples"] == 1


def test_another_runs_directory_is_refused_as_the_ensembles_folder(capsys, classifiers, tmp_path):
    """Before, ``bbb evaluate A B --out C`` (C a run, not a member, without an eval.json yet) wrote
    the ensemble's eval.json into C, and bbb compare / report then showed it as C's own (so did
    ``bbb ood`` / ``bbb uncertain`` with their files)."""
    _, runs = classifiers
    other = tmp_path / "other"
    shutil.copytree(runs[2], other)
    (other / "eval.json").unlink(missing_ok=True)
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs[:2]), "--out", str(other))
    one_line_error(rc, err, f"--out {other} is another run's directory")
    assert not (other / "eval.json").exists()


def test_a_regression_ensemble(capsys, tmp_path, classifiers):
    data = table(tmp_path / "r.csv", regression=True)
    runs = train_runs(capsys, tmp_path, data, "regression", ("bbb", "sgd"))
    ens = bbb.load_ensemble(runs)
    x, _, _ = ens.encode_csv(new_rows(tmp_path / "new.csv"))
    out = ens.sample_outputs(x, 3, 0)
    pred = ens.regression(out)
    means = [bbb.load_model(r).regression(o)["mean"] for r, o in zip(runs, (out[:3], out[3:]))]
    torch.testing.assert_close(pred["mean"], (means[0] + means[1]) / 2)
    rc, so, err = run_main(capsys, "evaluate", *map(str, runs), "--out", str(tmp_path / "ens"))
    assert rc == 0, err
    r = json.loads((tmp_path / "ens" / "eval.json").read_text())
    assert r["task"] == "regression" and r["test_rmse_mc"] > 0 and 0 <= r["coverage_95"] <= 1
    assert "test RMSE" in so
    # its calibration curve beside one member's; the members' mean holds the numbers only
    assert r["plots"] == ["calibration.png"] and (tmp_path / "ens" / "calibration.png").stat().st_size > 1000
    assert len(r["interval_calibration"]["coverage"]) == len(r["member_scores"][0]["interval_calibration"]["levels"])
    assert "interval_calibration" not in r["member_mean"] and "calibration_error" in r["member_mean"]
    # bbb compare tabulates regression runs in the target's units, the ensemble's folder beside its runs
    rc, so, err = run_main(capsys, "evaluate", str(runs[0]), "--samples", "5")
    assert rc == 0, err
    rc, so, err = run_main(capsys, "compare", *map(str, runs), str(tmp_path / "ens"), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    rows = read_csv(tmp_path / "cmp" / "comparison.csv")
    assert [r["method"] for r in rows[:2]] == ["bbb", "sgd"] and rows[0]["dataset"] == "r.csv"
    ev = json.loads((runs[0] / "eval.json").read_text())
    assert float(rows[0]["test_rmse"]) == pytest.approx(ev["test_rmse_mc"], rel=1e-5)
    assert float(rows[0]["coverage_95"]) == pytest.approx(100 * ev["coverage_95"], rel=1e-5)
    assert float(rows[0]["calibration_gap"]) == pytest.approx(100 * ev["calibration_error"], rel=1e-5)
    assert rows[1]["calibration_gap"] == "" and rows[1]["metrics_from"] == "summary.json"  # no eval.json: none
    assert float(rows[2]["calibration_gap"]) == pytest.approx(100 * r["calibration_error"], rel=1e-5)
    assert "BBB's test log-likelihood is" in so and "RMSE (mean weights)" in so
    # a classifier beside them: one line
    rc, _, err = run_main(capsys, "compare", str(runs[0]), str(classifiers[1][0]), "--out", str(tmp_path / "x"))
    one_line_error(rc, err, "regression runs with regression runs", str(runs[0]), "a classifier")
    rc, so, err = run_main(capsys, "predict", *map(str, runs), str(tmp_path / "new.csv"), "--no-refer")
    assert rc == 0, err and "sd" in so.splitlines()[0]


def test_an_ensembles_folder_given_to_bbb_prune_says_to_prune_its_runs_one_at_a_time(capsys, tmp_path):
    # the one line said "give its runs, A B" as to bbb evaluate: bbb prune A B is an argparse error
    out = tmp_path / "ens"
    out.mkdir()
    members = [str(tmp_path / "a"), str(tmp_path / "b")]
    (out / "eval.json").write_text(json.dumps({"members": members}))
    rc, _, err = run_main(capsys, "prune", str(out))
    one_line_error(rc, err, "an ensemble's folder", f"bbb prune takes one run: give each of its runs, {members[0]} "
                   f"{members[1]}")
    rc, _, err = run_main(capsys, "evaluate", str(out))  # (a command that takes several runs: as before)
    one_line_error(rc, err, "an ensemble's folder", f"not a run: give its runs, {members[0]} {members[1]}")


def test_compare_shows_every_architecture_and_epoch_count_of_an_ensemble(capsys, classifiers, tmp_path):
    """Before, an ensemble's row in bbb compare gave its first member's architecture and epochs
    alone: an ensemble of a 1x8 and a 16-4 network trained 2 and 3 epochs read as 1x8, 2 epochs."""
    data, runs = classifiers
    other = tmp_path / "wide"
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "y", "--task", "classification",
                          "--epochs", "3", "--seed", "7", "--out", str(other), *TINY, "--hidden", "16", "4")
    assert rc == 0, err
    mixed, same = tmp_path / "mixed", tmp_path / "same"
    assert run_main(capsys, "evaluate", str(runs[0]), str(other), "--out", str(mixed))[0] == 0
    assert run_main(capsys, "evaluate", *map(str, runs[:2]), "--out", str(same))[0] == 0
    rc, _, err = run_main(capsys, "compare", str(mixed), str(same), str(other), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    rows = {Path(r["run"]).name: r for r in read_csv(tmp_path / "cmp" / "comparison.csv")}
    assert (rows["mixed"]["hidden"], rows["mixed"]["epochs"]) == ("1x8, 16-4", "2, 3")
    assert (rows["same"]["hidden"], rows["same"]["epochs"]) == ("1x8", "2")
    assert (rows["wide"]["hidden"], rows["wide"]["epochs"]) == ("16-4", "3")


def test_an_ensemble_of_a_populations_members_counts_its_training_time_once(capsys, tmp_path, data_dir):
    """A population's members each record its wall time (shared, docs/scale_out.md): bbb compare and
    bbb report gave their ensemble the sum, the population's time once per member."""
    from bbb.runs import TrainConfig
    from bbb.runs.population import train_population

    cfgs = [TrainConfig(dataset="mnist", data_dir=str(data_dir), train_size=200, val_size=100, hidden=[8], epochs=1,
                        batch_size=50, eval_samples=2, device="cpu", seed=s) for s in (0, 1)]
    runs = [tmp_path / f"m{s}" for s in (0, 1)]
    train_population(cfgs, runs, tmp_path / "pop", quiet=True, log=lambda s: None)
    seconds = json.loads((runs[0] / "summary.json").read_text())["seconds"]
    assert json.loads((runs[1] / "summary.json").read_text())["seconds"] == seconds  # the population's
    out = tmp_path / "ens"
    assert run_main(capsys, "evaluate", *map(str, runs), "--samples", "2", "--out", str(out))[0] == 0
    rc, _, err = run_main(capsys, "compare", str(out), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    [row] = read_csv(tmp_path / "cmp" / "comparison.csv")
    assert float(row["seconds"]) == pytest.approx(seconds, abs=1e-5)
    assert run_main(capsys, "report", str(out), "--out", str(tmp_path / "r.html"))[0] == 0
    assert f"{seconds:.1f} s (its members' sum)" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("command", [["evaluate"], ["prune"], ["ood"], ["compare", "--out", "cmp"],
                                     ["report", "--out", "r.html"]])
def test_a_populations_folder_is_refused_in_one_line_that_says_what_it_is(capsys, tmp_path, command):
    """Before, bbb compare said to run `bbb evaluate` on it first, which then called it no run directory."""
    from bbb.runs import TrainConfig
    from bbb.runs.population import train_population
    from testkit import blobs

    cfgs = [TrainConfig(hidden=[8], epochs=1, batch_size=32, eval_samples=2, device="cpu", kl_weighting="uniform",
                        seed=s) for s in (0, 1)]
    train_population(cfgs, [tmp_path / "m0", tmp_path / "m1"], tmp_path / "pop", data=blobs(), quiet=True,
                     log=lambda s: None)
    name, *rest = command
    rc, _, err = run_main(capsys, name, str(tmp_path / "pop"), *[str(tmp_path / a) if a != "--out" else a
                                                                  for a in rest])
    one_line_error(rc, err, "a population's state", "give its runs' directories")


def test_a_populations_folder_is_refused_as_the_ensembles_folder(capsys, classifiers, tmp_path):
    """Before, an ensemble's files went into a population's folder, which then no longer resumed
    (its folder read as an ensemble's, not a run's); bbb ood and uncertain take the same folder check."""
    from bbb.runs import TrainConfig
    from bbb.runs.population import train_population
    from testkit import blobs

    cfgs = [TrainConfig(hidden=[8], epochs=1, batch_size=32, eval_samples=2, device="cpu", kl_weighting="uniform",
                        seed=s) for s in (0, 1)]
    train_population(cfgs, [tmp_path / "m0", tmp_path / "m1"], tmp_path / "pop", data=blobs(), quiet=True,
                     log=lambda s: None)
    _, runs = classifiers
    rc, _, err = run_main(capsys, "evaluate", *map(str, runs[:2]), "--out", str(tmp_path / "pop"))
    one_line_error(rc, err, "a population's state", "a folder of its own")
    assert sorted(p.name for p in (tmp_path / "pop").iterdir()) == ["population.pt"]
    train_population([c.replace(epochs=2) for c in cfgs], [tmp_path / "m0", tmp_path / "m1"], tmp_path / "pop",
                     data=blobs(), quiet=True, log=lambda s: None)  # it resumes


def test_compare_of_an_ensemble_from_another_folder_says_its_members_are_not_there(capsys, classifiers, tmp_path,
                                                                                    monkeypatch):
    """The members' names are as `bbb evaluate` was given them; compared from elsewhere, compare said each member
    'was replaced since bbb evaluate scored it' and asked for a bbb evaluate command whose runs were not there."""
    root = tmp_path / "runs"
    root.mkdir()
    for d in classifiers[1][:2]:
        shutil.copytree(d, root / d.name)
    monkeypatch.chdir(root)
    names = [d.name for d in classifiers[1][:2]]
    assert run_main(capsys, "evaluate", *names, "--out", "ens")[0] == 0
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_main(capsys, "compare", "runs/ens", "--out", "cmp")
    one_line_error(rc, err, f"member {names[0]} is not there", "run bbb compare where that command ran")
    assert "replaced" not in err
    monkeypatch.chdir(root)
    assert run_main(capsys, "compare", "ens", "--out", "cmp")[0] == 0
