"""``make demo`` installs what the demo needs, torch and bbb's plots extra, and nothing else;
``make test`` (and lint, typecheck: CI's ``.ci/run``) installs the rest (issue 61). Checked
on the Makefile's dry run, and by running the demo with the other extras' packages unimportable."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OTHER_EXTRAS = ("dev", "ray", "lightning", "hf", "docs", "bench", "yaml")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str) -> list[str]:
    """The pip installs of ``make TARGET`` from nothing (``-B``: every stamp out of date)."""
    p = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [line for line in p.stdout.splitlines() if "pip install" in line]


def extras(installs: list[str]) -> set[str]:
    return {e for line in installs for m in re.finditer(r'-e "\.\[([a-z,]+)\]"', line) for e in m.group(1).split(",")}


def test_make_demo_installs_torch_and_the_plots_extra_only():
    installs = dry_run("demo")
    assert any('"torch==' in line for line in installs), installs
    assert extras(installs) == {"plots"}, installs


@pytest.mark.parametrize("target", ["test", "test-fast", "lint", "typecheck", "wheel-check", "docs"])
def test_the_suite_and_ci_targets_install_the_rest(target):
    got = extras(dry_run(target))
    assert {"plots", "dev", "ray", "lightning"} <= got, (target, got)


DEMO_WITHOUT_EXTRAS = textwrap.dedent("""
    import sys
    for name in ("pytest", "yaml", "ray", "transformers", "safetensors", "lightning", "pytorch_lightning",
                 "mypy", "mkdocs", "pyro"):
        sys.modules[name] = None  # importing it raises ImportError, as in an environment without it
    import torch
    import bbb.runs.model as RM
    g = torch.Generator().manual_seed(0)
    def data(cfg):
        x, y = torch.randn(384, 784, generator=g), torch.randint(0, 10, (384,), generator=g)
        return {"train_x": x[:256], "train_y": y[:256], "val_x": x[256:320], "val_y": y[256:320],
                "test_x": x[320:], "test_y": y[320:]}
    RM.load_data = data
    from bbb.cli import main
    sys.exit(main(["demo", "--epochs", "1", "--out", sys.argv[1], "--device", "cpu", "--no-compile", "--quiet"]))
""")


@pytest.mark.slow
def test_the_demo_runs_without_the_other_extras(tmp_path):
    pytest.importorskip("matplotlib")  # (the plots extra)
    p = subprocess.run([sys.executable, "-c", DEMO_WITHOUT_EXTRAS, str(tmp_path / "demo")], capture_output=True,
                       text=True, timeout=300, env={"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
                                                    "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "test error" in p.stdout and (tmp_path / "demo" / "snr.png").exists(), p.stdout


@pytest.mark.parametrize("target", ["test", ".venv-torch-2.8.0/.installed"])
def test_uv_is_installed_before_it_installs_anything(target):
    """uv (the suite's and the torch lanes' installer) lives in .venv-uv: its environment is
    made before the first `uv pip install` (a variable defined after the rule that names it as a
    prerequisite expands to nothing there, and CI stopped at `.venv-uv/bin/uv: not found`)."""
    p = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    made = next(i for i, line in enumerate(lines) if "pip install -q uv" in line)
    used = next(i for i, line in enumerate(lines) if "/uv pip install" in line)
    assert made < used, lines
