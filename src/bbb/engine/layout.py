"""Where every Bayesian parameter lives in the engine's flat buffers.

The layout lists, in ``model.modules()`` order, each Bayesian layer's posterior parameters
(``weight``, then ``bias``) with their offset in one flat vector of ``numel`` weights. The engine
keeps mu, rho, the weight sample, the noise and the gradients in flat buffers of that shape, and
the counter-based noise is indexed by position in it, so the plain path (:func:`counter_noise`)
draws exactly the engine's noise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import KLMode
from ..errors import UserError
from ..nn import BayesModule, PopulationBayesLinear, SampleProvider, bayes_modules, providing_samples
from ..random import fill_normal_, normal

__all__ = ["Slot", "Layout", "counter_noise", "member_index", "placement_error"]


@dataclass(frozen=True)
class Slot:
    module: BayesModule
    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def view(self, flat: Tensor) -> Tensor:
        """This parameter's part of ``flat`` ((n,) -> shape, (k, n) -> (k, *shape)), no copy."""
        part = flat[..., self.offset:self.offset + self.numel]
        return part.view(*flat.shape[:-1], *self.shape)


class Layout:
    """The flat arrangement of a model's Bayesian parameters (those of its active adapters: a peft
    model's other adapters are neither sampled, trained nor counted in the KL)."""

    def __init__(self, model: nn.Module) -> None:
        self.modules = list(bayes_modules(model, active=True))
        slots, offset = [], 0
        for m in self.modules:
            for name in m.param_names():
                shape = tuple(getattr(m, f"{name}_mu").shape)
                slot = Slot(m, name, offset, shape)
                slots.append(slot)
                offset += slot.numel
        self.slots: list[Slot] = slots
        self.numel = offset
        self._index = {(id(s.module), s.name): s for s in slots}

    def slot(self, module: nn.Module, name: str) -> Slot | None:
        return self._index.get((id(module), name))

    def covers(self, model: nn.Module) -> bool:
        """``model`` holds exactly the layers of this layout."""
        return [id(m) for m in bayes_modules(model, active=True)] == [id(m) for m in self.modules]

    def kl_mask(self, device: torch.device, dtype: torch.dtype) -> Tensor | None:
        """(n,): 1 where a weight counts in the KL, 0 where its layer leaves it out (``kl_rows``, e.g.
        an embedding's padding row); None when every weight counts."""
        rows = [(s, s.module.kl_rows(s.name)) for s in self.slots]
        if all(r is None for _, r in rows):
            return None
        m = torch.ones(self.numel, device=device, dtype=dtype)
        for s, r in rows:
            if r is not None:
                s.view(m).zero_().index_fill_(0, r.to(device), 1.0)
        return m

    def members(self) -> tuple[int, tuple[tuple[int, int], ...]] | None:
        """A population's layout (:class:`~bbb.nn.BayesPopulation`, whose KL the kernel sums member
        by member: :func:`bbb.engine.kernels.member_kl`): (members, ((offset, numel) of each slot,
        ...)) when every layer is a :class:`~bbb.nn.PopulationBayesLinear` of the same members;
        None for any other model."""
        mods = {id(s.module): s.module for s in self.slots}.values()
        counts = {m.members if isinstance(m, PopulationBayesLinear) else None for m in mods}
        if len(counts) != 1 or None in counts:
            return None
        k = next(iter(counts))
        assert k is not None
        return k, tuple((s.offset, s.numel) for s in self.slots)

    def gather(self, suffix: str) -> Tensor:
        """The parameters ``{name}_{suffix}`` concatenated into one flat tensor (a copy)."""
        parts = [getattr(s.module, f"{s.name}_{suffix}").detach().reshape(-1) for s in self.slots]
        return torch.cat(parts)


def member_index(members: tuple[int, tuple[tuple[int, int], ...]], device: torch.device | str) -> Tensor:
    """The member of each weight of a population's flat buffer (int32, (n,)), from its
    :meth:`Layout.members` (every slot's leading dimension is the member's)."""
    k, slots = members
    n = max(o + numel for o, numel in slots)
    out = torch.zeros(n, dtype=torch.int32)
    for o, numel in slots:
        out[o:o + numel] = torch.arange(k, dtype=torch.int32).repeat_interleave(numel // k)
    return out.to(device)


class _CounterNoise(SampleProvider):
    def __init__(self, layout: Layout, eps: Tensor, k: int | None, kl_eps: Tensor) -> None:
        self.layout, self.eps, self.k, self.kl_eps = layout, eps, k, kl_eps

    def draw(self, module, name, k):
        slot = self.layout.slot(module, name)
        if slot is None:
            return None
        if k != self.k:
            raise ValueError(f"counter_noise was opened for {self.k} samples, the layer asked for {k}")
        mu, rho = getattr(module, f"{name}_mu"), getattr(module, f"{name}_rho")
        eps = slot.view(self.eps)
        if k is None:
            eps = eps[0]
        return mu, eps, torch.addcmul(mu, torch.nn.functional.softplus(rho), eps)

    def model_kl(self, model: nn.Module, mode: KLMode, kl_samples: int | None = None) -> Tensor | None:
        return None  # the plain KL on the recorded samples

    def kl_noise(self, module, name, n):
        slot = self.layout.slot(module, name)
        if slot is None:
            return None
        if n != self.kl_eps.shape[0]:
            raise ValueError(f"counter_noise was opened for {self.kl_eps.shape[0]} KL samples of its own, "
                             f"the KL asked for {n}")
        return slot.view(self.kl_eps)


def _noise(n: int, seed: int, counter: int, keys: Tensor | None, device: torch.device,
           dtype: torch.dtype) -> Tensor:
    """:func:`bbb.random.normal` of (seed, counter), or of ``keys`` already on the device (no copy)."""
    if keys is None:
        return normal(n, seed, counter, device=device, dtype=dtype)
    half = (n + 1) // 2
    buf = torch.empty((2, half), device=device, dtype=dtype)
    fill_normal_(buf, torch.arange(half, device=device, dtype=torch.int32), keys.to(device, torch.int32))
    return buf.view(-1)[:n]


@contextlib.contextmanager
def counter_noise(model: nn.Module, seed: int, counter: int, num_samples: int | None = None,
                  kl_rows: int = 0, *, keys: Tensor | None = None) -> Iterator[SampleProvider]:
    """The plain autograd path fed with the engine's noise for draw ``counter`` of ``seed``.

    Inside the block every Bayesian layer of ``model`` samples w = mu + softplus(rho) * eps with
    the eps that :class:`~bbb.engine.Engine` would use at that counter, so the two paths can be
    compared trajectory for trajectory. ``num_samples`` is k for inputs with a leading sample
    dimension (None: inputs without one). ``kl_rows`` is the rows of noise the KL draws of its own,
    the engine's rows after the k: K - k for an ELBO with ``kl_samples=K`` (Monte Carlo), 1 for
    ``kl="split"``. ``keys``: the draw's three counter keys as a tensor on the model's device
    (:func:`bbb.random.key_tensor`'s, or :func:`bbb.engine.kernels.counter_keys_tensor`'s: int32 or
    int64), in place of ``seed`` and ``counter``: a loop on a GPU then copies nothing from the host
    per draw (a blocking copy).
    """
    layout = Layout(model)
    k = 1 if num_samples is None else int(num_samples)
    rows = k + int(kl_rows)
    p = next(iter(model.parameters()))
    noise = _noise(rows * layout.numel, seed, counter, keys, p.device, p.dtype).view(rows, layout.numel)
    with providing_samples(_CounterNoise(layout, noise[:k], num_samples, noise[k:])) as provider:
        yield provider


def placement_error(who: str, now: Tensor, built: Tensor) -> UserError:
    """The error of an optimiser with flat buffers (``who``: Engine, IVON) whose layers' parameter ``now``
    is no longer a view of its buffer ``built``: moved or converted (another device or dtype), or replaced."""
    it, where = ("the " if who == "Engine" else "") + who, f"(now {now.device}, {str(now.dtype).replace('torch.', '')})"
    head = f"{'bbb.' if who == 'Engine' else ''}{who}: the model's parameters were"
    if now.device == built.device and now.dtype == built.dtype:  # (not a move: another optimiser took it over...)
        return UserError(f"{head} replaced {where} after {it} was built: by a conversion there and back, "
                         f"load_state_dict(assign=True) or another bbb.Engine or IVON built over a layer it trains (a "
                         f"layer that two models share: one {who} for a module whose forward runs both); build {it} "
                         "after moving the model to its device, and last")
    return UserError(f"{head} moved or converted {where} after {it} was built on {built.device}, "
                     f"{str(built.dtype).replace('torch.', '')}: build {it} after moving the model to its device "
                     f"(model.to(device), then {who}(model, ...))")
