"""Bayesian layers: thin stateful shells over :mod:`bbb.functional`.

Each weight has a diagonal Gaussian posterior with parameters ``*_mu`` and ``*_rho``
(sigma = softplus(rho)); these are the only entries of ``state_dict`` (plus a pruning mask once
:func:`bbb.prune.prune` has set one). Nothing is written onto a module during ``forward``.

Sampling mode: in ``train()`` mode a layer samples, in ``eval()`` mode it uses the posterior mean.
:func:`sampling` switches explicitly (e.g. Monte Carlo prediction in eval mode).

Monte Carlo samples: :func:`forward_samples` (used by the ELBO and ``predict``) runs any network
with k weight samples folded into the batch dimension. An input with an explicit leading sample
dimension, ``(k, B, in)`` for a stack of linear layers inside :func:`leading_samples` (or a
:class:`BayesMLP`) and ``(k, B, C, H, W)`` for convolutions, is evaluated by ``k`` independently
sampled networks in one batched call (:func:`bbb.functional.expand_samples` builds it without a
copy).

Common random numbers: while a :class:`SampleRecorder` is active (the ELBO opens one), each layer
hands the noise and weights it drew to the recorder, so the Monte Carlo KL uses exactly the
weights of the forward pass. The recorder is an object owned by the caller, not module state.

The package: :mod:`bbb.nn.samples` (sampling mode, recorder, providers, shared and folded
samples), :mod:`bbb.nn.inputs` (a model's inputs and outputs: which tensors hold the batch),
:mod:`bbb.nn.base` (:class:`BayesModule`, the :class:`~bbb.nn.base.Estimator` enum,
defaults), :mod:`bbb.nn.layers` (linear), :mod:`bbb.nn.conv` (convolutions),
:mod:`bbb.nn.recurrent` (RNN, LSTM, GRU), :mod:`bbb.nn.attention` (multi-head attention),
:mod:`bbb.nn.embedding`, :mod:`bbb.nn.hf_conv1d` (transformers' ``Conv1D``), :mod:`bbb.nn.tied`
(tied weights), :mod:`bbb.nn.model` (:class:`BayesMLP` and model-level helpers),
:mod:`bbb.nn.population` (many independent networks batched on a member dimension) and
:mod:`bbb.nn.ensemble` (an ensemble of Bayesian MLPs as one population); every public
name is importable from ``bbb.nn`` except the Enums (``Estimator``, ``SamplingMode``), which have
one address, the module that defines them.
"""

from __future__ import annotations

from . import conv
from .attention import BayesMultiheadAttention, no_fast_path
from .base import (
    DEFAULT_PI,
    DEFAULT_RHO_INIT,
    DEFAULT_SIGMA1,
    DEFAULT_SIGMA2,
    BayesModule,
    RelativeSigma,
    default_prior,
)
from .conv import *  # noqa: F403 - the names of conv.__all__, which __all__ takes in (below)
from .embedding import BayesEmbedding, BayesEmbeddingBag
from .ensemble import BayesEnsemble, MemberNoise, pool_members
from .hf_conv1d import BayesHFConv1D
from .inputs import call_model, select_output, split_targets
from .layers import BayesLinear, PerSample
from .model import BayesMLP, bayes_modules, mark_deterministic, model_kl, sampling, warn_not_bayesian, whole_weights
from .population import (
    BayesPopulation,
    OneHot,
    PopulationBayesLinear,
    PopulationLinear,
    one_hot_is_dense,
    population_linear,
)
from .recurrent import BayesGRU, BayesLSTM, BayesRNN
from .samples import (
    SampleProvider,
    SampleRecorder,
    folded_samples,
    forward_samples,
    leading_samples,
    model_batch_dim,
    providing_samples,
    shared_samples,
)
from .tied import TiedBayesLinear


def layer_types() -> tuple[type[BayesModule], ...]:
    """The Bayesian layer types that convert a ``torch.nn`` layer (their ``converts``), in the
    order :func:`bbb.bayesianize` registers them."""
    return (BayesLinear, conv.BayesConv1d, conv.BayesConv2d, conv.BayesConv3d, conv.BayesConvTranspose1d,
            conv.BayesConvTranspose2d, conv.BayesConvTranspose3d, BayesEmbedding, BayesEmbeddingBag, BayesRNN,
            BayesLSTM, BayesGRU, BayesMultiheadAttention)


__all__ = [
    "BayesModule",
    "BayesLinear",
    "BayesEmbedding",
    "BayesEmbeddingBag",
    "BayesHFConv1D",
    "TiedBayesLinear",
    "BayesMultiheadAttention",
    "no_fast_path",
    "BayesMLP",
    "BayesRNN",
    "BayesLSTM",
    "BayesGRU",
    "PerSample",
    "SampleRecorder",
    "SampleProvider",
    "providing_samples",
    "sampling",
    "shared_samples",
    "whole_weights",
    "folded_samples",
    "forward_samples",
    "call_model",
    "select_output",
    "split_targets",
    "leading_samples",
    "model_batch_dim",
    "bayes_modules",
    "model_kl",
    "warn_not_bayesian",
    "mark_deterministic",
    "DEFAULT_RHO_INIT",
    "DEFAULT_PI",
    "DEFAULT_SIGMA1",
    "DEFAULT_SIGMA2",
    "default_prior",
    "RelativeSigma",
    "layer_types",
    "BayesPopulation",
    "PopulationBayesLinear",
    "PopulationLinear",
    "OneHot",
    "population_linear",
    "one_hot_is_dense",
    "BayesEnsemble",
    "MemberNoise",
    "pool_members",
]
__all__ += conv.__all__  # the convolutions, one of each torch.nn convolution
