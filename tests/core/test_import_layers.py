"""The import layers of ``src/bbb`` (docs/design.md), checked by walking every import with ``ast``.

core (the library: layers, priors, the ELBO, the engine, metrics, data, small helpers)
  <- runs (``bbb.runs``: a run directory, the epoch loop, the job runner)
  <- applications (the command line, the sweep, the paper's experiments).

A module may import its own layer or a lower one, never a higher one; no module imports another
module's ``_private`` names; the module graph (lazy imports inside functions included) has no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# bbb's own source and what importing it loads and sets: the same under any torch release (the
# torch lanes deselect them)
pytestmark = pytest.mark.release_independent

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "bbb"

CORE, RUNS, APPS = 0, 1, 2
LAYER_NAMES = {CORE: "core", RUNS: "runs", APPS: "applications"}
#: top-level name under bbb -> layer (a package covers its submodules)
LAYERS = {
    "__init__": CORE, "errors": CORE, "io": CORE, "options": CORE, "distributions": CORE, "priors": CORE,
    "functional": CORE, "nn": CORE, "elbo": CORE, "engine": CORE, "random": CORE,
    "uncertainty": CORE, "prune": CORE, "data": CORE, "plots": CORE, "convert": CORE, "devices": CORE,
    "hf": CORE, "progress": CORE, "lora": CORE, "records": CORE, "ivon": CORE, "laplace": CORE,
    "ivon_buffers": CORE, "ivon_math": CORE, "inventory": CORE,
    "runs": RUNS,
    "cli": APPS, "__main__": APPS, "sweep": APPS, "experiments": APPS,
}
#: third-party packages the core may import at module level (others only lazily, inside functions)
CORE_THIRD_PARTY = {"torch", "numpy"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _layer(name: str) -> int:
    parts = name.split(".")
    if len(parts) == 1:
        return CORE  # bbb/__init__.py
    return LAYERS[parts[1]]


def _imports(name: str) -> list[tuple[str, list[str], int, bool]]:
    """(imported module, imported names, line, at module level) for every import in ``name``."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    base = name.split(".") if _is_package(name) else name.split(".")[:-1]
    top_level = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append((a.name, [], node.lineno, id(node) in top_level))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = base[: len(base) - node.level + 1]
                mod = ".".join(pkg + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((mod, [a.name for a in node.names], node.lineno, id(node) in top_level))
    return found


def _edges(name: str) -> list[tuple[str, int]]:
    """The bbb modules ``name`` imports (``from pkg import sub`` counts as importing pkg.sub)."""
    out = []
    for mod, names, line, _ in _imports(name):
        if mod != "bbb" and not mod.startswith("bbb."):
            continue
        subs = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
        out += [(s, line) for s in subs]
        if len(subs) < len(names) or not names:
            out.append((mod, line))
    return out


def test_every_module_has_a_layer():
    missing = sorted({n.split(".")[1] for n in MODULES if "." in n} - set(LAYERS))
    assert not missing, f"give these modules a layer in tests/core/test_import_layers.py: {missing}"


def test_no_upward_import():
    bad = []
    for name in MODULES:
        for target, line in _edges(name):
            if target in MODULES and _layer(target) > _layer(name):
                bad.append(f"{MODULES[name].relative_to(SRC)}:{line} ({LAYER_NAMES[_layer(name)]}) "
                           f"imports {target} ({LAYER_NAMES[_layer(target)]})")
    assert not bad, "\n".join(bad)


def test_core_imports_torch_only():
    import sys

    stdlib = set(sys.stdlib_module_names)
    bad = []
    for name in MODULES:
        if _layer(name) != CORE:
            continue
        for mod, _, line, top in _imports(name):
            root = mod.split(".")[0]
            allowed = root in stdlib or root == "bbb" or root in CORE_THIRD_PARTY
            if top and root and not allowed:
                bad.append(f"{MODULES[name].relative_to(SRC)}:{line} imports {mod} at module level")
    assert not bad, "\n".join(bad)


def test_no_private_names_across_modules():
    bad = []
    for name in MODULES:
        for mod, names, line, _ in _imports(name):
            if not (mod == "bbb" or mod.startswith("bbb.")) or mod == name:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{MODULES[name].relative_to(SRC)}:{line} imports {mod}.{n}")
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    graph = {n: sorted({t for t, _ in _edges(n) if t in MODULES and t != n}) for n in MODULES}
    # a package's __init__ re-exporting its own submodules is not a cycle with them
    for n in graph:
        graph[n] = [t for t in graph[n] if not (_is_package(n) and t.startswith(n + "."))]
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for t in graph[n]:
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert not cycles, "\n".join(cycles)


def test_import_bbb_leaves_the_environment_alone():
    import subprocess
    import sys

    code = ("import os; before = dict(os.environ); import bbb, bbb.nn, bbb.runs; "
            "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())")
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_the_bbb_command_sets_passive_openmp_before_torch_loads():
    import subprocess
    import sys

    code = ("import os, sys, bbb.cli\n"
            "assert 'torch' not in sys.modules, 'import bbb.cli loaded torch'\n"
            "try:\n    bbb.cli.main(['--version'])\nexcept SystemExit:\n    pass\n"
            "assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'\n")
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120,
                   stdout=subprocess.DEVNULL)
