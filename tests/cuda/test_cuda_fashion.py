"""``bbb reproduce fashion``'s jobs on CUDA: a job stopped after an epoch goes on from its
checkpoint to the same bits as a job never stopped (the checkpoint is loaded onto the device, its
generators' states must go back to the host: the first resumed GPU run failed there with
"RNG state must be a torch.ByteTensor"). With cuDNN's defaults the resumed jobs ended
with another network (scores moved by ~1e-9; docs/results.md, the GPU checks), as a convolution's
weight gradient added by atomics in no fixed order would make them: the jobs now run with cuDNN's
deterministic algorithms (``bbb.devices.deterministic_convolutions``)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

from bbb.experiments.fashion.settings import FashionMethod, Phase, Schedule, Setting
from bbb.experiments.fashion.train import Job, run_job
from faultkit import fake_mnist

SMALL = Schedule(epochs=2, n_train=300, n_test=100, test_samples=2, val_size=200)
METHODS = [(FashionMethod.ADAMW, Setting()), (FashionMethod.IVON, Setting()),
           (FashionMethod.BBB, Setting(beta=1.0, estimator="flipout")),
           (FashionMethod.MC_DROPOUT, Setting(dropout=0.25))]
if importlib.util.find_spec("ivon") is not None:
    METHODS.append((FashionMethod.IVON_OPT, Setting()))


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = fake_mnist(tmp_path_factory.mktemp("data"), n_train=1200, n_test=200)
    shutil.copytree(root / "mnist", root / "fashion-mnist")
    return root


@pytest.mark.parametrize("method, setting", METHODS, ids=[m.value for m, _ in METHODS])
def test_a_cuda_job_stopped_after_an_epoch_goes_on_to_the_same_bits(fake_data, monkeypatch, tmp_path, cuda,
                                                                    method, setting):
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    job = Job(method, 0, Phase.TEST, setting)
    whole = run_job(job, SMALL, str(fake_data), cuda, tmp_path / "a")

    def stop_after_one(n):
        raise KeyboardInterrupt  # as a kill after the first epoch's checkpoint

    with pytest.raises(KeyboardInterrupt):
        run_job(job, SMALL, str(fake_data), cuda, tmp_path / "b", stop_after_one)
    state = torch.load(tmp_path / "b" / job.name / "last.pt", map_location="cpu", weights_only=True)
    assert state["epoch"] == 1 and state["device"] == cuda.type
    resumed = run_job(job, SMALL, str(fake_data), cuda, tmp_path / "b")
    # the network first: where it differs the scores move by their last bits only
    ma, mb = (torch.load(tmp_path / r / job.name / "last.pt", map_location="cpu", weights_only=True)["model"]
              for r in ("a", "b"))
    assert ma.keys() == mb.keys()
    assert [k for k in ma if not torch.equal(ma[k], mb[k])] == []
    same = ("acc", "nll", "ece", "brier", "ood_auroc", "final_train_loss", "epochs")
    assert {k: resumed[k] for k in same} == {k: whole[k] for k in same}
    a = torch.load(tmp_path / "a" / job.name / "probs.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / job.name / "probs.pt", weights_only=True)
    assert torch.equal(a["eval"], b["eval"]) and torch.equal(a["ood"], b["ood"])


def _weights(folder, job):
    return torch.load(folder / job.name / "last.pt", map_location="cpu", weights_only=True)["model"]


def test_the_same_cuda_job_run_twice_ends_with_the_same_network(fake_data, monkeypatch, tmp_path, cuda):
    """Apart from any resume: where this fails the resume test above cannot pass, and the cause is an
    operation without a fixed order (a convolution's weight gradient by atomics), not the checkpoint."""
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")
    job = Job(FashionMethod.ADAMW, 0, Phase.TEST, Setting())
    for run in ("a", "b"):
        run_job(job, SMALL, str(fake_data), cuda, tmp_path / run)
    a, b = _weights(tmp_path / "a", job), _weights(tmp_path / "b", job)
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
