"""Fault injection on atomic writes: a writer killed with -9 loses nothing and its temporary file
is removed by the next write; a full disk is one line on stderr with exit code 2 and keeps the
files that were there (a real tmpfs, when this process may mount one)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bbb import io as bio
from faultkit import assert_one_line_error, bbb, env, snapshot, wait_until

pytestmark = pytest.mark.release_independent  # (Makefile: the torch lanes deselect it)

WRITER = r"""
import sys, time
from bbb.io import atomic_write
def slow(f):
    f.write(b'{"half": ')
    f.flush()
    print("writing", flush=True)
    time.sleep(600)
atomic_write(sys.argv[1], slow)
"""


def test_writer_killed_mid_write_loses_nothing_and_its_temp_file_is_cleaned(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    bio.atomic_write_json(target, {"epoch": 1})
    old = target.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], env=env(), stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert target.read_bytes() == old  # the reader still sees the whole old file
    assert temps[0].exists()  # the killed writer's leftover ...
    bio.atomic_write_json(target, {"epoch": 2})
    assert not temps[0].exists()  # ... removed by the next write of the same target
    assert json.loads(target.read_text()) == {"epoch": 2}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def full_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs filled up; skipped where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root on Linux to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_full_disk_is_one_line_and_keeps_the_old_results(full_tmpfs: Path, tmp_path: Path) -> None:
    out = full_tmpfs / "sweep"
    out.mkdir()
    (out / "sweep.csv").write_text("trial_id,status\nabc,pending\n")
    (out / "space.json").write_text('{"params": {}}\n')
    fill(full_tmpfs)
    before = snapshot(out)
    space = tmp_path / "s.json"
    space.write_text(json.dumps({"params": {"dataset": "synthetic", "synthetic_dim": 8, "synthetic_train": 32,
                                            "width": 4, "depth": 1, "epochs": 1, "device": "cpu"}}))
    p = bbb("sweep", "--space", str(space), "--out", str(out), "--quiet", timeout=300)
    assert_one_line_error(p, "no space left", "free some space", str(out))
    assert snapshot(out) == before
    assert wait_until(lambda: not [q for q in out.iterdir() if q.name.endswith(".tmp")], 1)
