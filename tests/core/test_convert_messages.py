"""bayesianize says what it did (issue 18): refusals, warnings and one-line errors for what it
cannot convert or leaves deterministic, skips, hooks, shared and reused layers."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.nn import BayesConv2d, BayesLinear

from .convertkit import ARCHS, ResBlock, example_input, lenet

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
    x = example_input(arch, 4)
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
    nested = bbb.bayesianize(nn.Sequential(nn.Sequential(lin, nn.Tanh(), lin), nn.Linear(4, 2)), rho_init=0.0)
    with bbb.nn.SampleRecorder() as rec:  # the inner block called on its own: one sample for its two uses too
        out = nested[0](xs)
    w, b = rec.get(nested[0][0], "weight").w, rec.get(nested[0][0], "bias").w
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



def test_a_model_whose_only_layers_are_parametrized_is_said_how_to_convert():
    # the error listed Linear among the convertible types of a model made of (parametrized) Linears
    net = nn.Sequential(nn.Linear(3, 4))
    torch.nn.utils.parametrizations.weight_norm(net[0])
    with pytest.raises(bbb.UserError, match="no layer to make Bayesian.*remove_parametrizations"):
        bbb.bayesianize(net)
