"""Contract tests of Bayesian LoRA on the four model families (issue 63): BERT (sequence classifier,
its head in peft's modules_to_save), GPT-2 (transformers' Conv1D), Llama (q_proj/v_proj) and ViT
(image classifier), each a tiny config with random init (nothing downloaded) under peft's LoRA, then
``bbb.bayesianize``: only the adapters (and the head) train; k samples distinct; padding- and
batch-invariant; save/load exact; a few steps lower the loss."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.nn import BayesModule, bayes_modules
from bbb.uncertainty import predict

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from peft import LoraConfig, TaskType, get_peft_model  # noqa: E402

transformers.logging.set_verbosity_error()

V, T, B, C = 60, 8, 3, 2  # vocabulary, sequence length, batch, classes


def _bert() -> nn.Module:
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32, num_labels=C)
    return transformers.BertForSequenceClassification(cfg)


def _gpt2() -> nn.Module:
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=16, n_layer=2, n_head=2, n_positions=32, bos_token_id=0,
                                  eos_token_id=0, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _llama() -> nn.Module:
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def _vit() -> nn.Module:
    cfg = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=32, num_labels=C)
    return transformers.ViTForImageClassification(cfg)


#: the base model and peft's LoraConfig of each family
FAMILIES: dict[str, tuple[Callable[[], nn.Module], dict]] = {
    "bert": (_bert, dict(task_type=TaskType.SEQ_CLS, target_modules=["query", "value"])),  # head: modules_to_save
    "gpt2": (_gpt2, dict(task_type=TaskType.CAUSAL_LM, target_modules=["c_attn"], fan_in_fan_out=True)),
    "llama": (_llama, dict(task_type=TaskType.CAUSAL_LM, target_modules=["q_proj", "v_proj"])),
    "vit": (_vit, dict(target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"])),
}
NAMES = sorted(FAMILIES)


def _base(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return FAMILIES[name][0]()


def _model(name: str, seed: int = 0, **kw) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(_base(name, seed), LoraConfig(r=4, lora_alpha=8, **FAMILIES[name][1]))
    bbb.bayesianize(model, **kw)
    return model


def _move_b(model: nn.Module) -> None:
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def _batch(name: str, b: int = B, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if name == "vit":
        pixels = torch.randn(b, 3, 16, 16, generator=g)
        return {"pixel_values": pixels, "labels": torch.randint(0, C, (b,), generator=g)}
    ids = torch.randint(1, V, (b, T), generator=g)
    mask = torch.ones(b, T, dtype=torch.long)
    mask[-1, T // 2:] = 0  # the last example is shorter: padded on the right
    labels = torch.randint(0, C, (b,), generator=g) if name == "bert" else torch.where(mask.bool(), ids, -100)
    return {"input_ids": ids * mask, "attention_mask": mask, "labels": labels}


def _inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels"}


@pytest.mark.parametrize("name", NAMES)
def test_only_the_adapters_and_the_head_train(name):
    model = _model(name)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n or ".modules_to_save." in n for n in trainable)
    bayes = [n for n, m in model.named_modules() if isinstance(m, BayesModule)]
    assert bayes and all(n.endswith("lora_A.default") for n in bayes)
    heads = [n for n in trainable if ".modules_to_save." in n]
    assert bool(heads) is (name in ("bert", "vit"))  # the head: a point estimate
    assert not any(n.endswith(("_mu", "_rho")) for n in heads)


@pytest.mark.parametrize("name", NAMES)
def test_k_samples_distinct_padding_and_batch_invariant(name):
    model = _model(name)
    _move_b(model)
    batch = _inputs(_batch(name))
    out = predict(model, batch, num_samples=3, generator=0)  # (3, B, ...)
    assert not torch.allclose(out[0], out[1]) and not torch.allclose(out[1], out[2])
    # batch-invariant: each example alone, with the same draws, gives its row of the batch
    for i in range(B):
        alone = {k: v[i:i + 1] for k, v in batch.items()}
        if "attention_mask" in alone:  # its own length, no padding at all
            n = int(alone["attention_mask"].sum())
            alone = {k: v[:, :n] for k, v in alone.items()}
        one = predict(model, alone, num_samples=3, generator=0)
        got = out[:, i:i + 1]
        if name in ("gpt2", "llama"):  # a causal LM: every position that is not padding
            got = got[:, :, : one.shape[2]]
        torch.testing.assert_close(one, got, rtol=1e-4, atol=1e-5)
    mean = predict(model, batch, mode="mean")
    assert mean.shape == (1, *out.shape[1:])


@pytest.mark.parametrize("name,kw", [*((n, {}) for n in NAMES), ("bert", dict(lora="AB", modules_to_save=True))])
def test_save_and_load_exact(name, kw, tmp_path):
    model = _model(name, **kw)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    again = bbb.from_pretrained(tmp_path, base_model=_base(name))
    mine = {k: v for k, v in model.state_dict().items() if ".lora_" in k or ".modules_to_save." in k}
    theirs = {k: v for k, v in again.state_dict().items() if ".lora_" in k or ".modules_to_save." in k}
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert [type(m).__name__ for m in bayes_modules(again)] == [type(m).__name__ for m in bayes_modules(model)]
    batch = _inputs(_batch(name))
    torch.testing.assert_close(predict(again, batch, num_samples=2, generator=5),
                               predict(model, batch, num_samples=2, generator=5))


@pytest.mark.parametrize("name", NAMES)
def test_a_few_steps_lower_the_loss_and_leave_the_base(name):
    model = _model(name)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    batch = _batch(name, b=4)
    elbo = bbb.ELBO(model, num_batches=10, kl_weighting="uniform", beta=0.1, num_samples=2)
    engine = bbb.Engine(elbo, "adam", lr=2e-2)
    model.train()
    losses = []
    for _ in range(8):
        with engine.sampling():
            out = elbo(batch)
        engine.zero_grad()
        (out.loss / 4).backward()
        engine.step()
        losses.append(float(out.nll.detach()))
    assert losses[-1] < losses[0]
    assert all(torch.equal(dict(model.named_parameters())[n], t) for n, t in before.items())
    assert engine.fused and {id(m) for m in engine.layout.modules} == {id(m) for m in bayes_modules(model)}


@pytest.mark.parametrize("name,kw", [*((n, {}) for n in NAMES), ("bert", dict(lora="AB", modules_to_save=True))])
def test_load_adapter_into_the_bayesian_adapter_loads_every_mean(name, kw, tmp_path):
    """peft's ``load_adapter`` into the model's own Bayesian adapter (transformers' Trainer resuming
    from a checkpoint, or loading its best one): every saved mean loads (peft's mapping left them at
    their initial values, silently)."""
    model = _model(name, **kw)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    fresh = _model(name, seed=0, **kw)  # as the Trainer rebuilds it: the same initial adapters
    fresh.load_adapter(str(tmp_path), "default", is_trainable=True)
    mine, theirs = model.state_dict(), fresh.state_dict()
    assert mine.keys() == theirs.keys()
    assert [k for k in mine if not torch.equal(mine[k], theirs[k])] == []


def test_load_adapter_of_a_plain_folder_into_a_bayesian_adapter_is_an_error(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = get_peft_model(_base("llama"), LoraConfig(r=4, lora_alpha=8, **FAMILIES["llama"][1]))
    plain.save_pretrained(tmp_path)
    with pytest.raises(bbb.errors.UserError, match="did not load into the Bayesian adapter 'default'"):
        _model("llama").load_adapter(str(tmp_path), "default")


def test_generate_on_a_model_left_in_train_mode_runs_without_dropout():
    """After a training loop the model is in ``train()``: ``bbb.hf.generate`` writes with the posterior
    mean or k networks, each the same at every token and for every prompt, not with new dropout
    masks (peft's lora_dropout) at each step; the model is left in ``train()``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(_base("gpt2"), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5,
                                                         **FAMILIES["gpt2"][1]))
    bbb.bayesianize(model, lora="AB")
    _move_b(model)
    for m in bayes_modules(model):
        with torch.no_grad():
            m.weight_rho.fill_(-1.0)
    prompt = torch.tensor([[1, 2, 3], [1, 2, 3]])  # one prompt twice: each network writes it the same
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    model.eval()
    want = bbb.hf.generate(model, prompt, **kw)
    model.train()
    for _ in range(3):
        assert torch.equal(bbb.hf.generate(model, prompt, **kw), want)
    out = bbb.hf.generate(model, prompt, num_samples=4, **kw)
    assert all(torch.equal(out[j, 0], out[j, 1]) for j in range(4))
    assert model.training and all(m.training for n, m in model.named_modules() if n.endswith("lora_dropout.default"))


def test_load_adapter_of_a_bayesian_folder_as_a_new_adapter_says_it_is_the_means(tmp_path):
    model = _model("llama")
    _move_b(model)
    model.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="plain LoRA adapter at the posterior means"):
        model.load_adapter(str(tmp_path), "other")
    assert not any(isinstance(m, BayesModule) for n, m in model.named_modules() if n.endswith(".other"))


@pytest.mark.parametrize("other", ["wider", "gpt2"])
def test_an_adapter_on_another_base_model_is_a_one_line_error(other, tmp_path):
    _model("bert").save_pretrained(tmp_path)
    if other == "wider":  # the same family, another hidden size: torch's size mismatch
        cfg = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=32, num_labels=C)
        base = transformers.BertForSequenceClassification(cfg)
    else:  # no module of the adapter's target names: peft's ValueError
        base = _base("gpt2")
    with pytest.raises(bbb.errors.UserError, match=r"does not fit this base model.*\(pass a fresh copy"):
        bbb.from_pretrained(tmp_path, base_model=base)


def test_bayesianize_again_with_other_settings_says_they_are_not_applied():
    model = _model("llama")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bbb.bayesianize(model)  # the same (default) settings: nothing to say
        bbb.bayesianize(model, lora="AB")  # B converts; A's settings are those passed
    assert not [w for w in caught if "Bayesian already" in str(w.message)]
    with pytest.warns(UserWarning, match=r"Bayesian already .* with another prior, rho_init, which it does not change"):
        bbb.bayesianize(model, prior=bbb.GaussianPrior(0.05), rho_init=-3.0)
    assert all(m.prior == bbb.GaussianPrior(0.2) and m.rho_init == -5.0 for m in bayes_modules(model))
    with pytest.raises(bbb.errors.UserError, match="Bayesian already"):
        bbb.bayesianize(model, estimator="flipout", strict=True)


@pytest.mark.parametrize("head", [False, True])
def test_the_untrained_adapter_warning_says_equal_samples_only_where_they_are(head):
    model = _model("bert", modules_to_save=head)  # B = 0; with head=True the head's posterior samples
    batch = _inputs(_batch("bert"))
    with pytest.warns(UserWarning, match="B is 0") as caught:
        out = predict(model, batch, num_samples=3)
    said = " ".join(str(w.message) for w in caught)
    assert torch.equal(out[0], out[1]) is (not head)
    assert ("the samples are identical" in said) is (not head)
    assert ("differ only through the model's other Bayesian layers" in said) is head


@pytest.mark.parametrize("estimator", ["flipout", "local"])
def test_generate_with_samples_is_one_network_per_sequence_whatever_the_estimator(estimator):
    """Flipout (BLoB's) and local reparameterisation draw their noise per example and per call: in
    ``bbb.hf.generate`` the layers draw whole weights, so network j writes one prompt given twice the
    same way; their estimator is theirs again after."""
    model = _model("llama", lora="AB", estimator=estimator)
    for m in bayes_modules(model):
        with torch.no_grad():
            m.weight_mu.add_(0.3 * torch.randn_like(m.weight_mu))
            m.weight_rho.fill_(0.0)
    prompt = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8]])
    out = bbb.hf.generate(model, prompt, num_samples=4, max_new_tokens=8, do_sample=False)
    assert all(torch.equal(out[j, 0], out[j, 1]) for j in range(4))
    assert len({tuple(out[j, 0].tolist()) for j in range(4)}) > 1
    assert all(m.estimator.value == estimator for m in bayes_modules(model))


def test_an_adapter_named_as_a_module_of_the_model_saves_and_loads_exact(tmp_path):
    """GPT-2's attention module is ``attn``: an adapter of that name is told from it (its record held
    the other adapter's layers, and every base weight under ``attn`` counted as its missing key)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(_base("gpt2"), LoraConfig(r=4, lora_alpha=8, **FAMILIES["gpt2"][1]))
        model.add_adapter("attn", LoraConfig(r=2, lora_alpha=4, **FAMILIES["gpt2"][1]))
    bbb.bayesianize(model)
    _move_b(model)
    model.save_pretrained(tmp_path)
    again = bbb.from_pretrained(tmp_path / "attn", base_model=_base("gpt2"), adapter_name="attn")
    mine, theirs = model.state_dict(), again.state_dict()
    ours = [k for k in mine if ".attn.weight" in k or ".attn.bias" in k or ".attn.weight_" in k]
    assert ours and all(torch.equal(mine[k], theirs[k]) for k in ours)
    assert len(list(bayes_modules(again))) == len([m for n, m in model.named_modules()
                                                   if isinstance(m, BayesModule) and n.endswith(".attn")])


def test_the_record_of_an_adapter_on_a_bfloat16_base_names_the_adapters_dtype(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(_base("llama").to(torch.bfloat16), LoraConfig(r=4, lora_alpha=8, **FAMILIES["llama"][1]))
    bbb.bayesianize(model)
    assert {m.weight_mu.dtype for m in bayes_modules(model)} == {torch.float32}  # peft's autocast of adapters
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "bbb_conversion.json").read_text())["dtype"] == "float32"
    again = bbb.from_pretrained(tmp_path, base_model=_base("llama").to(torch.bfloat16))
    mine, theirs = model.state_dict(), again.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) and mine[k].dtype == theirs[k].dtype for k in mine)


@pytest.mark.parametrize("head", [False, True])
def test_merging_says_whether_the_head_stays_bayesian(head):
    model = _model("bert", modules_to_save=head)
    _move_b(model)
    with pytest.warns(UserWarning, match="posterior mean") as caught:
        merged = model.merge_and_unload()
    said = " ".join(str(w.message) for w in caught)
    assert ("one deterministic network" in said) is (not head)
    assert ("head (modules_to_save=True) still Bayesian" in said) is head
    assert any(isinstance(m, BayesModule) for m in merged.modules()) is head


def test_load_adapter_of_a_pruned_adapter_keeps_its_masks(tmp_path):
    from bbb.prune import count_weights, prune

    model = _model("gpt2", lora="AB")
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.normal_()
    res = prune(model, 0.5)
    model.save_pretrained(tmp_path)
    fresh = _model("gpt2", lora="AB")  # as transformers' Trainer rebuilds it to resume
    fresh.load_adapter(str(tmp_path), "default", is_trainable=True)
    assert count_weights(fresh) == count_weights(model) == (res.total, res.kept) and res.kept < res.total
    mine, theirs = model.state_dict(), fresh.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_generate_on_a_model_that_does_not_generate_is_a_one_line_error():
    model = _model("bert")  # a peft model has generate, the classifier it adapts has none
    with pytest.raises(bbb.errors.UserError, match="generate needs a transformers model with .generate"):
        bbb.hf.generate(model, torch.tensor([[1, 2, 3]]))
