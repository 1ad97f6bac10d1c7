"""``bbb reproduce mnist --budget paper`` (issue 15): the candidates and the screen, the
paper's protocol, ``--cells`` / ``--candidates`` in the order of work, a killed cell resumed,
partial tables, selection on validation once every candidate has finished. The budget is cut to
4 epochs on tiny synthetic data.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import bbb.runs as T
from bbb.errors import TrainingInterrupted, UserError
from bbb.experiments import mnist as M
from bbb.experiments.mnist import ReproduceConfig, run_reproduce
from bbb.experiments.mnist import figures as MF
from bbb.experiments.mnist.jobs import command_line, select_candidate
from bbb.experiments.mnist.plan import run_name
from bbb.experiments.mnist.pruning_table import snr_stats
from bbb.experiments.mnist.recipes import SCREEN_PP
from bbb.experiments.mnist.tables import recipes_md
from testkit import SILENT, blobs4, eager_kernels, read_csv, run_main, summary


@pytest.fixture(autouse=True)
def _eager_engine():
    """Every reproduction trained here runs the eager BBB kernels (testkit.eager_kernels)."""
    with eager_kernels():
        yield


# --------------------------------------------------------------------------------------------
# the paper budget: candidates, protocol, --cells, partial tables (issue 15)
# --------------------------------------------------------------------------------------------


def paper_jobs(**kw: Any) -> list[M.Job]:
    first, extra = M.plan_jobs(ReproduceConfig(budget="paper", out="unused", **kw))
    return [*first, *extra]


def test_paper_candidates_are_few_each_with_a_label_and_a_reason():
    spec = M.BUDGETS["paper"]
    for m in spec.methods:
        for w in M.WIDTHS:
            cands = M.cell_candidates(spec, m, w)
            assert 1 <= len(cands) <= 6, (m, w)
            if m.startswith("bbb"):
                assert len(cands) == {"bbb_mixture": 6 if w == 400 else 5, "bbb_gaussian": 3 if w == 400 else 2}[m]
            assert all(c.label and len(c.reason) > 40 for c in cands)
            assert len({c.label for c in cands}) == len(cands)
    for w in M.WIDTHS:
        mix = M.cell_candidates(spec, "bbb_mixture", w)
        # the public reproduction's recipe, verbatim, first
        assert mix[0].settings == M.PUBLIC_REPRODUCTION_RECIPE
        r = M.PUBLIC_REPRODUCTION_RECIPE
        assert (r["pi"], r["sigma1"], r["samples"], r["rho_init"]) == (0.75, 1.0, 1, -3.25)
        assert r["sigma2"] == pytest.approx(math.exp(-8)) and r["lr"] == pytest.approx(128 * 1e-3)
        # another point of the paper's prior grid
        grid = [c for c in mix[1:] if (c.settings["pi"], c.settings["sigma1"], c.settings["sigma2"])
                != (r["pi"], r["sigma1"], r["sigma2"])]
        assert grid
        for c in grid:
            assert c.settings["pi"] in (0.25, 0.5, 0.75)
            assert round(-math.log(c.settings["sigma1"]), 6) in (0, 1, 2)
            assert round(-math.log(c.settings["sigma2"]), 6) in (6, 7, 8)
        # another sigma0 (rho_init is a per-candidate setting) and another point of the paper's
        # grid of samples (1, 2, 5, 10) at 2x400, where the screen starts
        assert any(c.settings["rho_init"] != r["rho_init"] for c in mix) == (w == 400)
        assert {c.settings["samples"] for c in mix} == {1, 2}  # c3 passed the screen
        # the slab's other grid point, on the recipe; then the same with the split KL estimate
        assert mix[-2].settings == {**r, "sigma1": pytest.approx(math.exp(-1))}
        assert mix[-1].settings == {**mix[-2].settings, "kl": "split"}


def test_the_recipes_are_data_read_from_recipes_json():
    """Budgets, candidates and the reasons for them live in recipes.json (package data), not in
    code; the reader refuses what it does not know, naming where."""
    from bbb.experiments.mnist import recipes as R

    text = (Path(R.__file__).parent / R.RECIPES_FILE).read_text()
    data = json.loads(text)
    assert set(data["budgets"]) == {b.value for b in R.Budget}
    again = R.load_recipes(text)
    assert again["budgets"] == M.BUDGETS and again["recipes"]["public-reproduction"] == M.PUBLIC_REPRODUCTION_RECIPE
    assert M.PUBLIC_REPRODUCTION_RECIPE["sigma2"] == math.exp(-8)  # "exp(-8)", exactly
    assert M.BUDGETS["paper"].screened["sgd"]["lr 1e-4"].endswith(f"(the screen: more than {SCREEN_PP:g} pp "
                                                                  "behind its cell's best validation error at 2x400)")
    for bad, where in [({"budgets": {**data["budgets"], "quick": {**data["budgets"]["quick"], "seed": 2}}},
                        "budgets.quick"),
                       ({"common": {**data["common"], "learning_rate": 1}}, "'learning_rate' is not a setting")]:
        with pytest.raises(ValueError, match=re.escape(where)):
            R.load_recipes(json.dumps({**data, **bad}))
    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    assert "experiments/mnist/recipes.json" in pyproject and "cli/epoch_seconds.json" in pyproject


def test_paper_budget_configs_follow_the_paper_protocol():
    jobs = paper_jobs()
    assert {j.cell for j in jobs} == set(M.PAPER_TABLE1)
    for j in jobs:
        tc = j.config
        assert (tc.optimizer, tc.momentum) == ("sgd", 0.0), j.name  # eqs. 5-6: plain gradient steps
        assert (tc.lr_schedule, tc.lr_step_size, tc.lr_gamma, tc.epochs) == ("step", 300, 0.1, 600), j.name
        # lr = 128 x a value of the paper's grid (our loss is the summed loss / 128)
        assert any(tc.lr == pytest.approx(128 * g) for g in M.PAPER_LR_GRID), j.name
        assert tc.batch_size == 128 and tc.test_each_epoch and tc.val_size == 10000
        if tc.method == "bbb":
            assert tc.kl_weighting == "uniform" and tc.samples in (1, 2, 5, 10)
            # the paper's Monte Carlo KL for the mixture (one candidate: its unbiased split estimate)
            assert tc.kl == ("auto" if tc.prior == "gaussian" else "split" if "split KL" in j.label else "mc")
    # a second seed of the headline cell and of Figure 3's SGD and dropout cells, by default
    assert sorted(j.name for j in jobs if j.seed) == ["bbb_mixture_1200_s1", "dropout_1200_s1", "sgd_1200_s1"]


def test_paper_step_schedule_drops_the_rate_after_epoch_300():
    tc = paper_jobs(cells="bbb-mixture:1200")[0].config
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=tc.lr, momentum=tc.momentum)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=tc.lr_step_size, gamma=tc.lr_gamma)
    lrs = []
    for _ in range(tc.epochs):  # the trainer steps the scheduler once per epoch
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == lrs[299] == pytest.approx(0.128) and lrs[300] == lrs[599] == pytest.approx(0.0128)


@pytest.mark.parametrize("text, cells", [
    ("bbb-mixture:1200,sgd:1200", [("bbb_mixture", 1200), ("sgd", 1200)]),
    ("sgd:1200, bbb_mixture:1200", [("bbb_mixture", 1200), ("sgd", 1200)]),  # the order of work
    ("bbb-gaussian", [("bbb_gaussian", 400), ("bbb_gaussian", 800), ("bbb_gaussian", 1200)]),
    ("dropout:800,dropout:800", [("dropout", 800)]),
    ("all", list(M.CELL_ORDER)),
    (None, list(M.CELL_ORDER)),
    ([("sgd", 400)], [("sgd", 400)]),
])
def test_cells_parse_in_the_order_of_work(text, cells):
    assert list(M.parse_cells(text)) == cells
    assert [j.cell for j in M.plan_jobs(ReproduceConfig(out="x", cells=text))[0]] == [
        c for c in cells for _ in M.cell_candidates(M.BUDGETS["smoke"], *c)]


def test_the_order_of_work_puts_the_headline_first():
    assert M.CELL_ORDER[:5] == (("bbb_mixture", 1200), ("sgd", 1200), ("dropout", 1200),
                                ("bbb_mixture", 400), ("bbb_mixture", 800))
    assert sorted(M.BUDGETS["paper"].cells) == sorted(M.PAPER_TABLE1)
    names = [j.name for j in paper_jobs()]
    assert names[:5] == ["bbb_mixture_1200", "bbb_mixture_1200_c1", "bbb_mixture_1200_c2", "bbb_mixture_1200_c3",
                         "bbb_mixture_1200_c4"]
    assert names[5] == "sgd_1200"
    assert names.index("sgd_1200") < names.index("bbb_mixture_400") < names.index("bbb_gaussian_400")


@pytest.mark.parametrize("text, words", [
    ("bbb:1200", ["'bbb'", "bbb-mixture", "sgd", "400", "1200"]),
    ("sgd:1000", ["'1000'", "400", "800", "1200"]),
    ("sgd:big", ["'big'", "1200"]),
    ("", ["no cell", "bbb-mixture"]),
    (" , ", ["no cell"]),
])
def test_bad_cells_are_one_line_errors_listing_the_choices(text, words):
    with pytest.raises(UserError) as e:
        ReproduceConfig(out="x", cells=text)
    assert "\n" not in str(e.value) and "--cells" in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_the_plan_gives_one_total_at_its_top_and_its_bottom(tmp_path, capsys):
    """The estimate printed first and the plan's total are the same sum (the call's own work
    beyond its runs counted in both; the top once said 10m39s and the bottom 9m39s)."""
    rc, out, _ = run_main(capsys, "reproduce", "mnist", "--budget", "quick", "--out", str(tmp_path / "q"), "--plan")
    top = re.search(r"estimated time left: (\S+) ", out)
    bottom = re.search(r"total left: (\S+)", out)
    assert rc == 0 and top and bottom and top.group(1) == bottom.group(1)


def test_paper_plan_lists_every_candidate_with_its_reason_and_the_time(tmp_path, capsys):
    rc, out, _ = run_main(capsys, "reproduce", "mnist", "--budget", "paper", "--out", str(tmp_path / "p"), "--plan")
    assert rc == 0 and "estimated time" in out and "total left" in out
    for j in paper_jobs():
        if not j.seed:
            assert j.name in out and j.reason in out and f"c{j.candidate} '{j.label}'" in out
    assert out.index("bbb_mixture_1200 ") < out.index("sgd_1200 ") < out.index("bbb_mixture_400 ")
    # the screened candidates are named, with why, where they are not trained
    assert out.count("not trained here, 'sigma0 x2'") == 2 and "bbb_mixture_400_c4 " in out
    assert "bbb_mixture_1200_c4 " in out and "bbb_mixture_1200_c5" not in out
    assert not (tmp_path / "p").exists()
    rc, out, _ = run_main(capsys, "reproduce", "mnist", "--budget", "paper", "--out", str(tmp_path / "p"),
                          "--plan", "--cells", "dropout:1200")
    assert rc == 0 and "dropout_1200_c1" in out and "bbb_mixture" not in out and "sgd_1200" not in out


def test_selection_uses_the_validation_error_only(tmp_path):
    cfg = ReproduceConfig(budget="paper", out=str(tmp_path), cells="bbb-mixture:400")
    jobs = M.plan_jobs(cfg)[0]
    # candidate 2 has the lowest validation error, candidate 0 the lowest test error
    val, test = [0.020, 0.018, 0.015], [0.010, 0.019, 0.030]
    summaries = {j.name: {"val_error": v, "test_error": t, "seconds": 1.0, "epochs": 600}
                 for j, v, t in zip(jobs, val, test)}
    assert select_candidate(jobs, summaries) == 2
    summaries[jobs[0].name]["val_error"] = 0.015  # a tie: the earlier candidate
    assert select_candidate(jobs, summaries) == 0
    summaries[jobs[0].name] = None  # diverged
    assert select_candidate(jobs, summaries) == 2


def test_paper_recipes_sit_beside_the_quick_ones_in_table1_md():
    lines = recipes_md()
    assert lines[0] == "| setting | quick | paper |"
    rows = {line.split(" | ")[0][2:]: line for line in lines[2:]}
    assert "Adam" in rows["optimiser"] and "SGD, momentum 0" in rows["optimiser"]
    assert "cosine" in rows["learning-rate schedule"] and "after epoch 300" in rows["learning-rate schedule"]
    assert "0.128" in rows["learning rate (our per-example loss)"]
    assert "rho0 -3.25" in rows["BBB initialisation"] and "rho0 -5" in rows["BBB initialisation"]


TINY_EPOCHS = 4


def tiny_paper_spec() -> M.BudgetSpec:
    """The paper budget cut to 4 epochs, the rate dropping after epoch 2; its headline cell keeps
    the first three mixture candidates of 2x400 (no screen), so that selection among three is tested."""
    spec = M.BUDGETS["paper"]
    cands = {**spec.candidates, ("bbb_mixture", 1200): M.cell_candidates(spec, "bbb_mixture", 400)[:3]}
    return dataclasses.replace(spec, epochs={m: {w: TINY_EPOCHS for w in M.WIDTHS} for m in spec.methods},
                               common={**spec.common, "lr_step_size": 2}, eval_samples=2, candidates=cands,
                               screened={})


def test_the_screen_drops_at_800_and_1200_only_the_candidates_it_names_and_says_why():
    spec = M.BUDGETS["paper"]
    assert spec.screened and set(spec.screened_widths) == {800, 1200}
    for m in spec.methods:
        at400 = [c.label for c in M.cell_candidates(spec, m, 400)]
        dropped = set(spec.screened.get(m, {}))
        assert dropped <= set(at400)  # it names real candidates
        for w in (800, 1200):
            # the same candidates in the same order (so c0, c1 keep their names), less the dropped
            assert [c.label for c in M.cell_candidates(spec, m, w)] == [x for x in at400 if x not in dropped]
            assert {label for label, _ in spec.screened_at(m, w).items()} == dropped
            for _, why in spec.screened_at(m, w).items():
                # how far behind it was, and the rule
                assert "2x400 validation" in why and "0.2 pp" in why
        assert spec.screened_at(m, 400) == {}
    # the recipe and one more point of the paper's prior grid stay in the headline cell
    assert [c.label for c in M.cell_candidates(spec, "bbb_mixture", 1200)] == [
        "recipe", "grid prior", "grid prior, 2 samples", "recipe, sigma1 e^-1", "recipe, sigma1 e^-1, split KL"]


@pytest.fixture(scope="module")
def paper_tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The paper budget cut to 4 epochs (the rate drops after epoch 2) on tiny data, run for the
    headline cell only: killed after epoch 2 of its second candidate, reported while killed,
    resumed to the end. The figures' axes are recorded."""
    out = tmp_path_factory.mktemp("paper") / "mnist-paper"
    data = blobs4()
    tiny = tiny_paper_spec()
    real_savefig = MF.savefig
    calls: list[str] = []
    kill = {"name": "bbb_mixture_1200_c1"}
    axes: dict[str, list[str]] = {}

    class Killing(T.JobCallbacks):  # the runs trained; the named one dies after epoch 2
        def on_attempt(self, job: Any, state: Any, attempt: int) -> None:
            calls.append(job.name)

        def on_epoch(self, job: Any, row: dict[str, Any]) -> None:
            if job.name == kill["name"] and row["epoch"] == 2:
                raise KeyboardInterrupt

    def savefig(fig: Any, path: Path) -> None:
        axes[path.name] = [ax.get_xscale() for ax in fig.axes]
        real_savefig(fig, path)

    logs: list[str] = []
    res: dict[str, Any] = {"out": out, "data": data, "axes": axes, "logs": logs}
    cfg = ReproduceConfig(budget="paper", out=str(out), device="cpu", quiet=True, cells="bbb-mixture:1200", seeds=1)
    with pytest.MonkeyPatch.context() as mp, eager_kernels():
        mp.setitem(M.BUDGETS, "paper", tiny)
        mp.setattr(MF, "savefig", savefig)
        with pytest.raises(TrainingInterrupted) as e:
            run_reproduce(cfg, data=data, callbacks=Killing(), **SILENT)
        res["interrupt"] = str(e.value)
        res["killed_calls"] = list(calls)
        res["metrics_killed"] = T.read_metrics(out / "runs" / "bbb_mixture_1200_c1")
        res["mtime_c0"] = (out / "runs" / "bbb_mixture_1200" / "last.pt").stat().st_mtime_ns
        calls.clear()
        res["report"] = run_reproduce(cfg, data=data, report_only=True, callbacks=Killing(), **SILENT)
        res["report_calls"] = list(calls)
        res["report_table1"] = read_csv(out / "table1.csv")
        res["report_md"] = (out / "table1.md").read_text()
        res["report_manifest"] = json.loads((out / "reproduce.json").read_text())
        res["report_files"] = sorted(p.name for p in out.iterdir())
        kill["name"] = ""
        calls.clear()
        # not quiet: the progress lines are logged
        res["resumed"] = run_reproduce(dataclasses.replace(cfg, quiet=False), data=data, log=logs.append,
                                       callbacks=Killing())
        res["resumed_calls"] = list(calls)
    return res


def test_a_killed_paper_cell_continues_from_its_last_epoch(paper_tiny):
    out = paper_tiny["out"]
    assert paper_tiny["killed_calls"] == ["bbb_mixture_1200", "bbb_mixture_1200_c1"]
    assert "--cells bbb-mixture:1200" in paper_tiny["interrupt"] and "--budget paper" in paper_tiny["interrupt"]
    assert [r["epoch"] for r in paper_tiny["metrics_killed"]] == [1, 2]
    # the resumed call trains the killed candidate from epoch 3 and the one never started
    assert paper_tiny["resumed_calls"] == ["bbb_mixture_1200_c1", "bbb_mixture_1200_c2"]
    assert any("resuming after epoch 2" in line for line in paper_tiny["logs"])
    metrics = T.read_metrics(out / "runs" / "bbb_mixture_1200_c1")
    assert [r["epoch"] for r in metrics] == [1, 2, 3, 4]
    assert metrics[:2] == paper_tiny["metrics_killed"]  # epochs 1-2 were not trained again
    assert (out / "runs" / "bbb_mixture_1200" / "last.pt").stat().st_mtime_ns == paper_tiny["mtime_c0"]
    for c in ("", "_c1", "_c2"):
        assert summary(out, f"bbb_mixture_1200{c}")["epochs"] == TINY_EPOCHS


def test_report_writes_a_partial_table_marking_the_missing_cells(paper_tiny):
    assert paper_tiny["report_calls"] == []  # --report trains nothing
    rows = {(r["method"], int(r["hidden"])): r for r in paper_tiny["report_table1"]}
    assert len(rows) == 12
    head = rows[("bbb_mixture", 1200)]
    assert head["status"] == "incomplete" and head["test_error"] == ""
    assert "c1 'grid prior': epoch 2/4" in head["pending"] and "c2 'sigma0 x2': not started" in head["pending"]
    assert all(r["status"] == "not run" and r["test_error"] == ""
               for c, r in rows.items() if c != ("bbb_mixture", 1200))
    md = paper_tiny["report_md"]
    assert "partial: 0 of 12 cells" in md and "**Partial table**" in md
    assert md.count("**not run yet**") == 11 and md.count("**incomplete**") == 1
    assert "--report" in md
    man = paper_tiny["report_manifest"]
    assert man["status"] == "partial" and len(man["cells_missing"]) == 12 and man["cells_done"] == []
    # no 2x1200 cell is finished: no Table 2, no figures yet
    assert paper_tiny["report_files"] == ["reproduce.json", "runs", "table1.csv", "table1.md"]
    assert man["files"] == ["table1.csv", "table1.md"]


def test_a_finished_headline_cell_gives_its_row_table2_and_figures(paper_tiny):
    out = paper_tiny["out"]
    res = paper_tiny["resumed"]
    assert not res["complete"] and len(res["missing"]) == 11 and "bbb_mixture_1200" not in res["missing"]
    rows = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}
    head = rows[("bbb_mixture", 1200)]
    # selected on validation, among the three candidates
    names = ["bbb_mixture_1200", "bbb_mixture_1200_c1", "bbb_mixture_1200_c2"]
    vals = [summary(out, n)["val_error"] for n in names]
    best = min(range(3), key=lambda i: (vals[i], i))
    assert head["status"] == "ok" and head["run"] == f"runs/{names[best]}" and int(head["candidate"]) == best
    assert head["candidate_label"] == M.cell_candidates(M.BUDGETS["paper"], "bbb_mixture", 1200)[best].label
    assert float(head["test_error"]) == pytest.approx(100 * summary(out, names[best])["test_error"], abs=1e-3)
    assert float(head["gap_vs_paper_pp"]) == pytest.approx(float(head["test_error"]) - 1.32, abs=1e-3)
    assert (head["optimizer"], float(head["momentum"]), int(head["lr_step_size"])) == ("sgd", 0.0, 2)
    assert all(f"c{i} '" in head["candidates_val_error"] for i in range(3))
    assert sum(r["status"] == "not run" for r in rows.values()) == 11
    md = (out / "table1.md").read_text()
    assert "partial: 1 of 12 cells" in md and "| setting | quick | paper |" in md
    for c in M.cell_candidates(M.BUDGETS["paper"], "bbb_mixture", 1200):
        assert c.reason in md
    # Figure 2 on a log-scale epoch axis at the paper budget; only the finished curve
    assert paper_tiny["axes"]["fig2_curves.png"] == ["log"]
    curves = read_csv(out / "fig2_curves.csv")
    assert [int(r["epoch"]) for r in curves] == [1, 2, 3, 4] and all(r["sgd_test_error"] == "" for r in curves)
    # Table 2 and Figure 4 state the SNR range beside the paper's
    fig4 = json.loads((out / "fig4_snr.json").read_text())
    assert fig4["paper_range_db"] == [-7.5, 0.0]
    lo, hi = fig4["range_5_95_db"]
    assert lo == pytest.approx(fig4["quantiles_db"]["q05"]) and hi == pytest.approx(fig4["quantiles_db"]["q95"])
    assert 0.0 <= fig4["fraction_in_paper_range"] <= 1.0
    t2 = (out / "table2_pruning.md").read_text()
    assert "5th-95th percentile" in t2 and "about -7.5 to 0 dB" in t2 and f"{lo:.2f} to {hi:.2f} dB" in t2
    man = json.loads((out / "reproduce.json").read_text())
    assert man["status"] == "partial" and man["cells_done"] == ["bbb_mixture_1200"]
    assert man["selected"]["bbb_mixture_1200"] == names[best] and man["selected"]["sgd_1200"] is None


def test_a_report_from_the_runs_small_files_alone_keeps_what_needs_checkpoints(paper_tiny, tmp_path):
    """A results folder holds each finished run's config, metrics and summary, not its
    checkpoints (results/mnist-paper/sync.sh): --report there rebuilds Table 1 and Figure 2
    from them and keeps Figure 3, Table 2 and Figure 4 as they were, saying why."""
    src, dst = paper_tiny["out"], tmp_path / "mnist-paper"
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).parent.mkdir(parents=True, exist_ok=True)
            (dst / f.name).write_bytes(f.read_bytes())
    for run in (src / "runs").iterdir():
        if (run / "summary.json").is_file():
            (dst / "runs" / run.name).mkdir(parents=True)
            for name in ("config.json", "metrics.csv", "summary.json"):
                (dst / "runs" / run.name / name).write_bytes((run / name).read_bytes())
    kept = {n: (dst / n).read_bytes() for n in ("fig3_weights.csv", "table2_pruning.csv", "fig4_snr.json")}
    (dst / "table1.csv").unlink()
    logs: list[str] = []
    cfg = ReproduceConfig(budget="paper", out=str(dst), device="cpu", cells="bbb-mixture:1200", seeds=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(M.BUDGETS, "paper", tiny_paper_spec())
        res = run_reproduce(cfg, data=paper_tiny["data"], report_only=True, log=logs.append)
    assert read_csv(dst / "table1.csv") == read_csv(src / "table1.csv")
    assert "fig2_curves.csv" in res["files"] and "fig3_weights.csv" not in res["files"]
    assert "table2_pruning.csv" not in res["files"] and res["table2"] == []
    assert {n: (dst / n).read_bytes() for n in kept} == kept
    said = [line for line in logs if "not rewritten" in line]
    assert len(said) == 2 and all("last.pt" in line and "not on this machine" in line for line in said)


def test_a_report_reads_the_checkpoints_from_the_folder_named(paper_tiny, tmp_path):
    """--checkpoints DIR: the runs' small files in the results folder, their last.pt in another
    folder (as carried from the machine that trained them): Table 2 and Figures 3-4 are made
    from those checkpoints, the same as where they trained."""
    src, dst, ck = paper_tiny["out"], tmp_path / "mnist-paper", tmp_path / "carried"
    for f in src.iterdir():
        if f.is_file():
            dst.mkdir(parents=True, exist_ok=True)
            (dst / f.name).write_bytes(f.read_bytes())
    for run in (src / "runs").iterdir():
        if (run / "summary.json").is_file():
            (dst / "runs" / run.name).mkdir(parents=True)
            for name in ("config.json", "metrics.csv", "summary.json"):
                (dst / "runs" / run.name / name).write_bytes((run / name).read_bytes())
            if (run / "last.pt").is_file():
                (ck / run.name).mkdir(parents=True)
                (ck / run.name / "last.pt").write_bytes((run / "last.pt").read_bytes())
    (dst / "table2_pruning.csv").unlink()
    cfg = ReproduceConfig(budget="paper", out=str(dst), device="cpu", cells="bbb-mixture:1200", seeds=1,
                          checkpoints=str(ck))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(M.BUDGETS, "paper", tiny_paper_spec())
        res = run_reproduce(cfg, data=paper_tiny["data"], report_only=True, log=lambda s: None)
    assert "fig3_weights.csv" in res["files"] and "table2_pruning.csv" in res["files"]
    assert read_csv(dst / "table2_pruning.csv") == read_csv(src / "table2_pruning.csv")
    with pytest.raises(UserError, match="--checkpoints"):
        ReproduceConfig(budget="paper", out=str(dst), checkpoints=str(tmp_path / "nowhere"))


class Counting(T.JobCallbacks):
    """Records the name of each run attempted."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_attempt(self, job: Any, state: Any, attempt: int) -> None:
        self.calls.append(job.name)


def test_a_cell_trained_one_candidate_per_call_is_selected_once_all_have_finished(tmp_path, monkeypatch):
    """--candidates: a call trains some candidates of a cell; the seed of the selected
    candidate waits until every candidate has finished, and is then trained."""
    monkeypatch.setitem(M.BUDGETS, "paper", tiny_paper_spec())
    out, data = tmp_path / "mnist-paper", blobs4()
    counting = Counting()
    calls = counting.calls

    def call(cands: str) -> list[str]:
        logs: list[str] = []
        calls.clear()
        cfg = ReproduceConfig(budget="paper", out=str(out), device="cpu", cells="bbb-mixture:1200",
                              candidates=cands, seeds=2)
        run_reproduce(cfg, data=data, log=logs.append, callbacks=counting)
        return logs

    logs = call("c1")
    assert calls == ["bbb_mixture_1200_c1"]
    waits = "c0 'recipe': not started; c2 'sigma0 x2': not started"
    assert any("seed 1 of bbb-mixture:1200 not trained" in line and waits in line for line in logs)
    rows = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}
    assert rows[("bbb_mixture", 1200)]["status"] == "incomplete"
    call("0,2")
    names = ["bbb_mixture_1200", "bbb_mixture_1200_c1", "bbb_mixture_1200_c2"]
    vals = [summary(out, n)["val_error"] for n in names]
    best = min(range(3), key=lambda i: (vals[i], i))
    assert calls == ["bbb_mixture_1200", "bbb_mixture_1200_c2", run_name("bbb_mixture", 1200, best, 1)]
    row = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}[("bbb_mixture", 1200)]
    assert row["status"] == "ok" and int(row["candidate"]) == best and int(row["n_seeds"]) == 2


def test_seeds_of_trains_a_candidates_seed_ahead_of_the_selection(tmp_path, monkeypatch):
    """--seeds-of: while other candidates train elsewhere, the extra seed of a named candidate
    trains now; it counts once the selection, made on validation as before, picks that candidate."""
    monkeypatch.setitem(M.BUDGETS, "paper", tiny_paper_spec())
    out, data = tmp_path / "mnist-paper", blobs4()
    counting = Counting()
    calls = counting.calls

    logs: list[str] = []
    cfg = ReproduceConfig(budget="paper", out=str(out), device="cpu", cells="bbb-mixture:1200",
                          candidates="c1", seeds=2, seeds_of="c0")
    run_reproduce(cfg, data=data, log=logs.append, callbacks=counting)
    assert calls == ["bbb_mixture_1200_c1", "bbb_mixture_1200_s1"]
    assert any("a seed of c0 trained ahead of the selection" in line and "c0 'recipe': not started" in line
               for line in logs)
    row = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}[("bbb_mixture", 1200)]
    assert row["status"] == "incomplete"
    calls.clear()
    cfg = ReproduceConfig(budget="paper", out=str(out), device="cpu", cells="bbb-mixture:1200",
                          candidates="c0,c2", seeds=2)
    run_reproduce(cfg, data=data, log=lambda s: None, callbacks=counting)
    names = ["bbb_mixture_1200", "bbb_mixture_1200_c1", "bbb_mixture_1200_c2"]
    vals = [summary(out, n)["val_error"] for n in names]
    best = min(range(3), key=lambda i: (vals[i], i))
    # the seed trained ahead is not trained again; another selection trains its own
    assert calls == names[::2] + ([] if best == 0 else [run_name("bbb_mixture", 1200, best, 1)])
    row = {(r["method"], int(r["hidden"])): r for r in read_csv(out / "table1.csv")}[("bbb_mixture", 1200)]
    assert row["status"] == "ok" and int(row["candidate"]) == best and int(row["n_seeds"]) == 2
    # the selected run's checkpoint lost with a machine: Table 2 and Figures 3-4 come from its
    # extra seed, and say so
    selected, seed1 = names[best], run_name("bbb_mixture", 1200, best, 1)
    (out / "runs" / selected / "last.pt").unlink()
    cfg = ReproduceConfig(budget="paper", out=str(out), device="cpu", cells="bbb-mixture:1200", seeds=2)
    res = run_reproduce(cfg, data=data, report_only=True, log=lambda s: None)
    assert {"table2_pruning.csv", "fig3_weights.json", "fig4_snr.json"} <= set(res["files"])
    md = (out / "table2_pruning.md").read_text()
    assert f"Run `runs/{seed1}`" in md and f"The selected run `runs/{selected}` has no checkpoint here" in md
    assert json.loads((out / "fig3_weights.json").read_text())["methods"]["bbb_mixture"]["run"] == f"runs/{seed1}"


@pytest.mark.parametrize("kwargs, words", [
    ({"seeds_of": "c0,c1"}, "--seeds-of names one candidate, got c0,c1"),
    ({"seeds_of": "x"}, "--seeds-of: 'x' is not a candidate"),
    ({"seeds_of": "c6"}, "bbb-mixture:1200 has 5 candidate(s) at the paper budget (c0,c1,c2,c3,c4), not c6"),
    ({"seeds_of": "c0", "cells": "sgd:800"}, "none of the cells sgd:800 has extra seeds"),
    ({"seeds_of": "c0", "seeds": 1}, "add them: --seeds 0 1"),
])
def test_bad_seeds_of_is_a_one_line_error(tmp_path, kwargs, words):
    with pytest.raises(UserError) as e:
        ReproduceConfig(**{"budget": "paper", "out": str(tmp_path), "cells": "bbb-mixture:1200", **kwargs})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_seeds_of_is_in_the_resume_line(tmp_path):
    cfg = ReproduceConfig(budget="paper", out=str(tmp_path), cells="bbb-mixture:1200", candidates="c1", seeds_of="c0")
    assert cfg.seeds_of == 0 and dataclasses.replace(cfg).seeds_of == 0
    assert command_line(cfg).endswith("--cells bbb-mixture:1200 --candidates c1 --seeds-of c0")


@pytest.mark.parametrize("cands, words", [
    ("c", "is not a candidate"), ("x1", "is not a candidate"), (",", "names no candidate"),
    ("c3", "has 3 candidate(s) at the paper budget (c0,c1,c2), not c3"),
])
def test_bad_candidates_are_one_line_errors(tmp_path, cands, words):
    with pytest.raises(UserError, match=re.escape(words)) as e:
        ReproduceConfig(budget="paper", out=str(tmp_path), cells="bbb-gaussian:400", candidates=cands)
    assert "\n" not in str(e.value)


def test_candidates_filter_the_plan_and_the_resume_line(tmp_path):
    cfg = ReproduceConfig(budget="paper", out=str(tmp_path), cells="bbb-mixture:1200,dropout:1200", candidates="c1")
    first, extra = M.plan_jobs(cfg)
    assert [j.name for j in first] == ["bbb_mixture_1200_c1", "dropout_1200_c1"]
    # a candidate the screen removed from a cell is not there to ask for
    with pytest.raises(UserError, match=re.escape("sgd:1200 has 1 candidate(s) at the paper budget (c0), not c1")):
        ReproduceConfig(budget="paper", out=str(tmp_path), cells="sgd:1200", candidates="c1")
    assert M.parse_candidates([2, "c0"]) == (0, 2) and M.parse_candidates(None) is None
    assert "--candidates c1" in command_line(cfg)


def test_snr_share_in_the_paper_range():
    db = torch.tensor([-10.0, -7.5, -3.0, -1.0, 0.0, 2.0, float("-inf")], dtype=torch.float64)
    st = snr_stats(db)
    assert st["n_finite"] == 6
    assert st["fraction_in_paper_range"] == pytest.approx(4 / 6)
    assert st["fraction_in_paper_range_20log10"] == pytest.approx(3 / 6)  # -3, -1, 0 dB are within [-3.75, 0]


def test_report_needs_runs_and_excludes_plan(tmp_path, capsys):
    rc, _, err = run_main(capsys, "reproduce", "mnist", "--budget", "paper", "--out", str(tmp_path / "p"), "--report")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nothing to report" in err
    rc, _, err = run_main(capsys, "reproduce", "mnist", "--out", str(tmp_path / "p"), "--report", "--plan")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--plan" in err
    rc, _, err = run_main(capsys, "reproduce", "mnist", "--out", str(tmp_path / "p"), "--cells", "cnn:400", "--plan")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "bbb-mixture" in err

