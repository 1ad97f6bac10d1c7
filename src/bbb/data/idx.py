"""Reader for the IDX format used by MNIST and Fashion-MNIST.

An IDX file is a 4-byte magic number ``00 00 <dtype> <ndim>``, then ``ndim`` big-endian
uint32 sizes, then the payload in C order. Only ``dtype == 0x08`` (unsigned byte) is
supported, which covers every MNIST-style file. The file may be gzip-compressed; that is
decided by the gzip magic bytes, never by the file name.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from bbb.errors import DataError

__all__ = ["IDX_UBYTE", "read_idx", "read_idx_pair"]

IDX_UBYTE = 0x08
"""IDX data-type byte for unsigned 8-bit integers."""

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 24
_MAX_GZIP_RATIO = 1032  # deflate never expands more than ~1032:1
_FIX = "delete it and re-run to download again, or point --data-dir at a good copy"


def _one_line(text: object) -> str:
    """Collapse any whitespace runs (newlines included) into single spaces."""
    return " ".join(str(text).split())


def _fail(path: Path, problem: str) -> DataError:
    return DataError(_one_line(f"{path}: {problem}; {_FIX}"))


def _read_exact(stream: BinaryIO, n: int) -> bytearray:
    """Read up to ``n`` bytes; the result is shorter only at end of file."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            break
        got += k
    view.release()
    if got < n:
        del buf[got:]
    return buf


def _read_chunked(stream: BinaryIO, n: int) -> bytearray:
    """Like :func:`_read_exact`, but memory grows only with the bytes that really arrive."""
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(min(_CHUNK, n - len(buf)))
        if not chunk:
            break
        buf += chunk
    return buf


def _gzip_isize(f: BinaryIO) -> int | None:
    """The gzip trailer's ISIZE (uncompressed length mod 2^32 of the last member), or None."""
    try:
        f.seek(-4, os.SEEK_END)
        tail = f.read(4)
        f.seek(0)
    except OSError:
        return None
    return struct.unpack("<I", tail)[0] if len(tail) == 4 else None


def _parse(stream: BinaryIO, path: Path, ndim: int | None, file_size: int | None = None,
           gzip_size: int | None = None, isize: int | None = None) -> torch.Tensor:
    """Parse an IDX stream. ``file_size``: the length of an uncompressed file; ``gzip_size`` /
    ``isize``: the compressed length and trailer of a gzip file. Both bound the payload the
    header may claim, so a corrupt header is refused before anything is allocated."""
    magic = _read_exact(stream, 4)
    if len(magic) < 4:
        raise _fail(
            path, f"truncated: {len(magic)} bytes, too short for the 4-byte IDX magic number"
        )
    if magic[0] != 0 or magic[1] != 0:
        raise _fail(path, f"not an IDX file: bad magic number 0x{bytes(magic).hex()}")
    dtype, nd = magic[2], magic[3]
    if dtype != IDX_UBYTE:
        raise _fail(
            path,
            f"unsupported IDX data type 0x{dtype:02x} (magic 0x{bytes(magic).hex()}); "
            f"only 0x{IDX_UBYTE:02x} (unsigned byte) is supported",
        )
    if nd == 0:
        raise _fail(path, "bad IDX header: 0 dimensions")
    if ndim is not None and nd != ndim:
        raise _fail(
            path,
            f"bad IDX header: expected {ndim} dimension(s) "
            f"(magic 0x{0x0800 + ndim:08x}), found {nd} (magic 0x{bytes(magic).hex()})",
        )
    raw_dims = _read_exact(stream, 4 * nd)
    if len(raw_dims) < 4 * nd:
        raise _fail(
            path,
            f"truncated: IDX header needs {4 + 4 * nd} bytes, found {4 + len(raw_dims)}",
        )
    dims = struct.unpack(f">{nd}I", bytes(raw_dims))
    size = 1
    for d in dims:
        size *= d
    shape = "x".join(str(d) for d in dims)
    header = 4 + 4 * nd
    # the header's claim, checked against what the file can hold before allocating anything
    if file_size is not None:
        found = file_size - header
        if found < size:
            raise _fail(path, f"truncated: header says {shape} = {size} bytes, found {found}")
        if found > size:
            raise _fail(path, f"size mismatch: header says {shape} = {size} bytes, found more ({found})")
    if gzip_size is not None and header + size > _MAX_GZIP_RATIO * gzip_size + 1024:
        raise _fail(
            path,
            f"truncated or corrupt: header says {shape} = {size} bytes, more than a "
            f"{gzip_size}-byte gzip file can hold",
        )
    if isize is not None and isize == (header + size) % (1 << 32):
        payload = _read_exact(stream, size)  # the trailer agrees: one allocation
    else:
        payload = _read_chunked(stream, size)
    if len(payload) < size:
        raise _fail(path, f"truncated: header says {shape} = {size} bytes, found {len(payload)}")
    if stream.read(1):
        raise _fail(path, f"size mismatch: header says {shape} = {size} bytes, found more")
    array = np.frombuffer(payload, dtype=np.uint8).reshape(dims)
    return torch.from_numpy(array)


def read_idx(path: str | os.PathLike[str], ndim: int | None = None) -> torch.Tensor:
    """Read an unsigned-byte IDX file (raw or gzip-compressed) into a tensor.

    Parameters
    ----------
    path
        The file. Gzip compression is detected from its first two bytes.
    ndim
        Expected number of dimensions (3 for images, 1 for labels), or ``None`` for any.

    Returns
    -------
    torch.Tensor
        A ``uint8`` tensor with the shape given in the header.

    Raises
    ------
    DataError
        With a one-line message naming the file when it is missing, unreadable, not IDX,
        of an unsupported data type, corrupt (bad gzip) or truncated / too long.
    """
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataError(_one_line(f"{path}: file not found")) from None
    except OSError as exc:
        raise DataError(_one_line(f"{path}: cannot open: {exc.strerror or exc}")) from None
    with f:
        try:
            head = f.read(2)
            f.seek(0)
            size = os.fstat(f.fileno()).st_size
            if head == _GZIP_MAGIC:
                isize = _gzip_isize(f)
                with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                    return _parse(gz, path, ndim, gzip_size=size, isize=isize)  # type: ignore[arg-type]
            return _parse(f, path, ndim, file_size=size)
        except EOFError as exc:
            raise _fail(path, f"truncated gzip data ({exc})") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise _fail(path, f"corrupt gzip data ({exc})") from None
        except OSError as exc:
            raise DataError(_one_line(f"{path}: read error: {exc}")) from None


def read_idx_pair(
    images_path: str | os.PathLike[str], labels_path: str | os.PathLike[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Read an images file (3 dimensions) and its labels file (1 dimension).

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor]
        ``(images, labels)``, both ``uint8``, shapes ``(N, H, W)`` and ``(N,)``.

    Raises
    ------
    DataError
        As :func:`read_idx`, or when the two files hold different numbers of items.
    """
    images = read_idx(images_path, ndim=3)
    labels = read_idx(labels_path, ndim=1)
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
            f"{labels.shape[0]} labels; one of them is damaged or from another data set: "
            f"{_FIX}"
        )
    return images, labels
