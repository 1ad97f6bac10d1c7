"""Ensembles of Bayesian networks ("MultiBBB", Seligmann et al. 2023): M Bayes-by-Backprop MLPs,
each from its own seed, trained together as one :class:`~bbb.nn.BayesPopulation`; the predictive
is the equal-weight mixture of the members' predictives.

A :class:`BayesEnsemble` is a population whose members all see the same rows: ``ens(x)`` takes
``x`` (R, in) and returns every member's output, (M, R, out). Member j's initial weights and all
its weight noise come from its own seed, ``seeds[j]`` (a generator per member), so a member
trains exactly as the same network would alone (an ensemble of that one seed) on the same rows
with the same optimiser: the members never interact (the loss is the sum of their free
energies, the optimisers are elementwise). Training::

    ens = BayesEnsemble(8, [50], 2, seeds=range(5), prior=GaussianPrior(1.0))
    elbo = ELBO(ens, "heteroscedastic", num_batches=len(loader), kl_weighting="uniform")
    opt = torch.optim.Adam(ens.parameters(), lr=1e-3)
    for i, (x, y) in enumerate(loader):        # x (B, 8), y (B,): the same rows for every member
        opt.zero_grad()
        elbo(x, y, batch_index=i).loss.backward()   # the sum of the 5 members' free energies
        opt.step()
    out = ens.predictive(x_test, num_samples=20)    # (5 * 20, R, 2): the mixture's draws, pooled

The likelihood reads the member dimension as a leading sample dimension (one target per row).
A likelihood parameter (``Gaussian(learn_sigma=True)``'s noise sd) is one number shared by the
members, which couples them: learn the noise per member with ``"heteroscedastic"`` (or keep it
fixed). The ELBO takes one sample per member and step (``num_samples=1``); ``bbb.uncertainty.predict``
and ``evaluate`` fold samples into the batch dimension, which a population does not read: both
are one-line errors on an ensemble, whose predictive is :meth:`BayesEnsemble.predictive` (then
``bbb.uncertainty.gaussian_mixture_log_prob``, ``regression_uncertainty`` or
``predictive_probs`` on the pooled samples, as for one network's k samples).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn as nn
from torch import Tensor

from ..distributions import Prior, softplus
from ..errors import UserError, check_int
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .model import sampling
from .population import BayesPopulation, OneHot
from .samples import FOLD, PROVIDER, SHARED, OneForward, SampleProvider, providing_samples

__all__ = ["BayesEnsemble", "MemberNoise", "pool_members"]


def pool_members(outputs: Tensor) -> Tensor:
    """The equal-weight mixture's draws: k samples of each of M members, (k, M, ...), pooled
    member by member into (M * k, ...) (member j's samples at j*k .. j*k + k - 1)."""
    if outputs.dim() < 3:
        raise UserError(f"pool_members takes samples (k, members, rows, ...), got shape {tuple(outputs.shape)}")
    k, m = outputs.shape[:2]
    return outputs.transpose(0, 1).reshape(m * k, *outputs.shape[2:])


class MemberNoise(SampleProvider):
    """The weight (or local pre-activation) noise of a population drawn member by member, member
    j's from its own generator seeded with ``seeds[j]``: a member's draws do not depend on the
    others. Generators live on the device of the first draw; a draw on another device starts the
    streams again from the seeds."""

    def __init__(self, seeds: Iterable[int]) -> None:
        self.seeds = [int(s) for s in seeds]
        self._device: torch.device | None = None
        self._gens: list[torch.Generator] = []

    def generators(self, device: torch.device) -> list[torch.Generator]:
        if self._device != device:
            self._gens = [torch.Generator(device=device).manual_seed(s) for s in self.seeds]
            self._device = device
        return self._gens

    def _normal(self, per_member: tuple[int, ...], dim: int, like: Tensor) -> Tensor:
        gens = self.generators(like.device)
        return torch.stack([torch.randn(per_member, generator=g, device=like.device, dtype=like.dtype)
                            for g in gens], dim)

    def draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
        if not isinstance(module, BayesModule):  # pragma: no cover - only Bayesian layers ask
            return None
        mu, rho = module.mu(name), module.rho(name)
        if mu.shape[0] != len(self.seeds):
            raise UserError(f"MemberNoise has {len(self.seeds)} seeds for a layer of {mu.shape[0]} members")
        if k is None:
            eps = self._normal(tuple(mu.shape[1:]), 0, mu)
        else:  # (k, members, ...): member j's k draws in a row of its stream
            eps = self._normal((k, *mu.shape[1:]), 1, mu)
        return mu, eps, torch.addcmul(mu, softplus(rho), eps)

    def preactivation_noise(self, module: nn.Module, shape: tuple[int, ...]) -> Tensor | None:
        if shape[0] != len(self.seeds):
            raise UserError(f"MemberNoise has {len(self.seeds)} seeds for a layer of {shape[0]} members")
        ref = next(module.parameters())
        return self._normal(tuple(shape[1:]), 0, ref)


class BayesEnsemble(BayesPopulation):
    """M = ``len(seeds)`` Bayes-by-Backprop ReLU MLPs of one architecture trained as one population
    on the same rows (see the module's docstring); every member Bayesian.

    Member j is initialised as :meth:`~bbb.nn.BayesPopulation.reset_member` does from
    ``torch.Generator().manual_seed(seeds[j])`` and draws its weight noise from its own generator,
    seeded with ``seeds[j]`` too (:class:`MemberNoise`), unless a sample provider is active (an
    :class:`~bbb.engine.Engine` supplies its own noise). ``state_dict`` holds the weights only:
    the noise streams start again from the seeds when the ensemble is built. Seeds must differ
    (equal seeds give equal members).

    Example:
        >>> ens = BayesEnsemble(3, [16], 1, seeds=[0, 1, 2])
        >>> ens(torch.zeros(4, 3)).shape                       # every member on the same rows
        torch.Size([3, 4, 1])
        >>> ens.predictive(torch.zeros(4, 3), num_samples=10).shape   # 3 members x 10 draws, pooled
        torch.Size([30, 4, 1])
    """

    #: its rows are shared (R, in): forward_samples folds the k copies into them, which the forward
    #: refuses in one line (a population takes them as (k, members, R, in))
    accepts_sample_dim = False

    def __init__(self, in_features: int, hidden_sizes: Iterable[int], out_features: int, seeds: Iterable[int],
                 prior: Prior | dict | None = None, mu_init_scale: float | None = None,
                 rho_init: float = DEFAULT_RHO_INIT, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, estimator: Estimator | str = Estimator.REPARAM) -> None:
        if isinstance(seeds, (int, str)) or not isinstance(seeds, Iterable):
            raise UserError(f"seeds must be a list of ints, one per member (e.g. range(5)), got {seeds!r}")
        seeds = [check_int("seed", s, 0) for s in seeds]
        if not seeds:
            raise UserError("an ensemble needs at least one member: give seeds, e.g. range(5)")
        if len(set(seeds)) != len(seeds):
            raise UserError(f"the seeds of an ensemble must differ (equal seeds give equal members), got {seeds}")
        with torch.random.fork_rng(devices=[]):  # the population's own draws, replaced below
            super().__init__(in_features, list(hidden_sizes), out_features, bayesian=len(seeds), prior=prior,
                             mu_init_scale=mu_init_scale, rho_init=rho_init, device=device, dtype=dtype,
                             estimator=estimator)
        self.seeds = seeds
        for j, s in enumerate(seeds):
            self.reset_member(j, torch.Generator().manual_seed(s))
        self.noise = MemberNoise(seeds)

    def _rows(self, x: Tensor | OneHot) -> Tensor | OneHot:
        """The rows every member reads: (R, in) shared rows copied to each member, or (members,
        R, in) / :class:`OneHot` (members, R, K) as given (each member its own rows)."""
        if isinstance(x, Tensor) and x.dim() == 2:
            if x.shape[1] != self.sizes[0]:
                raise UserError(f"BayesEnsemble: its inputs have {self.sizes[0]} features, got {x.shape[1]} (inputs "
                                f"of shape {tuple(x.shape)})")
            return x.unsqueeze(0).expand(self.members, *x.shape).contiguous()
        return x

    def forward(self, x: Tensor | OneHot, num_samples: int | None = None) -> Tensor:
        """Every member on ``x`` (R, in), or on its own rows (members, R, in): (members, R, out),
        one weight draw per member when sampling (``train()`` mode, or :func:`~bbb.nn.sampling`),
        the means otherwise; ``num_samples`` = k: (k, members, R, out)."""
        if FOLD.get() is not None or (SHARED.get() is not None and not isinstance(SHARED.get(), OneForward)):
            raise UserError("BayesEnsemble: its outputs are (members, rows, out), which bbb.uncertainty.predict, "
                            "evaluate and ELBO(num_samples > 1) do not read; predict with "
                            "ensemble.predictive(x, num_samples) and train with ELBO(num_samples=1)")
        return self._forward_members(self._rows(x), num_samples)

    def _forward_members(self, x: Tensor | OneHot, num_samples: int | None) -> Tensor:
        if PROVIDER.get() is not None:  # an engine's (or the caller's) noise
            return super().forward(x, num_samples)
        with providing_samples(self.noise):
            return super().forward(x, num_samples)

    @torch.no_grad()
    def predictive(self, x: Tensor | OneHot, num_samples: int = 10) -> Tensor:
        """Draws of the ensemble's predictive, the equal-weight mixture of its members'
        (``num_samples`` = k weight samples per member, pooled): network outputs (members * k, R,
        out), member j's k draws at j*k .. j*k + k - 1 (:func:`pool_members`). Samples whatever
        the train/eval mode; no gradients."""
        k = check_int("num_samples", num_samples)
        with sampling(self, "sample"):
            return pool_members(self._forward_members(self._rows(x), k))
