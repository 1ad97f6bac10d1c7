"""The network and the data of a run: :func:`build_model` for a :class:`TrainConfig`, the
method of a loaded model, the dataset split, and what ``config.json`` records about them."""

from __future__ import annotations

import platform

import torch
import torch.nn as nn
from torch import Tensor

from ..errors import UserError
from ..nn import BayesMLP, bayes_modules
from ..options import Method
from .config import TrainConfig

__all__ = ["DATA_KEYS", "build_model", "check_data", "infer_method", "load_data", "num_weights",
           "versions"]


def build_model(cfg: TrainConfig, in_features: int = 784, num_classes: int = 10) -> nn.Module:
    """The network of ``cfg.method``: BayesMLP (bbb), a ReLU MLP (sgd) or one with dropout."""
    if cfg.method == Method.BBB.value:
        return BayesMLP(in_features, cfg.hidden, num_classes, prior=cfg.make_prior(),
                        estimator=cfg.estimator, rho_init=cfg.rho_init,
                        mu_init_scale=cfg.mu_init_scale)
    sizes = [in_features, *cfg.hidden, num_classes]
    dropout = cfg.method == Method.DROPOUT.value
    layers: list[nn.Module] = []
    if dropout and cfg.dropout_input > 0:
        layers.append(nn.Dropout(cfg.dropout_input))
    for j, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if j < len(sizes) - 2:
            layers.append(nn.ReLU())
            if dropout and cfg.dropout_hidden > 0:
                layers.append(nn.Dropout(cfg.dropout_hidden))
    return nn.Sequential(*layers)


def infer_method(model: nn.Module) -> str:
    if any(True for _ in bayes_modules(model)):
        return Method.BBB.value
    if any(isinstance(m, nn.Dropout) for m in model.modules()):
        return Method.DROPOUT.value
    return Method.SGD.value


def load_data(cfg: TrainConfig) -> dict[str, Tensor]:
    """The train/validation/test split of ``cfg.dataset`` (flat pixels / ``cfg.scale``)."""
    from ..data import mnist_splits

    return mnist_splits(cfg.dataset, data_dir=cfg.data_dir, scale=cfg.scale,
                        val_size=cfg.val_size, seed=cfg.split_seed)


DATA_KEYS = ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y")


def check_data(data: dict[str, Tensor]) -> None:
    missing = [k for k in DATA_KEYS if k not in data]
    if missing:
        raise UserError(f"data is missing {', '.join(missing)}")
    if data["train_x"].shape[0] == 0:
        raise UserError("the training set is empty")
    for s in ("train", "val", "test"):
        if data[f"{s}_x"].shape[0] != data[f"{s}_y"].shape[0]:
            raise UserError(f"{s}_x and {s}_y have different lengths")


def versions() -> dict[str, str]:
    import numpy

    from .. import __version__

    return {"bbb": __version__, "torch": str(torch.__version__), "python": platform.python_version(),
            "numpy": numpy.__version__}


def num_weights(model: nn.Module) -> int:
    if infer_method(model) == Method.BBB.value:
        mus = (getattr(m, f"{name}_mu", None) for m in bayes_modules(model) for name in ("weight", "bias"))
        return sum(mu.numel() for mu in mus if mu is not None)
    return sum(p.numel() for p in model.parameters())
