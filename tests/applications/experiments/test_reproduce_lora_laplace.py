"""``bbb reproduce lora --methods laplace`` (issue 75, item 3): Laplace-LoRA, the ``map`` method's
network at ``map``'s chosen prior, then a KFAC Laplace over every adapter parameter (laplace-torch,
subset "all"), its prior precision by the marginal likelihood, the probit predictive. The laplace
job reuses the map job's adapters (stored beside its file) and trains nothing; without them it
trains the same network by map's recipe. Skipped without peft or laplace-torch, but for the lines
that say laplace-torch is missing."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("peft")

from bbb.errors import MissingExtra  # noqa: E402
from bbb.experiments.lora import runner as RU  # noqa: E402
from bbb.experiments.lora import settings as LS  # noqa: E402
from bbb.experiments.lora.backbones import TaskData, build_backbone  # noqa: E402
from bbb.experiments.lora.settings import (  # noqa: E402
    MAP_GRID,
    SCHEDULES,
    Arch,
    LoraBudget,
    LoraExpConfig,
    LoraMethod,
    Phase,
    Task,
)
from bbb.experiments.lora.train import ADAPTERS_KEY, ADAPTERS_SUFFIX, Job, run_job  # noqa: E402
from bbb.laplace import laplace_available  # noqa: E402
from faultkit import fake_mnist  # noqa: E402
from testkit import run_main  # noqa: E402

needs_laplace = pytest.mark.skipif(not laplace_available(), reason="laplace-torch is not installed")


def _data(per_class: int = 6) -> TaskData:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(5).repeat_interleave(per_class)
    x = torch.randn(len(y), 32 * 7 * 7, generator=g) + 2.0 * torch.nn.functional.one_hot(y, 32 * 7 * 7).float()
    return TaskData(pool=x, pool_y=y, test=x[:10], test_y=y[:10], ood={"mnist0-4": x[10:20]})


def test_laplace_takes_maps_choice_and_has_no_validation_of_its_own():
    cfg = LoraExpConfig(out="x", archs=(Arch.CNN,), tasks=(Task.DIGITS,), shots=(5,), methods=(LoraMethod.LAPLACE,),
                        budget=LoraBudget.SMOKE)
    val = RU.plan(cfg, Phase.VALIDATION)
    assert val and {j.method for j in val} == {LoraMethod.MAP} and val[0].settings == MAP_GRID  # map's grid, run for it
    assert RU.plan(cfg, Phase.TEST, {}) == []  # map's choice not made yet: no laplace job
    test = RU.plan(cfg, Phase.TEST, {("cnn", "digits", 5, "map"): MAP_GRID[2]})
    assert [(j.method, j.settings) for j in test] == [(LoraMethod.LAPLACE, (MAP_GRID[2],))]
    # with map asked for too, a laplace job trains nothing (it reuses map's network)
    both = LoraExpConfig(out="x", methods=(LoraMethod.MAP, LoraMethod.LAPLACE))
    assert RU._steps(test[0], 300, both) == 0 and RU._steps(test[0], 300, cfg) == 300


@needs_laplace
def test_the_laplace_job_is_of_maps_network_reused_or_trained_alike():
    """The laplace job's MAP network is the map job's: its adapters given, it trains no step; without
    them, trained by map's recipe, the same network (its mean scores: the map job's exactly)."""
    bb, data = build_backbone(Arch.CNN), _data()
    sched = SCHEDULES[LoraBudget.SMOKE]
    setting = MAP_GRID[1]
    m = run_job(Job(Arch.CNN, Task.DIGITS, 5, 0, LoraMethod.MAP, Phase.TEST, (setting,)), bb, data, sched, 4, 8,
                lambda n: None)
    adapters = m.pop(ADAPTERS_KEY)
    assert adapters and all("lora_" in n for n in adapters)
    map_row = m["settings"][setting.label()]
    job = Job(Arch.CNN, Task.DIGITS, 5, 0, LoraMethod.LAPLACE, Phase.TEST, (setting,))
    steps: list[int] = []
    reused = run_job(job, bb, data, sched, 4, 8, steps.append, adapters)
    assert steps == [] and ADAPTERS_KEY not in reused  # nothing trained, nothing to store
    trained = run_job(job, bb, data, sched, 4, 8, steps.append)
    assert sum(steps) == sched.steps
    for r, was_reused in ((reused, True), (trained, False)):
        row = r["settings"][setting.label()]
        assert row["map_reused"] is was_reused and row["prior_sigma"] == setting.prior_sigma
        for k in ("acc", "nll", "ece"):  # the Laplace's mean network is the map job's network
            assert row[f"mean_{k}"] == pytest.approx(map_row[k], abs=1e-12)
        assert row["laplace_params"] == sum(a.numel() for a in adapters.values())  # every adapter parameter
        assert row["prior_precision"] > 0 and row["map_prior_precision"] == pytest.approx(1 / setting.prior_sigma ** 2)
        assert row["auroc_mi_mnist0-4"] is None and 0 <= row["auroc_entropy_mnist0-4"] <= 1  # one predictive
        assert row["curve"] == [] and 0 <= row["acc"] <= 1 and row["nll"] > 0
    assert reused["settings"][setting.label()]["nll"] == pytest.approx(trained["settings"][setting.label()]["nll"])


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = fake_mnist(tmp_path_factory.mktemp("data"), n_train=300, n_test=100)
    shutil.copytree(root / "mnist", root / "fashion-mnist")
    return root


@needs_laplace
def test_smoke_run_has_a_laplace_row_on_the_map_jobs_networks(fake_data, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    out = tmp_path / "lora"
    argv = ["reproduce", "lora", "--budget", "smoke", "--archs", "cnn", "--tasks", "digits", "--shots", "3",
            "--methods", "map", "laplace", "--out", str(out), "--data-dir", str(fake_data), "--quiet"]
    code, stdout, _ = run_main(capsys, *argv)
    assert code == 0, stdout
    res = json.loads((out / "results.json").read_text())
    methods = {g["method"]: g for g in res["methods"]}
    assert set(methods) == {"map", "laplace"} and methods["laplace"]["setting"] == methods["map"]["setting"]
    lap = methods["laplace"]
    assert lap["map_reused"] == 1.0 and lap["prior_precision"] > 0 and lap["mean_nll"] == pytest.approx(
        methods["map"]["nll"], abs=1e-12)
    stored = out / "jobs" / f"cnn-digits-k3-s0-map-test{ADAPTERS_SUFFIX}"
    assert torch.load(stored, weights_only=True)["setting"] == methods["map"]["setting"]
    for s in MAP_GRID:  # the stored network is reused at map's setting only (a choice made again: trained anew)
        found = RU._adapters(out / "jobs", Job(Arch.CNN, Task.DIGITS, 3, 0, LoraMethod.LAPLACE, Phase.TEST, (s,)))
        assert (found is not None) is (s.label() == methods["map"]["setting"])
    assert "| laplace |" in (out / "table.md").read_text()
    assert "map" in (out / "sweep.csv").read_text() and "laplace" not in (out / "sweep.csv").read_text()


def test_without_laplace_torch_the_method_is_one_line_or_left_out(monkeypatch, capsys, tmp_path):
    import bbb.laplace as L

    def missing():
        raise MissingExtra("last-layer Laplace needs laplace-torch", "laplace")

    monkeypatch.setattr(L, "require_laplace", missing)
    assert LoraMethod.LAPLACE not in LS.default_methods() and LoraMethod.MAP in LS.default_methods()
    assert LoraMethod.LAPLACE not in LoraExpConfig(out="x").methods
    with pytest.raises(MissingExtra, match="leave laplace out of --methods") as e:
        LoraExpConfig(out="x", methods=(LoraMethod.LAPLACE,)).check()
    assert "\n" not in str(e.value) and "pip install" in str(e.value)
    rc, _, err = run_main(capsys, "reproduce", "lora", "--methods", "laplace", "--out", str(tmp_path / "o"))
    assert rc != 0 and "laplace-torch" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
