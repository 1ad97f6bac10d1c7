"""The torch calls that changed between the releases bbb supports (pyproject's floor to the pin):
each is asked once through a helper that takes the older path on older releases
(``make test-torch TORCH=torch==X`` runs the fast lane on another release)."""

from __future__ import annotations

import warnings

import pytest
import torch

import bbb.devices as devices


def test_torch_release_is_the_installed_major_and_minor():
    major, minor = devices.torch_release()
    assert str(torch.__version__).startswith(f"{major}.{minor}")


def test_autocast_enabled_follows_the_cpu_autocast_context():
    assert not devices.autocast_enabled("cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert devices.autocast_enabled("cpu")
        assert not devices.autocast_enabled("cuda")
    assert not devices.autocast_enabled("cpu")


def test_autocast_enabled_takes_the_pre_2_4_calls_where_the_device_argument_does_not_exist(monkeypatch):
    """Before torch 2.4, torch.is_autocast_enabled() took no argument (and asked about CUDA)."""
    calls: list[tuple] = []

    def no_argument(*args):
        calls.append(args)
        if args:
            raise TypeError("is_autocast_enabled() takes no arguments (1 given)")
        return False

    monkeypatch.setattr(devices, "_AUTOCAST_TAKES_DEVICE", False)
    monkeypatch.setattr(torch, "is_autocast_enabled", no_argument)
    monkeypatch.setattr(torch, "is_autocast_cpu_enabled", lambda: True, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert devices.autocast_enabled("cpu")
        assert not devices.autocast_enabled("cuda")
        assert not devices.autocast_enabled("no_such_device")
    assert calls == [()]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("bias_shape", [(2, 4), (4,)])
def test_the_compiled_k_sample_convolution_adds_the_bias_as_the_eager_one(monkeypatch, transposed, bias_shape):
    """Under torch.compile the k-sample fold adds each sample's bias after the convolution (torch
    2.11's Inductor cannot lower a reshaped bias into it): the same numbers as the eager fold."""
    import bbb.functional as BF

    torch.manual_seed(0)
    x = torch.randn(3, 2, 6, 6)
    w = torch.randn(2, 2, 4, 3, 3) if transposed else torch.randn(2, 4, 2, 3, 3)
    b = torch.randn(*bias_shape)
    eager = BF.conv(x, w, b, padding=1, nd=2, transposed=transposed)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    folded = BF.conv(x, w, b, padding=1, nd=2, transposed=transposed)
    assert folded.shape == eager.shape == (2, 3, 4, 6, 6)
    torch.testing.assert_close(folded, eager)
    for i in range(2):  # and each sample is its own network's convolution
        conv = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
        torch.testing.assert_close(folded[i], conv(x, w[i], b[i] if b.dim() == 2 else b, padding=1))


def test_deterministic_convolutions_sets_cudnn_for_the_block_and_restores_it_even_after_an_error(monkeypatch):
    cudnn = torch.backends.cudnn
    monkeypatch.setattr(cudnn, "deterministic", False)
    monkeypatch.setattr(cudnn, "benchmark", True)
    with devices.deterministic_convolutions():
        assert (cudnn.deterministic, cudnn.benchmark) == (True, False)
    assert (cudnn.deterministic, cudnn.benchmark) == (False, True)
    with pytest.raises(KeyboardInterrupt), devices.deterministic_convolutions():
        raise KeyboardInterrupt
    assert (cudnn.deterministic, cudnn.benchmark) == (False, True)
