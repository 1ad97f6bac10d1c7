"""The network and the data of a run: :func:`build_model` for a :class:`TrainConfig`, the
method of a loaded model, the dataset split, and what ``config.json`` records about them."""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..data.arrays import data_kind, moved_data_flag
from ..data.files import Preprocess
from ..errors import UserError
from ..nn import BayesMLP, bayes_modules
from ..options import Method, is_bayesian
from .config import IN_MEMORY, TrainConfig

__all__ = ["DATA_KEYS", "ConstantNoise", "build_model", "check_data", "data_source_of", "infer_method", "load_data",
           "load_split",
           "grouped_parameters", "noise_group", "noise_sd",
           "num_weights", "point_data", "versions"]


class ConstantNoise(nn.Module):
    """The noise output of a homoscedastic regression network: one learned value for every input,
    appended to the network's one output, (..., 1) -> (..., 2) = (mean, noise), which
    :class:`bbb.HeteroscedasticGaussian` reads as it reads a network that predicts its noise."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = nn.Parameter(torch.zeros(()))  # noise sd softplus(0) = 0.69 target sd at the start

    def forward(self, out: Tensor) -> Tensor:
        return torch.cat([out, self.raw.to(out.dtype).expand_as(out)], -1)


def noise_sd(model: nn.Module, preprocess: Preprocess | None) -> float | None:
    """The noise sd a homoscedastic regression network learned (its :class:`ConstantNoise`), in the
    target's units (the Gaussian's sd, as :class:`bbb.HeteroscedasticGaussian` forms it); None for a
    network that predicts it per input."""
    from ..elbo import HeteroscedasticGaussian

    noise = [m for m in model.modules() if isinstance(m, ConstantNoise)]
    if not noise:
        return None
    with torch.no_grad():
        raw = noise[0].raw.detach().double().cpu()
        _, sigma = HeteroscedasticGaussian().split(torch.stack([torch.zeros_like(raw), raw]))
    scale = 1.0 if preprocess is None or preprocess.y is None else float(preprocess.y.std)
    return float(sigma) * scale


def noise_group(model: nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """The optimiser group of a homoscedastic network's noise parameter at ``lr * noise_lr_scale``
    (:data:`bbb.runs.config.NOISE_LR_SCALE`); none at a scale of 1 (one group, as runs stored
    before the scale were trained: their optimiser states load) or without a :class:`ConstantNoise`."""
    noise = [m.raw for m in model.modules() if isinstance(m, ConstantNoise)]
    scale = cfg.noise_lr_scale
    return [{"params": noise, "lr": cfg.lr * scale}] if noise and scale is not None and scale != 1.0 else []


def grouped_parameters(model: nn.Module, own: list[dict[str, Any]]) -> list[Any]:
    """``model``'s parameters as one list, or as groups where ``own`` gives some their own options."""
    if not own:
        return list(model.parameters())
    ids = {id(p) for g in own for p in g["params"]}
    return [{"params": [p for p in model.parameters() if id(p) not in ids]}, *own]


def build_model(cfg: TrainConfig, in_features: int = 784, num_classes: int = 10,
                task: str = "classification") -> nn.Module:
    """The network of ``cfg.method``: BayesMLP (bbb, and ivon: the same network, its posterior
    trained by :class:`bbb.IVON`), a ReLU MLP (sgd) or one with dropout.

    ``task="regression"``: ``num_classes`` is 2 outputs, (mean, noise) of a Gaussian; with
    ``cfg.likelihood == "homoscedastic"`` the network has one output and a :class:`ConstantNoise`."""
    if task == "regression" and cfg.likelihood == "homoscedastic":
        return nn.Sequential(build_model(cfg, in_features, 1), ConstantNoise())
    if is_bayesian(cfg.method):
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
    """``bbb`` for a network with Bayesian layers (a run of ``bbb`` or ``ivon``: sampled alike),
    ``dropout`` for one with dropout layers, else ``sgd``."""
    if any(True for _ in bayes_modules(model)):
        return Method.BBB.value
    if any(isinstance(m, nn.Dropout) for m in model.modules()):
        return Method.DROPOUT.value
    return Method.SGD.value


def load_data(cfg: TrainConfig) -> dict[str, Tensor]:
    """The train/validation/test split of ``cfg.dataset`` (flat pixels / ``cfg.scale``; the first
    ``cfg.train_size`` training images of the seeded split), or of ``cfg.data_file``
    (:func:`load_split`)."""
    from ..data import mnist_splits

    _refuse_in_memory(cfg)
    if cfg.data_file is not None:
        return _file_split(cfg, None)[0]
    data = mnist_splits(cfg.dataset, data_dir=cfg.data_dir, scale=cfg.scale,
                        val_size=cfg.val_size, seed=cfg.split_seed)
    if cfg.train_size is not None:
        n = data["train_x"].shape[0]
        if cfg.train_size > n:
            raise UserError(f"--train-size must be in 1..{n} (the training images), got {cfg.train_size}")
        data["train_x"], data["train_y"] = data["train_x"][:cfg.train_size], data["train_y"][:cfg.train_size]
    return data


def load_split(cfg: TrainConfig, stored: dict[str, Any] | None = None, *, new_run: bool = False
               ) -> tuple[dict[str, Tensor], Preprocess]:
    """The split of ``cfg`` and its :class:`~bbb.data.files.Preprocess`: MNIST-like images
    (:func:`load_data`), or your own file (``cfg.data_file``:
    :func:`bbb.data.files.load_file_splits`). ``stored``: the preprocessing a run recorded; a
    file whose MD5 differs from it is a one-line error (the split would not be the run's), and so is
    a run trained on tensors given in memory (``data_source``: nothing on disk holds them).
    ``new_run``: the split of a run about to start, whose file missing is the file given not being
    there (not a trained run's file that moved)."""
    _refuse_in_memory(cfg)
    if cfg.data_file is not None:
        return _file_split(cfg, stored, new_run)
    return load_data(cfg), Preprocess.image(cfg.scale)


def _refuse_in_memory(cfg: TrainConfig) -> None:
    if cfg.data_source == IN_MEMORY:
        raise UserError(f"this run was trained on data given in memory (bbb.runs.train(..., data=...), or a sweep's "
                        f"synthetic data), not on {cfg.dataset}, and nothing on disk holds them: evaluate it from "
                        "Python with the same tensors (bbb.runs.evaluate_run(RUN, data=...), prune_run(..., data=...))")


def data_source_of(cfg: TrainConfig, data: dict[str, Tensor]) -> str | None:
    """The ``data_source`` of a run of ``cfg`` trained on the tensors ``data`` (given to
    :func:`bbb.runs.train`): None where they can be ``cfg.dataset``'s images (784 features that are
    whole pixel values 0..255 over ``cfg.scale``, labels 0..9, and where its files are here, test
    images that are its test set's with their labels: its split or a part of it), or a run on your
    own file (its MD5 is recorded); else :data:`~bbb.runs.config.IN_MEMORY`, which
    :func:`load_split` refuses (evaluating such a run on MNIST would give MNIST's numbers for a
    network trained on other data)."""
    if cfg.data_source is not None or cfg.data_file is not None:
        return cfg.data_source
    for split in ("train", "test"):
        x, y = data[f"{split}_x"][:256], data[f"{split}_y"][:256]
        if x.ndim != 2 or x.shape[1] != 784 or y.is_floating_point() or int(data.get("num_classes", 0)) > 10:
            return IN_MEMORY
        pixels = x.double() * cfg.scale
        whole = pixels.round()
        if x.numel() and not (bool((pixels - whole).abs().max() < 1e-3) and float(whole.min()) >= 0
                              and float(whole.max()) <= 255 and int(y.min()) >= 0 and int(y.max()) <= 9):
            return IN_MEMORY
    return IN_MEMORY if _test_rows_elsewhere(cfg, data) else None


def _test_rows_elsewhere(cfg: TrainConfig, data: dict[str, Tensor]) -> bool:
    """Whether images of ``data``'s test split (its first 256) are not in ``cfg.dataset``'s test set
    with their labels: pixels of other images (Fashion-MNIST's under ``dataset="mnist"``, your own
    digits), which evaluating the run on ``cfg.dataset`` would replace. False where that test set's
    files are not here to compare with (then the pixel check above decides alone)."""
    from ..data import MNIST_FILES, ensure_files

    try:
        paths = ensure_files(cfg.dataset, MNIST_FILES["test"], data_dir=cfg.data_dir, download=False)
        stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    except (UserError, OSError):
        return False
    known = _test_set_rows(cfg.dataset, cfg.data_dir, stamp)
    if known is None:
        return False
    x, y = data["test_x"][:256].detach().cpu(), data["test_y"][:256].cpu()  # (tensors on a GPU too)
    given = (x.double() * cfg.scale).round().to(torch.uint8).numpy()
    return any((row.tobytes(), label) not in known for row, label in zip(given, y.tolist(), strict=True))


@functools.lru_cache(maxsize=8)
def _test_set_rows(dataset: str, data_dir: str | None, stamp: tuple[tuple[str, int, int], ...]
                   ) -> frozenset[tuple[bytes, int]] | None:
    """The (pixels, label) rows of ``dataset``'s test set, read once per process for the files
    ``stamp`` names (their paths, modification times and sizes: a file replaced is read again);
    None where they do not load."""
    from ..data import load_mnist

    try:
        images, labels = load_mnist("test", dataset, data_dir, download=False)
    except (UserError, OSError):
        return None
    return frozenset(zip((row.tobytes() for row in images.flatten(1).numpy()), labels.tolist(), strict=True))


def point_data(cfg: TrainConfig, data_dir: str | None = None, data_file: str | None = None) -> TrainConfig:
    """``cfg`` reading its data elsewhere: ``data_file``, the moved file of a run on your own data
    (``--csv FILE`` / ``--npz FILE``; :func:`load_split` checks its MD5 against the run's), or
    ``data_dir``, the folder of an MNIST-like run's images (``--data-dir``). Each given to the
    other kind of run is a one-line error: never silently ignored (and so is a run on tensors given in
    memory: nothing on disk holds them)."""
    if data_file is not None or data_dir is not None:
        _refuse_in_memory(cfg)
    if data_file is not None:
        if cfg.data_file is None:
            raise UserError(f"--csv/--npz/--images give a run on your own data its moved file; this run was trained on "
                            f"--dataset {cfg.dataset} (its folder: --data-dir DIR)")
        was = data_kind(cfg.data_file)
        if data_kind(data_file) != was:
            raise UserError(f"{data_file} is not {'a folder of images' if was == 'folder' else f'a {was} file'} like "
                            f"{cfg.data_file}, the data this run was trained on; give {moved_data_flag(cfg.data_file)}")
        cfg = cfg.replace(data_file=str(data_file))
    if data_dir is not None:
        cfg = cfg.replace(data_dir=data_dir)  # a run on your own file refuses it (TrainConfig)
    return cfg


def _file_split(cfg: TrainConfig, stored: dict[str, Any] | None, new_run: bool = False
                ) -> tuple[dict[str, Tensor], Preprocess]:
    from ..data.files import load_file_splits

    assert cfg.data_file is not None
    path = Path(cfg.data_file)
    folder = path.is_dir() or (not path.exists() and data_kind(path) == "folder")  # (there, or as recorded)
    if new_run and not (path.is_file() or path.is_dir()):
        what = "is not a regular file" if path.exists() else "does not exist"
        raise UserError(f"{cfg.data_file} {what}; give the path of your data: --csv FILE, --npz FILE or --images DIR")
    if not (path.is_dir() if folder else path.is_file()):
        raise UserError(f"{cfg.data_file}, the {'folder' if folder else 'file'} this run was trained on, is not there "
                        f"(moved or deleted?); give its new place with {moved_data_flag(path)} (bbb "
                        "evaluate, prune, predict, ood, laplace and train --resume take it)")
    was = (stored or {}).get("source", {}).get("md5")
    if was is not None:  # before reading it: another file's columns or rows would only confuse
        _check_md5(cfg.data_file, was)
    # a run's recorded categories: its text columns encoded as it was trained (one written when the categories
    # were the whole file's keeps a category only its held-out rows have)
    categories = {c["name"]: list(c["categories"]) for c in (stored or {}).get("columns", [])
                  if c.get("kind") == "onehot"} or None
    # the task the run was trained for (its file read again by a later bbb, whose rules may ask for --task where
    # the run's inferred it: an .npz's float y of whole numbers)
    task = cfg.task or (stored or {}).get("task")
    data, pre = load_file_splits(cfg.data_file, target=cfg.target, task=task, val_fraction=cfg.val_fraction,
                                 test_fraction=cfg.test_fraction, seed=cfg.split_seed, train_size=cfg.train_size,
                                 ignore=cfg.ignore_columns or (), keep=cfg.keep_columns or (),
                                 categories=categories, image_size=cfg.image_size,
                                 image_colour=cfg.image_colour)
    if was is not None:
        _check_md5(cfg.data_file, was, pre.source.get("md5"))
    return data, pre


def _check_md5(path: str, was: str, md5: str | None = None) -> None:
    """A one-line error unless the file or folder ``path`` (its MD5 ``md5``, else computed) is the run's."""
    from ..data.arrays import source_md5

    if md5 is None:
        md5 = source_md5(path)
    if md5 != was:
        what = "folder" if Path(path).is_dir() else "file"
        raise UserError(f"{path} is not the {what} this run was trained on (its MD5 is {md5}, the run's {was}); "
                        f"give the original {what}" + ("; an image added, removed, renamed or edited changes it"
                                                      if what == "folder" else ""))


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
        x = data[f"{s}_x"]  # (images (N, 1, H, W) were read as N networks' inputs: a misleading error, or none)
        if x.dim() != 2:
            raise UserError(f"{s}_x is of shape {tuple(x.shape)}; the network is an MLP of flat rows (N, features): "
                            f"give {s}_x.flatten(1)")
        if x.shape[1] != data["train_x"].shape[1]:
            raise UserError(f"{s}_x has {x.shape[1]} features a row, train_x {data['train_x'].shape[1]}")
    for k in DATA_KEYS:  # (a NaN or inf row made the loss NaN: a divergence blamed on the learning rate)
        t = data[k]
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            row = int((~torch.isfinite(t)).reshape(t.shape[0], -1).any(1).nonzero()[0])
            raise UserError(f"{k}[{row}] is NaN or inf (a missing value); fill it in or drop that row")


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
