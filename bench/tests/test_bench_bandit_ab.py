"""bench/bench_bandit_ab.py runs end to end: it builds one bandit worker's population from this
tree and from a copy of it (the reference), times both and prints the ratios (it once broke
silently when the bandit package stopped exporting its internals)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
SRC = BENCH.parent / "src" / "bbb"


@pytest.mark.slow
def test_the_ab_bench_times_this_tree_against_a_copy(data_dir):
    if not (data_dir / "mushroom").exists():
        pytest.skip("UCI Mushroom not in BBB_DATA")
    # the bench's running end to end is under test, not its compile (tests/core/test_engine.py)
    env = {**os.environ, "BBB_DATA": str(data_dir), "OMP_NUM_THREADS": "1", "BBB_COMPILE": "0"}
    out = subprocess.run([sys.executable, str(BENCH / "bench_bandit_ab.py"), "--ref-src", str(SRC),
                          "--rounds", "1", "--updates", "2", "--steps", "1", "--fill", "300", "--warmup", "2"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "update: ref" in out.stdout and "new/ref" in out.stdout
