"""Pyro 1.9: PyroModule + PyroSample priors with an AutoNormal guide, and contrib.bnn.HiddenLayer.

``pyro-autonormal``: the documented Bayesian-regression pattern applied to the MLP: every
``nn.Linear`` weight and bias gets a ``PyroSample(Normal(0, 1))`` prior, the guide is
``AutoNormal`` (mean-field Gaussian), the loss ``TraceMeanField_ELBO`` (closed-form KL between
the Normal guide and the Normal prior), the likelihood is scaled by N/B with ``pyro.plate``'s
``subsample``. Posterior mean: ``guide.median()``; k networks: ``Predictive``.

``pyro-hiddenlayer``: ``pyro.contrib.bnn.HiddenLayer`` in model and guide (local
reparameterisation, closed-form KL folded into ``log_prob``, ``KL_factor = B/N``), with
``Trace_ELBO`` (with Pyro's validation off: HiddenLayer has no batch shape, which the
model/guide check of Pyro 1.9 reads). It forms a (B, in, out) tensor per layer, hence fewer
timed steps and a capped number of evaluation images.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .base import BATCH, IN_FEATURES, N_TRAIN, NUM_CLASSES, Pair, System, require


def _pyro():
    pyro, version = require("pyro", "pyro-ppl")
    return pyro, version


@dataclass
class PyroAutoNormal(System):
    lr: float = 1e-3

    def build(self, width: int, device: torch.device) -> None:
        pyro, self.version = _pyro()
        import pyro.distributions as dist
        from pyro.infer import SVI, TraceMeanField_ELBO
        from pyro.infer.autoguide import AutoNormal
        from pyro.nn import PyroModule, PyroSample

        pyro.clear_param_store()
        zero, one = torch.zeros((), device=device), torch.ones((), device=device)
        sizes = [IN_FEATURES, width, width, NUM_CLASSES]

        class BNN(PyroModule):
            def __init__(self) -> None:
                super().__init__()
                self.layers = PyroModule[nn.ModuleList](
                    [PyroModule[nn.Linear](a, b) for a, b in zip(sizes[:-1], sizes[1:])])
                for lay, (a, b) in zip(self.layers, zip(sizes[:-1], sizes[1:])):
                    lay.weight = PyroSample(dist.Normal(zero, one).expand([b, a]).to_event(2))
                    lay.bias = PyroSample(dist.Normal(zero, one).expand([b]).to_event(1))

            def forward(self, x: Tensor, y: Tensor | None = None) -> Tensor:
                for i, lay in enumerate(self.layers):
                    x = lay(x)
                    if i < len(self.layers) - 1:
                        x = F.relu(x)
                idx = torch.arange(x.shape[0], device=x.device)
                with pyro.plate("data", size=N_TRAIN, subsample=idx):
                    pyro.sample("obs", dist.Categorical(logits=x), obs=y)
                return x

        self.model = BNN().to(device)
        self.guide = AutoNormal(self.model)
        self.svi = SVI(self.model, self.guide, pyro.optim.Adam({"lr": self.lr}), loss=TraceMeanField_ELBO())
        self._pyro = pyro

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:
        self.svi.step(x, y)

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:
        from pyro import poutine

        return poutine.condition(self.model, data=self.guide.median())(x)

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:
        from pyro.infer import Predictive

        return Predictive(self.model, guide=self.guide, num_samples=k, return_sites=("_RETURN",))(x)["_RETURN"]


def _ones(x: Tensor) -> Tensor:
    return torch.cat([x, x.new_ones(*x.shape[:-1], 1)], dim=-1)


@dataclass
class PyroHiddenLayer(System):
    lr: float = 1e-3
    #: prediction forms (chunk, in, out) tensors: examples per chunk
    chunk: int = BATCH

    def build(self, width: int, device: torch.device) -> None:
        pyro, self.version = _pyro()
        bnn, _ = require("pyro.contrib.bnn")
        import pyro.distributions as dist
        from pyro.distributions import constraints
        from pyro.infer import SVI, Trace_ELBO

        pyro.clear_param_store()
        # HiddenLayer never sets a batch shape, which Pyro 1.9's model/guide check reads
        pyro.enable_validation(False)
        dims = [(IN_FEATURES + 1, width), (width + 1, width), (width + 1, NUM_CLASSES)]
        acts = [F.relu, F.relu, lambda t: t]

        def layers(x: Tensor, params: list[tuple[Tensor, Tensor]], kl_factor: float) -> Tensor:
            h = _ones(x)
            for j, ((mean, scale), act) in enumerate(zip(params, acts)):
                h = pyro.sample(f"h{j}", bnn.HiddenLayer(h, mean, scale, non_linearity=act, KL_factor=kl_factor,
                                                         include_hidden_bias=j < 2))
            return h

        def model(x: Tensor, y: Tensor | None = None) -> Tensor:
            prior = [(torch.zeros(d, device=device), torch.ones(d, device=device)) for d in dims]
            logits = layers(x, prior, x.shape[0] / N_TRAIN)  # HiddenLayer has no batch shape: no plate
            with pyro.plate("data", size=x.shape[0]):
                pyro.sample("label", dist.Categorical(logits=logits), obs=y)
            return logits

        def guide(x: Tensor, y: Tensor | None = None) -> Tensor:
            params = []
            for j, d in enumerate(dims):
                mean = pyro.param(f"a{j}_mean", 0.01 * torch.randn(d, device=device))
                scale = pyro.param(f"a{j}_scale", 0.1 * torch.ones(d, device=device),
                                   constraint=constraints.greater_than(0.01))
                params.append((mean, scale))
            return layers(x, params, x.shape[0] / N_TRAIN)

        self.model_fn, self.guide_fn = model, guide
        self.svi = SVI(model, guide, pyro.optim.Adam({"lr": self.lr}), loss=Trace_ELBO())
        with torch.no_grad():
            guide(torch.zeros(2, IN_FEATURES, device=device))  # registers the parameters
        self.means = [pyro.param(f"a{j}_mean") for j in range(len(dims))]
        self.model = None

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:
        self.svi.step(x, y)

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:
        h = x
        for j, a in enumerate(self.means):
            h = _ones(h) @ a
            if j < len(self.means) - 1:
                h = F.relu(h)
        return h

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:
        return torch.stack([torch.cat([self.guide_fn(xc) for xc in torch.split(x, self.chunk)]) for _ in range(k)])


def systems() -> dict[str, System]:
    return {
        "pyro-autonormal": PyroAutoNormal(name="pyro-autonormal", pair=Pair.GAUSS,
                                          library="Pyro PyroModule + AutoNormal"),
        "pyro-hiddenlayer": PyroHiddenLayer(name="pyro-hiddenlayer", pair=Pair.LOCAL,
                                            library="Pyro contrib.bnn.HiddenLayer", step_divisor=10),
    }
