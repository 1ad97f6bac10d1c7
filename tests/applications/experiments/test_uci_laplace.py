"""``bbb reproduce uci --methods ...,laplace``: a last-layer Laplace of the MAP network (MC dropout's
network and loss without dropout) beside the other methods, on the synthetic datasets of
test_reproduce_uci.py; the tests that train skip where laplace-torch is not installed."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from bbb.data.uci import load_uci
from bbb.errors import MissingExtra
from bbb.experiments.uci import models as M
from bbb.experiments.uci import report as R
from bbb.experiments.uci import train as TR
from bbb.experiments.uci.runner import run_uci
from bbb.experiments.uci.settings import (
    DEFAULT_METHODS,
    LAPLACE_GRID,
    NOISE_SCALES,
    VARIANTS,
    Phase,
    Setting,
    UCIConfig,
    UCIMethod,
    schedule_for,
)
from bbb.laplace import laplace_available
from testkit import read_csv, run_main

from .test_reproduce_uci import N_ROWS, smoke_cfg, write_dataset

needs_laplace = pytest.mark.skipif(not laplace_available(), reason="laplace-torch is not installed")
LAPLACE = next(v for v in VARIANTS if v.method is UCIMethod.LAPLACE)


@pytest.fixture
def data_root(tmp_path):
    return write_dataset(tmp_path / "data")


def test_laplace_is_asked_for_and_without_laplace_torch_is_one_line_before_anything_trains(
        data_root, tmp_path, monkeypatch, capsys):
    assert UCIMethod.LAPLACE not in DEFAULT_METHODS and UCIConfig().methods == list(DEFAULT_METHODS)
    monkeypatch.setitem(sys.modules, "laplace", None)  # as where laplace-torch is not installed
    with pytest.raises(MissingExtra) as err:
        smoke_cfg(data_root, tmp_path / "o", methods=["bbb", "laplace"])
    assert "\n" not in str(err.value) and "--methods laplace" in str(err.value) and "[laplace]" in str(err.value)
    rc, _, stderr = run_main(capsys, "reproduce", "uci", "--methods", "laplace", "--budget", "smoke",
                             "--datasets", "yacht", "--data-dir", str(data_root), "--out", str(tmp_path / "c"))
    assert rc != 0 and len(stderr.strip().splitlines()) == 1 and "[laplace]" in stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "o").exists()
    smoke_cfg(data_root, tmp_path / "r", methods=["laplace"], report_only=True)  # the tables need no laplace-torch


def test_the_training_command_names_the_laplace_when_it_trained():
    config = json.loads(json.dumps(UCIConfig(out="o", datasets=["yacht"]).__dict__, default=lambda v: v.value))
    assert "--methods" not in (R.training_command(config, ["yacht"]) or "")
    with_laplace = {**config, "methods": [*config["methods"], "laplace"]}
    assert "--methods bbb,mc_dropout,deep_ensemble,laplace" in (R.training_command(with_laplace, ["yacht"]) or "")


@needs_laplace
def test_the_laplace_regressor_is_the_map_network_and_its_predictive_adds_the_noise():
    torch.manual_seed(0)
    x, y = torch.randn(2, 40, 3), torch.randn(2, 40)
    model = M.build_regressor(LAPLACE, LAPLACE_GRID, 3, 8)
    assert isinstance(model, M.LaplaceRegressor) and model.draw(None, 0, 0, 1, 40) is None  # type: ignore[arg-type]
    for j in range(2):  # a member as a torch.nn network computes what the population does
        with torch.no_grad():
            assert torch.allclose(model.member(j)(x[j])[:, 0], model.forward(x)[j], atol=1e-6)
    direct = sum(((model.member(j)(x[j])[:, 0] - y[j]) ** 2).mean()
                 + 1e-4 / 80 * sum(p.pow(2).sum() for p in (model.member(j)[0].weight, model.member(j)[2].weight))
                 for j in range(2))
    assert model.loss(x, y, 40).item() == pytest.approx(direct.item(), rel=1e-5)
    with pytest.raises(ValueError, match="prepare"):
        model.predict(x, 10)
    model.prepare(x, y)
    means, sds = model.predict(x[:, :5], 10)
    assert means.shape == sds.shape == (1, 2, 5) and means.dtype == torch.float64
    fitted = model.fitted()
    assert len(fitted["prior_precision"]) == len(fitted["sigma_noise"]) == 2
    assert all(0 < p < math.inf for p in fitted["prior_precision"])
    for j, s in enumerate(fitted["sigma_noise"]):
        assert (sds[0, j] > s * (1 - 1e-6)).all()  # the network's variance plus the noise's


@needs_laplace
def test_the_laplace_fits_on_the_fitting_rows_only(data_root, tmp_path, monkeypatch):
    """In validation the Laplace (its curvature, prior precision and noise) sees the 80% of a
    split's training rows that the network fits, never the 20% that score it."""
    seen = []
    real = M.LaplaceRegressor.prepare

    def spy(self, x_fit, y_fit):
        seen.append((x_fit.shape[1], y_fit.shape[1]))
        real(self, x_fit, y_fit)

    monkeypatch.setattr(M.LaplaceRegressor, "prepare", spy)
    d = load_uci("yacht", data_root, dtype=torch.float64)
    cfg = smoke_cfg(data_root, tmp_path / "o")
    job = TR.Job("yacht", LAPLACE, Phase.VALIDATION, ((0, 0), (1, 1)), schedule_for(54, "smoke"))
    (tmp_path / "j").mkdir()
    result = TR.run_job(job, d, cfg, tmp_path / "j")
    jd = TR.job_data(d, (0, 1), Phase.VALIDATION)
    fit_rows = jd.x_fit.shape[1]
    assert fit_rows + jd.x_eval.shape[1] == int(0.9 * N_ROWS)
    assert seen and all(s == (fit_rows, fit_rows) for s in seen)
    assert len(seen) == len(result["epochs"])  # once per scoring epoch
    assert result["noise_scales"] == list(NOISE_SCALES)  # multipliers of the marginal likelihood's noise sd
    for sc in result["scores"]:
        assert len(sc["prior_precision"]) == len(sc["sigma_noise"]) == 2
        assert all(0 < v < math.inf for v in sc["prior_precision"] + sc["sigma_noise"])


@needs_laplace
def test_a_laplace_row_beside_the_others_changes_none_of_their_numbers(data_root, tmp_path):
    alone = tmp_path / "alone"
    run_uci(smoke_cfg(data_root, alone, methods=["mc_dropout"]))
    both = tmp_path / "both"
    res = run_uci(smoke_cfg(data_root, both, methods=["mc_dropout", "laplace"]))
    rows = read_csv(both / "splits.csv")
    assert [r for r in rows if r["method"] == "mc_dropout"] == read_csv(alone / "splits.csv")
    laplace = [r for r in rows if r["method"] == "laplace"]
    assert len(laplace) == 3 and all(float(r["noise_scale"]) in NOISE_SCALES and r["variant"] == "laplace"
                                     for r in laplace)
    assert all(math.isfinite(float(r["ll"])) and float(r["rmse"]) > 0 for r in laplace)
    assert {r["setting"] for r in laplace} <= {Setting(1e-3).label(), Setting(3e-3).label()}
    assert [r["method"] for r in res["method_rows"]] == ["mc_dropout", "laplace"]
    md = (both / "table.md").read_text()
    assert "last-layer Laplace (ours)" in md and "datasets_vs_laplace" not in md  # BBB did not run
    assert "last-layer Laplace (ours)" in md.split("worker-min")[1].splitlines()[0]  # its worker-minutes
