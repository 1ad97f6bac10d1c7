"""``last.pt`` is a run's commit point (issue 19): ``best.pt`` and ``metrics.csv`` derive from it,
the readers take the committed state when a process died between the writes, resuming rewrites
the derived files, and a damaged ``metrics.csv`` is named instead of used. The kill -9 version of
these checks, at 50 random instants: ``tests/runs/test_train_kill.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import bbb.runs.loop as L
from bbb.errors import CheckpointError
from bbb.runs import committed_checkpoint, load_checkpoint, load_run, read_metrics, train
from testkit import blobs

from .test_train import QUIET, rows_without_seconds, tiny_cfg


class Killed(BaseException):
    """Stands for SIGKILL: no handler of the library catches it."""


def train_killed_after_commit(monkeypatch, run: Path, epoch: int) -> None:
    """Train 3 epochs into ``run``, dying right after the ``last.pt`` of ``epoch``, before
    best.pt and metrics.csv."""
    real = L.atomic_torch_save

    def save(path, obj):
        real(path, obj)
        if Path(path).name == "last.pt" and obj["epoch"] == epoch:
            raise Killed

    with monkeypatch.context() as m:
        m.setattr(L, "atomic_torch_save", save)
        with pytest.raises(Killed):
            train(tiny_cfg(epochs=3), run, data=blobs(), **QUIET)


def summary(run: Path) -> dict:
    return {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k != "seconds"}


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("full") / "run"
    train(tiny_cfg(epochs=3), run, data=blobs(), **QUIET)
    return run


def test_readers_and_resume_take_the_committed_state_after_a_kill_between_writes(tmp_path, monkeypatch, full):
    run = tmp_path / "run"
    train_killed_after_commit(monkeypatch, run, 2)
    last = load_checkpoint(run / "last.pt")
    assert last["epoch"] == 2 and last["best"]["epoch"] == 2  # epoch 2 improved on validation
    assert load_checkpoint(run / "best.pt")["epoch"] == 1  # ... but best.pt was not written
    assert len((run / "metrics.csv").read_text().splitlines()) == 2  # nor its metrics.csv row

    # the readers see the committed state: two epochs, and the model of epoch 2 as the best
    assert rows_without_seconds(run) == rows_without_seconds(full)[:2]
    path, best = committed_checkpoint(run, "best")
    assert path.name == "last.pt" and best["epoch"] == 2
    model, _ = load_run(run, "best")
    for k, v in model.state_dict().items():
        assert torch.equal(v, last["model"][k]), k

    lines: list[str] = []
    train(tiny_cfg(epochs=3), run, data=blobs(), resume=True, quiet=True, log=lines.append)
    assert rows_without_seconds(run) == rows_without_seconds(full)
    assert summary(run) == summary(full)
    for name in ("best.pt", "last.pt"):
        a, b = load_checkpoint(run / name), load_checkpoint(full / name)
        assert a["epoch"] == b["epoch"] and all(torch.equal(v, b["model"][k]) for k, v in a["model"].items())
    assert not [s for s in lines if "best" in s]  # repaired without a word: nothing was lost


def test_a_finished_run_killed_before_its_metrics_and_summary_is_completed_by_resume(tmp_path, monkeypatch, full):
    run = tmp_path / "run"
    train_killed_after_commit(monkeypatch, run, 3)
    assert not (run / "summary.json").exists()
    train(tiny_cfg(epochs=3), run, data=blobs(), resume=True, **QUIET)
    assert rows_without_seconds(run) == rows_without_seconds(full) and summary(run) == summary(full)


def test_a_best_pt_left_behind_by_an_older_bbb_is_said_and_kept_consistent(tmp_path, full):
    """An older bbb killed between last.pt and best.pt, then resumed, went on with best.pt one
    epoch behind for good; the best model of the recorded epoch is lost. Resuming says so in one
    line and carries on with the epoch best.pt does hold, so the summary describes that model."""
    run = tmp_path / "run"
    shutil.copytree(full, run)
    ckpt = load_checkpoint(run / "last.pt")
    held = load_checkpoint(run / "best.pt")["epoch"]
    assert ckpt["epoch"] == 3 and held < 3
    other = 2 if held == 1 else 1
    ckpt["best"] = {"epoch": other, "val_error": 0.0}  # an epoch before the last that best.pt does not hold
    torch.save(ckpt, run / "last.pt")
    lines: list[str] = []
    s = train(tiny_cfg(epochs=3), run, data=blobs(), resume=True, quiet=True, log=lines.append)
    said = [line for line in lines if "best.pt" in line]
    assert len(said) == 1 and f"holds epoch {held}" in said[0] and f"best epoch {other}" in said[0]
    assert s["best_epoch"] == held and load_checkpoint(run / "best.pt")["epoch"] == held


def other_seconds(text: str) -> str:
    """A number changed that still reads as one: row 1's seconds."""
    lines = text.splitlines(keepends=True)
    cells = lines[1].split(",")
    lines[1] = ",".join([cells[0], "1.5", *cells[2:]])
    return "".join(lines)


@pytest.mark.parametrize("damage, words", [
    (lambda t: t[:-3], ["damaged"]),  # cut by 3 characters
    (other_seconds, ["does not match", "last.pt", "--resume"]),
    (lambda t: t.replace("val_error", "val_err"), ["header"]),
    (lambda t: "", ["header"]),
    (lambda t: t.replace("\n2,", "\n7,"), ["row 2"]),
])
def test_a_damaged_metrics_csv_is_named_not_used(tmp_path, full, damage, words):
    run = tmp_path / "run"
    shutil.copytree(full, run)
    path = run / "metrics.csv"
    path.write_text(damage(path.read_text()))
    with pytest.raises(CheckpointError) as e:
        read_metrics(run)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg and all(w in msg for w in words), msg


def test_metrics_without_a_checkpoint_are_checked_by_themselves(tmp_path, full):
    run = tmp_path / "run"
    shutil.copytree(full, run)
    (run / "last.pt").unlink()
    assert rows_without_seconds(run) == rows_without_seconds(full)  # nothing to compare with: read as is
    (run / "metrics.csv").write_text((run / "metrics.csv").read_text() + "4,1.0\n")
    with pytest.raises(CheckpointError, match="row 4"):
        read_metrics(run)
    (run / "metrics.csv").unlink()
    with pytest.raises(CheckpointError, match="not found"):
        read_metrics(run)


def test_a_resumed_run_killed_before_its_end_keeps_no_summary_of_the_run_before(tmp_path, monkeypatch, full):
    """A finished run resumed with more epochs and killed before its end kept the summary.json of
    its shorter self: bbb report and compare showed those test numbers as the run's, and refused a
    fresh eval.json of the new best epoch as stale (its "run bbb evaluate again" went round in a
    circle). The resumed run now removes it, and is one stopped before its end until it finishes."""
    run = tmp_path / "run"
    shutil.copytree(full, run)
    real = L.atomic_torch_save

    def save(path, obj):
        real(path, obj)
        if Path(path).name == "last.pt" and obj["epoch"] == 4:
            raise Killed

    with monkeypatch.context() as m:
        m.setattr(L, "atomic_torch_save", save)
        with pytest.raises(Killed):
            train(tiny_cfg(epochs=6), run, data=blobs(), resume=True, **QUIET)
    assert not (run / "summary.json").exists()
    train(tiny_cfg(epochs=6), run, data=blobs(), resume=True, **QUIET)
    assert json.loads((run / "summary.json").read_text())["epochs"] == 6


def damaged_copy(tmp_path: Path, full: Path, best_epoch: int) -> Path:
    """A copy of ``full`` whose last.pt records ``best_epoch`` as the best and whose best.pt is cut short
    (a copy of the folder interrupted, a disk fault), with an eval.json beside them."""
    run = tmp_path / "run"
    shutil.copytree(full, run)
    ckpt = load_checkpoint(run / "last.pt")
    ckpt["best"] = {**ckpt["best"], "epoch": best_epoch}
    torch.save(ckpt, run / "last.pt")
    (run / "best.pt").write_bytes((run / "best.pt").read_bytes()[:1000])
    (run / "eval.json").write_text("{}")
    return run


def test_a_damaged_best_pt_whose_epoch_last_pt_holds_is_read_from_last_pt_and_rewritten(tmp_path, full):
    run = damaged_copy(tmp_path, full, 3)
    path, ckpt = committed_checkpoint(run, "best")
    assert path.name == "last.pt" and ckpt["epoch"] == 3
    lines: list[str] = []
    train(tiny_cfg(epochs=3), run, data=blobs(), resume=True, quiet=True, log=lines.append)
    assert load_checkpoint(run / "best.pt")["epoch"] == 3
    assert [s for s in lines if "damaged" in s and "best.pt" in s]


def test_a_damaged_best_pt_of_an_earlier_epoch_is_said_and_resume_removes_nothing(tmp_path, full):
    """Resuming removed summary.json and eval.json, then failed on the damaged best.pt: the run was
    left as one stopped before its end, its results gone, with nothing said of what to do."""
    run = damaged_copy(tmp_path, full, 1)
    with pytest.raises(CheckpointError) as e:
        committed_checkpoint(run, "best")
    assert "--which last" in str(e.value) and "epoch 1" in str(e.value) and "\n" not in str(e.value)
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(CheckpointError, match="move it out"):
        train(tiny_cfg(epochs=4), run, data=blobs(), resume=True, **QUIET)
    assert sorted(p.name for p in run.iterdir()) == before  # summary.json, eval.json kept
    (run / "best.pt").unlink()  # as the message says: the run goes on
    train(tiny_cfg(epochs=4), run, data=blobs(), resume=True, **QUIET)
    assert load_checkpoint(run / "last.pt")["epoch"] == 4


def test_a_damaged_last_pt_says_what_best_pt_still_holds(tmp_path, full):
    run = tmp_path / "run"
    shutil.copytree(full, run)
    epoch = load_checkpoint(run / "best.pt")["epoch"]
    (run / "last.pt").write_bytes((run / "last.pt").read_bytes()[:1000])
    for read in (lambda: load_run(run, "best"), lambda: train(tiny_cfg(epochs=4), run, data=blobs(), resume=True,
                                                               **QUIET)):
        with pytest.raises(CheckpointError) as e:
            read()
        assert f"best.pt (epoch {epoch}) is whole" in str(e.value) and "copy it over last.pt" in str(e.value)
        assert "there is a high" not in str(e.value)  # torch's sentence, cut, is left out
    (run / "best.pt").unlink()
    with pytest.raises(CheckpointError, match="restore the folder from a copy"):
        load_run(run, "last")


def test_a_checkpoint_that_does_not_match_its_model_says_how(tmp_path, full):
    run = tmp_path / "run"
    shutil.copytree(full, run)
    (run / "last.pt").unlink()
    ckpt = load_checkpoint(run / "best.pt")
    ckpt["config"]["hidden"] = [8]
    torch.save(ckpt, run / "best.pt")
    with pytest.raises(CheckpointError, match="size mismatch for layers.0.weight_mu"):  # not torch's first line alone
        load_run(run)


def test_load_run_and_load_model_take_auto_and_refuse_a_missing_cuda_in_one_line(full):
    """bbb.load_model(RUN, device="cuda") on a machine without CUDA raised torch's AssertionError, and device="auto"
    (the command line's default) a RuntimeError; bbb.load_model of a Laplace folder took both."""
    from bbb.errors import UserError
    from bbb.runs import load_model

    want = "cuda" if torch.cuda.is_available() else "cpu"
    for load in (load_run, load_model):
        assert load(full, device="auto") is not None
        if want == "cpu":
            with pytest.raises(UserError, match="no CUDA device"):
                load(full, device="cuda")
    model, _ = load_run(full, device="auto")
    assert next(model.parameters()).device.type == want


def test_a_damaged_best_pt_beside_a_last_pt_without_a_best_record_names_no_epoch(tmp_path, full):
    run = damaged_copy(tmp_path, full, 1)
    ckpt = load_checkpoint(run / "last.pt")
    del ckpt["best"]  # (an older bbb's)
    torch.save(ckpt, run / "last.pt")
    for read in (lambda: committed_checkpoint(run, "best"),
                 lambda: train(tiny_cfg(epochs=4), run, data=blobs(), resume=True, **QUIET)):
        with pytest.raises(CheckpointError) as e:
            read()
        assert "it held the best epoch" in str(e.value) and "None" not in str(e.value) and " 0," not in str(e.value)


def test_a_missing_best_pt_says_what_last_pt_offers(tmp_path, full):
    run = damaged_copy(tmp_path, full, 1)
    (run / "best.pt").unlink()
    with pytest.raises(CheckpointError, match="best.pt not found .*--which last uses the last epoch, 3"):
        load_run(run, "best")
    assert load_run(run, "last") is not None
