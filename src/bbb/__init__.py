"""bbb: Bayes by Backprop (Blundell, Cornebise, Kavukcuoglu, Wierstra, ICML 2015).

>>> import bbb
>>> net = bbb.nn.BayesMLP(784, [400, 400], 10, prior=bbb.ScaleMixturePrior(0.25, 1.0, 0.0009))
>>> elbo = bbb.ELBO(net, "categorical", num_batches=391, kl_weighting="blundell")
>>> model = bbb.load_model("runs/bbb400")     # a trained run, with its preprocessing: raw inputs in

Every subpackage is reachable after ``import bbb`` (``bbb.runs``, ``bbb.data``, ``bbb.elbo``...),
imported on first use.
"""

from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
import typing as _typing

if _typing.TYPE_CHECKING:  # the names below, imported on first use (``import bbb`` stays cheap)
    from . import convert, distributions, engine, functional, hf, ivon, lora, nn, prune, random, uncertainty
    from .convert import bayesianize, register_conversion
    from .distributions import (
        CenteredPrior,
        DiagonalNormal,
        GaussianPrior,
        KLMode,
        MemberPrior,
        Prior,
        ScaleMixturePrior,
        TorchPrior,
        kl_divergence,
        register_kl,
    )
    from .elbo import (
        ELBO,
        Categorical,
        ELBOOutput,
        Gaussian,
        HeteroscedasticGaussian,
        KLWeighting,
        kl_weights,
    )
    from .engine import Engine, counter_noise
    from .errors import DataError, UserError
    from .functional import expand_samples
    from .hf import from_pretrained, save_pretrained
    from .inventory import deterministic_layers, layer_summary
    from .ivon import IVON
    from .nn import (
        BayesConv1d,
        BayesConv2d,
        BayesLinear,
        BayesMLP,
        SampleRecorder,
        forward_samples,
        model_kl,
        sampling,
        shared_samples,
    )
    from .nn.base import Estimator, RelativeSigma
    # load_model: bbb.runs.trained.load_model, above the core layer, so never imported from here

#: public name -> the submodule that defines it (None: the name is a submodule)
_EXPORTS = {
    **dict.fromkeys(["convert", "distributions", "engine", "functional", "hf", "ivon", "nn", "prune", "random",
                     "uncertainty"]),
    "lora": None,
    **dict.fromkeys(["bayesianize", "register_conversion"], "convert"),
    **dict.fromkeys(["deterministic_layers", "layer_summary"], "inventory"),
    **dict.fromkeys(["CenteredPrior", "DiagonalNormal", "GaussianPrior", "KLMode", "MemberPrior", "Prior",
                     "ScaleMixturePrior", "TorchPrior", "kl_divergence", "register_kl"], "distributions"),
    **dict.fromkeys(["ELBO", "Categorical", "ELBOOutput", "Gaussian", "HeteroscedasticGaussian",
                     "KLWeighting", "kl_weights"], "elbo"),
    **dict.fromkeys(["Engine", "counter_noise"], "engine"),
    "IVON": "ivon",
    **dict.fromkeys(["DataError", "UserError"], "errors"),
    "expand_samples": "functional",
    **dict.fromkeys(["from_pretrained", "save_pretrained"], "hf"),
    "Estimator": "nn.base",
    "RelativeSigma": "nn.base",
    **dict.fromkeys(["BayesConv1d", "BayesConv2d", "BayesLinear", "BayesMLP",
                     "SampleRecorder", "forward_samples", "model_kl", "sampling", "shared_samples"],
                    "nn"),
    # the one name from the runs layer (imported on first use, as the rest): the loaded run to predict with
    "load_model": "runs.trained",
    "load_ensemble": "runs.ensemble",
}

#: names a user may reach for that are not here -> what to use instead
_INSTEAD = {
    "load_run": "a trained run with its preprocessing (raw inputs in) is bbb.load_model(RUN); "
                "bbb.runs.load_run(RUN) gives the bare network and its config",
    "predict": "k sampled outputs of a network are bbb.uncertainty.predict(model, x, num_samples)",
    "evaluate": "a network's test metrics are bbb.uncertainty.evaluate(model, data, num_samples)",
}


def __getattr__(name: str):
    """Import the public names on first use: ``import bbb`` (and so the ``bbb`` command, which
    sets its process environment before torch loads) does not import torch by itself."""
    if name not in _EXPORTS:
        if not name.startswith("_") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
            module = _importlib.import_module(f".{name}", __name__)  # a subpackage: bbb.runs, bbb.data...
            globals()[name] = module
            return module
        hint = f": {_INSTEAD[name]}" if name in _INSTEAD else ""
        raise AttributeError(f"module 'bbb' has no attribute {name!r}{hint}")
    where = _EXPORTS[name]
    value = (_importlib.import_module(f".{name}", __name__) if where is None
             else getattr(_importlib.import_module(f".{where}", __name__), name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    import pkgutil

    subpackages = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(set(globals()) | set(_EXPORTS) | subpackages)


__version__ = "0.1.0"

__all__ = [
    "BayesConv1d",
    "BayesConv2d",
    "BayesLinear",
    "BayesMLP",
    "Categorical",
    "CenteredPrior",
    "DataError",
    "DiagonalNormal",
    "ELBO",
    "ELBOOutput",
    "Engine",
    "Estimator",
    "Gaussian",
    "GaussianPrior",
    "HeteroscedasticGaussian",
    "IVON",
    "KLMode",
    "KLWeighting",
    "MemberPrior",
    "Prior",
    "RelativeSigma",
    "SampleRecorder",
    "ScaleMixturePrior",
    "TorchPrior",
    "UserError",
    "bayesianize",
    "convert",
    "counter_noise",
    "deterministic_layers",
    "layer_summary",
    "lora",
    "register_conversion",
    "distributions",
    "engine",
    "expand_samples",
    "forward_samples",
    "from_pretrained",
    "functional",
    "hf",
    "ivon",
    "kl_divergence",
    "kl_weights",
    "load_ensemble",
    "load_model",
    "model_kl",
    "nn",
    "prune",
    "random",
    "register_kl",
    "sampling",
    "save_pretrained",
    "shared_samples",
    "uncertainty",
]
