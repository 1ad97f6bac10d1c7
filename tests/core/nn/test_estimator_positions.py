"""The local and flipout estimators on inputs with positions (a sequence's tokens, an image's
pixels): predictions draw whole weights (one network per sample, whatever the estimator), and
training on positions says once that its noise is per position, not one network per example."""

import copy
import warnings

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.nn import base as nn_base


class PooledSequence(nn.Module):
    """A linear layer on every token, averaged over the tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x).mean(1)


class PooledConv(nn.Module):
    """A convolution, averaged over its pixels."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(x).mean((2, 3))


class PooledAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x, x, x, need_weights=False)[0].mean(1)


CASES = [(PooledSequence, (3, 6, 4)), (PooledConv, (3, 2, 5, 5)), (PooledAttention, (3, 6, 4))]


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(nn_base, "_POSITIONS_WARNED", set())


@pytest.mark.parametrize("make,shape", CASES, ids=["sequence", "conv", "attention"])
@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_predict_draws_whole_weights_whatever_the_estimator(make, shape, estimator):
    """With one seed, a local or flipout model predicts exactly what the same posterior as a
    reparam model predicts: the same whole-weight draws (before, per-position noise made a pooled
    output's spread 3-6x too small)."""
    torch.manual_seed(0)
    base = make()
    x = torch.randn(*shape)
    ref = bbb.bayesianize(copy.deepcopy(base), estimator="reparam", rho_init=-1.0)
    m = bbb.bayesianize(copy.deepcopy(base), estimator=estimator, rho_init=-1.0)
    m.load_state_dict(ref.state_dict())
    want = bbb.uncertainty.predict(ref, x, num_samples=50, generator=0)
    got = bbb.uncertainty.predict(m, x, num_samples=50, generator=0)
    torch.testing.assert_close(got, want)
    assert {b.estimator.value for b in m.modules() if isinstance(b, bbb.nn.BayesModule)} == {estimator}  # restored


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_a_prediction_sample_is_one_network_across_the_inputs(estimator):
    """Two copies of one input get the same output from sample j (one network), for every estimator."""
    torch.manual_seed(0)
    m = bbb.bayesianize(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)), estimator=estimator)
    x = torch.randn(1, 3).repeat(2, 1)
    out = bbb.uncertainty.predict(m, x, num_samples=20)
    torch.testing.assert_close(out[:, 0], out[:, 1])
    assert out.std(0).min() > 0


ON_POSITIONS = [(make, shape, e) for make, shape in CASES for e in ("local", "flipout")
                if (make, e) != (PooledConv, "flipout")]  # (a convolution's flipout signs: per example)


@pytest.mark.parametrize("make,shape,estimator", ON_POSITIONS)
def test_training_on_positions_warns_once_that_the_noise_is_per_position(make, shape, estimator):
    torch.manual_seed(0)
    m = bbb.bayesianize(make(), estimator=estimator)
    x = torch.randn(*shape)
    with pytest.warns(UserWarning, match=f"{estimator} estimator .* per position .*estimator='reparam'"):
        m(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)  # once per layer type and estimator


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_no_warning_without_positions(estimator):
    torch.manual_seed(0)
    mlp = bbb.bayesianize(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)), estimator=estimator)
    conv = bbb.bayesianize(PooledConv(), estimator="flipout")  # signs per example: one network each
    one = bbb.bayesianize(nn.Sequential(nn.Linear(4, 3)), estimator=estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mlp(torch.randn(5, 4))
        conv(torch.randn(2, 2, 5, 5))
        one(torch.randn(5, 1, 4))  # one position
        seq = bbb.bayesianize(PooledSequence(), estimator=estimator)
        bbb.uncertainty.predict(seq, torch.randn(2, 6, 4), num_samples=3)  # (whole weights)


def test_embedding_local_warns_for_sequences_not_single_lookups():
    torch.manual_seed(0)
    e = bbb.bayesianize(nn.Sequential(nn.Embedding(10, 3)), estimator="local")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e(torch.randint(0, 10, (4,)))
    with pytest.warns(UserWarning, match="BayesEmbedding with the local estimator"):
        e(torch.randint(0, 10, (4, 5)))


class ReadsTheWeight(nn.Module):
    """A forward that reads a layer's weight instead of calling it (the posterior mean, with a Bayesian layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x @ self.fc.weight.T + self.fc.bias)


def test_the_elbo_warns_once_of_a_layer_that_drew_no_sample():
    """A layer whose weight the model reads was left deterministic in effect, its sigma trained by the
    KL alone, and the layer summary called it Bayesian."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    m = bbb.bayesianize(ReadsTheWeight())
    elbo = bbb.ELBO(m, bbb.Categorical(), num_batches=1)
    with pytest.warns(UserWarning, match=r"layer\(s\) fc drew no weight sample .* reads their \.weight"):
        elbo(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        elbo(x, y)  # once per model
        mlp = bbb.BayesMLP(4, [8], 2)
        bbb.ELBO(mlp, bbb.Categorical(), num_batches=1)(x, y)  # every layer called
        with torch.no_grad():
            bbb.ELBO(bbb.bayesianize(ReadsTheWeight()), bbb.Categorical(), num_batches=1)(x, y)  # not training
