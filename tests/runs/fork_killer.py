"""The kill -9 harness of ``test_train_kill.py``: one process that has imported torch and bbb
forks every ``bbb train`` it needs (a fork costs milliseconds, a fresh interpreter seconds), so
50 killed runs take about a minute.

    python fork_killer.py PLAN.json RESULT.json

PLAN: ``{"argv": [...bbb train arguments but --out...], "root": DIR, "kills": N, "seed": S}``.
It trains ``DIR/ref`` uninterrupted, recording the commit (``os.replace``) of every file it
writes, then for each of the N trials trains ``DIR/kill<i>`` and kills it with SIGKILL at a random
instant: half of them just before or just after the k-th file commit (k drawn over the
reference's whole write sequence), half after a random delay over the reference's duration.
Each killed directory is then checked by the readers (the committed history, the committed best
model), and the run is resumed with ``bbb train --resume`` (started afresh when the kill came
before its first checkpoint). RESULT lists what happened in every trial; the test compares the
directories' files with the reference.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

os.environ["BBB_DATA_VERIFY"] = "0"  # the fake MNIST has no known checksum
import torch  # noqa: E402

torch.set_num_threads(1)  # before any parallel region: forking is safe with one thread

from bbb.cli import main  # noqa: E402
from bbb.runs import committed_checkpoint, load_checkpoint, read_metrics  # noqa: E402


def fork(body, log: Path) -> int:
    """Run ``body()`` (its return value the exit code) in a forked child; returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 99
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        code = int(body() or 0)
    except BaseException:  # noqa: BLE001 - the child reports everything through its exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def wait(pid: int) -> int:
    """The exit code of ``pid``, or minus the signal that ended it."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def train(argv: list[str], log: Path, record: Path | None = None, kill_at: int = 0, before: bool = False):
    """``bbb train ARGV``; each committed file's name appended to ``record``; SIGKILL just before
    or just after the ``kill_at``-th commit."""
    def body() -> int:
        real = os.replace
        count = 0

        def replace(src, dst, **kw):
            nonlocal count
            count += 1
            if count == kill_at and before:
                os.kill(os.getpid(), signal.SIGKILL)
            real(src, dst, **kw)
            if record is not None:
                with open(record, "a") as f:
                    f.write(Path(dst).name + "\n")
            if count == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

        os.replace = replace
        return main(["train", *argv])
    return fork(body, log)


def check(out: Path) -> int:
    """What a reader sees in a killed run directory is one committed state: the metrics history
    of last.pt (metrics.csv may be behind, never different) and the best model last.pt names."""
    if not (out / "last.pt").exists():
        return 0
    last = load_checkpoint(out / "last.pt")
    rows = read_metrics(out)
    assert [r["epoch"] for r in rows] == list(range(1, last["epoch"] + 1)), (rows, last["epoch"])
    if last["epoch"] > 0:
        _, best = committed_checkpoint(out, "best")
        assert best["epoch"] == last["best"]["epoch"], (best["epoch"], last["best"])
    return 0


def main_(plan_path: str, result_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    root, argv = Path(plan["root"]), plan["argv"]
    rng = random.Random(plan["seed"])
    ref = root / "ref"
    commits = root / "ref-commits.txt"
    # once here, so that the children find torch's and bbb's lazy imports and first-call set-up
    # done (the optimiser's first construction alone imports torch._dynamo: seconds)
    with open(root / "warm-up.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        assert main(["train", *argv, "--out", str(root / "warm-up")]) == 0
    shutil.rmtree(root / "warm-up")
    t0 = time.perf_counter()
    assert wait(train([*argv, "--out", str(ref)], root / "ref.log", record=commits)) == 0, \
        (root / "ref.log").read_text()
    duration = time.perf_counter() - t0
    writes = len(commits.read_text().split())
    trials = []
    for i in range(plan["kills"]):
        out = root / f"kill{i}"
        log = root / f"kill{i}.log"
        trial: dict = {"dir": out.name}
        if i % 2 == 0:
            k, before = rng.randint(1, writes), rng.random() < 0.5
            trial["kill"] = f"{'before' if before else 'after'} commit {k} of {writes}"
            pid = train([*argv, "--out", str(out)], log, kill_at=k, before=before)
        else:
            delay = rng.uniform(0.0, 0.9) * duration
            for _ in range(4):  # a child faster than the reference (a quieter machine) may end first:
                trial["kill"] = f"after {delay:.3f} s of {duration:.3f} s"  # then again, sooner
                pid = train([*argv, "--out", str(out)], log)
                time.sleep(delay)
                os.kill(pid, signal.SIGKILL)
                if wait(pid) == -signal.SIGKILL:
                    break
                shutil.rmtree(out, ignore_errors=True)
                delay /= 2
            else:
                pid = 0
        trial["killed"] = (wait(pid) == -signal.SIGKILL) if i % 2 == 0 else pid != 0
        trial["epoch_at_kill"] = (load_checkpoint(out / "last.pt", mmap=True)["epoch"]
                                  if (out / "last.pt").exists() else None)
        trial["check"] = wait(fork(lambda out=out: check(out), log))
        again = ["--resume", "--out", str(out), "--quiet"] if (out / "last.pt").exists() else \
            [*argv, "--out", str(out)]
        trial["resume"] = wait(train(again, log))
        trial["log"] = log.read_text()[-2000:] if log.exists() else ""
        trials.append(trial)
    Path(result_path).write_text(json.dumps({"writes": writes, "seconds": duration, "trials": trials}))


if __name__ == "__main__":
    main_(*sys.argv[1:3])
