"""``bbb sweep`` with ``method: ivon``: IVON's settings (ess, hess_init, weight_decay) sweepable, a
trial trained by it; a setting of the space that the trial's method does not read (Bayes by
Backprop's with ivon, IVON's with another method) a one-line error naming the space's key, even at
its default value: never a value listed in sweep.csv that trained nothing."""

from __future__ import annotations

import csv

import pytest

from bbb.errors import UserError
from bbb.sweep.space import expand_space, resolve_params
from testkit import run_main


@pytest.mark.parametrize("key, value", [("kl_weighting", "blundell"), ("prior", "mixture"),
                                        ("neg_log_sigma1", 0), ("rho_init", -5.0)])
def test_a_bbb_setting_at_its_default_in_an_ivon_space_is_refused(key, value):
    """The values the paper space gives (each equal to TrainConfig's default here) trained nothing
    under ivon: before, they were accepted in silence. The space's own key is named."""
    with pytest.raises(UserError, match=rf"^search space: {key} applies to --method bbb, not to --method ivon.*"
                                        r"leave it out of the space"):
        resolve_params({"dataset": "mnist", "method": "ivon", key: value})


def test_an_ivon_setting_in_another_methods_space_is_refused():
    for method in ("bbb", "sgd"):
        with pytest.raises(UserError, match=rf"^search space: ess is a setting of --method ivon.*--method {method}"):
            resolve_params({"method": method, "ess": None})  # null (the training set's size): still given
    space = {"params": {"dataset": "synthetic", "method": {"grid": ["ivon", "bbb"]}, "epochs": 1,
                        "hess_init": 0.1}}
    with pytest.raises(UserError) as e:
        expand_space(space)
    msg = str(e.value)
    assert "hess_init" in msg and "give each a space of its own" in msg and "method=bbb" in msg
    assert "\n" not in msg


def test_the_cli_refuses_it_in_one_line(tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_text('{"params": {"dataset": "synthetic", "method": "ivon", "epochs": 1, "kl_weighting": "blundell"}}')
    code, out, err = run_main(capsys, "sweep", "--space", str(f), "--dry-run")
    assert code != 0 and "kl_weighting" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_ivon_sweep_over_its_settings_trains_each_trial(tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_text('{"params": {"dataset": "synthetic", "synthetic_train": 40, "method": "ivon", "epochs": 1, '
                 '"hidden": [8], "lr": 0.1, "ess": {"grid": [1000, 100000]}, "hess_init": 0.1, '
                 '"weight_decay": {"grid": [0.0, 0.001]}}}')
    code, out, err = run_main(capsys, "sweep", "--space", str(f), "--out", str(tmp_path / "o"), "--quiet")
    assert code == 0, err
    rows = list(csv.DictReader((tmp_path / "o" / "sweep.csv").open()))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"done"} and {r["method"] for r in rows} == {"ivon"}
    assert {(float(r["ess"]), float(r["weight_decay"])) for r in rows} == {
        (e, w) for e in (1000.0, 100000.0) for w in (0.0, 0.001)}
    (trial,) = expand_space({"params": {"dataset": "synthetic", "method": "ivon", "ess": 5000, "hess_init": 0.2,
                                        "weight_decay": 0.01}})
    cfg, _ = resolve_params(trial.params)
    assert (cfg.ess, cfg.hess_init, cfg.weight_decay) == (5000, 0.2, 0.01)
