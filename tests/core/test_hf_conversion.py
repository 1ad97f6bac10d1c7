"""Hugging Face transformers as a client of bayesianize (issue 53): transformers' Conv1D, tied
weights kept tied, generate, and save/load exact. Tiny configs, random init, nothing downloaded."""

from __future__ import annotations

import copy as copy_module
import pickle
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.distributions import GaussianPrior
from bbb.elbo import ELBO
from bbb.engine import Engine, counter_noise
from bbb.errors import UserError
from bbb.nn import (
    BayesEmbedding,
    BayesHFConv1D,
    BayesModule,
    SampleRecorder,
    TiedBayesLinear,
    bayes_modules,
    forward_samples,
    model_kl,
    sampling,
    shared_samples,
)
from bbb.uncertainty import predict

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
if not transformers.utils.is_torch_available():  # transformers' own torch floor (2.6 for 5.x)
    pytest.skip("transformers does not take this torch", allow_module_level=True)
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.pytorch_utils import Conv1D  # noqa: E402

transformers.logging.set_verbosity_error()


def _gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
                     eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def _convert(model: nn.Module, **kw) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the LayerNorms stay deterministic
        return bbb.bayesianize(model, **kw)


def _ids(b: int = 3, t: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, 50, (b, t), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------
# import bbb without transformers
# --------------------------------------------------------------------------------------------


@pytest.mark.release_independent  # (what importing bbb loads and sets: bbb's own)
def test_import_bbb_and_bayesianize_do_not_import_transformers():
    code = ("import sys, torch, bbb, bbb.hf\n"
            "bbb.bayesianize(torch.nn.Sequential(torch.nn.Linear(3, 2)))\n"
            "print(sorted(m for m in ('transformers', 'safetensors') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------
# transformers' Conv1D
# --------------------------------------------------------------------------------------------


def test_conv1d_converts_equal_in_mean_mode_and_samples_otherwise():
    torch.manual_seed(0)
    layer = Conv1D(12, 8)
    nn.init.normal_(layer.bias)
    net = bbb.bayesianize(nn.Sequential(layer))
    new = net[0]
    assert isinstance(new, BayesHFConv1D) and (new.nf, new.nx) == (12, 8)
    assert new.weight.shape == (8, 12)  # transformers' (in, out) layout
    x = torch.randn(4, 5, 8)
    net.eval()
    assert torch.equal(net(x), layer(x))
    net.train()
    y1, y2 = net(x), net(x)
    assert not torch.equal(y1, y2) and torch.allclose(y1, layer(x), atol=0.2)
    ys = forward_samples(net, x, 3)  # k samples folded into the batch: each its own network
    assert ys.shape == (3, 4, 5, 12) and not torch.equal(ys[0], ys[1])
    # a deterministic state_dict loads into the converted layer (weight -> weight_mu)
    other = Conv1D(12, 8)
    net.load_state_dict({"0.weight": other.weight, "0.bias": other.bias})
    net.eval()
    assert torch.equal(net(x), other(x))


@pytest.mark.parametrize("estimator", ["local", "flipout"])
def test_conv1d_other_estimators_sample_around_the_mean(estimator):
    torch.manual_seed(0)
    layer = Conv1D(6, 4)
    new = BayesHFConv1D.from_torch(layer, estimator=estimator, rho_init=-3.0)
    x = torch.randn(5, 4)
    y = new(x)
    assert y.shape == (5, 6) and not torch.equal(y, layer(x)) and torch.allclose(y, layer(x), atol=0.5)
    with pytest.raises(UserError, match="Conv1D"):
        BayesHFConv1D.from_torch(nn.Linear(4, 6))


# --------------------------------------------------------------------------------------------
# GPT-2: conversion, tie, generate
# --------------------------------------------------------------------------------------------


def test_gpt2_converts_over_95_percent_with_the_tie_kept():
    ref = _gpt2()
    det_state = {k: v.clone() for k, v in ref.state_dict().items()}
    x = _ids()
    logits = ref(x).logits
    model = _convert(_gpt2()).eval()  # (the new layers' training flag: h3b's part of issue 53)
    share = bbb.layer_summary(model).bayesian_share
    assert share > 0.95, share
    assert isinstance(model.lm_head, TiedBayesLinear) and model.lm_head.source is model.transformer.wte
    assert isinstance(model.transformer.h[0].attn.c_attn, BayesHFConv1D)
    # one posterior: no lm_head entry in the state_dict, and no weight counted twice
    keys = set(model.state_dict())
    assert not any(k.startswith("lm_head.") for k in keys)
    assert {"transformer.wte.weight_mu", "transformer.wte.weight_rho"} <= keys
    bayes = sum(m.mu(n).numel() for m in bayes_modules(model) for n in m.param_names())
    det = sum(p.numel() for n, p in model.named_parameters() if not n.endswith(("_mu", "_rho")))
    assert bayes + det == sum(p.numel() for p in ref.parameters())
    # the deterministic GPT-2 state_dict (lm_head.weight and wte.weight both) loads; mean mode is GPT-2
    assert model.load_state_dict(det_state, strict=True)
    assert torch.equal(model(x).logits, logits)
    bad = dict(det_state, **{"lm_head.weight": det_state["lm_head.weight"] + 1})
    with pytest.raises(RuntimeError, match="lm_head.weight differs from transformer.wte.weight"):
        model.load_state_dict(bad)
    model.tie_weights()  # transformers' own re-tie is a no-op on the tied layer
    assert model.lm_head.source is model.transformer.wte
    for copy in (copy_module.deepcopy(model), pickle.loads(pickle.dumps(model))):  # the tie travels
        assert copy.lm_head.source is copy.transformer.wte
        assert torch.equal(copy(x).logits, logits)


class _TiedToy(nn.Module):
    def __init__(self, v: int = 11, d: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(v, d)
        self.mid = nn.Linear(d, d)
        self.head = nn.Linear(d, v, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.tanh(self.mid(self.emb(x))))


def test_tied_weight_one_sample_per_forward_shared_by_both_uses():
    torch.manual_seed(0)
    net = bbb.bayesianize(_TiedToy(), rho_init=-2.0).train()
    assert isinstance(net.head, TiedBayesLinear) and net.head.tied_to == "emb"
    x = torch.randint(0, 11, (5, 3))
    with SampleRecorder() as rec:
        out = net(x)
    w = rec.get(net.emb, "weight").w
    mid_w, mid_b = rec.get(net.mid, "weight").w, rec.get(net.mid, "bias").w
    assert torch.allclose(out, F.linear(torch.tanh(F.linear(F.embedding(x, w), mid_w, mid_b)), w))
    # k samples: sample j's output layer reads sample j's table
    with SampleRecorder() as rec:
        outs = forward_samples(net, x, 3)
    ws = rec.get(net.emb, "weight").w
    for j in range(3):
        h = torch.tanh(F.linear(F.embedding(x, ws[j]), rec.get(net.mid, "weight").w[j], rec.get(net.mid, "bias").w[j]))
        assert torch.allclose(outs[j], F.linear(h, ws[j]), atol=1e-6)


def test_tied_weight_kl_counted_once():
    torch.manual_seed(0)
    net = bbb.bayesianize(_TiedToy(), prior=GaussianPrior(1.0), rho_init=-2.0)
    with torch.no_grad():
        assert net.head.kl().item() == 0.0
        own = sum(m.kl("closed").item() for m in (net.emb, net.mid))
        assert model_kl(net, "closed").item() == pytest.approx(own, rel=1e-6)
    assert [type(m).__name__ for m in bayes_modules(net)].count("BayesEmbedding") == 1


def test_tied_weight_engine_equals_plain_path():
    """The Engine supplies one sample of the tied table per step and sums both uses' gradients."""
    x = torch.randint(0, 11, (8, 3), generator=torch.Generator().manual_seed(2))
    y = torch.randint(0, 11, (8, 3), generator=torch.Generator().manual_seed(3))

    class Flat(_TiedToy):
        def forward(self, x):
            return super().forward(x).reshape(x.shape[0], -1)[:, :11]

    def run(engine: bool) -> dict:
        torch.manual_seed(0)
        net = bbb.bayesianize(Flat(), rho_init=-3.0, prior=GaussianPrior(1.0))
        elbo = ELBO(net, "categorical", num_batches=2)
        opt = (Engine(elbo, "sgd", lr=0.05, seed=4, compile=False, fused=True) if engine
               else torch.optim.SGD(net.parameters(), lr=0.05))
        for i in range(3):
            with (opt.sampling() if engine else counter_noise(net, 4, i)):
                loss = elbo(x, y[:, 0], batch_index=i % 2).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {k: v.detach().clone() for k, v in net.state_dict().items()}

    a, b = run(True), run(False)
    assert a.keys() == b.keys() and "head.weight_mu" not in a
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k


@pytest.mark.slow
def test_tied_weight_under_torch_compile():
    torch.manual_seed(0)
    net = bbb.bayesianize(_TiedToy(), rho_init=-2.0).train()
    compiled = torch.compile(net)
    x = torch.randint(0, 11, (5, 3))
    for _ in range(2):  # a fresh sample each call, both uses reading it
        with SampleRecorder() as rec:
            out = compiled(x)
        w = rec.get(net.emb, "weight").w
        h = torch.tanh(F.linear(F.embedding(x, w), rec.get(net.mid, "weight").w, rec.get(net.mid, "bias").w))
        assert torch.allclose(out, F.linear(h, w), atol=1e-5)


def test_gpt2_trains_on_the_fused_engine():
    class LastToken(nn.Module):  # a tensor in, a tensor out: no dependence on the mapping API
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(ids).logits[:, -1]

    model = _convert(_gpt2())
    net = LastToken(model).train()
    elbo = ELBO(net, "categorical", num_batches=1)
    engine = Engine(elbo, "adam", lr=1e-2, fused=True, compile=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = _ids(4, 5), _ids(1, 4, seed=2)[0]
    for _ in range(3):
        with engine.sampling():
            loss = elbo(x, y).loss
        engine.zero_grad()
        loss.backward()
        engine.step()
    assert torch.isfinite(loss)
    for name in ("transformer.wte.weight_mu", "transformer.h.0.attn.c_attn.weight_mu",
                 "transformer.h.1.mlp.c_proj.weight_rho"):
        assert not torch.equal(dict(model.named_parameters())[name], before[name]), name


def test_untied_tie_is_named_in_the_warning():
    net = _TiedToy()
    match = r"emb\.weight, head\.weight were one tensor.*head\.weight kept the deterministic.*skip every"
    with pytest.warns(UserWarning, match=match):
        bbb.bayesianize(net, skip=["head"])


def test_generate_greedy_and_sampling_on_a_converted_gpt2():
    ref = _gpt2()
    prompt = _ids(2, 3)
    greedy_ref = ref.generate(prompt, max_new_tokens=5, do_sample=False)
    model = _convert(_gpt2()).eval()
    greedy = model.generate(prompt, max_new_tokens=5, do_sample=False)
    assert torch.equal(greedy, greedy_ref)  # the posterior mean is the network it came from
    with sampling(model, "sample"):  # weights sampled at every step, tokens sampled too
        torch.manual_seed(5)
        a = model.generate(prompt, max_new_tokens=5, do_sample=True)
        torch.manual_seed(5)
        b = model.generate(prompt, max_new_tokens=5, do_sample=True)
    assert a.shape == (2, 8) and torch.equal(a[:, :3], prompt) and torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 50
    # one sampled network for a whole generation: shared_samples around generate
    with sampling(model, "sample"), shared_samples():
        c = model.generate(prompt, max_new_tokens=5, do_sample=False)
        d = model.generate(prompt, max_new_tokens=5, do_sample=False)
        full = model(c).logits  # the same network scores the sequence it wrote greedily
    assert torch.equal(c, d)
    assert torch.equal(full[:, 2:-1].argmax(-1), c[:, 3:])


# --------------------------------------------------------------------------------------------
# save and load
# --------------------------------------------------------------------------------------------


def _trained_gpt2() -> nn.Module:
    model = _convert(_gpt2(), prior=GaussianPrior(0.5), rho_init=-4.0).train()
    torch.manual_seed(3)
    with torch.no_grad():  # every posterior away from its initial value
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model


def test_save_pretrained_and_from_pretrained_are_exact(tmp_path):
    model = _trained_gpt2()
    folder = bbb.save_pretrained(model, tmp_path / "gpt2-bayes")
    assert {"config.json", "model.safetensors", "bbb_conversion.json"} <= {p.name for p in folder.iterdir()}
    again = bbb.from_pretrained(folder)  # the class from config.json
    assert type(again) is GPT2LMHeadModel and not again.training
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert isinstance(again.lm_head, TiedBayesLinear) and again.lm_head.source is again.transformer.wte
    for (n, m), (_, m2) in zip(model.named_modules(), again.named_modules()):
        assert type(m) is type(m2), n
        if isinstance(m, BayesModule):
            assert (m.prior, m.estimator, m.rho_init) == (m2.prior, m2.estimator, m2.rho_init), n
    x = _ids()
    model.eval()
    assert torch.equal(model(x).logits, again(x).logits)


def test_a_layer_kept_in_float32_loads_back_in_float32(tmp_path):
    """A bf16 model with one Bayesian layer kept in float32 (as transformers' _keep_in_fp32_modules):
    before, every tensor came back in the record's one dtype, that layer's mu and rho rounded."""
    model = _trained_gpt2().to(torch.bfloat16)
    layer = model.transformer.h[0].mlp.c_proj
    layer.float()
    with torch.no_grad():
        layer.weight_rho.add_(1e-3 * torch.randn_like(layer.weight_rho))  # not representable in bf16
    again = bbb.from_pretrained(bbb.save_pretrained(model, tmp_path / "mixed"))
    a, b = model.state_dict(), again.state_dict()
    assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    assert again.transformer.h[0].mlp.c_proj.weight_rho.dtype == torch.float32


def test_folder_from_transformers_save_pretrained(tmp_path):
    """transformers' own save_pretrained writes the posterior; its from_pretrained builds the
    deterministic model (random layers); bbb.from_pretrained loads it exact."""
    model = _trained_gpt2()
    model.save_pretrained(tmp_path)
    plain = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert not any(isinstance(m, BayesModule) for m in plain.modules())
    assert not torch.equal(plain.transformer.wte.weight, model.transformer.wte.weight_mu)
    again = bbb.from_pretrained(tmp_path, GPT2LMHeadModel, prior=GaussianPrior(0.5))
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert isinstance(again.lm_head, TiedBayesLinear)


def test_a_record_is_not_read_with_weights_saved_over_it(tmp_path):
    """A folder bbb.save_pretrained wrote, then transformers' own save_pretrained of another model into it (which
    writes no record): from_pretrained built the new weights with the old record's prior and estimator, silently."""
    folder = bbb.save_pretrained(_trained_gpt2(), tmp_path / "m")
    other = bbb.bayesianize(_gpt2(), prior=GaussianPrior(0.5), estimator="local")
    other.save_pretrained(folder)  # the record of the first save is left
    with pytest.raises(UserError, match="describes another save") as e:
        bbb.from_pretrained(folder)
    assert "\n" not in str(e.value) and "bbb.save_pretrained" in str(e.value)
    (folder / "bbb_conversion.json").unlink()  # as the message says
    again = bbb.from_pretrained(folder, prior=GaussianPrior(0.5), estimator="local")
    a, b = other.state_dict(), again.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    bbb.save_pretrained(other, folder)  # and a save of bbb's over it reads back
    assert bbb.from_pretrained(folder).transformer.h[0].attn.c_attn.estimator.value == "local"


def test_save_pretrained_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(UserError, match="transformers model"):
        bbb.save_pretrained(bbb.bayesianize(nn.Sequential(nn.Linear(2, 2))), tmp_path)
    with pytest.raises(UserError, match="no Bayesian layer"):
        bbb.save_pretrained(_gpt2(), tmp_path)
    with pytest.raises(UserError, match="model.safetensors"):
        bbb.from_pretrained(tmp_path / "nothing")
    assert isinstance(BayesEmbedding(3, 2), BayesModule)


# --------------------------------------------------------------------------------------------
# the agreed input/output API (h1's part of issue 53): HF batches through the ELBO and predict
# --------------------------------------------------------------------------------------------


def test_gpt2_elbo_and_predict_with_mapping_inputs():
    from transformers import GPT2ForSequenceClassification

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32, pad_token_id=0, num_labels=3)
    model = _convert(GPT2ForSequenceClassification(cfg)).train()
    ids, mask = _ids(4, 6), torch.ones(4, 6, dtype=torch.long)
    ids[0, 4:], mask[0, 4:] = 0, 0  # a padded row
    batch = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 2, 1])}
    for k in (1, 4):
        model.zero_grad()
        out = ELBO(model, "categorical", num_batches=2, num_samples=k)(batch)
        out.loss.backward()
        assert torch.isfinite(out.loss) and model.transformer.wte.weight_mu.grad.abs().sum() > 0
    probs = predict(model, {"input_ids": ids, "attention_mask": mask}, num_samples=4)
    assert probs.shape == (4, 4, 3) and not torch.equal(probs[0], probs[1])
