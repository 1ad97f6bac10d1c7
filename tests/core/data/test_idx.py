"""IDX reader: round trips on small synthetic files and every way a file can be damaged."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from bbb.data import read_idx, read_idx_pair
from bbb.errors import DataError, UserError


def idx_bytes(array: np.ndarray, dtype_byte: int = 0x08) -> bytes:
    """Serialise a uint8 array as IDX."""
    header = bytes([0, 0, dtype_byte, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write(path: Path, data: bytes, compress: bool) -> Path:
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def images(n: int = 3, h: int = 4, w: int = 5) -> np.ndarray:
    return np.arange(n * h * w, dtype=np.uint8).reshape(n, h, w)


def check_error(excinfo: pytest.ExceptionInfo[DataError], path: Path, *words: str) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and "\r" not in msg
    assert path.name in msg
    for word in words:
        assert word in msg
    return msg


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_images_and_labels(tmp_path: Path, compress: bool) -> None:
    img = images()
    lab = np.array([7, 0, 9], dtype=np.uint8)
    ip = write(tmp_path / "img", idx_bytes(img), compress)
    lp = write(tmp_path / "lab", idx_bytes(lab), compress)
    x = read_idx(ip)
    assert x.dtype == torch.uint8 and tuple(x.shape) == (3, 4, 5)
    assert np.array_equal(x.numpy(), img)
    x2, y2 = read_idx_pair(ip, lp)
    assert np.array_equal(x2.numpy(), img) and y2.tolist() == [7, 0, 9]
    x2[0, 0, 0] = 1  # the tensor is writable (no read-only numpy buffer underneath)


def test_compression_decided_by_magic_not_suffix(tmp_path: Path) -> None:
    img = images()
    raw_named_gz = write(tmp_path / "raw.gz", idx_bytes(img), compress=False)
    gz_named_raw = write(tmp_path / "data-idx3-ubyte", idx_bytes(img), compress=True)
    assert np.array_equal(read_idx(raw_named_gz).numpy(), img)
    assert np.array_equal(read_idx(gz_named_raw).numpy(), img)


def test_empty_and_other_dims(tmp_path: Path) -> None:
    empty = read_idx(write(tmp_path / "e", idx_bytes(np.zeros((0, 28, 28), np.uint8)), True))
    assert tuple(empty.shape) == (0, 28, 28)
    four = read_idx(write(tmp_path / "f", idx_bytes(np.ones((2, 1, 2, 3), np.uint8)), False))
    assert tuple(four.shape) == (2, 1, 2, 3)


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_payload(tmp_path: Path, compress: bool) -> None:
    data = idx_bytes(images())
    path = write(tmp_path / "train-images-idx3-ubyte.gz", data[:-7], compress)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    msg = check_error(excinfo, path, "truncated", "3x4x5 = 60 bytes", "found 53")
    assert "--data-dir" in msg


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("keep", [0, 2, 4, 9])
def test_truncated_header(tmp_path: Path, compress: bool, keep: int) -> None:
    path = write(tmp_path / "t10k-images-idx3-ubyte.gz", idx_bytes(images())[:keep], compress)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, "truncated")


@pytest.mark.parametrize("compress", [False, True])
def test_trailing_bytes(tmp_path: Path, compress: bool) -> None:
    path = write(tmp_path / "long.idx", idx_bytes(images()) + b"\0", compress)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, "3x4x5 = 60 bytes", "found more")


@pytest.mark.parametrize("compress", [False, True])
def test_bad_magic(tmp_path: Path, compress: bool) -> None:
    path = write(tmp_path / "bad-magic.idx", b"PK\x03\x04" + bytes(100), compress)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, "magic", "504b0304")


@pytest.mark.parametrize("dtype_byte", [0x09, 0x0B, 0x0C, 0x0D, 0x0E])
def test_wrong_dtype_byte(tmp_path: Path, dtype_byte: int) -> None:
    path = write(tmp_path / "float.idx", idx_bytes(images(), dtype_byte), True)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, "data type", f"0x{dtype_byte:02x}")


def test_zero_dimensions(tmp_path: Path) -> None:
    path = write(tmp_path / "zero.idx", bytes([0, 0, 8, 0]), False)
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, "0 dimensions")


def test_wrong_number_of_dimensions(tmp_path: Path) -> None:
    path = write(tmp_path / "labels.idx", idx_bytes(np.zeros(3, np.uint8)), True)
    assert read_idx(path, ndim=1).shape == (3,)
    with pytest.raises(DataError) as excinfo:
        read_idx(path, ndim=3)
    check_error(excinfo, path, "expected 3 dimension", "0x00000803", "found 1")


def _corrupt_deflate(blob: bytearray) -> None:
    blob[20:40] = b"\xff" * 20  # inside the deflate stream


def _flip_crc(blob: bytearray) -> None:
    blob[-8] ^= 0xFF  # CRC32 in the trailer


def _cut_half(blob: bytearray) -> None:
    del blob[len(blob) // 2:]


def _bad_method(blob: bytearray) -> None:
    blob[:] = b"\x1f\x8b\x63" + bytes(30)  # compression method 0x63 is not deflate


@pytest.mark.parametrize(("damage", "words"), [
    (_corrupt_deflate, "gzip"),
    (_flip_crc, "corrupt gzip"),
    (_cut_half, "truncated"),
    (_bad_method, "gzip"),
])
def test_damaged_gzip_is_a_data_error(tmp_path: Path, damage, words: str) -> None:
    blob = bytearray(gzip.compress(idx_bytes(images(50, 28, 28))))
    damage(blob)
    path = tmp_path / "damaged.gz"
    path.write_bytes(bytes(blob))
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, words)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nothing-here.gz"
    with pytest.raises(DataError) as excinfo:
        read_idx(path)
    check_error(excinfo, path, "not found")


def test_count_mismatch_between_images_and_labels(tmp_path: Path) -> None:
    ip = write(tmp_path / "train-images-idx3-ubyte.gz", idx_bytes(images(3)), True)
    lp = write(tmp_path / "train-labels-idx1-ubyte.gz", idx_bytes(np.zeros(4, np.uint8)), True)
    with pytest.raises(DataError) as excinfo:
        read_idx_pair(ip, lp)
    msg = check_error(excinfo, ip, "3 images", "4 labels")
    assert lp.name in msg


def test_pair_checks_dimensions(tmp_path: Path) -> None:
    ip = write(tmp_path / "i.gz", idx_bytes(images(3)), True)
    with pytest.raises(DataError):
        read_idx_pair(ip, ip)  # images file given as labels


def test_data_error_is_a_user_error() -> None:
    assert issubclass(DataError, UserError)


# ---------------------------------------------------------------- claims larger than the file


def _peak_bytes(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("compress", [False, True])
def test_label_header_claiming_2_31_items_is_refused_before_allocating(tmp_path: Path, compress: bool) -> None:
    # an 18-byte label file (8-byte header + 10 labels) whose header claims 2^31 labels
    data = bytes([0, 0, 8, 1]) + struct.pack(">I", 2**31) + bytes(range(10))
    path = write(tmp_path / "train-labels-idx1-ubyte.gz", data, compress)

    def read() -> None:
        with pytest.raises(DataError) as excinfo:
            read_idx(path, ndim=1)
        msg = check_error(excinfo, path, "2147483648")
        assert "truncated" in msg or "corrupt" in msg

    assert _peak_bytes(read) < 32 << 20


@pytest.mark.parametrize("compress", [False, True])
def test_image_header_claiming_huge_dims_is_refused(tmp_path: Path, compress: bool) -> None:
    data = bytes([0, 0, 8, 3]) + struct.pack(">3I", 60000, 65535, 65535) + bytes(100)
    path = write(tmp_path / "train-images-idx3-ubyte.gz", data, compress)

    def read() -> None:
        with pytest.raises(DataError) as excinfo:
            read_idx(path, ndim=3)
        check_error(excinfo, path, "60000x65535x65535")

    assert _peak_bytes(read) < 32 << 20


def test_gzip_claim_within_the_ratio_bound_reads_only_what_is_there(tmp_path: Path) -> None:
    # 4 MB of zeros compress to ~4 KB, so a claim of 2 GB would pass a ratio bound on a file
    # padded with 2 MB of incompressible bytes; the payload must still not be preallocated
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, size=2 << 20, dtype=np.uint8).tobytes()
    data = bytes([0, 0, 8, 1]) + struct.pack(">I", 2**31 - 1) + noise
    path = write(tmp_path / "labels.gz", data, True)

    def read() -> None:
        with pytest.raises(DataError) as excinfo:
            read_idx(path, ndim=1)
        check_error(excinfo, path, "truncated", f"found {len(noise)}")

    assert _peak_bytes(read) < 64 << 20
