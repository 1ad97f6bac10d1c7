"""``bbb reproduce lora`` on fake MNIST-format data (labels set a block of pixels): the few-shot
split, the choice on the held-out slice, the methods' predictives, a smoke run end to end with
its files, resume, and one-line errors."""

from __future__ import annotations

import csv
import json
import shutil
import sys

import pytest
import torch

pytest.importorskip("peft")

from bbb.experiments.lora import runner as RU  # noqa: E402
from bbb.experiments.lora.backbones import TaskData, build_backbone  # noqa: E402
from bbb.experiments.lora.settings import (  # noqa: E402
    BBB_GRID,
    IVON_GRID,
    POOL_PER_CLASS,
    SCHEDULES,
    Arch,
    LoraBudget,
    LoraMethod,
    Phase,
    Setting,
    Task,
)
from bbb.experiments.lora.train import Job, _lora_model, few_shot, predictive_logits  # noqa: E402
from faultkit import fake_mnist  # noqa: E402
from testkit import run_main  # noqa: E402


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = fake_mnist(tmp_path_factory.mktemp("data"), n_train=300, n_test=100)
    shutil.copytree(root / "mnist", root / "fashion-mnist")
    return root


@pytest.fixture
def no_verify(monkeypatch):
    monkeypatch.setenv("BBB_DATA_VERIFY", "0")


def _pool(per_class: int = 12) -> TaskData:
    y = torch.arange(5).repeat_interleave(per_class)
    x = torch.randn(len(y), 32 * 7 * 7)
    return TaskData(pool=x, pool_y=y, test=x[:10], test_y=y[:10], ood={})


def test_few_shot_holds_out_a_slice_of_every_class():
    data = _pool()
    for k in (2, 5, 10):
        job = Job(Arch.CNN, Task.DIGITS, k, 0, LoraMethod.MLE, Phase.VALIDATION, (Setting(),))
        tx, ty, vx, vy = few_shot(data, job)
        assert len(ty) + len(vy) == 5 * k
        assert torch.bincount(vy, minlength=5).min() >= 1  # every class held out
        assert torch.bincount(ty, minlength=5).min() >= 1
        rows = {tuple(r.tolist()) for r in tx}
        assert not any(tuple(r.tolist()) in rows for r in vx)  # disjoint
    a = few_shot(data, Job(Arch.CNN, Task.DIGITS, 5, 0, LoraMethod.MLE, Phase.TEST, (Setting(),)))
    b = few_shot(data, Job(Arch.CNN, Task.DIGITS, 5, 1, LoraMethod.MLE, Phase.TEST, (Setting(),)))
    assert not torch.equal(a[1], b[1]) or not torch.equal(a[0], b[0])  # seeds draw different sets


def test_choose_takes_the_lowest_mean_held_out_nll():
    grid = BBB_GRID[:3]
    results = [{"settings": {s.label(): {"nll": nll} for s, nll in zip(grid, nlls)}}
               for nlls in ((0.9, 0.5, 0.7), (0.8, 0.7, 0.8))]
    best, means = RU.choose(results, grid)
    assert best == grid[1] and means[grid[1].label()] == pytest.approx(0.6)
    # a diverged setting (NaN) first in the grid is never the choice
    results[0]["settings"][grid[0].label()]["nll"] = float("nan")
    assert RU.choose(results, grid)[0] == grid[1]


def test_mc_dropout_samples_differ_and_mle_is_one_network():
    bb = build_backbone(Arch.CNN)
    x = torch.randn(6, 32 * 7 * 7)
    drop = _lora_model(bb, LoraMethod.MC_DROPOUT, 4, 8, 0, Setting())
    with torch.no_grad():  # move B off zero so that the adapters change the output
        for n, p in drop.named_parameters():
            if "lora_B" in n:
                p.normal_()
    out = predictive_logits([drop], LoraMethod.MC_DROPOUT, x, seed=0, samples=4)
    assert out.shape == (4, 6, 5) and not torch.allclose(out[0], out[1])
    assert torch.equal(out, predictive_logits([drop], LoraMethod.MC_DROPOUT, x, seed=0, samples=4))  # seeded
    mle = _lora_model(bb, LoraMethod.MLE, 4, 8, 0, Setting())
    assert predictive_logits([mle], LoraMethod.MLE, x, seed=0).shape == (1, 6, 5)
    trainable = {n for n, p in mle.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)  # only the adapters train


def test_smoke_run_writes_the_tables_and_resumes(fake_data, no_verify, capsys, tmp_path, monkeypatch):
    out = tmp_path / "lora"
    argv = ["reproduce", "lora", "--budget", "smoke", "--archs", "cnn", "--tasks", "digits", "--shots", "3",
            "--methods", "mle", "map", "ensemble", "bbb_a", "ivon", "--out", str(out), "--data-dir", str(fake_data),
            "--quiet"]
    code, stdout, _ = run_main(capsys, *argv)
    assert code == 0, stdout
    for name in ("methods.csv", "seeds.csv", "sweep.csv", "table.md", "results.json", "run.json"):
        assert (out / name).is_file(), name
    res = json.loads((out / "results.json").read_text())
    methods = {g["method"]: g for g in res["methods"]}
    assert set(methods) == {"mle", "map", "ensemble", "bbb_a", "ivon"}
    for g in methods.values():
        assert 0 <= g["acc"] <= 1 and 0 <= g["ece"] <= 1 and g["nll"] > 0
        assert 0 <= g["auroc_entropy_held"] <= 1
    assert methods["mle"]["auroc_mi_other"] is None  # one network: no mutual information
    assert methods["ensemble"]["auroc_mi_other"] is not None
    assert methods["map"]["setting"].startswith("prior=")  # chosen on the held-out slice
    assert methods["bbb_a"]["setting"].startswith("kl=") and methods["bbb_a"]["auroc_mi_other"] is not None
    assert 0 <= methods["bbb_a"]["mean_acc"] <= 1  # BLoB's N = 0 (the posterior mean) beside the k samples
    # IVON: its (lr, ess) chosen on the held-out slice, sampled (MI) and at the mean, its setting not a metric
    assert methods["ivon"]["setting"].startswith("lr=") and "ess=" in methods["ivon"]["setting"]
    assert methods["ivon"]["auroc_mi_other"] is not None and 0 <= methods["ivon"]["mean_acc"] <= 1
    assert not {"lr", "lr_se", "ess", "ess_se"} & set(methods["ivon"])
    # the cost: each test job's seconds, and its validation job's on the seed that job chose for
    per_seed = list(csv.DictReader((out / "seeds.csv").open()))
    assert all(float(r["seconds"]) > 0 for r in per_seed)
    jobs = {p.name: json.loads(p.read_text())["seconds"] for p in (out / "jobs").glob("*-validation.json")}
    for r in per_seed:
        val = f"{r['arch']}-{r['task']}-k{r['shots']}-s{r['seed']}-{r['method']}-validation.json"
        assert (float(r["validation_seconds"]) if r["validation_seconds"] else None) == jobs.get(val), val
    assert methods["bbb_a"]["seconds"] > 0 and "validation_seconds" not in methods["bbb_a"]
    sweep = (out / "sweep.csv").read_text()
    assert sweep.count("bbb_a") == len(BBB_GRID) and sweep.count("map") == 3
    assert sweep.count("ivon") == len(IVON_GRID)
    assert "| ivon |" in (out / "table.md").read_text() and (out / "reliability-cnn-digits.png").is_file()
    curve = json.loads(next((out / "jobs").glob("*-mle-test.json")).read_text())
    steps = [p["step"] for p in next(iter(curve["settings"].values()))["curve"]]
    assert steps[0] == 0 and steps[-1] == SCHEDULES[LoraBudget.SMOKE].steps
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()}
    code, _, _ = run_main(capsys, *argv)  # resume: nothing trains again
    assert code == 0
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()} == stamps
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["out"] == "$OUT" and str(tmp_path) not in (out / "run.json").read_text()  # as from a clone
    monkeypatch.setattr(sys, "argv", ["bbb", *argv, "--report"])  # (the command line the tables name)
    code, stdout, _ = run_main(capsys, *argv, "--report")  # the tables only, the run's own command kept
    assert code == 0 and "bbb_a" in stdout
    assert json.loads((out / "run.json").read_text())["command"] == run["command"]
    # and the --report that picked the rows (another --seeds or --methods there shows other rows)
    tables = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith("Tables: "))
    assert "`bbb reproduce lora " in tables and "--report" in tables and str(tmp_path) not in tables


@pytest.mark.parametrize("bad, what", [(["--shots", "1"], "--shots"), (["--workers", "0"], "--workers"),
                                       # more than the pool holds: the sets would silently be smaller than K
                                       (["--shots", "5", str(POOL_PER_CLASS + 1)], f"<= {POOL_PER_CLASS} per class"),
                                       (["--methods", "nope"], "--methods")])
def test_bad_input_is_one_line(bad, what, capsys, tmp_path):
    code, out, err = run_main(capsys, "reproduce", "lora", "--out", str(tmp_path), *bad)
    assert code == 2
    assert what in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_rerun_at_another_budget_is_refused_not_mixed(fake_data, no_verify, capsys, tmp_path):
    """A job's file is reused by its name, which the budget is not in: the smoke run's few steps
    would be reported as the quick budget's. It is a one-line error before anything trains."""
    out = tmp_path / "lora"
    argv = ["reproduce", "lora", "--budget", "smoke", "--archs", "cnn", "--tasks", "digits", "--shots", "3",
            "--methods", "mle", "--out", str(out), "--data-dir", str(fake_data), "--quiet"]
    assert run_main(capsys, *argv)[0] == 0
    before = {p.name: p.read_bytes() for p in (out / "jobs").iterdir()}
    code, _, err = run_main(capsys, *argv, "--budget", "quick", "--seeds", "0")
    assert code == 2 and "--budget smoke, not quick" in err and len(err.strip().splitlines()) == 1, err
    assert {p.name: p.read_bytes() for p in (out / "jobs").iterdir()} == before
    assert sorted(p.name for p in (out / "backbones").iterdir()) == ["cnn-seed0-3.pt"]  # none pretrained
    # another experiment's folder (its methods.csv and run.json would be written over), and one trained before
    # options.json (its run.json's command)
    uci = ["reproduce", "uci", "--out", str(out), "--budget", "smoke", "--data-dir", str(fake_data)]
    code, _, err = run_main(capsys, *uci)
    assert code == 2 and "holds the results of bbb reproduce lora, not of bbb reproduce uci" in err, err
    (out / "options.json").unlink()
    run = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**run, "command": "bbb reproduce lora --budget smoke --out $OUT"}))
    code, _, err = run_main(capsys, *uci)
    assert code == 2 and "holds the results of bbb reproduce lora, not of bbb reproduce uci" in err, err


def test_log_writes_each_jobs_curves_and_scores_from_its_file(fake_data, no_verify, capsys, tmp_path):
    """``--log tensorboard``: when the jobs end, a test job's stored NLL/ECE/accuracy curve against
    steps and its final metrics in OUT/tb/JOB; a validation job's held-out scores per setting in
    OUT/tb/JOB/SETTING. Resumed with --report: written again whole, not doubled."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(folder):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}

    out = tmp_path / "lora"
    argv = ["reproduce", "lora", "--budget", "smoke", "--archs", "cnn", "--tasks", "digits", "--shots", "3",
            "--methods", "mle", "map", "--out", str(out), "--data-dir", str(fake_data), "--quiet",
            "--log", "tensorboard"]
    code, said, err = run_main(capsys, *argv)
    assert code == 0, err
    assert f"wrote {out / 'tb'}" in said
    tb = out / "tb"
    assert sorted(p.name for p in tb.iterdir()) == ["cnn-digits-k3-s0-map-test", "cnn-digits-k3-s0-map-validation",
                                                     "cnn-digits-k3-s0-mle-test"]
    steps = SCHEDULES[LoraBudget.SMOKE].steps
    job = json.loads((out / "jobs" / "cnn-digits-k3-s0-mle-test.json").read_text())
    (row,) = job["settings"].values()
    got = scalars(tb / "cnn-digits-k3-s0-mle-test")
    assert got["curve/nll"] == [(p["step"], pytest.approx(p["nll"], rel=1e-6)) for p in row["curve"]]
    assert [s for s, _ in got["curve/ece"]] == [0, steps]
    for k in ("acc", "ece", "nll", "brier", "confidence", "auroc_entropy_mnist0-4", "auroc_entropy_fashion"):
        assert got[f"test/{k}"] == [(steps, pytest.approx(row[k], rel=1e-6))], k
    assert row["auroc_mi_fashion"] is None and "test/auroc_mi_fashion" not in got  # one network: no MI
    val = json.loads((out / "jobs" / "cnn-digits-k3-s0-map-validation.json").read_text())
    folders = {p.name: p for p in (tb / "cnn-digits-k3-s0-map-validation").iterdir()}
    assert sorted(folders) == sorted(label.replace(" ", "_") for label in val["settings"]) and len(folders) == 3
    for label, r in val["settings"].items():
        assert scalars(folders[label.replace(" ", "_")])["val/nll"] == [(steps, pytest.approx(r["nll"], rel=1e-6))]
    code, _, err = run_main(capsys, *argv, "--report")
    assert code == 0, err
    assert [s for s, _ in scalars(tb / "cnn-digits-k3-s0-mle-test")["curve/nll"]] == [0, steps]
    assert "loggers" not in json.loads((out / "run.json").read_text())["config"]


def test_log_without_tensorboard_is_one_line_before_anything(monkeypatch, capsys, tmp_path):
    for mod in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, mod, None)
    code, _, err = run_main(capsys, "reproduce", "lora", "--out", str(tmp_path / "o"), "--log", "tensorboard")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pip install tensorboard" in err, err
    assert not (tmp_path / "o").exists()


class _LogStderr:
    """A log file as stderr: not a terminal."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_progress_in_a_log_is_plain_lines(fake_data, no_verify, capsys, tmp_path, monkeypatch):
    """Not on a terminal (a nohup log), the benchmark's progress is a plain line now and then
    (bbb.progress), never a bar redrawn with carriage returns."""
    log = _LogStderr()
    monkeypatch.setattr(sys, "stderr", log)
    argv = ["reproduce", "lora", "--budget", "smoke", "--archs", "cnn", "--tasks", "digits", "--shots", "3",
            "--methods", "mle", "--out", str(tmp_path / "lora"), "--data-dir", str(fake_data)]
    code, stdout, _ = run_main(capsys, *argv)
    assert code == 0, stdout
    text = "".join(log.parts)
    assert "\r" not in text and "lora steps:" in text, text[-2000:]
