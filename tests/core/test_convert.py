"""k-sample passes through ordinary networks, and converting networks you already have (issue 18)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.nn import BayesConv1d, BayesConv2d, BayesLinear, BayesModule, forward_samples, sampling
from bbb.uncertainty import mutual_information, predict

# --------------------------------------------------------------------------------------------
# architectures
# --------------------------------------------------------------------------------------------


def mlp_with_flatten() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 3))


def lenet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))


class ResBlock(nn.Module):
    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(h + self.bn2(self.conv2(h)))  # residual add
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.head(h)


class Conv1dNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, padding="same")
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(4 * 14, 3)

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.conv(x.view(x.shape[0], 1, -1)))).flatten(1))


ARCHS = {"mlp-flatten": mlp_with_flatten, "lenet": lenet, "resblock": ResBlock}


def _input(arch: str, b: int) -> torch.Tensor:
    return torch.randn(b, 1, 28, 28)


@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("estimator", ["reparam", "flipout", "local"])
def test_k_samples_are_k_different_networks(arch, b, estimator):
    torch.manual_seed(0)
    net = bbb.bayesianize(ARCHS[arch](), estimator=estimator, rho_init=-2.0)
    x = _input(arch, b)
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


# --------------------------------------------------------------------------------------------
# bayesianize says what it did
# --------------------------------------------------------------------------------------------


def test_bayesianize_refuses_a_model_with_nothing_to_convert():
    with pytest.raises(bbb.UserError, match="has no layer to make Bayesian"):
        bbb.bayesianize(nn.Sequential(nn.ReLU(), nn.BatchNorm1d(3)))


def test_bayesianize_refuses_a_skip_that_names_no_module():
    with pytest.raises(bbb.UserError, match="skip names no module of the model: fc9"):
        bbb.bayesianize(lenet(), skip=["fc9"])


def test_bayesianize_strict_raises_on_what_stays_deterministic():
    with pytest.raises(bbb.UserError, match=r"bn1 \(BatchNorm2d\), bn2 \(BatchNorm2d\)"):
        bbb.bayesianize(ResBlock(), strict=True)
    net = bbb.bayesianize(ResBlock(), strict=True, skip=[nn.BatchNorm2d])  # said: no error
    assert isinstance(net.conv1, BayesConv2d)


def test_bayesianize_names_a_parameter_held_by_the_model_itself():
    class WithPos(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos = nn.Parameter(torch.zeros(4))
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x + self.pos)

    with pytest.warns(UserWarning, match=r"\(the model\) \(WithPos\)"):
        bbb.bayesianize(WithPos())


def test_register_conversion_adds_a_type_without_editing_convert():
    class MyLinear(nn.Linear):
        pass

    net = nn.Sequential(MyLinear(3, 2))
    with pytest.raises(bbb.UserError, match="has no layer to make Bayesian"):
        bbb.bayesianize(net)
    try:
        bbb.register_conversion(MyLinear, BayesLinear)
        assert isinstance(bbb.bayesianize(nn.Sequential(MyLinear(3, 2)))[0], BayesLinear)
    finally:
        bbb.convert.CONVERTIBLE.pop(MyLinear)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_bayesianize_keeps_each_modules_training_flag(arch):
    torch.manual_seed(0)
    x = _input(arch, 4)
    net = bbb.bayesianize(ARCHS[arch]().eval(), skip=[nn.BatchNorm2d], rho_init=-2.0)
    assert not any(m.training for m in net.modules())
    assert torch.equal(net(x), net(x))  # eval: the posterior means, as the model it replaced
    net.train()
    assert not torch.equal(net(x), net(x))  # train: a fresh weight sample per call
    # a model converted in train mode stays in train mode, a module left in eval stays in eval
    det = ARCHS[arch]()
    det[1].eval() if isinstance(det, nn.Sequential) else det.head.eval()
    flags = {n: m.training for n, m in det.named_modules()}
    net = bbb.bayesianize(det, skip=[nn.BatchNorm2d])
    assert {n: m.training for n, m in net.named_modules()} == flags
    layer = bbb.bayesianize(nn.Linear(3, 2).eval())  # a bare layer
    assert isinstance(layer, BayesLinear) and not layer.training


def test_a_layers_hooks_go_on_with_its_bayesian_copy_and_spectral_norm_is_an_error():
    # they were dropped: a forward hook (transformers' enable_input_require_grads on the input
    # embeddings, an activation logger) stopped running, and spectral_norm/weight_norm vanished
    # with the weight they had normalised left as the posterior mean
    seen = []
    lin, emb = nn.Linear(3, 3), nn.Embedding(5, 3)
    lin.register_forward_pre_hook(lambda m, args: seen.append(type(m).__name__))
    handle = lin.register_forward_hook(lambda m, args, out: out * 0)
    emb.register_forward_hook(lambda m, args, kwargs, out: out + 1, with_kwargs=True)
    net = bbb.bayesianize(nn.Sequential(emb, lin))
    assert isinstance(net[1], BayesLinear)
    assert torch.equal(net(torch.tensor([1, 2])), torch.zeros(2, 3)) and seen == ["BayesLinear"]
    handle.remove()  # the user's handle still removes it
    assert net(torch.tensor([1, 2])).abs().sum() > 0
    prune_l1 = lambda layer: nn.utils.prune.l1_unstructured(layer, "weight", amount=0.5)  # noqa: E731
    for wrap in (nn.utils.spectral_norm, nn.utils.weight_norm, prune_l1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # (weight_norm is deprecated)
            layer = wrap(nn.Linear(3, 3))
        with pytest.raises(bbb.UserError, match="spectral_norm/weight_norm/prune.*remove it first") as err:
            bbb.bayesianize(nn.Sequential(layer, nn.Linear(3, 2)))
        assert "\n" not in str(err.value)
    mha = nn.MultiheadAttention(4, 2)
    mha.out_proj.register_forward_hook(lambda m, args, out: out)
    with pytest.raises(bbb.UserError, match="part out_proj has hooks"):
        bbb.bayesianize(nn.Sequential(mha))


def test_converting_a_bayesian_model_again_says_which_settings_it_leaves_unapplied():
    # bayesianize(net, estimator="flipout", prior=..., rho_init=...) on a model Bayesian already
    # returned it unchanged and said nothing: every setting passed was silently ignored
    net = bbb.bayesianize(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), prior=bbb.GaussianPrior(0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same settings again, or none: silent
        assert bbb.bayesianize(net, prior=bbb.GaussianPrior(0.1)) is net and bbb.bayesianize(net) is net
    with pytest.warns(UserWarning, match=r"2 layer\(s\) are Bayesian already \(0, 2\) with another estimator, "
                                         r"prior, rho_init, which it does not change") as rec:
        bbb.bayesianize(net, estimator="flipout", prior=bbb.GaussianPrior(1.0), rho_init=-3.0)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert net[0].estimator.value == "reparam" and net[0].rho_init == -5.0  # unchanged, as said
    with pytest.raises(bbb.UserError, match="Bayesian already"):
        bbb.bayesianize(BayesLinear(3, 2), estimator="local", strict=True)
    part = bbb.bayesianize(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), skip=["1"])
    with pytest.warns(UserWarning, match=r"1 layer\(s\) are Bayesian already \(0\)"):
        bbb.bayesianize(part, estimator="local")  # the rest converts with it
    assert part[1].estimator.value == "local"


def test_a_skipped_type_leaves_everything_inside_it_deterministic_as_a_name_does():
    # skip=[Block] (a container type of the user's) converted the Linear inside every Block and said
    # nothing, while skip=["0"] left it deterministic
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = nn.Linear(4, 4), nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.fc(x))

    for skip in ([Block], ["0"], lambda name, mod: isinstance(mod, Block) or name.startswith("0.")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # all said by skip: no warning
            net = bbb.bayesianize(nn.Sequential(Block(), nn.Linear(4, 2)), skip=skip)
        assert type(net[0].fc) is nn.Linear and isinstance(net[1], BayesLinear)
    with pytest.raises(bbb.UserError, match="no layer to make Bayesian"):
        bbb.bayesianize(nn.Sequential(nn.Linear(4, 2)), skip=[nn.Sequential])  # the model itself: all of it


def test_a_layer_held_under_two_names_and_skipped_under_one_stays_one_deterministic_layer():
    # skip named one of its names: whichever name came first in the model decided, so the skip was
    # ignored (both names Bayesian) or the layer split in two (one name Bayesian, the other the old
    # deterministic layer), silently either way
    class Alias(nn.Module):
        def __init__(self, alias_first):
            super().__init__()
            if alias_first:
                self.alias = nn.Linear(4, 4)
                self.body = self.alias
            else:
                self.body = nn.Linear(4, 4)
                self.alias = self.body
            self.out = nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.alias(self.body(x)))

    for alias_first in (False, True):
        for skip in (["alias"], ["body"], lambda name, mod: name == "alias"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # said by skip: no warning
                net = bbb.bayesianize(Alias(alias_first), skip=skip)
            assert type(net.body) is nn.Linear and net.alias is net.body and isinstance(net.out, BayesLinear)


def test_a_skip_inside_a_layer_that_converts_as_a_whole_is_said():
    # MultiheadAttention converts with its out_proj: skip naming out_proj was accepted and ignored
    # (out_proj Bayesian all the same), silently
    def encoder():
        layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
        return nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)

    said = (r"skip covers layers\.0\.self_attn\.out_proj, inside layers\.0\.self_attn \(MultiheadAttention\), "
            r"which converts as a whole: skip layers\.0\.self_attn")
    with pytest.raises(bbb.UserError, match=said):
        bbb.bayesianize(encoder(), skip=["layers.0.self_attn.out_proj"])
    with pytest.warns(UserWarning, match=r"skip covers layers\.0\.self_attn\.out_proj"):  # a type: said, not refused
        net = bbb.bayesianize(encoder(), skip=[nn.LayerNorm, nn.Linear])
    assert type(net.layers[0].linear1) is nn.Linear and isinstance(net.layers[0].self_attn.out_proj, BayesLinear)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net = bbb.bayesianize(encoder(), skip=["layers.0.self_attn", nn.LayerNorm])  # the whole layer: as asked
    assert type(net.layers[0].self_attn) is nn.MultiheadAttention


def test_the_models_own_parameters_are_said_with_the_skip_that_covers_them_alone():
    # "Pass skip=[...]" for the model's own nn.Parameter: its name '' or its type skips the whole model,
    # and the error then said the model "has no layer to make Bayesian", as if none converted
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.temp = nn.Linear(3, 2), nn.Parameter(torch.ones(1))

        def forward(self, x):
            return self.fc(x) / self.temp

    with pytest.warns(UserWarning, match=r"\(the model\) \(Net\).*the model's own parameters: "
                                         r"skip=lambda name, module: name == ''"):
        bbb.bayesianize(Net())
    for skip in ([""], [Net]):
        with pytest.raises(bbb.UserError, match="no layer to make Bayesian: skip covers every layer of Net that"):
            bbb.bayesianize(Net(), skip=skip)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(bbb.bayesianize(Net(), skip=lambda name, module: name == "").fc, BayesLinear)


def test_a_layer_used_several_times_in_a_forward_is_one_network_sample():
    # a layer called at every step of a loop (a recurrent cell of the user's), or held in two places
    # (Sequential(lin, act, lin)), drew a new weight sample at each call on the plain path: each
    # step of one sampled network had other weights (the Engine, which supplies one sample a step,
    # did not), and the Monte Carlo KL saw only the last draw
    class Cell(nn.Module):
        def __init__(self):
            super().__init__()
            self.ih, self.hh, self.out = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            h = torch.zeros(x.shape[0], 4)
            for t in range(x.shape[1]):
                h = torch.tanh(self.ih(x[:, t]) + self.hh(h))
            return self.out(h)

    torch.manual_seed(0)
    net = bbb.bayesianize(Cell(), rho_init=0.0)
    draws = []
    new = net.hh._draw_new
    net.hh._draw_new = lambda name, k: draws.append((name, k)) or new(name, k)
    x, y = torch.randn(2, 5, 3), torch.randint(0, 2, (2,))
    for k in (1, 3):
        draws.clear()
        bbb.ELBO(net, num_batches=1, num_samples=k)(x, y, batch_index=0)
        assert draws == [("weight", None if k == 1 else k), ("bias", None if k == 1 else k)]
        draws.clear()  # forward_samples: k networks, each one sample for all the loop's steps (it drew per step)
        bbb.nn.forward_samples(net, x, k)
        assert draws == [("weight", None if k == 1 else k), ("bias", None if k == 1 else k)]
    lin = nn.Linear(4, 4)
    twice = bbb.bayesianize(nn.Sequential(lin, nn.Tanh(), lin), rho_init=0.0)  # a bare forward too
    xs = torch.randn(2, 4)
    with bbb.nn.SampleRecorder() as rec:
        out = twice(xs)
    w, b = rec.get(twice[0], "weight").w, rec.get(twice[0], "bias").w
    torch.testing.assert_close(out, torch.tanh(xs @ w.T + b) @ w.T + b)


def test_a_trained_padding_row_is_said_once_converted():
    """torch outputs a non-zero padding_idx row; the Bayesian embedding outputs 0 there: the
    conversion says so in one line, naming the layer and the row's norm (a zero row, a bag: silent)."""
    emb = nn.Embedding(5, 3, padding_idx=1)
    with torch.no_grad():
        emb.weight[1].fill_(1.0)
    with pytest.warns(UserWarning, match=r"bayesianize: 0: .*padding_idx=1 row .* norm 1\.732") as said:
        bbb.bayesianize(nn.Sequential(emb))
    assert len(said) == 1 and "\n" not in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bbb.bayesianize(nn.Sequential(nn.Embedding(5, 3, padding_idx=1)))  # torch's zero row
        bbb.bayesianize(nn.Sequential(emb), from_weights=False)  # its weights not kept
        bag = nn.EmbeddingBag(5, 3, padding_idx=1)
        with torch.no_grad():
            bag.weight[1].fill_(1.0)
        bbb.bayesianize(nn.Sequential(bag))  # a bag leaves the row out, as torch does


@pytest.mark.parametrize("estimator", ["Flipout", "lrt", None])
def test_an_unknown_estimator_is_a_one_line_error_naming_the_choices(estimator):
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(bbb.UserError, match="unknown estimator .*choose one of: reparam, local, flipout"):
        bbb.bayesianize(net, estimator=estimator)
    assert bbb.bayesianize(net, estimator=bbb.nn.base.Estimator.FLIPOUT)[0].estimator.value == "flipout"


@pytest.mark.parametrize("flag,value", [("from_weights", "no"), ("from_weights", "False"), ("strict", "yes"),
                                        ("modules_to_save", None)])
def test_a_flag_that_is_not_a_bool_is_a_one_line_error(flag, value):
    # from_weights="no" (a config's string) read as True: the means started at the weights, silently
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(bbb.UserError, match=f"{flag} must be True or False, got {value!r}"):
        bbb.bayesianize(net, **{flag: value})
    assert isinstance(net[0], nn.Linear)  # nothing converted
    assert isinstance(bbb.bayesianize(net, from_weights=False, strict=True)[0], BayesLinear)


def test_a_skip_callable_of_one_argument_is_a_one_line_error():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(bbb.UserError, match=r"skip\(name, module\) -> bool.*<lambda> does not take"):
        bbb.bayesianize(net, skip=lambda module: isinstance(module, nn.ReLU))  # (was a bare TypeError)
    assert isinstance(bbb.bayesianize(net, skip=lambda name, module: name == "0")[2], BayesLinear)


def test_a_torchscript_model_is_a_one_line_error_that_says_so():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(bbb.UserError, match="not a TorchScript one"):  # (was: "has no layer to make Bayesian")
        bbb.bayesianize(torch.jit.script(net))


def test_a_lazy_layer_is_a_one_line_error_until_a_forward_made_it():
    net = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(bbb.UserError, match=r"not made yet in 0 \(LazyLinear\).*forward pass") as excinfo:
        bbb.bayesianize(net)
    assert "\n" not in str(excinfo.value)
    net(torch.randn(2, 3))  # the LazyLinear is now an nn.Linear(3, 4)
    bbb.bayesianize(net)
    assert isinstance(net[0], BayesLinear) and net[0].in_features == 3


def test_a_parametrized_layer_left_deterministic_is_said_how_to_convert():
    # the warning said only "register_conversion for their types", which a parametrized type cannot use
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    torch.nn.utils.parametrizations.weight_norm(net[0])
    with pytest.warns(UserWarning, match=r"0 \(ParametrizedLinear\).*remove_parametrizations"):
        bbb.bayesianize(net)
    torch.nn.utils.parametrize.remove_parametrizations(net[0], "weight")
    bbb.bayesianize(net)
    assert isinstance(net[0], BayesLinear)

