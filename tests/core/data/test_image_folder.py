"""A folder of images read as its owner sees them: upright, at full grey depth, nothing left out unsaid."""

from __future__ import annotations

import numpy as np
import pytest

from bbb.data.images import load_image_folder
from bbb.errors import DataError


def digit() -> np.ndarray:
    """A 28x28 grey image with every grey level and a different pixel in each corner."""
    return (np.arange(28 * 28).reshape(28, 28) % 256).astype(np.uint8)


def test_a_16_bit_png_is_scaled_not_clipped(tmp_path):
    # Pillow's grey conversion clipped a 16-bit PNG at 255: all but its darkest pixels read as white
    pil = pytest.importorskip("PIL.Image")
    g = digit()
    pil.fromarray(g).save(tmp_path / "a8.png")
    pil.fromarray(g.astype(np.uint16) * 257).save(tmp_path / "b16.png")
    names, pixels, _ = load_image_folder(tmp_path)
    assert names == ["a8.png", "b16.png"]
    np.testing.assert_array_equal(pixels[1, 0], g)
    np.testing.assert_array_equal(pixels[0, 0], pixels[1, 0])


def test_an_exif_rotated_photo_is_read_upright(tmp_path):
    # a phone stores a photo sideways with an EXIF orientation; it was read sideways
    pil = pytest.importorskip("PIL.Image")
    g = digit()
    exif = pil.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to show
    pil.fromarray(np.rot90(g)).save(tmp_path / "photo.png", exif=exif)  # stored turned anticlockwise
    _, pixels, _ = load_image_folder(tmp_path)
    np.testing.assert_array_equal(pixels[0, 0], g)


def test_subfolders_are_named_not_skipped_silently(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    for cls in ("cats", "dogs"):
        (tmp_path / cls).mkdir()
        pil.fromarray(digit()).save(tmp_path / cls / "x.png")
    with pytest.raises(DataError) as info:  # a folder of class folders: say why none is read
        load_image_folder(tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "cats/" in msg and "dogs/" in msg
    pil.fromarray(digit()).save(tmp_path / "top.png")
    (tmp_path / "notes.txt").write_text("not an image")
    names, _, others = load_image_folder(tmp_path)
    assert names == ["top.png"] and others == ["cats/", "dogs/", "notes.txt"]


def test_an_image_too_large_for_pillow_is_one_line(tmp_path, monkeypatch):
    # Pillow's guard against a file that unpacks to gigabytes raised its own error: a traceback
    pil = pytest.importorskip("PIL.Image")
    pil.fromarray(digit()).save(tmp_path / "scan.png")
    monkeypatch.setattr(pil, "MAX_IMAGE_PIXELS", 100)  # a 28x28 image is then more than twice the limit
    with pytest.raises(DataError) as info:
        load_image_folder(tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "scan.png" in msg and "too large" in msg
