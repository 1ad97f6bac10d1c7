"""Smoke tests of the side-by-side bench (bench/run.py): adapters, child jobs, report writer.

Tiny widths and synthetic data only; a peer library that is not installed is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load_run():
    spec = importlib.util.spec_from_file_location("bbb_bench_run", BENCH / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bbb_bench_run"] = mod
    spec.loader.exec_module(mod)
    return mod


run = _load_run()
from peers import NotInstalled, Pair, System, all_systems  # noqa: E402  (bench/ is on sys.path now)

PEER_MODULES = {
    "bayesian-torch-reparam": "bayesian_torch.layers.variational_layers.linear_variational",
    "bayesian-torch-flipout": "bayesian_torch.layers.flipout_layers.linear_flipout",
    "torchbnn": "torchbnn",
    "blitz": "blitz.modules",
    "pyro-autonormal": "pyro.infer.autoguide",
    "pyro-hiddenlayer": "pyro.contrib.bnn",
}
OURS = ["mlp", "bbb-paper", "bbb-gauss", "bbb-flipout", "bbb-local"]


@pytest.fixture
def tiny_data(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(600, 784, generator=g)
    y = (x[:, :10].argmax(1))  # learnable labels
    xt = torch.rand(200, 784, generator=g)
    data = {"train_x": x, "train_y": y, "val_x": x[:100], "val_y": y[:100],
            "test_x": xt, "test_y": xt[:, :10].argmax(1)}
    path = tmp_path / "data.pt"
    torch.save(data, path)
    return str(path)


def _exercise(system: System) -> None:
    torch.manual_seed(0)
    system.build(8, torch.device("cpu"))
    x, y = torch.rand(16, 784), torch.randint(0, 10, (16,))
    params = [p for p in system.model.parameters()] if system.model is not None else []
    before = [p.detach().clone() for p in params]
    system.step(x, y, 0)
    system.step(x, y, 1)
    if params:
        assert any(not torch.equal(a, p) for a, p in zip(before, params)), "a step must change the parameters"
    mean = system.predict_mean(x)
    assert mean.shape == (16, 10) and torch.isfinite(mean).all()
    if system.pair is not Pair.FLOOR:
        k = system.predict_samples(x, 3)
        assert k.shape == (3, 16, 10) and torch.isfinite(k).all()
        assert not torch.equal(k[0], k[1]), "sampled networks must differ"


@pytest.mark.parametrize("name", OURS)
def test_our_adapters_train_and_predict(name):
    _exercise(all_systems()[name])


@pytest.mark.parametrize("name", sorted(PEER_MODULES))
def test_peer_adapters_train_and_predict(name):
    pytest.importorskip(PEER_MODULES[name].split(".")[0])
    try:
        _exercise(all_systems()[name])
    except NotInstalled as e:  # the package is there but the part we need is not importable
        pytest.skip(str(e))


def test_select_names_and_groups():
    assert run.select("mlp,blitz") == ["mlp", "blitz"]
    paper = run.select("paper")
    assert "bbb-paper" in paper and "blitz" in paper and "mlp" not in paper
    assert run.select(None) == list(all_systems())
    with pytest.raises(SystemExit, match="unknown system"):
        run.select("nope")


def _spec(data, system, **kw):
    return {"kind": "speed", "system": system, "width": 8, "threads": 1, "device": "cpu", "data": data,
            "batch": 32, "steps": 3, "repeats": 2, "warmup": 1, "eval_images": 64, **kw}


def test_child_speed_measures_steps_memory_and_evaluation(tiny_data):
    r = run.child_speed(_spec(tiny_data, "bbb-paper", profile=2))
    assert r["status"] == "ok" and r["repeats"] == 2 and len(r["steps_per_s_all"]) == 2
    assert r["steps_per_s"] > 0 and r["peak_rss_mb"] >= r["rss_before_mb"] > 0
    assert r["eval_mean_images_per_s"] > 0 and r["eval_k_images_per_s"] > 0 and r["eval_images"] == 64
    assert 0.0 <= r["test_accuracy_mean"] <= 1.0
    assert r["profile"] and all(p["ms_per_step"] >= 0 for p in r["profile"])


def test_child_reports_a_missing_peer_instead_of_crashing(tiny_data, monkeypatch):
    class Missing(System):
        def build(self, width, device):
            raise NotInstalled("nopeer: ModuleNotFoundError")

    monkeypatch.setattr(run, "all_systems", lambda: {"nopeer": Missing("nopeer", Pair.GAUSS, "nopeer")})
    r = run.child_speed(_spec(tiny_data, "nopeer"))
    assert r["status"] == "not installed" and "nopeer" in r["detail"]


def test_run_child_runs_one_job_in_a_subprocess(tiny_data):
    r = run.run_child(_spec(tiny_data, "mlp", steps=2, repeats=1), timeout=300)
    assert r["status"] == "ok" and r["system"] == "mlp" and r["steps_per_s"] > 0
    bad = run.run_child(_spec("/nonexistent/data.pt", "mlp"), timeout=300)
    assert bad["status"] == "error" and "FileNotFoundError" in bad["detail"]


def test_time_to_accuracy_for_ours_and_a_peer_style_loop(tiny_data):
    ours = run.child_tta({"kind": "tta", "system": "bbb-paper", "width": 8, "threads": 1, "device": "cpu",
                          "data": tiny_data, "batch": 64, "target": 0.0, "max_epochs": 2})
    assert ours["status"] == "ok" and ours["reached"]["epoch"] == 1  # target 0: reached after epoch 1
    assert ours["recipe"]["prior"] == "mixture" and ours["curve"][0]["seconds"] > 0
    system = all_systems()["mlp"]
    system.build(8, torch.device("cpu"))
    data = torch.load(tiny_data, weights_only=True)
    peer = run._tta_peer({"batch": 64, "max_epochs": 2, "target": 1.01}, system, data, torch.device("cpu"))
    assert peer["reached"] is None and len(peer["curve"]) == 2  # unreachable target: runs the cap
    assert peer["curve"][1]["seconds"] > peer["curve"][0]["seconds"]


def _row(system, pair, width, sps, **kw):
    return {"system": system, "pair": pair, "library": system, "version": "1", "width": width,
            "status": "ok", "steps_per_s": sps, "peak_rss_mb": 500.0, "eval_mean_images_per_s": 1000.0,
            **kw}


def test_summary_ratios_targets_and_report(tmp_path):
    rows = [_row("mlp", "floor", 400, 100.0, eval_mean_images_per_s=10_000.0),
            _row("bbb-paper", "paper", 400, 80.0, eval_k_images_per_s=900.0),
            _row("blitz", "paper", 400, 20.0),
            _row("torchbnn", "gauss", 400, 40.0),
            {"system": "pyro-autonormal", "pair": "gauss", "width": 400, "status": "not installed",
             "detail": "pyro: ModuleNotFoundError"}]
    tta = [{"system": "bbb-paper", "width": 400, "status": "ok", "curve": [{"epoch": 1, "seconds": 10.0,
            "test_accuracy": 0.981}], "reached": {"epoch": 1, "seconds": 10.0}},
           {"system": "torchbnn", "width": 400, "status": "ok", "curve": [{"epoch": 1, "seconds": 30.0,
            "test_accuracy": 0.97}, {"epoch": 2, "seconds": 60.0, "test_accuracy": 0.982}],
            "reached": {"epoch": 2, "seconds": 60.0}}]
    meta = {"date": "d", "command": "bench/run.py", "cpu": "cpu", "cpu_count": 2, "threads": 2, "device": "cpu",
            "torch": "t", "python": "p", "data": "mnist", "batch": 128, "steps": 30, "repeats": 3, "warmup": 5}
    s = run.summarise(rows, tta, meta)
    paper = next(r for r in s["rows"] if r["system"] == "bbb-paper")
    assert math.isclose(paper["x_floor"], 100.0 / 80.0)  # step time / floor step time
    assert math.isclose(paper["x_fastest_peer"], 80.0 / 40.0) and paper["fastest_peer"] == "torchbnn"
    assert math.isclose(paper["seconds_per_epoch"], 391 / 80.0)
    by_name = {t["target"].split(" (")[0]: t for t in s["targets"]}
    floor_t = next(t for t in s["targets"] if "deterministic (H=400)" in t["target"])
    assert math.isclose(floor_t["measured"], 1.25) and floor_t["met"]
    peer_t = next(t for t in s["targets"] if "fastest peer" in t["target"] and "steps/s" in t["target"])
    assert math.isclose(peer_t["measured"], 2.0) and peer_t["met"]
    k_t = next(t for t in s["targets"] if "prediction" in t["target"])
    assert math.isclose(k_t["measured"], 10_000.0 / 900.0 / 10) and k_t["met"]  # 1.11 <= 1.3
    tta_t = next(t for t in s["targets"] if t["target"].startswith("time to"))
    assert math.isclose(tta_t["measured"], 10.0 / 60.0) and tta_t["met"]
    assert by_name
    j, m = run.write_report(s, tmp_path / "res", "peers")
    back = json.loads(j.read_text())
    assert back["rows"][1]["system"] == "bbb-paper" and back["targets"] == s["targets"]
    md = m.read_text()
    assert "| bbb-paper | paper |" in md and "not installed" in md and "## Targets" in md
    assert "| torchbnn | 400 | 2 | 60.0 | 0.9820 | 2 |" in md


def test_help_has_an_example(capsys):
    with pytest.raises(SystemExit) as e:
        run.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "Example:" in out and "--quick" in out and "--only" in out
