"""Turning the engine's torch.compile off without code: ``BBB_COMPILE`` (0, 1, auto) for the
library and the processes it starts, and ``BBB_COMPILE_NOTICE=0`` to silence its one notice
(the command line's ``--no-compile`` and ``--quiet``: tests/applications/cli/test_one_cli.py)."""

from __future__ import annotations

import pytest
import torch

import bbb.engine.kernels as K
import bbb.engine.support as S
from bbb import UserError
from bbb.engine import Engine
from bbb.engine.engine import COMPILE_MIN_NUMEL
from bbb.nn import BayesMLP

CPU = torch.device("cpu")


@pytest.mark.parametrize("value, want", [("0", False), ("off", False), ("1", True), ("auto", None), ("", None)])
def test_bbb_compile_sets_the_engines_default(monkeypatch, value, want):
    monkeypatch.setenv(S.COMPILE_ENV, value)
    assert S.compile_from_env() is want
    big, small = COMPILE_MIN_NUMEL, COMPILE_MIN_NUMEL - 1
    assert S.compile_default(None, CPU, big, COMPILE_MIN_NUMEL) is (True if want is None else want)
    assert S.compile_default(None, CPU, small, COMPILE_MIN_NUMEL) is (False if want is None else want)
    # an engine's explicit choice wins
    assert S.compile_default(False, CPU, big, COMPILE_MIN_NUMEL) is False


def test_bbb_compile_0_keeps_a_large_network_eager(monkeypatch):
    net = BayesMLP(64, [512], 10)  # above COMPILE_MIN_NUMEL: compiled by default on the CPU
    monkeypatch.setenv(S.COMPILE_ENV, "0")
    eng = Engine(net, "adam", kl="mc")
    assert eng.fused and not eng.compiled


def test_a_bad_value_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(S.COMPILE_ENV, "maybe")
    with pytest.raises(UserError, match=r"^BBB_COMPILE must be 0 \(never compile\), 1 \(always\) or auto, got 'maybe'"):
        S.compile_from_env()


def test_the_compile_notice_is_silenced_by_its_variable(monkeypatch, capsys):
    monkeypatch.setattr(K, "_COMPILE_NOTICE", [])
    monkeypatch.setenv(K.COMPILE_NOTICE_ENV, "0")
    K._announce("prime", None)
    K._announce("prime", 1.0)
    K._announce("step", 2.0)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(K, "_COMPILE_NOTICE", [])
    monkeypatch.delenv(K.COMPILE_NOTICE_ENV)
    K._announce("prime", None)
    K._announce("prime", 1.0)
    K._announce("step", 2.0)
    err = capsys.readouterr().err
    assert "compiling its kernels" in err and "BBB_COMPILE=0" in err and "kernels compiled in 3.0 s" in err


def test_a_gpu_kernel_compiles_in_inductors_deterministic_mode():
    """Triton would pick a reduction's block sizes by timing, once per process: a resumed run in a
    new process could sum in another order. On a GPU the engine asks inductor not to (its
    ``deterministic`` option, where this torch has it); the CPU, which does not time, gets none.
    (tests/cuda/test_cuda_runs.py checks two processes' bits on a GPU.)"""
    import torch._inductor.config as inductor_config

    on = {"deterministic": True} if hasattr(inductor_config, "deterministic") else {}
    cpu = ((3, 4), torch.float32, "cpu")
    gpu = ((3, 4), torch.float32, "cuda:0")
    assert K.compile_options(("prime", (cpu, (cpu, 2)), 7)) == {}
    assert K.compile_options((cpu, (cpu, gpu))) == on
    assert K.compile_options((gpu,)) == on
    assert K.compile_options(((3, 4), "cuda", 1)) == {}  # not a tensor's signature: no device
