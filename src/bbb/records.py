"""Conversion records: what :func:`bbb.bayesianize` made of a model, as written beside saved
weights (``bbb_conversion.json``), shared by :mod:`bbb.hf` (whole models) and :mod:`bbb.lora` (adapters)."""

from __future__ import annotations

import json
from typing import Any

from .distributions import prior_from_config
from .errors import UserError
from .nn import BayesModule

__all__ = ["CONVERSION_FILE", "layer_spec"]

#: the conversion record written beside the weights
CONVERSION_FILE = "bbb_conversion.json"


def layer_spec(m: BayesModule) -> dict[str, Any]:
    """One Bayesian layer's entry in a conversion record: type, estimator, prior config (None when it
    cannot be written) and rho_init."""
    prior: Any = m.prior.to_config()
    try:
        json.dumps(prior)
        prior_from_config(prior)
    except (TypeError, ValueError, UserError):
        prior = None
    return {"type": type(m).__name__, "estimator": m.estimator.value, "prior": prior, "rho_init": m.rho_init}
