"""Helpers of the fault-injection tests: run ``python -m bbb`` in a subprocess, inspect its
stderr (one line, exit code 2, no traceback) and the processes it leaves behind; a tiny fake
MNIST to train on."""

from __future__ import annotations

import contextlib
import gzip
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def env(**extra: str) -> dict[str, str]:
    e = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    e.update(extra)
    return e


def bbb(*argv: str, timeout: float = 300, **env_extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bbb", *argv], capture_output=True, text=True,
                          env=env(**env_extra), timeout=timeout)


def bbb_in_process(capsys, *argv: str) -> subprocess.CompletedProcess[str]:
    """``bbb ARGV`` run in this process (so that a test can patch what it calls), its exit code,
    stdout and stderr as a CompletedProcess."""
    from bbb.cli import main

    rc = main(list(argv))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["bbb", *argv], rc, out, err)


def assert_one_line_error(p: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit code 2 and exactly one line on stderr, ``bbb COMMAND: error: ...``, holding every word."""
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr[-3000:]
    from bbb.cli.registry import COMMANDS

    argv = list(p.args)
    command = argv[argv.index("bbb") + 1] if len(argv) > argv.index("bbb") + 1 else ""
    prefix = f"bbb {command}: error: " if command in COMMANDS else "bbb: error: "
    assert "Traceback" not in p.stderr and lines[0].startswith(prefix), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


HOLD_LOCK = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
             "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode()); "
             "print('locked', flush=True); time.sleep(600)")


@contextlib.contextmanager
def lock_held(lock: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding an flock on ``lock`` (its pid written there, as bbb does), killed -9 at
    the end."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (to show that nothing was lost or changed)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]) if fields[0] != "Z" else None


def descendants(pid: int) -> set[int]:
    """Live (non-zombie) descendants of ``pid`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = _ppid(int(entry.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def wait_until(cond, timeout: float, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


def kill_9_leaves_no_descendant(proc: subprocess.Popen[str], at_least: int, start: float, settle: float,
                                grace: float) -> None:
    """Once ``proc`` (started with ``start_new_session=True``) has ``at_least`` descendants
    (within ``start`` s) and ``settle`` s more have passed, SIGKILL it alone and assert that every
    one of those descendants ends within ``grace`` s; whatever is left is killed afterwards."""
    kids: set[int] = set()
    try:
        assert wait_until(lambda: len(descendants(proc.pid)) >= at_least, start, 0.1)
        time.sleep(settle)
        kids = descendants(proc.pid)
        proc.kill()
        proc.wait(timeout=30)
        assert wait_until(lambda: not any(alive(k) for k in kids), grace), [k for k in kids if alive(k)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for k in kids:
            if alive(k):
                os.kill(k, signal.SIGKILL)


def _idx_gz(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes(), compresslevel=1)


def fake_mnist(root: Path, n_train: int, n_test: int) -> Path:
    """MNIST-format files whose labels can be learned (the label sets a block of pixels); read
    them with ``BBB_DATA_VERIFY=0`` (they have no known MD5)."""
    rng = np.random.default_rng(0)
    folder = root / "mnist"
    folder.mkdir(parents=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = rng.integers(0, 64, size=(n, 28, 28), dtype=np.uint8)
        for c in range(10):
            images[labels == c, 2 * c:2 * c + 2, :] = 255
        (folder / f"{split}-images-idx3-ubyte.gz").write_bytes(_idx_gz(images))
        (folder / f"{split}-labels-idx1-ubyte.gz").write_bytes(_idx_gz(labels))
    return root
