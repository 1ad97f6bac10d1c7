"""docs/your_data.md's shell blocks run as a newcomer runs them (issue 72, item 4): copied into a
shell in an empty folder, ``bbb`` being this checkout's, with the training budget cut to a couple
of epochs (``--epochs N`` -> ``--epochs 2``, ``--samples N`` -> ``--samples 5``) and nothing else
changed. Each block must finish with exit 0 and leave the files it names.
"""

from __future__ import annotations

import csv
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "your_data.md"
pytestmark = pytest.mark.slow


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)


def _block_with(word: str) -> str:
    found = [b for b in _blocks() if word in b]
    assert found, f"docs/your_data.md has no shell block with {word}"
    return found[0]


def _run(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    bbb = f"{shlex.quote(sys.executable)} -m bbb"
    script = re.sub(r"^bbb ", bbb + " ", block, flags=re.M)
    script = re.sub(r"--epochs \d+", "--epochs 2", script)
    script = re.sub(r"--samples \d+", "--samples 5", script)
    script = re.sub(r"^python ", shlex.quote(sys.executable) + " ", script, flags=re.M)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _houses(path: Path, n: int, seed: int, with_price: bool = True) -> None:
    rng = random.Random(seed)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["area", "rooms", "district"] + (["price"] if with_price else []))
        for _ in range(n):
            area, rooms, district = rng.uniform(40, 200), rng.randint(1, 6), rng.choice(["north", "south", "east"])
            price = 2.0 * area + 15 * rooms + {"north": 50, "south": 0, "east": 20}[district] + rng.gauss(0, 10)
            w.writerow([f"{area:.1f}", rooms, district] + ([f"{price:.1f}"] if with_price else []))


def test_the_houses_block_runs_as_written(tmp_path):
    block = _block_with("houses.csv")
    block = "\n".join(line for line in block.splitlines() if "runs/demo" not in line)  # needs bbb demo's run
    _houses(tmp_path / "houses.csv", 300, 0)
    _houses(tmp_path / "new_houses.csv", 8, 1, with_price=False)
    proc = _run(block, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with (tmp_path / "predictions.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and "area" in rows[0]  # the input's columns, to join on


def test_the_yacht_block_runs_as_written(tmp_path):
    data = Path(os.environ.get("BBB_DATA", Path.home() / ".cache" / "bbb"))
    if not (data / "uci" / "yacht" / "data.txt").exists():
        pytest.skip("the UCI yacht file is not under $BBB_DATA")
    proc = _run(_block_with("yacht.csv"), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "runs" / "yacht" / "summary.json").exists()
    assert (tmp_path / "runs" / "yacht" / "eval.json").exists()
    with (tmp_path / "yacht_predictions.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 308
