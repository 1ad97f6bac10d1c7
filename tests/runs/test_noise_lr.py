"""--likelihood homoscedastic: the one noise parameter learns at lr * NOISE_LR_SCALE. At lr 1e-3
Adam moved it about 1e-3 a step, and after a table's 200 default epochs its sd was still falling
(yacht: 0.19 target sd, a test RMSE of 0.07 sd, every test target inside the 95% interval).
Runs stored before the scale resume as they were trained (scale 1: one optimiser group)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bbb.errors import UserError
from bbb.runs import TrainConfig, train
from bbb.runs.config import NOISE_LR_SCALE, resume_conflicts
from bbb.runs.loop import make_optimizer
from bbb.runs.model import ConstantNoise, build_model

from .test_own_data import SMALL, regression_csv

QUIET = {"quiet": True, "log": lambda s: None}


def cfg_of(path: Path, **kw) -> TrainConfig:
    return TrainConfig(data_file=str(path), target="y", likelihood="homoscedastic", **{**SMALL, **kw})


@pytest.mark.parametrize("method", ["bbb", "sgd", "dropout"])
def test_the_noise_parameter_steps_at_its_own_learning_rate(tmp_path, method):
    cfg = cfg_of(regression_csv(tmp_path / "t.csv"), method=method, epochs=1)
    assert cfg.noise_lr_scale == NOISE_LR_SCALE > 1
    model = build_model(cfg, 3, 2, "regression")
    raw = next(m.raw for m in model.modules() if isinstance(m, ConstantNoise))
    opt = make_optimizer(cfg, model)
    groups = [g for g in opt.param_groups if any(p is raw for p in g["params"])]
    assert len(groups) == 1 and groups[0]["params"] == [raw] and groups[0]["lr"] == pytest.approx(0.01 * NOISE_LR_SCALE)
    n = sum(len(g["params"]) for g in opt.param_groups)
    assert n == len(list(model.parameters()))  # every parameter once


def test_noise_lr_scale_is_refused_where_no_noise_parameter_reads_it(tmp_path):
    path = regression_csv(tmp_path / "t.csv")
    with pytest.raises(UserError, match="homoscedastic"):
        TrainConfig(data_file=str(path), target="y", noise_lr_scale=3.0, **SMALL)
    assert TrainConfig(data_file=str(path), target="y", **SMALL).noise_lr_scale is None


def test_a_run_stored_before_the_scale_resumes_bit_for_bit_at_scale_1(tmp_path):
    path = regression_csv(tmp_path / "t.csv")
    whole, old = tmp_path / "whole", tmp_path / "old"
    train(cfg_of(path, epochs=3, noise_lr_scale=1.0), whole, **QUIET)
    train(cfg_of(path, epochs=2, noise_lr_scale=1.0), old, **QUIET)
    ckpt = torch.load(old / "last.pt", weights_only=True)
    del ckpt["config"]["noise_lr_scale"]  # as a bbb before the scale wrote it
    torch.save(ckpt, old / "last.pt")
    stored = json.loads((old / "config.json").read_text())
    del stored["noise_lr_scale"]
    (old / "config.json").write_text(json.dumps(stored))
    now = TrainConfig.from_stored({**ckpt["config"], "epochs": 3})
    assert now.noise_lr_scale == 1.0 and resume_conflicts(ckpt["config"], now) == []
    assert resume_conflicts(ckpt["config"], cfg_of(path, epochs=3)) == [("noise_lr_scale", 1.0, NOISE_LR_SCALE)]
    train(now, old, resume=True, **QUIET)
    a = torch.load(whole / "last.pt", weights_only=True)["model"]
    b = torch.load(old / "last.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["bbb", "sgd"])
def test_a_new_homoscedastic_run_resumes_bit_for_bit(tmp_path, method):
    path = regression_csv(tmp_path / "t.csv")
    train(cfg_of(path, epochs=3, method=method), tmp_path / "whole", **QUIET)
    train(cfg_of(path, epochs=2, method=method), tmp_path / "part", **QUIET)
    train(cfg_of(path, epochs=3, method=method), tmp_path / "part", resume=True, **QUIET)
    a = torch.load(tmp_path / "whole" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "part" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "part" / "config.json").read_text())["noise_lr_scale"] == NOISE_LR_SCALE


@pytest.mark.parametrize("wrap", [False, True])
def test_an_engine_group_claims_a_models_own_parameter(wrap):
    from bbb import ELBO, HeteroscedasticGaussian
    from bbb.engine import Engine
    from bbb.nn import BayesMLP

    torch.manual_seed(0)
    model = torch.nn.Sequential(BayesMLP(3, [4], 1), ConstantNoise())
    raw = model[1].raw
    target = ELBO(model, HeteroscedasticGaussian(), num_batches=1) if wrap else model
    opt = Engine(target, lr=1e-3, params=[{"params": [raw], "lr": 0.5}], fused=False)
    groups = [g for g in opt.param_groups if any(p is raw for p in g["params"])]
    assert len(groups) == 1 and groups[0]["lr"] == 0.5
    assert Engine(target, lr=1e-3, fused=False).param_groups[0]["lr"] == 1e-3  # no group: as before


def test_the_command_line_sets_the_scale_and_refuses_it_without_the_one_noise_parameter(capsys, tmp_path):
    from testkit import run_main

    data = regression_csv(tmp_path / "t.csv")
    small = ["--epochs", "1", "--hidden", "8", "--batch-size", "32"]
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "y", "--likelihood", "homoscedastic",
                          "--noise-lr-scale", "3", "--out", str(tmp_path / "r"), *small)
    assert rc == 0, err
    assert json.loads((tmp_path / "r" / "config.json").read_text())["noise_lr_scale"] == 3.0
    rc, _, err = run_main(capsys, "train", "--csv", str(data), "--target", "y", "--noise-lr-scale", "3",
                          "--out", str(tmp_path / "h"), *small)
    assert rc == 2 and err.count("\n") == 1 and "--noise-lr-scale applies to the one noise parameter" in err, err
    assert not (tmp_path / "h").exists()


def test_the_learned_noise_sd_is_recorded_in_the_targets_units(tmp_path):
    """A homoscedastic run's one noise sd was in bbb predict's aleatoric_sd column only: summary.json
    and eval.json record it, in the target's units, as predict gives it for every input."""
    from bbb.runs import evaluate_run, load_model

    path = regression_csv(tmp_path / "t.csv")
    out = tmp_path / "run"
    summary = train(cfg_of(path, method="sgd", epochs=3), out, **QUIET)
    model = load_model(out)
    x = model.encode_csv(path)[0]
    aleatoric = model.regression(model.sample_outputs(x, 1, 0))["aleatoric_sd"]
    assert torch.allclose(aleatoric, torch.full_like(aleatoric, summary["noise_sd"]), rtol=1e-5)
    assert evaluate_run(out, samples=2)["noise_sd"] == pytest.approx(summary["noise_sd"])
    assert "noise_sd" not in train(TrainConfig(data_file=str(path), target="y", method="sgd", **{**SMALL, "epochs": 1}),
                                   tmp_path / "hetero", **QUIET)
