"""Out of memory in ``bbb train``, ``bbb evaluate`` and ``bbb prune`` is one line that says what
to make smaller, and a run it stops stays resumable (issue 19). A size that cannot fit is refused
before anything is allocated (a lower bound against the device's memory: no test allocates
gigabytes); an allocation failing inside torch is simulated by patching it in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import bbb.runs.evaluation as E
import bbb.runs.loop as L
import bbb.uncertainty as U
from bbb.runs.rundir import RUN_FILES
from faultkit import assert_one_line_error, bbb, bbb_in_process, fake_mnist


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return fake_mnist(tmp_path_factory.mktemp("data"), n_train=300, n_test=50)


@pytest.fixture
def unverified(monkeypatch) -> None:
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")  # the fake MNIST has no known checksum


def train_argv(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--data-dir", str(data), "--out", str(out), "--hidden", "16", "--batch-size", "50",
            "--val-size", "100", "--device", "cpu", "--eval-samples", "2", "--quiet", *extra]


def test_a_network_that_cannot_fit_is_refused_before_allocating(tmp_path, data):
    out = tmp_path / "run"
    p = bbb(*train_argv(data, out, "--hidden", "1000000", "1000000"), BBB_DATA_VERIFY="0", timeout=120)
    assert_one_line_error(p, "out of memory", "GiB", "--hidden", "--batch-size", "--train-samples", "nothing was saved")
    assert not [n for n in RUN_FILES if (out / n).exists()]
    assert E.device_memory(torch.device("cpu")) > 2**20


def test_out_of_memory_in_training_is_one_line_and_the_run_resumes(capsys, tmp_path, data, unverified,
                                                                   monkeypatch):
    run = tmp_path / "run"
    real, steps = L.training_step, []

    def step(*a, **k):
        steps.append(1)
        if len(steps) == 5:  # in epoch 2 (4 minibatches an epoch)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(L, "training_step", step)
        p = bbb_in_process(capsys, *train_argv(data, run, "--epochs", "3"))
    assert_one_line_error(p, "out of memory while training", "--batch-size", "--hidden", "--train-samples",
                          "holds epoch 1", f"bbb train --resume --out {run}")
    p = bbb_in_process(capsys, "train", "--resume", "--out", str(run), "--quiet")
    assert p.returncode == 0, p.stderr
    assert json.loads((run / "summary.json").read_text())["epochs"] == 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("trained") / "run"
    p = bbb(*train_argv(data, out, "--epochs", "1"), BBB_DATA_VERIFY="0")
    assert p.returncode == 0, p.stderr
    return out


def test_evaluate_with_too_many_samples_is_refused_before_allocating(capsys, trained, unverified):
    p = bbb_in_process(capsys, "evaluate", str(trained), "--samples", "1000000000", "--device", "cpu")
    assert_one_line_error(p, "out of memory", "GiB", "--samples")
    assert not (trained / "eval.json").exists()


@pytest.mark.parametrize("command, where, error, words", [
    ("evaluate", (U, "predict"),
     RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried "
                  "to allocate 1099511627776 bytes."), ["while evaluating", "--samples", "not enough memory"]),
    ("prune", (E, "prune"), MemoryError(), ["while pruning", "--device", "MemoryError"]),
])
def test_out_of_memory_in_evaluate_and_prune_is_one_line(capsys, trained, unverified, monkeypatch, command, where,
                                                         error, words):
    def fail(*a, **k):
        raise error

    monkeypatch.setattr(*where, fail)
    p = bbb_in_process(capsys, command, str(trained), "--device", "cpu")
    assert_one_line_error(p, "out of memory", *words)
    assert not (trained / "eval.json").exists() and not (trained / "pruning.csv").exists()


@pytest.mark.parametrize("command", ["ood", "uncertain"])
def test_out_of_memory_in_ood_and_uncertain_is_one_line(capsys, tmp_path, trained, data, unverified, monkeypatch,
                                                        command):
    """Before, a --samples too large for memory was a RuntimeError's traceback (exit code 1)."""
    import shutil

    import bbb.experiments.uncertainty as UE

    both = tmp_path / "data"
    shutil.copytree(data / "mnist", both / "mnist")
    shutil.copytree(data / "mnist", both / "fashion-mnist")  # (ood's other data set)

    def fail(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 5017600000000 bytes. Error code 12")

    monkeypatch.setattr(UE, "sample_probs", fail)
    p = bbb_in_process(capsys, command, str(trained), "--data-dir", str(both), "--device", "cpu", "--samples", "2")
    line = assert_one_line_error(p, "out of memory while scoring", "fewer --samples", "can't allocate memory")
    assert "allocate 50176000" not in line  # a long line is cut between words, never inside a number
    assert not (trained / f"{command}.json").exists()
