"""Smoke test of the per-weight profile of the Bayesian step (bench/bench_kernel.py): a tiny width,
one step; every system's phases and every kernel part in the JSON and the Markdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]


def test_a_tiny_run_times_every_phase_and_part(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_kernel.py"), "--widths", "8", "--threads", "1",
                           "--steps", "1", "--warmup", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "BBB_COMPILE_NOTICE": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "kernel.json").read_text())
    r = res["widths"]["8"]
    assert r["weights"] == 784 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10
    assert set(r["steps"]) == {"deterministic", "bbb paper (mixture, MC KL)", "bbb Gaussian (closed-form KL)",
                               "bbb.IVON (its forward draws the sample)"}
    assert all(p[k] > 0 for p in r["steps"].values() for k in ("forward", "backward", "step", "total"))
    assert len(r["parts"]) == 10 and all(v > 0 for v in r["parts"].values())
    md = (tmp_path / "kernel.md").read_text()
    assert "| deterministic |" in md and "ns/weight" in md and "--out DIR" in md


def _variant(name: str, prior: str) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / "kernel_variants.py"), name, "--width", "8", "--threads", "1",
                           "--prior", prior], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "BBB_COMPILE_NOTICE": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.rsplit("sum of every mu after 45 steps", 1)[1].strip()


def test_recomputing_sigma_in_the_update_trains_to_the_same_numbers():
    """kernel_variants.py's recompute_sigma is a timing of the same step, not of another one: here
    with the Gaussian prior's closed-form KL; with the paper's prior (scale mixture, Monte Carlo KL)
    the GPU check's dry run asserts the same (bench/tests/test_gpu_check.py, ``same_numbers``)."""
    assert _variant("recompute_sigma", "gauss") == _variant("base", "gauss")
