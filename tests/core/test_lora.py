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
from bbb.nn import BayesConv2d, BayesLinear, BayesModule, bayes_modules

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


@pytest.mark.release_independent  # (what importing bbb loads and sets: bbb's own)
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
    with torch.no_grad():  # scored, not trained: no eval-mode warning
        out = elbo({"input_ids": ids, "labels": labels})
    scored = int((labels[:, 1:] != -100).sum())
    torch.testing.assert_close(out.nll / scored, ref, rtol=1e-5, atol=1e-6)
    assert not bbb.ELBO(nn.Sequential(bbb.nn.BayesLinear(3, 2))).shift_labels


# --------------------------------------------------------------------------------------------
# every LoRA target type peft has on the CPU; adapters, dropout, rsLoRA, DoRA, the head
# --------------------------------------------------------------------------------------------


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(8, 3)
        self.head = nn.Linear(4 * 5 * 5, 3)

    def forward(self, x):
        return self.head(self.conv(x).flatten(1))


def _peft(net: nn.Module, **kw) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_peft_model(net, LoraConfig(r=2, **kw))


def _move_b(model: nn.Module, seed: int = 0) -> None:
    """Train-like B (peft's init is 0): the adapters then change the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def test_conv2d_adapter_converts_and_the_head_stays_a_point_estimate_unless_asked():
    torch.manual_seed(0)
    model = _peft(_Net(), target_modules=["conv"], modules_to_save=["head"])
    _move_b(model)
    x = torch.randn(3, 1, 5, 5)
    ref = model(x)
    bbb.bayesianize(model)
    inner = model.base_model.model
    assert isinstance(inner.conv.lora_A["default"], BayesConv2d)
    assert type(inner.head.modules_to_save["default"]) is nn.Linear
    model.eval()
    torch.testing.assert_close(model(x), ref)
    samples = bbb.uncertainty.predict(model, x, num_samples=3)
    assert not torch.equal(samples[0], samples[1])
    asked = _peft(_Net(), target_modules=["conv"], modules_to_save=["head"])
    bbb.bayesianize(asked, modules_to_save=True)
    head = asked.base_model.model.head
    assert isinstance(head.modules_to_save["default"], BayesLinear)
    assert type(head.original_module) is nn.Linear and not head.original_module.weight.requires_grad
    assert head.modules_to_save["default"].weight_rho.requires_grad


@pytest.mark.parametrize("kw,match", [
    (dict(target_modules=["emb"]), "nn.Embedding"),
    (dict(target_modules=["fc"], use_dora=True), "DoRA"),
])
def test_unsupported_adapters_are_one_line_errors_naming_the_module(kw, match):
    model = _peft(_Net(), **kw)
    with pytest.raises(UserError, match=match) as e:
        bbb.bayesianize(model)
    assert "base_model.model." in str(e.value) and "\n" not in str(e.value)


def test_an_embedding_adapter_skipped_stays_a_point_estimate():
    model = _peft(_Net(), target_modules=["emb", "conv"])
    bbb.bayesianize(model, skip=["base_model.model.emb"])
    assert isinstance(model.base_model.model.conv.lora_A["default"], BayesConv2d)
    assert not any(isinstance(m, BayesModule) for m in model.base_model.model.emb.modules())


def test_rslora_scaling_and_dropout_are_kept():
    torch.manual_seed(0)
    model = _lora_gpt2(use_rslora=True, lora_dropout=0.5, r=4, lora_alpha=8)
    layer = model.base_model.model.transformer.h[0].attn.c_attn
    assert layer.scaling["default"] == pytest.approx(8 / 2)  # alpha / sqrt(r)
    _move_b(model)
    ids = _ids()
    model.eval()
    ref = model(input_ids=ids).logits
    bbb.bayesianize(model)
    assert layer.scaling["default"] == pytest.approx(4.0)
    assert isinstance(layer.lora_dropout["default"], nn.Dropout)
    model.eval()
    torch.testing.assert_close(model(input_ids=ids).logits, ref)
    model.train()  # dropout and sampling: two forwards differ
    assert not torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_several_adapters_set_adapter_and_the_kl_of_the_active_one():
    model = _lora_gpt2()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.add_adapter("other", LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    bbb.bayesianize(model)
    layer = model.base_model.model.transformer.h[0].attn.c_attn
    assert isinstance(layer.lora_A["other"], BayesLinear) and isinstance(layer.lora_A["default"], BayesLinear)
    _move_b(model)
    ids = _ids()
    elbo = bbb.ELBO(model, num_batches=1, kl_weighting="uniform")
    kl_default = float(elbo({"input_ids": ids, "labels": ids}).kl)
    model.set_adapter("other")
    assert layer.lora_A["other"].weight_rho.requires_grad and not layer.lora_A["default"].weight_rho.requires_grad
    kl_other = float(elbo({"input_ids": ids, "labels": ids}).kl)
    want = sum(float(m.kl()) for n, m in model.named_modules() if isinstance(m, BayesModule) and n.endswith(".other"))
    assert kl_other == pytest.approx(want, rel=1e-5) and kl_other != pytest.approx(kl_default)
    before = _frozen(model)
    losses = _train(model, 5, engine=True, beta=0.1)  # fused over the active adapter; the other left alone
    assert all(torch.equal(dict(model.named_parameters())[n], t) for n, t in before.items())
    assert losses[-1] < losses[0]


# --------------------------------------------------------------------------------------------
# prediction and generation; an untrained adapter warns
# --------------------------------------------------------------------------------------------


def test_predict_on_an_untrained_a_only_adapter_warns_and_samples_are_equal():
    model = _lora_gpt2()
    bbb.bayesianize(model)
    ids = _ids()
    with pytest.warns(UserWarning, match="B is 0"):
        out = bbb.uncertainty.predict(model, {"input_ids": ids}, num_samples=3)
    assert torch.equal(out[0], out[1])  # every sample is the base model until B moves
    _move_b(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = bbb.uncertainty.predict(model, {"input_ids": ids}, num_samples=3)
        mean = bbb.uncertainty.predict(model, {"input_ids": ids}, mode="mean")
    assert not torch.equal(out[0], out[1]) and mean.shape == (1, *out.shape[1:])
    model.eval()
    torch.testing.assert_close(mean[0], model(input_ids=ids).logits)


def test_generate_one_network_per_sequence_or_the_mean():
    model = _lora_gpt2()
    bbb.bayesianize(model, lora="AB")
    _move_b(model)
    for m in bayes_modules(model):
        with torch.no_grad():
            m.weight_rho.fill_(0.0)  # sigma ~0.7: the samples write different text
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    model.eval()
    mean = bbb.hf.generate(model, prompt, **kw)
    assert torch.equal(mean, model.generate(input_ids=prompt, **kw))
    torch.manual_seed(0)
    out = bbb.hf.generate(model, {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}, num_samples=3, **kw)
    assert out.shape == (3, 2, 8) and torch.equal(out[:, :, :3], prompt.expand(3, 2, 3))
    assert len({tuple(out[j, 0].tolist()) for j in range(3)}) > 1
    # each sequence is the greedy text of one network: replaying the same draws (the first forward draws
    # each layer's k samples, in the same order), the argmax at every step is the token written, up to
    # the end-of-sequence token (0), after which generate pads
    torch.manual_seed(0)
    with torch.no_grad(), bbb.nn.sampling(model, "sample"), bbb.nn.shared_samples(), bbb.nn.folded_samples(3):
        logits = model(input_ids=out.reshape(6, 8)).logits
    written = out.reshape(6, 8)[:, 3:]
    before_eos = (written == 0).int().cumsum(1) - (written == 0).int() == 0
    assert before_eos.sum() > 15
    assert torch.equal(logits[:, 2:-1].argmax(-1)[before_eos], written[before_eos])


def test_generate_takes_a_batch_encoding_and_several_sequences_a_prompt_and_a_merge_is_said():
    """A tokenizer's BatchEncoding (a UserDict, not a dict) was an AttributeError, num_return_sequences
    a shape error; after merge_adapter nothing of the adapter was sampled, silently."""
    from transformers import BatchEncoding

    model = _lora_gpt2()
    bbb.bayesianize(model, lora="A")
    _move_b(model)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    batch = BatchEncoding({"input_ids": prompt, "attention_mask": torch.ones_like(prompt)})
    kw = dict(max_new_tokens=2, pad_token_id=0)
    model.eval()
    assert bbb.hf.generate(model, batch, **kw).shape == (2, 5)
    out = bbb.hf.generate(model, batch, num_samples=3, num_beams=2, num_return_sequences=2, **kw)
    assert out.shape == (3, 4, 5) and torch.equal(out[:, 2:, :3], prompt[1].expand(3, 2, 3))
    model.merge_adapter()
    with pytest.warns(UserWarning, match=r"adapter is merged into the base weights .*unmerge_adapter"):
        bbb.uncertainty.predict(model, {"input_ids": prompt}, num_samples=2)
    model.unmerge_adapter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bbb.uncertainty.predict(model, {"input_ids": prompt}, num_samples=2)


def test_kl_weighting_blob_is_blundell_reversed():
    w = bbb.kl_weights(6, "blob", dtype=torch.float64)
    assert torch.equal(w, bbb.kl_weights(6, "blundell", dtype=torch.float64).flip(0))
    assert float(w.sum()) == pytest.approx(1.0) and w[-1] > 0.5


# --------------------------------------------------------------------------------------------
# save and load as peft users do; merge
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lora", ["A", "AB"])
def test_save_pretrained_and_load_every_posterior_exact(tmp_path, lora):
    model = _lora_gpt2()
    bbb.bayesianize(model, lora=lora, prior=bbb.GaussianPrior(0.3))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.normal_()
    model.save_pretrained(tmp_path)
    files = {p.name for p in tmp_path.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "bbb_conversion.json"} <= files
    assert (tmp_path / "adapter_model.safetensors").stat().st_size < 20_000  # the adapters only
    again = bbb.from_pretrained(tmp_path, base_model=_gpt2())
    mine = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    theirs = {k: v for k, v in again.state_dict().items() if "lora_" in k}
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert all(m.prior.sigma == 0.3 for m in bayes_modules(again))
    assert not any(p.requires_grad for p in again.parameters())  # peft's default: inference mode
    trainable = bbb.from_pretrained(tmp_path, base_model=_gpt2(), is_trainable=True)
    assert all(m.weight_rho.requires_grad for m in bayes_modules(trainable))
    ids = _ids()
    model.eval()
    torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_pruned_adapter_loads_back_with_its_masks(tmp_path):
    from bbb.prune import count_weights, prune

    model = _lora_gpt2()
    bbb.bayesianize(model, lora="AB")
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.normal_()
    res = prune(model, 0.5)
    model.save_pretrained(tmp_path)
    again = bbb.from_pretrained(tmp_path, base_model=_gpt2())  # (was: 4 unexpected keys, *.weight_mask)
    assert count_weights(again) == count_weights(model) == (res.total, res.kept) and res.kept < res.total
    mine = {k: v for k, v in model.state_dict().items() if k.endswith("_mask")}
    theirs = {k: v for k, v in again.state_dict().items() if k.endswith("_mask")}
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    ids = _ids()
    torch.testing.assert_close(again(input_ids=ids).logits, model.eval()(input_ids=ids).logits)


def test_peft_loader_on_a_bayesian_adapter_loads_the_means_with_a_warning(tmp_path):
    from peft import PeftModel

    model = _lora_gpt2()
    bbb.bayesianize(model)
    _move_b(model)
    with torch.no_grad():
        for m in bayes_modules(model):
            m.weight_mu.normal_()
    model.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="bbb_bayesian_lora"):
        plain = PeftModel.from_pretrained(_gpt2(), tmp_path)
    a = plain.base_model.model.transformer.h[0].attn.c_attn.lora_A["default"]
    assert type(a) is nn.Linear
    assert torch.equal(a.weight, model.base_model.model.transformer.h[0].attn.c_attn.lora_A["default"].weight_mu)
    ids = _ids()
    model.eval()
    torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits)  # the mean model


def test_merge_and_unload_merges_the_posterior_mean_and_says_so():
    model = _lora_gpt2()
    bbb.bayesianize(model)
    _move_b(model)
    ids = _ids()
    model.eval()
    ref = model(input_ids=ids).logits
    with pytest.warns(UserWarning, match="posterior mean"):
        merged = model.merge_and_unload()
    assert not any(isinstance(m, BayesModule) for m in merged.modules())
    torch.testing.assert_close(merged(input_ids=ids).logits, ref, rtol=1e-5, atol=1e-5)


def test_loading_a_lora_folder_needs_the_base_model(tmp_path):
    model = _lora_gpt2()
    bbb.bayesianize(model)
    model.save_pretrained(tmp_path)
    with pytest.raises(UserError, match="base_model"):
        bbb.from_pretrained(tmp_path)


def test_bbb_save_pretrained_on_a_lora_model_writes_the_adapter_folder(tmp_path):
    model = _lora_gpt2()
    bbb.bayesianize(model)
    bbb.save_pretrained(model, tmp_path)
    assert (tmp_path / "adapter_config.json").is_file() and not (tmp_path / "model.safetensors").exists()
    again = bbb.from_pretrained(tmp_path, base_model=_gpt2())
    assert len(list(bayes_modules(again))) == len(list(bayes_modules(model)))


def test_a_whole_model_and_an_adapter_are_not_saved_over_each_other(tmp_path):
    # saved into one folder, the second overwrote the first's bbb_conversion.json, and a whole model saved
    # over an adapter could not be loaded (from_pretrained read the adapter's config and asked for base_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapter, whole = bbb.bayesianize(_lora_gpt2()), bbb.bayesianize(_gpt2())
    adapter.save_pretrained(tmp_path / "a")
    with pytest.raises(UserError, match=r"holds a LoRA adapter \(adapter_config\.json\).*another folder"):
        bbb.save_pretrained(whole, tmp_path / "a")
    assert not (tmp_path / "a" / "model.safetensors").exists()
    bbb.save_pretrained(whole, tmp_path / "w")
    for save in (adapter.save_pretrained, lambda f: bbb.save_pretrained(adapter, f)):
        with pytest.raises(UserError, match=r"holds a whole Bayesian model .*another folder"):
            save(tmp_path / "w")
    assert not (tmp_path / "w" / "adapter_config.json").exists()
    assert isinstance(bbb.from_pretrained(tmp_path / "w"), GPT2LMHeadModel)
    adapter.save_pretrained(tmp_path / "a")  # each saved again where it was: as before
    bbb.save_pretrained(whole, tmp_path / "w")


def test_ivon_on_an_a_only_adapter_names_lora_ab_as_the_remedy():
    # IVON's refusal of the point-estimate lora_B said "bayesianize their layers", which on a peft model
    # converts A alone again
    model = bbb.bayesianize(_lora_gpt2())
    with pytest.raises(UserError, match=r"lora_B\.default\.weight.*\): bayesianize\(model, lora='AB'\)"):
        bbb.IVON(model, lr=0.1, ess=100)
    bbb.IVON(bbb.bayesianize(_lora_gpt2(), lora="AB"), lr=0.1, ess=100)


def test_the_summary_counts_the_base_as_frozen_and_a_trained_point_estimate_warns():
    model = _lora_gpt2()
    model.base_model.model.transformer.ln_f.requires_grad_(True)  # a user trains the final norm
    with pytest.warns(UserWarning, match=r"1 trained module\(s\) stay point estimates: .*ln_f \(LayerNorm\)"):
        bbb.bayesianize(model)
    s = bbb.layer_summary(model)
    frozen = sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False)  # (lm_head: tied,
                 if not p.requires_grad)                                                  # a row of its own)
    assert s.frozen_weights == frozen and "frozen" in str(s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # lora_B and the head: point estimates by the documented choice
        bbb.bayesianize(_lora_gpt2())


def test_optim_groups_step_rho_faster_and_leave_frozen_out():
    model = _lora_gpt2()
    bbb.bayesianize(model)
    groups = bbb.lora.optim_groups(model, lr=1e-3)
    rhos = {id(m.weight_rho) for m in bayes_modules(model)}
    assert [g["lr"] for g in groups] == [1e-3, pytest.approx(1e-2)]
    assert {id(p) for p in groups[1]["params"]} == rhos
    assert all(p.requires_grad for g in groups for p in g["params"])
    assert sum(len(g["params"]) for g in groups) == sum(p.requires_grad for p in model.parameters())


def test_flipout_adapters_train_on_the_plain_path():
    model = _lora_gpt2()
    bbb.bayesianize(model, estimator="flipout")
    before = _frozen(model)
    with pytest.warns(UserWarning, match="flipout"):
        losses = _train(model, 6, engine=True, beta=0.1)
    assert losses[-1] < losses[0]
    assert all(torch.equal(dict(model.named_parameters())[n], t) for n, t in before.items())


def test_several_adapters_save_each_with_its_record_and_load_by_name(tmp_path):
    model = _lora_gpt2()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.add_adapter("other", LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    bbb.bayesianize(model, lora="AB")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".other." in n:
                p.normal_()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "bbb_conversion.json").is_file() and (tmp_path / "other" / "bbb_conversion.json").is_file()
    again = bbb.from_pretrained(tmp_path / "other", base_model=_gpt2(), adapter_name="other")
    mine = {k: v for k, v in model.state_dict().items() if ".other." in k}
    theirs = {k: v for k, v in again.state_dict().items() if ".other." in k}
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_evaluate_on_a_causal_lm_scores_the_next_token():
    model = _lora_gpt2()
    bbb.bayesianize(model)  # B = 0: every sample is the base model
    ids = _ids(3, 7)
    labels = ids.clone()
    labels[1, :4] = -100
    model.eval()
    ref = float(model(input_ids=ids, labels=labels).loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the untrained adapter
        got = bbb.uncertainty.evaluate(model, {"input_ids": ids, "labels": labels}, num_samples=2)
    assert got["nll"] == pytest.approx(ref, rel=1e-5)


def test_a_bayesian_lora_model_pickles_and_deep_copies():
    import copy
    import pickle

    model = _lora_gpt2()
    bbb.bayesianize(model)
    again = pickle.loads(pickle.dumps(model))
    assert type(again) is type(model) and type(again.base_model) is type(model.base_model)
    twin = copy.deepcopy(model)
    assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), model.state_dict().values()))
    with pytest.warns(UserWarning, match="posterior mean"):
        twin.merge_and_unload()


def test_bayesianize_keeps_requires_grad_on_any_model():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    net[0].requires_grad_(False)
    net[2].bias.requires_grad_(False)
    bbb.bayesianize(net)
    assert not any(p.requires_grad for p in net[0].parameters())
    assert net[2].weight_mu.requires_grad and net[2].weight_rho.requires_grad
    assert not net[2].bias_mu.requires_grad and not net[2].bias_rho.requires_grad
