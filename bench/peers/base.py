"""What every system in the side-by-side bench provides, and the shared pieces.

A *system* is one implementation of the MNIST MLP 784-H-H-10 trained with Adam on minibatches
of 128: ours in a given configuration, a peer library, or the deterministic ``nn.Linear``
floor. Its adapter builds the network and exposes one optimisation step, a prediction with the
posterior mean and one with k sampled networks, written the way each library documents it.

Like-for-like groups (``pair``): systems in the same group compute the same kind of objective
(prior, KL estimator, gradient estimator), so their speeds compare directly.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn as nn
from torch import Tensor

#: MNIST training set of the paper (50,000 images, 10,000 held out) at batch 128
N_TRAIN = 50_000
BATCH = 128
NUM_BATCHES = math.ceil(N_TRAIN / BATCH)
IN_FEATURES = 784
NUM_CLASSES = 10


class Pair(str, Enum):
    """Like-for-like groups."""

    FLOOR = "floor"  # deterministic MLP
    PAPER = "paper"  # scale-mixture prior, Monte Carlo KL, weight reparameterisation
    GAUSS = "gauss"  # Gaussian prior, closed-form KL, weight reparameterisation
    FLIPOUT = "flipout"  # Gaussian prior, closed-form KL, Flipout
    LOCAL = "local"  # Gaussian prior, closed-form KL, local reparameterisation


PAIR_TEXT = {
    Pair.FLOOR: "deterministic nn.Linear MLP, cross-entropy",
    Pair.PAPER: "scale-mixture prior, Monte Carlo KL, weight reparameterisation (the paper)",
    Pair.GAUSS: "Gaussian prior, closed-form KL, weight reparameterisation",
    Pair.FLIPOUT: "Gaussian prior, closed-form KL, Flipout",
    Pair.LOCAL: "Gaussian prior, closed-form KL, local reparameterisation",
}


class NotInstalled(Exception):
    """The peer library (or the part of it we need) cannot be imported."""


def require(module: str, dist: str | None = None) -> tuple[object, str]:
    """Import ``module`` (a submodule, so a package ``__init__`` that pulls in torchvision is
    avoided where possible) and return it with the distribution's version."""
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means "not installed" here
        raise NotInstalled(f"{module}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    version = "?"
    if dist is not None:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return mod, version


@dataclass
class System:
    """One row of the bench: an adapter, once built for a width."""

    name: str
    pair: Pair
    library: str
    #: timed steps are divided by this (Pyro's HiddenLayer forms (B, in, out) tensors)
    step_divisor: int = 1

    version: str = ""
    model: nn.Module | None = None

    def build(self, width: int, device: torch.device) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def step(self, x: Tensor, y: Tensor, batch_index: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @torch.no_grad()
    def predict_mean(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        """(B, 10) logits of the network with the posterior-mean weights."""
        raise NotImplementedError

    @torch.no_grad()
    def predict_samples(self, x: Tensor, k: int) -> Tensor:  # pragma: no cover - abstract
        """(k, B, 10) logits of k sampled networks, the library's documented way."""
        raise NotImplementedError

    @torch.no_grad()
    def predict_probs_dataset(self, x: Tensor, k: int, chunk: int) -> Tensor:
        """(N, 10) k-sample predictive probabilities of a data set evaluated in chunks.

        The default calls :meth:`predict_samples` chunk by chunk (k networks per chunk, as the
        peers document it); a library with a data-set-level API overrides it.
        """
        return torch.cat([torch.softmax(self.predict_samples(xc, k).float(), -1).mean(0)
                          for xc in torch.split(x, chunk)])


def mlp_logits(x: Tensor, weights: list[tuple[Tensor, Tensor | None]]) -> Tensor:
    """ReLU MLP with the given (weight (out, in), bias) per layer: the mean network of a peer."""
    for i, (w, b) in enumerate(weights):
        x = torch.nn.functional.linear(x, w, b)
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x
