"""``bbb bandit --merge``: runs that split the agents between them become one run's outputs, and
anything else is a one-line error (a run of other settings, a repeated agent, an unfinished run,
an option that the merge would ignore)."""

from __future__ import annotations

import json

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
    with pytest.raises(UserError, match="repeats agent"):
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


def test_the_command_line_refuses_an_option_that_the_merge_would_ignore(parts, tmp_path, capsys):
    out, _, _ = parts
    rc = cli_main(["bandit", "--out", str(tmp_path / "m"), "--steps", "5", "--merge", str(out["a"]), str(out["b"])])
    err = capsys.readouterr().err
    assert rc == 2 and "drop steps" in err and "Traceback" not in err
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
