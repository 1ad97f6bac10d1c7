"""Bayesian embeddings: :class:`BayesEmbedding` (``torch.nn.Embedding``) and
:class:`BayesEmbeddingBag` (``torch.nn.EmbeddingBag``), with a diagonal Gaussian posterior over the
table (``weight_mu``/``weight_rho``; ``.weight`` reads the posterior mean, a deterministic
``state_dict`` loads).

Estimators: ``reparam`` samples the whole table (one sample per forward pass, or per block of B
rows inside a k-sample fold: sample j looks up in its own table, one ``F.embedding`` call into
the (k*V, D) stacked tables); ``local`` samples each looked-up row afresh, mu[i] + sigma[i] * eps
per lookup (a lookup reads one row, so this is local reparameterisation). ``flipout`` has no
meaning for a lookup (a one-line error), nor have ``max_norm`` (torch renormalises the weights in
place) and ``sparse`` gradients. The ``padding_idx`` row outputs exactly 0 and gets no gradient
from the data, as torch's zero-initialised row that never trains; nor does it count in the KL
(:meth:`BayesEmbedding.kl_rows`), unless a tied output layer reads the table.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .. import functional as BF
from ..distributions import Prior
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .samples import FOLD

__all__ = ["BayesEmbedding", "BayesEmbeddingBag"]


class BayesEmbedding(BayesModule):
    """Bayesian ``torch.nn.Embedding``: indices (*) -> (*, embedding_dim).

    ``num_embeddings``, ``embedding_dim``, ``padding_idx`` and ``scale_grad_by_freq`` as
    ``torch.nn.Embedding``; ``max_norm`` and ``sparse`` are accepted for the signature and, set,
    a one-line error; ``prior``, ``estimator`` (``"reparam"`` or ``"local"``) and ``rho_init`` as
    :class:`~bbb.nn.BayesLinear`; ``mu_init_scale``: mu ~ U(-s, s), None: N(0, 1) as torch (the
    ``padding_idx`` row 0).

    Inside a k-sample fold the indices' batch dimension is the fold's (1 for a sequence-first
    model) when they have at least that many dimensions + 1, else 0. Indices with one row there
    (a table shared by the batch: Hugging Face's ``position_ids`` of shape (1, T)) are looked up
    by each of the k sampled tables and broadcast over its B rows: the output has k*B rows.
    """

    _param_names = ("weight",)
    converts: ClassVar[tuple[type[nn.Embedding] | type[nn.EmbeddingBag], ...]] = (nn.Embedding,)
    estimators = frozenset({Estimator.REPARAM, Estimator.LOCAL})

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        name = type(self).__name__
        for what, v in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UserError(f"{name}: {what} must be an integer > 0, got {v!r}")
        if max_norm is not None:
            raise UserError(f"{name}: max_norm is not supported (torch renormalises the weights in place, "
                            "which a posterior cannot follow); drop it")
        if sparse:
            raise UserError(f"{name}: sparse=True is not supported (the posterior's gradients are dense)")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise UserError(f"{name}: padding_idx={padding_idx} is outside [-{num_embeddings}, {num_embeddings})")
            padding_idx = padding_idx % num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type, self.sparse = None, float(norm_type), False
        self.scale_grad_by_freq = bool(scale_grad_by_freq)
        self._register_posterior("weight", (num_embeddings, embedding_dim), {"device": device, "dtype": dtype})
        self.reset_parameters()

    def _fan_in(self) -> int:
        return self.embedding_dim

    def reset_parameters(self) -> None:
        mu = self.mu("weight")
        with torch.no_grad():
            if self.mu_init_scale is None:
                mu.normal_()
            else:
                mu.uniform_(-self.mu_init_scale, self.mu_init_scale)
            if self.padding_idx is not None:
                mu[self.padding_idx].zero_()
            self.rho("weight").fill_(self.rho_init)

    def kl_rows(self, name: str) -> Tensor | None:
        """Every row but ``padding_idx``'s: that row outputs 0 whatever its weights (no data informs its
        posterior), so it does not count in the KL, here or in :class:`~bbb.engine.Engine`. All rows when
        a tied output layer reads the table (:attr:`weight_tied`: the padding row's logit meets the data)."""
        if self.padding_idx is None or self.weight_tied:
            return None
        v, r, dev = self.num_embeddings, self.padding_idx, self.mu(name).device
        return torch.cat([torch.arange(r, device=dev), torch.arange(r + 1, v, device=dev)])  # (no host copy)

    # -- conversion (:meth:`BayesModule.from_torch`) ----------------------------------------------
    @classmethod
    def _torch_name(cls) -> str:
        return cls.converts[0].__name__

    def _copy_means(self, layer: nn.Module) -> None:
        """The torch layer's weights, warning when its ``padding_idx`` row is not zero: torch outputs
        that row, this layer 0 (a trained or loaded table changes its outputs at padding positions)."""
        super()._copy_means(layer)
        if self.padding_idx is None or isinstance(layer, nn.EmbeddingBag):  # (a bag leaves the row out, as torch)
            return
        row: Tensor = layer.get_parameter("weight").detach()[self.padding_idx]
        norm = float(row.float().norm())
        if norm > 0:
            warnings.warn(f"{type(self).__name__}.from_torch: the padding_idx={self.padding_idx} row of the "
                          f"{type(layer).__name__} has norm {norm:.4g}, which torch outputs and this layer "
                          "replaces by 0 (its outputs at padding positions change); zero the row first to "
                          "keep them", UserWarning, stacklevel=3)

    _torch_option_names: ClassVar[tuple[str, ...]] = ("num_embeddings", "embedding_dim", "padding_idx", "max_norm",
                                                      "norm_type", "scale_grad_by_freq", "sparse")

    def _local_rows(self, idx: Tensor, sample: Tensor | None = None, k: int = 1) -> Tensor:
        """mu[idx] + sigma[idx] * eps, fresh noise per lookup. ``sample``: the sample (0..k-1) of each lookup
        inside a k-sample pass, for ``scale_grad_by_freq`` (torch counts a row's lookups over the whole
        batch: over the k copies its gradient would be divided by k), which then counts per sample."""
        self._warn_positions(idx[0].numel() if idx.dim() >= 2 else 1)  # (a token twice: two draws)
        table, sigma_table = self.weight, self._masked_sigma("weight")
        if sample is not None and self.scale_grad_by_freq and k > 1:  # sample j's lookups in rows j*V..
            v = self.num_embeddings
            idx = torch.where((idx >= 0) & (idx < v), idx + sample * v, k * v)
            table, sigma_table = table.repeat(k, 1), sigma_table.repeat(k, 1)
        mu = F.embedding(idx, table, scale_grad_by_freq=self.scale_grad_by_freq)
        sigma = F.embedding(idx, sigma_table, scale_grad_by_freq=self.scale_grad_by_freq)
        eps = BF.standard_normal(mu.shape, like=mu, generator=self._generator())
        return torch.addcmul(mu, sigma, eps)

    def _stacked(self, idx: Tensor, sample: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """The indices into k stacked weight samples (sample j's rows at j*V..) and those (k*V, D) weights."""
        v = self.num_embeddings
        # an index outside [0, V) stays outside [0, k*V) (torch's lookup then raises, as for one
        # table) rather than reading another sample's rows; no host sync, no graph break
        sidx = torch.where((idx >= 0) & (idx < v), idx + sample * v, k * v)
        w = self._masked("weight", self._draw("weight", k)[2])
        return sidx, w.reshape(k * v, self.embedding_dim)

    def _forward_folded(self, idx: Tensor, k: int, d: int) -> Tensor:
        """Indices with k*B rows along ``d`` (sample j's on rows j*B..), each looked up in its sample's table."""
        if self.estimator is Estimator.LOCAL:  # fresh noise per lookup
            return self._local_rows(idx, self._sample_of(idx, k, d) if self.scale_grad_by_freq else None, k)
        if idx.dim() == 0 or idx.shape[d] % k:
            raise UserError(f"{type(self).__name__}: inside a {k}-sample pass (the samples folded into the batch "
                            f"dimension) it got indices of shape {tuple(idx.shape)}, not k*B rows along dim {d} "
                            "(nor 1 row, a table shared by the batch); keep the batch dimension (for a "
                            "sequence-first model batch_dim=1)")
        sample = self._sample_of(idx, k, d)
        assert sample is not None
        sidx, w = self._stacked(idx, sample, k)
        return F.embedding(sidx, w, scale_grad_by_freq=self.scale_grad_by_freq)

    @staticmethod
    def _sample_of(idx: Tensor, k: int, d: int) -> Tensor | None:
        """The sample (0..k-1) of each index, broadcastable to ``idx``: sample j's on rows j*B.. of ``d``
        (None where ``idx`` has no k*B rows there)."""
        if idx.dim() <= d or idx.shape[d] % k:
            return None
        shape = [1] * idx.dim()
        shape[d] = idx.shape[d]
        return torch.arange(k, device=idx.device).repeat_interleave(idx.shape[d] // k).view(shape)

    def forward(self, input: Tensor) -> Tensor:
        idx = input
        fold = FOLD.get()
        if BF.is_expanded_samples(idx) and self.is_sampling():
            raise UserError(f"{type(self).__name__} got indices with a leading sample dimension (shape "
                            f"{tuple(idx.shape)}, expand_samples): an embedding reads every dimension as the "
                            "batch's, so the k copies would share one weight sample and a mean over dim 1 would "
                            "average the batch; use forward_samples(net, x, k) or predict(net, x, k)")
        d = 0 if fold is None else fold.batch_dim(idx, fold.dim if idx.dim() >= fold.dim + 1 else 0, shared=True)
        if fold is not None and fold.k > 1 and self.is_sampling() and fold.shared(idx, d):
            # indices shared by the batch (positions (1, T)): each of the k samples looks them up
            # in its own table once, broadcast over its B rows
            out = fold.broadcast(self._forward_folded(idx.expand(*idx.shape[:d], fold.k, *idx.shape[d + 1:]),
                                                      fold.k, d).unsqueeze(d + 1).movedim(d, 0), d)
        elif not self.is_sampling():
            out = F.embedding(idx, self.weight, scale_grad_by_freq=self.scale_grad_by_freq)
        elif self.estimator is Estimator.LOCAL:  # fresh noise per lookup: nothing to unfold in a fold
            out = self._local_rows(idx) if fold is None or fold.k == 1 else self._forward_folded(idx, fold.k, d)
        elif fold is None or fold.k == 1:
            w = self._masked("weight", self._draw("weight", None)[2])
            out = F.embedding(idx, w, scale_grad_by_freq=self.scale_grad_by_freq)
        else:
            out = self._forward_folded(idx, fold.k, d)
        if self.padding_idx is not None:
            out = out.masked_fill((idx == self.padding_idx).unsqueeze(-1), 0.0)
        return out

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        return s + ", " + super().extra_repr()


class BayesEmbeddingBag(BayesEmbedding):
    """Bayesian ``torch.nn.EmbeddingBag``: sums, means or maxima of bags of embeddings.

    Input (B, L) bags of equal length, or 1-d indices with ``offsets``; ``per_sample_weights``,
    ``include_last_offset`` and ``padding_idx`` (excluded from the bags) as torch. Inside a k-sample
    fold the bags are k*B (sample j: bags j*B..j*B+B-1). ``local`` samples each looked-up row afresh
    before the bag is reduced (any mode).
    """

    converts = (nn.EmbeddingBag,)
    _torch_option_names = (*BayesEmbedding._torch_option_names, "mode", "include_last_offset")

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        **kwargs: Any,
    ) -> None:
        if mode not in ("sum", "mean", "max"):
            raise UserError(f"{type(self).__name__}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq,
                         sparse, **kwargs)
        self.mode = mode
        self.include_last_offset = bool(include_last_offset)

    def _bag(self, idx: Tensor, w: Tensor, offsets: Tensor | None, psw: Tensor | None, padding_idx: int | None,
             scale: bool) -> Tensor:
        return F.embedding_bag(idx, w, offsets, None, self.norm_type, scale, self.mode, False, psw,
                               self.include_last_offset, padding_idx)

    def _bag_samples(self, idx: Tensor, offsets: Tensor | None, k: int) -> Tensor:
        """The sample (0..k-1) of each index: that of its bag, bags j*B..j*B+B-1 for sample j."""
        if idx.dim() == 2:
            bags = idx.shape[0]
            bag = torch.arange(bags, device=idx.device).unsqueeze(1)
        elif idx.dim() == 1 and offsets is not None:
            bags = offsets.shape[0] - (1 if self.include_last_offset else 0)
            pos = torch.arange(idx.shape[0], device=idx.device)
            bag = torch.bucketize(pos, offsets[:bags].to(pos.dtype), right=True) - 1
        else:
            raise UserError(f"{type(self).__name__}: expected 2-d bags or 1-d indices with offsets, "
                            f"got shape {tuple(idx.shape)}")
        if bags % k:
            raise UserError(f"{type(self).__name__}: inside a {k}-sample pass (the samples folded into the batch "
                            f"dimension) it got {bags} bags, not a multiple of {k}; keep the batch dimension")
        return bag // (bags // k)

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:
        fold = FOLD.get()
        p, scale = self.padding_idx, self.scale_grad_by_freq
        if fold is not None and fold.k > 1 and offsets is not None and fold.is_input(offsets):
            raise UserError(f"{type(self).__name__}: inside a {fold.k}-sample pass (every input tensor with B rows "
                            "repeated k times along the batch dimension) it got offsets that are an input of the "
                            "model's, which cannot describe the k*B bags (nor 1-d indices rows of a batch); give the "
                            "model 2-d (B, L) bags padded with padding_idx, or build the indices and offsets in its "
                            "forward from batch-shaped inputs")
        if not self.is_sampling():
            return self._bag(input, self.weight, offsets, per_sample_weights, p, scale)
        if self.estimator is Estimator.LOCAL:  # sampled rows per lookup, then the bag over them
            rows = self._local_rows(input).reshape(-1, self.embedding_dim)
            pos = torch.arange(rows.shape[0], device=input.device).view(input.shape)
            pad = None
            if p is not None:  # padding entries point at an extra row that the bag excludes
                pad = rows.shape[0]
                rows = torch.cat([rows, rows.new_zeros(1, self.embedding_dim)])
                pos = pos.masked_fill(input == p, pad)
            return self._bag(pos, rows, offsets, per_sample_weights, pad, False)
        if fold is None or fold.k == 1:
            w = self._masked("weight", self._draw("weight", None)[2])
            return self._bag(input, w, offsets, per_sample_weights, p, scale)
        sidx, w = self._stacked(input, self._bag_samples(input, offsets, fold.k), fold.k)
        if p is not None:  # padding entries keep index p (sample 0's row), which the bag excludes
            sidx = sidx.masked_fill(input == p, p)
        return self._bag(sidx, w, offsets, per_sample_weights, p, scale)

    def extra_repr(self) -> str:
        return super().extra_repr().replace(", prior=", f", mode={self.mode}, prior=", 1)
