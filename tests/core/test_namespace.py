"""One name, one thing, over every package and module of ``bbb`` (walked with ``pkgutil``):

* no submodule is shadowed by an attribute of its package (``import bbb.nn.samples as m`` gives
  the module; a function named like a submodule would hide it);
* every ``__all__`` is true: each name exists in its module (or is one of its submodules), and
  ``from <module> import *`` works;
* each Enum has one address: it keeps its own name wherever it is imported, and no module but the
  one that defines it lists it in ``__all__`` (the one exception: the top-level ``bbb`` table of
  the core API, kept in step with docs/reference/index.md by tests/applications/test_docs.py).
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import bbb

#: not imported here: running ``bbb.__main__`` runs the command line
SKIP = {"bbb.__main__"}


def _walk() -> dict[str, ModuleType]:
    names = ["bbb"] + [m.name for m in pkgutil.walk_packages(bbb.__path__, "bbb.") if m.name not in SKIP]
    return {n: importlib.import_module(n) for n in sorted(names)}


MODULES = _walk()
PACKAGES = {n: m for n, m in MODULES.items() if hasattr(m, "__path__")}
WITH_ALL = sorted(n for n, m in MODULES.items() if "__all__" in vars(m))


def _submodules(pkg: ModuleType) -> list[str]:
    return [m.name for m in pkgutil.iter_modules(pkg.__path__)]


def test_the_walk_finds_the_packages():
    assert {"bbb", "bbb.nn", "bbb.runs", "bbb.experiments.mnist", "bbb.options"} <= set(MODULES)
    assert len(WITH_ALL) > 40


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_no_submodule_is_shadowed_by_an_attribute(name: str):
    pkg = PACKAGES[name]
    bad = []
    for sub in _submodules(pkg):
        if f"{name}.{sub}" in SKIP:
            continue
        module = importlib.import_module(f"{name}.{sub}")
        attr = getattr(pkg, sub, module)
        if attr is not module:
            kind = "function" if inspect.isroutine(attr) else "class" if inspect.isclass(attr) else "attribute"
            bad.append(f"{name}.{sub} is a {kind}, which hides the module {name}.{sub}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", WITH_ALL)
def test_every_name_in_all_exists(name: str):
    module = MODULES[name]
    subs = set(_submodules(module)) if name in PACKAGES else set()
    missing = [n for n in module.__all__ if not hasattr(module, n) and n not in subs]
    assert not missing, f"{name}.__all__ names what {name} lacks: {missing}"
    assert len(set(module.__all__)) == len(module.__all__), f"{name}.__all__ repeats a name"


@pytest.mark.parametrize("name", WITH_ALL)
def test_star_import_works(name: str):
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(MODULES[name].__all__) <= set(namespace)


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_a_package_binds_its_all_and_nothing_more(name: str):
    """A package's own imports bind exactly its ``__all__`` (besides its submodules, private and
    dunder names and ``from __future__ import annotations``): internals are imported from the
    module that defines them, never through the package address."""
    pkg = PACKAGES[name]
    assert "__all__" in vars(pkg), f"{name} has no __all__"
    for public in pkg.__all__:  # resolve the lazily imported names (the top-level ``bbb``)
        getattr(pkg, public)
    subs = set(_submodules(pkg))
    bound = {n for n in vars(pkg) if not n.startswith("_")} - subs - {"annotations"}
    wanted = set(pkg.__all__) - subs
    assert not bound - wanted, f"{name} binds names not in its __all__: {sorted(bound - wanted)}"
    assert not wanted - bound, f"{name}.__all__ names what {name} does not bind: {sorted(wanted - bound)}"


def _enums() -> dict[type[enum.Enum], str]:
    """Every Enum defined in bbb -> the module that defines it."""
    return {obj: obj.__module__ for m in MODULES.values() for obj in vars(m).values()
            if inspect.isclass(obj) and issubclass(obj, enum.Enum) and obj.__module__ in MODULES}


def test_each_enum_has_one_address():
    enums = _enums()
    assert len(enums) >= 20
    bad = []
    for name, module in MODULES.items():
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and obj in enums and attr != obj.__name__:
                bad.append(f"{name}.{attr} is an alias of {enums[obj]}.{obj.__name__}")
        if name == "bbb":
            continue
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr, None)
            if inspect.isclass(obj) and obj in enums and enums[obj] != name:
                bad.append(f"{name}.__all__ re-exports {enums[obj]}.{attr}")
    assert not bad, "\n".join(bad)


def test_the_renamed_modules_are_modules():
    import bbb.nn.samples as samples
    import bbb.runs.evaluation as evaluation

    assert isinstance(samples, ModuleType) and isinstance(evaluation, ModuleType)
    assert callable(bbb.nn.sampling) and callable(bbb.runs.classifier_metrics)  # the functions keep their names


#: the library (core) and the run layer: above them, the applications' commands each bind their
#: own ``main`` / ``add_arguments`` / ``EXAMPLE`` by convention.
LIBRARY = ("distributions", "functional", "nn", "elbo", "engine", "uncertainty", "prune", "data", "options", "io",
           "errors", "convert", "random", "devices", "plots", "runs")


def _public_bindings(modules: dict[str, ModuleType]) -> dict[str, dict[int, str]]:
    """Public name -> {id of the object it is bound to: the first module whose ``__all__`` has it}."""
    seen: dict[str, dict[int, str]] = {}
    for name, module in modules.items():
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr, None)
            if obj is None or inspect.ismodule(obj):
                continue
            seen.setdefault(attr, {}).setdefault(id(obj), name)
    return seen


def _two_things(modules: dict[str, ModuleType]) -> list[str]:
    return [f"{attr}: {sorted(where.values())}" for attr, where in sorted(_public_bindings(modules).items())
            if len(where) > 1]


def test_one_public_name_one_thing_across_the_library_and_runs():
    """A name in the ``__all__`` of two library/runs modules is the same object (a re-export), never
    two different functions, classes or constants (``bbb.runs.evaluate`` beside
    ``bbb.uncertainty.evaluate`` was one)."""
    modules = {n: m for n, m in MODULES.items() if n == "bbb" or n.split(".")[1] in LIBRARY}
    assert {"bbb.uncertainty", "bbb.runs.evaluation", "bbb.nn"} <= set(modules)
    bad = _two_things(modules)
    assert not bad, "one public name bound to different objects:\n" + "\n".join(bad)


def test_the_check_catches_two_functions_of_one_name():
    def evaluate() -> None: ...

    a, b = ModuleType("a"), ModuleType("b")
    a.__all__, b.__all__ = ["evaluate", "same"], ["evaluate", "same"]  # type: ignore[attr-defined]
    a.evaluate, b.evaluate = evaluate, bbb.uncertainty.evaluate  # type: ignore[attr-defined]
    a.same = b.same = bbb.uncertainty.evaluate  # type: ignore[attr-defined]
    assert _two_things({"a": a, "b": b}) == ["evaluate: ['a', 'b']"]
