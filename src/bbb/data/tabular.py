"""Standardising tabular data: columns to mean 0 and standard deviation 1, and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError

__all__ = ["Standardizer"]


@dataclass(frozen=True, eq=False)
class Standardizer:
    """Column means and standard deviations of the rows a model fits (``fit``), applied to any
    rows (``transform``) and undone (``inverse``). The standard deviation is the population one
    (``unbiased=False``, ddof 0: numpy's default, as the UCI protocol's code); a constant column
    (all its values equal) gets 1, so it maps to 0 instead of dividing by 0. The statistics are
    computed and kept in float64 and applied in the dtype of the data.

    1-D tensors (targets, (N,)) give 0-d statistics, which are :func:`bbb.uncertainty.evaluate`'s
    ``shift`` and ``scale``; 2-D inputs (N, D) give (D,) ones. ``dim`` is the dimension of the
    rows (the examples); with the default 0, a tensor with more leading dimensions, such as k
    sampled predictions (k, N), is transformed as well (the statistics broadcast over the trailing
    dimensions). ``to_dict()`` / ``from_dict()`` round-trip exactly through JSON.

    >>> sx, sy = Standardizer.fit(x_train), Standardizer.fit(y_train)
    >>> y_pred = sy.inverse(net(sx.transform(x_test)).squeeze(-1))   # original units
    >>> sy.scale_std(0.25)                                            # an sd in original units
    >>> Standardizer.from_dict(json.loads(json.dumps(sy.to_dict()))) == sy
    True
    """

    mean: Tensor
    std: Tensor
    dim: int = 0

    @classmethod
    def fit(cls, x: Tensor, dim: int = 0) -> Standardizer:
        """The mean and the population standard deviation of ``x`` (N,) or (N, D) along ``dim``."""
        if not isinstance(x, Tensor) or x.dim() not in (1, 2) or not x.is_floating_point():
            raise UserError("Standardizer.fit takes a floating tensor of rows (N,) or (N, D) with N >= 1, got "
                            + (f"shape {tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__))
        if isinstance(dim, bool) or not isinstance(dim, int) or not -x.dim() <= dim < x.dim():
            raise UserError(f"Standardizer.fit: dim {dim!r} is not a dimension of a {x.dim()}-d tensor")
        dim %= x.dim()
        if x.shape[dim] < 1:
            raise UserError(f"Standardizer.fit takes N >= 1 rows along dim {dim}, got shape {tuple(x.shape)}")
        xd = x.detach().to(torch.float64)
        if not bool(torch.isfinite(xd).all()):
            raise UserError("Standardizer.fit: the data contain NaN or inf; drop or impute them first")
        mean = xd.mean(dim)
        std = xd.std(dim, unbiased=False)
        # a constant column by its values, not by std > 0: the mean's round-off leaves a tiny std
        constant = (xd == xd.narrow(dim, 0, 1)).all(dim) | ~(std > 0)
        return cls(mean, torch.where(constant, torch.ones_like(std), std), dim)

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            if not isinstance(getattr(self, name), Tensor):
                raise UserError(f"Standardizer: {name} must be a tensor, got {type(getattr(self, name)).__name__}")
        if self.mean.shape != self.std.shape:
            raise UserError(f"Standardizer: mean {tuple(self.mean.shape)} and std {tuple(self.std.shape)} differ in "
                            "shape")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or not 0 <= self.dim <= self.mean.dim():
            raise UserError(f"Standardizer: dim must be an integer in 0..{self.mean.dim()}, got {self.dim!r}")

    def _stats(self, x: Tensor, fn: str) -> tuple[Tensor, Tensor]:
        """mean and std shaped to broadcast against ``x``, in its (floating) dtype, on its device."""
        if not isinstance(x, Tensor):
            raise UserError(f"Standardizer.{fn}: expected a tensor, got {type(x).__name__}")
        mean, std = self.mean, self.std
        cols = tuple(mean.shape)
        if self.dim == 0:
            if x.dim() <= len(cols) - 1 or (cols and tuple(x.shape[x.dim() - len(cols):]) != cols):
                raise UserError(f"Standardizer.{fn}: a tensor of shape {tuple(x.shape)} does not end with the "
                                f"fitted columns {cols}")
        else:
            want = (*cols[:self.dim], None, *cols[self.dim:])
            if x.dim() != len(want) or any(w is not None and w != n for w, n in zip(want, x.shape)):
                raise UserError(f"Standardizer.{fn}: a tensor of shape {tuple(x.shape)} does not fit statistics "
                                f"of shape {cols} fitted along dim {self.dim}")
            mean, std = mean.unsqueeze(self.dim), std.unsqueeze(self.dim)
        dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        return mean.to(device=x.device, dtype=dtype), std.to(device=x.device, dtype=dtype)

    def transform(self, x: Tensor) -> Tensor:
        """(x - mean) / std."""
        mean, std = self._stats(x, "transform")
        return (x.to(mean.dtype) - mean) / std

    def inverse(self, z: Tensor) -> Tensor:
        """z * std + mean: the exact inverse of :meth:`transform` (up to rounding)."""
        mean, std = self._stats(z, "inverse")
        return z.to(mean.dtype) * std + mean

    def scale_std(self, s: Tensor | float) -> Tensor:
        """A standard deviation in standardised units back in the original units (s * std); a 0-d
        ``s`` (or a number) scales every column."""
        if isinstance(s, Tensor):
            if s.dim() == 0:
                return s * self.std.to(device=s.device, dtype=s.dtype if s.is_floating_point() else None)
            return s * self._stats(s, "scale_std")[1]
        try:
            return float(s) * self.std
        except (TypeError, ValueError):
            raise UserError(f"Standardizer.scale_std takes a tensor or a number, got {type(s).__name__}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain floats / lists (JSON): ``{"mean", "std", "dim"}``."""
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "dim": self.dim}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Standardizer:
        """The standardizer that :meth:`to_dict` wrote (equal to it: float64 survives the round trip)."""
        if not isinstance(d, dict) or not {"mean", "std"} <= d.keys():
            raise UserError("Standardizer.from_dict takes the dict of to_dict(), with 'mean' and 'std'")
        try:
            mean, std = (torch.tensor(d[k], dtype=torch.float64) for k in ("mean", "std"))
        except (TypeError, ValueError, RuntimeError):
            raise UserError("Standardizer.from_dict: 'mean' and 'std' must be numbers or lists of numbers") from None
        return cls(mean, std, int(d.get("dim", 0)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Standardizer):
            return NotImplemented
        return (self.dim == other.dim and self.mean.dtype == other.mean.dtype
                and torch.equal(self.mean.cpu(), other.mean.cpu()) and torch.equal(self.std.cpu(), other.std.cpu()))
