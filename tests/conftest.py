from __future__ import annotations

import os

# before torch starts its thread pool: threads sleep instead of spinning on a shared CPU
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# as `bbb`'s entry point does (bbb.cli.entry.main): MKL's GEMMs give the same bits on 1 or 2
# threads. Set here, before MKL's first call, so an in-process run does not depend on which test
# happened to call the entry point first (MKL reads it once per process).
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# Inductor checks that gcc builds each vector instruction set the CPU reports by compiling a test
# program per set, once per cache folder, and loading it in every process: most of a cold process's
# first compile (docs/results.md, "Where CI's time goes"; CI starts with an empty cache). The
# tests compare compiled training with eager, not that check: the sets the CPU reports are taken
# as buildable (the kernels are the same; a compiler that could not build them fails the test).
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
# bbb.io writes each file atomically: a temporary file, fsynced, renamed over the target. The suite
# writes thousands, each fsync a wait for the disk, a long one while CI unpacks the torch lanes'
# wheels beside it (docs/results.md, "Where CI's time goes"). What the tests check, the temporary
# file and the rename (a reader never sees half a file, a killed process leaves the old one), does
# not depend on it, and no test cuts the power: in the test processes it returns at once (the `bbb`
# processes they start fsync as a user's do).
os.fsync = lambda fd: None

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# as `bbb` runs (bbb.cli.entry.flush_denormals), before torch starts its threads: the tests that
# compare an in-process run with a `bbb` subprocess compare the same floating-point arithmetic
torch.set_flush_denormal(True)
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``--dist loadscope``, a module to a worker at a time),
    the longest units of work start first instead of finishing the run on one worker while the
    other waits: the modules that hold tests marked slow, then the other modules that start
    ``bbb`` processes (those outside tests/core; tests/runs' had come last and left one worker
    alone at the end), then tests/core's, short and many, which fill the gaps.
    Each group in its usual order, and the order within a module, and a run without xdist,
    unchanged."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def group(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0]
        return 0 if module in slow else 2 if module.startswith("tests/core/") else 1

    items.sort(key=group)  # stable


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The user's cache (the stamps of verified data files, ``BBB_CACHE``) is one folder of this
    session, never ~/.cache; subprocesses inherit it."""
    before = os.environ.get("BBB_CACHE")
    os.environ["BBB_CACHE"] = str(cache := tmp_path_factory.mktemp("user-cache"))
    yield cache
    if before is None:
        os.environ.pop("BBB_CACHE", None)
    else:
        os.environ["BBB_CACHE"] = before


@pytest.fixture
def data_dir() -> Path:
    """The real-data folder from BBB_DATA; skips the test with a reason when it is not there."""
    d = os.environ.get("BBB_DATA")
    if not d or not (Path(d) / "mnist" / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("real MNIST not available: set BBB_DATA to a folder with mnist/ (e.g. ../shared/data)")
    return Path(d)
