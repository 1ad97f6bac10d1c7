"""MD5 check of data files already present, once per file version (stamps in the user's cache,
never in the data folder), and its errors."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import time
from pathlib import Path

import pytest

from bbb.data import KNOWN_FILES, ensure_files, load_mushroom, read_idx, sources, verify_files
from bbb.errors import DataError

SHARED = Path(os.environ.get("BBB_SHARED_DATA", "/work/shared/data"))
NAME = "t10k-labels-idx1-ubyte.gz"


LEGACY_STAMP = ".bbb-verified.json"  # where stamps were once written: beside the data files


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The user's cache ($BBB_CACHE) under tmp_path, never ~/.cache."""
    cache = tmp_path / "user-cache"
    monkeypatch.setenv(sources.CACHE_ENV, str(cache))
    monkeypatch.delenv(sources.VERIFY_ENV, raising=False)
    return cache


def stamps(cache: Path) -> list[Path]:
    return sorted((cache / "verified").glob("*.json"))


def one_good_file(root: Path, monkeypatch: pytest.MonkeyPatch, body: bytes = b"labels") -> Path:
    folder = root / "mnist"
    folder.mkdir(parents=True)
    data = gzip.compress(body, mtime=0)
    (folder / NAME).write_bytes(data)
    monkeypatch.setitem(KNOWN_FILES["mnist"], NAME, hashlib.md5(data).hexdigest())
    return folder / NAME


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = sources.file_md5

    def spy(path):  # type: ignore[no-untyped-def]
        calls.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(sources, "file_md5", spy)
    return calls


def test_good_file_is_hashed_once_then_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               _cache: Path) -> None:
    path = one_good_file(tmp_path / "data", monkeypatch)
    calls = count_hashes(monkeypatch)
    assert ensure_files("mnist", [NAME], data_dir=tmp_path / "data", download=False) == [path]
    assert [p.name for p in path.parent.iterdir()] == [NAME]  # nothing written beside the data
    assert len(stamps(_cache)) == 1
    ensure_files("mnist", [NAME], data_dir=tmp_path / "data", download=False)
    assert calls == [NAME]


def test_the_cache_follows_xdg_without_bbb_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sources.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = one_good_file(tmp_path / "data", monkeypatch)
    ensure_files("mnist", [NAME], data_dir=tmp_path / "data", download=False)
    assert len(stamps(tmp_path / "xdg" / "bbb")) == 1
    assert [p.name for p in path.parent.iterdir()] == [NAME]


@pytest.mark.parametrize("damage", ["truncate", "flip", "replace"])
def test_damaged_file_is_named_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    path = one_good_file(tmp_path, monkeypatch)
    ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)  # stamped as good
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # same size; the modification time changes
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    else:  # a new file renamed over the old one (new inode)
        tmp = path.with_suffix(".new")
        tmp.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        os.replace(tmp, path)
    with pytest.raises(DataError) as excinfo:
        ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)
    msg = str(excinfo.value)
    assert "\n" not in msg and str(path) in msg
    assert "damaged or truncated" in msg and "--data-dir" in msg


def test_verification_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = one_good_file(tmp_path, monkeypatch)
    path.write_bytes(b"not the official file")
    with pytest.raises(DataError):
        ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)
    assert ensure_files("mnist", [NAME], data_dir=tmp_path, download=False, verify=False) == [path]
    monkeypatch.setenv(sources.VERIFY_ENV, "0")
    assert ensure_files("mnist", [NAME], data_dir=tmp_path, download=False) == [path]


def test_read_only_data_folder_loads_verifies_and_stays_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  _cache: Path) -> None:
    body = bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big") + bytes([7, 1, 4])  # an IDX file of 3 labels
    path = one_good_file(tmp_path / "data", monkeypatch, body=body)
    root = tmp_path / "data"
    for d in (path.parent, root):
        d.chmod(0o555)  # read-only for everyone (root included)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    try:
        calls = count_hashes(monkeypatch)
        for _ in range(2):
            assert ensure_files("mnist", [NAME], data_dir=root, download=False) == [path]
            assert read_idx(path).tolist() == [7, 1, 4]  # loads
        assert calls == [NAME]  # verified once, then trusted from the cache
        assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing created there
        assert len(stamps(_cache)) == 1
    finally:
        for d in (root, path.parent):
            d.chmod(0o755)


def test_a_damaged_file_in_a_read_only_folder_is_still_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            _cache: Path) -> None:
    path = one_good_file(tmp_path / "data", monkeypatch)
    path.write_bytes(b"damaged")
    path.parent.chmod(0o555)
    try:
        with pytest.raises(DataError, match="damaged or truncated"):
            ensure_files("mnist", [NAME], data_dir=tmp_path / "data", download=False)
        assert stamps(_cache) == []
    finally:
        path.parent.chmod(0o755)


def test_a_stamp_left_beside_the_data_is_neither_trusted_nor_rewritten(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = one_good_file(tmp_path, monkeypatch)
    st = path.stat()
    legacy = {"version": 1, "folder": str(path.parent.absolute()),
              "files": {NAME: {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
                               "md5": KNOWN_FILES["mnist"][NAME]}}}
    (path.parent / LEGACY_STAMP).write_text(json.dumps(legacy))
    calls = count_hashes(monkeypatch)
    ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)
    assert calls == [NAME]
    assert json.loads((path.parent / LEGACY_STAMP).read_text()) == legacy


@pytest.mark.parametrize("blocked", ["cache", "cache/verified"])
def test_an_unwritable_cache_is_skipped_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture, blocked: str) -> None:
    """A file where the cache (or its ``verified`` folder) should be: unwritable even for root."""
    path = one_good_file(tmp_path / "data", monkeypatch)
    path.parent.chmod(0o555)
    (tmp_path / blocked).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / blocked).write_text("a file where a folder should be")
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "cache"))
    try:
        calls = count_hashes(monkeypatch)
        with caplog.at_level(logging.WARNING):
            for _ in range(2):
                ensure_files("mnist", [NAME], data_dir=tmp_path / "data", download=False)
        assert calls == [NAME, NAME]  # hashed every time, but no error and nothing said
        assert caplog.records == []
        assert [p.name for p in path.parent.iterdir()] == [NAME]
    finally:
        path.parent.chmod(0o755)


def test_corrupt_stamp_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    path = one_good_file(tmp_path, monkeypatch)
    ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)
    (stamp,) = stamps(_cache)
    stamp.write_text("{not json")
    calls = count_hashes(monkeypatch)
    ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)
    assert calls == [NAME]  # hashed again, and stamped again
    assert json.loads(stamp.read_text())["files"][NAME]["md5"] == KNOWN_FILES["mnist"][NAME]
    path.write_bytes(b"damaged")
    with pytest.raises(DataError, match="damaged or truncated"):
        ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)


def test_a_50_row_mushroom_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "mushroom"
    folder.mkdir()
    row = "p,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u"
    (folder / "agaricus-lepiota.data").write_text("\n".join([row] * 50) + "\n")
    with pytest.raises(DataError) as excinfo:
        load_mushroom(data_dir=tmp_path, download=False)
    msg = str(excinfo.value)
    assert "\n" not in msg and "agaricus-lepiota.data" in msg and "damaged or truncated" in msg


@pytest.mark.skipif(not (SHARED / "mnist" / NAME).is_file(), reason=f"no shared data in {SHARED}")
def test_shared_data_passes_and_rerun_is_cheap(monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    before = sorted(p.name for p in (SHARED / "mnist").iterdir())
    calls = count_hashes(monkeypatch)
    for dataset, files in KNOWN_FILES.items():
        verify_files(dataset, [SHARED / dataset / n for n in files])
    assert len(calls) == sum(len(f) for f in KNOWN_FILES.values())
    calls.clear()
    t0 = time.perf_counter()
    for dataset, files in KNOWN_FILES.items():
        verify_files(dataset, [SHARED / dataset / n for n in files])
    assert calls == [] and time.perf_counter() - t0 < 0.5
    # nothing was added to the (read-only, shared) data folders; the stamps are in the cache
    assert sorted(p.name for p in (SHARED / "mnist").iterdir()) == before
    assert len(stamps(_cache)) == len(KNOWN_FILES)


def test_good_files_are_stamped_even_when_another_is_damaged(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    good = one_good_file(tmp_path, monkeypatch)
    bad = good.parent / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(b"damaged")
    with pytest.raises(DataError, match="t10k-images"):
        ensure_files("mnist", [NAME, bad.name], data_dir=tmp_path, download=False)
    calls = count_hashes(monkeypatch)
    ensure_files("mnist", [NAME], data_dir=tmp_path, download=False)
    assert calls == []
