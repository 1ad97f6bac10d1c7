"""The one device resolver: a device option (``auto``, ``cpu``, ``cuda``, ``cuda:N``; see
:func:`bbb.options.device_name`) as the ``torch.device`` it names on this machine."""

from __future__ import annotations

from typing import Any

import torch

from .errors import UserError
from .options import DeviceKind, device_name

__all__ = ["resolve_device"]


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
