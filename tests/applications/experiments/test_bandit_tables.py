"""results/bandit/tables.py: the README's tables from a made-up finished run (no training)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

TABLES = Path(__file__).resolve().parents[3] / "results" / "bandit" / "tables.py"
SUMMARY = ["agent", "steps", "seeds", "final_regret_mean", "final_regret_sd", "final_expected_regret_mean",
           "final_expected_regret_sd", "expected_regret_per_step_late", "eat_rate_first_1000", "eat_rate_last_1000",
           "seconds"]


def _run(folder: Path) -> None:
    # BBB's regret grows 0.1 per step on seeds 0-1 and 0.3 on seed 2; greedy's 0.2 everywhere
    slope = {("bbb", 0): 0.1, ("bbb", 1): 0.1, ("bbb", 2): 0.3, ("greedy", 0): 0.2, ("greedy", 1): 0.2,
             ("greedy", 2): 0.2}
    with (folder / "regret.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "agent", "seed", "cumulative_regret", "cumulative_expected_regret", "cumulative_eaten"])
        for step in range(100, 5_001, 100):
            for (agent, seed), k in slope.items():
                w.writerow([step, agent, seed, round(k * step), k * step, step // 2])
    with (folder / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY)
        w.writerow(["bbb", 5000, 3, 833, 577, 833, 577, 0.167, 0.5, 0.5, 1.0])
        w.writerow(["greedy", 5000, 3, 1000, 0, 1000, 0, 0.2, 0.5, 0.5, 1.0])


def test_tables_mark_the_lowest_mean_and_count_bbbs_seeds_below_greedy(tmp_path):
    _run(tmp_path)
    r = subprocess.run([sys.executable, str(TABLES), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "| BBB, Thompson, 2 samples | 833 +- 577 | 833 +- 577 | 0.167 | 50.0% / 50.0% |" in lines
    assert "| 5,000 | **833** | 1,000 |" in lines  # mean cumulative regret at the last checkpoint
    assert "| 1,000-5,000 | **0.17** | 0.20 |" in lines  # expected regret per step over the stretch
    assert "| 2 | 1,500 | **1,000** |" in lines  # per seed: greedy lower on seed 2
    assert "| seeds | 2 | 2 | 2 |" in lines  # below greedy at steps 1,000, 2,000 and 5,000
    assert lines[-1] == "BBB ends below greedy on 2 of 3 seeds."


def test_an_unfinished_run_is_a_one_line_error(tmp_path):
    r = subprocess.run([sys.executable, str(TABLES), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "not finished" in r.stderr


def test_an_older_runs_summary_is_a_one_line_error(tmp_path):
    _run(tmp_path)
    rows = (tmp_path / "summary.csv").read_text().splitlines()
    old = [",".join(r.split(",")[:7]) for r in rows]  # without the late rate and the eat rates
    (tmp_path / "summary.csv").write_text("\n".join(old) + "\n")
    r = subprocess.run([sys.executable, str(TABLES), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "this version" in r.stderr


IVON_TABLES = TABLES.parent / "ivon_tables.py"


def _ivon_run(folder: Path, seeds: tuple[int, ...], last: int, slope: float, agent: str = "ivon") -> None:
    folder.mkdir(parents=True)
    with (folder / "regret.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "agent", "seed", "cumulative_regret", "cumulative_expected_regret", "cumulative_eaten"])
        for step in range(100, last + 1, 100):
            for seed in seeds:
                w.writerow([step, agent, seed, round(slope * step), slope * step, step // 2])
    with (folder / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY)
        w.writerow([agent, last, len(seeds), slope * last, 0, slope * last, 0, slope, 0.5, 0.25, 1.0])


def test_ivon_tables_choose_by_the_screens_rule_and_set_ivon_beside_the_papers_agents(tmp_path):
    """results/bandit/ivon_tables.py: the screen's choice (the lowest mean at 5,000; a diverged
    setting named, never chosen) and the held-out table beside a run of the paper's agents."""
    _ivon_run(tmp_path / "screen" / "lr-a", (0, 1, 2), 5_000, 0.3)
    _ivon_run(tmp_path / "screen" / "lr-b", (0, 1, 2), 5_000, 0.15)
    (tmp_path / "screen" / "lr-c.failed").write_text("lr-c stopped: diverged\n")
    r = subprocess.run([sys.executable, str(IVON_TABLES), "screen", str(tmp_path / "screen")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "| lr-b | 150 | 375 | 750 | 0.150 | 25.0% |" in lines
    assert "| lr-c | diverged: lr-c stopped: diverged |" in lines
    assert lines[-1] == "Chosen (the lowest mean realised regret at 5,000): lr-b"
    paper = tmp_path / "paper"
    paper.mkdir()
    _run(paper)  # BBB 0.1 / 0.1 / 0.3 per step on seeds 0-2, greedy 0.2
    _ivon_run(tmp_path / "heldout", (0, 1, 2), 2_000, 0.15)
    r = subprocess.run([sys.executable, str(IVON_TABLES), "heldout", str(tmp_path / "heldout"), str(paper)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "| 2,000 | 333 | 400 | **300** |" in lines  # BBB, greedy, IVON: only up to IVON's last step
    assert "| below BBB, Thompson, 2 samples | 1 | 1 |" in lines  # seed 2 only (steps 1,000 and 2,000)
    assert "| below greedy | 3 | 3 |" in lines
    # any one agent's run beside them: the ensemble's (ENSEMBLE.md); a run of two agents is refused
    _ivon_run(tmp_path / "ensemble", (0, 1, 2), 1_000, 0.25, agent="ensemble")
    r = subprocess.run([sys.executable, str(IVON_TABLES), "heldout", str(tmp_path / "ensemble"), str(paper)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "Seeds (of 3) on which bootstrapped ensemble's cumulative realised regret is below another agent's:" in lines
    assert "| below BBB, Thompson, 2 samples | 1 |" in lines and "| below greedy | 0 |" in lines
    r = subprocess.run([sys.executable, str(IVON_TABLES), "heldout", str(paper), str(paper)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "give a run of one" in r.stderr
