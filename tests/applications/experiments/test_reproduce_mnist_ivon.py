"""``bbb reproduce mnist``'s IVON cells (issue 73, item 3): ``ivon:400``, ``ivon:800`` and
``ivon:1200`` at the smoke and quick budgets (one fixed recipe, the defaults of ``bbb train
--method ivon``, on the epochs of the BBB Gaussian cells), an IVON row in Table 1 without a paper
number, IVON in Figures 2-3 and not in Table 2 (said in its notes), and the paper budget refusing
the cells in one line that names the quick budget."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from bbb.errors import UserError
from bbb.experiments import mnist as M
from bbb.experiments.mnist import ReproduceConfig, run_reproduce
from bbb.experiments.mnist import figures as MF
from bbb.experiments.mnist.plan import make_job
from bbb.experiments.mnist.pruning_table import table2_md
from bbb.experiments.mnist.recipes import PAPER_METHODS
from bbb.experiments.mnist.tables import recipes_md
from bbb.runs.config import METHOD_DEFAULTS
from testkit import SILENT, blobs4, eager_kernels, read_csv, run_main

IVON_CELLS = [("ivon", 400), ("ivon", 800), ("ivon", 1200)]


def test_the_quick_budget_trains_ivon_with_its_defaults_on_the_bbb_gaussian_epochs():
    spec = M.BUDGETS["quick"]
    assert [c for c in spec.cells if c[0] == "ivon"] == IVON_CELLS
    first, _ = M.plan_jobs(ReproduceConfig(budget="quick", out="unused"))
    assert len(first) == 15
    jobs = {j.cell: j for j in first}
    want = METHOD_DEFAULTS["ivon"]
    for cell in IVON_CELLS:
        assert len(M.cell_candidates(spec, *cell)) == 1  # one fixed recipe per cell
        tc = jobs[cell].config
        assert tc.method == "ivon" and tc.hidden == [cell[1]] * 2 and tc.ess is None  # ess: the training set
        assert (tc.lr, tc.hess_init, tc.weight_decay) == (want["lr"], want["hess_init"], want["weight_decay"])
        assert tc.lr_schedule == "cosine" and tc.samples == 1 and tc.batch_size == 128
        assert tc.epochs == spec.epochs["bbb_gaussian"][cell[1]]  # the same cost as the BBB Gaussian cell
        assert "not tuned on test" in jobs[cell].reason and "defaults" in jobs[cell].reason
        assert M.estimate_seconds(jobs[cell]) > 0
    assert "IVON" in spec.note and "before any quick run" in spec.note


def test_ivon_cells_parse_at_quick_and_are_a_one_line_error_at_the_paper_budget(capsys):
    assert M.parse_cells("ivon:1200", "quick") == (("ivon", 1200),)
    assert M.parse_cells("ivon", "smoke") == tuple(IVON_CELLS)
    assert ReproduceConfig(budget="quick", out="x", cells="ivon:1200").cells == (("ivon", 1200),)
    paper = M.BUDGETS["paper"]
    assert paper.methods == PAPER_METHODS and sorted(paper.cells) == sorted(M.PAPER_TABLE1)
    assert ReproduceConfig(budget="paper", out="x").cells == paper.cells  # the default: its 12 cells
    # a config of every cell stays one of every cell when replace() moves it to the paper budget
    assert dataclasses.replace(ReproduceConfig(budget="quick", out="x"), budget="paper").cells == paper.cells
    assert "ivon" not in {m for m, _ in M.parse_cells("all", "paper")}
    for cells in ("ivon:400", "ivon", "sgd:400,ivon:1200"):
        with pytest.raises(UserError, match="--budget quick") as e:
            ReproduceConfig(budget="paper", out="x", cells=cells)
        assert "\n" not in str(e.value) and "paper budget does not train ivon" in str(e.value)
    rc, _, err = run_main(capsys, "reproduce", "mnist", "--cells", "ivon:400", "--budget", "paper", "--plan")
    assert rc != 0 and "--budget quick" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    # the recipes side by side say the paper budget leaves IVON out
    ivon_row = [line for line in recipes_md() if line.startswith("| IVON")]
    assert len(ivon_row) == 1 and "lr 0.5" in ivon_row[0] and "not trained at this budget" in ivon_row[0]


@pytest.fixture(scope="module")
def smoke_ivon(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The smoke budget's IVON cells on tiny data (one epoch each)."""
    out = tmp_path_factory.mktemp("reproduce") / "mnist"
    cfg = ReproduceConfig(budget="smoke", out=str(out), device="cpu", quiet=True, cells="ivon")
    with eager_kernels():
        res = run_reproduce(cfg, data=blobs4(), **SILENT)
    return {"out": out, "res": res, "cfg": cfg}


def test_table1_has_an_ivon_row_beside_the_paper_methods(smoke_ivon):
    out = smoke_ivon["out"]
    assert smoke_ivon["res"]["trained"] == ["ivon_400", "ivon_800", "ivon_1200"]
    rows = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")
            if r["method"] != "laplace"}  # the last-layer Laplace rows: test_reproduce_mnist_laplace.py
    assert len(rows) == 15 and set(rows) == set(M.PAPER_TABLE1) | set(IVON_CELLS)
    for cell in IVON_CELLS:
        r = rows[cell]
        assert r["status"] == "ok" and r["paper_test_error"] == "" and r["gap_vs_paper_pp"] == ""
        assert 0.0 <= float(r["test_error"]) <= 100.0
        cfg = json.loads((out / r["run"] / "config.json").read_text())
        assert cfg["method"] == "ivon" and cfg["ess_used"] == 256
        # the columns say what trained it: IVON, its own settings; none of BBB's or Adam's
        assert (r["optimizer"], float(r["lr"]), float(r["hess_init"]), float(r["weight_decay"])) == (
            "ivon", cfg["lr"], cfg["hess_init"], cfg["weight_decay"])
        assert r["prior"] == r["pi"] == r["rho_init"] == r["kl_weighting"] == ""
    assert all(rows[(m, w)]["status"] == "not run" for m, w in M.PAPER_TABLE1)
    md = (out / "table1.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| IVON (not in the paper) | 1200 |"))
    assert "IVON lr 0.5" in line and "hess-init 0.5" in line and "| - |" in line  # no paper number
    assert "IVON (`bbb train --method ivon`" in md and "is not in the paper" in md


def test_figures_2_and_3_include_ivon_and_table2_notes_leave_it_out(smoke_ivon):
    out = smoke_ivon["out"]
    curves = read_csv(out / "fig2_curves.csv")
    assert curves and curves[0]["ivon_test_error"] != "" and curves[0]["sgd_test_error"] == ""
    weights = json.loads((out / "fig3_weights.json").read_text())
    assert set(weights["methods"]) == {"ivon"} and "IVON: one sample from q" in weights["what"]
    assert "table2_pruning.md" not in smoke_ivon["res"]["files"]  # the BBB 2x1200 cell is not run
    cfg = smoke_ivon["cfg"]
    note = table2_md(cfg, [], make_job(cfg, "bbb_mixture", 1200, 0, 0))
    assert "IVON's 2x1200 network (not in the paper) is not pruned here" in note and "bbb prune" in note
    paper = ReproduceConfig(budget="paper", out="x")
    assert "IVON" not in table2_md(paper, [], make_job(paper, "bbb_mixture", 1200, 0, 0))


def test_figure2_has_an_ivon_column_only_where_the_budget_trains_ivon(smoke_ivon, tmp_path):
    runs = {"ivon": make_job(smoke_ivon["cfg"], "ivon", 1200, 0, 0)}
    MF.figure2(tmp_path, runs, methods=["sgd", "dropout", "bbb_mixture"])  # the paper budget's
    header = (tmp_path / "fig2_curves.csv").read_text().splitlines()[0]
    assert header.startswith("epoch,sgd_test_error") and "ivon" not in header
    MF.figure2(tmp_path, runs)  # by default: the paper's three and the methods given a run
    assert read_csv(tmp_path / "fig2_curves.csv")[0]["ivon_test_error"] != ""
