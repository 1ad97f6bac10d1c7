"""The training engine: an optimiser that also samples the weights.

:class:`Engine` replaces ``torch.optim.Adam`` / ``SGD`` for a model with Bayesian layers. The
layers' ``*_mu`` and ``*_rho`` parameters become views into flat buffers (``state_dict`` is
unchanged); inside ``with engine.sampling():`` every layer uses the engine's current weight
sample, an autograd leaf whose gradient lands in a flat buffer; ``engine.step()`` then runs one
fused kernel (:mod:`bbb.engine.kernels`) that adds the KL gradient, updates mu and rho and draws
the next sample from the counter-based generator (:mod:`bbb.random`)::

    elbo = ELBO(net, num_batches=M, kl="mc")
    engine = Engine(elbo, "adam", lr=1e-3, seed=0)   # num_samples, kl, kl_samples: the ELBO's
    for i, (x, y) in enumerate(loader):
        with engine.sampling():
            out = elbo(x, y, batch_index=i)
        engine.zero_grad()
        (out.loss / len(x)).backward()
        engine.step()

The fused kernel covers ``reparam`` layers whose priors write out their log-density gradient
or closed form, one dtype and device, Adam (no weight decay, no amsgrad) or SGD; anything else
runs the plain autograd path with a ``torch.optim`` optimiser inside the engine, with one
``UserWarning`` naming the reason (``fused=True`` makes it an error). Parameters outside the
Bayesian layers, and the ELBO's own, are trained by that optimiser too. docs/engine.md (in the
repository) gives the whole contract: gradients and clipping, a step without a forward,
parameter groups added later, DistributedDataParallel, the first compile.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any, cast

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import KLMode, MemberPrior, check_kl_samples
from ..elbo import ELBO
from ..errors import UserError, check_float, check_int
from ..nn import bayes_modules, providing_samples
from ..nn.samples import check_model
from ..options import StrOption
from . import distributed as ddp_
from . import graphs
from .grads import FusedGrads
from .kernels import HP_SIZE, KernelSet, member_constants, seed_mix
from .layout import Layout, member_index, placement_error
from .sampler import Sampler, kl_kind
from .state import ENGINE_FORMAT, engine_state, load_engine_state
from .support import (
    ADAM_BETAS,
    ADAM_EPS,
    check_fused_groups,
    check_kernel_options,
    check_member_lr_scale,
    check_optimizer_options,
    clip_grad_norm,
    compile_default,
    elbo_settings,
    frozen_changed,
    hyper_values,
    new_params,
    param_groups,
    torch_optimizer,
    unsupported_reason,
)

__all__ = ["OptimizerKind", "Engine", "COMPILE_MIN_NUMEL", "ENGINE_FORMAT"]

_log = logging.getLogger("bbb.engine")


#: on the CPU, below this many Bayesian weights, ``compile=None`` keeps the eager kernels (compiling
#: costs seconds, which a toy network never earns back); on CUDA the engine compiles at any size (the
#: eager kernels launch dozens of kernels a step, the compiled ones a few)
COMPILE_MIN_NUMEL = 1 << 15
#: device types whose engine forms each step's hyperparameters on the host and writes them into its
#: ``hp`` tensor in place (the host's memory: no copy); elsewhere the kernel forms them on the device
#: from the engine's counter tensor, and the host writes ``hp`` only when a hyperparameter changes
HOST_HP_DEVICES = ("cpu",)


class OptimizerKind(StrOption):
    ADAM = "adam"
    SGD = "sgd"


class Engine(torch.optim.Optimizer):
    """Adam or SGD for a Bayesian model, fused with weight sampling and the KL gradient.

    Args:
        model: the :class:`~bbb.elbo.ELBO` of the network (the documented way), or the network
            itself (create the engine after moving the network to its device). From an ELBO the
            engine takes ``num_samples``, ``kl`` and ``kl_samples`` (the ELBO owns them: leave
            them out here; a different value is a one-line :class:`UserError`) and trains the
            ELBO's own parameters too (a learned noise), as with ``params=elbo.parameters()``.
        optimizer: ``"adam"`` or ``"sgd"``.
        lr: the learning rate (Adam and SGD).
        betas: Adam's, as ``torch.optim.Adam``.
        eps: Adam's, as ``torch.optim.Adam``.
        momentum: SGD's, as ``torch.optim.SGD``.
        nesterov: SGD's, as ``torch.optim.SGD`` (the other optimiser's options: a :class:`UserError`).
        rho_lr_scale: rho's learning rate is ``lr * rho_lr_scale`` (mu's is ``lr``). Under plain
            SGD sigma barely moves from its initial value at the paper's learning rates; a larger
            step for rho lets it move. Kept in the parameter group (``"rho_lr_scale"``), so it is
            saved with the state dict; a scheduler that multiplies the rates (StepLR, cosine) scales
            both steps alike. On the plain path rho is a group of its own at ``lr * rho_lr_scale``:
            one that sets a value for every group (OneCycleLR's scalar ``max_lr``) gives rho mu's.
        num_samples: k weight samples per step; None: the ELBO's (1 when built from the
            network; an :class:`~bbb.elbo.ELBO` with the same ``num_samples`` evaluates them,
            folded into the batch dimension or with an explicit leading sample dimension).
        kl: ``"auto"``, ``"mc"``, ``"closed"`` or ``"split"``; None: the ELBO's (``"auto"`` when
            built from the network, then the ELBO's must agree).
        kl_samples: the weight samples a Monte Carlo KL averages over; None: the ELBO's (built
            from the network: the k of ``num_samples``, and the ELBO's must agree); K > k adds
            K - k samples of the KL's own, drawn by the fused kernel from the same counter-based
            noise (after the k rows).
        seed: the fused kernel's noise is a function of (seed, step counter) alone. None (the
            default): drawn from torch's default generator when the engine is built, so that
            ``torch.manual_seed`` decides it, as it decides the plain path's noise and
            :class:`bbb.IVON`'s; :meth:`load_state_dict` then takes the checkpoint's seed (a resume
            continues its noise). An int: this seed, and a checkpoint of another one is refused.
            Under DDP every process takes the first process's seed and counter. On the plain path
            the noise is torch's default generator's: there ``seed`` changes nothing (the
            fallback's ``UserWarning`` says so) and refuses no checkpoint.
        compile: ``True``/``False``, or ``None``: the environment's ``BBB_COMPILE`` where set (``0``:
            never, ``1``: always; :data:`bbb.engine.support.COMPILE_ENV`), else on CUDA compile at
            any size (when Triton is installed; without it one warning, and the eager kernels), on
            the CPU when the model has at least :data:`COMPILE_MIN_NUMEL` Bayesian weights.
        params: more parameters the loss depends on (tensors, or parameter groups as dicts with
            options of their own, e.g. ``lr``), trained by the inner ``torch.optim`` optimiser; a
            model's own unfused parameter given here steps in its group (with its options); a fused
            mu or rho in a group with options of its own is a one-line :class:`UserError`.
        fused: ``None`` fuses when the model allows it and otherwise takes the plain path with one
            ``UserWarning`` naming the reason; ``True`` makes that a one-line :class:`UserError`;
            ``False`` takes the plain path, silently.
        member_lr_scale: a population's (:class:`~bbb.nn.BayesPopulation`) learning rates member
            by member, as multiples of ``lr``: member j's is ``lr * member_lr_scale[j]`` (so that a
            grid over the learning rate trains as one population; schedulers scale every member's
            alike). Only on the fused kernel; anything else is a one-line :class:`UserError`. A
            prior per member is the layers' (:class:`~bbb.distributions.MemberPrior`).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerKind | str = OptimizerKind.ADAM,
        lr: float = 1e-3,
        *,
        betas: tuple[float, float] = ADAM_BETAS,
        eps: float = ADAM_EPS,
        momentum: float = 0.0,
        nesterov: bool = False,
        rho_lr_scale: float = 1.0,
        num_samples: int | None = None,
        kl: KLMode | str | None = None,
        kl_samples: int | None = None,
        seed: int | None = None,
        compile: bool | None = None,
        params: Any = None,
        fused: bool | None = None,
        member_lr_scale: Any = None,
    ) -> None:
        check_model("bbb.Engine", model)
        try:
            self.kind = OptimizerKind(optimizer)
        except ValueError:
            raise UserError(f"unknown optimizer {optimizer!r}; choose adam or sgd") from None
        try:
            kl_mode = None if kl is None else KLMode(kl)
        except ValueError:
            raise UserError(f"unknown KL mode {kl!r}; choose auto, closed, mc or split") from None
        lr = check_float("lr", lr, 0.0, above=True)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise UserError(f"betas must be two numbers in [0, 1), got {betas}")
        eps = check_float("eps", eps, 0.0, above=True)
        if not (0.0 <= momentum < 1.0):
            raise UserError(f"momentum must be in [0, 1), got {momentum}")
        check_optimizer_options(self.kind is OptimizerKind.ADAM, betas, eps, momentum, nesterov)
        rho_lr_scale = check_float("rho_lr_scale", rho_lr_scale, 0.0, above=True)
        k = None if num_samples is None else check_int("num_samples", num_samples)
        #: whether ``seed`` was given (else drawn, and a loaded state's replaces it)
        self.seed_given = seed is not None
        self.seed = check_int("seed", seed, 0) if seed is not None else int(torch.randint(2**62, ()).item())
        if kl_samples is not None:
            kl_samples = check_kl_samples(kl_samples, 1 if k is None else k)
        extra = param_groups(params)
        claimed = {id(p) for g in extra for p in g["params"]}  # a model's own tensor here: in its group
        if isinstance(model, ELBO):
            k, kl_mode, kl_samples = elbo_settings(model, k, kl_mode, kl_samples)
            extra = [*new_params(param_groups(model.parameters()), set(claimed)), *extra]
            model = model.model
        if fused not in (None, True, False):
            raise UserError(f"fused must be None, True or False, got {fused!r}")
        self.model = model
        self.k = 1 if k is None else k
        self.kl_mode = KLMode.AUTO if kl_mode is None else kl_mode
        self.kl_samples = None if kl_samples is None else check_kl_samples(kl_samples, self.k)
        self.counter = 0
        self._step_count = 0
        reason = unsupported_reason(model, self.kl_mode) or ("fused=False" if fused is False else None)
        if reason is not None and fused:
            raise UserError(f"bbb.Engine(fused=True) cannot fuse {type(model).__name__}: {reason}; leave fused "
                            "unset for the plain autograd path")
        layout = Layout(model) if reason is None else None
        if layout is not None and ddp_.is_ddp(model):
            ddp_.check_ddp(model, [getattr(s.module, f"{s.name}_{x}") for s in layout.slots for x in ("mu", "rho")])
        fused_params = ({id(getattr(s.module, f"{s.name}_{x}")) for s in layout.slots for x in ("mu", "rho")}
                        if layout is not None else set())
        # a frozen tensor (requires_grad=False) is never updated: not fused (above), not in torch's optimiser
        others = [p for p in model.parameters() if id(p) not in fused_params | claimed
                  and p.requires_grad]
        check_fused_groups(extra, fused_params)
        extra = new_params(extra, fused_params | {id(p) for p in others})
        if layout is None and not others and not extra:
            raise UserError(f"bbb.Engine: {type(model).__name__} has no parameter to train (every one has "
                            "requires_grad=False)")
        # the optimiser's own options only (a scheduler reads which there are: OneCycleLR cycles
        # betas[0] of an Adam engine, momentum of an SGD one)
        own = ({"betas": tuple(betas), "eps": float(eps)} if self.kind is OptimizerKind.ADAM
               else {"momentum": float(momentum), "nesterov": bool(nesterov)})
        defaults = {"lr": float(lr), **own, "rho_lr_scale": float(rho_lr_scale)}
        self._inner: torch.optim.Optimizer | None = None
        if others or extra:
            # what is not fused steps with torch's optimiser; the rho of Bayesian layers that are
            # not fused (the plain path) in a group of its own, at lr * rho_lr_scale (with a scale
            # of 1, one group: the state dicts saved before the scale existed load)
            rhos = ({id(getattr(m, f"{n}_rho")) for m in bayes_modules(model) for n in m.param_names()}
                    if rho_lr_scale != 1.0 else set())
            inner_groups: list[dict[str, Any]] = [{"params": [p for p in others if id(p) not in rhos]},
                            {"params": [p for p in others if id(p) in rhos], "lr": float(lr) * float(rho_lr_scale)}]
            inner_groups = [g for g in inner_groups if g["params"]] + extra
            self._inner = torch_optimizer(self.kind is OptimizerKind.ADAM, inner_groups, defaults)
        groups: list[dict[str, Any]] = []
        if layout is not None:
            groups.append({"params": [getattr(s.module, f"{s.name}_{x}") for s in layout.slots
                                      for x in ("mu", "rho")]})
        torch.optim.Optimizer.__init__(self, groups or [{"params": others}], defaults)
        if layout is None:
            self.param_groups = self._inner.param_groups if self._inner is not None else self.param_groups
            _log.debug("bbb.engine: plain path for %s: %s", type(model).__name__, reason)
            if fused is None:
                seeded = (f"; its noise is torch's default generator (torch.manual_seed), not seed={self.seed}"
                          if self.seed_given else "")
                warnings.warn(f"bbb.Engine: the fused kernel does not apply to this {type(model).__name__}: "
                              f"{reason}; it trains on the plain autograd path with torch.optim (the same "
                              f"results, slower){seeded}; fused=False silences this", UserWarning, stacklevel=2)
        elif self._inner is not None:
            self.param_groups.extend(self._inner.param_groups)  # the same dicts: schedulers reach both
        self.fallback_reason = reason
        self.layout = layout
        # what _check_placement reads at each sampling(): each slot's parameter dict, names and offset
        self._placement = [(s.module._parameters, f"{s.name}_mu", f"{s.name}_rho", s.offset)
                           for s in (layout.slots if layout is not None else ())]
        #: the members' learning rates as multiples of ``lr`` (a tuple), or None: one for all
        self.member_lr_scale = check_member_lr_scale(member_lr_scale, layout, reason)
        self._extra = [p for grp in extra for p in grp["params"]]
        self._warned_idle = False
        self._ddp: ddp_.Averager | None = None
        self._dist_checked = False
        self._averaged = False
        self._sampler = Sampler(self, self.k, self.kl_mode, self.kl_samples)  # what the forward reads
        self._grads = FusedGrads(self)  # the fused mu's and rho's .grad
        self._sampler.groups = self.param_groups
        self._watched = tuple(model.parameters())  # their requires_grad, checked at each step
        self._grad_flags = tuple(p.requires_grad for p in self._watched)
        if layout is not None:
            self._build(layout, compile)

    # -- buffers --------------------------------------------------------------------------------
    def _build(self, layout: Layout, compile: bool | None) -> None:
        first = layout.slots[0]
        ref = getattr(first.module, f"{first.name}_mu")
        dev, dt = ref.device, ref.dtype
        n, k = layout.numel, self.k
        self._prior = first.module.prior
        self._split, self._closed = kl_kind(self._prior, self.kl_mode)
        # a population's members' own prior and learning rate: a table the kernels look each weight's up in
        member_prior = self._prior if isinstance(self._prior, MemberPrior) else None
        cols = [] if member_prior is None else [member_prior.table(dev, dt)]
        if self.member_lr_scale is not None:
            cols.append(torch.tensor(self.member_lr_scale, device=dev, dtype=dt).view(-1, 1))
        members_of = layout.members()
        self._pm = None if not cols or members_of is None else (torch.cat(cols, 1), member_index(members_of, dev))
        # the rows of noise the KL draws of its own: the split's importance sample, or the Monte
        # Carlo KL's samples beyond the likelihood's (a closed form needs none)
        kl_extra = 1 if self._split else 0 if self._closed or self.kl_samples is None else self.kl_samples - k
        with torch.no_grad():
            self._mu = layout.gather("mu").to(dev, dt).contiguous()
            self._rho = layout.gather("rho").to(dev, dt).contiguous()
        for s in layout.slots:  # the parameters become views of the flat buffers
            getattr(s.module, f"{s.name}_mu").data = s.view(self._mu)
            getattr(s.module, f"{s.name}_rho").data = s.view(self._rho)
        half = ((k + kl_extra) * n + 1) // 2
        self._noise = [torch.zeros((2, half), device=dev, dtype=dt) for _ in range(2)]
        if half >= 1 << 31:
            raise ValueError(f"the engine draws at most 2^32 numbers a step; {k + kl_extra} samples of {n} "
                             "weights are more")
        self._index = torch.arange(half, device=dev, dtype=torch.int32)
        self._w = torch.zeros((k, n), device=dev, dtype=dt)
        self._g = torch.zeros((k, n), device=dev, dtype=dt)
        self._sig = torch.zeros(n, device=dev, dtype=dt)
        self._sr = torch.zeros(n, device=dev, dtype=dt)
        self._kl_mask = layout.kl_mask(dev, dt)  # None: every weight counts in the KL
        self._dlp = None if self._closed else torch.zeros((2 if kl_extra else k, n), device=dev, dtype=dt)
        nstate = {OptimizerKind.ADAM: 4}.get(self.kind, 2 if self.param_groups[0].get("momentum", 0.0) > 0 else 0)
        self._state = tuple(torch.zeros(n, device=dev, dtype=dt) for _ in range(nstate))
        self._sampler.bind(layout, self._prior, self._w, self._g, (self._eps(0), self._eps(1)))
        # the kernels' hp (hyperparameters, then the noise's keys: float64) and, where they are formed
        # on the device, the counter they come from (step, noise counter, SplitMix64(seed): int64)
        self._hp = torch.zeros(HP_SIZE + 3, device=dev, dtype=torch.float64)
        self._on_device = dev.type not in HOST_HP_DEVICES
        self._hp_np = None if self._on_device else self._hp.numpy()
        self._ctr = torch.zeros(3, device=dev, dtype=torch.int64) if self._on_device else None
        self._hp_key: tuple[Any, ...] | None = None  # the hyperparameters in hp (device form)
        self.kernels = KernelSet(prior=self._prior if member_prior is None else member_prior.family,
                                 closed=self._closed, optimizer=self.kind.value,
                                 nesterov=bool(self.param_groups[0].get("nesterov")), kl_extra=kl_extra,
                                 split=self._split,
                                 compile=compile_default(compile, dev, n, COMPILE_MIN_NUMEL), advance=self._on_device,
                                 members=members_of, prior_columns=0 if member_prior is None else cols[0].shape[1],
                                 lr_column=self.member_lr_scale is not None)
        self._fused_params = tuple(self.param_groups[0]["params"])
        members = self.kernels.members
        self._kl_out = torch.zeros(1 + (0 if members is None else members[0]), device=dev, dtype=dt)
        self._sampler.kl = self._kl_out[0]  # (a view: _set_kl writes it in place)
        self._grads.adopt(layout)
        # the train step's arguments before c, hp and the state, by the parity of the current noise
        self._step_args = tuple((self._mu, self._rho, self._g, self._eps(cur), self._noise[1 - cur], self._index,
                                 self._w, self._sig, self._sr, self._dlp, self._kl_mask, self._pm) for cur in (0, 1))
        self._prime()

    def gradient_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~bbb.engine.kernels.gradients` for this engine's fused
        weights (its prior and KL, and a population's members' own prior constants)."""
        pc, _ = member_constants(self._pm, self.kernels.prior_columns, False)
        return {**self.kernels.static, "pc": pc}

    def _versions(self) -> tuple[int, ...]:
        return tuple(p._version for p in self._fused_params)

    def _eps(self, i: int) -> Tensor:
        return self._noise[i].view(-1)[: self.k * self.layout.numel].view(self.k, self.layout.numel)  # type: ignore[union-attr]

    def _hyper_key(self) -> tuple[Any, ...]:
        """The hyperparameters in ``hp`` that do not change from step to step."""
        grp = self.param_groups[0]
        return grp["lr"], grp.get("betas"), grp.get("eps"), grp.get("momentum", 0.0), grp["rho_lr_scale"]

    def _hyper_values(self) -> tuple[float, ...]:
        """The kernels' ``hp`` as numbers (:func:`~bbb.engine.support.hyper_values`)."""
        return hyper_values(self.param_groups[0], self.kind is OptimizerKind.ADAM, self._step_count, self.seed,
                            self.counter)

    def _write_hyper(self) -> None:
        """Bring ``hp`` (and ``ctr``) to this step from the host, in place.

        Host memory: the numbers written into it, every step (no tensor is made). A device: one
        asynchronous copy from pinned memory (no synchronisation), only when called, i.e. when the
        engine is primed or a hyperparameter changed; the kernel advances the rest itself.
        """
        if self._hp_np is not None:
            self._hp_np[:] = self._hyper_values()
            return
        self._hp_key = self._hyper_key()
        hp = torch.tensor(self._hyper_values(), dtype=torch.float64)
        ctr = torch.tensor((self._step_count, self.counter, seed_mix(self.seed)), dtype=torch.int64)
        cuda = self._hp.device.type == "cuda"
        self._hp.copy_(hp.pin_memory() if cuda else hp, non_blocking=cuda)
        self._ctr.copy_(ctr.pin_memory() if cuda else ctr, non_blocking=cuda)  # type: ignore[union-attr]

    def _prime(self) -> None:
        """Draw the noise of the current counter and form its sample from the current mu, rho."""
        self._sampler.cur = 0
        self._write_hyper()
        with torch.no_grad():
            self._set_kl(self.kernels.prime(self._mu, self._rho, self._noise[0], self._index, self._hp, self._w,
                                            self._sig, self._sr, self._dlp, self._kl_mask, self._pm))
        self._clean = self._grads.versions()  # g and c as no backward left them
        self._seen = self._versions()

    @property
    def fused(self) -> bool:
        """Whether the fused kernel runs (False: the plain path, see ``fallback_reason``)."""
        return self.layout is not None

    @property
    def compiled(self) -> bool:
        return self.fused and self.kernels.compiled

    # -- sampling ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def sampling(self) -> Iterator[Engine]:
        """Inside the block, the model's Bayesian layers use the engine's current weights."""
        if self.fused:
            self._check_placement()
            if self._versions() != self._seen:  # mu or rho changed from outside (load_state_dict...)
                self._prime()
        with providing_samples(self._sampler):  # on the plain path too: it draws nothing, but sees the forward
            yield self

    def _check_placement(self) -> None:
        """Every layer's mu and rho must still be views of the engine's buffers, which ``model.to``,
        one layer's ``.double()`` or ``load_state_dict(..., assign=True)`` replace (the engine would
        neither read nor update them): a one-line error, from Python attributes alone (no sync)."""
        mu, rho, size = self._mu.data_ptr(), self._rho.data_ptr(), self._mu.element_size()
        for params, mu_name, rho_name, offset in self._placement:  # (another dtype or device: another pointer)
            p, q = cast(Tensor, params[mu_name]), cast(Tensor, params[rho_name])
            if p.data_ptr() != mu + offset * size or q.data_ptr() != rho + offset * size:
                raise placement_error("Engine", p if p.data_ptr() != mu + offset * size else q, self._mu)

    def _join(self, ddp: Any) -> None:
        """The first forward inside ``ddp``: check it, take its process group, start from one state."""
        if self.fused:
            ddp_.check_ddp(ddp, self._fused_params)
        self._ddp = ddp_.Averager(ddp, self._extra)
        if self.fused:
            noise = torch.tensor([self.seed, self.counter, self._step_count], dtype=torch.int64, device=self._mu.device)
            self._ddp.broadcast([self._mu, self._rho, noise])
            self.seed, self.counter, self._step_count = (int(v) for v in noise.tolist())
            self._prime()
        else:
            self._ddp.broadcast([])

    @property
    def kl(self) -> Tensor | None:
        """The KL value of the current weight sample (None on the plain path): a copy (the engine
        keeps the value in one buffer, which the next step overwrites)."""
        return self._sampler.kl.detach().clone() if self.fused else None

    @property
    def kl_members(self) -> Tensor | None:
        """A population's KL member by member: ``(members,)``, the KL of each
        :class:`~bbb.nn.BayesPopulation` member's current weight sample (their sum is :attr:`kl`, to
        rounding), formed in the kernel's pass; None for any other model and on the plain path.
        Read it after the forward under :meth:`sampling` (and before :meth:`step`, which draws
        the next sample) for the KL of the sample that forward used. A copy, as :attr:`kl`."""
        return None if self.kernels.members is None or not self.fused else self._kl_out[1:].clone()

    def _set_kl(self, out: Tensor) -> None:
        """The kernel's KL value (a scalar, or a population's [total, member 0, ...]) into the one
        buffer the forward reads (``sampler.kl``, a view of it): the same memory every step, so a
        step replayed from a captured CUDA graph hands the next forward its value."""
        self._kl_out.copy_(out.reshape(-1))

    # -- optimisation --------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Train one more parameter group (as ``torch.optim``'s): the engine's inner ``torch.optim``
        optimiser steps it (created now if the engine had none), with the engine's options where
        the group sets none. A parameter the engine already trains is a one-line :class:`UserError`."""
        if "_sampler" not in self.__dict__:  # torch.optim.Optimizer.__init__ adding the engine's own groups
            super().add_param_group(param_group)
            return
        if not isinstance(param_group, dict):
            raise UserError("engine.add_param_group takes a parameter group: {'params': [...], ...}")
        group = param_groups(param_group)[0]
        trained = {id(p) for g in self.param_groups for p in g["params"]}
        again = [p for p in group["params"] if id(p) in trained]
        if again or len({id(p) for p in group["params"]}) != len(group["params"]):
            raise UserError(f"engine.add_param_group: {max(len(again), 1)} of its parameters are already trained "
                            "by this engine (or listed twice); add each parameter once")
        if self._ddp is not None:
            raise UserError("engine.add_param_group after the first forward under DistributedDataParallel: "
                            "add the group before training (or pass it as params= to the Engine)")
        if self._inner is None:
            self._inner = torch_optimizer(self.kind is OptimizerKind.ADAM, [group], self.defaults)
        else:
            self._inner.add_param_group(group)
        if self._inner.param_groups is not self.param_groups:
            self.param_groups.append(self._inner.param_groups[-1])  # the same dict: schedulers reach it
        self._extra.extend(group["params"])

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim``'s: the gradients of backward passes since the last step are discarded
        (a backward whose step was skipped does not reach the next step). The fused part's buffers
        are zeroed only then: the kernel clears them in each step."""
        if self._inner is not None:
            self._inner.zero_grad(set_to_none=set_to_none)
        if self.fused and self._grads.versions() != self._clean:
            self._g.zero_()
            self._sampler.anchor.grad.zero_()  # type: ignore[union-attr]
            self._clean = self._grads.versions()

    def _average(self) -> None:
        """Under DistributedDataParallel: this step's gradient averaged across the processes, once."""
        if self._ddp is not None and not self._averaged:
            self._averaged = True
            self._ddp.average(self._g if self.fused else None, self._sampler.anchor.grad if self.fused else None)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
        """Clip the whole gradient the next ``step()`` applies, as ``torch.nn.utils.clip_grad_norm_``.

        The norm covers the fused dL/dmu and dL/drho (the KL's part included, as their ``.grad``
        reads it) and the ``.grad`` of every other parameter of the engine; returns the total norm
        (``torch.nn.utils.clip_grad_norm_`` over the same parameters gives the same; under
        DistributedDataParallel only this one, which averages the gradient first). Call it between
        ``backward()`` and ``step()``. Costs one pass over the buffers, only when called: the
        kernel's gradients are linear in the data gradient g and the KL coefficient c, so clipping
        scales those two::

            (out.loss / len(x)).backward()
            engine.clip_grad_norm_(1.0)
            engine.step()
        """
        self._average()
        return clip_grad_norm(self, max_norm, norm_type, error_if_nonfinite)

    def _idle_step(self) -> bool:
        """No forward drew the engine's sample since the last step: a gradient that went elsewhere is
        an error; else one warning, and the kernel does not run (False), as torch.optim skips a
        parameter without a gradient."""
        if any(p.grad is not None for p in self._fused_params):
            raise UserError("engine.step(): the model ran outside `with engine.sampling():` (its mu and rho "
                            "got a .grad, which the engine does not read); run the forward inside the block")
        if not self._warned_idle:
            self._warned_idle = True
            warnings.warn("engine.step() with no forward under `with engine.sampling():` since the last step: "
                          "nothing to apply, the Bayesian parameters are left as they are", UserWarning,
                          stacklevel=4)
        return False

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """Apply the gradients of the last backward (and the KL's), then draw the next sample."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._dist_checked:
            self._dist_checked = True
            if self._ddp is None and (self.fused or self._extra):
                ddp_.warn_without_ddp()
        flags = tuple(p.requires_grad for p in self._watched)
        if flags != self._grad_flags:  # frozen or unfrozen since the engine was built
            trained = {id(p) for g in self.param_groups for p in g["params"]}
            reason = frozen_changed(self.model, self._watched, trained, self._fused_params if self.fused else (),
                                    "the Engine", add_group=True)
            if reason is not None:
                raise UserError(f"bbb.Engine: {reason}")
            self._grad_flags = flags
        self._average()
        self._averaged = False
        sampler = self._sampler
        if self.fused and (sampler.drawn or self._idle_step()):
            check_kernel_options(self.kind is OptimizerKind.ADAM, self.param_groups[0],
                                 bool(self.kernels.step_static["nesterov"]),
                                 bool(self._state))
            if self._hp_np is None and self._hyper_key() != self._hp_key:  # a scheduler changed lr, say
                self._write_hyper()  # hp of the last step with the new values: the kernel advances it
            self._step_count += 1
            self.counter += 1
            if self._hp_np is not None:
                self._hp_np[:] = self._hyper_values()
            cur = sampler.cur
            args = (*self._step_args[cur], sampler.anchor.grad, self._hp, self._state, self._ctr)
            given = self._grads.edited()  # a .grad edited in place (torch's clipping): apply it as it is
            self._set_kl(self.kernels.train_step(*args) if given is None else
                         self.kernels.train_step_given(*args, given))
            self._clean = self._grads.versions()
            sampler.cur = 1 - cur
            self._seen = self._versions()
        sampler.drawn = False
        if self._inner is not None:
            self._inner.step()
        return loss

    # -- CUDA graphs ---------------------------------------------------------------------------
    @property
    def parity(self) -> int:
        """Which of the engine's two noise buffers holds the current sample's noise (0 or 1): the
        buffers alternate step by step, so a training step captured as a CUDA graph is bound to
        the parity it was captured with (:meth:`capturing`)."""
        return self._sampler.cur

    def capturing(self, parity: int) -> contextlib.AbstractContextManager[Engine]:
        """Capture one training step (forward under :meth:`sampling`, backward, :meth:`step`) for a
        CUDA graph, e.g. ``with engine.capturing(engine.parity), torch.cuda.graph(g): step()``.

        Inside, the engine is as at a step of noise parity ``parity``; after the block its host
        state (step count, noise counter, parity) is what it was before, since capturing runs no
        kernel: each replay of the graph is one step, which :meth:`replayed` then counts. Only
        for an engine whose step-dependent values live on its device (CUDA), with every parameter
        fused (no inner ``torch.optim`` optimiser), outside DistributedDataParallel, and after a
        step has run eagerly since the last change of a hyperparameter (the new value reaches the
        device in that step); anything else is a one-line :class:`UserError`
        (:func:`bbb.engine.graphs.capturing`).
        """
        return graphs.capturing(self, parity)

    def replayed(self) -> None:
        """Count one step that ran from a graph captured under :meth:`capturing`: the host's step
        count and noise counter move on and the parity turns, as :meth:`step` does them (the
        kernels advanced the device's own counter)."""
        self._step_count += 1
        self.counter += 1
        self._sampler.cur = 1 - self._sampler.cur
        self._sampler.drawn = False

    # -- checkpoints (:mod:`bbb.engine.state`) --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        return engine_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:  # type: ignore[override]
        """Restore a state from :meth:`state_dict` (after the model's own ``load_state_dict``)."""
        load_engine_state(self, state)
