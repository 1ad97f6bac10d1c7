from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

from bbb import ELBO, Engine
from bbb.distributions import GaussianPrior, softplus
from bbb.errors import UserError
from bbb.nn import BayesMLP, bayes_modules, model_kl, sampling
from bbb.prune import count_weights, prune, signal_to_noise, snr_db, unprune


def _net():
    torch.manual_seed(0)
    net = BayesMLP(6, [5], 3)
    for layer in net.layers:
        layer.weight_rho.data.normal_(-3, 1)
    return net


def test_snr_is_global_over_layers():
    net = _net()
    snr = signal_to_noise(net)
    expected = torch.cat([(lyr.weight_mu.abs() / softplus(lyr.weight_rho)).flatten() for lyr in net.layers])
    torch.testing.assert_close(snr, expected)
    assert snr.numel() == 6 * 5 + 5 * 3
    assert signal_to_noise(net, include_bias=True).numel() == 45 + 8
    torch.testing.assert_close(snr_db(torch.tensor([1.0, 10.0])), torch.tensor([0.0, 10.0]))


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.75, 0.95, 1.0])
def test_prune_removes_exactly_the_lowest_snr_fraction(fraction):
    net = _net()
    snr = signal_to_noise(net)
    res = prune(net, fraction)
    n_remove = int(fraction * 45)
    assert (res.total, res.kept, res.removed) == (45, 45 - n_remove, n_remove)
    assert count_weights(net) == (45, 45 - n_remove)
    mask = torch.cat([lyr.weight_mask.flatten() for lyr in net.layers]).bool()
    if 0 < n_remove < 45:
        assert snr[~mask].max() <= snr[mask].min()


def test_pruned_weights_are_zero_in_mean_and_sample_mode_and_unprune_restores():
    net = _net().eval()
    x = torch.randn(4, 6)
    before = net(x)
    prune(net, 0.5)
    l0, l1 = net.layers
    h = torch.relu(F.linear(x, l0.weight_mu * l0.weight_mask, l0.bias_mu))
    torch.testing.assert_close(net(x), F.linear(h, l1.weight_mu * l1.weight_mask, l1.bias_mu))
    with sampling(net, "sample"):
        # with all surviving weights' inputs zeroed, a pruned row gives only bias noise
        assert torch.isfinite(net(x)).all()
    unprune(net)
    torch.testing.assert_close(net(x), before)
    assert "layers.0.weight_mask" not in net.state_dict()


def test_pruned_state_dict_loads_into_a_fresh_model():
    net = _net().eval()
    prune(net, 0.75)
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    buf.seek(0)
    fresh = BayesMLP(6, [5], 3).eval()
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    x = torch.randn(4, 6)
    torch.testing.assert_close(fresh(x), net(x))


def test_prune_rejects_bad_fraction():
    with pytest.raises(ValueError, match="fraction"):
        prune(_net(), 1.5)
    with pytest.raises(ValueError, match="no Bayesian layers"):
        prune(torch.nn.Linear(2, 2), 0.5)


def test_pruning_reaches_every_weight_of_a_recurrent_layer():
    """A recurrent layer's weights are named weight_ih_l0, weight_hh_l0...: all pruned by |mu|/sigma,
    and the pruned weights are 0 in the network's output (the means the layer runs with)."""
    import torch.nn as nn

    import bbb

    torch.manual_seed(0)
    net = bbb.bayesianize(nn.Sequential(nn.LSTM(3, 4, batch_first=True)))
    lstm = net[0]
    total, _ = count_weights(net)
    assert total == sum(getattr(lstm, f"{n}_mu").numel() for n in lstm.param_names() if not n.startswith("bias"))
    net.eval()
    x = torch.randn(2, 5, 3)
    before = net(x)[0]
    r = prune(net, 0.5)
    assert r.kept == total - total // 2
    after = net(x)[0]
    assert not torch.allclose(before, after)
    unprune(net)
    torch.testing.assert_close(net(x)[0], before)


def test_a_pruned_weight_keeps_its_gaussian_kl_on_both_paths():
    """Pruning masks the weights, not the posterior: the KL of a pruned model is that of its
    unmasked mu and sigma (a point mass at 0 has no finite KL against a continuous prior), on the
    plain path and the Engine's alike."""
    torch.manual_seed(0)
    net = BayesMLP(6, [7], 3, prior=GaussianPrior(0.5), rho_init=-3.0)
    before = float(model_kl(net, "closed").detach())
    prune(net, 0.75, include_bias=True)
    assert float(model_kl(net, "closed").detach()) == before
    elbo = ELBO(net, "categorical", num_batches=1, kl="closed")
    eng = Engine(elbo, "adam", lr=1e-3, compile=False)
    assert eng.fused, eng.fallback_reason
    with eng.sampling():
        out = elbo(torch.randn(4, 6), torch.randint(0, 3, (4,)))
    assert float(out.kl.detach()) == pytest.approx(before, rel=1e-6)


def test_prune_replaces_an_earlier_bias_mask():
    net = _net()
    prune(net, 0.5, include_bias=True)
    res = prune(net, 0.0)
    assert (res.total, res.kept) == (45, 45)
    assert count_weights(net, include_bias=True) == (53, 53)
    assert not any(k.endswith("bias_mask") for k in net.state_dict())


@pytest.mark.parametrize("estimator", ["reparam", "local"])
def test_a_pruned_population_has_its_pruned_weights_zero_in_every_sample(estimator):
    from bbb.nn import BayesPopulation

    torch.manual_seed(0)
    pop = BayesPopulation(4, [3], 2, bayesian=2, estimator=estimator)
    x = torch.randn(2, 5, 4)
    prune(pop, 0.5, include_bias=True)

    def outputs():
        torch.manual_seed(1)
        with sampling(pop, "sample"):
            drawn = pop(x, num_samples=2)
        return drawn, pop.eval()(x)

    before = outputs()
    with torch.no_grad():  # what a pruned weight's posterior holds must not reach the output
        for layer in pop.bayes:
            for name in ("weight", "bias"):
                off = 1 - getattr(layer, f"{name}_mask")
                layer.mu(name).add_(5 * off)
                layer.rho(name).add_(3 * off)
    for a, b in zip(before, outputs()):
        torch.testing.assert_close(a, b)
    member = pop.member(1).eval()  # a member taken out keeps its mask, and goes back with it
    torch.testing.assert_close(member(x[1]), before[1][1])
    fresh = BayesPopulation(4, [3], 2, bayesian=2, estimator=estimator)
    fresh.load_member(1, member)
    torch.testing.assert_close(fresh.eval()(x)[1], before[1][1])


@pytest.mark.parametrize("bad", ["0.5", None, float("nan"), -0.1, 1.5])
def test_a_fraction_that_is_no_number_in_0_1_is_one_line(bad):
    with pytest.raises(UserError, match="fraction to prune") as excinfo:  # a string or None: a TypeError
        prune(BayesMLP(3, [4], 2), bad)
    assert "\n" not in str(excinfo.value)


def test_an_ensemble_is_pruned_member_by_member_as_each_network_alone():
    """prune(ensemble, F) ranked all members' weights together: a member whose SNRs ran higher kept
    more (a probe saw 48, 58 and 44% of three members pruned at 50%). Each member now loses exactly
    floor(F n) of its n weights, the same ones as the network taken out and pruned alone."""
    from bbb.nn import BayesEnsemble

    torch.manual_seed(0)
    ens = BayesEnsemble(5, [7, 6], 3, seeds=range(3))
    with torch.no_grad():  # members of unlike SNRs, as after training
        for j, scale in enumerate((1.0, 4.0, 0.25)):
            for layer in ens.bayes:
                layer.mu("weight")[j].mul_(scale)
    alone = [ens.member(j) for j in range(3)]
    res = prune(ens, 0.5)
    n = 5 * 7 + 7 * 6 + 6 * 3
    assert (res.total, res.kept) == (3 * n, 3 * n - 3 * (n // 2)) and len(res.member_thresholds) == 3
    assert res.threshold == max(res.member_thresholds)
    for j, net in enumerate(alone):
        lone = prune(net, 0.5)
        assert (lone.total, lone.kept) == (n, n - n // 2) and lone.threshold == res.member_thresholds[j]
        taken = ens.member(j)
        for a, b in zip(bayes_modules(taken), bayes_modules(net)):
            assert torch.equal(a.weight_mask, b.weight_mask)
    # ranked together, as before (by_member=False): the same total, members pruned unequally
    together = prune(ens, 0.5, by_member=False)
    assert together.removed == (3 * n) // 2 and together.member_thresholds == ()
    lost = [sum(int((layer.weight_mask[j] == 0).sum()) for layer in ens.bayes) for j in range(3)]
    assert sum(lost) == together.removed and max(lost) - min(lost) > n // 4, lost


def test_by_member_on_a_network_that_has_no_members_is_one_line():
    with pytest.raises(UserError, match="by_member=True prunes a population") as e:
        prune(BayesMLP(3, [4], 2), 0.5, by_member=True)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="by_member must be True or False"):
        prune(BayesMLP(3, [4], 2), 0.5, by_member="false")
