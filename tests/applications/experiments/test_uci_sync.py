"""results/uci/sync.sh: a UCI run's finished job files (never a job's resumable state) and its
run.json travel between sessions as archives; unpacking never writes over what a folder has."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SYNC = Path(__file__).resolve().parents[3] / "results" / "uci" / "sync.sh"

pytestmark = pytest.mark.skipif(shutil.which("xz") is None or shutil.which("bash") is None, reason="needs bash and xz")


def sync(*args: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SYNC), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_pack_then_unpack_carries_finished_datasets_and_the_run_json(tmp_path):
    out, results, again = tmp_path / "out", tmp_path / "results", tmp_path / "again"
    (out / "jobs").mkdir(parents=True)
    for phase in ("validation", "test"):
        (out / "jobs" / f"yacht-mc_dropout-{phase}.json").write_text(json.dumps({"phase": phase}))
    (out / "jobs" / "energy-local-validation.json").write_text("{}")
    (out / "jobs" / "energy-local-test.state.pt").write_bytes(b"state")  # energy still training
    (out / "run.json").write_text(json.dumps({"config": {"seed": 1}}))
    p = sync("pack", out, results)
    assert p.returncode == 0, p.stderr
    assert "energy still has a job training" in p.stdout
    assert sorted(q.name for q in results.iterdir()) == ["run.carried.json", "yacht.tar.xz"]
    (again / "jobs").mkdir(parents=True)
    (again / "jobs" / "yacht-mc_dropout-test.json").write_text("mine")  # never written over
    assert sync("unpack", again, results).returncode == 0
    assert sorted(q.name for q in (again / "jobs").iterdir()) == ["yacht-mc_dropout-test.json",
                                                                  "yacht-mc_dropout-validation.json"]
    assert (again / "jobs" / "yacht-mc_dropout-test.json").read_text() == "mine"
    assert json.loads((again / "run.json").read_text()) == {"config": {"seed": 1}}
    (again / "run.json").write_text("{}")
    assert sync("unpack", again, results).returncode == 0 and (again / "run.json").read_text() == "{}"
    assert sync("pack", tmp_path / "nothing", results).returncode == 2


def test_only_packs_the_named_variants(tmp_path):
    """ONLY="laplace ...": the methods added after a run go into archives of their own, without the
    run's own files (which travel in the run's archives)."""
    out, results = tmp_path / "out", tmp_path / "new"
    (out / "jobs").mkdir(parents=True)
    for name in ("yacht-mc_dropout-test", "yacht-laplace-validation", "yacht-laplace-test",
                 "yacht-ensemble_heteroscedastic-test", "naval-propulsion-plant-laplace-test"):
        (out / "jobs" / f"{name}.json").write_text("{}")
    p = subprocess.run(["bash", str(SYNC), "pack", str(out), str(results)], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "ONLY": "laplace ensemble_heteroscedastic"})
    assert p.returncode == 0, p.stderr
    members = subprocess.run(["tar", "-tJf", str(results / "yacht.tar.xz")], capture_output=True, text=True).stdout
    assert sorted(members.split()) == ["yacht-ensemble_heteroscedastic-test.json", "yacht-laplace-test.json",
                                       "yacht-laplace-validation.json"]
    assert (results / "naval-propulsion-plant.tar.xz").is_file()
