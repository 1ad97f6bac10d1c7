"""Atomic writes: permissions without touching the umask, stale temporary files, a full disk."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from bbb import io as bio
from bbb.errors import BBBError, DiskFullError, UserError


def tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_mode_follows_the_umask_without_reading_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda *_: pytest.fail("atomic_write toggled the umask"))
        path = bio.atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
    assert path.read_text() == "x" and tmp_files(tmp_path) == []


def test_threads_writing_at_once_leave_whole_files(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(20):
                bio.atomic_write_text(tmp_path / f"t{i % 2}.txt", f"{i}-{j}\n" * 100)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for name in ("t0.txt", "t1.txt"):
        lines = (tmp_path / name).read_text().splitlines()
        assert len(lines) == 100 and len(set(lines)) == 1
    assert tmp_files(tmp_path) == []


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporary_files_are_removed_by_the_next_write(tmp_path: Path) -> None:
    host = bio._host()
    dead = tmp_path / f".f.json~{host}~{dead_pid()}~0000abcd.tmp"
    live = tmp_path / f".f.json~{host}~{os.getppid()}~0000abce.tmp"  # a running process: kept
    other_host = tmp_path / f".f.json~elsewhere~{dead_pid()}~0000abcf.tmp"  # unknown: kept (young)
    legacy_old = tmp_path / ".f.json.k3j_x9a1.tmp"
    legacy_new = tmp_path / ".f.json.z3j_x9a2.tmp"
    other_target = tmp_path / f".g.json~{host}~{dead_pid()}~0000abd0.tmp"
    for p in (dead, live, other_host, legacy_old, legacy_new, other_target):
        p.write_text("partial")
    day = time.time() - 2 * 3600
    os.utime(legacy_old, (day, day))
    bio.atomic_write_json(tmp_path / "f.json", {"a": 1})
    left = set(tmp_files(tmp_path))
    assert dead.name not in left and legacy_old.name not in left
    assert {live.name, other_host.name, legacy_new.name, other_target.name} <= left
    very_old = time.time() - 3 * 86400
    os.utime(other_host, (very_old, very_old))
    bio.atomic_write_json(tmp_path / "f.json", {"a": 2})
    assert other_host.name not in set(tmp_files(tmp_path))


class _FullAfter(io.RawIOBase):
    """A file object whose writes fail with ENOSPC after ``limit`` bytes."""

    def __init__(self, f, limit: int) -> None:
        self.f, self.left = f, limit

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(b) > self.left:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.left -= len(b)
        return self.f.write(b)


@pytest.mark.parametrize("how", ["oserror", "torch", "runtime-message", "quota"])
def test_full_disk_is_a_one_line_os_error_and_keeps_the_old_file(tmp_path: Path, how: str) -> None:
    path = tmp_path / "last.pt"
    path.write_bytes(b"the previous checkpoint")

    def write(f) -> None:
        if how == "oserror":
            f.write(b"x" * 10)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if how == "quota":
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        if how == "torch":
            torch.save({"w": torch.zeros(10_000)}, _FullAfter(f, 1000))
        else:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed "
                               "writing file data/0: file write failed: No space left on device")

    with pytest.raises(OSError) as excinfo:
        bio.atomic_write(path, write)
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, DiskFullError) and isinstance(excinfo.value, BBBError)
    assert not isinstance(excinfo.value, ValueError)
    assert excinfo.value.errno == (errno.EDQUOT if how == "quota" else errno.ENOSPC)
    assert "\n" not in msg and str(path) in msg and "free some space" in msg
    assert path.read_bytes() == b"the previous checkpoint"
    assert tmp_files(tmp_path) == []


def test_other_errors_pass_through(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        bio.atomic_write(tmp_path / "x", lambda f: 1 / 0)
    with pytest.raises(RuntimeError, match="unexpected pos"):
        bio.atomic_write(tmp_path / "x", lambda f: (_ for _ in ()).throw(RuntimeError("unexpected pos 1 vs 2")))
    assert tmp_files(tmp_path) == [] and not (tmp_path / "x").exists()


def test_ctrl_c_inside_torch_save_is_an_interrupt_and_keeps_the_old_file(tmp_path: Path) -> None:
    """A Ctrl-C while torch.save writes a tensor: its zip writer's exit raises RuntimeError
    ("unexpected pos"), the interrupt only its context. atomic_write raises the interrupt (a
    command's one line, exit 130), not the RuntimeError (a traceback), and keeps the old file."""

    class InterruptedFile(io.BytesIO):
        def write(self, b: bytes) -> int:  # type: ignore[override]
            if self.tell() + len(b) > 100_000:
                raise KeyboardInterrupt
            return super().write(b)

    path = tmp_path / "last.pt"
    path.write_bytes(b"the previous checkpoint")
    with pytest.raises(KeyboardInterrupt) as info:
        bio.atomic_write(path, lambda f: torch.save({"w": torch.zeros(10**6)}, InterruptedFile()))
    assert type(info.value) is KeyboardInterrupt
    assert path.read_bytes() == b"the previous checkpoint" and tmp_files(tmp_path) == []


def test_atomic_torch_save_round_trip(tmp_path: Path) -> None:
    bio.atomic_torch_save(tmp_path / "s.pt", {"w": torch.arange(3)})
    assert torch.equal(torch.load(tmp_path / "s.pt")["w"], torch.arange(3))


def test_a_cuda_device_beyond_the_count_is_a_one_line_error(monkeypatch):
    """--device cuda:N with N >= the device count: not torch's raw "invalid device ordinal"."""
    from bbb.devices import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(UserError, match=r"cuda:3: this machine has 1 CUDA device\(s\), numbered 0 to 0"):
        resolve_device("cuda:3")
