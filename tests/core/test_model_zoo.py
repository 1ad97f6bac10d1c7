"""The networks people train today, made Bayesian with ``bbb.bayesianize``: each one converted ->
more than 95% of its weights Bayesian -> 3 steps with torch.optim and 3 with the Engine (fused) ->
k = 4 predictions in eval mode that differ for every example -> state_dict round trip -> the
deterministic network's checkpoint loads. A contract a user can run on a network of their own:
``check_network(make, make_input, targets)``."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.nn import BayesModule
from bbb.uncertainty import predict

NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm)
B, T, V, C = 6, 5, 20, 3  # batch, sequence length, vocabulary, classes


class ResBlock(nn.Module):
    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.head = nn.Linear(c, C)

    def forward(self, x):
        h = F.relu(self.bn1(self.stem(x)))
        h = F.relu(h + self.bn2(self.conv(h)))
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))


class Recurrent(nn.Module):
    """A sequence classifier: RNN -> the last step -> Linear."""

    def __init__(self, kind: type[nn.RNNBase], batch_first: bool) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.rnn = kind(4, 8, num_layers=2, bidirectional=True, batch_first=batch_first)
        self.head = nn.Linear(16, C)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1] if self.batch_first else out[-1])


class TextTransformer(nn.Module):
    """Embedding + 2 Transformer encoder layers + mean over the tokens + Linear."""

    def __init__(self, batch_first: bool, d: int = 16) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.emb = nn.Embedding(V, d, padding_idx=0)
        layer = nn.TransformerEncoderLayer(d, 2, dim_feedforward=32, dropout=0.0, batch_first=batch_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, C)

    def forward(self, tokens):
        pad = (tokens == 0) if self.batch_first else (tokens == 0).t()
        h = self.encoder(self.emb(tokens), src_key_padding_mask=pad)
        return self.head(h.mean(1 if self.batch_first else 0))


def seq_input(batch_first: bool) -> torch.Tensor:
    x = torch.randn(B, T, 4)
    return x if batch_first else x.transpose(0, 1).contiguous()


def tokens(batch_first: bool) -> torch.Tensor:
    t = torch.randint(1, V, (B, T))
    t[:, -1] = 0  # padding at the end
    return t if batch_first else t.t().contiguous()


def classes() -> torch.Tensor:
    return torch.randint(0, C, (B,))


#: name -> (the deterministic network, its input, the targets, the likelihood)
ZOO: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor], Callable[[], torch.Tensor], str]] = {
    "lenet": (lambda: nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                                    nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 5 * 5, 32), nn.ReLU(),
                                    nn.Linear(32, C)),
              lambda: torch.randn(B, 1, 28, 28), classes, "categorical"),
    "resblock": (ResBlock, lambda: torch.randn(B, 1, 8, 8), classes, "categorical"),
    "lstm": (lambda: Recurrent(nn.LSTM, True), lambda: seq_input(True), classes, "categorical"),
    "lstm-seq-first": (lambda: Recurrent(nn.LSTM, False), lambda: seq_input(False), classes, "categorical"),
    "gru": (lambda: Recurrent(nn.GRU, True), lambda: seq_input(True), classes, "categorical"),
    "gru-seq-first": (lambda: Recurrent(nn.GRU, False), lambda: seq_input(False), classes, "categorical"),
    "embedding": (lambda: nn.Sequential(nn.Embedding(V, 16), Mean(1), nn.Linear(16, C)),
                  lambda: tokens(True), classes, "categorical"),
    "transformer": (lambda: TextTransformer(True), lambda: tokens(True), classes, "categorical"),
    "transformer-seq-first": (lambda: TextTransformer(False), lambda: tokens(False), classes, "categorical"),
    "conv3d": (lambda: nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                                     nn.Linear(4, C)),
               lambda: torch.randn(B, 1, 4, 6, 6), classes, "categorical"),
    "conv-transpose2d": (lambda: nn.Sequential(nn.Linear(4, 8 * 3 * 3), nn.Unflatten(1, (8, 3, 3)),
                                               nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1), nn.ReLU(),
                                               nn.ConvTranspose2d(4, 1, 3, padding=1), nn.Flatten(),
                                               nn.Linear(36, C)),
                         lambda: torch.randn(B, 4), classes, "categorical"),
    "depthwise": (lambda: nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                                        nn.Conv2d(8, 8, 3, padding=1, groups=8, padding_mode="reflect"),
                                        nn.Conv2d(8, 8, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                        nn.Linear(8, C)),
                  lambda: torch.randn(B, 1, 8, 8), classes, "categorical"),
    "heteroscedastic-mlp": (lambda: nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2)),
                            lambda: torch.randn(B, 2), lambda: torch.randn(B), "heteroscedastic"),
}


class Mean(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.mean(self.dim)


def convert(det: nn.Module) -> nn.Module:
    return bbb.bayesianize(copy.deepcopy(det), skip=list(NORMS), rho_init=-3.0)


def train_steps(net: nn.Module, x: torch.Tensor, y: torch.Tensor, likelihood: str, engine: bool) -> None:
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    net.train()
    elbo = bbb.ELBO(net, likelihood, num_batches=1, num_samples=2, kl_weighting="uniform")
    if engine:
        opt = bbb.Engine(net, "adam", lr=1e-2, num_samples=2)
        assert opt.fused, opt.fallback_reason
    else:
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        if engine:
            with opt.sampling():
                out = elbo(x, y)
        else:
            out = elbo(x, y)
        assert torch.isfinite(out.loss)
        (out.loss / len(y)).backward()
        opt.step()
    moved = [n for n, p in net.named_parameters() if not torch.equal(before[n], p.detach())]
    still = [n for n, p in net.named_parameters() if p.requires_grad and n not in moved and n.endswith(("_mu", "_rho"))]
    assert not still, f"Bayesian parameters that did not train: {still}"


@pytest.mark.parametrize("name", sorted(ZOO))
def test_a_network_of_the_zoo_converts_trains_and_samples(name):
    torch.manual_seed(0)
    make, make_x, make_y, likelihood = ZOO[name]
    det = make()
    net = convert(det)
    share = bbb.layer_summary(net).bayesian_share
    assert share > 0.95, f"{name}: only {100 * share:.1f}% of the weights Bayesian\n{bbb.layer_summary(net)}"
    x, y = make_x(), make_y()
    for engine in (False, True):
        train_steps(convert(det), x, y, likelihood, engine)
    train_steps(net, x, y, likelihood, engine=True)
    net.eval()
    with torch.no_grad():
        out = predict(net, x, num_samples=4)
    assert out.shape[:2] == (4, B)
    flat = out.reshape(4, B, -1)
    for i in range(B):  # the 4 networks differ for every example
        rows = flat[:, i]
        assert all(not torch.allclose(rows[a], rows[b]) for a in range(4) for b in range(a)), f"{name}: example {i}"
    # a state_dict round trip gives the same posterior (mean outputs equal)
    again = convert(make())
    again.load_state_dict(net.state_dict())
    again.eval()
    with torch.no_grad():
        torch.testing.assert_close(again(x), net(x))
    # the deterministic network's checkpoint loads: the means are its weights
    warm = convert(make())
    warm.load_state_dict(det.state_dict())
    warm.eval()
    det.eval()
    with torch.no_grad():
        torch.testing.assert_close(warm(x), det(x), rtol=1e-4, atol=1e-5)
    assert any(isinstance(m, BayesModule) for m in warm.modules())
