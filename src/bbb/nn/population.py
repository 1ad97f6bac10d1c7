"""Populations: many independent networks of one architecture in one module, trained together.

A population holds P members of the :class:`~bbb.nn.BayesMLP` architecture (ReLU hidden layers,
biases everywhere) with every parameter carrying a leading member dimension, so one batched
matrix product evaluates all members and one backward pass and one optimiser step update them.
Members never interact: the loss of a population is the *sum* of its members' losses, so each
member's gradient is its own, and the optimisers (``torch.optim.Adam``/``SGD``,
:class:`~bbb.engine.Engine`) are elementwise. A member trains exactly as the same network
trained alone with the same noise, data and optimiser (``tests/core/nn/test_population.py``).

Members ``0 .. bayesian-1`` are Bayesian: each weight has the diagonal Gaussian posterior
N(mu, softplus(rho)^2) of :class:`~bbb.nn.BayesLinear`, with the same prior (or each its own:
a :class:`~bbb.distributions.MemberPrior`), initialisation, sampling modes and KL
(:func:`~bbb.nn.model_kl` sums it over every member). Members
``bayesian .. P-1`` are deterministic: plain weights, no posterior, no KL (a network trained by
maximum likelihood, e.g. the greedy agents of the bandit).

Layout: a layer's weights are stored input-major, ``(members, in, out)`` (the transpose of
``nn.Linear``'s), so that the row of one input feature is contiguous. Inputs are dense
``(members, R, in)`` or :class:`OneHot` rows (the non-zero inputs of each row by index), for which
the first layer adds up the rows of the features present (``F.embedding_bag``) instead of
multiplying by zeros: the same sums, exactly, with a fraction of the work for one-hot inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .. import functional as BF
from ..distributions import MemberPrior, Prior
from ..errors import UserError, check_int
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .layers import BayesLinear
from .model import BayesMLP, layer_sizes
from .samples import LEADING, PROVIDER

__all__ = ["OneHot", "one_hot_is_dense", "population_linear", "PopulationBayesLinear", "PopulationLinear",
           "BayesPopulation"]


@dataclass(frozen=True)
class OneHot:
    """Sparse input rows: row r is ``sum_j value[..., r, j] * e(index[..., r, j])`` over ``features``.

    ``value`` None means every listed entry is 1 (one-hot codes). Unused slots of a row with
    fewer non-zeros carry value 0 (any index). Leading dimensions as for dense inputs:
    ``(members, R, K)``, or ``(k, members, R, K)`` for k samples per member.
    """

    index: Tensor
    features: int
    value: Tensor | None = None

    @classmethod
    def from_dense(cls, x: Tensor) -> OneHot:
        """The non-zeros of ``x`` (..., features) as index (and value) lists, in column order."""
        if x.dim() < 1 or x.shape[-1] < 1:
            raise UserError(f"OneHot.from_dense needs rows of features, got shape {tuple(x.shape)}")
        flat = x.reshape(-1, x.shape[-1])
        nz = flat != 0
        k = max(1, int(nz.sum(1).max())) if flat.shape[0] else 1
        # stable sort puts each row's non-zero columns first, in column order
        order = torch.sort((~nz).to(torch.int8), dim=1, stable=True).indices[:, :k]
        value = flat.gather(1, order)
        index = torch.where(value != 0, order, torch.zeros_like(order))
        lead = x.shape[:-1]
        index = index.reshape(*lead, k)
        if bool(((value == 0) | (value == 1)).all()) and bool(nz.sum(1).eq(k).all()):
            return cls(index, x.shape[-1])  # every row has k ones: no values needed
        return cls(index, x.shape[-1], value.reshape(*lead, k))

    def to_dense(self, dtype: torch.dtype = torch.float32) -> Tensor:
        out = torch.zeros(*self.index.shape[:-1], self.features, dtype=dtype, device=self.index.device)
        val = torch.ones(self.index.shape, dtype=dtype, device=self.index.device) if self.value is None \
            else self.value.to(dtype)
        return out.scatter_add_(-1, self.index, val)

    def repeat(self, k: int) -> OneHot:
        """The same rows for k samples: a new leading dimension of size k."""
        idx = self.index.unsqueeze(0).expand(k, *self.index.shape)
        val = None if self.value is None else self.value.unsqueeze(0).expand(k, *self.value.shape)
        return OneHot(idx, self.features, val)

    def flatten_samples(self) -> OneHot:
        """(k, members, R, K) -> (k * members, R, K)."""
        idx = self.index.reshape(-1, *self.index.shape[-2:])
        val = None if self.value is None else self.value.reshape(-1, *self.value.shape[-2:])
        return OneHot(idx, self.features, val)


#: one-hot rows over at most this many times as many features as they have entries are
#: multiplied densely by :func:`population_linear` (see there)
DENSE_ONE_HOT_RATIO = 8


def one_hot_is_dense(features: int, entries: int) -> bool:
    """Whether :func:`population_linear` multiplies one-hot rows of ``entries`` non-zeros over
    ``features`` as dense rows (so a caller may keep them dense and skip the expansion)."""
    return features <= DENSE_ONE_HOT_RATIO * entries


def population_linear(x: Tensor | OneHot, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """M linear layers at once: weight (M, in, out), bias (M, out); x (M, R, in) or :class:`OneHot`
    rows (M, R, K) -> (M, R, out). Dense inputs go through :func:`bbb.functional.linear`.

    One-hot rows add up the weight rows of their features (``F.embedding_bag``) when the rows
    are sparse; when ``in <= DENSE_ONE_HOT_RATIO * K`` they are expanded to dense rows and
    multiplied instead (the same sums up to float rounding): on CPU the backward of
    ``embedding_bag`` sorts the indices and costs several times a batched matmul of that size."""
    if not isinstance(x, OneHot):
        return BF.linear(x, weight.transpose(-1, -2), bias)
    m, n_in, n_out = weight.shape
    if x.features != n_in or x.index.dim() != 3 or x.index.shape[0] != m:
        raise UserError(f"population_linear: one-hot rows {tuple(x.index.shape)} over {x.features} features "
                        f"do not match weights {tuple(weight.shape)} (members, in, out)")
    r, k = x.index.shape[1:]
    if one_hot_is_dense(n_in, k):  # few features: a batched matmul beats embedding_bag's backward
        return BF.linear(x.to_dense(weight.dtype), weight.transpose(-1, -2), bias)
    offsets = torch.arange(0, m * n_in, n_in, device=x.index.device).view(m, 1, 1)
    flat = (x.index + offsets).view(m * r, k)
    psw = None if x.value is None else x.value.reshape(m * r, k).to(weight.dtype)
    y = F.embedding_bag(flat, weight.reshape(m * n_in, n_out), mode="sum", per_sample_weights=psw)
    y = y.view(m, r, n_out)
    return y if bias is None else y + bias.unsqueeze(1)


def _samples_of(x: Tensor | OneHot) -> int | None:
    rank = x.index.dim() if isinstance(x, OneHot) else x.dim()
    return (x.index.shape[0] if isinstance(x, OneHot) else x.shape[0]) if rank == 4 else None


def _repeat(x: Tensor | OneHot, k: int) -> Tensor | OneHot:
    """(M, R, ...) -> (k * M, R, ...): the same rows for each of k samples, in memory: for one
    member a broadcast view would take :func:`bbb.functional.linear`'s shared-input product,
    whose rounding differs from the batched one, and a member's outputs would depend on how many
    members stand beside it."""
    if isinstance(x, OneHot):
        return x.repeat(k).flatten_samples()
    return x.unsqueeze(0).expand(k, *x.shape).reshape(-1, *x.shape[1:]).contiguous()


def _check_members(x: Tensor | OneHot, members: int, what: str, features: int | None = None) -> None:
    lead = x.index.shape[:-2] if isinstance(x, OneHot) else x.shape[:-2]
    shape = tuple(x.index.shape if isinstance(x, OneHot) else x.shape)
    if len(lead) not in (1, 2) or lead[-1] != members:
        raise UserError(f"{what}: expected inputs (members={members}, rows, features) or (k, members, rows, "
                        f"features), got {shape}")
    given = x.features if isinstance(x, OneHot) else x.shape[-1]
    if features is not None and given != features:
        raise UserError(f"{what}: its inputs have {features} features, got {given} (inputs of shape {shape})")


_M = TypeVar("_M", bound=nn.Module)


def _layer_at(layers: nn.ModuleList, i: int, cls: type[_M]) -> _M:
    """``layers[i]``, checked to be the ``cls`` the constructor put there (a ``ModuleList``'s
    items are plain ``nn.Module`` to a type checker)."""
    layer = layers[i]
    if not isinstance(layer, cls):  # pragma: no cover - the constructors fill the lists
        raise TypeError(f"layer {i} is a {type(layer).__name__}, expected a {cls.__name__}")
    return layer


def _masks(layer: nn.Module) -> list[tuple[str, Tensor]]:
    """The pruning masks (:mod:`bbb.prune`) a layer holds: (name, mask) of its weight and bias."""
    out = [(n, getattr(layer, f"{n}_mask", None)) for n in ("weight", "bias")]
    return [(n, m) for n, m in out if isinstance(m, Tensor)]


def _load_mask(dst: PopulationBayesLinear, r: int, src: BayesLinear) -> None:
    """Member r's pruning masks in ``dst`` from ``src``'s (all ones where ``src`` is not pruned);
    a population not pruned yet takes masks of ones for the other members."""
    for name in ("weight", "bias"):
        given, mask = getattr(src, f"{name}_mask", None), getattr(dst, f"{name}_mask", None)
        if given is None and mask is None:
            continue
        if not isinstance(mask, Tensor):
            mask = torch.ones_like(dst.mu(name))
            dst.register_buffer(f"{name}_mask", mask)
        if given is None:
            mask[r].fill_(1.0)
        else:
            mask[r].copy_(given.T if name == "weight" else given)


class PopulationBayesLinear(BayesModule):
    """``members`` independent :class:`~bbb.nn.BayesLinear` layers (reparameterisation or local
    reparameterisation estimator).

    Parameters ``weight_mu``/``weight_rho`` (members, in, out) and ``bias_mu``/``bias_rho``
    (members, out), initialised as :class:`~bbb.nn.BayesLinear`'s. Input (members, R, in) or
    :class:`OneHot` rows -> (members, R, out), one weight draw per member; with a leading sample
    dimension (k, members, R, ...) -> (k, members, R, out), k draws per member. With
    ``estimator="local"`` the pre-activations are drawn instead (as :class:`~bbb.nn.BayesLinear`'s
    local reparameterisation: N(x mu + b_mu, x^2 sigma^2 + b_sigma^2), fresh noise per row and
    sample; a :class:`~bbb.nn.SampleProvider` may supply that noise, ``preactivation_noise``);
    dense inputs only.
    """

    _param_names = ("weight", "bias")
    member_axis = True

    def __init__(self, members: int, in_features: int, out_features: int, prior: Prior | dict | None = None,
                 mu_init_scale: float | None = None, rho_init: float = DEFAULT_RHO_INIT,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                 estimator: Estimator | str = Estimator.REPARAM) -> None:
        try:
            est = Estimator(estimator)
        except ValueError:
            raise UserError(f"unknown estimator {estimator!r} for a population; choose reparam or local") from None
        if est not in (Estimator.REPARAM, Estimator.LOCAL):
            raise UserError(f"a population layer supports the reparam and local estimators, not {est.value}")
        super().__init__(prior, est, mu_init_scale, rho_init)
        if members < 1 or in_features < 1 or out_features < 1:
            raise UserError(f"members and layer sizes must be positive, got members={members}, "
                            f"in_features={in_features}, out_features={out_features}")
        self.members, self.in_features, self.out_features = int(members), int(in_features), int(out_features)
        if isinstance(self.prior, MemberPrior) and self.prior.members != self.members:
            raise UserError(f"a MemberPrior of {self.prior.members} members for a population layer of {self.members} "
                            "Bayesian members: give one prior per Bayesian member")
        factory = {"device": device, "dtype": dtype}
        self._register_posterior("weight", (members, in_features, out_features), factory)
        self._register_posterior("bias", (members, out_features), factory)
        self.reset_parameters()

    def _fan_in(self) -> int:
        return self.in_features

    def sample(self, k: int | None = None) -> tuple[Tensor, Tensor]:
        """The (weight, bias) a forward pass uses: one draw per member, k draws (k, members, ...)
        with ``k``, or the posterior means (expanded to k) when the layer is not sampling. Draws
        go through the sample providers and recorder of :mod:`bbb.nn` (engine, counter noise,
        Monte Carlo KL) as :class:`~bbb.nn.BayesLinear`'s do."""
        if self.is_sampling():  # a pruned weight (bbb.prune's mask) is 0 in every draw
            return self._masked("weight", self._draw("weight", k)[2]), self._masked("bias", self._draw("bias", k)[2])
        w, b = self._masked("weight", self.mu("weight")), self._masked("bias", self.mu("bias"))
        if k is not None:
            w, b = w.expand(k, *w.shape), b.expand(k, *b.shape)
        return w, b

    def _input_samples(self, x: Tensor) -> int | None:
        return _samples_of(x)

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        _check_members(x, self.members, type(self).__name__, self.in_features)
        if self.estimator is Estimator.LOCAL and self.is_sampling():
            return self._forward_local(x, k)
        w, b = self.sample(k)
        if k is None:
            return population_linear(x, w, b)
        xf = x.flatten_samples() if isinstance(x, OneHot) else x.reshape(-1, *x.shape[2:])
        y = population_linear(xf, w.reshape(-1, *w.shape[2:]), b.reshape(-1, b.shape[-1]))
        return y.view(k, self.members, *y.shape[1:])

    def _forward_local(self, x: Tensor | OneHot, k: int | None) -> Tensor:
        """Local reparameterisation: the mean and variance of each pre-activation, one normal draw
        per output (the sqrt sees ``var + LRT_EPS``, never 0)."""
        if isinstance(x, OneHot):
            raise UserError("the local estimator of a population takes dense inputs; pass OneHot.to_dense()")
        xm = x if k is None else x.transpose(0, 1).reshape(self.members, -1, x.shape[-1])  # (M, k*R, in)
        ws, bs = self._masked_sigma("weight"), self._masked_sigma("bias")
        mean = population_linear(xm, self._masked("weight", self.mu("weight")), self._masked("bias", self.mu("bias")))
        var = population_linear(xm * xm, ws * ws, bs * bs)
        provider = PROVIDER.get()
        noise = None if provider is None else provider.preactivation_noise(self, tuple(mean.shape))
        if noise is None:
            noise = BF.standard_normal(mean.shape, like=mean, generator=self._generator())
        y = torch.addcmul(mean, torch.sqrt(var + BF.LRT_EPS), noise)
        if k is None:
            return y
        return y.view(self.members, k, -1, self.out_features).transpose(0, 1)

    def extra_repr(self) -> str:
        return (f"members={self.members}, in_features={self.in_features}, out_features={self.out_features}, "
                + super().extra_repr())


class PopulationLinear(nn.Module):
    """``members`` independent deterministic linear layers: ``weight`` (members, in, out) and
    ``bias`` (members, out), initialised as ``torch.nn.Linear``'s (U(+-1/sqrt(in)))."""

    def __init__(self, members: int, in_features: int, out_features: int,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if members < 1 or in_features < 1 or out_features < 1:
            raise UserError(f"members and layer sizes must be positive, got members={members}, "
                            f"in_features={in_features}, out_features={out_features}")
        self.members, self.in_features, self.out_features = int(members), int(in_features), int(out_features)
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(members, out_features, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = self.in_features ** -0.5
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound)

    def forward(self, x: Tensor | OneHot) -> Tensor:
        _check_members(x, self.members, type(self).__name__, self.in_features)
        k = _samples_of(x)
        if k is None:
            return population_linear(x, self.weight, self.bias)
        xf = x.flatten_samples() if isinstance(x, OneHot) else x.reshape(-1, *x.shape[2:])
        w = self.weight.expand(k, *self.weight.shape).reshape(-1, *self.weight.shape[1:])
        b = self.bias.expand(k, *self.bias.shape).reshape(-1, self.out_features)
        return population_linear(xf, w, b).view(k, self.members, -1, self.out_features)

    def extra_repr(self) -> str:
        return f"members={self.members}, in_features={self.in_features}, out_features={self.out_features}"


class BayesPopulation(nn.Module):
    """P = ``bayesian`` + ``deterministic`` independent ReLU MLPs of one architecture, batched.

    Members ``0 .. bayesian-1`` are Bayesian (:class:`PopulationBayesLinear` layers in
    ``self.bayes``), the others deterministic (:class:`PopulationLinear` layers in ``self.det``).
    ``forward`` evaluates every member in one chain of batched products; an optimiser over
    ``self.bayes`` (e.g. :class:`~bbb.engine.Engine`) and one over ``self.det`` train them.

    Example:
        >>> pop = BayesPopulation(10, [32, 32], 1, bayesian=3, deterministic=2)
        >>> pop(torch.zeros(5, 8, 10)).shape            # (members, rows, in)
        torch.Size([5, 8, 1])
        >>> pop(torch.zeros(5, 8, 10), num_samples=2).shape
        torch.Size([2, 5, 8, 1])

    :func:`~bbb.nn.forward_samples` (and so :class:`~bbb.elbo.ELBO` with ``num_samples=k``) hands
    it the k copies as ``(k, members, R, in)`` inside :func:`~bbb.nn.leading_samples`: the same
    as ``num_samples=k``.
    """

    accepts_sample_dim = True

    def __init__(self, in_features: int, hidden_sizes: Sequence[int], out_features: int, bayesian: int,
                 deterministic: int = 0, prior: Prior | dict | None = None, mu_init_scale: float | None = None,
                 rho_init: float = DEFAULT_RHO_INIT, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, estimator: Estimator | str = Estimator.REPARAM) -> None:
        super().__init__()
        sizes = layer_sizes(type(self).__name__, in_features, hidden_sizes, out_features)
        bayesian, deterministic = check_int("bayesian", bayesian, 0), check_int("deterministic", deterministic, 0)
        if bayesian + deterministic < 1:
            raise UserError("a population needs at least one member")
        self.sizes = sizes
        self.bayesian, self.deterministic = bayesian, deterministic
        pairs = list(zip(sizes[:-1], sizes[1:]))
        self.bayes = nn.ModuleList(
            PopulationBayesLinear(bayesian, a, b, prior=prior, mu_init_scale=mu_init_scale, rho_init=rho_init,
                                  estimator=estimator, device=device, dtype=dtype)
            for a, b in pairs) if bayesian else nn.ModuleList()
        self.local = bool(bayesian) and self.bayes[0].estimator is Estimator.LOCAL
        if self.local and deterministic:
            raise UserError("a population with the local estimator holds Bayesian members only (deterministic=0)")
        self.det = nn.ModuleList(PopulationLinear(deterministic, a, b, device=device, dtype=dtype)
                                 for a, b in pairs) if deterministic else nn.ModuleList()

    @property
    def members(self) -> int:
        return self.bayesian + self.deterministic

    def _bayes(self, i: int) -> PopulationBayesLinear:
        """Layer i of the Bayesian members."""
        return _layer_at(self.bayes, i, PopulationBayesLinear)

    def _det(self, i: int) -> PopulationLinear:
        """Layer i of the deterministic members."""
        return _layer_at(self.det, i, PopulationLinear)

    def forward(self, x: Tensor | OneHot, num_samples: int | None = None) -> Tensor:
        """Every member on its own rows: x (members, R, in) or :class:`OneHot` (members, R, K) ->
        (members, R, out). Bayesian members draw their weights once per call when sampling
        (``train()`` mode, or :func:`~bbb.nn.sampling`), else use the means. ``num_samples`` = k
        gives (k, members, R, out): k draws per Bayesian member; a deterministic member's
        output is the same in each of the k slices."""
        _check_members(x, self.members, type(self).__name__, self.sizes[0])
        k = None if num_samples is None else check_int("num_samples", num_samples)
        given = _samples_of(x)  # (k, members, R, in): the k copies given, as forward_samples passes them
        if given is not None and (not LEADING.get() or k not in (None, given)):
            raise UserError("BayesPopulation takes inputs (members, rows, features); ask for samples with "
                            "num_samples=k (or pass (k, members, rows, features) inside bbb.nn.leading_samples())")
        last = len(self.sizes) - 2
        if given is not None:
            k = given
        if self.local:  # pre-activations are drawn per layer: each layer sees (k, members, R, ...)
            h = x if k is None or given is not None else (
                x.repeat(k) if isinstance(x, OneHot) else x.unsqueeze(0).expand(k, *x.shape))
            for i, layer in enumerate(self.bayes):
                h = layer(h)
                if i < last:
                    h = F.relu(h)
            assert isinstance(h, Tensor)  # a layer's output (there is at least one layer)
            return h
        return self._weight_forward(x, k, given is not None)

    def forward_weights(self, x: Tensor | OneHot, num_samples: int | None = None) -> Tensor:
        """:meth:`forward` with whole weight draws whatever the estimator: each of the k draws is
        one network per member (what Thompson sampling decides with), also for the local
        estimator, whose :meth:`forward` draws pre-activations per row instead. Draws go through
        the sample providers (e.g. :func:`~bbb.engine.counter_noise`) as :meth:`forward`'s do."""
        _check_members(x, self.members, type(self).__name__, self.sizes[0])
        return self._weight_forward(x, None if num_samples is None else check_int("num_samples", num_samples))

    def _weight_forward(self, x: Tensor | OneHot, k: int | None, given: bool = False) -> Tensor:
        """:meth:`forward_weights` on checked inputs (the forward path checks them once); ``given``:
        x holds its k copies, (k, members, R, ...)."""
        last = len(self.sizes) - 2
        if k is None:
            h = x
        elif given:  # in memory, as _repeat makes them (an expanded view is copied)
            h = x.flatten_samples() if isinstance(x, OneHot) else x.reshape(-1, *x.shape[2:]).contiguous()
        else:
            h = _repeat(x, k)
        for i in range(last + 1):
            w, b = self._layer(i, k)
            h = population_linear(h, w, b)
            if i < last:
                h = F.relu(h)
        assert isinstance(h, Tensor)  # a layer's output (there is at least one layer)
        return h if k is None else h.view(k, self.members, *h.shape[1:])

    def _layer(self, i: int, k: int | None) -> tuple[Tensor, Tensor]:
        """Layer i's weights and biases of every member, (members, ...) or (k * members, ...)."""
        ws, bs = [], []
        if self.bayesian:
            w, b = self._bayes(i).sample(k)
            ws.append(w)
            bs.append(b)
        if self.deterministic:
            lin = self._det(i)
            ws.append(lin.weight if k is None else lin.weight.expand(k, *lin.weight.shape))
            bs.append(lin.bias if k is None else lin.bias.expand(k, *lin.bias.shape))
        dim = 0 if k is None else 1
        w, b = (ws[0], bs[0]) if len(ws) == 1 else (torch.cat(ws, dim), torch.cat(bs, dim))
        if k is not None:
            w, b = w.reshape(-1, *w.shape[2:]), b.reshape(-1, b.shape[-1])
        return w, b

    # -- members as BayesMLPs ------------------------------------------------------------------
    def _slot(self, j: int) -> tuple[bool, int]:
        if isinstance(j, bool) or int(j) != j or not 0 <= j < self.members:
            raise UserError(f"member index must be in [0, {self.members}), got {j!r}")
        return (True, int(j)) if j < self.bayesian else (False, int(j) - self.bayesian)

    def member(self, j: int) -> BayesMLP:
        """Member j as a new :class:`~bbb.nn.BayesMLP` (a copy, of the population's estimator). A
        deterministic member's weights become the posterior means (its rho is the population's
        rho_init): use it in mean mode."""
        bayes, r = self._slot(j)
        ref = self._bayes(0).mu("weight") if bayes else self._det(0).weight
        first = self._bayes(0) if self.bayesian else None
        prior = None if first is None else first.prior
        if isinstance(prior, MemberPrior):  # a deterministic member takes the first's (it has no KL)
            prior = prior.member(r if bayes else 0)
        net = BayesMLP(self.sizes[0], self.sizes[1:-1], self.sizes[-1], prior=prior,
                       rho_init=first.rho_init if first is not None else DEFAULT_RHO_INIT,
                       estimator=first.estimator if first is not None else Estimator.REPARAM,
                       device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            for i in range(len(self.sizes) - 1):
                dst = _layer_at(net.layers, i, BayesLinear)
                if bayes:
                    src = self._bayes(i)
                    dst.mu("weight").copy_(src.mu("weight")[r].T)
                    dst.rho("weight").copy_(src.rho("weight")[r].T)
                    dst.mu("bias").copy_(src.mu("bias")[r])
                    dst.rho("bias").copy_(src.rho("bias")[r])
                    for name, mask in _masks(src):  # pruned (bbb.prune): the member's mask too
                        dst.register_buffer(f"{name}_mask", (mask[r].T if name == "weight" else mask[r]).clone())
                else:
                    det = self._det(i)
                    dst.mu("weight").copy_(det.weight[r].T)
                    dst.mu("bias").copy_(det.bias[r])
        return net

    def load_member(self, j: int, net: BayesMLP) -> None:
        """Set member j's parameters from ``net`` (a :class:`~bbb.nn.BayesMLP` of the same sizes):
        the means, and rho for a Bayesian member."""
        bayes, r = self._slot(j)
        if not isinstance(net, BayesMLP) or list(net.sizes) != self.sizes:
            raise UserError(f"load_member needs a BayesMLP of sizes {self.sizes}, got "
                            f"{getattr(net, 'sizes', type(net).__name__)}")
        with torch.no_grad():
            for i in range(len(self.sizes) - 1):
                src = _layer_at(net.layers, i, BayesLinear)
                if bayes:
                    dst = self._bayes(i)
                    dst.mu("weight")[r].copy_(src.mu("weight").T)
                    dst.rho("weight")[r].copy_(src.rho("weight").T)
                    dst.mu("bias")[r].copy_(src.mu("bias"))
                    dst.rho("bias")[r].copy_(src.rho("bias"))
                    _load_mask(dst, r, src)
                else:
                    det = self._det(i)
                    det.weight[r].copy_(src.mu("weight").T)
                    det.bias[r].copy_(src.mu("bias"))

    def reset_member(self, j: int, generator: torch.Generator | None = None) -> None:
        """Draw member j's weights afresh as a new network would (torch.nn's U(+-1/sqrt(fan_in))
        for weights and biases, layer by layer, weights first), from ``generator``; a Bayesian
        member's rho goes back to rho_init. Members reset from equal generators start equal."""
        bayes, r = self._slot(j)
        with torch.no_grad():
            for i, a in enumerate(self.sizes[:-1]):
                if bayes:
                    layer = self._bayes(i)
                    scale = layer.mu_init_scale if layer.mu_init_scale is not None else a ** -0.5
                    targets = [layer.mu("weight")[r], layer.mu("bias")[r]]
                    layer.rho("weight")[r].fill_(layer.rho_init)
                    layer.rho("bias")[r].fill_(layer.rho_init)
                else:
                    scale = a ** -0.5
                    det = self._det(i)
                    targets = [det.weight[r], det.bias[r]]
                for t in targets:
                    u = torch.rand(t.shape, generator=generator, dtype=t.dtype, device="cpu")
                    t.copy_(u.mul_(2 * scale).sub_(scale))

    def extra_repr(self) -> str:
        return (f"sizes={self.sizes}, bayesian={self.bayesian}, deterministic={self.deterministic}"
                + (", estimator=local" if self.local else ""))
