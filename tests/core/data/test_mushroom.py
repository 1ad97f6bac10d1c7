"""Mushroom parsing on small synthetic files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bbb.data import MUSHROOM_ATTRIBUTES, load_mushroom, parse_mushroom
from bbb.errors import DataError


def row(cls: str, values: dict[int, str] | None = None) -> str:
    """A line with every attribute 'a' except those given by index."""
    attrs = ["a"] * 22
    for j, v in (values or {}).items():
        attrs[j] = v
    return ",".join([cls, *attrs])


def test_attribute_names() -> None:
    assert len(MUSHROOM_ATTRIBUTES) == 22 == len(set(MUSHROOM_ATTRIBUTES))
    assert MUSHROOM_ATTRIBUTES[0] == "cap-shape"
    assert MUSHROOM_ATTRIBUTES[4] == "odor"
    assert MUSHROOM_ATTRIBUTES[10] == "stalk-root"
    assert MUSHROOM_ATTRIBUTES[-1] == "habitat"


def test_one_hot_over_sorted_observed_values(tmp_path: Path) -> None:
    lines = [
        row("p", {0: "x", 10: "?"}),
        row("e", {0: "b", 10: "c"}),
        "",  # blank lines are skipped
        row("e", {0: "x", 10: "b"}),
    ]
    path = tmp_path / "agaricus-lepiota.data"
    path.write_text("\r\n".join(lines) + "\r\n\n")
    contexts, edible, columns = parse_mushroom(path)
    # cap-shape {b, x}, stalk-root {?, b, c}, the 20 others {a}
    assert contexts.shape == (3, 2 + 3 + 20)
    assert contexts.dtype == torch.float32
    assert edible.dtype == torch.bool and edible.tolist() == [False, True, True]
    assert columns[:2] == ["cap-shape=b", "cap-shape=x"]
    k = columns.index("stalk-root=?")
    assert columns[k : k + 3] == ["stalk-root=?", "stalk-root=b", "stalk-root=c"]
    assert torch.equal(contexts.sum(dim=1), torch.full((3,), 22.0))
    assert contexts[:, :2].tolist() == [[0, 1], [1, 0], [0, 1]]
    assert contexts[:, k : k + 3].tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (row("e") + ",extra", ["24", "23"]),
        ("e,a,b", ["found 3"]),
        (row("x"), ["'x'", "class"]),
        (row("edible"), ["class"]),
        (row("p", {5: ""}), ["gill-attachment", "empty"]),
    ],
)
def test_malformed_line(tmp_path: Path, bad: str, words: list[str]) -> None:
    path = tmp_path / "agaricus-lepiota.data"
    path.write_text("\n".join([row("e"), row("p"), bad, row("e")]) + "\n")
    with pytest.raises(DataError) as excinfo:
        parse_mushroom(path)
    msg = str(excinfo.value)
    assert "\n" not in msg
    assert f"{path.name}:3:" in msg
    for word in words:
        assert word in msg


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "agaricus-lepiota.data"
    path.write_text("\n\n")
    with pytest.raises(DataError, match="no data rows"):
        parse_mushroom(path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "agaricus-lepiota.data"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(DataError, match="agaricus-lepiota.data: not a text file"):
        parse_mushroom(path)


def test_load_mushroom_from_data_dir(tmp_path: Path) -> None:
    folder = tmp_path / "mushroom"
    folder.mkdir()
    (folder / "agaricus-lepiota.data").write_text(row("e") + "\n" + row("p", {3: "t"}) + "\n")
    contexts, edible = load_mushroom(data_dir=tmp_path, download=False, verify=False)
    assert contexts.shape == (2, 23)
    assert edible.tolist() == [True, False]


def test_load_mushroom_missing_without_download(tmp_path: Path) -> None:
    with pytest.raises(DataError) as excinfo:
        load_mushroom(data_dir=tmp_path, download=False)
    msg = str(excinfo.value)
    assert "\n" not in msg
    assert "mushroom/agaricus-lepiota.data" in msg and str(tmp_path) in msg
    assert "BBB_DATA" in msg
