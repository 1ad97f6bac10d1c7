from __future__ import annotations

import math

import pytest
import torch

from bbb import uncertainty as U
from bbb.functional import expand_samples
from bbb.nn import BayesMLP, mark_deterministic, sampling, shared_samples


def test_predictive_probs_average_probabilities_not_log_probabilities():
    logits = torch.log(torch.tensor([[[0.9, 0.1]], [[0.1, 0.9]]]))
    torch.testing.assert_close(U.predictive_probs(logits), torch.tensor([[0.5, 0.5]]))


def test_entropy_decomposition():
    # all samples agree: mutual information 0, predictive entropy = expected entropy
    one = torch.log(torch.tensor([0.7, 0.2, 0.1]))
    same = one.expand(5, 4, 3)
    assert torch.allclose(U.mutual_information(same), torch.zeros(4), atol=1e-6)
    expected = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    torch.testing.assert_close(U.predictive_entropy(same), torch.full((4,), expected))
    # two confident samples that disagree: MI = log 2 - ~0
    dis = torch.tensor([[[20.0, -20.0]], [[-20.0, 20.0]]])
    assert U.mutual_information(dis).item() == pytest.approx(math.log(2), abs=1e-6)
    assert U.expected_entropy(dis).item() == pytest.approx(0.0, abs=1e-6)


def test_ece_of_a_calibrated_predictor_is_near_zero():
    g = torch.Generator().manual_seed(0)
    n = 200_000
    conf = torch.rand(n, generator=g) * 0.5 + 0.5
    correct = torch.rand(n, generator=g) < conf
    labels = torch.where(correct, 0, 1)
    probs = torch.stack([conf, 1 - conf], -1)
    assert U.expected_calibration_error(probs, labels) < 0.01


def test_ece_hand_computed():
    probs = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4]])
    labels = torch.tensor([0, 1, 0, 0])
    # bin of 0.9: accuracy 0.5, confidence 0.9; bin of 0.6: accuracy 1.0, confidence 0.6
    assert U.expected_calibration_error(probs, labels, 10) == pytest.approx(0.5 * 0.4 + 0.5 * 0.4)
    bins = U.reliability_bins(probs, labels, 10)
    assert bins["count"].sum().item() == 4 and bins["edges"].numel() == 11


def test_nll_brier_error_hand_computed():
    probs = torch.tensor([[0.8, 0.2], [0.4, 0.6]])
    labels = torch.tensor([0, 0])
    assert U.negative_log_likelihood(probs, labels) == pytest.approx(-(math.log(0.8) + math.log(0.4)) / 2)
    assert U.brier_score(probs, labels) == pytest.approx(((0.2**2 + 0.2**2) + (0.6**2 + 0.6**2)) / 2)
    assert U.error_rate(probs, labels) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        U.brier_score(probs, torch.tensor([0]))


def test_nll_of_certain_right_predictions_is_zero_not_minus_zero():
    # minus log of one is minus zero: the summary printed the NLL of a network certain and right as negative
    nll = U.negative_log_likelihood(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1]))
    assert nll == 0.0 and math.copysign(1.0, nll) == 1.0 and f"{nll:.4f}" == "0.0000"


def test_nll_counts_a_confident_error_in_full():
    """A floor of 1e-12 capped an example's -log p at 27.6: a true class at probability 1e-20 (a
    deterministic network's confident error, logits 46 apart) counted 27.6, not 46.1, understating
    the NLL of the most over-confident networks; then float32's smallest normal capped it at 87.3
    (a float64 1e-300 counted 87.3). Any positive probability now counts as itself, an exact 0 as
    NLL_FLOOR (87.3); from the logits the NLL has no floor at all (a logit gap of 2e4: 2e4)."""
    probs = torch.softmax(torch.tensor([[46.0515, 0.0], [0.0, 200.0]]), -1)  # p(true) 1e-20, then 0
    labels = torch.tensor([1, 0])
    assert probs[0, 1].item() == pytest.approx(1e-20, rel=1e-3) and probs[1, 0].item() == 0.0
    assert U.negative_log_likelihood(probs[:1], labels[:1]) == pytest.approx(46.0515, rel=1e-5)
    assert U.negative_log_likelihood(probs[1:], labels[1:]) == pytest.approx(-math.log(U.NLL_FLOOR))
    assert -math.log(U.NLL_FLOOR) == pytest.approx(87.34, abs=0.01)
    far = torch.softmax(torch.tensor([[0.0, 500.0]], dtype=torch.float64), -1)  # float64 holds e^-500
    assert U.negative_log_likelihood(far, labels[1:]) == pytest.approx(500.0, rel=1e-9)
    logits = torch.tensor([[[1e4, -1e4], [0.0, -90.0]], [[1e4, -1e4], [0.0, -95.0]]])  # (k=2, B=2, C=2)
    ll = U.predictive_log_likelihood(logits, torch.tensor([1, 1]))
    torch.testing.assert_close(ll, torch.tensor([-2e4, math.log((math.exp(-90) + math.exp(-95)) / 2)],
                                                dtype=torch.float64))


def test_evaluation_nll_comes_from_the_logits():
    """evaluate's NLL of a confident error is its own, not a floor's."""
    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[300.0, 0.0], [0.0, 0.0]]))
        net.bias.zero_()
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([1])
    mark_deterministic(net)
    got = U.evaluate(net, (x, y), num_samples=2)
    assert got["nll"] == pytest.approx(300.0, rel=1e-6)


def test_auroc_and_aupr():
    a, b = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.7, 0.8])
    assert U.auroc(a, b) == 1.0 and U.auroc(b, a) == 0.0
    same = torch.full((10,), 0.5)
    assert U.auroc(same, same) == 0.5
    assert U.aupr(a, b) == pytest.approx(1.0)
    # brute force on random scores with ties
    g = torch.Generator().manual_seed(0)
    neg, pos = torch.randint(0, 5, (40,), generator=g).float(), torch.randint(1, 6, (30,), generator=g).float()
    brute = ((pos[:, None] > neg[None]).double() + 0.5 * (pos[:, None] == neg[None]).double()).mean().item()
    assert U.auroc(neg, pos) == pytest.approx(brute)
    # AUPR of perfectly mixed scores equals the positive rate
    assert U.aupr(same, same[:5]) == pytest.approx(5 / 15)


def test_predict_shapes_modes_and_restores_training_state():
    net = BayesMLP(4, [6], 3, rho_init=-1.0)
    x = torch.randn(10, 4)
    out = U.predict(net, x, num_samples=7, batch_size=3)
    assert out.shape == (7, 10, 3) and net.training
    mean = U.predict(net, x, mode="mean")
    assert mean.shape == (1, 10, 3)
    torch.testing.assert_close(mean, U.predict(net, x, mode="mean"))
    with pytest.raises(ValueError):
        U.predict(net, x, mode="median")



class _SeqFirst(torch.nn.Module):
    """A sequence-first LSTM (inputs (T, B, 3)): per step (T, B, C) or, pooled, its last state's (B, C)."""

    def __init__(self, classes: int, per_step: bool) -> None:
        super().__init__()
        self.rnn, self.head, self.per_step = torch.nn.LSTM(3, 5), torch.nn.Linear(5, classes), per_step

    def forward(self, x):
        out, (h, _) = self.rnn(x)
        return self.head(out if self.per_step else h[-1])


@pytest.mark.parametrize(("steps", "classes", "per_step"), [(5, 2, False), (3, 2, False), (5, 2, True), (2, 3, True)])
def test_predict_in_chunks_of_a_sequence_first_model_joins_the_chunks_along_its_batch(steps, classes, per_step):
    # a chunk of 2 examples, 2 classes: the pooled (k, 2, 2) outputs were joined along the classes
    import bbb

    net = bbb.bayesianize(_SeqFirst(classes, per_step))
    x = torch.randn(steps, 4, 3)
    whole = U.predict(net, x, num_samples=3, generator=0)
    assert whole.shape == ((3, steps, 4, classes) if per_step else (3, 4, classes))
    torch.testing.assert_close(U.predict(net, x, num_samples=3, batch_size=2, generator=0), whole)
    torch.testing.assert_close(U.predict(net, [x[:, :2], x[:, 2:]], num_samples=3, generator=0), whole)


@pytest.mark.parametrize("k", [1, 6])
def test_predict_in_chunks_uses_the_same_networks_for_every_chunk(k):
    net = BayesMLP(4, [8], 3, rho_init=-1.0)
    x = torch.randn(11, 4)
    torch.manual_seed(3)
    whole = U.predict(net, x, num_samples=k)
    torch.manual_seed(3)
    chunked = U.predict(net, x, num_samples=k, batch_size=4)  # chunks of 4, 4, 3
    torch.testing.assert_close(chunked, whole)
    # the same image in two chunks sees the same k networks
    twice = U.predict(net, torch.cat([x[:2], x[:2]]), num_samples=k, batch_size=2)
    torch.testing.assert_close(twice[:, :2], twice[:, 2:])
    # while two separate calls draw new networks
    assert not torch.allclose(U.predict(net, x, num_samples=k), U.predict(net, x, num_samples=k))


def test_shared_samples_draws_once_per_layer_and_sample_count():
    net = BayesMLP(4, [8], 3, rho_init=-1.0)
    x = torch.randn(5, 4)
    with torch.no_grad(), sampling(net, "sample"), shared_samples():
        a, b = net(x), net(x)
        ka, kb = net(expand_samples(x, 3)), net(expand_samples(x, 3))
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ka, kb)
    assert not torch.allclose(ka[0], ka[1])  # the k networks differ from one another
    with torch.no_grad(), sampling(net, "sample"):  # outside the block every pass draws afresh
        assert not torch.allclose(net(x), net(x))
    with shared_samples():  # nested blocks (predict opens one) keep the outer block's draws
        first = U.predict(net, x, num_samples=3)
        torch.testing.assert_close(U.predict(net, x, num_samples=3), first)


def test_regression_uncertainty_law_of_total_variance():
    means = torch.tensor([[0.0, 1.0], [2.0, 1.0]])
    r = U.regression_uncertainty(means, noise_sigma=0.5)
    torch.testing.assert_close(r["epistemic"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(r["aleatoric"], torch.tensor([0.25, 0.25]))
    torch.testing.assert_close(r["total"], torch.tensor([1.25, 0.25]))
    r2 = U.regression_uncertainty(means, noise_sigma=torch.tensor([[1.0, 1.0], [3.0, 1.0]]))
    torch.testing.assert_close(r2["aleatoric"], torch.tensor([5.0, 1.0]))


def test_regression_uncertainty_reads_one_sigma_per_network_as_the_mixture_does():
    """A (k,) noise_sigma with k == B was read as one sd per example (broadcast along B), while
    regression_metrics and gaussian_mixture_log_prob read it as one per sampled network: the two
    disagreed on the same predictive; and with k != B it was refused."""
    means = torch.zeros(3, 3, dtype=torch.float64)
    sig = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    want = float(torch.sqrt((sig**2).mean()))
    r = U.regression_uncertainty(means, sig)
    torch.testing.assert_close(r["std"], torch.full((3,), want, dtype=torch.float64))
    assert U.regression_metrics(means, sig, torch.zeros(3, dtype=torch.float64))["mean_sd"] == pytest.approx(want)
    wide = U.regression_uncertainty(torch.zeros(3, 5, dtype=torch.float64), sig)
    torch.testing.assert_close(wide["std"], torch.full((5,), want, dtype=torch.float64))
    deep = U.regression_uncertainty(torch.zeros(3, 4, 2, dtype=torch.float64), sig)
    torch.testing.assert_close(deep["aleatoric"], torch.full((4, 2), want**2, dtype=torch.float64))


def test_predict_chunks_each_batch_of_a_dataloader_by_batch_size():
    # batch_size was ignored for a DataLoader: its batches of 8 ran whole, the memory bound not kept
    net = BayesMLP(4, [6], 3, rho_init=-1.0)
    x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    rows = []
    hook = net.layers[0].register_forward_pre_hook(lambda m, args: rows.append(args[0].shape[-2]))
    out, targets = U.predict(net, loader, num_samples=2, batch_size=3, return_targets=True, generator=0)
    hook.remove()
    assert rows == [3, 3, 2, 2]  # inputs (k, rows, 4): chunks of 3, 3, 2 and the last batch of 2
    torch.testing.assert_close(out, U.predict(net, x, num_samples=2, generator=0))
    assert torch.equal(targets, y)


def test_evaluate_refuses_one_logit_per_example():
    # labels all 0 scored perfectly (error 0, NLL 0): a softmax over one class is 1
    net = BayesMLP(3, [4], 1)
    with pytest.raises(ValueError, match="1 logit per example"):
        U.evaluate(net, (torch.randn(5, 3), torch.zeros(5, dtype=torch.long)), num_samples=2)


def test_predict_and_evaluate_leave_each_module_in_its_own_mode():
    # a fine-tune with the BatchNorm's statistics frozen (model.train(); bn.eval()): predict's
    # model.train(was) put the BatchNorm back in train(), and its statistics moved again
    import bbb

    net = bbb.bayesianize(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                              torch.nn.Linear(4, 2)), skip=[torch.nn.BatchNorm1d])
    net.train()
    net[1].eval()
    x = torch.randn(6, 3)
    U.predict(net, x, num_samples=2)
    U.evaluate(net, (x, torch.randint(0, 2, (6,))), num_samples=2)
    assert [m.training for m in net] == [True, False, True]
