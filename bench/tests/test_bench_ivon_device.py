"""IVON's cost bench on a device (bench/bench_ivon.py --device): refused in one line where CUDA is
not; on CUDA the memory column is the GPU's peak (torch.cuda.max_memory_allocated) and the Markdown
names the GPU; the CPU's table as before. A tiny run on CUDA where there is one."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1]


def _bench_ivon():
    spec = importlib.util.spec_from_file_location("bench_ivon_under_test", BENCH / "bench_ivon.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> list[dict]:
    rates = {"adam": 100.0, "ivon": 50.0, "ivon-opt": 40.0, "bbb": 45.0}
    cuda_mb = {"adam": 10.0, "ivon": 25.0, "ivon-opt": 30.0, "bbb": 28.0}
    return [{"arch": "mlp400", "system": s, "batch": 128, "status": "ok", "steps_per_s": r, "peak_rss_mb": 1000.0,
             "peak_cuda_mb": cuda_mb[s]} for s, r in rates.items()]


def _meta(device: str) -> dict:
    meta = {"archs": ["mlp400"], "threads": 2, "steps": 30, "repeats": 3, "warmup": 5, "tiny": False,
            "torch": "2.11.0", "cpu": "x86_64", "date": "2026-01-01T00:00:00", "seconds": 12.0, "device": device,
            "command": f"python bench/bench_ivon.py --device {device} --out DIR"}
    if device == "cuda":
        meta["gpu"] = "NVIDIA H100 80GB HBM3"
    return meta


def test_on_cuda_the_memory_is_the_gpus_and_the_markdown_names_the_gpu():
    b = _bench_ivon()
    summary = b.summarise(_rows(), _meta("cuda"))
    assert summary["table"][0]["ivon_memory_x_adam"] == pytest.approx(2.5)  # 25 / 10 MB: the GPU's peaks
    md = b.markdown(summary)
    assert "NVIDIA H100 80GB HBM3 (CUDA)" in md and "torch.cuda.max_memory_allocated" in md
    assert "ivon peak GPU MB / adam's" in md and "torch thread(s), CPU" not in md


def test_on_the_cpu_the_table_is_as_before():
    b = _bench_ivon()
    summary = b.summarise(_rows(), _meta("cpu"))
    assert summary["table"][0]["ivon_memory_x_adam"] == pytest.approx(1.0)  # the process's resident memory
    md = b.markdown(summary)
    assert "x86_64, 2 torch thread(s), CPU; torch 2.11.0; 5 warm-up steps" in md
    assert "| ivon peak MB / adam's |" in md and "CUDA" not in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_refused_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_ivon.py"), "--device", "cuda", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--device cuda: CUDA is not available" in proc.stderr, proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if "error:" in ln] and not (tmp_path / "ivon-cost.json").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_a_tiny_run_on_cuda(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_ivon.py"), "--device", "cuda", "--tiny", "--archs",
                           "mlp400", "--steps", "1", "--repeats", "1", "--warmup", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "ivon-cost.json").read_text())
    assert res["meta"]["device"] == "cuda" and res["meta"]["gpu"]
    for r in res["rows"]:
        if r["status"] == "ok":
            assert r["peak_cuda_mb"] > 0, r
        else:
            assert r["system"] == "ivon-opt" and r["status"] == "not installed", r
    assert "(CUDA)" in (tmp_path / "ivon-cost.md").read_text()
