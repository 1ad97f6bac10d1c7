"""``bbb prune`` points a run on your own data at its moved file with ``--csv FILE``, as ``bbb
evaluate`` and ``bbb predict`` do (issue 72, item 9)."""

from __future__ import annotations

import csv
import random

from testkit import run_main


def test_prune_takes_the_moved_csv(capsys, tmp_path):
    rng = random.Random(0)
    table = tmp_path / "t.csv"
    with table.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "label"])
        for _ in range(120):
            a, b = rng.gauss(0, 1), rng.gauss(0, 1)
            w.writerow([f"{a:.4f}", f"{b:.4f}", "up" if a + b > 0 else "down"])
    run = tmp_path / "run"
    rc, _, err = run_main(capsys, "train", "--csv", str(table), "--target", "label", "--epochs", "2", "--hidden", "8",
                          "--out", str(run), "--quiet", "--device", "cpu")
    assert rc == 0, err
    moved = table.rename(tmp_path / "elsewhere.csv")
    rc, _, err = run_main(capsys, "prune", str(run), "--device", "cpu")
    assert rc != 0 and "--csv FILE" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_main(capsys, "prune", str(run), "--device", "cpu", "--csv", str(moved), "--fractions", "0", "0.5")
    assert rc == 0, err
    assert (run / "pruning.csv").read_text().count("\n") == 3
