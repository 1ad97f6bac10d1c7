"""The Bayesian layers: :class:`BayesLinear` and :class:`PerSample`; the convolutions live in
:mod:`bbb.nn.conv` (re-exported here: ``from bbb.nn.layers import BayesConv2d`` still works)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import Prior
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator, positions
from .conv import BayesConv1d as BayesConv1d
from .conv import BayesConv2d as BayesConv2d
from .conv import BayesConv3d as BayesConv3d
from .conv import BayesConvTranspose1d as BayesConvTranspose1d
from .conv import BayesConvTranspose2d as BayesConvTranspose2d
from .conv import BayesConvTranspose3d as BayesConvTranspose3d
from .samples import LEADING, PROVIDER

__all__ = ["BayesLinear", "PerSample"]


class BayesLinear(BayesModule):
    """Bayesian fully connected layer.

    Args:
        in_features: input size, as in ``torch.nn.Linear``.
        out_features: output size.
        bias: learn a Bayesian bias.
        prior: a :class:`~bbb.distributions.Prior` or a ``torch.distributions`` distribution
            (default: :func:`default_prior`, the scale mixture pi=1/4, sigma1=1, sigma2=e^-7).
        estimator: ``"reparam"`` (the paper), ``"local"`` or ``"flipout"``.
        mu_init_scale: mu ~ U(-b, b) with this b (default 1/sqrt(in_features)).
        rho_init: initial rho (default -5, sigma ~ 6.7e-3).

    Shape:
        input (B, in) -> (B, out), one weight sample (or the mean); input (k, *, in) -> (k, *, out),
        k independent weight samples, one per leading slice.

    Example:
        >>> layer = BayesLinear(784, 400, estimator="local")
        >>> layer(torch.zeros(128, 784)).shape
        torch.Size([128, 400])
    """

    _param_names = ("weight", "bias")
    # torch's own Linear subclass inside nn.MultiheadAttention behaves as a Linear
    converts = (nn.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        if in_features <= 0 or out_features <= 0:
            raise UserError(
                f"layer sizes must be positive, got in_features={in_features}, out_features={out_features}"
            )
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self._register_weight_and_bias((out_features, in_features), (out_features,) if bias else None, device, dtype)

    def _fan_in(self) -> int:
        return self.in_features

    @classmethod
    def _converts_layer(cls, layer: nn.Module) -> bool:
        return isinstance(layer, nn.Linear)  # any nn.Linear, subclasses included

    _torch_option_names = ("in_features", "out_features")

    @classmethod
    def _torch_options(cls, layer: Any) -> dict[str, Any]:
        return dict(super()._torch_options(layer), bias=layer.bias is not None)

    #: :meth:`from_torch` under the name of earlier versions
    from_linear = vars(BayesModule)["from_torch"]

    def _input_samples(self, x: Tensor) -> int | None:
        if x.dim() < 3:
            return None
        if LEADING.get():
            return x.shape[0]
        if BF.is_expanded_samples(x) and self.is_sampling():  # expand_samples(x, k) outside the block
            raise UserError(f"{type(self).__name__} got an input with a leading sample dimension "
                            f"(shape {tuple(x.shape)}, expand_samples) outside bbb.nn.leading_samples(): a "
                            "linear layer reads leading dims as nn.Linear does, so its k rows would share one "
                            "weight sample; use forward_samples(net, x, k) (any network) or open "
                            "`with bbb.nn.leading_samples():` around a stack of Bayesian linear layers")
        return None

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if not self.is_sampling():
            return BF.linear(x, self.weight, self.bias)
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            provider = PROVIDER.get()
            y = None if (provider is None or k is not None) else provider.linear(self, x)
            if y is not None:
                return y
            _, _, w = self._draw("weight", k)
            b = self._draw("bias", k)[2] if has_bias else None
            return BF.linear(x, self._masked("weight", w), self._masked("bias", b))
        self._warn_positions(positions(x, k))
        if self.estimator is Estimator.LOCAL:
            w_sigma = self._masked_sigma("weight")
            b_sigma = self._masked_sigma("bias") if has_bias else None
            return BF.linear_local(x, self.weight, w_sigma, self.bias, b_sigma,
                                   generator=self._generator())
        # flipout: the perturbation delta = w - mu = sigma * eps
        dw = self._flipout_delta("weight", k)
        db = self._flipout_delta("bias", k) if has_bias else None
        return BF.linear_flipout(x, self.weight, dw, self.bias, db,
                                 generator=self._generator())

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias_mu is not None}, " + super().extra_repr())


class PerSample(nn.Module):
    """Apply a 4-d-only module (pooling, batch norm...) to (k, B, ...) by folding k into the batch."""

    def __init__(self, module: nn.Module, sample_rank: int = 5) -> None:
        super().__init__()
        self.module = module
        self.sample_rank = sample_rank

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != self.sample_rank:
            return self.module(x)
        k, b = x.shape[:2]
        y = self.module(x.reshape(k * b, *x.shape[2:]))
        return y.view(k, b, *y.shape[1:])

