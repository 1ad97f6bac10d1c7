"""The ``ensemble`` agents: bootstrapped Thompson sampling (Osband et al. 2016; Riquelme et al.
2018's BootRMS) over ``ensemble_size`` deterministic networks per agent and seed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ...elbo import Likelihood
from ...nn import BayesPopulation, OneHot, mark_deterministic
from .config import INIT_SEED, BanditConfig


def make_optimizer(kind: str, params: Sequence[Tensor], lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """``torch.optim``'s Adam or plain SGD (the paper's eqs. 5-6), as the engine runs them;
    ``weight_decay`` adds ``weight_decay * w`` to every gradient (an L2 penalty on the loss)."""
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=fused)
    return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, fused=fused)


def repeat_members(x: Tensor | OneHot, k: int) -> Tensor | OneHot:
    """Population inputs (members, ...) with each member's rows repeated for its ``k`` networks:
    (members * k, ...), member i's at i * k .. i * k + k - 1."""
    if isinstance(x, OneHot):
        value = None if x.value is None else x.value.repeat_interleave(k, 0)
        return OneHot(x.index.repeat_interleave(k, 0), x.features, value)
    return x.repeat_interleave(k, 0)


#: Rows of a population's replay buffers: ``rows(members, idx)`` with members (M,) (indices into the
#: population's members) and idx (M, B) buffer positions gives the inputs (M, B, ...) and rewards.
BufferRows = Callable[[Tensor, Tensor], tuple[Tensor | OneHot, Tensor]]


class Ensembles:
    """The networks of a population's ensemble members, batched: ``net`` holds ``size`` deterministic
    networks for each of the ``len(seeds)`` members (network j of member i is ``net``'s member
    ``i * size + j``; member i's seed ``seeds[i]``).

    Network j of a member starts from the j-th draw of the generator of its seed's initial weights
    (network 0: the greedy agent's start of that seed), and each takes its own minibatches of its
    member's buffer (``idx`` drawn from this object's generator ``gen``), on the greedy agents' loss
    (the Gaussian likelihood's negative log-likelihood per example, ``weight_decay`` / noise_sigma^2
    L2) and optimiser. With ``ensemble_keep`` p < 1 each stored interaction enters each network's
    data with probability p (``keep``, drawn as it is stored; a row left out weighs 0 in that
    network's loss). A decision is that of one network per member, drawn uniformly at each step.
    """

    def __init__(self, cfg: BanditConfig, seeds: Sequence[int], num_features: int, outputs: int,
                 likelihood: Likelihood, device: torch.device, seed: int) -> None:
        self.cfg = cfg
        self.size = k = int(cfg.ensemble_size)
        self.count = n = len(seeds)
        self.device = device
        self.likelihood = likelihood
        self.net = BayesPopulation(num_features, cfg.hidden, outputs, bayesian=0, deterministic=n * k, device=device)
        mark_deterministic(self.net)
        for i, s in enumerate(seeds):
            gen = torch.Generator().manual_seed(INIT_SEED + int(s))
            for j in range(k):
                self.net.reset_member(i * k + j, gen)
        self.net.train()
        self.opt = make_optimizer(cfg.optimizer, list(self.net.parameters()), cfg.lr,
                                  cfg.weight_decay / cfg.noise_sigma ** 2)
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.keep = (torch.ones(n * k, cfg.buffer, dtype=torch.bool, device=device)
                     if cfg.ensemble_keep < 1.0 else None)

    @torch.no_grad()
    def values(self, x: Tensor | OneHot) -> Tensor:
        """Predicted reward of every action for each member's inputs ``x`` (members, actions, ...):
        (members, actions), each member's from one of its networks drawn uniformly."""
        n, k = self.count, self.size
        out = self.net(repeat_members(x, k))[..., 0]  # (n * k, actions)
        pick = torch.randint(0, k, (n,), generator=self.gen, device=self.device)
        return out.view(n, k, -1)[torch.arange(n, device=self.device), pick]

    def store(self, pos: int) -> None:
        """An interaction was stored at buffer position ``pos``: draw which networks take it."""
        if self.keep is not None:
            u = torch.rand(self.keep.shape[0], generator=self.gen, device=self.device)
            self.keep[:, pos] = u < self.cfg.ensemble_keep

    def update(self, filled: int, members: Tensor, rows: BufferRows) -> None:
        """One optimiser step of every network on a minibatch of its member's buffer (rows <
        ``filled``); ``members`` (count,): the ensemble members' indices in the population."""
        b = self.cfg.batch_size
        idx = torch.randint(0, filled, (self.count * self.size, b), generator=self.gen, device=self.device)
        x, y = rows(members.repeat_interleave(self.size), idx)
        nll = -self.likelihood.log_prob(self.net(x), y)  # (networks, B)
        if self.keep is not None:
            nll = nll * self.keep.gather(1, idx)
        self.opt.zero_grad()
        (nll.sum() / b).backward()
        self.opt.step()

    def check_finite(self) -> str | None:
        """The name of a parameter with a non-finite value, else None."""
        return next((name for name, p in self.net.named_parameters() if not bool(torch.isfinite(p).all())), None)

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict(), "gen": self.gen.get_state(),
                "keep": self.keep}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.gen.set_state(state["gen"])
        if self.keep is not None:
            self.keep.copy_(state["keep"])
