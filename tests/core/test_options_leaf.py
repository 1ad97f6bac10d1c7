"""``bbb.options`` is a leaf (the standard library only: no torch, no other ``bbb`` module), so
reading the vocabulary loads nothing else, and a configuration written before its Enums moved
still loads to the same ``config.json`` strings."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _run(code: str) -> None:
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.release_independent  # (bbb's own imports)
def test_import_bbb_options_loads_neither_torch_nor_the_library():
    _run("import bbb.options, sys; assert 'torch' not in sys.modules\n"
         "loaded = sorted(m for m in sys.modules if m == 'bbb' or m.startswith('bbb.'))\n"
         "assert loaded == ['bbb', 'bbb.options'], loaded")


def test_import_bbb_data_does_not_load_the_training_engine():
    _run("import bbb.data, sys\n"
         "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['bbb', 'engine'], ['bbb', 'elbo'],\n"
         "                                                             ['bbb', 'nn'], ['bbb', 'runs']))\n"
         "assert not bad, bad")


@pytest.mark.release_independent  # (bbb's own imports)
def test_options_imports_only_the_standard_library_at_module_level():
    tree = ast.parse((SRC / "bbb" / "options.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"line {node.lineno}: a relative import in bbb.options"
            roots = [(node.module or "").split(".")[0]]
        elif isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        else:
            continue
        for root in roots:
            assert root == "__future__" or root in sys.stdlib_module_names, f"line {node.lineno}: imports {root}"


def test_the_choice_error_is_the_one_line_user_error():
    from bbb.errors import UserError
    from bbb.options import Method, choice, device_name

    assert choice("method", Method.SGD, Method) == "sgd"
    with pytest.raises(UserError, match=r"^unknown method 'svi'; choose one of: bbb, sgd, dropout, ivon$"):
        choice("method", "svi", Method)
    assert device_name("cuda:1") == "cuda:1"
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        device_name("tpu")


# config.json of a run, reproduce.json's settings and a bandit's config.json as written before the
# Enums moved (bbb 141f3c8): every field that holds an Enum value is the same string after loading
TRAIN_CONFIG_BEFORE = json.loads("""{"dataset": "fashion-mnist", "method": "bbb", "prior": "gaussian",
 "pi": 0.25, "sigma1": 1.0, "sigma2": 0.0009118819655545162, "prior_sigma": 1.0, "hidden": [400, 400],
 "epochs": 10, "lr": 0.001, "optimizer": "sgd", "momentum": 0.9, "rho_lr_scale": 1.0,
 "lr_schedule": "cosine", "lr_step_size": 0, "lr_gamma": 0.1, "batch_size": 128, "samples": 1,
 "kl_samples": null, "estimator": "local", "kl_weighting": "uniform", "kl": "mc", "rho_init": -5.0,
 "mu_init_scale": null, "dropout_input": 0.2, "dropout_hidden": 0.5, "seed": 0, "device": "cpu",
 "bf16": false, "scale": 126.0, "val_size": 10000, "split_seed": 0, "eval_samples": 10,
 "test_each_epoch": false, "data_dir": null, "checkpoint_every": 1}""")
REPRODUCE_BEFORE = {"budget": "quick", "dataset": "mnist", "device": "cpu", "experiment": "mnist"}
BANDIT_BEFORE = {"optimizer": "sgd", "prior": "mixture", "kl_data": "buffer", "kl_weighting": "uniform",
                 "device": "cpu"}


def test_a_train_config_written_before_loads_unchanged():
    from bbb.runs import TrainConfig

    cfg = TrainConfig.from_dict(TRAIN_CONFIG_BEFORE)
    now = json.loads(json.dumps(cfg.to_dict()))
    assert {k: now[k] for k in TRAIN_CONFIG_BEFORE} == TRAIN_CONFIG_BEFORE
    # the settings added since (training on a user's own file) take their defaults: an image run's
    added = {k: v for k, v in now.items() if k not in TRAIN_CONFIG_BEFORE}
    assert added == {k: v for k, v in TrainConfig().to_dict().items() if k in added}
    assert added.get("data_file") is None and added.get("train_size") is None
    assert type(cfg.make_prior()).__name__ == "GaussianPrior"


def test_application_configs_written_before_load_unchanged():
    from bbb.experiments.bandit import BanditConfig
    from bbb.experiments.mnist import ReproduceConfig

    # what the files hold: the fields may be enum members, their JSON is the plain string
    rc = json.loads(json.dumps(dataclasses.asdict(ReproduceConfig(**REPRODUCE_BEFORE))))
    assert {k: rc[k] for k in REPRODUCE_BEFORE} == REPRODUCE_BEFORE
    bc = json.loads(json.dumps(dataclasses.asdict(BanditConfig(**BANDIT_BEFORE))))
    assert {k: bc[k] for k in BANDIT_BEFORE} == BANDIT_BEFORE
    assert all(type(rc[k]) is str for k in REPRODUCE_BEFORE if isinstance(REPRODUCE_BEFORE[k], str))


def test_a_sweep_trains_on_the_image_datasets_or_a_synthetic_problem():
    from bbb.options import IMAGE_DATASETS
    from bbb.sweep.space import SweepDataset

    assert [d.value for d in SweepDataset] == [*IMAGE_DATASETS, "synthetic"]
