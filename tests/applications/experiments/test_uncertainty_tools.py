from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from bbb.experiments import uncertainty as UE
from bbb.nn import BayesMLP


def _probs(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_sample_probs_shapes_for_each_method():
    x = torch.randn(7, 4)
    bbb_net = BayesMLP(4, [5], 3, rho_init=-1.0)
    drop = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Dropout(0.5), nn.Linear(5, 3))
    sgd = nn.Sequential(nn.Linear(4, 3))
    p = UE.sample_probs(bbb_net, x, "bbb", samples=6, chunk=3)
    assert p.shape == (6, 7, 3)
    torch.testing.assert_close(p.sum(-1), torch.ones(6, 7))
    assert not torch.allclose(p[0], p[1])  # sampled networks differ
    torch.testing.assert_close(p, UE.sample_probs(bbb_net, x, "bbb", samples=6, chunk=3))  # seeded
    # sample j is one network over the whole set, whatever the chunking
    torch.testing.assert_close(p, UE.sample_probs(bbb_net, x, "bbb", samples=6, chunk=7))
    assert UE.sample_probs(drop, x, "dropout", samples=4).shape == (4, 7, 3)
    assert UE.sample_probs(sgd, x, "sgd", samples=9).shape == (1, 7, 3)
    with pytest.raises(ValueError, match="samples"):
        UE.sample_probs(sgd, x, "sgd", samples=0)


def test_ood_scores_and_report_on_separable_data():
    confident = _probs([[[0.98, 0.01, 0.01]] * 5, [[0.97, 0.02, 0.01]] * 5])  # (2, 5, 3), agree
    disputed = _probs([[[0.9, 0.05, 0.05]] * 4, [[0.05, 0.9, 0.05]] * 4])  # (2, 4, 3), disagree
    s = UE.ood_scores(disputed)
    assert s["mutual_information"].min() > 0.3
    rep = UE.ood_report(confident, disputed)
    for name in UE.SCORES:
        assert rep[name]["auroc"] == 1.0 and rep[name]["aupr"] == pytest.approx(1.0)
    # k = 1 (a deterministic network): mutual information undefined, the others still work
    rep1 = UE.ood_report(confident[:1], disputed[:1])
    assert rep1["mutual_information"]["auroc"] is None and rep1["entropy"]["auroc"] == 1.0


def test_most_uncertain_finds_the_disputed_digit_and_confident_errors():
    k, b = 4, 6
    probs = torch.full((k, b, 3), 0.01)
    probs[..., 0] = 0.98  # everyone predicts 0 confidently
    probs[:2, 3] = _probs([0.01, 0.98, 0.01])  # example 3: half the samples vote 1
    labels = torch.tensor([0, 0, 2, 0, 0, 1])  # examples 2 and 5 are confident errors
    res = UE.most_uncertain(probs, labels, n=2)
    assert res["uncertain"][0].item() == 3
    torch.testing.assert_close(res["votes"][3], torch.tensor([0.5, 0.5, 0.0]))
    assert set(res["confident_errors"].tolist()) == {2, 5}


def test_plots_write_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    from bbb import uncertainty as U

    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 50, 10, generator=g) * 3, -1)
    labels = torch.randint(0, 10, (50,), generator=g)
    mean = probs.mean(0)
    bins = {"k-sample": U.reliability_bins(mean, labels), "mean weights": U.reliability_bins(probs[0], labels)}
    assert UE.plot_reliability(bins, tmp_path / "rel.png").stat().st_size > 1000
    s_in, s_out = UE.ood_scores(probs), UE.ood_scores(probs.flip(1))
    rep = UE.ood_report(probs, probs.flip(1))
    assert UE.plot_ood(s_in, s_out, rep, tmp_path / "ood.png").stat().st_size > 1000
    res = UE.most_uncertain(probs, labels, n=5)
    images = torch.rand(50, 784)
    assert UE.plot_uncertain(images, labels, res, tmp_path / "unc.png", 3).stat().st_size > 1000
    assert math.isfinite(rep["entropy"]["auroc"])


def test_one_minus_max_probability_keeps_confident_inputs_apart():
    """A max probability that rounds to 1.0 made every confident input's 1 - max equal 0: the in- and
    out-of-distribution sets tied there and the AUROC fell towards 1/2."""
    margins_in, margins_out = torch.tensor([30.0, 32.0, 34.0]), torch.tensor([20.0, 22.0, 24.0])
    p_in = torch.softmax(torch.stack([margins_in, torch.zeros(3)], -1), -1)[None]
    p_out = torch.softmax(torch.stack([margins_out, torch.zeros(3)], -1), -1)[None]
    assert bool((p_in.max(-1).values == 1).all())  # float32 saturates
    assert UE.ood_report(p_in, p_out)["max_prob"]["auroc"] == 1.0
    torch.testing.assert_close(UE.ood_scores(p_out)["max_prob"], torch.exp(-margins_out), rtol=1e-5, atol=0)


def test_ood_report_names_what_its_means_are_of():
    """ood.json's ``max_prob`` holds 1 - max probability (higher = more likely OOD), and its
    mean_in / mean_out are of that: with no label, a low mean confidence read as a high one."""
    p_in = _probs([[[0.9, 0.05, 0.05]] * 4, [[0.8, 0.1, 0.1]] * 4])
    p_out = _probs([[[0.4, 0.3, 0.3]] * 3, [[0.3, 0.4, 0.3]] * 3])
    rep = UE.ood_report(p_in, p_out)
    assert rep["max_prob"]["score"] == "1 - max probability"
    assert rep["max_prob"]["mean_in"] == pytest.approx(1 - 0.85)
    assert rep["entropy"]["score"] == "predictive entropy"
    assert UE.ood_report(p_in[:1], p_out[:1])["mutual_information"]["score"] == "mutual information"


def test_ood_scores_both_sets_with_the_same_sampled_networks():
    """The OOD set was scored by other draws (seed + 1): a set scored against itself differed from
    itself (mutual information AUROC 0.65 with k = 3); the same networks give exactly 1/2."""
    torch.manual_seed(0)
    net = BayesMLP(20, [32], 10, rho_init=-2.0)
    x = torch.randn(400, 20)
    p_in, p_out = UE.ood_probs([(net, "bbb"), (nn.Linear(20, 10), "sgd")], x, x.clone(), 3, 0)
    assert p_in.shape == (6, 400, 10) and torch.equal(p_in, p_out)
    assert all(r["auroc"] == 0.5 for r in UE.ood_report(p_in, p_out).values())


def test_most_confident_errors_are_ranked_past_a_max_probability_of_one():
    """Errors whose max probability rounds to 1.0 tied and came in the test set's order."""
    margins = torch.tensor([20.0, 40.0, 30.0, 25.0])  # all wrong (label 1), each max probability 1.0 in float32
    p = torch.softmax(torch.stack([margins, torch.zeros(4)], -1), -1)[None]
    res = UE.most_uncertain(p, torch.ones(4, dtype=torch.long), n=4)
    assert res["confident_errors"].tolist() == [1, 2, 3, 0]


def test_a_grid_of_many_digits_draws_the_first_plot_max_and_says_so(monkeypatch):
    """``bbb uncertain --n 20000`` drew one axes per digit: 400 took over a minute, 20,000 hours.
    A grid draws at most PLOT_MAX digits and its title says which; the ranking itself is all n."""
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(UE, "PLOT_MAX", 4)
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 30, 10, generator=g) * 3, -1)
    labels = torch.randint(0, 10, (30,), generator=g)
    res = UE.most_uncertain(probs, labels, n=10)
    assert len(res["uncertain"]) == 10
    fig = UE.plot_uncertain(torch.rand(30, 16), labels, res, None, 3)
    disputed, errors = fig.subfigs
    assert sum(ax.has_data() for ax in disputed.axes) == 4 and "(the first 4 of 10)" in disputed._suptitle.get_text()
    n_err = len(res["confident_errors"])
    assert sum(ax.has_data() for ax in errors.axes) == min(4, n_err)
    assert ("(the first 4 of" in errors._suptitle.get_text()) == (n_err > 4)
