"""The shared pieces behind the Bayesian layers' conversion and constructors (one
:meth:`bbb.nn.BayesModule.from_torch` over each class's ``_torch_options``; the conv classes'
constructors inherited from their family; :class:`~bbb.nn.BayesLSTM`'s constructor being the
recurrent base's) and the one cache-folder rule of :mod:`bbb.data.sources`."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations

import bbb
from bbb.data import sources
from bbb.nn import (
    BayesConv2d,
    BayesConvTranspose1d,
    BayesEmbeddingBag,
    BayesGRU,
    BayesLinear,
    BayesLSTM,
    BayesModule,
    BayesMultiheadAttention,
    BayesRNN,
)


def test_the_earlier_names_are_from_torch():
    lin = nn.Linear(3, 2)
    a, b = BayesLinear.from_linear(lin, rho_init=-4.0), BayesLinear.from_torch(lin, rho_init=-4.0)
    assert type(a) is type(b) is BayesLinear
    assert torch.equal(a.weight, lin.weight) and torch.equal(a.state_dict()["weight_rho"], b.state_dict()["weight_rho"])
    conv = nn.Conv2d(2, 3, 3, bias=False)
    c = BayesConv2d.from_conv(conv, from_weights=False)
    assert type(c) is BayesConv2d and c.bias is None and not torch.equal(c.weight, conv.weight)


def test_linear_converts_subclasses_the_others_exact_types():
    class MyLinear(nn.Linear):
        pass

    assert type(BayesLinear.from_torch(MyLinear(2, 2))) is BayesLinear
    with pytest.raises(bbb.UserError, match=r"BayesLinear.from_torch needs an nn.Linear, got Conv1d"):
        BayesLinear.from_torch(nn.Conv1d(1, 1, 1))
    with pytest.raises(bbb.UserError, match=r"BayesGRU.from_torch needs an nn.GRU, got LSTM"):
        BayesGRU.from_torch(nn.LSTM(2, 2))
    with pytest.raises(NotImplementedError, match="converts no torch.nn layer"):
        BayesModule.from_torch(nn.Linear(2, 2))


def test_a_parametrized_child_is_refused():
    att = nn.MultiheadAttention(4, 2)
    parametrizations.weight_norm(att.out_proj)
    with pytest.raises(bbb.UserError, match="parametrization"):
        BayesMultiheadAttention.from_torch(att)


def test_every_option_travels():
    t = nn.ConvTranspose1d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    b = BayesConvTranspose1d.from_torch(t)
    assert (b.stride, b.padding, b.output_padding, b.groups) == ((2,), (1,), (1,), 2)
    bag = BayesEmbeddingBag.from_torch(nn.EmbeddingBag(5, 3, mode="max", padding_idx=1, include_last_offset=True))
    assert (bag.mode, bag.padding_idx, bag.include_last_offset) == ("max", 1, True)
    rnn = nn.RNN(3, 4, 2, nonlinearity="relu", dropout=0.25).eval()
    brnn = BayesRNN.from_torch(rnn).eval()
    assert (brnn.nonlinearity, brnn.mode, brnn.dropout) == ("relu", "RNN_RELU", 0.25)
    x = torch.randn(5, 2, 3)
    torch.testing.assert_close(brnn(x)[0], rnn(x)[0])
    att = nn.MultiheadAttention(4, 2, kdim=3, vdim=5, add_bias_kv=True, batch_first=True)
    batt = BayesMultiheadAttention.from_torch(att)
    assert (batt.kdim, batt.vdim, batt.batch_first, batt.bias_k_mu is not None) == (3, 5, True, True)
    torch.testing.assert_close(batt.out_proj.weight, att.out_proj.weight)


def test_the_recurrent_signatures_are_torchs():
    names = [p for p in inspect.signature(BayesLSTM).parameters][:8]
    assert names == ["input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional",
                     "proj_size"]
    assert "proj_size" not in inspect.signature(BayesGRU).parameters
    assert list(inspect.signature(BayesRNN).parameters)[3] == "nonlinearity"
    assert BayesLSTM(2, 3, proj_size=2).mode == "LSTM" and BayesGRU(2, 3).mode == "GRU"


@pytest.mark.parametrize("cls", [BayesLSTM, BayesGRU, BayesRNN])
def test_the_dropout_warning_points_at_the_caller(cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cls(2, 3, dropout=0.5)
    assert len(caught) == 1 and caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # from_torch: torch warned already
        with pytest.warns(UserWarning):
            layer = getattr(nn, cls.__name__[5:])(2, 3, dropout=0.5)
        cls.from_torch(layer)


def test_data_and_cache_folders_share_one_rule(monkeypatch, tmp_path):
    monkeypatch.delenv("BBB_DATA", raising=False)
    monkeypatch.delenv(sources.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert sources.resolve_data_dir() == sources._cache_root() == tmp_path / "bbb"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    assert sources.resolve_data_dir() == Path.home() / ".cache" / "bbb"
    monkeypatch.setenv("BBB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "cache"))
    assert sources.resolve_data_dir() == tmp_path / "data" and sources._cache_root() == tmp_path / "cache"
    assert sources.resolve_data_dir(tmp_path / "given") == tmp_path / "given"
