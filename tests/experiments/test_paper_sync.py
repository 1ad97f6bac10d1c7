"""results/mnist-paper/sync.sh: the paper budget's finished runs travel between the working
folder (with checkpoints) and the committed results folder (without); unfinished runs travel
only as parked copies (sync.sh park), checkpoints included."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "import|export|park" in r.stderr


def test_park_then_import_resumes_unfinished_runs_on_a_new_machine(tmp_path):
    out, results, fresh = tmp_path / "mnist-paper", tmp_path / "results", tmp_path / "new" / "mnist-paper"
    partial = {"config.json": "{}", "metrics.csv": "epoch\n1\n", "last.pt": "epoch 1", "best.pt": "epoch 1",
               ".lock": "123"}
    make_run(out / "runs" / "partial", partial)
    make_run(out / "runs" / "fresh", {"config.json": "{}"})  # started, no epoch yet: nothing to park
    make_run(out / "runs" / "done", {"config.json": "{}", "summary.json": "{}", "last.pt": "x"})
    r = sync("park", out, results)
    assert r.returncode == 0, r.stderr
    parked = results / "inflight" / "mnist-paper"
    assert sorted(p.name for p in parked.iterdir()) == ["partial"]
    assert sorted(p.name for p in (parked / "partial").iterdir()) == [
        "best.pt", "config.json", "last.pt", "metrics.csv"]
    assert r.stdout == "park: partial\n"
    assert sync("park", out, results).stdout == ""  # unchanged since: not copied again
    (out / "runs" / "partial" / "last.pt").write_text("epoch 2")
    assert sync("park", out, results).stdout == "park: partial\n"
    assert (parked / "partial" / "last.pt").read_text() == "epoch 2"
    # a new machine: import brings the parked run back whole, so that it resumes
    r = sync("import", fresh, results)
    assert r.returncode == 0, r.stderr
    assert "import: partial (parked)" in r.stdout
    assert (fresh / "runs" / "partial" / "last.pt").read_text() == "epoch 2"
    assert not (fresh / "runs" / "partial" / ".lock").exists()
    # ... but never over a run this machine holds (further on than the parked copy)
    (fresh / "runs" / "partial" / "last.pt").write_text("epoch 3")
    assert "partial" not in sync("import", fresh, results).stdout
    assert (fresh / "runs" / "partial" / "last.pt").read_text() == "epoch 3"
    # once it finishes and is exported, its parked copy goes
    (fresh / "runs" / "partial" / "summary.json").write_text("{}")
    r = sync("export", fresh, results)
    assert r.returncode == 0, r.stderr
    assert (results / "runs" / "partial" / "summary.json").exists() and not (parked / "partial").exists()
    # a parked copy of a run finished in RESULTS is not imported
    make_run(parked / "partial", partial)
    third = tmp_path / "third" / "mnist-paper"
    assert sync("import", third, results).stdout == "import: partial\n"  # the finished run's files only
    assert not (third / "runs" / "partial" / "last.pt").exists()


def test_parked_checkpoints_are_not_ignored_by_git():
    root = SYNC.parents[2]
    r = subprocess.run(["git", "check-ignore", "-q", "results/mnist-paper/inflight/mnist-paper/run/last.pt"],
                       cwd=root, capture_output=True, text=True)
    if r.returncode == 128:
        pytest.skip("not a git checkout")
    assert r.returncode == 1, "git ignores the parked checkpoints"
    assert subprocess.run(["git", "check-ignore", "-q", "results/mnist-paper/runs/run/last.pt"],
                          cwd=root).returncode == 0
