"""Your own arrays as a run's raw inputs and labels: an ``.npz`` file (:func:`read_npz`) or a
folder of images, one subfolder per class (:func:`read_image_classes`), and the digest that
tells a run its data are still the ones it was trained on (:func:`source_md5`).

A folder of images for training holds one subfolder per class, named by its class (the label
``bbb predict`` prints); each subfolder's ``.png``, ``.jpg`` and ``.jpeg`` files are read as
:func:`~bbb.data.images.load_image_folder` reads them for prediction (upright, grey or in
colour, resized to the run's size), so that a new image reaches the network as the training
images did. Nothing is skipped silently: a subfolder without images, images beside the
subfolders and a folder with no subfolders are one-line errors; other files and nested folders
are named in a warning.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..devices import device_memory
from ..errors import DataError, OutOfMemory, UserError
from .images import class_folders, folder_images, is_image_file, load_labelled_images
from .sources import file_md5
from .table_checks import check_array_magnitude

__all__ = ["DEFAULT_IMAGE_SIZE", "data_kind", "image_files", "inputs_md5", "moved_data_flag", "read_image_classes",
           "read_npz", "source_md5", "split_files", "split_rows"]

#: the (height, width) a folder's images are resized to unless the run says otherwise: MNIST's
DEFAULT_IMAGE_SIZE = (28, 28)


def data_kind(data_file: str | os.PathLike[str]) -> str:
    """What a run's recorded data are: ``".csv"``, ``".npz"`` or ``"folder"`` (images in class
    subfolders): a training file is a .csv or an .npz (others are refused), anything else a folder."""
    suffix = Path(data_file).suffix.lower()
    return suffix if suffix in (".csv", ".npz") else "folder"


def moved_data_flag(data_file: str | os.PathLike[str]) -> str:
    """The option that gives a run its data where they are now: ``--images DIR`` for a folder of
    images, ``--npz FILE`` for an .npz file, ``--csv FILE`` for a table (:func:`data_kind`)."""
    return {"folder": "--images DIR", ".npz": "--npz FILE"}.get(data_kind(data_file), "--csv FILE")


def image_files(folder: Path) -> list[Path]:
    """The image files of the class subfolders of ``folder`` that a run reads, in its order."""
    return [p for sub in class_folders(folder) for p in folder_images(sub)]


def split_rows(n: int, labels: Tensor | None, val_fraction: float, test_fraction: float, seed: int
               ) -> tuple[Tensor, Tensor, Tensor]:
    """(train, val, test) row indices: a seeded permutation; per class when ``labels`` are given."""
    g = torch.Generator().manual_seed(seed)
    groups = [torch.arange(n)] if labels is None else [torch.nonzero(labels == c).flatten()
                                                        for c in torch.unique(labels)]
    parts: list[list[Tensor]] = [[], [], []]
    for idx in groups:
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        nv, nt = round(val_fraction * idx.numel()), round(test_fraction * idx.numel())
        parts[1].append(idx[:nv])
        parts[2].append(idx[nv:nv + nt])
        parts[0].append(idx[nv + nt:])
    out = []
    for p in parts:  # one seeded order across the classes
        cat = torch.cat(p)
        out.append(cat[torch.randperm(cat.numel(), generator=g)])
    return out[0], out[1], out[2]


def split_files(folder: str | os.PathLike[str], classes: list[str], val_fraction: float, test_fraction: float,
                seed: int) -> tuple[list[str], list[str], list[str]]:
    """The (train, validation, test) images of a folder run's split, as ``class/file``, in the order of
    the split's rows (:func:`bbb.data.files.load_file_splits` with the same settings; ``classes``: the run's, in its
    order; a ``train_size`` keeps the first of the training ones)."""
    files = image_files(Path(folder))
    index = {c: k for k, c in enumerate(classes)}
    labels = torch.tensor([index[f.parent.name] for f in files], dtype=torch.int64)
    names = [f"{f.parent.name}/{f.name}" for f in files]
    train, val, test = split_rows(len(files), labels, val_fraction, test_fraction, seed)
    return [names[i] for i in train.tolist()], [names[i] for i in val.tolist()], [names[i] for i in test.tolist()]


def source_md5(path: str | os.PathLike[str]) -> str:
    """The MD5 of a run's data: a file's bytes, or a folder's class names, file names and the
    bytes of the images read from it (so a renamed, added, removed or edited image changes it)."""
    p = Path(path)
    return _files_md5(image_files(p)) if p.is_dir() else file_md5(p)


def inputs_md5(path: str | os.PathLike[str]) -> str:
    """The MD5 of inputs given to a run (``bbb ood --ood-data``): a file's bytes, or the names and
    bytes of a folder's own image files, those ``bbb predict`` reads (so two folders of one name
    tell apart)."""
    p = Path(path)
    if not p.is_dir():
        return file_md5(p)
    return _files_md5(folder_images(p))


def _files_md5(files: list[Path]) -> str:
    h = hashlib.md5(usedforsecurity=False)
    for f in files:
        h.update(f"{f.parent.name}/{f.name}\0".encode())
        h.update(file_md5(f).encode())
    return h.hexdigest()


def read_image_classes(folder: str | os.PathLike[str], size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
                       colour: bool = False, notes: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: the images of ``folder``'s class subfolders as uint8 grey pixels (N, 1, H, W),
    ``size = (H, W)`` (``colour``: red, green, blue, (N, 3, H, W)), and each one's class, the name
    of its subfolder (a string array, N). Given a list ``notes``, each image's
    :func:`~bbb.data.images.image_warning` is appended to it, in the order of ``x``."""
    d = Path(folder)
    if not d.is_dir():
        raise DataError(f"{d}: no such folder")
    subs = class_folders(d)
    loose = [p.name for p in folder_images(d)]
    if not subs:
        raise UserError(f"{d}: no subfolders; training on images needs one subfolder per class, named by its class "
                        f"(e.g. {d}/cat/*.png, {d}/dog/*.png)" + (f"; found {len(loose)} image(s) in the folder "
                                                                     "itself" if loose else ""))
    if loose:
        raise UserError(f"{d}: {len(loose)} image(s) beside the class subfolders (first: {loose[0]}), of no class: "
                        "move each into its class's subfolder, or out of the folder")
    if len(subs) < 2:
        raise UserError(f"{d}: one class subfolder ({subs[0].name}); classification needs two or more")
    for sub in subs:
        if not any(is_image_file(p) for p in sub.iterdir()):
            raise UserError(f"{sub}: a class subfolder without .png, .jpg or .jpeg images: add its images, or remove "
                            "it (a class without images is never learned)")
    n, channels = len(image_files(d)), 3 if colour else 1
    need, have = 5 * n * channels * size[0] * size[1], device_memory(torch.device("cpu"))  # uint8 read, float32 used
    if have is not None and need > have:  # (reading them would end in a kill by the system, with no word)
        raise OutOfMemory(f"{d}: {n:,} images at {size[0]}x{size[1]}{' in colour' if colour else ''} need at least "
                          f"{need / 2**30:,.1f} GiB as the network's inputs, more than the {have / 2**30:,.1f} GiB of "
                          "this machine: use a smaller --image-size" + (" or leave out --colour" if colour else ""))
    texts: list[str] = []
    names, x, skipped, y = load_labelled_images(d, size, texts, colour)
    odd = [f"{n}: {t.split(':')[0]}" for n, t in zip(names, texts) if t.startswith(("blank", "a transparent"))]
    if notes is not None:
        notes += texts
    if skipped:
        warnings.warn(f"{d}: {len(skipped)} file(s) or folder(s) not read ({', '.join(skipped[:3])}"
                      f"{', ...' if len(skipped) > 3 else ''}): only each class subfolder's own .png/.jpg/.jpeg files "
                      "are", stacklevel=2)
    if odd:
        warnings.warn(f"{d}: {len(odd)} training image(s) are blank or transparent (first: {odd[0]}); they are "
                      "trained on as read", stacklevel=2)
    if colour and (x[:, 0] == x[:, 1]).all() and (x[:, 1] == x[:, 2]).all():
        warnings.warn(f"{d}: every image is grey (its red, green and blue alike): --colour gives the network three "
                      "equal copies of each pixel, three times the weights for nothing (train without it)",
                      stacklevel=2)
    return x, np.array(y)


def read_npz(p: Path) -> tuple[np.ndarray, np.ndarray]:
    """The arrays ``x`` (N, ...) and ``y`` (N,) of an ``.npz`` file, checked: one-line errors for
    a missing or misshapen array, text, NaN or inf, and numbers too large for float32."""
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = [k for k in ("x", "y") if k not in z.files]
            if missing:
                raise UserError(f"{p}: no array {missing[0]!r}; an .npz for bbb holds x (N, ...) and y (N,) "
                                f"(found: {', '.join(z.files) or 'none'})")
            x, y = z["x"], z["y"]
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged or foreign file is one user problem
        raise DataError(f"{p}: cannot be read as an .npz file ({' '.join(str(e).split())[:120]})") from None
    if x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0 or x[0].size == 0:
        hint = "; one feature? save x.reshape(-1, 1)" if x.ndim == 1 and x.shape == y.shape[:1] else \
            "; save y.reshape(-1)" if y.shape[1:] == (1,) and x.ndim >= 2 and len(x) == len(y) else ""
        raise UserError(f"{p}: x must be (N, ...) with at least one feature and y (N,) with the same N >= 1, got "
                        f"{x.shape} and {y.shape}{hint}")
    for name, a in (("x", x), ("y", y)):
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_) or np.iscomplexobj(a):
            raise UserError(f"{p}: {name} must hold real numbers, got dtype {a.dtype}" + (
                "; class names? save names, y = np.unique(y, return_inverse=True) and y (class k: names[k])"
                if name == "y" and a.dtype.kind in "US" else ""))
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            i = int(np.nonzero(~np.isfinite(a.reshape(a.shape[0], -1)).all(1))[0][0])
            raise UserError(f"{p}: {name}[{i}] is NaN or inf (a missing value); fill it in or drop that row")
        check_array_magnitude(str(p), a, f"{name}[{{}}]".format)
    return x, y
