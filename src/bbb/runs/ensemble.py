"""Several trained runs of one data split as one model: :func:`load_ensemble` (``bbb.load_ensemble``).

A deep ensemble (Lakshminarayanan et al. 2017), or an ensemble of Bayesian networks: train the
runs as usual (``bbb train ... --seed 0``, ``--seed 1``, ...; any methods, the same data and
split), then load them together. The ensemble's predictive is the mean of its members'
predictives: each member gives its k sampled outputs (a deterministic member its one output,
repeated k times, so that every member weighs the same) and the ensemble's k x M outputs go
wherever one run's k go (:func:`bbb.runs.referral.uncertainty_scores`, :meth:`TrainedEnsemble.regression`,
:func:`bbb.runs.referral.refer_threshold`): the mutual information then holds the members' disagreement
as well as each posterior's.

::

    ens = bbb.load_ensemble(["runs/s0", "runs/s1", "runs/s2"])
    x, header, rows = ens.encode_csv("new_rows.csv")
    scores = bbb.runs.referral.uncertainty_scores(ens, ens.sample_outputs(x, 10))

``bbb predict RUN RUN ... INPUT`` and ``bbb evaluate RUN RUN ... --out DIR`` are this on the
command line; :func:`evaluate_ensemble` writes the ensemble's test scores beside its members'.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..data.files import Preprocess
from ..errors import UserError, check_int
from ..io import atomic_write_json
from ..nn import pool_members
from ..uncertainty import predictive_probs
from .config import TrainConfig, same_setting
from .evaluation import draw_calibration_figure, draw_classifier_figures, predictive_scores, save_results
from .population import POPULATION_FILE
from .referral import split_outputs
from .rundir import check_distinct, run_id_of
from .trained import EncodedInputs, TrainedModel, is_laplace_folder, load_model

__all__ = ["SPLIT_FIELDS", "TrainedEnsemble", "ensemble_folder", "evaluate_ensemble", "load_ensemble", "pool_runs"]

#: the settings that make a run's training / validation / test split: an ensemble's members share them
SPLIT_FIELDS = ("dataset", "data_file", "val_size", "val_fraction", "test_fraction", "split_seed", "train_size",
                "ignore_columns", "keep_columns", "target")


class TrainedEnsemble(nn.Module):
    """Trained runs of one data split as one model that takes raw inputs (see the module's
    notes): the interface of :class:`bbb.runs.TrainedModel` that prediction uses (``encode``,
    ``encode_csv``, ``sample_outputs``, ``regression``, ``task``, ``classes``, ``preprocess``),
    with ``members`` (the runs' :class:`TrainedModel`) and ``config`` (the first member's, whose
    split every member shares)."""

    def __init__(self, members: list[TrainedModel]) -> None:
        super().__init__()
        if len(members) < 2:
            raise UserError(f"an ensemble needs at least 2 runs, got {len(members)}")
        self.members = nn.ModuleList(members)
        first = members[0]
        self.config: TrainConfig = first.config
        self.preprocess: Preprocess = first.preprocess
        self.task: str = first.task
        self.fingerprint: str = first.fingerprint
        self.run_dir = first.run_dir
        self.num_outputs = first.num_outputs

    @property
    def run_dirs(self) -> list[Path]:
        return [m.run_dir for m in self.member_models()]

    def member_models(self) -> list[TrainedModel]:
        """The members, each a :class:`TrainedModel`."""
        return [m for m in self.members if isinstance(m, TrainedModel)]

    @property
    def classes(self) -> list[str] | None:
        return self.member_models()[0].classes

    @property
    def methods(self) -> list[str]:
        return [m.method for m in self.member_models()]

    def describe(self) -> str:
        """E.g. 'ensemble of 3 runs (bbb x 3)'."""
        counts: dict[str, int] = {}
        for method in self.methods:
            counts[method] = counts.get(method, 0) + 1
        return f"ensemble of {len(self.members)} runs ({', '.join(f'{k} x {v}' for k, v in counts.items())})"

    def device(self) -> torch.device:
        return self.member_models()[0].device()

    def encode(self, x: Any) -> EncodedInputs:
        """As :meth:`TrainedModel.encode`: every member has the same preprocessing."""
        return self.member_models()[0].encode(x)

    def encode_csv(self, path: str | Path, unseen: list[tuple[int, str, str]] | None = None,
                   outside: list[tuple[int, str, str]] | None = None
                   ) -> tuple[EncodedInputs, list[str], list[list[str]]]:
        """As :meth:`TrainedModel.encode_csv`."""
        return self.member_models()[0].encode_csv(path, unseen, outside)

    def forward(self, x: Any) -> Tensor:
        raise UserError("an ensemble has no single output: use sample_outputs(x, k), whose k x M outputs "
                        "bbb.runs.referral.uncertainty_scores reads")

    def sample_outputs(self, inputs: Any, num_samples: int = 10, seed: int | None = 0) -> Tensor:
        """(k x M, N, C) outputs: each of the M members' k sampled outputs (member i draws with
        ``seed + i``), member by member (:func:`pool_runs`; an ensemble of deterministic
        networks only: k = 1)."""
        num_samples = check_int("num_samples", num_samples)
        x = self.encode(inputs)
        return pool_runs([m.sample_outputs(x, num_samples, None if seed is None else seed + i)
                             for i, m in enumerate(self.member_models())])

    def regression(self, outputs: Tensor, level: float = 0.95) -> dict[str, Tensor]:
        """As :meth:`TrainedModel.regression`, over the members' outputs together."""
        return self.member_models()[0].regression(outputs, level)


def pool_runs(parts: list[Tensor]) -> Tensor:
    """The runs' sampled outputs, each (k_i, N, ...), as the ensemble's (k x M, N, ...), run by run
    (:func:`bbb.nn.pool_members`): a one-network run's (k_i = 1: sgd) repeated k = max k_i times,
    so that every run weighs the same in the mean over the samples."""
    k = max(p.shape[0] for p in parts)
    if any(p.shape[0] not in (1, k) for p in parts):
        raise ValueError(f"the runs' sample counts {[p.shape[0] for p in parts]}: each must be 1 or {k}")
    return pool_members(torch.stack([p.expand(k, *p.shape[1:]) for p in parts], 1))


def ensemble_folder(out: str | Path, run_dirs: list[Path], file: str) -> Path:
    """The folder ``out`` of an ensemble's ``file`` (eval.json, ood.json), created: refused in one
    line where it is a file, one of the members' directories (their ``file`` is their own), the
    directory of another run or Laplace posterior (its ``file`` is read as that run's), a population's
    folder (a folder with an ensemble's files is no run's: the population would not resume), or holds
    a ``file`` of other members."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a folder for the ensemble's {file}")
    for d in run_dirs:
        if out.resolve() == d.resolve():
            raise UserError(f"--out {out} is the member {d}: give the ensemble a folder of its own")
    if (out / "last.pt").exists() or (out / "best.pt").exists() or is_laplace_folder(out):
        # its eval.json, ood.json, uncertain.json are that run's own (bbb compare and report read them)
        raise UserError(f"--out {out} is another run's directory: give the ensemble a folder of its own")
    if (out / POPULATION_FILE).exists():  # the ensemble's files there: the population would not resume
        raise UserError(f"--out {out} is the folder of a population's state (population.pt): give the ensemble a "
                        "folder of its own")
    path = out / file
    if path.exists():
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            before = {}
        if not isinstance(before, dict) or not _same_members(before.get("members"), run_dirs):
            raise UserError(f"{path} exists and is not this ensemble's: give another --out folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _same_members(recorded: Any, run_dirs: list[Path]) -> bool:
    """Whether an ensemble file's ``members`` (as they were typed) name ``run_dirs``, in order: the
    same text, or the same folders from here (``runs/a`` then ``/home/me/runs/a``)."""
    if not isinstance(recorded, list) or len(recorded) != len(run_dirs):
        return False
    if recorded == [str(d) for d in run_dirs]:
        return True
    return all(isinstance(r, str) and Path(r).resolve() == d.resolve() for r, d in zip(recorded, run_dirs))


def _weights_digest(model: TrainedModel) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.network.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def load_ensemble(run_dirs: list[str | Path], which: str = "best", device: str | torch.device = "cpu"
                  ) -> TrainedEnsemble:
    """The runs of ``run_dirs`` (at least 2, distinct; each its ``which`` checkpoint) as one
    :class:`TrainedEnsemble` on ``device``, in eval mode. The runs must share their task, classes,
    preprocessing and split (:data:`SPLIT_FIELDS`): else a one-line error that names the
    setting, since a member's validation or test inputs would be another's training inputs. Two
    members with the same weights (the same seed twice, or a copied directory) are a warning:
    the ensemble then counts one network twice."""
    dirs = [Path(d) for d in run_dirs]
    if len(dirs) < 2:
        raise UserError(f"an ensemble needs at least 2 run directories, got {len(dirs)}")
    check_distinct(dirs, "an ensemble's members are distinct runs")
    members = [load_model(d, which, device) for d in dirs]
    first = members[0]
    for m in members[1:]:
        if m.task != first.task:
            raise UserError(f"{m.run_dir} is a {m.task} run and {first.run_dir} a {first.task} run: an ensemble's "
                            "members have one task")
        same_md5 = first.preprocess.source.get("md5") not in (None, "") and \
            first.preprocess.source.get("md5") == m.preprocess.source.get("md5")
        for field in SPLIT_FIELDS:
            a, b = getattr(first.config, field, None), getattr(m.config, field, None)
            if field == "data_file" and same_md5:
                continue  # one file's content in two places (a copy, a file moved between the runs): the same rows
            if not same_setting(field, a, b):
                raise UserError(f"{m.run_dir} was trained with {field} {b!r} and {first.run_dir} with {a!r}: an "
                                "ensemble's members share their data and split (train them with the same data "
                                "options, another --seed)")
        if m.classes != first.classes or m.num_outputs != first.num_outputs:
            raise UserError(f"{m.run_dir} predicts the classes {m.classes} and {first.run_dir} {first.classes}: an "
                            "ensemble's members have the same outputs")
        if m.fingerprint != first.fingerprint:
            raise UserError(f"{m.run_dir} encodes its inputs otherwise than {first.run_dir} (another data file, "
                            "columns or scaling): an ensemble's members share their data and split")
    digests: dict[str, Path] = {}
    for m in members:
        dig = _weights_digest(m)
        if dig in digests:
            warnings.warn(f"{m.run_dir} and {digests[dig]} hold the same network (the same --seed, or a copy): the "
                          "ensemble counts it twice", UserWarning, stacklevel=2)
        digests.setdefault(dig, m.run_dir)
    return TrainedEnsemble(members).to(device).eval()


def evaluate_ensemble(run_dirs: list[str | Path], out: str | Path, samples: int = 10, which: str = "best",
                      device: str | torch.device = "cpu", data_dir: str | None = None,
                      data_file: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The test scores of the ensemble of ``run_dirs`` (:func:`load_ensemble`) beside each
    member's, written atomically to ``out/eval.json``: a classifier's error, NLL, ECE and Brier of
    the predictive (each member's ``samples``-sample predictive, and their mean) and selective
    prediction by entropy and mutual information; a regressor's RMSE, log-likelihood, NLL and 95%
    interval coverage in the target's units. ``samples`` in the result is the outputs each member
    gave: 1 where every member is one network (sgd), as :func:`bbb.runs.evaluate_run` says of one.
    ``out`` is a folder of its own: a member's directory is refused (its eval.json is the
    member's), and so is an ``out/eval.json`` of other members."""
    samples = check_int("--samples", samples)
    ens = load_ensemble(run_dirs, which, device)
    out = ensemble_folder(out, ens.run_dirs, "eval.json")
    names = [str(d) for d in ens.run_dirs]
    with torch.no_grad():
        outputs, y = split_outputs(ens, "test", samples, seed, data_dir, data_file)
    if y.shape[0] == 0:
        raise UserError(f"{ens.run_dir} has no test set to evaluate the ensemble on")
    k = outputs.shape[0] // len(names)  # (1 where every member is one network)
    per_member = [outputs[i * k:(i + 1) * k] for i in range(len(names))]
    scores: dict[str, Any] = predictive_scores(ens.task, ens.preprocess.y, outputs, y, selective=True)
    members = [predictive_scores(ens.task, ens.preprocess.y, o, y) for o in per_member]
    keys = tuple(k for k, v in members[0].items() if isinstance(v, float))  # (not the calibration curves)
    result: dict[str, Any] = {
        "run": str(out), "method": "ensemble", "ensemble": ens.describe(), "members": names,
        "member_methods": ens.methods, "checkpoint": which, "dataset": ens.config.dataset, "task": ens.task,
        "samples": k, "n": int(y.shape[0]), **scores,
        "member_scores": [{"run": n, "epoch": e.epoch, "run_id": run_id_of(e.run_dir), **m}
                          for n, e, m in zip(names, ens.member_models(), members)],
        "member_mean": {key: float(sum(m[key] for m in members) / len(members)) for key in keys},
    }
    bad = [key for key in keys if not math.isfinite(float(result[key]))]
    if bad:
        warnings.warn(f"the ensemble's {bad[0]} is not finite", UserWarning, stacklevel=2)
    cfg = ens.config
    data_name = Path(cfg.data_file).name if cfg.data_file else cfg.dataset
    one = f"one member ({Path(names[0]).name})"
    if ens.task == "regression":
        unsaved = draw_calibration_figure(out, result, {one: members[0], f"the ensemble of {len(names)}": scores},
                                          f"ensemble on {data_name} test")
    else:
        panels = {one: predictive_probs(per_member[0].double()),
                  f"the ensemble of {len(names)}": predictive_probs(outputs.double())}
        unsaved = draw_classifier_figures(out, result, panels, y, f"ensemble on {data_name} test",
                                          f"{k} samples of each member" if k > 1 else "one network per member")
    save_results(out / "eval.json", result, lambda: atomic_write_json(out / "eval.json", result))
    if unsaved is not None:
        raise unsaved
    return result
