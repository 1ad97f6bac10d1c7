"""results/mnist-paper/sync.sh: the paper budget's finished runs travel between the working
folder (with checkpoints) and the committed results folder (without: git holds no checkpoint);
checkpoints travel between machines in an archive (sync.sh pack / unpack), never through git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SYNC = Path(__file__).resolve().parents[3] / "results" / "mnist-paper" / "sync.sh"


def sync(verb: str, out: Path, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "RESULTS": str(results)}
    return subprocess.run(["bash", str(SYNC), verb, *args], env=env, capture_output=True, text=True, timeout=60)


def make_run(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name).write_text(text)


def test_export_then_import_carries_finished_runs_without_checkpoints(tmp_path):
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
        "config.json", "metrics.csv", "summary.json"]
    # a new machine: the committed files seed its working folder
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
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "import|export|pack FILE|unpack FILE" in r.stderr
    assert sync("pack", tmp_path / "out", tmp_path / "results").returncode == 2  # no FILE


def test_pack_then_unpack_resumes_unfinished_runs_on_a_new_machine(tmp_path):
    out, results, fresh = tmp_path / "mnist-paper", tmp_path / "results", tmp_path / "new" / "mnist-paper"
    partial = {"config.json": "{}", "metrics.csv": "epoch\n1\n", "last.pt": "epoch 1", "best.pt": "epoch 1",
               ".lock": "123"}
    make_run(out / "runs" / "partial", partial)
    make_run(out / "runs" / "fresh", {"config.json": "{}"})  # started, no epoch yet: nothing to pack
    make_run(out / "runs" / "done", {"config.json": "{}", "summary.json": "{}", "last.pt": "x", "best.pt": "y"})
    archive = tmp_path / "state.tar"
    r = sync("pack", out, results, str(archive))
    assert r.returncode == 0, r.stderr
    # a new machine: the small files from git, then the archive: the unfinished run resumes and
    # the finished one has its last.pt back (Table 2, Figures 3-4: --report --checkpoints)
    assert sync("export", out, results).returncode == 0
    assert sync("import", fresh, results).returncode == 0
    r = sync("unpack", fresh, results, str(archive))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (fresh / "runs" / "partial").iterdir()) == [
        "best.pt", "config.json", "last.pt", "metrics.csv"]
    assert (fresh / "runs" / "partial" / "last.pt").read_text() == "epoch 1"
    assert (fresh / "runs" / "done" / "last.pt").read_text() == "x"
    assert not (fresh / "runs" / "done" / "best.pt").exists() and not (fresh / "runs" / "fresh").exists()
    # ... but never over a run this machine holds (at least as far on)
    (fresh / "runs" / "partial" / "last.pt").write_text("epoch 3")
    assert "partial" not in sync("unpack", fresh, results, str(archive)).stdout
    assert (fresh / "runs" / "partial" / "last.pt").read_text() == "epoch 3"


def test_git_ignores_every_checkpoint_of_the_results():
    root = SYNC.parents[2]
    for path in ("results/mnist-paper/runs/run/last.pt", "results/mnist-paper/inflight/mnist-paper/run/last.pt"):
        r = subprocess.run(["git", "check-ignore", "-q", path], cwd=root, capture_output=True, text=True)
        if r.returncode == 128:
            pytest.skip("not a git checkout")
        assert r.returncode == 0, f"git would track {path}"
