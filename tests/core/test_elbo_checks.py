"""Input checks of the likelihoods and of ELBO.forward's kl_weight: no silent broadcasting."""

from __future__ import annotations

import warnings

import pytest
import torch

import bbb
from bbb.elbo import ELBO, Categorical, Gaussian, HeteroscedasticGaussian
from bbb.nn import BayesLinear


@pytest.mark.parametrize(("out_shape", "y_shape"), [
    ((3, 3), (3,)),        # 3 outputs against 1 target per example: would broadcast to (3, 3)
    ((4, 1), (4, 1, 1)),
    ((5, 1), (4,)),        # different batch sizes
    ((4, 2), (4, 3)),
    ((4,), (4, 1)),        # would broadcast to (4, 4)
    ((2, 4, 2), (4, 3)),
])
def test_gaussian_likelihood_rejects_silent_broadcasting(out_shape, y_shape):
    with pytest.raises(ValueError, match="Gaussian likelihood") as excinfo:
        Gaussian(sigma=1.0).log_prob(torch.randn(out_shape), torch.randn(y_shape))
    assert "\n" not in str(excinfo.value)


def test_gaussian_likelihood_accepts_matching_shapes():
    lik = Gaussian(sigma=1.0)
    assert lik.log_prob(torch.randn(4), torch.randn(4)).shape == (4,)
    assert lik.log_prob(torch.randn(4, 1), torch.randn(4)).shape == (4,)
    assert lik.log_prob(torch.randn(3, 4, 1), torch.randn(4)).shape == (3, 4)
    assert lik.log_prob(torch.randn(4, 2), torch.randn(4, 2)).shape == (4,)
    assert lik.log_prob(torch.randn(3, 4, 2), torch.randn(4, 2)).shape == (3, 4)
    assert lik.log_prob(torch.randn(4, 1), torch.randn(4, 1)).shape == (4,)


def test_heteroscedastic_and_categorical_reject_mismatched_targets():
    het = HeteroscedasticGaussian()
    assert het.log_prob(torch.randn(3, 4, 2), torch.randn(4, 1)).shape == (3, 4)
    with pytest.raises(ValueError, match="heteroscedastic Gaussian likelihood"):
        het.log_prob(torch.randn(4, 2), torch.randn(5))
    with pytest.raises(ValueError, match="heteroscedastic Gaussian likelihood"):
        het.log_prob(torch.randn(4, 2), torch.randn(4, 3))
    cat = Categorical()
    with pytest.raises(ValueError, match="categorical likelihood"):
        cat.log_prob(torch.randn(2, 4, 3), torch.randint(0, 3, (5,)))
    with pytest.raises(ValueError, match="integer class indices"):
        cat.log_prob(torch.randn(4, 3), torch.rand(4))


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf"), "abc", torch.tensor([1.0, 2.0])])
def test_elbo_rejects_bad_kl_weight(weight):
    elbo = ELBO(BayesLinear(2, 2), num_batches=1)
    with pytest.raises(ValueError, match="kl_weight"):
        elbo(torch.randn(3, 2), torch.zeros(3, dtype=torch.long), kl_weight=weight)


def test_elbo_accepts_zero_and_tensor_kl_weight():
    elbo = ELBO(BayesLinear(2, 2), num_batches=1)
    y = torch.zeros(3, dtype=torch.long)
    assert elbo(torch.randn(3, 2), y, kl_weight=0.0).kl_weight == 0.0
    assert elbo(torch.randn(3, 2), y, kl_weight=torch.tensor(0.5)).kl_weight == 0.5


def test_a_training_step_on_a_model_in_eval_mode_warns_once():
    # a model converted in eval() (as from_pretrained returns it) and trained without train():
    # every layer used its mean, the k "samples" were copies and sigma learned from the KL alone
    torch.manual_seed(0)
    net = bbb.bayesianize(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval())
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    elbo = bbb.ELBO(net, num_batches=1, num_samples=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            elbo(x, y, batch_index=0)  # a validation loss: not warned
    with pytest.warns(UserWarning, match=r"eval\(\) mode.*k samples are equal.*model.train\(\)") as rec:
        out = elbo(x, y, batch_index=0)
        elbo(x, y, batch_index=0)  # once
    assert len([w for w in rec if "eval() mode" in str(w.message)]) == 1
    assert torch.equal(out.output[0], out.output[1])
    net.train()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = bbb.ELBO(net, num_batches=1, num_samples=3)(x, y, batch_index=0)
    assert not torch.equal(out.output[0], out.output[1])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_categorical_takes_class_indices_of_any_integer_dtype(dtype):
    logits, y = torch.randn(3, 5, 4), torch.randint(0, 4, (5,))  # numpy's int32 labels, MNIST's uint8
    torch.testing.assert_close(Categorical().log_prob(logits, y.to(dtype)), Categorical().log_prob(logits, y))
    net = bbb.BayesMLP(2, [3], 4)
    with bbb.nn.sampling(net, "mean"):
        x = torch.randn(5, 2)
        assert ELBO(net)(x, y.to(dtype)).nll == ELBO(net)(x, y).nll


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "0.1"])
def test_heteroscedastic_min_sigma_is_checked(bad):
    with pytest.raises(ValueError, match="min_sigma"):
        HeteroscedasticGaussian(min_sigma=bad)
    assert HeteroscedasticGaussian(min_sigma=0).min_sigma == 0.0


@pytest.mark.parametrize("weighting", ["uniform", "blob"])
def test_an_epoch_shorter_than_num_batches_warns_once_at_the_caller(weighting):
    # num_batches=len(dataset) instead of len(loader): each epoch counted a 16th of the KL, silently
    net = bbb.BayesMLP(2, [3], 2)
    x, y = torch.randn(64, 2), torch.randint(0, 2, (64,))
    loader = [(x[j:j + 16], y[j:j + 16]) for j in range(0, 64, 16)]
    elbo = ELBO(net, num_batches=len(x), kl_weighting=weighting)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for i, (xb, yb) in enumerate(loader):
                elbo(xb, yb, batch_index=i)
    assert len(caught) == 1 and caught[0].filename == __file__
    assert "after 4 minibatches, but num_batches=64" in str(caught[0].message)
    assert "num_batches=len(loader)" in str(caught[0].message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ELBO(net, num_batches=len(x))(torch.randn(3, 2), torch.zeros(3, dtype=torch.long))
    assert len(caught) == 1 and caught[0].filename == __file__  # (no batch_index: its own warning)


def test_whole_epochs_blundell_s_and_validation_do_not_warn():
    net = bbb.BayesMLP(2, [3], 2)
    x, y = torch.randn(64, 2), torch.randint(0, 2, (64,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for m, weighting in ((8, "uniform"), (64, "blundell")):  # blundell's 8 first weights: 99.6% of it
            elbo = ELBO(net, num_batches=m, kl_weighting=weighting)
            for _ in range(2):
                for i in range(8):
                    elbo(x[8 * i: 8 * i + 8], y[8 * i: 8 * i + 8], batch_index=i)
                with torch.no_grad():  # a validation loss over fewer batches
                    elbo(x[:8], y[:8], batch_index=0)


def test_shift_labels_on_one_label_per_example_is_an_error():
    # example i's logits were scored on example i + 1's label, silently
    net = bbb.BayesMLP(3, [4], 5)
    with pytest.raises(bbb.UserError, match=r"shift_labels.*targets \(6,\)") as excinfo:
        ELBO(net, shift_labels=True)(torch.randn(6, 3), torch.randint(0, 5, (6,)))
    assert "\n" not in str(excinfo.value)
    seq = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5))
    bbb.bayesianize(seq)
    ids = torch.randint(0, 5, (2, 7))
    for k in (1, 3):  # per token: scored
        assert torch.isfinite(ELBO(seq, shift_labels=True, num_samples=k)(ids, ids).nll)


class _Squeezed(torch.nn.Module):
    """A regressor whose forward squeezes its one output to (B,)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = BayesLinear(3, 1)

    def forward(self, x):
        return self.lin(x).squeeze(-1)


@pytest.mark.parametrize("b", [5, 1])
def test_k_samples_of_a_regressor_with_a_squeezed_output(b):
    # it trained at k = 1; at k = 3 its (3, B) outputs were "targets (B,) need outputs (..., B, 1)"
    net, x, y = _Squeezed(), torch.randn(b, 3), torch.randn(b)
    with bbb.nn.sampling(net, "mean"):  # every sample the mean network: the k = 1 NLL
        torch.testing.assert_close(ELBO(net, "gaussian", num_samples=3)(x, y).nll,
                                   ELBO(net, "gaussian")(x, y).nll)
    out = ELBO(net, "gaussian", num_samples=3)(x, y)
    assert out.output.shape == (3, b) and torch.isfinite(out.nll)


@pytest.mark.parametrize("given", [False, True])
def test_a_learned_noise_no_optimiser_trains_warns_once(given):
    # torch.optim.Adam(net.parameters()) alone: the noise stayed at its initial sd, silently
    net = bbb.BayesMLP(3, [4], 1)
    elbo = ELBO(net, Gaussian(learn_sigma=True), kl_weighting="uniform", num_batches=2)
    opt = torch.optim.Adam([*net.parameters(), *(elbo.parameters() if given else [])], lr=1e-2)
    x, y = torch.randn(8, 3), torch.randn(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(6):
            out = elbo(x[4 * (step % 2):][:4], y[4 * (step % 2):][:4], batch_index=step % 2)
            out.loss.backward()
            if step % 2:  # (gradients accumulated over two minibatches: no warning for those)
                opt.step()
                opt.zero_grad()
    said = [w for w in caught if "elbo.parameters()" in str(w.message)]
    if given:
        assert not said and float(elbo.likelihood.sigma) != 1.0
    else:
        assert len(said) == 1 and said[0].filename == __file__ and "likelihood.raw_sigma" in str(said[0].message)


def test_a_categorical_over_one_logit_is_an_error():
    # a binary classifier with one logit: NLL 0 on a batch of label 0, torch's "Target 1 is out of bounds" else
    net = bbb.BayesMLP(3, [4], 1)
    for y in (torch.zeros(5, dtype=torch.long), torch.ones(5, dtype=torch.long)):
        with pytest.raises(bbb.UserError, match="1 logit per example.*nn.Linear\\(h, 2\\)"):
            ELBO(net)(torch.randn(5, 3), y)


def test_an_optimiser_built_before_bayesianize_warns_once():
    # it holds the replaced layers' parameters: the Bayesian ones never moved, silently
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    early = torch.optim.SGD(net.parameters(), lr=0.1)
    bbb.bayesianize(net)
    elbo = ELBO(net, kl_weighting="uniform")
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(bbb.elbo.STALE_STEPS + 5):
            early.zero_grad()
            elbo(x, y).loss.backward()
            early.step()
    said = [w for w in caught if "no optimiser steps them" in str(w.message)]
    assert len(said) == 1 and said[0].filename == __file__
    # built after converting, with gradients accumulated over 4 steps: no warning
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    elbo = ELBO(net, kl_weighting="uniform")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(bbb.elbo.STALE_STEPS + 5):
            elbo(x, y).loss.backward()
            if step % 4 == 3:
                opt.step()
                opt.zero_grad()


def test_a_minibatch_scored_again_is_no_short_epoch():
    # a closure (LBFGS) or a retried step evaluates minibatch 0 twice in a row
    net = bbb.BayesMLP(2, [3], 2)
    elbo = ELBO(net, num_batches=4, kl_weighting="uniform")
    x, y = torch.randn(4, 2), torch.randint(0, 2, (4,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in (0, 0, 0, 1, 1, 2, 3, 0, 0):
            elbo(x, y, batch_index=i)


def test_kl_weight_with_batch_index_and_kl_samples_with_split_are_one_line():
    """kl_weight silently replaced batch_index's weight (a warm-up factor read as the whole weight;
    an out-of-range index accepted), and kl="split" silently ignored kl_samples."""
    net = bbb.BayesMLP(3, [4], 2)
    x, y = torch.randn(5, 3), torch.randint(0, 2, (5,))
    elbo = ELBO(net, num_batches=10)
    with pytest.raises(bbb.UserError, match="kl_weight is the minibatch's whole KL weight, .*give one of the two"):
        elbo(x, y, batch_index=5, kl_weight=0.1)
    assert float(elbo(x, y, kl_weight=0.1).kl_weight) == pytest.approx(0.1)
    with pytest.raises(bbb.UserError, match="kl='split' draws its own"):
        ELBO(net, num_batches=1, kl="split", kl_samples=4)
    ELBO(net, num_batches=1, kl="mc", kl_samples=4)
