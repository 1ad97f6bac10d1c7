"""Fault injection on the data files through ``python -m bbb``: a damaged, truncated or lying file
is named in one line on stderr with exit code 2, never a traceback or a huge allocation, and the
files already in the output folder are left as they were."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import pytest

from faultkit import assert_one_line_error, bbb, snapshot

pytestmark = pytest.mark.release_independent  # (Makefile: the torch lanes deselect it)

SHARED = Path(os.environ.get("BBB_SHARED_DATA", "/work/shared/data"))
needs_shared = pytest.mark.skipif(not (SHARED / "mnist" / "train-images-idx3-ubyte.gz").is_file(),
                                  reason=f"no real data in {SHARED} (set BBB_SHARED_DATA)")

MUSHROOM_ROW = "p,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u"


def precious_run_dir(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("an earlier result that must survive\n")
    return snapshot(path)


def kept(path: Path, before: dict[str, bytes]) -> bool:
    now = snapshot(path)
    return all(now.get(k) == v for k, v in before.items())


def test_a_50_row_mushroom_file_is_refused_by_bandit(tmp_path: Path) -> None:
    (tmp_path / "data" / "mushroom").mkdir(parents=True)
    path = tmp_path / "data" / "mushroom" / "agaricus-lepiota.data"
    path.write_text("\n".join([MUSHROOM_ROW] * 50) + "\n")
    out = tmp_path / "bandit"
    before = precious_run_dir(out)
    p = bbb("bandit", "--out", str(out), "--data-dir", str(tmp_path / "data"), "--steps", "5", "--seeds", "0",
            "--agents", "greedy", "--quiet", "--device", "cpu", timeout=300)
    assert_one_line_error(p, str(path), "damaged or truncated")
    assert kept(out, before)


def mnist_dir(root: Path, **replace: bytes) -> Path:
    """``root/mnist`` with links to the real files, except the ones given as bytes."""
    folder = root / "mnist"
    folder.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz"):
        key = name.split("-idx")[0].replace("-", "_")
        if key in replace:
            (folder / name).write_bytes(replace[key])
        else:
            (folder / name).symlink_to(SHARED / "mnist" / name)
    return folder


@needs_shared
def test_truncated_mnist_is_named_by_train(tmp_path: Path) -> None:
    cut = (SHARED / "mnist" / "train-images-idx3-ubyte.gz").read_bytes()[:100_000]
    folder = mnist_dir(tmp_path / "data", train_images=cut)
    run = tmp_path / "run"
    before = precious_run_dir(run)
    p = bbb("train", "--data-dir", str(tmp_path / "data"), "--out", str(run), "--epochs", "1", "--hidden", "8",
            "--device", "cpu", "--quiet", timeout=300, BBB_CACHE=str(tmp_path / "cache"))
    assert_one_line_error(p, str(folder / "train-images-idx3-ubyte.gz"), "damaged or truncated")
    assert kept(run, before)


@needs_shared
def test_a_label_header_claiming_2_31_items_is_refused_without_verification(tmp_path: Path) -> None:
    # 18 bytes: the IDX header of 2^31 labels, then 10 labels; the MD5 check is off, so the
    # IDX reader itself must see that the file cannot hold what its header claims
    liar = gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", 2**31) + bytes(range(10)))
    folder = mnist_dir(tmp_path / "data", train_labels=liar)
    run = tmp_path / "run"
    before = precious_run_dir(run)
    p = bbb("train", "--data-dir", str(tmp_path / "data"), "--out", str(run), "--epochs", "1", "--hidden", "8",
            "--device", "cpu", "--quiet", timeout=300, BBB_DATA_VERIFY="0")
    assert_one_line_error(p, str(folder / "train-labels-idx1-ubyte.gz"), "2147483648")
    assert "truncated" in p.stderr or "corrupt" in p.stderr
    assert kept(run, before)
