"""Predict with uncertainty on new inputs of a trained run.

INPUT is a CSV with the run's feature columns (its target column, if there, is carried along), a
.npy array or an .npz with an array x (and y, reported as the target), or a folder of PNG/JPEG
images (for a run trained on images: MNIST-like digits or clothes, your own folder or image
arrays; read as the training images were: grey or in colour, resized, scaled; needs Pillow, the
``images`` extra). A folder of class subfolders and no images of its own, laid out as a training
folder, is read whole: each image labelled by its subfolder.

One row per input, in the input's order. First what joins it back to the input: a CSV's own
columns (all of them, or ``--id COLUMN`` and the target column; one named like an output column,
a target ``prediction`` say, as ``input_prediction``), an array's ``row`` (1 = the first) and
``target``, or an image's ``file`` (and ``label``, its subfolder). Then the prediction; a classifier's probability
of each class, the predictive entropy and the mutual information (nats; the epistemic part); a
regressor's predictive mean, sd, 95% interval and the sd's epistemic and aleatoric parts, in the
target's units. A CSV's ``warning`` names what the network never saw in a row: a category unseen
in training is encoded as none of the known ones, the row predicted, flagged and referred
(``--unseen error`` refuses the file instead).

``refer`` is true where the uncertainty (a classifier's entropy, a regressor's sd) is above a
threshold chosen on the run's validation set. The default keeps 80% of the validation
predictions, the most certain (``--coverage C`` another share): a coverage is reachable on any
task, while an error target is not where the noise is irreducible (no share of a noisy
regression's predictions has an RMSE below the noise). ``--target-error E`` keeps instead the
largest share whose error among the kept is at most E, with a warning where no share reaches
it. The threshold, the validation coverage it keeps and the error among the kept are printed.

Several run directories predict as their ensemble (:func:`bbb.runs.load_ensemble`: runs of the
same data and split, e.g. other ``--seed`` values; the mean of their predictives, each member's k
samples; the mutual information holds the members' disagreement too; the referral threshold is
chosen on the ensemble's scores of the shared validation split).

``--out FILE`` refuses an existing file unless ``--overwrite`` is given, and never replaces the
input, the run's data file or a file of the run directory; it is written atomically.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import UserError
from .common import (
    add_device,
    add_quiet,
    add_seed,
    add_threads,
    add_which,
    one_line_warnings,
    shared_help,
    unfinished_warning,
    warn_samples_unused,
)

EXAMPLE = ("bbb predict runs/price new_rows.csv --out predictions.csv --samples 20\n"
           "  bbb predict runs/price-s0 runs/price-s1 runs/price-s2 new_rows.csv   # an ensemble of 3 runs\n"
           "  bbb predict runs/price new_rows.csv --id customer_id --coverage 0.9\n"
           "  bbb predict runs/bbb400 my_digits/ --target-error 0.01     # a folder of 28x28 PNGs")

#: what ``--unseen`` does with a category of a CSV's text column that training never saw
UNSEEN = ("flag", "error")


def add_moved_data(p: argparse.ArgumentParser) -> None:
    """``--csv FILE`` / ``--npz FILE`` / ``--images DIR``: where the data of a run on your own data
    are now (bbb evaluate, bbb prune, bbb predict); their MD5 must be the run's."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--csv", dest="data_file", metavar="FILE", default=None,
                   help="the run's training CSV where it is now, if it moved (its MD5 must be the run's: the same "
                        "file; default: the path the run recorded)")
    g.add_argument("--npz", dest="data_file", metavar="FILE", default=None,
                   help="the same for a run trained on an .npz file")
    g.add_argument("--images", dest="data_file", metavar="DIR", default=None,
                   help="the same for a run trained on a folder of images (the same class subfolders and images)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                   help="a directory written by bbb train; several: their ensemble, the mean of their predictives "
                        "(runs of the same data and split, e.g. other --seed values)")
    p.add_argument("input", metavar="INPUT",
                   help="a CSV file, a .npy/.npz array or a folder of PNG/JPEG images (or of class subfolders of "
                        "them: each image labelled by its subfolder)")
    p.add_argument("--out", metavar="FILE.csv", default=None,
                   help="output file: the predictions as CSV (default: print them); an existing file is refused "
                        "without --overwrite, the input always")
    p.add_argument("--overwrite", action="store_true", help="replace the --out file if it exists")
    p.add_argument("--id", dest="id_column", metavar="COLUMN", default=None,
                   help="carry only this column of the input CSV (and its target column) to the output, to join "
                        "the predictions back (default: carry every input column)")
    p.add_argument("--samples", type=int, default=None, metavar="K",
                   help=shared_help("--samples", " average (default: 10)"))
    rule = p.add_mutually_exclusive_group()
    rule.add_argument("--coverage", type=float, default=None, metavar="C",
                      help="refer all but the share C of the predictions, the most certain kept: the threshold keeps "
                           "C of the validation predictions (default: 0.8; a share is reachable on any task, while "
                           "an error target is not where the noise is irreducible)")
    rule.add_argument("--target-error", type=float, default=None, metavar="E",
                      help="instead, keep the largest share of the validation predictions whose error is at most E "
                           "(classification: error rate, e.g. 0.01; regression: RMSE in the target's units); "
                           "where the noise is irreducible no share may reach E: then every input is referred, "
                           "with a warning")
    p.add_argument("--no-refer", action="store_true",
                   help="leave out the refer column (it needs the run's validation data)")
    p.add_argument("--unseen", choices=UNSEEN, default="flag",
                   help="a category of a CSV text column unseen in training: flag (predict the row with the "
                        "category as none of the known ones, name it in the warning column, refer it) or error "
                        "(refuse the file) (default: flag)")
    add_which(p, None, "checkpoint: best (the run's best epoch, by its --select-by) or last")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="data folder of an MNIST-like run's validation data (default: the run's)")
    add_moved_data(p)
    add_device(p)
    add_seed(p, help="random seed of the Monte Carlo samples")
    add_threads(p)
    add_quiet(p, "the predictions")


class _Input:
    """What INPUT gives: the encoded inputs ``x``, the columns that join the output back to it
    (``columns``, one list of values per input in ``values``) and a CSV's ``warnings``, one text
    per input ("" where none; None for other inputs); ``notes``: lines for stderr, printed once
    the predictions are written."""

    def __init__(self, x: Any, columns: list[str], values: list[list[str]],
                 warnings: list[str] | None = None, notes: list[str] | None = None) -> None:
        self.x, self.columns, self.values, self.warnings = x, columns, values, warnings
        self.notes = notes or []


def _read_csv_input(model: Any, path: Path, id_column: str | None, unseen: str, refer: bool) -> _Input:
    from ..data.files import read_csv, row_number

    found: list[tuple[int, str, str]] = []
    outside: list[tuple[int, str, str]] = []
    x, header, rows = model.encode_csv(path, unseen=found if unseen == "flag" else None, outside=outside)
    empty: list[int] = []
    numbers: list[int] = []  # each row's number in the file, empty rows counted, as errors name them
    read_csv(path, empty, numbers)
    target = model.preprocess.target
    if id_column is None:
        keep = list(range(len(header)))
    elif id_column not in header:
        raise UserError(f"--id {id_column}: {path} has no such column (its columns: {', '.join(header)[:300]})")
    else:
        keep = [header.index(id_column)] + ([header.index(target)] if target in header and target != id_column
                                            else [])
    warnings = [""] * len(rows)
    folded = {(c["name"], k.casefold()): k for c in model.preprocess.columns for k in c.get("categories", [])}
    texts = [(row, f"category {value[:40]!r} of column {column!r} unseen in training" + (
        f" (training had {folded[column, value.casefold()][:40]!r}, in another case)"
        if (column, value.casefold()) in folded else "")) for row, column, value in found]
    for row, text in sorted(texts, key=lambda t: t[0]):
        warnings[row - 1] = f"{warnings[row - 1]}; {text}" if warnings[row - 1] else text
    notes = []
    if found:
        rows_text = ", ".join(str(row_number(numbers, r)) for r in sorted({r for r, _, _ in found})[:5])
        n = len({r for r, _, _ in found})
        first = min(found, key=lambda f: f[0])  # the first row's (found: column by column)
        notes.append(f"bbb predict: warning: {n} row(s) of {path} have a category unseen in training (row {rows_text}"
              f"{', ...' if n > 5 else ''}; first: {first[2][:40]!r} in column {first[1]!r}): predicted with it as "
              f"none of the known categories, named in the warning column{' and referred' if refer else ''} "
              "(--unseen error refuses the file instead)")
    flagged, more = _outside_notes(model, path, outside, numbers or list(range(1, len(rows) + 1)), refer)
    for i, text in enumerate(flagged or []):
        if text:
            warnings[i] = f"{warnings[i]}; {text}" if warnings[i] else text
    notes += more
    if empty:  # an output row per input row: one joined back by position would shift past a skipped one
        notes.append(f"bbb predict: note: {len(empty)} empty row(s) of {path} between its rows (row "
                     f"{', '.join(map(str, empty[:5]))}{', ...' if len(empty) > 5 else ''}; 1 = the first after the "
                     "header) were skipped: the output has no row for them, so it lines up with the input's filled "
                     "rows, not its lines")
    return _Input(x, [header[j] for j in keep], [[r[j] for j in keep] for r in rows], warnings, notes)


def _outside_notes(model: Any, path: Path, outside: list[tuple[int, str, str]], numbers: list[int], refer: bool,
                   files: list[str] | None = None) -> tuple[list[str] | None, list[str]]:
    """The warning of each input (None: the run records no training range to check them against)
    and the lines for stderr, from ``outside`` (:meth:`bbb.data.files.Preprocess.encode_table`'s or
    ``outside_range``'s): a value outside the training range is predicted by extrapolation, where a
    network's confidence means nothing (it may even grow). ``files``: a folder's image files, named
    in the line instead of row numbers (the output's ``file`` column)."""
    pre = model.preprocess
    unchecked = [c["name"] for c in pre.columns if c["kind"] == "numeric" and not c.get("range")]
    if pre.kind == "arrays" and (pre.feature_range if len(pre.feature_shape) == 1 else pre.array_range) is None:
        unchecked = ["x"]
    notes = []
    if unchecked:
        notes.append(f"bbb predict: note: {model.run_dir} does not record its training rows' range of "
                     f"{'its features' if pre.kind == 'arrays' else 'column ' + repr(unchecked[0])}"
                     f"{' and others' if len(unchecked) > 1 else ''} (trained by an earlier bbb): a value outside "
                     "it is not flagged; train the run again to have it checked")
    checked = pre.kind == "table" or pre.feature_range is not None or pre.array_range is not None
    warnings = [""] * len(numbers) if checked else None
    for row, _, text in outside:
        if warnings is not None:
            warnings[row - 1] = f"{warnings[row - 1]}; {text}" if warnings[row - 1] else text
    if outside:
        rows = sorted({r for r, _, _ in outside})
        first = min(outside, key=lambda o: o[0])  # the first row's (outside: column by column)
        which = ", ".join(files[r - 1] if files else str(numbers[r - 1]) for r in rows[:5])
        what = ("image(s)", "the training images' range of pixel values (") if files else \
            ("row(s)", "the training rows' range (row ")
        notes.append(f"bbb predict: warning: {len(rows)} {what[0]} of {path} have a value outside {what[1]}{which}"
                     f"{', ...' if len(rows) > 5 else ''}; first: {first[2]}): predicted by extrapolation, named "
                     f"in the warning column{' and referred' if refer else ''}")
    return warnings, notes


def read_inputs(model: Any, path: Path, notes: list[str] | None = None) -> Any:
    """The inputs of ``path`` (a CSV with the run's columns, a .npy/.npz array ``x``, a folder of
    images) encoded for ``model`` (a loaded run or ensemble), as ``bbb predict`` reads them. Given a
    list ``notes``, what was not read (a folder's other files and subfolders, a CSV's empty rows)
    is appended to it, one line each, without the command's name."""
    got = _read_input(model, path, None, "flag", False)
    if notes is not None:
        notes += [n.split(": ", 1)[1] for n in got.notes if n.startswith("bbb predict: note: ")]
    return got.x


def _read_input(model: Any, path: Path, id_column: str | None, unseen: str, refer: bool) -> _Input:
    import numpy as np

    from ..data.images import is_image_file, load_image_folder, load_labelled_images

    if id_column is not None and not (path.is_file() and path.suffix.lower() == ".csv"):
        raise UserError(f"--id names a column of a CSV input; {path} is not a .csv file")
    if unseen != "flag" and not (path.is_file() and path.suffix.lower() == ".csv"):
        raise UserError(f"--unseen {unseen} applies to the text columns of a CSV input; {path} is not a .csv file: "
                        "leave it out")
    if path.is_dir():
        pre = model.preprocess
        shape = list(pre.feature_shape)
        images = pre.kind == "arrays" and (len(shape) == 2 or (len(shape) == 3 and shape[0] in (1, 3)))
        if pre.kind != "image" and not images:
            raise UserError(f"{path} is a folder of images, but {model.run_dir} was trained on {pre.trained_on()}"
                            + (f" of shape {tuple(shape)}, neither grey (1 channel) nor colour (3): give them as an "
                               ".npz of that shape" if pre.kind == "arrays" and len(shape) == 3 else ""))
        h, w = shape[-2:]
        warnings: list[str] = []
        colour = len(shape) == 3 and shape[0] == 3
        labels: list[str] | None = None
        if not any(is_image_file(p) for p in path.iterdir()) and \
                any(p.is_dir() and not p.name.startswith(".") for p in path.iterdir()):
            # laid out as a training folder (one subfolder per class): every subfolder's images, labelled by it
            names, pixels, others, labels = load_labelled_images(path, (h, w), warnings, colour)
        else:
            names, pixels, others = load_image_folder(path, (h, w), warnings, colour)
        if pre.kind != "image":  # (dark on light is MNIST's mismatch, not a run's on its own images; nor a transparent
            # background, where most of its training images had one, read alike)
            same = ("a light background", "a transparent") if pre.source.get("transparent") else ("a light background",)
            warnings = ["" if t.startswith(same) else t for t in warnings]
        notes = [f"bbb predict: note: {len(others)} file(s) or folder(s) in {path} were not read "
                 f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): only "
                 f"{'its subfolders' if labels is not None else 'its'} own .png/.jpg/.jpeg files are"] if others else []
        odd = [(n, t) for n, t in zip(names, warnings) if t]
        if odd:  # predicted all the same, but never silently: named, and referred as an unseen category is
            notes.append(f"bbb predict: warning: {len(odd)} image(s) of {path} are unlike the training images "
                         f"(first: {odd[0][0]}: {odd[0][1].split(':')[0]}): predicted, named in the warning column"
                         f"{' and referred' if refer else ''}")
        pixels = pixels.reshape(len(pixels), *shape)
        flags = None
        if pre.kind == "arrays":  # an .npz run's range (0..1 floats?) against the 0..255 pixels read
            flags, range_notes = _outside_notes(model, path, pre.outside_range(pixels), list(range(1, len(names) + 1)),
                                                refer, names)
            notes += range_notes
        if flags is not None:
            warnings = [f"{a}; {b}" if a and b else a or b for a, b in zip(warnings, flags)]
        shown = warnings if odd or any(flags or ()) else None
        if labels is not None:  # (the subfolder each came from: its label, as an .npz's y is its target)
            return _Input(model.encode(pixels), ["file", "label"], [[n, t] for n, t in zip(names, labels)], shown,
                          notes)
        return _Input(model.encode(pixels), ["file"], [[n] for n in names], shown, notes)
    if not path.is_file():
        raise UserError(f"{path}: no such file or folder")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv_input(model, path, id_column, unseen, refer)
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
        try:
            x = model.encode(arrays["x"])
        except UserError as e:  # (named "input", or not at all: name the file given)
            raise UserError(f"{path}{': x' if suffix == '.npz' else ''}: {str(e).removeprefix('input: ')}") from None
        y = arrays.get("y")
        rows = [[str(i)] for i in range(1, x.shape[0] + 1)]
        flags, notes = _outside_notes(model, path, model.preprocess.outside_range(arrays["x"]),
                                      list(range(1, x.shape[0] + 1)), refer)
        if y is None:
            return _Input(x, ["row"], rows, flags, notes)
        y = np.asarray(y)
        if y.shape not in ((x.shape[0],), (x.shape[0], 1)):  # else rows past the shorter were dropped, silently
            raise UserError(f"{path}: y of shape {y.shape} does not fit x's {x.shape[0]} inputs; y holds one target "
                            f"per input, ({x.shape[0]},) (or leave y out)")
        ys = [str(v) for v in y.reshape(-1).tolist()]
        if model.task == "classification":  # a y of ints for a run of float labels: 3 is class '3.0'
            from ..data.table_checks import number

            label = {number(c): c for c in model.classes or [] if number(c) is not None}
            ys = [label.get(number(v), v) for v in ys]
        return _Input(x, ["row", "target"], [r + [t] for r, t in zip(rows, ys)], flags, notes)
    from ..data.images import IMAGE_SUFFIXES

    raise UserError(f"{path}: give a .csv, .npy or .npz file or a folder of images" + (
        "; a table separated by tabs or semicolons is read as a CSV: name it .csv"
        if suffix in (".tsv", ".tab", ".txt") else
        f"; one image is read from a folder: put it in one and give the folder ({path.parent}/ reads every image "
        "beside it)" if suffix in IMAGE_SUFFIXES else ""))


def _carried_names(carried: list[str], outputs: list[str]) -> list[str]:
    """The names the input's carried columns get in the output: each as it is, but one with the
    name of an output column (a target called ``prediction`` or ``sd``) as ``input_NAME`` (more
    ``input_`` prefixes until the name is free)."""
    taken = set(carried) | set(outputs)
    names = []
    for c in carried:
        name = c
        while c in outputs and name in taken:
            name = f"input_{name}"
        taken.add(name)
        names.append(name)
    return names


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def check_out(out: Path, overwrite: bool, input_path: Path, run_dirs: list[Path],
              data_files: list[str | None]) -> None:
    """Refuse an ``--out`` that would lose a file: the input, the run's data file (where the run
    recorded it, and where ``--csv``/``--npz`` says it is now) or a file of a run directory (even
    with ``--overwrite``; and a name of the files bbb writes in one, existing or not), a folder, or
    any existing file without ``--overwrite``. Checked before
    anything is computed."""
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; give a file name, e.g. {out / 'predictions.csv'}")
    if _same(out, input_path):
        raise UserError(f"--out {out} is the input {input_path}; give another file (--overwrite never replaces "
                        "the input)")
    from ..data.images import IMAGE_SUFFIXES

    if input_path.is_dir() and out.exists() and _same(out.parent, input_path) and out.suffix.lower() in IMAGE_SUFFIXES:
        raise UserError(f"--out {out} is an image of the input folder {input_path}; give another file (--overwrite "
                        "never replaces the input)")
    if any(f is not None and _same(out, Path(f)) for f in data_files):
        raise UserError(f"--out {out} is the file the run was trained on; give another file")
    for run_dir in run_dirs:
        if out.exists() and run_dir.resolve() in out.resolve().parents:
            raise UserError(f"--out {out} is a file of the run directory {run_dir}; give a file outside it")
    from ..runs.rundir import RUN_FILES

    home = out.resolve().parent
    own = any(run_dir.resolve() == home for run_dir in run_dirs)
    if out.name in RUN_FILES and (own or any((home / f).is_file() for f in ("last.pt", "best.pt"))):
        # (one that does not exist yet too: a later bbb evaluate would write it, or read these predictions)
        whose = "" if own else " (another run's)"
        raise UserError(f"--out {out} is a file name of the run directory {home}{whose} ({out.name}, which bbb "
                        "writes there); give another name, or a file outside it")
    if out.exists() and not overwrite:
        raise UserError(f"--out {out} exists; give --overwrite to replace it, or another file")


def _fmt(v: float) -> str:
    return f"{v + 0.0:.6g}"  # (+ 0.0: an entropy of -0.0 is written 0)


def _fmt_at(v: float, sd: float) -> str:
    """A regression's location (its mean, an interval's end) to 6 significant digits, or more
    where 6 would round it by more than a hundredth of its sd: a target far from 0 (1234025.3 with
    sd 0.7) was written 1.23403e+06, off by more than its sd, its interval's ends one number."""
    if not (math.isfinite(v) and math.isfinite(sd) and sd > 0 and v != 0):
        return _fmt(v)
    digits = math.floor(math.log10(abs(v))) - math.floor(math.log10(sd)) + 3
    return f"{v:.{max(6, min(digits, 17))}g}"


def _referral_text(referral: Any, task: str, n_ref: int, n: int, whose: str = "the run's") -> str:
    unit = "RMSE" if task == "regression" else "error"
    rule = (f"{referral.score} above {referral.threshold:.4g}" if math.isfinite(referral.threshold)
            else "the threshold keeps none")
    if referral.target_coverage is not None:
        how = (f"to keep {100 * referral.target_coverage:g}% of them, the most certain "
               f"({'the default; --coverage C or --target-error E to change' if referral.default else '--coverage'})")
    else:
        how = f"for {unit} <= {referral.target_error:.4g} among the kept (--target-error)"
    kept = (f"it keeps {100 * referral.coverage:.1f}% of them with {unit} {referral.kept_error:.4g}"
            if referral.coverage > 0 else "it keeps none")
    text = (f"bbb predict: refer {n_ref} of {n} inputs ({rule}); chosen on {whose} {referral.n} validation inputs "
            f"{how}: {kept} (all of them: {unit} {referral.full_error:.4g})")
    if referral.coverage == 0 and referral.target_coverage is not None:  # (it spoke of --target-error here)
        text += (f"\nbbb predict: warning: the most certain validation inputs tie at one {referral.score} that "
                 f"holds more than {100 * referral.target_coverage:g}% of them (an uncertainty that does not vary: "
                 "--method sgd with --likelihood homoscedastic, say), so every input is referred; --coverage 1 "
                 "keeps them, --no-refer leaves the column out")
    elif referral.coverage == 0:
        text += (f"\nbbb predict: warning: no share of the validation predictions reaches {unit} <= "
                 f"{referral.target_error if referral.target_error is not None else 0:.4g} (the noise may be "
                 "irreducible), so every input is referred; give a larger --target-error, or --coverage C")
    return text


def main(args: argparse.Namespace) -> int:
    import torch

    from ..devices import resolve_device
    from ..io import atomic_write_text, csv_text
    from ..runs.ensemble import TrainedEnsemble, load_ensemble
    from ..runs.model import point_data
    from ..runs.referral import refer_threshold, uncertainty_scores
    from ..runs.trained import load_model

    samples_given, args.samples = args.samples is not None, 10 if args.samples is None else args.samples
    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    if args.target_error is not None and not (math.isfinite(args.target_error) and args.target_error >= 0):
        raise UserError(f"--target-error must be a number >= 0, got {args.target_error}")
    if args.coverage is not None and not (math.isfinite(args.coverage) and 0 < args.coverage <= 1):
        raise UserError(f"--coverage must be a share in (0, 1], e.g. 0.8, got {args.coverage}")
    if args.no_refer:
        unused = [f for f, v in (("--coverage", args.coverage), ("--target-error", args.target_error),
                                 ("--data-dir", args.data_dir), ("--csv/--npz/--images", args.data_file))
                  if v is not None]
        if unused:
            raise UserError(f"{unused[0]} serves the refer column, which --no-refer leaves out: give one of the two")
    given = Path(args.input)
    if given.is_dir() and any((given / f).is_file() for f in ("config.json", "last.pt", "best.pt")):
        raise UserError(f"{given} is a run directory, not inputs: give the inputs to predict on last, bbb predict "
                        "RUN [RUN ...] INPUT")
    device = resolve_device(args.device)
    with one_line_warnings("predict"):
        model = (load_model(args.run_dirs[0], args.which, device) if len(args.run_dirs) == 1
                 else load_ensemble(args.run_dirs, args.which, device))
    methods = model.methods if isinstance(model, TrainedEnsemble) else [model.method]
    warn_samples_unused("predict", args.samples, samples_given, methods, "prediction")  # (as train's --eval-samples)
    for run_dir in args.run_dirs:  # a run stopped part way predicts from the epochs it had: said, not silent
        if (line := unfinished_warning("predict", run_dir, args.which)) is not None:
            print(line, file=sys.stderr)
    if not args.no_refer:  # a --data-dir or --csv/--npz that does not fit the run: refused before any work
        point_data(model.config, args.data_dir, args.data_file)
    out = Path(args.out) if args.out else None
    if out is not None:
        check_out(out, args.overwrite, Path(args.input), [Path(d) for d in args.run_dirs],
                  [model.config.data_file, args.data_file])
    got = _read_input(model, Path(args.input), args.id_column, args.unseen, not args.no_refer)
    with torch.no_grad():
        s = uncertainty_scores(model, model.sample_outputs(got.x, args.samples, args.seed))
        referral = None
        if not args.no_refer:
            try:
                referral = refer_threshold(model, args.target_error, args.samples, args.seed, args.data_dir,
                                           coverage=args.coverage, data_file=args.data_file)
            except UserError as e:  # the run's data moved, say: the predictions need not wait for it
                raise UserError(f"{e} (the refer column needs the run's validation data; --no-refer leaves it "
                                "out)") from None
    columns = list(got.columns) + ["prediction"]
    score = s["score"].cpu()
    if model.task == "regression":
        columns += ["sd", "lower_95", "upper_95", "epistemic_sd", "aleatoric_sd"]
    else:
        labels = model.classes or []
        columns += [f"p_{c}" for c in labels] + ["entropy", "mutual_information"]
    if got.warnings is not None:
        columns.append("warning")
    if referral is not None:
        columns.append("refer")
    outputs = columns[len(got.columns):]
    renamed = _carried_names(got.columns, outputs)
    if renamed != got.columns:
        pairs = [f"{a!r} as {b!r}" for a, b in zip(got.columns, renamed) if a != b]
        got.notes.append(f"bbb predict: note: {args.input}: column {', '.join(pairs)} in the output (its name "
                         "is an output column's)")
        columns[:len(got.columns)] = got.columns = renamed
    rows: list[dict[str, Any]] = []
    for i, values in enumerate(got.values):
        row: dict[str, Any] = dict(zip(got.columns, values))
        if model.task == "regression":
            sd = float(s["sd"][i])
            row["prediction"] = _fmt_at(float(s["mean"][i]), sd)
            for c, k in (("sd", "sd"), ("lower_95", "lower"), ("upper_95", "upper"),
                         ("epistemic_sd", "epistemic_sd"), ("aleatoric_sd", "aleatoric_sd")):
                row[c] = _fmt_at(float(s[k][i]), sd) if c in ("lower_95", "upper_95") else _fmt(float(s[k][i]))
        else:
            row["prediction"] = labels[int(s["prediction"][i])]
            for j, c in enumerate(labels):
                row[f"p_{c}"] = _fmt(float(s["probs"][i, j]))
            row["entropy"] = _fmt(float(s["entropy"][i]))
            row["mutual_information"] = _fmt(float(s["mutual_information"][i]))
        if got.warnings is not None:
            row["warning"] = got.warnings[i]
        if referral is not None:  # an input unlike any seen in training is handed over whatever its score
            unseen = got.warnings is not None and got.warnings[i] != ""
            row["refer"] = "true" if unseen or float(score[i]) > referral.threshold else "false"
        rows.append(row)
    text = csv_text(columns, rows, value=lambda v: "" if v is None else v)
    if out is not None:
        atomic_write_text(out, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    for note in got.notes:
        print(note, file=sys.stderr)
    if referral is not None:
        whose = "the run's" if len(args.run_dirs) == 1 else f"the {len(args.run_dirs)} runs' shared"
        print(_referral_text(referral, model.task, sum(r["refer"] == "true" for r in rows), len(rows), whose),
              file=sys.stderr)
    if out is not None and not args.quiet:
        print(f"wrote {out} ({len(rows)} rows)", file=sys.stderr)
    return 0
