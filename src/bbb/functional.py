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

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any

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
    "sample_mc_kl",
    "sample_gaussian_kl",
    "FusedBackend",
    "fused_backend",
    "set_fused_backend",
    "get_fused_backend",
    "COMPILE_MIN_NUMEL",
]

#: added to the pre-activation variance inside the local-reparameterisation sqrt
LRT_EPS = 1e-8

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_MAX_GAP = 80.0  # as in distributions._MAX_GAP: exp(-80) is still a normal float32


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
    k = weight.shape[0]
    if x.dim() == 2:  # one input shared by the k networks: a single wide matmul
        out = (x @ weight.reshape(-1, weight.shape[-1]).T).view(x.shape[0], k, -1).transpose(0, 1)
    elif _is_shared(x, 3):
        return linear(x[0], weight, bias)
    else:
        lead = x.shape[1:-1]
        xf = x.reshape(k, -1, x.shape[-1])
        out = torch.bmm(xf, weight.transpose(1, 2)).view(k, *lead, -1)
    if bias is not None:
        out = out + bias.view(k, *([1] * (out.dim() - 2)), -1)
    return out


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


# --------------------------------------------------------------------------------------------
# Fused weight sampling + Monte Carlo KL
# --------------------------------------------------------------------------------------------


class _SampleMCKL(torch.autograd.Function):
    """w = mu + softplus(rho) * eps and KL_mc = mean_k sum [log q(w) - log p(w)] in one pass.

    The backward is written out (eqs. 3-4 of the paper): with g = dL/dw (from the data term)
    and c = dL/dKL / k,
        dL/dmu  = sum_k (g - c * dlogp/dw)
        dL/drho = (sum_k (g - c * dlogp/dw) * eps - c * k / sigma) * sigmoid(rho).
    (d log q / dmu = 0 and d log q / dsigma = -1/sigma along the reparameterised path.)
    """

    @staticmethod
    def forward(ctx, mu: Tensor, rho: Tensor, eps: Tensor, prior) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        sigma = F.softplus(rho)
        w = torch.addcmul(mu, sigma, eps)
        lp, dlp = prior.log_prob_and_grad(w)
        k = eps.numel() // mu.numel()
        flat = eps.reshape(-1)
        kl = -torch.log(sigma).sum() - (0.5 * torch.dot(flat, flat) + lp.sum()) / k - _HALF_LOG_2PI * mu.numel()
        ctx.save_for_backward(rho, sigma, eps, dlp)
        ctx.k = k
        return w, kl

    @staticmethod
    def backward(ctx, grad_w: Tensor | None, grad_kl: Tensor | None):  # type: ignore[override]
        rho, sigma, eps, dlp = ctx.saved_tensors
        k = ctx.k
        lead = tuple(range(eps.dim() - rho.dim()))
        if grad_kl is None:
            total = grad_w
        elif grad_w is None:
            total = dlp * (-grad_kl / k)
        else:
            total = torch.addcmul(grad_w, dlp, grad_kl / k, value=-1.0)
        grad_mu = total.sum(lead) if lead else total
        g_sigma = (total * eps).sum(lead) if lead else total * eps
        if grad_kl is not None:  # - grad_kl / sigma, in one pass
            g_sigma = torch.addcdiv(g_sigma, grad_kl.expand_as(sigma), sigma, value=-1.0)
        grad_rho = g_sigma.mul_(torch.sigmoid(rho))
        return grad_mu, grad_rho, None, None


def sample_mc_kl(mu: Tensor, rho: Tensor, eps: Tensor, prior) -> tuple[Tensor, Tensor]:
    """Fused ``(w, KL)``: the weights mu + softplus(rho) * eps and the Monte Carlo KL estimate on
    those very weights, summed over elements and averaged over the leading sample dims of eps.

    A :class:`~bbb.distributions.ScaleMixturePrior` on a large enough tensor runs the compiled
    single-pass kernel (see :class:`FusedBackend`); everything else the eager one.
    """
    if _is_builtin(prior, "ScaleMixturePrior") and _use_compiled(mu):
        cst = _consts(("mixture", prior.pi, prior.sigma1, prior.sigma2),
                      [prior._c1, prior._c2, prior._h1, prior._h2], mu)
        return _FusedMixtureMC.apply(mu, rho, eps, cst)
    return _SampleMCKL.apply(mu, rho, eps, prior)


# --------------------------------------------------------------------------------------------
# Compiled kernels: the same mathematics in one pass over the weights (torch.compile)
# --------------------------------------------------------------------------------------------
#
# The eager ``_SampleMCKL`` above makes ~15 passes over every weight tensor (softplus, the
# mixture log-density and its gradient, the reductions, then the backward). The kernels below
# state the same computation as one pointwise expression each, which ``torch.compile`` turns
# into one vectorised loop for the forward (weights, KL, and what the backward needs) and one
# for the backward (no transcendental functions left there). The noise still comes from
# ``torch.randn`` (so seeds and generators behave exactly as on the eager path); only the
# arithmetic is fused. Equivalence with the straightforward autograd code is pinned by
# tests/test_kernels.py.


class FusedBackend(str, Enum):
    """Which implementation runs the fused sampling + KL kernels.

    ``auto``: compiled on CUDA for weight tensors of at least :data:`COMPILE_MIN_NUMEL` elements,
    eager on CPU. On CPU the compiled scale-mixture kernel takes ~15% off a training step
    (measured: 2x400, one thread, 26 -> 22 ms; the Gaussian prior's eager kernel is about as fast
    as its compiled one) but compiling costs ~8 s per process with a warm cache and ~40 s cold,
    which only long runs earn back; ask for it with ``compile`` (or ``BBB_FUSED=compile``). ``compile``: compiled
    for every size and device. ``eager``: never compile. Whatever the choice, a failure of
    ``torch.compile`` falls back to the eager kernels with one warning.
    """

    AUTO = "auto"
    COMPILE = "compile"
    EAGER = "eager"


#: below this many weights, ``auto`` keeps the eager kernels (the compiled call's fixed cost
#: and the one-off compilation do not pay for a bias vector or a toy network)
COMPILE_MIN_NUMEL = 1 << 15



def _backend_from_env() -> FusedBackend:
    raw = os.environ.get("BBB_FUSED", FusedBackend.AUTO.value).strip().lower()
    try:
        return FusedBackend(raw)
    except ValueError:
        warnings.warn(f"BBB_FUSED={raw!r} is not one of auto, compile, eager; using auto", stacklevel=2)
        return FusedBackend.AUTO


_STATE: dict[str, Any] = {"backend": _backend_from_env(), "failed": None}
_COMPILED: dict[str, Callable[..., Any]] = {}


def get_fused_backend() -> FusedBackend:
    return _STATE["backend"]


def set_fused_backend(backend: FusedBackend | str) -> FusedBackend:
    """Choose ``"auto"``, ``"compile"`` or ``"eager"`` (also ``$BBB_FUSED``); returns the previous one."""
    from .errors import UserError

    try:
        new = FusedBackend(backend)
    except ValueError:
        raise UserError(f"unknown fused backend {backend!r}; choose auto, compile or eager") from None
    old = _STATE["backend"]
    _STATE["backend"] = new
    return old


@contextlib.contextmanager
def fused_backend(backend: FusedBackend | str) -> Iterator[None]:
    """Temporarily use another fused backend: ``with fused_backend("eager"): ...``."""
    old = set_fused_backend(backend)
    try:
        yield
    finally:
        set_fused_backend(old)


def _use_compiled(t: Tensor) -> bool:
    backend = _STATE["backend"]
    if backend is FusedBackend.EAGER or _STATE["failed"] is not None:
        return False
    if backend is FusedBackend.AUTO and (t.device.type != "cuda" or t.numel() < COMPILE_MIN_NUMEL):
        return False
    if t.device.type not in ("cpu", "cuda") or not t.is_floating_point():
        return False
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and compiler.is_compiling():  # an outer torch.compile traces eager code
        return False
    if t.device.type == "cuda":
        try:
            from torch.utils._triton import has_triton
        except ImportError:  # pragma: no cover - very old torch
            return False
        return bool(has_triton())
    return True


def _run_compiled(fn: Callable[..., Any], *args: Any) -> Any:
    """``torch.compile(fn)(*args)``; if compilation fails, warn once and run ``fn`` eagerly
    (same mathematics), and use the eager kernels from then on."""
    compiled = _COMPILED.get(fn.__name__)
    if compiled is None:
        compiled = torch.compile(fn, dynamic=True, fullgraph=True)
        _COMPILED[fn.__name__] = compiled
    try:
        return compiled(*args)
    except Exception as e:  # noqa: BLE001 - any compiler failure: fall back to eager
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        _STATE["failed"] = reason
        warnings.warn(f"torch.compile is unavailable here ({reason}); bbb uses its eager kernels",
                      RuntimeWarning, stacklevel=3)
        return fn(*args)


def _softplus_and_sigmoid(rho: Tensor) -> tuple[Tensor, Tensor]:
    """sigma = softplus(rho) (threshold 20, as F.softplus) and its derivative sigmoid(rho)."""
    e = torch.exp(torch.clamp(rho, max=20.0))
    u = 1.0 + e
    # log1p(e) without log1p (3x dearer on CPU): log(u) * e / (u - 1) is exact to a few ulp
    # (Goldberg's trick); where u rounds to 1, log1p(e) = e to working precision
    lp1 = torch.where(u == 1.0, e, torch.log(u) * (e / (u - 1.0)))
    sigma = torch.where(rho > 20.0, rho, lp1)
    return sigma, torch.sigmoid(rho)


def _k_mixture_fwd(mu: Tensor, rho: Tensor, eps: Tensor, cst: Tensor):
    """mu, rho (n,); eps (k, n); cst = [c1, c2, h1, h2] of the mixture (see ScaleMixturePrior).

    Returns w (k, n), KL (scalar), and for the backward dlogp/dw (k, n), eps * sigmoid(rho)
    (k, n) and sigmoid(rho) / sigma (n,).
    """
    sigma, sr = _softplus_and_sigmoid(rho)
    w = mu + sigma * eps
    w2 = w * w
    a = cst[0] + cst[2] * w2
    b = cst[1] + cst[3] * w2
    d = a - b
    e = torch.exp(-torch.clamp(torch.abs(d), max=_MAX_GAP))
    inv = 1.0 / (1.0 + e)
    lp = torch.maximum(a, b) + torch.log(1.0 + e)
    big, small = inv, e * inv  # responsibilities of the larger and the smaller component
    r1 = torch.where(d >= 0, big, small)
    r2 = torch.where(d >= 0, small, big)
    # d log p / dw = 2 w (h1 r1 + h2 r2), written with both responsibilities (no 1 - r1 cancellation)
    dlp = 2.0 * w * (cst[2] * r1 + cst[3] * r2)
    k = eps.shape[0]
    kl = -torch.log(sigma).sum() - (0.5 * (eps * eps).sum() + lp.sum()) / k - _HALF_LOG_2PI * mu.shape[0]
    return w, kl, dlp, eps * sr, sr / sigma


def _k_mixture_bwd(gw: Tensor, gkl: Tensor, dlp: Tensor, a: Tensor, b: Tensor):
    total = gw - (gkl / gw.shape[0]) * dlp
    return total.sum(0), (total * a).sum(0) - gkl * b


def _k_gauss_fwd(mu: Tensor, rho: Tensor, eps: Tensor, cst: Tensor):
    """Weight sampling + the closed-form KL to N(m, s^2); cst = [m, 1 / s^2, log s]."""
    sigma, sr = _softplus_and_sigmoid(rho)
    w = mu + sigma * eps
    z = mu - cst[0]
    kl = (0.5 * cst[1] * (sigma * sigma + z * z) - torch.log(sigma)).sum() + (cst[2] - 0.5) * mu.shape[0]
    return w, kl, eps * sr, (sigma * cst[1] - 1.0 / sigma) * sr


def _k_gauss_bwd(gw: Tensor, gkl: Tensor, mu: Tensor, a: Tensor, b: Tensor, cst: Tensor):
    return gw.sum(0) + gkl * cst[1] * (mu - cst[0]), (gw * a).sum(0) + gkl * b


_CONSTS: dict[tuple, Tensor] = {}


def _consts(key: tuple, values: list[float], like: Tensor) -> Tensor:
    """A small constant tensor on ``like``'s device and dtype, made once (no copy per step)."""
    full = (*key, like.device, like.dtype)
    t = _CONSTS.get(full)
    if t is None:
        t = torch.tensor(values, dtype=like.dtype, device=like.device)
        _CONSTS[full] = t
    return t


def _grads_in(gw: Tensor | None, gkl: Tensor | None, like: Tensor, k: int, n: int) -> tuple[Tensor, Tensor]:
    gw = like.new_zeros((k, n)) if gw is None else gw.reshape(k, n)
    gkl = like.new_zeros(()) if gkl is None else gkl.reshape(())
    return gw, gkl


class _FusedMixtureMC(torch.autograd.Function):
    """Compiled twin of :class:`_SampleMCKL` for the scale-mixture prior."""

    @staticmethod
    def forward(ctx, mu: Tensor, rho: Tensor, eps: Tensor, cst: Tensor):  # type: ignore[override]
        n = mu.numel()
        k = eps.numel() // n
        w, kl, dlp, a, b = _run_compiled(_k_mixture_fwd, mu.reshape(n), rho.reshape(n), eps.reshape(k, n), cst)
        ctx.save_for_backward(dlp, a, b)
        ctx.dims = (k, n, mu.shape)
        return w.view(eps.shape), kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gw: Tensor | None, gkl: Tensor | None):  # type: ignore[override]
        dlp, a, b = ctx.saved_tensors
        k, n, shape = ctx.dims
        gw, gkl = _grads_in(gw, gkl, dlp, k, n)
        gmu, grho = _run_compiled(_k_mixture_bwd, gw, gkl, dlp, a, b)
        return gmu.view(shape), grho.view(shape), None, None


class _FusedGaussClosed(torch.autograd.Function):
    """w = mu + softplus(rho) * eps with the closed-form KL to a Gaussian prior, one pass."""

    @staticmethod
    def forward(ctx, mu: Tensor, rho: Tensor, eps: Tensor, cst: Tensor):  # type: ignore[override]
        n = mu.numel()
        k = eps.numel() // n
        w, kl, a, b = _run_compiled(_k_gauss_fwd, mu.reshape(n), rho.reshape(n), eps.reshape(k, n), cst)
        ctx.save_for_backward(mu, a, b, cst)
        ctx.dims = (k, n, mu.shape)
        return w.view(eps.shape), kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gw: Tensor | None, gkl: Tensor | None):  # type: ignore[override]
        mu, a, b, cst = ctx.saved_tensors
        k, n, shape = ctx.dims
        gw, gkl = _grads_in(gw, gkl, a, k, n)
        gmu, grho = _run_compiled(_k_gauss_bwd, gw, gkl, mu.reshape(n), a, b, cst)
        return gmu.view(shape), grho.view(shape), None, None


def _is_builtin(prior: Any, cls_name: str) -> bool:
    """``prior`` is the built-in class itself (a subclass may change the density)."""
    from . import distributions as D

    return type(prior) is getattr(D, cls_name)


class _SampleGaussKL(torch.autograd.Function):
    """Eager twin of :class:`_FusedGaussClosed`: w = mu + sigma * eps and the closed-form
    KL[q || N(m, s^2)] = sum 0.5 (sigma^2 + (mu - m)^2) / s^2 - log sigma + log s - 1/2, with
    sigma computed once and the backward written out:
        dL/dmu  = sum_k g + c (mu - m) / s^2
        dL/drho = (sum_k g * eps + c (sigma / s^2 - 1 / sigma)) * sigmoid(rho).
    The sums of squares are dot products (one pass each, no temporaries)."""

    @staticmethod
    def forward(ctx, mu: Tensor, rho: Tensor, eps: Tensor, m: float, inv_s2: float, log_s: float):  # type: ignore[override]
        sigma = F.softplus(rho)
        w = torch.addcmul(mu, sigma, eps)
        z = mu - m if m else mu
        fs, fz = sigma.reshape(-1), z.reshape(-1)
        kl = (torch.dot(fs, fs) + torch.dot(fz, fz)) * (0.5 * inv_s2) - torch.log(sigma).sum() \
            + (log_s - 0.5) * mu.numel()
        ctx.save_for_backward(rho, sigma, eps, z)
        ctx.inv_s2 = inv_s2
        return w, kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_w: Tensor | None, grad_kl: Tensor | None):  # type: ignore[override]
        rho, sigma, eps, z = ctx.saved_tensors
        inv_s2 = ctx.inv_s2
        lead = tuple(range(eps.dim() - rho.dim()))
        if grad_w is None:
            grad_mu, g_sigma = torch.zeros_like(z), torch.zeros_like(sigma)
        else:
            grad_mu = grad_w.sum(lead) if lead else grad_w
            g_sigma = (grad_w * eps).sum(lead) if lead else grad_w * eps
        if grad_kl is not None:
            grad_mu = torch.addcmul(grad_mu, z, grad_kl * inv_s2)
            g_sigma = g_sigma.addcmul_(torch.sub(sigma * inv_s2, sigma.reciprocal()), grad_kl)
        return grad_mu, g_sigma.mul_(torch.sigmoid(rho)), None, None, None, None


def sample_gaussian_kl(mu: Tensor, rho: Tensor, eps: Tensor, prior) -> tuple[Tensor, Tensor] | None:
    """Fused ``(w, KL)`` with the *closed-form* KL[q || N(m, s^2)] (independent of eps) for a
    :class:`~bbb.distributions.GaussianPrior`: compiled or eager (see :class:`FusedBackend`).
    ``None`` for any other prior (the caller takes the plain path)."""
    if not _is_builtin(prior, "GaussianPrior"):
        return None
    if _use_compiled(mu):
        cst = _consts(("gauss", prior.mu, prior.sigma), [prior.mu, 1.0 / prior.sigma**2, math.log(prior.sigma)], mu)
        return _FusedGaussClosed.apply(mu, rho, eps, cst)
    return _SampleGaussKL.apply(mu, rho, eps, prior.mu, 1.0 / prior.sigma**2, math.log(prior.sigma))
