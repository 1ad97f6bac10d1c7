"""Tied weights that stay tied: :class:`TiedBayesLinear` and :func:`tie_converted`.

A model that uses one weight tensor in two places (GPT-2's ``lm_head.weight`` *is*
``transformer.wte.weight``; transformers' ``tie_weights``, ``_tied_weights_keys``) has one matrix,
so its Bayesian copy has one posterior: the first layer that holds it (the *source*, e.g. the
embedding) keeps ``weight_mu``/``weight_rho``, and each linear layer that used the same tensor
becomes a :class:`TiedBayesLinear` that reads the source's posterior. Consequences:

- one posterior: the ``state_dict`` holds the source's ``weight_mu``/``weight_rho`` only; the KL
  (plain, Monte Carlo and the Engine's) counts the tied weight once; a deterministic ``state_dict``
  with both keys (``lm_head.weight`` and ``transformer.wte.weight``) loads, and a tied key that
  differs from its source is an error;
- one weight sample per forward shared by both uses: the model's forward draws each tied weight
  once (:func:`bbb.nn.shared_samples` is opened around it by a forward hook that
  :func:`tie_converted` registers; the Engine supplies one sample per step anyway). The ``local``
  estimator draws per example by construction: each use gets its own noise, the posterior is one.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import functional as BF
from ..distributions import CenteredPrior, KLMode
from ..errors import UserError
from .base import BayesModule, Estimator, positions
from .layers import BayesLinear
from .samples import SHARED, SampleRecorder

__all__ = ["TiedBayesLinear", "tie_groups", "tie_converted", "draw_once_per_forward"]


class TiedBayesLinear(BayesModule):
    """A linear layer whose weight is another Bayesian layer's posterior (a tied weight).

    ``source`` (a :class:`BayesModule` whose ``weight_mu`` is ``(out, in)``: an embedding table
    ``(V, D)`` read as an output projection ``D -> V``, or another linear layer) owns the weight;
    this layer owns only its bias posterior, if any. Built by :func:`bbb.bayesianize` for every
    tie it finds (see :mod:`bbb.nn.tied`); ``tied_to`` names the source.

    >>> head = TiedBayesLinear(emb, bias=False, tied_to="wte")   # emb: a BayesEmbedding(V, D)
    >>> head(torch.zeros(2, emb.embedding_dim)).shape             # (2, V)
    """

    _param_names = ("bias",)

    def __init__(self, source: BayesModule, bias: bool = False, tied_to: str = "", own_name: str = "",
                 **kwargs: Any) -> None:
        kw = {"prior": source.prior, "estimator": source.estimator, "mu_init_scale": None,
              "rho_init": source.rho_init, **kwargs}
        super().__init__(kw["prior"], kw["estimator"], kw["mu_init_scale"], kw["rho_init"])
        mu = source.mu("weight")
        if mu.dim() != 2:
            raise ValueError(f"a tied linear layer needs a 2-d source weight, got shape {tuple(mu.shape)}")
        object.__setattr__(self, "source", source)  # a reference, not a child: its posterior counts once
        source.weight_tied = True  # (this layer reads every row of it: an embedding's padding row counts in the KL)
        self.out_features, self.in_features = mu.shape
        self.tied_to, self.own_name = tied_to, own_name
        self._register_posterior("bias", (self.out_features,) if bias else None,
                                 {"device": mu.device, "dtype": mu.dtype})
        self.reset_parameters()

    source: BayesModule

    def _fan_in(self) -> int:
        return self.in_features

    @property
    def weight(self) -> Tensor:
        """The source's posterior mean (masked once pruned): the tied matrix."""
        return self.source.weight

    def __setattr__(self, name: str, value: Any) -> None:
        # transformers' tie_weights() sets the output weight to the input embedding's: already so
        if name == "weight":
            if isinstance(value, Tensor) and value is self.source.mu("weight"):
                return
            raise UserError(f"{type(self).__name__}: the weight is tied to {self.tied_to!r} (its posterior); set "
                            "that layer's weight_mu instead")
        super().__setattr__(name, value)

    _input_samples = BayesLinear._input_samples

    def _forward(self, x: Tensor, k: int | None) -> Tensor:
        src, has_bias = self.source, self.bias_mu is not None
        if not self.is_sampling():
            return BF.linear(x, self.weight, self.bias)
        if self.estimator is Estimator.REPARAM:
            w = src._masked("weight", src._draw("weight", k)[2])
            b = self._masked("bias", self._draw("bias", k)[2]) if has_bias else None
            return BF.linear(x, w, b)
        self._warn_positions(positions(x, k))
        if self.estimator is Estimator.LOCAL:
            b_sigma = self._masked_sigma("bias") if has_bias else None
            return BF.linear_local(x, self.weight, src._masked_sigma("weight"), self.bias, b_sigma,
                                   generator=self._generator())
        dw = src._flipout_delta("weight", k)
        db = self._flipout_delta("bias", k) if has_bias else None
        return BF.linear_flipout(x, self.weight, dw, self.bias, db, generator=self._generator())

    def kl(self, mode: KLMode | str = KLMode.AUTO, recorder: SampleRecorder | None = None,
           num_samples: int | None = None) -> Tensor:
        """The KL of this layer's own bias (0 without one): the tied weight is the source's."""
        if not self.param_names():
            return self.source.mu("weight").new_zeros(())
        return super().kl(mode, recorder, num_samples)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # a deterministic checkpoint holds the tied tensor under both names: this one must equal the source's
        key = f"{prefix}weight"
        if key in state_dict:
            given = state_dict.pop(key)
            root = prefix[: len(prefix) - len(self.own_name) - 1] if prefix.endswith(f"{self.own_name}.") else None
            ref = None
            if root is not None:
                ref = state_dict.get(f"{root}{self.tied_to}.weight", state_dict.get(f"{root}{self.tied_to}.weight_mu"))
            if ref is None:
                ref = self.source.mu("weight")
            if tuple(given.shape) != tuple(ref.shape) or not torch.equal(given.to(ref), ref.detach()):
                error_msgs.append(f"{key} differs from {self.tied_to}.weight, to which bayesianize tied it (one "
                                  "posterior); tie them in the checkpoint, or bayesianize the untied model")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias_mu is not None}, tied_to={self.tied_to!r}")


def tie_groups(model: nn.Module) -> list[list[tuple[str, str]]]:
    """Every parameter that two or more modules hold (a tie): its (module name, parameter name)
    pairs, in ``named_modules`` order (a module used in several places counts once)."""
    seen: dict[int, list[tuple[str, str]]] = {}
    for mname, mod in model.named_modules():
        for pname, p in mod._parameters.items():
            if p is not None:
                seen.setdefault(id(p), []).append((mname, pname))
    return [g for g in seen.values() if len(g) > 1]


class _TieScope:
    """Forward hooks that draw each tied weight once per forward of the model (opening
    :func:`~bbb.nn.shared_samples` unless one is open already). The hooks hold no tensor."""

    def __init__(self) -> None:
        self.opened: list[bool] = []

    def enter(self, module: nn.Module, args: Any) -> None:
        outer = SHARED.get() is not None
        if not outer:
            SHARED.set({})
        self.opened.append(not outer)

    def exit(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.opened and self.opened.pop():
            SHARED.set(None)

    def __getstate__(self) -> dict[str, Any]:
        return {"opened": []}


def _replace(model: nn.Module, old: nn.Module, new: nn.Module) -> None:
    for mod in list(model.modules()):
        for cname, child in list(mod._modules.items()):
            if child is old:
                setattr(mod, cname, new)


def tie_converted(model: nn.Module, groups: list[list[tuple[str, str]]]) -> list[str]:
    """Re-tie, after conversion, the ``groups`` that :func:`tie_groups` found before it: in each
    group whose modules all became Bayesian and share ``weight`` of one shape, the first layer that
    is not a plain linear one (else the first) keeps the posterior and the linear layers become
    :class:`TiedBayesLinear`. Returns one description per tie left untied (for the warning)."""
    untied, tied = [], False
    for group in groups:
        mods = [(n, p, model.get_submodule(n)) for n, p in group]
        if all(isinstance(m, BayesModule) for _, _, m in mods) and all(p == "weight" for _, p, _ in mods):
            src_i = next((i for i, (_, _, m) in enumerate(mods) if type(m) is not BayesLinear), 0)
            sname, _, source = mods[src_i]
            assert isinstance(source, BayesModule)
            shape = tuple(source.mu("weight").shape) if "weight" in source.param_names() else None
            rest = [(n, m) for i, (n, _, m) in enumerate(mods) if i != src_i]
            if shape is not None and all(type(m) is BayesLinear and tuple(m.mu("weight").shape) == shape
                                         for _, m in rest):
                for n, m in rest:
                    assert isinstance(m, BayesLinear)
                    new = TiedBayesLinear(source, bias=m.bias_mu is not None, tied_to=sname, own_name=n,
                                          prior=m.prior, estimator=m.estimator, rho_init=m.rho_init)
                    new.train(m.training)
                    new.sigma_init, new.from_weights = m.sigma_init, m.from_weights
                    if m.bias_mu is not None:
                        with torch.no_grad():
                            new.mu("bias").copy_(m.mu("bias"))
                            new.rho("bias").copy_(m.rho("bias"))
                        if isinstance(new.prior, CenteredPrior):  # on the trained bias, as the layer it replaces
                            new.center_prior()
                    _replace(model, m, new)
                tied = True
                continue
        names = ", ".join(f"{n}.{p}" if n else p for n, p in group)
        kept = [f"{n}.{p}" if n else p for n, p, m in mods if not isinstance(m, BayesModule)]
        why = (f"{', '.join(kept)} kept the deterministic tensor" if kept else
               "only linear layers reading another Bayesian layer's weight stay tied")
        untied.append(f"{names} were one tensor and now are not ({why}): to keep one tensor, skip every module "
                      "of the tie; a holder that its forward does not use (transformers' resize bookkeeping) "
                      "can be left")
    if tied:
        draw_once_per_forward(model)
    return untied


def draw_once_per_forward(model: nn.Module) -> None:
    """Make each forward of ``model`` draw every Bayesian weight once (a weight or a layer used in
    several places: one network sample for all its uses), by forward hooks that open
    :func:`~bbb.nn.shared_samples` around it (once per model), and around each of its submodules
    that holds a layer twice or a tied layer with its source (called on its own, ``model[0](x)``,
    it draws one sample for its uses too)."""
    for m in [model, *(sub for sub in model.modules() if sub is not model and _shares(sub))]:
        if not any(isinstance(getattr(h, "__self__", None), _TieScope) for h in m._forward_pre_hooks.values()):
            scope = _TieScope()
            m.register_forward_pre_hook(scope.enter)
            m.register_forward_hook(scope.exit, always_call=True)


def _shares(module: nn.Module) -> bool:
    """Whether ``module`` holds a Bayesian layer in two places, or a tied layer and its source."""
    held = [m for _, m in module.named_modules(remove_duplicate=False) if isinstance(m, BayesModule)]
    ids = {id(m) for m in held}
    return len(ids) != len(held) or any(isinstance(m, TiedBayesLinear) and id(m.source) in ids for m in held)
