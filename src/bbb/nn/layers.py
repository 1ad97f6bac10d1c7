"""The Bayesian layers: :class:`BayesLinear`, :class:`BayesConv2d`, :class:`BayesConv1d`, and
:class:`PerSample`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import Prior, softplus
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .sampling import PROVIDER

__all__ = ["BayesLinear", "BayesConv1d", "BayesConv2d", "PerSample"]


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
    def from_linear(
        cls,
        layer: nn.Linear,
        prior: Prior | dict | Any | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        rho_init: float = DEFAULT_RHO_INIT,
        from_weights: bool = True,
    ) -> BayesLinear:
        """A Bayesian copy of ``layer`` (same sizes, device and dtype).

        ``from_weights=True`` starts the posterior mean at the layer's trained weights (a warm
        start); ``False`` draws it afresh as a new layer would. sigma starts at softplus(rho_init).
        """
        if not isinstance(layer, nn.Linear):
            raise UserError(f"from_linear needs an nn.Linear, got {type(layer).__name__}")
        if hasattr(layer, "parametrizations"):
            raise UserError(f"{type(layer).__name__} carries a parametrization (weight norm, spectral norm...) "
                            "that a Bayesian copy would lose; remove it or skip the layer")
        new = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, prior=prior,
                  estimator=estimator, rho_init=rho_init, device=layer.weight.device, dtype=layer.weight.dtype)
        if from_weights:
            new._copy_means(layer)
        return new

    from_torch = from_linear  # type: ignore[assignment]

    def _input_samples(self, x: Tensor) -> int | None:
        return x.shape[0] if x.dim() >= 3 else None

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if not self.is_sampling():
            return BF.linear(x, self._mean("weight"), self._mean("bias"))
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            provider = PROVIDER.get()
            y = None if (provider is None or k is not None) else provider.linear(self, x)
            if y is not None:
                return y
            _, _, w = self._draw("weight", k)
            b = self._draw("bias", k)[2] if has_bias else None
            return BF.linear(x, self._masked("weight", w), self._masked("bias", b))
        if self.estimator is Estimator.LOCAL:
            w_sigma = self._masked("weight", softplus(self.weight_rho))
            b_sigma = self._masked("bias", softplus(self.bias_rho)) if has_bias else None
            return BF.linear_local(x, self._mean("weight"), w_sigma, self._mean("bias"), b_sigma,
                                   generator=self._generator())
        # flipout: the perturbation delta = w - mu = sigma * eps
        mw, _, w = self._draw("weight", k)
        dw = self._masked("weight", w - mw)
        db = None
        if has_bias:
            mb, _, b = self._draw("bias", k)
            db = self._masked("bias", b - mb)
        return BF.linear_flipout(x, self._mean("weight"), dw, self._mean("bias"), db,
                                 generator=self._generator())

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias_mu is not None}, " + super().extra_repr())


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(i) for i in v)
    if len(t) != 2:
        raise UserError(f"expected an int or a pair, got {v!r}")
    return t  # type: ignore[return-value]


class BayesConv2d(BayesModule):
    """Bayesian 2-d convolution with the same options as :class:`BayesLinear`.

    Shape: (B, C, H, W) -> (B, O, H', W'); (k, B, C, H, W) -> (k, B, O, H', W') with k weight
    samples. Inside :func:`forward_samples` (the ELBO, :func:`~bbb.uncertainty.predict`) the k
    samples travel folded into the batch dimension, so pooling, ``Flatten`` and normalisation
    layers need no wrapping.
    """

    _param_names = ("weight", "bias")
    _batched_rank = 4
    _spatial = 2
    converts = (nn.Conv2d,)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        if in_channels <= 0 or out_channels <= 0 or groups <= 0:
            raise UserError("in_channels, out_channels and groups must be positive")
        if in_channels % groups or out_channels % groups:
            raise UserError(f"in_channels and out_channels must be divisible by groups={groups}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        if self._spatial == 2:
            self.kernel_size = _pair(kernel_size)
            self.stride, self.dilation = _pair(stride), _pair(dilation)
        else:
            self.kernel_size = _single(kernel_size)
            self.stride, self.dilation = _single(stride), _single(dilation)
        self.padding: Any
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise UserError(f"padding must be a number, a tuple, 'same' or 'valid', got {padding!r}")
            self.padding = padding
        else:
            self.padding = _pair(padding) if self._spatial == 2 else _single(padding)
        self.groups = int(groups)
        self._register_weight_and_bias((out_channels, in_channels // groups, *self.kernel_size),
                                       (out_channels,) if bias else None, device, dtype)

    def _fan_in(self) -> int:
        return (self.in_channels // self.groups) * math.prod(self.kernel_size)

    @classmethod
    def from_conv(
        cls,
        layer: nn.Conv1d | nn.Conv2d,
        prior: Prior | dict | Any | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        rho_init: float = DEFAULT_RHO_INIT,
        from_weights: bool = True,
    ) -> BayesConv2d:
        """A Bayesian copy of ``layer`` (an ``nn.Conv2d`` for :class:`BayesConv2d`, an
        ``nn.Conv1d`` for :class:`BayesConv1d`), as :meth:`BayesLinear.from_linear`."""
        want = nn.Conv2d if cls._spatial == 2 else nn.Conv1d
        if type(layer) is not want:
            raise UserError(f"{cls.__name__}.from_conv needs an {want.__name__}, got {type(layer).__name__}")
        if layer.padding_mode != "zeros":
            raise UserError(f"{cls.__name__}: padding_mode={layer.padding_mode!r} is not supported (only 'zeros')")
        new = cls(layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                  padding=layer.padding, dilation=layer.dilation, groups=layer.groups,
                  bias=layer.bias is not None, prior=prior, estimator=estimator, rho_init=rho_init,
                  device=layer.weight.device, dtype=layer.weight.dtype)
        if from_weights:
            new._copy_means(layer)
        return new

    from_torch = from_conv  # type: ignore[assignment]

    def _conv_args(self) -> tuple:
        if isinstance(self.padding, str):  # "same" / "valid"
            if self._spatial == 2:
                return (self.stride, self.padding, self.dilation, self.groups)
            return ((1, *self.stride), self.padding, (1, *self.dilation), self.groups)
        if self._spatial == 2:
            return (self.stride, self.padding, self.dilation, self.groups)
        return ((1, *self.stride), (0, *self.padding), (1, *self.dilation), self.groups)

    # 1-d convolutions run as 2-d ones of height 1 (weights (O, C, 1, kw), inputs (B, C, 1, L))
    def _w2d(self, t: Tensor | None) -> Tensor | None:
        return t if (t is None or self._spatial == 2 or t.dim() == 1) else t.unsqueeze(-2)

    def _input_samples(self, x: Tensor) -> int | None:
        return x.shape[0] if x.dim() == self._batched_rank + 1 else None

    def _fold_dim(self, x: Tensor, fold_dim: int) -> int:
        return 0  # (B, C, ...) whatever the model's layout

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if self._spatial == 1:
            return self._forward2d(x.unsqueeze(-2), k).squeeze(-2)
        return self._forward2d(x, k)

    def _forward2d(self, x: Tensor, k: int | None) -> Tensor:
        w2 = self._w2d
        if not self.is_sampling():
            return BF.conv2d(x, w2(self._mean("weight")), self._mean("bias"), *self._conv_args())
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            w = self._draw("weight", k)[2]
            b = self._draw("bias", k)[2] if has_bias else None
            return BF.conv2d(x, w2(self._masked("weight", w)), self._masked("bias", b), *self._conv_args())
        if self.estimator is Estimator.LOCAL:
            w_sigma = self._masked("weight", softplus(self.weight_rho))
            b_sigma = self._masked("bias", softplus(self.bias_rho)) if has_bias else None
            return BF.conv2d_local(x, w2(self._mean("weight")), w2(w_sigma), self._mean("bias"), b_sigma,
                                   *self._conv_args(), generator=self._generator())
        mw, _, w = self._draw("weight", k)
        dw = self._masked("weight", w - mw)
        db = None
        if has_bias:
            mb, _, b = self._draw("bias", k)
            db = self._masked("bias", b - mb)
        return BF.conv2d_flipout(x, w2(self._mean("weight")), w2(dw), self._mean("bias"), db,
                                 *self._conv_args(), generator=self._generator())

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, " + super().extra_repr())


def _single(v: int | Sequence[int]) -> tuple[int]:
    if isinstance(v, int):
        return (v,)
    t = tuple(int(i) for i in v)
    if len(t) != 1:
        raise UserError(f"expected an int or a 1-tuple, got {v!r}")
    return t  # type: ignore[return-value]


class BayesConv1d(BayesConv2d):
    """Bayesian 1-d convolution, as ``torch.nn.Conv1d``, with the options of :class:`BayesLinear`.

    Shape: (B, C, L) -> (B, O, L'); (k, B, C, L) -> (k, B, O, L') with k weight samples.
    Parameters ``weight_mu``/``weight_rho`` are (O, C/groups, kernel_size), as ``nn.Conv1d``'s weight.
    """

    _batched_rank = 3
    _spatial = 1
    converts = (nn.Conv1d,)


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

