"""``bbb bandit --merge``: runs that split the agents or the seeds between them become one run's
outputs, and anything else is a one-line error (a run of other settings, a repeated agent and
seed, an agent left without a seed, an unfinished run, an option that the merge would ignore)."""

from __future__ import annotations

import json
import statistics

import pytest

from bbb.cli import main as cli_main
from bbb.errors import UserError
from bbb.experiments.bandit import BanditConfig, figure6_marks, merge_runs, run_bandit
from testkit import read_csv, tiny_bandit_config, tiny_mushrooms


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    ctx, edible = tiny_mushrooms()
    root = tmp_path_factory.mktemp("parts")
    out = {}
    for name, agents in (("a", ("bbb", "greedy")), ("b", ("egreedy_0.01", "egreedy_0.05"))):
        out[name] = root / name
        run_bandit(tiny_bandit_config(out=str(out[name]), agents=agents), contexts=ctx, edible=edible)
    return out, ctx, edible


def test_merged_runs_hold_every_agents_rows_and_summary_as_run_and_the_marks_of_the_whole(parts, tmp_path):
    out, _, edible = parts
    res = merge_runs([out["a"], out["b"]], tmp_path / "all", edible=edible)
    rows = read_csv(tmp_path / "all" / "regret.csv")
    by_part = read_csv(out["a"] / "regret.csv") + read_csv(out["b"] / "regret.csv")
    key = lambda r: (int(r["step"]), r["agent"], int(r["seed"]))  # noqa: E731
    assert sorted(rows, key=key) == sorted(by_part, key=key)
    summary = read_csv(tmp_path / "all" / "summary.csv")
    assert [s["agent"] for s in summary] == ["bbb", "greedy", "egreedy_0.01", "egreedy_0.05"]
    assert summary == read_csv(out["a"] / "summary.csv") + read_csv(out["b"] / "summary.csv")
    written = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert len(written["marks"]) == 8  # the four agents' marks, as a single run of all four has
    assert written["marks"] == figure6_marks(res["summary"], res["regret_rows"], float(edible.float().mean()))
    cfg = json.loads((tmp_path / "all" / "config.json").read_text())
    assert cfg["agents"] == ["bbb", "greedy", "egreedy_0.01", "egreedy_0.05"]
    assert [p["agents"] for p in cfg["parts"]] == [["bbb", "greedy"], ["egreedy_0.01", "egreedy_0.05"]]
    assert cfg["seconds"] == pytest.approx(sum(p["seconds"] for p in cfg["parts"]), abs=0.2)
    assert {"regret.png", "eating.png"} <= set(res["files"])


def test_merging_other_settings_a_repeated_agent_an_unfinished_run_or_onto_a_part_is_refused(parts, tmp_path):
    out, ctx, edible = parts
    other = tmp_path / "other"
    run_bandit(tiny_bandit_config(out=str(other), agents=("egreedy_0.05",), lr=0.5), contexts=ctx, edible=edible)
    with pytest.raises(UserError, match="ran with lr=0.5"):
        merge_runs([out["a"], other], tmp_path / "m1", edible=edible)
    with pytest.raises(UserError, match="repeats agent bbb on seed 0"):
        merge_runs([out["a"], out["a"]], tmp_path / "m2", edible=edible)
    with pytest.raises(UserError, match="not a finished bbb bandit run"):
        merge_runs([out["a"], tmp_path / "nothing"], tmp_path / "m3", edible=edible)
    with pytest.raises(UserError, match="at least two"):
        merge_runs([out["a"]], tmp_path / "m4", edible=edible)
    before = (out["a"] / "regret.csv").read_text()
    with pytest.raises(UserError, match="is one of the runs to merge"):
        merge_runs([out["a"], out["b"]], out["a"], edible=edible)
    assert (out["a"] / "regret.csv").read_text() == before
    assert not (tmp_path / "m1").exists()
    # a folder holding a finished run of its own (or a merge of other parts) was replaced, silently
    with pytest.raises(UserError, match="holds another bandit run .*a run of its own"):
        merge_runs([out["a"], out["b"]], other, edible=edible)
    merge_runs([out["a"], out["b"]], tmp_path / "m5", edible=edible)
    merge_runs([out["a"], out["b"]], tmp_path / "m5", edible=edible)  # the same parts again: merged again
    with pytest.raises(UserError, match="holds another bandit run .*a merge of other parts"):
        merge_runs([out["b"], out["a"]], tmp_path / "m5", edible=edible)


def test_the_command_line_refuses_an_option_that_the_merge_would_ignore(parts, tmp_path, capsys):
    out, _, _ = parts
    rc = cli_main(["bandit", "--out", str(tmp_path / "m"), "--steps", "5", "--merge", str(out["a"]), str(out["b"])])
    err = capsys.readouterr().err
    assert rc == 2 and "drop --steps" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()
    # named as the command line spells them (it said "drop decision_samples, resume")
    rc = cli_main(["bandit", "--out", str(tmp_path / "m"), "--samples", "1", "--fresh", "--merge", str(out["a"]),
                   str(out["b"])])
    err = capsys.readouterr().err
    assert rc == 2 and "drop --samples, --fresh" in err
    assert not (tmp_path / "m").exists()


def test_an_ivon_part_merges_with_parts_that_never_read_its_settings(parts, tmp_path):
    """The ivon agent's settings come from its part: a part without it (whose config.json has the
    defaults, or no such entry: written before the agent existed) is not another run's settings."""
    out, ctx, edible = parts
    ivon = tmp_path / "ivon"
    run_bandit(tiny_bandit_config(out=str(ivon), agents=("ivon",), ivon_lr=0.05, ivon_hess_init=0.002),
               contexts=ctx, edible=edible)
    older = tmp_path / "older"  # part b as a bbb from before the agent wrote it
    older.mkdir()
    for name in ("summary.json", "regret.csv"):
        (older / name).write_text((out["b"] / name).read_text())
    cfg = json.loads((out["b"] / "config.json").read_text())
    assert cfg["ivon_lr"] == BanditConfig().ivon_lr
    (older / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if not k.startswith("ivon_")}))
    merge_runs([out["a"], older, ivon], tmp_path / "all", edible=edible)
    merged = json.loads((tmp_path / "all" / "config.json").read_text())
    assert merged["agents"][-1] == "ivon" and (merged["ivon_lr"], merged["ivon_hess_init"]) == (0.05, 0.002)


def test_runs_that_split_the_seeds_merge_into_every_seed_of_every_agent(parts, tmp_path):
    """Each agent's summary over the parts' seeds is what each part computed for its own, weighted by
    its seeds (the final regret's mean and sd from every seed's row); the rows are the parts'."""
    _, ctx, edible = parts
    a, b = tmp_path / "s0", tmp_path / "s12"
    run_bandit(tiny_bandit_config(out=str(a), agents=("bbb", "greedy"), seeds=(0,)), contexts=ctx, edible=edible)
    run_bandit(tiny_bandit_config(out=str(b), agents=("bbb", "greedy"), seeds=(1, 2)), contexts=ctx, edible=edible)
    merge_runs([a, b], tmp_path / "all", edible=edible)
    cfg = json.loads((tmp_path / "all" / "config.json").read_text())
    assert cfg["seeds"] == [0, 1, 2] and [p["seeds"] for p in cfg["parts"]] == [[0], [1, 2]]
    key = lambda r: (int(r["step"]), r["agent"], int(r["seed"]))  # noqa: E731
    rows = read_csv(tmp_path / "all" / "regret.csv")
    assert sorted(rows, key=key) == sorted(read_csv(a / "regret.csv") + read_csv(b / "regret.csv"), key=key)
    merged = {s["agent"]: s for s in read_csv(tmp_path / "all" / "summary.csv")}
    assert list(merged) == ["bbb", "greedy"]
    for agent in ("bbb", "greedy"):
        one, two = (next(s for s in read_csv(p / "summary.csv") if s["agent"] == agent) for p in (a, b))
        m = merged[agent]
        finals = [float(r["cumulative_regret"]) for r in rows if r["agent"] == agent and r["step"] == "120"]
        assert m["seeds"] == "3" and len(finals) == 3
        assert float(m["final_regret_mean"]) == pytest.approx(statistics.fmean(finals), rel=1e-5)
        assert float(m["final_regret_sd"]) == pytest.approx(statistics.stdev(finals), rel=1e-5)
        for col in ("expected_regret_per_step_late", "eat_rate_first_1000", "eat_rate_last_1000"):
            assert float(m[col]) == pytest.approx((float(one[col]) + 2 * float(two[col])) / 3, rel=1e-5), col
        assert float(m["seconds"]) == pytest.approx(float(one["seconds"]) + float(two["seconds"]), abs=0.2)
    c = tmp_path / "s3"
    run_bandit(tiny_bandit_config(out=str(c), agents=("greedy",), seeds=(3,)), contexts=ctx, edible=edible)
    with pytest.raises(UserError, match="leave agent bbb without seed 3"):
        merge_runs([a, b, c], tmp_path / "m", edible=edible)
    written = json.loads((b / "summary.json").read_text())  # a part whose summary lost an agent's row
    written["agents"] = [r for r in written["agents"] if r["agent"] != "greedy"]
    (b / "summary.json").write_text(json.dumps(written))
    with pytest.raises(UserError, match="no summary row of agent greedy"):
        merge_runs([a, b], tmp_path / "m2", edible=edible)
