"""Bayesian multi-head attention (and the transformer layers built on it) and embeddings."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.nn import BayesLinear, BayesModule, SampleProvider, SampleRecorder, folded_samples, forward_samples, sampling
from bbb.nn.attention import BayesMultiheadAttention, no_fast_path
from bbb.nn.embedding import BayesEmbedding, BayesEmbeddingBag
from bbb.nn.samples import providing_samples

ESTIMATORS = ["reparam", "local", "flipout"]


def _convert(module: nn.Module, estimator: str = "reparam", rho_init: float = -2.0,
             only_attention: bool = False) -> nn.Module:
    """Every MultiheadAttention, Linear and Embedding of ``module`` made Bayesian (in place)."""
    for name, child in module.named_children():
        cls = {nn.MultiheadAttention: BayesMultiheadAttention, nn.Linear: BayesLinear,
               nn.Embedding: BayesEmbedding}.get(type(child))
        if cls is not None and (cls is BayesMultiheadAttention or not only_attention):
            setattr(module, name, cls.from_torch(child, estimator=estimator, rho_init=rho_init))
        else:
            _convert(child, estimator, rho_init, only_attention)
    no_fast_path(module)
    return module


def _distinct_per_example(y: torch.Tensor, batch_dim: int = 1) -> None:
    """y (k, ...) with the examples along ``batch_dim``: the k outputs of every example differ."""
    y = y.movedim(batch_dim, 1).reshape(y.shape[0], y.shape[batch_dim], -1)
    for b in range(y.shape[1]):
        for i in range(y.shape[0]):
            for j in range(i):
                assert not torch.allclose(y[i, b], y[j, b]), f"example {b}: samples {i} and {j} are the same"


def _masks(b: int, s: int, lt: int):
    kpm = torch.zeros(b, s, dtype=torch.bool)
    kpm[0, -2:] = True
    per_head = torch.zeros(b * 2, lt, s, dtype=torch.bool)
    per_head[1::2, :, 1] = True
    return [dict(), dict(key_padding_mask=kpm), dict(attn_mask=torch.randn(lt, s)),
            dict(attn_mask=per_head, key_padding_mask=kpm),
            dict(key_padding_mask=kpm.float() * -1e4, attn_mask=torch.randn(lt, s))]


# --------------------------------------------------------------------------------------------
# the mean equals torch's layer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("opts", [dict(), dict(kdim=6, vdim=5, add_bias_kv=True, add_zero_attn=True),
                                  dict(bias=False)], ids=["packed", "separate-biaskv", "nobias"])
def test_mha_eval_equals_torch(batch_first, opts):
    ref = nn.MultiheadAttention(8, 2, batch_first=batch_first, **opts).eval()
    net = BayesMultiheadAttention.from_torch(ref, rho_init=-1.0).eval()
    b, lt, s = 3, 4, 5
    q = torch.randn(b, lt, 8)
    k, v = torch.randn(b, s, opts.get("kdim", 8)), torch.randn(b, s, opts.get("vdim", 8))
    if not batch_first:
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    calls = [(q, k, v)] + ([(q, q, q)] if "kdim" not in opts else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: mismatched mask types are deprecated
        for args in calls:
            for masks in _masks(b, args[1].shape[1 if batch_first else 0], lt):
                for need, avg in ((True, True), (True, False), (False, True)):
                    a = ref(*args, need_weights=need, average_attn_weights=avg, **masks)
                    c = net(*args, need_weights=need, average_attn_weights=avg, **masks)
                    torch.testing.assert_close(c[0], a[0])
                    assert (c[1] is None) == (a[1] is None)
                    if need:
                        torch.testing.assert_close(c[1], a[1])
        # causal self-attention, the mask with the hint
        causal = nn.Transformer.generate_square_subsequent_mask(lt)
        for need in (True, False) if "kdim" not in opts else ():
            a = ref(q, q, q, attn_mask=causal, is_causal=True, need_weights=need)
            torch.testing.assert_close(net(q, q, q, attn_mask=causal, is_causal=True, need_weights=need)[0], a[0])
            torch.testing.assert_close(net(q, q, q, is_causal=True, need_weights=need)[0], a[0])  # mask built
    # unbatched (L, E)
    q1 = torch.randn(lt, 8)
    k1, v1 = torch.randn(s, opts.get("kdim", 8)), torch.randn(s, opts.get("vdim", 8))
    kpm1 = torch.tensor([False] * (s - 1) + [True])
    a, c = ref(q1, k1, v1, key_padding_mask=kpm1), net(q1, k1, v1, key_padding_mask=kpm1)
    torch.testing.assert_close(c[0], a[0])
    torch.testing.assert_close(c[1], a[1])
    assert net.batch_first == batch_first and net._qkv_same_embed_dim is False
    assert "num_heads=2" in repr(net) and "out_proj" in repr(net)


def test_embedding_eval_equals_torch_and_padding_is_zero():
    ref = nn.Embedding(10, 4, padding_idx=-1)
    net = BayesEmbedding.from_torch(ref, rho_init=-1.0)
    idx = torch.tensor([[0, 9, 3], [9, 9, 1]])
    net.eval()
    torch.testing.assert_close(net(idx), ref(idx))
    torch.testing.assert_close(net.weight, ref.weight)
    assert net.padding_idx == 9 and "padding_idx=9" in repr(net)
    for est in ("reparam", "local"):
        e = BayesEmbedding.from_torch(ref, estimator=est, rho_init=-1.0)  # train(): sampled
        y = e(idx)  # the padding rows exactly 0, the others noisy
        assert (y[idx == 9] == 0).all() and not torch.allclose(y[idx != 9], ref(idx)[idx != 9])
    for mode in ("sum", "mean", "max"):
        bag = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=2)
        bnet = BayesEmbeddingBag.from_torch(bag).eval()
        bi = torch.tensor([[1, 2, 3], [2, 5, 5]])
        torch.testing.assert_close(bnet(bi), bag(bi))
        flat, off = torch.tensor([1, 2, 3, 4, 2, 7]), torch.tensor([0, 2, 5])
        psw = torch.rand(6) if mode == "sum" else None
        torch.testing.assert_close(bnet(flat, off, psw), bag(flat, off, psw))
        assert f"mode={mode}" in repr(bnet)


def test_torch_state_dicts_load():
    ref = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, add_bias_kv=True)
    net = BayesMultiheadAttention(8, 2, kdim=6, vdim=6, add_bias_kv=True, rho_init=-3.0)
    net.load_state_dict(ref.state_dict())  # strict: name -> name_mu, rho kept
    for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k", "bias_v"):
        torch.testing.assert_close(getattr(net, name), getattr(ref, name))
    torch.testing.assert_close(net.out_proj.weight, ref.out_proj.weight)
    assert float(net.k_proj_weight_rho.detach().max()) == -3.0
    keys = set(net.state_dict())
    assert {"in_proj_bias_mu", "bias_k_rho", "out_proj.weight_mu", "out_proj.bias_rho"} <= keys
    packed = BayesMultiheadAttention(8, 2)
    packed.load_state_dict(nn.MultiheadAttention(8, 2).state_dict())
    packed2 = BayesMultiheadAttention(8, 2)
    packed2.load_state_dict(packed.state_dict())
    torch.testing.assert_close(packed2.in_proj_weight, packed.in_proj_weight)
    emb = BayesEmbedding(10, 4)
    ref_e = nn.Embedding(10, 4)
    emb.load_state_dict(ref_e.state_dict())
    torch.testing.assert_close(emb.weight, ref_e.weight)
    bag = BayesEmbeddingBag(10, 4, mode="sum")
    bag.load_state_dict(nn.EmbeddingBag(10, 4).state_dict())


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_sigma_near_zero_samples_equal_the_mean(estimator):
    net = BayesMultiheadAttention(8, 2, kdim=6, vdim=6, add_bias_kv=True, estimator=estimator, rho_init=-30.0)
    q, k = torch.randn(5, 3, 8), torch.randn(4, 3, 6)
    tol = dict(atol=2e-3, rtol=0) if estimator == "local" else {}  # local: sqrt(var + LRT_EPS) * noise
    with sampling(net, "mean"):
        mean = net(q, k, k)[0]
    with sampling(net, "sample"):
        torch.testing.assert_close(net(q, k, k)[0], mean, **tol)
        with folded_samples(3, batch_dim=1):
            torch.testing.assert_close(net(q.repeat(1, 3, 1), k.repeat(1, 3, 1), k.repeat(1, 3, 1))[0],
                                       mean.repeat(1, 3, 1), **tol)
    if estimator == "flipout":
        return
    emb = BayesEmbedding(10, 4, padding_idx=0, estimator=estimator, rho_init=-30.0)
    bag = BayesEmbeddingBag(10, 4, mode="max", padding_idx=0, estimator=estimator, rho_init=-30.0)
    idx = torch.tensor([[0, 1, 2], [3, 3, 9]])
    for layer in (emb, bag):
        with sampling(layer, "mean"):
            mean = layer(idx)
        with sampling(layer, "sample"):
            torch.testing.assert_close(layer(idx), mean)
            with folded_samples(2):
                torch.testing.assert_close(layer(idx.repeat(2, 1)), mean.repeat(2, *[1] * (mean.dim() - 1)))


# --------------------------------------------------------------------------------------------
# k samples through whole networks
# --------------------------------------------------------------------------------------------


class Classifier(nn.Module):
    """A transformer encoder over (B, T, 5) or (T, B, 5) features, the last time step padding."""

    def __init__(self, batch_first: bool, pad: bool) -> None:
        super().__init__()
        self.batch_first, self.pad = batch_first, pad
        self.inp = nn.Linear(5, 8)
        layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1, batch_first=batch_first)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # enable_nested_tensor with batch_first=False
            self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        t_dim = 1 if self.batch_first else 0
        mask = None
        if self.pad:
            mask = torch.zeros(x.shape[1 - t_dim], x.shape[t_dim], dtype=torch.bool)
            mask[:, -1] = True
        h = self.enc(self.inp(x), src_key_padding_mask=mask)
        return self.head(h.mean(t_dim))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_classifier_k_samples_differ(batch_first, pad):
    net = _convert(Classifier(batch_first, pad))
    assert not any(type(m) in (nn.Linear, nn.MultiheadAttention) for m in net.modules())
    x = torch.randn(2, 4, 5) if batch_first else torch.randn(4, 2, 5)
    net.eval()
    with torch.no_grad():
        mean = net(x)
        assert torch.equal(net(x), mean)
        with sampling(net, "sample"):
            y = forward_samples(net, x, 4)
    assert y.shape == (4, 2, 3)
    _distinct_per_example(y)
    # only the attention Bayesian: its sampling alone makes the k networks differ (no fused kernel
    # on the means), with each estimator
    for est in ESTIMATORS:
        torch.manual_seed(0)
        net = _convert(Classifier(batch_first, pad), est, only_attention=True).eval()
        with torch.no_grad(), sampling(net, "sample"):
            _distinct_per_example(forward_samples(net, x, 4))
    # without no_fast_path the encoder would run nested tensors through the means: a clear error
    if pad and batch_first:
        net.enc.use_nested_tensor = True
        with torch.no_grad(), sampling(net, "sample"), pytest.raises(bbb.UserError, match="no_fast_path"):
            net(x)


def test_full_transformer_converts_and_samples():
    torch.manual_seed(1)
    ref = nn.Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16, dropout=0.0,
                         batch_first=True).eval()
    net = _convert(nn.Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16,
                                  dropout=0.0, batch_first=True))
    net.load_state_dict(ref.state_dict())
    assert not any(type(m) in (nn.Linear, nn.MultiheadAttention) for m in net.modules())
    src, tgt = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    tmask = nn.Transformer.generate_square_subsequent_mask(3)
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(net(src, tgt, tgt_mask=tmask), ref(src, tgt, tgt_mask=tmask))

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = net

        def forward(self, x):
            return self.t(x, x[:, :3], tgt_mask=tmask, tgt_is_causal=True).flatten(1)

    with torch.no_grad(), sampling(net, "sample"):
        _distinct_per_example(forward_samples(Wrap(), src, 3))


class TextModel(nn.Module):
    """Token ids (B, T) or (T, B) -> embedding -> [self-attention] -> mean over tokens -> linear."""

    def __init__(self, batch_first: bool = True, attention: bool = True, estimator: str = "reparam") -> None:
        super().__init__()
        self.t_dim = 1 if batch_first else 0
        self.emb = BayesEmbedding(12, 8, padding_idx=0, estimator=estimator, rho_init=-2.0)
        self.att = (BayesMultiheadAttention(8, 2, batch_first=batch_first, estimator=estimator, rho_init=-2.0)
                    if attention else None)
        self.head = BayesLinear(8, 3, estimator=estimator, rho_init=-2.0)

    def forward(self, ids):
        h = self.emb(ids)
        if self.att is not None:
            pad = ids == 0
            h = self.att(h, h, h, key_padding_mask=pad if self.t_dim == 1 else pad.T, need_weights=False)[0]
        return self.head(h.mean(self.t_dim))


@pytest.mark.parametrize("estimator", ["reparam", "local"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_text_model_k_samples_differ(estimator, batch_first):
    net = TextModel(batch_first, attention=False, estimator=estimator).eval()
    ids = torch.tensor([[1, 2, 0], [3, 3, 4]])
    if not batch_first:
        ids = ids.T.contiguous()
    with torch.no_grad(), sampling(net, "sample"):
        y = forward_samples(net, ids, 5, batch_dim=net.t_dim ^ 1)
    assert y.shape == (5, 2, 3)
    _distinct_per_example(y)


class _Replay(SampleProvider):
    """Sample ``j`` of the k recorded by a folded pass, for a one-sample pass."""

    def __init__(self, rec: SampleRecorder, j: int) -> None:
        self.rec, self.j = rec, j

    def draw(self, module, name, k):
        assert k is None
        s = self.rec.get(module, name)
        return getattr(module, f"{name}_mu"), s.eps[self.j], s.w[self.j]


class CrossAttention(nn.Module):
    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.att = BayesMultiheadAttention(8, 2, kdim=6, vdim=6, add_bias_kv=True, add_zero_attn=True,
                                           batch_first=batch_first, rho_init=-2.0)
        self.kpm = torch.tensor([[False, False, False, True], [False, False, False, False]])

    def forward(self, x):
        mem = x[..., :6]
        return self.att(x, mem, mem, key_padding_mask=self.kpm)[0]  # B-row mask: repeated for the k samples


@pytest.mark.parametrize("batch_first", [True, False])
def test_folded_samples_equal_each_sample_alone(batch_first):
    g = torch.Generator().manual_seed(3)
    ids = torch.tensor([[1, 2, 0, 0], [3, 3, 4, 5]])
    x = torch.randn(2, 4, 8)
    if not batch_first:
        ids, x = ids.T.contiguous(), x.transpose(0, 1).contiguous()
    for net, inp in ((TextModel(batch_first), ids), (CrossAttention(batch_first), x)):
        with sampling(net, "sample"), torch.no_grad():
            with SampleRecorder(g) as rec:
                y = forward_samples(net, inp, 3, batch_dim=0 if batch_first else 1)
            assert len(rec.records) == len([m for m in net.modules() if isinstance(m, BayesModule)])
            for j in range(3):
                with providing_samples(_Replay(rec, j)):
                    torch.testing.assert_close(y[j], net(inp))
        _distinct_per_example(y, 1 if batch_first or isinstance(net, TextModel) else 2)


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_gradients_reach_every_posterior(estimator):
    layers = [BayesMultiheadAttention(8, 2, estimator=estimator, rho_init=-2.0),
              BayesMultiheadAttention(8, 2, kdim=6, vdim=5, add_bias_kv=True, estimator=estimator, rho_init=-2.0)]
    q, k, v = torch.randn(2, 3, 8), torch.randn(4, 3, 6), torch.randn(4, 3, 5)
    outs = [layers[0](q, q, q)[0], layers[1](q, k, v, need_weights=False)[0]]
    with folded_samples(2, batch_dim=1):
        outs.append(layers[0](q.repeat(1, 2, 1), q.repeat(1, 2, 1), q.repeat(1, 2, 1))[0])
    if estimator != "flipout":
        emb = BayesEmbedding(10, 4, padding_idx=1, estimator=estimator, rho_init=-2.0)
        bags = [BayesEmbeddingBag(10, 4, mode=m, estimator=estimator, rho_init=-2.0) for m in ("sum", "max")]
        idx = torch.tensor([[1, 2, 3], [4, 1, 9]])
        outs += [emb(idx), bags[0](idx), bags[1](idx.flatten(), torch.tensor([0, 4]))]
        with folded_samples(2):
            outs += [emb(idx), bags[0](idx)]
        layers += [emb, *bags]
    sum((o ** 2).sum() for o in outs).backward()
    for layer in layers:
        for name, p in layer.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{type(layer).__name__}.{name}"
    if estimator != "flipout":  # the padding row never trains on the data
        assert float(emb.weight_mu.grad[1].abs().sum()) == 0.0


@pytest.mark.filterwarnings("ignore:grad and param do not obey")
@pytest.mark.parametrize("model,k", [("text", 1), ("transformer", 2)])
def test_engine_trains_fused(model, k):
    torch.manual_seed(0)
    if model == "text":
        net = TextModel()
        x = torch.tensor([[1, 2, 0, 0], [3, 3, 4, 5], [6, 7, 8, 0]])
    else:
        net = _convert(Classifier(True, True))
        x = torch.randn(3, 4, 5)
    y = torch.tensor([0, 1, 2])
    engine = bbb.Engine(net, "adam", lr=0.05, num_samples=k)
    assert engine.fused, engine.fallback_reason
    elbo = bbb.ELBO(net, "categorical", num_batches=1, num_samples=k)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    net.train()
    for _ in range(3):
        with engine.sampling():
            out = elbo(x, y)
        engine.zero_grad()
        out.loss.backward()
        engine.step()
    for n, p in net.named_parameters():
        assert not torch.equal(p.detach(), before[n]), n


# --------------------------------------------------------------------------------------------
# one-line errors
# --------------------------------------------------------------------------------------------


def test_one_line_errors():
    err = bbb.UserError
    with pytest.raises(err, match="needs an nn.MultiheadAttention"):
        BayesMultiheadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(err, match="not divisible"):
        BayesMultiheadAttention(6, 4)
    att = BayesMultiheadAttention(4, 2)
    with pytest.raises(err, match="unbatched"), folded_samples(2):
        att(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(err, match="batched 3-d"):
        att(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with pytest.raises(err, match="key_padding_mask has shape"):
        att(torch.randn(3, 2, 4), torch.randn(3, 2, 4), torch.randn(3, 2, 4), key_padding_mask=torch.zeros(2, 5))
    with pytest.raises(err, match="inside a 3-sample pass"), folded_samples(3):
        att.train()(torch.randn(3, 4, 4), torch.randn(3, 4, 4), torch.randn(3, 4, 4))
    with pytest.raises(err, match="max_norm"):
        BayesEmbedding.from_torch(nn.Embedding(5, 2, max_norm=1.0))
    with pytest.raises(err, match="sparse"):
        BayesEmbedding(5, 2, sparse=True)
    with pytest.raises(err, match="flipout estimator is not defined"):
        BayesEmbedding(5, 2, estimator="flipout")
    with pytest.raises(err, match="needs an Embedding"):
        BayesEmbedding.from_torch(nn.EmbeddingBag(5, 2))
    with pytest.raises(err, match="needs an EmbeddingBag"):
        BayesEmbeddingBag.from_torch(nn.Embedding(5, 2))
    with pytest.raises(err, match="mode must be"):
        BayesEmbeddingBag(5, 2, mode="median")
    with pytest.raises(err, match="inside a 2-sample pass"), folded_samples(2):
        BayesEmbedding(5, 2)(torch.tensor([1, 2, 3]))
    with pytest.raises(IndexError, match="out of range"), folded_samples(2):  # not another sample's row
        BayesEmbedding(5, 2)(torch.tensor([1, 7]))
    with pytest.raises(err, match="not a multiple of 2"), folded_samples(2):
        BayesEmbeddingBag(5, 2)(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]))


def test_expand_samples_into_an_embedding_is_a_one_line_error():
    """(k, B, L) from expand_samples: an embedding would read it as a batch (and a mean over dim
    1 would average the batch): said, not silently wrong."""
    import bbb

    emb = BayesEmbedding(10, 4)
    emb.train()
    with pytest.raises(bbb.UserError, match="leading sample dimension.*forward_samples"):
        emb(bbb.expand_samples(torch.randint(0, 10, (3, 5)), 4))


def test_a_broadcast_index_that_is_not_a_sample_dimension_is_no_error():
    """Positions indexed per example with expand (stride 0, like expand_samples' view) are a
    batch, not samples: only expand_samples' own views are refused."""
    emb = BayesEmbedding(12, 4)
    emb.train()
    pos = torch.arange(12).expand(3, -1)
    assert emb(pos).shape == (3, 12, 4)


class _Bags(nn.Module):
    """torch's text-classification tutorial: flat token ids and the offsets of each text's bag."""

    def __init__(self, own_offsets: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bag, self.head, self.own_offsets = nn.EmbeddingBag(10, 4, mode="sum"), nn.Linear(4, 2), own_offsets

    def forward(self, text, offsets_or_lengths):
        if self.own_offsets:  # (B, L) texts padded with -1 and their (B,) lengths, made flat here
            lengths = offsets_or_lengths
            offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)[:-1]])
            return self.head(self.bag(text[text >= 0], offsets))
        return self.head(self.bag(text, offsets_or_lengths))


@pytest.mark.parametrize("offsets", [[0, 4], [0, 1, 2, 3]])
def test_offsets_given_to_the_model_are_an_error_in_a_k_sample_pass(offsets):
    # the k-sample pass repeated every input with B rows: with as many offsets as indices both were
    # repeated and the bags came out wrong, silently ([0, 1, 2, 3, 0, 1, 2, 3]); otherwise a misleading error
    net = bbb.bayesianize(_Bags(), rho_init=-2.0)
    text = torch.tensor([1, 2, 4, 5])
    with pytest.raises(bbb.UserError, match="offsets that are an input of the model's"):
        bbb.uncertainty.predict(net, (text, torch.tensor(offsets)), num_samples=2)
    with pytest.raises(bbb.UserError, match="offsets that are an input of the model's"):
        y = torch.zeros(len(offsets), dtype=torch.long)
        bbb.ELBO(net, num_batches=1, num_samples=2)((text, torch.tensor(offsets)), y)


def test_offsets_a_model_makes_from_batch_shaped_inputs_fold():
    net = bbb.bayesianize(_Bags(own_offsets=True), rho_init=-2.0)
    text = torch.tensor([[1, 2, -1], [4, 5, 3], [7, -1, -1]])
    lengths = torch.tensor([2, 3, 1])
    both = bbb.uncertainty.predict(net, (text, lengths), num_samples=3, generator=0)
    one = bbb.uncertainty.predict(net, (text[1:2], lengths[1:2]), num_samples=3, generator=0)
    assert both.shape == (3, 3, 2)
    torch.testing.assert_close(both[:, 1:2], one)
    assert not torch.equal(both[0], both[1])


@pytest.mark.parametrize("estimator", ["reparam", "local"])
def test_scale_grad_by_freq_counts_each_samples_lookups_in_a_k_sample_pass(estimator):
    # torch counts a row's lookups over the whole batch: over the k copies of a k-sample pass the local
    # estimator divided every gradient by k more (the mean over samples a k-th of the one-sample gradient)
    grads = []
    for k in (1, 4):
        torch.manual_seed(0)
        emb = bbb.bayesianize(nn.Sequential(nn.Embedding(5, 3, scale_grad_by_freq=True)), estimator=estimator,
                              rho_init=-30.0)
        ids = torch.tensor([[1, 1, 2], [1, 3, 3]])
        forward_samples(emb, ids, k).sum(-1).mean(0).sum().backward()
        grads.append(emb[0].weight_mu.grad)
    torch.testing.assert_close(grads[1], grads[0])
    torch.testing.assert_close(grads[0][:4, 0], torch.tensor([0.0, 1.0, 1.0, 1.0]))  # each used row: 1, as torch
