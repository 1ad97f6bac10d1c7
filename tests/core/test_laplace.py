"""bbb.laplace: a last-layer Laplace of a trained deterministic network through laplace-torch
(skipped where it is not installed, but for the line that says how to install it)."""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bbb
from bbb.errors import MissingExtra, UserError
from bbb.laplace import INSTALL, fit_laplace, fit_last_layer_laplace, laplace_available

needs_laplace = pytest.mark.skipif(not laplace_available(), reason="laplace-torch is not installed")


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text
    return text


@pytest.fixture(scope="module")
def regression():
    """A 1-d regression on [-1, 1], noise sd 0.1, and a network fitted to it."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 1, generator=g) * 2 - 1
    y = torch.sin(3 * x[:, 0]) + 0.1 * torch.randn(200, generator=g)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Linear(50, 1))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(600):
        opt.zero_grad()
        ((net(x)[:, 0] - y) ** 2).mean().backward()
        opt.step()
    return net, x, y


@pytest.fixture(scope="module")
def classification():
    """Two Gaussian blobs at (+-1, 0) and a classifier fitted to them."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(100, 2, generator=g) * 0.5 + torch.tensor([1.0, 0.0]),
                   torch.randn(100, 2, generator=g) * 0.5 - torch.tensor([1.0, 0.0])])
    y = torch.cat([torch.zeros(100), torch.ones(100)]).long()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 20), nn.ReLU(), nn.Linear(20, 2))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return net, x, y


@needs_laplace
def test_regression_variance_grows_away_from_the_data_and_the_noise_is_the_data_s(regression):
    net, x, y = regression
    before = {k: v.clone() for k, v in net.state_dict().items()}
    post = fit_last_layer_laplace(net, (x, y))
    assert post.prior_precision_from == "marglik" and post.sigma_noise_from == "marglik"
    assert 0 < post.prior_precision < float("inf")
    assert post.sigma_noise is not None and 0.07 < post.sigma_noise < 0.14  # the data's 0.1
    inside, outside = torch.tensor([[0.0], [0.5]]), torch.tensor([[2.0], [4.0]])
    _, f_in = post.predict(inside, noise=False)
    _, f_out = post.predict(outside, noise=False)
    assert f_out.min() > 10 * f_in.max()
    assert f_out[1] > f_out[0]  # further still, larger still
    mean, var = post.predict(inside)
    assert mean.shape == var.shape == (2, 1)
    assert torch.allclose(var, f_in + post.sigma_noise ** 2)
    with torch.no_grad():
        assert torch.allclose(mean, net(inside))  # the GLM predictive's mean is the MAP network's output
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())  # the network is not changed
    state = json.loads(json.dumps(post.state()))
    assert state["prior_precision"] == post.prior_precision and state["sigma_noise"] == post.sigma_noise
    assert state["n_params"] == 51 and state["n_data"] == 200 and state["hessian"] == "kron"


@needs_laplace
def test_a_given_noise_and_prior_are_kept(regression):
    net, x, y = regression
    post = fit_last_layer_laplace(net, (x, y), sigma_noise=0.3)
    assert post.sigma_noise == pytest.approx(0.3) and post.sigma_noise_from == "given"
    assert post.prior_precision_from == "marglik"
    both = fit_last_layer_laplace(net, (x, y), sigma_noise=0.3, prior=5.0, hessian="full")
    assert both.prior_precision == pytest.approx(5.0) and both.prior_precision_from == "given"
    _, var = both.predict(torch.zeros(1, 1))
    assert var.item() > 0.3 ** 2


@needs_laplace
def test_a_dataloader_fits_the_same_posterior(regression):
    net, x, y = regression
    a = fit_last_layer_laplace(net, (x, y), marglik_steps=50)
    b = fit_last_layer_laplace(net, DataLoader(TensorDataset(x, y[:, None]), batch_size=64), marglik_steps=50)
    assert b.prior_precision == pytest.approx(a.prior_precision, rel=1e-4)
    assert b.sigma_noise == pytest.approx(a.sigma_noise, rel=1e-4)


@needs_laplace
def test_probit_probabilities_are_less_confident_than_the_map_s_far_from_the_data(classification):
    net, x, y = classification
    post = fit_last_layer_laplace(net, (x, y), likelihood="classification")
    assert 0 < post.prior_precision < float("inf") and post.sigma_noise is None
    far = torch.tensor([[10.0, 5.0], [-20.0, 0.0], [0.0, 15.0]])
    probs = post.predict(far)
    assert probs.shape == (3, 2) and torch.allclose(probs.sum(1), torch.ones(3))
    with torch.no_grad():
        map_conf = net(far).softmax(-1).max(1).values
    assert (probs.max(1).values < map_conf - 1e-3).all()
    assert json.loads(json.dumps(post.state()))["likelihood"] == "classification"


@needs_laplace
@pytest.mark.parametrize("call, words", [
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y), likelihood="poisson"), "unknown likelihood"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y), hessian="lowrank"), "unknown hessian"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y), prior="cv"), "'marglik'"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y), prior=0.0), "prior"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y), sigma_noise=-1.0), "sigma_noise"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y[:10])), "same number of rows"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y[:, None].repeat(1, 2))), "regression targets"),
    (lambda n, x, y: fit_last_layer_laplace(n, (x, y), likelihood="classification"), "class indices"),
    (lambda n, x, y: fit_last_layer_laplace(n, x), "(inputs, targets)"),
    (lambda n, x, y: fit_last_layer_laplace(nn.Sequential(n, nn.Tanh()), (x, y)), "nn.Linear"),
    (lambda n, x, y: fit_last_layer_laplace(bbb.nn.BayesLinear(1, 1), (x, y)), "Bayesian"),
])
def test_bad_regression_input_is_one_line(regression, call, words):
    net, x, y = regression
    with pytest.raises(UserError) as err:
        call(net, x, y)
    assert words in _one_line(err)


@needs_laplace
def test_bad_classification_input_is_one_line(classification):
    net, x, y = classification
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(net, (x, y), likelihood="classification", sigma_noise=0.1)
    assert "sigma_noise" in _one_line(err)
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(net, (x, y + 1), likelihood="classification")
    assert "0..1" in _one_line(err)
    # a regression of 2 outputs needs (n, 2) targets; the line said "(n,) or (n, 2) ..., got (200,)"
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(net, (x, y.float()), likelihood="regression")
    assert "must be (n, 2), one per output" in _one_line(err)


def test_without_laplace_torch_the_line_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "laplace", None)  # what `import laplace` meets where it is not installed
    assert not laplace_available()
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.Linear(4, 1)),
                               (torch.zeros(3, 1), torch.zeros(3)))
    assert INSTALL in _one_line(err) and "[laplace]" in INSTALL
    assert isinstance(err.value, MissingExtra) and isinstance(err.value, ModuleNotFoundError)
    assert err.value.name == "laplace"  # what the docs' test skips a page on where it is missing


@needs_laplace
def test_weights_all_covers_the_parameters_that_require_a_gradient(classification):
    """``fit_laplace(weights="all")``: the posterior is over every trainable parameter (a frozen
    layer stays the MAP's), e.g. a LoRA model's adapters; ``"last_layer"`` is the last layer's."""
    from bbb.laplace import WEIGHTS, fit_laplace

    net, x, y = classification
    frozen = copy.deepcopy(net)
    frozen[0].weight.requires_grad_(False)  # a layer half frozen: KFAC cannot take it, one line says what to do
    with pytest.raises(UserError) as err:
        fit_laplace(frozen, (x, y), weights="all", likelihood="classification")
    assert "freeze it whole" in _one_line(err) and "hessian='diag'" in str(err.value)
    assert fit_laplace(frozen, (x, y), weights="all", hessian="diag", likelihood="classification").n_params == sum(
        p.numel() for p in frozen.parameters() if p.requires_grad)
    frozen[0].bias.requires_grad_(False)  # the first layer frozen whole: the last layer trains
    frozen.insert(2, nn.Linear(20, 20))  # and a hidden layer more
    trainable = sum(p.numel() for p in frozen.parameters() if p.requires_grad)
    post = fit_laplace(frozen, (x, y), weights="all", likelihood="classification")
    assert post.weights == "all" and post.n_params == trainable and post.state()["weights"] == "all"
    assert post.n_params > sum(p.numel() for p in net[-1].parameters())  # more than the last layer
    probs = post.predict(torch.tensor([[10.0, -10.0], [1.0, 1.0]]))
    assert probs.shape == (2, 2) and torch.allclose(probs.sum(-1), torch.ones(2)) and post.prior_precision > 0
    last = fit_laplace(net, (x, y), likelihood="classification")  # the default: the last layer, as before
    assert last.weights == "last_layer" and last.n_params == sum(p.numel() for p in net[-1].parameters())
    assert fit_last_layer_laplace(net, (x, y), likelihood="classification").n_params == last.n_params
    assert WEIGHTS == ("last_layer", "all")
    with pytest.raises(UserError) as err:
        fit_laplace(net, (x, y), weights="some", likelihood="classification")
    assert "weights" in _one_line(err) and "all" in str(err.value)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(UserError) as err:
        fit_laplace(frozen, (x, y), weights="all", likelihood="classification")
    assert "requires_grad" in _one_line(err)


@needs_laplace
@pytest.mark.parametrize("bias", [True, False])
def test_the_kfac_predictive_in_closed_form_is_laplace_torch_s(bias):
    """``predict`` of a last layer's KFAC posterior computes the linearised network's variance
    from the factors' eigendecomposition (:meth:`kron_factors`) instead of laplace-torch's
    Jacobians over every weight: the same probabilities and variances (3 classes, 2 outputs,
    with and without the layer's bias, a prior chosen and a prior given)."""
    from bbb.laplace import fit_laplace

    g = torch.Generator().manual_seed(1)
    x = torch.randn(120, 4, generator=g)
    torch.manual_seed(1)
    for outputs, likelihood in ((3, "classification"), (2, "regression")):
        net = nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, outputs, bias=bias))
        y = (torch.randint(0, outputs, (120,), generator=g) if likelihood == "classification"
             else torch.randn(120, outputs, generator=g))
        for prior in ("marglik", 3.0):
            post = fit_laplace(net, (x, y), likelihood=likelihood, prior=prior, marglik_steps=30)
            assert len(post.kron_factors()) == (2 if bias else 1)
            new = torch.randn(50, 4, generator=g) * 3
            if likelihood == "classification":
                expected = post.la(new, pred_type="glm", link_approx="probit")
                got = post.predict(new, batch_size=16)
                assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6), (got - expected).abs().max()
            else:
                f_mu, f_var = post.la(new, pred_type="glm")
                mean, var = post.predict(new, noise=False, batch_size=16)
                assert torch.allclose(mean, f_mu) and torch.allclose(var, f_var.diagonal(dim1=-2, dim2=-1), rtol=1e-4)
    diag = fit_laplace(net, (x, y), likelihood="regression", hessian="diag", marglik_steps=5)
    with pytest.raises(UserError) as err:
        diag.kron_factors()
    assert "hessian='kron'" in _one_line(err)


@needs_laplace
def test_the_kfac_noise_maximises_the_marginal_likelihood():
    # laplace-torch 0.3's KFAC log-determinant has no gradient in sigma_noise: the noise stopped at
    # the residuals' rms (0.278 here), not at the marginal likelihood's maximum (0.2895)
    from bbb.laplace import log_marginal_likelihood

    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 3, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).double()
    with torch.no_grad():
        y = net(x)[:, 0] + 0.3 * torch.randn(60, generator=g, dtype=torch.float64)
    post = fit_last_layer_laplace(net, (x, y), prior=9.0, marglik_steps=100, marglik_lr=0.3)
    la, s = post.la, post.sigma_noise
    prior = torch.tensor([9.0], dtype=torch.float64)

    def lml(sigma: float) -> float:
        with torch.no_grad():
            return float(la.log_marginal_likelihood(prior, torch.tensor([sigma], dtype=torch.float64)))

    slope = (lml(s * 1.001) - lml(s / 1.001)) / (2 * 0.001)  # d lml / d log sigma, from values alone
    assert abs(slope) < 0.05  # (4.6 when the log-determinant is left out)
    assert post.log_marginal_likelihood == pytest.approx(lml(s))
    log_sigma = torch.tensor([s], dtype=torch.float64).log().requires_grad_()
    log_marginal_likelihood(la, prior, log_sigma.exp()).backward()
    assert abs(float(log_sigma.grad)) < 0.05


@needs_laplace
def test_a_dataloader_s_targets_of_another_shape_are_one_line(regression, classification):
    # (50, 2) regression targets for one output were broadcast by laplace-torch: a silent misfit
    net, x, y = regression
    for bad in (y[:, None].repeat(1, 2), y):
        with pytest.raises(UserError) as err:
            fit_last_layer_laplace(net, DataLoader(TensorDataset(x, bad), batch_size=64), marglik_steps=0)
        assert "shaped as the network's outputs" in _one_line(err)
    net, x, y = classification
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(net, DataLoader(TensorDataset(x, y.float()), batch_size=64),
                               likelihood="classification", marglik_steps=0)
    assert "class indices" in _one_line(err)



@needs_laplace
@pytest.mark.parametrize("weights", ["last_layer", "all"])
def test_the_fit_and_predict_leave_each_module_in_its_own_mode(classification, weights):
    # model.train(was) put a BatchNorm frozen in eval() (a fine-tune's) back in train()
    _, x, y = classification
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).train()
    net[1].eval().requires_grad_(False)  # (laplace-torch's curvature has no BatchNorm)
    post = bbb.laplace.fit_laplace(net, (x, y), weights=weights, likelihood="classification", marglik_steps=2)
    post.predict(x[:4])
    assert [m.training for m in net] == [True, False, True, True]


@needs_laplace
def test_weights_all_keeps_the_network_s_mode_and_predicts_without_dropout(classification):
    # weights="all" fits the network itself: before, the fit left it in eval mode, and predict ran it
    # with dropout when it was training again (two calls, two answers)
    _, x, y = classification
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    post = bbb.laplace.fit_laplace(net, (x, y), weights="all", likelihood="classification", marglik_steps=5)
    assert net.training
    probs = post.predict(x[:4])
    torch.testing.assert_close(post.predict(x[:4]), probs)
    assert net.training
    net.eval()
    torch.testing.assert_close(post.predict(x[:4]), probs)


@needs_laplace
def test_no_marglik_steps_is_refused_where_a_value_is_to_be_chosen(regression, classification):
    # marglik_steps=0 left the prior precision and the noise at 1, recorded as chosen ("marglik")
    net, x, y = regression
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(net, (x, y), marglik_steps=0)
    assert "prior and sigma_noise" in _one_line(err)
    with pytest.raises(UserError) as err:
        fit_last_layer_laplace(net, (x, y), prior=2.0, marglik_steps=0)
    assert "give sigma_noise a number" in _one_line(err)
    post = fit_last_layer_laplace(net, (x, y), prior=2.0, sigma_noise=0.3, marglik_steps=0)
    assert (post.prior_precision, post.sigma_noise) == (2.0, pytest.approx(0.3))
    net, x, y = classification
    with pytest.raises(UserError, match="give prior a number"):
        fit_last_layer_laplace(net, (x, y), likelihood="classification", marglik_steps=0)
    assert fit_last_layer_laplace(net, (x, y), likelihood="classification", prior=1.5,
                                  marglik_steps=0).prior_precision_from == "given"


class _After(nn.Module):
    """A network whose forward changes its last linear layer's output before returning it."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.body, self.fc, self.skip, self.how = nn.Sequential(nn.Linear(1, 8), nn.Tanh()), nn.Linear(8, 1), \
            nn.Linear(1, 1), how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(self.body(x))
        return 5 * out if self.how == "scaled" else out + self.skip(x) if self.how == "residual" else out


@needs_laplace
@pytest.mark.parametrize("how", ["scaled", "residual"])
def test_a_last_layer_whose_output_the_forward_changes_is_refused(regression, how):
    """A scaled output gave variances 25x too small, a residual's skip layer the posterior: silently."""
    x, y = regression[1], regression[2]
    with pytest.raises(UserError, match=r"output is not its last nn.Linear's \((fc|skip)\) output .*weights='all'"):
        fit_laplace(_After(how), (x, y), likelihood="regression", prior=1.0, sigma_noise=0.1)
    fit_laplace(_After("plain"), (x, y), likelihood="regression", prior=1.0, sigma_noise=0.1)  # its raw output: fits


class _Tokens(nn.Module):
    """A classifier of token ids (an embedding, then a linear head)."""

    def __init__(self, as_tuple: bool = False) -> None:
        super().__init__()
        self.e, self.fc, self.as_tuple = nn.Embedding(20, 8), nn.Linear(8, 3), as_tuple

    def forward(self, ids: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor]:
        out = self.fc(self.e(ids).mean(1))
        return (out,) if self.as_tuple else out


@needs_laplace
def test_token_ids_stay_integers_and_what_kfac_cannot_cover_is_one_line():
    """Integer inputs were cast to floats (an embedding then refused them: no Laplace-LoRA of a text
    model), an embedding under weights='all' KFAC was laplace-torch's NotImplementedError, and an
    output that is no tensor an AttributeError."""
    torch.manual_seed(0)
    ids, y = torch.randint(0, 20, (40, 5)), torch.randint(0, 3, (40,))
    net = _Tokens()
    post = fit_laplace(net, (ids, y), likelihood="classification", prior=1.0)
    assert post.predict(ids[:3]).shape == (3, 3)
    fit_laplace(net, (ids, y), weights="all", hessian="diag", likelihood="classification", prior=1.0)
    with pytest.raises(UserError, match=r"covers nn.Linear and nn.Conv2d layers; e is a trainable Embedding"):
        fit_laplace(net, (ids, y), weights="all", likelihood="classification", prior=1.0)
    with pytest.raises(UserError, match=r"must return a tensor of outputs, got a tuple"):
        fit_laplace(_Tokens(as_tuple=True), (ids, y), weights="all", hessian="diag", likelihood="classification",
                    prior=1.0)
