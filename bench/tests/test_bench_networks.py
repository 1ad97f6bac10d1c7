"""Smoke test of the beyond-MLP speed bench (bench/bench_networks.py): its smallest mode, in
process (eager engine, one step), then the JSON's keys and the Markdown; one child process."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bbb_bench_networks", BENCH / "bench_networks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bbb_bench_networks"] = mod
    spec.loader.exec_module(mod)
    return mod


nb = _load()


def test_quick_in_process_run_writes_every_row_and_the_targets(tmp_path, capsys):
    threads = torch.get_num_threads()
    assert nb.main(["--quick", "--in-process", "--no-compile", "--threads", "1", "--steps", "1",
                    "--out", str(tmp_path)]) == 0
    assert torch.get_num_threads() == threads  # the in-process runs put the thread count back
    d = json.loads((tmp_path / "networks-quick.json").read_text())
    assert set(d) == {"meta", "table", "targets", "rows"}
    meta = d["meta"]
    for key in ("command", "cpu", "threads", "torch", "bbb", "bayesian_torch", "steps", "repeats", "warmup",
                "archs", "systems", "wall_seconds"):
        assert key in meta, key
    assert meta["archs"] == list(nb.ARCHS) and meta["systems"] == list(nb.SYSTEMS) and meta["threads"] == 1
    assert "--quick" in meta["command"]
    assert len(d["rows"]) == len(nb.ARCHS) * len(nb.SYSTEMS)
    bt = importlib.util.find_spec("bayesian_torch") is not None
    for r in d["rows"]:
        if r["system"] == "bayesian-torch" and not bt:
            assert r["status"] == "not installed"
            continue
        if r["system"] == "bayesian-torch" and r["arch"] == "transformer":
            assert r["status"] == "does not convert" and "dnn_to_bnn" in r["detail"]
            continue
        assert r["status"] == "ok", r
        assert r["steps_per_s"] > 0 and len(r["steps_per_s_all"]) == 1 and r["threads"] == 1
        if r["system"] != "deterministic":
            assert r["bayesian_share"] > 0.95
        if r["system"].startswith("bbb"):
            assert r["engine"]["fused"] and not r["engine"]["compiled"]  # --no-compile
    assert [e["arch"] for e in d["table"]] == list(nb.ARCHS)
    for e in d["table"]:
        assert set(e["steps_per_s"]) == set(nb.SYSTEMS)
        assert e["bbb_x_deterministic"] > 0 and e["bbb-mixture_x_deterministic"] > 0
    targets = {t["target"]: t for t in d["targets"]}
    cnn = targets["lenet: bbb step time <= 1.3x the deterministic step"]
    assert cnn["measured"] > 0 and cnn["met"] in (True, False)
    peer = targets["transformer: bbb steps/s >= 2x bayesian-torch's"]
    assert peer["met"] is None if bt else peer["met"] is False
    md = (tmp_path / "networks-quick.md").read_text()
    assert "## Targets" in md and "| lenet | 128 |" in md
    assert "bench/bench_networks.py --quick" in capsys.readouterr().out


def test_a_child_process_measures_one_row():
    spec = {"arch": "lenet", "system": "deterministic", "batch": 16, "threads": 1, "device": "cpu", "steps": 1,
            "repeats": 1, "warmup": 1}
    r = nb.run_child(spec, timeout=120)
    assert r["status"] == "ok" and r["arch"] == "lenet" and r["steps_per_s"] > 0


def test_unknown_names_are_refused():
    with pytest.raises(SystemExit, match="unknown system"):
        nb.main(["--systems", "nope", "--in-process"])
