"""Bayesian multi-head attention: :class:`BayesMultiheadAttention` (``torch.nn.MultiheadAttention``
with a diagonal Gaussian posterior over every weight), and :func:`no_fast_path`.

The input projections (``in_proj_weight``, or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``
when ``kdim``/``vdim`` differ from ``embed_dim``), ``in_proj_bias`` and ``bias_k``/``bias_v`` are
posteriors of this layer (``{name}_mu``, ``{name}_rho``; the torch name reads the posterior mean);
``out_proj`` is a :class:`~bbb.nn.BayesLinear` child, so the ``state_dict`` keys are torch's with
``_mu``/``_rho`` appended and a deterministic ``state_dict`` loads. The forward pass is written out
here (sampled projections, then ``scaled_dot_product_attention``, or the explicit softmax when the
weights are returned), so none of PyTorch's fused attention kernels (which would read the means)
runs: the layer sets ``_qkv_same_embed_dim = False``, which turns off the fused path of
``nn.TransformerEncoderLayer``; :func:`no_fast_path` turns off ``nn.TransformerEncoder``'s nested
tensors. Inside a k-sample fold (:func:`~bbb.nn.forward_samples`, the ELBO) the k*B rows along the
layer's batch dimension (0 with ``batch_first``, else 1) are projected with one weight sample per
block of B rows (one batched matmul) and attend as one batch; masks given with B rows are repeated
for the k samples.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .. import functional as BF
from ..distributions import Prior
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .inputs import unfold
from .layers import BayesLinear
from .samples import fold_samples

__all__ = ["BayesMultiheadAttention", "no_fast_path"]

_WHO = "BayesMultiheadAttention"


def no_fast_path(module: nn.Module) -> None:
    """Turn off the nested-tensor fast path of every ``nn.TransformerEncoder`` inside ``module``
    (``use_nested_tensor = False``): it would run the first layer's attention with torch's fused
    kernel, i.e. with the posterior means, whenever a ``src_key_padding_mask`` is given in eval
    mode without grad."""
    for m in module.modules():
        if isinstance(m, nn.TransformerEncoder):
            m.use_nested_tensor = False


def _float_mask(mask: Tensor | None, dtype: torch.dtype, what: str) -> Tensor | None:
    """A boolean mask (True: masked out) as an additive float mask; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    if not mask.is_floating_point():
        raise UserError(f"{_WHO}: {what} must be a boolean or a floating-point mask, got {mask.dtype}")
    return mask


def _rows(t: Tensor | None, i: int, dim: int) -> Tensor | None:
    """The i-th of three equal chunks of ``t`` along ``dim`` (q, k or v of a packed projection)."""
    return None if t is None else t.chunk(3, dim=dim)[i]


class BayesMultiheadAttention(BayesModule):
    """Bayesian ``torch.nn.MultiheadAttention`` (same arguments, same forward, same outputs).

    The arguments ``embed_dim``, ``num_heads``, ``dropout``, ``bias``, ``add_bias_kv``,
    ``add_zero_attn``, ``kdim``, ``vdim`` and ``batch_first`` are those of
    ``torch.nn.MultiheadAttention`` (``dropout`` acts on the attention weights in ``train()``
    mode); ``prior``, ``estimator``, ``mu_init_scale`` and ``rho_init`` those of
    :class:`~bbb.nn.BayesLinear`. ``local`` samples the q, k and v projections per example and
    position (they are linear in the input); ``flipout`` flips the signs of their weight
    perturbation per example and position. ``mu_init_scale`` None initialises as torch does
    (Xavier, zero biases).

    Shape: batched inputs (B, L, E) with ``batch_first`` else (L, B, E), unbatched (L, E); the
    output and the attention weights (``need_weights``) as torch's.
    """

    _param_names = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                    "bias_k", "bias_v")
    converts = (nn.MultiheadAttention,)
    #: never True: ``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder`` would run their fused
    #: kernels on the posterior means (it reads True only for torch's packed projection)
    _qkv_same_embed_dim = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        for what, v in (("embed_dim", embed_dim), ("num_heads", num_heads), ("kdim", kdim), ("vdim", vdim)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise UserError(f"{_WHO}: {what} must be an integer > 0, got {v!r}")
        if embed_dim % num_heads:
            raise UserError(f"{_WHO}: embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise UserError(f"{_WHO}: dropout must be a number in [0, 1], got {dropout!r}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.head_dim = embed_dim // num_heads
        self.dropout = float(dropout)
        self.batch_first = bool(batch_first)
        self.add_zero_attn = bool(add_zero_attn)
        #: one packed (3E, E) input projection (torch's ``_qkv_same_embed_dim``)
        self._packed = self.kdim == embed_dim and self.vdim == embed_dim
        factory = {"device": device, "dtype": dtype}
        shapes: dict[str, tuple[int, ...] | None] = {
            "in_proj_weight": (3 * embed_dim, embed_dim) if self._packed else None,
            "q_proj_weight": None if self._packed else (embed_dim, embed_dim),
            "k_proj_weight": None if self._packed else (embed_dim, self.kdim),
            "v_proj_weight": None if self._packed else (embed_dim, self.vdim),
            "in_proj_bias": (3 * embed_dim,) if bias else None,
            "bias_k": (1, 1, embed_dim) if add_bias_kv else None,
            "bias_v": (1, 1, embed_dim) if add_bias_kv else None,
        }
        for name, shape in shapes.items():
            self._register_posterior(name, shape, factory)
        self.out_proj = BayesLinear(embed_dim, embed_dim, bias=bias, prior=self.prior, estimator=self.estimator,
                                    mu_init_scale=mu_init_scale, rho_init=rho_init, device=device, dtype=dtype)
        self.reset_parameters()

    def _fan_in(self) -> int:
        return self.embed_dim

    def reset_parameters(self) -> None:
        """As torch's: Xavier-uniform projections, zero ``in_proj_bias`` and ``out_proj.bias``,
        Xavier-normal ``bias_k``/``bias_v``; mu ~ U(-s, s) for every weight with ``mu_init_scale``
        s; rho = rho_init."""
        s = self.mu_init_scale
        with torch.no_grad():
            for name in self.param_names():
                mu = self.mu(name)
                if s is not None:
                    mu.uniform_(-s, s)
                elif name == "in_proj_bias":
                    mu.zero_()
                elif name in ("bias_k", "bias_v"):
                    nn.init.xavier_normal_(mu)
                else:
                    nn.init.xavier_uniform_(mu)
                self.rho(name).fill_(self.rho_init)
            if s is None and self.out_proj.bias_mu is not None:
                self.out_proj.mu("bias").zero_()

    # -- conversion (:meth:`BayesModule.from_torch`) ----------------------------------------------
    _torch_option_names = ("embed_dim", "num_heads", "dropout", "add_zero_attn", "kdim", "vdim", "batch_first")

    @classmethod
    def _torch_options(cls, layer: Any) -> dict[str, Any]:
        packed = layer.kdim == layer.embed_dim and layer.vdim == layer.embed_dim
        if packed != layer._qkv_same_embed_dim or (layer.out_proj.bias is None) != (layer.in_proj_bias is None):
            raise UserError(f"{cls.__name__}.from_torch: {type(layer).__name__}'s projections are not laid out "
                            "as torch builds them")
        return dict(super()._torch_options(layer), bias=layer.in_proj_bias is not None,
                    add_bias_kv=layer.bias_k is not None)

    def _copy_means(self, layer: nn.Module) -> None:
        super()._copy_means(layer)  # the projections; out_proj is a BayesLinear of its own
        self.out_proj._copy_means(layer.get_submodule("out_proj"))

    # -- the deterministic view: torch's attribute names read the posterior means ---------------
    in_proj_weight = property(lambda self: self._mean("in_proj_weight"), doc="posterior mean (packed)")
    q_proj_weight = property(lambda self: self._mean("q_proj_weight"), doc="posterior mean (kdim/vdim)")
    k_proj_weight = property(lambda self: self._mean("k_proj_weight"), doc="posterior mean (kdim/vdim)")
    v_proj_weight = property(lambda self: self._mean("v_proj_weight"), doc="posterior mean (kdim/vdim)")
    in_proj_bias = property(lambda self: self._mean("in_proj_bias"), doc="posterior mean")
    bias_k = property(lambda self: self._mean("bias_k"), doc="posterior mean (add_bias_kv)")
    bias_v = property(lambda self: self._mean("bias_v"), doc="posterior mean (add_bias_kv)")

    # -- forward ----------------------------------------------------------------------------------
    # torch.nn.MultiheadAttention's signature, not BayesModule's generic forward(x) -> Tensor
    def forward(  # type: ignore[override]
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """As ``nn.MultiheadAttention.forward``: (output, attention weights or None). ``is_causal``
        without ``attn_mask`` builds the causal mask (torch raises)."""
        if query.is_nested or key.is_nested or value.is_nested:
            raise UserError(f"{_WHO} got a nested tensor (nn.TransformerEncoder's fast path with a "
                            "src_key_padding_mask): call bbb.nn.attention.no_fast_path(model) after converting")
        kf = fold_samples()
        if query.dim() == 2:  # unbatched (L, E): one example
            if kf is not None:
                raise UserError(f"{_WHO}: an unbatched (L, E) input has no batch dimension for a {kf}-sample "
                                "pass; give (B, L, E) inputs")
            kpm = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
            out, w = self._batched(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0), kpm, need_weights,
                                   attn_mask, average_attn_weights, is_causal, None, query is key and key is value)
            return out.squeeze(0), None if w is None else w.squeeze(0)
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise UserError(f"{_WHO}: expected batched 3-d or unbatched 2-d query, key and value, got shapes "
                            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        selfattn = query is key and key is value
        if not self.batch_first:  # work batch first: (N, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, w = self._batched(query, key, value, key_padding_mask, need_weights, attn_mask,
                               average_attn_weights, is_causal, kf, selfattn)
        return (out if self.batch_first else out.transpose(0, 1)), w

    def _batched(self, query: Tensor, key: Tensor, value: Tensor, kpm: Tensor | None, need_weights: bool,
                 attn_mask: Tensor | None, average: bool, is_causal: bool, kf: int | None,
                 selfattn: bool) -> tuple[Tensor, Tensor | None]:
        n, tgt, e = query.shape
        src, h = key.shape[1], self.num_heads
        if e != self.embed_dim or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise UserError(f"{_WHO}: expected query, key and value features {self.embed_dim}, {self.kdim}, "
                            f"{self.vdim}, got {e}, {key.shape[-1]}, {value.shape[-1]}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != n:
            raise UserError(f"{_WHO}: query, key and value disagree in batch or key/value length: "
                            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        kpm = _float_mask(kpm, query.dtype, "key_padding_mask")
        attn_mask = _float_mask(attn_mask, query.dtype, "attn_mask")
        if kf is not None:  # masks given for the B examples: the same for each of the k samples
            if kpm is not None and kpm.dim() == 2 and kpm.shape[0] * kf == n:
                kpm = kpm.repeat(kf, 1)
            if attn_mask is not None and attn_mask.dim() == 3 and attn_mask.shape[0] * kf == n * h:
                attn_mask = attn_mask.repeat(kf, 1, 1)
        if kpm is not None and tuple(kpm.shape) != (n, src):
            raise UserError(f"{_WHO}: key_padding_mask has shape {tuple(kpm.shape)}, expected {(n, src)}")
        if attn_mask is not None and tuple(attn_mask.shape) not in ((tgt, src), (n * h, tgt, src)):
            raise UserError(f"{_WHO}: attn_mask has shape {tuple(attn_mask.shape)}, expected {(tgt, src)} or "
                            f"{(n * h, tgt, src)}")
        if is_causal and attn_mask is None and (need_weights or kpm is not None or self.bias_k_mu is not None
                                                or self.add_zero_attn):
            attn_mask = torch.full((tgt, src), float("-inf"), dtype=query.dtype, device=query.device).triu_(1)
        causal = is_causal and attn_mask is None
        sampling = self.is_sampling()
        k = kf if (kf is not None and sampling and self.estimator is not Estimator.LOCAL) else None
        if sampling and self.estimator is not Estimator.REPARAM:
            self._warn_positions(max(tgt, src))
        q, kk, v = self._project(query, key, value, k, selfattn)
        if self.bias_k_mu is not None:
            kk = torch.cat([kk, self._extra("bias_k", n, k)], dim=1)
            v = torch.cat([v, self._extra("bias_v", n, k)], dim=1)
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            kpm = None if kpm is None else F.pad(kpm, (0, 1))
        q = q.view(n, tgt, h, self.head_dim).transpose(1, 2)  # (N, H, L, hd)
        kk = kk.view(n, -1, h, self.head_dim).transpose(1, 2)
        v = v.view(n, -1, h, self.head_dim).transpose(1, 2)
        if self.add_zero_attn:
            kk, v = F.pad(kk, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1))
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            kpm = None if kpm is None else F.pad(kpm, (0, 1))
        s = kk.shape[2]
        mask = None if attn_mask is None else attn_mask.view(n, h, tgt, s) if attn_mask.dim() == 3 else attn_mask
        if kpm is not None:
            mask = kpm.view(n, 1, 1, s) if mask is None else mask + kpm.view(n, 1, 1, s)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q * math.sqrt(1.0 / self.head_dim)) @ kk.transpose(-2, -1)
            if mask is not None:
                scores = scores + mask
            attn = torch.softmax(scores, dim=-1)
            if p > 0:
                attn = F.dropout(attn, p=p)
            out = attn @ v
            weights = attn.mean(dim=1) if average else attn
        else:
            out = F.scaled_dot_product_attention(q, kk, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        # (N*L, E) rows: one weight sample outside a fold, sample-major (dim 0) inside one
        out = self.out_proj(out.transpose(1, 2).reshape(n * tgt, e)).view(n, tgt, e)
        return out, weights

    def _param(self, name: str, k: int | None) -> tuple[Tensor | None, Tensor | None]:
        """What the projections need of one parameter: (mean, None) not sampling; (None, sample)
        for reparam; (mean, sigma) for local; (mean, sample - mean) for flipout."""
        if getattr(self, f"{name}_mu") is None:
            return None, None
        if not self.is_sampling():
            return self._mean(name), None
        if self.estimator is Estimator.LOCAL:
            return self._mean(name), self._masked_sigma(name)
        if self.estimator is Estimator.REPARAM:
            return None, self._masked(name, self._draw(name, k)[2])
        return self._mean(name), self._flipout_delta(name, k)

    def _linear(self, x: Tensor, w: tuple[Tensor | None, Tensor | None], b: tuple[Tensor | None, Tensor | None]
                ) -> Tensor:
        if w[1] is None:
            return F.linear(x, w[0], b[0])  # type: ignore[arg-type]
        if self.estimator is Estimator.REPARAM:
            return BF.linear(x, w[1], b[1])
        if self.estimator is Estimator.LOCAL:
            return BF.linear_local(x, w[0], w[1], b[0], b[1], generator=self._generator())  # type: ignore[arg-type]
        return BF.linear_flipout(x, w[0], w[1], b[0], b[1], generator=self._generator())  # type: ignore[arg-type]

    def _project(self, query: Tensor, key: Tensor, value: Tensor, k: int | None, selfattn: bool
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v (N, L, E) from (N, L, *) inputs; with k, one weight sample per block of N/k rows."""
        if k is not None:  # (k*B, L, *) -> (k, B, L, *): BF.linear's batched matmul, one sample each
            query = unfold(query, k, 0, _WHO)
            key = query if selfattn else unfold(key, k, 0, _WHO)
            value = query if selfattn else unfold(value, k, 0, _WHO)
        b = self._param("in_proj_bias", k)

        def part(t: tuple[Tensor | None, Tensor | None], i: int, dim: int) -> tuple[Tensor | None, Tensor | None]:
            return _rows(t[0], i, dim), _rows(t[1], i, dim)

        if self._packed:
            w = self._param("in_proj_weight", k)
            if selfattn:
                q, kk, v = self._linear(query, w, b).chunk(3, dim=-1)
            else:
                q, kk, v = (self._linear(x, part(w, i, -2), part(b, i, -1)) for i, x in enumerate((query, key, value)))
        else:
            ws = [self._param(f"{c}_proj_weight", k) for c in "qkv"]
            q, kk, v = (self._linear(x, ws[i], part(b, i, -1)) for i, x in enumerate((query, key, value)))
        if k is not None:
            q, kk, v = (t.flatten(0, 1) for t in (q, kk, v))
        return q, kk, v

    def _extra(self, name: str, n: int, k: int | None) -> Tensor:
        """``bias_k``/``bias_v`` for the N rows (N, 1, E): the mean, one sample, one per block of
        N/k rows, or (local) a fresh sample per row."""
        e = self.embed_dim
        if not self.is_sampling():
            return self._masked(name, self.mu(name)).reshape(1, 1, e).expand(n, 1, e)
        if self.estimator is Estimator.LOCAL:
            mu = self._masked(name, self.mu(name)).reshape(1, 1, e)
            sigma = self._masked_sigma(name).reshape(1, 1, e)
            eps = BF.standard_normal((n, 1, e), like=mu, generator=self._generator())
            return torch.addcmul(mu, sigma, eps)
        w = self._masked(name, self._draw(name, k)[2])
        if k is None:
            return w.reshape(1, 1, e).expand(n, 1, e)
        return w.reshape(k, 1, e).repeat_interleave(n // k, dim=0)

    def extra_repr(self) -> str:
        opts = [f"embed_dim={self.embed_dim}", f"num_heads={self.num_heads}"]
        if self.dropout:
            opts.append(f"dropout={self.dropout}")
        opts.append(f"bias={self.in_proj_bias_mu is not None}")
        if self.bias_k_mu is not None:
            opts.append("add_bias_kv=True")
        if self.add_zero_attn:
            opts.append("add_zero_attn=True")
        if not self._packed:
            opts.append(f"kdim={self.kdim}, vdim={self.vdim}")
        opts.append(f"batch_first={self.batch_first}")
        return ", ".join(opts) + ", " + super().extra_repr()
