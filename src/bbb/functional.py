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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "LRT_EPS",
    "expand_samples",
    "linear",
    "linear_local",
    "linear_flipout",
    "conv2d",
    "conv2d_local",
    "conv2d_flipout",
    "random_signs",
]

#: added to the pre-activation variance inside the local-reparameterisation sqrt
LRT_EPS = 1e-8


def expand_samples(x: Tensor, k: int) -> Tensor:
    """View ``x`` of shape (B, ...) as (k, B, ...) without copying (k >= 1)."""
    if k < 1:
        raise ValueError(f"number of samples must be >= 1, got {k}")
    return x.unsqueeze(0).expand(k, *x.shape)


def _is_shared(x: Tensor, k_dim_rank: int) -> bool:
    """True when ``x`` has a leading sample dim that is a broadcast view (stride 0)."""
    return x.dim() == k_dim_rank and x.shape[0] > 1 and x.stride(0) == 0


def random_signs(shape: tuple[int, ...], *, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Independent +-1 entries with the dtype and device of ``like``."""
    bits = torch.randint(0, 2, shape, generator=generator, device=like.device, dtype=like.dtype)
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
    std = torch.sqrt(var + LRT_EPS)
    shape = mean.shape if num_samples is None else (num_samples, *mean.shape)
    if noise is None:
        noise = torch.randn(shape, generator=generator, device=mean.device, dtype=mean.dtype)
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
# Conv2d
# --------------------------------------------------------------------------------------------


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """``F.conv2d`` with an optional leading sample dim.

    weight (O, C/g, kh, kw): x (B, C, H, W) -> (B, O, H', W').
    weight (k, O, C/g, kh, kw): x (B, C, H, W) or (k, B, C, H, W) -> (k, B, O, H', W'),
    evaluated as one grouped convolution.
    """
    if weight.dim() == 4:
        if x.dim() == 5:  # sample dim on the input only: fold it into the batch
            k, b = x.shape[:2]
            y = F.conv2d(x.reshape(k * b, *x.shape[2:]), weight, bias, stride, padding, dilation, groups)
            return y.view(k, b, *y.shape[1:])
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    k = weight.shape[0]
    if x.dim() == 4:
        x = expand_samples(x, k)
    _, b, c, h, w = x.shape
    xg = x.transpose(0, 1).reshape(b, k * c, h, w)
    wg = weight.reshape(k * weight.shape[1], *weight.shape[2:])
    bg = None if bias is None else bias.reshape(-1)
    y = F.conv2d(xg, wg, bg, stride, padding, dilation, groups * k)
    return y.view(b, k, -1, *y.shape[2:]).transpose(0, 1)


def conv2d_local(
    x: Tensor,
    weight_mu: Tensor,
    weight_sigma: Tensor,
    bias_mu: Tensor | None = None,
    bias_sigma: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    *,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Local reparameterisation for convolutions (activations sampled per example and position)."""
    if num_samples is None and _is_shared(x, 5):
        num_samples, x = x.shape[0], x[0]
    mean = conv2d(x, weight_mu, bias_mu, stride, padding, dilation, groups)
    var = conv2d(x * x, weight_sigma * weight_sigma,
                 None if bias_sigma is None else bias_sigma * bias_sigma,
                 stride, padding, dilation, groups)
    std = torch.sqrt(var + LRT_EPS)
    shape = mean.shape if num_samples is None else (num_samples, *mean.shape)
    noise = torch.randn(shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return torch.addcmul(mean, std, noise)


def conv2d_flipout(
    x: Tensor,
    weight_mu: Tensor,
    weight_delta: Tensor,
    bias_mu: Tensor | None = None,
    bias_delta: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Flipout for convolutions: signs per example and channel (input s, output r)."""
    k = weight_delta.shape[0] if weight_delta.dim() == 5 else None
    base_x = x[0] if (k is not None and _is_shared(x, 5)) else x
    mean = conv2d(base_x, weight_mu, bias_mu, stride, padding, dilation, groups)
    if k is not None and x.dim() == 4:
        x = expand_samples(x, k)
    lead = x.shape[:-3]
    s = random_signs((*lead, x.shape[-3], 1, 1), like=x, generator=generator)
    pert = conv2d(x * s, weight_delta, bias_delta, stride, padding, dilation, groups)
    r = random_signs((*lead, pert.shape[-3], 1, 1), like=x, generator=generator)
    return pert * r + mean
