"""The bench's tests run as the suite's do: tests/conftest.py's process settings (OMP_WAIT_POLICY,
MKL_CBWR, denormals flushed, torch's threads) and its fixtures (the seed, the session's user cache,
``data_dir``), loaded here under a name of their own; the suite's helpers (tests/testkit.py, ...)
import by name (pyproject.toml: ``pythonpath = ["tests"]``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SUITE = Path(__file__).resolve().parents[2] / "tests" / "conftest.py"


def _load_suite_conftest():
    name = "bbb_suite_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SUITE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_suite = _load_suite_conftest()
# the fixtures only: the collection hook is tests/conftest.py's own (it sorts the whole session)
_seed = _suite._seed
_user_cache = _suite._user_cache
data_dir = _suite.data_dir
