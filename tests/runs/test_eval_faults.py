"""``bbb evaluate`` and ``bbb prune`` write beside a run (issue 19), on a tiny fake MNIST: they
hold the run directory's lock, so a second writer is one line naming the holder's pid (another
process) and changes nothing; into a directory they cannot write they still print what they
computed, then one line on stderr (exit code 2) saying it was not saved. The commands run in this
process (the same ``main`` as ``python -m bbb``, without an interpreter start importing torch for
each: tests/applications/cli/test_cli.py runs a one-line error through a real process)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bbb.runs.rundir import LOCK_NAME
from faultkit import assert_one_line_error, bbb, bbb_in_process, fake_mnist, lock_held, snapshot

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="flock"), pytest.mark.release_independent]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return bbb(*argv, BBB_DATA_VERIFY="0")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, a finished 1-epoch bbb run)."""
    root = tmp_path_factory.mktemp("eval")
    data = fake_mnist(root / "data", n_train=300, n_test=50)
    out = root / "run"
    p = run("train", "--data-dir", str(data), "--out", str(out), "--epochs", "1", "--hidden", "16",
            "--batch-size", "50", "--val-size", "100", "--device", "cpu", "--eval-samples", "2", "--quiet")
    assert p.returncode == 0, p.stderr
    return data, out


COMMANDS = {"evaluate": ("eval.json", "test error", ["--samples", "2"]),
            "prune": ("pruning.csv", "proportion removed", ["--fractions", "0", "0.5"])}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_dir_in_use_is_refused_with_the_holders_pid(tmp_path, trained, command, capsys, monkeypatch):
    data, finished = trained
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    name, _, extra = COMMANDS[command]
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    with lock_held(out / LOCK_NAME) as holder:
        before = snapshot(out)
        p = bbb_in_process(capsys, command, str(out), "--data-dir", str(data), "--device", "cpu", *extra)
        assert_one_line_error(p, f"pid {holder.pid}", str(out), "in use")
        assert snapshot(out) == before
    p = bbb_in_process(capsys, command, str(out), "--data-dir", str(data), "--device", "cpu", *extra)  # it is gone
    assert p.returncode == 0, p.stderr
    assert (out / name).is_file() and not (out / LOCK_NAME).exists()  # the killed holder's lock file removed


@pytest.fixture
def read_only(tmp_path):
    """A function making a directory unwritable to this process: chmod where that binds it (not
    root), else a read-only bind mount (root); skipped where neither works."""
    mounted: list[Path] = []

    def make(folder: Path) -> None:
        if os.geteuid() != 0:
            for q in [folder, *folder.iterdir()]:
                q.chmod(0o555 if q.is_dir() else 0o444)
            return
        for argv in (["mount", "--bind", str(folder), str(folder)],
                     ["mount", "-o", "remount,ro,bind", str(folder)]):
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot make a read-only mount here: {r.stderr.strip()}")
            mounted.append(folder)

    yield make
    for folder in mounted[:1]:
        subprocess.run(["umount", str(folder)], capture_output=True)
    if os.geteuid() != 0:
        for q in tmp_path.rglob("*"):
            q.chmod(0o755 if q.is_dir() else 0o644)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unwritable_run_dir_keeps_the_printed_results_and_is_one_line(tmp_path, trained, read_only, command,
                                                                          capsys, monkeypatch):
    data, finished = trained
    out = tmp_path / "run"
    shutil.copytree(finished, out)  # (no .lock: its training removed it; none can be created there)
    name, table, extra = COMMANDS[command]
    read_only(out)
    before = snapshot(out)
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    p = bbb_in_process(capsys, command, str(out), "--data-dir", str(data), "--device", "cpu", *extra)
    assert_one_line_error(p, "cannot write", str(out / name), "not saved")
    assert table in p.stdout and "%" in p.stdout and "wrote" not in p.stdout  # the results, printed
    assert snapshot(out) == before
