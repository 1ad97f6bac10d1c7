"""A folder of image files as an array of grey pixels (Pillow: the ``images`` extra).

:func:`load_image_folder` reads every ``.png``, ``.jpg`` and ``.jpeg`` file of a folder (sorted by
name), turns it upright as its EXIF orientation says (a phone's photo), converts it to grey
(Pillow's ``"L"``: ITU-R 601 luma; a 16-bit PNG scaled from its whole range; or, ``colour=True``,
to red, green and blue), resizes it to the size a run was
trained on (28x28 for MNIST and Fashion-MNIST; Lanczos) and returns uint8 pixels 0..255, (N, 1, H,
W), which a run's preprocessing then scales as its training images were. Nothing else is done:
MNIST digits are white on black, so a photo of a dark digit on white paper must be inverted by its
owner; such an image, a blank one and one with a transparent background are named
(:func:`image_warning`), for ``bbb predict``'s warning column. A file that cannot be read as an
image is a one-line :class:`~bbb.errors.DataError` naming it; nothing is skipped silently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError, UserError

__all__ = ["IMAGE_SUFFIXES", "LIGHT_BORDER", "class_folders", "folder_images", "image_warning", "is_image_file",
           "load_image_folder",
           "load_labelled_images"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


#: a border (the outermost pixels) brighter than this on average is a light background: MNIST and
#: Fashion-MNIST's images are light on black (their borders near 0), a photo of ink on paper 150-255
LIGHT_BORDER = 150


def image_warning(grey: np.ndarray, transparent: bool) -> str:
    """What makes a grey image (H, W) unlike MNIST's light-on-black ones, "" where nothing does:
    a transparent background (grey conversion reads its pixels as their colour, often black like
    the ink: a blank image), one value everywhere, or a light background (dark on light)."""
    if transparent:
        return ("a transparent background, read as its colour (the ink may vanish): flatten the image on a "
                "background first")
    if int(grey.min()) == int(grey.max()):
        return f"blank: every pixel {int(grey.min())}"
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    if float(border.mean()) > LIGHT_BORDER:
        return ("a light background (dark on light?): the training images are light on black; invert it "
                "first")
    return ""


def _grey(im: Any) -> Any:
    """A Pillow image as 8-bit grey ("L"). A 16-bit grey PNG (modes "I;16..." and "I") is scaled
    from its whole range: Pillow's own conversion clips it, reading all but its darkest values as white."""
    from PIL import Image

    if im.mode == "I" or im.mode.startswith("I;16"):
        wide = np.asarray(im, dtype=np.float64)
        return Image.fromarray(np.clip(np.rint(wide / 257.0), 0, 255).astype(np.uint8))
    return im.convert("L")


def _is_grey(im: Any) -> bool:
    """Whether a Pillow image holds grey values only (read in colour through :func:`_grey`, which
    scales a 16-bit one from its whole range, where Pillow's conversion clips it)."""
    return im.mode in ("L", "LA", "1", "I", "F") or im.mode.startswith("I;16")


def is_image_file(p: Path) -> bool:
    """Whether bbb reads ``p`` as an image: a .png, .jpg or .jpeg file whose name does not start with
    "." (a hidden file: the ``._name.png`` macOS writes beside each image copied from a Mac to
    another disk, an editor's or a viewer's own files); the one rule wherever images are read,
    listed or hashed."""
    return p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".") and p.is_file()


def folder_images(folder: Path) -> list[Path]:
    """The images of ``folder`` itself (:func:`is_image_file`), sorted by name."""
    return sorted(p for p in folder.iterdir() if is_image_file(p))


def load_image_folder(folder: str | os.PathLike[str], size: tuple[int, int] = (28, 28),
                      warnings: list[str] | None = None, colour: bool = False
                      ) -> tuple[list[str], np.ndarray, list[str]]:
    """``(names, pixels, others)``: the image files' names, their uint8 grey pixels (N, 1, H, W)
    with ``size = (H, W)`` (``colour``: red, green and blue, (N, 3, H, W); a grey image's three
    alike), and the names of the other files in the folder and of its folders
    (ending in ``/``), which are not read. Given a
    list ``warnings``, one text per image is appended to it (:func:`image_warning` of its grey
    version; "" for none)."""
    try:
        from PIL import Image, ImageOps, UnidentifiedImageError
    except ImportError:
        raise UserError("reading images needs Pillow: pip install pillow (or pip install '.[images]' in a "
                        "clone of bbb)") from None
    d = Path(folder)
    if not d.is_dir():
        raise DataError(f"{d}: no such folder")
    files = folder_images(d)
    others = sorted(p.name + ("/" if p.is_dir() else "") for p in d.iterdir()
                    if not is_image_file(p) and not p.name.startswith("."))
    if not files:
        subs = [n for n in others if n.endswith("/")]
        raise DataError(f"{d}: no .png, .jpg or .jpeg files" + (
            f" (its folders {', '.join(subs[:3])}{', ...' if len(subs) > 3 else ''} are not read: give one of them, "
            "or gather the images in one folder)" if subs else ""))
    h, w = size
    out = np.empty((len(files), 3 if colour else 1, h, w), dtype=np.uint8)
    for i, p in enumerate(files):
        try:
            with Image.open(p) as opened:
                opened.load()
                im = ImageOps.exif_transpose(opened)  # upright, as a viewer shows a camera's photo
                transparent = (im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info) and \
                    int(np.asarray(im.convert("RGBA").getchannel("A")).min()) < 255
                grey = _grey(im)
                if warnings is not None:
                    warnings.append(image_warning(np.asarray(grey), transparent))
                read = grey.convert("RGB") if colour and _is_grey(im) else im.convert("RGB") if colour else grey
                if read.size != (w, h):
                    read = read.resize((w, h), Image.Resampling.LANCZOS)
                pixels = np.asarray(read, dtype=np.uint8)
                out[i] = pixels.transpose(2, 0, 1) if colour else pixels
        except Image.DecompressionBombError as e:  # (Pillow's guard against a file that unpacks to gigabytes)
            raise DataError(f"{p}: too large to read ({' '.join(str(e).split(',')[0].split())}); shrink it first") \
                from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
            why = " ".join(str(e).split())[:120] or type(e).__name__
            raise DataError(f"{p}: not a readable image ({why})") from None
    return [p.name for p in files], out, others


def class_folders(folder: Path) -> list[Path]:
    """The subfolders of ``folder`` (sorted by name; hidden ones left out): a labelled set's classes."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_labelled_images(folder: str | os.PathLike[str], size: tuple[int, int] = (28, 28),
                         warnings: list[str] | None = None, colour: bool = False
                         ) -> tuple[list[str], np.ndarray, list[str], list[str]]:
    """``(names, pixels, others, labels)`` of the images in the subfolders of ``folder``, each read
    as :func:`load_image_folder` reads it and labelled by its subfolder's name: ``names`` as
    ``subfolder/file``, ``others`` what is not read (files beside the subfolders, each subfolder's
    other files and folders, a subfolder without images), ``labels`` one per image."""
    d = Path(folder)
    names: list[str] = []
    parts: list[np.ndarray] = []
    labels: list[str] = []
    others = sorted(p.name for p in d.iterdir() if p.is_file() and not p.name.startswith("."))
    for sub in class_folders(d):
        if not any(is_image_file(p) for p in sub.iterdir()):
            others.append(sub.name + "/")
            continue
        got, pixels, rest = load_image_folder(sub, size, warnings, colour)
        names += [f"{sub.name}/{n}" for n in got]
        labels += [sub.name] * len(got)
        parts.append(pixels)
        others += [f"{sub.name}/{o}" for o in rest]
    if not parts:
        raise DataError(f"{d}: no .png, .jpg or .jpeg files in it or in its subfolders")
    return names, np.concatenate(parts), others, labels
