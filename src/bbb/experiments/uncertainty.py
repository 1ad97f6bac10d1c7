"""Uncertainty that users can check: reliability, out-of-distribution detection, uncertain digits.

Works on any run directory of ``bbb train``: BBB (weight samples), dropout (Monte Carlo dropout
with the same k) and SGD (the softmax alone: k = 1, so its mutual information is undefined).

* :func:`sample_probs` - (k, B, C) class probabilities of k sampled networks.
* :func:`ood_probs` - those of the in- and out-of-distribution test sets, by the same k networks.
* :func:`ood_report` - in-distribution test set (positives = OOD) scored by predictive entropy,
  mutual information and 1 - max probability; AUROC and AUPR of each (OOD is the positive class).
* :func:`most_uncertain` - the test digits on which the sampled networks disagree most (by their
  votes, then by mutual information), and the most confident errors, with each class's vote share
  over the samples.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .. import uncertainty as U
from ..cli.common import add_run_dirs_arguments, add_seed, scoring_locked, shared_help, warn_samples_unused
from ..data.arrays import data_kind
from ..devices import resolve_device
from ..errors import UserError
from ..io import atomic_write_json
from ..nn import shared_samples
from ..nn.model import modes_kept
from ..options import IMAGE_DATASETS
from ..plots import canvas, figures, finish, plot_reliability, save_png
from ..runs import TrainedLaplace, mc_dropout
from ..runs.rundir import run_id_of

__all__ = [
    "sample_probs",
    "ood_scores",
    "ood_report",
    "ood_probs",
    "most_uncertain",
    "plot_reliability",
    "plot_ood",
    "plot_uncertain",
    "ranking_titles",
    "add_ood_arguments",
    "main_ood",
    "add_uncertain_arguments",
    "main_uncertain",
]

SCORES = ("entropy", "mutual_information", "max_prob")

#: What each score is, as the plots label it (``max_prob`` is 1 - max probability: higher = more
#: likely OOD, like the other two).
SCORE_LABELS = {"entropy": "predictive entropy", "mutual_information": "mutual information",
                "max_prob": "1 - max probability"}

#: a regression's scores (:meth:`bbb.runs.TrainedModel.regression`), in the target's units
REGRESSION_SCORES = {"sd": "predictive sd", "epistemic_sd": "epistemic sd"}


@torch.no_grad()
def sample_probs(model: nn.Module, x: Tensor, method: str, samples: int = 10, chunk: int = 2048,
                 seed: int | None = 0) -> Tensor:
    """Class probabilities of ``samples`` sampled networks, (k, B, C); k = 1 for ``sgd``."""
    if samples < 1:
        raise UserError(f"samples must be >= 1, got {samples}")
    fork = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    with fork:
        if seed is not None:
            torch.manual_seed(seed)
        if isinstance(model, TrainedLaplace):  # a Laplace posterior: one set of k draws of its last layer for all
            return torch.softmax(model.sample_encoded(x, samples, None).float(), -1)
        parts = []
        # bbb: the same k networks score every chunk (sample j is one network across the set)
        shared = shared_samples() if method == "bbb" else contextlib.nullcontext()
        with shared:
            for xc in torch.split(x, chunk):
                parts.append(_chunk_probs(model, xc, method, samples))
        return torch.cat(parts, dim=1)


#: an ensemble's members' (epoch of the checkpoint scored, run id), as its ood.json and uncertain.json record them
MemberMarks = list[tuple[int, str | None]]


def _chunk_probs(model: nn.Module, xc: Tensor, method: str, samples: int) -> Tensor:
    if method == "bbb":
        logits = U.predict(model, xc, samples)
    elif method == "dropout":
        with mc_dropout(model):
            logits = model(xc.unsqueeze(0).expand(samples, *xc.shape))
    else:
        with modes_kept(model):
            logits = model(xc).unsqueeze(0)
    return torch.softmax(logits.float(), -1)


def ood_scores(probs: Tensor) -> dict[str, Tensor | None]:
    """Per-example uncertainty scores (higher = more likely OOD) from (k, B, C) probabilities: the
    predictive entropy, the mutual information (None for k = 1) and 1 - max probability, computed
    as the sum of the other classes' probabilities (``1.0 - max`` is 0 for every max that rounds
    to 1.0, so the confident inputs of both sets would tie)."""
    mean = probs.mean(0)
    pred_h = U.entropy(mean)
    mi = None
    if probs.shape[0] > 1:
        mi = (pred_h - U.entropy(probs).mean(0)).clamp_min(0.0)
    rest = mean.scatter(-1, mean.argmax(-1, keepdim=True), 0.0).sum(-1)  # = 1 - max, without cancelling
    return {"entropy": pred_h, "mutual_information": mi, "max_prob": rest}


def ood_report(probs_in: Tensor, probs_out: Tensor) -> dict[str, Any]:
    """AUROC and AUPR (OOD = positive class) of every score; ``None`` where a score is undefined.
    Each entry names its ``score`` (:data:`SCORE_LABELS`: ``max_prob``'s is 1 - max probability),
    which ``mean_in`` and ``mean_out``, its mean on either set, are of."""
    return score_report(ood_scores(probs_in), ood_scores(probs_out), SCORE_LABELS)


def score_report(scores_in: dict[str, Tensor | None], scores_out: dict[str, Tensor | None],
                 labels: dict[str, str]) -> dict[str, Any]:
    """{score: its label, AUROC, AUPR (OOD = positive class) and mean on either set} of each score
    ``labels`` names (a classifier's :data:`SCORE_LABELS`, a regression's
    :data:`REGRESSION_SCORES`); AUROC and AUPR ``None`` where the score is undefined."""
    report: dict[str, Any] = {}
    for name, label in labels.items():
        a, b = scores_in[name], scores_out[name]
        if a is None or b is None:
            report[name] = {"score": label, "auroc": None, "aupr": None}
        else:
            report[name] = {"score": label, "auroc": U.auroc(a, b), "aupr": U.aupr(a, b),
                            "mean_in": float(a.mean()), "mean_out": float(b.mean())}
    return report


def most_uncertain(probs: Tensor, labels: Tensor, n: int = 64) -> dict[str, Tensor]:
    """Indices of the ``n`` examples the sampled networks dispute most, and of the ``n`` most
    confident errors. Disputed: the largest share of the k networks voting against the class most
    of them vote for (``dissent``) first, ties (among them the examples all k agree on) by the
    mutual information between them (``disagreement``; predictive entropy when k = 1, where every
    vote is unanimous). Also each class's vote share: the fraction of samples whose argmax is that
    class."""
    k, b, c = probs.shape
    scores = ood_scores(probs)
    mi, entropy = scores["mutual_information"], scores["entropy"]
    assert entropy is not None  # (always defined; only the mutual information needs k > 1)
    disagreement = mi if mi is not None else entropy
    votes = torch.nn.functional.one_hot(probs.argmax(-1), c).float().mean(0)  # (B, C)
    dissent = 1.0 - votes.max(-1).values  # (equal vote counts: equal floats, so ties are exact)
    n = min(n, b)
    by_mi = torch.argsort(disagreement, descending=True, stable=True)
    top = by_mi[torch.argsort(dissent[by_mi], descending=True, stable=True)][:n]
    mean = probs.mean(0)
    conf, pred = mean.max(-1)
    wrong = (pred != labels).nonzero().flatten()
    # highest confidence first, by the least probability left to the other classes: a max that rounds
    # to 1.0 tied every very confident error, which then came in the order of the test set
    rest = scores["max_prob"]
    assert rest is not None
    conf_err = wrong[torch.argsort(rest[wrong], stable=True)[:n]]
    return {"uncertain": top, "confident_errors": conf_err, "votes": votes, "dissent": dissent,
            "disagreement": disagreement, "prediction": pred, "confidence": conf}


# --------------------------------------------------------------------------------------------
# Plots (matplotlib imported lazily)
# --------------------------------------------------------------------------------------------


def plot_ood(scores_in: dict[str, Tensor | None], scores_out: dict[str, Tensor | None],
             report: dict[str, Any], path: str | Path | None = None, names: tuple[str, str] = ("MNIST", "OOD"), *,
             ax: Any = None) -> Any:
    """Histograms of each score on the in-distribution and OOD test sets, AUROC in the title
    (``ax``: one Axes per score). Returns the PNG's path when ``path`` is given, else the
    Figure (None without matplotlib)."""
    names_ = list(report)  # (a classifier's SCORES, a regression's REGRESSION_SCORES)
    fig, axes = canvas(ax, len(names_), figsize=(14 * len(names_) / 3, 3.8))
    if fig is None:
        return None
    for panel, name in zip(axes, names_):
        a, b = scores_in[name], scores_out[name]
        label = report[name].get("score", SCORE_LABELS.get(name, name))
        if a is None or b is None:
            panel.text(0.5, 0.5, "undefined for k = 1", ha="center", va="center", transform=panel.transAxes)
            panel.set_title(label)
            continue
        hi = max(float(a.max()), float(b.max()), 1e-6)
        bins = torch.linspace(0, hi, 51).numpy()
        panel.hist(a.cpu().numpy(), bins=bins, alpha=0.6, density=True, label=f"{names[0]} (in)")
        panel.hist(b.cpu().numpy(), bins=bins, alpha=0.6, density=True, label=f"{names[1]} (OOD)")
        panel.set_yscale("log")
        panel.set_ylabel("density")
        panel.set_title(f"{label}: AUROC {report[name]['auroc']:.3f}")
        panel.set_xlabel(label)
        panel.legend()
    return finish(fig, path, new=ax is None)


def _as_image(x: Tensor):
    """A flat example as a square image when it is one (28 x 28 for MNIST), else a strip."""
    d = x.numel()
    side = math.isqrt(d)
    return x.reshape(side, side).cpu().numpy() if side * side == d else x.reshape(1, d).cpu().numpy()


def ranking_titles(samples: int) -> tuple[str, str]:
    """The titles of :func:`plot_uncertain`'s two grids, each saying how :func:`most_uncertain`
    ranked its digits (``samples``: the sampled networks; 1: one network, ranked by entropy)."""
    if samples > 1:
        disputed = (f"most disputed: the most votes against the majority class of {samples} sampled networks "
                    f"first, then the highest mutual information between {samples} sampled networks; "
                    "above each digit: its label y, the vote shares, the mutual information (MI, nats)")
    else:
        disputed = ("most uncertain: highest predictive entropy of the one network, highest first; above each "
                    "digit: its label y, the one network's vote, the entropy (H, nats)")
    errors = ("most confident errors: wrong predictions ranked by the predicted class's mean probability"
              f"{f' over {samples} samples' if samples > 1 else ''}, highest first")
    return disputed, errors


#: the most digits a grid of :func:`plot_uncertain` draws (one axes each, whose time and PNG size
#: grow with their number); uncertain.json lists every one of ``--n``
PLOT_MAX = 128


def plot_uncertain(images: Tensor, labels: Tensor, result: dict[str, Tensor], path: str | Path | None,
                   samples: int, classes: list[str] | None = None) -> Any:
    """Two grids: the most disputed test digits and the most confident errors, each titled with
    its label, the vote shares of the sampled networks and the quantity the disputed grid is
    ranked by after the votes (mutual information; entropy when k = 1); each grid's title says how
    it ranks (:func:`ranking_titles`), and, for more than :data:`PLOT_MAX` digits, that it shows
    the first of them. ``images``: flat MNIST-like pixels (drawn dark on light), or your own images
    (N, C, H, W) in 0..255 (drawn as they are), with ``classes`` naming the labels. Returns the PNG's
    path when ``path`` is given, else the Figure (None without matplotlib)."""
    plt = figures()
    if plt is None:
        return None
    disputed, errors = ranking_titles(samples)
    groups = [(title + (f" (the first {PLOT_MAX} of {len(idx)})" if len(idx) > PLOT_MAX else ""), idx[:PLOT_MAX])
              for title, idx in ((disputed, result["uncertain"]), (errors, result["confident_errors"]))]
    n = max(len(idx) for _, idx in groups)
    cols = min(8, max(n, 1))
    rows = [math.ceil(len(idx) / cols) for _, idx in groups]
    heads = [title.replace("; ", ";\n").replace(" first, then ", " first,\nthen ") for title, _ in groups]
    above = [0.25 + 0.2 * (h.count("\n") + 1) for h in heads]  # inches: each grid's title lines
    heights = [1.75 * max(r, 1) + a for r, a in zip(rows, above)]
    fig = plt.figure(figsize=((2.3 if classes else 1.55) * cols, sum(heights)))  # (class names: wider titles)
    sub = fig.subfigures(2, 1, height_ratios=heights)
    for sf, (_, idx), r, head, a, h in zip(sub, groups, rows, heads, above, heights):
        sf.suptitle(head, fontsize=11)
        if len(idx) == 0:
            continue
        axes = sf.subplots(max(r, 1), cols, squeeze=False)
        sf.subplots_adjust(top=1 - (a + 0.4) / h, bottom=0.02)  # 0.4 in: the first row's two label lines
        for ax in axes.flat:
            ax.axis("off")
        for ax, i in zip(axes.flat, idx.tolist()):
            if images.dim() == 4:  # your own images, as they are: grey, or red, green and blue
                pic = images[i].clamp(0, 255).cpu().numpy() / 255.0
                ax.imshow(pic[0] if pic.shape[0] == 1 else pic.transpose(1, 2, 0), cmap="gray", vmin=0, vmax=1)
            else:
                ax.imshow(_as_image(images[i]), cmap="gray_r")
            v = result["votes"][i]
            top = torch.argsort(v, descending=True)[:2]
            name = (lambda c: classes[int(c)][:12]) if classes else (lambda c: str(int(c)))
            share = ", ".join(f"{name(c)}:{100 * float(v[c]):.0f}%" for c in top if v[c] > 0)
            score = f"{'MI' if samples > 1 else 'H'} {float(result['disagreement'][i]):.3f}"
            ax.set_title(f"y={name(labels[i])}, {score}\n{share}", fontsize=9 if classes else 10)  # (bbb report)
    if path is None:
        return fig
    out = save_png(fig, path)
    fig.clear()
    return out


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _images_only(run_dir: Any, cfg: Any, data_dir: str | None, command: str, data_file: str | None = None) -> Any:
    if cfg.data_file is not None:  # its digit grids and image OOD sets mean nothing for a table
        own_file = data_kind(cfg.data_file) != "folder"
        if command == "uncertain" and not own_file:  # your own images: their grids, named by file
            from ..runs.model import point_data

            return point_data(cfg, data_dir, data_file)
        what, instead = (("bbb ood without --ood-data", f"bbb ood {run_dir} --ood-data FILE scores it against your "
                          "own inputs from elsewhere") if command == "ood" else
                         (f"bbb {command}", f"bbb predict {run_dir} {'FILE' if own_file else 'FOLDER'} gives each of "
                          "your own inputs' uncertainty (its refer column names those to check)"))
        raise UserError(f"{what} takes runs trained on MNIST or Fashion-MNIST; {run_dir} was trained on "
                        f"{cfg.data_file}: {instead}")
    return cfg.replace(data_dir=data_dir) if data_dir is not None else cfg


def _load(run_dir: str, which: str, data_dir: str | None, command: str, device: str = "auto",
          data_file: str | None = None):
    from .. import runs as T

    if T.trained.is_laplace_folder(run_dir):  # the run's network with its last-layer posterior
        lap = T.trained.load_laplace(run_dir, which, device)
        cfg = _images_only(run_dir, lap.config, data_dir, command, data_file)
        return lap, cfg, lap.method, T.model.load_data(cfg)
    model, cfg = T.load_run(run_dir, which, device=resolve_device(device))
    cfg = _images_only(run_dir, cfg, data_dir, command, data_file)
    return model, cfg, T.infer_method(model), T.model.load_data(cfg)


def _load_networks(args: argparse.Namespace, command: str, file: str
                   ) -> tuple[list[tuple[nn.Module, str]], Any, dict[str, Tensor], Path, str, MemberMarks | None]:
    """``bbb ood``'s and ``bbb uncertain``'s networks: one run's, or an ensemble's members' (several
    RUN_DIRs, which :func:`bbb.runs.load_ensemble` checks share their data and split), each with its
    method; the config, the data, the output folder (of the ensemble's ``file``), the label of
    what was scored, and an ensemble's members' epochs (of the checkpoint scored) and run ids (None
    for one run)."""
    from .. import runs as T
    from ..cli.common import ensemble_out, one_line_warnings
    from ..runs.ensemble import ensemble_folder

    if ensemble_out(args, file) is None:
        model, cfg, method, data = _load(args.run_dirs[0], args.which, args.data_dir, command, args.device,
                                         getattr(args, "data_file", None))
        # an ivon run is sampled as a bbb one (the same posterior), and named by its own method
        label = cfg.method if method == "bbb" else method
        return [(model, method)], cfg, data, Path(args.run_dirs[0]), label, None
    with one_line_warnings(command):
        ens = T.load_ensemble(args.run_dirs, args.which, resolve_device(args.device))
    cfg = _images_only(ens.run_dirs[0], ens.config, args.data_dir, command, getattr(args, "data_file", None))
    out = ensemble_folder(args.out, ens.run_dirs, file)
    nets = [(m, m.method) if isinstance(m, T.TrainedLaplace) else (m.network, T.infer_method(m.network))
            for m in ens.member_models()]
    return nets, cfg, T.model.load_data(cfg), out, ens.describe(), _epochs(ens)


def _members_probs(nets: list[tuple[nn.Module, str]], x: Tensor, samples: int, seed: int) -> Tensor:
    """(k x M, B, C): each network's sampled probabilities (network i draws with seed + 2 i, so the
    same k networks score every set given the same seed), a one-network member's repeated as
    often as the others' samples, so that every member weighs the same."""
    from ..runs.ensemble import pool_runs

    return pool_runs([sample_probs(net, x, method, samples, seed=seed + 2 * i).cpu()
                         for i, (net, method) in enumerate(nets)])


def ood_probs(nets: list[tuple[nn.Module, str]], x_in: Tensor, x_out: Tensor, samples: int, seed: int
              ) -> tuple[Tensor, Tensor]:
    """``bbb ood``'s (k x M, B, C) probabilities of the in-distribution inputs ``x_in`` and of the
    out-of-distribution ``x_out``, from the same k sampled networks of each of the M ``(network,
    method)`` (other draws for the OOD set would give each set a Monte Carlo predictive of its own,
    and a set scored against itself an AUROC off 0.5)."""
    return _members_probs(nets, x_in, samples, seed), _members_probs(nets, x_out, samples, seed)


def _load_ood(cfg, dataset: str) -> dict[str, Tensor]:
    """The test split of ``dataset``, preprocessed like the run's own data."""
    from .. import runs as T

    return T.model.load_data(cfg.replace(dataset=dataset, val_size=0))


def _add_run_options(p: argparse.ArgumentParser, writes: str) -> None:
    """The options ``ood`` and ``uncertain`` share: the run directories (one, or an ensemble's with
    ``--out``, the folder of its ``writes``), which checkpoint, data, device, threads, seed."""
    add_run_dirs_arguments(p, writes, "checkpoint to use")
    add_seed(p, help=shared_help("--seed", " of the Monte Carlo draws"))


def add_ood_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Out-of-distribution detection: score the run's in-distribution test set against another "
        "dataset's test set (--ood), or against your own inputs from elsewhere (--ood-data: for any run, "
        "a table's too) by predictive entropy, mutual information (epistemic) and 1 - max "
        "probability (a regression: by its predictive and epistemic sd); AUROC and AUPR of each, OOD as "
        "the positive class. Works for bbb and ivon (weight samples), dropout (MC dropout, same k) and sgd "
        "(softmax only) runs, and bbb laplace folders (samples of the last layer). Writes "
        "RUN_DIR/ood.json and RUN_DIR/ood.png (with matplotlib). Several run directories are scored as "
        "their ensemble (the mean of their predictives; the mutual information holds the members' "
        "disagreement): written to --out DIR."
    )
    p.epilog = ("Example:\n  bbb ood runs/bbb400 --ood fashion-mnist --samples 10\n"
                "  bbb ood runs/sgd-s0 runs/sgd-s1 runs/sgd-s2 --out runs/sgd-ensemble   # a deep ensemble\n"
                "  bbb ood runs/churn --ood-data other_branch.csv   # your own rows from elsewhere")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ood", default=None, choices=IMAGE_DATASETS,
                   help="out-of-distribution test set (default: the other of mnist and fashion-mnist than the "
                        "run's)")
    g.add_argument("--ood-data", default=None, metavar="PATH",
                   help="your own out-of-distribution inputs, read as bbb predict reads them: a CSV with the "
                        "run's columns (the target may be left out), a .npy/.npz array x, or a folder of images; "
                        "scored against the run's test split, for any run (a regression by its predictive sd and "
                        "its epistemic sd)")
    p.add_argument("--samples", type=int, default=10, metavar="K",
                   help=shared_help("--samples", " average: the sampled networks (BBB, MC dropout; default: 10)"))
    _add_run_options(p, "ood.json and ood.png")
    from ..cli.predict import add_moved_data

    add_moved_data(p)


@scoring_locked("ood.json")
def main_ood(args: argparse.Namespace) -> int:
    from ..cli.commands import memory_errors

    if args.ood_data is not None:
        return _ood_of_inputs(args)
    if args.data_file is not None:
        raise UserError("--csv/--npz/--images give a run on your own data its moved file or folder, for "
                        "--ood-data; for MNIST and Fashion-MNIST runs give --data-dir")
    nets, cfg, data, d, method, epochs = _load_networks(args, "ood", "ood.json")
    if args.ood is None:
        others = [d for d in IMAGE_DATASETS if d != cfg.dataset]
        if cfg.dataset not in IMAGE_DATASETS or len(others) != 1:
            raise UserError(f"the run's data set is {cfg.dataset}: name the out-of-distribution test set with "
                            f"--ood ({', '.join(IMAGE_DATASETS)})")
        args.ood = others[0]
    if args.ood == cfg.dataset:
        other = [d for d in IMAGE_DATASETS if d != cfg.dataset]
        raise UserError(f"--ood {args.ood} is the run's own dataset; use --ood {' or '.join(other)}, or leave --ood "
                        "out for the other data set")
    ood = _load_ood(cfg, args.ood)
    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    dev = next(nets[0][0].parameters()).device
    with memory_errors(f"scoring {d}", "fewer --samples or another --device"):
        p_in, p_out = ood_probs(nets, data["test_x"].to(dev), ood["test_x"].to(dev), args.samples, args.seed)
    _write_ood(args, d, {"method": method, "dataset": cfg.dataset, "ood": args.ood}, ood_scores(p_in),
               ood_scores(p_out), SCORE_LABELS, p_in.shape[0], epochs)
    return 0


def _write_ood(args: argparse.Namespace, d: Path, what: dict[str, Any], scores_in: dict[str, Tensor | None],
               scores_out: dict[str, Tensor | None], labels: dict[str, str], samples: int,
               epochs: MemberMarks | None) -> None:
    """ood.json (``what``: method, dataset, ood; the report of the scores of ``samples`` sampled
    networks; an ensemble's members and their epochs) and ood.png into ``d``, and the table on stdout."""
    report = score_report(scores_in, scores_out, labels)
    first = next(v for v in scores_in.values() if v is not None)
    out = {**what, "checkpoint": args.which, "samples": int(samples), "n_in": int(first.shape[0]),
           "n_out": int(next(v for v in scores_out.values() if v is not None).shape[0]), "scores": report}
    if epochs is not None:  # (bbb compare checks them against the members' checkpoints now)
        out["members"] = [str(Path(r)) for r in args.run_dirs]  # as ensemble_folder reads them: runs/a/ is runs/a
        out["member_epochs"] = [e for e, _ in epochs]
        out["member_run_ids"] = [r for _, r in epochs]
    try:  # one ood.json a folder: one against another OOD set is replaced, and said to be
        old = json.loads((d / "ood.json").read_text())
        was, was_md5 = old.get("ood"), old.get("ood_md5")
    except (OSError, ValueError, AttributeError):
        was = was_md5 = None
    atomic_write_json(d / "ood.json", out)
    if was is not None and (was, was_md5) != (what["ood"], what.get("ood_md5")):
        other = " (other inputs of that name)" if was == what["ood"] else ""
        print(f"bbb ood: note: {d / 'ood.json'} held the scores against {was}{other}; they are replaced by these "
              f"against {what['ood']} (bbb ood against {was} again writes them back)", file=sys.stderr)
    written = [d / "ood.json"]
    if plot_ood(scores_in, scores_out, report, d / "ood.png", (str(what["dataset"]), str(what["ood"]))) is not None:
        written.append(d / "ood.png")  # (None: no matplotlib; warned)
    print(f"OOD detection: {what['dataset']} (in) vs {what['ood']} (out), {what['method']}, k={out['samples']}")
    print(f"{'score':<22}{'AUROC':>8}{'AUPR':>8}")

    def fmt(v: float | None) -> str:
        return f"{v:8.4f}" if v is not None else f"{'n/a':>8}"

    for r in report.values():
        print(f"{r['score']:<22}{fmt(r['auroc'])}{fmt(r['aupr'])}")
    print(f"wrote {' and '.join(map(str, written))}")


def _ood_of_inputs(args: argparse.Namespace) -> int:
    """``bbb ood RUN [RUN ...] --ood-data PATH``: the run's test split against your own inputs (read
    as ``bbb predict`` reads them), by the same k sampled networks: a classifier's
    :data:`SCORE_LABELS`, a regression's :data:`REGRESSION_SCORES` (the epistemic sd undefined
    for one network, k = 1)."""
    from ..cli.commands import memory_errors
    from ..cli.common import ensemble_out, one_line_warnings
    from ..cli.predict import read_inputs
    from ..data.arrays import inputs_md5
    from ..runs.ensemble import ensemble_folder, load_ensemble
    from ..runs.referral import split_outputs
    from ..runs.trained import load_model

    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    several = ensemble_out(args, "ood.json") is not None
    device = resolve_device(args.device)
    with one_line_warnings("ood"):
        model: Any = (load_ensemble(args.run_dirs, args.which, device) if several
                      else load_model(args.run_dirs[0], args.which, device))
    d = ensemble_folder(args.out, model.run_dirs, "ood.json") if several else Path(args.run_dirs[0])
    path = Path(args.ood_data)
    notes: list[str] = []
    x_out = read_inputs(model, path, notes)
    for note in notes:  # what was not read of it: never left out silently
        print(f"bbb ood: {note}", file=sys.stderr)
    with torch.no_grad(), memory_errors(f"scoring {d}", "fewer --samples or another --device"):
        out_in, _ = split_outputs(model, "test", args.samples, args.seed, args.data_dir, args.data_file)
        if out_in.numel() == 0:  # (split_outputs gives an empty 1-d tensor then)
            raise UserError(f"{d} has no test rows to score against {path}")
        out_out = model.sample_outputs(x_out, args.samples, args.seed)
    cfg = model.config
    what = {"method": model.describe() if several else model.method, "ood": path.name, "ood_md5": inputs_md5(path),
            "dataset": Path(cfg.data_file).name if cfg.data_file else cfg.dataset}
    if model.task == "regression":
        s_in, s_out = model.regression(out_in), model.regression(out_out)
        one = out_in.shape[0] == 1  # (one network: no spread between networks to score by)
        scores = [{n: None if (one and n == "epistemic_sd") else s[n].cpu() for n in REGRESSION_SCORES}
                  for s in (s_in, s_out)]
        _write_ood(args, d, what, scores[0], scores[1], REGRESSION_SCORES, out_in.shape[0],
                   _epochs(model) if several else None)
        return 0
    p_in, p_out = (torch.softmax(o.double(), -1).float().cpu() for o in (out_in, out_out))
    _write_ood(args, d, what, ood_scores(p_in), ood_scores(p_out), SCORE_LABELS, out_in.shape[0],
               _epochs(model) if several else None)
    return 0


def _test_images(run_dir: str, cfg: Any, test_x: Tensor) -> tuple[Tensor, list[str] | None, list[str] | None]:
    """What :func:`plot_uncertain` draws of the test split: MNIST's flat pixels as they are; a run on
    your own folder of images, its pixels before standardising, (N, C, H, W), with the class names
    and each test row's file (``class/file``)."""
    if cfg.data_file is None:
        return test_x, None, None
    from ..data.arrays import split_files
    from ..data.files import Preprocess
    from ..runs.trained import is_laplace_folder, laplace_run_of

    run = laplace_run_of(Path(run_dir)) if is_laplace_folder(run_dir) else Path(run_dir)
    pre = Preprocess.from_dict(json.loads((run / "config.json").read_text())["preprocess"])
    raw = pre.x.inverse(test_x.double().cpu()) if pre.x is not None else test_x.double().cpu()
    classes = list(pre.classes or [])
    files = split_files(cfg.data_file, classes, cfg.val_fraction, cfg.test_fraction, cfg.split_seed)[2]
    return raw.reshape(len(raw), *pre.feature_shape), classes, files


def _epochs(ensemble: Any) -> MemberMarks:
    """The epochs of the checkpoints of an ensemble's members and the members' run ids (recorded
    for bbb compare's check: a member trained on, or replaced by another run)."""
    return [(m.epoch, run_id_of(m.run_dir)) for m in ensemble.member_models()]


def add_uncertain_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Grids of the test digits on which the sampled networks disagree most (ranked by the share of "
        "votes against the majority class, then by mutual information; by predictive entropy for an sgd "
        "run), and of the most confident errors (ranked by the predicted class's mean probability), each "
        "titled with the label, the vote share of the top classes over the samples and the mutual "
        "information. Writes RUN_DIR/uncertain.json and RUN_DIR/uncertain.png (with matplotlib). Several "
        "run directories vote as their ensemble (each member's samples, a deterministic member's one "
        "network as often as the others' samples: every member weighs the same): written to --out DIR."
    )
    p.epilog = ("Example:\n  bbb uncertain runs/bbb400 --n 64 --samples 30\n"
                "  bbb uncertain runs/sgd-s0 runs/sgd-s1 runs/sgd-s2 --out runs/sgd-ensemble   # a deep ensemble")
    p.add_argument("--n", type=int, default=64, help=f"digits per ranking (default: 64; uncertain.png draws at most "
                   f"{PLOT_MAX} of each)")
    p.add_argument("--samples", type=int, default=None, metavar="K",
                   help=shared_help("--samples", " vote: the sampled networks (default: 30)"))
    _add_run_options(p, "uncertain.json and uncertain.png")
    from ..cli.predict import add_moved_data

    add_moved_data(p)  # (a run on your own folder of images: where it is now, --images DIR)


@scoring_locked("uncertain.json")
def main_uncertain(args: argparse.Namespace) -> int:
    from ..cli.commands import memory_errors

    samples_given, args.samples = args.samples is not None, 30 if args.samples is None else args.samples
    for name in ("n", "samples"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(args, name)}")
    nets, cfg, data, d, method, epochs = _load_networks(args, "uncertain", "uncertain.json")
    warn_samples_unused("uncertain", args.samples, samples_given, [m for _, m in nets], "vote")
    dev = next(nets[0][0].parameters()).device
    with memory_errors(f"scoring {d}", "fewer --samples or another --device"):
        probs = _members_probs(nets, data["test_x"].to(dev), args.samples, args.seed)
    res = most_uncertain(probs, data["test_y"], args.n)
    images, classes, files = _test_images(args.run_dirs[0], cfg, data["test_x"])
    plotted = plot_uncertain(images, data["test_y"], res, d / "uncertain.png", int(probs.shape[0]), classes)
    rows = []
    for group in ("uncertain", "confident_errors"):
        for i in res[group].tolist():
            rows.append({"group": group, "index": i, "label": int(data["test_y"][i]),
                         "prediction": int(res["prediction"][i]), "confidence": float(res["confidence"][i]),
                         "disagreement": float(res["disagreement"][i]), "dissent": float(res["dissent"][i]),
                         "votes": [round(float(v), 4) for v in res["votes"][i]],
                         **({"file": files[i], "label_name": classes[int(data["test_y"][i])],
                             "prediction_name": classes[int(res["prediction"][i])]} if files and classes else {})})
    disputed, errors = ranking_titles(int(probs.shape[0]))
    out: dict[str, Any] = {"method": method, "checkpoint": args.which, "samples": int(probs.shape[0]), "digits": rows,
                           "ranking": {"uncertain": disputed, "confident_errors": errors}}
    if epochs is not None:  # (bbb compare checks them against the members' checkpoints now)
        out["members"] = [str(Path(r)) for r in args.run_dirs]  # as ensemble_folder reads them: runs/a/ is runs/a
        out["member_epochs"] = [e for e, _ in epochs]
        out["member_run_ids"] = [r for _, r in epochs]
    atomic_write_json(d / "uncertain.json", out)
    written = ([d / "uncertain.png"] if plotted is not None else []) + [d / "uncertain.json"]  # None: no matplotlib
    drawn = ("" if plotted is None or max(len(res["uncertain"]), len(res["confident_errors"])) <= PLOT_MAX
             else f"; the PNG draws the first {PLOT_MAX} of each, the JSON lists all")
    print(f"wrote {' and '.join(map(str, written))} ({len(res['uncertain'])} disputed, "
          f"{len(res['confident_errors'])} confident errors{drawn})")
    return 0
