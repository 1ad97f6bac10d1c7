"""Stateless math behind the Bayesian layers (the ``torch.nn.functional`` of :mod:`bbb.nn`).

Shapes. A *sample dimension* ``k`` may lead every tensor: weights of shape ``(k, out, in)``
give ``k`` networks evaluated in one batched call, with inputs ``(k, B, in)`` (or ``(B, in)``,
shared by all ``k``). Without it, weights are ``(out, in)`` and inputs ``(B, in)``.

Estimators:

* **reparam** (the paper): one weight sample per minibatch (per MC sample), w = mu + sigma*eps.
* **local** (Kingma et al. 2015): sample pre-activations b ~ N(x mu^T, x^2 (sigma^2)^T)
  independently per example. ``sqrt`` sees ``var + LRT_EPS`` so an all-zero input row without
  bias has finite gradients.
* **flipout** (Wen et al. 2018): x mu^T + ((x * s) (sigma*eps)^T) * r with random signs s, r per
  example; only the perturbation sigma*eps is sign-flipped, never the mean weights.

Convolutions (:func:`conv`, :func:`conv_local`, :func:`conv_flipout`) are one implementation for
1-, 2- and 3-d, plain or transposed (``nd``, ``transposed``), with ``padding_mode`` as in
``torch.nn``; :func:`conv2d`, :func:`conv2d_local` and :func:`conv2d_flipout` are their 2-d forms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import UserError

__all__ = [
    "LRT_EPS",
    "standard_normal",
    "expand_samples",
    "linear",
    "linear_local",
    "linear_flipout",
    "PADDING_MODES",
    "mode_padding",
    "conv",
    "conv_local",
    "conv_flipout",
    "conv2d",
    "conv2d_local",
    "conv2d_flipout",
    "random_signs",
]

#: added to the pre-activation variance inside the local-reparameterisation sqrt
LRT_EPS = 1e-8


def expand_samples(x: Tensor, k: int) -> Tensor:
    """View ``x`` of shape (B, ...) as (k, B, ...) without copying (k >= 1).

    The view is marked (:func:`is_expanded_samples`), so that a layer that would read the new
    dimension as a batch (a linear layer outside :func:`bbb.nn.leading_samples`, an embedding)
    can say so instead of giving k copies of one network."""
    if k < 1:
        raise ValueError(f"number of samples must be >= 1, got {k}")
    out = x.unsqueeze(0).expand(k, *x.shape)
    out._bbb_sample_dim = True  # type: ignore[attr-defined]
    return out


def is_expanded_samples(x: Tensor) -> bool:
    """Whether ``x`` is a view made by :func:`expand_samples` (a leading sample dimension)."""
    return x.dim() >= 2 and x.stride(0) == 0 and x.shape[0] > 1 and getattr(x, "_bbb_sample_dim", False)


def _is_shared(x: Tensor, k_dim_rank: int) -> bool:
    """True when ``x`` has a leading sample dim that is a broadcast view (stride 0)."""
    return x.dim() == k_dim_rank and x.shape[0] > 1 and x.stride(0) == 0


def standard_normal(shape: Sequence[int], *, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """N(0, 1) entries of ``shape`` with the dtype and device of ``like`` (``generator``: None, torch's own).
    ``generator=None`` spelt out selects another overload of torch's random factories, which
    torch.compile cannot trace once a size is dynamic (a new batch size, a new k): it is omitted."""
    if generator is None:
        return torch.randn(tuple(shape), device=like.device, dtype=like.dtype)
    return torch.randn(tuple(shape), generator=generator, device=like.device, dtype=like.dtype)


def random_signs(shape: tuple[int, ...], *, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Independent +-1 entries with the dtype and device of ``like`` (``generator``: as in :func:`standard_normal`)."""
    bits = (torch.randint(0, 2, shape, device=like.device, dtype=like.dtype) if generator is None else
            torch.randint(0, 2, shape, generator=generator, device=like.device, dtype=like.dtype))
    return bits.mul_(2).sub_(1)


# --------------------------------------------------------------------------------------------
# Linear
# --------------------------------------------------------------------------------------------


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear`` with an optional leading sample dim on the weights.

    weight (out, in): x (..., in) -> (..., out).
    weight (k, out, in): x (B, in) or (k, B, in) or (k, *, in) -> (k, *, out).
    """
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    k, n_out = weight.shape[0], weight.shape[1]
    if _is_shared(x, 3):
        x = x[0]
    if x.dim() == 2:  # one input shared by the k networks: a single wide matmul, bias folded in
        wide = weight.reshape(-1, weight.shape[-1]).T
        out = x @ wide if bias is None else torch.addmm(bias.reshape(-1), x, wide)
        return out.view(x.shape[0], k, n_out).transpose(0, 1)
    lead = x.shape[1:-1]
    xf = x.reshape(k, -1, x.shape[-1])
    if bias is None:
        out = torch.bmm(xf, weight.transpose(1, 2))
    else:  # the bias is the matmul's initial value: no separate pass over the output
        out = torch.baddbmm(bias.unsqueeze(1).expand(k, xf.shape[1], n_out), xf, weight.transpose(1, 2))
    return out.view(k, *lead, n_out)


def linear_local(
    x: Tensor,
    weight_mu: Tensor,
    weight_sigma: Tensor,
    bias_mu: Tensor | None = None,
    bias_sigma: Tensor | None = None,
    noise: Tensor | None = None,
    *,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Local reparameterisation: N(x mu^T + b_mu, x^2 (sigma^2)^T + b_sigma^2), sampled per example.

    With a shared (broadcast) sample dim on ``x`` or ``num_samples`` given, the mean and variance
    are computed once and only the noise differs between the k samples.
    """
    if num_samples is None and _is_shared(x, 3):
        num_samples, x = x.shape[0], x[0]
    mean = F.linear(x, weight_mu, bias_mu)
    var = F.linear(x * x, weight_sigma * weight_sigma,
                   None if bias_sigma is None else bias_sigma * bias_sigma)
    return _normal_sample(mean, var, noise, num_samples, generator)


def _normal_sample(mean: Tensor, var: Tensor, noise: Tensor | None, num_samples: int | None,
                   generator: torch.Generator | None) -> Tensor:
    """mean + sqrt(var + LRT_EPS) * noise: the local reparameterisation's draw of the
    pre-activations (``noise`` None: standard normal, ``num_samples`` draws when given)."""
    std = torch.sqrt(var + LRT_EPS)
    if noise is None:
        shape = mean.shape if num_samples is None else (num_samples, *mean.shape)
        noise = standard_normal(shape, like=mean, generator=generator)
    return torch.addcmul(mean, std, noise)


def linear_flipout(
    x: Tensor,
    weight_mu: Tensor,
    weight_delta: Tensor,
    bias_mu: Tensor | None = None,
    bias_delta: Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
    signs: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """Flipout: x mu^T + b_mu + ((x * s) delta^T + delta_b) * r, with delta = sigma * eps.

    ``weight_delta`` is (out, in) or (k, out, in); ``s`` and ``r`` are +-1 per example (and per
    sample), drawn here unless ``signs`` gives them.
    """
    k = weight_delta.shape[0] if weight_delta.dim() == 3 else None
    base_x = x[0] if (k is not None and _is_shared(x, 3)) else x
    mean = F.linear(base_x, weight_mu, bias_mu)
    if k is not None and x.dim() == 2:
        x = expand_samples(x, k)
    if signs is None:
        s = random_signs(x.shape, like=x, generator=generator)
        r = random_signs((*x.shape[:-1], weight_delta.shape[-2]), like=x, generator=generator)
    else:
        s, r = signs
    pert = linear(x * s, weight_delta, bias_delta) * r
    return pert + mean


# --------------------------------------------------------------------------------------------
# Convolutions: 1-, 2- and 3-d, plain or transposed
# --------------------------------------------------------------------------------------------

#: the ``padding_mode`` values of ``torch.nn`` convolutions
PADDING_MODES = ("zeros", "reflect", "replicate", "circular")

_CONV_OPS: dict[tuple[int, bool], Callable[..., Tensor]] = {
    (1, False): F.conv1d, (2, False): F.conv2d, (3, False): F.conv3d,
    (1, True): F.conv_transpose1d, (2, True): F.conv_transpose2d, (3, True): F.conv_transpose3d,
}


def _ntuple(v: Any, n: int, what: str) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    t = tuple(int(i) for i in v)
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise UserError(f"{what} must be an int or a {n}-tuple, got {v!r}")
    return t


def _check_nd(nd: int) -> int:
    if nd not in (1, 2, 3):
        raise UserError(f"nd (the number of spatial dimensions) must be 1, 2 or 3, got {nd!r}")
    return nd


def _conv_op(nd: int, transposed: bool, stride: Any, padding: Any, dilation: Any,
             output_padding: Any) -> Callable[[Tensor, Tensor, Tensor | None, int], Tensor]:
    """``op(x, weight, bias, groups)``: torch's N-d (transposed) convolution with zero padding."""
    fn = _CONV_OPS[(_check_nd(nd), bool(transposed))]
    if transposed:
        if isinstance(padding, str):
            raise UserError(f"transposed convolutions take numeric padding, not {padding!r}")

        def op_t(x: Tensor, w: Tensor, b: Tensor | None, groups: int) -> Tensor:
            return fn(x, w, b, stride, padding, output_padding, groups, dilation)
        return op_t

    def op(x: Tensor, w: Tensor, b: Tensor | None, groups: int) -> Tensor:
        return fn(x, w, b, stride, padding, dilation, groups)
    return op


def mode_padding(padding: Any, padding_mode: str, kernel_size: Sequence[int], dilation: Any) -> list[int] | None:
    """The ``F.pad`` widths (last dimension first) that a ``padding_mode`` other than ``"zeros"``
    applies before a convolution with zero padding, as ``torch.nn``'s ``_conv_forward``; None for
    ``"zeros"`` (the convolution pads itself) or nothing to pad."""
    if padding_mode not in PADDING_MODES:
        raise UserError(f"padding_mode must be one of {', '.join(PADDING_MODES)}, got {padding_mode!r}")
    if padding_mode == "zeros" or padding == "valid":
        return None
    nd = len(kernel_size)
    dil = _ntuple(dilation, nd, "dilation")
    pads: list[int] = []
    if padding == "same":
        for d, k in zip(reversed(dil), reversed(tuple(kernel_size))):
            total = d * (k - 1)
            pads += [total // 2, total - total // 2]
    else:
        for p in reversed(_ntuple(padding, nd, "padding")):
            pads += [p, p]
    return pads if any(pads) else None


def _pad(x: Tensor, pads: list[int] | None, mode: str, nd: int) -> Tensor:
    """``F.pad`` of the last ``nd`` dimensions of (..., C, *spatial), any number of leading dims."""
    if pads is None:
        return x
    lead = x.shape[: x.dim() - nd - 1]
    y = F.pad(x.reshape(-1, *x.shape[x.dim() - nd - 1:]), pads, mode=mode)
    return y.reshape(*lead, *y.shape[1:])


def _prepare(x: Tensor, weight: Tensor, stride: Any, padding: Any, dilation: Any, nd: int, transposed: bool,
             output_padding: Any, padding_mode: str) -> tuple[Tensor, Callable]:
    """Apply ``padding_mode`` to ``x`` and give the zero-padding convolution that remains."""
    pads = mode_padding(padding, padding_mode, weight.shape[weight.dim() - nd:], dilation)
    if pads is not None:
        if transposed:
            raise UserError(f"transposed convolutions only support padding_mode='zeros', got {padding_mode!r}")
        x, padding = _pad(x, pads, padding_mode, nd), 0
    elif padding_mode != "zeros":
        padding = 0  # "valid", or numeric zero widths
    return x, _conv_op(nd, transposed, stride, padding, dilation, output_padding)


def _batched_conv(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, nd: int,
                  op: Callable[[Tensor, Tensor, Tensor | None, int], Tensor]) -> Tensor:
    """``op`` with optional leading sample dims: k weight samples run as one grouped convolution
    (k folded into the channels, groups*k), a sample dim on the input only folds into the batch."""
    if weight.dim() == nd + 2:
        if x.dim() == nd + 3:  # sample dim on the input only: fold it into the batch
            k, b = x.shape[:2]
            y = op(x.reshape(k * b, *x.shape[2:]), weight, bias, groups)
            return y.view(k, b, *y.shape[1:])
        return op(x, weight, bias, groups)
    k = weight.shape[0]
    if x.dim() == nd + 2:
        x = expand_samples(x, k)
    b, c = x.shape[1], x.shape[2]
    xg = x.transpose(0, 1).reshape(b, k * c, *x.shape[3:])
    wg = weight.reshape(k * weight.shape[1], *weight.shape[2:])
    if bias is not None and torch.compiler.is_compiling():
        # compiled: the bias added after the convolution, (k, C) or (C) broadcast over (B, k, C, ...)
        # (Inductor's convolution lowering of torch 2.11 cannot take a reshaped bias; it fuses the add)
        y = op(xg, wg, None, groups * k)
        y = y.view(b, k, -1, *y.shape[2:]) + bias.view(*bias.shape, *[1] * nd)
        return y.transpose(0, 1)
    bg = None if bias is None else (bias.reshape(-1) if bias.dim() == 2 else bias.repeat(k))
    y = op(xg, wg, bg, groups * k)
    return y.view(b, k, -1, *y.shape[2:]).transpose(0, 1)


def conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    nd: int,
    transposed: bool = False,
    output_padding: Any = 0,
    padding_mode: str = "zeros",
) -> Tensor:
    """An ``nd``-d convolution (``transposed``: transposed convolution) with optional leading
    sample dims, with the options of the ``torch.nn`` layers (``padding_mode`` as theirs: ``F.pad``
    then a zero-padding convolution).

    weight (O, C/g, *k) (transposed: (C, O/g, *k)): x (B, C, *s) -> (B, O, *s'); x (k, B, C, *s)
    -> (k, B, O, *s'), the k slices through the same weight.
    weight (k, ...): x (B, C, *s) or (k, B, C, *s) -> (k, B, O, *s'), evaluated as one grouped
    convolution; ``bias`` is then (k, O) (or (O,), shared).
    """
    x, op = _prepare(x, weight, stride, padding, dilation, nd, transposed, output_padding, padding_mode)
    return _batched_conv(x, weight, bias, groups, nd, op)


def conv_local(
    x: Tensor,
    weight_mu: Tensor,
    weight_sigma: Tensor,
    bias_mu: Tensor | None = None,
    bias_sigma: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    nd: int,
    transposed: bool = False,
    output_padding: Any = 0,
    padding_mode: str = "zeros",
    num_samples: int | None = None,
    noise: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Local reparameterisation for (transposed) convolutions: activations ~ N(conv(x, mu) + b_mu,
    conv(x^2, sigma^2) + b_sigma^2), sampled per example, channel and position.

    With a shared (broadcast) sample dim on ``x`` or ``num_samples`` given, the mean and variance
    are computed once and only the noise differs between the k samples.
    """
    if num_samples is None and _is_shared(x, nd + 3):
        num_samples, x = x.shape[0], x[0]
    x, op = _prepare(x, weight_mu, stride, padding, dilation, nd, transposed, output_padding, padding_mode)
    mean = _batched_conv(x, weight_mu, bias_mu, groups, nd, op)
    var = _batched_conv(x * x, weight_sigma * weight_sigma,
                        None if bias_sigma is None else bias_sigma * bias_sigma, groups, nd, op)
    return _normal_sample(mean, var, noise, num_samples, generator)


def conv_flipout(
    x: Tensor,
    weight_mu: Tensor,
    weight_delta: Tensor,
    bias_mu: Tensor | None = None,
    bias_delta: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    nd: int,
    transposed: bool = False,
    output_padding: Any = 0,
    padding_mode: str = "zeros",
    generator: torch.Generator | None = None,
    signs: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """Flipout for (transposed) convolutions: conv(x, mu) + b_mu + (conv(x * s, delta) + delta_b) * r
    with delta = sigma * eps, ``weight_delta`` without or with a leading sample dim, and signs
    ``s`` (per example and input channel) and ``r`` (per example and output channel), drawn here
    unless ``signs`` gives them."""
    k = weight_delta.shape[0] if weight_delta.dim() == nd + 3 else None
    shared = k is not None and _is_shared(x, nd + 3)
    if shared:
        x = x[0]
    x, op = _prepare(x, weight_mu, stride, padding, dilation, nd, transposed, output_padding, padding_mode)
    mean = _batched_conv(x, weight_mu, bias_mu, groups, nd, op)
    if k is not None and x.dim() == nd + 2:
        x = expand_samples(x, k)
    lead, ones = x.shape[: x.dim() - nd - 1], (1,) * nd
    if signs is None:
        s = random_signs((*lead, x.shape[-nd - 1], *ones), like=x, generator=generator)
    else:
        s = signs[0]
    pert = _batched_conv(x * s, weight_delta, bias_delta, groups, nd, op)
    r = random_signs((*lead, pert.shape[-nd - 1], *ones), like=x, generator=generator) if signs is None else signs[1]
    return pert * r + mean


# the 2-d names of earlier versions


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """``F.conv2d`` with an optional leading sample dim (:func:`conv` with ``nd=2``).

    weight (O, C/g, kh, kw): x (B, C, H, W) -> (B, O, H', W').
    weight (k, O, C/g, kh, kw): x (B, C, H, W) or (k, B, C, H, W) -> (k, B, O, H', W'),
    evaluated as one grouped convolution.
    """
    return conv(x, weight, bias, stride, padding, dilation, groups, nd=2)


def conv2d_local(
    x: Tensor,
    weight_mu: Tensor,
    weight_sigma: Tensor,
    bias_mu: Tensor | None = None,
    bias_sigma: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Local reparameterisation for 2-d convolutions (:func:`conv_local` with ``nd=2``)."""
    return conv_local(x, weight_mu, weight_sigma, bias_mu, bias_sigma, stride, padding, dilation, groups,
                      nd=2, num_samples=num_samples, generator=generator)


def conv2d_flipout(
    x: Tensor,
    weight_mu: Tensor,
    weight_delta: Tensor,
    bias_mu: Tensor | None = None,
    bias_delta: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Flipout for 2-d convolutions (:func:`conv_flipout` with ``nd=2``): signs per example and
    channel (input s, output r)."""
    return conv_flipout(x, weight_mu, weight_delta, bias_mu, bias_delta, stride, padding, dilation, groups,
                        nd=2, generator=generator)
