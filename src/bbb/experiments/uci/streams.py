"""Random numbers keyed by member: every network of a UCI population draws its own, so a member's
result is a function of its identity alone, never of the members trained beside it.

A network's identity (dataset, variant, phase, split, grid point, ensemble copy, seed) hashes to
a 64-bit key (:func:`member_key`). Its draws are counter-based (:mod:`bbb.random`): the numbers of
stream ``t`` at row ``r`` are a pure function of (key, t, r), computed for the whole population
at once (one vectorised hash over a (members, rows, width) tensor), so the population still
trains as one batch. A row is a training step (its weight or pre-activation noise, its dropout
masks), an epoch (its data order) or a predictive sample; nothing is state, so a job resumes
from its epoch counter alone. Initialisation, drawn once, uses one ``torch.Generator`` per network
seeded from its key (:meth:`MemberStreams.generator`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import Tensor

from ...random import counter_keys, hash_pairs, normal_pairs

__all__ = ["member_key", "MemberStreams", "Draw", "ORDER", "TRAIN", "INIT", "eval_stream"]

#: the streams of a network: its data order (a row per epoch), its training noise (a row per
#: step) and its initialisation; the predictive samples at checkpoint epoch e: ``eval_stream(e)``
ORDER, TRAIN, INIT = 1, 2, 3
_EVAL = 1 << 20
#: pair positions stay below this (int32 indices)
_LIMIT = 1 << 31
_INV_24 = 1.0 / 16777216.0


def eval_stream(epoch: int) -> int:
    """The stream of the predictive samples scored at ``epoch``."""
    return _EVAL + int(epoch)


def member_key(*identity: object) -> int:
    """A 64-bit key of an identity tuple (its parts' text, joined): stable across processes and
    Python versions (BLAKE2b, not ``hash``)."""
    text = "\x1f".join(str(p) for p in identity)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class Draw:
    """One draw of every member's random numbers, (members, rows, width), handed out left to right:
    each :meth:`take` returns the next columns, so a model's tensors get their numbers in the order
    it asks for them (the same order whatever the population)."""

    def __init__(self, values: Tensor) -> None:
        self.values, self.used = values, 0

    @property
    def rows(self) -> int:
        return self.values.shape[1]

    def take(self, cols: int) -> Tensor:
        """The next ``cols`` numbers of every member's rows: (members, rows, cols)."""
        end = self.used + int(cols)
        if end > self.values.shape[2]:
            raise ValueError(f"a draw of width {self.values.shape[2]} was asked for {end} numbers per row")
        out = self.values[:, :, self.used:end]
        self.used = end
        return out

    def like(self, shape: Sequence[int]) -> Tensor:
        """The next numbers as a tensor (members, N, F) whose N is ``rows`` blocks in row order
        (e.g. k samples x R inputs): block r of every member from row r."""
        m, n, f = (int(s) for s in shape)
        if n % self.rows:
            raise ValueError(f"{n} rows do not split into the draw's {self.rows} rows")
        return self.take(n // self.rows * f).reshape(m, n, f)


class MemberStreams:
    """The counter-based streams of a population's networks, one 64-bit key each (:func:`member_key`)."""

    def __init__(self, keys: Sequence[int]) -> None:
        self.keys = [int(k) for k in keys]
        self._keys: dict[int, Tensor] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def _stream_keys(self, stream: int) -> Tensor:
        """(3, members, 1, 1) int32: each network's :func:`bbb.random.counter_keys` of ``stream``."""
        got = self._keys.get(stream)
        if got is None:
            rows = [counter_keys(k, stream) for k in self.keys]
            t = torch.tensor(rows, dtype=torch.int64).T
            t = torch.where(t >= 1 << 31, t - (1 << 32), t).to(torch.int32)
            got = self._keys[stream] = t.view(3, len(self.keys), 1, 1)
        return got

    @staticmethod
    def _index(stream: int, first: int, rows: int, pairs: int) -> Tensor:
        """(1, rows, pairs) int32: row r holds the pair positions [r * pairs, (r + 1) * pairs)."""
        if first < 0 or (first + rows) * pairs >= _LIMIT:
            raise ValueError(f"stream {stream}: rows {first}..{first + rows} of {pairs} pairs pass 2^31 positions")
        return torch.arange(first * pairs, (first + rows) * pairs, dtype=torch.int32).view(1, rows, pairs)

    def _pairs(self, stream: int, first: int, rows: int, pairs: int) -> tuple[Tensor, Tensor]:
        """The two 24-bit integers of each pair position, (members, rows, pairs) int32 each."""
        return hash_pairs(self._index(stream, first, rows, pairs), self._stream_keys(stream))

    def normal(self, stream: int, first: int, rows: int, width: int) -> Draw:
        """Standard normals (members, rows, width): row r's numbers a function of (key, stream,
        first + r, width) only."""
        z0, z1 = normal_pairs(self._index(stream, first, rows, (width + 1) // 2), self._stream_keys(stream))
        return Draw(torch.cat([z0, z1], 2)[:, :, :width])

    def uniform(self, stream: int, first: int, rows: int, width: int) -> Draw:
        """Uniforms in (0, 1), 24 bits, (members, rows, width), keyed as :meth:`normal`'s."""
        h1, h2 = self._pairs(stream, first, rows, (width + 1) // 2)
        return Draw((torch.cat([h1, h2], 2)[:, :, :width].float() + 0.5) * _INV_24)

    def order(self, stream: int, row: int, n: int) -> Tensor:
        """Each network's permutation of ``n`` rows (members, n): the order of 48-bit keys."""
        h1, h2 = self._pairs(stream, row, 1, n)
        return torch.argsort(h1[:, 0].long() * 16777216 + h2[:, 0].long(), dim=1, stable=True)

    def generator(self, j: int, stream: int = INIT) -> torch.Generator:
        """A ``torch.Generator`` of network j's ``stream`` (its initialisation)."""
        a, b, _ = counter_keys(self.keys[j], stream)
        return torch.Generator().manual_seed((a | (b << 32)) & 0x7FFFFFFFFFFFFFFF)
