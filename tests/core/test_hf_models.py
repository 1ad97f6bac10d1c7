"""Contract tests with the real Hugging Face ``transformers``: models as transformers builds them
(tiny configs, random init, nothing downloaded), no wrapper. ``bbb.bayesianize`` -> > 95% of the
weights Bayesian -> 3 steps with ``torch.optim`` and 3 with :class:`bbb.engine.Engine`, k = 1 and 4
(the batch a mapping with ``labels``, the output a ``ModelOutput``) -> ``predict`` with attention
masks: k distinct samples per example, padding- and batch-invariant -> ``state_dict`` round trip.
GPT-2 (transformers' ``Conv1D``) runs the same contract as a sequence classifier; its language model
(the tied head, ``generate``, save and load) is tested in test_hf_conversion.py."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import bbb
from bbb.engine import Engine
from bbb.uncertainty import evaluate, predict

transformers = pytest.importorskip("transformers")

V, T, B, C = 100, 8, 3, 2  # vocabulary, sequence length, batch, classes


def _bert() -> torch.nn.Module:
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, num_labels=C)
    return transformers.BertForSequenceClassification(cfg)


def _distilbert() -> torch.nn.Module:
    cfg = transformers.DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                        max_position_embeddings=64, num_labels=C)
    return transformers.DistilBertForSequenceClassification(cfg)


def _vit() -> torch.nn.Module:
    cfg = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64, num_labels=C)
    return transformers.ViTForImageClassification(cfg)


def _gpt2() -> torch.nn.Module:
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=64, num_labels=C,
                                  pad_token_id=0)  # the classifier reads the last token that is not padding
    return transformers.GPT2ForSequenceClassification(cfg)


TEXT: dict[str, Callable[[], torch.nn.Module]] = {"bert": _bert, "distilbert": _distilbert, "gpt2": _gpt2}
MODELS: dict[str, Callable[[], torch.nn.Module]] = {**TEXT, "vit": _vit}


def _convert(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = MODELS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the LayerNorms (and ViT's position table) stay deterministic: named
        return bbb.bayesianize(model)


def _batch(name: str, b: int = B, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, C, (b,), generator=g)
    if name == "vit":
        return {"pixel_values": torch.randn(b, 3, 16, 16, generator=g), "labels": labels}
    ids = torch.randint(1, V, (b, T), generator=g)
    mask = torch.ones(b, T, dtype=torch.long)
    mask[-1, T // 2:] = 0  # the last example is shorter: padded
    return {"input_ids": ids * mask, "attention_mask": mask, "labels": labels}


def _means(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in net.named_parameters() if n.endswith("_mu")}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_converts_to_more_than_95_percent_bayesian(name):
    net = _convert(name)
    bayes = sum(p.numel() for m in bbb.nn.bayes_modules(net) for n, p in m.named_parameters(recurse=False)
                if n.endswith("_mu"))
    plain = sum(p.numel() for n, p in net.named_parameters() if not n.endswith(("_mu", "_rho")))
    assert bayes / (bayes + plain) > 0.95, (bayes, plain)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("optimizer", ["torch", "engine"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_trains_three_steps_as_it_comes(name, optimizer, k):
    net = _convert(name)
    net.train()
    elbo = bbb.ELBO(net, num_batches=1, num_samples=k)
    opt: torch.optim.Optimizer = (Engine(elbo, "adam", lr=1e-2, seed=0) if optimizer == "engine"
                                  else torch.optim.Adam(net.parameters(), lr=1e-2))
    ctx = opt.sampling if isinstance(opt, Engine) else torch.enable_grad
    before = _means(net)
    batch = _batch(name)
    for _ in range(3):
        with ctx():
            out = elbo(batch)  # the mapping's labels are the targets, the ModelOutput's logits the output
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        assert torch.isfinite(out.loss)
        assert out.output.shape == ((B, C) if k == 1 else (k, B, C))
    after = _means(net)
    still = [n for n in before if torch.equal(before[n], after[n])]
    assert not still, f"posterior means that did not move: {still}"


def _predict(net, batch, k=4, seed=0):
    return predict(net, batch, num_samples=k, generator=seed)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_predict_k_distinct_samples_and_batch_invariant(name):
    net = _convert(name)
    batch = _batch(name)
    out = _predict(net, batch)
    assert out.shape == (4, B, C)
    for i in range(B):  # the k samples differ for every example
        rows = out[:, i]
        assert all(not torch.allclose(rows[a], rows[b]) for a in range(4) for b in range(a + 1, 4))
    for i in range(B):  # a row's outputs do not depend on the other rows (same seed: same networks)
        alone = {key: v[i:i + 1] for key, v in batch.items()}
        torch.testing.assert_close(_predict(net, alone)[:, 0], out[:, i], atol=1e-5, rtol=1e-5)
    # the same k networks over chunks, every batch tensor split (batch_size chunks the mapping)
    torch.testing.assert_close(predict(net, batch, num_samples=4, generator=0, batch_size=2), out,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(TEXT))
def test_predict_is_padding_invariant(name):
    net = _convert(name)
    batch = _batch(name)
    out = _predict(net, batch)
    pad = 5  # extra padded tokens (mask 0) change no row's outputs, for the same weights
    longer = {"input_ids": torch.cat([batch["input_ids"], torch.zeros(B, pad, dtype=torch.long)], 1),
              "attention_mask": torch.cat([batch["attention_mask"], torch.zeros(B, pad, dtype=torch.long)], 1)}
    torch.testing.assert_close(_predict(net, longer), out, atol=1e-5, rtol=1e-5)
    # the shorter example alone, unpadded, is the padded one
    n = int(batch["attention_mask"][-1].sum())
    short = {"input_ids": batch["input_ids"][-1:, :n], "attention_mask": batch["attention_mask"][-1:, :n]}
    torch.testing.assert_close(_predict(net, short)[:, 0], out[:, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_state_dict_round_trip_is_exact(name):
    net = _convert(name, seed=0)
    with torch.no_grad():  # a posterior unlike the initial one
        for m in bbb.nn.bayes_modules(net):
            m.weight_rho.add_(torch.randn_like(m.weight_rho) * 0.1)
    other = _convert(name, seed=1)
    other.load_state_dict(net.state_dict())
    sd, back = net.state_dict(), other.state_dict()
    assert sd.keys() == back.keys() and all(torch.equal(sd[key], back[key]) for key in sd)
    batch = _batch(name)
    assert torch.equal(_predict(net, batch), _predict(other, batch))
    metrics = evaluate(other, batch, num_samples=4, generator=0)  # the batch's labels are the targets
    assert 0.0 <= metrics["error"] <= 1.0 and metrics["mutual_information"] > 0
