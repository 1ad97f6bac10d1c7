"""Bayesian recurrent layers: the posterior mean is the torch layer, k folded samples are k
independent networks, gradients, the ELBO and the fused engine."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.engine import counter_noise
from bbb.errors import UserError
from bbb.nn import BayesLinear, SampleRecorder, folded_samples, forward_samples, sampling
from bbb.nn.recurrent import BayesGRU, BayesLSTM, BayesRNN

IN, HID, T, B = 3, 4, 5, 3
KINDS = {  # name: (torch class, bbb class, extra kwargs)
    "lstm": (nn.LSTM, BayesLSTM, {}),
    "gru": (nn.GRU, BayesGRU, {}),
    "rnn-tanh": (nn.RNN, BayesRNN, {"nonlinearity": "tanh"}),
    "rnn-relu": (nn.RNN, BayesRNN, {"nonlinearity": "relu"}),
}
ALL = pytest.mark.parametrize("kind", list(KINDS))
FIRST = pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "seq-first"])


def _torch(kind, batch_first, **kw):
    tcls, _, extra = KINDS[kind]
    opts = {"num_layers": 2, "bidirectional": True, "batch_first": batch_first, **extra, **kw}
    return tcls(IN, HID, **opts)


def _bayes(kind, batch_first, rho_init=-5.0, **kw):
    layer = _torch(kind, batch_first, **kw)
    return KINDS[kind][1].from_torch(layer, rho_init=rho_init), layer


def _x(batch_first, b=B, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((b, T, IN) if batch_first else (T, b, IN), generator=g)


def _hx(layer, b=B, seed=2):
    g = torch.Generator().manual_seed(seed)
    ld = layer.num_layers * (2 if layer.bidirectional else 1)
    h = torch.randn(ld, b, layer.proj_size or layer.hidden_size, generator=g)
    if isinstance(layer, (nn.LSTM, BayesLSTM)):
        return h, torch.randn(ld, b, layer.hidden_size, generator=g)
    return h


def _hidden(h):
    return list(h) if isinstance(h, tuple) else [h]


def _close(a, b, atol=1e-5):
    """Tensors, or nested tuples of them (output, h_n or (h_n, c_n)), equal to rounding."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for u, v in zip(a, b):
            _close(u, v, atol)
        return
    assert a.shape == b.shape
    torch.testing.assert_close(a, b, atol=atol, rtol=1e-5)


class Classifier(nn.Module):
    """recurrent layer -> last step -> Bayesian linear head."""

    def __init__(self, rnn, classes=2):
        super().__init__()
        self.rnn = rnn
        self.head = BayesLinear(rnn.hidden_size * (2 if rnn.bidirectional else 1), classes, rho_init=rnn.rho_init)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1] if self.rnn.batch_first else out[-1])


# --------------------------------------------------------------------------------------------
# The mean is the torch layer
# --------------------------------------------------------------------------------------------


@ALL
@FIRST
@pytest.mark.parametrize("with_hx", [False, True], ids=["no-hx", "hx"])
def test_eval_equals_torch(kind, batch_first, with_hx):
    bayes, layer = _bayes(kind, batch_first)
    bayes.eval(), layer.eval()
    x = _x(batch_first)
    hx = _hx(layer) if with_hx else None
    out_t, h_t = layer(x, hx)
    out_b, h_b = bayes(x, hx)
    _close(out_b, out_t)
    _close(h_b, h_t)
    assert type(h_b) is type(h_t)


@ALL
def test_state_dict_loads_and_attributes(kind):
    _, layer = _bayes(kind, True)
    bayes = KINDS[kind][1](IN, HID, num_layers=2, bidirectional=True, batch_first=True, **KINDS[kind][2])
    bayes.load_state_dict(layer.state_dict())
    assert set(bayes.state_dict()) == {f"{n}_{s}" for n in layer.state_dict() for s in ("mu", "rho")}
    for name, p in layer.named_parameters():  # the torch names read the posterior mean
        torch.testing.assert_close(getattr(bayes, name), p.detach())
    assert bayes.bias is True and bayes.batch_first is True and not hasattr(bayes, "weight")
    assert len(bayes.all_weights) == 4 and "bidirectional=True" in repr(bayes)
    bayes.eval(), layer.eval()
    _close(bayes(_x(True))[0], layer(_x(True))[0])


@ALL
def test_a_forward_that_calls_flatten_parameters_keeps_working(kind):
    # torch's habit for DataParallel and cuDNN (`self.rnn.flatten_parameters()` in forward): an AttributeError
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = _torch(kind, True)

        def forward(self, x):
            self.rnn.flatten_parameters()
            return self.rnn(x)[0]

    net = Net()
    want = net.eval()(_x(True))
    bayes = bbb.bayesianize(copy.deepcopy(net)).eval()
    _close(bayes(_x(True)), want)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_options_equal_torch(kind):
    # no bias, one layer, one direction, unbatched (T, in) inputs with and without hx
    layer = KINDS[kind][0](IN, HID, bias=False, batch_first=True)
    bayes = KINDS[kind][1].from_torch(layer).eval()
    assert bayes.bias is False and bayes.param_names() == ("weight_ih_l0", "weight_hh_l0")
    x = _x(True)[0]
    _close(bayes(x), layer(x))
    hx = _hx(layer, b=1)
    hx1 = tuple(t[:, 0] for t in hx) if isinstance(hx, tuple) else hx[:, 0]
    _close(bayes(x, hx1), layer(x, hx1))


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@FIRST
def test_lstm_proj_size(batch_first):
    bayes, layer = _bayes("lstm", batch_first, proj_size=2)
    assert bayes.weight_hr_l1_reverse.shape == (2, HID)
    bayes.eval(), layer.eval()
    x, hx = _x(batch_first), _hx(layer)
    _close(bayes(x, hx), layer(x, hx))
    _close(bayes(x[0] if batch_first else x[:, 0]), layer(x[0] if batch_first else x[:, 0]))


def test_dropout_between_layers_in_training_only():
    bayes, layer = _bayes("gru", True, rho_init=-30.0, dropout=0.5)
    x = _x(True)
    bayes.eval(), layer.eval()
    _close(bayes(x), layer(x))
    mean = bayes(x)[0]
    with sampling(bayes, "sample"):  # eval mode: sampled weights, no dropout
        _close(bayes(x)[0], mean)
    bayes.train()
    assert not torch.allclose(bayes(x)[0], mean, atol=1e-3)


@ALL
def test_sampling_with_zero_sigma_is_the_mean(kind):
    bayes, _ = _bayes(kind, False, rho_init=-30.0)
    x, hx = _x(False), _hx(bayes)
    mean = bayes.eval()(x, hx)
    _close(bayes.train()(x, hx), mean)
    with folded_samples(2, batch_dim=1):
        x2 = x.repeat(1, 2, 1)
        _close(bayes(x2, hx)[0], mean[0].repeat(1, 2, 1))


# --------------------------------------------------------------------------------------------
# k samples folded into the batch
# --------------------------------------------------------------------------------------------


@FIRST
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_forward_samples_differ_per_example(kind, batch_first):
    bayes, _ = _bayes(kind, batch_first, rho_init=-2.0)
    model = Classifier(bayes).eval()
    x = _x(batch_first)
    with sampling(model, "sample"):
        y = forward_samples(model, x, 4)
    assert y.shape == (4, B, 2)
    for i in range(4):
        for j in range(i):
            assert (y[i] - y[j]).abs().amax(-1).min() > 1e-4  # every example differs
    y_mean = forward_samples(model, x, 4)  # eval: the mean, the same for every sample
    torch.testing.assert_close(y_mean, model(x).expand(4, -1, -1))


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@ALL
@FIRST
@pytest.mark.parametrize("hx_rows", [0, 1, 3], ids=["no-hx", "hx-B", "hx-kB"])
def test_fold_equals_each_sample_alone(kind, batch_first, hx_rows):
    k = 3
    bayes, layer = _bayes(kind, batch_first, rho_init=-2.0, **({"proj_size": 2} if kind == "lstm" else {}))
    bdim = 0 if batch_first else 1
    x = _x(batch_first, b=k * B)  # k different blocks of B examples
    hx = _hx(bayes, b=hx_rows * B) if hx_rows else None
    with sampling(bayes, "sample"), folded_samples(k, batch_dim=bdim), \
            SampleRecorder(torch.Generator().manual_seed(5)) as rec:
        out, hn = bayes(x, hx)
    layer.eval()
    for j in range(k):
        with torch.no_grad():
            for name in bayes.param_names():
                getattr(layer, name).copy_(rec.get(bayes, name).w[j])
        rows = slice(j * B, (j + 1) * B)
        xj = x[rows] if batch_first else x[:, rows]
        hj = None if hx is None else tuple(t[:, rows if hx_rows == k else slice(None)] for t in _hidden(hx))
        out_j, hn_j = layer(xj, hj if kind == "lstm" or hj is None else hj[0])
        _close(out[rows] if batch_first else out[:, rows], out_j)
        _close(tuple(t[:, rows] for t in _hidden(hn)), tuple(_hidden(hn_j)))



@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_an_hx_whose_layers_equal_the_batch_size_folds_as_any_other(kind):
    """forward_samples repeats every input tensor with B rows along the batch dimension: an hx
    (layers, B, H) of a batch_first layer with layers == B was repeated along its dim 0 and the
    layer blamed the user's (correct) hx in a one-line error."""
    torch.manual_seed(0)
    layer = (nn.LSTM if kind == "lstm" else nn.GRU)(3, 4, num_layers=2, batch_first=True)
    bayes = bbb.bayesianize(copy.deepcopy(layer), rho_init=-40.0)  # sigma ~ 0: every sample is the torch layer
    x, h = torch.randn(2, 5, 3), torch.randn(2, 2, 4)  # B = 2 = num_layers
    hx = (h, torch.randn(2, 2, 4)) if kind == "lstm" else h
    out = forward_samples(bayes, (x, hx), 3)
    assert out.shape == (3, 2, 5, 4)
    torch.testing.assert_close(out, layer(x, hx)[0].expand(3, -1, -1, -1))


def test_bad_fold_is_one_line_error():
    bayes, _ = _bayes("lstm", True)
    with folded_samples(3), pytest.raises(UserError, match="batch_first") as e:
        bayes(_x(True, b=4))
    assert "\n" not in str(e.value)
    with folded_samples(3), pytest.raises(UserError, match="batch_first"):
        bayes(_x(True)[0])  # unbatched
    with folded_samples(3), pytest.raises(UserError, match="hidden state"):
        bayes(_x(True, b=6), _hx(bayes, b=4))


def test_other_errors_are_one_line():
    with pytest.raises(UserError, match="not defined") as e:
        BayesLSTM(IN, HID, estimator="local")
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="not defined"):
        BayesGRU.from_torch(nn.GRU(IN, HID), estimator="flipout")
    with pytest.raises(UserError, match="nn.LSTM"):
        BayesLSTM.from_torch(nn.GRU(IN, HID))
    with pytest.raises(UserError, match="nonlinearity"):
        BayesRNN(IN, HID, nonlinearity="gelu")
    with pytest.raises(UserError, match="proj_size"):
        BayesLSTM(IN, HID, proj_size=HID)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@ALL
def test_gradients_reach_every_mu_and_rho(kind):
    bayes, _ = _bayes(kind, True, rho_init=-2.0)
    bayes.train()
    with folded_samples(2):
        bayes(_x(True).repeat(2, 1, 1))[0].square().sum().backward()
    for name, p in bayes.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@FIRST
def test_elbo_backward(batch_first):
    bayes, _ = _bayes("lstm", batch_first)
    model = Classifier(bayes).train()
    out = bbb.ELBO(model, "categorical", num_batches=1, num_samples=2)(_x(batch_first), torch.tensor([0, 1, 1]))
    assert out.output.shape == (2, B, 2)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.filterwarnings("ignore:grad and param do not obey")  # the engine's k-sample views (engine.py)
@FIRST
def test_engine_fused_steps_equal_the_plain_path(batch_first):
    # 3 steps of the fused engine == the plain autograd path fed with the engine's noise + torch's Adam
    bayes, _ = _bayes("lstm", batch_first)
    model = Classifier(bayes).double().train()
    plain = copy.deepcopy(model)
    engine = bbb.Engine(model, "adam", lr=0.01, num_samples=2, compile=False, seed=3)
    assert engine.fused, engine.fallback_reason
    opt = torch.optim.Adam(plain.parameters(), lr=0.01)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = _x(batch_first).double(), torch.tensor([0, 1, 1])
    for i in range(3):
        for net, o, ctx in ((model, engine, engine.sampling()), (plain, opt, counter_noise(plain, 3, i, 2))):
            with ctx:
                out = bbb.ELBO(net, "categorical", num_batches=1, num_samples=2)(x, y)
            o.zero_grad()
            out.loss.backward()
            o.step()
    for (n, p), q in zip(model.named_parameters(), plain.parameters()):
        assert not torch.equal(p.detach(), before[n]), n
        torch.testing.assert_close(p.detach(), q.detach(), atol=1e-9, rtol=1e-7, msg=n)
