"""``bbb reproduce uci --methods bbb,bbb_ensemble`` (issue 75): 5 BBB networks per split, each its
own seed, at the (variant, grid point) BBB's validation chose for that split; their epochs and
noise scale chosen on the ensemble's own validation (the mixture scored on the held-out 20%), the
test predictive their mixture; the other methods' numbers unchanged beside it."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bbb.errors import UserError
from bbb.experiments.uci import models as M
from bbb.experiments.uci import report as R
from bbb.experiments.uci.runner import bbb_choices, plan_jobs, run_uci
from bbb.experiments.uci.settings import (
    DEFAULT_METHODS,
    ENSEMBLE_SIZE,
    NOISE_SCALES,
    VARIANTS,
    Phase,
    Setting,
    UCIConfig,
    UCIMethod,
    copies_of,
)
from bbb.experiments.uci.streams import MemberStreams, eval_stream, member_key
from bbb.uncertainty import regression_uncertainty
from testkit import read_csv, run_main

from .test_reproduce_uci import smoke_cfg, write_dataset

ENSEMBLE_VARIANTS = [v for v in VARIANTS if v.method is UCIMethod.BBB_ENSEMBLE]


@pytest.fixture
def data_root(tmp_path):
    return write_dataset(tmp_path / "data")


def test_the_bbb_ensemble_is_opt_in_and_needs_bbb_beside_it(data_root, tmp_path, capsys):
    assert UCIMethod.BBB_ENSEMBLE not in DEFAULT_METHODS
    assert [v.of for v in ENSEMBLE_VARIANTS] == ["heteroscedastic", "local"]
    assert all(copies_of(v) == ENSEMBLE_SIZE == 5 for v in ENSEMBLE_VARIANTS)
    with pytest.raises(UserError, match="name bbb too") as err:
        smoke_cfg(data_root, tmp_path / "o", methods=["bbb_ensemble"])
    assert "\n" not in str(err.value)
    rc, _, stderr = run_main(capsys, "reproduce", "uci", "--methods", "bbb_ensemble", "--budget", "smoke",
                             "--datasets", "yacht", "--data-dir", str(data_root), "--out", str(tmp_path / "c"))
    assert rc != 0 and len(stderr.strip().splitlines()) == 1 and "--methods bbb,bbb_ensemble" in stderr
    assert not (tmp_path / "c").exists()


def test_the_ensemble_pools_its_networks_samples_into_one_mixture_per_member():
    """Network e of member m is network e * members + m of one BBB population (its own key); the
    predictive stacks the k samples of each of its 5 networks: (5 k, members, rows)."""
    variant = ENSEMBLE_VARIANTS[0]
    settings = [Setting(1e-3), Setting(3e-3, beta=0.1)]
    keys = MemberStreams([member_key("t", i) for i in range(2 * ENSEMBLE_SIZE)])
    ens = M.build_regressor(variant, settings, 3, 8, streams=keys)
    assert isinstance(ens, M.BBBEnsembleRegressor) and ens.copies == ENSEMBLE_SIZE
    pop = M.BBBRegressor(variant, settings * ENSEMBLE_SIZE, 3, 8, streams=keys)  # the same networks, unpooled
    x = torch.randn(2, 7, 3)
    means, sds = ens.predict(x, 4, keys, eval_stream(4))
    flat_m, flat_s = pop.predict(x.repeat(ENSEMBLE_SIZE, 1, 1), 4, keys, eval_stream(4))
    assert means.shape == sds.shape == (ENSEMBLE_SIZE * 4, 2, 7)
    for e in range(ENSEMBLE_SIZE):
        for m in range(2):
            assert torch.equal(means[4 * e:4 * e + 4, m], flat_m[:, 2 * e + m])
            assert torch.equal(sds[4 * e:4 * e + 4, m], flat_s[:, 2 * e + m])
    # the networks differ (their own keys), so the mixture is wider than its networks on average
    u = regression_uncertainty(means[:, 0], sds[:, 0])["total"]
    per = torch.stack([regression_uncertainty(means[4 * e:4 * e + 4, 0], sds[4 * e:4 * e + 4, 0])["total"]
                       for e in range(ENSEMBLE_SIZE)]).mean(0)
    assert torch.all(u >= per - 1e-9) and float((u - per).min()) > 0


def test_the_ensemble_trains_at_bbbs_choice_chooses_on_its_own_validation_and_changes_no_other_row(
        data_root, tmp_path):
    alone = tmp_path / "alone"
    run_uci(smoke_cfg(data_root, alone, methods=["bbb", "deep_ensemble"]))
    out = tmp_path / "both"
    cfg = smoke_cfg(data_root, out, methods=["bbb", "deep_ensemble", "bbb_ensemble"])
    res = run_uci(cfg)
    rows = read_csv(out / "splits.csv")
    assert [r for r in rows if r["method"] != "bbb_ensemble"] == read_csv(alone / "splits.csv")
    for name in ("heteroscedastic-validation", "local-test", "deep_ensemble-test"):  # every digit of the jobs
        a, b = (json.loads((d / "jobs" / f"yacht-{name}.json").read_text()) for d in (alone, out))
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    vals = {p.name.removeprefix("yacht-").removesuffix("-validation.json"): json.loads(p.read_text())
            for p in (out / "jobs").glob("yacht-*-validation.json")}
    chosen = bbb_choices(vals, (0, 1, 2))
    assert chosen is not None
    ens_rows = [r for r in rows if r["method"] == "bbb_ensemble"]
    assert len(ens_rows) == 3
    for r in ens_rows:
        s = int(r["split"])
        base, g = chosen[s]
        assert chosen[s] == R.select(vals, s, [v for v in VARIANTS if v.method is UCIMethod.BBB])[:2]
        val = vals[f"ensemble_{base}"]
        assert r["variant"] == f"ensemble_{base}" and [s, g] in val["members"]
        assert r["setting"] == VARIANTS[0].grid[g].label()
        # its epochs and noise scale: the best of its own validation (the mixture on the held-out rows)
        _, g2, e, c = R.select_variant(val, s)
        assert (g2, int(r["epochs"]), float(r["noise_scale"])) == (g, e, c) and c in NOISE_SCALES
        assert math.isfinite(float(r["ll"])) and float(r["rmse"]) > 0
        test = json.loads((out / "jobs" / f"yacht-ensemble_{base}-test.json").read_text())
        assert [s, g] in test["members"] and f"{s}:{e}:{c:g}" in test["full"]
    # a variant no split chose has no job, and its absence is no missing row
    used = {f"ensemble_{b}" for b, _ in chosen.values()}
    assert {j.variant.name for j in plan_jobs(cfg, "yacht", Phase.VALIDATION, vals) if j.variant.of} == used
    assert not res["missing"] and [r["method"] for r in res["method_rows"]] == ["bbb", "deep_ensemble",
                                                                                 "bbb_ensemble"]
    assert all(r["method"] != "bbb_ensemble" for r in read_csv(out / "variants.csv"))
    md = (out / "table.md").read_text()
    assert "5 x bbb (ours)" in md and "datasets_vs_bbb_ensemble 1" in md
    # --report reads the same rows back, and a resume trains nothing
    again = run_uci(UCIConfig(**{**cfg.__dict__, "report_only": True}))
    assert [r["ll_mean"] for r in again["method_rows"]] == [r["ll_mean"] for r in res["method_rows"]]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()}
    run_uci(cfg)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").iterdir()} == before
