"""The engine's kernels: one pointwise update of every Bayesian weight per training step.

Stated in plain tensor arithmetic, so the same code runs eagerly (the reference, and the fallback)
or through ``torch.compile`` (one vectorised loop on CPU, Triton on CUDA). Per weight and step,
with g = dL/dw from backprop (k sample rows), c = dL/dKL (from autograd, see
:class:`~bbb.engine.Engine`), sigma = softplus(rho) and s = sigmoid(rho):

* Monte Carlo KL (eqs. 3-4): with t = g - (c / k) dlogp/dw,
  dL/dmu = sum_k t and dL/drho = (sum_k t * eps - c / sigma) * s; with K > k KL samples (the
  likelihood's k and K - k of the KL's own), dL/dmu = sum_k g - (c / K) sum_K dlogp/dw and
  dL/drho = (sum_k g * eps - (c / K) sum_K dlogp/dw * z - c / sigma) * s, the two sums over K
  kept from the sampling step;
* closed form: dL/dmu = sum_k g + c dKL/dmu, dL/drho = (sum_k g * eps + c dKL/dsigma) * s;
* split (``kl="split"``): the same with the estimates of :meth:`~bbb.distributions.Prior.kl_split`
  (its importance sample drawn from one row of noise after the k), kept from the sampling step;

then the optimiser's update of mu and rho (Adam exactly as ``torch.optim.Adam``, SGD with or
without momentum as ``torch.optim.SGD``; rho's learning rate is lr times ``HP_RHO_SCALE``), and
the *next* sample: w = mu + sigma * z for the fresh noise z, with sigma, s and (Monte Carlo)
dlogp/dw at w kept for the next step, and the KL value of that sample. The prior supplies its own
``log_prob_and_grad`` / ``kl_closed_form``; a population whose members have their own prior and
learning rate passes a table of them (:func:`member_constants`), from which each weight takes its
member's row.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import types
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..distributions import Prior
from ..random import fill_normal_

__all__ = ["softplus_and_sigmoid", "kl_sum", "member_kl", "Members", "MemberTable", "member_constants",
           "compile_options", "resample", "gradients",
           "update", "KernelSet", "advance_hyper", "counter_keys_tensor", "seed_mix"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_log = logging.getLogger("bbb.engine")

#: hyperparameter slots of the per-step tensor ``hp`` (followed by the noise's three counter keys)
HP_LR, HP_B1, HP_B2, HP_EPS, HP_STEP_SIZE, HP_BC2_SQRT, HP_MOMENTUM, HP_RHO_SCALE = range(8)
HP_SIZE = 8
#: slots of the device counter ``ctr`` (int64) of an engine whose step-dependent values are formed on
#: its device: the optimiser step, the noise counter, and SplitMix64(seed) (see :func:`counter_keys_tensor`)
CTR_STEP, CTR_COUNTER, CTR_SEED_MIX = range(3)

_M64 = (1 << 64) - 1


def _signed64(x: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits (tensor scalars are signed)."""
    x &= _M64
    return x - (1 << 64) if x >= 1 << 63 else x


_SM_GOLDEN, _SM_MUL1, _SM_MUL2 = (_signed64(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _lsr64(x: Tensor, n: int) -> Tensor:
    """The logical right shift of int64 ``x`` by ``n`` (torch's ``>>`` is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def _splitmix64_tensor(x: Tensor) -> Tensor:
    """:func:`bbb.random`'s SplitMix64 on int64 tensors: sums and products wrap modulo 2^64."""
    x = x + _SM_GOLDEN
    x = (x ^ _lsr64(x, 30)) * _SM_MUL1
    x = (x ^ _lsr64(x, 27)) * _SM_MUL2
    return x ^ _lsr64(x, 31)


def seed_mix(seed: int) -> int:
    """SplitMix64(seed), the part of :func:`bbb.random.counter_keys` that does not change with the
    counter, as a signed int64 (the ``ctr[CTR_SEED_MIX]`` of an engine)."""
    x = (int(seed) + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return _signed64(x ^ (x >> 31))


def counter_keys_tensor(mix: Tensor | int, counter: Tensor) -> Tensor:
    """:func:`bbb.random.counter_keys` on the device: the keys (..., 3), int64 in [0, 2^32), of
    the counters ``counter`` (int64, >= 0) of the seed whose :func:`seed_mix` is ``mix``.

    Formed from the counter where it lives (no host value, no copy to the device): the engine
    advances its noise counter inside its kernel with it, and the bandit draws its table of
    decision keys at once.
    """
    s = _splitmix64_tensor(counter ^ mix)
    t = _splitmix64_tensor(s)
    m32 = 0xFFFFFFFF
    return torch.stack([s & m32, _lsr64(s, 32), t & m32], dim=-1)


def softplus_and_sigmoid(rho: Tensor) -> tuple[Tensor, Tensor]:
    """sigma = softplus(rho) (threshold 20, as ``F.softplus``) and sigmoid(rho), from one exp.

    log1p(e) is written log(u) * e / (u - 1) with u = 1 + e (Goldberg), exact to a few ulp and
    cheaper than log1p on CPU; where u rounds to 1, log1p(e) = e to working precision.
    """
    e = torch.exp(torch.clamp(rho, max=20.0))
    u = 1.0 + e
    lp1 = torch.where(u == 1.0, e, torch.log(u) * (e / (u - 1.0)))
    return torch.where(rho > 20.0, rho, lp1), e / u


#: partial sums of a fixed-order reduction (see :func:`fixed_order_sum`)
SUM_PARTS = 64


def fixed_order_sum(t: Tensor) -> Tensor:
    """``t.sum()`` in an order that does not depend on the thread count.

    A parallel reduction splits its input by thread, so its float rounding changes with the
    number of threads; here the split is fixed (:data:`SUM_PARTS` contiguous parts, each summed
    on its own, then the partial sums), so a run's logged KL is the same on 1 or 2 threads.
    """
    n = t.shape[0]
    r = n // SUM_PARTS
    head = t[: r * SUM_PARTS].view(SUM_PARTS, r).sum(1) if r else t.new_zeros(SUM_PARTS)
    return head.sum() + t[r * SUM_PARTS:].sum()


def kl_sum(t: Tensor) -> Tensor:
    """The sum of a step's KL terms ``t``, the same to working precision on any thread count.

    float32 (or narrower) terms are added in float64 and the sum rounded back: one reduction,
    which ``torch.compile`` fuses into the pass that computes the terms (:func:`fixed_order_sum`
    needs a pass of its own over the written terms, with its thread barriers: docs/performance.md
    has the times). A thread split moves a float64
    sum of millions of terms by about 1e-13 relative, a millionth of float32's rounding step, so
    the float32 result changes only when it falls that close to a rounding boundary. float64
    terms keep the fixed-order sum (there the split would show in the last bit).
    """
    if t.dtype == torch.float64:
        return fixed_order_sum(t)
    return t.sum(dtype=torch.float64).to(t.dtype)


#: a population's layout for :func:`member_kl`: (members, ((offset, numel) of each slot, ...)), every
#: slot's leading dimension the member's (:class:`bbb.nn.PopulationBayesLinear`'s parameters)
Members = tuple[int, tuple[tuple[int, int], ...]]


def member_kl(t: Tensor, members: Members, per_weight: float = 0.0) -> Tensor:
    """The KL of each member of a population and their total, ``(1 + members,)``: [total, member 0,
    member 1, ...]; member j's is the sum of its KL terms ``t`` in every slot, less ``per_weight``
    for each of its weights. Added in float64 (as :func:`kl_sum`), one reduction per slot, and
    rounded to ``t``'s dtype; the total is the members' float64 sum."""
    k, slots = members
    parts = torch.stack([t[o:o + n].view(k, n // k).sum(1, dtype=torch.float64) for o, n in slots]).sum(0)
    if per_weight:
        parts = parts - per_weight * (t.shape[0] // k)
    return torch.cat([parts.sum().view(1), parts]).to(t.dtype)


def resample(mu: Tensor, rho: Tensor, z: Tensor, w: Tensor, sig: Tensor, sr: Tensor, dlp: Tensor | None,
             m: Tensor | None = None, *, prior: Prior, closed: bool, kl_extra: int = 0, split: bool = False,
             members: Members | None = None, pc: tuple[Tensor, ...] | None = None) -> Tensor:
    """Write w = mu + sigma * z, sigma, sigmoid(rho) (and dlogp/dw); return the sample's KL.

    mu, rho, sig, sr: (n,); z: (K, n) with K = k + kl_extra; w: (k, n), the first k rows; dlp:
    (k, n), or with ``kl_extra`` > 0 (2, n): the sums over the K rows of dlogp/dw and of
    dlogp/dw * z. The KL is the closed form, or the Monte Carlo estimate sum[log q(w) - log p(w)]
    averaged over the K rows; with ``split``, the split estimate from the row after the k (dlp:
    its dKL/dmu and dKL/dsigma). ``m`` (n,): 1 where a weight counts in the KL, 0 where not (an
    embedding's padding row); None: every weight counts. dlp is kept multiplied by it. ``members``
    (a population's layout): the KL is :func:`member_kl`'s (1 + members,) vector, the total first.
    ``pc``: each weight's prior constants (:func:`member_constants`: a population whose members have
    priors of their own), read by the prior's ``*_with`` methods; None: the prior's own.
    """
    s, r = softplus_and_sigmoid(rho)
    if split:
        assert dlp is not None
        kl_e, dmu, dsig = (prior.kl_split(mu, s, z[w.shape[0]]) if pc is None else  # type: ignore[misc]
                           prior.kl_split_with(mu, s, z[w.shape[0]], pc))  # type: ignore[attr-defined]
        if m is not None:
            kl_e, dmu, dsig = kl_e * m, dmu * m, dsig * m
        kl = kl_sum(kl_e) if members is None else member_kl(kl_e, members)
        dlp[0].copy_(dmu)
        dlp[1].copy_(dsig)
        w.copy_(mu + s * z[: w.shape[0]])
        sig.copy_(s)
        sr.copy_(r)
        return kl
    wn = mu + s * z
    if closed:
        kl_e = _closed_form(prior, mu, s, pc)[0]
        kl = kl_sum(kl_e if m is None else kl_e * m) if members is None else \
            member_kl(kl_e if m is None else kl_e * m, members)
    else:
        assert dlp is not None
        lp, g = prior.log_prob_and_grad(wn) if pc is None else prior.log_prob_and_grad_with(wn, pc)  # type: ignore[attr-defined]
        big_k = z.shape[0]
        terms = -torch.log(s) - (0.5 * z * z + lp).sum(0) / big_k
        if m is None:
            kl = (kl_sum(terms) - _HALF_LOG_2PI * mu.shape[0] if members is None else
                  member_kl(terms, members, _HALF_LOG_2PI))
        else:
            kl = kl_sum((terms - _HALF_LOG_2PI) * m) if members is None else \
                member_kl((terms - _HALF_LOG_2PI) * m, members)
            g = g * m
        if kl_extra:
            dlp[0].copy_(g.sum(0))
            dlp[1].copy_((g * z).sum(0))
        else:
            dlp.copy_(g)
    w.copy_(wn[: w.shape[0]] if kl_extra else wn)
    sig.copy_(s)
    sr.copy_(r)
    return kl


def gradients(mu: Tensor, g: Tensor, eps: Tensor, sig: Tensor, sr: Tensor, dlp: Tensor | None, c: Tensor,
              m: Tensor | None = None, *, prior: Prior, closed: bool, kl_extra: int = 0,
              split: bool = False, pc: tuple[Tensor, ...] | None = None) -> tuple[Tensor, Tensor]:
    """(dL/dmu, dL/drho) from the data gradient g and the KL coefficient c (linear in both); ``m``:
    the KL's weights and ``pc`` the prior's constants (:func:`resample`), which ``dlp`` already carries."""
    k = g.shape[0]
    cm = c if m is None else c * m  # the KL coefficient of each weight
    if split:
        assert dlp is not None
        gmu = g.sum(0) + c * dlp[0]
        grho = ((g * eps).sum(0) + c * dlp[1]) * sr
    elif closed:
        _, dmu, dsig = _closed_form(prior, mu, sig, pc)
        gmu = g.sum(0) + cm * dmu
        grho = ((g * eps).sum(0) + cm * dsig) * sr
    elif kl_extra:
        assert dlp is not None
        ck = c / (k + kl_extra)
        gmu = g.sum(0) - ck * dlp[0]
        grho = ((g * eps).sum(0) - ck * dlp[1] - cm / sig) * sr
    else:
        assert dlp is not None
        t = g - (c / k) * dlp
        gmu = t.sum(0)
        grho = ((t * eps).sum(0) - cm / sig) * sr
    return gmu, grho


def update(mu: Tensor, rho: Tensor, g: Tensor, eps: Tensor, sig: Tensor, sr: Tensor,
           dlp: Tensor | None, m: Tensor | None, c: Tensor, hp: Tensor, state: tuple[Tensor, ...], *,
           prior: Prior, closed: bool, optimizer: str, nesterov: bool, kl_extra: int = 0,
           split: bool = False, given: Tensor | None = None, pc: tuple[Tensor, ...] | None = None,
           lr_scale: Tensor | None = None) -> None:
    """One optimiser step of mu and rho from the data gradient g and the KL coefficient c, or from
    ``given`` (2, n): dL/dmu and dL/drho as the user left them in ``.grad`` (see :mod:`bbb.engine.grads`).
    ``pc``: the prior's constants (:func:`resample`); ``lr_scale`` (n,): each weight's learning rate
    as a multiple of ``hp``'s (a population whose members have learning rates of their own)."""
    if given is None:
        gmu, grho = gradients(mu, g, eps, sig, sr, dlp, c, m, prior=prior, closed=closed, kl_extra=kl_extra,
                              split=split, pc=pc)
    else:
        gmu, grho = given[0], given[1]
    lr, scale = hp[HP_LR], hp[HP_RHO_SCALE]  # rho's learning rate is lr * scale
    if lr_scale is not None:
        lr = lr * lr_scale
    if optimizer == "adam":
        b1, b2, aeps = hp[HP_B1], hp[HP_B2], hp[HP_EPS]
        step_size, bc2 = hp[HP_STEP_SIZE], hp[HP_BC2_SQRT]
        if lr_scale is not None:
            step_size = step_size * lr_scale
        out = []
        for p, grad, m, v, a in ((mu, gmu, state[0], state[1], step_size),
                                 (rho, grho, state[2], state[3], step_size * scale)):
            nm = m + (1.0 - b1) * (grad - m)
            nv = b2 * v + (1.0 - b2) * grad * grad
            out.append((p, p - a * (nm / (torch.sqrt(nv) / bc2 + aeps)), m, nm, v, nv))
        for p, np_, m, nm, v, nv in out:
            m.copy_(nm)
            v.copy_(nv)
            p.copy_(np_)
    elif state:  # SGD with momentum (dampening 0; the first step's buffer is g, as torch's)
        mom = hp[HP_MOMENTUM]
        for p, grad, buf, a in ((mu, gmu, state[0], lr), (rho, grho, state[1], lr * scale)):
            nb = mom * buf + grad
            d = grad + mom * nb if nesterov else nb
            buf.copy_(nb)
            p.copy_(p - a * d)
    else:  # plain gradient steps, eqs. 5-6 of the paper
        mu.copy_(mu - lr * gmu)
        rho.copy_(rho - (lr * scale) * grho)
    g.zero_()
    c.zero_()


def _noise_into(out: Tensor, index: Tensor, hp: Tensor) -> Tensor:
    """Fill ``out`` (2, H) with the counter noise of the keys in ``hp[HP_SIZE:]``; its flat view.

    The keys (below 2^32, exact in float64) become ``index``'s dtype; to int32 they wrap to two's
    complement, the same bits."""
    fill_normal_(out, index, hp[HP_SIZE:].to(torch.int64).to(index.dtype))
    return out.view(-1)


def _sample_noise(noise: Tensor, index: Tensor, hp: Tensor, w: Tensor, kl_extra: int) -> Tensor:
    """The (k + kl_extra, n) noise of one step: the likelihood's k rows first, then the KL's own."""
    rows = w.shape[0] + kl_extra
    return _noise_into(noise, index, hp)[: rows * w.shape[1]].view(rows, w.shape[1])


def advance_hyper(hp: Tensor, ctr: Tensor, *, adam: bool) -> Tensor:
    """The next step's ``hp`` formed on the device, written into ``hp`` and returned; ``ctr`` advanced.

    ``ctr`` (int64: :data:`CTR_STEP`, :data:`CTR_COUNTER`, :data:`CTR_SEED_MIX`) counts one step
    more; the noise's keys become those of the new counter and Adam's bias corrections those of
    the new step (``lr / (1 - b1^t)`` and ``sqrt(1 - b2^t)`` in float64, as the host forms them),
    from the hyperparameters already in ``hp``. No value crosses from the host: the host only
    writes ``hp`` when a hyperparameter changes (a scheduler).
    """
    nxt = ctr[:2] + 1
    keys = counter_keys_tensor(ctr[CTR_SEED_MIX], nxt[CTR_COUNTER]).to(hp.dtype)
    if adam:
        t = nxt[CTR_STEP].to(hp.dtype)
        corr = torch.stack([hp[HP_LR] / (1.0 - hp[HP_B1] ** t), torch.sqrt(1.0 - hp[HP_B2] ** t)])
        new = torch.cat([hp[:HP_STEP_SIZE], corr, hp[HP_BC2_SQRT + 1:HP_SIZE], keys])
    else:
        new = torch.cat([hp[:HP_SIZE], keys])
    hp.copy_(new)
    ctr[:2].copy_(nxt)
    return new


def _closed_form(prior: Prior, mu: Tensor, sigma: Tensor,
                 pc: tuple[Tensor, ...] | None) -> tuple[Tensor, Tensor, Tensor]:
    out = prior.kl_closed_form(mu, sigma) if pc is None else prior.kl_closed_form_with(mu, sigma, pc)  # type: ignore[attr-defined]
    assert out is not None
    return out


#: a population's own settings member by member (:func:`member_constants`): the table (members, C),
#: row j member j's prior constants then (optionally) its learning-rate multiple, and each weight's
#: member (n,) (int32); None where the members share them
MemberTable = tuple[Tensor, Tensor]


def member_constants(pm: MemberTable | None, prior_columns: int,
                     lr_column: bool) -> tuple[tuple[Tensor, ...] | None, Tensor | None]:
    """Each weight's prior constants (``prior_columns`` of them: a :class:`~bbb.distributions.MemberPrior`'s
    :meth:`~bbb.distributions.MemberPrior.table`) and learning-rate multiple, looked up from its
    member's row of ``pm``'s table: (constants or None, multiple (n,) or None). Compiled, the lookup
    is an indexed load of a few bytes inside the step's one pass."""
    if pm is None:
        return None, None
    table, member = pm
    rows = table[member]
    pc = tuple(rows[:, i] for i in range(prior_columns)) if prior_columns else None
    return pc, rows[:, prior_columns] if lr_column else None


def _train_step(mu, rho, g, eps, noise, index, w, sig, sr, dlp, m, pm, c, hp, state, ctr=None, given=None, *, prior,
                closed, optimizer, nesterov, kl_extra=0, split=False, advance=False, members=None, prior_columns=0,
                lr_column=False):
    """The step: the next sample's noise into ``noise``, the optimiser update, the next sample.

    ``advance``: ``hp`` and ``ctr`` are moved to the next step first (:func:`advance_hyper`), on the
    device; else the host wrote this step's ``hp``. ``pm``: a population's members' own prior and
    learning rate (:func:`member_constants`), else None.
    """
    if advance:
        hp = advance_hyper(hp, ctr, adam=optimizer == "adam")
    z = _sample_noise(noise, index, hp, w, kl_extra)
    pc, lr_scale = member_constants(pm, prior_columns, lr_column)
    update(mu, rho, g, eps, sig, sr, dlp, m, c, hp[:HP_SIZE].to(mu.dtype), state, prior=prior, closed=closed,
           optimizer=optimizer, nesterov=nesterov, kl_extra=kl_extra, split=split, given=given, pc=pc,
           lr_scale=lr_scale)
    return resample(mu, rho, z, w, sig, sr, dlp, m, prior=prior, closed=closed, kl_extra=kl_extra, split=split,
                    members=members, pc=pc)


def _prime(mu, rho, noise, index, hp, w, sig, sr, dlp, m, pm, *, prior, closed, kl_extra=0, split=False, members=None,
           prior_columns=0):
    z = _sample_noise(noise, index, hp, w, kl_extra)
    pc, _ = member_constants(pm, prior_columns, False)
    return resample(mu, rho, z, w, sig, sr, dlp, m, prior=prior, closed=closed, kl_extra=kl_extra, split=split,
                    members=members, pc=pc)


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own (see :data:`_COMPILED`)."""
    f = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    f.__kwdefaults__ = fn.__kwdefaults__
    return f


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What dynamo guards on in the kernels' arguments: each tensor's shape, dtype and device."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, Tensor):
            out.append((tuple(a.shape), a.dtype, str(a.device)))
        elif isinstance(a, tuple):
            out.append(_signature(a))
        else:
            out.append(a)
    return tuple(out)


#: compiled kernels of this process by (kernel, static settings, argument signature), oldest first.
#: Dynamo counts recompilations per code object against ``torch._dynamo.config.recompile_limit``
#: (8): were every engine to compile one shared function, each new prior or width would recompile
#: it, and a process's ninth such engine (a reproduction's or a sweep's ninth run) would fall
#: back to the eager kernels. So each key compiles a copy of the function with a code object of
#: its own, once; engines with the same key (the same prior, optimiser and shapes) share it.
_COMPILED: OrderedDict[tuple[Any, ...], Callable[..., Any]] = OrderedDict()
_COMPILED_MAX = 64


#: the process's one notice that the engine compiles (:func:`_announce`): seconds spent so far, or
#: None once it has been said
_COMPILE_NOTICE: list[float] | None = []

#: the environment variable that silences the compile notice: ``0`` (the ``bbb`` command's
#: ``--quiet`` sets it, for its own process and those it starts)
COMPILE_NOTICE_ENV = "BBB_COMPILE_NOTICE"


def _announce(name: str, seconds: float | None) -> None:
    """Tell the user, once per process, that the engine compiles its kernels and how long it took.

    Called before (``seconds`` None) and after each fresh compile: the first one (the sample's
    kernel, at the engine's build) prints that it is compiling; the train step's (at the first
    ``step()``, which completes the compile) prints the time both took. On stderr: compiling takes
    seconds to tens of seconds on a CPU, which would otherwise pass without a word. Silent where
    :data:`COMPILE_NOTICE_ENV` is ``0``.
    """
    global _COMPILE_NOTICE
    if _COMPILE_NOTICE is None or os.environ.get(COMPILE_NOTICE_ENV, "").strip() == "0":
        return
    if seconds is None:
        if not _COMPILE_NOTICE:
            print("bbb.Engine: compiling its kernels, once per process (compile=False, BBB_COMPILE=0 or bbb's "
                  "--no-compile skips this) ...", file=sys.stderr, flush=True)
        return
    _COMPILE_NOTICE.append(seconds)
    if name != "prime":  # the train step (on a given gradient too, where .grad was clipped)
        print(f"bbb.Engine: kernels compiled in {sum(_COMPILE_NOTICE):.1f} s", file=sys.stderr, flush=True)
        _COMPILE_NOTICE = None


def compile_options(signature: tuple[Any, ...]) -> dict[str, Any]:
    """Inductor's options for a kernel whose arguments have this :func:`_signature`: on a GPU its
    deterministic mode (``deterministic``: no on-device benchmarking where it changes numerics).
    Without it Triton picks each reduction's block sizes by timing its candidates, once per
    process: two processes (a run and its resume after a kill) could sum in another order, and the
    resume would no longer give the uninterrupted run's bits. The CPU does not benchmark: no option.
    An older torch without the option gets none."""

    def devices(sig: tuple[Any, ...]) -> set[str]:
        out: set[str] = set()
        for a in sig:
            if isinstance(a, tuple) and len(a) == 3 and isinstance(a[1], torch.dtype):
                out.add(str(a[2]).split(":")[0])
            elif isinstance(a, tuple):
                out |= devices(a)
        return out

    import torch._inductor.config as inductor_config

    if devices(signature) - {"cpu", "meta"} and hasattr(inductor_config, "deterministic"):
        return {"deterministic": True}
    return {}


def _compiled(key: tuple[Any, ...], eager: Callable[..., Any]) -> Callable[..., Any]:
    fn = _COMPILED.get(key)
    if fn is None:
        options = compile_options(key[-1])
        fn = torch.compile(_own_code(eager), fullgraph=True, dynamic=False, options=options or None)
        _COMPILED[key] = fn
        while len(_COMPILED) > _COMPILED_MAX:
            _COMPILED.popitem(last=False)
    else:
        _COMPILED.move_to_end(key)
    return fn


class KernelSet:
    """The two kernels of one engine, compiled or eager: prime (noise and sample) and the train
    step (the next noise, the update and the next sample, in one call). Their ``hp`` is a float64
    tensor: the :data:`HP_SIZE` hyperparameters, then the three counter keys of the noise. With
    ``advance`` the train step forms the step-dependent part of ``hp`` itself, on the device, from
    the engine's counter ``ctr`` (:func:`advance_hyper`).

    ``compile=True`` runs them through ``torch.compile``, shared with the other engines of the
    process that have the same settings and shapes (:data:`_COMPILED`); if compiling or running
    the compiled code fails, one warning is issued and the eager kernels (the same mathematics)
    take over.
    """

    def __init__(self, *, prior: Prior, closed: bool, optimizer: str, nesterov: bool, compile: bool,
                 kl_extra: int = 0, split: bool = False, advance: bool = False, members: Members | None = None,
                 prior_columns: int = 0, lr_column: bool = False) -> None:
        self.static = {"prior": prior, "closed": closed, "kl_extra": int(kl_extra), "split": bool(split)}
        #: a population's layout (the KL member by member: :func:`member_kl`), else None
        self.members = members
        #: the prior constants in a population's member table (:func:`member_constants`; 0: one prior)
        self.prior_columns = int(prior_columns)
        self.prime_static = {**self.static, "members": members, "prior_columns": self.prior_columns}
        self.step_static = {**self.prime_static, "optimizer": optimizer, "nesterov": nesterov,
                            "advance": bool(advance), "lr_column": bool(lr_column)}
        self.compiled = bool(compile)
        self.failed: str | None = None
        self._fns: dict[str, Callable[..., Any]] = {}

    def _fn(self, name: str, eager: Callable[..., Any], static: dict[str, Any],
            args: tuple[Any, ...]) -> tuple[Callable[..., Any], bool]:
        """The compiled kernel, and whether this process has not compiled it yet."""
        fn = self._fns.get(name)
        fresh = False
        if fn is None:
            key = (name, tuple(static.items()), _signature(args))
            fresh = key not in _COMPILED
            fn = _compiled(key, lambda *a: eager(*a, **static))
            self._fns[name] = fn
        return fn, fresh

    def _call(self, name: str, eager: Callable[..., Any], static: dict[str, Any], *args: Any) -> Any:
        if not self.compiled:
            return eager(*args, **static)
        try:
            fn, fresh = self._fn(name, eager, static, args)
            if not fresh:
                return fn(*args)
            _announce(name, None)
            start = time.perf_counter()
            out = fn(*args)
            _announce(name, time.perf_counter() - start)
            return out
        except Exception as e:  # noqa: BLE001 - any compiler failure: the eager kernels take over
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            self.failed = reason
            self.compiled = False
            warnings.warn(f"torch.compile failed in bbb's engine ({reason}); using its eager kernels",
                          RuntimeWarning, stacklevel=3)
            _log.debug("engine kernel %s fell back to eager: %s", name, reason)
            return eager(*args, **static)

    def prime(self, *args: Any) -> Tensor:
        return self._call("prime", _prime, self.prime_static, *args)

    def train_step(self, *args: Any) -> Tensor:
        return self._call("step", _train_step, self.step_static, *args)

    def train_step_given(self, *args: Any) -> Tensor:
        """The train step on a given gradient (the last argument, (2, n)): the ``.grad`` a user edited."""
        return self._call("step_given", _train_step, self.step_static, *args)
