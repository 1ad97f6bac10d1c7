"""Bayesian LoRA (issue 63): bbb.bayesianize on a peft model converts the adapters and nothing frozen;
training through the ELBO (torch.optim and bbb.Engine) leaves the base bit-identical; the Engine never
updates a frozen tensor; a causal LM's labels score the next token. Tiny configs, nothing downloaded."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.errors import UserError
from bbb.nn import BayesLinear, BayesModule, bayes_modules

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()


def _gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
                     eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def _llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                      pad_token_id=0)
    return LlamaForCausalLM(cfg).eval()


def _lora_gpt2(seed: int = 0, **kw) -> nn.Module:
    cfg = dict(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True)
    cfg.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft: fan_in_fan_out, Conv1D
        return get_peft_model(_gpt2(seed), LoraConfig(**cfg))


def _ids(b: int = 3, t: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, 50, (b, t), generator=torch.Generator().manual_seed(seed))


def _frozen(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}


def _trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------------------
# the entry point: the adapters and nothing frozen
# --------------------------------------------------------------------------------------------


def test_import_bbb_does_not_import_peft():
    code = ("import sys, torch, bbb, bbb.lora, bbb.hf\n"
            "bbb.bayesianize(torch.nn.Sequential(torch.nn.Linear(3, 2)))\n"
            "bbb.ELBO(torch.nn.Sequential(bbb.nn.BayesLinear(3, 2)))\n"
            "print(sorted(m for m in ('peft', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("lora,bayes_b", [(None, False), ("A", False), ("AB", True)])
def test_bayesianize_converts_the_adapters_only(lora, bayes_b):
    model = _lora_gpt2()
    before = _frozen(model)
    n_train = _trainable(model)
    bbb.bayesianize(model, lora=lora)
    for layer in (model.base_model.model.transformer.h[i].attn.c_attn for i in range(2)):
        assert isinstance(layer.lora_A["default"], BayesLinear)
        assert isinstance(layer.lora_B["default"], BayesLinear) is bayes_b
        assert not isinstance(layer.base_layer, BayesModule)
    # nothing frozen is copied, made Bayesian or unfrozen; a Bayesian weight adds its rho
    assert _frozen(model).keys() == before.keys()
    added = sum(m.rho(n).numel() for m in bayes_modules(model) for n in m.param_names())
    assert _trainable(model) == n_train + added
    assert all(isinstance(m.prior, bbb.GaussianPrior) and m.prior.sigma == 0.2 for m in bayes_modules(model))


def test_bayesianize_keeps_requires_grad_and_the_mean_model():
    model = _lora_gpt2()
    for p in model.base_model.model.transformer.h[1].attn.c_attn.lora_A.parameters():
        p.requires_grad_(False)  # a user froze one adapter
    ids = _ids()
    torch.nn.init.normal_(model.base_model.model.transformer.h[0].attn.c_attn.lora_B["default"].weight)
    ref = model(input_ids=ids).logits
    bbb.bayesianize(model)
    a0 = model.base_model.model.transformer.h[0].attn.c_attn.lora_A["default"]
    a1 = model.base_model.model.transformer.h[1].attn.c_attn.lora_A["default"]
    assert a0.weight_mu.requires_grad and a0.weight_rho.requires_grad
    assert not a1.weight_mu.requires_grad and not a1.weight_rho.requires_grad
    model.eval()
    assert torch.equal(model(input_ids=ids).logits, ref)  # the posterior mean is the adapter


def test_bayesianize_lora_on_a_model_without_lora_is_an_error():
    with pytest.raises(UserError, match="holds no LoRA layer"):
        bbb.bayesianize(nn.Sequential(nn.Linear(3, 2)), lora="A")
    with pytest.raises(UserError, match="choose 'A'"):
        bbb.bayesianize(_lora_gpt2(), lora="B")


# --------------------------------------------------------------------------------------------
# training: ELBO + torch.optim / Engine; the base bit-identical; the Engine never updates a frozen tensor
# --------------------------------------------------------------------------------------------


def _train(model, steps, engine: bool, **elbo_kw):
    ids = _ids(4, 8)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    elbo = bbb.ELBO(model, num_batches=10, kl_weighting="uniform", **elbo_kw)
    model.train()
    if engine:
        opt = bbb.Engine(elbo, "adam", lr=1e-2)
    else:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
    losses = []
    for i in range(steps):
        if engine:
            with opt.sampling():
                out = elbo(batch, batch_index=i % 10)
        else:
            out = elbo(batch, batch_index=i % 10)
        opt.zero_grad()
        (out.loss / ids.numel()).backward()
        opt.step()
        losses.append(float(out.nll.detach()))
    return losses


@pytest.mark.parametrize("engine", [False, True])
def test_training_lowers_the_loss_and_leaves_the_base_bit_identical(engine):
    model = _lora_gpt2()
    bbb.bayesianize(model, prior=bbb.GaussianPrior(0.1))
    before = _frozen(model)
    a = model.base_model.model.transformer.h[0].attn.c_attn.lora_A["default"]
    rho0 = a.weight_rho.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fused: no fallback warning
        losses = _train(model, 30, engine, beta=0.1, num_samples=2)
    assert losses[-1] < losses[0] - 1.0
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], t) for n, t in before.items())
    assert not torch.equal(a.weight_rho.detach(), rho0)  # sigma is trained


def test_engine_never_updates_a_frozen_tensor():
    torch.manual_seed(0)
    net = bbb.bayesianize(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.LayerNorm(3)),
                          prior=bbb.GaussianPrior(0.5))
    for p in [*net[0].parameters(), *net[3].parameters()]:
        p.requires_grad_(False)
    before = _frozen(net)
    elbo = bbb.ELBO(net, num_batches=1, kl_weighting="uniform")
    with pytest.warns(UserWarning, match="frozen"):
        engine = bbb.Engine(elbo, "adam", lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    w2 = net[2].weight_mu.detach().clone()
    for _ in range(3):
        with engine.sampling():
            out = elbo(x, y)
        engine.zero_grad()
        out.loss.backward()
        engine.step()
    assert all(torch.equal(dict(net.named_parameters())[n], t) for n, t in before.items())
    assert not torch.equal(net[2].weight_mu.detach(), w2)
    for p in net.parameters():
        p.requires_grad_(False)
    with pytest.raises(UserError, match="no parameter to train"):
        bbb.Engine(net, fused=False)


# --------------------------------------------------------------------------------------------
# causal LMs: the labels score the next token, -100 ignored, as transformers does
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [_gpt2, _llama])
@pytest.mark.parametrize("how", ["whole", "lora"])
def test_elbo_scores_the_next_token_as_transformers(make, how):
    model = make()
    ids = _ids(3, 7)
    labels = ids.clone()
    labels[0, :3] = -100
    ref = model(input_ids=ids, labels=labels).loss  # mean over the scored tokens
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "lora":
            target = ["c_attn"] if make is _gpt2 else ["q_proj", "v_proj"]
            model = get_peft_model(model, LoraConfig(r=2, target_modules=target, fan_in_fan_out=make is _gpt2))
        bbb.bayesianize(model)
        elbo = bbb.ELBO(model, num_batches=1)
    assert elbo.shift_labels
    model.eval()  # the posterior mean: the deterministic model's logits
    out = elbo({"input_ids": ids, "labels": labels})
    scored = int((labels[:, 1:] != -100).sum())
    torch.testing.assert_close(out.nll / scored, ref, rtol=1e-5, atol=1e-6)
    assert not bbb.ELBO(nn.Sequential(bbb.nn.BayesLinear(3, 2))).shift_labels
