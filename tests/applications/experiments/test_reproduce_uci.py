"""``bbb reproduce uci`` on synthetic data laid out as the benchmark's folders (the real split
files are CC BY-NC and never enter the tests): loading and split checks, standardisation per
split, the validation part, selection, resume after a kill, the tables and the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bbb.data.uci import load_uci, validation_split
from bbb.devices import cpu_model
from bbb.errors import DataError, UserError
from bbb.experiments.uci import models as M
from bbb.experiments.uci import report as R
from bbb.experiments.uci import runner as RU
from bbb.experiments.uci import train as TR
from bbb.experiments.uci.runner import plan_jobs, run_uci
from bbb.experiments.uci.settings import (
    DEFAULT_METHODS,
    VARIANTS,
    Phase,
    UCIConfig,
    UCIMethod,
    schedule_for,
    variants_of,
)
from bbb.laplace import laplace_available
from testkit import read_csv, run_main

N_ROWS, N_SPLITS = 60, 3
#: the variants of a run without --methods (the Laplace needs the laplace extra)
DEFAULT_VARIANTS = variants_of(DEFAULT_METHODS)
#: every variant as a test parameter, the Laplace's skipped where laplace-torch is not installed
VARIANT_PARAMS = [pytest.param(v, id=v.name, marks=pytest.mark.skipif(
    v.method is UCIMethod.LAPLACE and not laplace_available(), reason="laplace-torch is not installed"))
    for v in VARIANTS]


def write_dataset(root: Path, name: str = "yacht", n: int = N_ROWS, splits: int = N_SPLITS, seed: int = 0) -> Path:
    """A synthetic dataset in the benchmark's layout: y = sin(3 x0) + x1 / 2 + noise, plus a constant
    column (standardised with sd 1), and ``splits`` random 90/10 splits."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, generator=g) * 4 - 2
    x[:, 2] = 5.0
    y = torch.sin(3 * x[:, 0]) + x[:, 1] / 2 + 0.1 * torch.randn(n, generator=g)
    folder = root / "uci" / name
    folder.mkdir(parents=True)
    rows = torch.cat([x, y[:, None]], 1)
    (folder / "data.txt").write_text("\n".join(" ".join(f"{v:.6f}" for v in r.tolist()) for r in rows) + "\n")
    (folder / "index_features.txt").write_text("0\n1\n2\n")
    (folder / "index_target.txt").write_text("3\n")
    (folder / "n_splits.txt").write_text(f"{splits}\n")
    for k in range(splits):
        perm = torch.randperm(n, generator=g)
        cut = int(0.9 * n)
        (folder / f"index_train_{k}.txt").write_text("\n".join(map(str, perm[:cut].tolist())) + "\n")
        (folder / f"index_test_{k}.txt").write_text("\n".join(map(str, perm[cut:].tolist())) + "\n")
    return root


@pytest.fixture
def data_root(tmp_path):
    return write_dataset(tmp_path / "data")


def smoke_cfg(root: Path, out: Path, **kw) -> UCIConfig:
    base = dict(out=str(out), datasets=["yacht"], data_dir=str(root), budget="smoke", samples=8, quiet=True)
    base.update(kw)
    return UCIConfig(**base)  # type: ignore[arg-type]


def test_load_checks_the_splits(data_root):
    d = load_uci("yacht", data_root)
    assert d.x.shape == (N_ROWS, 3) and d.y.shape == (N_ROWS,) and d.num_splits == N_SPLITS
    assert d.x.dtype == d.y.dtype == torch.get_default_dtype()  # trains as it comes (issue 53)
    d64 = load_uci("yacht", data_root, dtype=torch.float64)  # what bbb reproduce uci reads
    assert d64.x.dtype == d64.y.dtype == torch.float64 and torch.equal(d64.x.float(), d.x)
    assert RU._data("yacht", str(data_root)).x.dtype == torch.float64  # noqa: SLF001 - the runner reads float64
    with pytest.raises(DataError, match="floating"):
        load_uci("yacht", data_root, dtype=torch.int64)
    xtr, ytr, xte, yte = d.split(1)
    assert xtr.shape[0] + xte.shape[0] == N_ROWS
    bad = data_root / "uci" / "yacht" / "index_test_2.txt"
    bad.write_text("0\n")  # overlaps the training rows and misses others
    with pytest.raises(DataError, match="partition"):
        load_uci("yacht", data_root)
    with pytest.raises(DataError, match="unknown UCI dataset"):
        load_uci("cifar", data_root)


def test_validation_split_is_a_seeded_partition():
    fit, val = validation_split(50, 0.2, seed=3)
    assert len(val) == 10 and len(fit) == 40
    assert sorted(torch.cat([fit, val]).tolist()) == list(range(50))
    assert torch.equal(validation_split(50, 0.2, seed=3)[1], val)
    assert not torch.equal(validation_split(50, 0.2, seed=4)[1], val)


@pytest.mark.parametrize("phase", [Phase.VALIDATION, Phase.TEST])
def test_job_data_standardises_each_split_on_its_fitting_rows(data_root, phase):
    d = load_uci("yacht", data_root, dtype=torch.float64)  # as the runner reads it
    jd = TR.job_data(d, (0, 2), phase)
    for j, k in enumerate((0, 2)):
        xtr, ytr, xte, yte = d.split(k)
        n_fit = round(0.8 * len(ytr)) if phase is Phase.VALIDATION else len(ytr)
        assert jd.x_fit.shape[1] == n_fit
        assert torch.allclose(jd.x_fit[j, :, :2].mean(0), torch.zeros(2), atol=1e-5)
        assert torch.allclose(jd.x_fit[j, :, :2].std(0, unbiased=False), torch.ones(2), atol=1e-4)
        assert torch.all(jd.x_fit[j, :, 2] == 0)  # the constant column: sd taken as 1
        # the targets come back exactly: the scored rows are the split's (test or held-out) rows
        back = jd.y_eval[j].double() * jd.scale[j] + jd.shift[j]
        pool = yte if phase is Phase.TEST else ytr
        assert all(torch.isclose(pool, v, atol=1e-4).any() for v in back)
        if phase is Phase.TEST:
            assert torch.allclose(back, yte, atol=1e-4)
            assert math.isclose(float(jd.shift[j]), float(ytr.mean()), rel_tol=1e-9)


def test_score_matches_a_direct_float64_computation(data_root):
    d = load_uci("yacht", data_root, dtype=torch.float64)  # as the runner reads it
    jd = TR.job_data(d, (0, 1), Phase.TEST)
    k, s, r = 5, 2, jd.y_eval.shape[1]
    g = torch.Generator().manual_seed(0)
    means = torch.randn(k, s, r, generator=g, dtype=torch.float64)
    sds = torch.rand(k, s, r, generator=g, dtype=torch.float64) + 0.2
    got = TR.score(means, sds, jd, scales=(0.5, 1.0))
    for j in range(s):
        y = jd.y_eval[j].double() * jd.scale[j] + jd.shift[j]
        mu = means[:, j] * jd.scale[j] + jd.shift[j]
        for ci, c in enumerate((0.5, 1.0)):
            sd = sds[:, j] * c * jd.scale[j]
            dens = (torch.exp(-0.5 * ((y - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))).mean(0)
            assert math.isclose(got["ll"][j][ci], float(torch.log(dens).mean()), rel_tol=1e-9, abs_tol=1e-9)
        rmse = float(((mu.mean(0) - y) ** 2).mean().sqrt())
        assert math.isclose(got["rmse"][j], rmse, rel_tol=1e-9)


def _val_result(lls: list[list[list[float]]], epochs=(1, 2), scales=(0.5, 1.0),
                members=((0, 0), (1, 0))) -> dict:
    """A validation job's JSON: lls[checkpoint][member][scale], members (split, grid point)."""
    return {"splits": [s for s, _ in members], "members": [list(m) for m in members], "epochs": list(epochs),
            "noise_scales": list(scales), "scores": [{"ll": ll, "rmse": [1.0] * len(members)} for ll in lls]}


def test_selection_takes_the_highest_validation_ll_first_on_ties():
    a = _val_result([[[-1.0, -0.9], [-2.0, -2.0]], [[-1.2, -0.5], [-2.0, -2.0]]])
    b = _val_result([[[-3.0, -3.0], [-1.5, -1.0]], [[-3.0, -3.0], [-1.0, -1.5]]])
    vals = {VARIANTS[0].name: a, VARIANTS[1].name: b}
    assert R.select(vals, 0, VARIANTS[:2]) == (VARIANTS[0].name, 0, 2, 1.0)
    assert R.select(vals, 1, VARIANTS[:2]) == (VARIANTS[1].name, 0, 1, 1.0)  # tie (-1.0 twice): the first
    assert R.select_variant(a, 0, scales=[0.5]) == (-1.0, 0, 1, 0.5)


def test_selection_never_takes_a_nan_validation_ll_over_a_number():
    """A diverged network's NaN validation LL, first in the order, is not chosen (``max`` kept it:
    no comparison with NaN is true), within a variant nor across variants."""
    nan = math.nan
    a = _val_result([[[nan, -0.9], [nan, nan]], [[-1.2, -0.5], [nan, nan]]])
    assert R.select_variant(a, 0) == (-0.5, 0, 2, 1.0)
    b = _val_result([[[-3.0, -3.0], [-4.0, -2.0]], [[-3.0, -3.0], [-1.0, -1.5]]])
    assert R.select({VARIANTS[0].name: a, VARIANTS[1].name: b}, 1, VARIANTS[:2]) == (VARIANTS[1].name, 0, 2, 0.5)


def test_selection_over_a_grid_of_members():
    """Members (split, grid point) in the validation layout: split 0 at grid points 0 and 1,
    split 1 at both; each split's choice is its best member, epoch and scale."""
    members = ((0, 0), (1, 0), (0, 1), (1, 1))
    v = _val_result([[[-2.0, -1.9], [-1.0, -1.0], [-1.5, -3.0], [-0.9, -1.1]],
                     [[-2.0, -2.0], [-1.0, -1.0], [-1.6, -1.2], [-1.0, -1.0]]], members=members)
    assert R.select_variant(v, 0) == (-1.2, 1, 2, 1.0)
    assert R.select_variant(v, 1) == (-0.9, 1, 1, 0.5)
    # only a method's own variants compete
    other = _val_result([[[0.0, 0.0]] * 4] * 2, members=members)
    vals = {"mc_dropout": v, "deep_ensemble": other}
    dropout = [x for x in VARIANTS if x.name == "mc_dropout"]
    assert R.select(vals, 0, dropout) == ("mc_dropout", 1, 2, 1.0)


@pytest.mark.parametrize("variant", VARIANT_PARAMS)
def test_resume_after_a_kill_gives_the_uninterrupted_result(data_root, tmp_path, variant):
    d = load_uci("yacht", data_root, dtype=torch.float64)  # as the runner reads it
    cfg = smoke_cfg(data_root, tmp_path / "o")
    job = TR.Job("yacht", variant, Phase.VALIDATION, ((0, 0), (1, 0), (0, 1)), schedule_for(54, "smoke"))
    (tmp_path / "a").mkdir()
    whole = TR.run_job(job, d, cfg, tmp_path / "a")

    class Kill(Exception):
        pass

    seen = []

    def killer(n):
        seen.append(n)
        if len(seen) == 3:
            raise Kill

    folder = tmp_path / "b"
    folder.mkdir()
    with pytest.raises(Kill):
        TR.run_job(job, d, cfg, folder, killer)
    assert (folder / f"{job.name}.state.pt").is_file() and not (folder / f"{job.name}.json").exists()
    resumed = TR.run_job(job, d, cfg, folder)
    assert resumed["epochs"] == whole["epochs"]
    assert resumed["scores"] == whole["scores"]
    assert not (folder / f"{job.name}.state.pt").exists()


def test_a_job_of_other_splits_never_trains_over_a_folders_file_or_state(data_root, tmp_path):
    """A job's file and state are named by dataset, variant and phase, not its splits: a call with
    other --splits would train over an earlier call's splits (its finished scores lost, or its
    state resumed as networks of other splits). It is a one-line error naming the --splits that
    keep both; a call of more splits trains anew, as in a fresh folder."""
    d = load_uci("yacht", data_root, dtype=torch.float64)
    cfg = smoke_cfg(data_root, tmp_path / "o")
    sched = schedule_for(54, "smoke")
    variant = VARIANTS[0]
    first = TR.Job("yacht", variant, Phase.VALIDATION, ((0, 0), (0, 1)), sched)
    other = TR.Job("yacht", variant, Phase.VALIDATION, ((1, 0), (1, 1)), sched)
    both = TR.Job("yacht", variant, Phase.VALIDATION, ((0, 0), (1, 0), (0, 1), (1, 1)), sched)

    class Kill(Exception):
        pass

    folder = tmp_path / "killed"
    folder.mkdir()
    state = folder / f"{first.name}.state.pt"

    def killer(n):
        if state.is_file():  # killed after its first checkpoint
            raise Kill

    with pytest.raises(Kill):
        TR.run_job(first, d, cfg, folder, killer)
    with pytest.raises(UserError, match=r"holds split\(s\) 0 that this call's --splits leave out.*--splits 0 1"):
        TR.run_job(other, d, cfg, folder)
    (tmp_path / "fresh").mkdir()
    assert TR.run_job(both, d, cfg, folder)["scores"] == TR.run_job(both, d, cfg, tmp_path / "fresh")["scores"]
    done = tmp_path / "done"
    done.mkdir()
    TR.run_job(first, d, cfg, done)
    before = (done / f"{first.name}.json").read_bytes()
    with pytest.raises(UserError, match=r"holds split\(s\) 0 .*--splits 0 1"):
        TR.run_job(other, d, cfg, done)
    assert (done / f"{first.name}.json").read_bytes() == before


def test_smoke_run_writes_the_tables_and_resumes(data_root, tmp_path):
    out = tmp_path / "o"
    res = run_uci(smoke_cfg(data_root, out))
    rows = read_csv(out / "table.csv")
    assert [r["dataset"] for r in rows] == ["yacht"] and rows[0]["n_splits"] == str(N_SPLITS)
    assert list(rows[0])[:6] == R.TABLE_COLUMNS
    assert all(math.isfinite(float(rows[0][c])) for c in R.TABLE_COLUMNS[2:])
    for name in ("splits.csv", "variants.csv", "table.md", "table.png", "run.json"):
        assert (out / name).is_file(), name
    meta = json.loads((out / "run.json").read_text())  # what the rows' last digits depend on
    assert meta["torch"] == torch.__version__ and meta["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert meta["cpu"] == cpu_model() and meta["cpu"] != "unknown"  # the machine a row's digits may depend on
    split_rows = read_csv(out / "splits.csv")
    assert len(split_rows) == 3 * N_SPLITS and all(0 <= float(r["coverage_95"]) <= 1 for r in split_rows)
    assert sorted({r["method"] for r in split_rows}) == ["bbb", "deep_ensemble", "mc_dropout"]
    assert {r["variant"] for r in read_csv(out / "variants.csv")} == {v.name for v in DEFAULT_VARIANTS}
    methods = read_csv(out / "methods.csv")
    assert [r["method"] for r in methods] == ["bbb", "mc_dropout", "deep_ensemble"]
    assert list(methods[0])[:7] == ["method", *R.TABLE_COLUMNS]
    bbb_row = next(r for r in methods if r["method"] == "bbb")
    assert all(bbb_row[c] == rows[0][c] for c in R.TABLE_COLUMNS)
    md = (out / "table.md").read_text()
    assert "MC dropout (published)" in md and "MC dropout (ours)" in md and "deep ens. (ours)" in md
    assert "BBB against our own baselines" in md
    rows_md = [line for line in md.splitlines() if line.startswith("| yacht")]
    assert len(rows_md) == 3 and all(line.count("**") == 2 for line in rows_md)  # the best of ours, once
    # the intervals' table: each method's 50/90/95% coverage and the gap of methods.csv's columns
    assert "### Interval coverage" in md and rows_md[2].startswith("| yacht |")
    for r, text in zip(methods, rows_md[2].split(" | ")[1:]):
        cov = [100 * float(r[f"coverage_{k}"]) for k in (50, 90, 95)]
        assert text.startswith(" / ".join(f"{c:.0f}" for c in cov)), (text, cov)
        gap = sum(abs(c - v) for c, v in zip(cov, (50, 90, 95))) / 3
        assert float(r["calibration_gap"]) == pytest.approx(gap / 100) and f"{gap:.1f}" in text
        assert float(r["coverage_bias"]) == pytest.approx(sum(c - v for c, v in zip(cov, (50, 90, 95))) / 300)
        # the gap is the mean of the splits' terms, its standard error theirs (splits.csv's coverages)
        terms = R.gap_terms(r, [x for x in split_rows if x["method"] == r["method"]])
        assert len(terms) == N_SPLITS and sum(terms) / N_SPLITS == pytest.approx(float(r["calibration_gap"]))
        m = sum(terms) / N_SPLITS
        se = math.sqrt(sum((t - m) ** 2 for t in terms) / N_SPLITS / N_SPLITS)
        assert float(r["calibration_gap_se"]) == pytest.approx(se) and f"+- {100 * se:.1f}" in text
    assert "calibration_gap_below_mc_dropout" in md
    jobs = sorted(p.name for p in (out / "jobs").glob("*.json"))
    assert len(jobs) == 2 * len(DEFAULT_VARIANTS)
    stamp = {p: (out / "jobs" / p).stat().st_mtime_ns for p in jobs}
    again = run_uci(smoke_cfg(data_root, out))  # everything finished: nothing retrains
    assert {p: (out / "jobs" / p).stat().st_mtime_ns for p in jobs} == stamp
    assert again["rows"][0]["ll_mean"] == pytest.approx(res["rows"][0]["ll_mean"])


def test_test_jobs_target_the_validation_choices(data_root, tmp_path):
    out = tmp_path / "o"
    cfg = smoke_cfg(data_root, out, splits=[0, 2])
    run_uci(cfg)
    vals = {v.name: json.loads((out / "jobs" / f"yacht-{v.name}-validation.json").read_text())
            for v in DEFAULT_VARIANTS}
    jobs = plan_jobs(cfg, "yacht", Phase.TEST, vals)
    for s in (0, 2):
        v, g, e, c = R.select(vals, s, cfg.variants[:2])
        job = next(j for j in jobs if j.variant.name == v)
        assert (e, c) in job.targets[s] and (s, g) in job.members
    for job in jobs:  # each split once, at its own variant's validation choice
        assert job.splits == (0, 2)
        assert all(R.select_variant(vals[job.variant.name], s)[1] == g for s, g in job.members)
    split_rows = read_csv(out / "splits.csv")
    assert [int(r["split"]) for r in split_rows if r["method"] == "bbb"] == [0, 2]


def test_cli_smoke_and_errors(data_root, tmp_path, capsys):
    rc, out, err = run_main(capsys, "reproduce", "uci", "--datasets", "yacht", "--budget", "smoke", "--samples", "4",
                            "--splits", "0", "--data-dir", str(data_root), "--out", str(tmp_path / "o"), "--quiet")
    assert rc == 0, err
    assert "yacht" in out and "table.csv" in out
    # one split has no standard error: the mean alone, not "+- 0.000" (as if it were exact)
    assert "+- 0.0" not in out and "+- nan" not in out, out
    ours = [line.split(" | ")[1:4] for line in (tmp_path / "o" / "table.md").read_text().splitlines()
            if line.startswith("| yacht (n=1) |")]  # the cells of our three methods, RMSE and LL
    assert len(ours) == 2 and all(c and "+-" not in c for cells in ours for c in cells), ours
    # a split no dataset has is refused, not dropped (the table would show fewer splits than asked for)
    rc, _, err = run_main(capsys, "reproduce", "uci", "--datasets", "yacht", "--budget", "smoke", "--splits", "0",
                          str(N_SPLITS), "--data-dir", str(data_root), "--out", str(tmp_path / "beyond"))
    assert rc != 0 and f"--splits {N_SPLITS}: no dataset asked for has it (splits: yacht 0..{N_SPLITS - 1})" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "beyond").exists()
    rc, _, err = run_main(capsys, "reproduce", "uci", "--datasets", "mnist", "--out", str(tmp_path / "x"))
    assert rc != 0 and "unknown UCI dataset" in err and "Traceback" not in err
    rc, _, err = run_main(capsys, "reproduce", "uci", "--workers", "0", "--out", str(tmp_path / "x"))
    assert rc != 0 and "--workers" in err and len(err.strip().splitlines()) == 1
    for bad, said in (("svgp", "unknown method 'svgp'"), ("", "--methods names no method"),
                      (" , ", "--methods names no method")):
        rc, _, err = run_main(capsys, "reproduce", "uci", "--methods", bad, "--out", str(tmp_path / "x"))
        assert rc != 0 and said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    rc, _, err = run_main(capsys, "reproduce", "uci", "--adversarial-eps", "-1", "--out", str(tmp_path / "x"))
    assert rc != 0 and "--adversarial-eps" in err
    # the deep ensembles' step without a deep ensemble would change nothing: refused before any work
    rc, _, err = run_main(capsys, "reproduce", "uci", "--methods", "bbb", "--adversarial-eps", "0.05",
                          "--datasets", "yacht", "--budget", "smoke", "--splits", "0", "--data-dir", str(data_root),
                          "--out", str(tmp_path / "eps"))
    assert rc != 0 and "--adversarial-eps is the deep ensembles' step" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "eps").exists()
    rc, out, _ = run_main(capsys, "reproduce", "uci", "--help")
    assert rc == 0 and "Example" in out and "--workers" in out


def test_table_cells_show_the_standard_error_to_two_significant_digits():
    assert R.cell((3.2793, 0.20096)) == "3.28 +- 0.20"
    assert R.cell((0.08345, 0.00070)) == "0.08345 +- 0.00070"  # kin8nm, not 0.08 +- 0.00
    assert R.cell((0.000640, 0.0000213)) == "0.000640 +- 0.000021"  # naval, at the 6 decimals' cap
    assert R.cell((5.63, 0.0)) == "5.63 +- 0.00" and R.cell((1.0, float("nan"))) == "1.00"  # one split: no error
    assert R.cell((0.6, 0.013), bold=True) == "**0.600 +- 0.013**" and R.cell(None) == "-"
    assert R.cell((0.10, 0.0), decimals=2) == "0.10 +- 0.00"  # the published columns, as published


def test_schedule_steps_and_checkpoints():
    small, large = schedule_for(277), schedule_for(41_157)
    assert small.batch_size == 32 and large.batch_size == 128
    assert small.epochs <= 2000 and large.epochs >= 100
    for s in (small, large):
        assert s.checkpoints[-1] == s.epochs and list(s.checkpoints) == sorted(set(s.checkpoints))


def test_protein_has_the_protocols_wider_layer(data_root, tmp_path):
    cfg = smoke_cfg(data_root, tmp_path / "o")
    assert cfg.hidden_for("protein-tertiary-structure") == 100
    assert cfg.hidden_for("yacht") == cfg.hidden_for("bostonHousing") == 50
    d = load_uci("yacht", data_root, dtype=torch.float64)  # as the runner reads it
    jd = TR.job_data(d, (0,), Phase.TEST)
    model = M.build_regressor(VARIANTS[1], VARIANTS[1].grid[:1], jd.x_fit.shape[-1],
                              cfg.hidden_for("protein-tertiary-structure"))
    assert isinstance(model, M.BBBRegressor) and model.pop.sizes == [3, 100, 1]


def test_the_tables_show_a_command_a_user_can_run_from_a_clone(tmp_path):
    """run.json keeps the command as typed; table.md shows a machine's folders as placeholders,
    each said once (the committed results/uci tables were once written with the machine's)."""
    cmd = "bbb reproduce uci --out /srv/runs/uci --workers 2 --data-dir=/home/me/data --datasets yacht"
    assert R.portable_command(cmd) == ("bbb reproduce uci --out $OUT --workers 2 --data-dir=$BBB_DATA "
                                       "--datasets yacht", ["$OUT", "$BBB_DATA"])
    assert R.portable_command("bbb reproduce uci --out results/uci") == ("bbb reproduce uci --out results/uci", [])
    assert R.portable_command("bbb reproduce uci --data-dir ../data")[1] == ["$BBB_DATA"]
    portable = R.portable_command(cmd)[0]
    assert R.portable_command(portable)[0] == portable  # a command already portable stays as it is
    R.write_tables(tmp_path, [], [], [], {"command": cmd})
    line = (tmp_path / "table.md").read_text().splitlines()[2]
    assert "/srv" not in line and "/home" not in line and "`$OUT`: the output folder" in line
    root = Path(__file__).resolve().parents[3]
    runs = [d for d in (root / "results" / "uci").glob("**/") if (d / "run.json").is_file()]
    assert len(runs) >= 2  # the first and the second run at least
    for d in runs:
        shown = (d / "table.md").read_text().splitlines()[2]
        meta = json.loads((d / "run.json").read_text())
        # a run's tables show its command; a --report's, the one command that trains the datasets it shows
        datasets = list(dict.fromkeys(r["dataset"] for r in read_csv(next(d / f for f in ("methods.csv", "table.csv")
                                                                         if (d / f).is_file()))))
        trains = R.training_command(meta["config"], datasets) or meta["command"]
        assert any(f"`{R.portable_command(c)[0]}`" in shown for c in (meta["command"], trains)), d


def test_the_training_command_sets_what_run_json_holds():
    """``training_command`` gives the options that make run.json's config, its defaults left out;
    parsed again, it is the same configuration (for the datasets asked)."""
    import argparse

    from bbb.experiments.uci.command import add_arguments, config_from_args

    base = UCIConfig(out="/srv/o", data_dir="/d", datasets=["yacht"], workers=2)
    config = json.loads(json.dumps(RU.asdict(base), default=lambda v: v.value))  # as run.json holds it
    assert R.training_command(config, ["yacht", "concrete"]) == (
        "bbb reproduce uci --datasets yacht concrete --out /srv/o --workers 2 --data-dir /d")
    changed = {**config, "seed": 2, "budget": "smoke", "samples": 8, "adversarial_eps": 0.0, "splits": [0, 3],
               "methods": ["bbb", "deep_ensemble"], "threads": 2}
    command = R.training_command(changed, ["yacht"])
    assert command is not None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(command.split()[3:])  # after "bbb reproduce uci"
    again = RU.asdict(config_from_args(args))
    for key in ("seed", "budget", "samples", "adversarial_eps", "splits", "methods", "threads", "workers", "out",
                "data_dir", "hidden", "noise_init"):
        assert json.loads(json.dumps(again[key], default=lambda v: v.value)) == changed[key], key
    from bbb.data.uci import UCI_DATASETS
    assert "--datasets" not in (R.training_command(config, list(UCI_DATASETS)) or "")
    assert R.training_command({**config, "hidden": 20}, ["yacht"]) is None  # no option sets it


def test_report_of_a_folder_filled_a_dataset_at_a_time_shows_the_command_for_all(tmp_path):
    """Two invocations, a dataset each, into one folder: --report's table.md names the one command that
    trains both (not the last invocation's), their worker-minutes together and the wall time of both."""
    root = tmp_path / "data"
    write_dataset(root)
    write_dataset(root, "concrete", seed=1)
    out = tmp_path / "o"
    first = run_uci(smoke_cfg(root, out, methods=["mc_dropout"]), command="bbb reproduce uci --datasets yacht")
    second = run_uci(smoke_cfg(root, out, methods=["mc_dropout"], datasets=["concrete"]),
                     command="bbb reproduce uci --datasets concrete")
    res = run_uci(smoke_cfg(root, out, methods=["mc_dropout"], datasets=["yacht", "concrete"], report_only=True))
    assert res["command"] == R.training_command({**res["config"]}, ["yacht", "concrete"])
    assert "--datasets yacht concrete" in res["command"] and "--methods mc_dropout" in res["command"]
    assert res["job_seconds"] == pytest.approx(first["job_seconds"] + second["job_seconds"], abs=0.11)
    md = (out / "table.md").read_text().splitlines()
    assert f"`{R.portable_command(res['command'])[0]}`" in md[2]
    assert "in all its invocations" in md[4]
    assert json.loads((out / "run.json").read_text())["command"] == "bbb reproduce uci --datasets concrete"
    (out / "run.json").unlink()
    run_uci(smoke_cfg(root, out, methods=["mc_dropout"], datasets=["yacht", "concrete"], report_only=True))
    md = (out / "table.md").read_text()
    assert "Wall time: unknown (no run.json) (training" in md and "as it ran" not in md  # nothing of how it trained


def test_one_method_alone_trains_only_its_jobs(data_root, tmp_path):
    out = tmp_path / "o"
    res = run_uci(UCIConfig(out=str(out), datasets=["yacht"], data_dir=str(data_root), budget="smoke", samples=4,
                            quiet=True, methods=["mc_dropout"], splits=[0, 1]))
    assert sorted(p.name for p in (out / "jobs").glob("*.json")) == ["yacht-mc_dropout-test.json",
                                                                     "yacht-mc_dropout-validation.json"]
    assert [r["method"] for r in res["method_rows"]] == ["mc_dropout"] and res["rows"] == []
    assert not res["missing"]


def test_a_rerun_with_another_result_option_is_refused_not_mixed(data_root, tmp_path, capsys):
    """A job's file is reused by its name (dataset, variant, phase): a rerun into the same folder
    with another --seed, --samples, --budget or --adversarial-eps would report the first run's
    numbers under its own options; it is a one-line error, the folder as it was. --report reads."""
    out = tmp_path / "o"
    args = ("reproduce", "uci", "--datasets", "yacht", "--budget", "smoke", "--samples", "4", "--splits", "0",
            "--methods", "mc_dropout", "--data-dir", str(data_root), "--out", str(out), "--quiet")
    assert run_main(capsys, *args)[0] == 0
    before = {p.name: p.read_bytes() for p in (out / "jobs").iterdir()}
    for extra, said in ((("--seed", "1"), "--seed 0, not 1"), (("--samples", "5"), "--samples 4, not 5")):
        rc, _, err = run_main(capsys, *args, *extra)
        assert rc == 2 and said in err and "use another --out" in err and len(err.strip().splitlines()) == 1, err
    # (--adversarial-eps without deep_ensemble is refused before the folder is read: it would change nothing)
    rc, _, err = run_main(capsys, *args, "--adversarial-eps", "0")
    assert rc == 2 and "--adversarial-eps is the deep ensembles' step" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in (out / "jobs").iterdir()} == before
    assert run_main(capsys, *args, "--seed", "1", "--report")[0] == 0
    # --report alone reports the datasets and splits the folder trained (it said all 9 were not finished)
    rc, said, _ = run_main(capsys, "reproduce", "uci", "--report", "--samples", "4", "--methods", "mc_dropout",
                           "--budget", "smoke", "--data-dir", str(data_root), "--out", str(out))
    assert rc == 0 and "not finished" not in said and "yacht" in said, said
    (out / "options.json").unlink()  # a folder trained before options.json: its run.json's config
    rc, _, err = run_main(capsys, *args, "--seed", "1")
    assert rc == 2 and "--seed 0, not 1" in err, err
    assert run_main(capsys, *args)[0] == 0


def test_log_writes_each_networks_scores_from_the_job_files(data_root, tmp_path, capsys):
    """``--log tensorboard``: when the jobs end, one event folder per network (OUT/tb/JOB/MEMBER)
    with the scores its job file holds at each checkpoint epoch; a resume rewrites them, not doubles."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "o"
    argv = ["reproduce", "uci", "--datasets", "yacht", "--budget", "smoke", "--samples", "4", "--splits", "0",
            "--methods", "bbb", "--data-dir", str(data_root), "--out", str(out), "--quiet", "--log", "tensorboard"]
    rc, said, err = run_main(capsys, *argv)
    assert rc == 0, err
    assert f"wrote {out / 'tb'}" in said
    tb = out / "tb"
    assert sorted(p.name for p in tb.iterdir()) == ["yacht-heteroscedastic-test", "yacht-heteroscedastic-validation",
                                                     "yacht-local-test", "yacht-local-validation"]
    val = json.loads((out / "jobs" / "yacht-local-validation.json").read_text())
    assert len(list((tb / "yacht-local-validation").iterdir())) == len(val["members"]) == 8
    test = json.loads((out / "jobs" / "yacht-local-test.json").read_text())
    (member,) = (tb / "yacht-local-test").iterdir()
    (split, g), = test["members"]
    assert member.name == f"split{split}-" + "_".join(VARIANTS[1].grid[g].label().split())

    def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}

    got = scalars(member)
    assert [s for s, _ in got["test/rmse"]] == test["epochs"] == [1, 2, 3, 4]
    assert [v for _, v in got["test/rmse"]] == pytest.approx([sc["rmse"][0] for sc in test["scores"]], rel=1e-6)
    one = test["noise_scales"].index(1.0)
    assert [v for _, v in got["test/ll"]] == pytest.approx([sc["ll"][0][one] for sc in test["scores"]], rel=1e-6)
    assert {f"test/ll_noise_x{c:g}" for c in test["noise_scales"]} | {"test/noise_sd"} <= set(got)
    (key, chosen), = test["full"].items()
    assert got["test/selected/rmse"] == [(int(key.split(":")[1]), pytest.approx(chosen["rmse"], rel=1e-6))]
    vmember = tb / "yacht-local-validation" / member.name  # the same network's grid point in validation
    assert [s for s, _ in scalars(vmember)["val/rmse"]] == [1, 2, 3, 4]
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()}
    rc, _, err = run_main(capsys, *argv)  # resumed: nothing trains, the curves are written again whole
    assert rc == 0, err
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()} == stamps
    assert [s for s, _ in scalars(next((tb / "yacht-local-test").iterdir()))["test/rmse"]] == [1, 2, 3, 4]
    assert "loggers" not in json.loads((out / "run.json").read_text())["config"]


def test_a_worker_killed_for_memory_is_one_line_that_says_to_resume(data_root, tmp_path, monkeypatch):
    """The fourth run's protein: the system killed a worker for memory, and the command ended in
    concurrent.futures' traceback. Now one OutOfMemory line (the CLI's one error line, exit 2)
    that names the job and says the work is kept and how to resume."""
    import queue
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool
    from types import SimpleNamespace

    from bbb.errors import OutOfMemory

    class DyingPool:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def submit(self, *args, **kwargs) -> Future:
            f: Future = Future()
            f.set_exception(BrokenProcessPool("A process in the process pool was terminated abruptly"))
            return f

        def shutdown(self, **kwargs) -> None:
            pass

    monkeypatch.setattr(RU, "ProcessPoolExecutor", DyingPool)
    monkeypatch.setattr(RU, "watched_manager", lambda *a: SimpleNamespace(Queue=queue.Queue, shutdown=lambda: None))
    with pytest.raises(OutOfMemory, match=r"a worker died while training yacht-.*run the same command again"):
        run_uci(smoke_cfg(data_root, tmp_path / "o", workers=2))


def test_kill_9_of_the_command_leaves_no_worker_training(data_root, tmp_path):
    """Killed with -9 (or SIGTERM), ``bbb reproduce uci --workers 2`` leaves no process of its
    pool training on as an orphan (``bbb.runs.jobs.watch_parent``); a re-run resumes."""
    import subprocess
    import sys

    from faultkit import env, kill_9_leaves_no_descendant

    proc = subprocess.Popen([sys.executable, "-m", "bbb", "reproduce", "uci", "--datasets", "yacht", "--workers", "2",
                             "--data-dir", str(data_root), "--out", str(tmp_path / "o"), "--quiet"],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:  # 2 workers and the queue's manager; then the workers train
        kill_9_leaves_no_descendant(proc, at_least=3, start=120, settle=2.0, grace=15)
    finally:
        assert proc.stderr is not None
        proc.stderr.close()


def test_two_methods_with_one_calibration_gap_are_both_the_smallest(tmp_path, monkeypatch):
    """BBB's and IVON's gap on wine is 43/4800 for both (the committed methods.csv), summed in
    another order: 4e-17 apart. The table bolds both, and neither is "below" the other."""
    def row(method, gap, bias, ll):
        return {"dataset": "wine-quality-red", "n_splits": 20, "rmse_mean": 0.63, "rmse_se": 0.01, "ll_mean": ll,
                "ll_se": 0.05, "coverage_50": 0.5, "coverage_90": 0.9, "coverage_95": 0.95, "calibration_gap": gap,
                "coverage_bias": bias, "calibration_gap_se": 0.003, "method": method}

    monkeypatch.setattr(R, "_plot", lambda *a: [])  # (no figure: the tables are what is checked)
    for bbb_gap, ivon_gap in ((0.008958333333333327, 0.00895833333333329),
                              (0.00895833333333329, 0.008958333333333327)):
        rows = [row("bbb", bbb_gap, 0.005, -1.0), row("ivon", ivon_gap, 0.0023, -1.0 + 1e-16)]
        R.write_tables(tmp_path, rows[:1], [], [], {"command": "bbb reproduce uci"}, rows)
        line = next(x for x in (tmp_path / "table.md").read_text().splitlines()
                    if x.startswith("| wine-quality-red |") and "gap" in x)
        assert line.count("(gap **0.9**") == 2, line
        counts = R.head_to_head(rows)
        assert counts["calibration_gap_below_ivon"] == 0 and counts["ll_above_ivon"] == 0
        assert (tmp_path / "table.md").read_text().count("**-1.00") == 2  # the LL column: both bold
