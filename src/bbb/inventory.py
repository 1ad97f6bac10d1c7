"""What is Bayesian in a model: :func:`layer_summary`, the table of every module with parameters of
its own (Bayesian or not, its weights, its estimator, frozen or trained), and
:func:`deterministic_layers`, the modules left as point estimates (what
:func:`bbb.bayesianize` says it left)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from .nn import BayesModule

__all__ = ["LayerSummary", "deterministic_layers", "layer_summary"]


def deterministic_layers(model: nn.Module) -> list[tuple[str, str]]:
    """(qualified name, type name) of every module that has parameters of its own and is not a
    Bayesian layer: what :func:`bayesianize` left as point estimates (norm layers, skipped or
    unsupported layers, parameters held by the model itself)."""
    out = []
    for name, mod in model.named_modules():
        if isinstance(mod, BayesModule):
            continue
        if any(True for _ in mod.parameters(recurse=False)):
            out.append((name, type(mod).__name__))
    return out


@dataclass(frozen=True)
class LayerSummary:
    """Every module with parameters of its own: ``rows`` of (name, type, Bayesian, weights,
    estimator or ""); ``frozen``: the names of the rows whose parameters are all frozen
    (``requires_grad=False``: a peft model's base; a Bayesian module's too, its posterior then kept
    as it is); ``str()`` is a table."""

    rows: tuple[tuple[str, str, bool, int, str], ...]
    frozen: frozenset[str] = frozenset()

    @property
    def frozen_weights(self) -> int:
        """The weights of the modules that are frozen (not trained: not missed; a frozen Bayesian
        module's posterior, kept as it is, counted once)."""
        return sum(r[3] for r in self.rows if r[0] in self.frozen)

    @property
    def bayesian_weights(self) -> int:
        return sum(r[3] for r in self.rows if r[2])

    @property
    def total_weights(self) -> int:
        return sum(r[3] for r in self.rows)

    @property
    def bayesian_share(self) -> float:
        """The share of the model's weights with a posterior (a Bayesian weight counts once, not
        once for mu and once for rho)."""
        return self.bayesian_weights / max(self.total_weights, 1)

    def __str__(self) -> str:
        head = ("module", "type", "bayesian", "weights", "estimator")
        body = [(n or "(model)", t, ("yes" if b else "no") + (" (frozen)" if n in self.frozen else ""), f"{w:,}", e)
                for n, t, b, w, e in self.rows]
        widths = [max(len(r[i]) for r in (head, *body)) for i in range(5)]
        line = lambda r: "  ".join(c.rjust(w) if i == 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
        total = (f"{self.bayesian_weights:,} of {self.total_weights:,} weights Bayesian "
                 f"({100 * self.bayesian_share:.1f}%)"
                 + (f"; {self.frozen_weights:,} frozen" if self.frozen else ""))
        return "\n".join([line(head), *(line(r) for r in body), total])


def layer_summary(model: nn.Module) -> LayerSummary:
    """The table of what :func:`bayesianize` made of ``model``: every module with parameters of
    its own, Bayesian or not, its weights (a Bayesian weight counted once) and its estimator."""
    rows, frozen = [], set()
    for name, mod in model.named_modules():
        if isinstance(mod, BayesModule):
            n = sum(getattr(mod, f"{p}_mu").numel() for p in mod.param_names())
            rows.append((name, type(mod).__name__, True, n, mod.estimator.value))
            if not any(p.requires_grad for p in mod.parameters(recurse=False)):
                frozen.add(name)  # (a posterior kept as it is: an adapter loaded to be used, not trained)
            continue
        own = list(mod.parameters(recurse=False))
        n = sum(p.numel() for p in own)
        if n:
            rows.append((name, type(mod).__name__, False, n, ""))
            if not any(p.requires_grad for p in own):
                frozen.add(name)
    return LayerSummary(tuple(rows), frozenset(frozen))
