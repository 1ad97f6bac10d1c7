"""``bbb sweep --population N``: the trials that differ only in a population's member settings
(here the learning rate and the prior's pi) train N at a time as one population, each into its own
trial directory with its own row; a killed sweep resumes each population with the trials it started
with; a trial that cannot join one trains alone; misuse is one line. Tiny networks on synthetic
data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bbb.sweep as S
from bbb.cli import main as cli_main
from bbb.runs import read_metrics
from bbb.runs.population import POPULATION_FILE
from bbb.sweep.populations import POPULATIONS_DIR, population_plan

TINY = {"dataset": "synthetic", "synthetic_dim": 64, "synthetic_train": 320, "width": 8, "depth": 1,
        "batch_size": 64, "epochs": 3, "device": "cpu", "eval_samples": 2, "method": "bbb"}
GRID = {"lr": {"grid": [1e-2, 2e-2]}, "pi": {"grid": [0.25, 0.5]}}


def silent(_: str) -> None:
    pass


def _opts(out: Path, **kw) -> S.SweepOptions:
    return S.SweepOptions(out=out, progress=False, **kw)


def _populations(out: Path, rows: list[dict]) -> dict[str, list[str]]:
    """population folder -> its trials, from the trials' config.json"""
    members: dict[str, list[str]] = {}
    for r in rows:
        config = json.loads((out / r["trial_dir"] / "config.json").read_text())
        if "population" in config:
            members.setdefault(Path(config["population"]["dir"]).name, []).append(r["trial_id"])
    return members


def test_a_grid_trains_as_populations_of_n_and_a_rerun_trains_nothing(tmp_path):
    """Two recipes (1 and 2 samples) of four grid points each, populations of 3: each recipe's first
    three trials train as one population, its fourth alone; every trial's row and files are its own."""
    out = tmp_path / "sweep"
    space = {"params": {**TINY, **GRID, "samples": {"grid": [1, 2]}}}
    rows = S.run_sweep(space, _opts(out, population=3), log=silent)
    assert [r["status"] for r in rows] == ["done"] * 8
    members = _populations(out, rows)
    assert sorted(len(m) for m in members.values()) == [3, 3]
    assert sorted(p.name for p in (out / POPULATIONS_DIR).iterdir()) == sorted(members)
    assert all((out / POPULATIONS_DIR / name / POPULATION_FILE).is_file() for name in members)
    for r in rows:
        d = out / r["trial_dir"]
        config = json.loads((d / "config.json").read_text())
        summary = json.loads((d / "summary.json").read_text())
        assert r["val_error"] == summary["best_val_error"] and len(read_metrics(d)) == 3
        assert (config["lr"], config["pi"], config["samples"]) == (r["params"]["lr"], r["params"]["pi"],
                                                                   r["params"]["samples"])
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")}
    S.run_sweep(space, _opts(out, population=3), log=silent)  # finished: nothing trains again
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")} == stamps
    # and the dry run says so (before, it counted the 8 finished trials as trials to train alone)
    plan = population_plan(S.expand_space(space), out, 3)
    assert "0 population(s) (none) and 0 trial(s) alone, 8 finished already" in plan
    assert "2 population(s) (2 of 3) and 2 trial(s) alone (" in population_plan(S.expand_space(space), None, 3)


def test_a_killed_population_resumes_with_the_trials_it_started_with(tmp_path):
    from bbb.runs.cuda_graph import StepGraphs

    out = tmp_path / "sweep"
    space = {"params": {**TINY, **GRID}}
    calls = {"n": 0}
    begin = StepGraphs.begin

    def killed_in_epoch_2(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return begin(self, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(StepGraphs, "begin", killed_in_epoch_2)
        with pytest.raises(KeyboardInterrupt):
            S.run_sweep(space, _opts(out, population=4), log=silent)
    (pop,) = (out / POPULATIONS_DIR).iterdir()
    assert (pop / POPULATION_FILE).is_file()
    # a re-run with other populations' size still resumes this one with its four trials
    rows = S.run_sweep(space, _opts(out, population=2), log=silent)
    assert [r["status"] for r in rows] == ["done"] * 4
    assert list(_populations(out, rows)) == [pop.name]
    for r in rows:
        hist = json.loads((out / r["trial_dir"] / "history.json").read_text())
        assert [h.get("source") for h in hist if h["event"] == "start"] == ["fresh", "population"]
        assert [row["epoch"] for row in read_metrics(out / r["trial_dir"])] == [1, 2, 3]


@pytest.mark.parametrize("argv,words", [
    (["--population", "1"], "at least 2"),
    (["--population", "2", "--backend", "ray"], "leave out --backend ray"),
    (["--population", "2", "--max-concurrent", "2"], "leave out --max-concurrent"),
])
@pytest.mark.parametrize("dry", [False, True])
def test_misuse_is_one_line(argv, words, dry, tmp_path, capsys):
    """A dry run refuses it too: before, it printed the populations a run would then refuse."""
    assert cli_main(["sweep", "--space", "paper", "--out", str(tmp_path / "s"), *argv,
                     *(["--dry-run"] if dry else [])]) == 2
    out, err = capsys.readouterr()
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "population(s)" not in out


def test_the_help_shows_it(capsys):
    with pytest.raises(SystemExit):
        cli_main(["sweep", "--help"])
    assert "--population N" in capsys.readouterr().out


def test_the_dry_run_says_how_the_papers_grid_groups(capsys):
    """The paper's grid: 12 groups (width x samples) of 81 points, so 108 populations of 9."""
    assert cli_main(["sweep", "--space", "paper", "--dry-run", "--population", "9"]) == 0
    assert "with --population 9: 108 population(s) (108 of 9) and 0 trial(s) alone" in capsys.readouterr().out


def test_a_crashed_population_is_retried_up_to_max_failures(tmp_path, monkeypatch):
    """--max-failures holds for a population as for a trial: a crash is retried (from population.pt),
    and past the last attempt each trial is failed, written, and retried by a re-run."""
    import bbb.sweep.populations as P

    real, calls = P.train_population, {"n": 0}

    def crash_once(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a device fault")
        return real(*a, **k)

    monkeypatch.setattr(P, "train_population", crash_once)
    out = tmp_path / "sweep"
    space = {"params": {**TINY, **GRID}}
    rows = S.run_sweep(space, _opts(out, population=4, max_failures=1), log=silent)
    assert [r["status"] for r in rows] == ["done"] * 4 and calls["n"] == 2
    hist = json.loads((out / rows[0]["trial_dir"] / "history.json").read_text())
    assert [h["event"] for h in hist] == ["start", "error", "start"]

    def always(*a, **k):
        raise RuntimeError("a device fault")

    monkeypatch.setattr(P, "train_population", always)
    out2 = tmp_path / "sweep2"
    rows = S.run_sweep(space, _opts(out2, population=4, max_failures=1), log=silent)
    assert all(r["status"] == "failed" and r["retry"] and "after 2 attempts" in r["error"] for r in rows)
    assert all((out2 / r["trial_dir"] / "result.json").is_file() for r in rows)
    monkeypatch.setattr(P, "train_population", real)
    assert [r["status"] for r in S.run_sweep(space, _opts(out2, population=4), log=silent)] == ["done"] * 4
