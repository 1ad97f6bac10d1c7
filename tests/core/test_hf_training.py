"""Training a converted Hugging Face model: its own loss (the labels passed to the model, as
transformers' Trainer does) has no KL, and the model says so; the ELBO, which takes the labels from the
batch, does not warn. Tiny configs, nothing downloaded."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import bbb

transformers = pytest.importorskip("transformers")
from transformers import BertConfig, BertForSequenceClassification  # noqa: E402

transformers.logging.set_verbosity_error()


def _bert() -> BertForSequenceClassification:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=2)
    return bbb.bayesianize(BertForSequenceClassification(cfg), skip=[nn.LayerNorm])


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(0, 50, (4, 6), generator=g), "labels": torch.tensor([0, 1, 0, 1])}


def _own_loss_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "called with labels in training" in str(w.message)]


def test_the_models_own_loss_in_training_warns_once_that_it_has_no_kl():
    model, batch = _bert().train(), _batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(**batch).loss.backward()  # what transformers' Trainer does
        model(**batch).loss.backward()
    said = _own_loss_warnings(caught)
    assert len(said) == 1 and "no KL term" in said[0] and "compute_loss" in said[0]


@pytest.mark.parametrize("how", ["elbo", "eval", "no_grad", "no_labels"])
def test_the_elbo_and_prediction_do_not_warn(how):
    model, batch = _bert().train(), _batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if how == "elbo":
            bbb.ELBO(model, num_batches=1)(batch, batch_index=0).loss.backward()
        elif how == "eval":
            model.eval()(**batch).loss.backward()
        elif how == "no_grad":
            with torch.no_grad():
                model(**batch)
        else:
            model(input_ids=batch["input_ids"]).logits.sum().backward()
    assert _own_loss_warnings(caught) == []


def test_a_peft_model_and_a_reloaded_model_warn_too(tmp_path):
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=2)
    lora = peft.get_peft_model(BertForSequenceClassification(cfg),
                               peft.LoraConfig(r=2, target_modules=["query", "value"], task_type="SEQ_CLS"))
    bbb.bayesianize(lora, lora="AB")
    bbb.save_pretrained(_bert(), tmp_path / "bert")
    reloaded = bbb.from_pretrained(tmp_path / "bert")
    for model in (lora, reloaded):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.train()(**_batch()).loss.backward()
        assert len(_own_loss_warnings(caught)) == 1, type(model).__name__


def test_a_peft_model_without_a_task_type_warns_and_its_elbo_does_not():
    """``get_peft_model`` without ``task_type`` (docs/bayesian_lora.md's recipe) gives a ``PeftModel``,
    whose forward takes ``**kwargs``: the labels reach the transformers model inside it."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=2)
    lora = peft.get_peft_model(BertForSequenceClassification(cfg), peft.LoraConfig(r=2, target_modules=["query"]))
    assert type(lora) is peft.PeftModel  # (no task_type)
    bbb.bayesianize(lora)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bbb.ELBO(lora.train(), num_batches=1)(_batch(), batch_index=0).loss.backward()
        assert _own_loss_warnings(caught) == []
        lora(**_batch()).loss.backward()  # what transformers' Trainer does
        lora(**_batch()).loss.backward()
    assert len(_own_loss_warnings(caught)) == 1


def _gpt2(checkpointing: bool, reentrant: bool = False):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
                                  eos_token_id=0)
    model = bbb.bayesianize(transformers.GPT2LMHeadModel(cfg))
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    return model.train()


def _ids() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(3))
    return {"input_ids": ids, "labels": ids}


def test_gradient_checkpointing_with_one_sample_gives_the_exact_gradient():
    grads = []
    for checkpointing in (False, True):
        model = _gpt2(checkpointing)
        torch.manual_seed(5)
        bbb.ELBO(model, num_batches=1, kl_weighting="uniform")(_ids()).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("how", ["samples", "generator", "engine", "reentrant"])
def test_gradient_checkpointing_refuses_what_its_recompute_would_draw_otherwise(how):
    # (without the error: another network's gradient, silently, or a CheckpointError's traceback)
    model = _gpt2(True, reentrant=how == "reentrant")
    elbo = bbb.ELBO(model, num_batches=1, kl_weighting="uniform", num_samples=3 if how == "samples" else 1)
    with pytest.raises(bbb.errors.UserError, match="gradient checkpointing on.*gradient_checkpointing_disable"):
        if how == "engine":
            engine = bbb.Engine(elbo, "sgd", lr=0.1)
            with engine.sampling():
                elbo(_ids())
        else:
            elbo(_ids(), generator=torch.Generator().manual_seed(0) if how == "generator" else None)
    with torch.no_grad():  # (a validation loss recomputes nothing)
        elbo(_ids())


def test_evaluate_on_token_classification_scores_each_labelled_token():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=3)
    model = bbb.bayesianize(transformers.BertForTokenClassification(cfg), skip=[nn.LayerNorm])
    ids = torch.randint(0, 50, (3, 5), generator=torch.Generator().manual_seed(2))
    labels = torch.randint(0, 3, (3, 5), generator=torch.Generator().manual_seed(4))
    labels[:, 3:] = -100  # padding and sub-word pieces
    got = bbb.uncertainty.evaluate(model, {"input_ids": ids, "labels": labels}, num_samples=4, generator=0)
    logits = bbb.uncertainty.predict(model, {"input_ids": ids}, num_samples=4, generator=0)
    probs = logits.softmax(-1).mean(0)[:, :3].reshape(-1, 3)
    kept = labels[:, :3].reshape(-1)
    assert got["error"] == pytest.approx(float((probs.argmax(-1) != kept).float().mean()))
    assert got["nll"] == pytest.approx(float(-probs[torch.arange(len(kept)), kept].log().mean()), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.long])
def test_multi_label_targets_are_an_error_that_says_what_they_need(dtype):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=3, problem_type="multi_label_classification")
    model = bbb.bayesianize(BertForSequenceClassification(cfg), skip=[nn.LayerNorm]).train()
    batch = {"input_ids": _batch()["input_ids"], "labels": torch.tensor([[1, 0, 1]] * 4, dtype=dtype)}
    with pytest.raises(bbb.errors.UserError, match="multi-label.*Bernoulli likelihood.*subclass bbb.elbo.Likelihood"):
        bbb.ELBO(model, num_batches=1)(batch)


@pytest.mark.parametrize("lora", [False, True])
def test_generate_in_train_mode_warns_that_each_token_gets_new_weights(lora):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
                                  eos_token_id=0, pad_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    if lora:
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
        bbb.bayesianize(model, lora="AB")
    else:
        bbb.bayesianize(model)
    prompt = torch.randint(1, 50, (2, 3), generator=torch.Generator().manual_seed(1))
    kw = {"max_new_tokens": 3, "do_sample": False}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.eval().generate(input_ids=prompt, **kw)  # the posterior mean
        bbb.hf.generate(model, prompt, num_samples=2, **kw)  # one network per sequence
        with bbb.nn.sampling(model, "sample"):  # new weights per step, on purpose
            model.generate(input_ids=prompt, **kw)
        said = [str(w.message) for w in caught if "in train() mode draws new weights" in str(w.message)]
        assert said == []
        model.train().generate(input_ids=prompt, **kw)
        model.generate(input_ids=prompt, **kw)
    said = [str(w.message) for w in caught if "in train() mode draws new weights" in str(w.message)]
    assert len(said) == 1 and "model.eval()" in said[0]


def _tiny_bart() -> nn.Module:
    """A Bayesian BART language model of a few thousand weights, in eval() (the posterior mean)."""
    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, max_position_embeddings=32)
    model = bbb.bayesianize(transformers.BartForConditionalGeneration(cfg), skip=[nn.LayerNorm, nn.Embedding],
                            strict=False).eval()
    return model


def test_an_encoder_decoder_model_reads_the_decoder_inputs_transformers_makes_from_its_labels():
    """BART builds its decoder's inputs from ``labels``, which bbb scores and does not pass on: without
    ``decoder_input_ids`` its decoder read the source, shifted, and a source as long as the target
    scored silently wrong (then a one-line refusal). They are made from the labels as the model
    makes them (prepare_decoder_input_ids_from_labels): the ELBO's NLL is the model's own loss on the
    batch as a Hugging Face loop gives it, and evaluate scores the same; a model that makes them
    otherwise is still refused in one line."""
    model = _tiny_bart()
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(3, 40, (2, 6), generator=g), torch.randint(3, 40, (2, 7), generator=g)
    tgt[1, -2:] = -100  # padding the loss ignores (and the decoder reads as the pad token)
    batch = {"input_ids": src, "labels": tgt}
    with torch.no_grad():
        own = model(**batch).loss  # transformers makes the decoder's inputs from the labels itself
        out = bbb.ELBO(model, num_batches=1)(batch)
        explicit = {**batch, "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels=tgt)}
        given = bbb.ELBO(model, num_batches=1)(explicit)
        scores = []
        for b in (batch, [batch], explicit):  # the same weight draws each time
            torch.manual_seed(5)
            scores.append(bbb.uncertainty.evaluate(model, b)["nll"])
    torch.testing.assert_close(out.nll / int((tgt != -100).sum()), own)
    assert torch.equal(out.nll, given.nll)
    assert scores[0] == scores[1] == scores[2] and scores[0] == pytest.approx(float(own), rel=1e-3)
    model.prepare_decoder_input_ids_from_labels = None  # (a seq2seq model that makes them another way)
    for call in (lambda: bbb.ELBO(model, num_batches=1)(batch), lambda: bbb.uncertainty.evaluate(model, batch),
                 lambda: bbb.uncertainty.evaluate(model, [batch])):
        with pytest.raises(bbb.errors.UserError, match="encoder-decoder model.*decoder_input_ids") as e:
            call()
        assert "\n" not in str(e.value)


def test_a_compiled_elbo_of_an_encoder_decoder_model_makes_its_decoder_inputs_too():
    """Under torch.compile the ELBO skipped its Python-side checks, the decoder's inputs among them:
    BART's decoder read the source, shifted (a source as long as the target: a wrong NLL, no error)."""
    import torch._dynamo as dynamo

    model = _tiny_bart()
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(3, 40, (2, 7), generator=g), torch.randint(3, 40, (2, 7), generator=g)
    batch = {"input_ids": src, "labels": tgt}
    elbo = bbb.ELBO(model, num_batches=1)
    dynamo.reset()
    try:
        with torch.no_grad():
            own = model(**batch).loss
            compiled = torch.compile(lambda b: elbo(b).nll, backend="aot_eager")(batch)
    finally:
        dynamo.reset()
    assert float(compiled) / tgt.numel() == pytest.approx(float(own), rel=1e-6)


def test_an_encoder_decoder_classifier_scores_its_labels_without_decoder_inputs():
    """BartForSequenceClassification's decoder reads its input_ids, shifted, not the labels: no refusal,
    and the ELBO's NLL is the model's own loss."""
    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, max_position_embeddings=32, num_labels=3)
    model = bbb.bayesianize(transformers.BartForSequenceClassification(cfg), skip=[nn.LayerNorm, nn.Embedding],
                            strict=False).eval()
    ids = torch.randint(3, 40, (2, 6), generator=torch.Generator().manual_seed(2))
    ids[:, -1] = cfg.eos_token_id  # (its head reads the last end-of-sequence token)
    batch = {"input_ids": ids, "labels": torch.tensor([0, 2])}
    with torch.no_grad():
        own = model(**batch).loss
        out = bbb.ELBO(model, "categorical", num_batches=1)(batch)
    torch.testing.assert_close(out.nll / 2, own)
    assert bbb.uncertainty.evaluate(model, batch, num_samples=2)["nll"] > 0
