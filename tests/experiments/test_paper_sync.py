"""results/mnist-paper/sync.sh: the paper budget's finished runs travel between the working
folder (with checkpoints) and the committed results folder (without), partial runs never."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SYNC = Path(__file__).resolve().parents[2] / "results" / "mnist-paper" / "sync.sh"


def sync(verb: str, out: Path, results: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "RESULTS": str(results)}
    return subprocess.run(["bash", str(SYNC), verb], env=env, capture_output=True, text=True, timeout=60)


def make_run(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name).write_text(text)


def test_export_then_import_carries_finished_runs_only(tmp_path):
    out, results, fresh = tmp_path / "out", tmp_path / "results", tmp_path / "fresh"
    done = {"config.json": "{}", "metrics.csv": "epoch\n1\n", "summary.json": '{"epochs": 1}',
            "last.pt": "ckpt", "best.pt": "ckpt", ".lock": "123"}
    make_run(out / "runs" / "done", done)
    make_run(out / "runs" / "partial", {"config.json": "{}", "metrics.csv": "epoch\n", "last.pt": "x"})
    make_run(out / "runs" / "diverged", {"config.json": "{}", "diverged.json": '{"message": "nan"}'})
    r = sync("export", out, results)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (results / "runs").iterdir()) == ["diverged", "done"]
    assert sorted(p.name for p in (results / "runs" / "done").iterdir()) == [
        "best.pt", "config.json", "last.pt", "metrics.csv", "summary.json"]
    # a new machine: the committed files (git ignores the checkpoints) seed its working folder
    for ckpt in ("last.pt", "best.pt"):
        (results / "runs" / "done" / ckpt).unlink()
    make_run(fresh / "runs" / "done", {"config.json": "{}", "metrics.csv": "epoch\n"})  # partial there
    r = sync("import", fresh, results)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (fresh / "runs" / "done").iterdir()) == ["config.json", "metrics.csv", "summary.json"]
    assert (fresh / "runs" / "done" / "summary.json").read_text() == done["summary.json"]
    assert sorted(p.name for p in (fresh / "runs" / "diverged").iterdir()) == ["config.json", "diverged.json"]
    # a run finished at the destination is left as it is
    (out / "runs" / "done" / "summary.json").write_text('{"epochs": 2}')
    assert sync("export", out, results).returncode == 0
    assert (results / "runs" / "done" / "summary.json").read_text() == done["summary.json"]


def test_usage_error_exits_2(tmp_path):
    r = sync("both", tmp_path / "out", tmp_path / "results")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "import|export" in r.stderr
