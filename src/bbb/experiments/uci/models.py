"""The three regression methods of ``bbb reproduce uci`` as populations: many independent
networks of one architecture (one hidden ReLU layer) trained together, each member on its own
split's rows with its own grid point (learning rate, and the method's settings).

- :class:`BBBRegressor`: Bayes by Backprop (diagonal Gaussian posterior, a Gaussian prior of the
  member's sd, the closed-form KL times the member's ``beta``), noise learned
  (homoscedastic) or predicted (heteroscedastic), the reparameterisation or local estimator.
- :class:`MCDropoutRegressor`: MC dropout as Gal & Ghahramani's UCI code: dropout of rate p on the
  inputs and on the hidden layer, squared error plus weight decay l^2 (1 - p) / (2 N tau) on the
  weights; the predictive is the mixture over dropout masks of N(f(x), tau^-1), tau chosen on
  validation.
- :class:`DeepEnsembleRegressor`: Lakshminarayanan et al.'s deep ensembles: ``ENSEMBLE_SIZE``
  networks per member, each predicting a mean and a noise sd, trained on the Gaussian NLL from
  their own initialisation and data order, with adversarial training (an input step of
  ``eps`` times each input's range along the sign of the loss's gradient); the predictive is the
  equal mixture of their Gaussians.

Every model gives its predictive as k components per member, ``predict -> (means, sds)`` of shape
(k, members, rows) in standardised units: the same Gaussian mixture and the same scores
(:func:`bbb.uncertainty.gaussian_mixture_log_prob`) for all three. Each member has its own
learning rate (:class:`MemberAdam`), so one population holds a whole validation grid.

On your own data (one member; inputs and target standardised)::

    from bbb.experiments.uci import MCDropoutRegressor, Setting
    from bbb.uncertainty import gaussian_mixture_log_prob

    model = MCDropoutRegressor([Setting(1e-3, dropout=0.05)], features=x.shape[1], hidden=50)
    for epoch in range(100):
        for idx in torch.randperm(len(y)).split(32):
            model.train_step(x[idx][None], y[idx][None], n_fit=len(y))
    means, sds = model.predict(x_test[None], 100, torch.Generator().manual_seed(0))  # (100, 1, R)
    log_lik = gaussian_mixture_log_prob(y_test, means[:, 0], 0.1 * sds[:, 0])  # noise sd 0.1

(``DeepEnsembleRegressor(settings, features, hidden, eps=0.01, x_range=...)`` and
``BBBRegressor(variant, settings, features, hidden)`` alike.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ...distributions import GaussianPrior, inverse_softplus, normal_log_prob, softplus
from ...elbo import HeteroscedasticGaussian
from ...errors import UserError
from ...nn import BayesPopulation, PopulationLinear, SampleRecorder, population_linear, sampling
from .settings import DROPOUT_LENGTHSCALE, ENSEMBLE_SIZE, Setting, Variant

__all__ = ["chunk_size", "MemberAdam", "BBBRegressor", "MCDropoutRegressor", "DeepEnsembleRegressor", "Regressor",
           "build_regressor"]

#: samples drawn per chunk when predicting, at most; and the most activations (samples x members
#: x rows x hidden units) one chunk holds, which bounds the memory of a prediction (about 0.4 GB a
#: tensor; the local estimator keeps several alive)
CHUNK = 25
CHUNK_ELEMENTS = 100_000_000


def chunk_size(members: int, rows: int, width: int) -> int:
    """Samples per chunk for ``members`` x ``rows`` inputs through layers of ``width`` units."""
    return max(1, min(CHUNK, CHUNK_ELEMENTS // max(1, members * rows * width)))


class MemberAdam:
    """Adam (Kingma & Ba) over parameters whose first dimension is the member, with one learning
    rate per member: ``lr`` (members,). Elementwise, so each member trains exactly as it would
    alone with its own rate."""

    def __init__(self, params: Sequence[Tensor], lr: Tensor, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr = lr.detach().clone().float()
        self.betas, self.eps, self.t = betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        self.t += 1
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            lr = self.lr.to(p.dtype).view(-1, *([1] * (p.dim() - 1)))
            p.addcdiv_(m * (lr / c1), (v / c2).sqrt_().add_(self.eps), value=-1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "m": [m.clone() for m in self.m], "v": [v.clone() for v in self.v]}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.t = int(st["t"])
        for dst, src in zip(self.m + self.v, st["m"] + st["v"]):
            dst.copy_(src)


def _column(settings: Sequence[Setting], field: str) -> Tensor:
    return torch.tensor([float(getattr(s, field)) for s in settings])


class Regressor:
    """What the training loop needs of a method: ``copies`` networks per member (a deep
    ensemble's size), ``loss`` summed over members (each member's own, so gradients never mix),
    ``step``, ``predict`` and a state to resume from."""

    copies = 1
    params: Sequence[Tensor]
    opt: MemberAdam

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def train_step(self, xb: Tensor, yb: Tensor, n_fit: int) -> None:
        """One Adam step of every member on its minibatch (members, B, D) / (members, B)."""
        self.opt.zero_grad()
        self.loss(xb, yb, n_fit).backward()
        self.opt.step()

    def predict(self, x: Tensor, samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        raise NotImplementedError  # pragma: no cover - abstract

    def modules(self) -> nn.Module:  # pragma: no cover - abstract
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        return {"module": self.modules().state_dict(), "opt": self.opt.state_dict()}

    def load(self, st: dict[str, Any]) -> None:
        self.modules().load_state_dict(st["module"])
        self.opt.load_state_dict(st["opt"])


class BBBRegressor(Regressor):
    """Bayes by Backprop, one member per (split, grid point); see the module's docstring."""

    def __init__(self, variant: Variant, settings: Sequence[Setting], features: int, hidden: int,
                 noise_init: float = 1.0) -> None:
        members = len(settings)
        self.hetero = variant.likelihood == "heteroscedastic"
        self.pop = BayesPopulation(features, [hidden], 2 if self.hetero else 1, bayesian=members,
                                   prior=GaussianPrior(1.0), estimator=variant.estimator)
        self.lik = HeteroscedasticGaussian() if self.hetero else None
        self.raw_noise = nn.Parameter(torch.full((members,), float(inverse_softplus(float(noise_init)))))
        self.prior_sigma, self.beta = _column(settings, "prior_sigma"), _column(settings, "beta")
        self.params = [*self.pop.bayes.parameters(), *([] if self.hetero else [self.raw_noise])]
        self.opt = MemberAdam(self.params, _column(settings, "lr"))
        self._holder = nn.Module()
        self._holder.pop = self.pop
        self._holder.register_parameter("raw_noise", self.raw_noise)

    def modules(self) -> nn.Module:
        return self._holder

    def mean_sd(self, out: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, noise sd) of outputs (..., members, R, out) in standardised units."""
        if self.lik is not None:
            return self.lik.split(out)
        return out[..., 0], softplus(self.raw_noise).view(-1, 1).expand(out.shape[:-1])

    def kl(self) -> Tensor:
        """KL[q || N(0, s_m^2)] of each member m (members,), closed form."""
        total = torch.zeros(self.prior_sigma.shape[0])
        for s in self.prior_sigma.unique().tolist():
            prior, mask = GaussianPrior(s), (self.prior_sigma == s).to(total.dtype)
            for layer in self.pop.bayes:
                for name in ("weight", "bias"):
                    mu, rho = getattr(layer, f"{name}_mu"), getattr(layer, f"{name}_rho")
                    out = prior.kl_closed_form(mu, softplus(rho))
                    assert out is not None
                    total = total + mask * out[0].flatten(1).sum(1)
        return total

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int) -> Tensor:
        """Each member's minibatch free energy, NLL + beta KL B/N (the KL spread uniformly)."""
        mean, sd = self.mean_sd(self.pop(xb))
        nll = -normal_log_prob(yb, mean, sd).sum()
        return nll + (self.beta * self.kl()).sum() * (xb.shape[1] / n_fit)

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """k weight samples' (mean, noise sd) per member and row: (k, members, R), float64."""
        means, sds = [], []
        step = chunk_size(x.shape[0], x.shape[1], max(self.pop.sizes[1:-1]))
        with sampling(self.pop, "sample"), SampleRecorder(generator):
            for start in range(0, samples, step):
                m, s = self.mean_sd(self.pop(x, num_samples=min(step, samples - start)))
                means.append(m.double())
                sds.append(s.double())
        return torch.cat(means), torch.cat(sds)


class _MLP(nn.Module):
    """``members`` one-hidden-layer ReLU networks (deterministic population layers)."""

    def __init__(self, members: int, features: int, hidden: int, out: int) -> None:
        super().__init__()
        self.l1 = PopulationLinear(members, features, hidden)
        self.l2 = PopulationLinear(members, hidden, out)


def _drop(x: Tensor, keep: Tensor, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout of x (members, R, F) with each member's keep probability (members,)."""
    k = keep.view(-1, 1, 1).to(x.dtype)
    mask = torch.rand(x.shape, generator=generator, dtype=x.dtype) < k
    return x * mask / k


class MCDropoutRegressor(Regressor):
    """MC dropout, one member per (split, dropout rate); see the module's docstring."""

    def __init__(self, settings: Sequence[Setting], features: int, hidden: int) -> None:
        members = len(settings)
        self.net = _MLP(members, features, hidden, 1)
        self.keep = 1.0 - _column(settings, "dropout")
        self.params = list(self.net.parameters())
        self.opt = MemberAdam(self.params, _column(settings, "lr"))

    def modules(self) -> nn.Module:
        return self.net

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        h = torch.relu(population_linear(_drop(x, self.keep, generator), self.net.l1.weight, self.net.l1.bias))
        return population_linear(_drop(h, self.keep, generator), self.net.l2.weight, self.net.l2.bias)[..., 0]

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int) -> Tensor:
        """Each member's mean squared error plus its weight decay l^2 (1 - p) / (2 N) ||W||^2
        (tau = 1 in standardised units; Keras' l2 on the kernels, not the biases)."""
        mse = ((self.forward(xb) - yb) ** 2).mean(1)
        reg = DROPOUT_LENGTHSCALE ** 2 * self.keep / (2 * n_fit)
        sq = sum(lay.weight.pow(2).flatten(1).sum(1) for lay in (self.net.l1, self.net.l2))
        return (mse + reg * sq).sum()

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """k dropout masks' outputs per member and row: (k, members, R), float64; the sds are 1
        (the noise sd is the scale chosen on validation, :data:`DROPOUT_NOISE_SDS`)."""
        members, rows = x.shape[0], x.shape[1]
        means = []
        step = chunk_size(members, rows, self.net.l1.out_features)
        for start in range(0, samples, step):
            k = min(step, samples - start)
            xs = x.unsqueeze(1).expand(members, k, rows, x.shape[2]).reshape(members, k * rows, -1)
            means.append(self.forward(xs, generator).view(members, k, rows).transpose(0, 1).double())
        out = torch.cat(means)
        return out, torch.ones_like(out)


class DeepEnsembleRegressor(Regressor):
    """Deep ensembles, ``ENSEMBLE_SIZE`` networks per (split, learning rate); physical member
    ``e * members + m`` is network e of member m. See the module's docstring."""

    copies = ENSEMBLE_SIZE

    def __init__(self, settings: Sequence[Setting], features: int, hidden: int, eps: float,
                 x_range: Tensor | None = None) -> None:
        if eps > 0 and x_range is None:
            raise UserError("DeepEnsembleRegressor: adversarial training (eps > 0) needs x_range, each network's "
                            "input ranges (members * copies, features); or pass eps=0")
        members = len(settings)
        self.net = _MLP(members * self.copies, features, hidden, 2)
        self.lik = HeteroscedasticGaussian()
        self.eps = float(eps)
        #: (members * copies, 1, D): each network's input step, eps times its rows' range
        self.step_size = None if x_range is None else (self.eps * x_range).unsqueeze(1)
        self.params = list(self.net.parameters())
        self.opt = MemberAdam(self.params, _column(settings, "lr").repeat(self.copies))

    def modules(self) -> nn.Module:
        return self.net

    def _nll(self, x: Tensor, y: Tensor) -> Tensor:
        h = torch.relu(population_linear(x, self.net.l1.weight, self.net.l1.bias))
        mean, sd = self.lik.split(population_linear(h, self.net.l2.weight, self.net.l2.bias))
        return -normal_log_prob(y, mean, sd).sum()

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int) -> Tensor:
        """Every network's Gaussian NLL, plus that of its adversarial inputs when eps > 0."""
        if self.eps == 0.0:
            return self._nll(xb, yb)
        assert self.step_size is not None
        xg = xb.detach().requires_grad_(True)
        nll = self._nll(xg, yb)
        (g,) = torch.autograd.grad(nll, xg, retain_graph=True)
        return nll + self._nll((xb + self.step_size * g.sign()).detach(), yb)

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Each network's (mean, noise sd) per member and row: (copies, members, R), float64."""
        xs = x.repeat(self.copies, 1, 1)
        h = torch.relu(population_linear(xs, self.net.l1.weight, self.net.l1.bias))
        mean, sd = self.lik.split(population_linear(h, self.net.l2.weight, self.net.l2.bias))
        shape = (self.copies, x.shape[0], x.shape[1])
        return mean.reshape(shape).double(), sd.reshape(shape).double()


def build_regressor(variant: Variant, settings: Sequence[Setting], features: int, hidden: int, *,
                    noise_init: float = 1.0, adversarial_eps: float = 0.0, x_range: Tensor | None = None,
                    seed: int = 0) -> Regressor:
    """The population of ``variant`` with one member per entry of ``settings`` (initialised from
    ``seed``). ``x_range`` (members * copies, D): the deep ensembles' input ranges."""
    torch.manual_seed(seed)
    if variant.estimator == "dropout":
        return MCDropoutRegressor(settings, features, hidden)
    if variant.estimator == "ensemble":
        return DeepEnsembleRegressor(settings, features, hidden, adversarial_eps, x_range)
    return BBBRegressor(variant, settings, features, hidden, noise_init)

