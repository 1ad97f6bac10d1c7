"""A ``bbb train`` option that the run's method does not read is a one-line error, never a
setting recorded in config.json that trained nothing (IVON's own: tests/runs/test_ivon_runs.py)."""
from __future__ import annotations

import pytest

from bbb.errors import SettingError
from bbb.runs import TrainConfig
from bbb.runs.config import resume_conflicts
from testkit import run_main

BAYES = [("--prior", "mixture"), ("--pi", "0.5"), ("--sigma1", "2"), ("--sigma2", "0.01"), ("--prior-sigma", "2"),
         ("--kl-weighting", "uniform"), ("--kl", "mc"), ("--kl-samples", "2"), ("--sigma-init", "0.1"),
         ("--rho-lr-scale", "2"), ("--estimator", "reparam"), ("--mu-init-scale", "0.1"),
         ("--train-samples", "3")]


@pytest.mark.parametrize("method", ["sgd", "dropout"])
@pytest.mark.parametrize("flag, value", BAYES)
def test_a_bayesian_option_with_a_plain_network_is_refused(capsys, tmp_path, method, flag, value):
    """Before, ``--method sgd --prior mixture --train-samples 3`` trained the plain network and
    wrote the values into config.json as if they had been used."""
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--method", method, flag, value, "--out", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"bbb train: error: {flag} applies to the Bayesian network (--method bbb), "
                          f"not to --method {method}")
    assert not out.exists()


@pytest.mark.parametrize("method", ["bbb", "sgd"])
@pytest.mark.parametrize("flag", ["--dropout-input", "--dropout-hidden"])
def test_a_dropout_rate_without_dropout_is_refused(capsys, tmp_path, method, flag):
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--method", method, flag, "0.1", "--out", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag} applies to --method dropout, not to --method {method}" in err
    assert not out.exists()


def test_the_settings_each_method_reads_stay_allowed():
    for method, names in (("bbb", ["prior", "samples", "estimator", "rho_init", "kl"]),
                          ("dropout", ["dropout_input", "dropout_hidden"])):
        TrainConfig(method=method).refuse_unused(names)
    with pytest.raises(SettingError, match="^samples applies to the Bayesian network"):
        TrainConfig(method="sgd").refuse_unused(["samples"])


@pytest.mark.parametrize("argv, flag, prior", [
    (["--prior", "gaussian", "--pi", "0.5"], "--pi", "mixture"),
    (["--prior", "gaussian", "--sigma1", "2"], "--sigma1", "mixture"),
    (["--prior", "gaussian", "--sigma2", "0.01"], "--sigma2", "mixture"),
    (["--prior-sigma", "2"], "--prior-sigma", "gaussian"),  # MNIST's default prior: the mixture
])
def test_a_parameter_of_the_other_prior_is_refused(capsys, tmp_path, argv, flag, prior):
    """Before, ``--prior gaussian --pi 0.5`` trained with the Gaussian prior and recorded pi 0.5."""
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", *argv, "--out", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag} applies to --prior {prior}, not to the --prior " in err
    assert not out.exists()
    TrainConfig(prior=prior).refuse_unused([flag[2:].replace("-", "_")])  # with its own prior: fine


@pytest.mark.parametrize("argv, flag, owner", [
    (["--momentum", "0.5"], "--momentum", "--optimizer sgd"),  # the default optimiser: adam
    (["--method", "sgd", "--optimizer", "adam", "--momentum", "0.5"], "--momentum", "--optimizer sgd"),
    (["--lr-gamma", "0.5"], "--lr-gamma", "--lr-schedule step"),  # the default schedule: none
    (["--lr-schedule", "cosine", "--lr-step-size", "2"], "--lr-step-size", "--lr-schedule step"),
])
def test_an_option_of_another_optimiser_or_schedule_is_refused(capsys, tmp_path, argv, flag, owner):
    """Before, ``--momentum 0.5`` under Adam and ``--lr-gamma 0.5`` without the step schedule
    trained as if they were absent and were recorded in config.json."""
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", *argv, "--out", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag} applies to {owner}, not to " in err
    assert not out.exists()


def test_the_options_of_the_optimiser_and_schedule_given_stay_allowed():
    TrainConfig(optimizer="sgd").refuse_unused(["momentum"])
    TrainConfig(method="ivon", lr_schedule="step").refuse_unused(["lr_gamma", "lr_step_size"])


def test_select_by_without_a_validation_set_is_refused(capsys, tmp_path):
    """Before, ``--val-size 0 --select-by nll`` trained, exit 0, best.pt the last epoch whatever the
    option said, and recorded select_by nll in config.json."""
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--val-size", "0", "--select-by", "nll", "--out", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert "--select-by picks best.pt on the validation set, and this run holds none" in err
    assert not out.exists()
    TrainConfig(val_size=10).refuse_unused(["select_by"])
    with pytest.raises(SettingError, match="^select_by picks best.pt"):
        TrainConfig(data_file=__file__, val_fraction=0.0).refuse_unused(["select_by"])


def test_a_kl_weighting_with_one_minibatch_an_epoch_is_a_warning():
    """With one minibatch an epoch every weighting gives it the whole KL: before, ``--kl-weighting
    uniform --batch-size 1000`` on 500 images trained the same run as blundell's, without a word."""
    import warnings

    with pytest.warns(UserWarning, match=r"^--kl-weighting uniform has no effect here: .* --batch-size 1000 "):
        TrainConfig(kl_weighting="uniform", batch_size=1000).warn_moot_kl_weighting(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrainConfig(kl_weighting="uniform").warn_moot_kl_weighting(4)  # several minibatches: it matters
        TrainConfig(batch_size=1000).warn_moot_kl_weighting(1)  # the default: nothing was asked
        TrainConfig(method="sgd").warn_moot_kl_weighting(1)  # no KL


def test_eval_samples_with_sgd_is_a_warning():
    """Before, ``--method sgd --eval-samples 5`` trained and printed "test error (1-sample average)" without a
    word: a deterministic network has one prediction, and k averaged nothing. A warning (not an error): one
    eval_samples serves a sweep or a script over every method."""
    with pytest.warns(UserWarning, match=r"^--eval-samples 5 has no effect with --method sgd"):
        TrainConfig(method="sgd", eval_samples=5).warn_unread_eval_samples(["eval_samples", "lr"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TrainConfig(method="sgd", eval_samples=5).warn_unread_eval_samples(["lr"])
        for method in ("bbb", "dropout", "ivon"):
            TrainConfig(method=method).warn_unread_eval_samples(["eval_samples"])


def test_the_summary_of_a_plain_network_names_no_sample_average(capsys):
    from bbb.cli.commands import print_summary

    common = {"test_error": 0.1, "test_error_mc": 0.1, "val_error": 0.1, "test_nll": 0.3, "test_ece": 0.01,
              "test_brier": 0.1, "eval_samples": 1, "model": "best", "best_epoch": 1, "epochs": 1, "seconds": 1.0}
    print_summary({**common, "method": "sgd"}, "run")
    out = capsys.readouterr().out
    assert "sample average" not in out and "mean weights" not in out and out.count("test error") == 1
    print_summary({**common, "method": "bbb", "eval_samples": 10}, "run")
    out = capsys.readouterr().out
    assert "test error (mean weights)" in out and "test error (10-sample average)" in out
    reg = {"task": "regression", "test_rmse": 1.0, "test_rmse_mc": 1.0, "test_log_likelihood": -1.0,
           "test_coverage_95": 0.95, "best_val_rmse": 1.0, "eval_samples": 1, "model": "best", "best_epoch": 1,
           "epochs": 1, "seconds": 1.0, "method": "sgd"}
    print_summary(reg, "run")
    out = capsys.readouterr().out
    assert "sample average" not in out and "mean weights" not in out and out.count("test RMSE") == 1


@pytest.mark.parametrize("kw, name", [
    ({"method": "sgd", "prior": "gaussian"}, "prior"), ({"method": "dropout", "samples": 3}, "samples"),
    ({"method": "sgd", "kl": "mc"}, "kl"), ({"method": "bbb", "dropout_input": 0.3}, "dropout_input"),
    ({"method": "sgd", "dropout_hidden": 0.1}, "dropout_hidden"),
    ({"method": "bbb", "prior": "gaussian", "pi": 0.5}, "pi"), ({"method": "bbb", "prior_sigma": 2.0}, "prior_sigma"),
    ({"momentum": 0.5}, "momentum"), ({"lr_gamma": 0.5}, "lr_gamma"), ({"lr_step_size": 3}, "lr_step_size"),
])
def test_the_library_refuses_a_changed_setting_its_method_does_not_read(kw, name):
    """Before, ``TrainConfig(method="sgd", prior="gaussian")`` was accepted (only ``bbb train`` and sweep
    spaces refused it) and config.json recorded a prior that trained nothing."""
    with pytest.raises(SettingError, match=rf"^{name} applies to "):
        TrainConfig(**kw)


def test_the_library_keeps_defaults_and_read_settings_and_loads_old_runs():
    for kw in ({"method": "sgd"}, {"method": "dropout", "dropout_input": 0.3, "dropout_hidden": 0.1},
               {"method": "bbb", "prior": "gaussian", "prior_sigma": 2.0}, {"method": "bbb", "pi": 0.5},
               {"optimizer": "sgd", "momentum": 0.5}, {"lr_schedule": "step", "lr_gamma": 0.5, "lr_step_size": 3},
               {"method": "sgd", "prior": "mixture", "kl_weighting": "blundell", "dropout_input": 0.2}):
        TrainConfig(**kw)
    # a run written by a bbb that took an unread setting still loads, the setting at its default
    stored = {**TrainConfig(method="sgd").to_dict(), "prior": "gaussian", "momentum": 0.5}
    old = TrainConfig.from_stored(stored)
    assert old.method == "sgd" and old.prior == "mixture" and old.momentum == 0.9
    assert resume_conflicts(stored, old) == []  # and resumes
    with pytest.raises(SettingError):  # only while loading
        TrainConfig(method="sgd", momentum=0.5)


def test_a_sweep_space_names_its_own_key_for_an_unread_setting():
    from bbb.errors import UserError
    from bbb.sweep.space import resolve_params

    with pytest.raises(UserError, match=r"^search space: neg_log_sigma1 applies to the Bayesian network.*"
                                        r"leave it out of the space"):
        resolve_params({"dataset": "mnist", "method": "sgd", "neg_log_sigma1": 3})


@pytest.mark.parametrize("scale", ["1e-40", "1e-37"])
def test_a_scale_that_divides_the_pixels_past_float32_is_refused(capsys, tmp_path, scale):
    """``--scale 1e-40`` made every pixel inf, then NaN, and the run stopped on inputs that were
    "not finite" without naming the option that made them so."""
    out = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--scale", scale, "--out", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert "--scale" in err and "must be at least 7.49e-37" in err, err
    assert not out.exists()
    TrainConfig(scale=1e-36)  # the smallest that keeps 255 / scale finite, and above, are accepted
