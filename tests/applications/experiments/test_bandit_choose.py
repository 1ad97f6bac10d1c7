"""results/bandit/choose.py: the selection's criteria (SELECTION.md) on made-up finished runs.

The script decides the recipe of the reported bandit run, so its two stages and the stage-2
fallback are checked here on summaries written for the purpose (no training).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHOOSE = Path(__file__).resolve().parents[3] / "results" / "bandit" / "choose.py"


def _agent(name: str, final: float, late: float) -> dict:
    return {"agent": name, "seeds": 3, "steps": 20000, "final_regret_mean": final, "final_regret_sd": 1.0,
            "expected_regret_per_step_late": late}


def _run(root: Path, name: str, agents: list[dict], **cfg) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"agents": agents}))
    (d / "config.json").write_text(json.dumps(cfg))


def _choose(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHOOSE), str(root), *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def learners(tmp_path: Path) -> Path:
    # 5% greedy's late rate closest to the 0.2455 floor wins, from either side: sgd 1e-2 (0.30, off by
    # 0.055) over adam 1e-4 (0.15, off by 0.096, though lower) and adam 1e-3 (0.62)
    _run(tmp_path, "learner-adam-1e-3", [_agent("greedy", 3000, 0.09), _agent("egreedy_0.05", 14000, 0.62)],
         optimizer="adam", lr=1e-3)
    _run(tmp_path, "learner-sgd-1e-2", [_agent("greedy", 4000, 0.08), _agent("egreedy_0.05", 12000, 0.30)],
         optimizer="sgd", lr=1e-2)
    _run(tmp_path, "learner-adam-1e-4", [_agent("greedy", 9000, 0.20), _agent("egreedy_0.05", 15000, 0.15)],
         optimizer="adam", lr=1e-4)
    return tmp_path


def test_stage_one_picks_the_learner_closest_to_the_exploration_floor(learners):
    r = _choose(learners, "--learner")
    assert r.returncode == 0 and r.stdout.strip() == "--optimizer sgd --lr 0.01"


def _bbb(root: Path, name: str, final: float, late: float, prior: str = "gaussian") -> None:
    _run(root, name, [_agent("bbb", final, late)], optimizer="sgd", lr=1e-2, noise_sigma=0.1, prior=prior,
         prior_sigma=1.0, pi=0.5, sigma1=1.0, sigma2=0.0025, sigma_init=0.05, kl_scale=1.0, kl_data="seen",
         kl_weighting="uniform", weight_decay=0.0)


def test_stage_two_picks_the_lowest_regret_among_runs_flatter_than_greedy(learners):
    _bbb(learners, "b1", 5000, 0.50)   # lowest regret, but not flattening below greedy's 0.08
    _bbb(learners, "b2", 7000, 0.07)
    _bbb(learners, "b3", 6000, 0.05, prior="mixture")
    r = _choose(learners)
    assert r.returncode == 0
    chose = [line for line in r.stdout.splitlines() if line.startswith("stage 2 chose")]
    assert chose and chose[0].startswith("stage 2 chose b3 of 3 finished (2 below greedy's late rate 0.080)")
    recipe = r.stdout.strip().splitlines()[-1]
    assert recipe.startswith("the recipe: --optimizer sgd --lr 0.01") and "--prior mixture --pi 0.5" in recipe
    assert "--prior-sigma" not in recipe  # only the chosen prior's own flags


def test_stage_two_falls_back_to_the_lowest_regret_when_no_run_is_flatter_than_greedy(learners):
    _bbb(learners, "b1", 9000, 0.50)
    _bbb(learners, "b2", 8000, 0.30)
    r = _choose(learners)
    assert r.returncode == 0 and "stage 2 chose b2 of 2 finished (none below greedy's late rate" in r.stdout
    assert "the fallback" in r.stdout
    recipe = r.stdout.strip().splitlines()[-1]
    assert "--prior gaussian --prior-sigma 1" in recipe and "--pi" not in recipe


def test_no_learner_run_is_a_one_line_error(tmp_path):
    r = _choose(tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "learner-" in r.stderr


STAGE3 = CHOOSE.parent / "stage3.py"
#: the settings of a recipe: every agent's learner and BBB's posterior, prior, KL and decisions
RECIPE = ("updates_per_step", "batch_size", "buffer", "hidden", "optimizer", "lr", "noise_sigma", "prior",
          "prior_sigma", "pi", "sigma1", "sigma2", "sigma_init", "kl_scale", "kl_data", "kl_weighting",
          "weight_decay", "decision_samples", "likelihood", "estimator", "kl_warmup")


def test_bbb_bandit_defaults_are_the_committed_selections_choice():
    """``bbb bandit``'s defaults are the recipe that the last stage of the selection chose from the
    committed runs (SELECTION.md, stage 3: among b6 and the screens confirmed at 20,000 steps, the
    lowest BBB - greedy; the chosen flags become the CLI's defaults)."""
    from bbb.experiments.bandit import BanditConfig

    root = CHOOSE.parent / "selection"
    r = subprocess.run([sys.executable, str(STAGE3), str(root), "--step", "20000"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    choice = r.stdout.strip().splitlines()[-1]
    assert choice.startswith("the choice: ")
    chosen = json.loads((root / choice[len("the choice: "):] / "config.json").read_text())
    default = BanditConfig()
    for key in RECIPE:
        have = getattr(default, key)
        have = list(have) if isinstance(have, tuple) else str(have) if isinstance(have, str) else have
        assert have == (pytest.approx(chosen[key], rel=1e-9) if isinstance(have, float) else chosen[key]), key
