"""Bayesian ``Conv1D`` of Hugging Face transformers (:class:`BayesHFConv1D`): GPT-2's (and GPT's,
ImageGPT's...) linear layer, ``y = x @ W + b`` with the weight stored ``(in, out)``.

The posterior keeps transformers' layout (``weight_mu`` is ``(nx, nf)``), so a deterministic GPT-2
``state_dict`` loads into the converted model unchanged (``weight`` becomes ``weight_mu``) and
code that reads ``layer.weight``, ``nf`` or ``nx`` sees what it expects. Nothing here imports
transformers: :func:`bbb.bayesianize` registers the conversion when transformers is loaded (a
model that holds a ``Conv1D`` has loaded it).
"""

from __future__ import annotations

import sys
from typing import Any, Self

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import Prior
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator, RelativeSigma, positions
from .layers import BayesLinear

__all__ = ["BayesHFConv1D", "transformers_conv1d"]


def transformers_conv1d() -> type[nn.Module] | None:
    """transformers' ``Conv1D`` type when transformers is already imported, else None (nothing
    is imported here)."""
    mod = sys.modules.get("transformers.pytorch_utils")
    t = getattr(mod, "Conv1D", None)
    return t if isinstance(t, type) and issubclass(t, nn.Module) else None


class BayesHFConv1D(BayesModule):
    """Bayesian ``transformers.pytorch_utils.Conv1D``: input (..., nx) -> (..., nf), ``x @ W + b``.

    Args:
        nf: output features (transformers' order: ``Conv1D(nf, nx)``).
        nx: input features.
        bias: learn a Bayesian bias (transformers' ``Conv1D`` always has one).
        prior: as :class:`~bbb.nn.BayesLinear`.
        estimator: ``"reparam"``, ``"local"`` or ``"flipout"``.
        mu_init_scale: mu ~ U(-b, b) with this b (default 1/sqrt(nx)).
        rho_init: initial rho (default -5).
        device: as ``torch.nn`` layers.
        dtype: as ``torch.nn`` layers.

    The weight posterior is ``(nx, nf)`` as transformers stores it; every estimator, pruning mask
    and k-sample pass works as for :class:`~bbb.nn.BayesLinear` (the same kernels on the
    transposed view). :func:`bbb.bayesianize` converts a GPT-2 into these.

    Example:
        >>> layer = BayesHFConv1D(96, 32)           # GPT-2's c_attn at n_embd=32
        >>> layer(torch.zeros(4, 7, 32)).shape
        torch.Size([4, 7, 96])
    """

    _param_names = ("weight", "bias")

    def __init__(
        self,
        nf: int,
        nx: int,
        bias: bool = True,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        if nf <= 0 or nx <= 0:
            raise UserError(f"layer sizes must be positive, got nf={nf}, nx={nx}")
        self.nf, self.nx = int(nf), int(nx)
        self._register_weight_and_bias((nx, nf), (nf,) if bias else None, device, dtype)

    def _fan_in(self) -> int:
        return self.nx

    # -- conversion: transformers' Conv1D, found without importing transformers -----------------
    @classmethod
    def from_torch(cls, layer: nn.Module, prior: Prior | dict | Any | None = None,
                   estimator: Estimator | str = Estimator.REPARAM, rho_init: float = DEFAULT_RHO_INIT,
                   from_weights: bool = True, sigma_init: RelativeSigma | None = None) -> Self:
        """A Bayesian copy of a transformers ``Conv1D`` (see :meth:`BayesModule.from_torch`)."""
        t = transformers_conv1d()
        if t is None or type(layer) is not t:
            raise UserError(f"{cls.__name__}.from_torch needs a transformers Conv1D, got {type(layer).__name__}")
        cls.converts = (t,)
        return super().from_torch(layer, prior, estimator, rho_init, from_weights, sigma_init)

    @classmethod
    def _torch_name(cls) -> str:
        return "transformers Conv1D"

    @classmethod
    def _torch_options(cls, layer: Any) -> dict[str, Any]:
        return {"nf": layer.nf, "nx": layer.nx, "bias": layer.bias is not None}

    # -- forward: BayesLinear's kernels on the transposed (out, in) view --------------------------
    _input_samples = BayesLinear._input_samples

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if not self.is_sampling():
            if k is None and self.bias is not None:  # transformers' own op: the mean equals Conv1D
                return torch.addmm(self.bias, x.reshape(-1, self.nx), self.weight).view(*x.shape[:-1], self.nf)
            return BF.linear(x, self.weight.mT, self.bias)
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            w = self._masked("weight", self._draw("weight", k)[2])
            b = self._masked("bias", self._draw("bias", k)[2]) if has_bias else None
            return BF.linear(x, w.mT, b)
        self._warn_positions(positions(x, k))
        if self.estimator is Estimator.LOCAL:
            b_sigma = self._masked_sigma("bias") if has_bias else None
            return BF.linear_local(x, self.weight.mT, self._masked_sigma("weight").mT, self.bias, b_sigma,
                                   generator=self._generator())
        dw = self._flipout_delta("weight", k)
        db = self._flipout_delta("bias", k) if has_bias else None
        return BF.linear_flipout(x, self.weight.mT, dw.mT, self.bias, db, generator=self._generator())

    def extra_repr(self) -> str:
        return f"nf={self.nf}, nx={self.nx}, bias={self.bias_mu is not None}, " + super().extra_repr()
