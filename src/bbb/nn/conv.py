"""Bayesian convolutions, one for every ``torch.nn`` convolution: :class:`BayesConv1d`,
:class:`BayesConv2d`, :class:`BayesConv3d`, :class:`BayesConvTranspose1d`,
:class:`BayesConvTranspose2d` and :class:`BayesConvTranspose3d`.

They share one implementation (:class:`_BayesConvNd`, parametrised by the number of spatial
dimensions and by transposed or not) over the N-d functions of :mod:`bbb.functional`
(:func:`~bbb.functional.conv`, :func:`~bbb.functional.conv_local`,
:func:`~bbb.functional.conv_flipout`), with the options of the ``torch.nn`` layers: ``stride``,
``padding`` (numbers, or ``"same"``/``"valid"`` for plain convolutions), ``dilation``, ``groups``
(depthwise included), ``bias``, ``padding_mode`` (``"zeros"``, ``"reflect"``, ``"replicate"``,
``"circular"``; transposed convolutions take ``"zeros"`` only, as in torch) and, for transposed
ones, ``output_padding`` (and ``output_size`` in ``forward``). Weights have torch's shapes:
``(out, in/groups, *kernel)``, transposed ``(in, out/groups, *kernel)``.

Every estimator (``reparam``, ``local``, ``flipout``) is defined for every class. Inputs are
``(B, C, *spatial)``, unbatched ``(C, *spatial)``, or ``(k, B, C, *spatial)`` with k weight samples
(one batched call); inside :func:`~bbb.nn.forward_samples` the k samples travel folded into the
batch dimension, so pooling, ``Flatten`` and normalisation layers need no wrapping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import Prior
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator

__all__ = [
    "BayesConv1d",
    "BayesConv2d",
    "BayesConv3d",
    "BayesConvTranspose1d",
    "BayesConvTranspose2d",
    "BayesConvTranspose3d",
]

_Size = int | Sequence[int]


def _tuple(v: Any, n: int, what: str, minimum: int) -> tuple[int, ...]:
    """``v`` (an int or an n-sequence of ints, each >= ``minimum``) as an n-tuple."""
    if isinstance(v, bool):
        raise UserError(f"{what} must be an int or a {n}-tuple of ints, got {v!r}")
    if isinstance(v, int):
        t: tuple[int, ...] = (v,) * n
    else:
        try:
            t = tuple(int(i) for i in v)
        except (TypeError, ValueError):
            raise UserError(f"{what} must be an int or a {n}-tuple of ints, got {v!r}") from None
        if len(t) != n:
            raise UserError(f"{what} must be an int or a {n}-tuple of ints, got {v!r}")
    if any(i < minimum for i in t):
        raise UserError(f"{what} must be >= {minimum}, got {v!r}")
    return t


class _BayesConvNd(BayesModule):
    """The shared implementation of the Bayesian (transposed) convolutions."""

    _param_names = ("weight", "bias")
    #: number of spatial dimensions
    _nd: ClassVar[int] = 2
    #: transposed convolution
    _transposed: ClassVar[bool] = False
    #: the output padding of the current forward when torch's ``output_size`` was given (transposed)
    _output_padding_override: tuple[int, ...] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._batched_rank = cls._nd + 2

    # torch.nn.Conv{1,2,3}d's arguments, in their order (the transposed ones: theirs)
    def __init__(self, in_channels: int, out_channels: int, kernel_size: _Size, stride: _Size = 1,
                 padding: _Size | str = 0, dilation: _Size = 1, groups: int = 1, bias: bool = True,
                 prior: Prior | dict | None = None, estimator: Estimator | str = Estimator.REPARAM,
                 mu_init_scale: float | None = None, rho_init: float = DEFAULT_RHO_INIT,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 padding_mode: str = "zeros") -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, device, dtype,
                    padding_mode, 0)

    def _setup(self, in_channels: int, out_channels: int, kernel_size: _Size, stride: _Size, padding: _Size | str,
               dilation: _Size, groups: int, bias: bool, device: torch.device | str | None,
               dtype: torch.dtype | None, padding_mode: str, output_padding: _Size) -> None:
        """The constructors' body: check and keep the options, register the weights."""
        name, nd = type(self).__name__, self._nd
        for what, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UserError(f"{name}: {what} must be a positive int, got {v!r}")
        if in_channels % groups or out_channels % groups:
            raise UserError(f"{name}: in_channels={in_channels} and out_channels={out_channels} must be "
                            f"divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), int(groups)
        self.kernel_size = _tuple(kernel_size, nd, "kernel_size", 1)
        self.stride = _tuple(stride, nd, "stride", 1)
        self.dilation = _tuple(dilation, nd, "dilation", 1)
        self.padding: tuple[int, ...] | str
        if isinstance(padding, str):
            if self._transposed:
                raise UserError(f"{name}: padding must be a number or a tuple, got {padding!r} "
                                "(transposed convolutions take no 'same'/'valid')")
            if padding not in ("same", "valid"):
                raise UserError(f"{name}: padding must be a number, a tuple, 'same' or 'valid', got {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise UserError(f"{name}: padding='same' needs stride 1, got stride={self.stride}")
            self.padding = padding
        else:
            self.padding = _tuple(padding, nd, "padding", 0)
        if padding_mode not in BF.PADDING_MODES:
            raise UserError(f"{name}: padding_mode must be one of {', '.join(BF.PADDING_MODES)}, "
                            f"got {padding_mode!r}")
        if self._transposed and padding_mode != "zeros":
            raise UserError(f"{name}: padding_mode={padding_mode!r} is not supported (transposed convolutions "
                            "only support 'zeros', as in torch)")
        self.padding_mode = padding_mode
        self.output_padding = _tuple(output_padding, nd, "output_padding", 0)
        if not self._transposed and any(self.output_padding):
            raise UserError(f"{name}: output_padding is for transposed convolutions only")
        if any(op >= max(s, d) for op, s, d in zip(self.output_padding, self.stride, self.dilation)):
            raise UserError(f"{name}: output_padding={self.output_padding} must be smaller than either "
                            f"stride={self.stride} or dilation={self.dilation}")
        if self._transposed:
            weight = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
        else:
            weight = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        self._register_weight_and_bias(weight, (self.out_channels,) if bias else None, device, dtype)

    def _fan_in(self) -> int:
        # torch's default init: fan_in = weight.size(1) * receptive field
        return int(self.mu("weight").shape[1]) * math.prod(self.kernel_size)

    # -- conversion (:meth:`BayesModule.from_torch`) ----------------------------------------------
    _torch_option_names: ClassVar[tuple[str, ...]] = ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                                                      "dilation", "groups", "padding_mode")

    @classmethod
    def _torch_options(cls, layer: Any) -> dict[str, Any]:
        return dict(super()._torch_options(layer), bias=layer.bias is not None)

    #: :meth:`from_torch` under the name of earlier versions
    from_conv = vars(BayesModule)["from_torch"]

    # -- forward ---------------------------------------------------------------------------------
    def _input_samples(self, x: Tensor) -> int | None:
        return x.shape[0] if x.dim() == self._nd + 3 else None

    def _fold_dim(self, x: Tensor, fold_dim: int) -> int:
        return 0  # (B, C, ...) whatever the model's layout

    def _check_input(self, x: Tensor, k: int | None) -> None:
        nd, c = self._nd, self.in_channels
        spatial = ("L",) if nd == 1 else ("H", "W") if nd == 2 else ("D", "H", "W")
        ok = x.dim() == nd + 2 or (x.dim() == nd + 3 and k is not None)
        if not ok or x.shape[-nd - 1] != c:
            shape = ", ".join(("B", str(c), *spatial))
            raise UserError(f"{type(self).__name__}: expected an input ({shape}), unbatched or with a leading "
                            f"sample dimension k, got shape {tuple(x.shape)}")

    def _options(self) -> dict[str, Any]:
        op = self._output_padding_override
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups,
                "nd": self._nd, "transposed": self._transposed, "padding_mode": self.padding_mode,
                "output_padding": self.output_padding if op is None else op}

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        if k is None and x.dim() == self._nd + 1:  # unbatched (C, *spatial), as torch takes it
            if x.shape[0] == self.in_channels:
                return self._forward(x.unsqueeze(0), None).squeeze(0)
        self._check_input(x, k)
        opts = self._options()
        if not self.is_sampling():
            return BF.conv(x, self.weight, self.bias, **opts)
        has_bias = self.bias_mu is not None
        if self.estimator is Estimator.REPARAM:
            w = self._draw("weight", k)[2]
            b = self._draw("bias", k)[2] if has_bias else None
            return BF.conv(x, self._masked("weight", w), self._masked("bias", b), **opts)
        if self.estimator is Estimator.LOCAL:
            w_sigma = self._masked_sigma("weight")
            b_sigma = self._masked_sigma("bias") if has_bias else None
            num = k if (k is not None and x.dim() == self._nd + 2) else None
            y = BF.conv_local(x, self.weight, w_sigma, self.bias, b_sigma, **opts,
                              num_samples=num, generator=self._generator())
            self._warn_positions(math.prod(y.shape[-self._nd:]))  # (flipout's signs are per example)
            return y
        # flipout: the perturbation delta = w - mu = sigma * eps
        dw = self._flipout_delta("weight", k)
        db = self._flipout_delta("bias", k) if has_bias else None
        return BF.conv_flipout(x, self.weight, dw, self.bias, db, **opts,
                               generator=self._generator())

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding if isinstance(self.padding, tuple) else repr(self.padding)}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if any(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias_mu is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode!r}"
        return s + ", " + super().extra_repr()


class _BayesConvTransposeNd(_BayesConvNd):
    """Transposed convolutions: ``forward`` also takes torch's ``output_size``."""

    _transposed = True
    _torch_option_names = (*_BayesConvNd._torch_option_names, "output_padding")

    # torch.nn.ConvTranspose{1,2,3}d's arguments, in their order
    def __init__(self, in_channels: int, out_channels: int, kernel_size: _Size, stride: _Size = 1,
                 padding: _Size = 0, output_padding: _Size = 0, groups: int = 1, bias: bool = True,
                 dilation: _Size = 1, prior: Prior | dict | None = None,
                 estimator: Estimator | str = Estimator.REPARAM, mu_init_scale: float | None = None,
                 rho_init: float = DEFAULT_RHO_INIT, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, *, padding_mode: str = "zeros") -> None:
        BayesModule.__init__(self, prior, estimator, mu_init_scale, rho_init)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, device, dtype,
                    padding_mode, output_padding)

    def forward(self, x: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        if output_size is None:
            return super().forward(x)
        self._output_padding_override = self._output_padding_for(x, output_size)
        try:
            return super().forward(x)
        finally:
            self._output_padding_override = None

    def _output_padding_for(self, x: Tensor, output_size: Sequence[int]) -> tuple[int, ...]:
        """The output padding that gives spatial size ``output_size`` (its last nd entries), as
        torch's ``ConvTranspose`` computes it; a one-line error when no output padding can."""
        nd = self._nd
        want = [int(s) for s in output_size]
        if len(want) not in (nd, nd + 1, nd + 2):
            raise UserError(f"{type(self).__name__}: output_size must have {nd} or {nd + 2} entries, got {want}")
        want = want[len(want) - nd:]
        assert isinstance(self.padding, tuple)
        out = []
        for i in range(nd):
            size_in = x.shape[x.dim() - nd + i]
            low = ((size_in - 1) * self.stride[i] - 2 * self.padding[i]
                   + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            high = low + self.stride[i] - 1
            if not low <= want[i] <= high:
                raise UserError(f"{type(self).__name__}: output_size {want} is not reachable from input "
                                f"{tuple(x.shape)}: dimension {i} must be in [{low}, {high}]")
            out.append(want[i] - low)
        return tuple(out)


# --------------------------------------------------------------------------------------------
# The layers
# --------------------------------------------------------------------------------------------


class BayesConv1d(_BayesConvNd):
    """Bayesian ``torch.nn.Conv1d``: the same arguments (``padding_mode`` included) plus those of
    :class:`~bbb.nn.BayesLinear` (``prior``, ``estimator``, ``mu_init_scale``, ``rho_init``).

    Shape: (B, C, L) -> (B, O, L'); (k, B, C, L) -> (k, B, O, L') with k weight samples.
    ``weight_mu``/``weight_rho`` are (O, C/groups, kernel_size), as ``nn.Conv1d``'s weight.
    """

    _nd = 1
    converts = (nn.Conv1d,)


class BayesConv2d(_BayesConvNd):
    """Bayesian ``torch.nn.Conv2d``: the same arguments (``padding_mode`` included) plus those of
    :class:`~bbb.nn.BayesLinear` (``prior``, ``estimator``, ``mu_init_scale``, ``rho_init``).

    Shape: (B, C, H, W) -> (B, O, H', W'); (k, B, C, H, W) -> (k, B, O, H', W') with k weight
    samples. Inside :func:`~bbb.nn.forward_samples` (the ELBO, :func:`~bbb.uncertainty.predict`)
    the k samples travel folded into the batch dimension, so pooling, ``Flatten`` and
    normalisation layers need no wrapping.
    """

    _nd = 2
    converts = (nn.Conv2d,)


class BayesConv3d(_BayesConvNd):
    """Bayesian ``torch.nn.Conv3d``: the same arguments (``padding_mode`` included) plus those of
    :class:`~bbb.nn.BayesLinear` (``prior``, ``estimator``, ``mu_init_scale``, ``rho_init``).

    Shape: (B, C, D, H, W) -> (B, O, D', H', W'); (k, B, C, D, H, W) -> (k, B, O, D', H', W').
    """

    _nd = 3
    converts = (nn.Conv3d,)


class BayesConvTranspose1d(_BayesConvTransposeNd):
    """Bayesian ``torch.nn.ConvTranspose1d``: the same arguments (in torch's order) plus those of
    :class:`~bbb.nn.BayesLinear`; ``forward(x, output_size=None)`` as torch's.

    Shape: (B, C, L) -> (B, O, L'); (k, B, C, L) -> (k, B, O, L'). ``weight_mu``/``weight_rho``
    are (C, O/groups, kernel_size), as ``nn.ConvTranspose1d``'s weight. ``padding_mode`` must be
    ``"zeros"`` (as in torch).
    """

    _nd = 1
    converts = (nn.ConvTranspose1d,)


class BayesConvTranspose2d(_BayesConvTransposeNd):
    """Bayesian ``torch.nn.ConvTranspose2d``: the same arguments (in torch's order) plus those of
    :class:`~bbb.nn.BayesLinear`; ``forward(x, output_size=None)`` as torch's.

    Shape: (B, C, H, W) -> (B, O, H', W'); (k, B, C, H, W) -> (k, B, O, H', W'). Weights are
    (C, O/groups, kh, kw); ``padding_mode`` must be ``"zeros"`` (as in torch).
    """

    _nd = 2
    converts = (nn.ConvTranspose2d,)


class BayesConvTranspose3d(_BayesConvTransposeNd):
    """Bayesian ``torch.nn.ConvTranspose3d``: the same arguments (in torch's order) plus those of
    :class:`~bbb.nn.BayesLinear`; ``forward(x, output_size=None)`` as torch's.

    Shape: (B, C, D, H, W) -> (B, O, D', H', W'); (k, B, C, D, H, W) -> (k, B, O, D', H', W').
    Weights are (C, O/groups, kd, kh, kw); ``padding_mode`` must be ``"zeros"`` (as in torch).
    """

    _nd = 3
    converts = (nn.ConvTranspose3d,)
