"""Every number of ``bbb reproduce uci`` is a function of its own split alone (issue 64): a
network's random numbers are keyed by its identity (bbb.experiments.uci.streams), so a split's row
is the same whether it runs alone or beside other splits, grid points, methods or datasets, with
1 or 2 workers, and after a kill and resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bbb.data.uci import load_uci
from bbb.experiments.uci import runner as RU
from bbb.experiments.uci import train as TR
from bbb.experiments.uci.runner import run_uci
from bbb.experiments.uci.settings import VARIANTS, Phase, schedule_for
from bbb.experiments.uci.streams import ORDER, TRAIN, MemberStreams, eval_stream, member_key
from testkit import read_csv

from .test_reproduce_uci import VARIANT_PARAMS, smoke_cfg, write_dataset


def test_a_networks_numbers_are_its_own_whatever_the_population_and_the_rows_drawn():
    keys = [member_key("a", 1), member_key("b", 2), member_key("c", 3)]
    pop, alone = MemberStreams(keys), MemberStreams(keys[1:2])
    for kind in ("normal", "uniform"):
        whole = getattr(pop, kind)(TRAIN, 3, 4, 9).values  # rows 3..6
        assert torch.equal(whole[1:2], getattr(alone, kind)(TRAIN, 3, 4, 9).values)
        assert torch.equal(whole[:, 2:], getattr(pop, kind)(TRAIN, 5, 2, 9).values)  # rows 5..6 on their own
        assert not torch.equal(whole[0], whole[1])
    perm = pop.order(ORDER, 7, 50)
    assert torch.equal(perm[1:2], alone.order(ORDER, 7, 50))
    assert all(sorted(p.tolist()) == list(range(50)) for p in perm)
    assert not torch.equal(perm, pop.order(ORDER, 8, 50))  # a new order each epoch
    assert not torch.equal(pop.normal(eval_stream(1), 0, 1, 9).values, pop.normal(eval_stream(2), 0, 1, 9).values)
    z = MemberStreams([5, 6]).normal(TRAIN, 0, 200, 1001).values
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01
    g1, g2 = pop.generator(1), alone.generator(0)
    assert torch.equal(torch.rand(5, generator=g1), torch.rand(5, generator=g2))
    with pytest.raises(ValueError, match="2\\^31"):
        pop.normal(TRAIN, 1 << 30, 1, 9)


def test_a_networks_key_is_its_identity():
    v = VARIANTS[0]
    base = ("yacht", v, Phase.VALIDATION, 3, v.grid[1], 0, 0)
    k = TR.network_key(*base)
    assert k == TR.network_key(*base)
    changed = [("concrete",), (VARIANTS[1],), (Phase.TEST,), (4,), (v.grid[2],), (1,), (1,)]
    for i, (new,) in enumerate(changed):
        other = list(base)
        other[i] = new
        assert TR.network_key(*other) != k, i


@pytest.fixture
def data_root(tmp_path):
    root = write_dataset(tmp_path / "data")
    return write_dataset(root, name="concrete", n=50, seed=1)


@pytest.mark.parametrize("variant", VARIANT_PARAMS)
def test_a_member_trains_and_scores_as_it_would_alone(data_root, tmp_path, variant):
    """Member (split 1, grid point 1) in a population of four, and alone: the same scores at every
    checkpoint (to 1e-7 here, where torch's vectorised exp and log may round a tensor's tail
    differently; every digit in the test below); and a job draws nothing from torch's global
    generator."""
    d = load_uci("yacht", data_root, dtype=torch.float64)
    cfg = smoke_cfg(data_root, tmp_path / "o", samples=6)
    sched = schedule_for(54, "smoke")
    members = ((0, 0), (1, 0), (2, 1), (1, 1))
    results = []
    for i, ms in enumerate((members, members[3:])):
        folder = tmp_path / str(i)
        folder.mkdir()
        rng = torch.get_rng_state()
        results.append(TR.run_job(TR.Job("yacht", variant, Phase.VALIDATION, ms, sched), d, cfg, folder))
        assert torch.equal(torch.get_rng_state(), rng)
    together, alone = results
    for a, b in zip(together["scores"], alone["scores"]):
        for key in ("rmse", "ll", "noise_sd"):
            assert a[key][3] == pytest.approx(b[key][0], rel=1e-7, abs=1e-12), key


def _rows(out: Path, dataset: str, split: int, methods: list[str] | None = None) -> list[dict]:
    rows = [r for r in read_csv(out / "splits.csv") if r["dataset"] == dataset and r["split"] == str(split)]
    return [r for r in rows if methods is None or r["method"] in methods]


def scenario(root: Path, tmp: Path) -> None:
    """The reference: two datasets, three splits, three methods, one worker. Split 1 of yacht alone
    on two workers; bbb alone on splits 1 and 2, killed in its first job and resumed: the same
    rows, every digit. Run in a process of its own with ATEN_CPU_CAPABILITY=default (see below)."""
    ref = tmp / "ref"
    run_uci(smoke_cfg(root, ref, datasets=["yacht", "concrete"], samples=4))
    alone = tmp / "alone"
    run_uci(smoke_cfg(root, alone, splits=[1], samples=4, workers=2))
    want = _rows(ref, "yacht", 1)
    assert len(want) == 3 and _rows(alone, "yacht", 1) == want, (_rows(alone, "yacht", 1), want)

    class Kill(Exception):
        pass

    real, calls = TR.run_job, []

    def killed_once(job, data, cfg, folder, progress=None):
        calls.append(job.name)

        def kill(n):
            if n == 1 and (folder / f"{job.name}.state.pt").is_file():
                calls.append("killed")
                raise Kill

        return real(job, data, cfg, folder, kill if len(calls) == 1 else progress)

    bbb = tmp / "bbb"
    cfg = smoke_cfg(root, bbb, splits=[1, 2], samples=4, methods=["bbb"])
    RU.run_job = killed_once  # type: ignore[assignment]
    try:
        run_uci(cfg)
    except Kill:
        pass
    assert calls[1] == "killed" and list((bbb / "jobs").glob("*.state.pt")), calls
    run_uci(cfg)  # resumes the killed job from its state
    for split in (1, 2):
        assert _rows(bbb, "yacht", split) == _rows(ref, "yacht", split, ["bbb"]), split


def test_a_split_row_is_the_same_alone_beside_others_on_two_workers_and_resumed(data_root, tmp_path):
    """:func:`scenario` in a fresh process with torch's unvectorised CPU kernels
    (``ATEN_CPU_CAPABILITY=default``, set before torch loads): the vectorised exp and log of
    AVX2/AVX-512 round differently in a tensor's last few elements (its tail loop), so there a
    member's 7th-9th digit moves with the population's size; with the default kernels every digit
    holds (the README's reproduction command sets it)."""
    tests = Path(__file__).resolve().parents[2]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])}
    code = (f"from pathlib import Path; from applications.experiments.test_uci_independence import scenario; "
            f"scenario(Path({str(data_root)!r}), Path({str(tmp_path)!r}))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_state_saved_by_the_old_code_is_refused_not_continued(data_root, tmp_path):
    """A job's state from before per-network streams would continue other random numbers: a
    one-line error that says to delete it."""
    from bbb.errors import UserError
    from bbb.io import atomic_torch_save

    d = load_uci("yacht", data_root, dtype=torch.float64)
    job = TR.Job("yacht", VARIANTS[2], Phase.VALIDATION, ((0, 0),), schedule_for(54, "smoke"))
    atomic_torch_save(tmp_path / f"{job.name}.state.pt", {"model": {}, "epoch": 1, "elapsed": 0.0, "record": {},
                                                          "order": torch.Generator().get_state()})
    with pytest.raises(UserError, match="older bbb.*delete it") as err:
        TR.run_job(job, d, smoke_cfg(data_root, tmp_path / "o"), tmp_path)
    assert "\n" not in str(err.value)
