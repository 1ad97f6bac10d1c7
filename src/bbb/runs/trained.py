"""A trained run as a model that takes raw inputs: :func:`load_model` (``bbb.load_model``,
``bbb.runs.load_model``).

One input convention: a :class:`TrainedModel` takes *raw* inputs everywhere (``model(x)``,
``bbb.uncertainty.predict(model, x, ...)``, :meth:`TrainedModel.sample_outputs`) and encodes them
with the run's preprocessing (:class:`bbb.data.files.Preprocess`, kept in the checkpoint; for the
MNIST-like runs of older checkpoints, made from the config): pixels / 126, flattened; a table's
text columns one-hot, every column standardised. What :meth:`TrainedModel.encode` and
:meth:`TrainedModel.encode_csv` return is marked as encoded (:class:`EncodedInputs`), and a marked
tensor goes through every entry point as it is: never encoded twice. The bare network,
``model.network`` (what ``bbb.runs.load_run`` rebuilds), takes encoded inputs::

    model = bbb.load_model("runs/bbb400")                     # eval mode, on the CPU
    logits = bbb.uncertainty.predict(model, images, 10)   # images (N, 1, 28, 28), uint8 0..255 or 0..1
    model.classes                                         # the label of each output

A CSV run takes its table through :meth:`TrainedModel.encode_csv` (text columns by name); a
regression run's outputs are (mean, noise) of a Gaussian in standardised units, and
:meth:`TrainedModel.regression` turns k sampled outputs into the predictive mean, sd and interval
in the target's units. ``bbb predict`` is this module on the command line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import numbers
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from .. import uncertainty as U
from ..data.files import Preprocess, read_csv
from ..devices import resolve_device
from ..elbo import HeteroscedasticGaussian
from ..errors import CheckpointError, UserError, check_int
from ..nn.inputs import fold_inputs
from ..nn.samples import FOLD
from ..options import is_bayesian
from .checkpoint import committed_checkpoint, model_from_checkpoint
from .config import IN_MEMORY, TrainConfig
from .evaluation import mc_outputs

__all__ = ["LAPLACE_FILE", "LAPLACE_FORMAT", "LAPLACE_POSTERIOR", "EncodedInputs", "Predictor", "mark_encoded",
           "TrainedLaplace", "TrainedModel", "forward_with_features", "is_laplace_folder", "laplace_description",
           "kron_deltas", "laplace_base", "laplace_run_of", "last_linear", "layer_digest", "load_laplace", "load_model",
           ]

T = torch.Tensor
#: what keeps the mark of :class:`EncodedInputs`: moves, copies, dtype changes, reshapes, indexing,
#: splitting and joining (so DataLoader batches, chunks and the k folded copies of a k-sample pass
#: stay marked); anything that computes returns a plain tensor
_KEEPS_MARK: frozenset[Callable[..., Any]] = frozenset({
    T.to, T.cpu, T.cuda, T.float, T.double, T.half, T.bfloat16, T.type, T.clone, T.detach, T.contiguous,
    T.pin_memory, T.requires_grad_, T.__getitem__, T.index_select, T.narrow, T.split, T.chunk, T.tensor_split,
    T.unbind, T.view, T.reshape, T.flatten, T.unflatten, T.expand, T.expand_as, T.unsqueeze, T.squeeze,
    T.movedim, T.repeat, T.repeat_interleave,
    torch.cat, torch.concat, torch.stack, torch.split, torch.chunk, torch.tensor_split, torch.unbind,
    torch.index_select, torch.narrow, torch.flatten, torch.reshape, torch.unsqueeze, torch.squeeze, torch.movedim,
    torch.repeat_interleave,
})
del T


class EncodedInputs(Tensor):
    """A tensor of a run's *encoded* inputs, as :meth:`TrainedModel.encode` and
    :meth:`TrainedModel.encode_csv` return it: the mark that keeps them from being encoded twice.

    A :class:`TrainedModel` passes marked inputs to its network as they are (and refuses those of
    another run's preprocessing, ``run``); any other tensor or array is raw and is encoded. The
    mark survives moves, dtype changes, indexing, reshapes, splits and concatenation; a tensor
    computed from it (``x + 0``, a layer's output) is a plain tensor. ``x.as_subclass(torch.Tensor)``
    drops the mark: the values are then indistinguishable from raw numbers.
    """

    run: str | None = None  #: the fingerprint of the preprocessing that encoded them

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[override]
        out = super().__torch_function__(func, types, args, kwargs)
        if func in _KEEPS_MARK:
            return _retag(out, _run_of(args))
        return _unmark(out)


def _run_of(args: Any) -> str | None:
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, EncodedInputs):
                return t.run
    return None


def _retag(out: Any, run: str | None) -> Any:
    if isinstance(out, EncodedInputs):
        out.run = run
    elif isinstance(out, (list, tuple)):
        for t in out:
            _retag(t, run)
    return out


def _unmark(out: Any) -> Any:
    if isinstance(out, EncodedInputs):
        return out.as_subclass(Tensor)
    if isinstance(out, (list, tuple)) and any(isinstance(t, EncodedInputs) for t in out):
        return type(out)(_unmark(t) for t in out)
    return out


def mark_encoded(x: Tensor, run: str) -> EncodedInputs:
    """``x`` (encoded already) marked as the encoded inputs of the run of fingerprint ``run``."""
    enc = x.as_subclass(EncodedInputs)
    assert isinstance(enc, EncodedInputs)
    enc.run = run
    return enc


def _fingerprint(pre: Preprocess) -> str:
    d = pre.to_dict()  # what encodes the inputs: not the name of the file (a copy's content is the same)
    d["source"] = {k: v for k, v in d["source"].items() if k != "file"}
    text = json.dumps(d, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Predictor(Protocol):
    """What prediction reads of a loaded model: one run (:class:`TrainedModel`) or several
    (:class:`bbb.runs.ensemble.TrainedEnsemble`)."""

    config: TrainConfig
    preprocess: Preprocess
    task: str
    fingerprint: str
    run_dir: Path

    def device(self) -> torch.device: ...

    def sample_outputs(self, inputs: Any, num_samples: int = 10, seed: int | None = 0) -> Tensor: ...

    def regression(self, outputs: Tensor, level: float = 0.95) -> dict[str, Tensor]: ...


class TrainedModel(nn.Module):
    """A run's network behind its preprocessing: ``forward(raw)`` = ``network(encode(raw))``.

    Every entry point takes raw inputs (see the module's notes), or the marked
    :class:`EncodedInputs` that :meth:`encode` / :meth:`encode_csv` return, which go in as they are.
    Attributes: ``network`` (the bare network: takes encoded inputs), ``config`` (the run's
    :class:`TrainConfig`), ``preprocess``, ``task`` (``"classification"`` or ``"regression"``),
    ``classes`` (the label of each output of a classifier; None for regression),
    ``run_dir``, ``epoch``.
    """

    def __init__(self, network: nn.Module, config: TrainConfig, preprocess: Preprocess, task: str,
                 run_dir: Path, epoch: int, num_outputs: int) -> None:
        super().__init__()
        self.network = network
        self.num_outputs = num_outputs
        self.config = config
        self.preprocess = preprocess
        self.task = task
        self.run_dir = run_dir
        self.epoch = epoch
        self.fingerprint = _fingerprint(preprocess)

    @property
    def method(self) -> str:
        """What predicts: the run's ``--method`` (``laplace`` for a Laplace posterior's folder)."""
        return self.config.method

    @property
    def classes(self) -> list[str] | None:
        if self.task != "classification":
            return None
        if self.preprocess.classes is not None:
            return list(self.preprocess.classes)
        return [str(c) for c in range(self.num_outputs)]

    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    def encode(self, x: Any) -> EncodedInputs:
        """Raw inputs (an array or tensor; see :meth:`bbb.data.files.Preprocess.encode_array`) ->
        the network's (N, D) float32 inputs on the network's device, marked as encoded
        (:class:`EncodedInputs`). Inputs that are marked already come back as they are (those
        of another run's preprocessing are a one-line error)."""
        if isinstance(x, EncodedInputs):
            if x.run != self.fingerprint:
                raise UserError(f"these inputs (shape {tuple(x.shape)}) were encoded by another run's preprocessing: "
                                f"encode the raw inputs with this model, {self.run_dir}")
            if x.device == self.device() and x.dtype == torch.float32:
                return x
            return mark_encoded(x.to(self.device(), torch.float32), self.fingerprint)  # (x.double(): as encoded)
        if isinstance(x, Tensor):
            t = x.detach().cpu()
        else:
            if self.preprocess.kind == "table":
                self._check_column_names(x)
            arr = np.asarray(x)
            if arr.dtype.kind in "OSU":
                raise UserError(f"inputs of shape {arr.shape} hold text: give the table as a CSV, "
                                "model.encode_csv(path)")
            t = torch.as_tensor(np.require(arr, requirements="C"))  # (a reversed view, x[::-1], has negative strides)
        if self.preprocess.kind == "table":
            self._check_table(t)
        return mark_encoded(self.preprocess.encode_array(t).to(self.device()), self.fingerprint)

    def _check_column_names(self, x: Any) -> None:
        """A table with column names (a pandas DataFrame) is read by position, as an array is: its
        names must be this run's feature columns in their order, else a one-line error that says
        which to select (a reordered, missing or extra column would be read as another, silently)."""
        names = getattr(x, "columns", None)
        if names is None or isinstance(x, np.ndarray):
            return
        if list(names) == list(range(len(names))):  # pd.DataFrame(array): numbered, not named, columns
            return
        got = [str(c) for c in names]
        want = [c["name"] for c in self.preprocess.columns]
        if got != want:
            shown = ", ".join(got[:8]) + (", ..." if len(got) > 8 else "")
            raise UserError(f"a table with the columns {shown} is read by position, but this run's feature "
                            f"columns are {', '.join(want[:8])}{', ...' if len(want) > 8 else ''}: give "
                            f"df[{want[:8]!r}{' + ...' if len(want) > 8 else ''}], those columns in that order")

    def _check_table(self, t: Tensor) -> None:
        """A one-line error that says what to call when an array cannot be this table's raw rows."""
        cols = self.preprocess.columns
        raw = len(cols)
        encoded = sum(1 if c["kind"] == "numeric" else len(c["categories"]) for c in cols)
        names = ", ".join(c["name"] for c in cols[:8]) + (", ..." if raw > 8 else "")
        shape = tuple(t.shape)
        if t.dim() == 2 and t.shape[1] == encoded != raw:
            raise UserError(f"inputs of shape {shape} have the network's {encoded} encoded inputs, not this run's "
                            f"{raw} raw columns ({names}): pass the CSV through model.encode_csv(path), whose "
                            "output goes in as it is, or give inputs you encoded yourself to model.network")
        text = [c["name"] for c in cols if c["kind"] != "numeric"]
        if text:  # (before the shape: no array of raw rows would do)
            raise UserError(f"this run one-hot encodes the text column{'s' if len(text) > 1 else ''} "
                            f"{', '.join(text)}, which an array (here of shape {shape}) cannot hold: give the rows "
                            "as a CSV file with the column names (in Python: model.encode_csv(path))")
        if t.dim() != 2 or t.shape[1] != raw:
            raise UserError(f"inputs of shape {shape} do not fit this run's raw rows (N, {raw}), the columns "
                            f"{names}: give an (N, {raw}) array or the rows as a CSV file with the column names "
                            "(in Python: model.encode_csv(path))")

    def encode_csv(self, path: str | Path, unseen: list[tuple[int, str, str]] | None = None,
                   outside: list[tuple[int, str, str]] | None = None
                   ) -> tuple[EncodedInputs, list[str], list[list[str]]]:
        """A CSV with the training feature columns -> (the network's inputs, marked as encoded
        (:class:`EncodedInputs`), the header, the rows). The inputs go straight to ``model(x)``,
        ``bbb.uncertainty.predict(model, x, ...)`` or :meth:`sample_outputs`. A category unseen in
        training is an error, or with a list ``unseen`` encoded as none of the known ones and listed
        there; with a list ``outside``, a numeric value outside the training rows' range is listed
        there (:meth:`bbb.data.files.Preprocess.encode_table`)."""
        header, rows = read_csv(path, numbers=(numbers := list[int]()))
        x = self.preprocess.encode_table(header, rows, str(path), unseen, numbers, outside).to(self.device())
        return mark_encoded(x, self.fingerprint), header, rows

    def forward(self, x: Any) -> Tensor:
        fold = FOLD.get()
        if fold is not None and fold.k > 1 and fold.source is not None and x is fold.folded:
            # inside a k-sample pass (bbb.uncertainty.predict): encode the inputs as the caller gave
            # them (an error names their shape), once, and fold the encoded ones
            src = self.encode(fold.source).as_subclass(Tensor)
            folded = fold_inputs(src, fold.k, 0, src.shape[0])
            token = FOLD.set(dataclasses.replace(fold, source=src, folded=folded))
            try:
                return self.network(folded)
            finally:
                FOLD.reset(token)
        return self.network(self.encode(x).as_subclass(Tensor))

    def sample_outputs(self, inputs: Any, num_samples: int = 10, seed: int | None = 0, *,
                       samples: int | None = None) -> Tensor:
        """(k, N, C) outputs of the network on ``inputs`` (raw, or marked as encoded: see the
        module's notes), k = ``num_samples``: bbb or ivon weight samples through
        :func:`bbb.uncertainty.predict` (``generator=seed``), MC dropout, or the one sgd network.
        ``samples=``: the old name of ``num_samples`` (deprecated)."""
        if samples is not None:
            warnings.warn("sample_outputs(samples=) is deprecated: use num_samples=, the name "
                          "bbb.uncertainty.predict uses", DeprecationWarning, stacklevel=2)
            num_samples = samples
        num_samples = check_int("num_samples", num_samples)
        x = self.encode(inputs).as_subclass(Tensor)
        if is_bayesian(self.config.method):
            return U.predict(self.network, x, num_samples, batch_size=2048, generator=seed)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            return mc_outputs(self.network, x, self.config.method, num_samples)

    def regression(self, outputs: Tensor, level: float = 0.95) -> dict[str, Tensor]:
        """k sampled (mean, noise) outputs (k, N, 2) -> per input the predictive ``mean``, ``sd``,
        its ``epistemic_sd`` and ``aleatoric_sd`` parts, and the central ``level`` interval
        (``lower``, ``upper``) of the mixture of the k Gaussians, all in the target's units."""
        if self.task != "regression":
            raise UserError(f"{self.run_dir} is a classifier; regression() reads a regression run's outputs")
        if not (isinstance(level, numbers.Real) and 0 < level < 1):  # (a negative one swapped the ends, silently)
            raise UserError(f"regression(level=): the interval's probability, a share in (0, 1) such as 0.95, "
                            f"got {level!r}")
        means, sigmas = HeteroscedasticGaussian().split(outputs.double())
        unc = U.regression_uncertainty(means, sigmas)
        lo, hi = U.gaussian_mixture_quantiles(means, sigmas, ((1 - level) / 2, (1 + level) / 2))
        y = self.preprocess.y
        shift, scale = (0.0, 1.0) if y is None else (float(y.mean), float(y.std))
        return {"mean": unc["mean"] * scale + shift, "sd": unc["std"] * scale,
                "epistemic_sd": unc["epistemic"].sqrt() * scale, "aleatoric_sd": unc["aleatoric"].sqrt() * scale,
                "lower": lo * scale + shift, "upper": hi * scale + shift}


def load_model(run_dir: str | Path, which: str = "best", device: str | torch.device = "cpu") -> TrainedModel:
    """The trained model of a run directory, with the preprocessing it was trained with: a
    :class:`TrainedModel` in eval mode on ``device``, which takes raw inputs.

    ``which``: ``"best"`` (the epoch chosen by validation) or ``"last"``. The model takes raw
    inputs everywhere: ``model(x)``, ``bbb.uncertainty.predict(model, x, num_samples)`` and
    ``model.sample_outputs(x, num_samples)``, with ``x`` an array of images (uint8 0..255 or floats
    0..1) or of a numeric table's rows, or the inputs :meth:`TrainedModel.encode_csv` reads from a
    CSV (a table with text columns goes in only that way). Those come back marked as encoded
    (:class:`EncodedInputs`) and are never encoded twice. ``model.network`` is the bare network,
    on encoded inputs; ``model.classes`` the label of each output of a classifier;
    ``model.regression(outputs)`` a regressor's mean, sd and interval in the target's units.
    ``bbb.runs.load_run`` gives the bare network and its config instead. The folder of a
    last-layer Laplace posterior (``bbb laplace RUN --out DIR``) loads as its run with that
    posterior: a :class:`bbb.runs.laplace.TrainedLaplace`.

    >>> model = bbb.load_model("runs/houses")
    >>> x, header, rows = model.encode_csv("new_houses.csv")
    >>> pred = model.regression(model.sample_outputs(x, num_samples=20))   # pred["mean"], pred["sd"]
    >>> logits = bbb.uncertainty.predict(bbb.load_model("runs/bbb400"), images, num_samples=20)
    """
    if is_laplace_folder(run_dir):  # a folder of `bbb laplace`: the run with that posterior
        return load_laplace(run_dir, which, device)
    device = resolve_device(device)  # ("auto"; a one-line error where CUDA is asked for and there is none)
    path, ckpt = committed_checkpoint(run_dir, which)
    network, cfg = model_from_checkpoint(ckpt, path)
    info = dict(ckpt["model_info"])
    stored = info.get("preprocess")
    task = str(info.get("task", "classification"))
    if stored is not None:
        pre = Preprocess.from_dict(stored)
    elif cfg.data_source == IN_MEMORY and int(info["in_features"]) != 784:  # tensors given to train(data=...)
        # (not 28x28 pixels, which load as MNIST's are: raw pixels / scale): inputs taken as they were given
        pre = Preprocess(kind="arrays", task=task, feature_shape=[int(info["in_features"])], source={"memory": True})
    else:
        pre = Preprocess.image(cfg.scale)
    model = TrainedModel(network, cfg, pre, task, Path(run_dir), int(ckpt["epoch"]), int(info["num_classes"]))
    return model.to(device).eval()


# -- a run with a last-layer Laplace posterior (`bbb laplace RUN --out DIR`, fitted by bbb.runs.laplace) --

#: the folder of a last-layer Laplace posterior (``bbb laplace``, :mod:`bbb.runs.laplace`): its
#: description, its posterior, and the version of the posterior's contents
LAPLACE_FILE = "laplace.json"
LAPLACE_POSTERIOR = "posterior.pt"
LAPLACE_FORMAT = 1


def is_laplace_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder that ``bbb laplace`` wrote."""
    return (Path(path) / LAPLACE_FILE).is_file()


def laplace_description(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / LAPLACE_FILE).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{folder / LAPLACE_FILE} is unreadable ({type(e).__name__}): fit it again with bbb "
                              "laplace RUN --out " + str(folder)) from None
    if not isinstance(data, dict) or "run" not in data:
        raise CheckpointError(f"{folder / LAPLACE_FILE} is not a description bbb laplace wrote")
    return data


def laplace_run_of(folder: str | Path) -> Path:
    """The run directory whose Laplace posterior ``folder`` holds: the path as written beside the
    folder (relative to it), else as given at the fit."""
    folder = Path(folder)
    data = laplace_description(folder)
    near = Path(os.path.normpath(folder / str(data.get("run_relative", ""))))
    return near if data.get("run_relative") and near.is_dir() else Path(str(data["run"]))


def last_linear(network: nn.Module) -> tuple[str, nn.Linear]:
    found = [(n, m) for n, m in network.named_modules() if isinstance(m, nn.Linear)]
    if not found:
        raise UserError("the run's network has no nn.Linear layer for a last-layer Laplace")
    return found[-1]


def layer_digest(layer: nn.Linear) -> str:
    h = hashlib.sha256()
    for t in (layer.weight, layer.bias):
        if t is not None:
            h.update(t.detach().cpu().double().contiguous().numpy().tobytes())
    return h.hexdigest()[:20]


@torch.no_grad()
def forward_with_features(network: nn.Module, layer: nn.Linear, x: Tensor) -> tuple[Tensor, Tensor]:
    """(the network's outputs, the inputs of its last linear ``layer``) on the encoded ``x``."""
    seen: list[Tensor] = []
    handle = layer.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0]))
    try:
        out = network(x)
    finally:
        handle.remove()
    if len(seen) != 1:
        raise UserError(f"the network runs its last linear layer {len(seen)} times a forward pass: a last-layer "
                        "Laplace needs it once")
    return out, seen[0].reshape(x.shape[0], -1)


class TrainedLaplace(TrainedModel):
    """A run's network with the last-layer Laplace posterior of a ``bbb laplace`` folder: a
    :class:`TrainedModel` (raw inputs in, ``run_dir`` the folder, ``base_run`` the run) whose
    :meth:`sample_outputs` draws the last layer's weights from the posterior; ``forward`` is the
    run's network (the posterior's mean)."""

    posterior_mean: Tensor
    posterior_root: Tensor

    def __init__(self, base: TrainedModel, folder: Path, posterior: dict[str, Any], layer: nn.Linear) -> None:
        super().__init__(base.network, base.config, base.preprocess, base.task, folder, base.epoch, base.num_outputs)
        self.base_run = base.run_dir
        self._layer = [layer]  # (neither is a submodule: they hold the network this model holds)
        self._base = [base]
        self.register_buffer("posterior_mean", posterior["mean"].float(), persistent=False)
        self.register_buffer("posterior_root", posterior.get("root", torch.empty(0)).float(), persistent=False)
        self.diag = bool(posterior["diag"])
        #: the KFAC factors' eigendecomposition (a layer above the dense limit), else None
        self.kron: list[dict[str, Tensor]] | None = posterior.get("kron")
        self.rows = [int(r) for r in posterior["rows"]]

    @property
    def method(self) -> str:
        return "laplace"

    @property
    def map_model(self) -> TrainedModel:
        """The run itself: its network alone, the posterior's mean (the MAP)."""
        return self._base[0]

    @torch.no_grad()
    def sample_outputs(self, inputs: Any, num_samples: int = 10, seed: int | None = 0, *,
                       samples: int | None = None) -> Tensor:
        """(k, N, C) outputs: the network's features through k draws of the last layer's weights
        from the posterior (``seed``: the draws'; None: torch's global generator). ``samples=``:
        the deprecated name of ``num_samples``, as :meth:`TrainedModel.sample_outputs`."""
        if samples is not None:
            warnings.warn("sample_outputs(samples=) is deprecated: use num_samples=, the name "
                          "bbb.uncertainty.predict uses", DeprecationWarning, stacklevel=2)
            num_samples = samples
        return self.sample_encoded(self.encode(inputs).as_subclass(Tensor), num_samples, seed)

    @torch.no_grad()
    def sample_encoded(self, x: Tensor, num_samples: int = 10, seed: int | None = 0) -> Tensor:
        """:meth:`sample_outputs` of inputs encoded already (the network's own inputs, as
        ``model.network`` takes them): one set of k draws for every row."""
        k = check_int("num_samples", num_samples)
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        eps = torch.randn(k, self.posterior_mean.numel(), generator=gen, dtype=torch.float64)
        if self.kron is not None:
            delta = kron_deltas(self.kron, eps)
        else:
            root = self.posterior_root.double().cpu()
            delta = eps * root if self.diag else eps @ root.T
        delta = delta.to(self.posterior_mean.device, torch.float32)
        r = len(self.rows)
        d_w = delta[:, :-r].reshape(k, r, -1)
        d_b = delta[:, -r:]
        parts = []
        for xb in x.split(2048):
            out, phi = forward_with_features(self.network, self._layer[0], xb)
            o = out.unsqueeze(0).repeat(k, *([1] * out.dim()))
            o[..., self.rows] += torch.einsum("nd,krd->knr", phi, d_w) + d_b[:, None, :]
            parts.append(o)
        return torch.cat(parts, 1) if parts else torch.empty(k, 0, self.num_outputs)


def kron_deltas(blocks: list[dict[str, Tensor]], eps: Tensor) -> Tensor:
    """Draws from a KFAC posterior stored as its factors' eigendecomposition
    (``bbb.runs.laplace``'s blocks, in the parameters' order): ``eps`` (k, n) standard normals in,
    (k, n) deviations from the mean out, ``eps @ F^T`` for the square root F of the covariance, the
    block-diagonal of ``kron(q1, q2) diag(scale)`` (a weight matrix, row-major) and ``q diag(scale)``
    (a bias)."""
    parts, at = [], 0
    for b in blocks:
        if "q" in b:
            q, scale = b["q"].double(), b["scale"].double()
            n = scale.numel()
            parts.append((eps[:, at:at + n] * scale) @ q.T)
        else:
            q1, q2, scale = b["q1"].double(), b["q2"].double(), b["scale"].double()
            n = scale.numel()
            e = eps[:, at:at + n].reshape(-1, *scale.shape) * scale
            parts.append(torch.einsum("ab,kbc,dc->kad", q1, e, q2).reshape(eps.shape[0], n))
        at += n
    if at != eps.shape[1]:
        raise CheckpointError(f"the stored KFAC posterior covers {at} weights, not {eps.shape[1]}: fit it again")
    return torch.cat(parts, 1)


def laplace_base(folder: str | Path, which: str | None = None, device: str | torch.device = "cpu"
                 ) -> tuple[TrainedModel, nn.Linear]:
    """The network of the run whose Laplace posterior ``folder`` holds, and its last layer: a one-line
    error where ``which`` (None: any) is not the checkpoint fitted, or the run changed since the fit
    (the posterior and what was scored with it then describe another network)."""
    folder = Path(folder)
    data = laplace_description(folder)
    run = laplace_run_of(folder)
    if which is not None and which != data.get("checkpoint"):
        raise UserError(f"{folder} holds the Laplace posterior of {run}'s {data.get('checkpoint')} checkpoint, not "
                        f"its {which}: give --which {data.get('checkpoint')}, or fit another with bbb laplace "
                        f"{run} --which {which} --out DIR")
    if not run.is_dir():
        raise UserError(f"{folder} is the Laplace posterior of {data['run']}, which is not there: put the run back "
                        "(beside the folder as it was, or where it was)")
    which = str(data.get("checkpoint"))
    device = resolve_device(device)
    base = load_model(run, which, device)
    name, layer = last_linear(base.network)
    if base.epoch != data.get("epoch") or name != data.get("layer") or layer_digest(layer) != data.get(
            "layer_digest"):
        what = (f"was epoch {data.get('epoch')}, is {base.epoch}" if base.epoch != data.get("epoch")
                else f"epoch {base.epoch} as fitted, its last layer's weights another network's: trained again")
        raise UserError(f"{run} changed since its Laplace posterior in {folder} was fitted (its {which} checkpoint "
                        f"{what}): fit it again, bbb laplace {run} --out {folder}")
    return base, layer


def load_laplace(folder: str | Path, which: str = "best", device: str | torch.device = "cpu") -> TrainedLaplace:
    """The ``bbb laplace`` folder ``folder`` as a :class:`TrainedLaplace` on ``device``, in eval
    mode. ``which`` must be the checkpoint it was fitted to; a run that changed since (trained
    further, another best epoch) is a one-line error (:func:`laplace_base`)."""
    folder, device = Path(folder), resolve_device(device)
    base, layer = laplace_base(folder, which, device)
    run = laplace_run_of(folder)
    try:
        posterior = torch.load(folder / LAPLACE_POSTERIOR, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to read is the same user problem
        raise CheckpointError(f"{folder / LAPLACE_POSTERIOR} is corrupt or unreadable ({type(e).__name__}): fit it "
                              f"again, bbb laplace {run} --out {folder}") from None
    if not isinstance(posterior, dict) or posterior.get("format") != LAPLACE_FORMAT:
        raise CheckpointError(f"{folder / LAPLACE_POSTERIOR} is not a posterior this bbb reads (format "
                              f"{posterior.get('format') if isinstance(posterior, dict) else None!r}): fit it again")
    return TrainedLaplace(base, folder, posterior, layer).to(device).eval()
