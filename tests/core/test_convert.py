"""k-sample passes through ordinary networks, and converting networks you already have (issue 18)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.nn import BayesConv1d, BayesConv2d, BayesLinear, BayesModule, forward_samples, sampling
from bbb.uncertainty import mutual_information, predict

from .convertkit import ARCHS, Conv1dNet, ResBlock, example_input, lenet


@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("estimator", ["reparam", "flipout", "local"])
def test_k_samples_are_k_different_networks(arch, b, estimator):
    torch.manual_seed(0)
    net = bbb.bayesianize(ARCHS[arch](), estimator=estimator, rho_init=-2.0)
    x = example_input(arch, b)
    logits = predict(net, x, num_samples=5)
    assert logits.shape == (5, b, 3)
    flat = logits.reshape(5, -1)
    for i in range(5):
        for j in range(i):
            assert not torch.allclose(flat[i], flat[j]), f"samples {i} and {j} are the same network"
    assert (mutual_information(logits) > 0).all()
    # ELBO with k = 3 on the same networks: differentiable, one loss
    net.train()
    out = bbb.ELBO(net, "categorical", num_samples=3)(x, torch.zeros(b, dtype=torch.long))
    assert out.output.shape == (3, b, 3)
    out.loss.backward()


def test_the_old_silent_copy_case_gives_k_distinct_outputs():
    """Issue 18: Flatten first, one example: predict used to copy one weight sample 5 times."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), BayesLinear(4, 8, rho_init=-1.0), nn.ReLU(), BayesLinear(8, 3, rho_init=-1.0))
    logits = predict(net, torch.randn(1, 2, 2), num_samples=5)
    assert logits.shape == (5, 1, 3)
    assert len({tuple(r.tolist()) for r in logits[:, 0]}) == 5
    assert float(mutual_information(logits)) > 0


def test_folded_samples_match_explicit_sample_dimension():
    """For an MLP the folded pass is the same k networks as an explicit (k, B, in) input."""
    torch.manual_seed(0)
    net = bbb.BayesMLP(6, [5], 2, rho_init=-1.0)
    x = torch.randn(4, 6)
    with sampling(net, "sample"), bbb.shared_samples():
        a = forward_samples(net, x, 3)
        b = net(bbb.expand_samples(x, 3))
        c = forward_samples(net, x + 0, 3)  # not the shared-input fast path
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)


def test_conv1d_and_k_samples():
    torch.manual_seed(0)
    net = bbb.bayesianize(Conv1dNet(), rho_init=-2.0)
    assert isinstance(net.conv, BayesConv1d)
    x = torch.randn(3, 28)
    logits = predict(net, x, num_samples=4)
    assert logits.shape == (4, 3, 3)
    assert (mutual_information(logits) > 0).all()
    # mean mode equals the deterministic conv1d with the posterior means
    ref = nn.Conv1d(1, 4, 5, padding="same")
    ref.load_state_dict({"weight": net.conv.weight_mu.detach(), "bias": net.conv.bias_mu.detach()})
    net.eval()
    xin = x.view(3, 1, 28)
    torch.testing.assert_close(net.conv(xin), ref(xin))


def test_a_batch_reshape_that_mixes_samples_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = BayesLinear(12, 2)

        def forward(self, x):
            return self.fc(x.reshape(-1, 12))  # (k*B, 4) -> rows no longer k*B

    with pytest.raises(bbb.UserError, match=r"BayesLinear: inside a 3-sample pass.*keep the batch dimension"):
        predict(Bad(), torch.randn(1, 4), num_samples=3)
    net = nn.Sequential(BayesConv2d(1, 2, 3))
    with pytest.raises(bbb.UserError, match="BayesConv2d: inside a 2-sample pass"):
        predict(net, bbb.expand_samples(torch.randn(2, 1, 5, 5), 2), num_samples=2)


# --------------------------------------------------------------------------------------------
# conversion
# --------------------------------------------------------------------------------------------


def test_bayesianize_converts_and_warm_starts():
    torch.manual_seed(0)
    det = ResBlock()
    sd = {k: v.clone() for k, v in det.state_dict().items()}
    with pytest.warns(UserWarning, match=r"2 module\(s\) with parameters stay deterministic: bn1 \(BatchNorm2d\), "
                      r"bn2 \(BatchNorm2d\); 9\d\.\d% of the weights are Bayesian") as said:
        net = bbb.bayesianize(det, prior=torch.distributions.Normal(0.0, 0.5), rho_init=-4.0)
    assert len(said) == 1
    assert isinstance(net.conv1, BayesConv2d) and isinstance(net.head, BayesLinear)
    assert net.conv2.bias is None and net.conv2.bias_mu is None
    torch.testing.assert_close(net.conv1.weight, sd["conv1.weight"])
    torch.testing.assert_close(net.head.bias, sd["head.bias"])
    assert isinstance(net.conv1.prior, bbb.GaussianPrior) and net.conv1.prior.sigma == 0.5
    assert float(net.conv1.weight_rho.detach().mean()) == -4.0
    left = dict(bbb.deterministic_layers(net))
    assert left == {"bn1": "BatchNorm2d", "bn2": "BatchNorm2d"}
    # mean mode equals the deterministic network
    det2 = ResBlock()
    det2.load_state_dict(sd)
    det2.eval()
    net.eval()
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(net(x), det2(x))


def test_bayesianize_skip_and_bare_layers(recwarn):
    net = bbb.bayesianize(lenet(), skip=["10"])
    assert isinstance(net[10], nn.Linear) and not isinstance(net[10], BayesModule)
    assert ("10", "Linear") in bbb.deterministic_layers(net)
    net = bbb.bayesianize(lenet(), skip=nn.Conv2d)
    assert type(net[0]) is nn.Conv2d and isinstance(net[7], BayesLinear)
    net = bbb.bayesianize(lenet(), skip=lambda name, m: name == "0")
    assert type(net[0]) is nn.Conv2d and isinstance(net[3], BayesConv2d)
    lin = nn.Linear(3, 2)
    b = bbb.bayesianize(lin, from_weights=True)
    assert isinstance(b, BayesLinear)
    torch.testing.assert_close(b.weight, lin.weight)
    fresh = bbb.bayesianize(nn.Linear(3, 2), from_weights=False)
    assert isinstance(fresh, BayesLinear)
    assert not recwarn.list  # what skip names stays deterministic without a warning


def test_deterministic_state_dict_loads_into_a_converted_model():
    torch.manual_seed(0)
    det = lenet()
    net = bbb.bayesianize(lenet(), from_weights=False, rho_init=-3.0)
    net.load_state_dict(det.state_dict())  # strict: weight -> weight_mu, rho kept
    torch.testing.assert_close(net[0].weight_mu, det[0].weight)
    torch.testing.assert_close(net[10].bias, det[10].bias)
    assert float(net[0].weight_rho.detach().max()) == -3.0
    # and a Bayesian state_dict still loads as before
    net2 = bbb.bayesianize(lenet())
    net2.load_state_dict(net.state_dict())
    torch.testing.assert_close(net2[3].weight_rho, net[3].weight_rho)



def test_a_deterministic_checkpoint_starts_sigma_as_a_conversion_of_its_weights():
    # made on "meta" (a large model's way), moved by to_empty and loaded: rho was the empty memory
    # (0 here: sigma 0.69 on every weight) and "All keys matched"
    det = lenet()
    with torch.device("meta"):
        net = bbb.bayesianize(lenet(), rho_init=-4.0)
    net.to_empty(device="cpu")
    with torch.no_grad():
        for n, p in net.named_parameters():
            p.fill_(float("nan") if n.endswith("_rho") else 0.0)  # whatever the memory held
    net.load_state_dict(det.state_dict())
    assert all(bool((m.rho(n) == -4.0).all()) for m in bbb.nn.bayes_modules(net) for n in m.param_names())
    torch.testing.assert_close(net[0].weight_mu, det[0].weight)
    with torch.device("meta"):  # loaded with assign=True: rho was left on "meta"
        net = bbb.bayesianize(lenet(), rho_init=-4.0)
    net.load_state_dict(det.state_dict(), assign=True)
    assert net[0].weight_rho.device.type == "cpu" and bool((net[0].weight_rho == -4.0).all())
    # with sigma relative to the weights (MOPED): relative to the loaded ones, not those at conversion
    rel = bbb.bayesianize(lenet(), sigma_init=bbb.RelativeSigma(0.5))
    rel.load_state_dict(det.state_dict())
    torch.testing.assert_close(rel[7].weight_sigma, (0.5 * det[7].weight.abs()).clamp_min(1e-5))


def test_weight_property_serves_init_helpers_and_counters():
    layer = BayesLinear(4, 3)
    assert layer.weight is layer.weight_mu
    nn.init.zeros_(layer.weight)
    assert float(layer.weight_mu.abs().sum()) == 0.0
    assert BayesConv2d(1, 2, 3).weight.shape == nn.Conv2d(1, 2, 3).weight.shape
    assert BayesConv1d(1, 2, 3).weight.shape == nn.Conv1d(1, 2, 3).weight.shape
    assert "weight" not in dict(layer.named_parameters())  # state_dict keys are unchanged


def test_torch_distribution_priors():
    torch.manual_seed(0)
    lap = torch.distributions.Laplace(0.0, 0.2)
    layer = BayesLinear(5, 4, prior=lap)
    assert isinstance(layer.prior, bbb.TorchPrior)
    elbo = bbb.ELBO(layer, "categorical", kl="auto")
    out = elbo(torch.randn(3, 5), torch.tensor([0, 1, 2]))
    out.loss.backward()
    assert torch.isfinite(out.kl) and layer.weight_rho.grad is not None
    with pytest.raises(bbb.UserError, match="no closed-form"):
        bbb.ELBO(layer, kl="closed")(torch.randn(3, 5), torch.tensor([0, 1, 2]))
    # a scalar Normal is recognised: closed form, the same KL as GaussianPrior
    a = BayesLinear(5, 4, prior=torch.distributions.Normal(0.0, 0.3))
    b = BayesLinear(5, 4, prior=bbb.GaussianPrior(0.3))
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a.kl("closed"), b.kl("closed"))
    # the engine takes the plain path for a torch prior, and still trains
    eng = bbb.Engine(layer, "adam", lr=1e-2)
    assert not eng.fused
    with pytest.raises(bbb.UserError, match="event_shape"):
        BayesLinear(2, 2, prior=torch.distributions.MultivariateNormal(torch.zeros(2), torch.eye(2)))


def test_elbo_beta_and_state_dict():
    torch.manual_seed(0)
    net = bbb.BayesMLP(3, [4], 1)
    lik = bbb.Gaussian(sigma=1.0, learn_sigma=True)
    x, y = torch.randn(5, 3), torch.randn(5)
    g = torch.Generator().manual_seed(1)
    full = bbb.ELBO(net, lik)(x, y, generator=g)
    g = torch.Generator().manual_seed(1)
    half = bbb.ELBO(net, lik, beta=0.5)(x, y, generator=g)
    torch.testing.assert_close(half.loss, full.nll + 0.5 * full.kl)
    assert half.kl_weight == 0.5
    elbo = bbb.ELBO(net, lik)
    assert set(elbo.state_dict()) == {"likelihood.raw_sigma"}
    assert [n for n, _ in elbo.named_parameters()] == ["likelihood.raw_sigma"]
    assert elbo.model is net

    class Lit(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net
            self.elbo = bbb.ELBO(net, lik)

    keys = list(Lit().state_dict())
    assert len(keys) == len(set(keys)) == len(net.state_dict()) + 1
    with pytest.raises(bbb.UserError, match="beta"):
        bbb.ELBO(net, beta=-1)


@pytest.mark.parametrize("k", [1, 2])
def test_the_engine_trains_a_converted_lenet_with_k_samples(k):
    torch.manual_seed(0)
    net = bbb.bayesianize(lenet(), rho_init=-3.0)
    eng = bbb.Engine(net, "adam", lr=1e-3, num_samples=k, kl="mc", compile=False)
    assert eng.fused
    elbo = bbb.ELBO(net, "categorical", num_batches=2, num_samples=k, kl="mc")
    x, y = torch.randn(4, 1, 28, 28), torch.tensor([0, 1, 2, 0])
    before = net[0].weight_mu.detach().clone()
    for i in range(2):
        with eng.sampling():
            out = elbo(x, y, batch_index=i)
        eng.zero_grad()
        (out.loss / 4).backward()
        eng.step()
    assert out.output.shape == ((k, 4, 3) if k > 1 else (4, 3))
    assert not torch.equal(before, net[0].weight_mu.detach())


def test_predict_and_evaluate_take_a_dataloader():
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    net = bbb.bayesianize(lenet(), rho_init=-2.0)
    x, y = torch.randn(10, 1, 28, 28), torch.randint(0, 3, (10,))
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    logits, labels = predict(net, loader, num_samples=3, return_targets=True)
    assert logits.shape == (3, 10, 3) and torch.equal(labels, y)
    torch.manual_seed(1)
    a = predict(net, list(x.split(4)), num_samples=3)  # (a DataLoader's iterator draws a seed itself)
    torch.manual_seed(1)
    b = predict(net, x, num_samples=3)
    torch.testing.assert_close(a, b)  # the same 3 networks for every batch
    m = bbb.uncertainty.evaluate(net, loader, num_samples=3)
    assert set(m) == {"error", "nll", "brier", "ece", "entropy", "mutual_information"}
    assert m["mutual_information"] > 0
    assert bbb.uncertainty.evaluate(net, (x, y), num_samples=3)["error"] >= 0
    with pytest.raises(bbb.UserError, match="return_targets"):
        predict(net, x, return_targets=True)


def test_bayesianize_keeps_a_shared_layer_shared():
    shared = nn.Linear(4, 4)
    net = nn.Sequential(shared, nn.ReLU(), shared)
    bbb.bayesianize(net)
    assert isinstance(net[0], BayesLinear) and net[0] is net[2]
    assert len(list(net.parameters())) == 4
