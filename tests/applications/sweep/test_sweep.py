"""``bbb sweep``: search spaces, trial ids, the local backend (parallel processes, retries, a
killed sweep resumed) and the Ray Tune backend (ASHA early stopping, a trial that crashes once
and resumes from Ray's checkpoint). Everything trains tiny networks on synthetic data
(``dataset: synthetic``); the Ray tests are skipped when Ray is not installed (``.[ray]``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bbb.sweep as S
from bbb.cli import main as cli_main
from bbb.cli.cost import epoch_seconds
from bbb.errors import UserError
from bbb.runs import read_metrics
from bbb.sweep.cost import REF_EPOCH_SECONDS
from bbb.sweep.space import trial_id_of, yaml_loader
from bbb.sweep.trial import epochs_done, run_trial_local, trial_dir
from sweep_hooks import FailOnce

ROOT = Path(__file__).resolve().parents[3]

TINY = {
    "dataset": "synthetic",
    "synthetic_dim": 64,
    "synthetic_train": 320,
    "width": 8,
    "depth": 1,
    "batch_size": 64,
    "epochs": 4,
    "device": "cpu",
    "eval_samples": 2,
}


def tiny_space(**params) -> dict:
    return {"params": {**TINY, **params}}


def rows_without_seconds(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in read_metrics(run)]


def history(out: Path, tid: str) -> list[dict]:
    return json.loads((trial_dir(out, tid) / "history.json").read_text())


def quiet_opts(out: Path, **kw) -> S.SweepOptions:
    return S.SweepOptions(out=out, progress=False, **kw)


def silent(_: str) -> None:
    pass


# --------------------------------------------------------------------------------------------
# search spaces and trial ids
# --------------------------------------------------------------------------------------------


def test_paper_space_is_the_papers_grid():
    trials = S.expand_space(S.load_space("paper"))
    assert len(trials) == 3 * 3 * 3 * 3 * 4 * 3 == 972
    assert len({t.trial_id for t in trials}) == 972
    cfgs = [S.resolve_params(t.params)[0] for t in trials]
    assert {c.lr for c in cfgs} == {1e-3, 1e-4, 1e-5}
    assert {c.pi for c in cfgs} == {0.25, 0.5, 0.75}
    assert {round(-math.log(c.sigma1), 9) for c in cfgs} == {0, 1, 2}
    assert {round(-math.log(c.sigma2), 9) for c in cfgs} == {6, 7, 8}
    assert {c.samples for c in cfgs} == {1, 2, 5, 10}
    assert {tuple(c.hidden) for c in cfgs} == {(400, 400), (800, 800), (1200, 1200)}
    assert {(c.epochs, c.dataset, c.method, c.prior, c.batch_size) for c in cfgs} == {
        (600, "mnist", "bbb", "mixture", 128)}


def test_docs_show_the_paper_space():
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "docs" / "scale_out.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks, "docs/scale_out.md has no yaml block"
    shown = yaml.load(blocks[0], Loader=yaml_loader())
    assert shown == S.PAPER_SPACE
    for block in blocks[1:]:  # the other examples are valid spaces
        assert S.expand_space(yaml.load(block, Loader=yaml_loader()))


def test_trial_ids_are_stable_hashes_of_what_is_computed():
    base = {**TINY, "lr": 0.01}
    tid = trial_id_of(base)
    assert re.fullmatch(r"[0-9a-f]{12}", tid)
    assert trial_id_of(dict(base)) == tid
    # where it runs is not part of the id; the same network spelled differently is the same trial
    assert trial_id_of({**base, "device": "auto", "data_dir": "/elsewhere"}) == tid
    spelled = {k: v for k, v in base.items() if k not in ("width", "depth")} | {"hidden": [8]}
    assert trial_id_of(spelled) == tid
    assert trial_id_of({**base, "neg_log_sigma2": 7}) == trial_id_of({**base, "sigma2": math.exp(-7)})
    # what it computes is
    assert len({tid, trial_id_of({**base, "lr": 0.02}), trial_id_of({**base, "seed": 1}),
                trial_id_of({**base, "epochs": 5}), trial_id_of({**base, "synthetic_dim": 32})}) == 5


def test_space_file_grid_random_set_and_limit(tmp_path):
    pytest.importorskip("yaml")
    f = tmp_path / "space.yaml"
    f.write_text("description: test\nnum_samples: 3\nseed: 5\nparams:\n"
                 "  dataset: synthetic\n  epochs: 600\n"
                 "  lr: {loguniform: [1e-4, 1e-2]}\n"
                 "  estimator: {grid: [reparam, local, flipout]}\n"
                 "  kl_weighting: {choice: [uniform, blundell]}\n"
                 "  prior: {grid: [gaussian, mixture]}\n"
                 "  method: bbb\n")
    space = S.apply_overrides(S.load_space(f), ["epochs=2", "seed={grid: [0, 1]}"])
    trials = S.expand_space(space)
    assert len(trials) == 3 * 2 * 2 * 3
    cfgs = [S.resolve_params(t.params)[0] for t in trials]
    assert all(c.epochs == 2 for c in cfgs)
    assert all(1e-4 <= c.lr <= 1e-2 for c in cfgs)
    assert len({c.lr for c in cfgs}) == len(cfgs)  # drawn, not repeated
    assert {c.estimator for c in cfgs} == {"reparam", "local", "flipout"}
    assert {c.prior for c in cfgs} == {"gaussian", "mixture"}
    assert {c.seed for c in cfgs} == {0, 1}
    assert {c.kl_weighting for c in cfgs} <= {"uniform", "blundell"}
    # first key outermost: estimator changes slowest; the draws are reproducible
    assert [t.params["estimator"] for t in trials[:12]] == ["reparam"] * 12
    again = S.expand_space(space, limit=5)
    assert [t.trial_id for t in again] == [t.trial_id for t in trials[:5]]
    # a JSON file is read without PyYAML
    j = tmp_path / "space.json"
    j.write_text(json.dumps(tiny_space(method={"grid": ["bbb", "dropout", "sgd"]})))
    assert [S.resolve_params(t.params)[0].method for t in S.expand_space(S.load_space(j))] == [
        "bbb", "dropout", "sgd"]


@pytest.mark.parametrize("argv, words", [
    (["--set", "colour=red"], "unknown setting"),
    (["--set", "lr={grid: []}"], "non-empty list"),
    (["--set", "lr={between: [1, 2]}"], "a mapping must be one of"),
    (["--set", "hidden=[10]"], "either hidden or width"),
    (["--set", "dataset=cifar"], "unknown dataset"),
    (["--set", "lr=-1"], "lr must be"),
    (["--limit", "0"], "--limit"),
    (["--backend", "local", "--scheduler", "asha", "--out", "X"], "needs --backend ray"),
    (["--gpus-per-trial", "0.5", "--out", "X"], "for --backend ray"),
    (["--grace-period", "5", "--out", "X"], "--grace-period is for --scheduler asha"),  # (it was ignored)
    (["--reduction-factor", "3", "--out", "X"], "--reduction-factor is for --scheduler asha"),
    (["--ref-epoch-seconds", "2", "--out", "X"], "--ref-epoch-seconds is for --dry-run"),
    ([], "--out DIR is required"),
])
def test_sweep_errors_are_one_line(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dry = [] if "--out" in argv or argv == [] else ["--dry-run"]
    rc = cli_main(["sweep", "--space", "paper", *argv, *dry])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("bbb sweep: error:") and err.count("\n") == 1 and words in err
    assert not (tmp_path / "X").exists()


def test_missing_space_file_and_num_samples_without_random_values(tmp_path, capsys):
    assert cli_main(["sweep", "--space", str(tmp_path / "nope.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "neither a built-in space" in err and "did you mean" not in err
    assert cli_main(["sweep", "--space", "papr", "--dry-run"]) == 2  # a built-in space, misspelt
    assert "did you mean paper?" in capsys.readouterr().err
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"num_samples": 3, "params": TINY}))
    assert cli_main(["sweep", "--space", str(f), "--dry-run"]) == 2
    assert "needs a random value" in capsys.readouterr().err


def test_dry_run_lists_trials_and_cost(capsys):
    assert cli_main(["sweep", "--space", "paper", "--set", "epochs=2", "--limit", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].split()[:2] == ["#", "trial_id"]
    assert len([ln for ln in lines if re.match(r"\s*\d+\s+[0-9a-f]{12}\s", ln)]) == 3
    assert "3 trials, 6 epochs" in out and "machine-hours" in out


def test_repeated_points_of_a_grid_are_a_warning(capsys):
    args = ["sweep", "--space", "paper", "--set", "epochs=2", "--set", "width=400", "--set", "lr=0.001",
            "--set", "pi=0.5", "--set", "neg_log_sigma1=0", "--set", "neg_log_sigma2=6", "--dry-run"]
    assert cli_main([*args, "--set", "samples={grid: [1, 2, 1]}"]) == 0
    cap = capsys.readouterr()
    assert "2 trials, 4 epochs" in cap.out
    assert cap.err.count("\n") == 1 and "warning: 1 of the space's 3 points repeat" in cap.err
    assert cli_main([*args, "--set", "samples={grid: [1, 2]}"]) == 0
    assert capsys.readouterr().err == ""


def test_cost_model_matches_the_measured_epoch_times():
    """The dry-run cost model is the one of ``bbb reproduce mnist --plan`` (bbb.cli.cost): the
    measured seconds per MNIST epoch on 2 idle cores (make bench), BBB 2x400 3.5 s, 2x1200 10.5 s."""
    small = S.epoch_seconds_estimate({"width": 400})
    large = S.epoch_seconds_estimate({"width": 1200})
    assert small == epoch_seconds("bbb", [400, 400]) == REF_EPOCH_SECONDS == 3.5
    assert large == epoch_seconds("bbb", [1200, 1200]) == 10.5
    five = S.epoch_seconds_estimate({"width": 400, "samples": 5})
    assert small < five < 5 * small  # k samples share one batched matmul: less than k times
    assert S.epoch_seconds_estimate({"width": 400, "method": "dropout"}) < small
    assert S.epoch_seconds_estimate({"width": 400}, 2 * small) == 2 * small  # --ref-epoch-seconds rescales
    full = sum(S.epoch_seconds_estimate(t.params) * 600 for t in S.expand_space(S.load_space("paper")))
    assert full / 3600 > 3_000  # the paper's grid is months of one 2-core machine


def test_show_space_round_trips(capsys):
    yaml = pytest.importorskip("yaml")
    assert cli_main(["sweep", "--space", "paper", "--set", "epochs=3", "--show-space"]) == 0
    shown = yaml.load(capsys.readouterr().out, Loader=yaml_loader())
    assert shown["params"]["epochs"] == 3
    assert {k: v for k, v in shown["params"].items() if k != "epochs"} == {
        k: v for k, v in S.PAPER_SPACE["params"].items() if k != "epochs"}


def test_ray_is_optional(tmp_path, capsys, monkeypatch):
    code = "import sys, bbb, bbb.sweep, bbb.cli; print('ray' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    rc = cli_main(["sweep", "--space", "paper", "--set", "epochs=1", "--limit", "1", "--backend", "ray",
                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "pip install '.[ray]'" in err


# --------------------------------------------------------------------------------------------
# local backend
# --------------------------------------------------------------------------------------------


def test_local_sweep_results_and_rerun_skips(tmp_path, capsys):
    out = tmp_path / "sweep"
    space = tiny_space(lr={"grid": [1e-2, 1e-6]}, seed={"grid": [0, 1]})
    rows = S.run_sweep(space, quiet_opts(out), log=silent)
    assert [r["status"] for r in rows] == ["done"] * 4
    table = S.read_sweep(out)
    assert list(table[0]) == ["trial_id", "status", *space["params"], *S.RESULT_COLUMNS]
    vals = [float(r["val_error"]) for r in table]
    assert vals == sorted(vals)
    for r in table:
        d = out / r["trial_dir"]
        summary = json.loads((d / "summary.json").read_text())
        assert float(r["val_error"]) == summary["best_val_error"]
        assert float(r["test_error"]) == summary["test_error"]
        assert int(r["epochs_run"]) == 4 and len(read_metrics(d)) == 4
    assert {r["lr"] for r in table[:2]} == {"0.01"}  # lr 1e-6 learns nothing in 4 epochs
    best = json.loads((out / "best.json").read_text())
    assert best["trial_id"] == table[0]["trial_id"] and best["selected_by"] == "val_error"
    assert best["val_error"] == min(vals)
    # a re-run skips every finished trial: nothing is trained or rewritten
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")}
    assert cli_main(["sweep", "--space", str(_write_json(tmp_path / "s.json", space)), "--out", str(out),
                     "--quiet"]) == 0
    assert "4 trials: 4 done" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")} == stamps
    assert all(len(history(out, r["trial_id"])) == 1 for r in table)


def _write_json(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj))
    return path


def test_local_crash_is_retried_from_the_checkpoint(tmp_path):
    """A trial that crashes after epoch 2 resumes from last.pt and ends exactly like its twin."""
    space = tiny_space(lr=1e-2)
    [plain_row] = S.run_sweep(space, quiet_opts(tmp_path / "plain"), log=silent)
    out = tmp_path / "sweep"
    [row] = S.run_sweep(space, quiet_opts(out, max_failures=1, epoch_hook=FailOnce(2)), log=silent)
    rows = [plain_row, row]
    assert [r["status"] for r in rows] == ["done", "done"]
    plain, crashed = trial_dir(tmp_path / "plain", plain_row["trial_id"]), trial_dir(out, row["trial_id"])
    hist = history(out, row["trial_id"])
    assert [(h["event"], h.get("source"), h.get("from_epoch")) for h in hist] == [
        ("start", "fresh", 0), ("error", None, None), ("start", "local", 2)]
    assert "injected failure after epoch 2" in hist[1]["error"]
    assert rows_without_seconds(crashed) == rows_without_seconds(plain)
    for k in ("test_error", "test_error_mc", "test_nll", "val_error", "best_epoch", "epochs_run"):
        assert rows[0][k] == rows[1][k]


def test_local_crash_beyond_max_failures_is_failed_then_resumed_by_a_rerun(tmp_path):
    out = tmp_path / "sweep"
    space = tiny_space(lr=1e-2)
    opts = quiet_opts(out, max_failures=0, epoch_hook=FailOnce(3))
    [row] = S.run_sweep(space, opts, log=silent)
    assert row["status"] == "failed" and "injected failure" in row["error"]
    assert S.read_sweep(out)[0]["status"] == "failed"
    assert not (out / "best.json").exists()
    [row] = S.run_sweep(space, opts, log=silent)
    assert row["status"] == "done" and row["epochs_run"] == 4
    assert [h["from_epoch"] for h in history(out, row["trial_id"]) if h["event"] == "start"] == [0, 3]


@pytest.mark.slow
def test_killed_local_sweep_resumes(tmp_path):
    """Kill a parallel (2-process) sweep mid-trial: sweep.csv stays whole; a re-run skips the
    finished trials and resumes the unfinished one from its last epoch, ending as if never killed."""
    out = tmp_path / "sweep"
    space = tiny_space(synthetic_train=640, width=16, epochs=10,
                       lr={"grid": [1e-2, 3e-3]}, seed={"grid": [0, 1]})
    f = _write_json(tmp_path / "space.json", space)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "bbb", "sweep", "--space", str(f), "--out", str(out),
                             "--max-concurrent", "2", "--cpus-per-trial", "1", "--quiet"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    trials = S.expand_space(space)
    partial: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            finished = [t for t in trials if (trial_dir(out, t.trial_id) / "result.json").exists()]
            partial = [t.trial_id for t in trials if t not in finished
                       and epochs_done(trial_dir(out, t.trial_id)) >= 2]
            if finished and partial:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stderr.close()
    assert partial, "the sweep finished before it could be killed mid-trial"
    assert proc.returncode == -signal.SIGKILL
    # the results file is whole (atomic writes): a header and one complete row per trial
    with (out / "sweep.csv").open(newline="") as fh:
        table = list(csv.reader(fh))
    assert len(table) == 5 and all(len(r) == len(table[0]) for r in table)
    done_before = {t.trial_id for t in trials if (trial_dir(out, t.trial_id) / "result.json").exists()}
    stamps = {tid: (trial_dir(out, tid) / "last.pt").stat().st_mtime_ns for tid in done_before}
    killed_at = {tid: epochs_done(trial_dir(out, tid)) for tid in partial}
    # killed between its summary.json and its result.json: trained to the end, not trained again
    evaluated = {tid for tid in partial if (trial_dir(out, tid) / "summary.json").exists()}

    # on one thread, as the killed sweep and the reference run below
    rows = S.run_sweep(space, quiet_opts(out, cpus_per_trial=1), log=silent)
    assert [r["status"] for r in rows] == ["done"] * 4
    for tid in done_before:  # skipped: not touched
        assert (trial_dir(out, tid) / "last.pt").stat().st_mtime_ns == stamps[tid]
        assert len(history(out, tid)) == 1
    for tid, epoch in killed_at.items():
        starts = [h for h in history(out, tid) if h["event"] == "start"]
        if tid in evaluated:
            assert len(starts) == 1 and epoch == 10
        else:
            assert starts[-1]["source"] == "local" and starts[-1]["from_epoch"] >= epoch >= 2
    # the resumed trial ends bit for bit like an uninterrupted run of the same trial
    tid = partial[0]
    trial = next(t for t in trials if t.trial_id == tid)
    ref = run_trial_local({"trial": trial.to_dict(), "out": str(tmp_path / "ref"), "threads": 1})
    assert rows_without_seconds(trial_dir(tmp_path / "ref", tid)) == rows_without_seconds(trial_dir(out, tid))
    got = next(r for r in rows if r["trial_id"] == tid)
    assert (got["val_error"], got["test_error"], got["test_nll"]) == (
        ref["val_error"], ref["test_error"], ref["test_nll"])


# --------------------------------------------------------------------------------------------
# Ray Tune backend
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
    pytest.importorskip("ray.tune", reason="Ray Tune is not installed: pip install -e '.[ray]'")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import logging

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=True,
                 logging_level=logging.ERROR)
    yield ray
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_ray_asha_sweep_stops_poor_trials_and_matches_local(ray_cluster, tmp_path):
    out = tmp_path / "ray"
    space = tiny_space(epochs=6, lr={"grid": [1e-2, 1e-6]}, seed={"grid": [0, 1]})
    opts = quiet_opts(out, backend="ray", scheduler="asha", max_concurrent=2, grace_period=1,
                      reduction_factor=2, cpus_per_trial=1)
    rows = S.run_sweep(space, opts, log=silent)
    by_status = {s: [r for r in rows if r["status"] == s] for s in ("done", "stopped")}
    assert len(by_status["done"]) + len(by_status["stopped"]) == 4
    assert by_status["stopped"], "ASHA stopped no trial"
    assert all(r["epochs_run"] < 6 for r in by_status["stopped"])
    assert all(r["params"]["lr"] == 1e-2 for r in by_status["done"]) and by_status["done"]
    assert all(r["epochs_run"] == 6 for r in by_status["done"])
    for r in rows:  # every trial has its run directory here, with a test error of its best epoch
        d = trial_dir(out, r["trial_id"])
        assert len(read_metrics(d)) == r["epochs_run"]
        assert r["test_error"] is not None and r["best_epoch"] <= r["epochs_run"]
    # the same results table and best.json as the local backend; a finished trial is identical
    local = tmp_path / "local"
    done = by_status["done"][0]
    only = tiny_space(epochs=6, lr=done["params"]["lr"], seed=done["params"]["seed"])
    [lrow] = S.run_sweep(only, quiet_opts(local), log=silent)
    assert lrow["trial_id"] == done["trial_id"]
    for k in ("val_error", "test_error", "test_error_mc", "test_nll", "best_epoch", "epochs_run"):
        assert lrow[k] == done[k]
    assert rows_without_seconds(trial_dir(local, done["trial_id"])) == rows_without_seconds(
        trial_dir(out, done["trial_id"]))
    ray_table, local_table = S.read_sweep(out), S.read_sweep(local)
    assert list(ray_table[0]) == list(local_table[0])
    assert set(json.loads((out / "best.json").read_text())) == set(json.loads((local / "best.json").read_text()))
    vals = [float(r["val_error"]) for r in ray_table]
    assert vals == sorted(vals) and json.loads((out / "best.json").read_text())["val_error"] == vals[0]
    # a re-run skips every finished trial (ASHA-stopped ones included)
    S.run_sweep(space, opts, log=silent)
    assert all(len(history(out, r["trial_id"])) == 1 for r in rows)


@pytest.mark.slow
def test_ray_trial_crash_resumes_from_ray_checkpoint(ray_cluster, tmp_path):
    """The crash also deletes the trial's files (a lost node): only Ray's checkpoint can resume it,
    and it ends exactly like its uninterrupted twin (run on the local backend, whose finished
    trials end as Ray's: the ASHA and regression tests above; a second Ray run took half this
    test's time)."""
    import ray.cloudpickle

    import sweep_hooks

    ray.cloudpickle.register_pickle_by_value(sweep_hooks)  # Ray's workers cannot import tests/
    space = tiny_space(lr=1e-2)
    [plain_row] = S.run_sweep(space, quiet_opts(tmp_path / "plain"), log=silent)
    out = tmp_path / "ray"
    opts = quiet_opts(out, backend="ray", max_failures=1, max_concurrent=2,
                      epoch_hook=sweep_hooks.FailOnce(2, lose_files=True))
    [row] = S.run_sweep(space, opts, log=silent)
    rows = [plain_row, row]
    assert [r["status"] for r in rows] == ["done", "done"]
    plain, crashed = trial_dir(tmp_path / "plain", plain_row["trial_id"]), trial_dir(out, row["trial_id"])
    starts = [(h["source"], h["from_epoch"]) for h in history(out, row["trial_id"])]
    assert starts == [("fresh", 0), ("ray-checkpoint", 2)]
    assert rows_without_seconds(crashed) == rows_without_seconds(plain)
    for k in ("val_error", "test_error", "test_error_mc", "test_nll", "best_epoch", "epochs_run"):
        assert rows[0][k] == rows[1][k]


@pytest.mark.slow
def test_ray_regression_trial_ends_as_on_the_local_backend(ray_cluster, tmp_path):
    """A regression's summary has no validation error: its trial ends done on Ray (its last report
    read the summary's best_val_error and crashed), with the local backend's row."""
    from testkit import noisy_table

    csv_path = noisy_table(tmp_path / "houses.csv")
    space = {"params": {"data_file": str(csv_path), "target": "price", "method": "sgd", "hidden": [8],
                        "epochs": 2, "device": "cpu"}}
    [ray_row] = S.run_sweep(space, quiet_opts(tmp_path / "ray", backend="ray", max_failures=0), log=silent)
    [local_row] = S.run_sweep(space, quiet_opts(tmp_path / "local"), log=silent)
    assert ray_row["status"] == local_row["status"] == "done"
    assert ray_row["epochs_run"] == local_row["epochs_run"] == 2
    for k in ("val_nll", "val_rmse", "test_rmse", "test_log_likelihood"):  # ranked as locally, by val NLL
        assert ray_row[k] == local_row[k] is not None, k
    best = json.loads((tmp_path / "ray" / "best.json").read_text())
    assert best["selected_by"] == "val_nll" and best["val_nll"] == ray_row["val_nll"]


def test_ray_trial_asking_for_more_than_the_local_ray_has_is_refused(ray_cluster, tmp_path):
    """Tune would wait for ever for resources a Ray on this machine alone does not have."""
    have = ray_cluster.cluster_resources()
    for kw, flag in (({"cpus_per_trial": have.get("CPU", 0) + 1}, "--cpus-per-trial"),
                     ({"gpus_per_trial": have.get("GPU", 0) + 1}, "--gpus-per-trial")):
        with pytest.raises(UserError) as e:
            S.run_sweep(tiny_space(), quiet_opts(tmp_path / flag, backend="ray", **kw), log=silent)
        assert flag in str(e.value) and "no trial could start" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_ray_sweep_interrupted_leaves_its_trials_to_resume(ray_cluster, tmp_path):
    """Ctrl-C of a Ray sweep (Tune catches it and ends the run): the unfinished trial is pending, not
    an ASHA-stopped one evaluated at its best epoch so far that a re-run would skip, and the
    sweep raises KeyboardInterrupt (the command's 'interrupted; run again to resume')."""
    import ray.cloudpickle

    import sweep_hooks

    ray.cloudpickle.register_pickle_by_value(sweep_hooks)  # Ray's workers cannot import tests/
    space = tiny_space(epochs=4, seed={"grid": [0, 1]})
    out = tmp_path / "ray"
    opts = quiet_opts(out, backend="ray", max_concurrent=1,
                      epoch_hook=sweep_hooks.InterruptDriver(2, os.getpid()))
    with pytest.raises(KeyboardInterrupt):
        S.run_sweep(space, opts, log=silent)
    first, second = S.expand_space(space)  # the second never started
    assert not any((trial_dir(out, t.trial_id) / "result.json").exists() for t in (first, second))
    assert [r["status"] for r in S.read_sweep(out)] == ["pending", "pending"]
    rows = S.run_sweep(space, quiet_opts(out, backend="ray"), log=silent)
    assert [(r["status"], r["epochs_run"]) for r in rows] == [("done", 4), ("done", 4)]
    assert [h["from_epoch"] for h in history(out, first.trial_id)] == [0, 2]
