"""The one device resolver: a device option (``auto``, ``cpu``, ``cuda``, ``cuda:N``; see
:func:`bbb.options.device_name`) as the ``torch.device`` it names on this machine; and the
device questions whose torch call changed between the releases bbb supports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .errors import UserError
from .options import DeviceKind, device_name

__all__ = ["resolve_device", "autocast_enabled", "torch_release", "cpu_model", "deterministic_convolutions",
           "device_memory"]


def cpu_model() -> str:
    """The CPU's model name as the system reports it (``/proc/cpuinfo``'s first ``model name``; else
    ``platform.processor()``; else ``"unknown"``) and its vector instruction sets among AVX2,
    AVX-512 (F, BF16) and AMX, e.g. ``"AMD EPYC (avx2 avx512f avx512_bf16)"``: what a CPU run's last
    digits, and a long training run's outcome, may depend on beside torch's version and CPU
    capability (the BLAS picks its kernels by them)."""
    import platform

    name, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if name is None and line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    name = name or platform.processor() or "unknown"
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return f"{name} ({' '.join(isa)})" if isa else name


def torch_release() -> tuple[int, int]:
    """The installed torch's (major, minor), e.g. ``(2, 5)`` for ``2.5.1+cu124``.

    Example::

        >>> torch_release() >= (2, 3)
        True
    """
    major, minor = str(torch.__version__).split("+")[0].split(".")[:2]
    return int(major), int(minor)


# torch.is_autocast_enabled(device_type) takes its argument from torch 2.4 on; before, it asks
# about CUDA alone and each other device type has its own is_autocast_<type>_enabled().
_AUTOCAST_TAKES_DEVICE = torch_release() >= (2, 4)


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (``"cpu"``, ``"cuda"``, ...), on every torch
    bbb supports (``torch.is_autocast_enabled(device_type)`` exists from torch 2.4 on).

    Example::

        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     autocast_enabled("cpu")
        True
        >>> autocast_enabled("cpu")
        False
    """
    if _AUTOCAST_TAKES_DEVICE:
        return bool(torch.is_autocast_enabled(device_type))
    if device_type == "cuda":
        return bool(torch.is_autocast_enabled())
    query = getattr(torch, f"is_autocast_{device_type}_enabled", None)
    return bool(query()) if query is not None else False


def resolve_device(device: Any) -> torch.device:
    """``auto`` (CUDA when there is one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``; asking
    for CUDA where there is none is a :class:`UserError` that says to use ``--device cpu``."""
    name = device_name(device)
    if name == DeviceKind.AUTO.value:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name} was asked for but no CUDA device is available; "
                        "use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise UserError(f"--device {name}: this machine has {n} CUDA device(s), numbered 0 to {n - 1}; "
                        "choose one of them (or --device cuda)")
    return dev


@contextmanager
def deterministic_convolutions() -> Iterator[None]:
    """cuDNN's deterministic algorithms, chosen without timing, inside the block; the settings as
    they were after it.

    By default cuDNN may compute a convolution's weight gradient by atomic additions in no fixed
    order and pick its algorithms by timing them, so that two runs of one seeded CNN on a GPU end
    with weights that differ in their last bits, and a run resumed from a checkpoint ends with
    another network than the one never stopped. The training loops that promise a resume bit for
    bit on CUDA run inside this block (the CPU's convolutions are not affected).

    Example::

        >>> with deterministic_convolutions():
        ...     torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
        (True, False)
    """
    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark = before


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory of ``device``: a CUDA device's total, else the host's RAM plus swap;
    None where unknown. An upper bound of what one process can get (other processes, limits)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            info = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f if ":" in line)}
        return info["MemTotal"] + info.get("SwapTotal", 0)
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None
