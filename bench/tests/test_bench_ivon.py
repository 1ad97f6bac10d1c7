"""Smoke test of IVON's cost bench (bench/bench_ivon.py): tiny networks, one step, every row a
child process; the JSON's rows and the Markdown's table and target line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]


def test_a_tiny_run_writes_every_row_and_the_target(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_ivon.py"), "--tiny", "--archs", "mlp400",
                           "--steps", "1", "--repeats", "1", "--warmup", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "ivon-cost.json").read_text())
    rows = {(r["arch"], r["system"]): r for r in res["rows"]}
    assert set(rows) == {(a, s) for a in ("mlp400",) for s in ("adam", "ivon", "ivon-opt", "bbb")}
    for (arch, system), r in rows.items():
        assert r["status"] in (("ok", "not installed") if system == "ivon-opt" else ("ok",)), (arch, system, r)
    assert all(e["ivon_x_adam"] > 0 for e in res["table"])
    md = (tmp_path / "ivon-cost.md").read_text()
    assert "| mlp400 | 4 |" in md and "Target (issue 73)" in md and "--out DIR" in md
