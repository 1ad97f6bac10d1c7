"""bench/bench_population.py at tiny sizes on the CPU (its GPU use: bench/tests/test_gpu_check.py
runs it as gpu_check.py's child): both systems through the fused engine, its files, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench_population.py"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BBB_COMPILE": "0"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_the_dry_run_times_both_systems_and_writes_json_and_markdown(tmp_path):
    r = _run("--dry-run", "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "population-cpu-2x16-k3.json").read_text())
    assert res["members"] == 3 and res["width"] == 16 and res["dry_run"] is True
    for key in ("one", "population"):
        assert res[key]["fused"] is True and res[key]["step_s"] > 0
    assert res["ratio"] == res["population"]["step_s"] / res["one"]["step_s"]
    md = (tmp_path / "population-cpu-2x16-k3.md").read_text()
    assert "population of 3 (one Engine)" in md and "networks in one network's time" in md


def test_bad_input_is_one_line(tmp_path):
    r = _run("--members", "0", cwd=tmp_path)
    assert r.returncode == 2 and "--members must be at least 1" in r.stderr and "Traceback" not in r.stderr


def test_the_grid_times_a_prior_and_learning_rate_per_member(tmp_path):
    r = _run("--dry-run", "--grid", "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "population-cpu-2x16-k3-grid.json").read_text())
    assert res["grid"]["fused"] is True and res["grid_ratio"] == res["grid"]["step_s"] / res["population"]["step_s"]
    assert "as a grid (a prior and learning rate each)" in (tmp_path / "population-cpu-2x16-k3-grid.md").read_text()
