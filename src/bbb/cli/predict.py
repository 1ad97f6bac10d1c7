"""Predict with uncertainty on new inputs of a trained run.

INPUT is a CSV with the run's feature columns (its target column, if there, is reported beside
the prediction), a .npy array or an .npz with an array x (and y, reported as the target), or a
folder of PNG/JPEG images (for a run trained on 28x28 digits or clothes: converted to grey,
resized to 28x28 and scaled as the training images were; needs Pillow, the ``images`` extra).

One row per input: the prediction; a classifier's probability of each class, the predictive
entropy and the mutual information (nats; the epistemic part); a regressor's predictive mean,
sd, 95% interval and the sd's epistemic and aleatoric parts, in the target's units. ``refer``
is true where the uncertainty (a classifier's entropy, a regressor's sd) is above a threshold
chosen on the run's validation set: the largest share of predictions kept whose error among
the kept is at most ``--target-error`` (classification: the error rate; regression: the RMSE).
The default target is half the error of all validation predictions: no one number suits every
task (an easy table's error is near 0, a hard one's 30%), while halving the error is a trade-off
that means the same on any; the threshold, the validation coverage it keeps and the error among
the kept are printed, so a user sees what the referral costs and can set their own target.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import UserError
from .common import add_device, add_quiet, add_seed, add_threads, add_which, shared_help

EXAMPLE = ("bbb predict runs/price new_rows.csv --out predictions.csv --samples 20\n"
           "  bbb predict runs/bbb400 my_digits/ --target-error 0.01     # a folder of 28x28 PNGs")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by bbb train")
    p.add_argument("input", metavar="INPUT", help="a CSV file, a .npy/.npz array or a folder of PNG/JPEG images")
    p.add_argument("--out", metavar="FILE.csv", default=None,
                   help="output file: the predictions as CSV (default: print them)")
    p.add_argument("--samples", type=int, default=10, metavar="K",
                   help=shared_help("--samples", " average (default: 10)"))
    p.add_argument("--target-error", type=float, default=None, metavar="E",
                   help="refer inputs so that the error among the kept validation predictions is at most E "
                        "(classification: error rate, e.g. 0.01; regression: RMSE in the target's units; "
                        "default: half the error of all validation predictions)")
    p.add_argument("--no-refer", action="store_true",
                   help="leave out the refer column (it needs the run's validation data)")
    add_which(p, "best", "checkpoint: best (by validation error) or last")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="data folder of the run's validation data (default: the run's)")
    add_device(p)
    add_seed(p, help="random seed of the Monte Carlo samples")
    add_threads(p)
    add_quiet(p, "the predictions")


def _read_input(model: Any, path: Path) -> tuple[Any, list[tuple[str, str]], list[str] | None]:
    """(network inputs, [(id column name, id)], targets as text or None) of INPUT."""
    import numpy as np

    from ..data.images import load_image_folder

    if path.is_dir():
        if model.preprocess.kind != "image":
            raise UserError(f"{path} is a folder of images, but {model.run_dir} was trained on "
                            f"{model.preprocess.trained_on()}")
        h, w = model.preprocess.feature_shape[-2:]
        names, pixels, others = load_image_folder(path, (h, w))
        if others:
            print(f"bbb predict: note: {len(others)} file(s) in {path} are not .png/.jpg/.jpeg and were not read "
                  f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''})", file=sys.stderr)
        return model.encode(pixels), [("file", n) for n in names], None
    if not path.is_file():
        raise UserError(f"{path}: no such file or folder")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        x, header, rows = model.encode_csv(path)
        target = model.preprocess.target
        ys = [r[header.index(target)] for r in rows] if target is not None and target in header else None
        return x, [("row", str(i)) for i in range(1, len(rows) + 1)], ys
    if suffix in (".npy", ".npz"):
        try:
            if suffix == ".npy":
                arrays = {"x": np.load(path, allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as z:
                    arrays = {k: z[k] for k in z.files}
        except Exception as e:  # noqa: BLE001 - a damaged file is one user problem
            raise UserError(f"{path}: cannot be read as a NumPy file ({' '.join(str(e).split())[:120]})") from None
        if "x" not in arrays:
            raise UserError(f"{path}: no array 'x' (found: {', '.join(arrays) or 'none'})")
        x = model.encode(arrays["x"])
        y = arrays.get("y")
        ys = None if y is None else [str(v) for v in np.asarray(y).reshape(len(y), -1)[:, 0].tolist()]
        return x, [("row", str(i)) for i in range(1, x.shape[0] + 1)], ys
    raise UserError(f"{path}: give a .csv, .npy or .npz file or a folder of images")


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def main(args: argparse.Namespace) -> int:
    import torch

    from ..devices import resolve_device
    from ..io import atomic_write_text, csv_text
    from ..runs.trained import load_model, refer_threshold, uncertainty_scores

    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    if args.target_error is not None and not (math.isfinite(args.target_error) and args.target_error >= 0):
        raise UserError(f"--target-error must be a number >= 0, got {args.target_error}")
    model = load_model(args.run_dir, args.which, resolve_device(args.device))
    x, ids, ys = _read_input(model, Path(args.input))
    with torch.no_grad():
        s = uncertainty_scores(model, model.sample_outputs(x, args.samples, args.seed))
        referral = None
        if not args.no_refer:
            try:
                referral = refer_threshold(model, args.target_error, args.samples, args.seed, args.data_dir)
            except UserError as e:  # the run's data moved, say: the predictions need not wait for it
                raise UserError(f"{e} (the refer column needs the run's validation data; --no-refer leaves it "
                                "out)") from None
    columns = [ids[0][0]] + (["target"] if ys is not None else []) + ["prediction"]
    rows: list[dict[str, Any]] = []
    score = s["score"].cpu()
    if model.task == "regression":
        columns += ["sd", "lower_95", "upper_95", "epistemic_sd", "aleatoric_sd"]
    else:
        labels = model.classes or []
        columns += [f"p_{c}" for c in labels] + ["entropy", "mutual_information"]
    if referral is not None:
        columns.append("refer")
    for i, (key, ident) in enumerate(ids):
        row: dict[str, Any] = {key: ident}
        if ys is not None:
            row["target"] = ys[i]
        if model.task == "regression":
            row["prediction"] = _fmt(float(s["mean"][i]))
            for c, k in (("sd", "sd"), ("lower_95", "lower"), ("upper_95", "upper"),
                         ("epistemic_sd", "epistemic_sd"), ("aleatoric_sd", "aleatoric_sd")):
                row[c] = _fmt(float(s[k][i]))
        else:
            row["prediction"] = labels[int(s["prediction"][i])]
            for j, c in enumerate(labels):
                row[f"p_{c}"] = _fmt(float(s["probs"][i, j]))
            row["entropy"] = _fmt(float(s["entropy"][i]))
            row["mutual_information"] = _fmt(float(s["mutual_information"][i]))
        if referral is not None:
            row["refer"] = "true" if float(score[i]) > referral.threshold else "false"
        rows.append(row)
    text = csv_text(columns, rows, value=lambda v: "" if v is None else v)
    if args.out:
        atomic_write_text(Path(args.out), text)
    else:
        sys.stdout.write(text)
    if referral is not None:
        unit = "RMSE" if model.task == "regression" else "error"
        said = "the default: half the error of all" if referral.default else "--target-error"
        n_ref = sum(r["refer"] == "true" for r in rows)
        rule = (f"{referral.score} above {referral.threshold:.4g}" if math.isfinite(referral.threshold)
                else "no share of the validation predictions meets the target")
        kept = (f"it keeps {100 * referral.coverage:.1f}% of them with {unit} {referral.kept_error:.4g}"
                if referral.coverage > 0 else "it keeps none")
        print(f"bbb predict: refer {n_ref} of {len(rows)} inputs ({rule}); chosen on the run's {referral.n} "
              f"validation inputs for {unit} <= {referral.target_error:.4g} among the kept ({said}, "
              f"{referral.full_error:.4g}): {kept}", file=sys.stderr)
    if args.out and not args.quiet:
        print(f"wrote {args.out} ({len(rows)} rows)", file=sys.stderr)
    return 0
