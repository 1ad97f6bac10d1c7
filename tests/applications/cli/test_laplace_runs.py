"""``bbb laplace RUN --out DIR``: a last-layer Laplace posterior of a deterministic run on its own
table (bbb.runs.laplace), which then predicts wherever a run goes. Its posterior is laplace-torch's
own last-layer Laplace (classification) and exactly Bayesian linear regression on the features with
the run's noise (regression); its samples have that covariance; a changed run, a Bayesian run or
another run's folder is one line. Skipped where laplace-torch is not installed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.elbo import HeteroscedasticGaussian
from bbb.errors import UserError
from bbb.laplace import fit_last_layer_laplace, laplace_available
from bbb.runs import laplace as runs_laplace
from bbb.runs import model as runmodel
from bbb.runs.laplace import TrainedLaplace, fit_run_laplace, load_laplace
from bbb.runs.rundir import LOCK_NAME
from bbb.runs.trained import kron_deltas
from faultkit import lock_held, snapshot
from testkit import assert_one_line_error as one_line_error
from testkit import read_csv, run_main

pytestmark = pytest.mark.skipif(not laplace_available(), reason="laplace-torch is not installed")

TINY = ["--hidden", "8", "--batch-size", "16", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3", "--quiet"]


def _table(path: Path, regression: bool, n: int = 240) -> Path:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 2, generator=g)
    noise = torch.randn(n, generator=g)
    lines = ["x1,x2,colour,y"]
    for i in range(n):
        x1, x2 = float(x[i, 0]), float(x[i, 1])
        y = f"{x1 - x2 + 0.3 * float(noise[i]):.4f}" if regression else ("a" if x1 + 0.5 * float(noise[i]) > 0 else "b")
        lines.append(f"{x1:.5f},{x2:.5f},{['red', 'blue'][i % 2]},{y}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(tmp: Path, task: str, method: str = "sgd", *extra: str) -> Path:
    data = _table(tmp / f"{task}.csv", task == "regression")
    out = tmp / f"{task}-{method}"
    rc = bbb.cli.main(["train", "--csv", str(data), "--target", "y", "--task", task, "--method", method,
                       "--epochs", "4", "--seed", "0", "--out", str(out), *TINY, *extra])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("laplace-runs")
    homoscedastic = tmp / "homoscedastic"
    homoscedastic.mkdir()
    return {"classification": _train(tmp, "classification"), "regression": _train(tmp, "regression"),
            "homoscedastic": _train(homoscedastic, "regression", "sgd", "--likelihood", "homoscedastic"), "tmp": tmp}


def _features(network: nn.Module, x: torch.Tensor) -> torch.Tensor:
    last = [m for m in network.modules() if isinstance(m, nn.Linear)][-1]
    seen = []
    h = last.register_forward_hook(lambda _m, i, _o: seen.append(i[0]))
    with torch.no_grad():
        network(x)
    h.remove()
    return seen[0]


def test_a_classifiers_posterior_is_laplace_torchs_own_last_layer_laplace(runs, tmp_path):
    run = runs["classification"]
    fitted = fit_run_laplace(run, tmp_path / "lap", hessian="full")
    model = load_laplace(tmp_path / "lap")
    assert isinstance(model, TrainedLaplace) and model.method == "laplace" and model.base_run == run
    data, _ = runmodel.load_split(model.config, model.preprocess.to_dict())
    # laplace-torch's LLLaplace over the whole network (its own feature extraction), as bbb.laplace fits it
    ref = fit_last_layer_laplace(model.network, (data["train_x"], data["train_y"]), likelihood="classification",
                                 hessian="full")
    assert fitted["prior_precision"] == pytest.approx(ref.prior_precision, rel=1e-3)
    root = model.posterior_root.double()
    cov = root @ root.T
    torch.testing.assert_close(cov, ref.la.posterior_covariance.double(), rtol=2e-3, atol=1e-6)
    last = [m for m in model.network.modules() if isinstance(m, nn.Linear)][-1]
    mean = torch.cat([last.weight.reshape(-1), last.bias]).double()
    torch.testing.assert_close(model.posterior_mean.double(), mean)


def test_above_the_dense_limit_kron_keeps_its_factors_and_the_same_posterior(runs, tmp_path, monkeypatch):
    """A last layer wider than DENSE_LIMIT: kron stores its factors' eigendecomposition (its draws
    kron_deltas), whose covariance is the dense one's; full is refused in one line."""
    for task in ("classification", "regression"):
        run = runs[task]
        fit_run_laplace(run, tmp_path / f"{task}-dense", hessian="kron")
        dense = load_laplace(tmp_path / f"{task}-dense")
        monkeypatch.setattr(runs_laplace, "DENSE_LIMIT", 3)
        fit_run_laplace(run, tmp_path / f"{task}-kron", hessian="kron")
        monkeypatch.undo()
        factored = load_laplace(tmp_path / f"{task}-kron")
        assert dense.kron is None and factored.kron is not None and factored.posterior_root.numel() == 0
        n = factored.posterior_mean.numel()
        shapes = [tuple(b["scale"].shape) for b in factored.kron]
        assert shapes == ([(2, 8), (2,)] if task == "classification" else [(1, 9)])  # the weight, the bias
        root_t = kron_deltas(factored.kron, torch.eye(n, dtype=torch.float64))  # F^T
        ref = dense.posterior_root.double()
        torch.testing.assert_close(root_t.T @ root_t, ref @ ref.T, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(factored.posterior_mean, dense.posterior_mean)
        rows = tmp_path / "rows.csv"
        rows.write_text("x1,x2,colour\n0,0,red\n3,-3,blue\n")
        xe, _, _ = factored.encode_csv(rows)
        a, b = factored.sample_outputs(xe, 20000, seed=1).double(), dense.sample_outputs(xe, 20000, seed=1).double()
        torch.testing.assert_close(a.var(0), b.var(0), rtol=0.06, atol=1e-9)  # the same predictive
    monkeypatch.setattr(runs_laplace, "DENSE_LIMIT", 3)
    with pytest.raises(UserError, match="use --hessian kron or diag") as e:
        fit_run_laplace(runs["classification"], tmp_path / "full", hessian="full")
    assert "\n" not in str(e.value)


def test_a_regressions_posterior_is_bayesian_linear_regression_with_the_runs_noise(runs, tmp_path):
    """The mean's weights given the features and the run's own noise sd per row: precision =
    sum_i [phi_i, 1][phi_i, 1]^T / sd_i^2 + prior precision * I, exactly (any hessian; one sd for
    every row of a homoscedastic run)."""
    for run, hessian in ((runs["regression"], "kron"), (runs["regression"], "full"), (runs["homoscedastic"], "kron")):
        folder = tmp_path / f"{run.parent.name}-{hessian}"
        fitted = fit_run_laplace(run, folder, hessian=hessian)
        model = load_laplace(folder)
        data, _ = runmodel.load_split(model.config, model.preprocess.to_dict())
        x = data["train_x"]
        phi = _features(model.network, x).double()
        with torch.no_grad():
            _, sd = HeteroscedasticGaussian().split(model.network(x).double())
        z = torch.cat([phi, torch.ones(len(phi), 1, dtype=torch.float64)], 1) / sd.reshape(-1, 1)
        precision = z.T @ z + fitted["prior_precision"] * torch.eye(z.shape[1], dtype=torch.float64)
        root = model.posterior_root.double()
        torch.testing.assert_close(root @ root.T, torch.linalg.inv(precision), rtol=1e-4, atol=1e-7)
        assert fitted["rows"] == [0] and fitted["n_data"] == x.shape[0]
    # its evaluation: the calibration curve of the posterior's predictive beside the run's network's
    ev = runs_laplace.evaluate_laplace(folder, samples=8)
    assert ev["plots"] == ["calibration.png"] and (folder / "calibration.png").stat().st_size > 1000
    for scores in (ev, ev["map"]):
        cal = scores["interval_calibration"]
        assert cal["coverage"][cal["levels"].index(0.95)] == scores["coverage_95"] and scores["calibration_error"] >= 0


def test_a_homoscedastic_runs_posterior_records_the_noise_sd_it_predicts_with(runs, tmp_path):
    """eval.json of a posterior of a homoscedastic run holds its one learned noise sd (noise_sd, in
    the target's units), as the run's own summary.json and eval.json do; a heteroscedastic run's,
    whose sd is per row, has none, and laplace.json says which noise it is."""
    summary = json.loads((runs["homoscedastic"] / "summary.json").read_text())
    fitted = fit_run_laplace(runs["homoscedastic"], tmp_path / "homoscedastic")
    ev = runs_laplace.evaluate_laplace(tmp_path / "homoscedastic", samples=4)
    assert summary["noise_sd"] > 0 and ev["noise_sd"] == pytest.approx(summary["noise_sd"], rel=1e-6)
    assert "one sd" in fitted["noise"]
    fitted = fit_run_laplace(runs["regression"], tmp_path / "heteroscedastic")
    assert "noise_sd" not in runs_laplace.evaluate_laplace(tmp_path / "heteroscedastic", samples=4)
    assert fitted["noise"] == "the run's own (per row)"


def test_the_samples_have_the_posteriors_mean_and_covariance(runs, tmp_path):
    run = runs["regression"]
    fit_run_laplace(run, tmp_path / "lap", hessian="full")
    model = bbb.load_model(tmp_path / "lap")  # a Laplace folder loads as the run with its posterior
    assert isinstance(model, TrainedLaplace)
    rows = tmp_path / "rows.csv"
    rows.write_text("x1,x2,colour\n0,0,red\n3,-3,blue\n")  # the second far from the data
    xe, _, _ = model.encode_csv(rows)
    x = xe.as_subclass(torch.Tensor)
    k = 20000
    out = model.sample_outputs(xe, k, seed=3).double()
    with torch.no_grad():
        map_out = model.network(x).double()
    phi = torch.cat([_features(model.network, x).double(), torch.ones(2, 1, dtype=torch.float64)], 1)
    root = model.posterior_root.double()
    var = ((phi @ root) ** 2).sum(1)  # phi^T Sigma phi
    torch.testing.assert_close(out[..., 1], map_out[None, :, 1].expand(k, 2))  # the noise is the run's own
    assert torch.allclose(out[..., 0].mean(0), map_out[:, 0], atol=4 * (var / k).sqrt().max().item())
    torch.testing.assert_close(out[..., 0].var(0), var, rtol=0.05, atol=0)
    assert var[1] > var[0]  # wider far from the data
    a, b, c = (model.sample_outputs(xe, 5, seed=s) for s in (4, 4, 5))
    assert torch.equal(a, b) and not torch.equal(a, c)  # the seed fixes the draws
    pred = model.regression(model.sample_outputs(xe, 200))
    assert (pred["epistemic_sd"] > 0).all()


def test_the_command_line_fits_predicts_evaluates_and_compares(runs, capsys, tmp_path):
    run = runs["classification"]
    lap = tmp_path / "c-lap"
    rc, out, err = run_main(capsys, "laplace", str(run), "--out", str(lap), "--samples", "20")
    assert rc == 0, err
    assert "prior precision" in out and "the run's network" in out
    assert {p.name for p in lap.iterdir()} >= {"laplace.json", "posterior.pt", "eval.json"}
    ev = json.loads((lap / "eval.json").read_text())
    assert ev["method"] == "laplace" and ev["laplace_of"] == str(run) and ev["samples"] == 20
    # a classifier's reliability diagram (the run's network beside the posterior's) and risk-coverage curve
    assert ev["plots"] == ["reliability.png", "risk_coverage.png"]
    assert all((lap / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in ev["plots"])
    assert ev["map"]["test_error_mc"] == ev["test_error"]
    rows = runs["tmp"] / "rows.csv"
    rows.write_text("x1,x2,colour\n0.1,0.2,red\n5,-5,blue\n")
    rc, out, err = run_main(capsys, "predict", str(lap), str(rows))
    assert rc == 0, err
    assert out.splitlines()[0].startswith("x1,x2,colour,prediction,p_a,p_b") and len(out.splitlines()) == 3
    rc, out, err = run_main(capsys, "evaluate", str(lap), "--samples", "20")
    assert rc == 0 and "laplace (20 samples)" in out, err
    assert json.loads((lap / "eval.json").read_text()) == ev  # the same draws: the same scores
    rc, out, err = run_main(capsys, "compare", str(run), str(lap), "--out", str(tmp_path / "cmp"))
    assert rc == 0, err
    table = (tmp_path / "cmp" / "comparison.csv").read_text()
    assert "\nlaplace,1x8," in table
    # an ensemble with a Laplace member: its network's width, and every member's training (the fit's too)
    rc, out, err = run_main(capsys, "evaluate", str(run), str(lap), "--samples", "4", "--out", str(tmp_path / "ens"))
    assert rc == 0, err
    ens = json.loads((tmp_path / "ens" / "eval.json").read_text())
    assert ens["plots"] == ["reliability.png", "risk_coverage.png"] and "risk_coverage.png" in out
    assert all((tmp_path / "ens" / name).stat().st_size > 1000 for name in ens["plots"])
    rc, _, err = run_main(capsys, "compare", str(lap), str(tmp_path / "ens"), "--out", str(tmp_path / "cmp2"))
    assert rc == 0, err
    lap_row, ens_row = read_csv(tmp_path / "cmp2" / "comparison.csv")
    trained = json.loads((run / "summary.json").read_text())["seconds"]
    fit = json.loads((lap / "laplace.json").read_text())["seconds"]
    assert float(lap_row["seconds"]) == pytest.approx(trained + fit, abs=1e-5)  # (6 decimals in the CSV)
    assert ens_row["hidden"] == "1x8" and ens_row["epochs"] == lap_row["epochs"] != ""
    assert float(ens_row["seconds"]) == pytest.approx(2 * trained + fit, abs=1e-5)
    rc, _, err = run_main(capsys, "prune", str(lap))
    one_line_error(rc, err, "Laplace posterior", "prunes a Bayesian run's weights")
    rc, _, err = run_main(capsys, "evaluate", str(lap), "--which", "last")
    one_line_error(rc, err, "best checkpoint", "--which best")
    fit_run_laplace(run, lap, hessian="diag")  # fitted again: the earlier posterior's scores are gone
    assert not (lap / "eval.json").exists() and json.loads((lap / "laplace.json").read_text())["hessian"] == "diag"


def test_a_report_shows_a_posterior_beside_its_run(runs, capsys, tmp_path):
    """bbb report takes a Laplace folder: the run's training and settings, the posterior's scores."""
    from bbb.experiments.report import read_run, report_html, result_rows

    run = runs["classification"]
    lap = tmp_path / "posterior"
    assert run_main(capsys, "laplace", str(run), "--out", str(lap), "--samples", "8")[0] == 0
    ev = json.loads((lap / "eval.json").read_text())
    rows = {label: value for _, label, value in result_rows(read_run(lap))}
    assert float(rows["test NLL (nats)"]) == pytest.approx(ev["nll"], rel=1e-3)
    assert rows["training time"] != "-" and "kron" in rows["last-layer Laplace fit"]
    assert rows["test error (k-sample average)"].endswith("(k=8)")
    assert {label: v for _, label, v in result_rows(read_run(run))}["last-layer Laplace fit"] == "-"
    page = report_html([run, lap])
    assert "the last-layer Laplace posterior (kron" in page and "averaging 8 draws of its last layer" in page
    # the title names both columns (it once named the run's method alone: "a plain network (SGD) on ...")
    assert re.search(r"<h1>a plain network \(SGD\) vs a last-layer Laplace posterior on ", page), page[:600]
    assert 'alt="reliability diagram of posterior' in page and 'alt="risk-coverage curve of posterior' in page
    assert str(tmp_path) not in page and str(run.parent) not in page  # no local folder on the page
    rc, out, err = run_main(capsys, "report", str(run), str(lap), "--out", str(tmp_path / "r.html"))
    assert rc == 0, err
    shutil.move(str(run), str(tmp_path / "gone"))  # the run gone: one line that says what to do
    try:
        rc, _, err = run_main(capsys, "report", str(lap), "--out", str(tmp_path / "r2.html"))
        one_line_error(rc, err, "not there", "put the run back")
    finally:
        shutil.move(str(tmp_path / "gone"), str(run))


def test_refused_in_one_line(runs, capsys, tmp_path):
    run = runs["classification"]
    bayes = _train(runs["tmp"], "classification", "bbb")
    rc, _, err = run_main(capsys, "laplace", str(bayes), "--out", str(tmp_path / "x"))
    one_line_error(rc, err, "--method sgd", "--method bbb", "learned already")
    rc, _, err = run_main(capsys, "laplace", str(run), "--out", str(run))
    one_line_error(rc, err, "is a run directory")
    lap = tmp_path / "lap"
    assert run_main(capsys, "laplace", str(run), "--out", str(lap))[0] == 0
    rc, _, err = run_main(capsys, "laplace", str(runs["regression"]), "--out", str(lap))
    one_line_error(rc, err, "of another run", "another --out")
    rc, _, err = run_main(capsys, "laplace", str(lap), "--out", str(tmp_path / "y"))
    one_line_error(rc, err, "is a Laplace posterior already")
    rc, _, err = run_main(capsys, "laplace", str(run), "--out", str(tmp_path / "z"), "--hessian", "block")
    assert rc == 2 and "--hessian" in err
    rc, _, err = run_main(capsys, "laplace", str(run), "--out", str(tmp_path / "p"), "--prior-precision", "-1")
    one_line_error(rc, err, "--prior-precision", "> 0")
    assert not (tmp_path / "p").exists()  # nothing written for a refused command


def test_a_run_that_changed_since_the_fit_is_refused(runs, capsys, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["classification"], run)
    lap = tmp_path / "lap"
    assert run_main(capsys, "laplace", str(run), "--out", str(lap))[0] == 0
    # trained again into the same folder (another seed: the same epochs, other weights)
    rc = bbb.cli.main(["train", "--csv", str(runs["tmp"] / "classification.csv"), "--target", "y", "--task",
                       "classification", "--method", "sgd", "--epochs", "4", "--seed", "1", "--out", str(run),
                       "--overwrite", *TINY])
    assert rc == 0
    rc, _, err = run_main(capsys, "predict", str(lap), str(runs["tmp"] / "classification.csv"))
    one_line_error(rc, err, "changed since", "fit it again")
    assert "was epoch 4, is 4" not in err and "last layer's weights another network's" in err  # not the epoch
    # compare and report showed the old posterior's scores, and report the run's own as the posterior's
    for cmd in (["compare", str(lap), "--out", str(tmp_path / "cmp")], ["report", str(lap), "--out",
                                                                         str(tmp_path / "r.html")]):
        rc, _, err = run_main(capsys, *cmd)
        one_line_error(rc, err, "changed since", "fit it again")
    # a run moved with its folder is found beside it
    moved = tmp_path / "moved"
    moved.mkdir()
    fit_run_laplace(run, lap)
    shutil.move(str(run), str(moved / "run"))
    shutil.move(str(lap), str(moved / "lap"))
    assert load_laplace(moved / "lap").base_run == moved / "run"


def test_ood_and_uncertain_read_a_laplace_posterior(capsys, tmp_path, monkeypatch):
    """An image run's posterior: `bbb ood DIR` and `bbb uncertain DIR` score its k draws (one set
    for every input), and so does an ensemble with it; its mutual information is the draws'
    disagreement."""
    from bbb.experiments.uncertainty import ood_report, sample_probs
    from testkit import blobs

    data = blobs()
    g = torch.Generator().manual_seed(1)
    far = {k: (0.3 * torch.randn(v.shape, generator=g) if k.endswith("_x") else v) for k, v in data.items()}
    sets = {"mnist": data, "fashion-mnist": far}
    monkeypatch.setattr(runmodel, "load_data", lambda cfg: sets[cfg.dataset])
    tiny = ["--hidden", "16", "--batch-size", "32", "--lr", "0.01", "--device", "cpu", "--eval-samples", "3", "--quiet"]
    run, lap = tmp_path / "sgd", tmp_path / "lap"
    assert run_main(capsys, "train", "--method", "sgd", "--epochs", "3", "--out", str(run), *tiny)[0] == 0
    rc, _, err = run_main(capsys, "laplace", str(run), "--out", str(lap), "--device", "cpu")
    assert rc == 0, err
    rc, _, err = run_main(capsys, "ood", str(lap), "--ood", "fashion-mnist", "--samples", "6", "--device", "cpu")
    assert rc == 0, err
    rep = json.loads((lap / "ood.json").read_text())
    model = load_laplace(lap)
    want = ood_report(sample_probs(model, data["test_x"], "laplace", 6, seed=0),
                      sample_probs(model, far["test_x"], "laplace", 6, seed=0))  # the same draws
    for score in ("entropy", "mutual_information", "max_prob"):
        assert rep["scores"][score]["auroc"] == pytest.approx(want[score]["auroc"])
    with torch.random.fork_rng():
        torch.manual_seed(0)
        direct = model.sample_encoded(data["test_x"], 6, None).softmax(-1)
    torch.testing.assert_close(sample_probs(model, data["test_x"], "laplace", 6, seed=0), direct)
    assert rep["scores"]["mutual_information"]["auroc"] is not None
    rc, _, err = run_main(capsys, "uncertain", str(lap), "--samples", "6", "--device", "cpu")
    assert rc == 0 and (lap / "uncertain.json").exists(), err
    rc, _, err = run_main(capsys, "ood", str(run), str(lap), "--ood", "fashion-mnist", "--samples", "4", "--out",
                          str(tmp_path / "ens"), "--device", "cpu")
    assert rc == 0, err
    ens = json.loads((tmp_path / "ens" / "ood.json").read_text())
    assert ens["samples"] == 8 and ens["method"] == "ensemble of 2 runs (sgd x 1, laplace x 1)"  # the network 4 times


def test_a_posterior_s_scores_are_printed_where_its_folder_cannot_be_written(runs, capsys, tmp_path, monkeypatch):
    """``bbb evaluate`` of a Laplace folder that cannot be written (here: every write refused)
    prints its scores, then one line naming the file and saying they were not saved."""
    from bbb.runs import evaluation

    lap = tmp_path / "lap"
    assert run_main(capsys, "laplace", str(runs["classification"]), "--out", str(lap), "--samples", "4")[0] == 0
    before = {p.name: p.read_bytes() for p in lap.iterdir()}

    def refused(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    for module, name in ((runs_laplace, "atomic_write_json"), (evaluation, "plot_reliability"),
                         (evaluation, "plot_risk_coverage")):
        monkeypatch.setattr(module, name, refused)
    rc, out, err = run_main(capsys, "evaluate", str(lap), "--samples", "4")
    line = one_line_error(rc, err, "cannot write", str(lap / "eval.json"), "Permission denied", "not saved")
    assert "laplace (4 samples)" in out and "the run's network" in out and "wrote" not in out, line
    assert {p.name: p.read_bytes() for p in lap.iterdir()} == before


def test_a_fit_refused_for_its_data_leaves_no_folder(runs, capsys, tmp_path):
    """The run's file gone (moved): one line, and no empty --out folder left behind."""
    run = tmp_path / "run"
    shutil.copytree(runs["classification"], run)
    rc, _, err = run_main(capsys, "laplace", str(run), "--out", str(tmp_path / "lap"),
                          "--csv", str(tmp_path / "nowhere.csv"))
    one_line_error(rc, err, "nowhere.csv")
    assert not (tmp_path / "lap").exists()


def test_a_refit_stopped_before_its_description_leaves_no_mixed_folder(runs, capsys, tmp_path, monkeypatch):
    """A refit (--which last into a folder of the best checkpoint's posterior) stopped after its
    posterior.pt: the folder held the old laplace.json beside the new posterior (the best network
    sampled with the last's posterior); it is no posterior's folder now, and fitting again works."""
    run, lap = runs["classification"], tmp_path / "lap"
    fit_run_laplace(run, lap)

    def stop(path, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_laplace, "atomic_write_json", stop)
    with pytest.raises(KeyboardInterrupt):
        fit_run_laplace(run, lap, which="last")
    assert not runs_laplace.is_laplace_folder(lap)
    monkeypatch.undo()
    assert fit_run_laplace(run, lap, which="last")["checkpoint"] == "last"
    assert load_laplace(lap, "last").epoch == json.loads((run / "summary.json").read_text())["epochs"]


def test_a_refit_says_which_results_of_the_posterior_before_it_removed(runs, tmp_path):
    run, lap = runs["classification"], tmp_path / "lap"
    fit_run_laplace(run, lap)
    (lap / "ood.json").write_text("{}")  # as bbb ood of the first posterior wrote it
    with pytest.warns(UserWarning, match=r"removed ood.json from .*lap \(made from the posterior fitted there before"):
        fit_run_laplace(run, lap, which="last")
    assert not (lap / "ood.json").exists()


def test_a_folder_being_written_is_refused_with_the_holders_pid(runs, capsys, tmp_path):
    """Two fits into one folder took no lock: the last posterior.pt and the last laplace.json
    could be two fits' (a --which best posterior described as --which last's). A fit, and an
    evaluation, of a folder another process holds: one line with its pid, nothing written; once
    it has gone, the same command fits."""
    run, lap = runs["classification"], tmp_path / "lap"
    assert run_main(capsys, "laplace", str(run), "--out", str(lap), "--samples", "2")[0] == 0
    with lock_held(lap / LOCK_NAME) as holder:
        before = snapshot(lap)
        for argv in (["laplace", str(run), "--out", str(lap), "--which", "last", "--samples", "2"],
                     ["evaluate", str(lap), "--samples", "2"]):
            rc, _, err = run_main(capsys, *argv)
            one_line_error(rc, err, f"pid {holder.pid}", str(lap), "in use")
            assert snapshot(lap) == before, argv
    assert run_main(capsys, "laplace", str(run), "--out", str(lap), "--which", "last", "--samples", "2")[0] == 0
    assert json.loads((lap / "laplace.json").read_text())["checkpoint"] == "last"
    assert not (lap / LOCK_NAME).exists()


def test_an_ensembles_folder_is_not_a_posteriors(runs, capsys, tmp_path):
    """--out an ensemble's folder: one line, its eval.json kept (a fit there deleted it)."""
    run = runs["classification"]
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)
    ens = tmp_path / "ens"
    assert run_main(capsys, "evaluate", str(run), str(twin), "--out", str(ens))[0] == 0
    before = (ens / "eval.json").read_bytes()
    rc, _, err = run_main(capsys, "laplace", str(run), "--out", str(ens))
    one_line_error(rc, err, "eval.json", "a folder of its own")
    assert (ens / "eval.json").read_bytes() == before and not (ens / "laplace.json").exists()


def test_a_posterior_fitted_to_the_last_checkpoint_is_read_without_which_again(runs, capsys, tmp_path):
    """A folder fitted with --which last needed --which last in every later command (evaluate, predict,
    ood): the default follows the checkpoint it was fitted to; a given --which that differs is still one line."""
    run = runs["classification"]
    lap = tmp_path / "lap-last"
    assert run_main(capsys, "laplace", str(run), "--which", "last", "--out", str(lap), "--samples", "4")[0] == 0
    rc, _, err = run_main(capsys, "evaluate", str(lap), "--samples", "4")
    assert rc == 0, err
    assert json.loads((lap / "eval.json").read_text())["n"] > 0
    new = tmp_path / "rows.csv"
    shutil.copy(Path(json.loads((run / "config.json").read_text())["data_file"]), new)
    rc, _, err = run_main(capsys, "predict", str(lap), str(new), "--samples", "4", "--out", str(tmp_path / "p.csv"))
    assert rc == 0, err
    rc, _, err = run_main(capsys, "ood", str(lap), "--ood-data", str(new), "--samples", "4")
    assert rc == 0, err
    assert json.loads((lap / "ood.json").read_text())["checkpoint"] == "last"
    assert json.loads((lap / "ood.json").read_text())["method"] == "laplace"  # not its run's sgd
    one_line_error(*run_main(capsys, "evaluate", str(lap), "--which", "best")[::2], "last checkpoint", "--which last")
    # beside a run (an ensemble of a run and the folder), the default stays best: refused, naming --which
    one_line_error(*run_main(capsys, "evaluate", str(run), str(lap), "--out", str(tmp_path / "ens"))[::2],
                   "--which last")
