"""``bbb reproduce uci --seed-runs``: each method's spread over runs that differ only in --seed
(seeds.csv, seeds.md), and the one-line refusals of runs that cannot be compared."""

from __future__ import annotations

import csv
import json
import math
import shutil

import pytest

from bbb.errors import UserError
from bbb.experiments.uci.seeds import SEED_COLUMNS, seed_spread
from testkit import read_csv, run_main

from .test_reproduce_uci import write_dataset


def row(dataset: str, method: str, rmse: float, ll: float, n: int = 20) -> dict:
    return {"dataset": dataset, "method": method, "n_splits": n, "rmse_mean": rmse, "ll_mean": ll}


def test_the_spread_is_the_mean_and_sample_sd_over_seeds_of_what_every_run_holds():
    runs = {2: [row("yacht", "bbb", 0.9, -0.5), row("yacht", "mc_dropout", 0.7, -1.0)],
            0: [row("yacht", "bbb", 0.7, -0.3), row("yacht", "mc_dropout", 0.7, -1.2), row("energy", "bbb", 0.5, -0.8)],
            1: [row("yacht", "bbb", 0.8, -0.4), row("yacht", "mc_dropout", 0.7, -1.1),
                row("yacht", "deep_ensemble", 0.6, 0.3)]}
    got = seed_spread(runs)
    # only what all three hold (energy and the ensemble are in one run each), in the first run's order
    assert [(r["dataset"], r["method"]) for r in got] == [("yacht", "bbb"), ("yacht", "mc_dropout")]
    bbb = got[0]
    assert bbb["seeds"] == "0 1 2" and bbb["rmse_by_seed"] == "0.7000 0.8000 0.9000"
    assert bbb["rmse_mean"] == pytest.approx(0.8) and bbb["rmse_sd"] == pytest.approx(0.1)  # sample sd (n - 1)
    assert bbb["ll_mean"] == pytest.approx(-0.4) and bbb["ll_sd"] == pytest.approx(0.1)
    assert got[1]["rmse_sd"] == 0.0 and got[1]["ll_by_seed"] == "-1.2000 -1.1000 -1.0000"
    # a different number of splits is not the same entry
    assert seed_spread({0: [row("yacht", "bbb", 1, 1, n=20)], 1: [row("yacht", "bbb", 1, 1, n=3)]}) == []
    # nor are other splits of the same number
    assert seed_spread({0: [{**row("yacht", "bbb", 1, 1, n=2), "splits": "0 1"}],
                        1: [{**row("yacht", "bbb", 1, 1, n=2), "splits": "2 3"}]}) == []
    # the intervals' gap where every run has it (a run reported before the column existed has none)
    gaps = seed_spread({s: [{**row("yacht", "bbb", 1, 1), "calibration_gap": g},
                            {**row("yacht", "mc_dropout", 1, 1), **({"calibration_gap": g} if s else {})}]
                        for s, g in ((0, 0.02), (1, 0.04), (2, 0.06))})
    assert gaps[0]["calibration_gap_mean"] == pytest.approx(0.04)
    assert gaps[0]["calibration_gap_sd"] == pytest.approx(0.02)
    assert gaps[0]["calibration_gap_by_seed"] == "0.0200 0.0400 0.0600" and "calibration_gap_mean" not in gaps[1]
    with pytest.raises(UserError, match="2 or more seeds"):
        seed_spread({0: [row("yacht", "bbb", 1, 1)]})


def test_seed_runs_writes_the_spread_and_refuses_runs_it_cannot_compare(tmp_path, capsys):
    data = write_dataset(tmp_path / "data")
    base = ["reproduce", "uci", "--datasets", "yacht", "--budget", "smoke", "--samples", "4", "--splits", "0", "1",
            "--data-dir", str(data), "--quiet"]
    outs = {s: tmp_path / f"seed{s}" for s in (0, 1, 2)}
    for s in (1, 2):
        rc, _, err = run_main(capsys, *base, "--seed", str(s), "--out", str(outs[s]))
        assert rc == 0, err
    rc, out, err = run_main(capsys, *base, "--seed", "0", "--out", str(outs[0]), "--seed-runs", str(outs[1]),
                            str(outs[2]))
    assert rc == 0, err
    spread = read_csv(outs[0] / "seeds.csv")
    assert list(spread[0]) == SEED_COLUMNS
    assert [(r["method"], r["seeds"], r["n_splits"]) for r in spread] == [
        ("bbb", "0 1 2", "2"), ("mc_dropout", "0 1 2", "2"), ("deep_ensemble", "0 1 2", "2")]
    for r in spread:  # each seed's entry is that run's methods.csv entry
        by_seed = [float(v) for v in r["rmse_by_seed"].split()]
        for s, v in zip((0, 1, 2), by_seed):
            m = next(x for x in read_csv(outs[s] / "methods.csv") if x["method"] == r["method"])
            assert v == pytest.approx(float(m["rmse_mean"]), abs=5e-5)
        assert math.isfinite(float(r["rmse_sd"])) and float(r["rmse_sd"]) > 0  # the seed moves the numbers
        gap = [float(v) for v in r["calibration_gap_by_seed"].split()]  # and its intervals' gap
        for s, g in zip((0, 1, 2), gap):
            m = next(x for x in read_csv(outs[s] / "methods.csv") if x["method"] == r["method"])
            assert g == pytest.approx(float(m["calibration_gap"]), abs=5e-5)
        assert len(gap) == 3 and float(r["calibration_gap_mean"]) == pytest.approx(sum(gap) / 3, abs=5e-5)
    assert "seeds.csv" in out and "test RMSE: mean (sd)" in out
    assert "interval gap pp" in out and "interval gap pp: mean (sd)" in out  # the terminal shows the gap too
    md = (outs[0] / "seeds.md").read_text()
    assert "| yacht | bbb | 2 |" in md and "interval gap, points: mean (sd)" in md
    assert (f"Command: `bbb reproduce uci --report --datasets yacht --splits 0 1 --out {outs[0]} --seed-runs {outs[1]} "
            f"{outs[2]}`") in md
    # --report of the finished run gives the same spread (its seed from run.json, not the default)
    report = ["reproduce", "uci", "--report", "--datasets", "yacht", "--splits", "0", "1", "--data-dir", str(data)]
    rc, _, err = run_main(capsys, *report, "--out", str(outs[1]), "--seed-runs", str(outs[0]), str(outs[2]), "--quiet")
    assert rc == 0, err
    assert read_csv(outs[1] / "seeds.csv") == spread

    def refused(*folders: str) -> str:
        rc, _, err = run_main(capsys, *report, "--out", str(outs[0]), "--seed-runs", *folders)
        assert rc != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        return err

    assert "holds no finished bbb reproduce uci run" in refused(str(tmp_path / "nothing"))
    assert "--seed 0, as another of the runs" in refused(str(outs[0]))
    other = shutil.copytree(outs[1], tmp_path / "other")
    meta = json.loads((other / "run.json").read_text())
    meta["config"]["samples"] = 100
    (other / "run.json").write_text(json.dumps(meta))
    assert "samples=100" in refused(str(other)) and "differ only in --seed" in refused(str(other))
    meta["config"]["samples"] = 4
    del meta["config"]["seed"]
    (other / "run.json").write_text(json.dumps(meta))
    assert "cannot be read" in refused(str(other))
    (other / "run.json").write_text(json.dumps({**meta, "config": {**meta["config"], "seed": 5}}))
    (other / "methods.csv").write_text("method,dataset\nbbb,yacht\n")
    assert "cannot be read" in refused(str(other))
    # a run of the same number of other splits: their spread is the splits', not the seed's
    moved = shutil.copytree(outs[1], tmp_path / "moved")
    rows = read_csv(moved / "splits.csv")
    for r in rows:
        r["split"] = str(int(r["split"]) + 2)
    with (moved / "splits.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert "no dataset and method with the same splits is finished in every run" in refused(str(moved))
    # a run of other datasets shares nothing to compare
    (other / "methods.csv").write_text((outs[1] / "methods.csv").read_text().replace("yacht", "energy"))
    assert "no dataset and method with the same splits is finished in every run" in refused(str(other))
    # one of this run's methods missing from another run: the rest compared, what is left out said
    lines = (outs[1] / "methods.csv").read_text().splitlines()
    (other / "methods.csv").write_text("\n".join(line for line in lines if not line.startswith("bbb,")) + "\n")
    rc, out, err = run_main(capsys, *report, "--out", str(outs[0]), "--seed-runs", str(other))
    assert rc == 0, err
    assert [r["method"] for r in read_csv(outs[0] / "seeds.csv")] == ["mc_dropout", "deep_ensemble"]
    assert "not in every seed run (left out of seeds.csv): yacht/bbb" in out
