"""The configuration classes hold an Enum member in each field of a choice, given the member or
its string value, and write the string value: ``config.json``, ``reproduce.json``, the UCI
``run.json`` and the regression's ``summary.json`` are the bytes of the files committed under
results/, and those files load to the same configuration."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import torch

from bbb.distributions import KLMode
from bbb.elbo import KLWeighting
from bbb.engine.engine import OptimizerKind
from bbb.errors import UserError
from bbb.experiments.mnist import ReproduceConfig
from bbb.experiments.mnist.plan import Experiment
from bbb.experiments.mnist.recipes import Budget
from bbb.experiments.regression import RegressionConfig
from bbb.experiments.uci.settings import UCIBudget, UCIConfig
from bbb.io import atomic_write_json
from bbb.nn.base import Estimator
from bbb.options import LRSchedule, Method, PriorKind
from bbb.runs.config import TrainConfig, resume_conflicts

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"

#: per class, a member of each Enum field other than its default (a valid combination)
TRAIN = {"method": Method.BBB, "prior": PriorKind.GAUSSIAN, "optimizer": OptimizerKind.SGD,
         "lr_schedule": LRSchedule.COSINE, "estimator": Estimator.LOCAL,
         "kl_weighting": KLWeighting.UNIFORM, "kl": KLMode.MC}
REPRODUCE = {"budget": Budget.QUICK, "experiment": Experiment.MNIST}
UCI = {"budget": UCIBudget.SMOKE}
REGRESSION = {"prior": PriorKind.GAUSSIAN}

CASES = [(TrainConfig, TRAIN), (ReproduceConfig, REPRODUCE), (UCIConfig, UCI), (RegressionConfig, REGRESSION)]
IDS = [cls.__name__ for cls, _ in CASES]


def _plain(obj: Any) -> Any:
    """``obj`` with every Enum member replaced by its value (what older versions held)."""
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_plain(v) for v in obj)
    return obj


def _types_are_plain(obj: Any) -> bool:
    """Every string in ``obj`` is a ``str`` itself, not a str-Enum member."""
    if isinstance(obj, str):
        return type(obj) is str
    if isinstance(obj, dict):
        return all(_types_are_plain(k) and _types_are_plain(v) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return all(_types_are_plain(v) for v in obj)
    return True


def _written(tmp_path: Path, obj: Any) -> str:
    """``obj`` as the package writes a JSON file."""
    return atomic_write_json(tmp_path / "written.json", obj).read_text()


def _committed(folder: str, name: str) -> list[Path]:
    """The files called ``name`` under ``results/<folder>`` that git tracks (every such file
    where git is not at hand)."""
    try:
        out = subprocess.run(["git", "ls-files", f"results/{folder}"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
        paths = [ROOT / p for p in out]
    except (OSError, subprocess.CalledProcessError):
        paths = list((RESULTS / folder).rglob(name))
    return sorted(p for p in paths if p.name == name)


# -- (1) the string and the member give the same configuration -------------------------------

@pytest.mark.parametrize(("cls", "members"), CASES, ids=IDS)
def test_a_string_and_its_member_give_the_same_enum_typed_config(cls, members):
    by_member = cls(**members)
    by_string = cls(**{k: v.value for k, v in members.items()})
    assert by_member == by_string
    for k, member in members.items():
        assert getattr(by_string, k) is member
        assert getattr(by_member, k) is member


@pytest.mark.parametrize(("cls", "members"), CASES, ids=IDS)
def test_the_defaults_are_members(cls, members):
    cfg = cls()
    for name, member in members.items():
        assert type(getattr(cfg, name)) is type(member), name


def test_replace_and_from_dict_normalise_strings():
    cfg = TrainConfig().replace(optimizer="sgd", kl="mc")
    assert cfg.optimizer is OptimizerKind.SGD and cfg.kl is KLMode.MC
    cfg = TrainConfig.from_dict({"lr_schedule": "step", "estimator": "flipout"})
    assert cfg.lr_schedule is LRSchedule.STEP and cfg.estimator is Estimator.FLIPOUT
    rc = dataclasses.replace(ReproduceConfig(), budget="paper")
    assert rc.budget is Budget.PAPER and rc.spec.epochs  # BUDGETS is keyed by the string values


def test_dataset_and_device_stay_strings():
    """``dataset`` and ``device`` stay strings (``cuda:1`` is no member of DeviceKind)."""
    cfg = TrainConfig(dataset="fashion-mnist", device="cuda:1", method="sgd")
    assert type(cfg.dataset) is str and type(cfg.device) is str
    assert cfg.method is Method.SGD


# -- (2) JSON: the string values, the committed files, the round trip --------------------------

@pytest.mark.parametrize(("cls", "members"), CASES, ids=IDS)
def test_json_holds_the_string_values_and_round_trips(cls, members):
    cfg = cls(**members)
    d = cfg.to_dict() if cls is TrainConfig else dataclasses.asdict(cfg)
    text = json.dumps(d, sort_keys=True)
    loaded = json.loads(text)
    for k, member in members.items():
        assert loaded[k] == member.value and type(loaded[k]) is str
        assert f'"{k}": "{member.value}"' in text
    if cls is RegressionConfig:  # (it writes its tuple of widths as a list)
        loaded["hidden"] = tuple(loaded["hidden"])
    assert cls(**loaded) == cfg
    assert text == json.dumps(_plain(d), sort_keys=True)


def test_to_dict_holds_plain_strings_for_the_checkpoint(tmp_path):
    """The checkpoint's ``config`` (loaded with ``weights_only=True``) holds no Enum."""
    d = TrainConfig(**TRAIN).to_dict()
    assert _types_are_plain(d)
    torch.save({"config": d}, tmp_path / "c.pt")
    assert torch.load(tmp_path / "c.pt", weights_only=True)["config"] == d


TRAIN_JSON = [p for p in _committed("", "config.json") if "bandit" not in p.parts]


def test_committed_train_configs_are_found():
    assert len(TRAIN_JSON) >= 10


@pytest.mark.parametrize("path", TRAIN_JSON, ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_committed_config_json_loads_and_is_written_byte_for_byte(tmp_path, path):
    """``bbb train`` writes ``{**cfg.to_dict(), <run facts>}``: the same bytes as committed; a
    setting the file lacks (added later) is its default, so a resume sees no conflict."""
    text = path.read_text()
    stored = json.loads(text)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig.from_dict({k: v for k, v in stored.items() if k in names})
    now = cfg.to_dict()
    assert _written(tmp_path, {**stored, **{k: now[k] for k in stored if k in names}}) == text
    assert {k: now[k] for k in stored if k in names} == {k: stored[k] for k in stored if k in names}
    assert resume_conflicts(stored, cfg) == []
    assert resume_conflicts(stored, TrainConfig.from_dict({k: _enum_of(k, v) for k, v in now.items()})) == []


def _enum_of(name: str, value: Any) -> Any:
    """``value`` as the member of its field's Enum, where it has one."""
    member = TRAIN.get(name)
    return type(member)(value) if member is not None else value


def test_a_conflict_on_resume_names_the_string_values():
    stored = TrainConfig().to_dict()
    assert resume_conflicts(stored, TrainConfig(optimizer=OptimizerKind.SGD)) == [("optimizer", "adam", "sgd")]
    assert all(type(v) is str for c in resume_conflicts(stored, TrainConfig(kl="mc")) for v in c)


def test_the_sweeps_trial_id_is_the_one_older_versions_stored():
    from bbb.sweep.space import trial_id_of

    strings = {"dataset": "mnist", "optimizer": "sgd", "lr_schedule": "cosine", "kl": "mc", "estimator": "local",
               "kl_weighting": "uniform", "prior": "gaussian", "method": "bbb"}
    members = {**strings, **TRAIN}
    assert trial_id_of(strings) == trial_id_of(members) == "53fe9cdfb518"  # (bbb 9690b99)
    assert trial_id_of({"dataset": "mnist"}) == "e66eff56c46f"


def test_the_committed_reproduce_json_is_written_byte_for_byte(tmp_path):
    """``reproduce.json`` stores ``experiment``, ``budget``, ``dataset`` and ``device`` of the
    configuration (bbb.experiments.mnist.experiment)."""
    path = RESULTS / "mnist" / "reproduce.json"
    text = path.read_text()
    old = json.loads(text)
    cfg = ReproduceConfig(**{k: old[k] for k in ("experiment", "budget", "dataset", "device", "seeds")})
    assert cfg.budget is Budget(old["budget"]) and cfg.experiment is Experiment(old["experiment"])
    manifest = {**old, "experiment": cfg.experiment, "budget": cfg.budget, "dataset": cfg.dataset,
                "device": cfg.device, "seeds": cfg.seeds}
    assert _written(tmp_path, manifest) == text
    for k in ("experiment", "budget", "dataset"):  # the check of a reproduction's --out
        assert old.get(k) == getattr(cfg, k)
    assert ReproduceConfig(**json.loads(json.dumps(dataclasses.asdict(cfg)))) == cfg


@pytest.mark.parametrize("path", _committed("uci", "run.json"), ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_committed_uci_run_json_loads_and_is_written_byte_for_byte(tmp_path, path):
    """``run.json`` stores ``asdict(cfg)`` (bbb.experiments.uci.runner); a setting the file
    lacks (the first run's, before ``hidden_overrides``) is left out of the comparison; one the
    configuration no longer has (``lr``, ``prior_sigma``: points of the third run's grid) is kept
    as the file has it. A run with ``--methods ...,laplace`` reads where laplace-torch is missing as
    ``--report`` does (only training needs the extra)."""
    text = path.read_text()
    meta = json.loads(text)
    retired = {"lr", "prior_sigma"}
    kw = {k: v for k, v in meta["config"].items() if k not in retired}
    cfg = UCIConfig(**{**kw, "report_only": True})
    cfg.report_only = kw.get("report_only", False)
    assert cfg.budget is UCIBudget(meta["config"]["budget"])
    now = dataclasses.asdict(cfg)
    config = {k: meta["config"][k] if k in retired else now[k] for k in meta["config"]}
    assert _written(tmp_path, {**meta, "config": config}) == text
    again = UCIConfig(**{**json.loads(json.dumps(dataclasses.asdict(cfg))), "report_only": True})
    again.report_only = cfg.report_only
    assert again == cfg


def test_the_committed_regression_summary_is_written_byte_for_byte(tmp_path):
    """``summary.json`` stores the configuration, tuples as lists (bbb.experiments.regression)."""
    path = RESULTS / "regression" / "summary.json"
    text = path.read_text()
    summary = json.loads(text)
    cfg = RegressionConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in summary["config"].items()})
    assert cfg.prior is PriorKind(summary["config"]["prior"])
    stored = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()
              if k not in ("loggers", "overwrite")}  # (--log, --overwrite: not in summary.json)
    assert _written(tmp_path, {**summary, "config": stored}) == text
    again = json.loads(json.dumps(stored))
    assert RegressionConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in again.items()}) == cfg


# -- (3) a bad value: the one-line UserError of bbb.options.choice ---------------------------

BAD = [
    (TrainConfig, "optimizer", "unknown optimizer 'adamw'; choose one of: adam, sgd; did you mean adam?"),
    (TrainConfig, "method", "unknown method 'adamw'; choose one of: bbb, sgd, dropout, ivon"),
    (TrainConfig, "prior", "unknown prior 'adamw'; choose one of: gaussian, mixture"),
    (TrainConfig, "lr_schedule", "unknown lr schedule 'adamw'; choose one of: none, cosine, step"),
    (TrainConfig, "estimator", "unknown estimator 'adamw'; choose one of: reparam, local, flipout"),
    (TrainConfig, "kl_weighting", "unknown KL weighting 'adamw'; choose one of: uniform, blundell, blob"),
    (TrainConfig, "kl", "unknown KL mode 'adamw'; choose one of: auto, closed, mc, split"),
    (ReproduceConfig, "budget", "unknown budget 'adamw'; choose one of: smoke, quick, paper"),
    (ReproduceConfig, "experiment", "unknown experiment 'adamw'; choose one of: mnist, uci"),
    (UCIConfig, "budget", "unknown budget 'adamw'; choose one of: full, smoke"),
    (RegressionConfig, "prior", "unknown prior 'adamw'; choose one of: gaussian, mixture"),
]


@pytest.mark.parametrize(("cls", "name", "message"), BAD, ids=[f"{c.__name__}.{n}" for c, n, _ in BAD])
def test_a_bad_value_is_the_one_line_user_error(cls, name, message):
    with pytest.raises(UserError) as info:
        cls(**{name: "adamw"})
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_a_bad_value_from_json_is_the_same_error():
    with pytest.raises(UserError, match=r"^unknown KL weighting 'linear'; choose one of: uniform, blundell, blob$"):
        TrainConfig.from_dict({"kl_weighting": "linear"})


def test_a_misspelt_choice_of_the_library_says_what_it_most_likely_meant():
    """bbb.options.choice is every "unknown X; choose one of" (the ELBO's likelihood, an MLP's
    activation, a layer's estimator had their own copies): a misspelling names the option it is
    close to; a word like none of them, none."""
    import torch.nn as nn

    import bbb

    for make, words in [(lambda: bbb.ELBO(nn.Linear(2, 2), "categorcal", num_batches=1),
                         ["unknown likelihood 'categorcal'", "did you mean categorical?"]),
                        (lambda: bbb.BayesMLP(2, [3], 2, activation="rleu"), ["activation", "did you mean relu?"]),
                        (lambda: bbb.BayesLinear(2, 2, estimator="flipot"), ["estimator", "did you mean flipout?"]),
                        (lambda: TrainConfig(method="ivno"), ["method", "did you mean ivon?"])]:
        with pytest.raises(UserError) as info:
            make()
        assert all(w in str(info.value) for w in words) and "\n" not in str(info.value), str(info.value)
    with pytest.raises(UserError) as info:
        TrainConfig(method="xyz")
    assert "did you mean" not in str(info.value)
