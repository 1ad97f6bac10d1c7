"""Smoke test of the Bayesian-LoRA cost bench (bench/bench_lora.py): the tensor-memory count on
known allocations, and one system of each kind measured in process at the tiny size."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

BENCH = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bbb_bench_lora", BENCH / "bench_lora.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bbb_bench_lora"] = mod
    spec.loader.exec_module(mod)
    return mod


bl = _load()


def test_tensor_memory_counts_live_storages_and_their_peak():
    seed = torch.zeros(1024)  # 4 KiB alive before
    with bl._tensor_memory_mode()([seed]) as mem:
        a = torch.ones(256, 1024)  # 1 MiB
        b = a * 2  # another MiB: the peak holds both
        del a, b
        c = torch.ones(10)
        del c
    assert mem.base == 4096
    assert mem.peak >= 4096 + 2 * 2**20
    assert mem.peak < 4096 + 2 * 2**20 + 4096  # nothing counted twice
    assert mem.current <= 4096 + 40  # the freed storages left the count


def test_tiny_systems_measure(tmp_path):
    ns = argparse.Namespace(device="cpu", threads=1, layers=1, width=32, vocab=100, rank=2, batch=2, seq=8,
                            steps=1, repeats=1, warmup=1, samples=[2])
    lora = bl.measure("lora", ns)
    bayes = bl.measure("bayes_a", ns)
    assert lora["trainable"] > 0 and bayes["trainable"] > lora["trainable"]  # + sigma of A
    assert bayes["peak_bytes"] > 0 and lora["peak_bytes"] > 0
    assert set(bayes["predict"]) == {"mean", "k2"} and set(lora["predict"]) == {"forward"}
    text = bl._markdown([lora, bayes], {"command": "x", "device": "cpu", "machine": "m", "torch": "t", "threads": 1,
                                        "batch": 2, "seq": 8})
    assert "| bayes_a |" in text and "x |" in text
