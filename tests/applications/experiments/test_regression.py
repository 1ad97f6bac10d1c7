"""Regression curves (Fig. 5): BBB's band widens away from the data while its median fits."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from bbb.errors import UserError
from bbb.experiments import regression as R
from bbb.experiments import regression_command as C
from bbb.experiments.regression import RegressionConfig, make_data, run_regression, true_function

#: a fast version of the default experiment (the defaults' scale-mixture prior; fewer steps and points)
FAST = dict(hidden=(100, 100), epochs=1500, n_train=100, pred_samples=300, seed=0, quiet=True)


def test_data_follow_the_paper_formula():
    g = torch.Generator().manual_seed(0)
    x, y = make_data(5000, 0.0, 0.5, 0.02, g)
    assert x.dtype == y.dtype == torch.float32 and x.shape == y.shape == (5000,)
    assert 0.0 <= float(x.min()) and float(x.max()) <= 0.5
    resid = y - true_function(x)
    # eps enters the sines too: the noise is larger than 0.02 but centred
    assert abs(float(resid.mean())) < 0.01
    assert 0.02 < float(resid.std()) < 0.1
    torch.testing.assert_close(true_function(torch.tensor([0.0, 0.25, 0.5])),
                               torch.tensor([0.0, 0.25 + 0.3, 0.5]), atol=1e-6, rtol=0)
    xa, ya = make_data(10, generator=torch.Generator().manual_seed(3))
    xb, yb = make_data(10, generator=torch.Generator().manual_seed(3))
    assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_bbb_band_widens_away_from_the_data_and_the_median_fits(tmp_path):
    res = run_regression(RegressionConfig(**FAST), out=str(tmp_path))
    s = res["summary"]
    # inside the training interval the BBB median follows the noise-free curve
    assert s["rmse_bbb_median_in_data"] < 0.08
    # at the far end (x = 1.2) the interquartile range is at least 5x its width inside the data
    assert s["far_end_x"] == pytest.approx(1.2)
    assert s["bbb_iqr_ratio_far_to_in_data"] >= 5.0
    # the weight noise did not collapse: the spread away from the data is epistemic
    assert s["bbb_epistemic_std_at_far_end"] > 5 * s["bbb_epistemic_std_mean_in_data"]
    # a standard network's band is its noise model only: the same width everywhere
    assert s["standard_iqr_at_far_end"] == pytest.approx(s["standard_iqr_mean_in_data"], rel=1e-4)
    assert s["standard_iqr_mean_in_data"] == pytest.approx(2 * 0.6744898 * 0.05, rel=1e-3)
    std = res["standard"]
    assert float(std["epistemic_std"].abs().max()) == 0.0

    # files
    assert set(res["files"]) == {"regression.csv", "summary.json", "regression.png"}
    with open(tmp_path / "regression.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == R.CSV_COLUMNS
    for m in ("bbb", "standard"):
        for c in ("median", "q25", "q75", "q025", "q975", "epistemic_std", "aleatoric_std"):
            assert f"{m}_{c}" in rows[0]
    assert len(rows) == RegressionConfig().n_grid
    assert float(rows[0]["x"]) == pytest.approx(-0.2) and float(rows[-1]["x"]) == pytest.approx(1.2)
    for r in rows:
        q = [float(r[f"bbb_{c}"]) for c in ("q025", "q25", "median", "q75", "q975")]
        assert q == sorted(q)
        tot = math.hypot(float(r["bbb_epistemic_std"]), float(r["bbb_aleatoric_std"]))
        assert tot > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rmse_bbb_median_in_data"] == pytest.approx(s["rmse_bbb_median_in_data"])
    assert summary["config"]["x_low"] == 0.0 and summary["config"]["x_high"] == 0.5
    assert "seconds" in summary


def test_bbb_bands_are_the_exact_quantiles_of_its_samples_mixture():
    """BBB's band was the empirical quantiles of 4 noise draws per weight sample (the alternatives':
    exact): with one weight sample its predictive is N(mean, 0.05^2), whose quantiles are exact now."""
    res = run_regression(RegressionConfig(hidden=(8, 8), epochs=5, n_train=20, n_grid=9, pred_samples=1,
                                          seed=0, quiet=True))
    b = res["bbb"]
    torch.testing.assert_close(b["median"], b["mean"])
    assert float(b["epistemic_std"].abs().max()) == 0.0
    normal = torch.distributions.Normal(0.0, 1.0)
    for name, q in R.QUANTILES.items():
        torch.testing.assert_close(b[name], b["mean"] + 0.05 * float(normal.icdf(torch.tensor(q))),
                                   rtol=0, atol=1e-6, msg=name)


def test_heteroscedastic_option_learns_input_dependent_noise(tmp_path):
    res = run_regression(RegressionConfig(hidden=(16, 16), epochs=150, n_train=60, pred_samples=50,
                                          heteroscedastic=True, quiet=True))
    for m in ("bbb", "standard"):
        al = res[m]["aleatoric_std"]
        assert torch.isfinite(al).all() and (al > 0).all()
        assert float(al.max() - al.min()) > 1e-4  # varies with x
        q = res[m]
        assert (q["q25"] <= q["median"]).all() and (q["median"] <= q["q75"]).all()
    assert res["summary"]["bbb_noise_sigma"] is None


def test_learned_noise_and_mixture_prior_run():
    res = run_regression(RegressionConfig(hidden=(8,), epochs=30, n_train=20, pred_samples=20,
                                          learn_noise=True, prior="mixture", quiet=True))
    assert res["summary"]["bbb_noise_sigma"] != pytest.approx(RegressionConfig().model_sigma)
    assert math.isfinite(res["summary"]["rmse_bbb_median_in_data"])


def test_run_does_not_touch_the_global_rng():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    run_regression(RegressionConfig(hidden=(4,), epochs=2, n_train=5, pred_samples=4, quiet=True))
    assert torch.equal(torch.rand(3), before)


@pytest.mark.parametrize("kw", [dict(n_train=0), dict(x_low=0.5, x_high=0.5), dict(epochs=0),
                                dict(noise_std=-1.0), dict(activation="swish"), dict(prior="laplace"),
                                dict(hidden=()), dict(grid_low=2.0, grid_high=1.0), dict(lr=float("nan")),
                                dict(device="tpu"), dict(pi=0.0), dict(seed=-3)])
def test_bad_settings_raise_user_error(kw):
    with pytest.raises(UserError):
        run_regression(RegressionConfig(quiet=True, epochs=1, **{k: v for k, v in kw.items() if k != "epochs"}),
                       **({"epochs": kw["epochs"]} if "epochs" in kw else {}))


def test_cli_parser_and_errors(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    C.add_arguments(parser)
    assert "Example" in (parser.epilog or "")
    args = parser.parse_args(["--out", str(tmp_path), "--seed", "2", "--epochs", "7", "--heteroscedastic",
                              "--x-range", "-0.1", "0.45", "--device", "cpu", "--quiet"])
    cfg = C.config_from_args(args)
    assert (cfg.seed, cfg.epochs, cfg.heteroscedastic, cfg.x_low, cfg.x_high) == (2, 7, True, -0.1, 0.45)
    cli = pytest.importorskip("bbb.cli")
    rc = cli.main(["regression", "--out", str(tmp_path / "r"), "--x-range", "1", "0"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "range" in err[0]
    rc = cli.main(["regression", "--out", str(tmp_path / "r2"), "--epochs", "3", "--n-train", "10",
                   "--hidden", "4", "--samples", "10", "--quiet"])
    assert rc == 0 and (tmp_path / "r2" / "regression.csv").exists()


def test_overwrite_removes_what_the_earlier_call_wrote_and_this_one_does_not(tmp_path, capsys):
    # --overwrite without --alternatives (or --log) left an earlier call's alternatives.* and tb/
    # beside the new figure, as if made from its settings
    cli = pytest.importorskip("bbb.cli")
    out = tmp_path / "r"
    out.mkdir()
    for f in ("alternatives.csv", "alternatives.json", "alternatives.png"):
        (out / f).write_text("an earlier call's")
    (out / "tb" / "bbb").mkdir(parents=True)
    (out / "mine.txt").write_text("the user's")
    small = ["--epochs", "3", "--n-train", "10", "--hidden", "4", "--samples", "10", "--quiet"]
    assert cli.main(["regression", "--out", str(out), *small]) == 0  # (only alternatives there: no refusal)
    with pytest.warns(UserWarning, match=r"removed alternatives.csv, alternatives.json, alternatives.png, tb/ from"):
        assert cli.main(["regression", "--out", str(out), "--overwrite", *small]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt", "regression.csv", "regression.png", "summary.json"]
    (out / "alternatives.csv").write_text("an earlier call's")
    # a bad setting: refused before anything is removed
    assert cli.main(["regression", "--out", str(out), "--overwrite", "--x-range", "1", "0", *small]) == 2
    assert (out / "alternatives.csv").exists()


def test_alternatives_on_the_same_points(tmp_path, capsys):
    """``bbb regression --alternatives``: a deep ensemble, MC dropout and a last-layer Laplace on
    the points BBB was fitted to; each band is a predictive of the fixed noise (as wide as the
    noise model's where the members agree), widening away from the data by the members'
    disagreement (ensemble, dropout) or the last layer's posterior (Laplace)."""
    from bbb.experiments import regression_alternatives as A
    from bbb.laplace import laplace_available

    cfg = RegressionConfig(**{**FAST, "epochs": 400, "pred_samples": 100, "quiet": False}, out=str(tmp_path))
    base = run_regression(cfg)
    res = A.run_alternatives(cfg, base)
    methods = res["summary"]["methods"]
    want = {"bbb", "standard", "deep_ensemble", "mc_dropout"} | ({"laplace"} if laplace_available() else set())
    assert set(methods) == want
    assert methods["bbb"]["iqr_ratio_far_to_in_data"] == pytest.approx(base["summary"]["bbb_iqr_ratio_far_to_in_data"])
    noise_iqr = 2 * 0.6744898 * 0.05
    for m in want - {"bbb", "standard"}:
        b = res["bands"][m]
        assert bool((b["q025"] <= b["q25"]).all() and (b["q25"] <= b["median"]).all()
                    and (b["median"] <= b["q75"]).all() and (b["q75"] <= b["q975"]).all()), m
        assert methods[m]["iqr_mean_in_data"] > 0.8 * noise_iqr, m  # at least the noise model's width
        assert methods[m]["epistemic_std_at_far_end"] > 0, m
        assert methods[m]["rmse_median_in_data"] < 0.2, m
        assert 0 <= methods[m]["curve_in_95_band_beyond_data"] <= 1, m
    with open(tmp_path / "alternatives.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == cfg.n_grid and "deep_ensemble_q975" in rows[0]
    assert json.loads((tmp_path / "alternatives.json").read_text())["ensemble_size"] == A.ENSEMBLE_SIZE
    assert (tmp_path / "alternatives.png").exists()
    # it names the files it wrote, as Fig. 5 does (it once wrote them without a word)
    said = capsys.readouterr().out
    assert f"regression: wrote alternatives.csv, alternatives.json, alternatives.png in {tmp_path}" in said
    with pytest.raises(UserError, match="exists"):  # no file replaced without --overwrite
        A.check_alternatives(cfg)
    with pytest.raises(UserError, match="--learn-noise"):
        A.check_alternatives(RegressionConfig(**FAST, learn_noise=True))


def test_alternatives_refuse_a_learned_noise_before_training(tmp_path, capsys):
    from testkit import run_main

    rc, _, err = run_main(capsys, "regression", "--out", str(tmp_path / "r"), "--alternatives", "--learn-noise")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--learn-noise" in err
    assert not (tmp_path / "r" / "summary.json").exists()


@pytest.mark.parametrize("argv, flag", [(["--prior", "gaussian", "--pi", "0.5"], "--pi"),
                                        (["--prior", "gaussian", "--sigma2", "0.01"], "--sigma2"),
                                        (["--prior-sigma", "2"], "--prior-sigma")])  # the default: mixture
def test_a_parameter_of_the_other_prior_is_refused(tmp_path, capsys, argv, flag):
    """Before, ``--prior gaussian --pi 0.5`` trained with the Gaussian prior (the same numbers as
    without --pi) and recorded pi 0.5 in summary.json."""
    from testkit import run_main

    out = tmp_path / "r"
    rc, _, err = run_main(capsys, "regression", "--out", str(out), *argv, "--epochs", "1", "--quiet")
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag} applies to --prior " in err and not out.exists()


def test_learn_noise_with_heteroscedastic_is_refused(tmp_path, capsys):
    """Before, ``--heteroscedastic --learn-noise`` trained the heteroscedastic networks (the same
    numbers as without --learn-noise) and recorded learn_noise true in summary.json."""
    from testkit import run_main

    out = tmp_path / "r"
    rc, _, err = run_main(capsys, "regression", "--out", str(out), "--heteroscedastic", "--learn-noise",
                          "--epochs", "1", "--quiet")
    assert rc == 2 and err.count("\n") == 1, err
    assert "--learn-noise does not apply to --heteroscedastic" in err and not out.exists()


def test_a_grid_outside_the_training_range_is_refused_before_training(tmp_path):
    # every "in the data" number (RMSE, interquartile width, their ratio) would be NaN or inf
    with pytest.raises(UserError, match="no point inside the training range"):
        run_regression(RegressionConfig(out=str(tmp_path / "r"), grid_low=0.6, grid_high=1.2, quiet=True))
    assert not (tmp_path / "r").exists()
    res = run_regression(RegressionConfig(hidden=(4,), epochs=2, n_train=5, pred_samples=4, quiet=True,
                                          grid_low=0.4, grid_high=1.2))  # overlapping: fine
    assert math.isfinite(res["summary"]["bbb_iqr_mean_in_data"])


def test_the_csv_flags_the_points_of_the_summarys_in_data_numbers(tmp_path):
    # at a range end such as 0.8 the float32 grid point lies a hair above the float range end: the CSV
    # flagged it outside while summary.json's in-data numbers counted it in
    out = tmp_path / "r"
    res = run_regression(RegressionConfig(hidden=(4,), epochs=2, n_train=5, pred_samples=4, quiet=True,
                                          x_low=0.0, x_high=0.8, out=str(out)))
    with open(out / "regression.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    flagged = [r for r in rows if r["in_training_range"] == "1"]
    assert len(flagged) == int(R.in_training_range(RegressionConfig(x_high=0.8), res["grid"]).sum())
    rmse = math.sqrt(sum((float(r["bbb_median"]) - float(r["true_f"])) ** 2 for r in flagged) / len(flagged))
    assert rmse == pytest.approx(res["summary"]["rmse_bbb_median_in_data"], rel=1e-4)


def test_a_bbb_train_runs_directory_as_out_is_refused_even_with_overwrite(tmp_path, capsys):
    # its summary.json was called "of an earlier call", and --overwrite replaced the run's own
    # summary.json with the regression's (and removed the run's tb/)
    cli = pytest.importorskip("bbb.cli")
    run = tmp_path / "run"
    (run / "tb").mkdir(parents=True)
    (run / "last.pt").write_bytes(b"a checkpoint")
    (run / "summary.json").write_text('{"test_error": 0.02}')
    small = ["--epochs", "3", "--n-train", "10", "--hidden", "4", "--samples", "10", "--quiet"]
    for extra in ([], ["--overwrite"]):
        rc = cli.main(["regression", "--out", str(run), *small, *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "bbb train run" in err[0] and "Traceback" not in err[0]
    assert (run / "summary.json").read_text() == '{"test_error": 0.02}' and (run / "tb").is_dir()
    assert sorted(p.name for p in run.iterdir()) == ["last.pt", "summary.json", "tb"]


def test_another_commands_summary_json_in_out_is_refused_even_with_overwrite(tmp_path, capsys):
    # a bbb bandit folder's summary.json was replaced by the regression's under --overwrite
    cli = pytest.importorskip("bbb.cli")
    out = tmp_path / "bandit"
    out.mkdir()
    (out / "summary.json").write_text('{"late_window": 1000, "agents": []}')
    small = ["--epochs", "3", "--n-train", "10", "--hidden", "4", "--samples", "10", "--quiet"]
    rc = cli.main(["regression", "--out", str(out), "--overwrite", *small])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "is not a bbb regression's" in err[0]
    assert (out / "summary.json").read_text() == '{"late_window": 1000, "agents": []}'
    assert cli.main(["regression", "--out", str(tmp_path / "mine"), *small]) == 0  # its own: replaced when asked
    assert cli.main(["regression", "--out", str(tmp_path / "mine"), "--overwrite", *small]) == 0


def test_log_does_not_remove_a_tb_folder_already_in_out_without_overwrite(tmp_path, capsys):
    # --log removed OUT/tb whole before writing its event files, the user's own logs there too,
    # without --overwrite and without a word
    pytest.importorskip("tensorboard")
    cli = pytest.importorskip("bbb.cli")
    out = tmp_path / "project"
    (out / "tb" / "mine").mkdir(parents=True)
    (out / "tb" / "mine" / "events").write_text("the user's")
    small = ["--epochs", "3", "--n-train", "10", "--hidden", "4", "--samples", "10", "--quiet"]
    rc = cli.main(["regression", "--out", str(out), "--log", "tensorboard", *small])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "already holds tb/" in err[0] and "--overwrite" in err[0]
    assert (out / "tb" / "mine" / "events").read_text() == "the user's" and not (out / "summary.json").exists()
    assert cli.main(["regression", "--out", str(out), "--log", "tensorboard", "--overwrite", *small]) == 0
    assert sorted(p.name for p in (out / "tb").iterdir()) == ["bbb", "standard"]


def test_the_summary_reads_the_noise_std_that_was_given(tmp_path):
    # noise_std_reading said "0.02 read as a standard deviation" whatever --noise-std was
    s = run_regression(RegressionConfig(hidden=(4,), epochs=2, n_train=5, pred_samples=4, quiet=True,
                                        noise_std=0.05))["summary"]
    assert s["noise_std_of_data"] == 0.05 and s["noise_std_reading"].startswith("0.05 read as a standard deviation")
    default = run_regression(RegressionConfig(hidden=(4,), epochs=2, n_train=5, pred_samples=4, quiet=True))
    assert default["summary"]["noise_std_reading"].startswith("0.02 read as a standard deviation")
