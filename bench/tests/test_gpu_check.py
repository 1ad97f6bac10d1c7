"""The GPU check's dry run (bench/gpu_check.sh --dry-run): the same script as on a GPU machine, on
the CPU at tiny sizes, so that it works the day a GPU comes: gpu.json's keys and types, gpu.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_dry_run_writes_gpu_json_and_gpu_md(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    env.pop("BBB_DATA", None)  # the dry run makes its own data
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "gpu.json").read_text())
    import torch

    assert res["torch"] == str(torch.__version__) and res["device"].startswith("cpu")
    assert res["dry_run"] is True
    # the numbers a GPU run fills in: measured here too (tiny sizes), all but the peer's where it is absent
    for key in ("epoch_s_2x1200_paper", "ratio_vs_deterministic_2x1200", "population_ratio_k8_2x1200",
                "grid_ratio_k8_2x1200"):
        assert isinstance(res[key], float) and res[key] > 0, (key, res)
    assert res["epoch_source"].startswith("bbb train, epoch 2 of 2")
    assert res["bench"]["mlp"]["status"] == "ok" and res["bench"]["bbb-paper"]["status"] == "ok"
    peer = res["bench"]["bayesian-torch-reparam"]
    if peer["status"] == "ok":
        assert isinstance(res["speedup_vs_bayesian_torch_2x1200"], float)
    else:  # no bayesian-torch here: the field is null and the row says why
        assert peer["status"] == "not installed" and res["speedup_vs_bayesian_torch_2x1200"] is None
    # tests/cuda ran (every test skipped without CUDA): counts, not a crash
    assert isinstance(res["cuda_tests_passed"], int) and isinstance(res["cuda_tests_failed"], int)
    assert res["cuda_tests_failed"] == 0 and res["cuda_tests_skipped"] > 0
    md = (tmp_path / "gpu.md").read_text()
    assert "dry run" in md and "seconds per 2x16 epoch" in md and "`bbb-paper`" in md
    assert res["epoch_s_2x1200_paper_graph"] is None and res["epoch_graph"]["status"] == "not run: needs CUDA"
    assert res["ratio_vs_deterministic_graph_2x1200"] is None and res["population_ratio_k8_2x1200_graph"] is None
    # the population's row: both systems through the fused engine
    pop = res["population"]
    assert pop["status"] == "ok" and pop["population"]["fused"] and pop["one"]["fused"]
    assert "population of 3 under one engine" in md and pop["grid"]["fused"]
    assert "as a grid (each its own prior and learning rate)" in md
    # the engine-step variants: one run of each in the dry run (two on a GPU), the same numbers, their ratio
    kv = res["kernel_variants"]
    assert kv["status"] == "ok" and len(kv["base"]) == len(kv["recompute_sigma"]) == 1, kv
    assert kv["same_numbers"] is True and isinstance(res["kernel_recompute_sigma_ratio"], float)
    assert "recomputed / stored" in md


def _gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check_under_test", ROOT / "bench" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tests_from_reads_a_junit_files_counts_and_failing_tests(tmp_path):
    xml = tmp_path / "cuda-tests.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="4" failures="1" errors="1" skipped="1" time="12.5">'
        '<testcase classname="tests.cuda.test_a" name="test_ok"/>'
        '<testcase classname="tests.cuda.test_a" name="test_bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.cuda.test_b" name="test_err"><error message="y"/></testcase>'
        '<testcase classname="tests.cuda.test_b" name="test_skip"><skipped message="z"/></testcase>'
        '</testsuite></testsuites>')
    res = _gpu_check().read_junit(xml)
    assert (res["cuda_tests_passed"], res["cuda_tests_failed"], res["cuda_tests_skipped"]) == (1, 2, 1)
    assert res["cuda_tests_failing"] == ["tests.cuda.test_a::test_bad", "tests.cuda.test_b::test_err"]
    assert res["cuda_tests_seconds"] == 12.5


def test_tests_from_a_missing_file_is_one_line_before_anything_runs(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as e:
        _gpu_check().main(["--dry-run", "--tests-from", str(tmp_path / "none.xml"), "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--tests-from" in err and "no such file" in err and "--tests-only" in err
    assert not list(tmp_path.iterdir())
