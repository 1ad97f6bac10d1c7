"""The regression methods of ``bbb reproduce uci`` as populations: many independent
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
- :class:`LaplaceRegressor`: a last-layer Laplace (:mod:`bbb.laplace`) of the MAP network: MC
  dropout's network and loss without dropout (squared error plus its weight decay, one output),
  then at each scoring epoch a KFAC Laplace of each member's last layer on its fitting rows, the
  prior precision and the noise sd chosen by the marginal likelihood; the predictive is the GLM
  one, a single Gaussian per row (its variance the linearised network's plus the noise's).
- :class:`BBBEnsembleRegressor` (``ENSEMBLE_SIZE`` BBB networks per member) and
  :class:`IVONRegressor` (BBB's posterior family and objective, learned by IVON): their docstrings.

Every model gives its predictive as k components per member, ``predict -> (means, sds)`` of shape
(k, members, rows) in standardised units: the same Gaussian mixture and the same scores
(:func:`bbb.uncertainty.gaussian_mixture_log_prob`) for all of them. Each member has its own
learning rate (:class:`MemberAdam`), so one population holds a whole validation grid.

Every random number of a network is its own (:mod:`~bbb.experiments.uci.streams`): its
initialisation from its key, the noise of a training step from ``draw(streams, TRAIN, step, 1,
batch)`` (weight or pre-activation noise, dropout masks), the predictive's samples from
``predict(..., streams, stream)``; so a member trains and scores exactly as it would alone.

On your own data (one member; inputs and target standardised)::

    from bbb.experiments.uci import MCDropoutRegressor, Setting
    from bbb.experiments.uci.streams import TRAIN, MemberStreams, eval_stream
    from bbb.uncertainty import gaussian_mixture_log_prob

    streams = MemberStreams([0])  # one network, key 0
    model = MCDropoutRegressor([Setting(1e-3, dropout=0.05)], features=x.shape[1], hidden=50, streams=streams)
    for step, idx in enumerate(i for _ in range(100) for i in torch.randperm(len(y)).split(32)):
        model.train_step(x[idx][None], y[idx][None], len(y), model.draw(streams, TRAIN, step, 1, 32))
    means, sds = model.predict(x_test[None], 100, streams, eval_stream(0))  # (100, 1, R)
    log_lik = gaussian_mixture_log_prob(y_test, means[:, 0], 0.1 * sds[:, 0])  # noise sd 0.1

(``DeepEnsembleRegressor(settings, features, hidden, eps=0.01, x_range=...)`` and
``BBBRegressor(variant, settings, features, hidden)`` alike; without ``streams`` a model is
initialised from keys 0, 1, ... and trains on torch's global random numbers.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ...distributions import GaussianPrior, inverse_softplus, normal_log_prob, softplus
from ...elbo import HeteroscedasticGaussian
from ...errors import UserError
from ...nn import (
    BayesModule,
    BayesPopulation,
    PopulationLinear,
    SampleProvider,
    population_linear,
    providing_samples,
    sampling,
)
from .optim import MemberAdam, MemberIVON
from .settings import DROPOUT_LENGTHSCALE, ENSEMBLE_SIZE, IVON_BETA2, IVON_HESS_INIT, Setting, UCIMethod, Variant
from .streams import Draw, MemberStreams

__all__ = ["chunk_size", "MemberAdam", "BBBRegressor", "MCDropoutRegressor", "DeepEnsembleRegressor",
           "LaplaceRegressor", "BBBEnsembleRegressor", "IVONRegressor", "Regressor", "build_regressor"]

#: samples drawn per chunk when predicting, at most; and the most activations (samples x members
#: x rows x hidden units) one chunk holds, which bounds the memory of a prediction (about 0.4 GB a
#: tensor; the local estimator keeps several alive)
CHUNK = 25
CHUNK_ELEMENTS = 100_000_000


def chunk_size(members: int, rows: int, width: int) -> int:
    """Samples per chunk for ``members`` x ``rows`` inputs through layers of ``width`` units."""
    return max(1, min(CHUNK, CHUNK_ELEMENTS // max(1, members * rows * width)))


def _column(settings: Sequence[Setting], field: str) -> Tensor:
    return torch.tensor([float(getattr(s, field)) for s in settings])


def _streams(streams: MemberStreams | None, nets: int) -> MemberStreams:
    if streams is None:
        return MemberStreams(range(nets))
    if len(streams) != nets:
        raise UserError(f"the population has {nets} networks but streams has {len(streams)} keys")
    return streams


class _GivenNoise(SampleProvider):
    """Hands a population's Bayesian layers their noise from a :class:`Draw` (rows: 1 for a
    training step, k for k predictive samples): weight noise layer by layer, weight before bias,
    or the local estimator's pre-activation noise."""

    def __init__(self, noise: Draw) -> None:
        self.noise = noise

    def draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor]:
        assert isinstance(module, BayesModule)
        mu, rho = module.mu(name), module.rho(name)
        if (k or 1) != self.noise.rows:
            raise ValueError(f"a draw of {self.noise.rows} rows was asked for {k} samples")
        got = self.noise.take(mu[0].numel())  # (members, rows, per member)
        eps = got[:, 0].reshape(mu.shape) if k is None else got.transpose(0, 1).reshape(k, *mu.shape)
        return mu, eps, torch.addcmul(mu, softplus(rho), eps)

    def preactivation_noise(self, module: nn.Module, shape: tuple[int, ...]) -> Tensor:
        return self.noise.like(shape)


class Regressor:
    """What the training loop needs of a method: ``copies`` networks per member (a deep
    ensemble's size), ``loss`` summed over members (each member's own, so gradients never mix),
    ``step``, ``predict`` and a state to resume from; ``noise`` the kind of random numbers a
    forward pass takes (``"normal"``, ``"uniform"`` or None) and :meth:`noise_width` how many."""

    copies = 1
    noise: str | None = None
    params: Sequence[Tensor]
    opt: MemberAdam

    def noise_width(self, rows: int) -> int:
        """Random numbers per network that one forward pass over ``rows`` inputs takes."""
        return 0

    def draw(self, streams: MemberStreams, stream: int, first: int, rows: int, inputs: int) -> Draw | None:
        """Each network's random numbers for ``rows`` forward passes (rows first, first + 1, ...
        of ``stream``) over ``inputs`` inputs each, or None for a model that takes none."""
        width = self.noise_width(inputs)
        if self.noise is None or width == 0:
            return None
        if self.noise == "normal":
            return streams.normal(stream, first, rows, width)
        return streams.uniform(stream, first, rows, width)

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def train_step(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> None:
        """One Adam step of every member on its minibatch (members, B, D) / (members, B), with
        the step's random numbers ``noise`` (:meth:`draw`; None: torch's global generator)."""
        self.opt.zero_grad()
        self.loss(xb, yb, n_fit, noise).backward()
        self.opt.step()

    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        raise NotImplementedError  # pragma: no cover - abstract

    def prepare(self, x_fit: Tensor, y_fit: Tensor) -> None:
        """Called at a scoring epoch before :meth:`predict`, with every member's fitting rows
        (members, n, D) / (members, n): a post-hoc posterior is fitted here (nothing by default)."""

    def fitted(self) -> dict[str, list[float]]:
        """What :meth:`prepare` fitted, per member (recorded beside the scores; none by default)."""
        return {}

    def _chunks(self, x: Tensor, samples: int, width: int, streams: MemberStreams | None,
                stream: int) -> Iterator[tuple[int, Draw | None]]:
        """The predictive's chunks of samples: (samples in the chunk, their random numbers: rows
        start .. start + k - 1 of ``stream``, so a sample's numbers never depend on the chunking).
        Each chunk's numbers are drawn when it is reached: drawn all at once they would hold the
        memory the chunks bound."""
        step = chunk_size(x.shape[0], x.shape[1], width)
        for start in range(0, samples, step):
            k = min(step, samples - start)
            yield k, None if streams is None else self.draw(streams, stream, start, k, x.shape[1])

    def modules(self) -> nn.Module:  # pragma: no cover - abstract
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        return {"module": self.modules().state_dict(), "opt": self.opt.state_dict()}

    def load(self, st: dict[str, Any]) -> None:
        self.modules().load_state_dict(st["module"])
        self.opt.load_state_dict(st["opt"])


class BBBRegressor(Regressor):
    """Bayes by Backprop, one member per (split, grid point); see the module's docstring."""

    noise = "normal"

    def __init__(self, variant: Variant, settings: Sequence[Setting], features: int, hidden: int,
                 noise_init: float = 1.0, streams: MemberStreams | None = None) -> None:
        members = len(settings)
        self.hetero = variant.likelihood == "heteroscedastic"
        with torch.random.fork_rng(devices=[]):  # the constructor's draws, replaced below
            self.pop = BayesPopulation(features, [hidden], 2 if self.hetero else 1, bayesian=members,
                                       prior=GaussianPrior(1.0), estimator=variant.estimator)
        keys = _streams(streams, members)
        for j in range(members):
            self.pop.reset_member(j, keys.generator(j))
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

    def noise_width(self, rows: int) -> int:
        """The weights of a network (weight noise), or rows x its units (the local estimator's
        pre-activation noise)."""
        pairs = list(zip(self.pop.sizes[:-1], self.pop.sizes[1:]))
        if self.pop.local:
            return rows * sum(b for _, b in pairs)
        return sum(a * b + b for a, b in pairs)

    def _out(self, x: Tensor, k: int | None, noise: Draw | None) -> Tensor:
        if noise is None:
            return self.pop(x, num_samples=k)
        with providing_samples(_GivenNoise(noise)):
            out = self.pop(x, num_samples=k)
        if noise.used != noise.values.shape[2] and not self.pop.local:
            raise ValueError(f"a forward pass took {noise.used} of its draw's {noise.values.shape[2]} numbers")
        return out

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:
        """Each member's minibatch free energy, NLL + beta KL B/N (the KL spread uniformly)."""
        mean, sd = self.mean_sd(self._out(xb, None, noise))
        nll = -normal_log_prob(yb, mean, sd).sum()
        return nll + (self.beta * self.kl()).sum() * (xb.shape[1] / n_fit)

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        """k weight samples' (mean, noise sd) per member and row: (k, members, R), float64;
        sample i's noise is row i of ``stream`` (None: torch's global generator)."""
        means, sds = [], []
        with sampling(self.pop, "sample"):
            for k, noise in self._chunks(x, samples, max(self.pop.sizes[1:-1]), streams, stream):
                m, s = self.mean_sd(self._out(x, k, noise))
                means.append(m.double())
                sds.append(s.double())
        return torch.cat(means), torch.cat(sds)


class _MLP(nn.Module):
    """``members`` one-hidden-layer ReLU networks (deterministic population layers), network j
    initialised from ``streams``' generator j (torch.nn's U(+-1/sqrt(fan_in)), weight then bias,
    layer by layer)."""

    def __init__(self, members: int, features: int, hidden: int, out: int, streams: MemberStreams | None) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):  # the constructors' draws, replaced below
            self.l1 = PopulationLinear(members, features, hidden)
            self.l2 = PopulationLinear(members, hidden, out)
        keys = _streams(streams, members)
        with torch.no_grad():
            for j in range(members):
                g = keys.generator(j)
                for lay in (self.l1, self.l2):
                    b = lay.in_features ** -0.5
                    for t in (lay.weight[j], lay.bias[j]):
                        t.copy_(torch.rand(t.shape, generator=g).mul_(2 * b).sub_(b))


def _drop(x: Tensor, keep: Tensor, noise: Draw | None) -> Tensor:
    """Inverted dropout of x (members, R, F) with each member's keep probability (members,); the
    uniforms from ``noise`` (None: torch's global generator)."""
    k = keep.view(-1, 1, 1).to(x.dtype)
    u = torch.rand(x.shape, dtype=x.dtype) if noise is None else noise.like(x.shape)
    return x * (u < k) / k


class MCDropoutRegressor(Regressor):
    """MC dropout, one member per (split, dropout rate); see the module's docstring."""

    noise = "uniform"

    def __init__(self, settings: Sequence[Setting], features: int, hidden: int,
                 streams: MemberStreams | None = None) -> None:
        members = len(settings)
        self.net = _MLP(members, features, hidden, 1, streams)
        self.keep = 1.0 - _column(settings, "dropout")
        self.params = list(self.net.parameters())
        self.opt = MemberAdam(self.params, _column(settings, "lr"))

    def modules(self) -> nn.Module:
        return self.net

    def noise_width(self, rows: int) -> int:
        """A mask per input and hidden unit of each row."""
        return rows * (self.net.l1.in_features + self.net.l1.out_features)

    def forward(self, x: Tensor, noise: Draw | None = None) -> Tensor:
        h = torch.relu(population_linear(_drop(x, self.keep, noise), self.net.l1.weight, self.net.l1.bias))
        return population_linear(_drop(h, self.keep, noise), self.net.l2.weight, self.net.l2.bias)[..., 0]

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:
        """Each member's mean squared error plus its weight decay l^2 (1 - p) / (2 N) ||W||^2
        (tau = 1 in standardised units; Keras' l2 on the kernels, not the biases)."""
        mse = ((self.forward(xb, noise) - yb) ** 2).mean(1)
        reg = DROPOUT_LENGTHSCALE ** 2 * self.keep / (2 * n_fit)
        sq = sum(lay.weight.pow(2).flatten(1).sum(1) for lay in (self.net.l1, self.net.l2))
        return (mse + reg * sq).sum()

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        """k dropout masks' outputs per member and row: (k, members, R), float64; the sds are 1
        (the noise sd is the scale chosen on validation, :data:`DROPOUT_NOISE_SDS`); sample i's
        masks are row i of ``stream`` (None: torch's global generator)."""
        members, rows = x.shape[0], x.shape[1]
        means = []
        for k, noise in self._chunks(x, samples, self.net.l1.out_features, streams, stream):
            xs = x.unsqueeze(1).expand(members, k, rows, x.shape[2]).reshape(members, k * rows, -1)
            means.append(self.forward(xs, noise).view(members, k, rows).transpose(0, 1).double())
        out = torch.cat(means)
        return out, torch.ones_like(out)


class DeepEnsembleRegressor(Regressor):
    """Deep ensembles, ``ENSEMBLE_SIZE`` networks per (split, learning rate); physical member
    ``e * members + m`` is network e of member m. See the module's docstring."""

    copies = ENSEMBLE_SIZE

    def __init__(self, settings: Sequence[Setting], features: int, hidden: int, eps: float,
                 x_range: Tensor | None = None, streams: MemberStreams | None = None) -> None:
        if eps > 0 and x_range is None:
            raise UserError("DeepEnsembleRegressor: adversarial training (eps > 0) needs x_range, each network's "
                            "input ranges (members * copies, features); or pass eps=0")
        members = len(settings)
        self.net = _MLP(members * self.copies, features, hidden, 2, streams)
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

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:
        """Every network's Gaussian NLL, plus that of its adversarial inputs when eps > 0 (no
        random numbers: the adversarial step is deterministic)."""
        if self.eps == 0.0:
            return self._nll(xb, yb)
        assert self.step_size is not None
        xg = xb.detach().requires_grad_(True)
        nll = self._nll(xg, yb)
        (g,) = torch.autograd.grad(nll, xg, retain_graph=True)
        return nll + self._nll((xb + self.step_size * g.sign()).detach(), yb)

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        """Each network's (mean, noise sd) per member and row: (copies, members, R), float64 (no
        random numbers: ``samples`` and the streams are not used)."""
        xs = x.repeat(self.copies, 1, 1)
        h = torch.relu(population_linear(xs, self.net.l1.weight, self.net.l1.bias))
        mean, sd = self.lik.split(population_linear(h, self.net.l2.weight, self.net.l2.bias))
        shape = (self.copies, x.shape[0], x.shape[1])
        return mean.reshape(shape).double(), sd.reshape(shape).double()


class LaplaceRegressor(Regressor):
    """The MAP network and its last-layer Laplace, one member per (split, learning rate); see the
    module's docstring. :meth:`prepare` fits each member's Laplace on its fitting rows (no random
    numbers: the curvature is exact over the rows, the marginal likelihood's optimum is found by
    Adam from 1); :meth:`predict` needs it."""

    def __init__(self, settings: Sequence[Setting], features: int, hidden: int,
                 streams: MemberStreams | None = None) -> None:
        self.net = _MLP(len(settings), features, hidden, 1, streams)
        self.params = list(self.net.parameters())
        self.opt = MemberAdam(self.params, _column(settings, "lr"))
        self.posteriors: list[Any] = []

    def modules(self) -> nn.Module:
        return self.net

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(population_linear(x, self.net.l1.weight, self.net.l1.bias))
        return population_linear(h, self.net.l2.weight, self.net.l2.bias)[..., 0]

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:
        """MC dropout's loss at dropout 0: each member's mean squared error plus the weight decay
        l^2 / (2 N) ||W||^2 (a Gaussian prior; MAP with unit noise in standardised units)."""
        mse = ((self.forward(xb) - yb) ** 2).mean(1)
        sq = sum(lay.weight.pow(2).flatten(1).sum(1) for lay in (self.net.l1, self.net.l2))
        return (mse + DROPOUT_LENGTHSCALE ** 2 / (2 * n_fit) * sq).sum()

    def member(self, j: int) -> nn.Sequential:
        """Member ``j`` as a ``torch.nn`` network (a copy: Linear, ReLU, Linear)."""
        l1, l2 = self.net.l1, self.net.l2
        first, last = nn.Linear(l1.in_features, l1.out_features), nn.Linear(l2.in_features, l2.out_features)
        with torch.no_grad():
            for lin, lay in ((first, l1), (last, l2)):
                lin.weight.copy_(lay.weight[j].T)
                lin.bias.copy_(lay.bias[j])
        return nn.Sequential(first, nn.ReLU(), last)

    def prepare(self, x_fit: Tensor, y_fit: Tensor) -> None:
        """Each member's last-layer KFAC Laplace on its rows, prior precision and noise sd by the
        marginal likelihood (:func:`bbb.laplace.fit_last_layer_laplace`)."""
        from ...laplace import fit_last_layer_laplace

        with torch.random.fork_rng(devices=[]):  # nn.Linear draws its (replaced) initial weights
            self.posteriors = [fit_last_layer_laplace(self.member(j), (x_fit[j], y_fit[j]), likelihood="regression",
                                                      hessian="kron")
                               for j in range(x_fit.shape[0])]

    def fitted(self) -> dict[str, list[float]]:
        """Each member's prior precision and noise sd (standardised units) at the last :meth:`prepare`."""
        return {"prior_precision": [p.prior_precision for p in self.posteriors],
                "sigma_noise": [p.sigma_noise for p in self.posteriors]}

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        """The GLM predictive's (mean, sd) per member and row: (1, members, R), float64, the sd's
        variance the linearised network's plus the noise's (no random numbers: ``samples`` and
        the streams are not used). Needs :meth:`prepare` on these members."""
        if len(self.posteriors) != x.shape[0]:
            raise ValueError(f"LaplaceRegressor.predict: {len(self.posteriors)} fitted posteriors for "
                             f"{x.shape[0]} members; call prepare(x_fit, y_fit) first")
        means, sds = [], []
        for post, xj in zip(self.posteriors, x):
            m, v = post.predict(xj)
            means.append(m[:, 0].double())
            sds.append(v[:, 0].double().sqrt())
        return torch.stack(means)[None], torch.stack(sds)[None]


class BBBEnsembleRegressor(Regressor):
    """``ENSEMBLE_SIZE`` BBB networks per member, one population of members * copies networks
    (network ``e * members + m`` is copy e of member m, its own key in ``streams``); see the
    module's docstring. Each network trains exactly as a :class:`BBBRegressor` network would."""

    copies = ENSEMBLE_SIZE
    noise = "normal"

    def __init__(self, variant: Variant, settings: Sequence[Setting], features: int, hidden: int,
                 noise_init: float = 1.0, streams: MemberStreams | None = None) -> None:
        self.members = len(settings)
        self.bbb = BBBRegressor(variant, list(settings) * self.copies, features, hidden, noise_init, streams)
        self.params, self.opt = self.bbb.params, self.bbb.opt

    def modules(self) -> nn.Module:
        return self.bbb.modules()

    def noise_width(self, rows: int) -> int:
        return self.bbb.noise_width(rows)

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:
        """Every network's minibatch free energy (inputs (members * copies, B, D), copy-major)."""
        return self.bbb.loss(xb, yb, n_fit, noise)

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        """The mixture of each member's networks: k weight samples of each of its copies, pooled
        copy by copy, (copies * k, members, R), float64; ``x`` (members, R, D) (each member's rows,
        the same for its copies)."""
        means, sds = self.bbb.predict(x.repeat(self.copies, 1, 1), samples, streams, stream)
        k, r = means.shape[0], means.shape[2]

        def pool(t: Tensor) -> Tensor:  # (k, copies * members, R) -> (copies * k, members, R)
            return t.view(k, self.copies, self.members, r).transpose(0, 1).reshape(self.copies * k, self.members, r)

        return pool(means), pool(sds)


class _IVONNoise(_GivenNoise):
    """A training step's weights for IVON: mu + sigma * eps with the optimiser's sigma (the exact
    one, not softplus of the rho written from it), eps from the step's draw (None: torch's global
    generator); each weight's eps kept for the step."""

    def __init__(self, noise: Draw | None, opt: MemberIVON) -> None:
        self.noise, self.opt = noise, opt  # type: ignore[assignment]
        self.eps: dict[int, Tensor] = {}

    def draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor]:
        assert isinstance(module, BayesModule)
        if k is not None:
            raise ValueError("IVON's training step draws one sample per weight")
        mu = module.mu(name)
        if self.noise is None:
            eps = torch.randn_like(mu)
        else:
            eps = self.noise.take(mu[0].numel())[:, 0].reshape(mu.shape)
        self.eps[id(mu)] = eps
        return mu, eps, torch.addcmul(mu, self.opt.sigma_of(mu), eps)


class IVONRegressor(Regressor):
    """IVON (:class:`MemberIVON`) on BBB's heteroscedastic network, one member per (split, grid
    point): the same posterior family, prior N(0, prior_sigma^2) and tempered objective as
    :class:`BBBRegressor` at the same ``beta``, learned by IVON's natural-gradient update instead of
    Adam on the free energy. ``n_fit``: the rows each member fits; its effective sample size is
    ``n_fit / beta`` and its prior precision (weight decay) ``beta / (prior_sigma^2 n_fit)``, so
    that ess times IVON's objective is BBB's free energy divided by beta. The loss of a step is each
    member's mean NLL at one weight sample (no KL term: the prior is in the update); the predictive
    is BBB's (weight samples from mu and softplus(rho) = sigma)."""

    noise = "normal"
    opt: MemberIVON  # type: ignore[assignment]

    def __init__(self, variant: Variant, settings: Sequence[Setting], features: int, hidden: int, n_fit: int,
                 streams: MemberStreams | None = None) -> None:
        if variant.likelihood != "heteroscedastic" or variant.estimator != "reparam":
            raise ValueError("IVONRegressor trains the heteroscedastic network with the reparam estimator")
        self.bbb = BBBRegressor(variant, settings, features, hidden, streams=streams)
        layers = [m for m in self.bbb.pop.bayes if isinstance(m, BayesModule)]
        pairs = [(layer.mu(n), layer.rho(n)) for layer in layers for n in layer.param_names()]
        beta, prior_sigma = self.bbb.beta.double(), self.bbb.prior_sigma.double()
        self.opt = MemberIVON(pairs, _column(settings, "lr"), n_fit / beta, beta / (prior_sigma ** 2 * n_fit),
                              IVON_HESS_INIT, beta2=IVON_BETA2)
        self.params = [mu for mu, _ in pairs]
        for _, rho in pairs:
            rho.requires_grad_(False)  # sigma comes from IVON's Hessian estimate, not from a gradient

    def modules(self) -> nn.Module:
        return self.bbb.modules()

    def noise_width(self, rows: int) -> int:
        return self.bbb.noise_width(rows)

    def mean_sd(self, out: Tensor) -> tuple[Tensor, Tensor]:
        return self.bbb.mean_sd(out)

    def _nll(self, xb: Tensor, yb: Tensor, provider: _IVONNoise) -> Tensor:
        with providing_samples(provider):
            out = self.bbb.pop(xb)
        if provider.noise is not None and provider.noise.used != provider.noise.values.shape[2]:
            raise ValueError(f"a forward pass took {provider.noise.used} of its draw's "
                             f"{provider.noise.values.shape[2]} numbers")
        mean, sd = self.mean_sd(out)
        return -normal_log_prob(yb, mean, sd).mean(-1).sum()

    def loss(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> Tensor:
        """Each member's mean NLL over its minibatch at one weight sample, summed over members."""
        return self._nll(xb, yb, _IVONNoise(noise, self.opt))

    def train_step(self, xb: Tensor, yb: Tensor, n_fit: int, noise: Draw | None = None) -> None:
        """One IVON step of every member at the sample drawn from ``noise``."""
        provider = _IVONNoise(noise, self.opt)
        self.opt.zero_grad()
        self._nll(xb, yb, provider).backward()
        self.opt.step([provider.eps[id(mu)] for mu, _ in self.opt.pairs])

    @torch.no_grad()
    def predict(self, x: Tensor, samples: int, streams: MemberStreams | None = None,
                stream: int = 0) -> tuple[Tensor, Tensor]:
        """BBB's predictive of the IVON posterior: (k, members, R), float64."""
        return self.bbb.predict(x, samples, streams, stream)


def build_regressor(variant: Variant, settings: Sequence[Setting], features: int, hidden: int, *,
                    noise_init: float = 1.0, adversarial_eps: float = 0.0, x_range: Tensor | None = None,
                    streams: MemberStreams | None = None, n_fit: int | None = None) -> Regressor:
    """The population of ``variant`` with one member per entry of ``settings``, network j
    initialised from ``streams``' key j (members * copies keys; None: keys 0, 1, ...).
    ``x_range`` (members * copies, D): the deep ensembles' input ranges; ``n_fit``: the rows each
    member fits (IVON's effective sample size and prior precision are set from it)."""
    if variant.method is UCIMethod.IVON:
        if n_fit is None:
            raise ValueError("an IVON population needs n_fit, the rows each member fits")
        return IVONRegressor(variant, settings, features, hidden, n_fit, streams)
    if variant.estimator == "dropout":
        return MCDropoutRegressor(settings, features, hidden, streams)
    if variant.estimator == "laplace":
        return LaplaceRegressor(settings, features, hidden, streams)
    if variant.estimator == "ensemble":
        return DeepEnsembleRegressor(settings, features, hidden, adversarial_eps, x_range, streams)
    if variant.of:
        return BBBEnsembleRegressor(variant, settings, features, hidden, noise_init, streams)
    return BBBRegressor(variant, settings, features, hidden, noise_init, streams)

