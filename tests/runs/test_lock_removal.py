"""A run directory's ``.lock`` is removed when its writer ends (issue 72), and removing it opens no
gap in the lock: a process that waited on the lock file its holder removed takes the file now at
``.lock`` instead, so two writers still exclude each other (``bbb.runs.rundir``)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import bbb.runs.rundir as R
from bbb.errors import RunDirBusy
from bbb.runs import TrainConfig, lock_run_dir, train
from faultkit import snapshot
from testkit import blobs

pytestmark = pytest.mark.skipif(os.name == "nt", reason="flock")

QUIET = {"quiet": True, "log": lambda s: None}


def test_a_finished_or_failed_run_and_an_evaluation_leave_no_lock(tmp_path):
    out = tmp_path / "run"
    cfg = TrainConfig(hidden=[16], epochs=1, batch_size=32, lr=1e-2, device="cpu", eval_samples=2)
    train(cfg, out, data=blobs(), **QUIET)
    assert (out / "summary.json").is_file() and not (out / R.LOCK_NAME).exists()
    with lock_run_dir(out):  # bbb evaluate's and bbb prune's lock
        assert (out / R.LOCK_NAME).read_text().split() == [str(os.getpid())]  # while it is held: the pid
    assert not (out / R.LOCK_NAME).exists()
    with pytest.raises(ZeroDivisionError), R.guard_run_dir(out, resume=True):  # a run that fails midway
        assert (out / R.LOCK_NAME).is_file()
        raise ZeroDivisionError
    assert not (out / R.LOCK_NAME).exists() and (out / "last.pt").is_file()


def test_a_refused_run_leaves_a_lock_file_it_found_as_it_was(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}\n")
    (out / R.LOCK_NAME).write_text("12345\n")  # a lock file of an older bbb, nobody holding it
    before = snapshot(out)
    with pytest.raises(Exception, match="already holds a run"), R.guard_run_dir(out, resume=False):
        pass
    assert snapshot(out) == before


def test_a_waiter_on_a_removed_lock_file_takes_the_new_one_and_writers_still_exclude_each_other(
        tmp_path, monkeypatch):
    """A holds the lock; B opens the lock file and waits; A lets go (removing the file) and at once
    takes the lock again (a new file). B, whose flock on the removed file now succeeds, must not
    count itself a holder beside A: it waits for A's new file, and gets it when A lets go."""
    out = tmp_path / "run"
    out.mkdir()
    opened = threading.Event()
    real_open = R._open

    def open_and_tell(*a, **k):
        fd = real_open(*a, **k)
        if threading.current_thread().name == "B":
            opened.set()
        return fd

    monkeypatch.setattr(R, "_open", open_and_tell)
    holding: list[str] = []  # who holds the lock, as each sees it
    overlaps: list[list[str]] = []
    b_done = threading.Event()

    def hold(who: str, seconds: float) -> None:
        holding.append(who)
        if len(holding) > 1:
            overlaps.append(list(holding))
        time.sleep(seconds)
        holding.remove(who)

    def b() -> None:
        with lock_run_dir(out, lock_wait=30):
            hold("B", 0.0)
        b_done.set()

    first = lock_run_dir(out)
    first.__enter__()
    th = threading.Thread(target=b, name="B")
    th.start()
    try:
        assert opened.wait(30)
        time.sleep(0.2)  # B is in its wait on the first file
        first.__exit__(None, None, None)  # A lets go: the file is removed ...
        with lock_run_dir(out, lock_wait=30):  # ... and A takes the lock again, on a new file
            hold("A", 0.5)  # (B, done waiting on the removed file, would hold the lock here too)
        assert b_done.wait(30)
    finally:
        th.join(30)
    assert overlaps == [] and holding == []
    assert not (out / R.LOCK_NAME).exists()


def test_a_second_holder_is_refused_while_the_first_holds_the_lock(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with lock_run_dir(out), pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
        with lock_run_dir(out, lock_wait=0.1):
            pass
    assert not (out / R.LOCK_NAME).exists()
