"""The API reference covers every public name, and the site builds strictly (when mkdocs is installed)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bbb

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _directives() -> list[str]:
    return [m.group(1) for p in (DOCS / "reference").glob("*.md")
            for m in re.finditer(r"^::: ([\w.]+)", p.read_text(), re.M)]


def test_every_directive_names_something_that_exists():
    for target in _directives():
        mod, _, attr = target.rpartition(".")
        try:
            importlib.import_module(target)
        except ImportError:
            assert hasattr(importlib.import_module(mod), attr), target


def test_every_public_name_is_in_the_reference():
    documented = set(_directives())
    index = (DOCS / "reference" / "index.md").read_text()
    for name in bbb.__all__:
        assert f"`bbb.{name}`" in index, f"bbb.{name} is missing from docs/reference/index.md"
        obj = getattr(bbb, name)
        if hasattr(obj, "__file__"):  # a module
            home = obj.__name__
            assert any(d == home or d.startswith(home + ".") for d in documented), home
            continue
        home = obj.__module__
        assert any(d == home or d == f"{home}.{name}" for d in documented), (
            f"bbb.{name} lives in {home}, which no ::: directive documents")
        assert name in getattr(importlib.import_module(home), "__all__", [name]), (
            f"{home}.__all__ does not list {name}, so mkdocstrings would not render it")


def test_the_site_builds_strictly(tmp_path):
    """`make docs`'s strict build; CI (.ci/run) installs the docs extra before the suite and sets
    BBB_REQUIRE_DOCS, so there a missing mkdocs fails instead of skipping (this is CI's docs build)."""
    if (shutil.which("mkdocs") is None and not (Path(sys.prefix) / "bin" / "mkdocs").exists()) or \
            importlib.util.find_spec("mkdocstrings") is None:
        if os.environ.get("BBB_REQUIRE_DOCS"):
            pytest.fail("BBB_REQUIRE_DOCS is set but mkdocs or mkdocstrings is missing (make .venv/.docs-installed)")
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]'); `make docs` builds the site")
    exe = Path(sys.prefix) / "bin" / "mkdocs"
    cmd = [str(exe) if exe.exists() else "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    index = (DOCS / "reference" / "index.md").read_text()
    for page, anchor in re.findall(r"\]\((\w+)\.md#([\w.]+)\)", index):  # every public name has its entry
        html = (tmp_path / "site" / "reference" / page / "index.html").read_text()
        assert f'id="{anchor}"' in html, f"{anchor} is not rendered on reference/{page}"


def test_the_choices_docs_cli_lists_for_bbb_train_are_the_commands_own():
    """docs/cli.md's row of bbb train gives the choices of some flags (`--flag {a,b}`): all of them,
    as the command takes them (it listed --kl-weighting {uniform,blundell}, without blob)."""
    from bbb.cli.entry import command_parser

    row = next(line for line in (DOCS / "cli.md").read_text().splitlines() if line.startswith("| `bbb train "))
    choices = {a.option_strings[-1]: a.choices for a in command_parser("train")[1]._actions if a.choices}
    listed = re.findall(r"`(--[\w-]+) \{([\w,-]+)\}`", row)
    assert listed, row
    for flag, values in listed:
        assert set(values.split(",")) == {str(c) for c in choices[flag]}, flag
