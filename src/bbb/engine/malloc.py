"""glibc allocator settings for training loops that free and re-allocate large tensors.

Backprop allocates every weight gradient afresh (several MB for a wide layer). glibc serves such
blocks with mmap or returns them to the system when the top of the heap is free, so each step
pays page faults for memory it just gave back, and step times vary from one process to the next.
Keeping those blocks in the heap (mmap threshold 32 MiB, the largest glibc accepts, and a trim
threshold of 1 GiB) costs nothing but the process keeping its peak heap; the measured effect is
in docs/engine.md. Process-wide, so it is opt-in: the ``bbb`` command and the bench call it; a
training script may too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["tune_malloc"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_malloc(mmap_threshold: int = 32 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Set glibc's mmap and trim thresholds (Linux with glibc only); True when both took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(
        mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)))
