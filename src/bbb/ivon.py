"""IVON (Shen et al., "Variational Learning is Effective for Large Deep Networks", ICML 2024) on
bbb's Bayesian layers: the same diagonal-Gaussian posterior as Bayes by Backprop, learned by a
natural-gradient (variational online Newton) update at about Adam's cost.

Written from the algorithm as its paper gives it; the published implementation (``ivon-opt``, GPL) is
only compared against, in a test that runs where it is installed.

The posterior lives in the layers: after every step each Bayesian weight's ``*_mu`` is IVON's mean
m and its ``*_rho`` holds sigma = 1 / sqrt(ess (h + weight_decay)) (sigma = softplus(rho)), so
``bbb.uncertainty.predict``, ``bbb.prune``, ``torch.save`` / ``load_state_dict`` and every ``bbb``
command read it as they read a network trained by Bayes by Backprop. The optimiser keeps the
Hessian estimate h, the momentum and its noise's seed and counter (``state_dict``: a resumed run
continues bit for bit).

One step::

    opt = bbb.IVON(net, lr=0.1, ess=len(train_set))
    for x, y in loader:
        with opt.sampling():                    # the layers use theta = m + sigma * eps
            loss = F.cross_entropy(net(x), y)   # the mean loss over the minibatch: no KL term
        opt.zero_grad()
        loss.backward()                         # the gradient G at theta, one backward pass
        opt.step()                              # h, momentum, m; sigma from h

Several samples a step (``ivon-opt``'s ``train_samples``): one ``with opt.sampling():`` block and
one backward pass per sample, then one step, which takes the mean of the blocks' gradients (and
of their products with the noise), as ``ivon-opt`` does: each block's loss is one sample's loss,
not divided by the number of samples. A block whose draws no backward reaches (a sampled
prediction between steps) is not a sample. Within one block the gradients add up, as the loss's
do (``forward_samples``' k rows under a mean loss); a layer called again in the block (a cell in a
loop, micro-batches) uses the block's one sample of its weights, as ivon-opt's block does.

Under ``torch.nn.parallel.DistributedDataParallel`` (built with ``find_unused_parameters=True`` or
``static_graph=True``: the mu's get no autograd ``.grad``) IVON averages its gradient across the
processes in the step, as :class:`bbb.Engine` does (:mod:`bbb.engine.distributed`); at the first
forward inside DDP every process takes the first one's mu, rho, h, momentum and noise seed.

A Bayesian mu's ``.grad`` is, between a backward and the step, the view of the gradient the
step applies: ``torch.nn.utils.clip_grad_norm_(model.parameters(), c)`` clips it (in place; an
assignment is a one-line error; a weight drawn more than once since the last step has no single
gradient and its ``.grad`` read is one too). IVON's own element-wise ``clip_radius`` clips the
update instead.

The prior is IVON's own: a zero-mean Gaussian of precision ``ess * weight_decay`` per weight, the
KL to it weighed by 1/ess against the mean loss, so ``weight_decay`` is an L2 penalty on the mean
loss (ess = the training-set size is the Bayesian choice, larger is a colder posterior; a prior
standard deviation s is ``weight_decay = 1 / (ess s^2)``). A :class:`bbb.ELBO` loss works too, but
its KL is not IVON's prior: inside :meth:`IVON.sampling` the model's KL is zero (a warning says so
once), and the ELBO's loss is its NLL. Every Bayesian layer must use the ``reparam`` estimator
(IVON's Hessian estimate needs the gradient of each sampled weight), and every trainable parameter
must be a Bayesian one.

Flat buffers, as :class:`bbb.Engine`'s: the trained weights of one dtype and device are laid out in
one flat vector (:class:`bbb.engine.layout.Slot`); the layers' ``*_mu`` and ``*_rho`` become views
of a flat mu and rho, the optimiser's momentum and h (``optimizer.state``, per parameter as before)
views of flat ones. A step draws the noise of all of them at once (the first draw after the last
step): :func:`bbb.random.normal` of the flat vector's size at the optimiser's seed and draw counter
(counter-based, as :class:`bbb.Engine`'s: the same numbers on any device and thread count; compiled
where the update is), forms theta in one op into a flat buffer whose per-weight views are the
layers' sample leaves, each leaf's ``.grad`` a view of one flat gradient (a ``BayesLinear``
without a mask writes its weight gradient there directly), and applies the update, sigma and rho in one (compiled) pass
over the flat vectors. A step that is not one sample of every weight (``forward_samples``' k at a
time, several blocks, a layer not used in the forward) updates weight tensor by weight tensor, as
before, on views of the same buffers: the same numbers. A weight drawn in the forward counts as
used: if its output does not reach the loss, its gradient is zero, and the step applies it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .devices import autocast_enabled
from .distributions import KLMode
from .engine.distributed import Averager, active_ddp, check_ddp, warn_without_ddp
from .engine.engine import COMPILE_MIN_NUMEL
from .engine.grads import FusedParameter
from .engine.sampler import LinearIntoBuffers
from .engine.support import compile_default, frozen_changed
from .errors import CheckpointError, UserError
from .ivon_buffers import AUTOGRAD_GRAD, HYPER, FlatBuffers, ForwardNotes, check_hyper, trained_pairs
from .ivon_math import inverse_softplus, ivon_flat_math, ivon_flat_update, ivon_update
from .nn.base import BayesModule
from .nn.samples import RECORDER, SHARED, SampleProvider, check_model, providing_samples
from .random import fill_normal_, key_tensor, normal_into_

__all__ = ["IVON", "inverse_softplus"]



class _IVONGrads:
    """What a Bayesian mu's ``.grad`` reads under IVON (:class:`bbb.engine.grads.FusedParameter`):
    after a backward, the view of the flat gradient at its one sample this step, which the update
    reads (an in-place edit, ``torch.nn.utils.clip_grad_norm_``, is what the step applies, to the
    gradient and to its product with the noise, as clipping inside ivon-opt's ``sampled_params``);
    None before a backward and after a step."""

    ASSIGN = ("the .grad of a Bayesian mu under bbb.IVON is a view of IVON's gradient: edit it in place "
              "(e.g. torch.nn.utils.clip_grad_norm_), do not assign it")

    def __init__(self, opt: IVON) -> None:
        self.opt = opt

    def owns(self, p: Tensor) -> bool:
        hit = self.opt._slot.get(id(p))
        return hit is not None and hit[0].params[hit[1]] is p

    def read(self, p: Tensor) -> Tensor | None:
        if not self.owns(p):
            return None
        self.opt._average(extra=False)
        f, i = self.opt._slot[id(p)]
        if any(w.grad is not None for _, w, _, _ in f.extra.get(i, ())):
            s = f.slots[i]
            raise UserError(f"IVON: {type(s.module).__name__}'s {s.name} was drawn more than once since the last "
                            "step (k samples at once, or several sampling() blocks), so its "
                            ".grad is not one tensor: clip with IVON's clip_radius instead, or one sample a step")
        return f.slots[i].view(f.g) if i in f.hit and f.g._version != f.clean else None


class IVON(torch.optim.Optimizer, SampleProvider):
    """IVON on the Bayesian layers of ``model`` (see the module's notes).

    Args:
        model: a network with Bayesian layers (``bbb.BayesMLP``, ``bbb.bayesianize(net)``, peft
            adapters converted by ``bayesianize``); only the posteriors whose mean requires a
            gradient are trained (a frozen layer stays as it is). Build IVON after moving the
            model to its device: the trained mu and rho become views of IVON's flat buffers.
        lr: the learning rate a.
        ess: the effective sample size lambda (usually the training-set size).
        hess_init: h at the start (sets sigma at the start: every ``*_rho`` is overwritten).
        weight_decay: delta, the prior's precision per example (the prior's is ``ess * delta``).
        beta1: the momentum of the gradient.
        beta2: the momentum of the Hessian estimate (close to 1).
        clip_radius: the element-wise clip of m's update direction (inf: none).
        rescale_lr: the step of m is ``lr * (hess_init + weight_decay)`` (as the published
            implementation by default), so that ``lr`` means the same for any ``hess_init``.
        seed: the seed of the optimiser's counter-based noise (:mod:`bbb.random`; None: drawn from
            torch's global generator).
        compile: run the step's arithmetic (:func:`ivon_flat_update`, :func:`ivon_update`) through
            ``torch.compile``; None: as :class:`bbb.Engine` decides (``BBB_COMPILE``; on CUDA, or on
            the CPU from ``bbb.engine.COMPILE_MIN_NUMEL`` weights). The same numbers either way, to
            rounding.
        others: what IVON does with trainable parameters outside the Bayesian layers (a LayerNorm's,
            a BatchNorm's, a layer left deterministic): ``"refuse"`` them in one line (none is left
            untrained without a word), or ``"leave"`` them to an optimiser of your own over
            :meth:`other_parameters` (stepped beside IVON's step, e.g. ``torch.optim.AdamW``).

    The loss must be the *mean* over the minibatch (and over the weight samples when a forward
    draws k of them, ``bbb.forward_samples``: their gradients are summed, as those of one mean):
    h is a per-example curvature.
    """

    def __init__(self, model: nn.Module, lr: float, ess: float, hess_init: float = 1.0,
                 weight_decay: float = 1e-4, beta1: float = 0.9, beta2: float = 0.99999,
                 clip_radius: float = math.inf, rescale_lr: bool = True, seed: int | None = None,
                 compile: bool | None = None, others: str = "refuse") -> None:
        check_hyper({"lr": lr, "ess": ess, "hess_init": hess_init, "weight_decay": weight_decay, "beta1": beta1,
                      "beta2": beta2, "clip_radius": clip_radius}, "")
        check_model("bbb.IVON", model)
        self.model = model
        self.pairs: list[tuple[BayesModule, str]]
        self.pairs, owned, others_ = trained_pairs(model, others)
        #: the trainable parameters outside the Bayesian layers, left to the caller (``others="leave"``)
        self._others = others_
        defaults = {"lr": float(lr), "ess": float(ess), "hess_init": float(hess_init),
                    "weight_decay": float(weight_decay), "beta1": float(beta1), "beta2": float(beta2),
                    "clip_radius": float(clip_radius), "rescale_lr": bool(rescale_lr)}
        super().__init__([m.mu(n) for m, n in self.pairs], defaults)
        self._owned = owned | {id(p) for p in self._others}  # (the others: the caller's optimiser trains them)
        self._watched = tuple(model.parameters())  # their requires_grad, checked at each step
        self._grad_flags = tuple(p.requires_grad for p in self._watched)
        dev = self.pairs[0][0].mu(self.pairs[0][1]).device
        #: the noise's seed and the number of draws so far: draw c is bbb.random.normal(n, seed, c)
        self.seed = int(seed) if seed is not None else int(torch.randint(2**62, ()).item())
        self._notes = ForwardNotes()  # the draw counter (``counter``) and whether a forward drew
        self._warned_kl = False
        #: sampling() blocks entered since the last step: the step averages over those whose draws a backward reached
        self._block = 0
        self._inside = 0  # sampling() blocks open now
        self._checked: tuple[Any, ...] | None = None  # param_groups[0]'s hyperparameters when last checked
        self._ddp: Averager | None = None  # DistributedDataParallel's group, from the first forward inside one
        self._dist_checked = False
        self._warned_idle = False
        numel = sum(m.mu(n).numel() for m, n in self.pairs)
        compiled = compile_default(compile, dev, numel, COMPILE_MIN_NUMEL)
        self._update = torch.compile(ivon_update, dynamic=True) if compiled else ivon_update
        if not compiled:
            self._flat_update: Callable[..., None] = ivon_flat_update
        elif dev.type == "cpu":  # the zeroing apart: in one function Inductor's CPU update loop is serial
            self._flat_update = functools.partial(ivon_flat_update, kernel=torch.compile(ivon_flat_math, dynamic=True))
        else:  # one kernel launch for both (Triton)
            self._flat_update = torch.compile(ivon_flat_update, dynamic=True)
        # the (2, half) block of noise: one compiled loop over the pairs (cosine and sine once each);
        # eagerly into the flat view, with no temporary
        self._noise = (torch.compile(fill_normal_, dynamic=True) if compiled
                       else lambda pairs, index, keys: normal_into_(pairs.view(-1)[: pairs.numel()], index, keys))
        # the flat buffers, one per (dtype, device) of mu and rho; a weight tensor trained twice
        # (one parameter in two layers) has one slot
        by_kind: dict[tuple[Any, ...], list[tuple[BayesModule, str]]] = {}
        seen: set[int] = set()
        for m, n in self.pairs:
            mu, rho = m.mu(n), m.rho(n)
            if id(mu) not in seen:
                seen.add(id(mu))
                by_kind.setdefault((mu.device, mu.dtype, rho.device, rho.dtype), []).append((m, n))
        self._flats = [FlatBuffers(pairs, hess_init) for pairs in by_kind.values()]
        self._slot: dict[int, tuple[FlatBuffers, int]] = {}  # id(mu) -> its buffers and slot
        self._grads = _IVONGrads(self)  # the mu's .grad: a view of the flat gradient (FusedParameter)
        grad_class = type("FusedParameter", (FusedParameter,), {"_bbb_engine": weakref.ref(self),
                                                                 "__module__": FusedParameter.__module__})
        for f in self._flats:
            for i, p in enumerate(f.params):
                self._slot[id(p)] = (f, i)
                p.__class__ = grad_class
                self.state[p] = {"step": 0, "momentum": f.slots[i].view(f.momentum), "hess": f.slots[i].view(f.hess)}
            if compiled:
                for t in (f.mu, f.momentum, f.hess, f.g, f.eps, f.sig, f.rho, f.index):
                    torch._dynamo.mark_dynamic(t, 0)  # one compiled loop for any model's size
                torch._dynamo.mark_dynamic(f.eps_pairs, 1)
        self._write_sigma()

    # -- the posterior in the layers ----------------------------------------------------------
    def _sigma(self, mu: Tensor) -> Tensor:
        """sigma = 1 / sqrt(ess (h + weight_decay)) of the mean ``mu`` (kept from the last step)."""
        f, i = self._slot[id(mu)]
        return f.slots[i].view(f.sig)

    @torch.no_grad()
    def _write_sigma(self) -> None:
        """Every trained ``*_rho`` from h: sigma = 1 / sqrt(ess (h + weight_decay)), one op per buffer."""
        g = self.param_groups[0]
        for f in self._flats:
            torch.rsqrt(g["ess"] * (f.hess + g["weight_decay"]), out=f.sig)
            f.rho.copy_(inverse_softplus(f.sig))
        self._sigma_key = (g["ess"], g["weight_decay"])

    # -- sampling (bbb.nn.samples.SampleProvider) ---------------------------------------------
    @contextlib.contextmanager
    def sampling(self) -> Iterator[IVON]:
        """The forward passes inside draw theta = m + sigma * eps with this optimiser's noise; the
        step reads the gradient of each sampled weight."""
        for f in self._flats:
            f.check_placement()
        g = self._checked_group()
        if not self._notes.drew and (g["ess"], g["weight_decay"]) != self._sigma_key:
            self._write_sigma()  # ess or weight_decay edited since the last step: this step samples with them
        self._block += 1
        self._inside += 1
        try:
            with providing_samples(self):
                yield self
        finally:
            self._inside -= 1

    def _checked_group(self) -> dict[str, Any]:
        """``param_groups[0]``, its hyperparameters checked where they changed since the last check."""
        g = self.param_groups[0]
        key = tuple(g[k] for k in HYPER)
        if key != self._checked:
            check_hyper(g, "param_groups[0]'s ")
            self._checked = key
        return g

    def other_parameters(self) -> list[nn.Parameter]:
        """The model's trainable parameters outside its Bayesian layers, which IVON built with
        ``others="leave"`` does not train: give them to an optimiser of your own (empty otherwise)."""
        return list(self._others)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim``'s: the gradients that backward passes left since the last step are
        discarded (a backward whose step was skipped does not reach the next step), and with them the
        draws they came from (the next forward draws afresh); a draw no backward reached yet stays
        (the docs' loop calls it between the forward and the backward). Inside a ``sampling()``
        block only the gradients of that block's draws (ivon-opt's README calls it there, before
        each sample's forward: the earlier samples of the step are kept)."""
        for group in self.param_groups:  # autograd's own .grad of each mu (a backward outside sampling())
            for p in group["params"]:
                own = AUTOGRAD_GRAD.__get__(p)
                if own is not None:
                    AUTOGRAD_GRAD.__set__(p, None) if set_to_none else own.zero_()
        inside = self._inside > 0
        for f in self._flats:
            if f.g._version != f.clean and (not inside or f.flat_block == self._block):
                f.g.zero_()
                f.clean = f.g._version
                if not inside:  # a skipped step's draw: the next forward draws afresh, as after a step
                    f.hit.clear()
                    f.fresh = True
            for i, draws in list(f.extra.items()):
                if not inside:  # the draws a backward reached are forgotten with their gradients
                    f.extra[i] = kept = [d for d in draws if d[1].grad is None]
                    if not kept:
                        del f.extra[i]
                else:
                    for _, w, _, block in draws:
                        if block == self._block:
                            w.grad = None

    @property
    def counter(self) -> int:
        """The number of noise draws so far: draw c is ``bbb.random.normal(n, seed, c)``."""
        return self._notes.counter

    @counter.setter
    def counter(self, value: int) -> None:
        self._notes.counter = int(value)

    def _see_forward(self) -> None:
        """A draw: note it; at the first forward inside DistributedDataParallel, join its group."""
        self._notes.drew = True
        if self._ddp is None:
            ddp = active_ddp()
            if ddp is not None:
                torch.compiler.disable(self._join)(ddp)

    def _join(self, ddp: Any) -> None:
        """The first forward inside ``ddp``: one starting point on every process (the first one's
        mu, rho, h, momentum and the noise's seed and counter), and the gradient averaged from now on
        (:mod:`bbb.engine.distributed`, as :class:`bbb.Engine`'s)."""
        check_ddp(ddp, [p for f in self._flats for p in f.params], "bbb.IVON")
        self._ddp = Averager(ddp, [])
        dev = self._flats[0].mu.device
        noise = torch.tensor([self.seed, self.counter], dtype=torch.int64, device=dev)
        self._ddp.broadcast([*(t for f in self._flats for t in (f.mu, f.rho, f.momentum, f.hess)), noise])
        self.seed, self.counter = (int(v) for v in noise.tolist())
        self._write_sigma()
        for f in self._flats:
            f.fresh = True  # (drawn again from the common start)

    def _average(self, extra: bool) -> None:
        """Under DistributedDataParallel: the flat gradient averaged across the processes wherever a
        backward changed it since its last average (in the step, or at a read of a mu's ``.grad``, so
        that clipping sees the average; averaging an averaged part again leaves it as it is), and
        with ``extra`` (the step) the gradients of the draws of their own."""
        if self._ddp is None:
            return
        for f in self._flats:
            if f.g._version not in (f.clean, f.averaged):
                self._ddp.average(f.g, None)
                f.averaged = f.g._version
            for draws in f.extra.values() if extra else ():
                for _, w, _, _ in draws:
                    if w.grad is not None:
                        self._ddp.average(w.grad, None)

    def _keys(self, device: torch.device) -> Tensor:
        """The keys of the next draw (the counter advanced), on ``device`` without a host sync."""
        keys = key_tensor(self.seed, self._notes.counter)
        self._notes.counter += 1
        return keys.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else keys

    @torch.no_grad()
    def _draw_flat(self, f: FlatBuffers) -> None:
        """This step's noise of every weight of ``f`` (one counter-based draw over the flat vector,
        or :meth:`normal` per weight tensor where it was replaced) and the sample theta = mu + sigma
        * eps (one op)."""
        if getattr(self.normal, "__func__", None) is IVON.normal:
            self._noise(f.eps_pairs, f.index, self._keys(f.mu.device))
        else:
            for s, e in zip(f.slots, f.eps_views):
                e.copy_(self.normal(s.shape, s.module.mu(s.name)))
        torch.addcmul(f.mu, f.sig, f.eps, out=f.w)
        f.fresh = False
        f.flat_block = self._block

    def draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
        # in a compiled forward, outside the graph: the flat draw writes the graph's inputs, a draw of its
        # own takes the next counter (Python integers), and the step's record of the weights drawn (a set)
        # would be guarded, one graph per layer and step's draws so far, past the recompile limit (eager)
        return (torch.compiler.disable(self._draw) if torch.compiler.is_compiling() else self._draw)(module, name, k)

    def _draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
        mu = module.mu(name) if isinstance(module, BayesModule) else None
        hit = None if mu is None else self._slot.get(id(mu))
        if hit is None or mu is None:
            return None  # a frozen layer: drawn as usual
        f, i = hit
        self._see_forward()
        if k is None and i not in f.hit:  # this step's flat sample
            if f.fresh:
                self._draw_flat(f)
            f.hit[i] = self._block
            return mu, f.eps_views[i], f.leaves[i]
        if k is None:  # used again in this block (a cell in a loop): the block's one sample of its weights
            if f.hit.get(i) == self._block:
                return mu, f.eps_views[i], f.leaves[i]
            for eps, w, rows, block in f.extra.get(i, ()):
                if not rows and block == self._block:
                    return mu, eps, w
        # k samples at once, or a first use in a later block (another sample of the step): a draw of its own
        shape = tuple(mu.shape) if k is None else (k, *mu.shape)
        eps, w = self._draw_own(mu, shape)
        f.extra.setdefault(i, []).append((eps, w, k is not None, self._block))
        return mu, eps, w

    @torch.no_grad()
    def _draw_own(self, mu: Tensor, shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """A draw of its own of ``mu``'s weights: the noise (the next counter) and the sample leaf."""
        eps = self.normal(shape, mu)
        return eps, torch.addcmul(mu, self._sigma(mu), eps).requires_grad_(True)

    def linear(self, module: nn.Module, x: Tensor) -> Tensor | None:
        """A ``BayesLinear`` (one sample, no mask, no autocast, eager) on the flat sample: its backward
        writes the weight gradient into the flat gradient directly (no weight-sized temporary)."""
        if x.dim() != 2 or torch.compiler.is_compiling() or RECORDER.get() is not None or SHARED.get() is not None:
            return None
        w_hit = self._slot.get(id(getattr(module, "weight_mu", None)))
        b_mu = getattr(module, "bias_mu", None)
        b_hit = None if b_mu is None else self._slot.get(id(b_mu))
        if w_hit is None or (b_mu is not None and (b_hit is None or b_hit[0] is not w_hit[0])):
            return None
        f, i = w_hit
        if (i in f.hit or (b_hit is not None and b_hit[1] in f.hit) or autocast_enabled(x.device.type)
                or getattr(module, "weight_mask", None) is not None or getattr(module, "bias_mask", None) is not None):
            return None
        self._see_forward()
        if f.fresh:
            self._draw_flat(f)
        f.hit[i] = self._block
        b = gb = None
        if b_hit is not None:
            f.hit[b_hit[1]] = self._block
            b, gb = f.w_views[b_hit[1]], f.g_views[b_hit[1]]
        return LinearIntoBuffers.apply(x, f.w_views[i], b, f.g_views[i], gb, f.leaves[i])

    def normal(self, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """Standard normal noise of ``shape``: the optimiser's next counter-based draw
        (:func:`bbb.random.normal`; a test may replace this method: then every draw, the flat one
        too, takes its noise from it, weight tensor by weight tensor)."""
        n = math.prod(shape)
        out = torch.empty(n, device=like.device, dtype=like.dtype)
        normal_into_(out, torch.arange((n + 1) // 2, dtype=torch.int32, device=like.device), self._keys(like.device))
        return out.view(shape)

    def model_kl(self, model: nn.Module, mode: KLMode, kl_samples: int | None = None) -> Tensor | None:
        if not self._warned_kl:
            self._warned_kl = True
            warnings.warn("IVON: the model's KL is zero inside IVON.sampling(): IVON's prior is its own "
                          "(precision ess * weight_decay), not the ELBO's prior and KL weighting", stacklevel=3)
        return torch.zeros((), device=self.pairs[0][0].mu(self.pairs[0][1]).device)

    # -- the step -----------------------------------------------------------------------------
    def _hp(self, step: int, device: torch.device) -> Tensor:
        """The update's hyperparameters at ``step`` on ``device`` (float64)."""
        group = self.param_groups[0]
        b1, wd = group["beta1"], group["weight_decay"]
        lr = group["lr"] * ((group["hess_init"] + wd) if group["rescale_lr"] else 1.0)
        hp = torch.tensor([b1, group["beta2"], wd, lr, 1.0 - b1 ** step, group["ess"], group["clip_radius"]],
                          dtype=torch.float64)
        # to a GPU from pinned memory, asynchronously: no host synchronisation in the step
        return hp.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else hp.to(device)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._notes.drew:
            if not any(m.is_sampling() for m, _ in self.pairs):  # every trained layer uses its mean
                raise UserError(f"IVON.step: no weight was sampled since the last step: {type(self.model).__name__} "
                                "is in eval() mode, where its Bayesian layers use their means; call model.train() "
                                "before the training forward (a model converted in eval() stays in eval())")
            raise UserError("IVON.step: no weight was sampled since the last step: run the forward pass inside "
                            "`with optimizer.sampling():` (and call backward before step)")
        self._check_grad_flags()
        self._check_mean_grads()
        self._checked_group()
        if not self._dist_checked:
            self._dist_checked = True
            if self._ddp is None:
                warn_without_ddp("bbb.IVON")
        self._average(extra=True)
        # the blocks whose draws a backward reached: the Monte Carlo samples of this step's loss
        blocks = {f.flat_block for f in self._flats if f.hit and f.g._version != f.clean}
        blocks.update(b for f in self._flats for draws in f.extra.values() for _, w, _, b in draws
                      if w.grad is not None)
        if not blocks and not self._warned_idle:
            self._warned_idle = True
            warnings.warn("IVON.step: no backward pass reached the sampled weights since the last step (call "
                          "loss.backward() before step()): nothing was updated", UserWarning, stacklevel=2)
        for f in self._flats:
            backward = f.g._version != f.clean  # a backward reached the flat sample (no sync: a Python counter)
            states = [self.state[p] for p in f.params]
            t = states[0]["step"]
            if backward and not f.extra and len(f.hit) == len(f.slots) and all(st["step"] == t for st in states):
                for st in states:
                    st["step"] = t + 1
                self._flat_update(f.mu, f.momentum, f.hess, f.g, f.eps, f.sig, f.rho, self._hp(t + 1, f.mu.device))
            elif f.hit or f.extra:
                self._step_each(f, states, backward, len(blocks))
            f.clean = f.g._version
            f.hit.clear()
            f.extra.clear()
            f.fresh = True
        self._notes.drew = False
        self._block = 0
        self._sigma_key = (self.param_groups[0]["ess"], self.param_groups[0]["weight_decay"])  # (the step's sigma)
        return loss

    def _check_mean_grads(self) -> None:
        """A one-line error where a backward reached a trained mean itself (:meth:`FlatBuffers.stray_grad`)."""
        for f in self._flats:
            problem = f.stray_grad()
            if problem is not None:
                raise UserError(f"IVON.step: {problem}")

    def _check_grad_flags(self) -> None:
        """A one-line error when a trained mean was frozen (requires_grad=False) after IVON was built,
        which it would still update, or a parameter it does not train was unfrozen (never updated)."""
        flags = tuple(p.requires_grad for p in self._watched)
        if flags == self._grad_flags:
            return
        means = tuple(p for g in self.param_groups for p in g["params"])
        reason = frozen_changed(self.model, self._watched, self._owned, means, "IVON")
        if reason is not None:
            raise UserError(f"IVON.step: {reason}")
        self._grad_flags = flags

    def _step_each(self, f: FlatBuffers, states: list[dict[str, Any]], backward: bool, blocks: int) -> None:
        """The step weight tensor by weight tensor, on views of the flat buffers: the tensors drawn
        k at a time, twice, or not at all (left as they are), or whose step counts differ. With
        ``blocks`` > 1 ``sampling()`` blocks since the last step whose draws a backward reached (one
        Monte Carlo sample of the loss each), the gradient and its product with the noise are their
        means over those blocks."""
        hps: dict[int, Tensor] = {}
        for i, (s, st) in enumerate(zip(f.slots, states)):
            grads = [(eps, w.grad, rows) for eps, w, rows, _ in f.extra.get(i, ()) if w.grad is not None]
            if backward and i in f.hit:
                grads.insert(0, (f.eps_views[i], s.view(f.g), False))
            if not grads:
                continue  # not used by this step's forward (an inactive branch): left as it is
            if len(grads) == 1 and not grads[0][2]:
                g, gz = grads[0][1], grads[0][1] * grads[0][0]
            else:  # a draw of k samples at once: its rows summed (the loss averages over them)
                g = torch.stack([gw.sum(0) if rows else gw for _, gw, rows in grads]).sum(0)
                gz = torch.stack([(gw * eps).sum(0) if rows else gw * eps for eps, gw, rows in grads]).sum(0)
            if blocks > 1:
                g, gz = g / blocks, gz / blocks
            st["step"] += 1
            if st["step"] not in hps:
                hps[st["step"]] = self._hp(st["step"], f.mu.device)
            part = slice(s.offset, s.offset + s.numel)  # flat (n,) views: one compiled loop for every shape
            flat = [f.mu[part], f.momentum[part], f.hess[part], g.reshape(-1), gz.reshape(-1), f.sig[part]]
            if self._update is not ivon_update:
                for x in flat:
                    torch._dynamo.mark_dynamic(x, 0)
            sigma, rho = self._update(flat[0], flat[1], flat[2], flat[3], flat[4], flat[5], hps[st["step"]])
            f.sig[part].copy_(sigma)
            f.rho[part].copy_(rho)
        f.g.zero_()

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """The group of the model's Bayesian weights is IVON's only one (its hyperparameters are
        read from it): a second group is a one-line error, not a group whose settings are ignored."""
        if self.param_groups:
            raise UserError("IVON keeps one group, the model's Bayesian weights: build another IVON for another "
                            "model, or change lr, ess, weight_decay in optimizer.param_groups[0]")
        super().add_param_group(param_group)

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        sd = super().state_dict()
        sd["noise"] = {"seed": self.seed, "counter": self.counter}
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s state (one written before the flat buffers existed too: the
        same keys): the momentum and h are copied into the flat buffers, whose views they stay."""
        sd = dict(state_dict)
        noise, gen = sd.pop("noise", None), sd.pop("generator", None)
        super().load_state_dict(sd)
        if noise is not None:
            self.seed, self.counter = int(noise["seed"]), int(noise["counter"])
        elif gen is not None:
            warnings.warn("IVON: this state was saved by a bbb whose IVON drew its noise from a torch generator; "
                          f"training continues with counter-based noise (seed {self.seed}): the same distribution, "
                          "not the numbers the old run would have drawn", stacklevel=2)
        with torch.no_grad():
            for f in self._flats:
                for s, p in zip(f.slots, f.params):
                    st = self.state[p]
                    for key, buf in (("momentum", f.momentum), ("hess", f.hess)):
                        view, saved = s.view(buf), st.get(key)
                        if saved is not None:
                            if tuple(saved.shape) != s.shape:
                                raise CheckpointError(f"IVON: the saved {key} of a weight has shape "
                                                      f"{tuple(saved.shape)}, the model's is {s.shape}: load the "
                                                      "optimiser state saved with this model")
                            view.copy_(saved)
                        st[key] = view
                    st.setdefault("step", 0)
                f.hit.clear()
                f.extra.clear()
                f.fresh = True
                f.g.zero_()
                f.clean = f.g._version
        self._notes.drew = False
        self._block = 0
        self._write_sigma()
