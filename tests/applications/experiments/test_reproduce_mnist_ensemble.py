"""``bbb reproduce mnist``'s deep-ensemble rows (not in the paper; the quick budget: 5 members):
one row per width, the SGD cell of that width trained with that many seeds (the SGD row's mean is
over the same seeds), the predictive the mean of their softmax outputs (each run's best
checkpoint); test error the argmax of that mean, its NLL and ECE beside the members' mean. A row
whose seeds are not all finished says so; the paper budget has none and says so in one line."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch

from bbb import runs as T
from bbb.errors import UserError
from bbb.experiments import mnist as M
from bbb.experiments.mnist import ReproduceConfig, run_reproduce
from bbb.experiments.mnist import ensemble_rows as E
from bbb.experiments.mnist.tables import recipes_md
from testkit import SILENT, blobs4, eager_kernels, read_csv, run_main

NAME = "Deep ensemble of SGD networks (not in the paper)"
K = 3  # the members of the smoke budget's ensembles here (the quick budget has 5)


def test_the_quick_budget_has_deep_ensembles_of_5_and_the_paper_budget_none(capsys):
    assert M.BUDGETS["quick"].ensemble == 5 and not M.BUDGETS["paper"].ensemble
    assert M.parse_cells("ensemble:800", "quick") == (("sgd", 800),)
    _, extra = M.plan_jobs(ReproduceConfig(budget="quick", out="unused", cells="ensemble"))
    assert sorted(j.name for j in extra) == sorted(f"sgd_{w}_s{s}" for w in M.WIDTHS for s in range(1, 5))
    # the other cells keep the budget's seeds (1 at quick)
    _, extra = M.plan_jobs(ReproduceConfig(budget="quick", out="unused", cells="dropout,bbb-mixture"))
    assert extra == []
    with pytest.raises(UserError, match="--budget quick") as e:
        ReproduceConfig(budget="paper", out="x", cells="ensemble:400")
    assert "\n" not in str(e.value) and "paper budget has no deep-ensemble rows" in str(e.value)
    rc, _, err = run_main(capsys, "reproduce", "mnist", "--cells", "ensemble", "--budget", "paper", "--plan")
    assert rc != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    row = [line for line in recipes_md() if line.startswith("| deep ensemble")]
    assert len(row) == 1 and "5 seeds" in row[0] and row[0].endswith("not trained at this budget |")
    seeds = [line for line in recipes_md() if line.startswith("| seeds")][0]
    assert "5 for SGD (the deep ensembles' members)" in seeds


@pytest.fixture(scope="module")
def smoke_ensemble(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The smoke budget given deep ensembles of K: its SGD cells with K seeds each, on tiny data."""
    out = tmp_path_factory.mktemp("reproduce") / "mnist"
    data = blobs4()
    with pytest.MonkeyPatch.context() as mp, eager_kernels():
        mp.setitem(M.BUDGETS, "smoke", dataclasses.replace(M.BUDGETS["smoke"], ensemble=K))
        cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, cells="ensemble")
        res = run_reproduce(cfg, data=data, **SILENT)
    return {"out": out, "res": res, "data": data}


def test_the_rows_are_the_mean_of_the_sgd_seeds_softmax(smoke_ensemble):
    out, data = smoke_ensemble["out"], smoke_ensemble["data"]
    assert sorted(smoke_ensemble["res"]["trained"]) == sorted(
        f"sgd_{w}" + (f"_s{s}" if s else "") for w in M.WIDTHS for s in range(K))
    rows = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}
    assert {w for m, w in rows if m == "deep_ensemble"} == set(M.WIDTHS)
    for w in M.WIDTHS:
        r, sgd = rows[("deep_ensemble", w)], rows[("sgd", w)]
        assert r["status"] == "ok" and r["paper_test_error"] == "" and int(r["n_seeds"]) == 1
        names = [f"sgd_{w}"] + [f"sgd_{w}_s{s}" for s in range(1, K)]
        assert r["members"].split() == names and int(sgd["n_seeds"]) == K  # the SGD row: the same seeds' mean
        probs = []
        for n in names:
            model, _ = T.load_run(out / "runs" / n, "best")
            with torch.no_grad():
                probs.append(model(data["test_x"]).double().softmax(-1))
        mean = torch.stack(probs).mean(0)
        y = data["test_y"]
        assert float(r["test_error"]) == pytest.approx(100.0 * float((mean.argmax(-1) != y).double().mean()), abs=1e-3)
        assert float(r["test_nll"]) == pytest.approx(float(-mean.gather(1, y[:, None]).log().mean()), abs=1e-5)
        each = [float(-p.gather(1, y[:, None]).log().mean()) for p in probs]
        assert float(r["members_test_nll"]) == pytest.approx(sum(each) / K, abs=1e-5)
        errs = [100.0 * float((p.argmax(-1) != y).double().mean()) for p in probs]
        assert float(r["members_test_error"]) == pytest.approx(sum(errs) / K, abs=1e-3)
        assert float(sgd["test_error"]) == pytest.approx(sum(errs) / K, abs=1e-3)  # best checkpoints, test split
        assert float(r["test_nll"]) <= float(r["members_test_nll"]) + 1e-9  # the NLL is convex in the probabilities
        secs = sum(json.loads((out / "runs" / n / "summary.json").read_text())["seconds"] for n in names)
        assert float(r["seconds"]) >= secs
    md = (out / "table1.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith(f"| {NAME} | 400 |"))
    assert f"{K} seeds of runs/sgd_400 (best checkpoints)" in line and "members' mean" in line
    assert "The deep-ensemble rows" in md and f"trained with {K} seeds" in md


def test_a_row_is_computed_once_and_waits_for_its_seeds(smoke_ensemble, monkeypatch):
    out, data = smoke_ensemble["out"], smoke_ensemble["data"]
    before = {w: json.loads((out / "ensemble" / f"ensemble_{w}.json").read_text())["row"] for w in M.WIDTHS}

    def again(*a, **k):
        raise AssertionError("computed again")

    monkeypatch.setattr(E, "_softmax", again)
    monkeypatch.setitem(M.BUDGETS, "smoke", dataclasses.replace(M.BUDGETS["smoke"], ensemble=K))
    cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, cells="ensemble")
    res = run_reproduce(cfg, data=data, report_only=True, **SILENT)
    rows = {r["hidden"]: r for r in res["table1"] if r["method"] == "deep_ensemble"}
    assert all(rows[w] == before[w] and rows[w]["status"] == "ok" for w in M.WIDTHS)
    # one member more than trained: the rows wait for it (and say which command trains it)
    monkeypatch.setitem(M.BUDGETS, "smoke", dataclasses.replace(M.BUDGETS["smoke"], ensemble=K + 1))
    res = run_reproduce(ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, cells="ensemble"),
                        data=data, report_only=True, **SILENT)
    rows = {r["hidden"]: r for r in res["table1"] if r["method"] == "deep_ensemble"}
    for w in M.WIDTHS:
        assert rows[w]["status"] == "incomplete" and f"--cells sgd:{w}" in rows[w]["pending"]
        assert f"seed {K}" in rows[w]["pending"]
    line = next(x for x in (out / "table1.md").read_text().splitlines() if x.startswith(f"| {NAME} | 800 |"))
    assert "**incomplete**" in line
