"""UCI Mushroom data set, one-hot encoded for the contextual-bandit experiment."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from bbb.data.sources import ensure_file
from bbb.errors import DataError

__all__ = ["MUSHROOM_ATTRIBUTES", "MUSHROOM_FILE", "load_mushroom", "parse_mushroom"]

MUSHROOM_FILE = "agaricus-lepiota.data"
"""Original file name of the data set."""

MUSHROOM_ATTRIBUTES: tuple[str, ...] = (
    "cap-shape",
    "cap-surface",
    "cap-color",
    "bruises",
    "odor",
    "gill-attachment",
    "gill-spacing",
    "gill-size",
    "gill-color",
    "stalk-shape",
    "stalk-root",
    "stalk-surface-above-ring",
    "stalk-surface-below-ring",
    "stalk-color-above-ring",
    "stalk-color-below-ring",
    "veil-type",
    "veil-color",
    "ring-number",
    "ring-type",
    "spore-print-color",
    "population",
    "habitat",
)
"""The 22 attributes after the class column, in file order (UCI names)."""

_FIELDS = 1 + len(MUSHROOM_ATTRIBUTES)


def parse_mushroom(path: str | os.PathLike[str]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Parse ``agaricus-lepiota.data`` and one-hot encode it.

    Each attribute is encoded over the sorted set of its values seen in the file (``'?'``
    is an ordinary value), which gives 117 columns for the real file.

    Parameters
    ----------
    path
        The file: one mushroom per non-empty line, 23 comma-separated fields, the first
        being the class ``e`` (edible) or ``p`` (poisonous).

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor, list[str]]
        Contexts ``float32 (N, D)``, edible ``bool (N,)``, and the ``D`` column names
        ``"<attribute>=<value>"``.

    Raises
    ------
    DataError
        Missing or unreadable file, or a malformed line (the message names file and line).
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("ascii")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(" ".join(f"{path}: cannot read: {exc.strerror or exc}".split())) from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not a text file (non-ASCII byte at offset {exc.start}); "
            "delete it and re-run to download again, or point --data-dir at a good copy"
        ) from None

    rows: list[list[str]] = []
    edible: list[bool] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != _FIELDS:
            raise DataError(
                f"{path}:{lineno}: expected {_FIELDS} comma-separated fields, found {len(fields)}"
            )
        if fields[0] not in ("e", "p"):
            raise DataError(f"{path}:{lineno}: class must be 'e' or 'p', found {fields[0][:20]!r}")
        for name, value in zip(MUSHROOM_ATTRIBUTES, fields[1:], strict=True):
            if not value:
                raise DataError(f"{path}:{lineno}: empty value for attribute {name}")
        edible.append(fields[0] == "e")
        rows.append(fields[1:])
    if not rows:
        raise DataError(f"{path}: no data rows")

    columns: list[str] = []
    offsets: list[dict[str, int]] = []
    for j, name in enumerate(MUSHROOM_ATTRIBUTES):
        index = {}
        for value in sorted({row[j] for row in rows}):
            index[value] = len(columns)
            columns.append(f"{name}={value}")
        offsets.append(index)

    contexts = torch.zeros(len(rows), len(columns), dtype=torch.float32)
    hot = torch.tensor([[offsets[j][v] for j, v in enumerate(row)] for row in rows])
    contexts.scatter_(1, hot, 1.0)
    return contexts, torch.tensor(edible, dtype=torch.bool), columns


def load_mushroom(
    data_dir: str | os.PathLike[str] | None = None, download: bool = True,
    verify: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load the UCI Mushroom data set.

    Parameters
    ----------
    data_dir
        Data directory; see :func:`bbb.data.resolve_data_dir`.
    download
        Whether to download the file if missing.
    verify
        Check the file against its official MD5 (once; see :func:`bbb.data.verify_files`).
        ``None``: yes unless ``BBB_DATA_VERIFY=0``.

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor]
        Contexts ``float32 (8124, 117)`` (one-hot attributes) and edible ``bool (8124,)``.
    """
    path = ensure_file("mushroom", MUSHROOM_FILE, data_dir=data_dir, download=download, verify=verify)
    contexts, edible, _ = parse_mushroom(path)
    return contexts, edible
