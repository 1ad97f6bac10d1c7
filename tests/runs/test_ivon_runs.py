"""``bbb train --method ivon`` (issue 73, item 3): the BayesMLP of ``--method bbb`` trained by
:class:`bbb.IVON`, its settings (one home of the method's defaults, the settings it does not read
refused), a resume bit for bit, and every command downstream treating the run as Bayesian
(evaluation, pruning, ``load_model``, ``bbb compare``, ``bbb report``, the sweep's spaces)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import bbb.runs.loop as L
from bbb.errors import SettingError, TrainingInterrupted, UserError
from bbb.ivon import IVON
from bbb.nn import BayesMLP, bayes_modules
from bbb.options import Method, is_bayesian
from bbb.runs import (
    TrainConfig,
    build_model,
    classifier_metrics,
    evaluate_run,
    load_model,
    load_run,
    make_optimizer,
    prune_run,
    read_metrics,
    train,
)
from bbb.runs.config import METHOD_DATA_DEFAULTS, METHOD_DEFAULTS
from testkit import blobs, run_main

QUIET = {"quiet": True, "log": lambda s: None}


def ivon_cfg(**kw) -> TrainConfig:
    base = {"method": "ivon", "hidden": [16], "epochs": 2, "batch_size": 32, "lr": 0.1, "device": "cpu",
            "eval_samples": 4}
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def data() -> dict[str, torch.Tensor]:
    return blobs(d=784)  # image-sized rows: bbb.load_model reads a run on injected data as images


@pytest.fixture(scope="module")
def ivon_run(tmp_path_factory, data) -> Path:
    run = tmp_path_factory.mktemp("ivon") / "run"
    train(ivon_cfg(epochs=3), run, data=data, **QUIET)
    return run


# -- the configuration --------------------------------------------------------------------------


def test_ivon_is_a_method_with_its_defaults_in_one_place():
    assert Method("ivon") is Method.IVON and is_bayesian("ivon") and is_bayesian(Method.BBB)
    assert not is_bayesian("sgd") and not is_bayesian(Method.DROPOUT)
    cfg = TrainConfig(method="ivon")
    want = METHOD_DEFAULTS["ivon"]
    assert (cfg.lr, cfg.hess_init, cfg.weight_decay, cfg.ess) == (want["lr"], want["hess_init"],
                                                                  want["weight_decay"], None)
    bbb = TrainConfig()
    assert bbb.lr == METHOD_DEFAULTS["bbb"]["lr"] == 1e-3 and bbb.hess_init is None and bbb.weight_decay is None
    assert TrainConfig(method="ivon", lr=0.05).lr == 0.05  # explicit values win
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("kw, flag", [
    ({"prior": "gaussian"}, "prior"), ({"kl": "mc"}, "kl"), ({"kl_weighting": "uniform"}, "kl_weighting"),
    ({"rho_init": -3.0}, "rho_init"), ({"optimizer": "sgd"}, "optimizer"), ({"pi": 0.5}, "pi"),
    ({"kl_samples": 2}, "kl_samples"), ({"rho_lr_scale": 2.0}, "rho_lr_scale"),
    ({"dropout_hidden": 0.3}, "dropout_hidden"), ({"momentum": 0.5}, "momentum"),
])
def test_a_bbb_setting_with_ivon_is_a_one_line_error(kw, flag):
    with pytest.raises(SettingError) as e:
        ivon_cfg(**kw)
    assert e.value.setting == flag and "not to --method ivon" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("method", ["bbb", "sgd", "dropout"])
@pytest.mark.parametrize("name", ["ess", "hess_init", "weight_decay"])
def test_an_ivon_setting_with_another_method_is_a_one_line_error(method, name):
    with pytest.raises(SettingError, match=f"^{name} is a setting of --method ivon"):
        TrainConfig(method=method, **{name: 1.0})


def test_ivon_refuses_what_it_cannot_train_and_bad_values():
    with pytest.raises(SettingError, match="estimator"):
        ivon_cfg(estimator="local")
    for kw in ({"ess": 0}, {"hess_init": -1.0}, {"weight_decay": -1e-3}, {"ess": math.inf}):
        with pytest.raises(SettingError):
            ivon_cfg(**kw)
    assert ivon_cfg(weight_decay=0.0).weight_decay == 0.0


# -- training -----------------------------------------------------------------------------------


def test_ivon_trains_the_bbb_network_with_bbb_ivon(tmp_path, data, ivon_run):
    cfg = ivon_cfg()
    model = build_model(cfg, 784, 3)
    assert isinstance(model, BayesMLP)
    opt = make_optimizer(cfg, model, num_train=240)
    assert isinstance(opt, IVON) and opt.param_groups[0]["ess"] == 240
    assert make_optimizer(ivon_cfg(ess=1000.0), build_model(cfg, 784, 3)).param_groups[0]["ess"] == 1000.0
    with pytest.raises(UserError, match="effective sample size"):
        make_optimizer(cfg, build_model(cfg, 784, 3))

    config = json.loads((ivon_run / "config.json").read_text())
    assert config["method"] == "ivon" and config["ess"] is None and config["ess_used"] == 240
    rows = read_metrics(ivon_run)
    assert [r["kl"] for r in rows] == [0.0] * 3  # no KL term: IVON's prior is in its update
    assert rows[-1]["nll"] < rows[0]["nll"] and all(r["train_loss"] == r["nll"] for r in rows)
    summary = json.loads((ivon_run / "summary.json").read_text())
    assert summary["method"] == "ivon" and summary["test_error"] < 0.2
    # the posterior in the layers: sigma = 1 / sqrt(ess (h + weight decay)), not the rho_init of bbb
    net, _ = load_run(ivon_run, "last")
    ckpt = torch.load(ivon_run / "last.pt", weights_only=True)
    st = ckpt["optimizer"]["state"]
    m = next(iter(bayes_modules(net)))
    hess = st[0]["hess"]
    want = 1.0 / torch.sqrt(240 * (hess + cfg.weight_decay))
    torch.testing.assert_close(F.softplus(m.rho(m.param_names()[0])), want, rtol=1e-5, atol=0)


def test_ivon_objective_is_the_mean_nll_over_its_samples(data):
    torch.manual_seed(0)
    cfg = ivon_cfg()
    model = build_model(cfg, 784, 3)
    x, y = data["train_x"][:8], data["train_y"][:8]
    model.eval()  # the mean weights: every sample the same network, so k samples = 1 sample
    one = L.batch_objective(model, None, x, y, 0)
    three = L.batch_objective(model, None, x, y, 0, num_samples=3)
    torch.testing.assert_close(three[0], one[0])
    torch.testing.assert_close(one[0], F.cross_entropy(model(x), y))
    assert float(one[3]) == 0.0


def test_ivon_with_several_training_samples_and_a_regression_run(tmp_path, data):
    s1 = train(ivon_cfg(epochs=1), tmp_path / "k1", data=data, **QUIET)
    s3 = train(ivon_cfg(epochs=1, samples=3), tmp_path / "k3", data=data, **QUIET)
    assert s1["test_error"] < 0.5 and s3["test_error"] < 0.5
    assert read_metrics(tmp_path / "k1")[0]["nll"] != read_metrics(tmp_path / "k3")[0]["nll"]

    g = torch.Generator().manual_seed(0)
    reg = {}
    for split, n in (("train", 200), ("val", 50), ("test", 50)):
        xs = torch.randn(n, 3, generator=g)
        noise = 0.1 * torch.randn(n, generator=g)
        reg[f"{split}_x"], reg[f"{split}_y"] = xs, xs @ torch.tensor([1.0, -1.0, 0.5]) + noise
    s = train(ivon_cfg(epochs=3, hidden=[8]), tmp_path / "reg", data=reg, **QUIET)
    assert s["task"] == "regression" and math.isfinite(s["test_log_likelihood"]) and s["test_rmse"] < 1.0


def test_a_homoscedastic_regression_is_refused_with_ivon(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,y\n" + "".join(f"{i},{2 * i}\n" for i in range(30)))
    with pytest.raises(UserError, match="homoscedastic"):
        ivon_cfg(data_file=str(table), target="y", likelihood="homoscedastic")


def _interrupt_at(monkeypatch, call: int) -> None:
    real, count = L.batch_objective, {"n": 0}

    def wrapped(*args, **kwargs):
        count["n"] += 1
        if count["n"] >= call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(L, "batch_objective", wrapped)


@pytest.mark.parametrize("extra", [{}, {"samples": 2, "lr_schedule": "cosine"}])
def test_a_killed_ivon_run_resumes_bit_for_bit(tmp_path, data, monkeypatch, extra):
    cfg = ivon_cfg(epochs=3, **extra)
    full, part = tmp_path / "full", tmp_path / "part"
    train(cfg, full, data=data, **QUIET)
    with monkeypatch.context() as m:
        _interrupt_at(m, math.ceil(240 / 32) + 3)  # inside epoch 2
        with pytest.raises(TrainingInterrupted):
            train(cfg, part, data=data, **QUIET)
    torch.manual_seed(1234)  # a fresh process: another global RNG state
    train(cfg, part, data=data, resume=True, **QUIET)

    def rows(run):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in read_metrics(run)]

    assert rows(part) == rows(full)
    a, b = (torch.load(d / "last.pt", weights_only=True) for d in (full, part))
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for i, st in a["optimizer"]["state"].items():
        for k in ("momentum", "hess"):
            assert torch.equal(st[k], b["optimizer"]["state"][i][k]), (i, k)
    assert a["optimizer"]["noise"] == b["optimizer"]["noise"] and a["optimizer"]["noise"]["counter"] > 0


# -- downstream: an ivon run is a Bayesian one ------------------------------------------------------


def test_evaluation_samples_an_ivon_network(ivon_run, data):
    net, cfg = load_run(ivon_run, "best")
    res = classifier_metrics(net, data["test_x"], data["test_y"], "ivon", samples=5, return_probs=True)
    assert res["samples"] == 5 and res["mi"] is not None and float(res["mi"].max()) > 0
    assert not torch.equal(res["probs"], res["mean_probs"])  # weight samples, not the mean network
    ev = evaluate_run(ivon_run, samples=5, data=data, reliability=False)
    assert ev["method"] == "ivon" and ev["samples"] == 5 and "mi" in ev["selective"]


def test_pruning_and_load_model_of_an_ivon_run(ivon_run, data):
    rows = prune_run(ivon_run, (0.0, 0.5), data=data)
    assert [r["fraction_removed"] for r in rows] == [0.0, 0.5] and rows[1]["weights_left"] < rows[0]["weights_left"]
    model = load_model(ivon_run)
    pixels = data["test_x"][:6].abs() / data["test_x"].abs().max()  # in 0..1, as an image's
    out = model.sample_outputs(pixels.numpy(), num_samples=4)
    assert out.shape == (4, 6, 3) and float(out.std(0).max()) > 0


def test_the_command_line_trains_ivon_and_refuses_what_it_does_not_read(tmp_path, capsys, monkeypatch, data):
    import bbb.runs.model as RM

    monkeypatch.setattr(RM, "load_data", lambda cfg: data)
    tiny = ["--hidden", "16", "--batch-size", "32", "--device", "cpu", "--eval-samples", "3", "--epochs", "1"]
    # given at its default value, a bbb setting is still refused: never silently ignored
    for flags, named in ((["--prior", "mixture"], "--prior"), (["--sigma-init", "0.0067"], "--sigma-init"),
                         (["--kl", "auto"], "--kl"), (["--kl-weighting", "blundell"], "--kl-weighting")):
        rc, out, err = run_main(capsys, "train", "--method", "ivon", *flags, "--out", str(tmp_path / "x"), *tiny)
        assert rc != 0 and err.count("\n") == 1 and named in err and "--method ivon" in err, (flags, err)
    rc, out, err = run_main(capsys, "train", "--weight-decay", "1e-3", "--out", str(tmp_path / "y"), *tiny)
    assert rc != 0 and "--weight-decay is a setting of --method ivon" in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()

    run = tmp_path / "run"
    rc, out, err = run_main(capsys, "train", "--method", "ivon", "--lr", "0.1", "--ess", "500", "--hess-init", "0.2",
                            "--weight-decay", "1e-3", "--out", str(run), "--quiet", *tiny)
    assert rc == 0, err
    config = json.loads((run / "config.json").read_text())
    assert (config["ess"], config["ess_used"], config["hess_init"], config["weight_decay"]) == (500, 500, 0.2, 1e-3)
    rc, out, err = run_main(capsys, "evaluate", str(run), "--samples", "3", "--device", "cpu")
    assert rc == 0 and "mean weights" in out and "3-sample average" in out
    rc, out, err = run_main(capsys, "prune", str(run), "--fractions", "0", "0.5", "--device", "cpu")
    assert rc == 0, err
    rc, out, err = run_main(capsys, "train", "--resume", "--out", str(run), "--epochs", "2", "--quiet")
    assert rc == 0, err
    assert len(read_metrics(run)) == 2
    rc, _, err = run_main(capsys, "train", "--resume", "--out", str(run), "--epochs", "3", "--prior", "gaussian")
    assert rc != 0 and "--prior" in err


def test_help_names_ivon_and_its_flags(capsys):
    rc, out, _ = run_main(capsys, "train", "--help")
    flat = " ".join(out.split())
    assert rc == 0 and "{bbb,sgd,dropout,ivon}" in flat
    lr = METHOD_DEFAULTS["ivon"]["lr"]
    table = METHOD_DATA_DEFAULTS[("ivon", "file")]
    assert f"(default: 0.001; --method ivon: {lr:g}, with --csv/--npz {table['lr']:g})" in flat
    assert f"(default: {METHOD_DEFAULTS['ivon']['hess_init']:g}; --csv/--npz: {table['hess_init']:g})" in flat
    for flag in ("--ess N", "--hess-init H", "--weight-decay D"):
        assert flag in flat


# -- the applications: compare, report, sweep ----------------------------------------------------


def _fake_run(root: Path, name: str, method: str, ece: float) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"method": method, "hidden": [400, 400], "dataset": "mnist",
                                               "weight_decay": 5e-4, "ess": None, "ess_used": 50000}))
    (d / "eval.json").write_text(json.dumps({"method": method, "dataset": "mnist", "test_error": 0.02,
                                             "test_error_mc": 0.02, "nll": 0.07, "ece": ece, "brier": 0.03,
                                             "samples": 10}))
    return d


def test_compare_names_ivon_beside_bbb(tmp_path):
    from bbb.experiments.comparison import comparison_rows, write_comparison

    runs = [_fake_run(tmp_path, "ivon", "ivon", 0.004), _fake_run(tmp_path, "bbb", "bbb", 0.02),
            _fake_run(tmp_path, "sgd", "sgd", 0.012)]
    md = write_comparison(comparison_rows(runs), tmp_path / "out")[1].read_text()
    assert "2x400: IVON's ECE (0.40%) is lower than SGD's (1.20%)." in md
    assert "2x400: BBB's ECE (2.00%) is NOT lower than SGD's (1.20%)." in md
    runs.append(_fake_run(tmp_path, "ivon2", "ivon", 0.01))
    md = write_comparison(comparison_rows(runs), tmp_path / "out2")[1].read_text()
    assert "no verdict: several ivon runs" in md


def test_report_calls_an_ivon_run_ivon_and_offers_pruning(ivon_run):
    from bbb.experiments import report_text as RT
    from bbb.experiments.report import report_html

    # as a run on MNIST's images would say (this one's blobs make it a run on data given in memory)
    config = {**json.loads((ivon_run / "config.json").read_text()), "data_source": None}
    assert RT.method_name(config).startswith("IVON")
    rows = dict(RT.settings_rows(config, regression=False))
    assert rows["method"].startswith("IVON") and "--method ivon" in rows["method"]
    wd = config["weight_decay"]  # the prior's precision is ess times IVON's weight decay, not the weight decay
    want = f"Gaussian, precision {240 * wd:g} = ess 240 x weight decay {wd:g}, sd {(240 * wd) ** -0.5:.3g}"
    assert rows["prior"] == want
    assert rows["lr"] == "0.1"  # given: differs from ivon's default
    at_default = dict(RT.settings_rows({**config, "lr": METHOD_DEFAULTS["ivon"]["lr"]}, regression=False))
    assert "lr" not in at_default  # ivon's own default (not bbb's 1e-3) is not a setting worth a row
    assert not {"kl weighting", "kl", "rho init", "optimizer"} & set(rows)
    commands = [c for c, _ in RT.suggested_commands("run", config, False, set())]
    assert any(c.startswith("bbb prune") for c in commands)
    page = report_html([ivon_run])
    assert "Pruning by signal-to-noise" in page


def test_a_sweep_space_takes_ivon_and_its_settings():
    from bbb.cli.cost import epoch_seconds
    from bbb.sweep.space import expand_space, resolve_params, validate_space

    space = {"params": {"dataset": "synthetic", "method": "ivon", "epochs": 1, "hidden": [8],
                        "weight_decay": {"grid": [1e-4, 1e-3]}, "hess_init": 0.3, "ess": None}}
    trials = expand_space(space)
    assert len({t.trial_id for t in trials}) == 2
    cfg, _ = resolve_params(trials[0].params)
    assert cfg.method is Method.IVON and cfg.weight_decay == 1e-4 and cfg.hess_init == 0.3
    for bad in ("abc", math.nan):
        with pytest.raises(UserError, match="weight_decay"):
            validate_space({"params": {"method": "ivon", "weight_decay": bad}})
    with pytest.raises(UserError, match="^search space: kl applies to --method bbb"):
        resolve_params({"method": "ivon", "kl": "mc"})
    assert epoch_seconds("ivon", [400, 400]) == epoch_seconds("bbb", [400, 400]) > 0

