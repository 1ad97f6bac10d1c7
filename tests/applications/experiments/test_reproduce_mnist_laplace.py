"""``bbb reproduce mnist``'s last-layer Laplace rows (issue 75, item 4): at the smoke and quick
budgets one row per width, each the SGD cell's network of that width (its run, its best
checkpoint: nothing trains for them) with a last-layer Laplace (KFAC, prior precision by the
marginal likelihood, probit predictive); test error the argmax of that predictive, its test NLL
and ECE beside the SGD network's. A one-line note in the row, not a crash, where laplace-torch is
missing; the paper budget has none and says so in one line."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from bbb import runs as T
from bbb.errors import MissingExtra, UserError
from bbb.experiments import mnist as M
from bbb.experiments.mnist import ReproduceConfig, run_reproduce
from bbb.experiments.mnist.tables import recipes_md
from bbb.laplace import fit_last_layer_laplace, laplace_available
from testkit import SILENT, blobs4, eager_kernels, read_csv, run_main

needs_laplace = pytest.mark.skipif(not laplace_available(), reason="laplace-torch is not installed")
LAPLACE_NAME = "Last-layer Laplace (not in the paper)"


def test_the_quick_budget_has_laplace_rows_and_the_paper_budget_none(capsys):
    assert M.BUDGETS["quick"].laplace and M.BUDGETS["smoke"].laplace and not M.BUDGETS["paper"].laplace
    # laplace:W names the SGD cell its row is of: the row trains nothing of its own
    assert M.parse_cells("laplace:400", "quick") == (("sgd", 400),)
    assert M.parse_cells("laplace", "smoke") == (("sgd", 1200), ("sgd", 400), ("sgd", 800))
    first, _ = M.plan_jobs(ReproduceConfig(budget="quick", out="unused"))
    assert not any(j.method == "laplace" for j in first) and len(first) == 15  # no run of its own
    with pytest.raises(UserError, match="--budget quick or smoke") as e:
        ReproduceConfig(budget="paper", out="x", cells="laplace:400")
    assert "\n" not in str(e.value) and "paper budget has no last-layer Laplace" in str(e.value)
    rc, _, err = run_main(capsys, "reproduce", "mnist", "--cells", "laplace", "--budget", "paper", "--plan")
    assert rc != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    row = [line for line in recipes_md() if line.startswith("| last-layer Laplace")]
    assert len(row) == 1 and "marginal likelihood" in row[0] and row[0].endswith("not trained at this budget |")


@pytest.fixture(scope="module")
def smoke_sgd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The smoke budget's SGD cells on tiny data (one epoch each), and the tables with their Laplace rows."""
    out = tmp_path_factory.mktemp("reproduce") / "mnist"
    cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, cells="laplace")
    data = blobs4()
    with eager_kernels():
        res = run_reproduce(cfg, data=data, **SILENT)
    return {"out": out, "res": res, "cfg": cfg, "data": data}


@needs_laplace
def test_laplace_rows_are_the_sgd_networks_with_a_last_layer_laplace(smoke_sgd):
    out, data = smoke_sgd["out"], smoke_sgd["data"]
    assert smoke_sgd["res"]["trained"] == ["sgd_1200", "sgd_400", "sgd_800"]  # nothing more trained for laplace
    rows = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}
    assert len(rows) == 18 and {w for m, w in rows if m == "laplace"} == {400, 800, 1200}
    for w in (400, 800, 1200):
        r, sgd = rows[("laplace", w)], rows[("sgd", w)]
        assert r["status"] == "ok" and r["of_run"] == f"sgd_{w}" and r["paper_test_error"] == ""
        assert (r["epochs"], r["best_epoch"]) == (sgd["epochs"], sgd["best_epoch"])
        assert float(r["seconds"]) >= float(sgd["seconds"])  # the SGD run's time and the fit's
        # the same numbers again from the SGD run's best checkpoint: the probit predictive's argmax
        model, _ = T.load_run(out / "runs" / f"sgd_{w}", "best")
        post = fit_last_layer_laplace(model, (data["train_x"], data["train_y"]), likelihood="classification")
        probs = post.predict(data["test_x"]).double()
        err = 100.0 * float((probs.argmax(-1) != data["test_y"]).double().mean())
        assert float(r["test_error"]) == pytest.approx(err, abs=1e-3)
        assert float(r["prior_precision"]) == pytest.approx(post.prior_precision, rel=1e-5)
        nll = float(-probs.gather(1, data["test_y"][:, None]).log().mean())
        assert float(r["test_nll"]) == pytest.approx(nll, abs=1e-5)
        with torch.no_grad():
            map_p = model(data["test_x"]).double().softmax(-1)
        assert float(r["map_test_nll"]) == pytest.approx(float(-map_p.gather(1, data["test_y"][:, None]).log().mean()),
                                                         abs=1e-5)
        assert 0 <= float(r["test_ece"]) <= 100 and 0 <= float(r["map_test_ece"]) <= 100
    md = (out / "table1.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith(f"| {LAPLACE_NAME} | 400 |"))
    assert "of runs/sgd_400 (best checkpoint)" in line and "probit" in line and "SGD's" in line
    assert "The last-layer Laplace rows" in md and "train nothing" in md


def test_without_laplace_torch_the_rows_say_so_and_the_rest_stands(smoke_sgd, monkeypatch):
    import bbb.laplace as L

    def missing():
        raise MissingExtra(f"last-layer Laplace needs laplace-torch: {L.INSTALL}", "laplace")

    monkeypatch.setattr(L, "require_laplace", missing)
    res = run_reproduce(ReproduceConfig(budget="smoke", out=str(smoke_sgd["out"]), device="cpu", quiet=True),
                        data=smoke_sgd["data"], report_only=True, **SILENT)
    rows = {(r["method"], r["hidden"]): r for r in res["table1"]}
    for w in (400, 800, 1200):
        assert rows[("laplace", w)]["status"] == "skipped" and "pip install" in rows[("laplace", w)]["pending"]
        assert rows[("sgd", w)]["status"] == "ok"
    md = (smoke_sgd["out"] / "table1.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith(f"| {LAPLACE_NAME} | 800 |"))
    assert "**skipped**" in line and "laplace-torch" in line


@needs_laplace
def test_a_row_is_fitted_once_per_sgd_run(smoke_sgd, monkeypatch):
    """Each call writes the tables: a row fitted before on the same run and data is read back, not fitted again."""
    import bbb.laplace as L

    out = smoke_sgd["out"]
    assert {p.name for p in (out / "laplace").iterdir()} == {f"laplace_{w}.json" for w in (400, 800, 1200)}
    before = {w: json.loads((out / "laplace" / f"laplace_{w}.json").read_text())["row"] for w in (400, 800, 1200)}

    def refit(*a, **k):
        raise AssertionError("fitted again")

    monkeypatch.setattr(L, "fit_last_layer_laplace", refit)
    res = run_reproduce(ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True),
                        data=smoke_sgd["data"], report_only=True, **SILENT)
    rows = {r["hidden"]: r for r in res["table1"] if r["method"] == "laplace"}
    assert all(rows[w] == before[w] and rows[w]["status"] == "ok" for w in (400, 800, 1200))
