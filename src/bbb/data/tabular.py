"""Standardising tabular data: columns to mean 0 and standard deviation 1, and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError

__all__ = ["Standardizer"]


@dataclass(frozen=True)
class Standardizer:
    """Column means and standard deviations of the rows a model fits (``fit``), applied to any
    rows (``transform``) and undone (``inverse``). The standard deviation is the population one
    (``unbiased=False``, numpy's default, as the UCI protocol's code); a constant column gets 1,
    so it maps to 0 instead of dividing by 0. 1-D tensors (targets) give scalar statistics.

    >>> sx, sy = Standardizer.fit(x_train), Standardizer.fit(y_train)
    >>> y_pred = sy.inverse(net(sx.transform(x_test)))
    """

    mean: Tensor
    std: Tensor

    @classmethod
    def fit(cls, x: Tensor) -> Standardizer:
        if not isinstance(x, Tensor) or x.dim() not in (1, 2) or x.shape[0] < 1 or not x.is_floating_point():
            raise UserError("Standardizer.fit takes a floating tensor of rows (N,) or (N, D) with N >= 1, got "
                            + (f"shape {tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__))
        mean = x.mean(0)
        std = x.std(0, unbiased=False)
        return cls(mean, torch.where(std > 0, std, torch.ones_like(std)))

    def transform(self, x: Tensor) -> Tensor:
        """(x - mean) / std."""
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)

    def inverse(self, z: Tensor) -> Tensor:
        """z * std + mean: the exact inverse of :meth:`transform` (up to rounding)."""
        return z * self.std.to(z.dtype) + self.mean.to(z.dtype)

    def scale_std(self, s: Tensor) -> Tensor:
        """A standard deviation in standardised units back in the original units (s * std)."""
        return s * self.std.to(s.dtype)

    def to_dict(self) -> dict[str, Any]:
        """Plain floats / lists (JSON)."""
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Standardizer:
        return cls(torch.tensor(d["mean"], dtype=torch.float64), torch.tensor(d["std"], dtype=torch.float64))
