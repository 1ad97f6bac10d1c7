"""Smoke test of the beyond-MLP speed bench (bench/bench_networks.py): its smallest mode, in
process (eager engine, one step, every network at its tiny size: the BERT-style encoder and the
ResNet-18 of issue 53 included), then the JSON's keys and the Markdown; two alternating rounds
merged; one child process."""

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
    assert nb.main(["--quick", "--tiny", "--in-process", "--no-compile", "--threads", "1", "--steps", "1",
                    "--out", str(tmp_path)]) == 0
    assert torch.get_num_threads() == threads  # the in-process runs put the thread count back
    d = json.loads((tmp_path / "networks-quick.json").read_text())
    assert set(d) == {"meta", "table", "targets", "rows"}
    meta = d["meta"]
    for key in ("command", "cpu", "threads", "torch", "bbb", "bayesian_torch", "steps", "repeats", "warmup",
                "archs", "systems", "wall_seconds"):
        assert key in meta, key
    assert meta["archs"] == list(nb.ARCHS) and meta["systems"] == list(nb.SYSTEMS) and meta["threads"] == 1
    assert {"bert", "resnet18"} <= set(nb.ARCHS) and {"bbb", "bbb-optim", "bayesian-torch"} <= set(nb.SYSTEMS)
    assert meta["tiny"] and set(meta["batches"].values()) == {4} and meta["rounds"] == 1
    assert "--quick" in meta["command"]
    assert len(d["rows"]) == len(nb.ARCHS) * len(nb.SYSTEMS)
    bt = importlib.util.find_spec("bayesian_torch") is not None
    hf = importlib.util.find_spec("transformers") is not None
    for r in d["rows"]:
        if (r["system"] == "bayesian-torch" and not bt) or (r["arch"] == "bert" and not hf):
            assert r["status"] == "not installed"
            continue
        if r["system"] == "bayesian-torch" and r["arch"] == "transformer":
            assert r["status"] == "does not convert" and "dnn_to_bnn" in r["detail"]
            continue
        assert r["status"] == "ok", r
        assert r["steps_per_s"] > 0 and len(r["steps_per_s_all"]) == 1 and r["threads"] == 1 and r["batch"] == 4
        if r["system"] == "bayesian-torch" and r.get("partial"):  # BERT: its embeddings stay deterministic
            assert r["arch"] == "bert" and "partial" in r["detail"]
        elif r["system"] != "deterministic":
            assert r["bayesian_share"] > 0.95, r
        if r["system"] in ("bbb", "bbb-mixture"):
            assert r["engine"]["fused"] and not r["engine"]["compiled"]  # --no-compile
        if r["system"] == "bbb-optim":
            assert "engine" not in r and r["optimizer"].startswith("torch.optim.Adam")
    assert [e["arch"] for e in d["table"]] == list(nb.ARCHS)
    for e in d["table"]:
        assert set(e["steps_per_s"]) == set(nb.SYSTEMS)
        if e["arch"] == "bert" and not hf:
            continue
        assert e["bbb_x_deterministic"] > 0 and e["bbb-mixture_x_deterministic"] > 0
    targets = {t["target"]: t for t in d["targets"]}
    for arch in ("lenet", "bert", "resnet18") if hf else ("lenet", "resnet18"):
        cnn = targets[f"{arch}: bbb step time <= 1.3x the deterministic step"]
        assert cnn["measured"] > 0 and cnn["met"] in (True, False)
    assert all(e["bbb-optim_x_deterministic"] > 0 for e in d["table"] if hf or e["arch"] != "bert")
    peer = targets["transformer: bbb steps/s >= 2x bayesian-torch's"]
    assert peer["met"] is None if bt else peer["met"] is False
    md = (tmp_path / "networks-quick.md").read_text()
    assert "## Targets" in md and "| lenet | 4 |" in md and "| resnet18 | 4 |" in md and "| bert | 4 |" in md
    assert "bench/bench_networks.py --quick" in capsys.readouterr().out


def test_a_child_process_measures_one_row():
    spec = {"arch": "lenet", "system": "deterministic", "batch": 16, "threads": 1, "device": "cpu", "steps": 1,
            "repeats": 1, "warmup": 1}
    r = nb.run_child(spec, timeout=120)
    assert r["status"] == "ok" and r["arch"] == "lenet" and r["steps_per_s"] > 0


def test_unknown_names_are_refused():
    with pytest.raises(SystemExit, match="unknown system"):
        nb.main(["--systems", "nope", "--in-process"])


def test_rounds_alternate_the_systems_and_report_their_median(monkeypatch, tmp_path):
    order = []

    def fake(spec, timeout):
        order.append(spec["system"])
        rates = {"deterministic": [10.0, 30.0, 20.0], "bbb": [5.0, 6.0, 4.0]}[spec["system"]]
        rate = rates[order.count(spec["system"]) - 1]
        return {"arch": spec["arch"], "system": spec["system"], "status": "ok", "steps_per_s": rate,
                "ms_per_step": 1e3 / rate, "steps_per_s_all": [rate], "batch": spec["batch"]}

    monkeypatch.setattr(nb, "run_in_process", fake)
    assert nb.main(["--archs", "lenet", "--systems", "deterministic,bbb", "--rounds", "3", "--in-process",
                    "--out", str(tmp_path), "--stem", "r"]) == 0
    assert order == ["deterministic", "bbb", "bbb", "deterministic", "deterministic", "bbb"]
    d = json.loads((tmp_path / "r.json").read_text())
    rows = {r["system"]: r for r in d["rows"]}
    assert rows["deterministic"]["steps_per_s"] == 20.0 and rows["bbb"]["steps_per_s"] == 5.0
    assert rows["bbb"]["steps_per_s_rounds"] == [5.0, 6.0, 4.0] and rows["bbb"]["rounds"] == 3
    assert d["table"][0]["bbb_x_deterministic"] == 4.0
    assert "3 alternating rounds" in (tmp_path / "r.md").read_text()


def test_the_tiny_networks_have_the_layers_of_the_full_ones():
    import torch.nn as nn

    full, tiny = nb.build_network("resnet18"), nb.build_network("resnet18", tiny=True)
    convs = [sum(isinstance(m, nn.Conv2d) for m in n.modules()) for n in (full, tiny)]
    assert convs == [20, 20]  # 1 stem + 16 in the blocks + 3 shortcuts: ResNet-18
    assert 11e6 < sum(p.numel() for p in full.parameters()) < 11.3e6
    x, y = nb.make_batches("resnet18", 2, "cpu", n=1, tiny=True)[0]
    assert tiny(x).shape == (2, 10) and y.shape == (2,)
    pytest.importorskip("transformers")
    bert = nb.build_network("bert", tiny=True)
    x, _ = nb.make_batches("bert", 2, "cpu", n=1, tiny=True)[0]
    assert bert(x).shape == (2, 10) and type(bert.bert).__name__ == "BertForSequenceClassification"
