"""The run directory's guard (issue 19), through ``python -m bbb train`` on a tiny fake MNIST:
``--resume`` without last.pt, a new run into a previous run's directory, ``--overwrite``, two
processes on one ``--out`` (the lock), temporary files of killed writers, and ``--threads``
recorded and restored on ``--resume``. Every refusal is one line on stderr, exit code 2, and
leaves the directory byte for byte as it was. A refusal that comes before any training is checked
once end to end in a subprocess and otherwise in this process (``bbb_in_process``: the same
``main``, without the seconds of a fresh interpreter importing torch); what needs a second process
(the lock, a kill, the thread count a process starts with) always runs in one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bbb.io import _host
from bbb.runs.rundir import LOCK_NAME, RESULT_FILES, RUN_FILES
from faultkit import assert_one_line_error, bbb, bbb_in_process, env, fake_mnist, lock_held, snapshot
from testkit import noisy_table

pytestmark = pytest.mark.skipif(os.name == "nt", reason="flock and /proc")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return fake_mnist(tmp_path_factory.mktemp("data"), n_train=300, n_test=50)


def train_argv(data: Path, out: Path, *extra: str, epochs: int = 1, val: int = 100) -> list[str]:
    return ["train", "--data-dir", str(data), "--out", str(out), "--epochs", str(epochs), "--hidden", "16",
            "--batch-size", "50", "--val-size", str(val), "--device", "cpu", "--eval-samples", "2", "--quiet",
            *extra]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return bbb(*argv, BBB_DATA_VERIFY="0")


@pytest.fixture
def run_here(capsys, monkeypatch):
    """``bbb ARGV`` in this process, as :func:`run` runs it in a subprocess (unverified data)."""
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    return lambda *argv: bbb_in_process(capsys, *argv)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, data_dir) -> Path:
    """A finished 1-epoch run, with eval.json, pruning.csv and every other result file beside it."""
    out = tmp_path_factory.mktemp("base") / "run"
    p = run(*train_argv(data_dir, out))
    assert p.returncode == 0, p.stderr
    (out / "eval.json").write_text('{"test_error": 0.5}\n')
    (out / "pruning.csv").write_text("fraction_removed\n0.0\n")
    for name in RESULT_FILES:  # the others, as bbb ood, uncertain, evaluate's plots would leave them
        if not (out / name).exists():
            (out / name).write_text(f"{name}\n")
    assert {*RUN_FILES} <= {q.name for q in out.iterdir()}
    return out


def copy_run(src: Path, dst: Path, *drop: str) -> Path:
    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    return dst


@pytest.mark.release_independent
def test_resume_without_last_pt_is_refused_and_changes_nothing(tmp_path, data_dir, finished, run_here):
    out = copy_run(finished, tmp_path / "run", "last.pt")
    before = snapshot(out)
    p = run(*train_argv(data_dir, out, "--resume", epochs=3))
    assert_one_line_error(p, "cannot resume", str(out), "last.pt")
    assert snapshot(out) == before
    # an empty directory, and one that does not exist: the same, and nothing is created
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run_here(*train_argv(data_dir, tmp_path / "empty", "--resume")), "cannot resume")
    assert list((tmp_path / "empty").iterdir()) == []
    assert_one_line_error(run_here(*train_argv(data_dir, tmp_path / "none", "--resume")), "cannot resume")
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("keep", ["all", "last.pt", "config.json", "metrics.csv", "summary.json", "best.pt",
                                  "eval.json", "pruning.csv", "ood.json"])
@pytest.mark.release_independent
def test_a_new_run_into_a_previous_run_is_refused_and_changes_nothing(tmp_path, data_dir, finished, keep,
                                                                      run_here):
    drop = [] if keep == "all" else [n for n in RUN_FILES if n != keep]
    out = copy_run(finished, tmp_path / "run", *drop)
    before = snapshot(out)
    p = (run if keep == "all" else run_here)(*train_argv(data_dir, out, "--lr", "0.5"))
    line = assert_one_line_error(p, "already holds a run", "--overwrite", "--resume")
    assert (keep if keep != "all" else "last.pt") in line
    assert snapshot(out) == before


@pytest.mark.release_independent
def test_resume_and_overwrite_exclude_each_other(tmp_path, data_dir, finished, run_here):
    out = copy_run(finished, tmp_path / "run")
    before = snapshot(out)
    assert_one_line_error(run_here(*train_argv(data_dir, out, "--resume", "--overwrite")), "--overwrite")
    assert snapshot(out) == before


@pytest.mark.release_independent
def test_overwrite_replaces_every_file_of_the_previous_run(tmp_path, data_dir, finished):
    out = copy_run(finished, tmp_path / "run")
    (out / "notes.txt").write_text("mine\n")  # not a run file: kept
    (out / "tb").mkdir()  # the replaced run's TensorBoard curves: removed, though this run does not log
    (out / "tb" / "events.out.tfevents.1.host").write_bytes(b"old curves")
    host = _host()
    stale = [f".best.pt~{host}~999999999~abcd1234.tmp", f".metrics.csv~{host}~999999998~00000000.tmp"]
    for name in stale:  # left by writers that were killed (their pids are gone)
        (out / name).write_bytes(b"half")
    p = run(*train_argv(data_dir, out, "--overwrite", "--seed", "7", epochs=2))
    assert p.returncode == 0, p.stderr
    names = {q.name for q in out.iterdir()}
    assert not ({"eval.json", "pruning.csv", "tb"} & names) and "notes.txt" in names
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".old-run")], names
    assert '"seed": 7' in (out / "config.json").read_text()
    assert len((out / "metrics.csv").read_text().splitlines()) == 3
    assert not (out / LOCK_NAME).exists()  # the run removed its lock as it ended


@pytest.mark.release_independent
def test_a_data_file_named_like_a_run_file_in_out_is_refused(tmp_path, run_here):
    # a table called metrics.csv in --out: --overwrite removed it with the "previous run's" files,
    # then the run said the data file did not exist; the table was lost
    out = tmp_path / "run"
    out.mkdir()
    noisy_table(out / "metrics.csv", n=60)
    before = snapshot(out)
    for extra in ((), ("--overwrite",)):
        p = run_here("train", "--csv", str(out / "metrics.csv"), "--target", "price", "--task", "regression",
                     "--out", str(out), "--epochs", "1", "--hidden", "4", "--device", "cpu", "--quiet", *extra)
        assert_one_line_error(p, "metrics.csv", "move the data file out")
        assert snapshot(out) == before


def _last_pid(out: Path) -> str:
    return (out / LOCK_NAME).read_text().split()[0]


def _metric_lines(out: Path) -> int:
    f = out / "metrics.csv"
    return len(f.read_text().splitlines()) if f.is_file() else 0


@pytest.mark.release_independent
def test_a_second_process_on_the_same_out_is_refused_with_the_holders_pid(tmp_path, run_here):
    """Three refused attempts (plain, --resume, --overwrite), each after the first run has
    committed one more epoch. The first run is paused (SIGSTOP) while each attempt runs, so that
    it is certainly still training, whatever the machine's load, without running 60 long epochs
    to make sure; it holds its lock while paused, then trains on to its end. The attempts are this
    process (the first run is the other one)."""
    epochs = 20
    data = fake_mnist(tmp_path / "data", n_train=1000, n_test=50)
    out = tmp_path / "run"
    argv = train_argv(data, out, epochs=epochs)
    first = subprocess.Popen([sys.executable, "-m", "bbb", *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=env(BBB_DATA_VERIFY="0"))
    try:
        for k, extra in enumerate(((), ("--resume",), ("--overwrite",)), start=1):
            # the first run keeps training and writing its files between the attempts
            deadline = time.monotonic() + 120
            while _metric_lines(out) <= k:
                assert first.poll() is None, first.stderr.read() if first.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.01)
            os.kill(first.pid, signal.SIGSTOP)
            try:
                assert first.poll() is None and _metric_lines(out) <= epochs, "the first run ended too soon"
                assert _last_pid(out) == str(first.pid)
                before = {n: b for n, b in snapshot(out).items() if not n.endswith(".tmp")}
                second = run_here(*train_argv(data, out, *extra, epochs=epochs))
                assert first.poll() is None
                assert_one_line_error(second, f"pid {first.pid}", str(out), "in use")
                # the lock file still names the first run, none of its files is gone or changed
                assert (out / LOCK_NAME).read_text().split() == [str(first.pid)]
                assert before.items() <= snapshot(out).items()
            finally:
                os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=600) == 0, first.stderr.read() if first.stderr else ""
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    lines = (out / "metrics.csv").read_text().splitlines()
    assert len(lines) == epochs + 1 and (out / "summary.json").is_file()


@pytest.mark.release_independent
def test_a_killed_holder_releases_the_lock_and_its_temporary_files_are_cleaned(tmp_path, data_dir, finished,
                                                                              run_here):
    out = copy_run(finished, tmp_path / "run")
    with lock_held(out / LOCK_NAME) as holder:  # a process that holds the lock, then is killed -9
        before = snapshot(out)
        assert_one_line_error(run_here(*train_argv(data_dir, out, "--resume", epochs=2)), f"pid {holder.pid}")
        assert snapshot(out) == before
    stale = out / f".last.pt~{_host()}~999999999~abcd1234.tmp"
    stale.write_bytes(b"half a checkpoint")
    p = run(*train_argv(data_dir, out, "--resume", epochs=2))
    assert p.returncode == 0, p.stderr
    assert not stale.exists() and not (out / LOCK_NAME).exists()  # the killed holder's file too
    assert len((out / "metrics.csv").read_text().splitlines()) == 3


def _threads(out: Path) -> tuple[int, int]:
    """The thread count recorded in config.json and in last.pt."""
    return (json.loads((out / "config.json").read_text())["threads"],
            torch.load(out / "last.pt", weights_only=True)["threads"])


@pytest.fixture
def one_thread_each_time(run_here):
    """``bbb ARGV`` in this process, each call starting from torch's 1 thread (as a fresh process
    under OMP_NUM_THREADS=1 would); this process's thread count put back after the test."""
    before = torch.get_num_threads()

    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        torch.set_num_threads(1)
        return run_here(*argv)

    yield call
    torch.set_num_threads(before)


def test_threads_are_recorded_and_restored_on_resume(tmp_path, data_dir, one_thread_each_time):
    run = one_thread_each_time  # (in this process: four fresh interpreters cost 10 s of importing torch)
    out = tmp_path / "run"
    assert run(*train_argv(data_dir, out, "--threads", "2")).returncode == 0
    assert _threads(out) == (2, 2)
    # resumed without --threads (this process would take 1): the recorded 2
    p = run("train", "--resume", "--out", str(out), "--epochs", "2", "--quiet")
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    assert _threads(out) == (2, 2) and torch.get_num_threads() == 2
    # another count may be asked for: one line says that the result may then differ
    p = run("train", "--resume", "--out", str(out), "--epochs", "3", "--quiet", "--threads", "1")
    assert p.returncode == 0, p.stderr
    note = p.stderr.strip().splitlines()
    assert len(note) == 1 and "--threads 1" in note[0] and "with 2" in note[0], p.stderr
    assert _threads(out) == (2, 1)  # config.json: the count that started the run; last.pt: the latest
    assert json.loads((out / "config.json").read_text())["resumed"][-1]["threads"] == 1
    # a checkpoint of a bbb that recorded no thread count resumes as before
    ckpt = torch.load(out / "last.pt", weights_only=True)
    del ckpt["threads"]
    torch.save(ckpt, out / "last.pt")
    p = run("train", "--resume", "--out", str(out), "--epochs", "4", "--quiet")
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    assert len((out / "metrics.csv").read_text().splitlines()) == 5


def test_a_laplace_or_ensemble_folder_is_refused_as_a_runs_out_even_with_overwrite(tmp_path, data_dir, run_here):
    # it was "a run" to replace: --overwrite removed its eval.json and left laplace.json and
    # posterior.pt beside the new run's files, so bbb evaluate and predict read the folder as the
    # old Laplace posterior while bbb prune read the new run
    laplace = tmp_path / "laplace"
    laplace.mkdir()
    for name, text in (("laplace.json", '{"run": "runs/sgd"}'), ("posterior.pt", "a posterior"),
                       ("eval.json", '{"method": "laplace"}')):
        (laplace / name).write_text(text)
    ensemble = tmp_path / "ensemble"
    ensemble.mkdir()
    (ensemble / "eval.json").write_text(json.dumps({"members": ["runs/a", "runs/b"]}))
    for out, what in ((laplace, "a Laplace posterior"), (ensemble, "an ensemble's folder")):
        before = snapshot(out)
        for extra in ((), ("--overwrite",)):
            assert_one_line_error(run_here(*train_argv(data_dir, out, *extra)), what, "folder of its own")
        assert snapshot(out) == before


def test_another_commands_summary_json_is_refused_as_a_runs_out_even_with_overwrite(tmp_path, data_dir, run_here):
    # bbb train --out on a bbb regression folder said "already holds a run (summary.json)", and
    # --overwrite removed the regression's summary.json
    for name, summary in (("regression", {"rmse_bbb_median_in_data": 0.1, "quiet": False}),
                          ("bandit", {"late_window": 1000, "agents": []})):
        out = tmp_path / name
        out.mkdir()
        (out / "summary.json").write_text(json.dumps(summary))
        before = snapshot(out)
        for extra in ((), ("--overwrite",)):
            assert_one_line_error(run_here(*train_argv(data_dir, out, *extra)), "another command's",
                                  "folder of its own")
        assert snapshot(out) == before
