"""bbb.runs on CUDA: train() end to end with a bit-exact resume and --checkpoint-every,
checkpoints moving between the CPU and CUDA, a training epoch without a host sync, and
evaluate / predict / prune against the CPU."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cudakit import F32, QUIET, sync_errors, tiny_cfg

import bbb.runs.loop as L
from bbb.elbo import ELBO
from bbb.engine import Engine
from bbb.prune import prune
from bbb.runs import classifier_metrics, load_checkpoint, load_run, train
from bbb.runs.evaluation import mean_logits
from bbb.uncertainty import predict
from testkit import blobs


def _model_state(run, name="last.pt"):
    return load_checkpoint(run / name)["model"]


def _equal_states(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_train_on_cuda_resumes_bit_for_bit(tmp_path):
    """A run stopped after epoch 2 (on_epoch) and resumed, with --checkpoint-every 2, ends with
    the model, optimiser state and metrics of a run never stopped."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    s_whole = train(tiny_cfg(epochs=4), whole, data=blobs(), **QUIET)
    assert load_checkpoint(whole / "last.pt")["epoch"] == 4
    train(tiny_cfg(epochs=4, checkpoint_every=2), parts, data=blobs(), on_epoch=lambda row: row["epoch"] == 3,
          **QUIET)
    assert load_checkpoint(parts / "last.pt")["epoch"] == 3  # stopped: the held epoch is committed
    s_parts = train(tiny_cfg(epochs=4, checkpoint_every=2), parts, data=blobs(), resume=True, **QUIET)
    _equal_states(_model_state(parts), _model_state(whole))
    a, b = load_checkpoint(parts / "last.pt"), load_checkpoint(whole / "last.pt")
    for u, v in zip(a["optimizer"]["state"], b["optimizer"]["state"]):
        assert torch.equal(u, v)
    assert a["optimizer"]["counter"] == b["optimizer"]["counter"]
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in a["metrics"]]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in b["metrics"]]
    assert {k: v for k, v in s_parts.items() if k != "seconds"} == {k: v for k, v in s_whole.items() if k != "seconds"}
    assert torch.load(whole / "last.pt", map_location="cpu", weights_only=True)["rng"]["cuda"] is not None


_TRAIN_IN_A_PROCESS = """
import sys
sys.path[:0] = sys.argv[2:]
from cudakit import tiny_cfg, QUIET
from testkit import blobs
from bbb.runs import train
train(tiny_cfg(epochs=2, hidden=[512, 512]), sys.argv[1], data=blobs(), **QUIET)
"""


def test_two_processes_train_to_the_same_bits(tmp_path):
    """A resume after a kill runs in a new process, which compiles the engine's kernels afresh:
    each process, with an inductor cache of its own (nothing carried over), trains to the same
    bits (bbb.engine.kernels.compile_options: no reduction block size picked by timing)."""
    here = Path(__file__).resolve().parent
    src = here.parents[1] / "src"
    for name in ("a", "b"):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}"),
               "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
        subprocess.run([sys.executable, "-c", _TRAIN_IN_A_PROCESS, str(tmp_path / name), str(here), str(here.parent)],
                       check=True, env=env, timeout=600)
    _equal_states(_model_state(tmp_path / "a"), _model_state(tmp_path / "b"))


@pytest.mark.parametrize("first, then", [("cpu", "cuda"), ("cuda", "cpu")])
def test_a_checkpoint_moves_between_the_cpu_and_cuda(tmp_path, first, then):
    """Trained 2 epochs on one device, resumed for the third on the other (device may change on
    resume): it continues from the stored state, close to a run that stayed on the first."""
    run, stay = tmp_path / "run", tmp_path / "stay"
    cfg = {"prior": "gaussian"}  # a smooth KL: the two devices' rounding stays small over an epoch
    train(tiny_cfg(epochs=2, device=first, **cfg), run, data=blobs(), **QUIET)
    s = train(tiny_cfg(epochs=3, device=then, **cfg), run, data=blobs(), resume=True, **QUIET)
    train(tiny_cfg(epochs=3, device=first, **cfg), stay, data=blobs(), **QUIET)
    assert s["epochs"] == 3 and math.isfinite(s["test_nll"])
    moved, stayed = _model_state(run), _model_state(stay)
    assert all(v.device.type == "cpu" for v in moved.values())  # checkpoints load onto the CPU
    for k in moved:  # one epoch on another device's arithmetic: the same run, to float32 rounding
        torch.testing.assert_close(moved[k], stayed[k], rtol=1e-3, atol=1e-4)
    model, _ = load_run(run, "last", device=then)
    assert next(model.parameters()).device.type == then


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_training_epoch_does_not_synchronise(optimizer):
    """The epoch as train() runs it (run_epoch: the permutation from pinned memory, the KL weight
    a device scalar, the engine's step) under torch's sync debug mode "error"; its sums are read
    after."""
    cfg = tiny_cfg(optimizer=optimizer)
    d = {k: v.to("cuda") for k, v in blobs(n_train=256).items()}
    dev = torch.device("cuda")
    model = L.build_model(cfg, 12, 3).to(dev)
    elbo = ELBO(model, "categorical", num_batches=8, kl_weighting="blundell")
    opt = L.make_optimizer(cfg, model)
    assert isinstance(opt, Engine) and opt.fused
    table = L.kl_weight_table(elbo, model, dev)
    gen = torch.Generator().manual_seed(0)
    L.run_epoch(model, elbo, opt, d["train_x"], d["train_y"], L._to_device(torch.randperm(256, generator=gen), dev),
                32, kl_weights=table)  # the engine compiles here
    with sync_errors():
        perm = L._to_device(torch.randperm(256, generator=gen), dev)
        sums = L.run_epoch(model, elbo, opt, d["train_x"], d["train_y"], perm, 32, kl_weights=table)
        val = L.validation_sums(model, d["val_x"], d["val_y"])  # (errors, summed NLL) of the mean weights
    assert bool(torch.isfinite(sums).all()) and 0 <= int(val[0]) <= 60 and float(val[1]) > 0


def test_a_train_call_reads_the_device_once_per_epoch(tmp_path, monkeypatch):
    """train() on CUDA: the epoch's numbers come from one read (a .tolist() of the epoch's sums,
    the finiteness flag, the validation errors and NLL, the test errors), whatever the number of
    minibatches."""
    reads = []
    real = torch.Tensor.tolist

    def tolist(t):
        if t.is_cuda:
            reads.append(tuple(t.shape))
        return real(t)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    train(tiny_cfg(epochs=2, test_each_epoch=True), tmp_path / "run", data=blobs(), **QUIET)
    assert reads[:2] == [(7,), (7,)], reads  # 3 sums, finite, val errors and NLL, test errors


def _trained_pair(tmp_path):
    run = tmp_path / "run"
    train(tiny_cfg(epochs=2, device="cpu"), run, data=blobs(), **QUIET)
    cpu_model, _ = load_run(run, "last", device="cpu")
    cuda_model, _ = load_run(run, "last", device="cuda")
    return cpu_model, cuda_model


def test_evaluate_predict_and_prune_on_cuda_match_the_cpu(tmp_path):
    cpu_model, cuda_model = _trained_pair(tmp_path)
    d = blobs()
    x, y = d["test_x"], d["test_y"]
    xc, yc = x.cuda(), y.cuda()
    torch.testing.assert_close(mean_logits(cuda_model, xc).cpu(), mean_logits(cpu_model, x), **F32)
    torch.testing.assert_close(predict(cuda_model, xc, mode="mean").cpu(), predict(cpu_model, x, mode="mean"), **F32)
    a = classifier_metrics(cpu_model, x, y, "bbb", samples=8)
    b = classifier_metrics(cuda_model, xc, yc, "bbb", samples=8)
    assert a["error"] == b["error"] and a["samples"] == b["samples"] == 8
    for k in ("error_mc", "nll", "ece", "brier"):  # other noise (the device's generator): close, not equal
        assert math.isfinite(b[k]) and abs(a[k] - b[k]) < 0.25, (k, a[k], b[k])
    samples = predict(cuda_model, xc, num_samples=5)
    assert samples.shape == (5, x.shape[0], 3) and samples.device.type == "cuda"
    ra, rb = prune(cpu_model, 0.5), prune(cuda_model, 0.5)
    assert (ra.total, ra.kept) == (rb.total, rb.kept) and rb.threshold == pytest.approx(ra.threshold, rel=1e-5)
    masks_a = [b_ for n, b_ in cpu_model.named_buffers() if n.endswith("_mask")]
    masks_b = [b_.cpu() for n, b_ in cuda_model.named_buffers() if n.endswith("_mask")]
    differ = sum(int((u != v).sum()) for u, v in zip(masks_a, masks_b))
    assert masks_a and differ <= 2  # (SNRs equal to float rounding may swap at the threshold)
    torch.testing.assert_close(mean_logits(cuda_model, xc).cpu(), mean_logits(cpu_model, x), rtol=1e-3, atol=1e-3)


def test_bf16_training_on_cuda_learns(tmp_path):
    s = train(tiny_cfg(epochs=3, bf16=True), tmp_path / "bf16", data=blobs(), **QUIET)
    f = train(tiny_cfg(epochs=3), tmp_path / "f32", data=blobs(), **QUIET)
    assert math.isfinite(s["test_nll"]) and s["test_error"] <= f["test_error"] + 0.1
    assert s["test_error"] < 0.3


def test_train_takes_mnist_tensors_already_on_the_gpu(tmp_path):
    """Data handed over on the device (as the bench's epoch child does): the check that the test
    images are the dataset's own compared them on the host by numpy, and raised on CUDA tensors."""
    from bbb.data import load_mnist

    try:
        images, labels = load_mnist("test", "mnist", None, download=False)
    except Exception as e:  # noqa: BLE001  (no MNIST files here: BBB_DATA)
        pytest.skip(f"MNIST's test set is not here: {e}")
    x = (images.flatten(1).float() / 126.0)[:512].cuda()
    y = labels[:512].cuda()
    data = {"train_x": x[:384], "train_y": y[:384], "val_x": x[384:448], "val_y": y[384:448],
            "test_x": x, "test_y": y}
    s = train(tiny_cfg(epochs=1, dataset="mnist"), tmp_path / "run", data=data, **QUIET)
    assert math.isfinite(s["val_error"])
    import json

    assert json.loads((tmp_path / "run" / "config.json").read_text()).get("data_source") is None
